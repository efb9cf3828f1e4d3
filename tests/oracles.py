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


# -- the sampling law (any Sampler: numba on the host, torch on a device) ----------------------
def binom_two_sided(k, n, p):
    """Two-sided binomial p-value of ``k`` successes in ``n`` trials (arrays)."""
    from scipy.stats import binom
    return np.minimum(1.0, 2 * np.minimum(binom.cdf(k, n, p), binom.sf(k - 1, n, p)))


def edge_counts(sampler, seeds, keys):
    """For each block (input side first): ``(pairs, present)`` where ``pairs[v*n+u]`` counts
    the draws in which dst ``v`` took neighbour ``u`` and ``present[v]`` the draws in which
    ``v`` was a dst; and ``both``, the draws in which a seed took ``u`` in the last two blocks.
    Checks on the way that no dst takes a neighbour twice."""
    n = sampler.graph.num_nodes
    layers = len(sampler.fanouts)
    pairs = [np.zeros(n * n, dtype=np.int64) for _ in range(layers)]
    present = [np.zeros(n, dtype=np.int64) for _ in range(layers)]
    both = np.zeros(n * n, dtype=np.int64)
    for key in keys:
        mb = sampler.sample(seeds, key=key, parallel=False)
        ids = mb.input_nodes.cpu().numpy()
        taken = []
        for i, b in enumerate(mb.blocks):
            dst = ids[np.repeat(np.arange(b.num_dst), b.sampled_deg().cpu().numpy())]
            flat = dst * n + ids[b.indices.cpu().numpy()]
            assert np.unique(flat).shape[0] == flat.shape[0], "a neighbour taken twice"
            pairs[i][flat] += 1
            present[i][ids[:b.num_dst]] += 1
            taken.append(flat)
        # the seeds are the dst vertices of the last block, and the first dst of the one below
        both[np.intersect1d(taken[-2], taken[-1])] += 1
    return pairs, present, both


def assert_sampling_law(sampler, seeds, trials: int = 1500) -> None:
    """Over ``trials`` keys: each neighbour of a dst vertex of degree d is taken with
    probability min(1, f / d) in every block (binomial tests, family-wise level 1e-4, and an
    aggregate chi-square z-score), a vertex with d <= f takes every neighbour every time, only
    real edges are taken, and a seed's draws in its two last layers are independent (joint
    probability = product). ``sampler`` needs at least two layers."""
    g = sampler.graph
    deg = g.degrees()
    n = g.num_nodes
    fanouts = list(sampler.fanouts)
    pairs, present, both = edge_counts(sampler, seeds, range(trials))
    src = np.repeat(np.arange(n), deg)
    edge = src * n + g.indices.astype(np.int64)
    pvals, chi, dof = [], 0.0, 0
    for f, cnt, pres in zip(fanouts, pairs, present):
        assert cnt.sum() == cnt[edge].sum()  # only real edges are ever taken
        p = np.minimum(1.0, f / np.maximum(deg[src], 1))
        m, k = pres[src], cnt[edge]
        full = (p == 1.0) & (m > 0)
        np.testing.assert_array_equal(k[full], m[full])  # d <= f: every neighbour, always
        test = (p < 1.0) & (m > 0)
        assert test.sum() > 100
        pvals.append(binom_two_sided(k[test], m[test], p[test]))
        chi += ((k[test] - m[test] * p[test]) ** 2 / (m[test] * p[test] * (1 - p[test]))).sum()
        dof += int(test.sum())
    pvals = np.concatenate(pvals)
    family = float(pvals.min()) * pvals.shape[0]  # Bonferroni
    assert family > 1e-4, f"an edge's inclusion count is off (corrected p {family:.2g})"
    z = (chi - dof) / np.sqrt(2 * dof)
    assert abs(z) < 5, f"inclusion counts off on the whole (chi-square z {z:.1f})"
    # independence between the layers: a seed takes u in both with probability p0 p1
    p_seed = np.minimum(1.0, np.array(fanouts[-2:])[:, None] / np.maximum(deg[src], 1))
    sel = np.isin(src, seeds) & (p_seed.max(0) < 1.0)
    joint = p_seed[0][sel] * p_seed[1][sel]
    k = both[edge[sel]]
    family = float(binom_two_sided(k, trials, joint).min()) * int(sel.sum())
    assert family > 1e-4, f"layers are not independent (corrected p {family:.2g})"
    z = (k.sum() - trials * joint.sum()) / np.sqrt((trials * joint * (1 - joint)).sum())
    assert abs(z) < 5, f"layers are not independent (z {z:.1f})"


def assert_uniform_subsets(sampler_factory, d: int, f: int, centres: int = 40,
                           keys: int = 300) -> None:
    """Each of the C(d, f) neighbour sets of a degree-d vertex comes with probability
    1 / C(d, f) (chi-square over ``centres`` star centres x ``keys`` draws);
    ``sampler_factory(graph, fanouts)`` builds the sampler under test."""
    from itertools import combinations

    from scipy.stats import chi2

    from twopgraph.graph.data import CSRGraph
    g = CSRGraph.from_edges(np.repeat(np.arange(centres), d), centres + np.arange(centres * d),
                            centres * (d + 1))
    s = sampler_factory(g, [f])
    index = {c: i for i, c in enumerate(combinations(range(d), f))}
    counts = np.zeros(len(index), dtype=np.int64)
    seeds = np.arange(centres)
    for key in range(keys):
        mb = s.sample(seeds, key=key, parallel=False)
        nbr = mb.input_nodes.cpu().numpy()[mb.blocks[0].indices.cpu().numpy()]
        local = np.sort(nbr.reshape(centres, f) - centres - seeds[:, None] * d, axis=1)
        for row in local:
            counts[index[tuple(row.tolist())]] += 1
    expected = counts.sum() / len(index)
    stat = ((counts - expected) ** 2 / expected).sum()
    assert chi2.sf(stat, len(index) - 1) > 1e-4, (counts, stat)
