"""LABOR's per-dst scales ``c_s`` and vertex importances ``pi_t``, with twins (the method:
:mod:`twopgraph.sampler.labor_kernels`).

Every dst ``s`` of degree ``d_s`` and fanout ``k`` keeps ``min(k, d_s)`` neighbours in
expectation when ``sum_t min(1, c_s pi_t) = k`` (:func:`_solve_row`; ``c_s = inf`` keeps every
neighbour). LABOR-0 has ``pi = 1``; LABOR-* iterates ``pi_t = max_s min(1, c_s pi_t)`` over the
dsts that have ``t`` as a neighbour (:func:`labor_pi`). The row helpers (:func:`_row_starts`,
:func:`_prefetch_row`, :func:`_saturate_from`) serve the sampling kernels too.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from twopgraph.runtime.jit import register
from twopgraph.runtime.prefetch import PREFETCH_DIST, prefetch


@njit(inline="always", cache=True)
def _saturate_from(buf, d, k, rest, pmax):
    """``c`` with ``sum_j min(1, c buf[j]) = k`` over ``buf[:d]`` (``d > k >= 0``): the
    saturated set grows monotonically, ``c = (k - |sat|) / (sum of buf outside sat)``,
    repeated until ``sat`` (the entries with ``c buf >= 1``) stops growing
    (:func:`_solve_row_ref` runs every round). The first round (``c = 0``: nothing saturated)
    is the caller's, which fills ``buf``: ``rest`` is ``buf[:d]``'s sum in index order (from
    0.0), ``pmax`` its largest entry. The same ``c``, bit for bit, as running every round: a
    round whose saturated set would not change (no unsaturated entry reaches
    ``c * p >= 1`` -- its largest does not -- and no saturated one falls below: its smallest
    stays) is the last, so it is not run. Most rows stop after the first round: no
    neighbour saturates at ``c = k / sum(pi)``, and the row is read once."""
    if k <= 0 or rest <= 0.0:  # the first round breaks with c = 0
        return 0.0
    c = k / rest
    prev = 0
    umax = pmax  # largest unsaturated entry
    smin = np.inf  # smallest saturated entry
    for _ in range(d + 1):
        if c * umax < 1.0 and (prev == 0 or c * smin >= 1.0):
            break  # the next round would find the same set (sat == prev)
        sat = 0
        rest = 0.0
        umax = 0.0
        smin = np.inf
        for j in range(d):
            p = buf[j]
            if c * p >= 1.0:
                sat += 1
                smin = min(smin, p)
            else:
                rest += p
                umax = max(umax, p)
        if sat == prev or sat >= k or rest <= 0.0:
            break
        c = (k - sat) / rest
        prev = sat
    return c


@njit(inline="always", cache=True)
def _solve_row(pi, cand, e0, d, k, buf):
    """``c`` with ``sum_e min(1, c pi[cand[e]]) = k`` over the row's edges ``e0 .. e0+d-1``
    (``pi`` empty: all 1); ``inf`` when ``k < 0`` or ``d <= k`` (every neighbour kept).
    The row's ``pi`` are read once into ``buf`` (scratch of at least ``d`` floats; the
    candidates lie anywhere in ``pi``), summed as they are read, then :func:`_saturate_from`
    runs on the copy."""
    if k < 0 or d <= k:
        return np.inf
    uniform = pi.shape[0] == 0
    rest = 0.0
    pmax = 0.0
    for j in range(d):
        if not uniform and j + PREFETCH_DIST < d:
            prefetch(pi, cand[e0 + j + PREFETCH_DIST])
        p = 1.0 if uniform else pi[cand[e0 + j]]
        buf[j] = p
        rest += p
        pmax = max(pmax, p)
    return _saturate_from(buf, d, k, rest, pmax)


def _solve_row_ref(pi, cand, e0, d, k):
    """NumPy twin of :func:`_solve_row` (whole-row array ops per round; the sums in edge
    order, as the kernel adds them)."""
    if k < 0 or d <= k:
        return math.inf
    p = np.ones(d) if len(pi) == 0 else np.asarray(pi, dtype=np.float64)[cand[e0:e0 + d]]
    c, prev = 0.0, -1
    for _ in range(d + 2):
        sat_e = c * p >= 1.0
        sat, rest = int(sat_e.sum()), _ordered_sum(p[~sat_e])
        if sat == prev or sat >= k or rest <= 0.0:
            break
        c, prev = (k - sat) / rest, sat
    return c


def _ordered_sum(x: np.ndarray) -> float:
    """Left-to-right float64 sum (``np.sum`` adds pairwise: other last bits)."""
    return float(np.cumsum(x)[-1]) if x.shape[0] else 0.0


@njit(inline="always", cache=True)
def _row_starts(indptr, nodes):
    """Offsets of the dsts' rows in their concatenation (``indptr`` of the vertex
    ``PREFETCH_DIST`` ahead prefetched)."""
    n = nodes.shape[0]
    starts = np.empty(n + 1, dtype=np.int64)
    starts[0] = 0
    for i in range(n):
        if i + PREFETCH_DIST < n:
            prefetch(indptr, nodes[i + PREFETCH_DIST])
        v = nodes[i]
        starts[i + 1] = starts[i] + indptr[v + 1] - indptr[v]
    return starts


#: Rows ahead whose first entries the sampling passes prefetch (a row is read whole, so a few
#: rows ahead cover a miss; the hardware prefetcher follows each row once it is read).
_ROWS_AHEAD = 4


@njit(inline="always", cache=True)
def _prefetch_row(indptr, indices, nodes, i):
    """Prefetch the first entries of dst ``nodes[i]``'s row (nothing past the last dst)."""
    if i < nodes.shape[0]:
        prefetch(indices, indptr[nodes[i]])


@njit(inline="always", cache=True)
def _raised(starts, cand, c, pi):
    """One fixed-point round: ``pi_t`` -> ``max_s min(1, c_s pi_t)`` over the rows having
    ``t`` (a new array)."""
    new = np.zeros(pi.shape[0], dtype=np.float64)
    m = starts[starts.shape[0] - 1]
    for i in range(starts.shape[0] - 1):
        for e in range(starts[i], starts[i + 1]):
            if e + PREFETCH_DIST < m:
                prefetch(new, cand[e + PREFETCH_DIST])
                prefetch(pi, cand[e + PREFETCH_DIST])
            t = cand[e]
            p = min(1.0, c[i] * pi[t])
            if p > new[t]:
                new[t] = p
    return new


#: dsts per task of :func:`labor_pi`'s solve (one scratch row buffer each).
_SOLVE_CHUNK = 256


@njit(parallel=True, nogil=True, cache=True)
def labor_pi(indptr, nodes, cand, num_cand, fanout, iterations):
    """``(c, pi)``: the per-dst scales ``c`` (float64, len(nodes)) and candidate importances
    ``pi`` (float64, num_cand) after ``iterations`` fixed-point rounds (LABOR-*): from
    ``pi = 1``, each round solves every ``c_s`` (:func:`_solve_row`, parallel over dsts) and
    sets ``pi_t`` to ``t``'s inclusion probability in the layer, ``max_s min(1, c_s pi_t)``
    over the dsts ``s`` that have ``t`` as a neighbour; ``c`` is solved once more for the last
    ``pi``. ``iterations = 0`` gives LABOR-0 (``pi = 1``, ``c_s = k / d_s``)."""
    n = nodes.shape[0]
    starts = _row_starts(indptr, nodes)
    maxd = 0
    for i in range(n):
        maxd = max(maxd, starts[i + 1] - starts[i])
    pi = np.ones(num_cand, dtype=np.float64)
    c = np.empty(n, dtype=np.float64)
    nchunks = (n + _SOLVE_CHUNK - 1) // _SOLVE_CHUNK
    for it in range(iterations + 1):
        for ch in prange(nchunks):
            buf = np.empty(maxd, dtype=np.float64)
            for i in range(ch * _SOLVE_CHUNK, min(n, (ch + 1) * _SOLVE_CHUNK)):
                c[i] = _solve_row(pi, cand, starts[i], starts[i + 1] - starts[i], fanout, buf)
        if it == iterations:
            break
        pi = _raised(starts, cand, c, pi)  # scatter-max: serial (rows share candidates)
    return c, pi


#: :func:`labor_pi` on the calling thread only (same output): the same code compiled without
#: ``parallel``, where ``prange`` is ``range``.
labor_pi_serial = njit(nogil=True, cache=True)(getattr(labor_pi, "py_func", labor_pi))


def labor_pi_ref(indptr: np.ndarray, nodes: np.ndarray, cand: np.ndarray, num_cand: int,
                 fanout: int, iterations: int) -> tuple[np.ndarray, np.ndarray]:
    """Python twin of :func:`labor_pi`."""
    nodes = [int(v) for v in nodes]
    starts = [0]
    for v in nodes:
        starts.append(starts[-1] + int(indptr[v + 1] - indptr[v]))
    pi = np.ones(int(num_cand), dtype=np.float64)
    c = np.empty(len(nodes), dtype=np.float64)
    for it in range(iterations + 1):
        for i in range(len(nodes)):
            c[i] = _solve_row_ref(pi, cand, starts[i], starts[i + 1] - starts[i], fanout)
        if it == iterations:
            break
        new = np.zeros(int(num_cand), dtype=np.float64)
        for i in range(len(nodes)):
            for e in range(starts[i], starts[i + 1]):
                t = int(cand[e])
                new[t] = max(new[t], min(1.0, c[i] * pi[t]))
        pi = new
    return c, pi


register(labor_pi, labor_pi_ref)
register(labor_pi_serial, labor_pi_ref, name="labor_pi_serial")
