"""Test oracles: slow, obviously-correct references written on Python sets and dicts.

They share no code with the library: the cache simulators never look at a
:class:`~twopgraph.cache.CacheDirectory` (no slot maps, no cached-row lists), they replay the
documented rules on a set of cached rows.

- :func:`simulate_static` -- a buffer filled once with a given set of rows;
- :func:`simulate_window` -- the ``layer`` policy: the rows the announced window uses soonest,
  then a static rank (Belady's rule inside the window), with bypass;
- :func:`belady_copies` / :func:`exhaustive_copies` -- the offline optimum, by Belady's rule and
  by exhaustive search over every buffer content.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

INF = float("inf")


@dataclass
class SimResult:
    """Row counts (names as in the metrics) and, per batch, the rows found on the device."""

    feature_rows: int = 0
    cache_hits: int = 0
    h2d_rows: int = 0
    fill_rows: int = 0
    hits: list[set] = field(default_factory=list)
    cached_after: list[set] = field(default_factory=list)

    def counts(self) -> tuple[int, int, int, int]:
        return self.feature_rows, self.cache_hits, self.h2d_rows, self.fill_rows


def _lookup(res: SimResult, cache: set, batch: set) -> set:
    hit = batch & cache
    res.feature_rows += len(batch)
    res.cache_hits += len(hit)
    res.h2d_rows += len(batch) - len(hit)
    res.hits.append(hit)
    return batch - hit


def simulate_static(stream, initial: list[int]) -> SimResult:
    """A buffer filled once, before the first batch, with the rows ``initial`` (the fill is
    counted), never changed afterwards."""
    cache = set(initial)
    res = SimResult(fill_rows=len(cache))
    for ids in stream:
        _lookup(res, cache, set(np.asarray(ids).tolist()))
        res.cached_after.append(set(cache))
    return res


def static_order(score, tiebreak=None) -> list[int]:
    """Row ids best first: higher ``score``, then higher ``tiebreak``, then smaller id."""
    n = len(score)
    tb = [0] * n if tiebreak is None else list(tiebreak)
    return sorted(range(n), key=lambda r: (-score[r], -tb[r], r))


def simulate_window(stream, budget: int, lookahead: int, order: list[int],
                    reachable: set, prefill: str = "window") -> SimResult:
    """The ``layer`` policy on ``stream`` (batches of unique rows).

    Batch ``t`` is gathered when batches ``t .. t + lookahead`` have been announced. A row's
    priority is ``(next use in the announced batches after the current one, static rank)``
    (``order`` = row ids best first); a row with no use in the window and outside
    ``reachable`` is never kept. Before the first batch the buffer is filled with the
    best-ranked rows: all reachable rows when they fit, else those the first window uses
    (``prefill="window"``) or any (``"full"``). After each batch: when the misses worth
    keeping fit in the free room they all enter; otherwise the buffer keeps the ``budget``
    best rows among those it held and the misses (the rest is evicted or bypassed).
    """
    rank = {r: i for i, r in enumerate(order)}
    sets = [set(np.asarray(b).tolist()) for b in stream]

    def next_use(r, first):  # stream position of r's next use among the announced batches
        for s in range(first, min(len(sets), t + lookahead + 1)):
            if r in sets[s]:
                return s
        return INF

    def key(r, first):
        nu = next_use(r, first)
        if nu == INF and r not in reachable:
            return None  # never kept
        return (nu, rank[r])

    res = SimResult()
    cache: set = set()
    for t, batch in enumerate(sets):
        if t == 0 and budget > 0:
            if len(reachable) <= budget:
                cand = reachable | {r for r in rank if next_use(r, 0) < INF}
            elif prefill == "window":
                cand = {r for r in rank if next_use(r, 0) < INF}
            else:
                cand = set(rank)
            cache = set(sorted(cand, key=lambda r: (next_use(r, 0), rank[r]))[:budget])
            res.fill_rows = len(cache)
        misses = _lookup(res, cache, batch)
        if budget > 0:
            keys = {r: key(r, t + 1) for r in cache | misses}  # the window after batch t
            want = {r for r in misses if keys[r] is not None}
            if len(want) <= budget - len(cache):
                cache |= want
            else:
                keep = sorted((r for r in keys if keys[r] is not None), key=keys.get)
                cache = set(keep[:budget])
        res.cached_after.append(set(cache))
    return res


def next_use_after(sets, t, r) -> float:
    """Position of the first batch after ``t`` that uses row ``r`` (inf if none)."""
    for s in range(t + 1, len(sets)):
        if r in sets[s]:
            return s
    return INF


def belady_copies(stream, budget: int, start: str = "empty") -> int:
    """Rows copied by Belady's MIN with bypass (after each batch keep the ``budget`` rows
    used soonest, nothing never used again); ``start="best"``: a free initial buffer of the
    ``budget`` rows used first."""
    sets = [set(np.asarray(b).tolist()) for b in stream]
    cache: set = set()
    if start == "best":
        first: dict = {}
        for t, b in enumerate(sets):
            for r in b:
                first.setdefault(r, t)
        cache = set(sorted(first, key=lambda r: (first[r], r))[:budget])
    copies = 0
    for t, b in enumerate(sets):
        copies += len(b - cache)
        pool = sorted((next_use_after(sets, t, r), r) for r in cache | b)
        cache = {r for nu, r in pool[:budget] if nu < INF}
    return copies


def exhaustive_copies(stream, budget: int, start: str = "empty") -> int:
    """Fewest copied rows over every possible buffer content after every batch (tiny streams
    only: exponential); ``start="best"``: any initial content of ``budget`` rows, free."""
    sets = [frozenset(np.asarray(b).tolist()) for b in stream]
    rows = sorted(set().union(*sets)) if sets else []
    if start == "best":
        states = {frozenset(c): 0 for c in combinations(rows, min(budget, len(rows)))}
    else:
        states = {frozenset(): 0}
    for b in sets:
        best: dict = {}
        for content, cost in states.items():
            c = cost + len(b - content)
            pool = sorted(content | b)
            for k in range(min(budget, len(pool)) + 1):
                for keep in combinations(pool, k):
                    s = frozenset(keep)
                    if c < best.get(s, INF):
                        best[s] = c
        states = best
    return min(states.values())
