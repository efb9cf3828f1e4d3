"""Eviction without O(budget) host work per batch (issue 42, item 3): the directory of a
``layer`` cache finds its victims in a :class:`~twopgraph.cache.coldset.ColdSet` and gives
exactly the plans, slots and counts of ranking every cached row."""

from __future__ import annotations

import numpy as np
import pytest

from twopgraph.cache import CacheDirectory, PolicyContext, make_policy
from twopgraph.cache.coldset import ColdSet
from twopgraph.cache.directory import announced
from twopgraph.graph.data import CSRGraph


class FullRanking(CacheDirectory):
    fast_evict = False


def test_coldset_worst_matches_a_sort():
    rng = np.random.default_rng(0)
    n = 5000
    rank = rng.permutation(n)
    s, member = ColdSet(rank), np.zeros(n, dtype=bool)
    for _ in range(100):
        a = rng.choice(n, 200, replace=False)
        s.add(a)
        member[a] = True
        b = rng.choice(n, 150, replace=False)
        s.remove(b)
        member[b] = False
        k = int(rng.integers(0, 400))
        rows = np.flatnonzero(member)
        assert np.array_equal(s.worst(k), rows[np.argsort(-rank[rows])][:k])
        assert s.size == member.sum()


def _stream(rng, n, batches, width):
    return [np.unique(rng.integers(0, n, width)) for _ in range(batches)]


@pytest.mark.parametrize("budget, lookahead, fast_only", [
    (40, 4, False), (150, 8, False),  # windows larger than the budget: both ways
    (300, 2, True), (60, 0, True)])
def test_fast_eviction_plans_exactly_like_full_ranking(budget, lookahead, fast_only,
                                                       monkeypatch):
    used = []
    real = CacheDirectory._evict_fast

    def counted(self, *a):
        out = real(self, *a)
        if self._cold is not None:  # the fast directory's evictions
            used.append(out is not None)
        return out
    monkeypatch.setattr(CacheDirectory, "_evict_fast", counted)
    rng = np.random.default_rng(budget)
    n = 600
    g = CSRGraph.from_edges(rng.integers(0, n, 3000), rng.integers(0, n, 3000), num_nodes=n)
    ctx = PolicyContext(g, np.arange(0, n, 2), fanouts=[3, 3], batch_size=16)
    proto = make_policy("layer", ctx, lookahead=lookahead)
    fast = CacheDirectory(n, budget, proto.fresh())
    full = FullRanking(n, budget, proto.fresh())
    assert fast._cold is not None and full._cold is None
    for epoch in range(3):
        stream = _stream(rng, n, 40, 90)
        for d in (fast, full):
            d.drain()
        # an epoch, and an interrupted one: announced batches never consumed
        todo = stream if epoch != 1 else stream[:25]
        got = []
        for d in (fast, full):
            plans = []
            for ids in announced(todo, lookahead, d.announce):
                plans.append(d.plan(ids))
                if epoch == 1 and len(plans) == 20:
                    break
            got.append(plans)
        for a, b in zip(*got):
            for f in ("hit_pos", "hit_slot", "miss_pos", "miss_rows", "admit_src",
                      "admit_slot"):
                assert np.array_equal(getattr(a, f), getattr(b, f)), f
        assert np.array_equal(fast.slot_of, full.slot_of)
        assert fast.counters == full.counters
    assert fast.counters.h2d_rows > 0 and fast.num_cached == budget
    assert any(used) and (all(used) if fast_only else not all(used))
