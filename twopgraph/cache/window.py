"""Next-use tracking over a window of announced batches (Belady's "when is this row used next").

Batches are announced in stream order as the loader samples them ahead, and consumed in the
same order as they are trained on. At any time ``next_use[r]`` is the stream position of the
next announced batch that needs row ``r``, or :data:`NO_USE` when no announced batch does.
Announce and consume cost O(rows of the batch) (numba kernels in
:mod:`twopgraph.cache.kernels`).

Example::

    >>> w = NextUseWindow(5)
    >>> w.announce(np.array([1, 2])); w.announce(np.array([2, 3]))
    >>> w.next_use[[1, 2, 3, 4]].tolist() == [0, 0, 1, NO_USE]
    True
    >>> _ = w.consume(); w.next_use[[1, 2, 3]].tolist() == [NO_USE, 1, 1]
    True
"""

from __future__ import annotations

from collections import deque

import numpy as np

from twopgraph.cache import kernels

NO_USE = int(kernels.NO_USE)


class NextUseWindow:
    """``next_use`` (int64, one per row) over the batches announced and not yet consumed.

    Positions count batches since construction (they keep growing across epochs).
    """

    def __init__(self, num_rows: int, ring_size: int = 1 << 16) -> None:
        self.num_rows = int(num_rows)
        self.next_use = np.full(self.num_rows, NO_USE, dtype=np.int64)
        self._last_g = np.full(self.num_rows, -1, dtype=np.int64)
        size = 1 << max(4, int(ring_size - 1).bit_length())
        self._link = np.empty(size, dtype=np.int64)
        self._pending: deque[tuple[np.ndarray, int]] = deque()  # (ids, g0) not yet consumed
        self._g_end = 0            # flat index after the last announced occurrence
        self._live_start = 0       # flat index of the oldest unconsumed occurrence
        self.announced = 0         # batches announced so far (= stream position of the next)
        self.consumed = 0          # batches consumed so far

    @property
    def pending(self) -> int:
        """Batches announced and not consumed yet."""
        return self.announced - self.consumed

    def announce(self, ids: np.ndarray) -> None:
        """Append a batch (unique row ids) to the window."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        need = self._g_end + ids.shape[0] - self._live_start
        if need > self._link.shape[0]:
            self._grow(need)
        kernels.window_announce(ids, self._g_end, self.announced, self._live_start,
                                self._last_g, self.next_use, self._link,
                                self._link.shape[0] - 1)
        self._pending.append((ids, self._g_end))
        self._g_end += ids.shape[0]
        self.announced += 1

    def consume(self) -> np.ndarray:
        """The oldest pending batch is used now; returns its ids."""
        if not self._pending:
            raise RuntimeError("consume() without a pending announced batch")
        ids, g0 = self._pending.popleft()
        kernels.window_consume(ids, g0, self.next_use, self._link, self._link.shape[0] - 1)
        self._live_start = g0 + ids.shape[0]
        self.consumed += 1
        return ids

    def _grow(self, need: int) -> None:
        size = self._link.shape[0]
        while size < need:
            size *= 2
        new = np.empty(size, dtype=np.int64)
        old_mask, new_mask = self._link.shape[0] - 1, size - 1
        g = np.arange(self._live_start, self._g_end, dtype=np.int64)
        new[g & new_mask] = self._link[g & old_mask]
        self._link = new
