"""Sampling kernels: uniform neighbour sampling (Floyd's algorithm) and batch relabelling.

Each kernel has a plain NumPy/Python twin (``*_ref``) registered in :mod:`twopgraph.runtime.jit`.
The parallel kernels (``prange`` over vertices) have a ``*_serial`` variant with the same output
for samplers that run several batches at once, one per thread. Randomness comes from
:mod:`twopgraph.core.rng`, so a sample depends only on (key, vertex), not on the thread count.
Ids are int64 except ``nbrs``, which keeps the dtype of the graph's ``indices``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from twopgraph.core.rng import draw_at, draw_ref, vertex_base
from twopgraph.runtime.jit import register
from twopgraph.runtime.prefetch import MAP_PREFETCH_DIST, PREFETCH_DIST, prefetch

# -- neighbour sampling (uniform, without replacement; Floyd's algorithm) -------------------------


@njit(inline="always", cache=True)
def _row_pass(indptr, nodes, lo, hi, fanout, starts, degs, counts, dist):
    """Rows of ``nodes[lo:hi]``: ``starts[i] = indptr[v]``, ``degs[i]`` = d and
    ``counts[i + 1]`` = how many neighbours of ``v`` are taken (min(fanout, d), d when
    ``fanout < 0``); returns the largest degree of a row that is sampled (not taken whole), 0
    if none. ``indptr`` of the vertex ``dist`` positions ahead is prefetched."""
    maxd = 0
    for i in range(lo, hi):
        if i + dist < hi:
            prefetch(indptr, nodes[i + dist])
        v = nodes[i]
        s = indptr[v]
        d = indptr[v + 1] - s
        starts[i] = s
        degs[i] = d
        if fanout < 0 or d <= fanout:
            counts[i + 1] = d
        else:
            counts[i + 1] = fanout
            if d > maxd:
                maxd = d
    return maxd


#: Up to this many neighbours per row, Floyd's duplicate check scans the positions taken so far
#: (in registers / L1, branch-free: cheaper than a bitmap for the fanouts GNNs use); above it,
#: a bitmap of the row's positions.
SCAN_FANOUT = 32


#: Rows drawn ahead of the row being read: a row's positions are drawn (and their cache lines
#: prefetched) this many rows before its neighbours are read, so that the draws of the rows
#: in between cover the misses.
RING_ROWS = 8


@njit(cache=True)
def _draw_row_bitmap(key, base, d, k, ring, o, bits):
    """Floyd's draws of a row of more than ``SCAN_FANOUT`` taken positions (see
    :func:`_draw_row`), duplicates found in ``bits``. Not inlined: rare, and kept out of the
    sampling loops of the common rows (the in-order reading of coauthor_physics' batches,
    1.03-1.07 ms with it inlined, 1.00-1.01 ms without)."""
    for c in range(k):
        j = d - k + c
        t = np.int64(draw_at(key, base, j) % np.uint64(j + 1))
        w = t >> 6
        b = np.uint64(1) << np.uint64(t & 63)
        if bits[w] & b:
            t = j
            w = t >> 6
            b = np.uint64(1) << np.uint64(t & 63)
        bits[w] |= b
        ring[o + c] = t
    for q in range(k):
        bits[ring[o + q] >> 6] = 0


@njit(inline="always", cache=True)
def _draw_row(key, v, d, k, ring, o, bits):
    """Floyd's algorithm for the ``k < d`` neighbours of ``v`` taken from its ``d``: for j in
    d-k..d-1 pick t in [0, j] (the draw ``(v, j)`` mod j + 1); take t unless taken, else j.
    The row positions go to ``ring[o:o + k]``. Duplicates are found in the bits of one
    register when ``d <= 64``; else by scanning the positions so far when ``k <=
    SCAN_FANOUT`` (branch-free, in L1); else in ``bits`` (uint64 words, at least d bits, all
    zero; left all zero; :func:`_draw_row_bitmap`)."""
    base = vertex_base(v)
    if d <= 64:
        taken = np.uint64(0)
        for c in range(k):
            j = d - k + c
            t = np.int64(draw_at(key, base, j) % np.uint64(j + 1))
            b = np.uint64(1) << np.uint64(t)
            if taken & b:
                t = j
                b = np.uint64(1) << np.uint64(j)
            taken |= b
            ring[o + c] = t
    elif k <= SCAN_FANOUT:
        for c in range(k):
            j = d - k + c
            t = np.int64(draw_at(key, base, j) % np.uint64(j + 1))
            hit = False
            for q in range(c):
                hit |= ring[o + q] == t
            if hit:
                t = j
            ring[o + c] = t
    else:
        _draw_row_bitmap(key, base, d, k, ring, o, bits)


@njit(inline="always", cache=True)
def _stage_row(key, indices, v, start, d, k, ring, o, bits):
    """Ready a row to be read: a sampled row's positions drawn into ``ring[o:o + k]`` and
    each of their cache lines prefetched; a row taken whole (``k == d``) prefetched at its
    first and last entry."""
    if k == d:
        prefetch(indices, start)
        prefetch(indices, start + max(d - 1, 0))
        return
    _draw_row(key, v, d, k, ring, o, bits)
    for q in range(k):
        prefetch(indices, start + ring[o + q])


@njit(inline="always", cache=True)
def _take_rows(key, indices, nodes, lo, hi, starts, degs, offsets, nbrs, ring, bits):
    """The sampled neighbours of the dsts ``nodes[lo:hi]`` into ``nbrs`` (see
    :func:`sample_neighbors`), software-pipelined: row ``i + RING_ROWS`` is drawn and
    prefetched (:func:`_stage_row`) just after row ``i`` is read, from the ``ring`` slot
    (``RING_ROWS`` x max(fanout, 1) int64) its positions were drawn into."""
    width = ring.shape[0] // RING_ROWS
    for i in range(lo, min(hi, lo + RING_ROWS)):
        _stage_row(key, indices, nodes[i], starts[i], degs[i], offsets[i + 1] - offsets[i],
                   ring, ((i - lo) % RING_ROWS) * width, bits)
    for i in range(lo, hi):
        o, st, k = offsets[i], starts[i], offsets[i + 1] - offsets[i]
        slot = ((i - lo) % RING_ROWS) * width
        if k == degs[i]:
            for j in range(k):
                nbrs[o + j] = indices[st + j]
        else:
            for q in range(k):
                nbrs[o + q] = indices[st + ring[slot + q]]
        nx = i + RING_ROWS
        if nx < hi:
            _stage_row(key, indices, nodes[nx], starts[nx], degs[nx],
                       offsets[nx + 1] - offsets[nx], ring, slot, bits)


#: dsts per task of the parallel kernel.
_CHUNK = 1024


@njit(parallel=True, nogil=True, cache=True)
def sample_neighbors(indptr, indices, nodes, fanout, key):
    """Sample up to ``fanout`` distinct neighbours of each vertex in ``nodes``.

    Returns ``(offsets, nbrs)``: the neighbours of ``nodes[i]`` are
    ``nbrs[offsets[i]:offsets[i+1]]`` (global ids, dtype of ``indices``). A vertex of degree d
    gives all d neighbours when ``fanout < 0`` or ``d <= fanout``; otherwise ``fanout``
    distinct ones, each neighbour being taken with probability ``fanout / d`` (Floyd's
    algorithm, positions in CSR order).

    Two passes (sampling is bound by memory latency): the dsts' rows (start, count),
    ``indptr`` prefetched ``PREFETCH_DIST`` dsts ahead; then the neighbours, each row's
    positions drawn and their cache lines prefetched ``RING_ROWS`` rows before they are read
    (:func:`_take_rows`). Scratch per task: ``RING_ROWS x fanout`` positions and, above
    ``SCAN_FANOUT``, a bitmap of the largest sampled degree.
    Parallel over chunks of vertices; :func:`sample_neighbors_serial` is the same on one
    thread.
    """
    n = nodes.shape[0]
    dist = PREFETCH_DIST
    starts = np.empty(n, dtype=np.int64)
    degs = np.empty(n, dtype=np.int64)
    counts = np.empty(n + 1, dtype=np.int64)
    counts[0] = 0
    nchunks = (n + _CHUNK - 1) // _CHUNK
    maxds = np.zeros(max(nchunks, 1), dtype=np.int64)
    for c in prange(nchunks):
        lo = c * _CHUNK
        maxds[c] = _row_pass(indptr, nodes, lo, min(n, lo + _CHUNK), fanout, starts, degs,
                             counts, dist)
    offsets = np.cumsum(counts)
    nbrs = np.empty(offsets[n], dtype=indices.dtype)
    words = (maxds.max() >> 6) + 1 if fanout > SCAN_FANOUT else 1
    for c in prange(nchunks):
        ring = np.empty(RING_ROWS * max(fanout, 1), dtype=np.int64)
        bits = np.zeros(words, dtype=np.uint64)
        _take_rows(key, indices, nodes, c * _CHUNK, min(n, (c + 1) * _CHUNK), starts, degs,
                   offsets, nbrs, ring, bits)
    return offsets, nbrs


@njit(nogil=True, cache=True)
def sample_neighbors_serial(indptr, indices, nodes, fanout, key):
    """:func:`sample_neighbors` on the calling thread only (same output), for samplers that
    run several batches at once, one per thread."""
    n = nodes.shape[0]
    dist = PREFETCH_DIST
    starts = np.empty(n, dtype=np.int64)
    degs = np.empty(n, dtype=np.int64)
    counts = np.empty(n + 1, dtype=np.int64)
    counts[0] = 0
    maxd = _row_pass(indptr, nodes, 0, n, fanout, starts, degs, counts, dist)
    offsets = np.cumsum(counts)
    nbrs = np.empty(offsets[n], dtype=indices.dtype)
    ring = np.empty(RING_ROWS * max(fanout, 1), dtype=np.int64)
    bits = np.zeros((maxd >> 6) + 1 if fanout > SCAN_FANOUT else 1, dtype=np.uint64)
    _take_rows(key, indices, nodes, 0, n, starts, degs, offsets, nbrs, ring, bits)
    return offsets, nbrs


def sample_neighbors_ref(indptr: np.ndarray, indices: np.ndarray, nodes: np.ndarray, fanout: int,
                         key: int) -> tuple[np.ndarray, np.ndarray]:
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

    ``node_map`` (length N, int32 or int64, -1 = unseen) maps global -> local id and is
    updated in place (the entry ``MAP_PREFETCH_DIST`` neighbours ahead prefetched);
    ``num_known`` local ids are already used. New vertices are appended to ``frontier_out``
    (at least ``len(nbrs)`` entries; those past the new vertices are scratch) in order of
    first appearance and get ids ``num_known, num_known+1, ...``. Returns ``(local_nbrs,
    num_new)`` where ``local_nbrs[e] = node_map[nbrs[e]]`` (int64).

    Branch-free: whether a neighbour is new is about as likely as not in a sampled hop, so a
    branch would be mispredicted often; every entry writes its map entry and the frontier
    slot after the last new vertex, and the count advances by 0 or 1.
    """
    m = nbrs.shape[0]
    local = np.empty(m, dtype=np.int64)
    nxt = num_known
    dist = MAP_PREFETCH_DIST
    for e in range(m):
        if e + dist < m:
            prefetch(node_map, nbrs[e + dist])
        g = nbrs[e]
        x = np.int64(node_map[g])
        new = x < 0
        if new:
            x = nxt
        node_map[g] = x
        frontier_out[nxt - num_known] = g
        nxt += np.int64(new)
        local[e] = x
    return local, nxt - num_known


def relabel_ref(nbrs: np.ndarray, node_map: np.ndarray, num_known: int,
                frontier_out: np.ndarray) -> tuple[np.ndarray, int]:
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
    and call again from ``e``). Linear probing, load factor at most ``limit / capacity``;
    the home slot of the entry ``PREFETCH_DIST`` ahead is prefetched (the table of a large
    batch is larger than the L2 cache: 16 bytes per slot, twice the batch's vertices).
    """
    mask = keys.shape[0] - 1
    m = nbrs.shape[0]
    for e in range(start, m):
        if e + PREFETCH_DIST < m:  # the home slot of the entry PREFETCH_DIST ahead
            ha = np.int64((np.uint64(nbrs[e + PREFETCH_DIST]) * np.uint64(HASH_MULT))
                          >> np.uint64(shift))
            prefetch(keys, ha)
            prefetch(vals, ha)
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


def relabel_hashed_ref(nbrs: np.ndarray, start: int, local_out: np.ndarray, keys: np.ndarray,
                       vals: np.ndarray, slot_of: np.ndarray, shift: int, nxt: int, limit: int,
                       num_known: int, frontier_out: np.ndarray) -> tuple[int, int]:
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


def clear_table_ref(keys: np.ndarray, slot_of: np.ndarray, count: int) -> None:
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
    n = nodes.shape[0]
    for i in range(n):
        if i + MAP_PREFETCH_DIST < n:
            prefetch(node_map, nodes[i + MAP_PREFETCH_DIST])
        node_map[nodes[i]] = -1


def reset_map_ref(node_map: np.ndarray, nodes: np.ndarray) -> None:
    """NumPy twin of :func:`reset_map`."""
    node_map[np.asarray(nodes)] = -1


# -- gathering per-vertex values of a batch -------------------------------------------------------


@njit(nogil=True, cache=True)
def take(values, idx):
    """``values[idx]`` (1-D) with the entry ``MAP_PREFETCH_DIST`` ahead prefetched: a batch's
    vertices lie anywhere in the graph, and NumPy's fancy indexing waits for each miss."""
    m = idx.shape[0]
    out = np.empty(m, dtype=values.dtype)
    for e in range(m):
        if e + MAP_PREFETCH_DIST < m:
            prefetch(values, idx[e + MAP_PREFETCH_DIST])
        out[e] = values[idx[e]]
    return out


def take_ref(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """NumPy twin of :func:`take`."""
    return np.asarray(values)[np.asarray(idx)]


register(sample_neighbors, sample_neighbors_ref)
register(sample_neighbors_serial, sample_neighbors_ref)
register(relabel, relabel_ref)
register(relabel_hashed, relabel_hashed_ref)
register(clear_table, clear_table_ref)
register(reset_map, reset_map_ref)
register(reset_map_serial, reset_map_ref)
register(take, take_ref)
