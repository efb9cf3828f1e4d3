"""Streamed layers: a layer's outputs pushed at once into the next layer's accumulators.

:func:`_plan_push` decides whether a layer streams (the next layer's input tables are
smaller than the table streaming saves); :class:`_Push` adds each chunk's outputs into the
summed aggregations of the next level's vertices (straight per edge, :data:`SCATTER`, or
through ``conv.aggregate`` of target-sorted tiles) and keeps their own rows.
"""

from __future__ import annotations

import numpy as np
import torch

from twopgraph.core.minibatch import Block
from twopgraph.core.protocols import Conv, Sampler
from twopgraph.graph.spmm import scatter_rows
from twopgraph.inference.convs import _agg_width, _projects, _widths
from twopgraph.inference.relabel import LevelIndex
from twopgraph.inference.rows import _degree_of
from twopgraph.inference.tables import EvalTable


def _plan_push(nxt, conv, graph, level: np.ndarray, upper: np.ndarray,
               stream: bool | None, device) -> list[int] | None:
    """Whether ``conv``'s outputs (over ``level``) are streamed into the next layer ``nxt``
    (over ``upper``, a subset of ``level``) instead of kept in a table: the widths of the
    two tables that then hold ``nxt``'s inputs (summed aggregations, the dst rows), or None.
    ``stream`` None (auto) streams when those tables are smaller than the one streaming
    saves (``|level|`` x the next layer's input width, or its projections'), True whenever
    it can, False never. Streaming needs ``nxt.aggregate``/``combine`` and an undirected
    graph (a vertex's row then lists the dsts its output goes to)."""
    if stream is False or not (hasattr(nxt, "aggregate") and hasattr(nxt, "combine")):
        return None
    widths = [_agg_width(nxt, device), nxt.in_dim]
    saved = sum(_widths(nxt, device)) if _projects(nxt) else conv.out_dim
    if not stream and upper.shape[0] * sum(widths) >= level.shape[0] * saved:
        return None
    if graph.undirected_problem() is not None:
        return None
    return widths


#: :class:`_Push` adds edges straight into its accumulators where the conv allows
#: (:meth:`_Push._scatter`); False: always through ``conv.aggregate`` of sorted tiles.
SCATTER = True

#: :class:`_Push` marks the next level's vertices in an n-byte array when it holds at least
#: 1/PUSH_MARK of the vertices (the array is then at most 4x the level's own int32 ids), and
#: binary-searches each neighbour otherwise.
PUSH_MARK = 16


class _Push:
    """A layer's outputs streamed into the next layer ``conv`` over the smaller level
    ``upper`` (sorted ids, a subset of the layer's own ``level``): :meth:`push` adds each
    chunk's ``conv.aggregate`` over the chunk's edges into ``acc`` (``|upper|`` x agg width;
    a dst's neighbours arrive over several chunks, each a tile :class:`Block` with the dst's
    whole neighbour count) and, given a second table, keeps the rows of ``upper``'s own
    vertices in ``rows`` (else ``rows`` is None); the next layer is then
    ``conv.combine(rows, acc)``. ``level`` None: the chunks are of all vertices in id
    order. Needs an undirected graph: a vertex's CSR row lists the dsts its output goes
    to. Memory: the tables, per chunk O(its edges), and an ``n``-byte membership mark of
    ``upper`` when it is dense (:data:`PUSH_MARK`)."""

    def __init__(self, conv: Conv, level: np.ndarray | None, upper: np.ndarray,
                 sampler: Sampler, device: torch.device, tables: list[EvalTable]) -> None:
        self.conv, self.upper, self.sampler, self.device = conv, upper, sampler, device
        self.acc, self.rows = tables if len(tables) == 2 else (tables[0], None)
        for t in tables:  # zeros (a new scratch file reads as zeros already); in memory,
            if t.where != "disk":  # touched now so that the memory left is seen at once
                t.table.zero_()
        self.width = sum(t.table.shape[1] for t in tables)
        graph = sampler.graph
        self.indptr = graph.indptr
        self.index = LevelIndex(upper, graph.num_nodes)
        self.mark = None  # an n-byte mark only when upper is no sparser than 1/16 of n
        if PUSH_MARK * upper.shape[0] >= graph.num_nodes:
            self.mark = np.zeros(graph.num_nodes, dtype=bool)
            self.mark[upper] = True
        # each upper vertex's place in level (level None: all vertices in id order)
        self.own = upper.astype(np.int64) if level is None else np.searchsorted(level, upper)

    def _scatters(self, y: torch.Tensor) -> bool:
        """Whether :meth:`push` adds each edge straight into ``acc`` (:meth:`_scatter`): the
        conv gives its ``message`` and ``edge_weight`` and both live on the host."""
        return (SCATTER and hasattr(self.conv, "message") and hasattr(self.conv, "edge_weight")
                and y.device.type == "cpu" and self.acc.table.device.type == "cpu")

    def _scatter(self, tgt: np.ndarray, src: np.ndarray, dst: np.ndarray,
                 y: torch.Tensor) -> None:
        """``acc[tgt] += edge_weight * message(y)[src]`` per edge (:func:`scatter_rows`):
        the same sums as ``conv.aggregate`` over the tile, without grouping the edges by
        target (a sort of every edge pushed)."""
        ids = self.upper[tgt].astype(np.int64)
        count = torch.from_numpy(self.indptr[ids + 1] - self.indptr[ids])
        w = self.conv.edge_weight(_degree_of(self.sampler, dst)[torch.from_numpy(src)],
                                  _degree_of(self.sampler, ids), count)
        m = self.conv.message(y).to(torch.float32).contiguous()
        acc = self.acc.table
        scatter_rows(tgt, src, w.to(torch.float32).contiguous().numpy(), m.numpy(),
                     acc.numpy(), max(1, min(torch.get_num_threads(), 8)))

    def push(self, a: int, b: int, y: torch.Tensor, dst: np.ndarray, offs: np.ndarray,
             nbrs: np.ndarray) -> None:
        """Positions ``[a, b)`` of the level, vertices ``dst``, outputs ``y``; their CSR rows
        ``offs``/``nbrs`` (:func:`_rows_of`)."""
        if self.mark is not None:
            hit = self.mark[nbrs]
            tgt = self.index.positions(nbrs[hit])
        else:  # a sparse upper level: one binary search per edge, no n-sized array
            up = self.upper
            pos = np.searchsorted(up, nbrs.astype(up.dtype, copy=False))
            hit = up[np.minimum(pos, max(up.shape[0] - 1, 0))] == nbrs if up.shape[0] \
                else np.zeros(nbrs.shape[0], dtype=bool)
            tgt = pos[hit].astype(np.int64)
        src = np.repeat(np.arange(b - a, dtype=np.int64), np.diff(offs))[hit]
        if tgt.shape[0] and self._scatters(y):
            self._scatter(tgt, src, dst, y)
        elif tgt.shape[0]:  # through conv.aggregate over a tile sorted by target
            order = np.argsort(tgt, kind="stable")
            tgt, src = tgt[order], src[order]
            first = np.flatnonzero(np.concatenate([[True], tgt[1:] != tgt[:-1]]))
            touched = tgt[first]
            ids = self.upper[touched].astype(np.int64)
            whole = (self.indptr[ids + 1] - self.indptr[ids]).astype(np.int64)
            tile = Block(b - a, int(touched.shape[0]),
                         torch.from_numpy(np.append(first, tgt.shape[0]).astype(np.int64)),
                         torch.from_numpy(src), _degree_of(self.sampler, dst),
                         _degree_of(self.sampler, ids), torch.from_numpy(whole))
            agg = self.conv.aggregate(tile.to(self.device), y)
            acc = self.acc.table
            acc.index_add_(0, torch.from_numpy(touched).to(acc.device), agg.to(acc.device))
        if self.rows is None:
            return
        s, t = (int(x) for x in np.searchsorted(self.own, [a, b]))
        if t > s:
            self.rows.write(s, t, y[torch.from_numpy(self.own[s:t] - a).to(y.device)])
