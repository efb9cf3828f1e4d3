"""LABOR's kernels (layer-neighbour sampling; Balin & Catalyurek, NeurIPS 2023), with twins.

One layer of a batch: every dst ``s`` (of degree ``d_s``, fanout ``k``) keeps its neighbour
``t`` when ``r_t <= c_s * pi_t``. The variate ``r_t`` (:func:`variate`) depends on the vertex
``t`` and a stream key only, never on ``s``, so dsts with overlapping neighbourhoods keep the
same vertices; ``pi_t > 0`` are the vertices' importances (1 for LABOR-0) and ``c_s`` the
per-dst scale that makes ``s`` keep ``min(k, d_s)`` neighbours in expectation
(:func:`labor_pi` solves ``sum_t min(1, c_s pi_t) = k``; ``c_s = inf`` keeps every neighbour).
Each kept edge is weighted by its inverse inclusion probability ``1 / min(1, c_s pi_t)``,
normalised over the dst's kept edges (:func:`labor_sample`).

The variates are :mod:`twopgraph.sampler.labor_variates`, the scales and importances
:mod:`twopgraph.sampler.labor_pi`; this module samples the edges (LABOR-1's kernels that read
``pi`` from each vertex's smallest dst degree are :mod:`twopgraph.sampler.labor_dense`).

Each kernel has a plain-Python twin (``*_ref``, the same arithmetic in the same order, so the
same floats) registered in :mod:`twopgraph.runtime.jit`; the parallel kernels (``prange`` over dsts)
have ``*_serial`` variants with the same output. Candidate ids (``cand``) number the distinct
neighbours of a layer's dsts; ``cand[e]`` is the candidate of the ``e``-th edge of the dsts'
concatenated CSR rows.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from twopgraph.core.rng import draw
from twopgraph.runtime.jit import register
from twopgraph.sampler.labor_pi import (
    _ROWS_AHEAD,
    _prefetch_row,
    _row_starts,
)
from twopgraph.sampler.labor_variates import variate, variate_ref

#: Kept edges per dst that a kernel's output arrays first have room for (they double when a
#: row might not fit: :func:`_room`).
_KEPT_PER_DST = 16


@njit(inline="always", cache=True)
def _kept_buffers(indices, n):
    """``(nbrs, weights)``: the first output arrays of a kernel over ``n`` dsts, room for
    ``_KEPT_PER_DST`` kept edges per dst (``nbrs`` in ``indices``' dtype, float64 weights)."""
    size = _KEPT_PER_DST * n + 64
    return np.empty(size, dtype=indices.dtype), np.empty(size, dtype=np.float64)


@njit(inline="always", cache=True)
def _room(nbrs, weights, o, d):
    """``(nbrs, weights)`` with room for ``d`` more entries after the first ``o``: the same
    arrays, or both grown to twice their size (at least ``o + d``) with the ``o`` kept."""
    if o + d <= nbrs.shape[0]:
        return nbrs, weights
    cap = max(2 * nbrs.shape[0], o + d)
    grown = np.empty(cap, dtype=nbrs.dtype)
    grown[:o] = nbrs[:o]
    grown_w = np.empty(cap, dtype=np.float64)
    grown_w[:o] = weights[:o]
    return grown, grown_w


@njit(inline="always", cache=True)
def _keep(nbrs, weights, at, t, w, total):
    """Kept neighbour ``t`` with weight ``w`` written at ``at``; returns the row's weight sum
    ``total`` plus ``w`` (the rows' weights are divided by it: :func:`_normalise`)."""
    nbrs[at] = t
    weights[at] = w
    return total + w


@njit(inline="always", cache=True)
def _normalise(weights, o, m, total):
    """A row's ``m`` weights from ``o`` on divided by their sum ``total`` (they sum to 1)."""
    for q in range(o, o + m):
        weights[q] = weights[q] / total


# -- sampling --------------------------------------------------------------------------------------
@njit(inline="always", cache=True)
def _prob(ci, pi, cand, ce):
    """The inclusion probability ``min(1, c_s pi_t)`` of candidate edge ``ce``."""
    p = ci if pi.shape[0] == 0 else ci * pi[cand[ce]]
    return p if p < 1.0 else 1.0


@njit(inline="always", cache=True)
def _edge_variate(rv, cand, ce, key0, key1, ca, cb, smooth, t):
    """The variate of candidate edge ``ce`` (neighbour ``t``): ``rv[cand[ce]]`` when the
    layer's variates were computed per candidate (``rv`` not empty), else computed here."""
    if rv.shape[0] > 0:
        return rv[cand[ce]]
    return variate(key0, key1, ca, cb, smooth, t)


@njit(inline="always", cache=True)
def _mark_row(indptr, indices, v, ci, pi, cand, rv, ce0, key0, key1, ca, cb, smooth, kept):
    """Flag (``kept[ce0 + j] = 1``) the neighbours dst ``v`` keeps, each neighbour's variate
    computed once; their number."""
    start = indptr[v]
    d = indptr[v + 1] - start
    if ci == np.inf:
        kept[ce0:ce0 + d] = 1
        return d
    m = 0
    for j in range(d):
        keep = _edge_variate(rv, cand, ce0 + j, key0, key1, ca, cb, smooth,
                             indices[start + j]) <= _prob(ci, pi, cand, ce0 + j)
        kept[ce0 + j] = keep
        m += keep
    return m


@njit(inline="always", cache=True)
def _fill_row(indptr, indices, v, ci, pi, cand, ce0, kept, nbrs, weights, o):
    """Write dst ``v``'s kept neighbours from ``o`` on, each weighted by its inverse inclusion
    probability over the row's sum."""
    start = indptr[v]
    m = 0
    total = 0.0
    for j in range(indptr[v + 1] - start):
        if kept[ce0 + j]:
            w = 1.0 / (1.0 if ci == np.inf else _prob(ci, pi, cand, ce0 + j))
            total = _keep(nbrs, weights, o + m, indices[start + j], w, total)
            m += 1
    _normalise(weights, o, m, total)


@njit(parallel=True, nogil=True, cache=True)
def labor_sample(indptr, indices, nodes, c, pi, cand, rv, key0, key1, ca, cb, smooth):
    """One LABOR layer: ``(offsets, nbrs, weights)`` with the kept neighbours of ``nodes[i]``
    in ``nbrs[offsets[i]:offsets[i+1]]`` (global ids, dtype of ``indices``, CSR order) and
    their weights (float64: ``1 / min(1, c_i pi_t)`` over the row's sum, summing to 1 per
    dst). Dst ``i`` keeps neighbour ``t`` iff ``variate(t) <= min(1, c[i] pi_t)``; ``pi``
    empty means ``pi = 1`` (LABOR-0; ``cand`` unused then unless ``rv`` is given). ``rv``
    (float64, one per candidate, or empty): the layer's variates computed per candidate
    (:func:`labor_variates`), which pays where a variate is dear (batch dependency: two
    normals and an ``erfc``) and the dsts share neighbours. Parallel over dsts: a first pass
    draws every in-edge's variate once and flags the kept ones (one byte per in-edge of the
    dsts), a second writes them; :func:`labor_sample_serial` is the same on one thread."""
    n = nodes.shape[0]
    starts = _row_starts(indptr, nodes)
    kept = np.empty(starts[n], dtype=np.uint8)
    counts = np.empty(n + 1, dtype=np.int64)
    counts[0] = 0
    for i in prange(n):
        _prefetch_row(indptr, indices, nodes, i + _ROWS_AHEAD)
        counts[i + 1] = _mark_row(indptr, indices, nodes[i], c[i], pi, cand, rv, starts[i],
                                  key0, key1, ca, cb, smooth, kept)
    offsets = np.cumsum(counts)
    nbrs = np.empty(offsets[n], dtype=indices.dtype)
    weights = np.empty(offsets[n], dtype=np.float64)
    for i in prange(n):
        _prefetch_row(indptr, indices, nodes, i + _ROWS_AHEAD)
        _fill_row(indptr, indices, nodes[i], c[i], pi, cand, starts[i], kept, nbrs, weights,
                  offsets[i])
    return offsets, nbrs, weights


@njit(inline="always", cache=True)
def _keep_row_uniform(indices, start, d, p, key0, nbrs, weights, o):
    """LABOR-0's row of ``d`` neighbours at ``start`` whose dst keeps each with probability
    ``p`` (< 1 or 1): neighbour ``t`` is kept iff its variate ``(draw(key0, t, 0) >> 11) /
    2**53 <= p``, decided exactly in integers as ``draw >> 11 <= floor(p 2**53)`` (the
    variate is a 53-bit integer over a power of two); kept ones go to ``nbrs[o:]`` with weight
    ``1 / p`` in ``weights`` (both have room for ``d`` entries there). Returns how many and
    the sum of their weights (summed one by one, as the general path does)."""
    thr = np.uint64(math.floor(p * 9007199254740992.0))
    w = 1.0 / p
    m = 0
    for j in range(d):  # branch-free: every neighbour written, the slot taken if kept
        t = indices[start + j]
        nbrs[o + m] = t
        m += (draw(key0, t, 0) >> np.uint64(11)) <= thr
    total = 0.0
    for q in range(o, o + m):
        weights[q] = w
        total += w
    return m, total


@njit(nogil=True, cache=True)
def labor_sample_serial(indptr, indices, nodes, c, pi, cand, rv, key0, key1, ca, cb,
                        smooth):
    """:func:`labor_sample` on the calling thread only (same output), in one pass over the
    rows: the kept neighbours go straight into output arrays that double when a row might
    not fit (no flag per in-edge, no second read of the rows; on synthetic-products' input
    layer the second pass was ~40% of the kernel). ``nbrs`` and ``weights`` are views of
    those arrays (at most twice the kept edges plus the largest row)."""
    n = nodes.shape[0]
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    nbrs, weights = _kept_buffers(indices, n)
    o = 0
    ce0 = 0
    for i in range(n):
        _prefetch_row(indptr, indices, nodes, i + _ROWS_AHEAD)
        v = nodes[i]
        start = indptr[v]
        d = indptr[v + 1] - start
        nbrs, weights = _room(nbrs, weights, o, d)
        ci = c[i]
        m = 0
        total = 0.0
        if ci != np.inf and pi.shape[0] == 0 and rv.shape[0] == 0 and not smooth:
            # LABOR-0: one probability for the whole row, compared in integers
            m, total = _keep_row_uniform(indices, start, d, min(ci, 1.0), key0, nbrs, weights,
                                         o)
        else:
            for j in range(d):
                t = indices[start + j]
                if ci == np.inf:
                    p = 1.0
                else:
                    p = _prob(ci, pi, cand, ce0 + j)
                    if _edge_variate(rv, cand, ce0 + j, key0, key1, ca, cb, smooth, t) > p:
                        continue
                total = _keep(nbrs, weights, o + m, t, 1.0 / p, total)
                m += 1
        _normalise(weights, o, m, total)
        o += m
        offsets[i + 1] = o
        ce0 += d
    return offsets, nbrs[:o], weights[:o]


def labor_sample_ref(indptr: np.ndarray, indices: np.ndarray, nodes: np.ndarray, c: np.ndarray,
                     pi: np.ndarray, cand: np.ndarray, rv: np.ndarray, key0: int, key1: int,
                     ca: float, cb: float,
                     smooth: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Python twin of :func:`labor_sample` (``rv`` unused: a per-candidate variate is the
    vertex's own)."""
    offsets, out, wts = [0], [], []
    ce = 0
    for i, v in enumerate(int(x) for x in nodes):
        start, end = int(indptr[v]), int(indptr[v + 1])
        row, rw = [], []
        for j in range(end - start):
            t = int(indices[start + j])
            if c[i] == math.inf:
                p = 1.0
            else:
                p = min(1.0, c[i] if len(pi) == 0 else c[i] * pi[cand[ce + j]])
                if variate_ref(key0, key1, ca, cb, smooth, t) > p:
                    continue
            row.append(t)
            rw.append(1.0 / p)
        ce += end - start
        total = 0.0
        for w in rw:
            total += w
        out.extend(row)
        wts.extend(w / total for w in rw)
        offsets.append(len(out))
    return (np.asarray(offsets, dtype=np.int64), np.asarray(out, dtype=indices.dtype),
            np.asarray(wts, dtype=np.float64))


register(labor_sample, labor_sample_ref)
register(labor_sample_serial, labor_sample_ref, name="labor_sample_serial")
