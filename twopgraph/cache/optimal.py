"""The offline optimum: Belady's MIN with bypass at batch granularity.

Given a whole access stream (one set of rows per batch) and a buffer of ``budget`` rows: every
batch must find all its rows on the device, a missing row costs one copy, and after each batch
the buffer may keep any ``budget`` of the rows it held or just received. Keeping the rows whose
next use comes soonest (and nothing that is never used again) copies the fewest rows of any
cache of that budget -- the floor every policy is judged against (``vs_optimal``).

Two starts are computed:

- ``start="empty"``: every row it ever holds is copied and counted. This is the floor for
  *all* bytes a policy copies, its initial fill included (``total_vs_optimal``);
- ``start="best"``: a free initial fill of the ``budget`` rows used first (what a policy's
  one-off ``cache_fill_bytes`` can at best buy). This is the floor for ``h2d_bytes`` alone
  (``vs_optimal``, as docs/formats.md defines it: h2d_bytes / the fewest bytes any cache of
  the same budget could have copied).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from twopgraph.cache.base import DROP_KEY, WindowPolicy, next_use_keys
from twopgraph.cache.directory import CacheCounters, CacheDirectory, replay
from twopgraph.cache.window import NO_USE
from twopgraph.errors import ConfigError


class OfflineOptimal(WindowPolicy):
    """Belady's MIN: knows the whole stream (``lookahead = None``); not usable for training."""

    name = "optimal"
    lookahead = None

    def __init__(self, num_rows: int, start: str = "empty") -> None:
        if start not in ("empty", "best"):
            raise ConfigError(f"start must be 'empty' or 'best', got {start!r}")
        self.start = start
        super().__init__(num_rows)

    def initial_rows(self, budget: int) -> np.ndarray:
        if self.start == "empty" or budget <= 0:
            return np.empty(0, dtype=np.int64)
        nu = self.window.next_use
        rows = np.flatnonzero(nu < NO_USE)
        if rows.shape[0] > budget:
            rows = rows[np.argpartition(nu[rows], budget - 1)[:budget]]
        return rows.astype(np.int64)

    def keys(self, rows: np.ndarray) -> np.ndarray:
        nu = self.window.next_use[rows]
        key = next_use_keys(nu, None)
        key[nu == NO_USE] = DROP_KEY
        return key


def belady_min(batches: Sequence[np.ndarray], num_rows: int, budget: int,
               start: str = "empty") -> CacheCounters:
    """Row counts of the offline optimum on ``batches`` (see the module doc).

    Example::

        >>> s = [np.array([0, 1]), np.array([2]), np.array([0]), np.array([1])]
        >>> c = belady_min(s, 3, budget=1)  # keeps 0 (used sooner than 1), bypasses 2
        >>> c.h2d_rows, c.cache_hits
        (4, 1)
    """
    d = CacheDirectory(num_rows, budget, OfflineOptimal(num_rows, start))
    return replay(batches, d)
