"""Schedulers decide which seeds share a mini-batch and in which order batches come.

A scheduler is any object with ``num_batches`` and ``batches(epoch) -> Iterator[np.ndarray]``
(each array: unique global seed ids, int64). Schedulers live in the ``SCHEDULERS`` registry
(name -> factory), so the loader never branches on a policy name.
"""

from __future__ import annotations

from typing import Callable, Iterator, Protocol

import numpy as np

from ..errors import ConfigError


class Scheduler(Protocol):
    num_batches: int

    def batches(self, epoch: int) -> Iterator[np.ndarray]: ...


class RandomScheduler:
    """Uniform shuffle of the training vertices each epoch (what DGL and PyG do).

    The order of epoch ``e`` is a permutation drawn from ``seed + e``; batches hold exactly
    ``batch_size`` seeds except possibly the last (dropped when ``drop_last``).

    Example::

        >>> s = RandomScheduler(np.arange(10), batch_size=4, seed=0)
        >>> [len(b) for b in s.batches(0)]
        [4, 4, 2]
    """

    def __init__(self, train_idx: np.ndarray, batch_size: int, seed: int = 0,
                 drop_last: bool = False):
        if batch_size <= 0:
            raise ConfigError(f"batch size must be positive, got {batch_size}")
        self.train_idx = np.asarray(train_idx, dtype=np.int64)
        if self.train_idx.shape[0] == 0:
            raise ConfigError("no training vertices to schedule")
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.drop_last = drop_last
        n = self.train_idx.shape[0]
        self.num_batches = n // batch_size if drop_last else -(-n // batch_size)
        if self.num_batches == 0:
            raise ConfigError(f"batch size {batch_size} exceeds the {n} training vertices "
                              "and drop_last is set")

    def batches(self, epoch: int) -> Iterator[np.ndarray]:
        order = np.random.default_rng(self.seed + epoch).permutation(self.train_idx)
        for b in range(self.num_batches):
            yield order[b * self.batch_size:(b + 1) * self.batch_size]


SCHEDULERS: dict[str, Callable[..., Scheduler]] = {
    "random": RandomScheduler,
}


def make_scheduler(name: str, train_idx: np.ndarray, batch_size: int, seed: int = 0,
                   **kwargs) -> Scheduler:
    """Build the scheduler registered as ``name``."""
    try:
        factory = SCHEDULERS[name]
    except KeyError:
        raise ConfigError(f"unknown schedule {name!r}; known: {', '.join(SCHEDULERS)}") from None
    return factory(train_idx, batch_size, seed=seed, **kwargs)
