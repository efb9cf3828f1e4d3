"""The mini-batch pipeline as plain generator stages, with a prefetch thread around it.

    schedule -> sample -> lookahead window -> gather features + labels -> (prefetch) -> device

Sampling (numba, GIL released) and gathering (torch index_select, GIL released) of the next
batches run in a background thread while the main thread trains on the current one. The
lookahead stage keeps the cache policy's window of sampled batches (``policy.lookahead``, 0 for
static policies) and announces each batch to the cache as soon as it is sampled, so the
``layer`` policy knows which rows the upcoming batches need before it evicts anything. Sampling
is deterministic per (seed, epoch, batch), so looking ahead never changes the batches. Times
and row/byte counts of each stage are accumulated in :class:`EpochStats` (DESIGN.md metrics).
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Iterator

import numpy as np
import torch

from . import kernels
from .cache import FeatureCache
from .cache.directory import announced
from .sampler.minibatch import MiniBatch


@dataclass
class EpochStats:
    """Per-epoch counters; times in seconds, bytes in bytes, rows in feature rows.

    ``h2d_bytes`` counts every feature byte copied host->device in the epoch (cache refills
    included); the one-off initial fill of the cache is ``cache_fill_bytes``, apart.
    """

    num_batches: int = 0
    num_seeds: int = 0
    feature_rows: int = 0
    cache_hits: int = 0
    h2d_bytes: int = 0
    cache_fill_bytes: int = 0
    cache_budget_rows: int = 0
    row_bytes: int = 0
    sample_s: float = 0.0
    load_s: float = 0.0

    @property
    def input_nodes_per_batch(self) -> float:
        return self.feature_rows / self.num_batches if self.num_batches else 0.0

    @property
    def hit_rate(self) -> float:
        return self.cache_hits / self.feature_rows if self.feature_rows else 0.0

    @property
    def transfer_ratio(self) -> float:
        full = self.feature_rows * self.row_bytes
        return self.h2d_bytes / full if full else 0.0

    def as_dict(self) -> dict:
        d = asdict(self)
        d["input_nodes_per_batch"] = self.input_nodes_per_batch
        d["hit_rate"] = self.hit_rate
        d["transfer_ratio"] = self.transfer_ratio
        return d


def sampled_batches(scheduler, sampler, epoch: int, stats: EpochStats,
                    workers: int | None = None) -> Iterator[MiniBatch]:
    """Stage 1+2: seeds from the scheduler, expanded by the sampler, in schedule order.

    ``workers`` > 1 threads each sample whole batches at once on one core (serial kernels,
    GIL-free), ``2 x workers`` batches in flight; 1 = one batch at a time with the kernels
    parallel over vertices. Default: numba's thread count. The batches are the same either
    way (randomness is counter-based). Per-batch relabelling is inherently serial, so
    batch-parallel sampling is what scales it with threads. ``sample_s`` is the time spent
    sampling, summed over batches (with several workers it may exceed the wall time; in
    training it overlaps the other stages).
    """
    workers = kernels.num_threads() if workers is None else int(workers)
    parallel = workers <= 1  # one batch at a time: the kernels use the threads instead
    jobs = ((b, seeds, kernels.mix_key(epoch, b)) for b, seeds in enumerate(scheduler.batches(epoch)))

    def timed(b, seeds, key):
        t = time.perf_counter()
        mb = sampler.sample(seeds, key, parallel)
        return b, mb, time.perf_counter() - t

    if parallel:
        for job in jobs:
            yield _counted(*timed(*job), stats)
        return
    pool = ThreadPoolExecutor(workers, thread_name_prefix="twopgraph-sampler")
    pending: deque = deque(pool.submit(timed, *job) for job in itertools.islice(jobs, 2 * workers))
    try:
        while pending:
            done = pending.popleft().result()
            job = next(jobs, None)
            if job is not None:
                pending.append(pool.submit(timed, *job))
            yield _counted(*done, stats)
    finally:
        for fut in pending:
            fut.cancel()
        pool.shutdown(wait=True)


def _counted(b: int, mb: MiniBatch, sample_s: float, stats: EpochStats) -> MiniBatch:
    mb.batch_id = b
    stats.sample_s += sample_s
    stats.num_batches += 1
    stats.num_seeds += mb.num_seeds
    return mb


def lookahead(batches: Iterator[MiniBatch], depth: int | None, announce) -> Iterator[MiniBatch]:
    """Stage 2b: keep ``depth`` sampled batches ahead of the one yielded, calling
    ``announce(input_nodes)`` for each batch as soon as it is sampled (stream order)."""
    if depth is None:
        raise ValueError("a policy that needs the whole stream (lookahead None) cannot train")
    return announced(batches, depth, lambda mb: announce(mb.input_nodes))


def with_features(batches: Iterator[MiniBatch], cache: FeatureCache, labels: torch.Tensor | None,
                  stats: EpochStats) -> Iterator[tuple[MiniBatch, object]]:
    """Stage 3: input features through the cache (timed into load_s, counted into the cache
    figures) and seed labels. Yields ``(batch, ready_event)``; the event is ``None`` on CPU."""
    stats.row_bytes = cache.row_bytes
    stats.cache_budget_rows = cache.budget
    for mb in batches:
        t = time.perf_counter()
        before = cache.counters.copy()
        mb.features, ready = cache.gather(mb.input_nodes)
        stats.load_s += time.perf_counter() - t
        c = cache.counters - before
        stats.feature_rows += c.feature_rows
        stats.cache_hits += c.cache_hits
        stats.h2d_bytes += c.h2d_rows * cache.row_bytes
        stats.cache_fill_bytes += c.fill_rows * cache.row_bytes
        if labels is not None:
            mb.labels = labels[mb.seeds]
        yield mb, ready


_DONE = object()


def prefetch(it: Iterator, depth: int = 2) -> Iterator:
    """Run ``it`` in a background thread, ``depth`` items ahead. Exceptions are re-raised in
    the consumer; closing the consumer stops the producer."""
    if depth <= 0:
        yield from it
        return
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce():
        try:
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
        except BaseException as e:  # handed to the consumer
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
        while th.is_alive():
            try:
                q.get_nowait()
            except queue.Empty:
                th.join(timeout=0.05)


def epoch_batches(scheduler, sampler, cache: FeatureCache, labels, epoch: int,
                  stats: EpochStats, device, prefetch_depth: int = 2) -> Iterator[MiniBatch]:
    """The whole pipeline for one epoch; yields mini-batches ready on ``device``.

    ``cache`` is a :class:`~twopgraph.cache.FeatureCache` (policy ``none``: every row copied).
    """
    cache.begin_stream()  # forget batches an interrupted epoch announced but never used
    it = sampled_batches(scheduler, sampler, epoch, stats)
    it = lookahead(it, cache.policy.lookahead, cache.announce)
    it = with_features(it, cache, labels, stats)
    device = torch.device(device)
    for mb, ready in prefetch(it, prefetch_depth):
        if ready is not None:  # features were copied on the cache's stream
            torch.cuda.current_stream(device).wait_event(ready)
        yield mb.to(device, non_blocking=True)


def sample_epoch(scheduler, sampler, epoch: int = 0) -> EpochStats:
    """Sampling only (no features, no model): the figure ``bench sampler`` reports."""
    stats = EpochStats()
    for mb in sampled_batches(scheduler, sampler, epoch, stats):
        stats.feature_rows += int(mb.input_nodes.shape[0])
    return stats


def as_long_tensor(a) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))
