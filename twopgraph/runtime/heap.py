"""glibc heap settings for long runs: blocks of 1 MiB and more from ``mmap``, few arenas.

A training epoch allocates and frees arrays of a few MiB per batch on several threads
(sampling workers, the prefetch thread, the model). glibc serves them from per-thread arenas
and, after the first large block is freed, raises its mmap threshold (up to 32 MiB) and trim
threshold, so later blocks of that size come from the arenas and stay there once freed. On a
27.8M-vertex papers-shaped graph inside a 12 GiB cgroup, the process's anonymous memory grew
from 1.0 to 2.2 GiB in the first 200 s of an epoch (3.9 GiB after 14 minutes), pushing the
memory-mapped features and CSR out of the page cache: the epoch then read them from disk
batch after batch. With the threshold fixed at 1 MiB and two arenas (:func:`configure_heap`)
it stayed at 0.9-1.4 GiB over the same 200 s and read nothing more from disk; on a
6.9M-vertex graph held in memory the epoch took 59-61 s instead of 57 s. (The arena cap is
now one per core plus two, :func:`default_arenas`: sampling threads sharing an arena ran
slower, see :data:`ARENAS`; glibc's default allows 8 per core.)

The CLI calls :func:`configure_heap` once at start (library users may call it too). A
``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_ARENA_MAX`` set in the environment wins. Not glibc
(another libc, not Linux): nothing changes.

**Inside a training epoch** the opposite is right for the blocks that every batch allocates
again: the model's activations and gradients, the gathered inputs and the sampled blocks, tens
to hundreds of MiB, freed at the end of the step. Mapped afresh each time, every page of them
is faulted in and zeroed by the kernel once per batch: the README's quick start
(synthetic-small, 100 batches) took 12.2M page faults and 33 s of system time in 47 s of wall
time. :class:`BatchHeap` (``with BatchHeap() as heap: ... heap.step()`` around the batches)
turns mapping off and trimming off for the epoch, so a batch reuses the pages the last one
freed, and returns them to the system (``malloc_trim``) whenever the free bytes the arenas
hold pass ``keep`` (:data:`KEEP_SHARE` of the memory still available when they first pass
:data:`KEEP_MIN`, at least :data:`KEEP_MIN`), and once more when the epoch ends if they
still do. The anonymous memory of an epoch therefore stays within its largest batch's working
set plus ``keep``, and between epochs within about ``keep`` free bytes (glibc's trim threshold
then), which the next epoch reuses.

Example::

    >>> configure_heap() in (True, False)
    True
    >>> with BatchHeap() as heap:
    ...     heap.step()
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os

from twopgraph.runtime.memory import available_host_bytes

log = logging.getLogger("twopgraph")

#: ``mallopt`` parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_MMAP_MAX = -4
M_ARENA_MAX = -8
#: glibc's defaults for the two parameters :class:`BatchHeap` changes (it puts the first back).
MMAP_MAX_DEFAULT = 65536
TRIM_THRESHOLD_DEFAULT = 128 * 1024
#: Free bytes the arenas may hold inside an epoch, as a share of the host memory still
#: available when it starts, and at least this many bytes.
KEEP_SHARE = 0.05
KEEP_MIN = 256 << 20
#: Free bytes under which an epoch's end skips even the check against ``keep`` (reading
#: ``keep``'s default costs 0.3 ms), and the least glibc trim threshold between epochs.
#: Between epochs the arenas keep up to the epoch's ``keep`` free bytes (glibc's trim
#: threshold, instead of its 128 KiB default): the last batches of an epoch are freed after it
#: ends, and with the default their pages went back to the system there and were faulted in
#: again by the next epoch's first batches (coauthor_cs, two workers: one to three of 11
#: batches took 1.25 ms instead of 0.75 ms; epochs 6.0-7.0 ms, 5.3-5.9 ms without); an
#: end-of-epoch trim of synthetic-small's ~60 MiB of freed batches made the first three
#: batches of the next epoch take 6-7 ms instead of 4 ms.
EXIT_KEEP = 16 << 20
#: Blocks of at least this many bytes are mapped and unmapped on their own (never kept in an
#: arena after they are freed).
MMAP_THRESHOLD = 1 << 20
#: Arenas glibc may create for the process's threads (each keeps its own freed blocks): at
#: least this many, one per usable core plus :data:`ARENAS_EXTRA` (the threads that allocate
#: for every batch: sampling workers, the gathering thread, the training step), at most
#: :data:`ARENAS_MAX` (glibc's own default is 8 per core). Threads beyond them share arenas,
#: and two sampling threads sharing one reuse each other's freed batch buffers, cold in their
#: own core's cache: with two arenas on two cores a sampling epoch of coauthor_cs took
#: 7.4-9.3 ms instead of 4.9-5.5 ms whenever the pool's thread was given the calling thread's
#: arena (every other loader of ``bench sampling``'s repeats); the 2M-vertex graph's training
#: peaked at the same RSS with 2 or 4 arenas (4.83-4.95 GB against 4.89-4.98 GB).
ARENAS = 2
ARENAS_EXTRA = 2
ARENAS_MAX = 8


def default_arenas() -> int:
    """The arena cap :func:`configure_heap` sets by default: the usable cores plus
    :data:`ARENAS_EXTRA`, within ``[ARENAS, ARENAS_MAX]``."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(ARENAS, min(ARENAS_MAX, cores + ARENAS_EXTRA))


def configure_heap(mmap_threshold: int = MMAP_THRESHOLD, arenas: int | None = None) -> bool:
    """Fix glibc's mmap threshold at ``mmap_threshold`` bytes (no dynamic raise) and cap its
    arenas at ``arenas`` (default :func:`default_arenas`), unless the environment sets them;
    True when glibc took both. glibc reads the arena cap when a thread first needs an arena:
    call it before the threads exist."""
    if arenas is None:
        arenas = default_arenas()
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


@functools.cache
def _libc():
    """glibc's handle with ``mallopt``, ``malloc_trim`` and ``mallinfo2``, or None; looked up
    once (``find_library`` runs ``ldconfig`` in a subprocess: a millisecond per call, once per
    epoch otherwise)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt, libc.malloc_trim, libc.mallinfo2  # glibc >= 2.33
    except (OSError, AttributeError):
        return None
    libc.mallinfo2.restype = _Mallinfo2
    return libc


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def default_keep() -> int:
    """:class:`BatchHeap`'s default ``keep``, bytes: :data:`KEEP_SHARE` of the memory
    available now, at least :data:`KEEP_MIN`."""
    avail = available_host_bytes()
    return max(KEEP_MIN, int(KEEP_SHARE * avail) if avail else KEEP_MIN)


class BatchHeap:
    """glibc's arenas keep the blocks a batch frees for the next batch, up to ``keep`` free
    bytes (default: :data:`KEEP_SHARE` of :func:`~twopgraph.runtime.memory.available_host_bytes`, at
    least :data:`KEEP_MIN`); see the module's text. A context manager: entering turns
    ``mmap`` and trimming off, :meth:`step` (once per batch) trims when the free bytes pass
    ``keep``, leaving puts glibc's mmap default back, trims if they hold more than ``keep``
    (and more than :data:`EXIT_KEEP`) and sets glibc's trim threshold to ``keep`` (at least
    :data:`EXIT_KEEP`; :data:`KEEP_MIN` while no keep was computed), so that the next epoch
    finds the pages this one freed. ``MALLOC_MMAP_MAX_`` or
    ``MALLOC_TRIM_THRESHOLD_`` in the environment, or a libc other than glibc 2.33+: nothing
    changes (``active`` False). ``trims`` counts the trims inside the epoch."""

    def __init__(self, keep: int | None = None) -> None:
        self.keep = keep
        self.active = False
        self.trims = 0
        self._libc = None

    def __enter__(self) -> "BatchHeap":
        if "MALLOC_MMAP_MAX_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
            return self
        libc = _libc()
        if libc is None:
            return self
        if libc.mallopt(M_MMAP_MAX, 0) != 1:
            return self
        libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1)  # mallopt takes a C int
        self._libc, self.active = libc, True
        return self

    def step(self) -> None:
        """Return the free pages to the system if the arenas hold more than ``keep``."""
        if self.active and self._over_keep(self._libc.mallinfo2().fordblks):
            self._libc.malloc_trim(0)
            self.trims += 1

    def _over_keep(self, free: int) -> bool:
        """Whether ``free`` bytes pass ``keep``. The default keep (:func:`default_keep`,
        which reads /proc and the cgroup: ~0.3 ms) is computed the first time the free bytes
        pass :data:`KEEP_MIN`, its floor -- on a small graph, never."""
        if self.keep is None:
            if free <= KEEP_MIN:
                return False
            self.keep = default_keep()
        return free > self.keep

    def __exit__(self, *exc: object) -> None:
        if not self.active:
            return
        self.active = False
        libc = self._libc
        libc.mallopt(M_MMAP_MAX, MMAP_MAX_DEFAULT)
        free = libc.mallinfo2().fordblks
        if free > EXIT_KEEP and self._over_keep(free):
            libc.malloc_trim(0)
        # between epochs the arenas keep what they may keep inside one (glibc trims an
        # arena's top above this threshold when a block is freed)
        bound = self.keep if self.keep is not None else KEEP_MIN
        libc.mallopt(M_TRIM_THRESHOLD, min(2**31 - 1, max(EXIT_KEEP, bound)))
        if self.trims:
            log.debug("epoch heap: %d trims at %.0f MiB free", self.trims, self.keep / 2**20)
