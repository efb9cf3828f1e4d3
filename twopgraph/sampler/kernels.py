"""Sampling kernels: uniform neighbour sampling (Floyd's algorithm) and batch relabelling.

Each kernel has a plain NumPy/Python twin (``*_ref``) registered in :mod:`twopgraph.jit`. The
parallel kernels (``prange`` over vertices) have a ``*_serial`` variant with the same output
for samplers that run several batches at once, one per thread. Randomness comes from
:mod:`twopgraph.rng`, so a sample depends only on (key, vertex), not on the thread count.
Ids are int64 except ``nbrs``, which keeps the dtype of the graph's ``indices``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..jit import register
from ..rng import draw, draw_ref

# -- neighbour sampling (uniform, without replacement; Floyd's algorithm) -------------------------


@njit(inline="always", cache=True)
def _num_sampled(indptr, v, fanout):
    d = indptr[v + 1] - indptr[v]
    return d if (fanout < 0 or d <= fanout) else fanout


@njit(inline="always", cache=True)
def _sample_one(indptr, indices, v, fanout, key, nbrs, o):
    """Neighbours of ``v`` into ``nbrs[o:o + _num_sampled(v)]`` (see :func:`sample_neighbors`)."""
    start = indptr[v]
    d = indptr[v + 1] - start
    if fanout < 0 or d <= fanout:
        for j in range(d):
            nbrs[o + j] = indices[start + j]
        return
    # Floyd: for j in d-f..d-1 pick t in [0, j]; take t unless taken, else take j.
    # Positions are kept in nbrs (as positions) and translated at the end.
    c = 0
    for j in range(d - fanout, d):
        t = np.int64(draw(key, v, j) % np.uint64(j + 1))
        seen = False
        for q in range(c):
            if nbrs[o + q] == t:
                seen = True
                break
        nbrs[o + c] = j if seen else t
        c += 1
    for q in range(fanout):
        nbrs[o + q] = indices[start + nbrs[o + q]]


@njit(parallel=True, nogil=True, cache=True)
def sample_neighbors(indptr, indices, nodes, fanout, key):
    """Sample up to ``fanout`` distinct neighbours of each vertex in ``nodes``.

    Returns ``(offsets, nbrs)``: the neighbours of ``nodes[i]`` are
    ``nbrs[offsets[i]:offsets[i+1]]`` (global ids, dtype of ``indices``). A vertex of degree d
    gives all d neighbours when ``fanout < 0`` or ``d <= fanout``; otherwise ``fanout``
    distinct ones, each neighbour being taken with probability ``fanout / d`` (Floyd's
    algorithm, positions in CSR order).
    Parallel over vertices; :func:`sample_neighbors_serial` is the same on one thread.
    """
    n = nodes.shape[0]
    counts = np.empty(n + 1, dtype=np.int64)
    counts[0] = 0
    for i in prange(n):
        counts[i + 1] = _num_sampled(indptr, nodes[i], fanout)
    offsets = np.cumsum(counts)
    nbrs = np.empty(offsets[n], dtype=indices.dtype)
    for i in prange(n):
        _sample_one(indptr, indices, nodes[i], fanout, key, nbrs, offsets[i])
    return offsets, nbrs


@njit(nogil=True, cache=True)
def sample_neighbors_serial(indptr, indices, nodes, fanout, key):
    """:func:`sample_neighbors` on the calling thread only (same output), for samplers that
    run several batches at once, one per thread."""
    n = nodes.shape[0]
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    for i in range(n):
        offsets[i + 1] = offsets[i] + _num_sampled(indptr, nodes[i], fanout)
    nbrs = np.empty(offsets[n], dtype=indices.dtype)
    for i in range(n):
        _sample_one(indptr, indices, nodes[i], fanout, key, nbrs, offsets[i])
    return offsets, nbrs


def sample_neighbors_ref(indptr, indices, nodes, fanout, key):
    """Plain-Python twin of :func:`sample_neighbors` (same random stream, same output)."""
    key = int(key)
    offsets = [0]
    out = []
    for v in np.asarray(nodes).tolist():
        start, end = int(indptr[v]), int(indptr[v + 1])
        d = end - start
        if fanout < 0 or d <= fanout:
            chosen = list(range(d))
        else:
            chosen = []
            for j in range(d - fanout, d):
                t = draw_ref(key, v, j) % (j + 1)
                chosen.append(j if t in chosen else t)
        out.extend(int(indices[start + p]) for p in chosen)
        offsets.append(len(out))
    return np.asarray(offsets, dtype=np.int64), np.asarray(out, dtype=indices.dtype)


# -- relabelling: global ids -> batch-local ids (dst first, then new srcs in order of appearance) --


@njit(nogil=True, cache=True)
def relabel(nbrs, node_map, num_known, frontier_out):
    """Assign local ids to the vertices of ``nbrs`` not seen yet in this batch.

    ``node_map`` (length N, -1 = unseen) maps global -> local id and is updated in place;
    ``num_known`` local ids are already used. New vertices are appended to ``frontier_out`` in
    order of first appearance and get ids ``num_known, num_known+1, ...``. Returns
    ``(local_nbrs, num_new)`` where ``local_nbrs[e] = node_map[nbrs[e]]`` (int64).
    """
    m = nbrs.shape[0]
    local = np.empty(m, dtype=np.int64)
    nxt = num_known
    for e in range(m):
        g = nbrs[e]
        x = node_map[g]
        if x < 0:
            x = nxt
            node_map[g] = x
            frontier_out[x - num_known] = g
            nxt += 1
        local[e] = x
    return local, nxt - num_known


def relabel_ref(nbrs, node_map, num_known, frontier_out):
    """NumPy twin of :func:`relabel` (same in-place effects, same output)."""
    nbrs = np.asarray(nbrs)
    _, first = np.unique(nbrs, return_index=True)
    first.sort()
    cand = nbrs[first]
    new = cand[node_map[cand] < 0]
    node_map[new] = np.arange(num_known, num_known + new.shape[0])
    frontier_out[: new.shape[0]] = new
    return node_map[nbrs].astype(np.int64), new.shape[0]


# -- relabelling through a batch-sized hash table (per-thread state O(batch), not O(N)) -----------
#: Fibonacci hashing multiplier (2**64 / golden ratio): ``slot = (g * HASH_MULT) >> shift``.
HASH_MULT = 11400714819323198485


@njit(nogil=True, cache=True)
def relabel_hashed(nbrs, start, local_out, keys, vals, slot_of, shift, nxt, limit, num_known,
                   frontier_out):
    """:func:`relabel` through an open-addressing table instead of an N-sized map.

    ``keys`` / ``vals`` (int64, capacity a power of two ``2**(64 - shift)``; key -1 = empty)
    map a global id to its batch-local id; ``slot_of[x]`` records the slot of local id ``x``
    (so the table is emptied in O(batch), :func:`clear_table`). Entries ``nbrs[start:]`` are
    relabelled into ``local_out`` while fewer than ``limit`` local ids are in use (``nxt``:
    the next free id); new vertices go to ``frontier_out[x - num_known]``. Returns ``(e,
    nxt)``: ``e < len(nbrs)`` means the table reached ``limit`` before entry ``e`` (grow it
    and call again from ``e``). Linear probing, load factor at most ``limit / capacity``.
    """
    mask = keys.shape[0] - 1
    m = nbrs.shape[0]
    for e in range(start, m):
        g = np.int64(nbrs[e])
        h = np.int64((np.uint64(g) * np.uint64(HASH_MULT)) >> np.uint64(shift))
        while True:
            k = keys[h]
            if k == g:
                local_out[e] = vals[h]
                break
            if k == -1:
                if nxt >= limit:
                    return e, nxt
                keys[h] = g
                vals[h] = nxt
                slot_of[nxt] = h
                frontier_out[nxt - num_known] = g
                local_out[e] = nxt
                nxt += 1
                break
            h = (h + 1) & mask
    return m, nxt


def relabel_hashed_ref(nbrs, start, local_out, keys, vals, slot_of, shift, nxt, limit,
                       num_known, frontier_out):
    """Python twin of :func:`relabel_hashed` (same probing, same in-place effects)."""
    mask = keys.shape[0] - 1
    for e in range(start, len(nbrs)):
        g = int(nbrs[e])
        h = ((g * HASH_MULT) & 0xFFFFFFFFFFFFFFFF) >> int(shift)
        while True:
            if keys[h] == g:
                local_out[e] = vals[h]
                break
            if keys[h] == -1:
                if nxt >= limit:
                    return e, nxt
                keys[h], vals[h], slot_of[nxt] = g, nxt, h
                frontier_out[nxt - num_known] = g
                local_out[e] = nxt
                nxt += 1
                break
            h = (h + 1) & mask
    return len(nbrs), nxt


@njit(nogil=True, cache=True)
def clear_table(keys, slot_of, count):
    """Empty the slots of local ids ``0..count-1`` (undo a batch in O(batch))."""
    for x in range(count):
        keys[slot_of[x]] = -1


def clear_table_ref(keys, slot_of, count):
    """NumPy twin of :func:`clear_table`."""
    keys[slot_of[:count]] = -1


@njit(parallel=True, nogil=True, cache=True)
def reset_map(node_map, nodes):
    """Set ``node_map[nodes] = -1`` (undo a batch's relabelling in O(|nodes|))."""
    for i in prange(nodes.shape[0]):
        node_map[nodes[i]] = -1


@njit(nogil=True, cache=True)
def reset_map_serial(node_map, nodes):
    """:func:`reset_map` on the calling thread only."""
    for i in range(nodes.shape[0]):
        node_map[nodes[i]] = -1


def reset_map_ref(node_map, nodes):
    """NumPy twin of :func:`reset_map`."""
    node_map[np.asarray(nodes)] = -1


register(sample_neighbors, sample_neighbors_ref)
register(sample_neighbors_serial, sample_neighbors_ref)
register(relabel, relabel_ref)
register(relabel_hashed, relabel_hashed_ref)
register(clear_table, clear_table_ref)
register(reset_map, reset_map_ref)
register(reset_map_serial, reset_map_ref)
