"""Size-constrained label propagation kernels (the coarsening and refinement steps of
:mod:`twopgraph.locality.coarsen`): the moves of one sub-round computed in parallel against
the labels as they were (:func:`lp_propose`), applied serially in vertex order while their
target has room (:func:`lp_apply`), and the vertices of a round grouped by sub-round
(:func:`subround_order`); with the open-addressing hash table that sums a vertex's edge
weights per neighbour label (also used by :mod:`twopgraph.locality.contract`).

Every kernel has a NumPy/Python twin registered with :func:`twopgraph.runtime.jit.register`.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from twopgraph.core.rng import splitmix64, splitmix64_ref
from twopgraph.runtime.jit import register
from twopgraph.runtime.prefetch import PREFETCH_DIST, prefetch

#: vertices per parallel work item of the label-propagation and contraction kernels
BLOCK = 1024

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


@njit(inline="always", cache=True)
def _label_ahead(cur, indptr, indices, labels, members, hi, key, max_visit):
    """Advance the look-ahead cursor ``cur`` (position in ``members``, edge of its visit,
    its visit length, its window offset) by one visited edge of :func:`lp_propose` and
    prefetch that edge's ``labels`` entry (nothing once past ``members[hi - 1]``)."""
    i = cur[0]
    t = cur[1] + 1
    visit = cur[2]
    while t >= visit and i < hi:
        i += 1
        t = 0
        if i < hi:
            v = members[i]
            d = indptr[v + 1] - indptr[v]
            visit = d if (max_visit <= 0 or d <= max_visit) else max_visit
            cur[3] = (0 if visit == d
                      else np.int64(splitmix64(key ^ np.uint64(v)) % np.uint64(d)))
    cur[0] = i
    cur[1] = t
    cur[2] = visit
    if i < hi:
        v = members[i]
        d = indptr[v + 1] - indptr[v]
        q = cur[3] + t
        if q >= d:
            q -= d
        prefetch(labels, indices[indptr[v] + q])


@njit(parallel=True, nogil=True, cache=True)
def lp_propose(indptr, indices, ew, labels, vw, cw, cap, members, key, max_visit):
    """Moves of one sub-round: ``out[i]`` = the label ``members[i]`` moves to, or -1.

    A vertex ``v`` sums its edge weights (``ew``; empty = every edge weighs 1) per neighbour
    label -- over all its edges, or, when it has more than ``max_visit`` > 0, over
    ``max_visit`` consecutive ones (cyclically) from offset ``splitmix64(key ^ v) % degree``
    (a sample that costs one contiguous read) -- and picks the label ``b != labels[v]`` with the
    largest sum among those with ``cw[b] + vw[v] <= cap`` (ties: the smallest ``splitmix64(key ^
    b)``); it moves when that sum exceeds the sum to its own label. Only reads ``labels`` and
    ``cw``: parallel over blocks of ``members``, deterministic."""
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
        # a cursor PREFETCH_DIST visited edges ahead of the current one (across vertices)
        # prefetches the label it will read: the labels of the neighbours are random reads
        cur = np.zeros(4, dtype=np.int64)  # vertex position, edge, visit, offset
        cur[0] = lo - 1
        for _ in range(PREFETCH_DIST):
            _label_ahead(cur, indptr, indices, labels, members, hi, key, max_visit)
        for i in range(lo, hi):
            v = members[i]
            own = np.int64(labels[v])
            nt = 0
            d = indptr[v + 1] - indptr[v]
            visit = d if (max_visit <= 0 or d <= max_visit) else max_visit
            off = 0 if visit == d else np.int64(splitmix64(key ^ np.uint64(v)) % np.uint64(d))
            mask = _mask_for(visit)  # a small table for a small degree
            for t in range(visit):
                _label_ahead(cur, indptr, indices, labels, members, hi, key, max_visit)
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


def lp_propose_ref(indptr: np.ndarray, indices: np.ndarray, ew: np.ndarray, labels: np.ndarray,
                   vw: np.ndarray, cw: np.ndarray, cap: int, members: np.ndarray,
                   key: int | np.integer, max_visit: int) -> np.ndarray:
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


def lp_apply_ref(members: np.ndarray, targets: np.ndarray, labels: np.ndarray, vw: np.ndarray,
                 cw: np.ndarray, cap: int) -> int:
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


def subround_order_ref(key: int | np.integer, nsub: int, out: np.ndarray,
                       start: np.ndarray) -> None:
    """NumPy twin of :func:`subround_order`."""
    n = out.shape[0]
    sub = np.array([splitmix64_ref(int(key) ^ v) % nsub for v in range(n)], dtype=np.int64)
    out[:] = np.argsort(sub, kind="stable")
    start[:] = np.concatenate([[0], np.cumsum(np.bincount(sub, minlength=nsub))])


register(lp_propose, lp_propose_ref)
register(lp_apply, lp_apply_ref)
register(subround_order, subround_order_ref)
