"""The feature cache: window kernels, accounting vs brute force, the offline optimum vs an
exhaustive search, budgets, exact gathers (CPU and CUDA), training equivalence, the bench."""

from __future__ import annotations

import csv
import itertools

import numpy as np
import pytest
import torch

from twopgraph.rng import mix_key
from twopgraph.cache import (POLICIES, CacheDirectory, FeatureCache, PolicyContext, belady_min,
                             build_feature_cache, exhaustive_min, make_policy, replay,
                             resolve_budget)
from twopgraph.cache.layer import input_probability
from twopgraph.cache.window import NO_USE, NextUseWindow
from twopgraph.errors import ConfigError
from twopgraph.sampler import NeighborSampler, RandomScheduler
from twopgraph.train import TrainConfig, train
from conftest import community_data

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device"))]


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


# -- next-use window (kernel vs twin: tests/test_kernels.py) ---------------------------------------
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
def naive_belady(stream, budget, start):
    """Belady's MIN with bypass on Python sets (independent of the directory)."""
    cache: set[int] = set()
    if start == "best":
        first = {}
        for t, b in enumerate(stream):
            for r in b.tolist():
                first.setdefault(r, t)
        cache = set(sorted(first, key=lambda r: (first[r], r))[:budget])
    copies = 0
    for t, b in enumerate(stream):
        rows = set(b.tolist())
        copies += len(rows - cache)
        pool = [(brute_next_use(stream, t, r), r) for r in cache | rows]
        cache = {r for nu, r in sorted(pool)[:budget] if nu < NO_USE}
    return copies


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("start", ["empty", "best"])
def test_optimum_matches_exhaustive_search(seed, start):
    rng = np.random.default_rng(seed)
    stream = random_stream(6, int(rng.integers(3, 6)), 4, seed=seed)
    for budget in range(0, 5):
        best = exhaustive_min(stream, budget, start)
        got = belady_min(stream, 6, budget, start)
        assert got.h2d_rows == best, (budget, start)
        assert got.h2d_rows == naive_belady(stream, budget, start)


def test_optimum_matches_naive_on_larger_streams():
    stream = random_stream(60, 25, 20, seed=7)
    for budget in (0, 5, 17, 40, 60):
        for start in ("empty", "best"):
            assert belady_min(stream, 60, budget, start).h2d_rows == \
                naive_belady(stream, budget, start)


def test_exhaustive_search_really_searches():
    # [0,1] [2] [0] with budget 1: keep 0 through batch 1 (bypass 2) -> 3 copies, not 4
    stream = [np.array([0, 1]), np.array([2]), np.array([0])]
    assert exhaustive_min(stream, 1) == 3
    assert exhaustive_min(stream, 0) == 4


# -- accounting and budgets ------------------------------------------------------------------------
@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("ratio", [0.0, 0.05, 0.3, 1.0])
def test_accounting_matches_brute_force_and_budget_holds(cdata, policy, ratio):
    stream, ctx = sampled_stream(cdata)
    n = cdata.num_nodes
    budget = int(ratio * n)
    d = CacheDirectory(n, budget, make_policy(policy, ctx))
    pol = d.policy
    la = pol.lookahead
    announced = 0
    hits = copies = rows = 0
    for t, ids in enumerate(stream):
        while announced < min(len(stream), t + la + 1):
            pol.announce(stream[announced])
            announced += 1
        if not d.filled:
            fill_rows, _ = d.fill()
            assert len(fill_rows) <= d.budget
        before = set(d.cached_rows().tolist())
        plan = d.plan(ids)
        after = set(d.cached_rows().tolist())
        batch = set(ids.tolist())
        # brute force: hits are the batch rows that were on the device
        assert len(plan.hit_pos) == len(batch & before)
        assert set(plan.miss_rows.tolist()) == batch - before
        # only rows of this batch's transfer may enter; the budget always holds
        assert after - before <= set(plan.miss_rows.tolist())
        assert len(after) == d.num_cached <= d.budget
        assert np.all(d.slot_of[d.row_of[d.row_of >= 0]] == np.flatnonzero(d.row_of >= 0))
        hits += len(batch & before)
        copies += len(batch - before)
        rows += len(batch)
    c = d.counters
    assert (c.feature_rows, c.cache_hits, c.h2d_rows) == (rows, hits, copies)
    assert c.feature_rows == sum(len(x) for x in stream)
    if policy == "none":
        assert d.budget == 0 and c.h2d_rows == c.feature_rows and c.fill_rows == 0
    # every policy is at least as expensive as the optimum (fill included)
    opt = belady_min(stream, n, d.budget, "empty").h2d_rows
    assert c.h2d_rows + c.fill_rows >= opt
    opt_best = belady_min(stream, n, d.budget, "best").h2d_rows
    assert c.h2d_rows >= opt_best


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


def test_layer_beats_static_policies_and_tracks_the_optimum(cdata):
    stream, ctx = sampled_stream(cdata, batch_size=32)
    n = cdata.num_nodes
    for ratio in (0.05, 0.2, 0.5):
        b = int(ratio * n)
        total = {}
        for p in ("degree", "presample", "layer"):
            c = replay(stream, CacheDirectory(n, b, make_policy(p, ctx)))
            total[p] = c.h2d_rows + c.fill_rows
        opt = belady_min(stream, n, b, "empty").h2d_rows
        assert opt <= total["layer"] <= min(total["degree"], total["presample"])
        assert total["layer"] <= 1.2 * opt


def test_input_probability_reachability_and_ranking(cdata):
    fanouts, bs = [3, 3], 64
    score, reach = input_probability(cdata.graph, cdata.train_idx, fanouts, bs)
    # exact reachability: L-hop BFS from the training set
    seen = np.zeros(cdata.num_nodes, bool)
    seen[cdata.train_idx] = True
    for _ in fanouts:
        nxt = seen.copy()
        for v in np.flatnonzero(seen):
            nxt[cdata.graph.neighbors(v)] = True
        seen = nxt
    np.testing.assert_array_equal(reach, seen)
    # the probability predicts the measured per-batch input frequency
    stream, _ = sampled_stream(cdata, fanouts=fanouts, batch_size=bs)
    freq = np.zeros(cdata.num_nodes)
    for e in range(30):
        for ids in sampled_stream(cdata, fanouts=fanouts, batch_size=bs, epoch=e)[0]:
            freq[ids] += 1
    freq /= 30 * len(stream)
    assert np.corrcoef(score, freq)[0, 1] > 0.9
    assert np.all(score[~reach] == 0) and np.all(freq[~reach] == 0)


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
@pytest.mark.parametrize("policy", sorted(POLICIES))
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


def test_build_feature_cache_budget_and_dtype(cdata):
    _, ctx = sampled_stream(cdata)
    feat = torch.from_numpy(cdata.feat)
    c = build_feature_cache("layer", feat, ctx, "cpu", ratio=0.25, dtype="float16")
    assert c.budget == int(0.25 * cdata.num_nodes) and c.row_bytes == 2 * feat.shape[1]
    assert tuple(c.buffer.shape) == (c.budget, feat.shape[1])
    assert build_feature_cache("none", feat, ctx, "cpu", ratio=0.5).budget == 0
    with pytest.raises(ConfigError, match="feat dtype"):
        build_feature_cache("none", feat, ctx, "cpu", dtype="int8")


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
    from twopgraph.loader import Loader
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
