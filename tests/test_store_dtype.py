"""16-bit features kept in the store itself (issue 19, item 2): ``--store-dtype float16``
gives a store of its own beside the float32 one, from every converting path (DESIGN .npz,
COO .npz, the papers preset, the synthetic presets), with the features rounded once and
nothing else changed; values beyond float16's range are refused in one line and leave no
store; predict finds the same store again."""

from __future__ import annotations

import json

import numpy as np
import pytest

from twopgraph import config
from twopgraph.cli import main
from twopgraph.datasets import STORE_DTYPES, load_dataset
from twopgraph.errors import ConfigError, GraphFormatError
from twopgraph.store import is_store
from conftest import community_data
from test_ingest import coo_file


def test_the_dtypes_agree():
    assert config.STORE_DTYPES == STORE_DTYPES


def _stores(root):
    return sorted(p.name for p in (root / "stores").iterdir() if is_store(p))


@pytest.mark.parametrize("kind", ["design", "coo"])
def test_a_float16_store_beside_the_float32_one(tmp_path, kind):
    path = tmp_path / "g.npz"
    if kind == "design":
        ref = community_data()
        ref.save_npz(path)
        feat = ref.feat
    else:
        feat = coo_file(path)["feat"]
    root = tmp_path / "root"
    full = load_dataset(str(path), data_root=root, progress=False)
    half = load_dataset(str(path), data_root=root, progress=False, store_dtype="float16")
    assert full.feat.dtype == np.float32 and half.feat.dtype == np.float16
    np.testing.assert_array_equal(np.asarray(half.feat), feat.astype(np.float16))
    np.testing.assert_array_equal(np.asarray(full.feat), feat)
    np.testing.assert_array_equal(half.graph.indices, full.graph.indices)
    np.testing.assert_array_equal(half.label, full.label)
    names = _stores(root)
    assert len(names) == 2 and names[1] == names[0] + "-float16"
    assert half.fingerprint() != full.fingerprint()
    # reused, not converted again
    again = load_dataset(str(path), data_root=root, progress=False, store_dtype="float16")
    assert again.fingerprint() == half.fingerprint()


def test_features_beyond_float16_are_refused(tmp_path):
    ref = community_data()
    ref.feat[3, 1] = 1e6
    ref.save_npz(tmp_path / "g.npz")
    root = tmp_path / "root"
    with pytest.raises(GraphFormatError, match="does not fit float16") as err:
        load_dataset(str(tmp_path / "g.npz"), data_root=root, progress=False,
                     store_dtype="float16")
    assert "\n" not in str(err.value)
    assert not (root / "stores").exists() or _stores(root) == []
    # float32 keeps them
    assert load_dataset(str(tmp_path / "g.npz"), data_root=root,
                        progress=False).feat[3, 1] == 1e6


def test_coo_beyond_float16_is_refused(tmp_path):
    coo_file(tmp_path / "g.npz", feat=np.full((40, 5), 7e4, np.float32))
    with pytest.raises(GraphFormatError, match="does not fit float16"):
        load_dataset(str(tmp_path / "g.npz"), data_root=tmp_path / "r", progress=False,
                     store_dtype="float16")


def test_papers_preset_in_float16(tmp_path):
    full = load_dataset("synthetic-papers:1/8192", data_root=tmp_path, progress=False)
    half = load_dataset("synthetic-papers:1/8192", data_root=tmp_path, progress=False,
                        store_dtype="float16")
    assert half.feat.dtype == np.float16 and half.feat.nbytes * 2 == full.feat.nbytes
    np.testing.assert_array_equal(np.asarray(half.feat), np.asarray(full.feat).astype(np.float16))


def test_a_store_path_is_used_as_it_is(tmp_path):
    data = load_dataset("synthetic-tiny", data_root=tmp_path, progress=False)
    store = next(p for p in (tmp_path / "stores").iterdir() if is_store(p))
    assert load_dataset(str(store), progress=False).feat.dtype == data.feat.dtype
    with pytest.raises(ConfigError, match="store of float32 features"):
        load_dataset(str(store), progress=False, store_dtype="float16")
    with pytest.raises(ConfigError, match="unknown store dtype"):
        load_dataset("synthetic-tiny", data_root=tmp_path, store_dtype="int8")


def test_train_and_predict_on_a_float16_store(tmp_path, capsys):
    root, out = tmp_path / "d", tmp_path / "run"
    assert main(["train", "--dataset", "synthetic-tiny", "--data-root", str(root), "--epochs",
                 "1", "--out", str(out), "--no-progress", "--store-dtype", "float16"]) == 0
    assert any(n.endswith("-float16") for n in _stores(root))
    m = json.loads((out / "metrics.json").read_text())
    assert m["config"]["store_dtype"] == "float16"
    capsys.readouterr()
    assert main(["predict", "--checkpoint", str(out / "checkpoint.pt"), "--out",
                 str(tmp_path / "p.npy")]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["same_data"] is True


@pytest.mark.parametrize("argv, msg", [
    (["train", "--dataset", "synthetic-tiny", "--store-dtype", "int8"], "unknown store dtype"),
    (["partition", "--dataset", "synthetic-tiny", "--num-parts", "2", "--out", "P",
      "--store-dtype", "float16"], "not available for partitions"),
    (["train", "--partitions", "P", "--store-dtype", "float16"], "not available with"),
])
def test_bad_store_dtype_uses(tmp_path, capsys, argv, msg, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert msg in capsys.readouterr().err
