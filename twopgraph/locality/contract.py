"""Graph contraction for the multilevel coarsening (:mod:`twopgraph.locality.coarsen`): the
vertices grouped by coarse id (:func:`group_by`), the weighted coarse graph of a grouping
(:func:`contract`: edges between groups summed, edges inside a group dropped) and the
sparsification of a weighted coarse graph to its heavy edges before METIS
(:func:`heavy_edges`). CSR in and out (``indptr``, ``indices``, weights: int64).

Every kernel has a NumPy/Python twin registered with :func:`twopgraph.runtime.jit.register`.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from twopgraph.locality.labelprop import BLOCK, _mask_for, _table_add
from twopgraph.runtime.jit import register
from twopgraph.runtime.prefetch import PREFETCH_DIST, prefetch


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


def group_by_ref(cid: np.ndarray, num: int) -> tuple[np.ndarray, np.ndarray]:
    """NumPy twin of :func:`group_by`."""
    cid = np.asarray(cid, dtype=np.int64)
    start = np.concatenate([[0], np.cumsum(np.bincount(cid, minlength=num))]).astype(np.int64)
    return start, np.argsort(cid, kind="stable").astype(np.int64)


@njit(inline="always", cache=True)
def _cid_ahead(cur, indptr, indices, cid, members, kend):
    """Advance the look-ahead cursor ``cur`` (position in ``members``, edge, end of its
    row) by one edge of the member stream and prefetch that edge's ``cid`` entry."""
    k = cur[0]
    j = cur[1] + 1
    end = cur[2]
    while j >= end and k < kend:
        k += 1
        if k < kend:
            v = members[k]
            j = indptr[v]
            end = indptr[v + 1]
    cur[0] = k
    cur[1] = j
    cur[2] = end
    if k < kend:
        prefetch(cid, indices[j])


@njit(inline="always", cache=True)
def _row(indptr, indices, ew, cid, start, members, c, tkeys, tvals, touched, num, weighted,
         cur, kend):
    """Sum the edges of coarse vertex ``c`` per neighbouring coarse vertex (self excluded)
    into the hash table (a part of it sized to ``c``'s summed degree); returns the number of
    distinct neighbours. The members are scattered over the fine graph: the rows of the
    members ``PREFETCH_DIST`` ahead and, through ``cur``, the ``cid`` entry ``PREFETCH_DIST``
    edges ahead are prefetched (``kend``: the end of the block's members)."""
    dsum = 0
    for k in range(start[c], start[c + 1]):
        v = members[k]
        dsum += indptr[v + 1] - indptr[v]
    mask = _mask_for(min(dsum, num))
    nt = 0
    for k in range(start[c], start[c + 1]):
        v = members[k]
        if k + 2 * PREFETCH_DIST < kend:
            prefetch(indptr, members[k + 2 * PREFETCH_DIST])
        if k + PREFETCH_DIST < kend:
            prefetch(indices, indptr[members[k + PREFETCH_DIST]])
        for j in range(indptr[v], indptr[v + 1]):
            _cid_ahead(cur, indptr, indices, cid, members, kend)
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


@njit(nogil=True, cache=True)
def _block_tables(indptr, start, members, lo, hi, num):
    """An empty hash table (keys -1, values 0) sized by :func:`_table_size` for the groups
    ``lo..hi`` and a scratch array of its touched slots: ``(tkeys, tvals, touched)``."""
    size, maxdeg = _table_size(indptr, start, members, lo, hi, num)
    return (np.full(size, -1, dtype=np.int64), np.zeros(size, dtype=np.int64),
            np.empty(maxdeg, dtype=np.int64))


@njit(parallel=True, nogil=True, cache=True)
def _rows_pass(indptr, indices, ew, cid, start, members, counts, out_idx, out_w, fill):
    """One parallel pass over blocks of groups: ``fill`` False writes each group's number of
    neighbouring groups to ``counts[c + 1]``; True writes its row, sorted by neighbour, at
    ``counts[c]`` (the prefix sums) of ``out_idx``/``out_w``."""
    num = start.shape[0] - 1
    weighted = ew.shape[0] > 0
    for blk in prange((num + BLOCK - 1) // BLOCK):
        lo = blk * BLOCK
        hi = min(num, lo + BLOCK)
        tkeys, tvals, touched = _block_tables(indptr, start, members, lo, hi, num)
        kend = start[hi]
        cur = np.zeros(3, dtype=np.int64)  # see _cid_ahead
        cur[0] = start[lo] - 1
        for _ in range(PREFETCH_DIST):
            _cid_ahead(cur, indptr, indices, cid, members, kend)
        for c in range(lo, hi):
            nt = _row(indptr, indices, ew, cid, start, members, c, tkeys, tvals, touched,
                      num, weighted, cur, kend)
            if fill:
                o = counts[c]
                keys = np.empty(nt, dtype=np.int64)
                for t in range(nt):
                    keys[t] = tkeys[touched[t]]
                order = np.argsort(keys)
                for t in range(nt):
                    s = touched[order[t]]
                    out_idx[o + t] = tkeys[s]
                    out_w[o + t] = tvals[s]
            else:
                counts[c + 1] = nt
            for t in range(nt):
                tkeys[touched[t]] = -1


@njit(nogil=True, cache=True)
def contract(indptr, indices, ew, cid, start, members):
    """The coarse graph of the grouping ``cid`` (``start``/``members`` from :func:`group_by`):
    ``(indptr, indices, weights)`` (int64), one row per group, its neighbouring groups in
    ascending order with the summed weights (``ew``; empty = 1 per edge) of the fine edges
    between them; edges inside a group are dropped. Two parallel passes of
    :func:`_rows_pass` (count, then fill)."""
    num = start.shape[0] - 1
    counts = np.zeros(num + 1, dtype=np.int64)
    none = np.empty(0, dtype=np.int64)
    _rows_pass(indptr, indices, ew, cid, start, members, counts, none, none, False)
    for c in range(num):
        counts[c + 1] += counts[c]
    out_idx = np.empty(counts[num], dtype=np.int64)
    out_w = np.empty(counts[num], dtype=np.int64)
    _rows_pass(indptr, indices, ew, cid, start, members, counts, out_idx, out_w, True)
    return counts, out_idx, out_w


def contract_ref(indptr: np.ndarray, indices: np.ndarray, ew: np.ndarray, cid: np.ndarray,
                 start: np.ndarray,
                 members: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


def heavy_edges_ref(indptr: np.ndarray, indices: np.ndarray, ew: np.ndarray,
                    keep: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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



register(group_by, group_by_ref)
register(contract, contract_ref)
register(heavy_edges, heavy_edges_ref)
