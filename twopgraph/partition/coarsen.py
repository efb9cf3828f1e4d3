"""Clustering that scales: multilevel size-constrained label propagation in numba.

:func:`multilevel_partition` splits a symmetric CSR graph (``indptr`` int64, ``indices``
int32/int64, typically memory-mapped: it is only read, never copied) into ``k`` parts of
about equal vertex weight with few cut edges:

1. **Coarsening.** Size-constrained label propagation (SCLaP, as in KaHIP / Mt-KaHyPar):
   every vertex starts in its own cluster and repeatedly joins the neighbouring cluster it has
   the heaviest edges to, unless that cluster would exceed ``cluster_cap`` weight. The
   clusters are contracted into a weighted coarse graph (:func:`contract`) and the step is
   repeated on it until the graph is small (a few dozen vertices per part) or stops
   shrinking. One level costs a few passes over the edges; the first shrinks a graph 10-100x.
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
cluster weights as they were when the sub-round began (:func:`lp_propose`, which only reads
shared state), then one serial pass applies the moves in vertex order, each only if its
target still has room (:func:`lp_apply`). Ties are broken by a hash of the label. Nothing
depends on the thread count or the order in which threads run.

**Memory.** Beyond the input (read in place), the largest structures are a few arrays of N
entries (labels and cluster weights of the first level, the vertex order of the sub-rounds,
the coarse id of each vertex: about 30 bytes per vertex) and the coarse graphs, whose entries
are at most the cut edges of the first level's clusters. The hash tables that sum a vertex's
connections are per block of vertices, sized to the block's largest degree.

Every kernel has a NumPy/Python twin registered with :func:`twopgraph.jit.register`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
from numba import njit, prange

from ..jit import register
from ..rng import mix_key, splitmix64, splitmix64_ref

log = logging.getLogger("twopgraph")

#: vertices per parallel work item of the label-propagation and contraction kernels
BLOCK = 1024
#: sub-rounds per label-propagation round (moves of one sub-round see the previous ones)
SUBROUNDS = 8
#: label-propagation rounds per coarsening level, and per refinement level (coarse, fine)
CLUSTER_ROUNDS = 3
REFINE_ROUNDS = 4
FINE_REFINE_ROUNDS = 1
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
#: or a level shrinks it by less than MIN_SHRINK
COARSE_PER_PART = 24
COARSE_MIN = 20_000
MIN_SHRINK = 1.4
MAX_LEVELS = 8
#: METIS sees each coarse vertex's METIS_KEEP_EDGES heaviest edges (and every edge at least
#: as heavy as one of its ends' such edges): coarse graphs are dense (hundreds of neighbours
#: per vertex, most of them light), and METIS' time grows with the edges
METIS_KEEP_EDGES = 16

_MIX = np.uint64(0x9E3779B97F4A7C15)


# -- label propagation ----------------------------------------------------------------------------
@njit(inline="always", cache=True)
def _slot(label, mask):
    h = np.uint64(label) * _MIX
    return np.int64((h >> np.uint64(29)) & np.uint64(mask))


@njit(inline="always", cache=True)
def _table_add(tkeys, tvals, touched, nt, key, mask, w):
    """Add ``w`` to ``key``'s value in the open-addressing table ``tkeys``/``tvals`` (empty
    slots -1), recording a new slot in ``touched[nt]``; returns the new ``nt``."""
    s = _slot(key, mask)
    while tkeys[s] != -1 and tkeys[s] != key:
        s = (s + 1) & mask
    if tkeys[s] == -1:
        tkeys[s] = key
        tvals[s] = 0
        touched[nt] = s
        nt += 1
    tvals[s] += w
    return nt


@njit(inline="always", cache=True)
def _mask_for(d):
    """Mask of the hash table for ``d`` keys: a power of two >= 2 d (at least 4), minus 1."""
    size = 4
    while size < 2 * d:
        size *= 2
    return size - 1


@njit(parallel=True, nogil=True, cache=True)
def lp_propose(indptr, indices, ew, labels, vw, cw, cap, members, key, max_visit):
    """Moves of one sub-round: ``out[i]`` = the label ``members[i]`` moves to, or -1.

    A vertex ``v`` sums its edge weights (``ew``; empty = every edge weighs 1) per neighbour
    label -- over all its edges, or, when it has more than ``max_visit`` > 0, over
    ``max_visit`` consecutive ones (cyclically) from offset ``splitmix64(key ^ v) % degree``
    (a sample that costs one contiguous read) -- and picks the label ``b != labels[v]`` with the largest sum among those with
    ``cw[b] + vw[v] <= cap`` (ties: the smallest ``splitmix64(key ^ b)``); it moves when that
    sum exceeds the sum to its own label. Only reads ``labels`` and ``cw``: parallel over
    blocks of ``members``, deterministic."""
    m = members.shape[0]
    out = np.full(m, -1, dtype=np.int64)
    weighted = ew.shape[0] > 0
    nblocks = (m + BLOCK - 1) // BLOCK
    for blk in prange(nblocks):
        lo = blk * BLOCK
        hi = min(m, lo + BLOCK)
        maxdeg = 1
        for i in range(lo, hi):
            v = members[i]
            d = indptr[v + 1] - indptr[v]
            if d > maxdeg:
                maxdeg = d
        size = _mask_for(maxdeg) + 1
        tkeys = np.full(size, -1, dtype=np.int64)
        tvals = np.zeros(size, dtype=np.int64)
        touched = np.empty(maxdeg, dtype=np.int64)
        for i in range(lo, hi):
            v = members[i]
            own = np.int64(labels[v])
            nt = 0
            d = indptr[v + 1] - indptr[v]
            visit = d if (max_visit <= 0 or d <= max_visit) else max_visit
            off = 0 if visit == d else np.int64(splitmix64(key ^ np.uint64(v)) % np.uint64(d))
            mask = _mask_for(visit)  # a small table for a small degree
            for t in range(visit):
                j = indptr[v] + (off + t) % d
                u = indices[j]
                if u == v:
                    continue
                nt = _table_add(tkeys, tvals, touched, nt, np.int64(labels[u]), mask,
                                ew[j] if weighted else 1)
            wv = vw[v]
            own_conn = 0
            best = -1
            best_conn = 0
            best_tie = np.uint64(0)
            for t in range(nt):
                s = touched[t]
                lab = tkeys[s]
                c = tvals[s]
                tkeys[s] = -1
                if lab == own:
                    own_conn = c
                elif cw[lab] + wv <= cap:
                    tie = splitmix64(key ^ np.uint64(lab))
                    if best < 0 or c > best_conn or (c == best_conn and tie < best_tie):
                        best = lab
                        best_conn = c
                        best_tie = tie
            if best >= 0 and best_conn > own_conn:
                out[i] = best
    return out


def lp_propose_ref(indptr, indices, ew, labels, vw, cw, cap, members, key, max_visit):
    """Python twin of :func:`lp_propose` (a dict per vertex)."""
    out = np.full(len(members), -1, dtype=np.int64)
    for i, v in enumerate(np.asarray(members).tolist()):
        conn: dict[int, int] = {}
        d = int(indptr[v + 1] - indptr[v])
        visit = d if (max_visit <= 0 or d <= max_visit) else max_visit
        off = 0 if visit == d else splitmix64_ref(int(key) ^ v) % d
        for j in (int(indptr[v]) + (off + t) % d for t in range(visit)):
            u = int(indices[j])
            if u != v:
                lab = int(labels[u])
                conn[lab] = conn.get(lab, 0) + (int(ew[j]) if len(ew) else 1)
        own = int(labels[v])
        cands = [(-c, splitmix64_ref(int(key) ^ lab), lab) for lab, c in conn.items()
                 if lab != own and int(cw[lab]) + int(vw[v]) <= cap]
        if cands:
            negc, _, lab = min(cands)
            if -negc > conn.get(own, 0):
                out[i] = lab
    return out


@njit(nogil=True, cache=True)
def lp_apply(members, targets, labels, vw, cw, cap):
    """Apply the moves of :func:`lp_propose` in order, each only while its target has room
    (``cw[target] + vw[v] <= cap``); updates ``labels`` and ``cw`` in place, returns the
    number of vertices moved. Serial (the order makes it deterministic)."""
    moved = 0
    for i in range(members.shape[0]):
        b = targets[i]
        if b < 0:
            continue
        v = members[i]
        w = vw[v]
        if cw[b] + w > cap:
            continue
        cw[labels[v]] -= w
        cw[b] += w
        labels[v] = b
        moved += 1
    return moved


def lp_apply_ref(members, targets, labels, vw, cw, cap):
    """Python twin of :func:`lp_apply`."""
    moved = 0
    for v, b in zip(np.asarray(members).tolist(), np.asarray(targets).tolist()):
        if b >= 0 and cw[b] + vw[v] <= cap:
            cw[labels[v]] -= vw[v]
            cw[b] += vw[v]
            labels[v] = b
            moved += 1
    return moved


@njit(nogil=True, cache=True)
def subround_order(key, nsub, out, start):
    """Vertices ``0..n-1`` (``n = out.shape[0]``) grouped by sub-round
    ``splitmix64(key ^ v) % nsub``, ascending within a group, into ``out``; ``start``
    (nsub + 1) delimits the groups. Serial counting sort."""
    n = out.shape[0]
    start[:] = 0
    for v in range(n):
        start[np.int64(splitmix64(key ^ np.uint64(v)) % np.uint64(nsub)) + 1] += 1
    for s in range(nsub):
        start[s + 1] += start[s]
    pos = start[:nsub].copy()
    for v in range(n):
        s = np.int64(splitmix64(key ^ np.uint64(v)) % np.uint64(nsub))
        out[pos[s]] = v
        pos[s] += 1


def subround_order_ref(key, nsub, out, start):
    """NumPy twin of :func:`subround_order`."""
    n = out.shape[0]
    sub = np.array([splitmix64_ref(int(key) ^ v) % nsub for v in range(n)], dtype=np.int64)
    out[:] = np.argsort(sub, kind="stable")
    start[:] = np.concatenate([[0], np.cumsum(np.bincount(sub, minlength=nsub))])


# -- contraction ----------------------------------------------------------------------------------
@njit(nogil=True, cache=True)
def group_by(cid, num):
    """``(start, members)``: vertices sorted by ``cid`` (ids ``0..num-1``, ascending ids
    within a group, int64), ``start`` (num + 1) delimiting the groups. Serial counting sort."""
    n = cid.shape[0]
    start = np.zeros(num + 1, dtype=np.int64)
    for v in range(n):
        start[cid[v] + 1] += 1
    for c in range(num):
        start[c + 1] += start[c]
    pos = start[:num].copy()
    members = np.empty(n, dtype=np.int64)
    for v in range(n):
        c = cid[v]
        members[pos[c]] = v
        pos[c] += 1
    return start, members


def group_by_ref(cid, num):
    """NumPy twin of :func:`group_by`."""
    cid = np.asarray(cid, dtype=np.int64)
    start = np.concatenate([[0], np.cumsum(np.bincount(cid, minlength=num))]).astype(np.int64)
    return start, np.argsort(cid, kind="stable").astype(np.int64)


@njit(inline="always", cache=True)
def _row(indptr, indices, ew, cid, start, members, c, tkeys, tvals, touched, num, weighted):
    """Sum the edges of coarse vertex ``c`` per neighbouring coarse vertex (self excluded)
    into the hash table (a part of it sized to ``c``'s summed degree); returns the number of
    distinct neighbours."""
    dsum = 0
    for k in range(start[c], start[c + 1]):
        v = members[k]
        dsum += indptr[v + 1] - indptr[v]
    mask = _mask_for(min(dsum, num))
    nt = 0
    for k in range(start[c], start[c + 1]):
        v = members[k]
        for j in range(indptr[v], indptr[v + 1]):
            d = np.int64(cid[indices[j]])
            if d == c:
                continue
            nt = _table_add(tkeys, tvals, touched, nt, d, mask, ew[j] if weighted else 1)
    return nt


@njit(nogil=True, cache=True)
def _table_size(indptr, start, members, lo, hi, num):
    """Hash-table size for the groups ``lo..hi``: a power of two >= 2 x the largest number of
    distinct neighbours one of them can have (its summed degree, at most ``num``)."""
    maxdeg = 1
    for c in range(lo, hi):
        d = 0
        for k in range(start[c], start[c + 1]):
            v = members[k]
            d += indptr[v + 1] - indptr[v]
        d = min(d, num)
        if d > maxdeg:
            maxdeg = d
    return _mask_for(maxdeg) + 1, maxdeg


@njit(parallel=True, nogil=True, cache=True)
def contract(indptr, indices, ew, cid, start, members):
    """The coarse graph of the grouping ``cid`` (``start``/``members`` from :func:`group_by`):
    ``(indptr, indices, weights)`` (int64), one row per group, its neighbouring groups in
    ascending order with the summed weights (``ew``; empty = 1 per edge) of the fine edges
    between them; edges inside a group are dropped. Two parallel passes over blocks of groups
    (count, then fill)."""
    num = start.shape[0] - 1
    weighted = ew.shape[0] > 0
    nblocks = (num + BLOCK - 1) // BLOCK
    counts = np.zeros(num + 1, dtype=np.int64)
    for blk in prange(nblocks):
        lo = blk * BLOCK
        hi = min(num, lo + BLOCK)
        size, maxdeg = _table_size(indptr, start, members, lo, hi, num)
        tkeys = np.full(size, -1, dtype=np.int64)
        tvals = np.zeros(size, dtype=np.int64)
        touched = np.empty(maxdeg, dtype=np.int64)
        for c in range(lo, hi):
            nt = _row(indptr, indices, ew, cid, start, members, c, tkeys, tvals, touched,
                      num, weighted)
            counts[c + 1] = nt
            for t in range(nt):
                tkeys[touched[t]] = -1
    for c in range(num):
        counts[c + 1] += counts[c]
    out_idx = np.empty(counts[num], dtype=np.int64)
    out_w = np.empty(counts[num], dtype=np.int64)
    for blk in prange(nblocks):
        lo = blk * BLOCK
        hi = min(num, lo + BLOCK)
        size, maxdeg = _table_size(indptr, start, members, lo, hi, num)
        tkeys = np.full(size, -1, dtype=np.int64)
        tvals = np.zeros(size, dtype=np.int64)
        touched = np.empty(maxdeg, dtype=np.int64)
        for c in range(lo, hi):
            nt = _row(indptr, indices, ew, cid, start, members, c, tkeys, tvals, touched,
                      num, weighted)
            o = counts[c]
            keys = np.empty(nt, dtype=np.int64)
            for t in range(nt):
                keys[t] = tkeys[touched[t]]
            order = np.argsort(keys)
            for t in range(nt):
                s = touched[order[t]]
                out_idx[o + t] = tkeys[s]
                out_w[o + t] = tvals[s]
            for t in range(nt):
                tkeys[touched[t]] = -1
    return counts, out_idx, out_w


def contract_ref(indptr, indices, ew, cid, start, members):
    """NumPy twin of :func:`contract`."""
    num = start.shape[0] - 1
    cid = np.asarray(cid, dtype=np.int64)
    src = np.repeat(cid, np.diff(indptr))
    dst = cid[np.asarray(indices)]
    w = np.asarray(ew, dtype=np.int64) if len(ew) else np.ones(src.shape[0], dtype=np.int64)
    keep = src != dst
    pair, inv = np.unique(src[keep] * num + dst[keep], return_inverse=True)
    weights = np.bincount(inv.ravel(), weights=w[keep], minlength=pair.shape[0])
    out_indptr = np.zeros(num + 1, dtype=np.int64)
    np.cumsum(np.bincount(pair // num, minlength=num), out=out_indptr[1:])
    return out_indptr, (pair % num).astype(np.int64), np.rint(weights).astype(np.int64)


# -- sparsification of a weighted coarse graph for METIS ------------------------------------------
@njit(parallel=True, nogil=True, cache=True)
def heavy_edges(indptr, indices, ew, keep):
    """The symmetric subgraph of the heavy edges: ``{u, v}`` stays when its weight is at least
    ``min(t_u, t_v)``, ``t_u`` the ``keep``-th largest edge weight of ``u`` (0 when ``u`` has
    at most ``keep`` edges): every vertex keeps at least its ``keep`` heaviest edges.
    Returns ``(indptr, indices, weights)`` (int64; rows keep their order)."""
    n = indptr.shape[0] - 1
    thr = np.zeros(n, dtype=np.int64)
    for u in prange(n):
        d = indptr[u + 1] - indptr[u]
        if d > keep:
            w = np.sort(ew[indptr[u]:indptr[u + 1]])
            thr[u] = w[d - keep]
    counts = np.zeros(n + 1, dtype=np.int64)
    for u in prange(n):
        c = 0
        for j in range(indptr[u], indptr[u + 1]):
            if ew[j] >= min(thr[u], thr[indices[j]]):
                c += 1
        counts[u + 1] = c
    out_ptr = np.cumsum(counts)
    out_idx = np.empty(out_ptr[n], dtype=np.int64)
    out_w = np.empty(out_ptr[n], dtype=np.int64)
    for u in prange(n):
        o = out_ptr[u]
        for j in range(indptr[u], indptr[u + 1]):
            if ew[j] >= min(thr[u], thr[indices[j]]):
                out_idx[o] = indices[j]
                out_w[o] = ew[j]
                o += 1
    return out_ptr, out_idx, out_w


def heavy_edges_ref(indptr, indices, ew, keep):
    """NumPy twin of :func:`heavy_edges`."""
    n = indptr.shape[0] - 1
    deg = np.diff(indptr)
    thr = np.zeros(n, dtype=np.int64)
    for u in range(n):
        if deg[u] > keep:
            thr[u] = np.sort(ew[indptr[u]:indptr[u + 1]])[deg[u] - keep]
    src = np.repeat(np.arange(n), deg)
    ok = ew >= np.minimum(thr[src], thr[indices])
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src[ok], minlength=n), out=out_ptr[1:])
    return out_ptr, np.asarray(indices, dtype=np.int64)[ok], np.asarray(ew, dtype=np.int64)[ok]


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


def greedy_pack_ref(indptr, indices, ew, vw, k, cap, order):
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


# -- BFS balls of training vertices (the --schedule auto probe) ------------------------------------
@njit(nogil=True, cache=True)
def ball_seeds(indptr, indices, is_train, starts, count, limit, visited):
    """Up to ``count`` training vertices (``is_train`` uint8, N) in BFS order from
    ``starts[0]`` (the next start not yet reached when a component is exhausted), visiting at
    most ``limit`` vertices: seeds about as close together as a BFS finds them, a local batch
    without clustering. ``visited`` (uint8, N, zeros) is used and zeroed again."""
    queue = np.empty(limit, dtype=np.int64)
    seeds = np.empty(count, dtype=np.int64)
    found = 0
    tail = 0
    head = 0
    for si in range(starts.shape[0]):
        r = starts[si]
        if visited[r] or found == count or tail == limit:
            continue
        visited[r] = 1
        queue[tail] = r
        tail += 1
        while head < tail and found < count:
            u = queue[head]
            head += 1
            if is_train[u]:
                seeds[found] = u
                found += 1
            for j in range(indptr[u], indptr[u + 1]):
                w = indices[j]
                if visited[w] == 0 and tail < limit:
                    visited[w] = 1
                    queue[tail] = w
                    tail += 1
    for i in range(tail):
        visited[queue[i]] = 0
    return seeds[:found]


def ball_seeds_ref(indptr, indices, is_train, starts, count, limit, visited):
    """Python twin of :func:`ball_seeds`."""
    from collections import deque
    seen: set = set()
    queue: deque = deque()
    seeds: list = []
    for r in np.asarray(starts).tolist():
        if r in seen or len(seeds) == count or len(seen) == limit:
            continue
        seen.add(r)
        queue.append(r)
        while queue and len(seeds) < count:
            u = queue.popleft()
            if is_train[u]:
                seeds.append(u)
            for w in np.asarray(indices[indptr[u]:indptr[u + 1]]).tolist():
                if w not in seen and len(seen) < limit:
                    seen.add(w)
                    queue.append(w)
    return np.asarray(seeds, dtype=np.int64)


register(lp_propose, lp_propose_ref)
register(lp_apply, lp_apply_ref)
register(subround_order, subround_order_ref)
register(group_by, group_by_ref)
register(contract, contract_ref)
register(greedy_pack, greedy_pack_ref)
register(ball_seeds, ball_seeds_ref)
register(heavy_edges, heavy_edges_ref)


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


def multilevel_partition(indptr, indices, vw, k: int, *, seed: int = 0, ufactor: int = 30,
                         initial: str = "metis", metis_niter: int = 10,
                         clusters_per_part: int = CLUSTERS_PER_PART,
                         fine_refine_rounds: int = FINE_REFINE_ROUNDS,
                         stats: MultilevelStats | None = None, quiet=None) -> np.ndarray:
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
    while levels[-1].n > target and len(levels) < MAX_LEVELS:
        cur = levels[-1]
        cid, num = _cluster_level(cur, cluster_cap, mix_key(seed, 0x636C, len(levels)))
        if num * MIN_SHRINK > cur.n:  # stalled: keep the graph we have
            break
        cur.cid = cid
        levels.append(_coarsen(cur, cid, num))
        stats.sizes.append((levels[-1].n, int(levels[-1].indices.shape[0])))
        log.debug("coarsen: level %d: %d vertices, %d entries", len(levels) - 1,
                  levels[-1].n, levels[-1].indices.shape[0])
    stats.seconds["coarsen_s"] = time.perf_counter() - t
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
        from .kernels import cluster_bfs_order
        order = cluster_bfs_order(top.indptr, top.indices, np.zeros(top.n, dtype=np.int64),
                                  np.arange(top.n, dtype=np.int64),
                                  np.array([0, top.n], dtype=np.int64))
        parts = greedy_pack(top.indptr, top.indices, top.ew, top.vw, k, part_cap, order)
    stats.seconds["initial_s"] = time.perf_counter() - t
    t = time.perf_counter()
    refine(top, parts, k, part_cap, mix_key(seed, 0x7266, len(levels) - 1), REFINE_ROUNDS)
    for depth in range(len(levels) - 2, -1, -1):
        fine = levels[depth]
        parts = parts[fine.cid]
        fine.cid = None
        rounds = fine_refine_rounds if depth == 0 else REFINE_ROUNDS
        if rounds:
            refine(fine, parts, k, part_cap, mix_key(seed, 0x7266, depth), rounds,
                   max_visit=MAX_VISIT if depth == 0 else 0)
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
