"""An epoch of mini-batches: the scheduler's seeds expanded by a sampler, in schedule order,
on ``workers`` threads that each sample whole batches.

Batch ``b`` of epoch ``e`` is sampled with key ``mix_key(e, b)`` (a
:class:`~twopgraph.core.rng.BatchKey`, which also carries ``e`` and ``b``), so the batches are the
same whatever the number of workers and whether a batch is sampled early (lookahead) or late.
Relabelling a batch is inherently serial, so sampling whole batches on several threads (serial,
GIL-free kernels) is what scales sampling with threads.

CUDA: every thread started here makes the sampler's CUDA device its current device before its
first CUDA call (:func:`use_device`); a fresh thread's current device is GPU 0, and leaving a
``torch.cuda.stream(...)`` block there would restore a GPU 0 stream, creating a context on
GPU 0 for a process (a DDP rank, ``--device cuda:1``) that works on another GPU.
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Iterator

import torch

from twopgraph.core.minibatch import MiniBatch
from twopgraph.core.protocols import Sampler, Scheduler
from twopgraph.core.rng import batch_key
from twopgraph.runtime.priority import lower_priority


class SamplerThreads:
    """Sampling worker threads kept from one epoch to the next (what a
    :class:`~twopgraph.pipeline.loader.Loader` holds): a thread keeps what its first batches
    built -- the sampler's per-thread relabelling state (grown to the largest batch, or the
    N-sized map it settles to) and the pages of its malloc arena -- which fresh threads would
    build again every epoch (measured: the first two batches of a fresh thread take 2-3x a
    warm one's time on a 200,000-vertex graph, a quarter of a 16-batch epoch). One pool per
    ``(workers, device, nice)``; :meth:`close` stops them (idle threads also end when this
    object is collected)."""

    def __init__(self) -> None:
        self._pools: dict[tuple[int, str, int], ThreadPoolExecutor] = {}
        self._lock = threading.Lock()

    def pool(self, workers: int, device: torch.device | str | None,
             nice: int = 0) -> ThreadPoolExecutor:
        """The pool of ``workers`` threads whose current CUDA device is ``device``
        (:func:`use_device`) and whose nice value is at least ``nice``
        (:func:`~twopgraph.runtime.priority.lower_priority`; 0: as the process's), made on
        first use."""
        key = (int(workers), str(device), int(nice))
        with self._lock:
            pool = self._pools.get(key)
            if pool is None:
                pool = self._pools[key] = ThreadPoolExecutor(
                    workers, thread_name_prefix="twopgraph-sampler",
                    initializer=functools.partial(_worker_setup, device, nice))
            return pool

    def close(self) -> None:
        """Stop every pool's threads (after their current batch)."""
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=True)


def sampled_batches(scheduler: Scheduler, sampler: Sampler, epoch: int,
                    workers: int = 1, device: torch.device | str | None = None,
                    threads: SamplerThreads | None = None, nice: int = 0
                    ) -> Iterator[tuple[MiniBatch, float]]:
    """``(batch, seconds spent sampling it)`` for every batch of ``epoch``, in schedule order;
    ``batch.batch_id`` is its position in the epoch.

    ``workers`` <= 1 samples on the calling thread; more sample on that many threads
    (numba's thread count set to 1 inside each: their kernels are serial), ``2 x workers``
    batches in flight, stopped when the iterator is closed: the threads of ``threads``
    (kept for the next epoch), or, without it, threads started here and stopped at the end.
    Each of them makes ``device`` (default: the sampler's ``device``, if it has one) its
    current CUDA device first (:func:`use_device`; nothing for a CPU device), and takes the
    nice value ``nice`` (:func:`~twopgraph.runtime.priority.lower_priority`: workers that
    sample beside a model computing on the same cores give way to it; 0: unchanged).
    """
    jobs = ((b, seeds, batch_key(epoch, b))
            for b, seeds in enumerate(scheduler.batches(epoch)))

    def timed(b, seeds, key):
        t = time.perf_counter()
        mb = sampler.sample(seeds, key, parallel=False)
        mb.batch_id = b
        return mb, time.perf_counter() - t

    if workers <= 1:
        for job in jobs:
            yield timed(*job)
        return
    if device is None:
        device = getattr(sampler, "device", None)
    own = threads is None
    pool = (SamplerThreads() if own else threads).pool(workers, device, nice)
    pending: deque = deque(pool.submit(timed, *job) for job in itertools.islice(jobs, 2 * workers))
    try:
        while pending:
            done = pending.popleft().result()
            job = next(jobs, None)
            if job is not None:
                pending.append(pool.submit(timed, *job))
            yield done
    finally:
        for fut in pending:
            fut.cancel()
        if own:
            pool.shutdown(wait=True)
        else:  # the batches being sampled finish before the caller goes on
            wait(pending)


def use_device(device: torch.device | str | None) -> bool:
    """Make ``device`` the calling thread's current CUDA device (``torch.cuda.set_device``),
    what every thread of the pipeline does before its first CUDA call: a fresh thread's
    current device is GPU 0, and work there (leaving a ``torch.cuda.stream`` block restores
    the current device's stream) would create a CUDA context on GPU 0 (about 0.5 GB) in a
    process that works on another GPU. Nothing for None or a CPU device. Returns whether a
    device was set."""
    if device is None:
        return False
    device = torch.device(device)
    if device.type != "cuda":
        return False
    torch.cuda.set_device(device)
    return True


def _worker_setup(device: torch.device | str | None, nice: int = 0) -> None:
    """A sampling worker thread: its CUDA device (:func:`use_device`), its nice value
    (:func:`~twopgraph.runtime.priority.lower_priority`), then serial numba: worker threads
    run serial kernels; a parallel one (a sampler of a user's) gets one thread instead of
    numba's default of every core (numba's count is per thread)."""
    use_device(device)
    lower_priority(nice)
    import numba
    numba.set_num_threads(1)
