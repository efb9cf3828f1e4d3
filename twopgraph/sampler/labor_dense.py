"""LABOR-1's kernels from each vertex's smallest dst degree (no candidate numbering), with twins.

One fixed-point round from pi = 1, where c_s = k / d_s, gives pi_t = max_s min(1, k / d_s) =
min(1, k / (min_s d_s)): the smallest degree among t's dsts decides it. Kept per vertex in
an integer array, it needs no numbering of the candidates (no gather of the dsts' rows, no
relabelling pass) and half the bytes of a float64 pi.

:func:`labor_min_degree` fills the per-vertex scratch, :func:`labor_sample_dense` (parallel
over dsts) and :func:`labor_sample_dense_serial` sample a layer from it, and
:func:`labor_sample_dense_onepass` does both in one pass over the rows on one thread (the
default training's sampling thread). Their twins number the candidates and run the general
path's twins (:func:`~twopgraph.sampler.labor_pi.labor_pi_ref`,
:func:`~twopgraph.sampler.labor_kernels.labor_sample_ref`): the same kept edges and weights.
The general LABOR kernels (any ``pi``, LABOR-0, batch dependency's variates) are in
:mod:`twopgraph.sampler.labor_kernels`.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from twopgraph.runtime.jit import register
from twopgraph.runtime.prefetch import MAP_PREFETCH_DIST, PREFETCH_DIST, prefetch
from twopgraph.sampler.labor_kernels import (
    _keep,
    _kept_buffers,
    _normalise,
    _room,
    labor_sample_ref,
)
from twopgraph.sampler.labor_pi import (
    _ROWS_AHEAD,
    _SOLVE_CHUNK,
    _prefetch_row,
    _row_starts,
    _saturate_from,
    labor_pi_ref,
)
from twopgraph.sampler.labor_variates import variate


@njit(inline="always", cache=True)
def _pi_deg(dm, k):
    """LABOR-1's ``pi`` of a vertex whose smallest dst degree is ``dm`` (the float
    :func:`labor_pi` gets)."""
    return 1.0 if dm <= k else k / dm


@njit(inline="always", cache=True)
def _pi_of(dmin, t, k):
    """LABOR-1's ``pi_t`` from ``t``'s smallest dst degree in ``dmin``."""
    return _pi_deg(dmin[t], k)


@njit(inline="always", cache=True)
def _mark_row_dense(indices, st, d, ci, buf, key0, key1, ca, cb, smooth, nbrs, weights, o):
    """:func:`_keep_row_dense`'s choice of a row with a finite scale ``ci``: every neighbour
    written at the next free slot of ``nbrs`` with its probability ``min(1, ci buf[j])`` in
    ``weights``, the slot taken when it is kept; returns how many were."""
    m = 0
    for j in range(d):
        t = indices[st + j]
        p = ci * buf[j]
        sure = p >= 1.0
        p = 1.0 if sure else p
        keep = sure | (variate(key0, key1, ca, cb, smooth, t) <= p)
        nbrs[o + m] = t
        weights[o + m] = p
        m += keep
    return m


@njit(inline="always", cache=True)
def _keep_row_dense(indices, st, d, ci, buf, key0, key1, ca, cb, smooth, nbrs, weights, o):
    """Keep the row ``indices[st:st+d]``'s neighbours with scale ``ci`` and the row's ``pi``
    in ``buf`` (a certain edge keeps whatever its variate), writing them and their
    normalised inverse probabilities from ``o`` on (``nbrs`` and ``weights`` have room for
    ``d`` entries there); returns how many were kept. Branch-free: every neighbour is
    written at the next free slot with its probability, and the slot is taken only when the
    neighbour is kept (a kept edge is ~1 in 10 on a large layer, so a branch on it
    mispredicts); the kept ones' inverse probabilities are then summed in row order."""
    if ci == np.inf:
        for j in range(d):
            nbrs[o + j] = indices[st + j]
            weights[o + j] = 1.0
        m = d
    elif smooth:
        m = _mark_row_dense(indices, st, d, ci, buf, key0, key1, ca, cb, True, nbrs, weights,
                            o)
    else:  # a loop of its own: the smooth variates' calls would crowd its registers
        m = _mark_row_dense(indices, st, d, ci, buf, key0, key1, ca, cb, False, nbrs,
                            weights, o)
    total = 0.0
    for q in range(o, o + m):
        w = 1.0 / weights[q]
        weights[q] = w
        total += w
    _normalise(weights, o, m, total)
    return m


@njit(nogil=True, cache=True)
def labor_min_degree(indptr, indices, nodes, dmin):
    """The smallest degree of the dsts ``nodes`` that have ``t`` as a neighbour, into
    ``dmin[t]`` (integers, one per vertex, 0 everywhere on entry: dsts with a neighbour have
    degree >= 1), for every neighbour ``t`` of ``nodes``; returns ``touched``, those ``t`` in
    order of first appearance (dtype of ``indices``), for the caller to zero ``dmin[touched]``
    afterwards. One serial pass over the dsts' rows (the neighbour ``PREFETCH_DIST`` ahead in
    a row prefetched). Memory: ``dmin`` held by the caller, one id per in-edge of the dsts
    (``touched``'s capacity)."""
    n = nodes.shape[0]
    m = 0
    for i in range(n):
        m += indptr[nodes[i] + 1] - indptr[nodes[i]]
    touched = np.empty(m, dtype=indices.dtype)
    count = 0
    for i in range(n):
        _prefetch_row(indptr, indices, nodes, i + _ROWS_AHEAD)
        v = nodes[i]
        st = indptr[v]
        d = indptr[v + 1] - st
        for j in range(d):
            if j + PREFETCH_DIST < d:
                prefetch(dmin, indices[st + j + PREFETCH_DIST])
            t = indices[st + j]
            q = dmin[t]
            if q == 0:
                touched[count] = t
                count += 1
                dmin[t] = d
            elif d < q:
                dmin[t] = d
    return touched[:count]


def labor_min_degree_ref(indptr: np.ndarray, indices: np.ndarray, nodes: np.ndarray,
                         dmin: np.ndarray) -> np.ndarray:
    """NumPy twin of :func:`labor_min_degree`."""
    nodes = np.asarray(nodes, dtype=np.int64)
    deg = indptr[nodes + 1] - indptr[nodes]
    every = np.concatenate([np.asarray(indices[indptr[v]:indptr[v + 1]]) for v in nodes]
                           + [np.empty(0, dtype=indices.dtype)])
    _, first = np.unique(every, return_index=True)
    touched = every[np.sort(first)]
    big = np.iinfo(dmin.dtype).max
    dmin[touched] = big
    np.minimum.at(dmin, every, np.repeat(deg, deg).astype(dmin.dtype))
    return touched


@njit(inline="always", cache=True)
def _solve_dense(dmin, indices, st, d, k, buf):
    """:func:`_solve_row` of the row ``indices[st:st+d]`` with LABOR-1's ``pi`` from ``dmin``
    (the same floats in the same order, so the same ``c``); the row's ``pi`` left in
    ``buf``."""
    if k < 0 or d <= k:
        return np.inf
    rest = 0.0
    pmax = 0.0
    for j in range(d):
        if j + PREFETCH_DIST < d:
            prefetch(dmin, indices[st + j + PREFETCH_DIST])
        p = _pi_of(dmin, indices[st + j], k)
        buf[j] = p
        rest += p
        pmax = max(pmax, p)
    return _saturate_from(buf, d, k, rest, pmax)


@njit(parallel=True, nogil=True, cache=True)
def labor_sample_dense(indptr, indices, nodes, fanout, dmin, key0, key1, ca, cb, smooth):
    """LABOR-1's layer from :func:`labor_min_degree`'s ``dmin`` (``fanout >= 1``): ``(offsets,
    nbrs, weights)`` equal to :func:`labor_pi` (one round) then :func:`labor_sample` on the
    numbered candidates, each ``c_s`` solved here in the pass that reads the row's ``pi``.
    Variates are drawn per in-edge (no ``rv``: batch dependency's smooth variates are
    cheaper per candidate, through :func:`labor_sample`). Parallel over dsts in chunks (one
    row buffer each): the first pass solves ``c_s`` and flags the kept in-edges, the second
    writes them, reading ``dmin`` again for kept edges only;
    :func:`labor_sample_dense_serial` is the same on one thread in one pass."""
    n = nodes.shape[0]
    starts = _row_starts(indptr, nodes)
    maxd = 0
    for i in range(n):
        maxd = max(maxd, starts[i + 1] - starts[i])
    kept = np.empty(starts[n], dtype=np.uint8)
    counts = np.empty(n + 1, dtype=np.int64)
    counts[0] = 0
    c = np.empty(n, dtype=np.float64)
    nchunks = (n + _SOLVE_CHUNK - 1) // _SOLVE_CHUNK
    for ch in prange(nchunks):
        buf = np.empty(maxd, dtype=np.float64)
        for i in range(ch * _SOLVE_CHUNK, min(n, (ch + 1) * _SOLVE_CHUNK)):
            _prefetch_row(indptr, indices, nodes, i + _ROWS_AHEAD)
            v = nodes[i]
            st = indptr[v]
            d = indptr[v + 1] - st
            ci = _solve_dense(dmin, indices, st, d, fanout, buf)
            c[i] = ci
            ce0 = starts[i]
            if ci == np.inf:
                kept[ce0:ce0 + d] = 1
                counts[i + 1] = d
                continue
            m = 0
            for j in range(d):
                p = ci * buf[j]
                # a variate is below 1: a certain edge needs none
                keep = p >= 1.0 or variate(key0, key1, ca, cb, smooth, indices[st + j]) <= p
                kept[ce0 + j] = keep
                m += keep
            counts[i + 1] = m
    offsets = np.cumsum(counts)
    nbrs = np.empty(offsets[n], dtype=indices.dtype)
    weights = np.empty(offsets[n], dtype=np.float64)
    for i in prange(n):
        _prefetch_row(indptr, indices, nodes, i + _ROWS_AHEAD)
        v = nodes[i]
        st = indptr[v]
        ci = c[i]
        ce0 = starts[i]
        o = offsets[i]
        m = 0
        total = 0.0
        for j in range(indptr[v + 1] - st):
            if kept[ce0 + j]:
                t = indices[st + j]
                if ci == np.inf:
                    w = 1.0
                else:
                    p = ci * _pi_of(dmin, t, fanout)
                    w = 1.0 / (p if p < 1.0 else 1.0)
                total = _keep(nbrs, weights, o + m, t, w, total)
                m += 1
        _normalise(weights, o, m, total)
    return offsets, nbrs, weights


@njit(nogil=True, cache=True)
def labor_sample_dense_serial(indptr, indices, nodes, fanout, dmin, key0, key1, ca, cb,
                              smooth):
    """:func:`labor_sample_dense` on the calling thread only (same output), in one pass over
    the rows as :func:`labor_sample_serial`: each row's ``c_s`` solved from its ``pi`` read
    into a buffer, then its kept neighbours and weights written from that buffer into output
    arrays that double when a row might not fit (no flags, no second read of the row)."""
    n = nodes.shape[0]
    maxd = 0
    for i in range(n):
        maxd = max(maxd, indptr[nodes[i] + 1] - indptr[nodes[i]])
    buf = np.empty(maxd, dtype=np.float64)
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    nbrs, weights = _kept_buffers(indices, n)
    o = 0
    for i in range(n):
        _prefetch_row(indptr, indices, nodes, i + _ROWS_AHEAD)
        v = nodes[i]
        st = indptr[v]
        d = indptr[v + 1] - st
        nbrs, weights = _room(nbrs, weights, o, d)
        ci = _solve_dense(dmin, indices, st, d, fanout, buf)
        m = _keep_row_dense(indices, st, d, ci, buf, key0, key1, ca, cb, smooth, nbrs,
                            weights, o)
        o += m
        offsets[i + 1] = o
    return offsets, nbrs[:o], weights[:o]


@njit(inline="always", cache=True)
def _by_degree(deg, maxd):
    """The indices of ``deg`` (ints in ``[0, maxd]``) by ascending value, equal values in
    index order (a counting sort: ``O(n + maxd)``, ``maxd`` at most the layer's edges)."""
    n = deg.shape[0]
    at = np.zeros(maxd + 2, dtype=np.int64)
    for i in range(n):
        at[deg[i] + 1] += 1
    for q in range(maxd + 1):
        at[q + 1] += at[q]
    order = np.empty(n, dtype=np.int64)
    for i in range(n):
        q = deg[i]
        order[at[q]] = i
        at[q] += 1
    return order


@njit(nogil=True, cache=True)
def labor_sample_dense_onepass(indptr, indices, nodes, fanout, dmin, key0, key1, ca, cb,
                               smooth):
    """:func:`labor_min_degree` and :func:`labor_sample_dense_serial` in one pass over the
    rows (``fanout >= 1``, ``dmin`` zero on entry and again on return): ``(offsets, nbrs,
    weights, touched)``, the first three equal to theirs, ``touched`` the vertices whose
    ``dmin`` it used (in another order than :func:`labor_min_degree`'s).

    The dsts are visited by ascending degree: when dst ``s`` is reached, every dst visited
    before has a degree at most ``d_s`` and every later one at least ``d_s``, so a neighbour
    ``t``'s smallest dst degree is already final as far as ``s``'s ``pi_t`` goes --
    ``min(dmin[t], d_s)``, and ``dmin[t]`` only changes on ``t``'s first visit. Each row is
    read once (the two-pass kernels read it twice, with a random ``dmin`` access each time);
    its kept edges go to a scratch in visiting order, then move to the dsts' order. ``pi``
    comes from a table indexed by the smallest degree (no division per edge). Memory: one id
    per in-edge (``touched``'s capacity), the kept edges twice, four int64 per dst, two
    floats per degree up to the largest dst's."""
    n = nodes.shape[0]
    rst = np.empty(n, dtype=np.int64)
    rdeg = np.empty(n, dtype=np.int64)
    m_all = 0
    maxd = 0
    for i in range(n):
        if i + PREFETCH_DIST < n:
            prefetch(indptr, nodes[i + PREFETCH_DIST])
        v = nodes[i]
        rst[i] = indptr[v]
        rdeg[i] = indptr[v + 1] - rst[i]
        m_all += rdeg[i]
        maxd = max(maxd, rdeg[i])
    order = _by_degree(rdeg, maxd)
    buf = np.empty(maxd, dtype=np.float64)
    pid = np.empty(maxd + 1, dtype=np.float64)  # pi of each smallest dst degree
    for q in range(maxd + 1):
        pid[q] = _pi_deg(q, fanout)
    touched = np.empty(m_all, dtype=indices.dtype)
    count = 0
    at = np.empty(n, dtype=np.int64)  # where each dst's kept edges start in the scratch
    kept = np.empty(n, dtype=np.int64)
    nbrs, weights = _kept_buffers(indices, n)
    o = 0
    for r in range(n):
        if r + _ROWS_AHEAD < n:
            prefetch(indices, rst[order[r + _ROWS_AHEAD]])
        i = order[r]
        st = rst[i]
        d = rdeg[i]
        nbrs, weights = _room(nbrs, weights, o, d)
        rest = 0.0
        pmax = 0.0
        for j in range(d):  # branch-free: a first visit is ~1 edge in 4, unpredictable
            if j + PREFETCH_DIST < d:
                prefetch(dmin, indices[st + j + PREFETCH_DIST])
            t = indices[st + j]
            q0 = dmin[t]
            first = np.int64(q0 == 0)  # t's first dst: the smallest degree it will see
            touched[count] = t  # kept only on a first visit
            count += first
            q = q0 + d * first  # (no select: LLVM makes it a branch)
            dmin[t] = q
            p = pid[q]
            buf[j] = p
            rest += p
            pmax = max(pmax, p)
        ci = np.inf if d <= fanout else _saturate_from(buf, d, fanout, rest, pmax)
        m = _keep_row_dense(indices, st, d, ci, buf, key0, key1, ca, cb, smooth, nbrs,
                            weights, o)
        at[i] = o
        kept[i] = m
        o += m
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    for i in range(n):
        offsets[i + 1] = offsets[i] + kept[i]
    out_n = np.empty(o, dtype=indices.dtype)
    out_w = np.empty(o, dtype=np.float64)
    for i in range(n):
        a, b = at[i], offsets[i]
        for q in range(kept[i]):
            out_n[b + q] = nbrs[a + q]
            out_w[b + q] = weights[a + q]
    for q in range(count):  # dmin zero again (the entry MAP_PREFETCH_DIST ahead prefetched)
        if q + MAP_PREFETCH_DIST < count:
            prefetch(dmin, touched[q + MAP_PREFETCH_DIST])
        dmin[touched[q]] = 0
    return offsets, out_n, out_w, touched[:count]


def labor_sample_dense_onepass_ref(indptr: np.ndarray, indices: np.ndarray, nodes: np.ndarray,
                                   fanout: int, dmin: np.ndarray, key0: int, key1: int,
                                   ca: float, cb: float, smooth: bool):
    """Twin of :func:`labor_sample_dense_onepass`: :func:`labor_min_degree_ref` into ``dmin``,
    then :func:`labor_sample_dense_ref`, then ``dmin`` zeroed; ``touched`` in order of first
    appearance (the kernel's comes in another order: compare them as sets)."""
    touched = labor_min_degree_ref(indptr, indices, nodes, dmin)
    out = labor_sample_dense_ref(indptr, indices, nodes, fanout, dmin, key0, key1, ca, cb,
                                 smooth)
    dmin[touched] = 0
    return (*out, touched)


def _numbered(indptr, indices, nodes):
    """``(cand, distinct)`` of a layer: the candidate of every in-edge of ``nodes`` (their
    distinct neighbours numbered in order of first appearance) and the candidates' ids."""
    every = np.concatenate([np.asarray(indices[indptr[v]:indptr[v + 1]]) for v in nodes]
                           + [np.empty(0, dtype=indices.dtype)])
    _, first, inv = np.unique(every, return_index=True, return_inverse=True)
    rank = np.argsort(np.argsort(first))  # rank of each distinct id by first appearance
    distinct = np.empty(first.shape[0], dtype=indices.dtype)
    distinct[rank] = every[first]
    return rank[inv.reshape(-1)].astype(np.int64), distinct


def labor_sample_dense_ref(indptr: np.ndarray, indices: np.ndarray, nodes: np.ndarray,
                           fanout: int, dmin: np.ndarray, key0: int, key1: int, ca: float,
                           cb: float,
                           smooth: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Twin of :func:`labor_sample_dense`: the candidates numbered, ``pi`` and ``c`` by
    :func:`labor_pi_ref` (one round; ``dmin`` unused), then :func:`labor_sample_ref`."""
    cand, distinct = _numbered(indptr, indices, nodes)
    c, pi = labor_pi_ref(indptr, nodes, cand, distinct.shape[0], fanout, 1)
    return labor_sample_ref(indptr, indices, nodes, c, pi, cand, np.empty(0), key0, key1, ca,
                            cb, smooth)


register(labor_min_degree, labor_min_degree_ref)
register(labor_sample_dense, labor_sample_dense_ref)
register(labor_sample_dense_serial, labor_sample_dense_ref, name="labor_sample_dense_serial")
register(labor_sample_dense_onepass, labor_sample_dense_onepass_ref)
