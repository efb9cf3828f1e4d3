"""Clustering that scales: multilevel size-constrained label propagation in numba.

:func:`multilevel_partition` splits a symmetric CSR graph (``indptr`` int64, ``indices``
int32/int64, typically memory-mapped: it is only read, never copied) into ``k`` parts of
about equal vertex weight with few cut edges:

1. **Coarsening.** Size-constrained label propagation (SCLaP, as in KaHIP / Mt-KaHyPar):
   every vertex starts in its own cluster and repeatedly joins the neighbouring cluster it has
   the heaviest edges to, unless that cluster would exceed ``cluster_cap`` weight. The
   clusters are contracted into a weighted coarse graph
   (:func:`~twopgraph.locality.contract.contract`) and the step is repeated on it until the
   graph is small (a few dozen vertices per part) or stops shrinking. One level costs a few
   passes over the edges; the first shrinks a graph 10-100x.
2. **Initial partition** of the coarse graph: METIS (``pymetis``) with its vertex and edge
   weights, or (``initial="greedy"``) a greedy BFS packing (:func:`greedy_pack`).
3. **Uncoarsening.** The parts are projected level by level back onto the input graph, and
   each level gets a few rounds of the same label propagation with the ``k`` parts as labels
   and the part capacity as the size constraint (refinement: a vertex moves to the part it
   has more edges to when that part has room).

Vertex weights carry the balance constraint (``cluster.py`` weighs a training vertex as much
as all non-training vertices per training vertex, so balanced weights mean balanced training
vertices too); edge weights count the fine edges between coarse vertices.

**Determinism.** Label propagation runs in sub-rounds: the vertices of a round are split into
:data:`SUBROUNDS` groups by a counter-based hash of (seed, level, round, vertex). In a
sub-round every vertex of the group computes its move in parallel against the labels and
cluster weights as they were when the sub-round began
(:func:`~twopgraph.locality.labelprop.lp_propose`, which only reads shared state), then one
serial pass applies the moves in vertex order, each only if its target still has room
(:func:`~twopgraph.locality.labelprop.lp_apply`). Ties are broken by a hash of the label.
Nothing depends on the thread count or the order in which threads run.

**Memory.** Beyond the input (read in place), the largest structures are a few arrays of N
entries (labels and cluster weights of the first level, the vertex order of the sub-rounds,
the coarse id of each vertex: about 30 bytes per vertex) and the coarse graphs, whose entries
are at most the cut edges of the first level's clusters. The hash tables that sum a vertex's
connections are per block of vertices, sized to the block's largest degree.

The kernels are in :mod:`twopgraph.locality.labelprop` (label propagation) and
:mod:`twopgraph.locality.contract` (contraction, sparsification for METIS); this module holds
the driver and the greedy packing (:func:`greedy_pack`). Every kernel has a NumPy/Python twin
registered with :func:`twopgraph.runtime.jit.register`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from twopgraph.core.rng import mix_key
from twopgraph.locality.contract import contract, group_by, heavy_edges
from twopgraph.locality.labelprop import lp_apply, lp_propose, subround_order
from twopgraph.runtime.jit import register

log = logging.getLogger("twopgraph")

#: sub-rounds per label-propagation round (moves of one sub-round see the previous ones)
SUBROUNDS = 8
#: label-propagation rounds per coarsening level, and per refinement level (coarse, fine)
CLUSTER_ROUNDS = 3
REFINE_ROUNDS = 4
FINE_REFINE_ROUNDS = 1
#: the refinement of the coarse levels visits at most REFINE_BUDGET x the input's entries in
#: all (rounds per coarse level: REFINE_ROUNDS, fewer when their entries exceed the budget,
#: at least one): the coarse graphs of a large graph with little community structure keep a
#: growing share of its edges (a quarter of them at 27.8M vertices), and four rounds on each
#: cost more than the rest of the clustering's label propagation
REFINE_BUDGET = 1.0
#: on the input graph a vertex of higher degree looks at MAX_VISIT of its edges per round
#: (a window at a hashed offset; coarse graphs: every edge): label propagation then costs
#: sum(min(degree, MAX_VISIT)) per round instead of E
MAX_VISIT = 32
#: a round that moves fewer than this share of the vertices ends the level's rounds
MIN_MOVED = 0.01
#: coarse clusters weigh at most (part weight) / CLUSTERS_PER_PART, so METIS can still
#: balance the parts of the coarse graph well
CLUSTERS_PER_PART = 12
#: coarsening stops once the graph has at most max(COARSE_MIN, COARSE_PER_PART x k) vertices,
#: or a level shrinks it by less than MIN_SHRINK, or a contraction kept more than
#: 1 / MIN_ENTRY_SHRINK of the entries: the next level would cost about as much again for
#: little (at 27.8M papers-shaped vertices, k = 1180, a third level took the graph from
#: 56.9k to 23.5k vertices but kept 95.5M of its 109M entries, for 27 s more and no less
#: edge cut; METIS takes the heavy edges of the 56.9k-vertex graph instead)
COARSE_PER_PART = 24
COARSE_MIN = 20_000
MIN_SHRINK = 1.4
MIN_ENTRY_SHRINK = 2.0
MAX_LEVELS = 8
#: METIS sees each coarse vertex's METIS_KEEP_EDGES heaviest edges (and every edge at least
#: as heavy as one of its ends' such edges): coarse graphs are dense (hundreds of neighbours
#: per vertex, most of them light), and METIS' time grows with the edges
METIS_KEEP_EDGES = 16


# -- greedy initial partition (method "lp") -------------------------------------------------------
@njit(nogil=True, cache=True)
def greedy_pack(indptr, indices, ew, vw, k, cap, order):
    """Parts ``0..k-1`` of the vertices visited in ``order`` (e.g. BFS order): each joins the
    part it has the heaviest edges to among those with room (``weight + vw <= cap``; ties:
    the lower part), else the part being filled (parts fill one after the other; once all
    are full, the lightest). Serial."""
    n = vw.shape[0]
    weighted = ew.shape[0] > 0
    parts = np.full(n, -1, dtype=np.int64)
    pw = np.zeros(k, dtype=np.int64)
    conn = np.zeros(k, dtype=np.int64)
    seen = np.empty(k, dtype=np.int64)
    cur = 0
    for i in range(order.shape[0]):
        v = order[i]
        ns = 0
        for j in range(indptr[v], indptr[v + 1]):
            p = parts[indices[j]]
            if p < 0:
                continue
            if conn[p] == 0:
                seen[ns] = p
                ns += 1
            conn[p] += ew[j] if weighted else 1
        best = -1
        for t in range(ns):
            p = seen[t]
            if pw[p] + vw[v] <= cap and (best < 0 or conn[p] > conn[best]
                                         or (conn[p] == conn[best] and p < best)):
                best = p
        for t in range(ns):
            conn[seen[t]] = 0
        if best < 0:
            while cur < k - 1 and pw[cur] + vw[v] > cap:
                cur += 1
            best = cur
            if pw[cur] + vw[v] > cap:  # every part filled in turn: the lightest
                best = np.argmin(pw)
        parts[v] = best
        pw[best] += vw[v]
    return parts


def greedy_pack_ref(indptr: np.ndarray, indices: np.ndarray, ew: np.ndarray, vw: np.ndarray,
                    k: int, cap: int, order: np.ndarray) -> np.ndarray:
    """Python twin of :func:`greedy_pack`."""
    parts = [-1] * len(vw)
    pw = [0] * k
    cur = 0
    for v in np.asarray(order).tolist():
        conn: dict[int, int] = {}
        for j in range(int(indptr[v]), int(indptr[v + 1])):
            p = parts[int(indices[j])]
            if p >= 0:
                conn[p] = conn.get(p, 0) + (int(ew[j]) if len(ew) else 1)
        room = [(-c, p) for p, c in conn.items() if pw[p] + int(vw[v]) <= cap]
        if room:
            best = min(room)[1]
        else:
            while cur < k - 1 and pw[cur] + int(vw[v]) > cap:
                cur += 1
            best = cur
            if pw[cur] + int(vw[v]) > cap:
                best = int(np.argmin(pw))
        parts[v] = best
        pw[best] += int(vw[v])
    return np.asarray(parts, dtype=np.int64)


register(greedy_pack, greedy_pack_ref)


# -- the driver -----------------------------------------------------------------------------------
@dataclass
class Level:
    """One graph of the hierarchy: CSR (``ew`` empty = unit edge weights) and vertex
    weights; ``cid`` maps its vertices to the next (coarser) level's."""

    indptr: np.ndarray
    indices: np.ndarray
    ew: np.ndarray
    vw: np.ndarray
    cid: np.ndarray | None = None

    @property
    def n(self) -> int:
        return self.indptr.shape[0] - 1


@dataclass
class MultilevelStats:
    """What :func:`multilevel_partition` did: vertices and entries per level, seconds per
    stage."""

    sizes: list = field(default_factory=list)
    seconds: dict = field(default_factory=dict)
    #: refinement rounds per coarse level (:func:`coarse_refine_rounds`)
    refine_rounds: int = 0


def _index_dtype(n: int):
    return np.int32 if n < 2**31 - 1 else np.int64


def label_propagation(level: Level, labels: np.ndarray, cw: np.ndarray, cap: int, key: int,
                      rounds: int, min_moved: float = MIN_MOVED, max_visit: int = 0) -> int:
    """Size-constrained label propagation on ``level`` (see the module doc), ``labels`` and
    the label weights ``cw`` updated in place; at most ``rounds`` rounds, fewer when a round
    moves fewer than ``min_moved`` x n vertices; ``max_visit`` > 0: a vertex of higher degree
    looks at that many of its edges (see :func:`lp_propose`). Returns the vertices moved."""
    n = level.n
    order = np.empty(n, dtype=_index_dtype(n))
    start = np.zeros(SUBROUNDS + 1, dtype=np.int64)
    total = 0
    cap = np.int64(cap)
    for r in range(rounds):
        subround_order(np.uint64(mix_key(key, r)), SUBROUNDS, order, start)
        moved = 0
        for s in range(SUBROUNDS):
            members = order[start[s]:start[s + 1]]
            targets = lp_propose(level.indptr, level.indices, level.ew, labels, level.vw, cw,
                                 cap, members, np.uint64(mix_key(key, r, s)), max_visit)
            moved += lp_apply(members, targets, labels, level.vw, cw, cap)
        total += moved
        if moved < min_moved * n:
            break
    return total


def _cluster_level(level: Level, cap: int, key: int) -> tuple[np.ndarray, int]:
    """Coarse id (``_index_dtype``, n) of every vertex of ``level`` after label propagation
    with clusters of weight at most ``cap``, and the number of clusters. Isolated vertices are
    packed into clusters of about ``cap`` weight first (they have no edges to follow)."""
    n = level.n
    labels = np.arange(n, dtype=_index_dtype(n))
    deg = np.diff(level.indptr)
    iso = np.flatnonzero(deg == 0)
    if iso.shape[0]:
        per = max(1, int(cap) // max(1, int(level.vw[iso].max())))
        labels[iso] = iso[(np.arange(iso.shape[0]) // per) * per]
    del deg, iso
    cw = np.bincount(labels, weights=level.vw, minlength=n).astype(np.int64)
    label_propagation(level, labels, cw, cap, key, CLUSTER_ROUNDS,
                      max_visit=MAX_VISIT if level.ew.shape[0] == 0 else 0)
    del cw
    used = np.zeros(n, dtype=bool)
    used[labels] = True
    newid = np.cumsum(used, dtype=np.int64)
    num = int(newid[-1]) if n else 0
    del used
    cid = (newid[labels] - 1).astype(_index_dtype(n))
    return cid, num


def _coarsen(level: Level, cid: np.ndarray, num: int) -> Level:
    start, members = group_by(cid, num)
    indptr, indices, ew = contract(level.indptr, level.indices, level.ew, cid, start, members)
    del start, members
    vw = np.bincount(cid, weights=level.vw, minlength=num)
    return Level(indptr, indices, ew, np.rint(vw).astype(np.int64))


def refine(level: Level, parts: np.ndarray, k: int, cap: int, key: int, rounds: int,
           max_visit: int = 0) -> int:
    """Label-propagation refinement of the ``k``-way ``parts`` of ``level`` (in place): moves
    that cut fewer edges, into parts of weight at most ``cap`` (never below the heaviest part
    now). Returns the vertices moved."""
    pw = np.bincount(parts, weights=level.vw, minlength=k).astype(np.int64)
    cap = max(int(cap), int(pw.max()) if k else 0)
    return label_propagation(level, parts, pw, cap, key, rounds, min_moved=0.001,
                             max_visit=max_visit)


def coarse_refine_rounds(levels: list[Level]) -> int:
    """Refinement rounds per coarse level: :data:`REFINE_ROUNDS`, fewer when that many
    rounds over every coarse level's entries would exceed :data:`REFINE_BUDGET` x the input
    graph's entries, at least 1."""
    coarse = sum(int(lv.indices.shape[0]) for lv in levels[1:])
    if coarse == 0:
        return REFINE_ROUNDS
    budget = REFINE_BUDGET * int(levels[0].indices.shape[0])
    return int(max(1, min(REFINE_ROUNDS, budget // coarse)))


def multilevel_partition(indptr: np.ndarray, indices: np.ndarray, vw: np.ndarray, k: int, *,
                         seed: int = 0, ufactor: int = 30,
                         initial: str = "metis", metis_niter: int = 10,
                         clusters_per_part: int = CLUSTERS_PER_PART,
                         fine_refine_rounds: int = FINE_REFINE_ROUNDS,
                         stats: MultilevelStats | None = None,
                         quiet: Callable[[], AbstractContextManager] | None = None) -> np.ndarray:
    """``k``-way partition (int64, N) of the symmetric CSR graph ``indptr``/``indices`` with
    vertex weights ``vw`` (int, N): see the module doc. ``initial``: ``metis`` (METIS on the
    coarsest graph, ``ufactor``/``metis_niter`` its options, ``quiet`` a context manager
    around the call) or ``greedy`` (clusters of up to a
    whole part's weight, packed greedily in BFS order: no METIS). ``seed`` drives every hash."""
    stats = stats if stats is not None else MultilevelStats()
    n = indptr.shape[0] - 1
    vw = np.asarray(vw)
    if k <= 1 or n == 0:
        return np.zeros(n, dtype=np.int64)
    total = int(vw.sum())
    part_cap = int(np.ceil(total / k * (1.0 + ufactor / 1000.0)))
    if initial == "greedy":  # clusters of a quarter part: the packing can still balance
        cluster_cap = max(1, total // (4 * k))
    else:
        cluster_cap = max(1, total // (k * clusters_per_part))
    target = max(COARSE_MIN, COARSE_PER_PART * k) if initial == "metis" else k
    levels = [Level(indptr, indices, np.empty(0, dtype=np.int64), vw)]
    stats.sizes.append((n, int(indices.shape[0])))
    t = time.perf_counter()
    lp_s = contract_s = 0.0
    while levels[-1].n > target and len(levels) < MAX_LEVELS:
        cur = levels[-1]
        t0 = time.perf_counter()
        cid, num = _cluster_level(cur, cluster_cap, mix_key(seed, 0x636C, len(levels)))
        t1 = time.perf_counter()
        lp_s += t1 - t0
        if num * MIN_SHRINK > cur.n:  # stalled: keep the graph we have
            break
        cur.cid = cid
        levels.append(_coarsen(cur, cid, num))
        contract_s += time.perf_counter() - t1
        log.debug("coarsen: level %d: %d vertices, %d entries", len(levels) - 1,
                  levels[-1].n, levels[-1].indices.shape[0])
        stats.sizes.append((levels[-1].n, int(levels[-1].indices.shape[0])))
        if (len(levels) > 2 and levels[-1].indices.shape[0] * MIN_ENTRY_SHRINK
                > cur.indices.shape[0]):
            break  # the coarse graph stopped getting sparser
    stats.seconds["coarsen_s"] = time.perf_counter() - t
    stats.seconds["coarsen_lp_s"] = lp_s
    stats.seconds["coarsen_contract_s"] = contract_s
    t = time.perf_counter()
    top = levels[-1]
    if initial == "metis":
        sparse = top
        if top.ew.shape[0] and top.indices.shape[0] > METIS_KEEP_EDGES * 2 * top.n:
            sparse = Level(*heavy_edges(top.indptr, top.indices, top.ew, METIS_KEEP_EDGES),
                           top.vw)
        stats.sizes.append((sparse.n, int(sparse.indices.shape[0])))
        parts = _metis_weighted(sparse, k, seed, ufactor, metis_niter, quiet)
        del sparse
    else:
        from twopgraph.locality.kernels import cluster_bfs_order
        order = cluster_bfs_order(top.indptr, top.indices, np.zeros(top.n, dtype=np.int64),
                                  np.arange(top.n, dtype=np.int64),
                                  np.array([0, top.n], dtype=np.int64))
        parts = greedy_pack(top.indptr, top.indices, top.ew, top.vw, k, part_cap, order)
    stats.seconds["initial_s"] = time.perf_counter() - t
    t = time.perf_counter()
    coarse_rounds = coarse_refine_rounds(levels)
    stats.refine_rounds = coarse_rounds
    refine(top, parts, k, part_cap, mix_key(seed, 0x7266, len(levels) - 1), coarse_rounds)
    for depth in range(len(levels) - 2, -1, -1):
        fine = levels[depth]
        parts = parts[fine.cid]
        fine.cid = None
        rounds = fine_refine_rounds if depth == 0 else coarse_rounds
        if rounds:
            t0 = time.perf_counter()
            refine(fine, parts, k, part_cap, mix_key(seed, 0x7266, depth), rounds,
                   max_visit=MAX_VISIT if depth == 0 else 0)
            if depth == 0:
                stats.seconds["refine_input_s"] = time.perf_counter() - t0
        del levels[depth + 1:]
    stats.seconds["refine_s"] = time.perf_counter() - t
    return parts.astype(np.int64, copy=False)


def _metis_weighted(level: Level, k: int, seed: int, ufactor: int, niter: int,
                    quiet=None) -> np.ndarray:
    """METIS k-way on a weighted (coarse) graph; ``quiet``: a context manager around the call
    (``cluster.metis_output_to_log``: METIS' printf output goes to the log)."""
    if level.n <= k:
        return np.arange(level.n, dtype=np.int64)
    import contextlib

    import pymetis
    idx = pymetis.zero_copy_dtype()
    ew = level.ew if level.ew.shape[0] else np.ones(level.indices.shape[0], dtype=np.int64)
    opts = pymetis.Options(seed=int(seed), ufactor=int(ufactor), niter=int(niter))
    with (quiet() if quiet is not None else contextlib.nullcontext()):
        _, parts = pymetis.part_graph(
            k, pymetis.CSRAdjacency(np.ascontiguousarray(level.indptr, dtype=idx),
                                    np.ascontiguousarray(level.indices, dtype=idx)),
            vweights=np.ascontiguousarray(np.maximum(level.vw, 1), dtype=idx),
            eweights=np.ascontiguousarray(ew, dtype=idx), options=opts, recursive=False)
    return np.asarray(parts, dtype=np.int64)
