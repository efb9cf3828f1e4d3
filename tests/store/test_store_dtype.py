"""16-bit features kept in the store itself (issue 19, item 2): ``--store-dtype float16``
gives a store of its own beside the float32 one, from every converting path (DESIGN .npz,
COO .npz, the papers preset, the synthetic presets), with the features rounded once and
nothing else changed; values beyond float16's range are refused in one line and leave no
store; predict finds the same store again."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import community_data
from test_ingest import coo_file

from twopgraph import config
from twopgraph.cli import main
from twopgraph.datasets import (
    STORE_DTYPE_CHOICES,
    STORE_DTYPES,
    float32_feature_bytes,
    load_dataset,
    resolve_store_dtype,
)
from twopgraph.errors import ConfigError, GraphFormatError
from twopgraph.runtime import memory as metrics
from twopgraph.store.reader import is_store


def test_the_dtypes_agree():
    assert config.STORE_DTYPES == STORE_DTYPES
    assert config.STORE_DTYPE_CHOICES == STORE_DTYPE_CHOICES
    assert config.TrainConfig().data.store_dtype == "auto"


def _memory(monkeypatch, nbytes):
    """The memory available reads ``nbytes`` (what --store-dtype auto decides on); the
    memory fillable (the memory governor's budget, active page cache counted) stays ample,
    so that a run still trains."""
    monkeypatch.setattr(metrics, "available_host_bytes",
                        lambda *a, active_file=False, **k: (1 << 40) if active_file else nbytes)


def test_auto_halves_a_table_larger_than_half_the_memory(tmp_path, monkeypatch):
    """``--store-dtype auto``: float32 while the float32 table takes at most half the memory
    the process can fill, float16 (a store of its own) beyond; the size is read from the
    file's header, not by loading it."""
    path = tmp_path / "g.npz"
    ref = community_data()
    ref.save_npz(path)
    table = ref.feat.shape[0] * ref.feat.shape[1] * 4
    root = tmp_path / "root"
    assert float32_feature_bytes(str(path), root) == table
    _memory(monkeypatch, 2 * table)
    assert resolve_store_dtype("auto", str(path), root) == "float32"
    assert load_dataset(str(path), root, store_dtype="auto").feat.dtype == np.float32
    _memory(monkeypatch, 2 * table - 4)
    assert resolve_store_dtype("auto", str(path), root) == "float16"
    data = load_dataset(str(path), root, store_dtype="auto")
    assert data.feat.dtype == np.float16
    np.testing.assert_array_equal(data.feat, ref.feat.astype(np.float16))
    assert any(n.endswith("-float16") for n in _stores(root))
    _memory(monkeypatch, None)  # unknown: float32
    assert resolve_store_dtype("auto", str(path), root) == "float32"
    assert resolve_store_dtype("float16", str(path), root) == "float16"


def test_auto_sizes_from_the_sources():
    from twopgraph.datasets.papers import parse_preset
    spec = parse_preset("synthetic-papers:0.001")
    assert float32_feature_bytes("synthetic-papers:0.001") == 4 * spec.num_nodes * 128
    assert float32_feature_bytes("synthetic-tiny") is None  # generated, small
    assert float32_feature_bytes("nothing-like-it") is None


def test_auto_keeps_float32_for_features_beyond_float16(tmp_path, monkeypatch, caplog):
    path = tmp_path / "g.npz"
    ref = community_data()
    ref.feat[3, 1] = 1e6
    ref.save_npz(path)
    root = tmp_path / "root"
    _memory(monkeypatch, 1)
    with caplog.at_level("WARNING", logger="twopgraph"):
        data = load_dataset(str(path), root, store_dtype="auto")
    assert data.feat.dtype == np.float32 and data.feat[3, 1] == 1e6
    assert "keeping float32" in caplog.text and "does not fit float16" in caplog.text
    assert not any(n.endswith("-float16") for n in _stores(root))


def test_train_with_auto_records_what_it_chose(tmp_path, capsys, monkeypatch):
    """A run whose auto took float16 records ``store_dtype`` float16 in its checkpoint, so
    predict finds the same store (same_data) on a machine with more memory."""
    path = tmp_path / "g.npz"
    community_data().save_npz(path)
    root, out = tmp_path / "d", tmp_path / "run"
    _memory(monkeypatch, 1)
    assert main(["train", "--dataset", str(path), "--data-root", str(root), "--epochs", "1",
                 "--out", str(out), "--no-progress", "--schedule", "random"]) == 0
    assert any(n.endswith("-float16") for n in _stores(root))
    m = json.loads((out / "metrics.json").read_text())
    assert m["config"]["store_dtype"] == "auto"
    capsys.readouterr()
    _memory(monkeypatch, 1 << 40)
    assert main(["predict", "--checkpoint", str(out / "checkpoint.pt"), "--out",
                 str(tmp_path / "p.npy")]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["same_data"] is True


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
