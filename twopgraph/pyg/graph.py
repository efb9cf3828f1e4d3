"""The sampling structure of a PyG ``edge_index``: its CSC (in-edges grouped by target) with
the original id of every entry, built once per loader.

PyG samples the graph *as given*: a directed ``edge_index`` whose column ``e`` is the edge
``edge_index[0, e] -> edge_index[1, e]``, duplicates and self loops included; a node
aggregates its in-neighbours. twopgraph's CSR convention (``indices[indptr[v]:indptr[v+1]]``
= the in-neighbours of ``v``) is exactly that CSC. Nothing is symmetrised here, unlike
:meth:`twopgraph.graph.data.GraphData.from_pyg`, which builds the undirected graph training
wants (reverse edges added, self loops and duplicates dropped): its rows would not be
PyG's neighbourhoods and its entries would have no edge id.

:class:`EdgeCSC` holds the rows as *edge ids* (``eid[indptr[v]:indptr[v+1]]`` = the ids of
the in-edges of ``v``, in ``edge_index`` order: a stable sort by target), so the neighbour
sampling kernels of :mod:`twopgraph.sampler.kernels`, run over it, return the ids of the
sampled edges; the neighbours are then ``edge_index[0, ids]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from twopgraph.errors import GraphFormatError
from twopgraph.graph.data import CSRGraph


@dataclass(frozen=True)
class EdgeCSC:
    """The in-edges of every node of a directed graph, by edge id.

    ``indptr`` int64 (N+1); ``eid`` (E) the ids of the in-edges of ``v`` in
    ``eid[indptr[v]:indptr[v+1]]``, in the order of ``edge_index`` (int32 while E < 2**31,
    else int64); ``src`` int64 (E) the source of every edge (a view of ``edge_index[0]``
    when that is a contiguous CPU int64 tensor: no copy), ``dst`` likewise the targets.

    Memory: ``8 (N + 1) + 4 E`` bytes of its own (``8 E`` from 2**31 edges), plus a copy of
    ``edge_index`` only when it is not a contiguous CPU int64 tensor. Building it sorts the
    targets once (a stable torch sort: about 20 E bytes of scratch while it runs).
    """

    indptr: np.ndarray
    eid: np.ndarray
    src: np.ndarray
    dst: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.shape[0]) - 1

    @property
    def num_edges(self) -> int:
        return int(self.eid.shape[0])

    @property
    def graph(self) -> CSRGraph:
        """The CSR over edge ids (what the sampling kernels read): the "neighbours" of ``v``
        are the ids of its in-edges."""
        return CSRGraph(self.indptr, self.eid)

    @classmethod
    def from_edge_index(cls, edge_index: torch.Tensor, num_nodes: int,
                        is_sorted: bool = False) -> "EdgeCSC":
        """The CSC of ``edge_index`` (2 x E integers, any device) over ``num_nodes`` nodes.

        ``is_sorted`` (PyG's keyword): the edges are already sorted by target, so the ids are
        ``0..E-1`` and no sort runs (checked in one pass: a ``GraphFormatError`` if not).
        Raises ``GraphFormatError`` for a malformed ``edge_index`` or ids out of range.
        """
        if not isinstance(edge_index, torch.Tensor) or edge_index.dim() != 2 \
                or edge_index.size(0) != 2:
            raise GraphFormatError("edge_index must be a 2 x E tensor, got "
                                   f"{getattr(edge_index, 'shape', type(edge_index))}")
        if edge_index.is_floating_point() or edge_index.is_complex():
            raise GraphFormatError(f"edge_index must hold integers, got {edge_index.dtype}")
        ei = edge_index.detach().to("cpu", torch.int64)
        src = ei[0].contiguous().numpy()
        dst_t = ei[1].contiguous()
        dst = dst_t.numpy()
        n, e = int(num_nodes), int(src.shape[0])
        if e and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
            raise GraphFormatError(f"edge_index holds node ids out of range [0, {n})")
        id_dtype = np.int32 if e < 2**31 else np.int64
        if is_sorted:
            if e > 1 and np.any(dst[1:] < dst[:-1]):
                raise GraphFormatError("is_sorted=True but edge_index is not sorted by "
                                       "target (edge_index[1])")
            eid = np.arange(e, dtype=id_dtype)
        else:
            eid = torch.sort(dst_t, stable=True).indices.numpy().astype(id_dtype)
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
        return cls(indptr, eid, src, dst)

    def undirected(self) -> CSRGraph:
        """The undirected simple graph of these edges (reverse edges added, self loops and
        duplicates dropped): what METIS clusters for the locality schedule. O(E) memory
        while it lives."""
        return CSRGraph.from_edges(self.src, self.dst, self.num_nodes)
