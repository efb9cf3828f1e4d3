"""``presample``: GNNLab's PreSC -- a static cache of the rows most often seen as input
vertices in K pre-sampling epochs run with the real sampler and schedule."""

from __future__ import annotations

import time

import numpy as np

from twopgraph.cache.base import CachePolicy, PolicyContext, top_rows
from twopgraph.core.protocols import CACHE_POLICIES, Sampler, Scheduler
from twopgraph.errors import ConfigError
from twopgraph.sampler.stream import sampled_batches

# Pre-sampling epochs use stream keys no training epoch uses (epochs count up from 0).
PRESAMPLE_EPOCH0 = 1 << 20


class PresampleCache(CachePolicy):
    """Fills the budget once with the rows of highest access count (ties: higher degree, id).

    ``counts`` holds how often each row was an input vertex in the pre-sampling epochs;
    ``cost`` the seconds and rows the pre-sampling took (reported by :meth:`info`).
    """

    name = "presample"

    def __init__(self, counts: np.ndarray, degrees: np.ndarray, cost: dict) -> None:
        self.counts = counts
        self.degrees = degrees
        self.cost = cost

    def initial_rows(self, budget: int) -> np.ndarray:
        return top_rows(self.counts, budget, tiebreak=self.degrees)

    def info(self) -> dict:
        return dict(self.cost)


def presample_counts(scheduler: Scheduler, sampler: Sampler, num_rows: int, epochs: int = 1,
                     workers: int = 1) -> tuple[np.ndarray, dict]:
    """Access counts of every row over ``epochs`` sampled epochs (on ``workers`` sampling
    threads), and their cost."""
    t = time.perf_counter()
    counts = np.zeros(num_rows, dtype=np.int64)
    rows = 0
    for k in range(epochs):
        for mb, _ in sampled_batches(scheduler, sampler, PRESAMPLE_EPOCH0 + k, workers):
            ids = mb.input_nodes.numpy()
            counts[ids] += 1
            rows += ids.shape[0]
    return counts, {"presample_epochs": epochs, "presample_s": time.perf_counter() - t,
                    "presample_rows": rows}


@CACHE_POLICIES.register("presample")
def make(ctx: PolicyContext, epochs: int = 1) -> PresampleCache:
    """The rows sampled most often in pre-sampled epochs, fixed for the run (GNNLab)."""
    if not isinstance(epochs, int) or epochs < 1:
        raise ConfigError(f"presample epochs must be a positive integer, got {epochs!r}")
    if ctx.scheduler is None or ctx.sampler is None:
        raise ConfigError("the presample cache policy needs the run's scheduler and sampler")
    counts, cost = presample_counts(ctx.scheduler, ctx.sampler, ctx.num_rows, epochs,
                                   ctx.workers)
    return PresampleCache(counts, ctx.graph.degrees(), cost)
