"""Dataset registry: synthetic cache, .npz files, OGB through the real ``ogb`` package."""

from __future__ import annotations

import gzip
import io
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
import pytest

from twopgraph import datasets
from twopgraph.datasets import (
    dataset_path,
    download,
    list_datasets,
    load_dataset,
    resolve_data_root,
)
from twopgraph.datasets.ogb import _ogb_labels
from twopgraph.errors import ConfigError, GraphFormatError, TwopgraphError
from twopgraph.graph.data import CSRGraph, GraphData

REPO = Path(__file__).resolve().parents[2]


# -- builders ----------------------------------------------------------------------------------
def small_graphdata(n: int = 12, seed: int = 0) -> GraphData:
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, 30), rng.integers(0, n, 30)
    perm = rng.permutation(n)
    return GraphData(graph=CSRGraph.from_edges(src, dst, num_nodes=n),
                     feat=rng.standard_normal((n, 4)).astype(np.float32),
                     label=rng.integers(0, 3, n).astype(np.int64),
                     train_idx=np.sort(perm[:6]), val_idx=np.sort(perm[6:9]),
                     test_idx=np.sort(perm[9:]))


def _write_csv_gz(path: Path, rows, fmt: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    np.savetxt(buf, np.asarray(rows).reshape(len(rows), -1), fmt=fmt, delimiter=",")
    with gzip.open(path, "wt") as f:
        f.write(buf.getvalue())


def write_ogb_arxiv(root: Path, n: int = 30, f: int = 8, c: int = 3, seed: int = 0) -> dict:
    """A tiny ogbn-arxiv in ogb's raw on-disk layout; returns what was written."""
    rng = np.random.default_rng(seed)
    folder = root / "ogbn_arxiv"
    src, dst = rng.integers(0, n, 50), rng.integers(0, n, 50)
    # a self loop, a duplicate and a reversed pair: the conversion must clean them up
    src = np.concatenate([src, [3, 1, 1, 2]])
    dst = np.concatenate([dst, [3, 2, 2, 1]])
    feat = rng.standard_normal((n, f)).astype(np.float32)
    label = rng.integers(0, c, n)
    order = rng.permutation(n)  # splits written unsorted, as OGB's may be
    split = {"train": order[:18], "valid": order[18:24], "test": order[24:]}
    raw = folder / "raw"
    _write_csv_gz(raw / "edge.csv.gz", np.stack([src, dst], 1), "%d")
    _write_csv_gz(raw / "num-node-list.csv.gz", [n], "%d")
    _write_csv_gz(raw / "num-edge-list.csv.gz", [src.shape[0]], "%d")
    _write_csv_gz(raw / "node-feat.csv.gz", feat, "%.9g")
    _write_csv_gz(raw / "node-label.csv.gz", label, "%d")
    _write_csv_gz(raw / "node_year.csv.gz", rng.integers(2000, 2020, n), "%d")
    for key, idx in split.items():
        _write_csv_gz(folder / "split" / "time" / f"{key}.csv.gz", idx, "%d")
    (folder / "RELEASE_v1.txt").write_text("")
    return dict(n=n, src=src, dst=dst, feat=feat, label=label, split=split, folder=folder)


def expected_edges(src, dst) -> set:
    pairs = {(int(u), int(v)) for u, v in zip(src, dst) if u != v}
    return pairs | {(v, u) for u, v in pairs}


def csr_edges(g: CSRGraph) -> set:
    rows = np.repeat(np.arange(g.num_nodes), g.degrees())
    return set(zip(rows.tolist(), g.indices.tolist()))


@pytest.fixture
def offline(monkeypatch):
    """No network, whatever the machine: every urlopen fails at once."""
    def fail(*args, **kwargs):
        raise urllib.error.URLError("network disabled in tests")
    monkeypatch.setattr(urllib.request, "urlopen", fail)


def assert_one_line(err) -> str:
    msg = str(err.value)
    assert "\n" not in msg
    return msg


# -- OGB ---------------------------------------------------------------------------------------
def check_arxiv(data: GraphData, w: dict) -> None:
    assert data.name == "ogbn-arxiv"
    data.validate(check_symmetric=True)
    assert data.num_nodes == w["n"]
    assert csr_edges(data.graph) == expected_edges(w["src"], w["dst"])
    assert data.feat.dtype == np.float32
    np.testing.assert_allclose(data.feat, w["feat"], rtol=1e-6)
    assert data.label.dtype == np.int64
    np.testing.assert_array_equal(data.label, w["label"])
    assert data.num_classes == 40  # ogbn-arxiv's class count, even if few labels occur
    np.testing.assert_array_equal(data.train_idx, np.sort(w["split"]["train"]))
    np.testing.assert_array_equal(data.val_idx, np.sort(w["split"]["valid"]))
    np.testing.assert_array_equal(data.test_idx, np.sort(w["split"]["test"]))


def ogb_store(root: Path, name: str = "ogbn-arxiv") -> Path:
    """The one store folder of ``name`` under ``root`` (asserted to be the only one)."""
    stores = sorted((root / "stores").glob(f"{name}-*"))
    assert len(stores) == 1, stores
    return stores[0]


def test_ogb_raw_is_ingested_into_a_store(tmp_path, offline):
    w = write_ogb_arxiv(tmp_path)
    data = load_dataset("ogbn-arxiv", data_root=tmp_path, progress=False)
    check_arxiv(data, w)
    assert dataset_path("ogbn-arxiv", tmp_path) == w["folder"] / "raw" / "edge.csv.gz"
    assert data.store == ogb_store(tmp_path).resolve()
    assert not (w["folder"] / "twopgraph.npz").exists()  # one copy: the store
    assert not (w["folder"] / "processed").exists()  # ogb's in-memory processing never ran
    meta = json.loads((data.store / "store.json").read_text())
    assert meta["ingest"]["changes"]["self_loops"] == 1 and meta["ingest"]["seconds"]
    # the second load reads the store; once the raw files are gone, the store is the dataset
    again = load_dataset("ogbn-arxiv", data_root=tmp_path, progress=False)
    assert again.fingerprint() == data.fingerprint()
    for sub in ("raw", "split"):
        for p in sorted((w["folder"] / sub).rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
    check_arxiv(load_dataset("ogbn-arxiv", data_root=tmp_path, progress=False), w)


def test_ogb_raw_change_is_ingested_again(tmp_path, offline):
    w = write_ogb_arxiv(tmp_path)
    first = load_dataset("ogbn-arxiv", data_root=tmp_path, progress=False)
    w2 = write_ogb_arxiv(tmp_path, seed=1)  # new content, same files
    again = load_dataset("ogbn-arxiv", data_root=tmp_path, progress=False)
    check_arxiv(again, w2)
    assert again.fingerprint() != first.fingerprint()
    del w


def test_ogb_processed_file_without_raw_files(tmp_path, offline):
    # what an earlier ogb run leaves: processed/data_processed (read with weights_only=False,
    # which ogb's own second load under torch >= 2.6 does not do)
    from ogb.nodeproppred import NodePropPredDataset
    w = write_ogb_arxiv(tmp_path)
    (w["folder"] / "processed").mkdir()  # ogb saves into it without creating it
    with datasets.ogb_session(progress=False):
        NodePropPredDataset("ogbn-arxiv", root=str(tmp_path))
    for p in (w["folder"] / "raw").iterdir():
        p.unlink()  # proves the processed file, not the raw files, is read
    check_arxiv(load_dataset("ogbn-arxiv", data_root=tmp_path, progress=False), w)
    assert not (w["folder"] / "twopgraph.npz").is_file()


def test_ogb_cache_of_an_older_twopgraph_still_loads(tmp_path, offline):
    w = write_ogb_arxiv(tmp_path)
    data = load_dataset("ogbn-arxiv", data_root=tmp_path, progress=False)
    GraphData(data.graph, data.feat, data.label, data.train_idx, data.val_idx, data.test_idx,
              num_classes=40).save_npz(w["folder"] / "twopgraph.npz")
    for p in (w["folder"] / "raw").iterdir():
        p.unlink()
    check_arxiv(load_dataset("ogbn-arxiv", data_root=tmp_path, progress=False), w)


def test_ogb_folder_without_release_file_fails_fast(tmp_path):
    w = write_ogb_arxiv(tmp_path)
    (w["folder"] / "RELEASE_v1.txt").unlink()
    with pytest.raises(TwopgraphError) as err:
        load_dataset("ogbn-arxiv", data_root=tmp_path, progress=False)
    assert "RELEASE_v1.txt" in assert_one_line(err)


def test_ogb_release_error_never_reads_stdin(tmp_path):
    # stdin is an open pipe nobody writes to: a prompt would hang until the timeout
    w = write_ogb_arxiv(tmp_path)
    (w["folder"] / "RELEASE_v1.txt").unlink()
    code = textwrap.dedent(f"""
        from twopgraph.datasets import load_dataset
        from twopgraph.errors import TwopgraphError
        try:
            load_dataset("ogbn-arxiv", data_root={str(tmp_path)!r}, progress=False)
        except TwopgraphError as e:
            print("ERR", e)
    """)
    out = subprocess.run([sys.executable, "-c", code], stdin=subprocess.PIPE, cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ERR ") and "RELEASE_v1.txt" in out.stdout


def test_ogb_missing_download_offline_is_clear(tmp_path, offline):
    t0 = time.monotonic()
    with pytest.raises(TwopgraphError) as err:
        load_dataset("ogbn-arxiv", data_root=tmp_path, progress=False)
    msg = assert_one_line(err)
    assert str(tmp_path / "ogbn_arxiv" / "raw") in msg and "URLError" in msg
    assert time.monotonic() - t0 < 60
    assert not (tmp_path / "ogbn_arxiv" / "twopgraph.npz").exists()
    assert not (tmp_path / "stores").exists() or not list((tmp_path / "stores").iterdir())


def test_ogb_download_prompt_never_blocks(tmp_path, monkeypatch):
    class BigResponse:  # what decide_download sees for a > 1 GB file: it then calls input()
        def info(self):
            return {"Content-Length": str(3 * 2**30)}
    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: BigResponse())
    stdin = sys.stdin
    with pytest.raises(TwopgraphError) as err:
        load_dataset("ogbn-products", data_root=tmp_path, progress=False)
    assert "confirmation" in assert_one_line(err)
    assert sys.stdin is stdin


def test_ogb_download_flow(tmp_path, monkeypatch):
    # a served zip laid out like OGB's arxiv.zip (folder "arxiv/", no processed/ in it)
    src_root = tmp_path / "src"
    w = write_ogb_arxiv(src_root)
    archive = tmp_path / "arxiv.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for p in w["folder"].rglob("*"):
            z.write(p, "arxiv/" + p.relative_to(w["folder"]).as_posix())
    payload = archive.read_bytes()

    class Response(io.BytesIO):
        def info(self):
            return {"Content-Length": str(len(payload))}
    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: Response(payload))
    root = tmp_path / "data"
    data = load_dataset("ogbn-arxiv", data_root=root, progress=False)
    check_arxiv(data, w)
    assert data.store == ogb_store(root).resolve()
    assert (root / "ogbn_arxiv" / "raw" / "edge.csv.gz").is_file()


@pytest.mark.parametrize("exc", [ValueError, OSError, KeyError, RuntimeError, EOFError])
def test_ogb_loader_keeps_the_traceback_of_twopgraph_bugs(tmp_path, monkeypatch, exc):
    """Exceptions of the kinds that ogb failures take, raised by twopgraph's own code around
    the ogb call, are bugs: they propagate as they are, not as a one-line ogb error."""
    write_ogb_arxiv(tmp_path)
    for p in (tmp_path / "ogbn_arxiv" / "raw").iterdir():
        p.unlink()  # so that the download runs

    def buggy_construct(name, root, folder, meta):
        raise exc("a bug in twopgraph")
    monkeypatch.setattr(download, "_fetch_ogb", buggy_construct)
    stdin, timeout = sys.stdin, socket.getdefaulttimeout()
    with pytest.raises(exc) as err:
        load_dataset("ogbn-arxiv", data_root=tmp_path, progress=False)
    assert type(err.value) is exc and not isinstance(err.value, TwopgraphError)
    assert any(entry.name == "buggy_construct" for entry in err.traceback)
    assert sys.stdin is stdin and socket.getdefaulttimeout() == timeout  # session restored


@pytest.mark.parametrize("damage", ["missing_labels", "missing_sizes", "truncated_edges",
                                    "unparsable_features"])
def test_ogb_damaged_raw_files_are_one_line(tmp_path, offline, damage):
    w = write_ogb_arxiv(tmp_path)
    raw = w["folder"] / "raw"
    if damage == "missing_labels":
        (raw / "node-label.csv.gz").unlink()
    elif damage == "missing_sizes":
        (raw / "num-node-list.csv.gz").unlink()
    elif damage == "truncated_edges":
        blob = (raw / "edge.csv.gz").read_bytes()
        (raw / "edge.csv.gz").write_bytes(blob[:len(blob) // 2])
    else:
        with gzip.open(raw / "node-feat.csv.gz", "wt") as f:
            f.write("0.5,abc\n1.5,2.5\n")
    with pytest.raises(TwopgraphError) as err:
        load_dataset("ogbn-arxiv", data_root=tmp_path, progress=False)
    msg = assert_one_line(err)
    assert f"could not read the raw files in {raw}" in msg and f"delete {w['folder']}" in msg
    assert err.value.__cause__ is not None  # the reader's failure stays attached for debugging
    assert not (w["folder"] / "twopgraph.npz").exists()
    assert not list((tmp_path / "stores").glob("ogbn-arxiv-*"))  # no store, not even half


def test_ogb_session_restores_what_it_changes():
    stdin, stdout, timeout = sys.stdin, sys.stdout, socket.getdefaulttimeout()
    with pytest.raises(KeyError):
        with datasets.ogb_session(progress=False):
            assert sys.stdin.read() == "" and sys.stdin is not stdin
            assert socket.getdefaulttimeout() == datasets.OGB_NET_TIMEOUT_S
            assert sys.stdout is not stdout
            raise KeyError("inside")
    assert (sys.stdin, sys.stdout, socket.getdefaulttimeout()) == (stdin, stdout, timeout)


def test_ogb_labels_nan_outside_splits():
    labels = np.array([[1.0], [np.nan], [2.0]])
    splits = {"train": np.array([0]), "valid": np.array([2]), "test": np.array([], np.int64)}
    y = _ogb_labels("x", labels, 3, splits)
    assert y.dtype == np.int64 and y.tolist() == [1, -1, 2]  # unlabelled, never class 0
    splits["train"] = np.array([0, 1])
    with pytest.raises(GraphFormatError, match="train split have no label"):
        _ogb_labels("x", labels, 3, splits)


# -- .npz files --------------------------------------------------------------------------------
def assert_same(a: GraphData, b: GraphData) -> None:
    for k in ("feat", "label", "train_idx", "val_idx", "test_idx"):
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k))
    np.testing.assert_array_equal(a.graph.indptr, b.graph.indptr)
    np.testing.assert_array_equal(a.graph.indices, b.graph.indices)


def test_npz_round_trip_by_path_and_by_name(tmp_path):
    data = small_graphdata()
    path = data.save_npz(tmp_path / "mygraph.npz")
    assert_same(load_dataset(str(path), data_root=tmp_path / "elsewhere"), data)
    by_name = load_dataset("mygraph", data_root=tmp_path)
    assert by_name.name == "mygraph"
    assert_same(by_name, data)
    assert_same(load_dataset("mygraph.npz", data_root=tmp_path), data)
    assert dataset_path("mygraph", tmp_path) == tmp_path / "mygraph.npz"
    assert dataset_path("nothing", tmp_path) is None


def _save_raw(path: Path, **arrays) -> str:
    np.savez(path, **arrays)
    return str(path)


def _arrays(data: GraphData) -> dict:
    return dict(indptr=data.graph.indptr, indices=data.graph.indices, feat=data.feat,
                label=data.label, train_idx=data.train_idx, val_idx=data.val_idx,
                test_idx=data.test_idx)


@pytest.mark.parametrize("case", ["missing_key", "index_range", "label_length", "feat_rows",
                                  "garbage", "empty"])
def test_bad_npz_raises_graph_format_error(tmp_path, case):
    arr = _arrays(small_graphdata())
    path = tmp_path / "bad.npz"
    if case == "missing_key":
        del arr["feat"]
    elif case == "index_range":
        arr["indices"] = arr["indices"].copy()
        arr["indices"][0] = 99
    elif case == "label_length":
        arr["label"] = arr["label"][:-1]
    elif case == "feat_rows":
        arr["feat"] = arr["feat"][:-2]
    if case == "garbage":
        path.write_bytes(b"\x00this is not a zip file\xff" * 10)
    elif case == "empty":
        path.write_bytes(b"")
    else:
        _save_raw(path, **arr)
    with pytest.raises(GraphFormatError) as err:
        load_dataset(str(path))
    assert str(path) in assert_one_line(err)


def test_missing_npz_path(tmp_path):
    with pytest.raises(TwopgraphError, match="not found"):
        load_dataset(str(tmp_path / "nope.npz"), data_root=tmp_path)


def test_unknown_name_lists_known_names(tmp_path):
    small_graphdata().save_npz(tmp_path / "cora.npz")
    with pytest.raises(ConfigError) as err:
        load_dataset("no-such-graph", data_root=tmp_path)
    msg = assert_one_line(err)
    for name in ("no-such-graph", "synthetic-tiny", "ogbn-products", "ogbn-papers100M", "cora"):
        assert name in msg


# -- data root ----------------------------------------------------------------------------------
def test_data_root_resolution(tmp_path, monkeypatch):
    monkeypatch.delenv("TWOPGRAPH_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the default: the user's cache
    assert resolve_data_root() == tmp_path / "cache" / "twopgraph"
    monkeypatch.setenv("TWOPGRAPH_DATA", str(tmp_path))
    assert resolve_data_root() == tmp_path
    assert resolve_data_root(tmp_path / "x") == tmp_path / "x"
    data = small_graphdata()
    data.save_npz(tmp_path / "envgraph.npz")
    assert_same(load_dataset("envgraph"), data)
    from twopgraph.datasets.synthetic import SYNTHETIC_PRESETS
    assert dataset_path("synthetic-tiny") == \
        datasets.preset_store(SYNTHETIC_PRESETS["synthetic-tiny"], tmp_path)


# -- synthetic presets and listing --------------------------------------------------------------
#: Content fingerprints of synthetic-tiny's arrays, as every twopgraph since generator version 2
#: made them (its .npz cache and store before issue 19, its store alone since): checkpoints and
#: partitions of runs made before record these.
TINY_FINGERPRINT = {"float32": "1156e66b89e85f06eaf1e672511ac3a7",
                    "float16": "5ca4e40347caa7072b3bf4ccfb156833"}


def feature_files(root: Path) -> list[Path]:
    return sorted(root.rglob("feat.npy"))


@pytest.mark.parametrize("store_dtype", ["float32", "float16"])
def test_preset_is_written_once_into_its_store(tmp_path, store_dtype):
    """Before issue 19 a preset was generated in memory, written as <root>/<name>.npz (+ a
    .spec.json sidecar) and then again as a store: two copies on disk."""
    from twopgraph.datasets import synthetic
    spec = synthetic.SYNTHETIC_PRESETS["synthetic-tiny"]
    data = load_dataset("synthetic-tiny", data_root=tmp_path, progress=False,
                        store_dtype=store_dtype)
    store = datasets.preset_store(spec, tmp_path, store_dtype)
    assert data.store == store.resolve() and data.name == "synthetic-tiny"
    assert not list(tmp_path.rglob("*.npz")) and not list(tmp_path.rglob("*.spec.json"))
    assert feature_files(tmp_path) == [store / "feat.npy"]  # one copy of the features
    assert not list(tmp_path.glob("stores/.*"))  # no temporary folder left
    # the same arrays as generate() and as older twopgraphs made: the same fingerprint
    fresh = synthetic.generate(spec)
    if store_dtype == "float16":
        fresh.feat = fresh.feat.astype(np.float16)
    assert_same(data, fresh)
    assert data.feat.dtype == np.dtype(store_dtype) and data.graph.indices.dtype == np.int32
    assert data.fingerprint() == fresh.fingerprint() == TINY_FINGERPRINT[store_dtype]
    meta = json.loads((store / "store.json").read_text())
    assert meta["source"]["spec_fingerprint"] == synthetic.spec_fingerprint(spec)
    assert meta["fingerprint"] == TINY_FINGERPRINT[store_dtype] and meta["undirected"]
    ident = datasets.dataset_identity("synthetic-tiny", tmp_path, store_dtype)
    assert ident == {"name": "synthetic-tiny", "path": None, "store": str(store.resolve()),
                     "fingerprint": TINY_FINGERPRINT[store_dtype]}
    assert dataset_path("synthetic-tiny", tmp_path, store_dtype) == store


def test_synthetic_tiny_is_cached(tmp_path, monkeypatch):
    from twopgraph.datasets import synthetic
    first = load_dataset("synthetic-tiny", data_root=tmp_path, progress=False)
    store = datasets.preset_store(synthetic.SYNTHETIC_PRESETS["synthetic-tiny"], tmp_path)
    assert dataset_path("synthetic-tiny", tmp_path) == store and first.store == store.resolve()

    def no_generation(*args, **kwargs):
        raise AssertionError("generated again instead of reading the store")
    monkeypatch.setattr(synthetic, "generate", no_generation)
    monkeypatch.setattr(synthetic, "write_store", no_generation)
    second = load_dataset("synthetic-tiny", data_root=tmp_path, progress=False)
    assert second.name == "synthetic-tiny" and second.store == store.resolve()
    assert_same(first, second)


def test_preset_is_generated_in_bounded_memory(tmp_path, monkeypatch):
    """The store is written as the generator makes the arrays, the features chunk by chunk:
    the traced peak stays far below the feature table (generating it in memory and writing
    it then holds the whole table, and more)."""
    import tracemalloc
    from dataclasses import replace

    from twopgraph.datasets import synthetic
    monkeypatch.setattr(synthetic, "_CHUNK", 1 << 18)  # 1 MiB blocks of features
    spec = replace(synthetic.SYNTHETIC_PRESETS["synthetic-tiny"], name="wide",
                   num_nodes=100_000, num_edges=200_000, num_features=256,
                   num_communities=200)
    table = spec.num_nodes * spec.num_features * 4  # 98 MiB
    tracemalloc.start()
    try:
        data = datasets.load_preset(spec, tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert data.feat.shape == (spec.num_nodes, spec.num_features)
    # the generator's own working set (its chunks of edge samples: ~20 MiB here) and one
    # block of features; never the table (98 MiB)
    assert peak < table / 3, f"peak {peak / 2**20:.1f} MiB for a {table / 2**20:.0f} MiB table"
    assert not list(tmp_path.rglob("*.npz"))


def test_a_store_of_another_spec_is_not_reused(tmp_path, monkeypatch):
    """A preset's store is keyed by its spec fingerprint (every field that changes the arrays
    and the generator version): a store of another spec or generator version is another
    folder, and a folder whose store.json names another spec is generated again."""
    from twopgraph.datasets import synthetic
    spec = synthetic.SYNTHETIC_PRESETS["synthetic-tiny"]
    with monkeypatch.context() as m:
        m.setattr(synthetic, "GENERATOR_VERSION", synthetic.GENERATOR_VERSION - 1)
        older = load_dataset("synthetic-tiny", data_root=tmp_path, progress=False)
    data = load_dataset("synthetic-tiny", data_root=tmp_path, progress=False)
    assert older.store != data.store and data.store == datasets.preset_store(spec, tmp_path)
    assert data.fingerprint() == TINY_FINGERPRINT["float32"]
    meta_path = data.store / "store.json"
    meta = json.loads(meta_path.read_text())
    meta["source"]["spec_fingerprint"] = "0" * 32  # made from another spec
    meta_path.write_text(json.dumps(meta))
    assert not [d for d in list_datasets(tmp_path) if d["name"] == "synthetic-tiny"][0]["cached"]
    again = load_dataset("synthetic-tiny", data_root=tmp_path, progress=False)
    assert json.loads(meta_path.read_text())["source"]["spec_fingerprint"] == \
        synthetic.spec_fingerprint(spec)
    assert again.fingerprint() == TINY_FINGERPRINT["float32"]


def test_old_npz_cache_is_no_longer_needed(tmp_path, monkeypatch, caplog):
    """A data root of an older twopgraph: <root>/synthetic-tiny.npz + .spec.json and the store
    converted from it. The preset gets its store of one copy; the older files are left alone
    (the user's to delete), and whatever recorded the older copy's identity -- a checkpoint's
    data fingerprint, a partition's source -- names the same dataset."""
    import logging

    from twopgraph.datasets import same_dataset, synthetic
    spec = synthetic.SYNTHETIC_PRESETS["synthetic-tiny"]
    npz = tmp_path / "synthetic-tiny.npz"
    datasets.load_synthetic(spec, npz)  # the .npz cache and sidecar as older versions wrote
    old_store = datasets.load_dataset(str(npz), data_root=tmp_path, progress=False).store
    old_source = {"name": "synthetic-tiny", "path": str(npz.resolve()),
                  "store": str(old_store), "fingerprint": TINY_FINGERPRINT["float32"]}
    before = sorted(p.name for p in tmp_path.iterdir())
    # a read-only data root of an older version: the old cache is read into memory
    def read_only(*args, **kwargs):
        from twopgraph.errors import OutputError
        raise OutputError("cannot write: read-only file system")
    with monkeypatch.context() as m, caplog.at_level(logging.WARNING, logger="twopgraph"):
        m.setattr(synthetic, "write_store", read_only)
        assert dataset_path("synthetic-tiny", tmp_path) == npz
        kept = load_dataset("synthetic-tiny", data_root=tmp_path, progress=False)
    assert kept.store is None and kept.fingerprint() == TINY_FINGERPRINT["float32"]
    assert "reading the older cache" in caplog.text
    data = load_dataset("synthetic-tiny", data_root=tmp_path, progress=False)
    assert data.store == datasets.preset_store(spec, tmp_path).resolve() != old_store
    assert data.fingerprint() == GraphData.load_npz(npz).fingerprint() == \
        TINY_FINGERPRINT["float32"]
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing deleted or added
    assert same_dataset(datasets.dataset_identity("synthetic-tiny", tmp_path), old_source)
    row = [d for d in list_datasets(tmp_path) if d["name"] == "synthetic-tiny"]
    assert len(row) == 1 and row[0]["cached"] and row[0]["path"] == str(data.store)


@pytest.mark.parametrize("stale", ["generator_version", "spec", "old_sidecar"])
def test_stale_synthetic_cache_is_regenerated(tmp_path, monkeypatch, stale):
    """load_synthetic: the .npz cache of a caller's path (scripts that need a file)."""
    from dataclasses import replace

    from twopgraph.datasets import synthetic
    spec = synthetic.SYNTHETIC_PRESETS["synthetic-tiny"]
    fresh = synthetic.generate("synthetic-tiny")
    path, sidecar = tmp_path / "synthetic-tiny.npz", tmp_path / "synthetic-tiny.spec.json"
    with monkeypatch.context() as m:  # a cache written by an older generator or another spec
        if stale == "generator_version":
            m.setattr(synthetic, "GENERATOR_VERSION", synthetic.GENERATOR_VERSION - 1)
        datasets.load_synthetic(replace(spec, seed=1) if stale == "spec" else spec, path)
    if stale == "old_sidecar":  # format of twopgraph <= issue 9: no fingerprint
        sidecar.write_text(json.dumps({"generator_version": synthetic.GENERATOR_VERSION,
                                       "spec": synthetic.spec_summary(spec)}))
    if stale != "spec":
        small_graphdata().save_npz(path)  # stale content under the old sidecar
    again = datasets.load_synthetic(spec, path)
    assert_same(again, fresh)
    assert json.loads(sidecar.read_text())["fingerprint"] == synthetic.spec_fingerprint(spec)
    assert_same(GraphData.load_npz(path), fresh)


def test_synthetic_cache_ignores_name_and_description(tmp_path, monkeypatch):
    from dataclasses import replace

    from twopgraph.datasets import synthetic
    spec = synthetic.SYNTHETIC_PRESETS["synthetic-tiny"]
    first = datasets.load_synthetic(spec, tmp_path / "t.npz")
    assert (tmp_path / "t.spec.json").is_file()
    monkeypatch.setattr(synthetic, "generate", lambda *a, **k: pytest.fail("regenerated"))
    again = datasets.load_synthetic(replace(spec, name="other", description="x"),
                                    tmp_path / "t.npz")
    assert again.name == "other"
    assert_same(first, again)


def test_list_datasets(tmp_path):
    small_graphdata().save_npz(tmp_path / "cora.npz")
    small_graphdata().save_npz(tmp_path / "synthetic-tiny.npz")  # an older version's cache
    rows = {d["name"]: d for d in list_datasets(tmp_path)}
    assert not rows["synthetic-tiny"]["cached"]  # no longer read: the preset's store is
    tiny = load_dataset("synthetic-tiny", data_root=tmp_path, progress=False)
    rows = {d["name"]: d for d in list_datasets(tmp_path)}
    for d in rows.values():
        assert set(d) == {"name", "kind", "cached", "path", "description"}
    assert rows["synthetic-tiny"]["kind"] == "synthetic" and rows["synthetic-tiny"]["cached"]
    assert rows["synthetic-tiny"]["path"] == str(tiny.store)
    assert rows["synthetic-small"]["kind"] == "synthetic" and not rows["synthetic-small"]["cached"]
    assert rows["ogbn-arxiv"] == dict(rows["ogbn-arxiv"], kind="ogb", cached=False,
                                      path=str(tmp_path / "ogbn_arxiv" / "raw" / "edge.csv.gz"))
    assert rows["cora"]["kind"] == "npz" and rows["cora"]["cached"]
    assert [d["name"] for d in list_datasets(tmp_path)].count("synthetic-tiny") == 1
    assert {d["name"] for d in list_datasets(tmp_path / "missing")} >= set(datasets.OGB_DATASETS)


def test_unwritable_root_is_a_user_error(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root can write anywhere")
    root = tmp_path / "ro"
    root.mkdir()
    root.chmod(0o500)
    try:
        with pytest.raises(TwopgraphError, match="cannot write the dataset store"):
            load_dataset("synthetic-tiny", data_root=root, progress=False)
    finally:
        root.chmod(0o700)
