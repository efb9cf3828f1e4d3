"""The feature cache: the next-use window, accounting vs a set-based simulator (tests/oracles.py),
the offline optimum vs an exhaustive search, the layer policy vs the optimum and the static
policies, budgets, exact gathers (CPU and CUDA), training equivalence, the bench."""

from __future__ import annotations

import csv
import functools
import itertools
import math

import numpy as np
import pytest
import torch
from conftest import community_data, power_law_data, shared_dataset
from oracles import belady_copies, exhaustive_copies, simulate_static, simulate_window, static_order

from twopgraph.cache import (
    CacheDirectory,
    FeatureCache,
    HostFeatures,
    PolicyContext,
    belady_min,
    build_feature_source,
    make_policy,
    replay,
    resolve_budget,
)
from twopgraph.cache.layer import input_probability
from twopgraph.cache.window import NO_USE, NextUseWindow
from twopgraph.config import TrainConfig
from twopgraph.core.protocols import CACHE_POLICIES
from twopgraph.core.rng import mix_key
from twopgraph.errors import ConfigError
from twopgraph.locality import RandomScheduler, make_scheduler
from twopgraph.run.train import train
from twopgraph.sampler import NeighborSampler

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]  # skipped without a GPU


# -- shared builders ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cdata():
    return community_data()


def random_stream(num_rows=30, num_batches=12, max_batch=10, seed=0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.choice(num_rows, size=rng.integers(1, max_batch + 1), replace=False)
            .astype(np.int64) for _ in range(num_batches)]


def sampled_stream(data, fanouts=(5, 5), batch_size=64, epoch=0, seed=0):
    sampler = NeighborSampler(data.graph, list(fanouts), seed=seed)
    sched = RandomScheduler(data.train_idx, batch_size, seed=seed)
    stream = [sampler.sample(s, key=mix_key(epoch, b)).input_nodes.numpy()
              for b, s in enumerate(sched.batches(epoch))]
    ctx = PolicyContext(data.graph, data.train_idx, list(fanouts), batch_size, scheduler=sched,
                        sampler=sampler, seed=seed)
    return stream, ctx


def brute_next_use(stream, t, row):
    """Batch of the next use of ``row`` strictly after batch ``t`` (NO_USE if none)."""
    for s in range(t + 1, len(stream)):
        if row in set(stream[s].tolist()):
            return s
    return NO_USE


# -- next-use window (kernel vs twin: tests/runtime/test_kernels.py) ---------------------------------------
@pytest.mark.parametrize("ahead", [0, 1, 4, 100])
def test_next_use_window_matches_brute_force(ahead):
    n, stream = 25, random_stream(25, 20, 8, seed=2)
    w = NextUseWindow(n, ring_size=16)  # small ring: exercises growth
    announced = 0
    for t in range(len(stream)):
        while announced < min(len(stream), t + ahead + 1):
            w.announce(stream[announced])
            announced += 1
        w.consume()
        horizon = announced - 1  # last announced batch
        for r in range(n):
            nu = brute_next_use(stream, t, r)
            want = nu if nu <= horizon else NO_USE
            assert w.next_use[r] == want, (t, r)


# -- the optimum ----------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("start", ["empty", "best"])
def test_optimum_matches_exhaustive_search(seed, start):
    rng = np.random.default_rng(seed)
    stream = random_stream(6, int(rng.integers(3, 6)), 4, seed=seed)
    for budget in range(5):
        best = exhaustive_copies(stream, budget, start)
        got = belady_min(stream, 6, budget, start)
        assert got.h2d_rows == best, (budget, start)
        assert got.h2d_rows == belady_copies(stream, budget, start)


def test_optimum_matches_naive_on_larger_streams():
    stream = random_stream(60, 25, 20, seed=7)
    for budget in (0, 5, 17, 40, 60):
        for start in ("empty", "best"):
            assert belady_min(stream, 60, budget, start).h2d_rows == \
                belady_copies(stream, budget, start)


def test_exhaustive_search_really_searches():
    # [0,1] [2] [0] with budget 1: keep 0 through batch 1 (bypass 2) -> 3 copies, not 4
    stream = [np.array([0, 1]), np.array([2]), np.array([0])]
    assert exhaustive_copies(stream, 1) == 3
    assert exhaustive_copies(stream, 0) == 4
    assert exhaustive_copies(stream, 1, "best") == 2  # 0 free at the start, kept


# -- accounting against an independent set-based simulator -----------------------------------------
def reachable_rows(graph, train_idx, hops: int) -> set:
    """Rows an ``hops``-hop sampling from the training set can reach (BFS)."""
    seen = set(np.asarray(train_idx).tolist())
    frontier = set(seen)
    for _ in range(hops):
        nxt = set()
        for v in frontier:
            nxt.update(graph.neighbors(v).tolist())
        frontier = nxt - seen
        seen |= nxt
    return seen


@functools.cache
def case_data(name: str, seed: int = 0):
    return {"community": lambda: community_data(),
            "power-law": lambda: power_law_data(seed=seed),
            "cora": lambda: shared_dataset("cora")}[name]()


def stream_case(name: str, schedule: str, fanouts=(5, 5), batch_size=None, epoch=0, seed=0):
    """A sampled access stream of a small graph (``community``: 4 communities, ``power-law``,
    ``cora``: the real one, if present; batch size = 1/8 of the training set by default)
    under the ``random`` or ``locality`` (communities or labels as clusters) schedule, and
    the policy context of that run."""
    data = case_data(name, seed)
    batch_size = batch_size or -(-data.train_idx.shape[0] // 8)
    sampler = NeighborSampler(data.graph, list(fanouts), seed=seed)
    sched = make_scheduler(schedule, data.train_idx, batch_size, seed=seed, parts=data.label,
                           labels=data.label, balance=1)
    stream = [sampler.sample(s, key=mix_key(epoch, b), parallel=False)
              .input_nodes.numpy() for b, s in enumerate(sched.batches(epoch))]
    ctx = PolicyContext(data.graph, data.train_idx, list(fanouts), batch_size, scheduler=sched,
                        sampler=sampler, seed=seed)
    return data, stream, ctx


def simulate(policy_name: str, pol, data, stream, budget: int, fanouts=(5, 5)):
    """The simulator's run of ``pol`` (built as ``policy_name``) on ``stream``."""
    deg = data.graph.degrees()
    if policy_name == "none":
        return simulate_static(stream, [])
    if policy_name == "degree":
        return simulate_static(stream, static_order(deg)[:budget])
    if policy_name == "presample":  # the rank of the pre-sampled access counts
        return simulate_static(stream, static_order(pol.counts, deg)[:budget])
    reach = reachable_rows(data.graph, data.train_idx, len(fanouts))
    return simulate_window(stream, budget, pol.lookahead, static_order(pol.score), reach,
                           pol.prefill)


def drive(directory, stream):
    """Run ``stream`` through ``directory`` batch by batch, announcing ``lookahead`` batches
    ahead as the loader does; yields each batch's plan."""
    pol = directory.policy
    la = len(stream) if pol.lookahead is None else pol.lookahead
    announced = 0
    for t, ids in enumerate(stream):
        while announced < min(len(stream), t + la + 1):
            pol.announce(stream[announced])
            announced += 1
        yield directory.plan(ids)


POLICY_CASES = [("none", {}), ("degree", {}), ("presample", {}), ("layer", {}),
                ("layer", {"lookahead": 0}), ("layer", {"lookahead": 1}),
                ("layer", {"lookahead": 4, "prefill": "full"})]


@pytest.mark.parametrize("graph,schedule", [("community", "random"), ("community", "locality"),
                                            ("power-law", "random"), ("cora", "locality")])
@pytest.mark.parametrize("policy,options", POLICY_CASES,
                         ids=[p + "".join(f"-{k}{v}" for k, v in o.items())
                              for p, o in POLICY_CASES])
def test_accounting_matches_set_simulator(graph, schedule, policy, options):
    """Per batch, the rows found on the device are the simulator's; the counters
    (feature_rows, cache_hits, h2d_rows, fill_rows) equal its counts exactly, for budgets from
    none to every row, through the directory and through ``replay``."""
    data, stream, ctx = stream_case(graph, schedule)
    n = data.num_nodes
    for ratio in (0.0, 0.03, 0.15, 0.5, 1.0):
        budget = int(ratio * n)
        pol = make_policy(policy, ctx, **options)
        sim = simulate(policy, pol, data, stream, budget)
        d = CacheDirectory(n, budget, pol)
        for t, (ids, plan) in enumerate(zip(stream, drive(d, stream))):
            hit_rows = set(ids[plan.hit_pos].tolist())
            assert hit_rows == sim.hits[t], (ratio, t)
            assert set(plan.miss_rows.tolist()) == set(ids.tolist()) - sim.hits[t]
            assert sorted(plan.hit_pos.tolist() + plan.miss_pos.tolist()) == list(range(len(ids)))
            assert d.num_cached == len(sim.cached_after[t]) <= max(budget, 0)
        c = d.counters
        assert (c.feature_rows, c.cache_hits, c.h2d_rows, c.fill_rows) == sim.counts(), ratio
        assert c.num_batches == len(stream)
        r = replay(stream, CacheDirectory(n, budget, pol.fresh()))
        assert (r.feature_rows, r.cache_hits, r.h2d_rows, r.fill_rows) == sim.counts(), ratio
        if policy == "none" or budget == 0:
            assert sim.cache_hits == 0 and sim.h2d_rows == sim.feature_rows


def test_simulator_sees_evictions_and_bypass():
    """The layer cases above exercise every branch of the window rule (else they prove
    little): admissions into free room, evictions, and misses never kept."""
    data, stream, ctx = stream_case("community", "random")
    pol = make_policy("layer", ctx, lookahead=2)
    sim = simulate("layer", pol, data, stream, int(0.15 * data.num_nodes))
    before = [set()] + sim.cached_after[:-1]
    evicted = sum(len(b - a) for b, a in zip(before[1:], sim.cached_after[1:]))
    bypassed = sum(len(set(ids.tolist()) - h - a)
                   for ids, h, a in zip(stream, sim.hits, sim.cached_after))
    assert evicted > 0 and bypassed > 0 and sim.cache_hits > 0


@pytest.mark.parametrize("policy", ["degree", "presample", "layer"])
def test_full_budget_hits_everything(cdata, policy):
    stream, ctx = sampled_stream(cdata)
    d = CacheDirectory(cdata.num_nodes, cdata.num_nodes, make_policy(policy, ctx))
    first = replay(stream, d)
    assert first.hit_rate == 1.0 and first.h2d_rows == 0 and first.fill_rows > 0
    stream2, _ = sampled_stream(cdata, epoch=1)
    second = replay(stream2, d)
    assert second.hit_rate == 1.0 and second.h2d_rows == 0 and second.fill_rows == 0


def test_layer_fits_reachable_rows_exactly(cdata):
    """A budget of exactly the reachable rows (fewer than N) also gives 100% hits."""
    stream, ctx = sampled_stream(cdata, fanouts=(2,))
    pol = make_policy("layer", ctx)
    assert pol.num_reachable < cdata.num_nodes
    c = replay(stream, CacheDirectory(cdata.num_nodes, pol.num_reachable, pol))
    assert c.hit_rate == 1.0 and c.h2d_rows == 0


SWEEP = [(g, sch, seed) for g in ("community", "power-law", "cora")
         for sch in ("random", "locality") for seed in (0, 1)]


def _totals(stream, n, budget, ctx, **layer_options):
    """Rows copied (initial fill + h2d) by each policy on ``stream``."""
    out = {}
    for p in ("degree", "presample", "layer"):
        c = replay(stream, CacheDirectory(n, budget, make_policy(
            p, ctx, **(layer_options if p == "layer" else {}))))
        out[p] = (c.fill_rows, c.h2d_rows)
    return out


@pytest.mark.parametrize("graph,schedule,seed", SWEEP)
def test_layer_with_a_whole_stream_window_is_the_optimum(graph, schedule, seed):
    """When the window covers the whole stream the layer policy is Belady's MIN: its h2d rows
    are the optimum's with the best free start (Belady's rule by the oracle), its fill is no
    larger than the budget, so its fill + h2d is at most any static policy's (which fills
    the whole budget and can copy no fewer than the optimum) and at least the optimum from
    an empty buffer."""
    data, stream, ctx = stream_case(graph, schedule, seed=seed)
    n = data.num_nodes
    for ratio in (0.02, 0.1, 0.3):
        b = int(ratio * n)
        tot = _totals(stream, n, b, ctx, lookahead=len(stream))
        fill, h2d = tot["layer"]
        assert h2d == belady_copies(stream, b, "best") == belady_min(stream, n, b, "best").h2d_rows
        assert fill <= b
        assert fill + h2d >= belady_copies(stream, b, "empty")
        assert fill + h2d <= min(sum(tot["degree"]), sum(tot["presample"]))


@pytest.mark.parametrize("lookahead", [1, 4])
def test_layer_beats_static_policies_with_a_short_window(lookahead):
    """With a window of a few batches the layer policy copies no more rows (fill included)
    than the degree and presample caches, on every graph, schedule, seed and budget swept."""
    for graph, schedule, seed in SWEEP:
        data, stream, ctx = stream_case(graph, schedule, seed=seed)
        n = data.num_nodes
        for ratio in (0.05, 0.2, 0.5):
            tot = _totals(stream, n, int(ratio * n), ctx, lookahead=lookahead)
            assert sum(tot["layer"]) <= min(sum(tot["degree"]), sum(tot["presample"])), \
                (graph, schedule, seed, ratio, tot)


def input_probability_ref(graph, train_idx, fanouts, batch_size):
    """The documented model, vertex by vertex: seeds present with q = batch / |train|; a hop
    with fanout f gives P(u present) = 1 - (1 - x_u) exp(-sum_{v in N(u)} x_v min(1, f/deg v)),
    hops from the seeds outwards (last fanout first)."""
    n = graph.num_nodes
    deg = graph.degrees()
    q = min(1.0, batch_size / len(train_idx))
    x = [0.0] * n
    for v in train_idx.tolist():
        x[v] = q
    for f in reversed(fanouts):
        take = [1.0 if f < 0 else min(1.0, f / max(int(deg[v]), 1)) for v in range(n)]
        x = [1.0 - (1.0 - x[u]) * math.exp(-sum(x[v] * take[v]
                                                for v in graph.neighbors(u).tolist()))
             for u in range(n)]
    return np.array(x)


@pytest.mark.parametrize("graph", ["community", "power-law"])
@pytest.mark.parametrize("fanouts", [[3, 3], [-1, 2], [10]])
def test_input_probability_is_the_documented_model(graph, fanouts):
    """Scores = the model computed vertex by vertex; reachability = an L-hop BFS."""
    data = case_data(graph)
    score, reach = input_probability(data.graph, data.train_idx, fanouts, 50)
    np.testing.assert_allclose(score, input_probability_ref(data.graph, data.train_idx,
                                                            fanouts, 50), rtol=1e-12, atol=0)
    want = np.zeros(data.num_nodes, bool)
    want[sorted(reachable_rows(data.graph, data.train_idx, len(fanouts)))] = True
    np.testing.assert_array_equal(reach, want)
    assert np.all(score[~reach] == 0) and np.all(score[reach] > 0)


@pytest.mark.parametrize("graph", ["community", "power-law", "cora"])
def test_input_probability_predicts_measured_input_frequency(graph):
    """The model (independent arrivals) predicts how often each vertex is an input vertex:
    Pearson correlation > 0.9 with the frequency measured over 20 epochs, for each graph,
    seed and fanouts swept; unreachable vertices are never inputs."""
    for seed in (0, 1):
        for fanouts in ([3, 3], [5, 2]):
            data = case_data(graph, seed)
            bs = -(-data.train_idx.shape[0] // 8)
            score, reach = input_probability(data.graph, data.train_idx, fanouts, bs)
            sampler = NeighborSampler(data.graph, fanouts, seed=seed)
            sched = RandomScheduler(data.train_idx, bs, seed=seed)
            freq = np.zeros(data.num_nodes)
            for e in range(20):
                for b, seeds in enumerate(sched.batches(e)):
                    mb = sampler.sample(seeds, key=mix_key(e, b), parallel=False)
                    freq[mb.input_nodes] += 1
            freq /= 20 * sched.num_batches
            assert np.all(freq[~reach] == 0)
            r = np.corrcoef(score[reach], freq[reach])[0, 1]
            assert r > 0.9, (graph, seed, fanouts, r)


def test_policy_registry_errors(cdata):
    _, ctx = sampled_stream(cdata)
    with pytest.raises(ConfigError, match="unknown cache policy"):
        make_policy("lru", ctx)
    with pytest.raises(ConfigError, match="bad options"):
        make_policy("degree", ctx, epochs=3)
    with pytest.raises(ConfigError, match="presample epochs"):
        make_policy("presample", ctx, epochs=0)
    d = CacheDirectory(cdata.num_nodes, 10, make_policy("degree", ctx))
    with pytest.raises(ConfigError, match="unique"):
        d.plan(np.array([1, 2, 1]))
    with pytest.raises(ConfigError, match="out of range"):
        d.plan(np.array([cdata.num_nodes]))


def test_resolve_budget():
    assert resolve_budget(1000, 400, "cpu", ratio=0.1) == 100
    assert resolve_budget(1000, 1 << 20, "cpu", gb=0.5) == 512
    assert resolve_budget(1000, 400, "cpu") == 0  # CPU: no duplicate of the host table
    with pytest.raises(ConfigError):
        resolve_budget(1000, 400, "cpu", ratio=1.5)
    with pytest.raises(ConfigError):
        resolve_budget(1000, 400, "cpu", ratio=0.1, gb=1.0)


# -- data movement ----------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("policy", sorted(CACHE_POLICIES.names()))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_gather_returns_exactly_the_host_rows(cdata, device, policy, dtype):
    stream, ctx = sampled_stream(cdata)
    feat = torch.from_numpy(cdata.feat)
    want_all = feat.to(dtype).to(torch.float32)
    cache = FeatureCache(feat, make_policy(policy, ctx), int(0.2 * cdata.num_nodes), device,
                         dtype=dtype)
    la = cache.policy.lookahead
    announced = 0
    for t, ids in enumerate(stream):
        while announced < min(len(stream), t + la + 1):
            cache.announce(stream[announced])
            announced += 1
        out, ev = cache.gather(torch.from_numpy(ids))
        if ev is not None:
            ev.synchronize()
        assert out.dtype == torch.float32 and out.device.type == device
        assert torch.equal(out.cpu(), want_all[torch.from_numpy(ids)])
    assert cache.h2d_bytes == cache.counters.h2d_rows * feat.shape[1] * feat.to(dtype).element_size()
    # the buffer holds exactly the rows the directory says it holds
    d = cache.directory
    slots = np.flatnonzero(d.row_of >= 0)
    assert torch.equal(cache.buffer[torch.from_numpy(slots)].cpu(),
                       feat.to(dtype)[torch.from_numpy(d.row_of[slots])])


def test_build_feature_source_budget_and_dtype(cdata):
    _, ctx = sampled_stream(cdata)
    feat = torch.from_numpy(cdata.feat)
    c = build_feature_source("layer", feat, ctx, "cpu", ratio=0.25, dtype="float16")
    assert c.budget == int(0.25 * cdata.num_nodes) and c.row_bytes == 2 * feat.shape[1]
    assert tuple(c.buffer.shape) == (c.budget, feat.shape[1])
    for policy, ratio in (("none", 0.5), ("layer", 0.0)):  # nothing to cache: the host table
        src = build_feature_source(policy, feat, ctx, "cpu", ratio=ratio)
        assert isinstance(src, HostFeatures) and src.budget == 0
    with pytest.raises(ConfigError, match="feat dtype"):
        build_feature_source("none", feat, ctx, "cpu", dtype="int8")


# -- training ----------------------------------------------------------------------------------------
def _cfg(out, **kw):
    base = dict(dataset="community", epochs=3, hidden=16, fanouts=[5, 5], batch_size=64,
                lr=0.01, dropout=0.1, seed=0, device="cpu", out=str(out), progress=False,
                prefetch=2, schedule="random", renumber=False, eval_every=0)
    base.update(kw)
    return TrainConfig.of(**base)


def test_training_with_the_cache_sees_the_same_features(cdata, tmp_path):
    ref = train(_cfg(tmp_path / "none"), data=cdata)
    for policy, ratio in (("layer", 0.1), ("layer", 1.0), ("degree", 0.3), ("presample", 0.3)):
        res = train(_cfg(tmp_path / f"{policy}{ratio}", cache_policy=policy, cache_ratio=ratio),
                    data=cdata)
        assert [e["loss"] for e in res.epochs] == pytest.approx(
            [e["loss"] for e in ref.epochs], rel=1e-6, abs=1e-7), policy
        assert res.val_acc == pytest.approx(ref.val_acc)
        for e, r in zip(res.epochs, ref.epochs):
            assert e["feature_rows"] == r["feature_rows"]
            assert e["cache_hits"] + e["h2d_bytes"] // e["row_bytes"] == e["feature_rows"]
            assert e["hit_rate"] == pytest.approx(e["cache_hits"] / e["feature_rows"])
            assert e["transfer_ratio"] == pytest.approx(
                e["h2d_bytes"] / (e["feature_rows"] * e["row_bytes"]))
        if ratio == 1.0:
            assert res.epochs[0]["cache_fill_bytes"] > 0
            assert all(e["h2d_bytes"] == 0 and e["hit_rate"] == 1.0 for e in res.epochs)
            assert all(e["cache_fill_bytes"] == 0 for e in res.epochs[1:])
    none = ref.epochs[0]
    assert none["transfer_ratio"] == 1.0 and none["cache_hits"] == 0


def test_interrupted_epoch_leaves_the_window_consistent(cdata):
    """Batches announced by an abandoned epoch are forgotten at the next epoch's start."""
    from twopgraph.pipeline.loader import Loader
    stream, ctx = sampled_stream(cdata)
    cache = FeatureCache(torch.from_numpy(cdata.feat), make_policy("layer", ctx, lookahead=3),
                         100)
    labels = torch.from_numpy(cdata.label)
    it = Loader(ctx.scheduler, ctx.sampler, cache, labels, prefetch=0).epoch(0)
    next(it)
    it.close()
    assert cache.policy.window.pending > 0
    loader = Loader(ctx.scheduler, ctx.sampler, cache, labels, prefetch=2)
    n = sum(1 for _ in loader.epoch(1))
    stats = loader.stats
    assert n == ctx.scheduler.num_batches and cache.policy.window.pending == 0
    assert stats.feature_rows == stats.cache_hits + stats.h2d_bytes // stats.row_bytes


def test_feat_dtype_is_validated(tmp_path):
    with pytest.raises(ConfigError, match="feat dtype"):
        _cfg(tmp_path, feat_dtype="int8").validate()
    with pytest.raises(ConfigError, match="cache policy"):
        _cfg(tmp_path, cache_policy="lru").validate()
    with pytest.raises(ConfigError, match="cache-ratio"):
        _cfg(tmp_path, cache_ratio=2.0).validate()


# -- the benchmark -----------------------------------------------------------------------------------
def test_bench_cache_cli(tmp_path, capsys):
    from twopgraph.cli import main
    out = tmp_path / "bench"
    rc = main(["bench", "cache", "--dataset", "synthetic-tiny", "--data-root",
               str(tmp_path / "data"), "--policies", "none,degree,presample,layer",
               "--ratios", "0.05,0.5,1.0", "--schedules", "random,locality",
               "--fanouts", "5,5", "--batch-size", "128", "--out", str(out)])
    assert rc == 0
    assert (out / "cache.png").stat().st_size > 0
    rows = list(csv.DictReader(open(out / "cache.csv")))
    need = {"policy", "schedule", "ratio", "feature_rows", "cache_hits", "hit_rate",
            "h2d_bytes", "cache_fill_bytes", "transfer_ratio", "bytes_vs_baseline",
            "vs_optimal"}
    assert need <= set(rows[0])
    combos = {(r["policy"], r["schedule"], float(r["ratio"])) for r in rows}
    assert combos == set(itertools.product(
        ["none", "degree", "presample", "layer", "optimal"], ["random", "locality"],
        [0.05, 0.5, 1.0]))
    base = [r for r in rows if r["policy"] == "none" and r["schedule"] == "random"][0]
    assert float(base["bytes_vs_baseline"]) == 1.0 and float(base["transfer_ratio"]) == 1.0
    for r in rows:
        assert float(r["total_vs_optimal"]) >= 1.0 - 1e-12
        assert int(r["cache_hits"]) <= int(r["feature_rows"])
        if r["policy"] in ("degree", "presample", "layer") and float(r["ratio"]) == 1.0:
            assert float(r["hit_rate"]) == 1.0 and int(r["h2d_bytes"]) == 0
    assert "optimal" in capsys.readouterr().out


def test_bench_cache_rejects_bad_input(tmp_path, capsys):
    from twopgraph.cli import main
    for args in (["--policies", "lru"], ["--ratios", "2"], ["--schedules", "nope"],
                 ["--ratios", "x"]):
        rc = main(["bench", "cache", "--dataset", "synthetic-tiny", "--data-root",
                   str(tmp_path / "data"), "--out", str(tmp_path / "o"), *args])
        assert rc == 2
        assert "twopgraph: error:" in capsys.readouterr().err
    assert not (tmp_path / "o" / "cache.csv").exists()
