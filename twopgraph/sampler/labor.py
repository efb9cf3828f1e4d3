"""``labor``: layer-neighbour sampling (LABOR; Balin & Catalyurek, NeurIPS 2023).

Each layer of a batch draws one variate ``r_t`` per candidate vertex ``t``, shared by every
dst of the layer, and dst ``s`` keeps its neighbour ``t`` when ``r_t <= c_s pi_t``: dsts with
overlapping neighbourhoods keep the same vertices, so a batch needs fewer input vertices than
uniform neighbour sampling at the same fanouts. ``c_s`` makes ``s`` keep ``min(fanout, d_s)``
neighbours in expectation; ``pi`` is uniform (LABOR-0, ``iterations=0``) or the result of a
few fixed-point rounds (LABOR-*, ``iterations >= 1``) that raise the importance of vertices
many dsts share. Every kept edge carries its inverse inclusion probability, normalised per dst,
in :attr:`~twopgraph.core.minibatch.Block.edge_weight` (SAGE's mean and GCN's normalisation read
it: an estimator of the full-neighbour mean). The kernels are in :mod:`.labor_kernels`
(LABOR-1 from each vertex's smallest dst degree: :mod:`.labor_dense`).

Variates are counter-based (:mod:`twopgraph.core.rng`), keyed by (seed, batch, layer, vertex) --
never by dst: ``layer_dependency`` drops the layer (the same variates in every layer: a vertex
kept in one layer tends to be kept in the others), ``batch_dependency = K`` makes them drift
smoothly over ``K`` consecutive batches (batch ``b`` mixes the variates of batch groups
``b // K`` and ``b // K + 1`` with weight ``(b mod K) / K``; each ``r_t`` stays uniform), so
consecutive batches share input vertices (a feature cache hits more). The batch index is the
one the loader's :class:`~twopgraph.core.rng.BatchKey` carries; a plain int ``key`` is taken as the
index itself, and key-less calls count 0, 1, 2, ...
"""

from __future__ import annotations

import math
import threading
from typing import Sequence

import numpy as np
import torch

from twopgraph.core.minibatch import MiniBatch
from twopgraph.core.names import MAX_LABOR_ITERATIONS
from twopgraph.core.protocols import SAMPLERS
from twopgraph.core.rng import mix_key
from twopgraph.errors import ConfigError
from twopgraph.graph.data import CSRGraph
from twopgraph.sampler import kernels, labor_dense, labor_kernels, labor_pi, labor_variates
from twopgraph.sampler.neighbor import NeighborSampler, NodeMap, RelabelTable, check_seeds, settled

# Stream tags of the variate keys: the loader's (epoch, batch) keys, plain int keys, key-less
# calls (a counter of their own).
_LABOR = 0x4C41424F52
_PLAIN_STREAM = 0x504C41494E
_FRESH_STREAM = 0x4652455348


def _check_options(iterations, layer_dependency, batch_dependency) -> tuple[int, bool, int]:
    """The options as ``(int, bool, int)``; a one-line ConfigError for a bad one."""
    def is_int(v):
        return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
    if not is_int(iterations) or not 0 <= iterations <= MAX_LABOR_ITERATIONS:
        raise ConfigError(f"--labor-iterations must be an integer in [0, "
                          f"{MAX_LABOR_ITERATIONS}] (0 = LABOR-0), got {iterations!r}")
    if not isinstance(layer_dependency, (bool, np.bool_)):
        raise ConfigError(f"--labor-layer-dependency must be true or false, "
                          f"got {layer_dependency!r}")
    if not is_int(batch_dependency) or batch_dependency < 1:
        raise ConfigError(f"--labor-batch-dependency must be a positive integer (1 = "
                          f"independent batches), got {batch_dependency!r}")
    return int(iterations), bool(layer_dependency), int(batch_dependency)


@SAMPLERS.register("labor")
class LaborSampler(NeighborSampler):
    """Layer-neighbour sampling (LABOR-0 / LABOR-*): shared variates, fewer vertices per batch.

    ``sample(seeds, key) -> MiniBatch`` with the blocks of :class:`NeighborSampler` (seeds
    first, dsts the first ``num_dst`` srcs, int64 CSR, full-graph degrees) plus
    ``Block.edge_weight`` (float32, per edge, summing to 1 over each dst's kept edges). A dst
    of degree ``d`` keeps ``min(fanout, d)`` neighbours *in expectation* (not exactly);
    ``fanout = -1`` keeps all. Options (``twopgraph train --labor-...``):

    - ``iterations`` [0]: fixed-point rounds of ``pi`` (0 = LABOR-0, uniform ``pi``; at most
      :data:`~twopgraph.core.names.MAX_LABOR_ITERATIONS`);
    - ``layer_dependency`` [False]: the same variates in every layer;
    - ``batch_dependency`` [1]: variates drift over this many consecutive batches (1 =
      independent batches).

    The result depends only on ``(seed, key, options)``, not on the thread count; one instance
    may be used from several threads. Memory per sampling thread, beyond the neighbour
    sampler's: LABOR-* numbers each layer's candidates in an O(batch) table (~40 bytes per
    candidate); LABOR-1 switches to one integer per vertex (4 N bytes) once that table has
    been as large (:meth:`_dense_scratch`). ``full_block`` (exact inference) is the neighbour
    sampler's: every edge, no weights.

    Example::

        >>> g = CSRGraph.from_edges([0, 0, 0, 1], [1, 2, 3, 2], num_nodes=4)
        >>> mb = LaborSampler(g, [2], seed=0).sample(np.array([0]), key=1)
        >>> b = mb.blocks[0]
        >>> float(b.edge_weight.sum()), b.edge_weight.dtype
        (1.0, torch.float32)
    """

    #: The torch twin that draws the same batches on a GPU (``--sampler-device``).
    device_twin = "labor-device"
    #: What the switch to the twin means, for the log line that says it happened: the twin is
    #: deterministic and equal to this sampler up to float rounding on CUDA
    #: (:mod:`twopgraph.sampler.labor_device`).
    device_twin_note = ("deterministic; on CUDA equal to labor up to float rounding (pairwise "
                        "row sums, the device's log/cos/erfc): a kept edge differs with "
                        "probability ~1e-14")
    #: The sampling-config fields this sampler reads, ``labor_<keyword>`` -> its keyword
    #: (:func:`twopgraph.sampler.sampler_options`).
    options = ("labor_iterations", "labor_layer_dependency", "labor_batch_dependency")

    def __init__(self, graph: CSRGraph, fanouts: Sequence[int], seed: int = 0,
                 degrees: np.ndarray | None = None, iterations: int = 0,
                 layer_dependency: bool = False, batch_dependency: int = 1) -> None:
        super().__init__(graph, fanouts, seed=seed, degrees=degrees)
        self.iterations, self.layer_dependency, self.batch_dependency = _check_options(
            iterations, layer_dependency, batch_dependency)
        self._cand_tls = threading.local()

    def _dense_scratch(self) -> "np.ndarray | None":
        """This thread's vertex-indexed scratch for LABOR-1 (each vertex's smallest dst
        degree in a layer, :func:`~.labor_dense.labor_min_degree`; zero between layers),
        or None while the thread numbers candidates through its table instead. The thread
        switches once its candidate table has been as large (:meth:`_maybe_densify`), so its
        state stays min(4 N bytes (8 N from 2**31 vertices), the table's ~40 bytes per
        candidate) -- never O(N) beyond O(batch), like the batch's own relabelling."""
        return getattr(self._cand_tls, "dense", None)

    def dense_bytes(self) -> int:
        """Bytes of one thread's vertex-indexed LABOR-1 scratch (0 unless
        ``iterations == 1``: LABOR-0 needs no importances, two rounds or more number their
        candidates)."""
        if self.iterations != 1:
            return 0
        return NodeMap.nbytes_for(self.graph.num_nodes)

    def _maybe_densify(self) -> None:
        """Give this thread vertex-indexed scratch once its candidate table has been as large:
        the dense kernels skip the gather of the dsts' rows and the relabelling pass."""
        if getattr(self._cand_tls, "peak", 0) >= self.dense_bytes() > 0:
            n = self.graph.num_nodes
            self._cand_tls.dense = np.zeros(n, dtype=NodeMap.dtype_for(n))
            self._cand_tls.table = None

    def _cand_table(self) -> "RelabelTable | NodeMap":
        """This thread's table numbering a layer's candidates (LABOR-*), apart from the
        batch's own relabelling."""
        t = getattr(self._cand_tls, "table", None)
        if t is None:
            t = self._cand_tls.table = RelabelTable()
        return t

    def sample(self, seeds: np.ndarray | torch.Tensor, key: int | None = None,
               parallel: bool = True) -> MiniBatch:
        """The blocks of ``seeds`` (unique global ids); ``key`` as
        :meth:`NeighborSampler.sample` (the loader's keys also carry the batch index that
        ``batch_dependency`` follows; a plain int is its own index; key-less calls count
        0, 1, 2, ... in a stream of their own)."""
        seeds = check_seeds(seeds, self.graph.num_nodes)
        if key is None:
            stream, index = _FRESH_STREAM, next(self._fresh)  # itertools.count: thread-safe
        else:
            stream, index = self._stream_index(key)
        return self._sample_labor(seeds, stream, int(index), parallel)

    @staticmethod
    def _stream_index(key: int) -> tuple[int, int]:
        """``(stream, batch index)`` of a key: the loader's :class:`~twopgraph.core.rng.BatchKey`
        gives its epoch's stream and its batch; a plain int is its own index."""
        if getattr(key, "batch", None) is not None:
            return mix_key(_LABOR, key.epoch), int(key.batch)
        return _PLAIN_STREAM, int(key)

    def variates(self, vertices: np.ndarray, key: int, hop: int = 0) -> np.ndarray:
        """The variates ``r_t`` (float64 in [0, 1)) of ``vertices`` in hop ``hop`` (0 = the
        seeds' own neighbours) of the batch sampled with ``key``: what every dst of that
        layer compares with ``c_s pi_t``."""
        key0, key1, ca, cb = self.variate_keys(*self._stream_index(key), hop)
        smooth = self.batch_dependency > 1
        return np.array([labor_variates.variate(np.uint64(key0), np.uint64(key1), ca, cb,
                                               smooth, int(t)) for t in np.asarray(vertices)],
                        dtype=np.float64)

    def variate_keys(self, stream: int, index: int, hop: int) -> tuple[int, int, float, float]:
        """``(key0, key1, ca, cb)`` of the variates of hop ``hop`` (0 = the seeds' own
        neighbours) of batch ``index`` in ``stream``: see :mod:`.labor_kernels`;
        ``key1 = key0`` and ``(ca, cb) = (1, 0)`` for independent batches."""
        k = self.batch_dependency
        layer = () if self.layer_dependency else (hop,)
        group, phase = divmod(index, k)
        key0 = mix_key(self.seed, _LABOR, stream, group, *layer)
        if k == 1:
            return key0, key0, 1.0, 0.0
        key1 = mix_key(self.seed, _LABOR, stream, group + 1, *layer)
        angle = 0.5 * math.pi * phase / k
        return key0, key1, math.cos(angle), math.sin(angle)

    def layer_scales(self, nodes: np.ndarray, fanout: int,
                     parallel: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(c, pi, cand)`` of one layer whose dsts are ``nodes``: the per-dst scales, the
        candidates' importances (empty for LABOR-0: all 1) and the candidate of every edge of
        the dsts' concatenated CSR rows (empty for LABOR-0)."""
        c, pi, cand, _ = self._layer(nodes, fanout, parallel, per_candidate=False)
        return c, pi, cand

    def _layer(self, nodes: np.ndarray, fanout: int, parallel: bool, per_candidate: bool):
        """``(c, pi, cand, distinct)`` of one layer: :meth:`layer_scales`' figures plus the
        candidates' global ids (``distinct[x]`` = candidate ``x``). The candidates are
        numbered for LABOR-* and, with ``per_candidate``, for LABOR-0 too (empty when
        neither, or when ``fanout < 0`` keeps every neighbour)."""
        g = self.graph
        none_f, none_i = np.empty(0, dtype=np.float64), np.empty(0, dtype=np.int64)
        solve_pi = self.iterations > 0 and fanout >= 0
        if not solve_pi:
            deg = (g.indptr[nodes + 1] - g.indptr[nodes]).astype(np.float64)
            c = np.full(nodes.shape[0], np.inf) if fanout < 0 else \
                np.where(deg > fanout, fanout / np.maximum(deg, 1.0), np.inf)
            if not per_candidate or fanout < 0:
                return c, none_f, none_i, none_i
        gather = kernels.sample_neighbors if parallel else kernels.sample_neighbors_serial
        _, every = gather(g.indptr, g.indices, nodes, -1, np.uint64(0))
        table = self._cand_table()
        count, distinct = 0, None
        try:
            cand, count, distinct = table.relabel(every, 0, 0)
            if solve_pi:
                solve = labor_pi.labor_pi if parallel else labor_pi.labor_pi_serial
                c, pi = solve(g.indptr, nodes, cand, count, fanout, self.iterations)
            else:
                pi = none_f
        finally:
            table.clear(count, None if distinct is None else distinct[:count])
        tls = self._cand_tls
        tls.peak = max(getattr(tls, "peak", 0), table.nbytes)
        tls.table = settled(table, g.num_nodes)  # as the batch's own table
        return c, pi, cand, distinct[:count]

    def _sample_labor(self, seeds: np.ndarray, stream: int, index: int,
                      parallel: bool) -> MiniBatch:
        g = self.graph
        lk = labor_kernels
        sample = lk.labor_sample if parallel else lk.labor_sample_serial
        variates = (labor_variates.labor_variates if parallel
                    else labor_variates.labor_variates_serial)
        smooth = self.batch_dependency > 1

        dense_ok = self.iterations == 1 and not smooth

        def draw(hop: int, fanout: int, nodes: np.ndarray):
            k0, k1, ca, cb = self.variate_keys(stream, index, hop)
            key0, key1 = np.uint64(k0), np.uint64(k1)
            scratch = self._dense_scratch() if dense_ok and fanout > 0 else None
            if scratch is not None:
                return self._draw_dense(nodes, fanout, scratch, parallel, key0, key1, ca, cb)
            # batch dependency's variates are dear (two normals and an erfc): one per distinct
            # neighbour of the layer instead of one per in-edge (the same values)
            c, pi, cand, distinct = self._layer(nodes, fanout, parallel, per_candidate=smooth)
            if dense_ok:
                self._maybe_densify()
            rv = (variates(key0, key1, ca, cb, smooth, distinct) if smooth and distinct.shape[0]
                  else np.empty(0, dtype=np.float64))
            offsets, nbrs, weights = sample(g.indptr, g.indices, nodes, c, pi, cand, rv,
                                            key0, key1, ca, cb, smooth)
            return offsets, nbrs, weights.astype(np.float32)
        return self._expand(seeds, draw)

    def _draw_dense(self, nodes, fanout, dmin, parallel, key0, key1, ca, cb):
        """One LABOR-1 layer through the vertex-indexed scratch (:func:`~.labor_dense.
        labor_min_degree` then :func:`~.labor_dense.labor_sample_dense` in parallel,
        :func:`~.labor_dense.labor_sample_dense_onepass` on one thread): the same kept edges
        and weights as the numbered path. The scratch is zeroed again afterwards; if anything
        fails in between, the thread drops it (it then numbers candidates again)."""
        g, lk = self.graph, labor_dense
        try:
            if parallel:
                touched = lk.labor_min_degree(g.indptr, g.indices, nodes, dmin)
                offsets, nbrs, weights = lk.labor_sample_dense(
                    g.indptr, g.indices, nodes, fanout, dmin, key0, key1, ca, cb, False)
                dmin[touched] = 0
            else:  # one thread: each row read once (dsts by ascending degree); dmin zeroed
                offsets, nbrs, weights, _ = lk.labor_sample_dense_onepass(
                    g.indptr, g.indices, nodes, fanout, dmin, key0, key1, ca, cb, False)
        except BaseException:
            self._cand_tls.dense = None
            raise
        return offsets, nbrs, weights.astype(np.float32)
