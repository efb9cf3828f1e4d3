"""glibc heap settings for long runs: blocks of 1 MiB and more from ``mmap``, two arenas.

A training epoch allocates and frees arrays of a few MiB per batch on several threads
(sampling workers, the prefetch thread, the model). glibc serves them from per-thread arenas
and, after the first large block is freed, raises its mmap threshold (up to 32 MiB) and trim
threshold, so later blocks of that size come from the arenas and stay there once freed. On a
27.8M-vertex papers-shaped graph inside a 12 GiB cgroup, the process's anonymous memory grew
from 1.0 to 2.2 GiB in the first 200 s of an epoch (3.9 GiB after 14 minutes), pushing the
memory-mapped features and CSR out of the page cache: the epoch then read them from disk
batch after batch. With the threshold fixed at 1 MiB and two arenas (:func:`configure_heap`)
it stayed at 0.9-1.4 GiB over the same 200 s and read nothing more from disk; on a
6.9M-vertex graph held in memory the epoch took 59-61 s instead of 57 s.

The CLI calls :func:`configure_heap` once at start (library users may call it too). A
``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_ARENA_MAX`` set in the environment wins. Not glibc
(another libc, not Linux): nothing changes.

Example::

    >>> configure_heap() in (True, False)
    True
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

#: ``mallopt`` parameters (glibc's malloc.h).
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
#: Blocks of at least this many bytes are mapped and unmapped on their own (never kept in an
#: arena after they are freed).
MMAP_THRESHOLD = 1 << 20
#: Arenas glibc may create for the process's threads (each keeps its own freed blocks).
ARENAS = 2


def configure_heap(mmap_threshold: int = MMAP_THRESHOLD, arenas: int = ARENAS) -> bool:
    """Fix glibc's mmap threshold at ``mmap_threshold`` bytes (no dynamic raise) and cap its
    arenas at ``arenas``, unless the environment sets them; True when glibc took both."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = True
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        ok = mallopt(M_MMAP_THRESHOLD, int(mmap_threshold)) == 1 and ok
    if "MALLOC_ARENA_MAX" not in os.environ:
        ok = mallopt(M_ARENA_MAX, int(arenas)) == 1 and ok
    return ok
