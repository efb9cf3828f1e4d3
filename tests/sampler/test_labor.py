"""The ``labor`` sampler (LABOR-0 / LABOR-*): its law by z-scores over many keys, variates
shared across dsts, layers and batches, the weighted-mean estimator, determinism, the options
and their wiring, and a training run."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import torch
from conftest import community_data, random_graph

from twopgraph.config import TrainConfig
from twopgraph.core.rng import batch_key
from twopgraph.errors import ConfigError
from twopgraph.graph.data import CSRGraph
from twopgraph.locality.schedule import RandomScheduler
from twopgraph.models.gcn import GCNConv
from twopgraph.models.ops import mean_weights, spmm_block
from twopgraph.pipeline.assemble import build_sampler
from twopgraph.runtime import jit
from twopgraph.sampler import NeighborSampler, make_sampler, sampled_batches, sampler_options
from twopgraph.sampler.labor import LaborSampler

DRAWS = 2000
Z = 5.0  # |z| bound of one statistic; with a few hundred of them, a false alarm is ~1e-4


# -- reference: c_s and pi_t the slow way ---------------------------------------------------------
def solve_c(p: np.ndarray, k: int) -> float:
    """``c`` with ``sum min(1, c p) = k`` by bisection (inf when the row keeps everything)."""
    if k < 0 or p.shape[0] <= k:
        return np.inf
    lo, hi = 0.0, 1.0 / p.min()
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if np.minimum(1.0, mid * p).sum() < k else (lo, mid)
    return 0.5 * (lo + hi)


def reference_scales(g: CSRGraph, nodes, k: int, iterations: int):
    """``(c per dst, {t: pi_t})``: pi from 1, each round ``pi_t = max_s min(1, c_s pi_t)``."""
    rows = [g.neighbors(int(s)).tolist() for s in nodes]
    pi = {t: 1.0 for r in rows for t in r}
    for it in range(iterations + 1):
        c = [solve_c(np.array([pi[t] for t in r]), k) for r in rows]
        if it == iterations:
            return np.array(c), pi
        new = dict.fromkeys(pi, 0.0)
        for cs, r in zip(c, rows):
            for t in r:
                new[t] = max(new[t], min(1.0, cs * pi[t]))
        pi = new


def kept_pairs(mb, layer: int = -1) -> list[tuple[int, int]]:
    """``(dst, src)`` global ids of every edge of a block."""
    b = mb.blocks[layer]
    ids = mb.input_nodes.numpy()
    ei = b.edge_index.numpy()
    return list(zip(ids[ei[1]].tolist(), ids[ei[0]].tolist()))


def kept_sets(mb, layer: int = -1) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for s, t in kept_pairs(mb, layer):
        out.setdefault(s, set()).add(t)
    return out


def frequencies(sampler, seeds, draws=DRAWS) -> dict[tuple[int, int], int]:
    counts: dict[tuple[int, int], int] = {}
    for key in range(draws):
        for pair in kept_pairs(sampler.sample(seeds, key=key, parallel=False)):
            counts[pair] = counts.get(pair, 0) + 1
    return counts


def law_graph() -> CSRGraph:
    return random_graph(80, 500, seed=11)  # a hub (vertex 0) and degrees from 1 to ~50


# -- the law --------------------------------------------------------------------------------------
@pytest.mark.parametrize("iterations", [0, 2])
def test_each_edge_kept_with_probability_min_1_c_pi(iterations):
    g = law_graph()
    seeds = np.arange(0, 80, 3)
    k = 4
    s = LaborSampler(g, [k], seed=3, iterations=iterations)
    c_ref, pi_ref = reference_scales(g, seeds, k, iterations)
    c, pi, cand = s.layer_scales(seeds, k)
    np.testing.assert_allclose(c, c_ref, rtol=1e-9)
    if iterations == 0:
        np.testing.assert_array_equal(c, np.where(g.degrees()[seeds] > k,
                                                  k / g.degrees()[seeds], np.inf))
    counts = frequencies(s, seeds)
    zs = []
    for i, v in enumerate(seeds.tolist()):
        nbrs = g.neighbors(v).tolist()
        p = np.array([min(1.0, c_ref[i] * pi_ref[t]) for t in nbrs])
        # c solves the expected count: min(fanout, degree) kept per dst
        assert p.sum() == pytest.approx(min(k, len(nbrs)), rel=1e-9)
        got = np.array([counts.get((v, t), 0) for t in nbrs])
        sd = np.sqrt(DRAWS * p * (1 - p))
        certain = p >= 1.0
        assert (got[certain] == DRAWS).all()
        zs += ((got[~certain] - DRAWS * p[~certain]) / sd[~certain]).tolist()
        # the number kept per dst: mean min(k, d), variance sum p (1 - p)
        total_sd = np.sqrt(DRAWS * (p * (1 - p)).sum())
        if total_sd > 0:
            zs.append((got.sum() - DRAWS * min(k, len(nbrs))) / total_sd)
    assert len(zs) > 100 and np.abs(zs).max() < Z, np.abs(zs).max()
    kept = set(counts)
    assert kept <= {(v, t) for v in seeds.tolist() for t in g.neighbors(v).tolist()}


def test_labor_star_shares_more_than_labor0():
    """The fixed point raises the importance of shared neighbours: fewer distinct vertices per
    layer (in expectation) at the same expected edges per dst."""
    g = random_graph(400, 4000, seed=5)
    seeds = np.arange(0, 400, 4)
    sizes = {}
    for it in (0, 3):
        s = LaborSampler(g, [5], seed=0, iterations=it)
        sizes[it] = np.mean([s.sample(seeds, key=k).input_nodes.shape[0] for k in range(200)])
    assert sizes[3] < 0.97 * sizes[0], sizes


# -- shared variates ------------------------------------------------------------------------------
def twin_graph() -> CSRGraph:
    """Dsts 0 and 1 have the same 12 neighbours (2..13); dst 14 has 6 of them (2..7)."""
    src = [0] * 12 + [1] * 12 + [14] * 6
    dst = list(range(2, 14)) * 2 + list(range(2, 8))
    return CSRGraph.from_edges(src, dst, 15)


def test_variates_are_shared_across_dsts():
    g = twin_graph()
    s = LaborSampler(g, [3], seed=1)
    differ = 0
    for key in range(300):
        kept = kept_sets(s.sample(np.array([0, 1, 14]), key=key))
        a, b, c = (kept.get(v, set()) for v in (0, 1, 14))
        assert a == b  # same neighbours, same c pi: the same vertices, every time
        # 14 has c = 3/6 > 3/12: it keeps every shared neighbour 0 keeps
        assert a & set(range(2, 8)) <= c
        alone = kept_sets(s.sample(np.array([0]), key=key)).get(0, set())
        assert alone == a  # r_t does not depend on which dsts share the layer
        differ += a != kept_sets(s.sample(np.array([0, 1, 14]), key=key + 1000)).get(0, set())
    assert differ > 200  # and it does depend on the key
    # uniform neighbour sampling draws per dst: the twins differ most of the time
    n = NeighborSampler(g, [3], seed=1)
    same = sum(kept_sets(n.sample(np.array([0, 1]), key=k)).get(0) ==
               kept_sets(n.sample(np.array([0, 1]), key=k)).get(1) for k in range(100))
    assert same < 20


def test_layer_dependency_same_variates_in_every_layer():
    g = random_graph(300, 3000, seed=2)
    seeds = np.arange(0, 300, 10)
    dep = LaborSampler(g, [4, 4], seed=0, layer_dependency=True)
    ind = LaborSampler(g, [4, 4], seed=0)
    t = np.arange(300)
    np.testing.assert_array_equal(dep.variates(t, 7, hop=0), dep.variates(t, 7, hop=1))
    assert not np.array_equal(ind.variates(t, 7, hop=0), ind.variates(t, 7, hop=1))
    differ = 0
    for key in range(50):
        for sampler, same in ((dep, True), (ind, False)):
            mb = sampler.sample(seeds, key=key)
            # the seeds are dsts of both layers (fanout 4 both): the same kept sets with dependency
            top, bottom = kept_sets(mb, -1), kept_sets(mb, 0)
            eq = all(top.get(v, set()) == bottom.get(v, set()) for v in seeds.tolist())
            if same:
                assert eq
            else:
                differ += not eq
    assert differ > 40
    # fewer input vertices: a vertex kept in one layer tends to be kept in the other
    size = {x: np.mean([s.sample(seeds, key=k).input_nodes.shape[0] for k in range(100)])
            for x, s in (("dep", dep), ("ind", ind))}
    assert size["dep"] < size["ind"], size


def test_batch_dependency_variates_drift_and_stay_uniform():
    from scipy.stats import kstest
    g = random_graph(20000, 20000, seed=0, hub=False)
    t = np.arange(20000)
    k4 = LaborSampler(g, [5], seed=0, batch_dependency=4)
    k1 = LaborSampler(g, [5], seed=0)
    r = {b: k4.variates(t, batch_key(3, b)) for b in range(9)}
    for b in range(8):  # consecutive batches: correlated (within a group and across its end)
        assert np.corrcoef(r[b], r[b + 1])[0, 1] > 0.6, b
    assert abs(np.corrcoef(r[0], r[8])[0, 1]) < 0.05  # two groups apart: independent
    assert abs(np.corrcoef(k1.variates(t, batch_key(3, 0)),
                           k1.variates(t, batch_key(3, 1)))[0, 1]) < 0.05
    for b in (0, 2, 3):  # each variate uniform on [0, 1), whatever its phase in the group
        assert kstest(r[b], "uniform").pvalue > 1e-3, b
        assert r[b].min() >= 0.0 and r[b].max() < 1.0
    # other epochs draw other variates; a plain int key is its own batch index
    assert abs(np.corrcoef(r[0], k4.variates(t, batch_key(4, 0)))[0, 1]) < 0.05
    assert np.corrcoef(k4.variates(t, 10), k4.variates(t, 11))[0, 1] > 0.6
    # consecutive batches of the same seeds share more input vertices
    g2 = random_graph(3000, 30000, seed=1)
    seeds = np.arange(0, 3000, 30)

    def overlap(s):
        a = [set(s.sample(seeds, key=batch_key(0, b)).input_nodes.tolist()) for b in range(8)]
        return np.mean([len(x & y) / len(x | y) for x, y in zip(a, a[1:])])
    assert overlap(LaborSampler(g2, [5, 5], batch_dependency=8)) > \
        overlap(LaborSampler(g2, [5, 5])) + 0.1


# -- the estimator ---------------------------------------------------------------------------------
def dense_graph() -> CSRGraph:
    rng = np.random.default_rng(7)
    a = np.triu(rng.random((14, 14)) < 0.75, 1)
    src, dst = np.nonzero(a)
    return CSRGraph.from_edges(src, dst, 14)


@pytest.mark.parametrize("iterations", [0, 2])
def test_weighted_mean_is_unbiased(iterations):
    """SAGE's aggregation (the block's weights) estimates each dst's exact neighbour mean, and
    GCN's weights estimate its normalised neighbour sum, without bias (z-scores)."""
    g = dense_graph()
    deg = g.degrees().astype(np.float64)
    x = np.random.default_rng(1).normal(size=14)
    seeds = np.arange(14)
    exact_mean = np.array([x[g.neighbors(v)].mean() for v in seeds])
    exact_gcn = np.array([(x[g.neighbors(v)] / np.sqrt(deg[g.neighbors(v)] + 1)).sum()
                          / np.sqrt(deg[v] + 1) for v in seeds])
    s = LaborSampler(g, [6], seed=0, iterations=iterations)
    gcn = GCNConv(1, 1)
    means, sums = [], []
    for key in range(DRAWS):
        mb = s.sample(seeds, key=key, parallel=False)
        b = mb.blocks[0]
        h = torch.from_numpy(x[mb.input_nodes.numpy()]).float().unsqueeze(1)
        means.append(spmm_block(b, mean_weights(b), h)[:, 0].double().numpy())
        sums.append(spmm_block(b, gcn._weights(b), h)[:, 0].double().numpy())
    for est, exact in ((np.array(means), exact_mean), (np.array(sums), exact_gcn)):
        z = (est.mean(0) - exact) / (est.std(0) / np.sqrt(DRAWS) + 1e-12)
        assert np.abs(z).max() < Z, z
    assert np.array(means).std(0).min() > 0  # really sampled


def test_block_weights_sum_to_one_and_exact_blocks_have_none():
    g = random_graph(200, 1500, seed=4)
    s = LaborSampler(g, [4, 3], seed=0, iterations=1)
    mb = s.sample(np.arange(0, 200, 9), key=2)
    for b in mb.blocks:
        assert b.edge_weight.dtype == torch.float32 and b.edge_weight.shape == (b.num_edges,)
        sums = torch.zeros(b.num_dst).index_add_(0, b.edge_index[1], b.edge_weight)
        has = b.edge_counts() > 0
        torch.testing.assert_close(sums[has], torch.ones(int(has.sum())))
        assert (b.edge_weight > 0).all()
    moved = mb.to("cpu")
    assert all(torch.equal(a.edge_weight, c.edge_weight) for a, c in zip(mb.blocks, moved.blocks))
    assert s.full_block(0, 10).edge_weight is None
    assert NeighborSampler(g, [4]).sample(np.arange(5), key=0).blocks[0].edge_weight is None


# -- structure and determinism ------------------------------------------------------------------
def test_minibatch_structure_as_neighbor():
    g = random_graph(300, 2000, seed=1)
    seeds = np.array([5, 17, 42, 0], dtype=np.int64)
    mb = LaborSampler(g, [4, 3, 2], seed=0, iterations=1).sample(seeds, key=3)
    assert mb.input_nodes[:4].tolist() == seeds.tolist()
    assert len(mb.input_nodes.unique()) == len(mb.input_nodes)
    assert mb.blocks[-1].num_dst == 4 and mb.blocks[0].num_src == len(mb.input_nodes)
    deg = g.degrees()
    ids = mb.input_nodes.numpy()
    for lower, upper in zip(mb.blocks[:-1], mb.blocks[1:]):
        assert lower.num_dst == upper.num_src
    for b in mb.blocks:
        assert b.indptr.dtype == b.indices.dtype == torch.int64
        np.testing.assert_array_equal(b.src_deg.numpy(), deg[ids[:b.num_src]])
        for s_, t in kept_pairs(mb, mb.blocks.index(b)):
            assert t in set(g.neighbors(s_).tolist())


@pytest.mark.parametrize("options", [{}, {"iterations": 2, "layer_dependency": True,
                                          "batch_dependency": 3}])
def test_same_seed_and_key_same_batch_any_threads(options):
    g = random_graph(500, 5000, seed=3)
    seeds = np.arange(0, 500, 7)

    def batch(parallel, threads, key=batch_key(1, 5), seed=1):
        with jit.thread_count(threads):
            return LaborSampler(g, [5, 5], seed=seed, **options).sample(seeds, key, parallel)

    ref = batch(True, 1)
    for other in (batch(True, 2), batch(False, 1), batch(False, 3)):
        assert torch.equal(ref.input_nodes, other.input_nodes)
        for x, y in zip(ref.blocks, other.blocks):
            assert torch.equal(x.indptr, y.indptr) and torch.equal(x.indices, y.indices)
            assert torch.equal(x.edge_weight, y.edge_weight)
    assert not torch.equal(ref.input_nodes, batch(True, 1, key=batch_key(1, 6)).input_nodes)
    assert not torch.equal(ref.input_nodes, batch(True, 1, seed=2).input_nodes)
    # the loader's workers: the same batches on 1 or 3 threads
    sampler = LaborSampler(g, [4, 3], seed=5, **options)
    sched = RandomScheduler(np.arange(0, 500, 3), 16, seed=1)
    a = [mb for mb, _ in sampled_batches(sched, sampler, 2, workers=1)]
    b = [mb for mb, _ in sampled_batches(sched, sampler, 2, workers=3)]
    assert all(torch.equal(x.input_nodes, y.input_nodes) for x, y in zip(a, b))



@pytest.mark.parametrize("layer_dependency", [False, True])
def test_vertex_indexed_scratch_draws_the_same_batches(layer_dependency):
    """LABOR-1 through the thread's vertex-indexed scratch (once its candidate table has been
    as large) keeps the same edges with the same weights as through numbered candidates, and
    leaves the scratch zeroed after every batch; two rounds or more always number."""
    g = random_graph(400, 6000, seed=8)
    seeds = np.arange(0, 400, 5)
    opts = dict(seed=2, iterations=1, layer_dependency=layer_dependency)
    dense, numbered = LaborSampler(g, [6, 4, 3], **opts), LaborSampler(g, [6, 4, 3], **opts)
    numbered.dense_bytes = lambda: 1 << 62  # never switches
    for parallel in (True, False):
        for key in range(4):
            a = dense.sample(seeds, batch_key(0, key), parallel)
            b = numbered.sample(seeds, batch_key(0, key), parallel)
            assert torch.equal(a.input_nodes, b.input_nodes)
            for x, y in zip(a.blocks, b.blocks):
                assert torch.equal(x.indptr, y.indptr) and torch.equal(x.indices, y.indices)
                assert torch.equal(x.edge_weight, y.edge_weight)
            assert not dense._dense_scratch().any()
    assert numbered._dense_scratch() is None
    two = LaborSampler(g, [6, 4, 3], seed=2, iterations=2)
    two.sample(seeds, 0)
    two.sample(seeds, 1)
    assert two._dense_scratch() is None and two.dense_bytes() == 0


def test_vertex_indexed_scratch_only_when_the_table_was_as_large():
    """A graph with many vertices and small batches keeps numbering candidates in its O(batch)
    table: the 4 N bytes of scratch would be more than the table ever took."""
    n = 4_000_000
    src = np.arange(0, 2000, dtype=np.int64)
    g = CSRGraph.from_edges(src, (src * 7 + 1) % 2000, num_nodes=n)
    s = LaborSampler(g, [3, 3], seed=0, iterations=1)
    for key in range(3):
        s.sample(np.arange(0, 2000, 50), key=key)
    assert s._dense_scratch() is None and s.dense_bytes() == 4 * n
    assert 0 < s._cand_tls.peak < s.dense_bytes()
    assert LaborSampler(g, [3], iterations=0).dense_bytes() == 0

# -- options and wiring --------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [{"iterations": -1}, {"iterations": 1.5},
                                 {"layer_dependency": "yes"}, {"batch_dependency": 0},
                                 {"batch_dependency": True}])
def test_bad_options_are_one_line_config_errors(bad):
    with pytest.raises(ConfigError) as e:
        LaborSampler(random_graph(50, 100), [2], **bad)
    assert "\n" not in str(e.value) and "--labor-" in str(e.value)


def test_flags_reach_the_sampler():
    parser = argparse.ArgumentParser()
    TrainConfig.add_arguments(parser)
    ns = parser.parse_args(["--dataset", "x", "--fanouts", "3,3", "--sampler", "labor",
                            "--labor-iterations", "2",
                            "--labor-layer-dependency", "--labor-batch-dependency", "4"])
    cfg = TrainConfig.from_args(ns)
    s = cfg.sampling
    assert sampler_options("labor", s) == {"iterations": 2, "layer_dependency": True,
                                           "batch_dependency": 4}
    assert sampler_options("neighbor", s) == {}
    g = random_graph(100, 400)
    built = build_sampler(s, g, "cpu", seed=0, log_choice=False)
    assert isinstance(built, LaborSampler)
    assert (built.iterations, built.layer_dependency, built.batch_dependency) == (2, True, 4)
    assert make_sampler("labor", g, [3]).iterations == 0
    d = TrainConfig.of(sampler="labor").sampling
    assert (d.labor_iterations, d.labor_layer_dependency, d.labor_batch_dependency) == (1, False, 1)
    for bad in ({"labor_iterations": -1}, {"labor_batch_dependency": 0},
                {"labor_layer_dependency": 1}):
        with pytest.raises(ConfigError):
            TrainConfig.of(**bad).validate()


def test_nodeloader_takes_labor_and_its_options():
    from twopgraph.pipeline.nodeloader import NodeLoader
    data = community_data()
    loader = NodeLoader(data, [4, 4], batch_size=64, schedule="random", sampler="labor",
                        sampler_options={"iterations": 1, "batch_dependency": 2}, prefetch=0)
    assert isinstance(loader.sampler, LaborSampler)
    assert (loader.sampler.iterations, loader.sampler.batch_dependency) == (1, 2)
    mb = next(iter(loader))
    assert all(b.edge_weight is not None for b in mb.blocks)
    with pytest.raises(ConfigError, match="takes no option"):
        NodeLoader(data, [4], sampler="labor", sampler_options={"fanout": 3})
    with pytest.raises(ConfigError, match="takes no option"):
        NodeLoader(data, [4], sampler="neighbor", sampler_options={"iterations": 1})


def test_train_with_labor_learns(tmp_path):
    from twopgraph.run.train import train
    data = community_data()
    cfg = TrainConfig.of(dataset="community", epochs=6, hidden=16, fanouts=[5, 5],
                         batch_size=64, lr=0.01, dropout=0.1, seed=0, device="cpu",
                         out=str(tmp_path / "run"), progress=False, schedule="random",
                         sampler="labor", labor_iterations=1, labor_layer_dependency=True,
                         labor_batch_dependency=2)
    res = train(cfg, data=data)
    print("test_acc", res.test_acc)
    assert res.test_acc > 0.6  # 4 balanced classes: chance is 0.25
