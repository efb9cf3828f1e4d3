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
from twopgraph.cache.coldset import ColdSet
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

    Eviction: the directory keeps the ``budget`` best keys among the cached rows and a
    batch's wanted misses. For a window policy with a static rank outside its window
    (``cold_rank``, ``reachable`` and ``window``: :class:`~twopgraph.cache.layer.LayerCache`)
    the worst keys are those of the worst-ranked cached rows outside the window; they are
    kept in a :class:`~twopgraph.cache.coldset.ColdSet`, so a batch costs O(its rows + N /
    1024), not O(budget), and gives exactly the same slots (``fast_evict = False``: every
    eviction ranks every cached row, as before). Announcements and the end of a stream
    should go through :meth:`announce` and :meth:`drain` (a policy driven directly is noticed
    and the set rebuilt once).

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
        rank = getattr(policy, "cold_rank", None)
        self._cold = (ColdSet(rank) if self.fast_evict and rank is not None and policy.dynamic
                      and self.budget and hasattr(policy, "window") else None)
        self._seen: tuple[int, int] | None = None  # the window's (announced, consumed) in sync
        self._unreachable = 0  # cached rows the policy can drop (fast path off while > 0)

    #: Evict through the :class:`~twopgraph.cache.coldset.ColdSet` where the policy allows.
    fast_evict = True

    @property
    def num_cached(self) -> int:
        return self.budget - self._num_free

    def cached_rows(self) -> np.ndarray:
        return self.row_of[self.row_of >= 0]

    # -- the window, seen through the directory -----------------------------------------------
    def announce(self, ids: np.ndarray) -> None:
        """``policy.announce(ids)``: cached rows of ``ids`` are inside the window now."""
        sync = self._in_sync()
        self.policy.announce(ids)
        if sync:
            ids = np.asarray(ids, dtype=np.int64)
            self._cold.remove(ids[self.slot_of[ids] >= 0])
            self._seen = self._window_count()

    def drain(self) -> None:
        """``policy.drain()`` (an interrupted stream's announced batches forgotten)."""
        self.policy.drain()
        self._seen = None  # rows left the window: the set is rebuilt when next needed

    def _window_count(self) -> tuple[int, int]:
        w = self.policy.window
        return w.announced, w.consumed

    def _in_sync(self) -> bool:
        return self._cold is not None and self._seen == self._window_count()

    def _cold_mask(self, rows: np.ndarray) -> np.ndarray:
        """Which of ``rows`` are outside the window and may be kept by the policy."""
        from twopgraph.cache.window import NO_USE
        p = self.policy
        return (p.window.next_use[rows] == NO_USE) & p.reachable[rows]

    def _cold_rows(self, rows: np.ndarray) -> np.ndarray:
        return rows[self._cold_mask(rows)]

    def _rebuild_cold(self) -> None:
        cached = self.cached_rows()
        self._cold.clear()
        self._cold.add(self._cold_rows(cached))
        self._unreachable = int(np.count_nonzero(~self.policy.reachable[cached]))
        self._seen = self._window_count()

    def _cached_now(self, rows: np.ndarray, added: bool) -> None:
        """``rows`` were admitted (``added``) or evicted: the set and the count follow."""
        if self._cold is None or not self._in_sync():
            return
        unreachable = int(np.count_nonzero(~self.policy.reachable[rows]))
        if added:
            self._cold.add(self._cold_rows(rows))
            self._unreachable += unreachable
        else:
            self._cold.remove(rows)
            self._unreachable -= unreachable

    # -- the initial fill ------------------------------------------------------------------------
    def fill(self) -> tuple[np.ndarray, np.ndarray]:
        """Load the policy's initial rows; returns ``(rows, slots)`` to copy (once)."""
        if self.filled:
            raise RuntimeError("the cache is already filled")
        self.filled = True
        rows = np.asarray(self.policy.initial_rows(self.budget), dtype=np.int64)[:self.budget]
        if rows.shape[0] and (rows.min() < 0 or rows.max() >= self.num_rows
                              or _has_duplicates(rows, self.num_rows)):
            raise RuntimeError(f"policy {self.policy.name!r} gave invalid initial rows")
        slots = self._take_slots(rows.shape[0])
        self.slot_of[rows] = slots
        self.row_of[slots] = rows
        self.counters.fill_rows += int(rows.shape[0])
        self._seen = None  # the set is built when first needed
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
        sync = self._in_sync()
        self.policy.consume(ids)
        if sync:  # the batch's cached rows without a later use left the window
            self._seen = self._window_count()
            self._cold.add(self._cold_rows(ids[s >= 0]))
        if self.policy.dynamic and self.budget and plan.miss_rows.shape[0]:
            plan.admit_src, plan.admit_slot = self._update(plan.miss_rows)
        return plan

    def _update(self, miss_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        policy = self.policy
        km = policy.keys(miss_rows)
        want = np.flatnonzero(km < DROP_KEY)
        fast = self._evict_fast(miss_rows, want) if want.shape[0] > self._num_free else None
        if fast is not None:
            evict_slots, evict_rows, want = fast
            self._release(evict_slots, evict_rows)
            self._cached_now(evict_rows, added=False)
        elif want.shape[0] > self._num_free:
            self._seen = None  # ranked every cached row: the set is rebuilt when next needed
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
        self._cached_now(rows, added=True)
        return want.astype(np.int64, copy=False), slots

    def _evict_fast(self, miss_rows: np.ndarray, want: np.ndarray):
        """The eviction of :meth:`_update` without ranking every cached row:
        ``(slots, rows, want)`` -- the cached rows to evict (slots ascending, as the full
        ranking releases them) and the wanted misses admitted -- or None where the full
        ranking is needed (no rank outside the window, cached rows the policy may drop, or
        fewer rows outside the window than must go)."""
        if self._cold is None:
            return None
        if not self._in_sync():
            self._rebuild_cold()  # O(budget), once after a fill, a drain or a full ranking
        if self._unreachable:
            return None
        must = self.num_cached + want.shape[0] - self.budget  # rows to drop (> 0)
        wanted = miss_rows[want]
        cold_wanted = np.flatnonzero(self._cold_mask(wanted))
        if self._cold.size + cold_wanted.shape[0] < must:
            return None
        cand = self._cold.worst(must)
        pool = np.concatenate([cand, wanted[cold_wanted]])
        rank = self.policy.cold_rank[pool]
        drop = np.zeros(pool.shape[0], dtype=bool)
        drop[np.argpartition(-rank, must - 1)[:must]] = True  # ranks are unique
        evict_rows = cand[drop[:cand.shape[0]]]
        keep = np.ones(want.shape[0], dtype=bool)
        keep[cold_wanted[drop[cand.shape[0]:]]] = False  # bypassed: never admitted
        evict_slots = self.slot_of[evict_rows]
        order = np.argsort(evict_slots, kind="stable")
        return evict_slots[order], evict_rows[order], want[keep]

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


def _has_duplicates(rows: np.ndarray, num_rows: int) -> bool:
    """Whether ``rows`` (ids in ``[0, num_rows)``) repeat one: O(N), no sort."""
    seen = np.zeros(num_rows, dtype=bool)
    seen[rows] = True
    return int(np.count_nonzero(seen)) != rows.shape[0]


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
    for ids in announced(batches, policy.lookahead, directory.announce):
        directory.plan(ids)
    return directory.counters - before
