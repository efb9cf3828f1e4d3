"""The contracts between pipeline stages, in one place, and one registry per pluggable kind.

::

    Scheduler.batches(epoch) ──seeds──▶ Sampler.sample(seeds, key) ──MiniBatch──▶
        FeatureSource.announce(input_nodes)   (lookahead window, if the source wants one)
        FeatureSource.gather(input_nodes)     ──features on the device──▶ model

:class:`~twopgraph.pipeline.loader.Loader` drives these stages; it only relies on what is written
here. Implementations (docs/architecture.md lists them):

- schedulers: ``random`` (:class:`~twopgraph.locality.schedule.RandomScheduler`), ``locality``
  (:class:`~twopgraph.locality.schedule.LocalityScheduler`) -- registry :data:`SCHEDULERS`,
  modules of ``twopgraph/sampler/``;
- samplers: ``neighbor`` (:class:`~twopgraph.sampler.neighbor.NeighborSampler`, numba on the
  host) and ``device`` (:class:`~twopgraph.sampler.device.TorchNeighborSampler`, vectorised
  torch ops on any device, the same batches), ``labor``
  (:class:`~twopgraph.sampler.labor.LaborSampler`, layer-neighbour sampling with
  ``Block.edge_weight``) -- registry :data:`SAMPLERS`, modules of
  ``twopgraph/sampler/``;
- feature sources: :class:`~twopgraph.cache.host.HostFeatures` (a plain host table) and
  :class:`~twopgraph.cache.feature_cache.FeatureCache` (a device buffer driven by a cache
  policy) -- policies in registry :data:`CACHE_POLICIES`, modules of ``twopgraph/cache/``;
- models: a :class:`Conv` per layer (``sage``, ``gcn``, ``gat``), stacked by
  :class:`~twopgraph.models.base.BlockGNN` -- registry :data:`MODELS`, modules of
  ``twopgraph/models/``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Protocol, Sequence, runtime_checkable

import numpy as np

from twopgraph.core.registry import Registry

if TYPE_CHECKING:  # annotations only: the protocols sit below every implementation
    import torch

    from twopgraph.core.metrics import CacheCounters
    from twopgraph.core.minibatch import Block, MiniBatch

SCHEDULERS = Registry("schedule", "twopgraph.locality", "SCHEDULERS")
"""name -> ``factory(train_idx, batch_size, seed=0, **options)`` returning a
:class:`Scheduler`; a factory with ``needs_clusters = True`` also takes ``parts=`` (the METIS
cluster of every vertex), ``labels=`` and ``balance=``."""

SAMPLERS = Registry("sampler", "twopgraph.sampler", "SAMPLERS")
"""name -> ``factory(graph, fanouts, seed=0, degrees=None, **options)`` returning a
:class:`Sampler` (``device``: ``device=`` the torch device it samples on); a factory's
``options`` attribute names the sampling-config fields (``<name>_<keyword>``) passed to it as
keywords (:func:`twopgraph.sampler.sampler_options`)."""

CACHE_POLICIES = Registry("cache policy", "twopgraph.cache", "CACHE_POLICIES")
"""name -> ``factory(ctx: PolicyContext, **options)`` returning a
:class:`~twopgraph.cache.base.CachePolicy`."""

MODELS = Registry("model", "twopgraph.models", "MODELS")
"""name -> the graph convolution class of a GNN layer (the :class:`Conv` contract), one
module of ``twopgraph/models/`` each."""


@runtime_checkable
class Graph(Protocol):
    """What the pipeline reads of a graph: a CSR (the in-neighbours of vertex ``v`` are
    ``indices[indptr[v]:indptr[v + 1]]``). :class:`~twopgraph.graph.data.CSRGraph` is one."""

    #: int64, ``num_nodes + 1`` row offsets
    indptr: np.ndarray
    #: int32 or int64, the neighbour ids, row after row
    indices: np.ndarray

    @property
    def num_nodes(self) -> int:
        """Vertices of the graph."""
        ...


@runtime_checkable
class Scheduler(Protocol):
    """Decides which seeds share a mini-batch and in which order batches come."""

    #: batches per epoch (the same every epoch)
    num_batches: int

    def batches(self, epoch: int) -> Iterator[np.ndarray]:
        """The seed arrays of epoch ``epoch`` (unique global ids, int64), in training order;
        deterministic in (the scheduler's seed, ``epoch``)."""
        ...


@runtime_checkable
class Sampler(Protocol):
    """Expands seeds into one block per GNN layer."""

    graph: Graph
    #: neighbours per GNN layer, input layer first (``-1`` = all)
    fanouts: Sequence[int]

    def sample(self, seeds: "np.ndarray | torch.Tensor", key: int | None = None,
               parallel: bool = True) -> "MiniBatch":
        """The blocks of ``seeds``. ``key`` picks the random stream: the same ``key`` gives
        the same mini-batch; ``None`` draws fresh randomness (a counter that advances with
        every such call). ``parallel=False`` keeps the work on the calling thread (the
        loader's workers each sample whole batches); the result does not depend on it."""
        ...

    def full_block(self, dst_start: int, dst_end: int) -> "Block":
        """Every in-edge of the dst range ``[dst_start, dst_end)`` over *global* src ids
        (exact layer-wise inference)."""
        ...


@runtime_checkable
class FeatureSource(Protocol):
    """Serves the input features of a batch on the device and counts rows and bytes.

    The loader calls :meth:`begin_stream` at the start of every epoch, then, for every batch
    in stream order, :meth:`announce` as soon as it is sampled (``lookahead`` batches before
    it is gathered; a source with ``lookahead == 0`` ignores it) and :meth:`gather` when it is
    trained on. Announcing is part of the contract: a source with a lookahead window may
    refuse a gather that was not announced. A source over a memory-mapped table may also offer
    ``advise(ids) -> (ranges, bytes)``: the loader's sampling workers call it right after a
    batch is sampled so the kernel reads those rows from disk ahead of the gather
    (:mod:`twopgraph.cache.readahead`).
    """

    #: bytes of one stored row (features x element size)
    row_bytes: int
    #: rows held on the device (0 = none)
    budget: int
    #: batches announced ahead of the one gathered (0 = no window)
    lookahead: int
    #: row counts so far (:class:`~twopgraph.core.metrics.CacheCounters`)
    counters: "CacheCounters"

    def begin_stream(self) -> None:
        """A new access stream (epoch) starts; forget batches announced and never gathered."""
        ...

    def announce(self, ids: "np.ndarray | torch.Tensor") -> None:
        """A batch (unique row ids, host int64) was sampled and will be gathered later."""
        ...

    def gather(self, ids: "np.ndarray | torch.Tensor") -> "tuple[torch.Tensor, object | None]":
        """The rows ``ids`` (unique, host int64) on the device as float32, in ``ids`` order,
        and a CUDA event after which they are ready (``None`` when already ready)."""
        ...

    def read(self, ids: "np.ndarray | torch.Tensor") -> "torch.Tensor":
        """Rows ``ids`` (host int64) as float32 on the device, for exact evaluation: not
        counted, the cache's state unchanged (a memory-mapped table is read row by row,
        never copied whole)."""
        ...

    def read_range(self, a: int, b: int) -> "torch.Tensor":
        """Rows ``[a, b)`` as float32 on the device (one contiguous host read); not
        counted."""
        ...


@runtime_checkable
class Conv(Protocol):
    """A graph convolution of :data:`MODELS` (base class: :class:`twopgraph.models.base.Conv`,
    which gives the classmethods their defaults): one GNN layer, ``in_dim`` -> ``out_dim``
    columns, over a :class:`~twopgraph.core.minibatch.Block`.

    Required: the call below and the classmethods ``build(in_dim, out_dim, *, last,
    **options)`` (the layer; ``options``: the model config section's fields named in the
    class attribute ``options``, e.g. ``("heads",)``), ``check_options(hidden, **options)``
    (one-line ConfigError), ``activation_width(out_dim, fanout, *, last, **options)`` and
    ``edge_values(**options)`` (float32 values per input row / per edge a step keeps: the
    default CUDA cache budget's activation reserve). Optional, probed by exact inference
    (docs/architecture.md, "Exact evaluation"): ``project``/``from_projection`` (a layer
    from per-vertex projections), ``aggregate``/``combine`` and ``message``/``edge_weight``
    (a layer streamed over tiles of each dst's edges). A conv without them (GAT: its softmax
    needs all of a dst's edges at once) is run on whole-neighbourhood blocks."""

    in_dim: int
    out_dim: int
    options: tuple

    def __call__(self, block: "Block", h_src: "torch.Tensor",
                 h_dst: "torch.Tensor") -> "torch.Tensor":
        """The layer's output for the block's dst vertices (num_dst x out_dim): ``h_src``
        holds the src rows, ``h_dst`` the dst rows (the first num_dst src rows in training,
        other rows of the same table in exact inference)."""
        ...
