"""An epoch of mini-batches: the scheduler's seeds expanded by a sampler, in schedule order,
on ``workers`` threads that each sample whole batches.

Batch ``b`` of epoch ``e`` is sampled with key ``mix_key(e, b)`` (a
:class:`~twopgraph.core.rng.BatchKey`, which also carries ``e`` and ``b``), so the batches are the
same whatever the number of workers and whether a batch is sampled early (lookahead) or late.
Relabelling a batch is inherently serial, so sampling whole batches on several threads (serial,
GIL-free kernels) is what scales sampling with threads.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

from twopgraph.core.minibatch import MiniBatch
from twopgraph.core.protocols import Sampler, Scheduler
from twopgraph.core.rng import batch_key


def sampled_batches(scheduler: Scheduler, sampler: Sampler, epoch: int,
                    workers: int = 1) -> Iterator[tuple[MiniBatch, float]]:
    """``(batch, seconds spent sampling it)`` for every batch of ``epoch``, in schedule order;
    ``batch.batch_id`` is its position in the epoch.

    ``workers`` <= 1 samples on the calling thread; more start that many threads (numba's
    thread count set to 1 inside each: their kernels are serial), ``2 x workers`` batches in
    flight, stopped when the iterator is closed.
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
    pool = ThreadPoolExecutor(workers, thread_name_prefix="twopgraph-sampler",
                              initializer=_serial_numba)
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


def _serial_numba() -> None:
    """Worker threads run serial kernels; a parallel one (a sampler of a user's) gets one
    thread instead of numba's default of every core (numba's count is per thread)."""
    import numba
    numba.set_num_threads(1)
