"""What every cache policy is: the :class:`PolicyContext` it is built from and the
:class:`CachePolicy` interface the :class:`~twopgraph.cache.directory.CacheDirectory` drives.

A policy never moves data and never sees the budget being broken: it *ranks* rows. The
directory keeps the ``budget`` best-ranked rows among those it may keep (rows already on the
device and the current batch's misses, which have just been copied), so every row that enters
the buffer was counted in ``h2d_bytes`` (or in ``cache_fill_bytes`` for the initial fill).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from twopgraph.cache.window import NextUseWindow
from twopgraph.graph.data import CSRGraph

# Priority keys: smaller = keep first. DROP_KEY or larger = never keep.
DROP_KEY = np.int64(np.iinfo(np.int64).max)
_USE_CAP = (1 << 31) - 1


def next_use_keys(next_use: np.ndarray, rank: np.ndarray | None) -> np.ndarray:
    """Key ``(next use, static rank)`` packed in one int64: sooner next use first, then the
    better static rank (0 = best, < 2**32). Rows without a known next use sort last."""
    key = np.minimum(next_use, _USE_CAP).astype(np.int64) << np.int64(32)
    if rank is not None:
        key |= rank
    return key


@dataclass
class PolicyContext:
    """What a policy may look at: the graph, the training set and how batches are made.

    ``scheduler`` and ``sampler`` are the real ones of the run (``presample`` samples epochs
    with them, on ``workers`` sampling threads); ``fanouts`` are per GNN layer, input layer
    first.
    """

    graph: CSRGraph
    train_idx: np.ndarray
    fanouts: list[int]
    batch_size: int
    scheduler: Any = None
    sampler: Any = None
    seed: int = 0
    workers: int = 1
    extra: dict = field(default_factory=dict)

    @property
    def num_rows(self) -> int:
        return self.graph.num_nodes


class CachePolicy:
    """Base class: a static policy that caches nothing.

    Subclasses set ``name`` and override what they need:

    - :meth:`initial_rows` -- rows to load before the first batch (best first);
    - ``dynamic = True`` and :meth:`keys` -- re-rank rows after every batch (the directory
      then keeps the best ``budget`` of the cached rows and the batch's misses);
    - ``lookahead`` -- how many batches the loader announces ahead through :meth:`announce`
      (``None`` = the whole stream; only an offline replay can do that);
    - :meth:`info` -- figures to report (e.g. the cost of pre-sampling).
    """

    name = "base"
    caches = True
    dynamic = False
    lookahead: int | None = 0

    def initial_rows(self, budget: int) -> np.ndarray:
        return np.empty(0, dtype=np.int64)

    def announce(self, ids: np.ndarray) -> None:
        """A batch sampled ahead (stream order)."""

    def consume(self, ids: np.ndarray) -> None:
        """The oldest announced batch (rows ``ids``) is being gathered now."""

    def drain(self) -> None:
        """Forget announced batches that will never be consumed (an interrupted stream)."""

    def keys(self, rows: np.ndarray) -> np.ndarray:
        """Priority key of each row (smaller = keep first; >= ``DROP_KEY`` = never keep)."""
        return np.full(rows.shape[0], DROP_KEY, dtype=np.int64)

    def info(self) -> dict:
        return {}

    def fresh(self) -> "CachePolicy":
        """A copy with fresh per-stream state (built parts such as ranks are shared)."""
        return copy.copy(self)


class WindowPolicy(CachePolicy):
    """A policy that knows, for every row, the batch of its next use among the batches
    announced and not yet consumed (:class:`~twopgraph.cache.window.NextUseWindow`,
    ``self.window``); :meth:`fresh` gives the copy an empty window of its own."""

    dynamic = True

    def __init__(self, num_rows: int) -> None:
        self.window = NextUseWindow(num_rows)

    def announce(self, ids: np.ndarray) -> None:
        self.window.announce(ids)

    def consume(self, ids: np.ndarray) -> None:
        self.window.consume()

    def drain(self) -> None:
        while self.window.pending:
            self.window.consume()

    def fresh(self) -> "WindowPolicy":
        new = copy.copy(self)
        new.window = NextUseWindow(self.window.num_rows)
        return new


def rank_of(order: np.ndarray) -> np.ndarray:
    """Inverse of a best-first ordering: ``rank[order[i]] = i`` (int64)."""
    rank = np.empty(order.shape[0], dtype=np.int64)
    rank[order] = np.arange(order.shape[0], dtype=np.int64)
    return rank


def top_rows(score: np.ndarray, budget: int, tiebreak: np.ndarray | None = None) -> np.ndarray:
    """All row ids ordered best first by ``score`` (descending), ties by ``tiebreak``
    (descending), then by id; truncated to ``budget``."""
    n = score.shape[0]
    keys = [np.arange(n)]
    if tiebreak is not None:
        keys.append(-np.asarray(tiebreak))
    keys.append(-np.asarray(score))
    order = np.lexsort(keys)
    return order[:max(0, min(int(budget), n))].astype(np.int64)
