"""Which part owns which vertex, and which vertices each part reaches: the ``P``-way split
of the fine METIS clusters (:func:`split_clusters`, METIS on the cluster graph, then
:func:`rebalance` where METIS misses :data:`BALANCE_TOLERANCE`) and the ``H``-hop halos of
every part's training vertices (:func:`halos`), for
:func:`~twopgraph.distributed.partition.selfdep.partition_selfdep` (each step timed alone by
``twopgraph bench partition-steps``).
"""

from __future__ import annotations

import numpy as np

from twopgraph.errors import ConfigError
from twopgraph.graph.data import CSRGraph
from twopgraph.locality import kernels
from twopgraph.locality.cluster import DEFAULT_UFACTOR, metis_output_to_log


def _check_train_in_every_part(owner: np.ndarray, train_idx: np.ndarray, num_parts: int,
                               n: int) -> None:
    """Every part must own training vertices (its rank trains on them)."""
    per_part = np.bincount(owner[train_idx], minlength=num_parts)
    empty = np.flatnonzero(per_part == 0)
    if empty.shape[0]:
        raise ConfigError(f"--num-parts {num_parts} is too many for the graph ({n} vertices, "
                          f"{train_idx.shape[0]} training vertices): METIS left "
                          f"{empty.shape[0]} part(s) without training vertices; use fewer parts")


def split_clusters(g: CSRGraph, fine: np.ndarray, k: int, train_idx: np.ndarray,
                   num_parts: int, seed: int) -> tuple[np.ndarray, int]:
    """The ``num_parts``-way split of the ``k`` fine clusters: ``(part of each fine cluster
    (int64, k entries, ids 0..num_parts-1), edge cut (undirected edges between parts))``.

    ``fine`` is the fine cluster of every vertex (N entries, ids ``0..k-1``), ``train_idx`` the
    training vertices (global ids), ``seed`` METIS' seed. METIS runs on the cluster graph
    (vertex weights = [vertices, training vertices] of a cluster, edge weights = edges between
    two clusters), so parts balance both and every fine cluster lies inside one part;
    :func:`rebalance` then moves whole clusters where METIS misses
    :data:`BALANCE_TOLERANCE`. The edge cut (what
    :func:`~twopgraph.locality.cluster.edge_cut` gives for the vertices' parts) is summed
    from the cluster graph: every edge between parts is one between clusters, so no second
    pass over the graph's entries is needed."""
    if num_parts == 1:
        return np.zeros(k, dtype=np.int64), 0
    import pymetis
    w = np.zeros((k, 2), dtype=np.int64)
    w[:, 0] = np.bincount(fine, minlength=k)
    w[:, 1] = np.bincount(fine[train_idx], minlength=k)
    cg = _cluster_graph(g, fine, k)
    idx = pymetis.zero_copy_dtype()
    with metis_output_to_log():  # METIS prints to C stdout: keep --json output clean
        _, parts = pymetis.part_graph(
            num_parts, pymetis.CSRAdjacency(np.ascontiguousarray(cg.indptr, dtype=idx),
                                            np.ascontiguousarray(cg.indices, dtype=idx)),
            eweights=np.ascontiguousarray(np.minimum(cg.data, 2**30), dtype=idx),
            vweights=np.ascontiguousarray(w.ravel(), dtype=idx),
            options=pymetis.Options(seed=int(seed), ufactor=DEFAULT_UFACTOR), recursive=False)
    parts = rebalance(np.asarray(parts, dtype=np.int64), w, cg, num_parts)
    return parts, cut_between(cg, parts)


def cut_between(cluster_graph, parts: np.ndarray) -> int:
    """Undirected edges between parts, from the symmetric cluster graph (``k x k`` sparse
    counts of directed entries) and each cluster's part."""
    coo = cluster_graph.tocoo()
    return int(coo.data[parts[coo.row] != parts[coo.col]].sum()) // 2


#: Largest cluster count whose cluster graph is counted in dense ``k x k`` tables
#: (:func:`~twopgraph.locality.kernels.cluster_pairs`, 128 MiB per table at the limit);
#: above it, in sparse chunks.
DENSE_CLUSTER_GRAPH = 4096


def _cluster_graph(g: CSRGraph, fine: np.ndarray, k: int):
    """The cluster graph: symmetric sparse ``k x k`` counts of the edges between clusters
    (int64). Dense tables in one parallel pass up to :data:`DENSE_CLUSTER_GRAPH` clusters
    (the default clusterings have a few hundred to a few thousand), sparse chunks above."""
    import scipy.sparse as sp
    if k <= DENSE_CLUSTER_GRAPH:
        chunks = int(max(1, min(16, (1 << 28) // (8 * k * k))))
        cid = kernels.compact_labels(fine, k - 1)
        return sp.csr_matrix(kernels.cluster_pairs(g.indptr, g.indices, cid, k, chunks))
    deg = g.degrees()
    cg = sp.csr_matrix((k, k), dtype=np.int64)
    step = 1 << 19
    for a in range(0, g.num_nodes, step):  # cross-cluster edge counts, chunked
        b = min(a + step, g.num_nodes)
        src = np.repeat(fine[a:b], deg[a:b])
        dst = fine[g.indices[g.indptr[a]:g.indptr[b]]]
        keep = src != dst
        cg = cg + sp.csr_matrix((np.ones(int(keep.sum()), dtype=np.int64),
                                 (src[keep], dst[keep])), shape=(k, k))
    cg.sum_duplicates()
    return cg


#: The imbalance :func:`rebalance` accepts: a part may exceed the mean of a weight (training
#: vertices, vertices) by this share, or by the largest single cluster's weight where that is
#: more (whole clusters move, so finer balance may not exist).
BALANCE_TOLERANCE = DEFAULT_UFACTOR / 1000
# Bumped when the part split changes (the partition_id covers it: old folders are recomputed).
SPLIT_VERSION = 2


def rebalance(parts: np.ndarray, weights: np.ndarray, adjacency, num_parts: int,
              tolerance: float = BALANCE_TOLERANCE) -> np.ndarray:
    """Move whole clusters between parts until every part is within ``tolerance`` of the mean
    of every weight column (:data:`BALANCE_TOLERANCE`); returns the new part of each cluster.

    METIS' multi-constraint k-way split misses its tolerance by far on small coarse graphs
    (cora in 2 parts: 2145/563 vertices, 94/46 training vertices): ``parts`` is taken as the
    start and, while a part is over the tolerance, the move that lowers the squared relative
    deviation from the means (summed over parts and columns) is made -- among the moves that
    achieve at least half of the best lowering, the one that cuts the fewest cluster-graph
    edges (``adjacency``: symmetric sparse k x k edge counts). A split already within the
    tolerance is returned unchanged. Deterministic."""
    parts = np.asarray(parts, dtype=np.int64).copy()
    w = np.asarray(weights, dtype=np.float64).reshape(parts.shape[0], -1)
    if num_parts < 2 or parts.shape[0] == 0:
        return parts
    total = w.sum(0)
    cols = total > 0  # a column without weight cannot be unbalanced
    if not cols.any():
        return parts
    w, total = w[:, cols], total[cols]
    target = total / num_parts
    slack = np.maximum(tolerance * target, w.max(0))
    load = np.zeros((num_parts, w.shape[1]))
    np.add.at(load, parts, w)
    import scipy.sparse as sp
    adj = sp.csr_matrix(adjacency, dtype=np.float64)
    onehot = sp.csr_matrix((np.ones(parts.shape[0]), (np.arange(parts.shape[0]), parts)),
                           shape=(parts.shape[0], num_parts))
    conn = np.asarray((adj @ onehot).todense())  # edges of each cluster into each part
    rows = np.arange(parts.shape[0])
    for _ in range(4 * parts.shape[0]):  # each move lowers the deviation: a bound, not a goal
        over = load - target - slack
        if (over <= 1e-9).all():
            break
        src = int(np.argmax(over.max(1)))
        cand = rows[parts == src]
        if cand.shape[0] == 0:
            break
        wc = w[cand]  # (m, c)
        # squared relative deviation change of moving candidate i from src to part b
        before_src = (((load[src] - target) / target) ** 2).sum()
        after_src = ((((load[src] - wc) - target) / target) ** 2).sum(1)  # (m,)
        before_b = (((load - target) / target) ** 2).sum(1)  # (P,)
        after_b = ((((load[None, :, :] + wc[:, None, :]) - target) / target) ** 2).sum(2)
        gain = (before_src - after_src)[:, None] + (before_b[None, :] - after_b)  # (m, P)
        gain[:, src] = -np.inf
        best = gain.max()
        if not best > 1e-12:
            break
        ok = gain >= 0.5 * best
        cut = np.where(ok, conn[cand] - conn[cand, src][:, None], -np.inf)
        i, b = np.unravel_index(int(np.argmax(np.where(ok, cut * (1 + 1e-9) + gain * 1e-6,
                                                       -np.inf))), cut.shape)
        c = int(cand[i])
        parts[c] = b
        load[src] -= w[c]
        load[b] += w[c]
        col = adj.getrow(c)
        conn[col.indices, src] -= col.data
        conn[col.indices, b] += col.data
    return parts


def part_masks(columns, num_parts: int):
    """Eight parts per byte: yields ``(first part, mask)`` with bit ``b`` of ``mask[v]`` (uint8,
    N) set where ``columns(p)`` (bool, N) is True for part ``first + b``."""
    for first in range(0, num_parts, 8):
        mask = None
        for b in range(min(8, num_parts - first)):
            bit = columns(first + b).astype(np.uint8) << np.uint8(b)
            mask = bit if mask is None else mask | bit
        yield first, mask


def halos(g: CSRGraph, owner: np.ndarray, train_idx: np.ndarray, num_parts: int,
          hops: int) -> np.ndarray:
    """``reached[v, p]``: vertex ``v`` is within ``hops`` hops (edges) of a training vertex of
    part ``p`` (bool, N x ``num_parts``; a part's training vertices themselves included, hop
    0). ``owner`` is the part of every vertex (N entries, any integer dtype; int8 from
    :func:`~twopgraph.locality.kernels.compact_labels` is what the partition passes),
    ``train_idx`` the training vertices (global ids). One parallel pass over the edges per hop
    for eight parts at once (:func:`~twopgraph.locality.kernels.halo_masks`), not a
    single-threaded sparse-times-dense product per hop (README, "papers100M-shaped graphs",
    has the two timed)."""
    n = g.num_nodes
    reached = np.zeros((n, num_parts), dtype=bool)
    is_train = np.zeros(n, dtype=bool)
    is_train[train_idx] = True
    for first, mask in part_masks(lambda p: is_train & (owner == p), num_parts):
        if hops:
            mask = kernels.halo_masks(g.indptr, g.indices, mask, hops)
        for b in range(min(8, num_parts - first)):
            reached[:, first + b] = (mask >> np.uint8(b)) & np.uint8(1)
    return reached
