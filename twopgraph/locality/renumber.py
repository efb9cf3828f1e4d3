"""Cluster-contiguous renumbering: each cluster becomes one id range, BFS order inside.

After :func:`renumber`, cluster ``c`` owns the ids ``[start[c], start[c+1])`` (clusters in
id order), so a batch drawn from a few clusters reads a few contiguous ranges of ``indptr``,
``indices`` and feature rows instead of rows scattered over the whole arrays. Inside a cluster
the order is a BFS over the cluster's own edges, so neighbours get nearby ids too.

The permutation goes through :meth:`GraphData.permute`: CSR, features, labels and splits
follow, and ``node_ids`` keeps every vertex's original id, so whatever is reported per vertex
can be mapped back (:func:`to_original_order`).

Example::

    >>> from twopgraph.locality import Clustering
    >>> from twopgraph.graph.data import CSRGraph
    >>> g = CSRGraph.from_edges([0, 1, 2], [2, 3, 4], num_nodes=5)   # 0-2-4, 1-3
    >>> c = Clustering(np.array([0, 1, 0, 1, 0]), 2, edge_cut=0)
    >>> cluster_permutation(g, c).tolist()
    [0, 2, 4, 1, 3]
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from twopgraph.errors import ConfigError, GraphFormatError
from twopgraph.graph.data import CSRGraph, GraphData
from twopgraph.locality import kernels
from twopgraph.locality.cluster import Clustering, cluster_graph, default_num_clusters
from twopgraph.locality.contract import group_by
from twopgraph.store.mapped import StoreChanged

log = logging.getLogger("twopgraph")


def cluster_permutation(graph: CSRGraph, clustering: Clustering) -> np.ndarray:
    """``perm`` (int64, N): new vertex ``i`` is old vertex ``perm[i]``; clusters contiguous
    in cluster-id order, BFS order within each cluster (see module docstring)."""
    parts = kernels.compact_labels(clustering.parts, clustering.num_clusters - 1)
    start, members = group_by(parts, clustering.num_clusters)  # a counting sort: O(N)
    return kernels.cluster_bfs_order(graph.indptr, graph.indices, parts, members, start)


def renumber(data: GraphData, clustering: Clustering, cache_dir: str | os.PathLike | None = None,
             progress: bool = False) -> tuple[GraphData, Clustering, np.ndarray]:
    """Renumber ``data`` cluster by cluster.

    Returns ``(data', clustering', perm)``: the renumbered data (``node_ids`` = original
    ids), the clustering in the new ids (cluster ``c`` is one contiguous range), and ``perm``
    (new vertex ``i`` is old vertex ``perm[i]``).

    Data read from a store (``data.store``) with a ``cache_dir`` is renumbered into a store of
    its own, ``cache_dir/renumbered-<key>`` (key: the fingerprint of the data and of
    ``perm``), written chunk by chunk and reused by later runs, so the renumbered features are
    memory-mapped too (shared by processes, paged from disk); other data is permuted in memory.
    """
    perm = cluster_permutation(data.graph, clustering)
    if data.store is None or cache_dir is None:
        return data.permute(perm), clustering.permute(perm), perm
    from twopgraph.core.fingerprint import fingerprint
    from twopgraph.store.reader import STORE_VERSION
    key = fingerprint("renumbered-store", {"data": data.fingerprint(), "store": STORE_VERSION},
                      perm)
    folder = Path(cache_dir) / f"renumbered-{key[:20]}"
    from twopgraph.core.locks import FileLock
    # one writer per renumbered store: another process building it is waited for, then its
    # store is used (never rebuilt and replaced while the other maps it)
    with FileLock(folder.parent / f".{folder.name}.lock", f"the renumbered store {folder}",
                  blocking=True):
        return _renumbered_store(data, clustering, perm, key, folder, progress)


def _renumbered_store(data, clustering, perm, key, folder, progress):
    """:func:`renumber` of store-backed data into ``folder``, under its lock."""
    from twopgraph.store.reader import is_store, open_store, read_store_meta
    from twopgraph.store.writer import permuted_store
    if is_store(folder):
        try:
            derived = read_store_meta(folder).get("derived") or {}
            if derived.get("from") == data.fingerprint() and derived.get("key") == key:
                return (open_store(folder, name=data.name, check_symmetric=False),
                        clustering.permute(perm), perm)
        except StoreChanged as e:  # what changed, without the advice to delete the folder
            log.warning("renumbered store %s: %s; rebuilding it", folder, e.what)
        except GraphFormatError as e:
            log.warning("renumbered store %s is damaged, rebuilding it (%s)", folder, e)
    out = permuted_store(data, perm, folder, progress=progress, key=key)
    return out, clustering.permute(perm), perm


def to_original_order(values: np.ndarray | torch.Tensor,
                      perm: np.ndarray) -> np.ndarray | torch.Tensor:
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


@dataclass
class LocalityPrep:
    """What :func:`prepare_locality` did: the (renumbered) data, its clustering in the same
    ids, ``perm`` (None without renumbering) and the wall times in seconds."""

    data: GraphData
    clustering: Clustering | None
    perm: np.ndarray | None
    cluster_s: float = 0.0
    renumber_s: float = 0.0
    #: a ``--schedule auto`` decision taken before clustering (pipeline.locality_for), else None
    schedule_choice: object = None
    #: the cluster counts ``--schedule auto`` tried (locality.auto.choose_clusters), else None
    clusters_tried: list | None = None

    def summary(self) -> dict:
        out = {"renumbered": self.perm is not None, "cluster_s": round(self.cluster_s, 3),
               "renumber_s": round(self.renumber_s, 3)}
        if self.clustering is not None:
            out.update(self.clustering.summary())
        return out


def prepare_locality(data: GraphData, *, batch_size: int, num_clusters: int = 0,
                     need_clusters: bool = True, renumber_graph: bool = True,
                     cache_dir: str | os.PathLike | None = None, progress: bool = False,
                     method: str = "auto",
                     clustering: Clustering | None = None) -> LocalityPrep:
    """Cluster ``data`` (when ``need_clusters`` or ``renumber_graph``) and renumber it.

    ``num_clusters`` 0 picks :func:`default_num_clusters` from the training set and
    ``batch_size``. The clustering (``method``: see :func:`cluster_graph`) balances training
    vertices across clusters, uses seed 0 (so runs with different ``--seed`` share one cached
    clustering) and caches in ``cache_dir`` (with the renumbered store of data read from a
    store: :func:`renumber`). ``clustering``: one computed already for ``data`` (used when
    it has the cluster count asked for).
    """
    if not (need_clusters or renumber_graph):
        return LocalityPrep(data, None, None)
    if num_clusters < 0:
        raise ConfigError(f"num-clusters must be >= 0 (0 = automatic), got {num_clusters}")
    k = num_clusters or default_num_clusters(data.num_nodes, int(data.train_idx.shape[0]),
                                             batch_size)
    t = time.perf_counter()
    if clustering is None or clustering.num_clusters != k:
        clustering = cluster_graph(data.graph, k, train_idx=data.train_idx,
                                   cache_dir=cache_dir, method=method)
    cluster_s = time.perf_counter() - t
    if not renumber_graph:
        return LocalityPrep(data, clustering, None, cluster_s)
    t = time.perf_counter()
    data, clustering, perm = renumber(data, clustering, cache_dir, progress)
    renumber_s = time.perf_counter() - t
    log.info("renumbered %d vertices cluster by cluster in %.1f s", data.num_nodes, renumber_s)
    return LocalityPrep(data, clustering, perm, cluster_s, renumber_s)
