"""One memory budget for a training run, split by one rule, watched while the run goes.

The kernel kills a process at its cgroup's limit without a word (SLURM ``--mem``, Kubernetes
limits, a capped workstation). :class:`MemoryGovernor` reads the limit once -- the memory
cgroup of this process, v1 (``memory.limit_in_bytes``) or v2 (``memory.max``), else the
host's ``MemTotal`` (:func:`read_memory_limit`) -- and owns the run's memory decisions that
grow with the batch:

1. **the training step** (must fit): the gathered input features and the activations of one
   batch, estimated from sampled batches of the run itself (:func:`step_estimate`);
2. **the page cache of the store** (memory-mapped features and CSR: reclaimable, but a run
   whose hot pages are evicted reads them from disk batch after batch): up to
   :data:`PAGE_CACHE_SHARE` of what is left, at most the store's bytes;
3. **the prefetch queue**: batches gathered ahead (``--prefetch``), one batch's bytes each,
   as many as fit in what is left, at most the requested depth;
4. **the epoch heap** (:class:`~twopgraph.runtime.heap.BatchHeap`): freed blocks kept for the
   next batch, at most its default ``keep``, what is left after the queue.

The budget is the memory the process can still fill when training starts
(:func:`~twopgraph.runtime.memory.fillable_host_bytes`: the limit less what the cgroup holds,
page cache counted as reclaimable) less a reserve kept out of every such reading from the
run's start on (:meth:`MemoryGovernor.for_run`): the library pages the process has resident
when it starts (torch's and numba's code: evicted, they are read back on every call) and a
safety margin (:data:`SAFETY_SHARE` of the limit, at least :data:`SAFETY_MIN`); shared by the
ranks of one machine (``LOCAL_WORLD_SIZE``). Where the
step alone does not fit, :meth:`MemoryGovernor.plan` raises
:class:`~twopgraph.errors.MemoryBudgetError`
(one line with the estimate and the flags that shrink it; CLI exit 2) before the first batch --
never an OOM-kill that could be foreseen. The plan is logged once (``memory: limit 1.5 GiB
(cgroup v1), budget ...``) and recorded in ``metrics.json`` (``memory``).

During the epochs :meth:`MemoryGovernor.watch` (once per batch, at most every
:data:`WATCH_SECONDS`) reads the headroom; below the low-water mark (one batch's bytes plus the
safety margin) it degrades one step at a time, each logged once: the heap's kept blocks are
returned to the system (``keep`` 0), then the prefetch queue shortens by one batch (down to 0:
sampling inline). Exact evaluation sizes its passes from the memory free when it starts
(:mod:`twopgraph.inference.passes`), after the epoch's heap is trimmed.

Not governed here: the feature store's dtype (``--store-dtype auto`` chooses float16 where
float32 would take more than half the fillable memory, :mod:`twopgraph.datasets.dtype`), CSR
construction during ingestion (its own scatter budget, :mod:`twopgraph.graph.csrbuild`), and
device (GPU) memory.

Example::

    >>> gov = MemoryGovernor(MemoryLimit(2 << 30, "cgroup v1"), fillable=lambda: 1 << 30)
    >>> plan = gov.plan(StepEstimate(step_bytes=200 << 20, batch_bytes=50 << 20),
    ...                 prefetch=2, heap_keep=256 << 20, mapped_bytes=0)
    >>> plan.prefetch, plan.heap_keep_bytes > 0
    (2, True)
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

from twopgraph.errors import MemoryBudgetError
from twopgraph.runtime.memory import (
    file_resident_bytes,
    fillable_host_bytes,
    meminfo_bytes,
    memory_cgroups,
    reserve_host_bytes,
)

log = logging.getLogger("twopgraph")

#: Safety margin kept free under the limit: this share of it, at least :data:`SAFETY_MIN`
#: bytes (the interpreter's own growth, torch's allocator, the kernel's accounting lag).
SAFETY_SHARE = 0.06
SAFETY_MIN = 48 << 20
#: Share of the budget left after the step that the store's page cache may keep.
PAGE_CACHE_SHARE = 0.5
#: :meth:`MemoryGovernor.watch` reads the headroom at most this often, seconds.
WATCH_SECONDS = 0.05
#: Bytes per float32 value.
F32 = 4
#: Float32 values per input row and feature that a training step keeps alive: the gathered
#: rows and the dropout's output (its mask and the first layer's operands are charged to the
#: layer). With :data:`LAYER_COPIES` the estimate was set against the peak anonymous memory of
#: six steps (``RssAnon`` sampled every 2 ms, prefetch 0, no kept heap) on synthetic-small
#: (SAGE: 327 MiB estimated, 281-294 MiB measured) and then checked on a 2M-vertex
#: papers-shaped graph it was not set on (867 MiB estimated, 806-818 MiB measured); GAT on
#: synthetic-small: 3.7 GiB estimated, 2.3 GiB measured.
INPUT_COPIES = 2
#: Float32 values per output row and width of a layer that a step keeps: the layer's output,
#: its pre-activation, the dropout and their gradients.
LAYER_COPIES = 5
#: Random-stream keys of the batches :func:`measure_step` samples (from this key up; an
#: epoch's batches use keys below it).
PROBE_KEY = 1 << 40
#: Bytes per sampled edge of a batch's blocks (int64 index, its position, a weight).
EDGE_BYTES = 24


def _gib(n: float | None) -> str:
    if n is None:
        return "unknown"
    return f"{n / 2**30:.2f} GiB" if n >= 1 << 30 else f"{n / 2**20:.0f} MiB"


@dataclass(frozen=True)
class MemoryLimit:
    """The memory limit of this process: ``bytes`` (None where none can be read) and where
    it comes from (``source``: ``"cgroup v1"``, ``"cgroup v2"`` or ``"host"``)."""

    bytes: int | None
    source: str


def read_memory_limit(proc: str = "/proc", cgroup: str = "/sys/fs/cgroup") -> MemoryLimit:
    """The tightest of this process's memory cgroup limit (v1 ``memory.limit_in_bytes``, v2
    ``memory.max``; "max" or v1's ~2**63 mean none) and the host's ``MemTotal``."""
    total = meminfo_bytes("MemTotal", proc)
    best = MemoryLimit(total, "host")
    for d, version in memory_cgroups(proc, cgroup):
        file = d / ("memory.limit_in_bytes" if version == "v1" else "memory.max")
        source = f"cgroup {version}"
        try:
            text = file.read_text().strip()
            if text == "max":
                continue
            value = int(text)
        except (OSError, ValueError):
            continue
        if value < 1 << 60 and (best.bytes is None or value < best.bytes):
            best = MemoryLimit(value, source)
    return best


@dataclass(frozen=True)
class StepEstimate:
    """Host bytes of one training step (``step_bytes``: one batch's gathered inputs and the
    activations autograd keeps) and of one batch waiting in the prefetch queue
    (``batch_bytes``: its gathered inputs and blocks); ``input_rows``: mean input vertices
    of the batches measured."""

    step_bytes: int
    batch_bytes: int
    input_rows: int = 0


def step_estimate(layer_rows: list[list[int]], edges: list[int], num_features: int,
                  widths: list[int], feature_bytes: int = F32) -> StepEstimate:
    """:class:`StepEstimate` from sampled batches: ``layer_rows[b]`` the row counts of batch
    ``b`` from the input side (input rows, then each layer's dst rows), ``edges[b]`` its
    sampled edges, ``widths`` each layer's output width (float32 values per row),
    ``num_features`` the input width and ``feature_bytes`` what a gathered value takes
    (4: the model computes in float32). The largest batch measured counts."""
    step = batch = rows_in = 0
    for rows, e in zip(layer_rows, edges):
        n_in = rows[0]
        gathered = n_in * num_features * feature_bytes
        acts = 0
        width_in = num_features
        for n_dst, w in zip(rows[1:], widths):
            acts += F32 * n_dst * (LAYER_COPIES * w + 2 * width_in)
            width_in = w
        blocks = EDGE_BYTES * e + 8 * sum(rows)
        step = max(step, INPUT_COPIES * n_in * num_features * F32 + acts + blocks)
        batch = max(batch, gathered + blocks)
        rows_in = max(rows_in, n_in)
    return StepEstimate(int(step), int(batch), int(rows_in))


def measure_step(sampler, train_idx: np.ndarray, batch_size: int, num_features: int,
                 widths: list[int], batches: int = 2, seed: int = 0) -> StepEstimate:
    """Sample ``batches`` batches of ``batch_size`` random training vertices with ``sampler``
    (a :class:`~twopgraph.core.protocols.Sampler`) and estimate a step from them
    (:func:`step_estimate`). Costs a few samplings (ms to a second on large graphs)."""
    rng = np.random.default_rng(seed)
    rows, edges = [], []
    ids = np.asarray(train_idx)
    for b in range(max(1, batches)):
        pick = rng.choice(ids.shape[0], size=min(batch_size, ids.shape[0]), replace=False)
        mb = sampler.sample(np.sort(ids[pick]).astype(np.int64), key=PROBE_KEY + b)
        rows.append([int(mb.input_nodes.shape[0])] + [int(b.num_dst) for b in mb.blocks])
        edges.append(sum(int(b.num_edges) for b in mb.blocks))
    return step_estimate(rows, edges, num_features, widths)


@dataclass
class MemoryPlan:
    """How the budget was split (bytes; see the module doc). ``prefetch`` and
    ``heap_keep_bytes`` are what the run uses; ``requested_*`` what it asked for."""

    limit_bytes: int | None
    source: str
    budget_bytes: int | None
    step_bytes: int
    batch_bytes: int
    page_cache_bytes: int
    prefetch: int
    requested_prefetch: int
    heap_keep_bytes: int
    requested_heap_keep_bytes: int
    ranks: int = 1
    #: bytes left out of the budget: library pages, safety margin (MemoryGovernor.for_run)
    reserve_bytes: int = 0
    degraded: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        """The ``memory`` record of ``metrics.json``."""
        return asdict(self)


class MemoryGovernor:
    """See the module doc. ``limit`` (default: :func:`read_memory_limit`) and ``fillable``
    (a function returning the bytes the process can still fill, default
    :func:`~twopgraph.runtime.memory.fillable_host_bytes`) are read at :meth:`plan` and by
    :meth:`watch`; ``ranks`` processes of one machine share the budget (default
    ``LOCAL_WORLD_SIZE``)."""

    def __init__(self, limit: MemoryLimit | None = None, *,
                 fillable: Callable[[], int | None] = fillable_host_bytes,
                 ranks: int | None = None) -> None:
        self.limit = read_memory_limit() if limit is None else limit
        self.fillable = fillable
        if ranks is None:
            try:
                ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
            except ValueError:
                ranks = 1
        self.ranks = ranks
        #: bytes kept out of the fillable memory's readings (:meth:`for_run`)
        self.reserve_bytes = 0
        self.memory_plan: MemoryPlan | None = None
        self._steps: list[tuple[str, Callable[[], bool]]] = []
        self._done: set[str] = set()
        self._last = 0.0

    @property
    def safety_bytes(self) -> int:
        """The margin kept free under the limit (see :data:`SAFETY_SHARE`)."""
        lim = self.limit.bytes or 0
        return max(SAFETY_MIN, int(SAFETY_SHARE * lim))

    @classmethod
    def for_run(cls, ranks: int | None = None) -> "MemoryGovernor":
        """The governor of a run, made when it starts (before its data is loaded): the
        process's resident library pages now (``RssFile``: torch's and numba's code, which
        must stay resident; as much for each rank of the machine) and the safety margin are
        kept out of every later reading of the fillable memory
        (:func:`~twopgraph.runtime.memory.reserve_host_bytes`), so the training step, the
        evaluation passes and the caches are all sized from what is left."""
        gov = cls(ranks=ranks)
        libs = file_resident_bytes() or 0
        gov.reserve_bytes = gov.ranks * libs + gov.safety_bytes  # the margin once a machine
        reserve_host_bytes(gov.reserve_bytes)
        return gov

    def plan(self, est: StepEstimate, *, prefetch: int, heap_keep: int,
             mapped_bytes: int = 0, fix: str = "") -> MemoryPlan:
        """Split the budget (module doc) for steps of ``est``, at most ``prefetch`` batches
        ahead and ``heap_keep`` kept bytes; ``mapped_bytes``: the memory-mapped store's size.
        Raises :class:`~twopgraph.errors.MemoryBudgetError` when the step does not fit;
        ``fix`` names the flags that would shrink it. Logs the plan once."""
        avail = self.fillable()
        if avail is None:  # not Linux: nothing to plan with
            p = MemoryPlan(self.limit.bytes, self.limit.source, None, est.step_bytes,
                           est.batch_bytes, 0, prefetch, prefetch, heap_keep, heap_keep,
                           self.ranks)
            self.memory_plan = p
            return p
        budget = max(0, avail) // self.ranks
        if est.step_bytes > budget:
            where = (f"under the limit of {_gib(self.limit.bytes)} ({self.limit.source})"
                     if self.limit.bytes else "on this host")
            raise MemoryBudgetError(
                f"memory: a training step needs about {_gib(est.step_bytes)} (batches of "
                f"{est.input_rows:,} input vertices) but this process can fill only "
                f"{_gib(budget)} {where}"
                + (f"; {fix}" if fix else "; raise the memory limit"))
        left = budget - est.step_bytes
        cache = min(int(mapped_bytes), int(PAGE_CACHE_SHARE * left))
        left -= cache
        depth = 0
        while depth < prefetch and left >= est.batch_bytes:
            depth += 1
            left -= est.batch_bytes
        keep = max(0, min(int(heap_keep), left))
        p = MemoryPlan(self.limit.bytes, self.limit.source, budget, est.step_bytes,
                       est.batch_bytes, cache, depth, prefetch, keep, int(heap_keep),
                       self.ranks)
        p.reserve_bytes = self.reserve_bytes
        self.memory_plan = p
        shares = "" if self.ranks == 1 else f" (1/{self.ranks} per rank)"
        log.info("memory: limit %s (%s), budget %s%s: step %s, page cache %s, prefetch %d%s "
                 "(%s per batch), heap keep %s%s",
                 _gib(self.limit.bytes), self.limit.source, _gib(budget), shares,
                 _gib(est.step_bytes), _gib(cache), depth,
                 "" if depth == prefetch else f" (asked {prefetch})", _gib(est.batch_bytes),
                 _gib(keep), "" if keep == heap_keep else f" (default {_gib(heap_keep)})")
        return p

    def on_short(self, name: str, action: Callable[[], bool]) -> None:
        """Register a degradation step (in order of use): ``action()`` frees memory and
        returns False when it has nothing left to give."""
        self._steps.append((name, action))

    def clear_steps(self) -> None:
        """Forget the registered steps (an epoch's heap and queue end with it)."""
        self._steps.clear()

    def low_water_bytes(self) -> int:
        """Headroom below which :meth:`watch` degrades: one batch (plus the safety margin
        where the readings do not leave it out already, :meth:`for_run`)."""
        batch = self.memory_plan.batch_bytes if self.memory_plan else 0
        return batch + (self.safety_bytes if self.reserve_bytes == 0 else 0)

    def watch(self, now: float | None = None) -> str | None:
        """Read the headroom (at most every :data:`WATCH_SECONDS`); below
        :meth:`low_water_bytes` take the first step that still frees something. Returns the
        step taken (logged once per kind), or None."""
        now = time.monotonic() if now is None else now
        if now - self._last < WATCH_SECONDS or not self._steps:
            return None
        self._last = now
        avail = self.fillable()
        if avail is None or avail // self.ranks >= self.low_water_bytes():
            return None
        for name, action in self._steps:
            if action():
                if name not in self._done:
                    self._done.add(name)
                    if self.memory_plan is not None:
                        self.memory_plan.degraded.append(name)
                    log.warning("memory: headroom %s below %s: %s", _gib(avail),
                                _gib(self.low_water_bytes()), name)
                return name
        return None

    def record(self) -> dict | None:
        """The ``memory`` record of ``metrics.json`` (None before :meth:`plan`)."""
        return None if self.memory_plan is None else self.memory_plan.as_dict()
