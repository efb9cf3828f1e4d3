"""``device``: uniform neighbour sampling with torch tensor ops, on the CPU or on a GPU.

:class:`TorchNeighborSampler` keeps the CSR on ``device`` (a CUDA GPU, or the host for CPU
torch, which is how CI tests it) and builds every block there with vectorised torch ops only,
so the same code runs on both. It draws *the same mini-batches* as the numba
:class:`~twopgraph.sampler.neighbor.NeighborSampler` with the same ``seed`` and ``key``
(identical ``input_nodes``, ``indptr`` and ``indices``), because it evaluates the same
algorithm on the same counter-based random stream:

1. **Neighbour choice** (per hop, fanout ``f``; all neighbours for ``f = -1`` or ``d <= f``).
   For every frontier vertex ``v`` of degree ``d > f`` Floyd's algorithm picks ``f`` distinct
   CSR positions: for ``c = 0..f-1``, ``j = d - f + c``, ``t = draw(key, v, j) mod (j + 1)``;
   take ``t`` unless it was taken already, else ``j``. Every neighbour is then taken with
   probability ``min(1, f / d)`` and never twice, and every ``f``-subset is equally likely.
   The ``f`` draws of every sampled vertex are one ``(n, f)`` tensor op (the counter-based
   :func:`~twopgraph.core.rng.draw`, splitmix64 evaluated in int64 arithmetic, which wraps like
   uint64); "taken already?" is resolved for all columns at once (a row-wise sort and
   ``ceil(log2 f)`` pointer-jumping rounds, see :func:`_floyd`): ``O(n f log f)`` work and a
   fixed number of tensor ops whatever the degrees (a hub of degree 10^6 costs ``f`` draws,
   not 10^6 keys). Sampled edge ``e`` of row ``r`` sits at slot ``s = e - offsets[r]``; its CSR
   position is ``chosen[r, s]`` (rows with ``d > f``) or ``s`` (the others).
2. **Relabelling** (no sort, no hash table): a scratch map over all N vertices gets, by a
   ``scatter_reduce`` ``amin``, the first position of every vertex in ``cat(nodes, nbrs)``;
   position ``p`` is a first occurrence iff ``map[both[p]] == p``, and its local id is the
   number of first occurrences before it (a ``cumsum``). The current vertices occupy positions
   ``0..n-1``, so they keep their local ids (the seeds-first prefix) and the new vertices
   follow in order of first appearance -- exactly the numba relabelling. The map is reset by
   an ``index_fill_`` over the batch's vertices (``O(batch)``, not ``O(N)``).

Host synchronisations: per hop two, both forced by sizes -- the number of sampled edges
(read together with the number of rows to sample; it sizes the edge tensors) and the number
of vertices after the hop (it sizes ``input_nodes`` and is the block's ``num_src``, an int on
the host). So ``2 x layers`` per batch (6 for fanouts ``15,10,5``), plus one when ``seeds`` is
a device tensor (validation); host seeds are validated on the host and copied once (B x 8
bytes). ``full_block`` synchronises never (its bounds come from the host copy of ``indptr``).

Memory on ``device``: ``indptr`` (int64, ``8 (N + 1)`` bytes), ``indices`` in the graph's
dtype (``4 E`` bytes for int32), the degrees (float32, ``4 N`` bytes) -- on CPU torch the CSR
tensors share the graph's arrays (no copy) -- plus one relabelling map (int64, ``8 N``
bytes) per thread that samples. Per hop the temporaries are ``O(n f + edges)`` int64.

Throughput (synthetic-small: 100k vertices, 2.4M CSR entries; fanouts 15,10,5, batch 1024,
one CPU thread, 547k sampled edges per batch): ~6.2 M sampled edges/s on CPU torch (~88
ms/batch) vs ~19 M/s for the numba sampler (~27 ms/batch). The torch code is meant for the
GPU, where its ~110 tensor ops per hop (a third of them the splitmix64 arithmetic) run as
device kernels.

Example::

    >>> from twopgraph.graph.data import CSRGraph
    >>> from twopgraph.sampler import NeighborSampler
    >>> g = CSRGraph.from_edges([0, 0, 1], [1, 2, 3], num_nodes=4)
    >>> mb = TorchNeighborSampler(g, [2, 2], seed=0).sample(np.array([0]), key=5)
    >>> [b.size for b in mb.blocks], mb.input_nodes[:1].tolist()
    ([(4, 3), (3, 1)], [0])
    >>> ref = NeighborSampler(g, [2, 2], seed=0).sample(np.array([0]), key=5)
    >>> torch.equal(mb.input_nodes, ref.input_nodes)
    True
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence

import numpy as np
import torch

from twopgraph.core.minibatch import Block, MiniBatch
from twopgraph.core.protocols import SAMPLERS
from twopgraph.core.rng import MASK64, mix_key
from twopgraph.errors import ConfigError
from twopgraph.graph.data import CSRGraph
from twopgraph.sampler.neighbor import _FRESH_STREAM, check_seeds, parse_fanouts


def _i64(x: int) -> int:
    """A uint64 constant as the int64 with the same bits."""
    x &= MASK64
    return x - (1 << 64) if x >= 1 << 63 else x


_GOLDEN = _i64(0x9E3779B97F4A7C15)
_MUL1 = _i64(0xBF58476D1CE4E5B9)
_MUL2 = _i64(0x94D049BB133111EB)
_FNV = 0x100000001B3
_LOW32 = (1 << 32) - 1


def _shr(z: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 ``z`` by ``s`` bits (torch's ``>>`` is arithmetic)."""
    return (z >> s).bitwise_and_((1 << (64 - s)) - 1)


def _splitmix64_(z: torch.Tensor) -> torch.Tensor:
    """:func:`twopgraph.core.rng.splitmix64` on an int64 tensor, in place (the same bits as the
    uint64 one: int64 addition and multiplication wrap modulo 2**64 in torch, on the CPU and
    on CUDA)."""
    z.add_(_GOLDEN)
    z.bitwise_xor_(_shr(z, 30)).mul_(_MUL1)
    z.bitwise_xor_(_shr(z, 27)).mul_(_MUL2)
    return z.bitwise_xor_(_shr(z, 31))


def draw_torch(key: int, v: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    """:func:`twopgraph.core.rng.draw` elementwise over int64 tensors ``v`` and ``j`` (broadcast);
    the uint64 result as int64 bits (a new tensor)."""
    return _splitmix64_(_splitmix64_(v * _FNV + j).bitwise_xor_(_i64(key)))


def _umod(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """``x mod m`` with ``x`` read as uint64 (int64 bits) and ``1 <= m < 2**31``.

    Split ``x = hi 2**32 + lo`` (both non-negative): ``((hi mod m) 2**32 + lo) mod m``, where
    ``(hi mod m) 2**32 + lo < 2**63`` cannot overflow."""
    hi = _shr(x, 32)
    lo = x & _LOW32
    return (((hi % m) << 32) + lo) % m


@SAMPLERS.register("device")
class TorchNeighborSampler:
    """The torch twin of ``neighbor`` on the training device (the same batches).

    Samples an L-layer neighbourhood of a set of seeds on ``device`` with torch ops:
    ``sample(seeds) -> MiniBatch``, every tensor of it on ``device``.

    Same law, same blocks and, for the same ``(seed, key)``, the same batches as
    :class:`~twopgraph.sampler.neighbor.NeighborSampler` (see the module docstring for the
    algorithm and its host synchronisations). ``fanouts`` are per GNN layer, input layer
    first (``-1`` = all neighbours); ``degrees`` overrides the float32 degrees the blocks carry
    (default: the graph's); ``device`` is a torch device (``"cpu"``, ``"cuda"``,
    ``"cuda:1"``). One instance may be used from several threads: the only state is the key
    counter of key-less calls and one relabelling map (``8 N`` bytes on ``device``) per
    thread, made on its first call.

    Example::

        >>> from twopgraph.graph.data import CSRGraph
        >>> g = CSRGraph.from_edges([0, 0, 1], [1, 2, 3], num_nodes=4)
        >>> s = TorchNeighborSampler(g, [-1], device="cpu")
        >>> b = s.sample(np.array([0])).blocks[0]
        >>> b.size, b.indptr.tolist(), b.src_deg.tolist()
        ((3, 1), [0, 2], [2.0, 2.0, 1.0])
    """

    #: Samples on the ``device=`` it is given (``--sampler device``: the training device).
    on_device = True

    def __init__(self, graph: CSRGraph, fanouts: Sequence[int], seed: int = 0,
                 degrees: np.ndarray | None = None,
                 device: torch.device | str = "cpu") -> None:
        self.graph = graph
        self.fanouts = parse_fanouts(fanouts)
        self.seed = int(seed)
        self.device = torch.device(device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ConfigError(f"sampler device {self.device} asked for, but torch has no CUDA")
        deg = graph.degrees() if degrees is None else np.asarray(degrees)
        if deg.shape != (graph.num_nodes,):
            raise ConfigError(f"degrees must have one entry per vertex ({graph.num_nodes})")
        self.indptr = torch.from_numpy(
            np.ascontiguousarray(graph.indptr, dtype=np.int64)).to(self.device)
        self.indices = torch.from_numpy(np.ascontiguousarray(graph.indices)).to(self.device)
        self.deg = torch.from_numpy(deg.astype(np.float32)).to(self.device)
        self._fresh = itertools.count()
        self._tls = threading.local()

    @property
    def num_layers(self) -> int:
        return len(self.fanouts)

    def nbytes(self) -> int:
        """Bytes the sampler holds on ``device`` (CSR + degrees)."""
        return sum(t.numel() * t.element_size() for t in (self.indptr, self.indices, self.deg))

    # -- sampling -------------------------------------------------------------------------------
    def sample(self, seeds: np.ndarray | torch.Tensor, key: int | None = None,
               parallel: bool = True) -> MiniBatch:
        """Sample the blocks of ``seeds`` (unique global ids: a host array/tensor, or an int64
        tensor on ``device``); ``key`` picks the random stream (same seed + key => the same
        mini-batch, and the one NeighborSampler gives); without a key every call draws fresh
        randomness (keys from a counter that advances with each such call). ``parallel`` is
        accepted for the :class:`~twopgraph.core.protocols.Sampler` protocol: torch decides the
        threads (CPU: its intra-op count); the result never depends on it."""
        seeds = self._check_seeds(seeds)
        if key is None:
            key = mix_key(_FRESH_STREAM, next(self._fresh))  # itertools.count: thread-safe
        return self._sample(seeds, int(key))

    def _check_seeds(self, seeds) -> torch.Tensor:
        n = self.graph.num_nodes
        if isinstance(seeds, torch.Tensor) and seeds.device.type != "cpu":
            s = seeds.to(self.device, torch.int64)
            if s.ndim != 1 or s.shape[0] == 0:
                raise ConfigError("seeds must be a non-empty 1-D array of vertex ids")
            srt = s.sort().values
            bad = torch.stack([srt[0] < 0, srt[-1] >= n, (srt[1:] == srt[:-1]).any()])
            bad = bad.tolist()  # host sync: one, for the three checks
            if bad[0] or bad[1]:
                raise ConfigError(f"seed ids out of range [0, {n})")
            if bad[2]:
                raise ConfigError("seeds must be unique")
            return s
        return torch.from_numpy(check_seeds(seeds, n)).to(self.device)

    def _node_map(self) -> torch.Tensor:
        """This thread's relabelling scratch map (int64, N, on ``device``, all ``_UNSEEN``)."""
        m = getattr(self._tls, "node_map", None)
        if m is None:
            m = torch.full((self.graph.num_nodes,), _UNSEEN, dtype=torch.int64,
                           device=self.device)
            self._tls.node_map = m
        return m

    def _sample(self, seeds: torch.Tensor, key: int) -> MiniBatch:
        def draw(hop: int, fanout: int, nodes: torch.Tensor):
            return (*self._sample_neighbors(nodes, fanout, mix_key(self.seed, key, hop)), None)
        return self._expand(seeds, draw)

    def _expand(self, seeds: torch.Tensor, draw) -> MiniBatch:
        """The blocks of ``seeds``, hop by hop: ``draw(hop, fanout, nodes)`` gives the hop's
        ``(offsets, nbrs, edge_weight or None)`` for the dsts ``nodes`` (hop 0 = the seeds'
        own neighbours); the neighbours are relabelled and the new ones appended to the src
        vertices (:meth:`NeighborSampler._expand` in torch ops)."""
        nodes = seeds
        raw = []
        node_map = self._node_map()
        try:
            for hop, fanout in enumerate(reversed(self.fanouts)):
                offsets, nbrs, weights = draw(hop, fanout, nodes)
                num_dst = nodes.shape[0]
                nodes, local = _relabel(nodes, nbrs, node_map)
                raw.append((nodes.shape[0], num_dst, offsets, local, weights))
        except BaseException:
            self._tls.node_map = None  # maybe left dirty: the next call makes a fresh one
            raise
        deg = self.deg.index_select(0, nodes)
        blocks = [Block(num_src, num_dst, offsets, local, deg[:num_src], deg[:num_dst],
                        edge_weight=w)
                  for num_src, num_dst, offsets, local, w in reversed(raw)]
        return MiniBatch(seeds=seeds, input_nodes=nodes, blocks=blocks)

    def _sample_neighbors(self, nodes: torch.Tensor, fanout: int, key: int):
        """``(offsets, nbrs)`` as :func:`twopgraph.sampler.kernels.sample_neighbors`: the
        neighbours of ``nodes[i]`` are ``nbrs[offsets[i]:offsets[i+1]]`` (global, int64).
        One host sync (the edge count and the number of rows to sample, read together)."""
        dev = nodes.device
        n = nodes.shape[0]
        start = self.indptr.index_select(0, nodes)
        deg = self.indptr.index_select(0, nodes + 1) - start
        counts = deg if fanout < 0 else deg.clamp(max=fanout)
        offsets = torch.zeros(n + 1, dtype=torch.int64, device=dev)
        torch.cumsum(counts, 0, out=offsets[1:])
        if fanout > 0:
            # rows with d > f are sampled; slot[r] = their index among them (cumsum - 1)
            slot = torch.cumsum(deg > fanout, 0) - 1
            total, num_sampled = torch.stack([offsets[-1], slot[-1] + 1]).tolist()  # host sync
        else:
            total, num_sampled = int(offsets[-1]), 0  # host sync: the edge count sizes nbrs
        row = _rows(offsets, total)
        pos = torch.arange(total, device=dev) - offsets.index_select(0, row)  # slot in the row
        if num_sampled:
            sampled = deg > fanout
            # compaction without a sync: sampled row i goes to rows[slot[i]], others to a spare
            rows = torch.empty(num_sampled + 1, dtype=torch.int64, device=dev)
            rows.scatter_(0, torch.where(sampled, slot, num_sampled), torch.arange(n, device=dev))
            rows = rows[:num_sampled]
            chosen = _floyd(nodes.index_select(0, rows), deg.index_select(0, rows), fanout, key)
            edge_sampled = sampled.index_select(0, row)
            flat = slot.index_select(0, row).clamp(min=0) * fanout + pos.clamp(max=fanout - 1)
            pos = torch.where(edge_sampled, chosen.view(-1).index_select(0, flat), pos)
        nbrs = self.indices.index_select(0, start.index_select(0, row) + pos).to(torch.int64)
        return offsets, nbrs

    def full_block(self, dst_start: int, dst_end: int) -> Block:
        """All in-edges of the dst range ``[dst_start, dst_end)`` as one block over *global*
        src ids (``num_src = N``), on ``device``: exact layer-wise inference uses it without
        relabelling. No host synchronisation (the bounds come from the host CSR)."""
        g = self.graph
        s, e = int(g.indptr[dst_start]), int(g.indptr[dst_end])
        indptr = self.indptr[dst_start:dst_end + 1] - s
        indices = self.indices[s:e].to(torch.int64)
        return Block(g.num_nodes, dst_end - dst_start, indptr, indices, self.deg,
                     self.deg[dst_start:dst_end])


def _rows(offsets: torch.Tensor, total: int) -> torch.Tensor:
    """The row of every element of a CSR with ``offsets`` (n+1, int64) and ``total`` elements:
    ``repeat_interleave(arange(n), counts)`` without its cost on the CPU (a parallel loop even
    for tiny inputs, ~10x slower than this): mark where each row 1..n-1 starts, then count the
    marks (empty rows mark the same place twice; rows starting at ``total`` mark a spare)."""
    marks = torch.zeros(total + 1, dtype=torch.int64, device=offsets.device)
    starts = offsets[1:-1]
    marks.index_add_(0, starts, torch.ones_like(starts))
    return torch.cumsum(marks[:total], 0)


def _floyd(nodes: torch.Tensor, deg: torch.Tensor, f: int, key: int) -> torch.Tensor:
    """CSR positions chosen by Floyd's algorithm for vertices of degree ``d > f``, ``(n, f)``
    int64, as in :func:`twopgraph.sampler.kernels._draw_row`: column ``c`` draws
    ``t_c = draw(key, v, j_c) mod (j_c + 1)`` with ``j_c = d - f + c`` and takes ``t_c``
    unless it was taken already ("collides"), else ``j_c``.

    Without the column-by-column loop: ``t_c`` was taken already iff an earlier column drew
    the same value (``dup_c``; if that column collided itself, the value was taken before it),
    or ``t_c = j_p`` for an earlier column ``p = t_c - (d - f)`` that collided (took ``j_p``).
    So ``collided_c = dup_c or collided_p``: an OR along a chain of strictly decreasing
    columns, resolved by pointer jumping in ``ceil(log2 f)`` rounds. ``dup`` comes from a
    stable sort of each row (equal values adjacent, in column order): ~25 tensor ops for any
    ``f``, ``O(n f log f)`` work."""
    cols = torch.arange(f, device=nodes.device)
    base = (deg - f)[:, None]
    j = base + cols
    t = _umod(draw_torch(key, nodes[:, None], j), j + 1)
    vals, order = t.sort(dim=1, stable=True)
    dup = torch.zeros_like(t, dtype=torch.bool)
    torch.eq(vals[:, 1:], vals[:, :-1], out=dup[:, 1:])  # same value as the column before
    collided = torch.empty_like(dup).scatter_(1, order, dup)
    p = t - base
    ptr = torch.where((p >= 0) & (p < cols), p, cols)  # no earlier column: points to itself
    for _ in range((f - 1).bit_length()):  # 2**rounds >= f: every chain fully folded
        collided = collided | collided.gather(1, ptr)
        ptr = ptr.gather(1, ptr)
    return torch.where(collided, j, t)


_UNSEEN = (1 << 63) - 1  # node_map entry of a vertex not in the batch


def _relabel(nodes: torch.Tensor, nbrs: torch.Tensor,
             node_map: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(nodes', local)``: ``nodes'`` = ``nodes`` then the new vertices of ``nbrs`` in order of
    first appearance; ``local[e]`` = the position of ``nbrs[e]`` in ``nodes'``. ``nodes`` must be
    unique; ``node_map`` (int64, N, all ``_UNSEEN``) is scratch, left as it was found.

    No sort: ``node_map[v]`` becomes the first position of ``v`` in ``both = cat(nodes, nbrs)``
    (``scatter_reduce`` ``amin``); position ``p`` is a first occurrence iff
    ``node_map[both[p]] == p``, and the local id of ``both[p]`` is the number of first
    occurrences before its own (a ``cumsum``). One host sync: the number of vertices."""
    dev = nodes.device
    both = torch.cat([nodes, nbrs])
    m, n = both.shape[0], nodes.shape[0]
    pos = torch.arange(m, device=dev)
    node_map.scatter_reduce_(0, both, pos, "amin")
    first = node_map.index_select(0, both)
    is_first = first == pos
    rank = torch.cumsum(is_first, 0) - 1  # local id of each first occurrence
    local = rank.index_select(0, first[n:])
    num = int(rank[-1]) + 1  # host sync: the number of vertices sizes nodes'
    # compaction without another sync: first occurrences to their rank, the rest to a spare
    out = torch.empty(num + 1, dtype=both.dtype, device=dev)
    out.scatter_(0, torch.where(is_first, rank, num), both)
    out = out[:num]
    node_map.index_fill_(0, out, _UNSEEN)
    return out, local
