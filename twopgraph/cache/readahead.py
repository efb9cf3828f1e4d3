"""Read-ahead of feature rows from a memory-mapped host table.

A sampling worker knows a batch's input rows as soon as it has sampled it, well before the
gather reads them (the lookahead window and the prefetch queue lie in between). When the
feature table is a memory map of a store (``np.load(..., mmap_mode="r")``) and does not fit in
memory, :meth:`Readahead.advise` turns those rows into page ranges of the mapping and asks the
kernel to read them now (``madvise(MADV_WILLNEED)``: asynchronous, the call does not wait for
the disk), so the pages are in the page cache when the gather touches them while earlier
batches train. Sorting the rows first and merging the pages of neighbouring rows keeps the
calls few and the reads near-sequential (the cluster-contiguous renumbering makes a batch's
rows neighbours on disk).

An active :class:`Readahead` also marks the whole mapping ``MADV_RANDOM``: a page fault then
reads just its page, not the kernel's read-around window (tens of KiB around it). Reading
ahead is this module's job, and it reads the pages batches will use; the read-around of
faults on rows scattered over a table larger than memory reads mostly pages no batch needs
and evicts the ones advised (measured: a 5 GiB table under a 2.5 GiB cap read the disk at
~0.7 GB/s for minutes inside one epoch). Exact evaluation advises the rows it is about to
read the same way (``count=False``: not in the epoch's counters).

Advising a page that is already in the page cache reads nothing but still costs a system call
per range: for 256-byte rows (ogbn-papers100M's 128 float16 features) a random batch touches
~370,000 ranges, ~0.75 s of calls per batch while holding the GIL, for a table that mostly
stays resident (measured on a 1/4-scale papers-shaped graph under a 12 GiB cap: 299 s of the
epoch's 422 s). With ``skip_resident`` (what ``--readahead auto`` uses) :meth:`Readahead.advise`
first asks ``mincore`` (:class:`Residency`) about a sample of the batch's ranges
(:data:`PROBE_RANGES` of them): none missing -> nothing is advised; else, when the resident
share of the probes times the batch's ranges is worth more calls than one ``mincore`` over
the batch's whole span costs (:data:`RANGE_COST_PAGES`), ``mincore`` over that span (in
chunks of :data:`SPAN_CHUNK_PAGES`, so its memory does not grow with the table) keeps only
the ranges with a page that is not resident; otherwise every range is advised.

On systems without ``mmap.madvise`` (not Linux), and for tables that are not memory maps
(in-memory arrays, torch tensors), :class:`Readahead` is inactive and ``advise`` does
nothing. A wrong hint costs a read, never a wrong value: the table is only ever read.

Example::

    >>> import numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "feat.npy")
    >>> np.save(path, np.zeros((1000, 16), dtype=np.float32))
    >>> ra = Readahead(np.load(path, mmap_mode="r"))
    >>> ra.advise(np.array([3, 1, 2])) == (1, ra.page) or not ra.active
    True
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import threading

import numpy as np

#: Read ahead only when the table exceeds this share of the memory available to the process
#: (:func:`worth_reading_ahead`): a table that stays in the page cache gains nothing, and the
#: calls cost (tens of thousands of ranges per batch of small rows).
READAHEAD_SHARE = 0.5
#: Bytes of a memory page (what ``madvise`` works in).
PAGE = mmap.PAGESIZE
_CAN_ADVISE = hasattr(mmap, "MADV_WILLNEED") and hasattr(mmap.mmap, "madvise")
#: Ranges of a batch whose pages :class:`Residency` probes before advising (see the module
#: doc).
PROBE_RANGES = 64
#: One ``madvise`` call costs about as much as ``mincore`` over this many pages (measured on
#: a 7.1 GB float16 table: 373,507 calls on resident ranges 0.75 s, 2.0 us each; ``mincore``
#: over its 1.74M pages 0.16 s, 0.09 us each): :meth:`Residency.missing` asks about the whole
#: span of a batch only when the calls it would save are worth more.
RANGE_COST_PAGES = 16
#: Pages :meth:`Residency.missing` asks ``mincore`` about per call when it filters a batch's
#: span (256 MiB of table; 64 KiB of answer and 256 KiB of counts): its memory stays the same
#: whatever the table's size, and stretches of the span without a range are not asked about.
SPAN_CHUNK_PAGES = 1 << 16


def _load_mincore():
    """libc's ``mincore`` through ctypes (it releases the GIL), or None where there is none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.mincore
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


_MINCORE = _load_mincore()


class Residency:
    """Which pages of a memory mapping are in the page cache (``mincore``). ``base``: the
    mapping's address (page-aligned), ``size``: its bytes. :attr:`available` is False where
    ``mincore`` cannot be called; then :meth:`pages` answers None (unknown) and
    :meth:`missing` None (advise every range)."""

    def __init__(self, base: int, size: int, page: int = PAGE) -> None:
        self.base, self.size, self.page = int(base), int(size), int(page)
        self.available = _MINCORE is not None and self.base % self.page == 0

    def pages(self, first: int, count: int) -> np.ndarray | None:
        """Residency of pages ``[first, first + count)`` (bool), or None when unknown."""
        length = min((first + count) * self.page, self.size) - first * self.page
        if not self.available or length <= 0:
            return None
        vec = np.empty(-(-length // self.page), dtype=np.uint8)
        rc = _MINCORE(ctypes.c_void_p(self.base + first * self.page), ctypes.c_size_t(length),
                      ctypes.c_void_p(vec.ctypes.data))
        return None if rc != 0 else (vec & 1).astype(bool)

    def missing(self, starts: np.ndarray, ends: np.ndarray,
                probes: int = PROBE_RANGES) -> np.ndarray | None:
        """Which page ranges ``[starts[i], ends[i])`` (ascending, disjoint) hold a page that is
        not resident (bool per range), or None for "all of them" (unknown, or too few of the
        probed ranges resident for a filter to pay: see the module doc)."""
        n = int(starts.shape[0])
        if n == 0 or not self.available:
            return None
        k = min(n, probes)
        miss = 0
        for i in ((np.arange(k) * n) // k).tolist():
            got = self.pages(int(starts[i]), int(ends[i] - starts[i]))
            if got is None:
                return None
            miss += not got.all()
        if miss == 0:
            return np.zeros(n, dtype=bool)
        s0, s1 = int(starts[0]), int(ends[-1])
        if (k - miss) * n * RANGE_COST_PAGES <= k * (s1 - s0):
            return None  # the calls the filter would save cost less than asking every page
        out = np.zeros(n, dtype=bool)
        for c0 in range(s0, s1, SPAN_CHUNK_PAGES):
            c1 = min(c0 + SPAN_CHUNK_PAGES, s1)
            lo = int(np.searchsorted(ends, c0, side="right"))  # first range ending after c0
            hi = int(np.searchsorted(starts, c1, side="left"))  # ranges starting before c1
            if lo >= hi:
                continue
            got = self.pages(c0, c1 - c0)
            if got is None:
                return None
            gone = np.zeros(c1 - c0 + 1, dtype=np.int32)  # missing pages before each page
            np.cumsum(~got, out=gone[1:got.shape[0] + 1])
            gone[got.shape[0] + 1:] = gone[got.shape[0]]
            a = np.clip(starts[lo:hi], c0, c1) - c0
            b = np.clip(ends[lo:hi], c0, c1) - c0
            out[lo:hi] |= gone[b] > gone[a]
        return out


def worth_reading_ahead(nbytes: int) -> bool:
    """Whether a memory-mapped table of ``nbytes`` should be read ahead: larger than
    :data:`READAHEAD_SHARE` of the memory this process can still fill
    (:func:`~twopgraph.runtime.memory.available_host_bytes`: ``MemAvailable``, its cgroup's limit).
    False where that is unknown."""
    from twopgraph.runtime.memory import available_host_bytes
    avail = available_host_bytes()
    return avail is not None and nbytes > READAHEAD_SHARE * avail


def find_mmap(table: np.ndarray) -> tuple[mmap.mmap, int] | None:
    """The ``mmap.mmap`` under ``table`` and the byte offset of ``table``'s first element in
    it, following the ``.base`` chain (an ``np.memmap``, a slice or view of one); ``None`` for
    an array that does not live in a memory map."""
    obj = table
    while isinstance(obj, np.ndarray):
        obj = obj.base
    if not isinstance(obj, mmap.mmap) or len(obj) == 0:
        return None
    view = np.frombuffer(obj, dtype=np.uint8)  # only for its address; released at once
    start = view.__array_interface__["data"][0]
    del view
    return obj, int(table.__array_interface__["data"][0] - start)


def page_ranges(rows: np.ndarray, offset: int, row_stride: int, row_len: int,
                page: int = PAGE, gap_pages: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The pages holding ``rows`` as merged half-open page ranges ``[starts[i], ends[i])``
    (int64, in pages, ascending, disjoint): row ``r`` covers bytes ``[offset + r x
    row_stride, + row_len)``. Ranges less than ``gap_pages`` + 1 pages apart are merged
    (``gap_pages`` = 0: only touching or overlapping ones). ``rows`` must be sorted (int64;
    duplicates allowed). Vectorised; :func:`page_ranges_reference` is its plain-Python twin."""
    if rows.shape[0] == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    first = offset + rows * row_stride
    starts = first // page
    ends = (first + (row_len - 1)) // page + 1
    # rows sorted and row_stride >= row_len: starts and ends are both non-decreasing
    brk = np.flatnonzero(starts[1:] > ends[:-1] + gap_pages) + 1
    lo = np.concatenate([[0], brk])
    hi = np.concatenate([brk - 1, [rows.shape[0] - 1]])
    return starts[lo], ends[hi]


def page_ranges_reference(rows: np.ndarray, offset: int, row_stride: int, row_len: int,
                          page: int = PAGE,
                          gap_pages: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """:func:`page_ranges`, one row at a time (the reference the tests compare against)."""
    out: list[list[int]] = []
    for r in sorted({int(x) for x in rows}):
        b = offset + r * row_stride
        s, e = b // page, (b + row_len - 1) // page + 1
        if out and s <= out[-1][1] + gap_pages:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    a = np.array(out, dtype=np.int64).reshape(-1, 2)
    return a[:, 0].copy(), a[:, 1].copy()


class Readahead:
    """``madvise(MADV_WILLNEED)`` of the pages of table rows (see the module doc).

    ``table``: the host feature table (N x F); active when it lives in a memory map with
    contiguous rows and the OS has ``madvise`` (``enabled=False`` turns it off). ``gap_pages``:
    see :func:`page_ranges`. ``skip_resident``: :meth:`advise` leaves out ranges whose pages
    are all in the page cache already (:class:`Residency`; see the module doc), counted in
    :attr:`skipped`. Thread-safe: sampling workers call :meth:`advise` concurrently;
    :attr:`ranges` and :attr:`bytes` count every range advised and its bytes (whole pages).
    """

    def __init__(self, table: np.ndarray, *, enabled: bool = True, gap_pages: int = 0,
                 page: int = PAGE, skip_resident: bool = False) -> None:
        self.page, self.gap_pages = int(page), int(gap_pages)
        self.skip_resident = skip_resident
        self.ranges = 0
        self.bytes = 0
        self.skipped = 0
        self.residency: Residency | None = None
        self._lock = threading.Lock()
        self._mm: mmap.mmap | None = None
        found = find_mmap(table) if enabled and _CAN_ADVISE and isinstance(
            table, np.ndarray) and table.ndim == 2 else None
        if found is None or table.shape[0] == 0:
            return
        stride, item = table.strides
        row_len = table.shape[1] * table.itemsize
        if item != table.itemsize or stride < row_len or row_len == 0:
            return  # rows not contiguous: not worth a special case
        self._mm, self._offset = found
        self._table = table  # keeps the mapping alive as long as we may advise it
        base = int(table.__array_interface__["data"][0]) - self._offset
        self.residency = Residency(base, len(self._mm), self.page)
        self._stride, self._row_len = int(stride), int(row_len)
        if hasattr(mmap, "MADV_RANDOM"):  # faults read their own page only (module doc)
            self._mm.madvise(mmap.MADV_RANDOM)

    @property
    def active(self) -> bool:
        return self._mm is not None

    def counts(self) -> tuple[int, int]:
        """``(ranges, bytes)`` advised so far."""
        with self._lock:
            return self.ranges, self.bytes

    def advise(self, rows: np.ndarray, count: bool = True) -> tuple[int, int]:
        """Ask the kernel to read the pages of table rows ``rows`` (int, any order,
        duplicates allowed) ahead; returns ``(ranges, bytes)`` of this call ((0, 0) when
        inactive), added to :attr:`ranges` / :attr:`bytes` when ``count``."""
        if self._mm is None:
            return 0, 0
        rows = np.sort(np.asarray(rows, dtype=np.int64))  # duplicates merge in the ranges
        starts, ends = page_ranges(rows, self._offset, self._stride, self._row_len,
                                   self.page, self.gap_pages)
        if self.skip_resident and self.residency is not None:
            keep = self.residency.missing(starts, ends)
            if keep is not None:
                with self._lock:
                    self.skipped += int(keep.shape[0] - keep.sum())
                starts, ends = starts[keep], ends[keep]
        return self._advise_pages(starts, ends, count)

    def advise_range(self, a: int, b: int, count: bool = False) -> tuple[int, int]:
        """:meth:`advise` of the contiguous rows ``[a, b)``."""
        if self._mm is None or b <= a:
            return 0, 0
        first = (self._offset + a * self._stride) // self.page
        last = -(-(self._offset + (b - 1) * self._stride + self._row_len) // self.page)
        return self._advise_pages(np.array([first]), np.array([last]), count)

    def _advise_pages(self, starts: np.ndarray, ends: np.ndarray, count: bool):
        size, mm, page = len(self._mm), self._mm, self.page
        total = 0
        for s, e in zip(starts.tolist(), ends.tolist()):
            start = s * page
            length = min(e * page, size) - start
            if length <= 0:
                continue
            mm.madvise(mmap.MADV_WILLNEED, start, length)
            total += length
        n = int(starts.shape[0])
        if count:
            with self._lock:
                self.ranges += n
                self.bytes += total
        return n, total
