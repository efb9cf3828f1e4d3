"""Evaluation that grows with what is scored (issue 19, part 4): restricted exact inference
(:func:`~twopgraph.inference.scored_inference`) gives whole-graph inference's logits on the
scored vertices, ``--eval-scope auto`` picks the cheaper scope, its tables are sized by the
L-hop neighbourhood (not by N), a run keeps only the scored rows and builds the N x C logits
only when asked, and ``twopgraph predict`` streams its rows."""

from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import community_data, run_cli
from test_models import _randomize_params

import twopgraph.inference.passes as passes_mod
import twopgraph.inference.push as push_mod
import twopgraph.inference.reads as reads_mod
import twopgraph.inference.scope as scope_mod
import twopgraph.inference.scored as scored_mod
import twopgraph.inference.tables as tables_mod
import twopgraph.run.predict as predict_mod
import twopgraph.run.train as tr
from twopgraph.config import TrainConfig
from twopgraph.errors import ConfigError, GraphFormatError
from twopgraph.graph.data import CSRGraph, GraphData
from twopgraph.inference import (
    EvalTable,
    ScoredLogits,
    accuracy,
    evaluate_scored,
    expand_frontier,
    layerwise_inference,
    plan_scope,
    scored_ids,
    scored_inference,
)
from twopgraph.models import build_model
from twopgraph.sampler.neighbor import NeighborSampler

CPU = torch.device("cpu")


def with_isolated(data: GraphData, extra: int = 7) -> GraphData:
    """``data`` with ``extra`` isolated vertices appended (no edges, random features)."""
    g = data.graph
    indptr = np.concatenate([g.indptr, np.full(extra, g.indptr[-1], dtype=np.int64)])
    rng = np.random.default_rng(5)
    feat = np.concatenate([data.feat, rng.normal(size=(extra, data.num_features))
                           .astype(np.float32)])
    label = np.concatenate([data.label, rng.integers(0, data.num_classes, extra)])
    n = data.num_nodes
    new = np.arange(n, n + extra)
    return GraphData(CSRGraph(indptr, g.indices), feat, label, data.train_idx,
                     np.sort(np.concatenate([data.val_idx, new[:3]])),
                     np.sort(np.concatenate([data.test_idx, new[3:]])), name="isolated")


@pytest.fixture(scope="module")
def cdata() -> GraphData:
    return with_isolated(community_data())


def ring_graph(n: int, steps=(1, 7)) -> CSRGraph:
    """A sparse undirected circulant graph (degree 2 x len(steps)): L-hop neighbourhoods of
    a few vertices stay a small part of it."""
    v = np.arange(n)
    src = np.concatenate([v for _ in steps] * 2)
    dst = np.concatenate([(v + s) % n for s in steps] + [(v - s) % n for s in steps])
    return CSRGraph.from_edges(src, dst, n)


def _model(f: int, c: int, name: str, hidden: int, layers: int, seed: int = 0):
    m = build_model(name, f, hidden, c, num_layers=layers)
    _randomize_params(m, seed)
    return m


# -- restricted == whole graph ----------------------------------------------------------------
@pytest.mark.parametrize("name", ["sage", "gcn"])
@pytest.mark.parametrize("hidden, layers", [(16, 2), (3, 2), (16, 3), (64, 3), (3, 3)])
def test_restricted_equals_whole_graph_on_the_scored_vertices(cdata, name, hidden, layers):
    """Every model shape (hidden 3 < 8 features: layer 0 projects; 64 > 4 classes: the last
    layer is fused), scored sets unsorted with duplicates and isolated vertices, ranges of a
    few edges and chunks cut down to a dozen rows: the logits of whole-graph
    inference to 1e-5."""
    m = _model(cdata.num_features, cdata.num_classes, name, hidden, layers)
    sampler = NeighborSampler(cdata.graph, [-1] * layers)
    want = layerwise_inference(m, sampler, cdata.feat, CPU, batch_edges=97)
    n = cdata.num_nodes
    rng = np.random.default_rng(1)
    sets = [cdata.test_idx, rng.permutation(cdata.val_idx)[:40],
            np.concatenate([cdata.val_idx[:9], cdata.val_idx[:9], [n - 1, n - 1, 0]]),
            np.arange(n)]
    small = {"batch_edges": 50, "chunk_bytes": 4 * 16 * 12}  # pieces cut to ~12 rows
    for s, kw in [(x, {"batch_edges": 97}) for x in sets] + [(sets[2], small)]:
        got = scored_inference(m, sampler, cdata.feat, CPU, s, **kw)
        assert np.array_equal(got.ids, np.unique(s))
        torch.testing.assert_close(got.take(s), want[torch.from_numpy(s)], rtol=1e-5,
                                   atol=1e-5)


def _streaming_case(cdata, name: str, hidden: int, layers: int):
    """A model, its full-neighbour sampler, whole-graph logits, scored ids (duplicates and
    isolated vertices) and their scored-scope plan: the streaming tests' common case."""
    m = _model(cdata.num_features, cdata.num_classes, name, hidden, layers)
    sampler = NeighborSampler(cdata.graph, [-1] * layers)
    want = layerwise_inference(m, sampler, cdata.feat, CPU, batch_edges=97)
    n = cdata.num_nodes
    s = np.concatenate([cdata.val_idx[:9], cdata.val_idx[:9], [n - 1, n - 2, 0]])
    return m, sampler, want, s, plan_scope(m, cdata.graph, scored_ids(n, s), "scored")


@pytest.mark.parametrize("name", ["sage", "gcn"])
@pytest.mark.parametrize("hidden, layers", [(16, 2), (3, 3), (64, 3), (16, 4)])
@pytest.mark.parametrize("place", ["host", "disk"])
def test_streamed_layers_equal_whole_graph(cdata, name, hidden, layers, place, tmp_path):
    """Every layer above the first streamed (``stream=True``: outputs pushed into the next
    layer's accumulators chunk by chunk, ranges of 97 edges and chunks of a dozen rows, so
    a dst's neighbours arrive over many tiles), the tables in memory or in scratch files:
    whole-graph inference's logits to 1e-5, and ``plan.streamed`` says so."""
    m, sampler, want, s, plan = _streaming_case(cdata, name, hidden, layers)
    got = scored_inference(m, sampler, cdata.feat, CPU, s, plan=plan, stream=True,
                           batch_edges=97, chunk_bytes=4 * 16 * 12, place=place,
                           scratch_dir=tmp_path)
    assert plan.streamed == [False] + [True] * (layers - 1)
    torch.testing.assert_close(got.take(s), want[torch.from_numpy(s)], rtol=1e-5, atol=1e-5)
    off = scored_inference(m, sampler, cdata.feat, CPU, s, plan=plan, stream=False)
    assert plan.streamed == [False] * layers
    torch.testing.assert_close(off.values, got.values, rtol=1e-5, atol=1e-5)


def test_streaming_drops_the_large_level_table(monkeypatch):
    """Papers' shape in small: the 2-hop level far larger than the 1-hop one. Streamed (the
    default rule), no table has the 2-hop level's rows -- layer 0's outputs go straight into
    layer 1's accumulators over the 1-hop level; unstreamed, its |V_1| x hidden table is
    there. Same logits either way."""
    n, f = 20_000, 8
    g = ring_graph(n, steps=(1, 7, 50, 301))
    feat = np.random.default_rng(0).normal(size=(n, f)).astype(np.float32)
    m = _model(f, 5, "sage", 32, 3)
    sampler = NeighborSampler(g, [-1] * 3)
    scored = np.arange(0, n, n // 10)
    plan = plan_scope(m, g, scored_ids(n, scored), "scored")
    rows = _spy_rows(monkeypatch)
    auto = scored_inference(m, sampler, feat, CPU, scored, plan=plan)
    assert plan.streamed == [False, True, True]
    big = plan.rows[0]  # |V_1|: layer 0's outputs
    assert big > 4 * plan.rows[1] and max(rows) <= plan.rows[1]
    rows.clear()
    off = scored_inference(m, sampler, feat, CPU, scored, plan=plan, stream=False)
    assert big in rows
    torch.testing.assert_close(auto.values, off.values, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["sage", "gcn"])
@pytest.mark.parametrize("hidden, layers", [(16, 2), (64, 3), (16, 4)])
@pytest.mark.parametrize("place, pass_rows", [("host", None), ("host", 37), ("disk", 11)])
def test_streamed_inputs_equal_whole_graph(cdata, name, hidden, layers, place, pass_rows,
                                           tmp_path):
    """Layer 0's inputs streamed (``stream_inputs=True``: the feature table read in order,
    each row pushed into its neighbours' sums, in passes over ranges of layer 0's vertices,
    one pass or many, tables in memory or in scratch files), with the layers above streamed
    or not: whole-graph inference's logits to 1e-5, and ``plan.input_passes`` counts the
    passes."""
    m, sampler, want, s, plan = _streaming_case(cdata, name, hidden, layers)
    m1 = plan.rows[0]
    passes = 1 if pass_rows is None else -(-m1 // pass_rows)
    for stream in (True, False):
        got = scored_inference(m, sampler, cdata.feat, CPU, s, plan=plan, stream=stream,
                               stream_inputs=True, pass_rows=pass_rows, batch_edges=97,
                               chunk_bytes=4 * 16 * 12, place=place, scratch_dir=tmp_path)
        assert plan.input_passes == passes
        torch.testing.assert_close(got.take(s), want[torch.from_numpy(s)], rtol=1e-5,
                                   atol=1e-5)


def test_one_input_pass_holds_memory_at_a_time(cdata, monkeypatch):
    """A pass's accumulators are sized to most of the memory left: the previous pass's must
    be gone when the next one's are made (they were not, and a 1/4 papers run in 12 GiB was
    killed in its second pass)."""
    import weakref

    live, seen = weakref.WeakSet(), []

    class Counted(push_mod._Push):
        def __init__(self, *a, **k):
            seen.append(len(live))
            super().__init__(*a, **k)
            live.add(self)

    for mod in (scored_mod, passes_mod):  # the modules that make _Push
        monkeypatch.setattr(mod, "_Push", Counted)
    m, sampler, want, s, plan = _streaming_case(cdata, "sage", 16, 2)
    got = scored_inference(m, sampler, cdata.feat, CPU, s, plan=plan, stream=False,
                           stream_inputs=True, pass_rows=-(-plan.rows[0] // 3), batch_edges=97)
    assert plan.input_passes == 3 and seen == [0, 0, 0]
    torch.testing.assert_close(got.take(s), want[torch.from_numpy(s)], rtol=1e-5, atol=1e-5)


def test_streamed_inputs_read_the_table_in_order_once_per_pass(cdata, monkeypatch):
    """Streamed, layer 0 reads the feature table in ascending ranges that cover it once per
    pass, and by id only each dst's own row, once (never a chunk's neighbours gathered at
    random); gathered, it reads rows by id. A layer 0 that projects (hidden < features)
    gathers: its inputs are projected once each anyway."""
    from twopgraph.cache.host import HostFeatures
    src = HostFeatures(cdata.feat)
    calls = []
    monkeypatch.setattr(src, "read", lambda ids: calls.append(("read", len(ids))) or
                        HostFeatures.read(src, ids))
    monkeypatch.setattr(src, "read_range", lambda a, b: calls.append(("range", a, b)) or
                        HostFeatures.read_range(src, a, b))
    m = _model(cdata.num_features, cdata.num_classes, "sage", 16, 3)
    sampler = NeighborSampler(cdata.graph, [-1] * 3)
    s = cdata.val_idx
    plan = plan_scope(m, cdata.graph, scored_ids(cdata.num_nodes, s), "scored")
    got = scored_inference(m, sampler, src, CPU, s, plan=plan, stream_inputs=True,
                           pass_rows=-(-plan.rows[0] // 3), batch_edges=97)
    assert plan.input_passes == 3
    covered = [c[1:] for c in calls if c[0] == "range"]
    per_pass = len(covered) // 3
    first = covered[:per_pass]
    assert covered == first * 3
    assert first[0][0] == 0 and first[-1][1] == cdata.num_nodes and all(
        b == a2 for (_, b), (a2, _) in zip(first, first[1:]))
    assert sum(c[1] for c in calls if c[0] == "read") == plan.rows[0]  # the dst rows
    calls.clear()
    off = scored_inference(m, sampler, src, CPU, s, plan=plan, stream_inputs=False)
    assert plan.input_passes == 0 and {c[0] for c in calls} == {"read"}
    torch.testing.assert_close(got.values, off.values, rtol=1e-5, atol=1e-5)
    thin = _model(cdata.num_features, cdata.num_classes, "sage", 3, 2)
    thin_plan = plan_scope(thin, cdata.graph, scored_ids(cdata.num_nodes, s), "scored")
    scored_inference(thin, NeighborSampler(cdata.graph, [-1] * 2), src, CPU, s,
                     plan=thin_plan, stream_inputs=True)
    assert thin_plan.input_passes == 0


@pytest.mark.parametrize("name", ["sage", "gcn"])
@pytest.mark.parametrize("hidden", [16, 3])
def test_pushed_edges_scatter_like_sorted_tiles(cdata, name, hidden, monkeypatch):
    """Streamed layers and inputs add each edge straight into the sums (``message`` x
    ``edge_weight``, :func:`~twopgraph.graph.spmm.scatter_rows`) or through ``conv.aggregate`` of
    target-sorted tiles (``SCATTER`` False, and any conv without the two methods): the same
    logits, those of whole-graph inference. hidden 3 < 8 features: messages projected."""
    m = _model(cdata.num_features, cdata.num_classes, name, hidden, 3)
    sampler = NeighborSampler(cdata.graph, [-1] * 3)
    want = layerwise_inference(m, sampler, cdata.feat, CPU, batch_edges=97)
    s = cdata.val_idx
    plan = plan_scope(m, cdata.graph, scored_ids(cdata.num_nodes, s), "scored")
    calls = []
    real = push_mod.scatter_rows
    monkeypatch.setattr(push_mod, "scatter_rows", lambda *a: calls.append(1) or real(*a))
    got = {}
    for scatter in (True, False):
        monkeypatch.setattr(push_mod, "SCATTER", scatter)
        calls.clear()
        got[scatter] = scored_inference(m, sampler, cdata.feat, CPU, s, plan=plan, stream=True,
                                        stream_inputs=True, pass_rows=40, batch_edges=97)
        assert bool(calls) == scatter
        torch.testing.assert_close(got[scatter].take(s), want[torch.from_numpy(s)],
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_streamed_inputs_from_a_memory_map(cdata, tmp_path, dtype):
    """A memory-mapped feature table and CSR (a store's) are read by file in ranges
    (:func:`read_ranges`), the table's pages dropped behind when it exceeds the memory:
    the same logits as gathering, in float16 too."""
    from twopgraph.cache.host import HostFeatures
    np.save(tmp_path / "feat.npy", cdata.feat.astype(dtype))
    np.save(tmp_path / "indices.npy", cdata.graph.indices)
    feat = np.load(tmp_path / "feat.npy", mmap_mode="r")
    g = CSRGraph(cdata.graph.indptr, np.load(tmp_path / "indices.npy", mmap_mode="r"))
    assert passes_mod._plain_table(HostFeatures(feat)) is feat
    m = _model(cdata.num_features, cdata.num_classes, "gcn", 16, 3)
    sampler = NeighborSampler(g, [-1] * 3)
    s = cdata.test_idx
    plan = plan_scope(m, g, scored_ids(cdata.num_nodes, s), "scored")
    want = scored_inference(m, sampler, HostFeatures(feat), CPU, s, plan=plan,
                            stream_inputs=False)
    monkeypatch = pytest.MonkeyPatch()
    for mod in (tables_mod, passes_mod):  # drop pages
        monkeypatch.setattr(mod, "available_host_bytes", lambda *a, **k: 1)
    try:
        got = scored_inference(m, sampler, HostFeatures(feat), CPU, s, plan=plan,
                               stream_inputs=True, pass_rows=50, batch_edges=300)
    finally:
        monkeypatch.undo()
    assert plan.input_passes > 1
    torch.testing.assert_close(got.values, want.values, rtol=1e-5, atol=1e-5)


def test_read_ranges_reads_files_and_arrays_alike(tmp_path):
    """:func:`read_ranges` gives each range's rows, by file for a memory map (also a view of
    one, at its offset) and by slicing otherwise; a file shorter than its array is one
    line."""
    a = np.arange(10_000 * 3, dtype=np.int32).reshape(10_000, 3)
    np.save(tmp_path / "a.npy", a)
    mm = np.load(tmp_path / "a.npy", mmap_mode="r")
    ranges = [(0, 1), (1, 4097), (4097, 4097), (4097, 10_000)]
    for arr, want in [(mm, a), (mm[1234:], a[1234:]), (a, a)]:
        rs = [(x, min(y, arr.shape[0])) for x, y in ranges if x <= arr.shape[0]]
        got = list(reads_mod.read_ranges(arr, rs, drop=True))
        assert all(np.array_equal(g, want[x:y]) for g, (x, y) in zip(got, rs))
    assert reads_mod._file_of(mm[1234:]) == (str(tmp_path / "a.npy"),
                                             mm.offset + 1234 * 12)
    assert reads_mod._file_of(a) is None and reads_mod._file_of(mm[:, 1]) is None
    with open(tmp_path / "a.npy", "r+b") as f:
        f.truncate(mm.offset + 5000 * 12)
    with pytest.raises(GraphFormatError, match="the file ends at byte"):
        list(reads_mod.read_ranges(mm, [(0, 4000), (4000, 10_000)]))


def test_inputs_stream_by_default_when_the_table_outgrows_the_memory(cdata, monkeypatch):
    """The default rule: the inputs are gathered while the feature table fits in
    INPUT_CACHE_SHARE of the available memory, streamed beyond (same logits)."""
    m = _model(cdata.num_features, cdata.num_classes, "sage", 16, 3)
    sampler = NeighborSampler(cdata.graph, [-1] * 3)
    s = cdata.test_idx
    plan = plan_scope(m, cdata.graph, scored_ids(cdata.num_nodes, s), "scored")
    table = cdata.feat.nbytes
    for mod in (tables_mod, passes_mod):
        monkeypatch.setattr(mod, "available_host_bytes", lambda *a, **k: 4 * table)
    roomy = scored_inference(m, sampler, cdata.feat, CPU, s, plan=plan)
    assert plan.input_passes == 0
    for mod in (tables_mod, passes_mod):
        monkeypatch.setattr(mod, "available_host_bytes", lambda *a, **k: table)
    tight = scored_inference(m, sampler, cdata.feat, CPU, s, plan=plan)
    assert plan.input_passes >= 1
    torch.testing.assert_close(tight.values, roomy.values, rtol=1e-5, atol=1e-5)


def test_a_store_knows_its_graph_is_undirected(tmp_path, monkeypatch):
    """A store records that its graph was checked undirected, so streaming on it does not
    check all E entries again; a renumbered store inherits it."""
    import twopgraph.graph.data as graph_mod
    from twopgraph.store.reader import open_store
    from twopgraph.store.writer import permuted_store, write_store
    data = sparse_data(600)
    folder = write_store(data, tmp_path / "s")
    assert json.loads((folder / "store.json").read_text())["undirected"] is True
    perm = np.random.default_rng(0).permutation(600)
    renum = permuted_store(open_store(folder), perm, tmp_path / "r")
    assert json.loads((tmp_path / "r" / "store.json").read_text())["undirected"] is True
    calls = []
    monkeypatch.setattr(graph_mod, "csr_violations", lambda *a: calls.append(1))
    for d in (open_store(folder), renum):
        assert d.graph.undirected_problem() is None
    assert calls == []


def test_a_directed_graph_is_not_streamed(cdata):
    """Streaming pushes a vertex's output along its own CSR row, which lists the dsts it
    feeds only in an undirected graph: a directed graph keeps the tables, with the same
    logits as whole-graph inference."""
    g = cdata.graph
    keep = g.indices.astype(np.int64) > np.repeat(np.arange(g.num_nodes), g.degrees())
    src = np.repeat(np.arange(g.num_nodes), g.degrees())[keep]
    directed = CSRGraph.from_edges(src, g.indices[keep].astype(np.int64), g.num_nodes,
                                   symmetrize=False)
    assert directed.undirected_problem() is not None
    m = _model(cdata.num_features, cdata.num_classes, "sage", 16, 3)
    sampler = NeighborSampler(directed, [-1] * 3)
    want = layerwise_inference(m, sampler, cdata.feat, CPU)
    plan = plan_scope(m, directed, scored_ids(g.num_nodes, cdata.val_idx), "scored")
    got = scored_inference(m, sampler, cdata.feat, CPU, cdata.val_idx, plan=plan, stream=True)
    assert plan.streamed == [False, False, False]
    torch.testing.assert_close(got.values, want[torch.from_numpy(cdata.val_idx)], rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("name", ["sage", "gcn"])
def test_empty_and_isolated_scored_sets(cdata, name):
    m = _model(cdata.num_features, cdata.num_classes, name, 16, 3)
    sampler = NeighborSampler(cdata.graph, [-1] * 3)
    want = layerwise_inference(m, sampler, cdata.feat, CPU)
    empty = scored_inference(m, sampler, cdata.feat, CPU, np.zeros(0, dtype=np.int64))
    assert empty.values.shape == (0, cdata.num_classes) and empty.num_rows == 0
    iso = np.arange(cdata.num_nodes - 7, cdata.num_nodes)  # the isolated vertices alone
    plan = plan_scope(m, cdata.graph, scored_ids(cdata.num_nodes, iso), "scored")
    assert plan.rows == [7, 7, 7] and plan.edges == [0, 0, 0]
    got = scored_inference(m, sampler, cdata.feat, CPU, iso, plan=plan)
    torch.testing.assert_close(got.values, want[-7:], rtol=1e-5, atol=1e-5)


def test_gcn_uses_the_samplers_degrees(cdata):
    """GCN's normalisation takes the degrees whole-graph inference's blocks carry (the full
    graph's, or a sampler's override), not those of the restricted blocks."""
    m = _model(cdata.num_features, cdata.num_classes, "gcn", 16, 2)
    deg = cdata.graph.degrees() + np.arange(cdata.num_nodes) % 3  # an override
    sampler = NeighborSampler(cdata.graph, [-1, -1], degrees=deg)
    want = layerwise_inference(m, sampler, cdata.feat, CPU)
    got = scored_inference(m, sampler, cdata.feat, CPU, cdata.test_idx)
    torch.testing.assert_close(got.take(cdata.test_idx),
                               want[torch.from_numpy(cdata.test_idx)], rtol=1e-5, atol=1e-5)


def test_tables_on_disk_agree(cdata, tmp_path):
    m = _model(cdata.num_features, cdata.num_classes, "sage", 16, 3)
    sampler = NeighborSampler(cdata.graph, [-1] * 3)
    host = scored_inference(m, sampler, cdata.feat, CPU, cdata.val_idx, place="host")
    disk = scored_inference(m, sampler, cdata.feat, CPU, cdata.val_idx, place="disk",
                            scratch_dir=tmp_path)
    torch.testing.assert_close(host.values, disk.values, rtol=0, atol=0)


def test_levels_are_the_exact_in_neighbourhoods(cdata):
    g = cdata.graph
    s = scored_ids(cdata.num_nodes, cdata.test_idx[:30])
    assert s.dtype == np.int32
    want = set(s.tolist())
    for v in s.tolist():
        want.update(g.indices[g.indptr[v]:g.indptr[v + 1]].tolist())
    got = expand_frontier(g, s, batch_edges=5)  # many small pieces, merged
    assert got.dtype == np.int32 and got.tolist() == sorted(want)


def test_bad_scored_ids_are_one_line(cdata):
    with pytest.raises(ConfigError, match="outside the graph's 607 vertices"):
        scored_ids(cdata.num_nodes, np.array([3, 607]))
    with pytest.raises(ConfigError, match="integers"):
        scored_ids(cdata.num_nodes, np.array([0.5]))
    lg = ScoredLogits(torch.zeros((2, 3)), np.array([1, 4]))
    with pytest.raises(ValueError, match="vertex 2 has no logits"):
        lg.take([4, 2])


# -- the auto choice --------------------------------------------------------------------------
def test_auto_takes_scored_for_a_small_neighbourhood_and_all_for_the_whole_graph(monkeypatch):
    g = ring_graph(5000)
    m = _model(8, 3, "sage", 16, 3)
    few = plan_scope(m, g, scored_ids(5000, np.arange(0, 5000, 250)), "auto")
    assert few.scope == "scored" and few.rows[-1] == 20 and max(few.rows) < 500
    assert few.choice["scope"] == "scored" and few.choice["ratio"] < 0.5
    assert few.record()["eval_scope"] == "scored" and few.record()["eval_rows"] == few.rows
    calls = []
    real = scope_mod.expand_frontier
    monkeypatch.setattr(scope_mod, "expand_frontier",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    every = plan_scope(m, g, scored_ids(5000, np.arange(5000)), "auto")
    assert every.scope == "all" and every.rows == [5000] * 3 and every.levels is None
    assert every.choice["scope"] == "all" and every.choice["cost_scored"] is None
    assert len(calls) == 1  # expansion stopped once the estimate passed the threshold
    calls.clear()
    assert plan_scope(m, g, scored_ids(5000, np.arange(5000)), "scored").scope == "scored"
    assert plan_scope(m, g, scored_ids(5000, [1]), "all").scope == "all"
    with pytest.raises(ConfigError, match="unknown eval scope 'some'"):
        plan_scope(m, g, scored_ids(5000, [1]), "some")


def test_evaluate_scored_gives_the_scored_rows_either_way(cdata):
    m = _model(cdata.num_features, cdata.num_classes, "gcn", 16, 2)
    sampler = NeighborSampler(cdata.graph, [-1, -1])
    s = np.concatenate([cdata.val_idx, cdata.test_idx])
    a, pa = evaluate_scored(m, sampler, cdata.feat, CPU, s, scope="all")
    b, pb = evaluate_scored(m, sampler, cdata.feat, CPU, s, scope="scored")
    assert (pa.scope, pb.scope) == ("all", "scored")
    assert a.num_rows == b.num_rows == np.unique(s).shape[0]  # never N x C
    torch.testing.assert_close(a.values, b.values, rtol=1e-5, atol=1e-5)


# -- memory grows with what is scored ---------------------------------------------------------
def _spy_rows(monkeypatch) -> list[int]:
    """The rows of every EvalTable made from now on."""
    rows = []
    init = EvalTable.__init__

    def spy(self, r, d, where, device, scratch_dir=None):
        rows.append(r)
        init(self, r, d, where, device, scratch_dir)

    monkeypatch.setattr(EvalTable, "__init__", spy)
    return rows


def test_memory_is_sized_by_the_neighbourhood_not_by_n(monkeypatch):
    """20 scored vertices of a 200,000-vertex sparse graph, 3 layers of width 64: every table
    has at most a few hundred rows, and the host arrays made along the way stay far below one
    id per vertex (an N-entry mark or position array, an N-row table or an N-id frontier
    fails)."""
    n, f = 200_000, 8
    g = ring_graph(n)
    feat = np.random.default_rng(0).normal(size=(n, f)).astype(np.float32)
    m = _model(f, 5, "sage", 64, 3)
    sampler = NeighborSampler(g, [-1] * 3)
    scored = np.arange(0, n, n // 20)
    rows = _spy_rows(monkeypatch)
    scored_inference(m, sampler, feat, CPU, scored[:2])  # compiles the kernels first
    rows.clear()
    tracemalloc.start()
    try:
        got = scored_inference(m, sampler, feat, CPU, scored)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rows and max(rows) <= 20 * (1 + 4 + 16 + 64)  # the 2-hop ball of 20 vertices
    assert peak < n, peak  # bytes: less than one byte per vertex
    assert got.values.shape == (20, 5)
    want = layerwise_inference(m, sampler, feat, CPU)[torch.from_numpy(scored)]
    torch.testing.assert_close(got.values, want, rtol=1e-5, atol=1e-5)


# -- a run: scope recorded, scored rows kept, N x C only on demand -------------------------------
def sparse_data(n: int = 6000, f: int = 8, k: int = 3) -> GraphData:
    rng = np.random.default_rng(0)
    perm = rng.permutation(n)
    return GraphData(ring_graph(n), rng.normal(size=(n, f)).astype(np.float32),
                     rng.integers(0, k, n).astype(np.int64), np.sort(perm[:n // 2]),
                     np.sort(perm[n // 2:n // 2 + 15]), np.sort(perm[n // 2 + 15:n // 2 + 30]),
                     name="ring")


def _cfg(out, **kw) -> TrainConfig:
    base = {"epochs": 2, "hidden": 16, "fanouts": [3, 3], "batch_size": 512, "lr": 0.05,
            "seed": 0, "device": "cpu", "out": str(out), "progress": False, "threads": 1,
            "schedule": "random", "renumber": False}
    base.update(kw)
    return TrainConfig.of(**base)


def test_a_run_records_its_scope_and_keeps_only_the_scored_rows(tmp_path, monkeypatch):
    data = sparse_data()
    rows = _spy_rows(monkeypatch)
    whole_calls = []
    real = scored_mod.layerwise_inference
    for mod in (tr, scored_mod):
        monkeypatch.setattr(mod, "layerwise_inference",
                            lambda *a, **k: whole_calls.append(1) or real(*a, **k))
    res = tr.train(_cfg(tmp_path / "run", data_root=str(tmp_path / "d")), data)
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    for e in m["epochs"]:
        assert e["eval_scope"] == "scored" and e["eval_rows"][-1] == 30
        assert e["eval_rows"] == sorted(e["eval_rows"], reverse=True)
        assert e["eval_choice"]["scope"] == "scored" and len(e["eval_edges"]) == 2
        assert e["eval_streamed"] == [False, True]  # layer 0's outputs go into layer 1's sums
    assert max(rows) < data.num_nodes // 10 and not whole_calls  # nothing N-sized
    assert res.scored.num_rows == 30 and np.array_equal(
        res.scored.ids, np.union1d(data.val_idx, data.test_idx))
    assert callable(res.whole)  # not computed by the run
    lg = res.logits  # now: one whole-graph inference, in the caller's ids
    assert whole_calls == [1] and lg.shape == (data.num_nodes, 3) and res.logits is lg
    labels = torch.from_numpy(data.label)
    assert accuracy(lg, labels, data.test_idx) == m["test_acc"] == res.test_acc
    torch.testing.assert_close(res.scored.take(data.val_idx),
                               lg[torch.from_numpy(data.val_idx)], rtol=0, atol=0)


def test_scopes_give_the_same_run(tmp_path):
    """The same training, evaluated with each scope: the same scores and selection (a
    renumbered run: the scored rows come back in the caller's ids)."""
    data = community_data()
    runs = {}
    for scope in ("all", "scored", "auto"):
        res = tr.train(_cfg(tmp_path / scope, eval_scope=scope, renumber=True, epochs=3,
                            data_root=str(tmp_path / "d")), data)
        m = json.loads((tmp_path / scope / "metrics.json").read_text())
        assert all(e["eval_scope"] == (scope if scope != "auto" else e["eval_scope"])
                   for e in m["epochs"])
        runs[scope] = (res, m)
    (a, ma), (b, mb) = runs["all"], runs["scored"]
    assert mb["epochs"][0]["eval_rows"][-1] == np.union1d(data.val_idx, data.test_idx).size
    assert ma["epochs"][0]["eval_rows"] == [data.num_nodes] * 2
    for k in ("val_acc", "test_acc", "selected_epoch"):
        assert ma[k] == mb[k] == runs["auto"][1][k], k
    torch.testing.assert_close(a.scored.values, b.scored.values, rtol=1e-5, atol=1e-5)
    assert np.array_equal(a.scored.ids, b.scored.ids)
    torch.testing.assert_close(a.logits, b.logits, rtol=1e-5, atol=1e-5)


def test_eval_scope_flag_is_checked(tmp_path, capsys):
    with pytest.raises(ConfigError, match="unknown eval scope 'every'; known: auto, all, "
                                          "scored"):
        _cfg(tmp_path / "x", eval_scope="every").validate()
    rc, out, err = run_cli(["train", "--dataset", "synthetic-tiny", "--eval-scope", "every",
                            "--out", str(tmp_path / "y")], capsys)
    assert rc == 2 and len([ln for ln in err.splitlines() if ln.strip()]) == 1, err
    assert "eval scope" in err or "eval-scope" in err


# -- predict streams --------------------------------------------------------------------------
@pytest.mark.parametrize("shape, dtype", [((10,), np.int64), ((9, 3), np.float32),
                                          ((0, 4), np.float32)])
def test_write_rows_streams_a_permuted_npy(shape, dtype):
    arr = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
    order = np.random.default_rng(0).permutation(shape[0])
    for o in (None, order):
        f = io.BytesIO()
        predict_mod.write_rows(f, torch.from_numpy(arr) if arr.ndim == 2 else arr, o,
                               chunk_bytes=8)
        f.seek(0)
        got = np.load(f)
        assert got.dtype == dtype and np.array_equal(got, arr if o is None else arr[o])


def test_predict_writes_without_a_whole_permuted_copy(tmp_path, capsys, monkeypatch):
    """`twopgraph predict` never builds the N-row result in original order in memory (no
    to_original_order); the file holds it, and the logits' argmax is the class ids."""
    data = community_data()
    run = tmp_path / "run"
    res = tr.train(_cfg(run, renumber=True, data_root=str(tmp_path / "d")), data)
    want = res.logits.numpy()

    def refuse(*a, **k):
        raise AssertionError("predict permuted a whole copy")

    monkeypatch.setattr(predict_mod, "to_original_order", refuse)
    from twopgraph.run.predict import run_predict
    from twopgraph.run.predictconfig import PredictConfig
    monkeypatch.setattr(predict_mod, "_load_data",  # the run's data (passed from Python)
                        lambda mc, d, *a: (data, str(tmp_path / "d"), True))
    out_l, out_c = tmp_path / "lg.npy", tmp_path / "ids.npy"
    for out, lg in ((out_l, True), (out_c, False)):
        rec = run_predict(PredictConfig.of(checkpoint=str(run / "checkpoint.pt"),
                                           out=str(out), logits=lg))
        assert rec["rows"] == data.num_nodes
    np.testing.assert_allclose(np.load(out_l), want, rtol=1e-5, atol=1e-5)
    assert np.array_equal(np.load(out_c), np.load(out_l).argmax(1))


# -- distributed evaluation: the same restriction over the ranks ------------------------------
def _dist_eval_worker(rank, world, port, folder, result_dir):
    """Rank ``rank``: :func:`evaluate_scores` of the saved weights with each scope and table
    kind; records the figures and the rows of every hidden-layer table made (a failure: its
    traceback in ``error-rank{rank}.txt``)."""
    try:
        _dist_eval(rank, world, port, folder, result_dir)
    except BaseException:
        import traceback
        (Path(result_dir) / f"error-rank{rank}.txt").write_text(traceback.format_exc())
        raise


def _dist_eval(rank, world, port, folder, result_dir):
    import os

    from twopgraph.distributed.env import DistEnv, process_group
    from twopgraph.distributed.evaluate import ReducedTables, SharedTables, evaluate_scores
    from twopgraph.distributed.partition.load import load_part
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    rows: list[int] = []
    for cls in (SharedTables, ReducedTables):
        def new(self, layer, width, n=None, orig=cls.new):
            rows.append(self.n if n is None else n)
            return orig(self, layer, width, n)
        cls.new = new
    out = {}
    with process_group(DistEnv(rank, world, rank, world), cpu, 60):
        part = load_part(folder, rank)
        d = part.data
        for name in ("sage", "gcn"):
            model = build_model(name, d.num_features, 16, d.num_classes, 3)
            model.load_state_dict(torch.load(Path(result_dir) / f"{name}.pt"))
            for scope in ("all", "scored", "auto"):
                for shared in (True, False):
                    rows.clear()
                    res = evaluate_scores(model, part, cpu, 300, scratch_dir=Path(result_dir),
                                          shared=shared, scope=scope, metric="acc")
                    out[name, scope, shared] = (res, list(rows))
    torch.save(out, Path(result_dir) / f"dist-rank{rank}.pt")


def test_distributed_evaluation_is_restricted_too(tmp_path):
    """2 gloo ranks over a sparse graph: ``scored`` gives the whole graph's val/test accuracy
    (correct / total, as every scope), its hidden tables (shared file or all-reduced) have the
    levels' rows, not N, and ``auto`` takes it."""
    import socket

    import torch.multiprocessing as mp
    from conftest import join_all

    from twopgraph.distributed.partition.selfdep import partition_selfdep
    data = sparse_data(3000)
    partition_selfdep(data, 2, 2, tmp_path / "p", num_clusters=8)
    sampler = NeighborSampler(data.graph, [-1] * 3)
    want = {}
    for i, name in enumerate(("sage", "gcn")):
        m = _model(data.num_features, data.num_classes, name, 16, 3, seed=i)
        torch.save(m.state_dict(), tmp_path / f"{name}.pt")
        pred = layerwise_inference(m, sampler, data.feat, CPU).argmax(1).numpy()
        want[name] = [float((pred[idx] == data.label[idx]).sum()) / idx.shape[0]
                      for idx in (data.val_idx, data.test_idx)]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.start_processes(_dist_eval_worker, args=(2, port, str(tmp_path / "p"),
                                                      str(tmp_path)),
                             nprocs=2, join=False, start_method="spawn")
    join_all(ctx.processes)
    errors = "".join(p.read_text() for p in sorted(tmp_path.glob("error-rank*.txt")))
    assert [p.exitcode for p in ctx.processes] == [0, 0], errors
    ranks = [torch.load(tmp_path / f"dist-rank{r}.pt", weights_only=False) for r in (0, 1)]
    plan = plan_scope(_model(data.num_features, data.num_classes, "sage", 16, 3), data.graph,
                      scored_ids(data.num_nodes, data.val_idx, data.test_idx), "scored",
                      input_level=False)
    for out in ranks:
        for (name, scope, shared), (res, rows) in out.items():
            assert [res["val_acc"], res["test_acc"]] == want[name], (name, scope, shared)
            if scope == "all":
                assert res["eval_scope"] == "all" and rows == [data.num_nodes] * 2
            else:
                assert res["eval_scope"] == "scored" and res["eval_rows"] == plan.rows
                assert rows == plan.rows[:2] and max(rows) < data.num_nodes // 5


def test_default_input_passes_keep_their_sums_in_memory(cdata, monkeypatch):
    """Passes sized by the memory the page cache can give way to keep their sums in memory:
    a scratch file for them would be written back on every random update."""
    m = _model(cdata.num_features, cdata.num_classes, "sage", 16, 3)
    sampler = NeighborSampler(cdata.graph, [-1] * 3)
    s = cdata.test_idx
    plan = plan_scope(m, cdata.graph, scored_ids(cdata.num_nodes, s), "scored")
    fill = 4 * cdata.num_features * plan.rows[0] // 2  # room for about half the level a pass
    for mod in (scored_mod, passes_mod):
        monkeypatch.setattr(mod, "fillable_host_bytes", lambda *a, **k: fill)
    for mod in (tables_mod, passes_mod):
        monkeypatch.setattr(mod, "available_host_bytes", lambda *a, **k: fill)
    places = []
    init = EvalTable.__init__

    def spy(self, n, d, where, device, scratch_dir=None):
        places.append((where, d))
        init(self, n, d, where, device, scratch_dir)

    monkeypatch.setattr(EvalTable, "__init__", spy)
    scored_inference(m, sampler, cdata.feat, CPU, s, plan=plan, stream_inputs=True)
    sums = [w for w, d in places if d == cdata.num_features]  # the passes' (hidden: 16)
    assert plan.input_passes >= 2 and len(sums) == plan.input_passes
    assert set(sums) == {"host"}
