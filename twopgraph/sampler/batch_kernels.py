"""A batch's every hop in one compiled call: neighbour sampling and relabelling.

:func:`sample_hops_mapped` draws what :func:`~twopgraph.sampler.kernels.sample_neighbors`
draws (same keys, same positions, same order) and numbers the vertices as
:func:`~twopgraph.sampler.kernels.relabel` does, hop after hop, through an N-sized node map --
in one call per batch: no Python, no arrays handed back and forth between the hops. Its twin
:func:`sample_hops_mapped_ref` is the two kernels' twins run hop by hop.

Two ways of reading the rows, the same output:

* ``resident`` (the CSR is cache-resident,
  :func:`~twopgraph.runtime.prefetch.fits_in_cache`): rows in order, each row's draws made
  just before it is read, the start of the row a few rows ahead prefetched. On a
  cache-resident graph this beats the draw-ahead pipeline, whose bookkeeping costs more than
  the misses it hides there (per batch, one thread: coauthor_cs 0.74 against 1.09 ms,
  coauthor_physics 1.42 against 1.89 ms; :data:`~twopgraph.runtime.prefetch.CACHE_SHARE`);
* otherwise the draw-ahead pipeline of :func:`~twopgraph.sampler.kernels.sample_neighbors`
  (each row's positions drawn and prefetched ``RING_ROWS`` rows before it is read).

Each hop is two passes: the rows into a hop-sized array of global ids, then their relabelling
(:func:`~twopgraph.sampler.kernels.relabel`, the map entries prefetched ahead; a relabelling
fused into the row reading waits on each map entry: measured slower on every graph above 25k
vertices).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from twopgraph.runtime.jit import register
from twopgraph.runtime.prefetch import PREFETCH_DIST, prefetch
from twopgraph.sampler.kernels import (
    RING_ROWS,
    SCAN_FANOUT,
    _draw_row,
    _row_pass,
    _take_rows,
    relabel,
    relabel_ref,
    sample_neighbors_ref,
)

#: Rows ahead whose first entry the in-order (resident) reading prefetches.
RESIDENT_AHEAD = 4


@njit(inline="always", cache=True)
def _take_rows_in_order(key, indices, nodes, ndst, starts, degs, offsets, nbrs, ring, bits):
    """The sampled neighbours (global ids) of the dsts ``nodes[:ndst]`` into ``nbrs``, rows
    read in order (the CSR in cache): each sampled row's positions drawn just before it is
    read, the first entry of the row ``RESIDENT_AHEAD`` rows ahead prefetched. (The copy loops
    are written out as in ``_take_rows``: one inlined helper for both made them 1.4x slower.)"""
    for i in range(ndst):
        if i + RESIDENT_AHEAD < ndst:
            prefetch(indices, starts[i + RESIDENT_AHEAD])
        o, st, k, d = offsets[i], starts[i], offsets[i + 1] - offsets[i], degs[i]
        if k == d:
            for j in range(k):
                nbrs[o + j] = indices[st + j]
        else:
            _draw_row(key, nodes[i], d, k, ring, 0, bits)
            for q in range(k):
                nbrs[o + q] = indices[st + ring[q]]


@njit(nogil=True, cache=True)
def sample_hops_mapped(indptr, indices, seeds, fanouts, keys, node_map, resident):
    """Sample and relabel every hop of a batch on the calling thread.

    ``seeds`` (int64, unique, in ``[0, N)``) get local ids ``0..len(seeds)-1``; the first
    seed that is out of range or a repeat stops the call with nothing sampled and the map
    as it was: ``sizes[0]`` is then ``-1 - i`` for it (``i``: its position), ``nodes`` empty.
    Hop ``h`` (``fanouts[h]``
    neighbours per vertex, -1 = all; stream ``keys[h]``, uint64) samples the neighbours of
    every vertex numbered so far -- the dsts -- with
    :func:`~twopgraph.sampler.kernels.sample_neighbors`'s draws, and numbers the new ones
    in order of first appearance. ``node_map`` (length N, int32 or int64) must be all -1;
    it is all -1 again on return. ``resident``: read the rows in order (the CSR fits in the
    cache) instead of through the draw-ahead pipeline; the same output either way.

    Returns ``(nodes, sizes, offsets, local)``: ``nodes`` (int64) the global id of every
    local id; ``sizes[h]`` the number of vertices before hop ``h`` (hop ``h``'s dsts:
    ``nodes[:sizes[h]]``; ``sizes[-1] == len(nodes)``); per hop, ``offsets[h]`` (int64,
    ``sizes[h] + 1`` entries) and ``local[h]`` (int64 local ids): the sampled neighbours of
    dst ``i`` are ``local[h][offsets[h][i]:offsets[h][i + 1]]``.

    Memory: the batch's vertices and edges, plus the row's scratch (a bitmap of the largest
    sampled degree above ``SCAN_FANOUT`` neighbours).
    """
    nseeds = seeds.shape[0]
    nhops = fanouts.shape[0]
    nodes = np.empty(nseeds, dtype=np.int64)
    sizes = np.empty(nhops + 1, dtype=np.int64)
    offs = []
    locs = []
    n = node_map.shape[0]
    for i in range(nseeds):
        s = seeds[i]
        if s < 0 or s >= n or node_map[s] >= 0:  # out of range, or a repeat
            for q in range(i):
                node_map[nodes[q]] = -1
            sizes[0] = -1 - i
            return nodes[:0].copy(), sizes, offs, locs
        node_map[s] = i
        nodes[i] = s
    count = np.int64(nseeds)
    for h in range(nhops):
        fanout, key, ndst = fanouts[h], keys[h], count
        sizes[h] = ndst
        starts = np.empty(ndst, dtype=np.int64)
        degs = np.empty(ndst, dtype=np.int64)
        counts = np.empty(ndst + 1, dtype=np.int64)
        counts[0] = 0
        maxd = _row_pass(indptr, nodes, 0, ndst, fanout, starts, degs, counts, PREFETCH_DIST)
        offsets = np.cumsum(counts)
        m = offsets[ndst]
        if nodes.shape[0] < ndst + m:  # room for every neighbour being new
            grown = np.empty(ndst + m, dtype=np.int64)
            grown[:ndst] = nodes[:ndst]
            nodes = grown
        nbrs = np.empty(m, dtype=indices.dtype)
        ring = np.empty(RING_ROWS * max(fanout, 1), dtype=np.int64)
        bits = np.zeros((maxd >> 6) + 1 if fanout > SCAN_FANOUT else 1, dtype=np.uint64)
        if resident:
            _take_rows_in_order(key, indices, nodes, ndst, starts, degs, offsets, nbrs, ring,
                                bits)
        else:
            _take_rows(key, indices, nodes, 0, ndst, starts, degs, offsets, nbrs, ring, bits)
        # new vertices appended at nodes[count:] (relabel's frontier: m entries)
        local, num_new = relabel(nbrs, node_map, count, nodes[count:])
        count += num_new
        offs.append(offsets)
        locs.append(local)
    sizes[nhops] = count
    for i in range(count):
        node_map[nodes[i]] = -1
    return nodes[:count].copy(), sizes, offs, locs


def sample_hops_mapped_ref(indptr: np.ndarray, indices: np.ndarray, seeds: np.ndarray,
                           fanouts: np.ndarray, keys: np.ndarray, node_map: np.ndarray,
                           resident: bool
                           ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """Twin of :func:`sample_hops_mapped`: the twins of ``sample_neighbors`` and ``relabel``
    hop by hop (``resident`` changes no result)."""
    nodes = np.asarray(seeds, dtype=np.int64)
    n = node_map.shape[0]
    for i, s in enumerate(nodes.tolist()):
        if not 0 <= s < n or s in nodes[:i]:
            sizes = np.empty(len(fanouts) + 1, dtype=np.int64)
            sizes[0] = -1 - i
            return nodes[:0].copy(), sizes, [], []
    node_map[nodes] = np.arange(nodes.shape[0])
    sizes, offs, locs = [], [], []
    for fanout, key in zip(np.asarray(fanouts).tolist(), np.asarray(keys).tolist()):
        sizes.append(nodes.shape[0])
        offsets, nbrs = sample_neighbors_ref(indptr, indices, nodes, int(fanout), int(key))
        frontier = np.empty(nbrs.shape[0], dtype=np.int64)
        local, num_new = relabel_ref(nbrs, node_map, nodes.shape[0], frontier)
        nodes = np.concatenate([nodes, frontier[:num_new]])
        offs.append(offsets)
        locs.append(local)
    sizes.append(nodes.shape[0])
    node_map[nodes] = -1
    return nodes, np.asarray(sizes, dtype=np.int64), offs, locs


register(sample_hops_mapped, sample_hops_mapped_ref)
