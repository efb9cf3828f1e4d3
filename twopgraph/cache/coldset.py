"""The cached rows a window policy no longer needs inside its lookahead window, ordered by a
static rank: what :class:`~twopgraph.cache.directory.CacheDirectory` evicts first, found
without looking at every cached row.

For a policy such as ``layer`` (:class:`~twopgraph.cache.layer.LayerCache`) a row outside the
window (``next_use == NO_USE``) has the key ``(NO_USE, static rank)``, larger than the key of
any row inside it, so the rows to evict are the worst-ranked cached rows outside the window
as long as there are enough of them. :class:`ColdSet` keeps those rows as a bit per rank
position plus a count per block of :data:`BLOCK` positions: adding or removing a batch's rows
costs O(rows + N / BLOCK), finding the ``k`` worst ones O(N / BLOCK + blocks read x BLOCK) --
never O(budget).

Example::

    >>> s = ColdSet(np.array([2, 0, 3, 1]))  # rank of rows 0..3 (0 = best)
    >>> s.add(np.array([0, 1, 2]))
    >>> s.worst(2).tolist(), s.size
    ([2, 0], 3)
"""

from __future__ import annotations

import numpy as np

#: Rank positions per counted block.
BLOCK = 1024


class ColdSet:
    """A set of rows kept by their static ``rank`` (int64, a permutation of ``0..N-1``, 0 =
    best): :meth:`add`, :meth:`remove` (rows not in the set / already in it are ignored),
    :meth:`worst` (the ``k`` rows of the largest ranks), :meth:`clear`."""

    def __init__(self, rank: np.ndarray) -> None:
        self.rank = np.asarray(rank, dtype=np.int64)
        n = self.rank.shape[0]
        self.row_at = np.empty(n, dtype=np.int64)
        self.row_at[self.rank] = np.arange(n, dtype=np.int64)
        self.bits = np.zeros(n, dtype=bool)
        self.counts = np.zeros(max(1, -(-n // BLOCK)), dtype=np.int64)
        self.size = 0

    def clear(self) -> None:
        self.bits[:] = False
        self.counts[:] = 0
        self.size = 0

    def add(self, rows: np.ndarray) -> None:
        """Put the (unique) ``rows`` in the set."""
        r = self.rank[np.asarray(rows, dtype=np.int64)]
        r = r[~self.bits[r]]
        if r.shape[0]:
            self.bits[r] = True
            self.counts += np.bincount(r // BLOCK, minlength=self.counts.shape[0])
            self.size += int(r.shape[0])

    def remove(self, rows: np.ndarray) -> None:
        """Take the (unique) ``rows`` out of the set."""
        r = self.rank[np.asarray(rows, dtype=np.int64)]
        r = r[self.bits[r]]
        if r.shape[0]:
            self.bits[r] = False
            self.counts -= np.bincount(r // BLOCK, minlength=self.counts.shape[0])
            self.size -= int(r.shape[0])

    def worst(self, k: int) -> np.ndarray:
        """The rows of the ``k`` largest ranks in the set (all of them when it holds fewer),
        worst first."""
        if k <= 0 or self.size == 0:
            return np.empty(0, dtype=np.int64)
        blocks = np.flatnonzero(self.counts)[::-1]  # from the worst ranks down
        need = int(np.searchsorted(np.cumsum(self.counts[blocks]), k))
        blocks = blocks[:need + 1]
        pos = (blocks[:, None] * BLOCK + np.arange(BLOCK, dtype=np.int64)).ravel()
        pos = pos[pos < self.bits.shape[0]]
        pos = np.sort(pos[self.bits[pos]])[::-1][:k]
        return self.row_at[pos]
