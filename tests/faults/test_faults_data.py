"""Faults in the data a run is given (issue 14, items 4, 5, 7, 8): every dataset is validated
where it enters, ``--symmetrize`` repairs a directed graph on request, labels are bounded and
``-1`` (unlabelled) is allowed outside the splits, a file that is not what it claims is named,
a damaged dataset cache heals itself, and ``GraphData`` built in Python is converted or
refused up front. Each case is one line (``GraphFormatError``, exit 2 from the CLI), never a
traceback, an allocator failure or a crash in METIS.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import community_data

from twopgraph.cli import main
from twopgraph.config import DataConfig, TrainConfig
from twopgraph.datasets import dataset_path, load_dataset
from twopgraph.datasets.synthetic import generate
from twopgraph.errors import GraphFormatError
from twopgraph.graph.data import CSRGraph, GraphData


@pytest.fixture(autouse=True)
def _own_data_root(tmp_path, monkeypatch):
    """Stores converted by a test go under its own folder, never into the checkout's
    default data root (``datasets/``), where they were left behind."""
    monkeypatch.setenv("TWOPGRAPH_DATA", str(tmp_path / "data-root"))

REPO = Path(__file__).resolve().parents[2]


# -- builders ----------------------------------------------------------------------------------
def arrays(data: GraphData) -> dict:
    return dict(indptr=data.graph.indptr, indices=data.graph.indices, feat=data.feat,
                label=data.label, train_idx=data.train_idx, val_idx=data.val_idx,
                test_idx=data.test_idx)


def edges(g: CSRGraph) -> tuple[np.ndarray, np.ndarray]:
    return np.repeat(np.arange(g.num_nodes), g.degrees()), g.indices.astype(np.int64)


def raw_csr(n: int, src, dst) -> CSRGraph:
    """The CSR of exactly these entries (rows sorted; self loops and repeats kept)."""
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    order = np.lexsort((dst, src))
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    return CSRGraph(indptr, dst[order].astype(np.int32))


def broken(kind: str, data: GraphData) -> CSRGraph:
    """``data``'s graph damaged the way ``kind`` says."""
    src, dst = edges(data.graph)
    if kind == "directed":  # only u < v kept: what made pymetis crash with SIGSEGV
        keep = src < dst
        return raw_csr(data.num_nodes, src[keep], dst[keep])
    if kind == "asymmetric":  # one reverse entry missing
        drop = np.flatnonzero(src > dst)[3]
        return raw_csr(data.num_nodes, np.delete(src, drop), np.delete(dst, drop))
    if kind == "self_loop":
        return raw_csr(data.num_nodes, np.r_[src, 7], np.r_[dst, 7])
    if kind == "duplicate":  # both directions repeated: symmetric, but a multigraph
        return raw_csr(data.num_nodes, np.r_[src, src[0], dst[0]], np.r_[dst, dst[0], src[0]])
    raise ValueError(kind)


def save(path: Path, **arr) -> Path:
    np.savez(path, **arr)
    return path


def one_line(err) -> str:
    msg = str(err.value)
    assert "\n" not in msg, msg
    return msg


@pytest.fixture(scope="module")
def cdata() -> GraphData:
    return community_data(300, seed=5)


# -- 1. the undirected format is checked where data enters -------------------------------------
@pytest.mark.parametrize("kind,what", [
    ("directed", "have no v->u (first: 0->"),
    ("asymmetric", "1 of "),
    ("self_loop", "1 self loop (first: 7->7)"),
    ("duplicate", "duplicate entr"),
])
def test_npz_that_is_not_undirected_is_refused_naming_the_first_edge(tmp_path, cdata, kind, what):
    path = save(tmp_path / "g.npz", **arrays(replace(cdata, graph=broken(kind, cdata))))
    with pytest.raises(GraphFormatError) as err:
        load_dataset(str(path))
    msg = one_line(err)
    assert msg.startswith(f"{path}: graph is not undirected") and what in msg, msg
    assert "--symmetrize" in msg


def test_graphdata_built_in_python_is_checked_too(cdata):
    d = replace(cdata, graph=broken("directed", cdata))
    with pytest.raises(GraphFormatError, match="not undirected.*--symmetrize"):
        d.validate()
    d.validate(check_symmetric=False)  # a partition's local graph may opt out
    cdata.validate()


def test_unsorted_rows_are_checked_on_a_sorted_copy(cdata):
    g = cdata.graph
    rev = np.concatenate([g.indices[g.indptr[v]:g.indptr[v + 1]][::-1]
                          for v in range(g.num_nodes)])
    assert g.indptr[-1] and not np.array_equal(rev, g.indices)
    CSRGraph(g.indptr, rev).validate(check_symmetric=True)  # same edges: fine, unchanged
    bad = broken("asymmetric", cdata)
    ix = np.concatenate([bad.indices[bad.indptr[v]:bad.indptr[v + 1]][::-1]
                         for v in range(bad.num_nodes)])
    with pytest.raises(GraphFormatError, match="1 of .* have no v->u"):
        CSRGraph(bad.indptr, ix).validate(check_symmetric=True)


def test_directed_graph_is_refused_before_metis_runs(tmp_path, cdata):
    """Today's main: pymetis crashes with SIGSEGV (exit 139) on this file."""
    path = save(tmp_path / "directed.npz", **arrays(replace(cdata, graph=broken("directed",
                                                                                   cdata))))
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    p = subprocess.run([sys.executable, "-m", "twopgraph", "train", "--dataset", path,
                        "--data-root", tmp_path / "root", "--out", tmp_path / "out",
                        "--epochs", "1", "--no-progress", "--device", "cpu",
                        "--schedule", "locality"], capture_output=True, text=True,
                       timeout=300, env=env, cwd=tmp_path)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("twopgraph: error: "), p.stderr
    assert "have no v->u" in lines[0] and "--symmetrize" in lines[0]
    assert not (tmp_path / "root" / "clusters").exists()  # METIS never ran


# -- 2. --symmetrize ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind,counts", [
    ("directed", None),
    ("self_loop", (0, 1, 0)),
    ("duplicate", (0, 0, 2)),
])
def test_symmetrize_repairs_and_says_what_changed(tmp_path, cdata, caplog, kind, counts):
    path = save(tmp_path / "g.npz", **arrays(replace(cdata, graph=broken(kind, cdata))))
    with caplog.at_level(logging.INFO, logger="twopgraph"):
        fixed = load_dataset(str(path), symmetrize=True)
    fixed.validate()
    np.testing.assert_array_equal(fixed.graph.indptr, cdata.graph.indptr)
    np.testing.assert_array_equal(fixed.graph.indices, cdata.graph.indices)
    np.testing.assert_array_equal(fixed.feat, cdata.feat)
    lines = [r.getMessage() for r in caplog.records if "--symmetrize" in r.getMessage()]
    assert len(lines) == 1 and str(path) in lines[0], lines
    if counts is None:
        counts = (cdata.graph.num_edges // 2, 0, 0)
    added, loops, dups = counts
    assert (f"{added:,} reverse entries added, {loops:,} self loops and {dups:,} duplicate "
            "entries removed") in lines[0], lines[0]


def test_symmetrize_leaves_an_undirected_dataset_alone(tmp_path, cdata, caplog):
    cdata.save_npz(tmp_path / "ok.npz")
    with caplog.at_level(logging.INFO, logger="twopgraph"):
        d = load_dataset("ok", data_root=tmp_path, symmetrize=True)
    assert "nothing changed" in caplog.text
    np.testing.assert_array_equal(d.graph.indices, cdata.graph.indices)
    g, changed = cdata.graph.symmetrized()
    assert g is cdata.graph and changed == {"self_loops": 0, "duplicates": 0, "added": 0}


def test_symmetrize_does_not_hide_structural_damage(tmp_path, cdata):
    arr = arrays(cdata)
    arr["indices"] = arr["indices"].copy()
    arr["indices"][0] = 10**6
    path = save(tmp_path / "g.npz", **arr)
    with pytest.raises(GraphFormatError, match="out of range"):
        load_dataset(str(path), symmetrize=True)


def test_data_config_symmetrize_flag_and_load(tmp_path, cdata):
    path = save(tmp_path / "g.npz", **arrays(replace(cdata, graph=broken("directed", cdata))))
    from twopgraph.cli import build_parser
    a = build_parser().parse_args(["train", "--dataset", str(path), "--symmetrize"])
    cfg = TrainConfig.from_args(a).validate()
    assert cfg.data.symmetrize is True
    assert cfg.data.load(progress=False).graph.num_edges == cdata.graph.num_edges
    plain = DataConfig(dataset=str(path))
    assert plain.symmetrize is False
    with pytest.raises(GraphFormatError, match="--symmetrize"):
        plain.load(progress=False)
    with pytest.raises(Exception, match="symmetrize must be true or false"):
        DataConfig(dataset="x", symmetrize="yes").validate()


# -- 3. labels ---------------------------------------------------------------------------------
def test_huge_label_is_refused_before_any_allocation(tmp_path, cdata):
    """Today's main: loads, then the scheduler allocates clusters x 10^9 counts (~128 GB)."""
    arr = arrays(cdata)
    arr["label"] = arr["label"].copy()
    arr["label"][11] = 10**9
    path = save(tmp_path / "g.npz", **arr)
    with pytest.raises(GraphFormatError) as err:
        load_dataset(str(path))
    msg = one_line(err)
    assert "label of vertex 11 is 1000000000" in msg and "class ids must be 0..C-1" in msg
    arr["label"][11] = 0
    path = save(tmp_path / "h.npz", **arr, num_classes=np.int64(10**9))
    with pytest.raises(GraphFormatError, match="num_classes is 1000000000, too large"):
        load_dataset(str(path))


def test_huge_label_via_the_cli_is_one_line(tmp_path, cdata, capsys):
    arr = arrays(cdata)
    arr["label"] = np.full_like(arr["label"], 10**9)
    path = save(tmp_path / "g.npz", **arr)
    capsys.readouterr()
    rc = main(["train", "--dataset", str(path), "--out", str(tmp_path / "out"),
               "--no-progress", "--device", "cpu", "--data-root", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    errors = [ln for ln in err.splitlines() if ln.startswith("twopgraph: error:")]
    assert len(errors) == 1 and "label of vertex 0 is 1000000000" in errors[0], err


def unlabelled(cdata: GraphData, in_split: str | None = None) -> GraphData:
    """``cdata`` with a fifth of the vertices outside the splits, labelled -1 (OGB style);
    ``in_split``: one vertex of that split unlabelled too."""
    n = cdata.num_nodes
    rng = np.random.default_rng(0)
    out = np.sort(rng.choice(n, n // 5, replace=False))
    label = cdata.label.copy()
    label[out] = -1
    splits = {s: np.setdiff1d(getattr(cdata, s), out) for s in ("train_idx", "val_idx",
                                                                  "test_idx")}
    if in_split is not None:
        label[splits[in_split][2]] = -1
    return replace(cdata, label=label, num_classes=-1, **splits)


def test_unlabelled_vertices_are_allowed_outside_the_splits(tmp_path, cdata):
    """Today's main refuses any negative label."""
    d = unlabelled(cdata)
    path = save(tmp_path / "u.npz", **arrays(d))
    e = load_dataset(str(path))
    assert (e.label == -1).sum() == cdata.num_nodes // 5
    assert e.num_classes == int(cdata.label.max()) + 1  # -1 does not count
    assert e.summary()["num_classes"] == e.num_classes


@pytest.mark.parametrize("split", ["train_idx", "val_idx", "test_idx"])
def test_unlabelled_vertex_in_a_split_is_refused_naming_the_split(tmp_path, cdata, split):
    d = unlabelled(cdata, in_split=split)
    path = save(tmp_path / "u.npz", **arrays(d))
    with pytest.raises(GraphFormatError) as err:
        load_dataset(str(path))
    msg = one_line(err)
    assert f"{split} holds 1 unlabelled vertex (label -1; first: vertex" in msg, msg


def test_label_below_minus_one_is_refused(cdata):
    label = cdata.label.copy()
    label[4] = -2
    with pytest.raises(GraphFormatError, match="label of vertex 4 is -2"):
        replace(cdata, label=label).validate()


@pytest.mark.parametrize("policy,schedule", [("presample", "locality"), ("none", "random")])
def test_training_tolerates_unlabelled_vertices(tmp_path, cdata, policy, schedule):
    """-1 labels outside the splits through train, the locality scheduler (label balancing,
    renumbering) and the presample cache; labels converted from int32 on the way."""
    from twopgraph.run.train import train
    d = unlabelled(cdata)
    d = GraphData(d.graph, d.feat.astype(np.float64), d.label.astype(np.int32),
                  d.train_idx.astype(np.int32), d.val_idx, d.test_idx, name="unlabelled")
    cfg = TrainConfig.of(dataset="unlabelled", epochs=2, hidden=16, fanouts=[5, 5],
                         batch_size=32, lr=0.01, device="cpu", out=str(tmp_path / "out"),
                         progress=False, cache_policy=policy, cache_ratio=0.3,
                         schedule=schedule, num_clusters=8, data_root=str(tmp_path))
    res = train(cfg, d.validate())
    assert res.val_acc is not None and res.test_acc is not None
    assert np.isfinite([e["loss"] for e in res.epochs]).all()
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["dataset"]["num_classes"] == int(cdata.label.max()) + 1


# -- 4. messages -------------------------------------------------------------------------------
def test_text_file_named_npz(tmp_path):
    """Today's main: numpy's 'load it unsafely using allow_pickle=True' advice."""
    path = tmp_path / "notes.npz"
    path.write_text("indptr,indices\n0,1\n")
    with pytest.raises(GraphFormatError) as err:
        load_dataset(str(path))
    msg = one_line(err)
    assert msg.startswith(f"{path} is not a .npz file (zip archive") and "pickle" not in msg


def test_npy_file_named_npz(tmp_path):
    path = tmp_path / "one.npz"
    with open(path, "wb") as f:
        np.save(f, np.arange(5))
    with pytest.raises(GraphFormatError, match=r"is a \.npy file \(one array\), not a \.npz"):
        load_dataset(str(path))


def test_pickled_member_is_named(tmp_path, cdata):
    arr = arrays(cdata)
    arr["label"] = np.array([object()] * cdata.num_nodes, dtype=object)
    path = tmp_path / "obj.npz"
    np.savez(path, **arr)
    with pytest.raises(GraphFormatError) as err:
        load_dataset(str(path))
    assert "'label' holds Python objects" in one_line(err)


def test_damaged_compressed_member_is_one_line(tmp_path, cdata):
    """Today's main: zlib.error traceback."""
    path = tmp_path / "z.npz"
    np.savez_compressed(path, **arrays(cdata))
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        at = z.getinfo("feat.npy").header_offset
    name_len, extra_len = (int.from_bytes(raw[at + i:at + i + 2], "little") for i in (26, 28))
    start = at + 30 + name_len + extra_len + 40
    raw[start:start + 64] = bytes(64)  # inside feat's deflate stream; zip directory intact
    path.write_bytes(bytes(raw))
    with pytest.raises(GraphFormatError) as err:
        load_dataset(str(path))
    assert "damaged or truncated" in one_line(err)


@pytest.mark.parametrize("key,value,match", [
    ("label", lambda a: a["label"].astype(np.float64), "'label' must hold integer class ids"),
    ("feat", lambda a: a["feat"].astype(str), "'feat' must hold numbers"),
    ("indices", lambda a: a["indices"].astype(np.float32), "'indices' must hold integers"),
    ("train_idx", lambda a: np.isin(np.arange(a["feat"].shape[0]), a["train_idx"]),
     "'train_idx' must hold integers"),
])
def test_dtype_problems_are_named(tmp_path, cdata, key, value, match):
    arr = arrays(cdata)
    arr[key] = value(arr)
    path = save(tmp_path / "d.npz", **arr)
    with pytest.raises(GraphFormatError) as err:
        load_dataset(str(path))
    assert match in one_line(err)


# -- 5. damaged caches heal ----------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["garbage", "truncated", "asymmetric"])
def test_damaged_synthetic_cache_is_rebuilt_with_one_warning(tmp_path, caplog, damage):
    """Today's main: the same traceback on every run until the file is deleted by hand.
    The preset's cache is its store (no .npz since issue 19): a damaged or changed file of
    it is rebuilt."""
    fresh = load_dataset("synthetic-tiny", data_root=tmp_path, progress=False)
    path = dataset_path("synthetic-tiny", tmp_path)
    assert path == fresh.store
    fresh = fresh.fingerprint()  # (the maps are dropped before their files are damaged)
    feat = path / "feat.npy"
    if damage == "garbage":
        feat.write_bytes(b"\x00" * 1000)
    elif damage == "truncated":
        feat.write_bytes(feat.read_bytes()[:5000])
    else:  # readable, but the graph lost one reverse entry (same sizes): changed in place
        indices = np.load(path / "indices.npy", mmap_mode="r+")
        indices[0] = (int(indices[0]) + 1) % 2000
        indices.flush()
        del indices
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="twopgraph"):
        again = load_dataset("synthetic-tiny", data_root=tmp_path, progress=False)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and str(path) in warnings[0] and "rebuilding" in warnings[0]
    assert "\n" not in warnings[0]
    assert again.fingerprint() == fresh
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="twopgraph"):
        load_dataset("synthetic-tiny", data_root=tmp_path, progress=False)
    assert not caplog.records  # healed for good


def test_damaged_ogb_cache_is_reconverted_with_one_warning(tmp_path, caplog, monkeypatch):
    from test_datasets import check_arxiv, write_ogb_arxiv

    def offline(*args, **kwargs):
        raise urllib.error.URLError("network disabled in tests")
    monkeypatch.setattr(urllib.request, "urlopen", offline)
    w = write_ogb_arxiv(tmp_path)
    store = load_dataset("ogbn-arxiv", data_root=tmp_path, progress=False).store
    feat = store / "feat.npy"
    feat.write_bytes(feat.read_bytes()[:300])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="twopgraph"):
        data = load_dataset("ogbn-arxiv", data_root=tmp_path, progress=False)
    check_arxiv(data, w)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and str(store) in warnings[0], warnings
    assert data.store == store and feat.stat().st_size > 300  # rebuilt in place


def test_user_npz_is_never_rebuilt_only_refused(tmp_path, cdata):
    path = cdata.save_npz(tmp_path / "mine.npz")
    path.write_bytes(path.read_bytes()[:4000])
    with pytest.raises(GraphFormatError, match="damaged or truncated"):
        load_dataset("mine", data_root=tmp_path)
    assert path.stat().st_size == 4000


# -- 6. GraphData built in Python ----------------------------------------------------------------
def test_python_graphdata_dtypes_are_converted_at_construction(cdata):
    d = GraphData(cdata.graph, cdata.feat.astype(np.float64), cdata.label.astype(np.int32)[:, None],
                  cdata.train_idx.astype(np.int32), cdata.val_idx.astype(np.uint16),
                  list(cdata.test_idx), node_ids=np.arange(cdata.num_nodes, dtype=np.int32))
    assert d.feat.dtype == np.float32 and d.label.dtype == np.int64 and d.label.ndim == 1
    assert all(getattr(d, s).dtype == np.int64 for s in ("train_idx", "val_idx", "test_idx"))
    assert d.node_ids.dtype == np.int64 and d.num_classes == cdata.num_classes
    d.validate()
    assert d.fingerprint() == replace(cdata, node_ids=np.arange(cdata.num_nodes)).fingerprint()
    rev = GraphData(cdata.graph, cdata.feat[::-1], cdata.label, cdata.train_idx, cdata.val_idx,
                    cdata.test_idx)
    assert rev.feat.flags.c_contiguous  # torch.from_numpy refuses negative strides


@pytest.mark.parametrize("change,match", [
    (dict(label="float"), "label must hold integer class ids"),
    (dict(feat="str"), "feat must hold numbers"),
    (dict(train_idx="mask"), "train_idx is a boolean mask"),
    (dict(feat="nan"), "feat has NaN or infinite values \\(first: vertex 3\\)"),
])
def test_python_graphdata_refusals_are_clear(cdata, change, match):
    kw = {}
    if change.get("label") == "float":
        kw["label"] = cdata.label.astype(np.float64)
    if change.get("feat") == "str":
        kw["feat"] = cdata.feat.astype(str)
    if change.get("feat") == "nan":
        feat = cdata.feat.copy()
        feat[3, 1] = np.nan
        kw["feat"] = feat
    if change.get("train_idx") == "mask":
        kw["train_idx"] = np.isin(np.arange(cdata.num_nodes), cdata.train_idx)
    d = replace(cdata, **kw)
    with pytest.raises(GraphFormatError, match=match) as err:
        d.validate()
    one_line(err)


def test_generated_and_converted_graphs_pass_without_a_second_check():
    d = generate("synthetic-tiny")
    d.validate()
    assert d.graph.undirected_problem() is None
    g = CSRGraph.from_edges([0, 1, 1], [1, 0, 2], num_nodes=3)
    assert g.__dict__.get("_undirected")  # undirected by construction


# -- issue 22, item 9: messages that say what is wrong ------------------------------------------
@pytest.mark.parametrize("coo", [False, True])
def test_zero_column_features_say_zero_columns(tmp_path, cdata, coo):
    arr = arrays(cdata)
    arr["feat"] = np.zeros((cdata.num_nodes, 0), dtype=np.float32)
    if coo:
        src, dst = edges(cdata.graph)
        del arr["indptr"], arr["indices"]
        arr["edge_index"] = np.stack([src, dst])
    path = save(tmp_path / "d.npz", **arr)
    with pytest.raises(GraphFormatError) as err:
        load_dataset(str(path))
    msg = one_line(err)
    assert "has 0 columns" in msg and "truncated" not in msg


@pytest.mark.parametrize("coo", [False, True])
def test_extra_npz_keys_are_named_in_one_warning(tmp_path, cdata, caplog, coo):
    arr = arrays(cdata)
    if coo:
        src, dst = edges(cdata.graph)
        del arr["indptr"], arr["indices"]
        arr["edge_index"] = np.stack([src, dst])
    arr["edge_weight"] = np.ones(cdata.graph.num_edges, dtype=np.float32)
    arr["year"] = np.zeros(cdata.num_nodes, dtype=np.int64)
    path = save(tmp_path / "d.npz", **arr)
    with caplog.at_level(logging.WARNING, logger="twopgraph"):
        load_dataset(str(path), data_root=tmp_path / "root")
    lines = [r.getMessage() for r in caplog.records if "ignoring" in r.getMessage()]
    assert len(lines) == 1 and "'edge_weight', 'year'" in lines[0], caplog.text


def test_from_scipy_says_that_weights_are_ignored(caplog):
    import scipy.sparse as sp
    adj = sp.coo_matrix(([1.0, np.nan, -2.0, 0.5], ([0, 1, 2, 3], [1, 2, 3, 0])), shape=(4, 4))
    with caplog.at_level(logging.WARNING, logger="twopgraph"):
        GraphData.from_scipy(adj, np.eye(4), [0, 1, 0, 1], train_idx=[0, 1], test_idx=[2, 3])
    msgs = [r.getMessage() for r in caplog.records]
    assert len(msgs) == 1 and "edge weights are ignored" in msgs[0]
    assert "3 of 4 entries are not 1: 1 NaN, 1 negative" in msgs[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="twopgraph"):  # 0/1 adjacency: no warning
        GraphData.from_scipy(sp.eye(4, k=1) + sp.eye(4, k=-1), np.eye(4), [0, 1, 0, 1],
                             train_idx=[0, 1], test_idx=[2, 3])
    assert not caplog.records


def test_one_class_training_set_is_warned(tmp_path, cdata, caplog):
    one = replace(cdata, label=np.where(np.isin(np.arange(cdata.num_nodes), cdata.train_idx),
                                        1, cdata.label))
    assert "all hold class 1" in one.class_problem()
    single = replace(cdata, label=np.zeros_like(cdata.label), num_classes=1)
    assert "one class only" in single.class_problem()
    assert cdata.class_problem() is None
    from twopgraph.run.train import train
    cfg = TrainConfig.of(epochs=1, batch_size=64, out=str(tmp_path / "o"), progress=False,
                         renumber=False, schedule="random", eval_every=0)
    with caplog.at_level(logging.WARNING, logger="twopgraph"):
        train(cfg, one)
    assert "the training vertices of" in caplog.text


def test_uint8_mask_as_split_gets_the_boolean_mask_hint(tmp_path, cdata):
    arr = arrays(cdata)
    arr["train_idx"] = np.isin(np.arange(cdata.num_nodes), cdata.train_idx).astype(np.uint8)
    arr["val_idx"] = arr["test_idx"] = np.zeros(0, dtype=np.int64)
    path = save(tmp_path / "d.npz", **arr)
    with pytest.raises(GraphFormatError) as err:
        load_dataset(str(path))
    msg = one_line(err)
    assert "repeats ids" in msg and "0/1 mask" in msg and "np.flatnonzero(mask)" in msg
