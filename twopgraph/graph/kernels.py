"""The graph's numba kernels, each with its NumPy twin (:func:`twopgraph.runtime.jit.register`):
renumbering a CSR (:func:`permute_csr`: new vertex i is old vertex ``perm[i]``, rows sorted)
and checking the undirected dataset format (:func:`csr_violations`: order, self loops,
duplicates and missing reverses, O(E)). Arrays: ``indptr`` int64 (N+1), ``indices`` int32 or
int64 (E), kept in their dtype. :mod:`twopgraph.graph.data` builds
:class:`~twopgraph.graph.data.CSRGraph` and :class:`~twopgraph.graph.data.GraphData` on them.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from twopgraph.core.rng import splitmix64
from twopgraph.runtime.jit import register

# -- renumbering kernel (numba) and its NumPy twin ------------------------------------------------


@njit(parallel=True, nogil=True, cache=True)
def permute_csr(indptr, indices, perm, inv):
    """CSR of the graph renumbered so that new vertex i is old vertex ``perm[i]``.

    ``inv`` is the inverse permutation (``inv[perm[i]] = i``). Rows of the result are sorted.
    Parallel over rows; ``indptr`` int64, ``indices`` keep their dtype.
    """
    n = perm.shape[0]
    deg = np.empty(n + 1, dtype=np.int64)
    deg[0] = 0
    for i in prange(n):
        v = perm[i]
        deg[i + 1] = indptr[v + 1] - indptr[v]
    new_indptr = np.cumsum(deg)
    new_indices = np.empty(indices.shape[0], dtype=indices.dtype)
    for i in prange(n):
        v = perm[i]
        s = indptr[v]
        d = indptr[v + 1] - s
        o = new_indptr[i]
        for j in range(d):
            new_indices[o + j] = inv[indices[s + j]]
        new_indices[o:o + d].sort()
    return new_indptr, new_indices


def permute_csr_ref(indptr: np.ndarray, indices: np.ndarray, perm: np.ndarray,
                    inv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NumPy twin of :func:`permute_csr`."""
    deg = np.diff(indptr)[perm]
    new_indptr = np.zeros(perm.shape[0] + 1, dtype=np.int64)
    np.cumsum(deg, out=new_indptr[1:])
    rows = [np.sort(inv[indices[indptr[v]:indptr[v + 1]]]) for v in perm]
    new_indices = (np.concatenate(rows) if rows else np.empty(0)).astype(indices.dtype)
    return new_indptr, new_indices


register(permute_csr, permute_csr_ref)


# -- undirected-format check (numba) and its NumPy twin -------------------------------------------
_CHECK_CHUNKS = 1024  # row chunks of about equal edge counts (load balance with hubs)


@njit(parallel=True, nogil=True, cache=True)
def csr_violations(indptr, indices):
    """Where a structurally valid CSR breaks the undirected format (``indptr`` int64 monotone
    from 0 to E, every index in [0, N) -- :meth:`CSRGraph.validate` checks that first).

    Returns int64 ``[unsorted_row, loops, first_loop, dups, first_dup, missing,
    first_missing]``: ``unsorted_row`` is the first row whose entries decrease (-1: every row
    sorted); when it is >= 0 the rest is ``0 / -1`` (duplicates and reverses are looked up in
    sorted rows). ``loops`` counts entries u->u; ``dups`` entries equal to the one before them
    in their row; ``missing`` entries u->v (u != v) whose row v holds no u. Each ``first_*``
    is the CSR position of the first such entry (-1: none).

    Pass 1 streams the rows once (parallel over chunks of about equal edge counts): order,
    self loops, duplicates, and the sum (mod 2**64) of a 64-bit hash of the undirected pair
    {u, v} over entries with u < v minus the same over entries with u > v. Without duplicates
    the graph is symmetric iff those two sets of pairs are equal, so a zero sum clears it (a
    non-symmetric graph passes only if the hash sums collide, ~2**-64).
    Only otherwise does pass 2 look up every reverse (a binary search of u in row v: random
    reads, ~10x the cost of pass 1) to count and locate the missing ones. O(E) for a valid
    graph, O(E log d) for an invalid one.
    """
    n = indptr.shape[0] - 1
    e = indices.shape[0]
    k = max(1, min(n, _CHECK_CHUNKS))
    bounds = np.empty(k + 1, dtype=np.int64)
    for c in range(k):
        bounds[c] = np.searchsorted(indptr, (e // k) * c + min(c, e % k))
    bounds[0] = 0
    bounds[k] = n
    unsorted = np.full(k, -1, dtype=np.int64)
    loops = np.zeros(k, dtype=np.int64)
    first_loop = np.full(k, -1, dtype=np.int64)
    dups = np.zeros(k, dtype=np.int64)
    first_dup = np.full(k, -1, dtype=np.int64)
    bal = np.zeros(k, dtype=np.uint64)
    nn = np.uint64(n)
    # pass 1: sorted rows, self loops, duplicates, hash balance of u<v vs u>v pairs (streaming)
    for c in prange(k):
        up = np.uint64(0)
        down = np.uint64(0)
        for u in range(bounds[c], bounds[c + 1]):
            s, t = indptr[u], indptr[u + 1]
            uu = np.uint64(u)
            for j in range(s, t):
                v = indices[j]
                if j > s:
                    if v < indices[j - 1]:
                        unsorted[c] = u
                        break
                    if v == indices[j - 1]:
                        dups[c] += 1
                        if first_dup[c] < 0:
                            first_dup[c] = j
                if v == u:
                    loops[c] += 1
                    if first_loop[c] < 0:
                        first_loop[c] = j
                elif v > u:
                    up += splitmix64(uu * nn + np.uint64(v))
                else:
                    down += splitmix64(np.uint64(v) * nn + uu)
            if unsorted[c] >= 0:
                break
        bal[c] = up - down
    out = np.full(7, -1, dtype=np.int64)
    out[1] = 0
    out[3] = 0
    out[5] = 0
    for c in range(k):
        if unsorted[c] >= 0:
            out[0] = unsorted[c]
            return out
    out[1] = loops.sum()
    out[3] = dups.sum()
    h = np.uint64(0)
    for c in range(k):
        h += bal[c]
    for c in range(k - 1, -1, -1):  # the first chunk with a hit holds the first position
        if first_loop[c] >= 0:
            out[2] = first_loop[c]
        if first_dup[c] >= 0:
            out[4] = first_dup[c]
    if out[3] == 0 and h == np.uint64(0):
        return out  # symmetric (the multisets of u->v and v->u agree)
    # pass 2: every u->v (u != v) has v->u (binary search of u in the sorted row v)
    missing = np.zeros(k, dtype=np.int64)
    first_missing = np.full(k, -1, dtype=np.int64)
    for c in prange(k):
        for u in range(bounds[c], bounds[c + 1]):
            for j in range(indptr[u], indptr[u + 1]):
                v = indices[j]
                if v == u:
                    continue
                lo, hi = indptr[v], indptr[v + 1]
                end = hi
                while lo < hi:
                    mid = (lo + hi) >> 1
                    if indices[mid] < u:
                        lo = mid + 1
                    else:
                        hi = mid
                if lo == end or indices[lo] != u:
                    missing[c] += 1
                    if first_missing[c] < 0:
                        first_missing[c] = j
    out[5] = missing.sum()
    for c in range(k - 1, -1, -1):
        if first_missing[c] >= 0:
            out[6] = first_missing[c]
    return out


def csr_violations_ref(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """NumPy twin of :func:`csr_violations`."""
    n = indptr.shape[0] - 1
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    dst = indices.astype(np.int64)
    out = np.array([-1, 0, -1, 0, -1, 0, -1], dtype=np.int64)
    same_row = src[1:] == src[:-1]
    down = np.flatnonzero(same_row & (dst[1:] < dst[:-1]))
    if down.shape[0]:
        out[0] = src[down[0] + 1]
        return out
    loops = np.flatnonzero(src == dst)
    dups = np.flatnonzero(same_row & (dst[1:] == dst[:-1])) + 1
    key = src * n + dst  # sorted: rows in order, each row sorted
    rev = dst * n + src
    pos = np.minimum(np.searchsorted(key, rev), max(key.shape[0] - 1, 0))
    has_rev = key[pos] == rev if key.shape[0] else np.zeros(0, dtype=bool)
    missing = np.flatnonzero(~has_rev & (src != dst))
    for i, hits in ((1, loops), (3, dups), (5, missing)):
        out[i] = hits.shape[0]
        if hits.shape[0]:
            out[i + 1] = hits[0]
    return out


register(csr_violations, csr_violations_ref)
