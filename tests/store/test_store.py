"""The dataset store (twopgraph.store.reader): streaming conversion, memory maps, one-line
refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from conftest import community_data

from twopgraph.datasets import load_dataset, store_folder
from twopgraph.errors import GraphFormatError
from twopgraph.graph.data import GraphData
from twopgraph.locality.cluster import Clustering
from twopgraph.locality.renumber import renumber
from twopgraph.store import npz as npzstore
from twopgraph.store import reader as store
from twopgraph.store import writer as storewriter

KEYS = ("indptr", "indices", "feat", "label", "train_idx", "val_idx", "test_idx")


def _arrays(d: GraphData) -> dict:
    out = {"indptr": d.graph.indptr, "indices": d.graph.indices, "feat": d.feat,
           "label": d.label, "train_idx": d.train_idx, "val_idx": d.val_idx,
           "test_idx": d.test_idx}
    if d.node_ids is not None:
        out["node_ids"] = d.node_ids
    return out


def _same(a: GraphData, b: GraphData) -> None:
    for k, v in _arrays(a).items():
        w = _arrays(b)[k]
        assert v.dtype == w.dtype and v.shape == w.shape and np.array_equal(v, w), k
    assert a.num_classes == b.num_classes
    assert a.fingerprint() == b.fingerprint()


@pytest.fixture
def data():
    return community_data(n=500, f=12, seed=3)


def test_npz_converts_into_memory_maps_equal_to_the_file(tmp_path, data, monkeypatch):
    for mod in (store, storewriter, npzstore):  # every chunked read and write
        monkeypatch.setattr(mod, "CHUNK_BYTES", 4096)  # many chunks per array
    npz = data.save_npz(tmp_path / "d.npz")
    folder = npzstore.convert_npz(npz, tmp_path / "s")
    opened = store.open_store(folder)
    assert isinstance(opened.feat, np.memmap) and not opened.feat.flags.writeable
    assert opened.store == folder.resolve()
    _same(GraphData.load_npz(npz), opened)
    fp = opened._fingerprint[2]
    opened._fingerprint = None  # recomputed by hashing: equal to what store.json vouches for
    assert opened.fingerprint() == fp


def test_conversion_of_compressed_and_foreign_dtypes(tmp_path, data):
    """savez_compressed members, int32 ids, a label column, float64 features, big-endian."""
    arr = _arrays(data)
    arr.update(indptr=arr["indptr"].astype(">i8"), indices=arr["indices"].astype(np.int32),
               label=arr["label"].reshape(-1, 1).astype(np.int32),
               feat=arr["feat"].astype(np.float64), train_idx=arr["train_idx"].astype(np.int32))
    np.savez_compressed(tmp_path / "c.npz", **arr)
    got = store.open_store(npzstore.convert_npz(tmp_path / "c.npz", tmp_path / "s"))
    assert got.feat.dtype == np.float32 and got.label.dtype == np.int64
    assert got.graph.indptr.dtype == np.int64 and got.graph.indices.dtype == np.int32
    np.testing.assert_array_equal(got.feat, data.feat.astype(np.float64).astype(np.float32))
    np.testing.assert_array_equal(got.label, data.label)


def test_fortran_ordered_features_convert(tmp_path, data):
    arr = _arrays(data)
    arr["feat"] = np.asfortranarray(arr["feat"])
    np.savez(tmp_path / "f.npz", **arr)
    got = store.open_store(npzstore.convert_npz(tmp_path / "f.npz", tmp_path / "s"))
    np.testing.assert_array_equal(got.feat, data.feat)


def test_conversion_streams_the_feature_table(tmp_path, monkeypatch):
    """Peak Python/NumPy allocation while converting stays a few chunks, far below the table."""
    n, f = 4000, 2048  # 32 MiB of features (validation checks 4M values at a time)
    d = community_data(n=n, f=4, seed=1)
    rng = np.random.default_rng(0)
    arr = _arrays(d)
    arr["feat"] = rng.standard_normal((n, f), dtype=np.float32)
    np.savez(tmp_path / "w.npz", **arr)
    for mod in (store, storewriter, npzstore):  # every chunked read and write
        monkeypatch.setattr(mod, "CHUNK_BYTES", 256 << 10)
    tracemalloc.start()
    try:
        npzstore.convert_npz(tmp_path / "w.npz", tmp_path / "s")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < arr["feat"].nbytes / 4, peak


def test_export_npz_round_trip(tmp_path, data):
    folder = storewriter.write_store(data, tmp_path / "s")
    opened = store.open_store(folder)
    npzstore.export_npz(opened, tmp_path / "e.npz")
    _same(GraphData.load_npz(tmp_path / "e.npz"), data)


def test_permuted_store_equals_permute(tmp_path, data):
    opened = store.open_store(storewriter.write_store(data, tmp_path / "s"))
    perm = np.random.default_rng(0).permutation(data.num_nodes)
    got = storewriter.permuted_store(opened, perm, tmp_path / "p")
    assert isinstance(got.feat, np.memmap)
    _same(got, data.permute(perm))


def test_renumber_reuses_its_store(tmp_path, data):
    opened = store.open_store(storewriter.write_store(data, tmp_path / "s"))
    parts = np.arange(data.num_nodes) % 7
    c = Clustering(parts, 7, edge_cut=0)
    first, _, perm = renumber(opened, c, cache_dir=tmp_path / "cache")
    assert first.store is not None and first.store.parent == tmp_path / "cache"
    mtime = (first.store / "feat.npy").stat().st_mtime_ns
    again, _, perm2 = renumber(opened, c, cache_dir=tmp_path / "cache")
    assert again.store == first.store and (again.store / "feat.npy").stat().st_mtime_ns == mtime
    _same(again, data.permute(perm))


@pytest.mark.parametrize("damage", ["truncate", "foreign_json", "shape", "missing",
                                    "version", "not_a_store"])
def test_damaged_store_is_one_line(tmp_path, data, damage):
    folder = storewriter.write_store(data, tmp_path / "s")
    meta_path = folder / "store.json"
    meta = json.loads(meta_path.read_text())
    if damage == "truncate":
        with open(folder / "feat.npy", "r+b") as f:
            f.truncate(os.path.getsize(folder / "feat.npy") - 100)
    elif damage == "foreign_json":
        meta_path.write_text(json.dumps({"format": "something-else"}))
    elif damage == "shape":
        meta["arrays"]["label"]["shape"] = [data.num_nodes + 1]
        meta_path.write_text(json.dumps(meta))
    elif damage == "missing":
        (folder / "indices.npy").unlink()
    elif damage == "version":
        meta["version"] = 99
        meta_path.write_text(json.dumps(meta))
    else:
        meta_path.unlink()
    with pytest.raises(GraphFormatError) as e:
        store.open_store(folder)
    assert "\n" not in str(e.value) and str(folder) in str(e.value)


def test_killed_conversion_leaves_no_store(tmp_path, data):
    """A writer killed half-way leaves only its temp folder, which is never read as a store
    and is removed by the next writer."""
    npz = data.save_npz(tmp_path / "d.npz")
    code = (f"import os, numpy as np\nfrom twopgraph import npzstore, storewriter\n"
            f"orig = storewriter.StoreWriter.put\n"
            f"def put(self, name, *a, **k):\n"
            f"    orig(self, name, *a, **k)\n"
            f"    if name == 'feat': os._exit(9)\n"
            f"storewriter.StoreWriter.put = put\n"
            f"npzstore.convert_npz({str(npz)!r}, {str(tmp_path / 's')!r})\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2])
    assert p.returncode == 9
    assert not (tmp_path / "s").exists()
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".s.tmp-")]
    assert len(leftovers) == 1
    npzstore.convert_npz(npz, tmp_path / "s")
    assert store.is_store(tmp_path / "s")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".s.tmp-")]


def test_invalid_npz_is_refused_and_leaves_nothing(tmp_path, data):
    arr = _arrays(data)
    arr["feat"] = arr["feat"].copy()
    arr["feat"][7, 1] = np.nan
    np.savez(tmp_path / "bad.npz", **arr)
    with pytest.raises(GraphFormatError, match="NaN"):
        npzstore.convert_npz(tmp_path / "bad.npz", tmp_path / "s")
    assert list(tmp_path.iterdir()) == [tmp_path / "bad.npz"]


def test_load_dataset_reconverts_a_changed_source(tmp_path, data):
    npz = data.save_npz(tmp_path / "d.npz")
    first = load_dataset(str(npz), data_root=tmp_path / "root")
    assert first.store == store_folder(npz, tmp_path / "root").resolve()
    other = community_data(n=500, f=12, seed=4)
    other.save_npz(npz)
    os.utime(npz, ns=(1, 1))  # a different mtime for sure
    again = load_dataset(str(npz), data_root=tmp_path / "root")
    _same(again, other)
    # and a store folder is a dataset name of its own
    direct = load_dataset(str(again.store), data_root=tmp_path / "elsewhere")
    _same(direct, other)


def test_not_undirected_source_is_refused_or_symmetrised(tmp_path, data):
    arr = _arrays(data)
    # drop one direction of the first edge: no longer undirected
    ip, ind = arr["indptr"].copy(), arr["indices"].copy()
    ind = np.delete(ind, 0)
    ip[1:] -= 1
    arr.update(indptr=ip, indices=ind)
    np.savez(tmp_path / "dir.npz", **arr)
    with pytest.raises(GraphFormatError, match="undirected") as e:
        load_dataset(str(tmp_path / "dir.npz"), data_root=tmp_path / "root")
    assert "\n" not in str(e.value)
    fixed = load_dataset(str(tmp_path / "dir.npz"), data_root=tmp_path / "root",
                         symmetrize=True)
    assert fixed.store is None and fixed.graph.undirected_problem() is None


def test_cli_info_reports_the_store_and_refuses_a_foreign_folder(tmp_path, data, capsys):
    from conftest import run_cli
    npz = data.save_npz(tmp_path / "d.npz")
    rc, out, err = run_cli(["info", "--dataset", npz, "--data-root", tmp_path / "root",
                            "--json"], capsys)
    assert rc == 0, err
    info = json.loads(out.strip().splitlines()[-1])
    folder = Path(info["store"])
    assert store.is_store(folder) and folder.parent == (tmp_path / "root" / "stores").resolve()
    on_disk = sum(p.stat().st_size for p in folder.glob("*.npy"))
    assert 0 < info["store_disk_mib"] * 2**20 <= on_disk + 0.01 * 2**20  # (+ .npy headers)
    assert info["resident_shared_mib"] * 2**20 >= data.feat.nbytes
    # the store folder itself is a dataset
    rc, out, err = run_cli(["info", "--dataset", folder, "--json"], capsys)
    assert rc == 0 and json.loads(out.strip().splitlines()[-1])["store"] == str(folder)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "store.json").write_text("[1, 2]")
    rc, out, err = run_cli(["train", "--dataset", foreign, "--out", tmp_path / "o"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and str(foreign) in err
    assert not (tmp_path / "o").exists()


def test_a_copied_data_root_keeps_its_stores(tmp_path, data):
    """Stores of files inside the data root are keyed by the path relative to it: a root
    copied (or mounted) elsewhere finds them without converting again."""
    import shutil
    root = tmp_path / "root"
    npz = data.save_npz(root / "d.npz")
    first = load_dataset("d", data_root=root)
    shutil.copytree(root, tmp_path / "copy")  # copy2: same sizes and mtimes
    again = load_dataset("d", data_root=tmp_path / "copy")
    assert again.store == (tmp_path / "copy" / first.store.relative_to(root.resolve())).resolve()
    assert (again.store / "feat.npy").stat().st_mtime_ns == \
        (first.store / "feat.npy").stat().st_mtime_ns  # the copied store, not a new one
    _same(again, first)
