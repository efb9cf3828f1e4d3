"""Streaming ingestion (twopgraph.ingest): OGB's binary layout, the COO exchange format, the
papers-shaped generator (twopgraph.datasets.papers), and bad raw files."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from test_csrbuild import scipy_csr

from twopgraph.datasets import load_dataset
from twopgraph.datasets.papers import PapersSpec, parse_preset, write_ogb_raw
from twopgraph.errors import ConfigError, GraphFormatError, TwopgraphError
from twopgraph.ingest import coo_npz, ingest, labels_from
from twopgraph.store.reader import open_store

SCALE = 2e-5  # 2,221 vertices, ~32k directed edges


@pytest.fixture(scope="module")
def papers_root(tmp_path_factory):
    """A tiny ogbn-papers100M in OGB's binary raw layout (stored members)."""
    root = tmp_path_factory.mktemp("papers")
    info = write_ogb_raw(PapersSpec(scale=SCALE), root / "ogbn_papers100M")
    return root, info


def raw_arrays(folder: Path) -> dict:
    with np.load(folder / "raw" / "data.npz") as z:
        out = {k: z[k] for k in z.files}
    with np.load(folder / "raw" / "node-label.npz") as z:
        out["node_label"] = z["node_label"]
    return out


def test_binary_layout_is_ingested_exactly(papers_root):
    root, info = papers_root
    folder = root / "ogbn_papers100M"
    data = load_dataset("ogbn-papers100M", data_root=root, progress=False)
    raw = raw_arrays(folder)
    n = int(raw["num_nodes_list"][0])
    assert data.num_nodes == n == info["num_nodes"]
    indptr, indices = scipy_csr(raw["edge_index"][0], raw["edge_index"][1], n)
    np.testing.assert_array_equal(data.graph.indptr, indptr)
    np.testing.assert_array_equal(data.graph.indices, indices)
    assert data.graph.indices.dtype == np.int32  # compact: N < 2**31
    np.testing.assert_array_equal(data.feat, raw["node_feat"])
    y = raw["node_label"][:, 0]
    assert np.isnan(y).mean() > 0.9  # papers100M's sparsity: most vertices unlabelled
    np.testing.assert_array_equal(data.label, np.where(np.isnan(y), -1, y).astype(np.int64))
    assert data.num_classes == 172
    labelled = np.flatnonzero(data.label >= 0)
    splits = np.concatenate([data.train_idx, data.val_idx, data.test_idx])
    np.testing.assert_array_equal(np.sort(splits), labelled)  # NaN: outside every split
    meta = json.loads((data.store / "store.json").read_text())
    assert set(meta["ingest"]["seconds"]) >= {"edges", "csr", "features"}
    assert not list(data.store.glob("*.scratch*")) and not (data.store / "src.bin").exists()


def test_compressed_binary_layout_equals_stored(tmp_path, papers_root):
    root, _ = papers_root
    write_ogb_raw(PapersSpec(scale=SCALE), tmp_path / "ogbn_papers100M", compress=True)
    with zipfile.ZipFile(tmp_path / "ogbn_papers100M" / "raw" / "data.npz") as zf:
        assert zf.getinfo("edge_index.npy").compress_type == zipfile.ZIP_DEFLATED
    a = load_dataset("ogbn-papers100M", data_root=tmp_path, progress=False)
    b = load_dataset("ogbn-papers100M", data_root=root, progress=False)
    assert a.fingerprint() == b.fingerprint()


def test_preset_is_the_same_graph_as_its_ogb_layout(tmp_path, papers_root):
    root, _ = papers_root
    preset = load_dataset(f"synthetic-papers:{SCALE}", data_root=tmp_path, progress=False)
    ogb = load_dataset("ogbn-papers100M", data_root=root, progress=False)
    np.testing.assert_array_equal(preset.graph.indices, ogb.graph.indices)
    np.testing.assert_array_equal(preset.feat, ogb.feat)
    np.testing.assert_array_equal(preset.label, ogb.label)
    assert preset.name == f"synthetic-papers:{SCALE:g}"
    assert not list(tmp_path.glob("*.npz"))  # one copy: the store
    again = load_dataset(f"synthetic-papers:{SCALE}", data_root=tmp_path, progress=False)
    assert again.store == preset.store


@pytest.mark.parametrize("name,scale", [("synthetic-papers:0.25", 0.25),
                                        ("synthetic-papers:1/16", 1 / 16),
                                        ("synthetic-papers:1e-3", 1e-3),
                                        ("synthetic-papers", 1 / 64)])
def test_preset_scales(name, scale):
    spec = parse_preset(name)
    assert spec.scale == scale and spec.num_nodes == round(111_059_956 * scale)


@pytest.mark.parametrize("name", ["synthetic-papers:x", "synthetic-papers:0", "synthetic-papers:-1",
                                  "synthetic-papers:1/0", "synthetic-papers:1e-9"])
def test_bad_preset_scale_is_one_line(name):
    with pytest.raises(ConfigError) as err:
        parse_preset(name)
    assert "\n" not in str(err.value)


# -- the COO exchange format ---------------------------------------------------------------
def coo_file(path: Path, *, n=40, e=200, seed=0, layout="2xE", **override) -> dict:
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    arrays = {"edge_index": np.stack([src, dst]) if layout == "2xE" else np.stack([src, dst], 1),
              "feat": rng.standard_normal((n, 5)).astype(np.float32),
              "label": rng.integers(0, 3, n).astype(np.float64),
              "train_idx": np.arange(0, 20), "val_idx": np.arange(20, 30),
              "test_idx": np.arange(30, 38)}
    arrays["label"][38:] = np.nan  # unlabelled, outside the splits
    arrays.update(override)
    np.savez(path, **arrays)
    return arrays


@pytest.mark.parametrize("layout", ["2xE", "Ex2"])
def test_coo_npz_loads_symmetrised(tmp_path, layout):
    a = coo_file(tmp_path / "g.npz", layout=layout)
    data = load_dataset(str(tmp_path / "g.npz"), data_root=tmp_path / "root", progress=False)
    ei = a["edge_index"] if layout == "2xE" else a["edge_index"].T
    np.testing.assert_array_equal(data.graph.indices, scipy_csr(ei[0], ei[1], 40)[1])
    assert data.label[38:].tolist() == [-1, -1] and data.train_idx.tolist() == list(range(20))
    data.validate(check_symmetric=True)


def _err(tmp_path, **override) -> str:
    coo_file(tmp_path / "bad.npz", **override)
    with pytest.raises(TwopgraphError) as err:
        load_dataset(str(tmp_path / "bad.npz"), data_root=tmp_path / "root", progress=False)
    msg = str(err.value)
    assert "\n" not in msg
    stores = tmp_path / "root" / "stores"
    assert not stores.exists() or not [p for p in stores.iterdir()
                                       if (p / "store.json").is_file()]
    return msg


def test_coo_edge_id_out_of_range(tmp_path):
    ei = np.array([[0, 1, 2], [1, 40, 0]])
    assert "edge 1 (1 -> 40) has an id outside [0, 40)" in _err(tmp_path, edge_index=ei)


def test_coo_feature_rows_mismatch(tmp_path):
    msg = _err(tmp_path, feat=np.zeros((39, 5), np.float32), num_nodes=np.int64(40))
    assert "39 feature rows for 40 vertices" in msg


def test_coo_split_id_out_of_range(tmp_path):
    assert "vertex id 45 out of range" in _err(tmp_path, test_idx=np.array([30, 45]))


def test_coo_fractional_label(tmp_path):
    label = np.zeros(40)
    label[7] = 1.5
    assert "label of vertex 7 is 1.5" in _err(tmp_path, label=label)


def test_coo_unlabelled_in_a_split(tmp_path):
    label = np.zeros(40)
    label[3] = np.nan
    assert "unlabelled" in _err(tmp_path, label=label)


def test_truncated_raw_file_is_one_line_and_leaves_no_store(tmp_path):
    write_ogb_raw(PapersSpec(scale=SCALE), tmp_path / "ogbn_papers100M")
    data = tmp_path / "ogbn_papers100M" / "raw" / "data.npz"
    blob = data.read_bytes()
    data.write_bytes(blob[:len(blob) // 2])
    with pytest.raises(TwopgraphError) as err:
        load_dataset("ogbn-papers100M", data_root=tmp_path, progress=False)
    msg = str(err.value)
    assert "\n" not in msg and "could not read the raw files" in msg
    assert not (tmp_path / "stores").exists() or not any(
        (p / "store.json").is_file() for p in (tmp_path / "stores").iterdir())


def test_inconsistent_edge_count_is_one_line(tmp_path):
    folder = tmp_path / "ogbn_papers100M"
    write_ogb_raw(PapersSpec(scale=SCALE), folder)
    arrays = raw_arrays(folder)
    arrays.pop("node_label")
    arrays["num_edges_list"] = arrays["num_edges_list"] + 1
    np.savez(folder / "raw" / "data.npz", **arrays)
    with pytest.raises(TwopgraphError, match="num_edges_list says"):
        load_dataset("ogbn-papers100M", data_root=tmp_path, progress=False)


def test_full_disk_during_ingestion_is_one_line(tmp_path, monkeypatch):
    from twopgraph.store import writer as storewriter
    coo_file(tmp_path / "g.npz")
    real = storewriter.StoreWriter.put

    def full(self, name, *a, **k):
        if name == "feat":
            raise storewriter._write_error(self.folder, OSError(28, "No space left on device"))
        return real(self, name, *a, **k)
    monkeypatch.setattr(storewriter.StoreWriter, "put", full)
    with pytest.raises(TwopgraphError) as err:
        ingest(coo_npz(tmp_path / "g.npz"), tmp_path / "s", source=None)
    assert "No space left" in str(err.value) or "full" in str(err.value)
    assert not (tmp_path / "s").exists() and not list(tmp_path.glob(".s.tmp-*"))


def test_labels_from():
    assert labels_from(np.array([[1.0], [np.nan], [0.0]]), "x").tolist() == [1, -1, 0]
    with pytest.raises(GraphFormatError, match="vertex 1"):
        labels_from(np.array([1.0, np.inf]), "x")
    with pytest.raises(GraphFormatError, match="vertex 0"):
        labels_from(np.array([-3, 1]), "x")


def test_ingested_store_reopens(tmp_path):
    coo_file(tmp_path / "g.npz")
    out = ingest(coo_npz(tmp_path / "g.npz"), tmp_path / "s", source=None)
    assert open_store(out).num_nodes == 40


# -- compact structure ---------------------------------------------------------------------
def test_npz_int64_indices_are_stored_as_int32(tmp_path):
    from twopgraph.graph.data import CSRGraph, GraphData
    g = CSRGraph.from_edges([0, 1, 2], [1, 2, 3], num_nodes=4, index_dtype=np.int64)
    d = GraphData(g, np.zeros((4, 2), np.float32), np.array([0, 1, 0, 1]), np.array([0]),
                  np.array([1]), np.array([2]))
    d.save_npz(tmp_path / "g.npz")
    data = load_dataset(str(tmp_path / "g.npz"), data_root=tmp_path, progress=False)
    assert data.graph.indices.dtype == np.int32
    np.testing.assert_array_equal(data.graph.indices, g.indices)
    # an id that would wrap into range when narrowed is refused, not silently changed
    bad = np.array(g.indices)
    bad[0] = 2**32 + 1
    np.savez(tmp_path / "bad.npz", indptr=g.indptr, indices=bad, feat=d.feat, label=d.label,
             train_idx=d.train_idx, val_idx=d.val_idx, test_idx=d.test_idx)
    with pytest.raises(GraphFormatError, match="out of range"):
        load_dataset(str(tmp_path / "bad.npz"), data_root=tmp_path, progress=False)


def test_ingest_memory_is_bounded_by_a_chunk(tmp_path, monkeypatch):
    """A deflated COO file with 16 MB of features and 4 MB of edges is ingested within a few
    chunks of memory (256 KiB here); the control run with one chunk per array shows that the
    bound is what fails when the chunking is removed."""
    import tracemalloc

    from twopgraph.ingest import npz as npz_mod
    from twopgraph.ingest import raw as raw_mod
    from twopgraph.store import npz as npzstore
    from twopgraph.store import reader as store_mod
    from twopgraph.store import writer as storewriter
    rng = np.random.default_rng(0)
    n, e = 8192, 250_000
    np.savez_compressed(tmp_path / "g.npz", edge_index=rng.integers(0, n, (2, e)),
                        feat=rng.standard_normal((n, 512)).astype(np.float32),
                        label=rng.integers(0, 4, n), train_idx=np.arange(100),
                        val_idx=np.arange(100, 200), test_idx=np.arange(200, 300))

    def peak(chunk: int, out: str) -> int:
        # every chunked read and write
        for mod in (store_mod, storewriter, npzstore, npz_mod, raw_mod):
            monkeypatch.setattr(mod, "CHUNK_BYTES", chunk)
        raw = coo_npz(tmp_path / "g.npz")
        tracemalloc.start()
        try:
            ingest(raw, tmp_path / out, source=None)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    ingest(coo_npz(tmp_path / "g.npz"), tmp_path / "warm", source=None)  # compile kernels
    small = peak(256 << 10, "small")
    whole = peak(64 << 20, "whole")
    assert small < 6 * 2**20, small
    assert whole > 16 * 2**20, whole
    a, b = open_store(tmp_path / "small"), open_store(tmp_path / "whole")
    assert a.fingerprint() == b.fingerprint()
