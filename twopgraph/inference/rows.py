"""The CSR as exact inference reads it: edge-balanced ranges and full rows of a vertex set.

:func:`edge_balanced_ranges` (vertex ranges of about ``batch_edges`` edges),
:func:`_prefix_degrees` (the ``indptr`` of some rows in a given order), :func:`_rows_of`
(every neighbour of a set of vertices, through the sampling kernel with fanout -1) and
:func:`_degree_of` (the degrees, float32, a sampler's blocks carry: GCN's normalisation).
"""

from __future__ import annotations

import numpy as np
import torch

from twopgraph.sampler.kernels import sample_neighbors, sample_neighbors_serial


def edge_balanced_ranges(indptr: np.ndarray, batch_edges: int) -> list[int]:
    """Vertex range bounds ``[0, ..., N]`` cutting the CSR rows into pieces of about
    ``batch_edges`` edges each (a vertex's row is never split)."""
    n = indptr.shape[0] - 1
    cuts = np.searchsorted(indptr, np.arange(batch_edges, int(indptr[-1]), batch_edges))
    bounds = sorted(set([0, n] + [int(c) for c in cuts if 0 < c < n]))
    return bounds


def _prefix_degrees(indptr: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``[0, d_0, d_0 + d_1, ...]`` (int64, len(ids) + 1) of the CSR rows ``ids``: the
    ``indptr`` of the rows taken in that order."""
    cum = np.zeros(ids.shape[0] + 1, dtype=np.int64)
    if ids.shape[0]:
        np.cumsum(indptr[ids + 1] - indptr[ids], out=cum[1:])
    return cum


#: Edges below which :func:`_rows_of` gathers on the calling thread (a parallel launch costs
#: more than it saves on a small piece).
SERIAL_EDGES = 1 << 16


def _rows_of(graph, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The full CSR rows of ``ids`` concatenated: ``(offsets int64, neighbours)``, in CSR
    order (the exact-inference block of those dst vertices): the sampling kernel with fanout
    -1, which takes every neighbour; parallel for pieces of at least :data:`SERIAL_EDGES`
    edges."""
    indptr = graph.indptr
    nodes = ids.astype(np.int64, copy=False)
    edges = int((indptr[nodes + 1] - indptr[nodes]).sum()) if nodes.shape[0] < 4096 else \
        SERIAL_EDGES
    kernel = sample_neighbors if edges >= SERIAL_EDGES else sample_neighbors_serial
    return kernel(indptr, graph.indices, nodes, -1, np.uint64(0))


def _degree_of(sampler, ids: np.ndarray) -> torch.Tensor:
    """The degrees (float32) the sampler's blocks carry for ``ids`` (GCN's normalisation:
    the full graph's, or the sampler's own override), without an N-sized copy."""
    deg = getattr(sampler, "_deg", None)
    if deg is not None:
        return torch.from_numpy(np.ascontiguousarray(deg[ids]))
    dev = getattr(sampler, "deg", None)
    if isinstance(dev, torch.Tensor):
        return dev[torch.from_numpy(ids.astype(np.int64, copy=False)).to(dev.device)].cpu()
    indptr = sampler.graph.indptr
    return torch.from_numpy((indptr[ids + 1] - indptr[ids]).astype(np.float32))
