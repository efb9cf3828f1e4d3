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
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import torch

from twopgraph.core.minibatch import MiniBatch
from twopgraph.core.protocols import Sampler, Scheduler
from twopgraph.core.rng import batch_key


def sampled_batches(scheduler: Scheduler, sampler: Sampler, epoch: int,
                    workers: int = 1, device: torch.device | str | None = None
                    ) -> Iterator[tuple[MiniBatch, float]]:
    """``(batch, seconds spent sampling it)`` for every batch of ``epoch``, in schedule order;
    ``batch.batch_id`` is its position in the epoch.

    ``workers`` <= 1 samples on the calling thread; more start that many threads (numba's
    thread count set to 1 inside each: their kernels are serial), ``2 x workers`` batches in
    flight, stopped when the iterator is closed. Each of them makes ``device`` (default: the
    sampler's ``device``, if it has one) its current CUDA device first (:func:`use_device`;
    nothing for a CPU device).
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
    pool = ThreadPoolExecutor(workers, thread_name_prefix="twopgraph-sampler",
                              initializer=functools.partial(_worker_setup, device))
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
        pool.shutdown(wait=True)


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


def _worker_setup(device: torch.device | str | None) -> None:
    """A sampling worker thread: its CUDA device (:func:`use_device`), then serial numba:
    worker threads run serial kernels; a parallel one (a sampler of a user's) gets one thread
    instead of numba's default of every core (numba's count is per thread)."""
    use_device(device)
    import numba
    numba.set_num_threads(1)
