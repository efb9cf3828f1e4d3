"""The cache directory: which row sits in which slot of the device buffer, what a batch hits
and misses, and the exact row counts behind the metrics of docs/formats.md. No data moves
here -- the :class:`~twopgraph.cache.feature_cache.FeatureCache` executes the plans on real
tensors, and the benchmark replays access streams on the directory alone (the counts are the
same).

Accounting (rows; bytes = rows x bytes per row):

- ``feature_rows`` = sum of |batch|; ``cache_hits`` = rows found in the buffer;
- ``h2d_rows`` = rows copied host->device *after* the initial fill: every miss of every batch
  (a missed row is copied once; if the policy keeps it, it goes from that copy into the
  buffer, so a refill is never copied twice and never free);
- ``fill_rows`` = the one-off initial fill.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from twopgraph.cache.base import DROP_KEY, CachePolicy
from twopgraph.core.metrics import CacheCounters
from twopgraph.errors import ConfigError


@dataclass
class GatherPlan:
    """How to assemble one batch's features (positions index the batch's id array).

    ``hit_slot`` are slots as they are *before* this batch's admissions, so the hits must be
    read before ``admit_slot`` is written; ``admit_src`` indexes ``miss_rows``.
    """

    hit_pos: np.ndarray
    hit_slot: np.ndarray
    miss_pos: np.ndarray
    miss_rows: np.ndarray
    admit_src: np.ndarray
    admit_slot: np.ndarray


_EMPTY = np.empty(0, dtype=np.int64)


class CacheDirectory:
    """Slot map of a buffer of ``budget`` rows over a table of ``num_rows`` rows, driven by a
    :class:`~twopgraph.cache.base.CachePolicy`.

    Example::

        >>> from twopgraph.cache.degree import DegreeCache
        >>> d = CacheDirectory(4, 2, DegreeCache(np.array([3, 1, 2, 0])))
        >>> d.fill()[0].tolist()
        [0, 2]
        >>> p = d.plan(np.array([2, 1]))
        >>> p.hit_pos.tolist(), p.miss_rows.tolist(), d.counters.hit_rate
        ([0], [1], 0.5)
    """

    def __init__(self, num_rows: int, budget: int, policy: CachePolicy) -> None:
        if not isinstance(budget, (int, np.integer)) or budget < 0:
            raise ConfigError(f"cache budget must be a row count >= 0, got {budget!r}")
        self.num_rows = int(num_rows)
        self.budget = min(int(budget), self.num_rows) if policy.caches else 0
        self.policy = policy
        self.slot_of = np.full(self.num_rows, -1, dtype=np.int64)
        self.row_of = np.full(self.budget, -1, dtype=np.int64)
        self._free = np.arange(self.budget - 1, -1, -1, dtype=np.int64)  # stack, top at end
        self._num_free = self.budget
        self._mark = np.full(self.num_rows, -1, dtype=np.int64)  # duplicate check scratch
        self.filled = False
        self.counters = CacheCounters()

    @property
    def num_cached(self) -> int:
        return self.budget - self._num_free

    def cached_rows(self) -> np.ndarray:
        return self.row_of[self.row_of >= 0]

    # -- the initial fill ------------------------------------------------------------------------
    def fill(self) -> tuple[np.ndarray, np.ndarray]:
        """Load the policy's initial rows; returns ``(rows, slots)`` to copy (once)."""
        if self.filled:
            raise RuntimeError("the cache is already filled")
        self.filled = True
        rows = np.asarray(self.policy.initial_rows(self.budget), dtype=np.int64)[:self.budget]
        if rows.shape[0] and (rows.min() < 0 or rows.max() >= self.num_rows
                              or np.unique(rows).shape[0] != rows.shape[0]):
            raise RuntimeError(f"policy {self.policy.name!r} gave invalid initial rows")
        slots = self._take_slots(rows.shape[0])
        self.slot_of[rows] = slots
        self.row_of[slots] = rows
        self.counters.fill_rows += int(rows.shape[0])
        return rows, slots

    # -- one batch -------------------------------------------------------------------------------
    def plan(self, ids: np.ndarray) -> GatherPlan:
        """Look up a batch of unique row ids, count it, and let the policy update the buffer."""
        ids = np.asarray(ids)
        if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
            raise ConfigError("ids must be a 1-D integer array of row ids")
        n = ids.shape[0]
        if n and (ids.min() < 0 or ids.max() >= self.num_rows):
            raise ConfigError(f"row ids out of range [0, {self.num_rows})")
        pos = np.arange(n, dtype=np.int64)
        self._mark[ids] = pos
        if n and not np.array_equal(self._mark[ids], pos):
            raise ConfigError("ids must be unique within a batch")
        if not self.filled:
            self.fill()
        s = self.slot_of[ids]
        hit = s >= 0
        hit_pos = np.flatnonzero(hit)
        miss_pos = np.flatnonzero(~hit)
        plan = GatherPlan(hit_pos, s[hit_pos], miss_pos,
                          ids[miss_pos].astype(np.int64, copy=False),
                          _EMPTY, _EMPTY)
        c = self.counters
        c.num_batches += 1
        c.feature_rows += n
        c.cache_hits += int(hit_pos.shape[0])
        c.h2d_rows += int(miss_pos.shape[0])
        self.policy.consume(ids)
        if self.policy.dynamic and self.budget and plan.miss_rows.shape[0]:
            plan.admit_src, plan.admit_slot = self._update(plan.miss_rows)
        return plan

    def _update(self, miss_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        policy = self.policy
        km = policy.keys(miss_rows)
        want = np.flatnonzero(km < DROP_KEY)
        if want.shape[0] > self._num_free:
            cached_slots = np.flatnonzero(self.row_of >= 0)
            cached = self.row_of[cached_slots]
            kc = policy.keys(cached)
            keys = np.concatenate([kc, km])
            keep_n = min(self.budget, int((keys < DROP_KEY).sum()))
            if keep_n < keys.shape[0]:
                sel = np.argpartition(keys, keep_n - 1)[:keep_n] if keep_n else _EMPTY
                kept = np.zeros(keys.shape[0], dtype=bool)
                kept[sel] = True
            else:
                kept = np.ones(keys.shape[0], dtype=bool)
            nc = cached.shape[0]
            evict = ~kept[:nc]
            self._release(cached_slots[evict], cached[evict])
            want = np.flatnonzero(kept[nc:])
        slots = self._take_slots(want.shape[0])
        rows = miss_rows[want]
        self.slot_of[rows] = slots
        self.row_of[slots] = rows
        return want.astype(np.int64, copy=False), slots

    def _take_slots(self, k: int) -> np.ndarray:
        if k > self._num_free:
            raise RuntimeError("cache budget exceeded")  # the directory never lets this happen
        top = self._num_free
        slots = self._free[top - k:top][::-1].copy()
        self._num_free -= k
        return slots

    def _release(self, slots: np.ndarray, rows: np.ndarray) -> None:
        self.slot_of[rows] = -1
        self.row_of[slots] = -1
        k = slots.shape[0]
        self._free[self._num_free:self._num_free + k] = slots
        self._num_free += k


def announced(batches: Iterable, depth: int | None,
              announce: Callable[[Any], object]) -> Iterator:
    """Yield ``batches`` in order, calling ``announce(batch)`` for each as it enters the
    window: ``depth`` batches ahead of the one yielded (``None``: the whole stream first).
    The loader's lookahead stage and the replays of a recorded stream both use it."""
    buf: deque = deque()
    for b in batches:
        announce(b)
        buf.append(b)
        if depth is not None and len(buf) > depth:
            yield buf.popleft()
    while buf:
        yield buf.popleft()


def replay(batches: Sequence[np.ndarray], directory: CacheDirectory) -> CacheCounters:
    """Run an access stream (one array of unique row ids per batch) through ``directory``,
    announcing batches ``policy.lookahead`` ahead as the loader would; returns the counters
    of this stream (fill included in ``fill_rows``)."""
    policy = directory.policy
    before = directory.counters.copy()
    for ids in announced(batches, policy.lookahead, policy.announce):
        directory.plan(ids)
    return directory.counters - before
