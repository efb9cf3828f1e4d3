"""The mini-batch pipeline: one :class:`Loader` owns every stage and every thread of it.

::

    Scheduler.batches(epoch)            seeds, in training order
      -> sampling workers               Sampler.sample(seeds, key=mix_key(epoch, b)), whole
                                        batches per worker thread, batches kept in order;
                                        FeatureSource.advise(input_nodes) right after (a
                                        memory-mapped table's rows read ahead by the kernel)
      -> lookahead window               FeatureSource.announce(input_nodes), ``lookahead``
                                        batches ahead of the gather (the ``layer`` cache
                                        learns the rows of upcoming batches before it evicts)
      -> gather                         FeatureSource.gather(input_nodes) + seed labels
      -> device copy (CUDA)             blocks and labels pinned and copied on the loader's
                                        copy stream (``non_blocking``), features on the
                                        source's stream: SALIENT's ``DevicePrefetcher``
      -> prefetch                       the stages above run in one background thread,
                                        ``prefetch`` batches ahead of the consumer
      -> consumer                       the consumer's stream waits for the copies' events
                                        and is recorded on every device tensor of the batch

Device sampling: a sampler with a ``device`` (the ``device`` sampler,
:class:`~twopgraph.sampler.device.TorchNeighborSampler`) builds its blocks where it lives; on
CUDA it samples on a stream of its own, in one worker, and its batches leave the sampling
stage with ``seeds`` and ``input_nodes`` copied to the host (one copy of ``B + n`` int64 per
batch, which also waits for the batch's kernels): the feature source and the labels take
host ids. The alternative -- cache hits and misses computed on the device from device ids --
is left until it can be measured on a GPU; the block tensors stay on the device and are not
copied again.

Threads: ``threads`` (0 = the cores this process may use) is the number of CPU threads the
whole process keeps busy -- see :class:`ThreadPlan`. The loader sets numba's thread count
inside every thread it starts (numba's count is per thread) and checks at start-up that numba
uses a thread-safe threading layer (:func:`twopgraph.runtime.jit.configure_threading`). Sampling is
deterministic per (seed, epoch, batch), so neither the thread count nor the lookahead changes
the batches. Times and row/byte counts of each stage go into :class:`EpochStats`. When the model
computes on the host's cores (no CUDA device), the prefetch thread and the sampling workers run
at the nice value :data:`~twopgraph.runtime.priority.BACKGROUND_NICE`: they give way to the
step's threads and take the moments those leave a core idle (:mod:`twopgraph.runtime.priority`).

CUDA device of the threads: every thread the loader starts (the prefetch thread, the sampling
workers) makes the loader's CUDA device its current device before its first CUDA call
(:func:`~twopgraph.sampler.stream.use_device`), and every ``torch.cuda.stream`` block of the
pipeline runs under a device guard of its stream's device: leaving a stream block restores the
*current* device's stream, and a thread's current device is GPU 0 until it is set, so without
both a rank on GPU k (or ``--device cuda:1``) would create a CUDA context on GPU 0.

Example::

    >>> loader = Loader(scheduler, sampler, HostFeatures(feat), labels)    # doctest: +SKIP
    >>> for mb in loader.epoch(0):                                           # doctest: +SKIP
    ...     loss = F.cross_entropy(model(mb), mb.labels)
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from twopgraph.cache.directory import announced
from twopgraph.core.metrics import transfer_metrics
from twopgraph.core.minibatch import MiniBatch
from twopgraph.core.protocols import FeatureSource, Sampler, Scheduler
from twopgraph.runtime.gputime import gpu_span
from twopgraph.runtime.heap import BatchHeap
from twopgraph.runtime.jit import configure_threading, thread_count
from twopgraph.runtime.priority import background_nice, lower_priority
from twopgraph.sampler.stream import SamplerThreads, sampled_batches, use_device
from twopgraph.store import mapped as livemap


@dataclass
class EpochStats:
    """Per-epoch counters; times in seconds, bytes in bytes, rows in feature rows.

    ``h2d_bytes`` counts every feature byte copied host->device in the epoch (cache refills
    included); the one-off initial fill of the cache is ``cache_fill_bytes``, apart.
    ``activation_reserve_bytes`` is the device memory a default cache budget left to the
    model (:func:`~twopgraph.cache.feature_cache.activation_reserve_bytes`; the loader's
    attribute of that name, set by whoever built the feature source).
    ``sample_s`` sums the sampling time of every batch over the workers (it may exceed the wall
    time, and in training it overlaps the other stages); ``load_s`` is the gathering time.
    ``readahead_ranges`` / ``readahead_bytes``: page ranges of a memory-mapped feature table
    the sampling workers advised the kernel to read ahead, and their bytes (whole pages; the
    source's ``advise``, :class:`~twopgraph.cache.readahead.Readahead`; 0 when the table is
    not a memory map). ``host_cache_hits`` / ``host_cache_lookups``: rows the gathers found in
    the host row cache (:class:`~twopgraph.cache.hostrows.HostRowCache`) and rows they looked
    up there (0 without one). ``sampled_edges``: the edges of every block of every batch
    (all layers; ``sampled_edges_per_batch`` = that / ``num_batches``).
    """

    num_batches: int = 0
    num_seeds: int = 0
    feature_rows: int = 0
    sampled_edges: int = 0
    cache_hits: int = 0
    h2d_bytes: int = 0
    cache_fill_bytes: int = 0
    cache_budget_rows: int = 0
    activation_reserve_bytes: int = 0
    row_bytes: int = 0
    sample_s: float = 0.0
    load_s: float = 0.0
    readahead_ranges: int = 0
    readahead_bytes: int = 0
    host_cache_hits: int = 0
    host_cache_lookups: int = 0

    @property
    def input_nodes_per_batch(self) -> float:
        return self.feature_rows / self.num_batches if self.num_batches else 0.0

    @property
    def sampled_edges_per_batch(self) -> float:
        return self.sampled_edges / self.num_batches if self.num_batches else 0.0

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(transfer_metrics(feature_rows=self.feature_rows, cache_hits=self.cache_hits,
                                  h2d_bytes=self.h2d_bytes, row_bytes=self.row_bytes,
                                  num_batches=self.num_batches))
        return d


@dataclass(frozen=True)
class ThreadPlan:
    """How ``total`` CPU threads are spent: the model computes on ``compute`` torch/numba
    threads in the caller's thread; ``workers`` threads sample whole batches; ``background``
    says whether sampling and gathering run ahead in a prefetch thread at all.

    With one thread nothing runs ahead (overlap cannot help on one core): sampling, gathering
    and computing take turns in the caller's thread, on that one thread. With ``N >= 2`` the
    model computes on all ``N`` threads and ``W = max(1, N // 4)`` sampling workers run ahead
    of it in the background. Sampling is a small share of a step (synthetic-small: ~4% of the
    epoch's thread time), so the process averages about ``N`` busy threads; ``metrics.json``
    reports the measured ``cpu_per_wall`` of every epoch.
    """

    total: int
    compute: int
    workers: int
    background: bool

    @classmethod
    def for_threads(cls, threads: int = 0, prefetch: int = 2) -> ThreadPlan:
        """The plan for ``threads`` (0 = :func:`available_cores`) and ``prefetch`` depth."""
        n = int(threads) or available_cores()
        if n == 1:
            return cls(1, 1, 1, False)
        if prefetch <= 0:  # the stages take turns: each may use every thread
            return cls(n, n, n, False)
        return cls(n, n, max(1, n // 4), True)

    @classmethod
    def for_rank(cls, local_ranks: int, cuda: bool, prefetch: int = 2,
                 cores: int | None = None) -> ThreadPlan:
        """The plan of one of ``local_ranks`` processes that share this machine's ``cores``
        (default :func:`available_cores`): its fair share ``S = max(1, cores // local_ranks)``
        threads, split so that ``compute + workers = S`` and the ranks together keep at most
        ``cores`` threads busy (when ``cores >= local_ranks``; else each rank still gets one).

        - ``S == 1``: one thread does everything in turn (no prefetch thread). On CUDA the
          GPU still overlaps: the step's kernels run while the thread samples the next batch.
        - CPU (``cuda`` False): the model computes on the host, so compute is favoured:
          ``workers = max(1, S // 4)`` sampling threads, ``compute = S - workers``.
        - CUDA: the model computes on the GPU, and the host's threads mostly feed it
          (sampling, gathering), so sampling is favoured: ``compute = max(1, S // 4)`` torch
          threads (host-side ops of the step), ``workers = S - compute``.
        - ``prefetch <= 0``: the stages take turns, each on all ``S`` threads.

        One sampling worker means the prefetch thread samples itself; with several, it
        gathers features while the workers sample.
        """
        n = max(1, int(cores or available_cores()) // max(1, int(local_ranks)))
        if n == 1:
            return cls(1, 1, 1, False)
        if prefetch <= 0:
            return cls(n, n, n, False)
        small = max(1, n // 4)
        if cuda:
            return cls(n, small, n - small, True)
        return cls(n, n - small, small, True)

    @contextlib.contextmanager
    def applied(self) -> Iterator[ThreadPlan]:
        """torch's and (this thread's) numba's thread counts set to ``compute`` inside the
        block, restored after it."""
        before = torch.get_num_threads()
        torch.set_num_threads(self.compute)
        try:
            with thread_count(self.compute):
                yield self
        finally:
            torch.set_num_threads(before)


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class Loader:
    """Mini-batches of every epoch, ready on ``device``: ``for mb in loader.epoch(e)``.

    ``scheduler``, ``sampler`` and ``features`` follow :mod:`twopgraph.core.protocols`;
    ``features=None`` gives batches without features (sampling only). ``labels`` (int64 tensor
    over all vertices, on the host, or None) fills ``mb.labels``. ``prefetch`` batches are
    prepared ahead in a background thread (0 = none); ``threads`` CPU threads in all
    (:meth:`ThreadPlan.for_threads`), or a :class:`ThreadPlan` itself (a sampler with a
    ``device`` samples in one worker). After (or during) an epoch, :attr:`stats` holds its
    :class:`EpochStats`.
    """

    def __init__(self, scheduler: Scheduler, sampler: Sampler,
                 features: FeatureSource | None = None, labels: torch.Tensor | None = None,
                 device: torch.device | str = "cpu", *, prefetch: int = 2,
                 threads: int | ThreadPlan = 0) -> None:
        self.scheduler = scheduler
        self.sampler = sampler
        self.features = features
        self.labels = labels
        # "cuda" names the current device of the thread that reads it: pinned here, in the
        # caller's thread, so the loader's own threads use the same GPU
        self.device = with_index(torch.device(device))
        self.sampler_device = with_index(sampler_device(sampler))
        self.torch_sampler = hasattr(sampler, "device")
        self._depth = int(prefetch)
        #: The sampling workers, kept from epoch to epoch (warm relabelling state and heap).
        self.sampler_threads = SamplerThreads()
        self.use_plan(threads if isinstance(threads, ThreadPlan)
                      else ThreadPlan.for_threads(threads, prefetch))
        #: Set by whoever budgets the run's memory (twopgraph.run.train): it watches the
        #: headroom once per batch and may shorten the queue (:meth:`shrink_prefetch`).
        self.governor = None
        self._queue: queue.Queue | None = None
        self.stats = EpochStats()
        # Set by whoever sized the feature source (pipeline.make_loader): reported per epoch.
        self.activation_reserve_bytes = 0
        #: Set by the training epoch for its duration: the StageTimer (CUDA events) of the
        #: gathers and of device sampling (twopgraph.runtime.gputime); None = not timed.
        self.gpu_timer = None
        self.cuda = self.device.type == "cuda"
        #: the CUDA device every thread of the loader makes current before its first CUDA
        #: call (the loader's, else a CUDA sampler's; None: no CUDA work in them)
        self.thread_device: torch.device | None = (
            self.device if self.cuda else
            self.sampler_device if self.sampler_device.type == "cuda" else None)
        #: the nice value of the prefetch thread and the sampling workers of training epochs
        #: (:func:`~twopgraph.runtime.priority.background_nice`)
        self.background_nice = background_nice(self.device, self.sampler_device)
        self.copy_stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.sample_stream = (torch.cuda.Stream(self.sampler_device)
                              if self.sampler_device.type == "cuda" else None)
        configure_threading()

    def use_plan(self, plan: ThreadPlan) -> None:
        """Spend the threads as ``plan`` says (e.g. a DDP rank's share:
        :meth:`ThreadPlan.for_rank`); before an epoch starts. A sampler with a ``device``
        samples in one worker (its ops use torch's own threads, or the GPU); without a
        background thread nothing is prefetched."""
        if self.torch_sampler:
            plan = replace(plan, workers=1)
        self.plan = plan
        self.prefetch = self._depth if plan.background else 0

    def __len__(self) -> int:
        return self.scheduler.num_batches

    def epoch(self, epoch: int) -> Generator[MiniBatch, None, None]:
        """The batches of epoch ``epoch`` on the device; counts go to a fresh :attr:`stats`.
        Closing the iterator early stops the background threads."""
        stats = self.stats = EpochStats(activation_reserve_bytes=self.activation_reserve_bytes)
        batches = self._sampled(epoch, stats)
        src = self.features
        if src is not None:
            src.begin_stream()  # forget batches an interrupted epoch announced but never used
            it = self._gathered(announced(batches, src.lookahead, lambda mb: src.announce(
                mb.input_nodes)), src, stats)
        else:
            it = ((mb, None) for mb in batches)
        if self.cuda:
            it = self._copied(it)
        for mb, ready in _prefetch(it, self.prefetch, self._live_queue, self.thread_device,
                                   self.background_nice):
            livemap.check()  # a store file truncated or rewritten under the run: one line
            yield self._consumed(mb, ready)

    def _live_queue(self, q: queue.Queue | None) -> None:
        self._queue = q

    def shrink_prefetch(self) -> bool:
        """One batch fewer gathered ahead (memory is short): from the next batch on in the
        running epoch (at least one while it runs), and in the epochs after (down to 0:
        sampling inline). False when there is nothing left to shorten."""
        if self.prefetch <= 0:
            return False
        self.prefetch -= 1
        q = self._queue
        if q is not None:
            with q.mutex:  # Queue.put re-reads maxsize while it waits
                q.maxsize = max(1, self.prefetch)
        return True

    def close(self) -> None:
        """Stop the sampling workers kept between epochs (they also end when the loader is
        collected); a later epoch starts new ones."""
        self.sampler_threads.close()

    def sample_epoch(self, epoch: int = 0) -> EpochStats:
        """Sampling only (no features, no prefetch thread: every thread samples); the figures
        of ``twopgraph bench sampler``."""
        stats = EpochStats()
        # as in a training epoch (twopgraph.pipeline.epoch), batches reuse the pages the last ones
        # freed
        with thread_count(1), BatchHeap() as heap:
            for mb, secs in sampled_batches(self.scheduler, self._sampling(), epoch,
                                            self._all_workers(), self.thread_device,
                                            self.sampler_threads):
                _count_sampled(stats, mb, secs)
                stats.feature_rows += int(mb.input_nodes.shape[0])
                heap.step()
        self.stats = stats
        return stats

    def input_stream(self, epoch: int = 0) -> list[np.ndarray]:
        """The input vertices of every batch of ``epoch`` (the access stream a feature source
        sees), sampled on every thread."""
        with thread_count(1), BatchHeap():
            return [mb.input_nodes.numpy() for mb, _ in
                    sampled_batches(self.scheduler, self._sampling(), epoch,
                                    self._all_workers(), self.thread_device,
                                    self.sampler_threads)]

    def _all_workers(self) -> int:
        """Sampling workers when sampling is all there is: every thread (numba), or one
        (a torch sampler: its ops use torch's threads, or the GPU)."""
        return 1 if self.torch_sampler else self.plan.total

    def _sampling(self):
        """The sampler as the sampling stage calls it: on CUDA, on the loader's sampling
        stream and handing back host ids (:class:`HostIdSampler`)."""
        if self.sample_stream is None:
            return self.sampler
        return HostIdSampler(self.sampler, self.sample_stream, self.gpu_timer)

    # -- stages ------------------------------------------------------------------------------
    def _sampled(self, epoch: int, stats: EpochStats) -> Iterator[MiniBatch]:
        # one worker: sampled in the thread that runs the pipeline (no pool thread)
        sampler, ra = self._sampling(), _readahead(self.features)
        if ra is not None:  # advised by the worker that sampled the batch, before it queues
            sampler = AdvisingSampler(sampler, self.features.advise)
            before = ra.counts()
        for mb, secs in sampled_batches(self.scheduler, sampler, epoch, self.plan.workers,
                                        self.thread_device, self.sampler_threads,
                                        self.background_nice):
            _count_sampled(stats, mb, secs)
            if ra is not None:
                now = ra.counts()
                stats.readahead_ranges = now[0] - before[0]
                stats.readahead_bytes = now[1] - before[1]
            yield _ids_to_host(mb)

    def _gathered(self, batches: Iterator[MiniBatch], src: FeatureSource,
                  stats: EpochStats) -> Iterator[tuple[MiniBatch, object]]:
        stats.row_bytes = src.row_bytes
        stats.cache_budget_rows = src.budget
        rc = getattr(getattr(src, "host", None), "row_cache", None)
        for mb in batches:
            t = time.perf_counter()
            before = src.counters.copy()
            rc_before = None if rc is None else rc.counts()
            with gpu_span(self.gpu_timer, "load", getattr(src, "stream", None)):
                mb.features, ready = src.gather(mb.input_nodes)
            stats.load_s += time.perf_counter() - t
            if rc is not None:
                hits, lookups = rc.counts()
                stats.host_cache_hits += hits - rc_before[0]
                stats.host_cache_lookups += lookups - rc_before[1]
            c = src.counters - before
            stats.feature_rows += c.feature_rows
            stats.cache_hits += c.cache_hits
            stats.h2d_bytes += c.h2d_rows * src.row_bytes
            stats.cache_fill_bytes += c.fill_rows * src.row_bytes
            if self.labels is not None:
                mb.labels = self.labels[mb.seeds]
            yield mb, ready

    def _copied(self, items: Iterator[tuple[MiniBatch, object]]):
        """CUDA, in the prefetch thread: the batch's host tensors (blocks, labels) pinned and
        copied on the loader's copy stream with ``non_blocking=True`` while the features come
        on the source's stream; yields ``(batch on the device, (features event, copy
        event))``. Tensors already on the device (device-sampled blocks) are not copied."""
        for mb, ready in items:
            mb = mb.pin_memory()
            # the guard: leaving the stream block restores this device's stream, not GPU 0's
            with torch.cuda.device(self.device), torch.cuda.stream(self.copy_stream):
                mb = mb.to(self.device, non_blocking=True)
                copied = torch.cuda.Event()
                copied.record(self.copy_stream)
            yield mb, (ready, copied)

    def _consumed(self, mb: MiniBatch, ready) -> MiniBatch:
        """The batch as the consumer (the training step) gets it. CUDA: the consumer's stream
        waits for the copies (events: no host synchronisation) and is recorded on every
        device tensor of the batch, so the caching allocator does not hand their memory to
        the side streams before the step is done with it. CPU: the tensors as they are."""
        if not self.cuda:
            return mb.to(self.device, non_blocking=True)
        stream = torch.cuda.current_stream(self.device)
        for ev in ready if isinstance(ready, tuple) else (ready,):
            if ev is not None:
                stream.wait_event(ev)
        mb.record_stream(stream)
        return mb


def sampler_device(sampler: Sampler) -> torch.device:
    """Where ``sampler`` builds its batches: its ``device`` (the torch samplers), else the
    host (the numba samplers)."""
    dev = getattr(sampler, "device", None)
    return torch.device("cpu") if dev is None else torch.device(dev)


def with_index(device: torch.device) -> torch.device:
    """``device`` with its index: a CUDA device without one (``cuda``) is the calling
    thread's current device, ``cuda:K``; others as they are."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


class HostIdSampler:
    """``sampler`` whose batches come back with host ids (:func:`_ids_to_host`), sampled on
    ``stream`` when one is given (a CUDA side stream of the loader's: the sampling kernels do
    not queue behind the training step's). The id copy synchronises that stream, so every
    tensor of the batch is complete when it leaves; the consumer records its own stream on
    them. Every other attribute (``graph``, ``fanouts``, ``full_block``, ...) is the
    sampler's. What the loader's sampling stage, and the cache policies that pre-sample
    (``presample``), call."""

    def __init__(self, sampler: Sampler, stream: torch.cuda.Stream | None = None,
                 timer: Any = None) -> None:
        self.sampler, self.stream, self.timer = sampler, stream, timer

    def __getattr__(self, name: str) -> Any:
        if name in ("sampler", "stream", "timer"):
            raise AttributeError(name)
        return getattr(self.sampler, name)

    def sample(self, seeds: np.ndarray | torch.Tensor, key: int | None = None,
               parallel: bool = True) -> MiniBatch:
        if self.stream is None:
            return _ids_to_host(self.sampler.sample(seeds, key, parallel))
        # under a guard of the stream's device: leaving the block restores that device's
        # stream (not the current device's, GPU 0 in a thread that never set one)
        with torch.cuda.device(self.stream.device), torch.cuda.stream(self.stream):
            with gpu_span(self.timer, "sample", self.stream):  # device time of the sampling
                mb = self.sampler.sample(seeds, key, parallel)
            return _ids_to_host(mb)


class AdvisingSampler:
    """``sampler`` whose every batch, once sampled, has its input rows handed to ``advise``
    (a feature source's read-ahead: :meth:`~twopgraph.cache.host.HostFeatures.advise`) in
    the sampling worker, before the batch is queued: the kernel reads a memory-mapped
    table's pages while the batches ahead of it train. Ids are made host ids first
    (:func:`_ids_to_host`). Every other attribute is the sampler's."""

    def __init__(self, sampler: Sampler, advise: Callable[[torch.Tensor], object]) -> None:
        self.sampler, self.advise = sampler, advise

    def __getattr__(self, name: str) -> Any:
        if name in ("sampler", "advise"):
            raise AttributeError(name)
        return getattr(self.sampler, name)

    def sample(self, seeds: np.ndarray | torch.Tensor, key: int | None = None,
               parallel: bool = True) -> MiniBatch:
        mb = _ids_to_host(self.sampler.sample(seeds, key, parallel))
        self.advise(mb.input_nodes)
        return mb


def _readahead(features):
    """The active :class:`~twopgraph.cache.readahead.Readahead` of a feature source, or
    None (no source, a source without one, a table that is not a memory map)."""
    ra = getattr(features, "readahead", None)
    return ra if ra is not None and ra.active and hasattr(features, "advise") else None


def _ids_to_host(mb: MiniBatch) -> MiniBatch:
    """``mb`` with ``seeds`` and ``input_nodes`` on the host: one device->host copy of both
    (``B + n`` int64) when a device sampler made them; host ids are left as they are."""
    if mb.input_nodes.device.type == "cpu" and mb.seeds.device.type == "cpu":
        return mb
    b = int(mb.seeds.shape[0])
    ids = torch.cat([mb.seeds.to(mb.input_nodes.device), mb.input_nodes]).cpu()
    mb.seeds, mb.input_nodes = ids[:b], ids[b:]
    return mb


def _count_sampled(stats: EpochStats, mb: MiniBatch, secs: float) -> None:
    stats.sample_s += secs
    stats.num_batches += 1
    stats.num_seeds += mb.num_seeds
    stats.sampled_edges += sum(b.num_edges for b in mb.blocks)


_DONE = object()


def _prefetch(it: Iterator, depth: int,
              live: Callable[[queue.Queue | None], None] | None = None,
              device: torch.device | None = None, nice: int = 0) -> Iterator:
    """Run ``it`` in a background thread (numba: one thread there), ``depth`` items ahead;
    ``depth`` 0 runs it inline. Exceptions are re-raised in the consumer; closing the consumer
    stops the producer. ``live`` is handed the queue while it runs (its ``maxsize`` may be
    lowered then) and None after. A CUDA ``device`` is made the background thread's current
    device before ``it`` runs there (:func:`~twopgraph.sampler.stream.use_device`); inline,
    each step of ``it`` runs under a device guard of it instead (the caller's thread keeps
    its own current device between the items). The background thread takes the nice value
    ``nice`` (:func:`~twopgraph.runtime.priority.lower_priority`; 0: unchanged)."""
    if depth <= 0:
        if device is None or device.type != "cuda":
            yield from it
            return
        it = iter(it)
        try:
            while True:
                with torch.cuda.device(device):
                    item = next(it, _DONE)
                if item is _DONE:
                    return
                yield item
        finally:  # closing the consumer stops the stages (their threads), as yield from does
            close = getattr(it, "close", None)
            if close is not None:
                with torch.cuda.device(device):
                    close()
    q: queue.Queue = queue.Queue(maxsize=depth)
    if live is not None:
        live(q)
    stop = threading.Event()

    def produce():
        try:
            use_device(device)  # before the first CUDA call of this thread
            lower_priority(nice)
            with thread_count(1):
                for item in it:
                    while not stop.is_set():
                        try:
                            q.put(item, timeout=0.1)
                            break
                        except queue.Full:
                            continue
                    if stop.is_set():
                        return
            q.put(_DONE)
        except BaseException as e:  # handed to the consumer, who re-raises it
            q.put(e)

    th = threading.Thread(target=produce, name="twopgraph-prefetch", daemon=True)
    th.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        if live is not None:
            live(None)
        while th.is_alive():
            try:
                q.get_nowait()
            except queue.Empty:
                th.join(timeout=0.05)


def as_long_tensor(a: npt.ArrayLike) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))
