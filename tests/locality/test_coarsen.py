"""Scalable clustering (``--cluster-method``): multilevel label propagation + METIS, its
balance, determinism across thread counts, the method in the cache key, its memory bound, and
``--schedule auto`` skipping the clustering where a probe shows that it cannot pay."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tracemalloc

import numpy as np
import pytest
from conftest import community_data, power_law_data

from twopgraph.errors import ConfigError
from twopgraph.graph.data import CSRGraph
from twopgraph.locality import cluster as cluster_mod
from twopgraph.locality import cluster_graph, cluster_key, coarsen, edge_cut
from twopgraph.locality.cluster import resolve_method, vertex_weights

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def big_community(n=30_000, k=60, deg=8, seed=0):
    """``k`` communities (90% of the edges inside), ``n`` vertices: large enough to coarsen
    (more than ``coarsen.COARSE_MIN`` vertices)."""
    rng = np.random.default_rng(seed)
    comm = rng.integers(0, k, n)
    m = n * deg // 2
    src = rng.integers(0, n, m)
    members = np.argsort(comm, kind="stable")
    start = np.searchsorted(comm[members], np.arange(k + 1))
    c = comm[src]
    inside = rng.random(m) < 0.9
    pick = start[c] + (rng.random(m) * (start[c + 1] - start[c])).astype(np.int64)
    dst = np.where(inside, members[np.minimum(pick, n - 1)], rng.integers(0, n, m))
    g = CSRGraph.from_edges(src, dst, n)
    train = np.sort(rng.permutation(n)[: n // 10])
    return g, train, comm


@pytest.fixture(scope="module")
def big():
    return big_community()


def test_coarsen_cuts_like_metis_and_balances_training_vertices(big):
    g, train, _ = big
    k = 40
    stats = coarsen.MultilevelStats()
    parts = coarsen.multilevel_partition(g.indptr, g.indices, vertex_weights(g.num_nodes, train),
                                         k, stats=stats)
    assert len(stats.sizes) >= 2 and stats.sizes[1][0] < g.num_nodes / 3  # it coarsened
    assert parts.dtype == np.int64 and parts.shape == (g.num_nodes,)
    assert parts.min() >= 0 and parts.max() < k
    metis = cluster_graph(g, k, train_idx=train, method="metis")
    cut = edge_cut(g, parts)
    assert cut < 1.25 * metis.edge_cut
    rnd = np.random.default_rng(12345).integers(0, k, g.num_nodes)
    assert cut < 0.3 * edge_cut(g, rnd)
    per = np.bincount(parts[train], minlength=k)
    assert per.max() <= 1.35 * per.mean() and per.min() >= 0.5 * per.mean()
    sizes = np.bincount(parts, minlength=k)
    assert sizes.max() <= 1.35 * sizes.mean()


def test_lp_method_balances_and_beats_random(big):
    g, train, _ = big
    c = cluster_graph(g, 30, train_idx=train, method="lp")
    assert c.method == "lp" and c.parts.max() < 30
    per = np.bincount(c.parts[train], minlength=30)
    assert per.max() <= 1.5 * per.mean()
    rnd = np.random.default_rng(12345).integers(0, 30, g.num_nodes)
    assert c.edge_cut < 0.5 * edge_cut(g, rnd)


def test_cluster_graph_contract_for_every_method(big):
    g, train, _ = big
    for method in ("metis", "coarsen", "lp"):
        c = cluster_graph(g, 16, train_idx=train, method=method)
        assert c.parts.shape == (g.num_nodes,) and c.num_clusters == 16
        assert set(np.unique(c.parts).tolist()) <= set(range(16))
        assert c.edge_cut == edge_cut(g, c.parts) and c.method == method
        assert c.summary()["cluster_method"] == method
    with pytest.raises(ConfigError, match="cluster-method"):
        cluster_graph(g, 16, method="kahip")


def test_auto_method_by_size(monkeypatch):
    small = community_data().graph
    assert resolve_method(small, "auto") == "metis"
    monkeypatch.setattr(cluster_mod, "COARSEN_EDGES", small.num_edges)
    assert resolve_method(small, "auto") == "coarsen"
    assert resolve_method(small, "metis") == "metis"


def test_method_is_in_the_cache_key(big, tmp_path, monkeypatch):
    g, train, _ = big
    keys = {m: cluster_key(g, 12, train_idx=train, method=m) for m in ("metis", "coarsen", "lp")}
    assert len(set(keys.values())) == 3
    # auto resolves first: the same key (and cache file) as the method it picks
    assert cluster_key(g, 12, train_idx=train, method="auto") == keys["metis"]
    monkeypatch.setattr(cluster_mod, "COARSEN_EDGES", 1)
    assert cluster_key(g, 12, train_idx=train, method="auto") == keys["coarsen"]
    # METIS keys are those of earlier versions (no method entry): old caches stay valid
    from twopgraph.core.fingerprint import fingerprint
    assert keys["metis"] == fingerprint("metis-clusters", {
        "graph": g.fingerprint(), "num_clusters": 12, "seed": 0,
        "ufactor": cluster_mod.DEFAULT_UFACTOR, "format": cluster_mod.CACHE_FORMAT,
        "max_degree": cluster_mod.DEFAULT_METIS_MAX_DEGREE,
        "niter": cluster_mod.DEFAULT_METIS_NITER}, train)
    # results of different methods never mix in the cache
    a = cluster_graph(g, 12, train_idx=train, method="coarsen", cache_dir=tmp_path)
    b = cluster_graph(g, 12, train_idx=train, method="metis", cache_dir=tmp_path)
    assert not a.from_cache and not b.from_cache and a.key != b.key
    assert len(list(tmp_path.glob("*.npz"))) == 2
    again = cluster_graph(g, 12, train_idx=train, method="coarsen", cache_dir=tmp_path)
    assert again.from_cache and again.method == "coarsen"
    np.testing.assert_array_equal(again.parts, a.parts)


_THREADS_SCRIPT = textwrap.dedent("""
    import sys, numpy as np
    sys.path[:0] = [{here!r}, {tests!r}]
    from test_coarsen import big_community
    from twopgraph.runtime.jit import configure_threading, thread_count
    from twopgraph.locality import coarsen
    from twopgraph.locality.cluster import vertex_weights
    configure_threading()
    g, train, _ = big_community(n=24_000)
    vw = vertex_weights(g.num_nodes, train)
    out = []
    for t in (1, 2, 3):
        with thread_count(t):
            out.append(coarsen.multilevel_partition(g.indptr, g.indices, vw, 20, seed=3))
    assert all(np.array_equal(out[0], o) for o in out[1:]), "differs across thread counts"
    print("same")
""")


def test_deterministic_across_thread_counts():
    env = dict(os.environ, NUMBA_NUM_THREADS="3")
    r = subprocess.run([sys.executable, "-c",
                        _THREADS_SCRIPT.format(here=HERE, tests=os.path.dirname(HERE))],
                       env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0 and "same" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]


def test_seed_changes_the_result_but_not_its_quality(big):
    g, train, _ = big
    vw = vertex_weights(g.num_nodes, train)
    a = coarsen.multilevel_partition(g.indptr, g.indices, vw, 20, seed=0)
    b = coarsen.multilevel_partition(g.indptr, g.indices, vw, 20, seed=1)
    assert not np.array_equal(a, b)
    assert abs(edge_cut(g, a) - edge_cut(g, b)) < 0.2 * edge_cut(g, a)


def test_memory_stays_below_a_copy_of_the_csr(tmp_path):
    """The input CSR (memory-mapped, int32 indices) is only read: what the coarsening
    allocates through NumPy stays well below one int64 copy of ``indices`` (what handing
    the graph to METIS costs: ``_metis`` casts it to idx_t = int64)."""
    g, train, _ = big_community(n=60_000, deg=40)
    np.save(tmp_path / "indptr.npy", g.indptr)
    np.save(tmp_path / "indices.npy", g.indices.astype(np.int32))
    mg = CSRGraph(np.load(tmp_path / "indptr.npy", mmap_mode="r"),
                  np.load(tmp_path / "indices.npy", mmap_mode="r"))
    vw = vertex_weights(mg.num_nodes, train)
    coarsen.multilevel_partition(mg.indptr, mg.indices, vw, 30)  # compile outside the trace
    copy_bytes = mg.num_edges * 8
    stats = coarsen.MultilevelStats()
    tracemalloc.start()
    try:
        parts = coarsen.multilevel_partition(mg.indptr, mg.indices, vw, 30, stats=stats)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert parts.shape == (mg.num_nodes,)
    assert peak < 0.5 * copy_bytes, (peak, copy_bytes)
    # a few arrays of N (labels, weights, orders, coarse ids) and the coarse graphs (16 bytes
    # an entry: index and weight), whose entries are at most the first level's cut edges
    coarse_entries = sum(e for _, e in stats.sizes[1:])
    assert stats.sizes[1][1] < 0.5 * mg.num_edges
    assert peak < 64 * mg.num_nodes + 24 * coarse_entries, (peak, mg.num_nodes, coarse_entries)


# -- --schedule auto: the probe before clustering -------------------------------------------------
def _cfg(tmp_path, **kw):
    from twopgraph.config import TrainConfig
    base = dict(fanouts=[10, 10], batch_size=64, epochs=1, hidden=8, lr=0.01, device="cpu",
                out=str(tmp_path / "run"), progress=False, prefetch=0, threads=1,
                data_root=str(tmp_path / "data"))
    base.update(kw)
    return TrainConfig.of(**base).validate()


def test_auto_schedule_skips_clustering_where_the_probe_says_it_cannot_pay(tmp_path,
                                                                          monkeypatch):
    from test_autoschedule import clustered_data, dense_data

    from twopgraph.locality.auto import PROBE_THRESHOLD
    from twopgraph.pipeline.assemble import locality_for, make_loader
    from twopgraph.run.train import train
    calls = []
    real = cluster_mod.cluster_graph
    renumber_mod = sys.modules["twopgraph.locality.renumber"]
    monkeypatch.setattr(renumber_mod, "cluster_graph",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    dense = dense_data()
    prep = locality_for(dense, ["auto"], _cfg(tmp_path, schedule="auto"))
    assert not calls and prep.clustering is None and prep.perm is None  # not renumbered
    choice = prep.schedule_choice
    assert choice.schedule == "random" and choice.basis == "probe"
    assert choice.ratio > PROBE_THRESHOLD and "without clustering" in choice.describe()
    loader = make_loader(_cfg(tmp_path, schedule="auto"), dense, "cpu",
                         schedule_choice=choice)
    assert loader.schedule == "random" and loader.schedule_choice["basis"] == "probe"
    # the whole run: recorded in metrics.json, no cluster cache written
    train(_cfg(tmp_path, schedule="auto"), dense)
    import json
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["schedule"] == "random" and m["schedule_choice"]["basis"] == "probe"
    assert not calls and not list((tmp_path / "data").rglob("*.npz"))
    # an explicit schedule, or a graph where balls are local, still clusters
    locality_for(dense, ["random"], _cfg(tmp_path, schedule="random"))
    assert len(calls) == 1
    prep = locality_for(clustered_data(), ["auto"],
                        _cfg(tmp_path, schedule="auto", fanouts=[3, 3], batch_size=50,
                             num_clusters=40, renumber=False))
    assert len(calls) == 2 and prep.clustering is not None and prep.schedule_choice is None


def test_probe_is_deterministic_and_cheap():
    from test_autoschedule import clustered_data

    from twopgraph.locality.auto import decide_probe, probe_locality
    from twopgraph.sampler import NeighborSampler
    d = clustered_data()
    s = NeighborSampler(d.graph, [3, 3], seed=0)
    a = probe_locality(s, d.graph, d.train_idx, 50, 0)
    b = probe_locality(s, d.graph, d.train_idx, 50, 0)
    assert {**a, "seconds": 0} == {**b, "seconds": 0}
    c = decide_probe(a)
    assert c.schedule == "locality" and c.ratio < 0.5 and c.batches == 4


def test_power_law_graph_coarsens(monkeypatch):
    d = power_law_data(n=3000)
    monkeypatch.setattr(coarsen, "COARSE_MIN", 100)
    c = cluster_graph(d.graph, 10, train_idx=d.train_idx, method="coarsen")
    per = np.bincount(c.parts[d.train_idx], minlength=10)
    assert per.max() <= 1.6 * per.mean()


def test_coarse_refinement_rounds_stay_within_the_budget():
    """Four rounds per coarse level while their entries are small against the input's; fewer
    (never below one) once the coarse levels hold a large share of the edges."""
    def level(entries):
        return coarsen.Level(np.array([0, entries]), np.zeros(entries, np.int64),
                             np.empty(0, np.int64), np.ones(1, np.int64))
    assert coarsen.coarse_refine_rounds([level(1000)]) == coarsen.REFINE_ROUNDS
    assert coarsen.coarse_refine_rounds([level(1000), level(100), level(50)]) == 4
    assert coarsen.coarse_refine_rounds([level(1000), level(300), level(200)]) == 2
    assert coarsen.coarse_refine_rounds([level(1000), level(900), level(800)]) == 1
    g, _, _ = big_community()  # the driver runs the rounds the rule gives its levels
    stats = coarsen.MultilevelStats()
    coarsen.multilevel_partition(g.indptr, g.indices, np.ones(g.num_nodes, np.int64), 8,
                                 stats=stats)
    levels = [level(e) for _, e in stats.sizes[:-1]]  # the last: METIS' sparsified graph
    assert len(levels) >= 2
    assert stats.refine_rounds == coarsen.coarse_refine_rounds(levels)


def test_coarsening_stops_when_a_contraction_keeps_most_entries(monkeypatch):
    """A coarse level whose contraction kept more than 1 / MIN_ENTRY_SHRINK of the entries is
    the last: with the rule off the same graph coarsens deeper."""
    g, _, _ = big_community()
    monkeypatch.setattr(coarsen, "COARSE_MIN", 50)  # coarsen far below the default target
    depth = {}
    for shrink in (0.0, 1e9):  # off; every coarse contraction "keeps too much"
        monkeypatch.setattr(coarsen, "MIN_ENTRY_SHRINK", shrink)
        stats = coarsen.MultilevelStats()
        parts = coarsen.multilevel_partition(g.indptr, g.indices,
                                             np.ones(g.num_nodes, np.int64), 2, stats=stats)
        assert sorted(np.unique(parts).tolist()) == [0, 1]
        depth[shrink] = len(stats.sizes) - 1  # the last: METIS' sparsified graph
    assert depth[1e9] == 3  # input, level 1, level 2: the rule stops there
    assert depth[0.0] > depth[1e9]
