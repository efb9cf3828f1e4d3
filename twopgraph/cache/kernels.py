"""Next-use tracking kernels of the feature cache's lookahead window (:mod:`.window`).

Every announced row occurrence gets a flat, ever-growing index g; the occurrences still in
the window live in a ring ``link`` (size a power of two, ``mask = size - 1``) where
``link[g & mask]`` is the batch of the *next* occurrence of the same row (:data:`NO_USE` if
none is announced yet). ``last_g[r]`` is the flat index of the latest announced occurrence of
row r (-1: none); ``next_use[r]`` is the batch in which r is next used (:data:`NO_USE`: not in
the window). All arrays are int64; each kernel costs O(rows of the batch). Each has a
plain-Python/NumPy twin registered in :mod:`twopgraph.runtime.jit`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from twopgraph.runtime.jit import register

#: "Not used in the window": later than any batch position (2**40).
NO_USE = np.int64(1 << 40)


@njit(nogil=True, cache=True)
def window_announce(ids, g0, batch, live_start, last_g, next_use, link, mask):
    """Register batch ``batch`` (rows ``ids``, flat indices ``g0..``) at the end of the window.

    ``live_start`` is the flat index of the oldest occurrence not yet consumed.
    """
    no_use = np.int64(1 << 40)
    for i in range(ids.shape[0]):
        r = ids[i]
        g = g0 + i
        link[g & mask] = no_use
        p = last_g[r]
        if p >= live_start:
            link[p & mask] = batch      # a pending occurrence: chain the new one after it
        else:
            next_use[r] = batch         # no pending occurrence: this is the next use
        last_g[r] = g


def window_announce_ref(ids: np.ndarray, g0: int, batch: int, live_start: int,
                        last_g: np.ndarray, next_use: np.ndarray, link: np.ndarray,
                        mask: int) -> None:
    """Plain-Python twin of :func:`window_announce` (same in-place effects)."""
    for i, r in enumerate(np.asarray(ids).tolist()):
        g = g0 + i
        link[g & mask] = NO_USE
        p = int(last_g[r])
        if p >= live_start:
            link[p & mask] = batch
        else:
            next_use[r] = batch
        last_g[r] = g


@njit(nogil=True, cache=True)
def window_consume(ids, g0, next_use, link, mask):
    """Batch with rows ``ids`` (flat indices ``g0..``) is used now: move each row's next use
    on to its following occurrence in the window (NO_USE when none is announced)."""
    for i in range(ids.shape[0]):
        next_use[ids[i]] = link[(g0 + i) & mask]


def window_consume_ref(ids: np.ndarray, g0: int, next_use: np.ndarray, link: np.ndarray,
                       mask: int) -> None:
    """NumPy twin of :func:`window_consume`."""
    g = np.arange(g0, g0 + len(ids), dtype=np.int64) & mask
    next_use[np.asarray(ids)] = link[g]


register(window_announce, window_announce_ref)
register(window_consume, window_consume_ref)
