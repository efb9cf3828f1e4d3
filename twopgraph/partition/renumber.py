"""Cluster-contiguous renumbering: each cluster becomes one id range, BFS order inside.

After :func:`renumber`, cluster ``c`` owns the ids ``[start[c], start[c+1])`` (clusters in
id order), so a batch drawn from a few clusters reads a few contiguous ranges of ``indptr``,
``indices`` and feature rows instead of rows scattered over the whole arrays. Inside a cluster
the order is a BFS over the cluster's own edges, so neighbours get nearby ids too.

The permutation goes through :meth:`GraphData.permute`: CSR, features, labels and splits
follow, and ``node_ids`` keeps every vertex's original id, so whatever is reported per vertex
can be mapped back (:func:`to_original_order`).

Example::

    >>> from twopgraph.partition import Clustering
    >>> from twopgraph.graph import CSRGraph
    >>> g = CSRGraph.from_edges([0, 1, 2], [2, 3, 4], num_nodes=5)   # 0-2-4, 1-3
    >>> c = Clustering(np.array([0, 1, 0, 1, 0]), 2, edge_cut=0)
    >>> cluster_permutation(g, c).tolist()
    [0, 2, 4, 1, 3]
"""

from __future__ import annotations

import numpy as np
import torch

from .. import kernels
from ..graph import CSRGraph, GraphData
from .cluster import Clustering


def cluster_permutation(graph: CSRGraph, clustering: Clustering) -> np.ndarray:
    """``perm`` (int64, N): new vertex ``i`` is old vertex ``perm[i]``; clusters contiguous
    in cluster-id order, BFS order within each cluster (see module docstring)."""
    parts = np.ascontiguousarray(clustering.parts, dtype=np.int64)
    members = np.argsort(parts, kind="stable")
    start = np.zeros(clustering.num_clusters + 1, dtype=np.int64)
    np.cumsum(clustering.sizes(), out=start[1:])
    return kernels.cluster_bfs_order(graph.indptr, graph.indices, parts, members, start)


def renumber(data: GraphData, clustering: Clustering) -> tuple[GraphData, Clustering, np.ndarray]:
    """Renumber ``data`` cluster by cluster.

    Returns ``(data', clustering', perm)``: the renumbered data (``node_ids`` = original
    ids), the clustering in the new ids (cluster ``c`` is one contiguous range), and ``perm``
    (new vertex ``i`` is old vertex ``perm[i]``).
    """
    perm = cluster_permutation(data.graph, clustering)
    return data.permute(perm), clustering.permute(perm), perm


def to_original_order(values, perm: np.ndarray):
    """Rows of ``values`` (indexed by new id) re-indexed by the id before :func:`renumber`.

    ``values[i]`` belongs to new vertex ``i`` = old vertex ``perm[i]``; the result ``r`` has
    ``r[perm[i]] = values[i]``. Works on NumPy arrays and torch tensors.
    """
    if isinstance(values, torch.Tensor):
        out = torch.empty_like(values)
        out[torch.from_numpy(np.asarray(perm, dtype=np.int64))] = values
        return out
    values = np.asarray(values)
    out = np.empty_like(values)
    out[perm] = values
    return out
