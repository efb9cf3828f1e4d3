"""Uniform neighbour sampling into per-layer blocks (numba kernels, GIL-free)."""

from __future__ import annotations

import itertools
import threading
from typing import Sequence

import numpy as np
import torch

from twopgraph.core.fanouts import parse_fanouts
from twopgraph.core.minibatch import Block, MiniBatch
from twopgraph.core.protocols import SAMPLERS
from twopgraph.core.rng import mix_key
from twopgraph.errors import ConfigError
from twopgraph.graph.data import CSRGraph
from twopgraph.runtime.prefetch import fits_in_cache
from twopgraph.sampler import batch_kernels, kernels

# Keys of calls without an explicit key are mix_key(_FRESH_STREAM, 0, 1, 2, ...): a stream of
# their own, apart from the loader's mix_key(epoch, batch) keys.
_FRESH_STREAM = 0x46524553480A


#: The one-line error of a batch whose seeds repeat a vertex.
SEEDS_NOT_UNIQUE = "seeds must be unique"


def seeds_out_of_range(n: int) -> str:
    """The one-line error of a batch with a seed outside ``[0, n)``."""
    return f"seed ids out of range [0, {n})"


def check_seeds(seeds: np.ndarray | torch.Tensor, n: int) -> np.ndarray:
    """``seeds`` as a contiguous int64 array, refused (ConfigError) unless it is a non-empty
    1-D array of unique vertex ids in ``[0, n)``."""
    a = seed_array(seeds)
    if a.min() < 0 or a.max() >= n:
        raise ConfigError(seeds_out_of_range(n))
    if np.unique(a).shape[0] != a.shape[0]:
        raise ConfigError(SEEDS_NOT_UNIQUE)
    return a


def seed_array(seeds: np.ndarray | torch.Tensor) -> np.ndarray:
    """``seeds`` as a contiguous int64 array, refused (ConfigError) unless it is a non-empty
    1-D array; their range and uniqueness are :func:`check_seeds`' (or the batch kernel's)."""
    a = np.ascontiguousarray(np.asarray(seeds, dtype=np.int64))
    if a.ndim != 1 or a.shape[0] == 0:
        raise ConfigError("seeds must be a non-empty 1-D array of vertex ids")
    return a


class RelabelTable:
    """One thread's map from global ids to batch-local ids: an open-addressing hash table
    (:func:`~twopgraph.sampler.kernels.relabel_hashed`) that doubles when half full and is
    emptied in O(batch) after each batch, so its memory follows the largest batch (about 40
    bytes per batch vertex: key, value, slot), not the graph (an N-sized map would take 4 N
    bytes per sampling thread: 0.44 GB for ogbn-papers100M)."""

    MIN_BITS = 12

    def __init__(self) -> None:
        self._alloc(self.MIN_BITS)

    def _alloc(self, bits: int) -> None:
        self.bits = bits
        cap = 1 << bits
        self.keys = np.full(cap, -1, dtype=np.int64)
        self.vals = np.empty(cap, dtype=np.int64)
        self.limit = cap // 2
        self.slot_of = np.empty(self.limit, dtype=np.int64)

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.vals.nbytes + self.slot_of.nbytes

    def relabel(self, nbrs: np.ndarray, num_known: int,
                count: int) -> tuple[np.ndarray, int, np.ndarray]:
        """Local ids of ``nbrs`` (int64), new vertices numbered from ``count`` in order of
        first appearance; returns ``(local, count', frontier)`` with the new vertices in
        ``frontier[:count' - num_known]`` (``num_known`` = ``count`` here: ids in use)."""
        m = nbrs.shape[0]
        local = np.empty(m, dtype=np.int64)
        frontier = np.empty(m, dtype=np.int64)
        e = 0
        while True:
            e, count = kernels.relabel_hashed(nbrs, e, local, self.keys, self.vals,
                                              self.slot_of, 64 - self.bits, count, self.limit,
                                              num_known, frontier)
            if e == m:
                return local, int(count), frontier
            self._grow(int(count))

    def _grow(self, count: int) -> None:
        ids = self.keys[self.slot_of[:count]]  # global ids in local-id order
        self._alloc(self.bits + 1)
        loc = np.empty(count, dtype=np.int64)
        scratch = np.empty(count, dtype=np.int64)
        kernels.relabel_hashed(ids, 0, loc, self.keys, self.vals, self.slot_of, 64 - self.bits,
                               0, self.limit, 0, scratch)

    def clear(self, count: int, nodes: np.ndarray | None = None) -> None:
        """Forget the first ``count`` local ids (the whole batch; ``nodes`` unused)."""
        kernels.clear_table(self.keys, self.slot_of, count)


class NodeMap:
    """:class:`RelabelTable`'s interface over an N-sized map (global id -> local id, -1
    unseen; int32 while N < 2**31, as local ids are below N): what a sampling thread uses once
    its table would be larger than the map."""

    def __init__(self, num_nodes: int) -> None:
        self.map = np.full(num_nodes, -1, dtype=self.dtype_for(num_nodes))

    @staticmethod
    def dtype_for(num_nodes: int) -> type[np.signedinteger]:
        """The map's entry type for a graph of ``num_nodes`` vertices."""
        return np.int32 if num_nodes < 2**31 else np.int64

    @classmethod
    def nbytes_for(cls, num_nodes: int) -> int:
        """Bytes of the map of a graph of ``num_nodes`` vertices."""
        return num_nodes * np.dtype(cls.dtype_for(num_nodes)).itemsize

    @property
    def nbytes(self) -> int:
        return self.map.nbytes

    def relabel(self, nbrs: np.ndarray, num_known: int,
                count: int) -> tuple[np.ndarray, int, np.ndarray]:
        """See :meth:`RelabelTable.relabel`."""
        frontier = np.empty(nbrs.shape[0], dtype=np.int64)
        local, num_new = kernels.relabel(nbrs, self.map, count, frontier)
        return local, int(count + num_new), frontier

    def clear(self, count: int, nodes: np.ndarray | None = None) -> None:
        """Forget the batch: the map entries of ``nodes`` (all of them when unknown)."""
        if nodes is None or nodes.shape[0] != count:
            self.map.fill(-1)
        else:
            kernels.reset_map_serial(self.map, nodes)


def settled(table: "RelabelTable | NodeMap", num_nodes: int) -> "RelabelTable | NodeMap":
    """The table a thread keeps after a batch: a hash table that outgrew an N-sized map
    becomes the map (direct indexing is faster, and the map's 4 N bytes (8 N from 2**31
    vertices) are then no more than the table's), so the state is min(4 N, about 40 bytes
    per batch vertex) -- never O(N) beyond O(batch)."""
    if isinstance(table, RelabelTable) and NodeMap.nbytes_for(num_nodes) <= table.nbytes:
        return NodeMap(num_nodes)
    return table


@SAMPLERS.register("neighbor")
class NeighborSampler:
    """Uniform neighbour sampling by numba kernels on the host (in GPU training its torch
    twin ``device``, which draws the same batches, may sample there).

    ``sample(seeds) -> MiniBatch``: an L-layer neighbourhood of a set of seeds.

    For each hop, every current vertex gets up to ``fanout`` distinct uniformly chosen
    neighbours (all of them for ``-1``), sampled in parallel by numba. The result depends only
    on ``(seed, key, layer, vertex)``, not on the number of threads. One instance may be used
    from several threads (each thread has its own relabelling state: a :class:`RelabelTable`,
    about 40 bytes per vertex of the largest batch, or, once that would exceed 4 N bytes, an
    N-sized :class:`NodeMap`; the same batches either way).

    Example::

        >>> from twopgraph.graph.data import CSRGraph
        >>> g = CSRGraph.from_edges([0, 0, 1], [1, 2, 3], num_nodes=4)
        >>> mb = NeighborSampler(g, [2, 2], seed=0).sample(np.array([0]))
        >>> [b.size for b in mb.blocks], mb.input_nodes[:1].tolist()
        ([(4, 3), (3, 1)], [0])
    """

    #: The registered sampler that draws the same batches with torch ops on a GPU (what
    #: ``--sampler-device`` switches to; see :func:`twopgraph.pipeline.assemble.build_sampler`).
    device_twin = "device"

    def __init__(self, graph: CSRGraph, fanouts: Sequence[int], seed: int = 0,
                 degrees: np.ndarray | None = None) -> None:
        self.graph = graph
        self.fanouts = parse_fanouts(fanouts)
        self.seed = int(seed)
        # The degrees blocks carry (GCN's normalisation): the graph's own unless given, e.g.
        # full-graph degrees for a partition whose halo rows are truncated.
        deg = graph.degrees() if degrees is None else np.asarray(degrees)
        if deg.shape != (graph.num_nodes,):
            raise ConfigError(f"degrees must have one entry per vertex ({graph.num_nodes})")
        self._deg = deg.astype(np.float32)
        self._tls = threading.local()
        self._fresh = itertools.count()
        # how the fused batch kernel reads rows: in order when the CSR fits in the cache
        self._resident = fits_in_cache(graph.indptr.nbytes + graph.indices.nbytes)

    @property
    def num_layers(self) -> int:
        return len(self.fanouts)

    def _table(self) -> "RelabelTable | NodeMap":
        t = getattr(self._tls, "table", None)
        if t is None:
            t = self._tls.table = RelabelTable()
        return t

    def _settle(self, table) -> None:
        """After a batch: this thread's table, settled (:func:`settled`)."""
        self._tls.table = settled(table, self.graph.num_nodes)

    def sample(self, seeds: np.ndarray | torch.Tensor, key: int | None = None,
               parallel: bool = True) -> MiniBatch:
        """Sample the blocks of ``seeds`` (unique global ids); ``key`` picks the random stream
        (e.g. a batch counter: same seed + key => same mini-batch); without a key every call
        draws fresh randomness (keys from a counter that advances with each such call, so a
        hand-written loop gets new neighbours in every batch). ``parallel=False`` keeps
        the work on the calling thread (for :func:`~twopgraph.sampler.stream.sampled_batches`
        with several workers, each sampling whole batches); the result is the same."""
        if key is None:
            key = mix_key(_FRESH_STREAM, next(self._fresh))  # itertools.count: thread-safe
        table = self._table()
        if not parallel and isinstance(table, NodeMap):
            # the batch kernel checks the seeds' range and uniqueness as it places them (a
            # sort of the seeds per batch saved: 0.05 ms of a 0.8 ms coauthor_cs batch)
            return self._sample_fused(seed_array(seeds), int(key), table)
        seeds = check_seeds(seeds, self.graph.num_nodes)
        return self._sample(seeds, int(key), parallel)

    def _sample(self, seeds: np.ndarray, key: int, parallel: bool = True) -> MiniBatch:
        g = self.graph
        sample_neighbors = kernels.sample_neighbors if parallel else \
            kernels.sample_neighbors_serial

        def draw(hop: int, fanout: int, nodes: np.ndarray):
            hop_key = np.uint64(mix_key(self.seed, key, hop))
            return (*sample_neighbors(g.indptr, g.indices, nodes, fanout, hop_key), None)
        return self._expand(seeds, draw)

    def _expand(self, seeds: np.ndarray, draw) -> MiniBatch:
        """The blocks of ``seeds``, hop by hop: ``draw(hop, fanout, nodes)`` gives the hop's
        ``(offsets, nbrs, edge_weight or None)`` for the dsts ``nodes`` (hop 0 = the seeds'
        own neighbours, the last fanout); the neighbours are relabelled into local ids and
        the new ones appended to the src vertices."""
        table = self._table()
        nodes = seeds
        raw_blocks = []
        count = 0
        done = False
        try:
            _, count, _ = table.relabel(seeds, 0, 0)  # unique seeds: local ids 0..k-1
            for hop, fanout in enumerate(reversed(self.fanouts)):
                offsets, nbrs, weights = draw(hop, fanout, nodes)
                num_dst = nodes.shape[0]
                local, count, frontier = table.relabel(nbrs, num_dst, count)
                if count > num_dst:
                    nodes = np.concatenate([nodes, frontier[:count - num_dst]])
                raw_blocks.append((nodes.shape[0], num_dst, offsets, local, weights))
            done = True
        finally:
            table.clear(count, nodes if done else None)
        self._settle(table)
        return self._minibatch(seeds, nodes, raw_blocks)

    def _sample_fused(self, seeds: np.ndarray, key: int, table: NodeMap) -> MiniBatch:
        """:meth:`_sample` on the calling thread through an N-sized map: every hop sampled
        and relabelled in one compiled call
        (:func:`~twopgraph.sampler.batch_kernels.sample_hops_mapped`); the same batch."""
        g = self.graph
        hops = len(self.fanouts)
        fanouts = np.asarray(self.fanouts[::-1], dtype=np.int64)
        keys = np.asarray([mix_key(self.seed, key, hop) for hop in range(hops)],
                          dtype=np.uint64)
        try:
            nodes, sizes, offs, locs = batch_kernels.sample_hops_mapped(
                g.indptr, g.indices, seeds, fanouts, keys, table.map, self._resident)
        except BaseException:
            table.clear(0)  # the kernel stopped part-way: forget every entry
            raise
        sizes = sizes.tolist()
        if sizes[0] < 0:  # a seed out of range or repeated; the map untouched
            bad = int(seeds[-1 - sizes[0]])
            raise ConfigError(SEEDS_NOT_UNIQUE if 0 <= bad < g.num_nodes
                              else seeds_out_of_range(g.num_nodes))
        raw_blocks = [(sizes[h + 1], sizes[h], offs[h], locs[h], None) for h in range(hops)]
        return self._minibatch(seeds, nodes, raw_blocks)

    def _minibatch(self, seeds: np.ndarray, nodes: np.ndarray, raw_blocks: list) -> MiniBatch:
        """The batch of ``seeds`` whose vertices are ``nodes`` (global id of each local id)
        from its hops' ``(num_src, num_dst, offsets, local, edge_weight or None)``, hop 0
        (the seeds' own neighbours) first."""
        deg = torch.from_numpy(kernels.take(self._deg, nodes))
        blocks = [Block(num_src, num_dst, torch.from_numpy(offsets), torch.from_numpy(local),
                        deg[:num_src], deg[:num_dst],
                        edge_weight=None if w is None else torch.from_numpy(w))
                  for num_src, num_dst, offsets, local, w in reversed(raw_blocks)]
        return MiniBatch(seeds=torch.from_numpy(seeds), input_nodes=torch.from_numpy(nodes),
                         blocks=blocks)

    def full_block(self, dst_start: int, dst_end: int) -> Block:
        """All in-edges of the dst range ``[dst_start, dst_end)`` as one block over *global*
        src ids (``num_src = N``): exact layer-wise inference uses it without relabelling."""
        g = self.graph
        s, e = int(g.indptr[dst_start]), int(g.indptr[dst_end])
        indptr = torch.from_numpy(g.indptr[dst_start:dst_end + 1] - s)
        indices = torch.from_numpy(g.indices[s:e].astype(np.int64))
        deg = torch.from_numpy(self._deg)
        return Block(g.num_nodes, dst_end - dst_start, indptr, indices, deg,
                     deg[dst_start:dst_end])
