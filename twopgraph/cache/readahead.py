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


def worth_reading_ahead(nbytes: int) -> bool:
    """Whether a memory-mapped table of ``nbytes`` should be read ahead: larger than
    :data:`READAHEAD_SHARE` of the memory this process can still fill
    (:func:`~twopgraph.metrics.available_host_bytes`: ``MemAvailable``, its cgroup's limit).
    False where that is unknown."""
    from ..metrics import available_host_bytes
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


def page_ranges_reference(rows, offset: int, row_stride: int, row_len: int, page: int = PAGE,
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
    see :func:`page_ranges`. Thread-safe: sampling workers call :meth:`advise` concurrently;
    :attr:`ranges` and :attr:`bytes` count every range advised and its bytes (whole pages).
    """

    def __init__(self, table: np.ndarray, *, enabled: bool = True, gap_pages: int = 0,
                 page: int = PAGE):
        self.page, self.gap_pages = int(page), int(gap_pages)
        self.ranges = 0
        self.bytes = 0
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

    def advise(self, rows, count: bool = True) -> tuple[int, int]:
        """Ask the kernel to read the pages of table rows ``rows`` (int, any order,
        duplicates allowed) ahead; returns ``(ranges, bytes)`` of this call ((0, 0) when
        inactive), added to :attr:`ranges` / :attr:`bytes` when ``count``."""
        if self._mm is None:
            return 0, 0
        rows = np.sort(np.asarray(rows, dtype=np.int64))  # duplicates merge in the ranges
        starts, ends = page_ranges(rows, self._offset, self._stride, self._row_len,
                                   self.page, self.gap_pages)
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
