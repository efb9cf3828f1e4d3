"""PyG's neighbour sampling, hop by hop, on twopgraph's kernels.

:class:`EdgeSampler` reproduces what ``torch_geometric.sampler.NeighborSampler`` (pyg-lib's
``neighbor_sample`` with ``csc=True``) returns for a homogeneous graph:

- the nodes: the seeds first, in the order given (duplicates kept), then the nodes each hop
  discovers in order of first appearance among its sampled edges;
- hop ``h`` (``num_neighbors[h]``, hop 0 = the seeds' own neighbours) samples the in-edges of
  the nodes the previous hop discovered (the seeds for hop 0), never again those of older
  nodes; up to ``fanout`` distinct in-edges per node without replacement (all of them for
  ``-1`` or a smaller degree), exactly ``fanout`` with replacement (all for ``-1``);
- the edges in sampling order (by hop, by target in node order), ``row`` = the local id of
  the neighbour (source), ``col`` = the local id of the node that aggregates it (target),
  ``edge`` = the original edge id (column of ``edge_index``);
- ``num_sampled_nodes`` = [seeds, new nodes of hop 1, ...], ``num_sampled_edges`` = [edges of
  hop 1, ...];
- ``subgraph_type="induced"``: the same nodes, and every edge of the graph between them (for
  each node in node order its in-edges whose source was sampled, in ``edge_index`` order);
  no per-hop counts, as PyG's (torch-sparse's) induced sampling gives none;
  ``"bidirectional"`` samples as ``"directional"`` (the loader then applies PyG's own
  ``SamplerOutput.to_bidirectional``).

``method="labor"``: LABOR-0 (layer-neighbour sampling, :mod:`twopgraph.sampler.labor`): in
each hop, every candidate neighbour ``t`` draws one variate ``r_t`` shared by all the hop's
targets, and target ``s`` of in-degree ``d > fanout`` keeps its in-edges from ``t`` when
``r_t <= fanout / d`` (all of them when ``d <= fanout``): ``fanout`` per target *in
expectation*, not at most, but targets that share neighbours keep the same ones, so a batch
holds fewer nodes. Its importance weights are uniform per target (LABOR-0), so PyG's
unweighted aggregations need none. Not with ``replace``.

Which edges are drawn comes from twopgraph's counter-based streams: a draw depends only on
``(seed, key, hop, node)``, never on the thread count (PyG draws from torch's global
generator instead). Sampling without replacement runs
:func:`twopgraph.sampler.kernels.sample_neighbors` (Floyd's algorithm) over the CSC of edge
ids (:class:`~twopgraph.pyg.graph.EdgeCSC`), so it returns edge ids directly; relabelling is
:class:`~twopgraph.sampler.neighbor.RelabelTable`'s (O(batch) memory per thread).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from twopgraph.core.rng import mix_key
from twopgraph.errors import ConfigError
from twopgraph.pyg.graph import EdgeCSC
from twopgraph.sampler import kernels, labor_kernels
from twopgraph.sampler.neighbor import NodeMap, RelabelTable, settled

SUBGRAPH_TYPES = ("directional", "bidirectional", "induced")
METHODS = ("neighbor", "labor")
# key-less calls (``loader(ids)``) draw from a stream of their own
_FRESH = 0x5059474652455348
_REPLACE = 0x5245504C
_LABOR = 0x4C41424F52


def check_num_neighbors(num_neighbors: Sequence[int]) -> list[int]:
    """``num_neighbors`` as a list of ints, each ``>= 0`` or ``-1`` (PyG's rule: ``0`` samples
    no edge in that hop); a ``ConfigError`` (a ``ValueError``) otherwise. A dict (per edge
    type: heterogeneous graphs) is refused."""
    if isinstance(num_neighbors, dict):
        raise ConfigError("num_neighbors per edge type is for heterogeneous graphs, which "
                          "twopgraph.pyg.NeighborLoader does not support; give a list")
    values = getattr(num_neighbors, "values", num_neighbors)  # PyG's NumNeighbors
    try:
        out = [int(v) for v in values]
    except (TypeError, ValueError):
        raise ConfigError(f"num_neighbors must be a list of integers, got {num_neighbors!r}") \
            from None
    if not out or any(v < -1 for v in out):
        raise ConfigError(f"num_neighbors must name at least one hop, each >= 0 or -1 (all "
                          f"neighbours), got {out}")
    return out


@dataclass
class Sampled:
    """One sampled subgraph, as NumPy arrays: ``node`` (global ids, seeds first), ``row`` /
    ``col`` (local ids of source / target of every edge), ``edge`` (edge ids),
    ``num_sampled_nodes`` / ``num_sampled_edges`` (per hop; None for induced subgraphs),
    ``seeds`` = how many of ``node`` are seeds. ``input_nodes`` is ``node`` (what
    :mod:`twopgraph.locality.auto` counts)."""

    node: np.ndarray
    row: np.ndarray
    col: np.ndarray
    edge: np.ndarray
    num_sampled_nodes: list[int] | None
    num_sampled_edges: list[int] | None
    seeds: int
    batch_id: int = -1

    @property
    def input_nodes(self) -> np.ndarray:
        return self.node


class EdgeSampler:
    """PyG-convention neighbour sampling over an :class:`EdgeCSC` (see the module doc).

    ``sample(seeds, key)`` -> :class:`Sampled`; the same ``(seed, key)`` gives the same
    subgraph; ``key=None`` draws fresh randomness. One instance may be used from several
    threads (each has its own relabelling table). ``parallel=False`` keeps the kernels on the
    calling thread (a loader worker that samples whole batches); the result is the same.
    """

    def __init__(self, csc: EdgeCSC, num_neighbors: Sequence[int], replace: bool = False,
                 subgraph_type: str = "directional", seed: int = 0,
                 method: str = "neighbor") -> None:
        self.csc = csc
        if method not in METHODS:
            raise ConfigError(f"sampler must be one of {METHODS}, got {method!r}")
        if method == "labor" and replace:
            raise ConfigError("LABOR samples without replacement: replace=True is refused")
        self.method = method
        # LABOR keys its variates by neighbour: it reads the sources in CSC order (O(E))
        self._sources = csc.src[csc.eid] if method == "labor" else None
        self.num_neighbors = check_num_neighbors(num_neighbors)
        self.replace = bool(replace)
        subgraph_type = getattr(subgraph_type, "value", subgraph_type)  # PyG's SubgraphType
        if subgraph_type not in SUBGRAPH_TYPES:
            raise ConfigError(f"subgraph_type must be one of {SUBGRAPH_TYPES}, got "
                              f"{subgraph_type!r}")
        self.subgraph_type = subgraph_type
        self.seed = int(seed)
        self._tls = threading.local()
        self._fresh = itertools.count()

    @property
    def num_hops(self) -> int:
        return len(self.num_neighbors)

    def _table(self) -> "RelabelTable | NodeMap":
        t = getattr(self._tls, "table", None)
        if t is None:
            t = self._tls.table = RelabelTable()
        return t

    def sample(self, seeds: np.ndarray, key: int | None = None,
               parallel: bool = True) -> Sampled:
        """The subgraph of ``seeds`` (global node ids, a non-empty 1-D integer array;
        duplicates allowed: each copy is a seed of its own, and a neighbour equal to a
        duplicated seed maps to its first copy)."""
        seeds = np.ascontiguousarray(np.asarray(seeds, dtype=np.int64).reshape(-1))
        n = self.csc.num_nodes
        if seeds.shape[0] == 0:
            raise ConfigError("a batch needs at least one seed")
        if seeds.min() < 0 or seeds.max() >= n:
            raise ConfigError(f"seed ids out of range [0, {n})")
        if key is None:
            key = mix_key(_FRESH, next(self._fresh))  # itertools.count: thread-safe
        table = self._table()
        known: list[np.ndarray] = []
        try:
            out = self._expand(seeds, int(key), parallel, table, known)
        except BaseException:
            self._tls.table = None  # a failed batch may leave it dirty: the next gets a new one
            raise
        table.clear(sum(k.shape[0] for k in known), np.concatenate(known))
        self._tls.table = settled(table, n)
        return out

    def _draw(self, hop: int, fanout: int, nodes: np.ndarray, key: int,
              parallel: bool) -> tuple[np.ndarray, np.ndarray]:
        """``(offsets, edge ids)`` of the in-edges sampled for ``nodes`` in hop ``hop``."""
        csc = self.csc
        if self.method == "labor" and fanout >= 0:
            return self._labor(nodes, fanout, mix_key(self.seed, _LABOR, key, hop), parallel)
        if self.replace and fanout >= 0:
            return self._with_replacement(nodes, fanout, mix_key(self.seed, _REPLACE, key, hop))
        sample = kernels.sample_neighbors if parallel else kernels.sample_neighbors_serial
        return sample(csc.indptr, csc.eid, nodes, fanout, np.uint64(mix_key(self.seed, key, hop)))

    def _with_replacement(self, nodes: np.ndarray, fanout: int,
                          key: int) -> tuple[np.ndarray, np.ndarray]:
        """``fanout`` in-edges of every node of positive in-degree, each drawn uniformly and
        independently (PyG's ``replace=True``)."""
        ip = self.csc.indptr
        start = ip[nodes]
        deg = ip[nodes + 1] - start
        has = deg > 0
        offsets = np.zeros(nodes.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.where(has, fanout, 0), out=offsets[1:])
        rng = np.random.default_rng(key)
        pos = start[has][:, None] + rng.integers(0, deg[has][:, None],
                                                 size=(int(has.sum()), fanout))
        return offsets, self.csc.eid[pos.reshape(-1)]

    def _labor(self, nodes: np.ndarray, fanout: int, key: int,
               parallel: bool) -> tuple[np.ndarray, np.ndarray]:
        """LABOR-0's in-edges of ``nodes``: :func:`~twopgraph.sampler.labor_kernels.
        labor_sample` over the CSC of sources keeps them (in CSC order); their edge ids are
        found again among the targets' in-edges (a target keeps every copy of a repeated
        neighbour or none, so the kept entries, in CSC order, are exactly its kept
        neighbours)."""
        csc = self.csc
        ip = csc.indptr
        if fanout == 0:
            return np.zeros(nodes.shape[0] + 1, dtype=np.int64), np.empty(0, dtype=np.int64)
        deg = (ip[nodes + 1] - ip[nodes]).astype(np.float64)
        c = np.where(deg > fanout, fanout / np.maximum(deg, 1.0), np.inf)
        none_f, none_i = np.empty(0, dtype=np.float64), np.empty(0, dtype=np.int64)
        sample = labor_kernels.labor_sample if parallel else labor_kernels.labor_sample_serial
        k = np.uint64(key)
        offsets, nbrs, _ = sample(ip, self._sources, nodes, c, none_f, none_i, none_f, k, k,
                                  1.0, 0.0, False)
        gather = kernels.sample_neighbors if parallel else kernels.sample_neighbors_serial
        every_off, every = gather(ip, csc.eid, nodes, -1, np.uint64(0))
        n = np.int64(csc.num_nodes)
        target = np.arange(nodes.shape[0], dtype=np.int64)
        kept = np.isin(np.repeat(target, np.diff(every_off)) * n + kernels.take(csc.src, every),
                       np.repeat(target, np.diff(offsets)) * n + nbrs)
        return offsets, every[kept]

    def _expand(self, seeds: np.ndarray, key: int, parallel: bool,
                table: "RelabelTable | NodeMap", known: list[np.ndarray]) -> Sampled:
        """The hops of :meth:`sample`; ``known`` collects the distinct nodes the table holds
        (in local-id order), so that the caller can clear it whatever happens."""
        src = self.csc.src
        k = seeds.shape[0]
        local, u, uniq = table.relabel(seeds, 0, 0)
        known.append(uniq[:u])
        first = None  # table id of a distinct seed -> its first position, if duplicates
        if u < k:
            first = np.empty(u, dtype=np.int64)
            first[local[::-1]] = np.arange(k - 1, -1, -1, dtype=np.int64)

        def out_ids(ids: np.ndarray) -> np.ndarray:  # table ids -> output local ids
            if first is None:
                return ids
            return np.where(ids < u, first[np.minimum(ids, u - 1)], ids + (k - u))

        count = u  # ids the table holds
        nodes, rows, cols, edges = [seeds], [], [], []
        sizes, edge_sizes = [k], []
        frontier, begin = seeds, 0  # the nodes to expand and the output id of the first
        for hop, fanout in enumerate(self.num_neighbors):
            if frontier.shape[0] == 0:
                sizes.append(0)
                edge_sizes.append(0)
                continue
            offsets, eids = self._draw(hop, fanout, frontier, key, parallel)
            nbrs = kernels.take(src, eids)
            ids, new_count, fresh = table.relabel(nbrs, count, count)
            new = fresh[:new_count - count]
            known.append(new)
            count = new_count
            rows.append(out_ids(ids))
            cols.append(np.repeat(np.arange(begin, begin + frontier.shape[0], dtype=np.int64),
                                  np.diff(offsets)))
            edges.append(eids.astype(np.int64))
            begin += frontier.shape[0]
            nodes.append(new)
            sizes.append(int(new.shape[0]))
            edge_sizes.append(int(eids.shape[0]))
            frontier = new
        node = np.concatenate(nodes)
        if self.subgraph_type == "induced":
            row, col, edge = self._induced(node, table, count, known, out_ids, parallel)
            return Sampled(node, row, col, edge, None, None, k)
        cat = (lambda parts: np.concatenate(parts) if parts
               else np.empty(0, dtype=np.int64))
        return Sampled(node, cat(rows), cat(cols), cat(edges), sizes, edge_sizes, k)

    def _induced(self, node: np.ndarray, table: "RelabelTable | NodeMap", count: int,
                 known: list[np.ndarray], out_ids: Callable[[np.ndarray], np.ndarray],
                 parallel: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every edge between the sampled nodes: each node's in-edges (in ``edge_index``
        order) whose source the table knows."""
        csc = self.csc
        gather = kernels.sample_neighbors if parallel else kernels.sample_neighbors_serial
        offsets, eids = gather(csc.indptr, csc.eid, node, -1, np.uint64(0))
        ids, new_count, fresh = table.relabel(kernels.take(csc.src, eids), count, count)
        known.append(fresh[:new_count - count])  # outsiders: in the table only to be cleared
        keep = ids < count
        col = np.repeat(np.arange(node.shape[0], dtype=np.int64), np.diff(offsets))
        return out_ids(ids[keep]), col[keep], eids[keep].astype(np.int64)

