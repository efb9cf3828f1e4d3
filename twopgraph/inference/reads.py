"""Sequential reads of a memory-mapped array by file: large ranges read ahead on a thread.

:func:`_file_of` (the file and byte offset under a C-contiguous ``np.memmap``) and
:func:`read_ranges` (``os.preadv`` of each range, the next one read on a background thread,
the pages optionally dropped behind; two ranges in memory).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from twopgraph.cache.readahead import find_mmap
from twopgraph.errors import GraphFormatError


def _file_of(arr) -> tuple[str, int] | None:
    """``(path, byte offset of arr[0])`` of a C-contiguous ``np.memmap`` (or a view of one)
    whose file is known, else None."""
    path = getattr(arr, "filename", None)
    if not isinstance(arr, np.memmap) or path is None or not arr.flags.c_contiguous:
        return None
    found = find_mmap(arr)
    if found is None:
        return None
    offset = int(arr.offset)
    return str(path), offset - offset % mmap.ALLOCATIONGRANULARITY + found[1]


def read_ranges(arr: np.ndarray, ranges: Iterable[tuple[int, int]], *,
                drop: bool = False) -> Iterator[np.ndarray]:
    """``arr[a:b]`` (a copy) for each ``(a, b)`` of ``ranges`` in turn, reading the next
    range on a background thread while the caller works on this one. A memory-mapped array
    (:func:`_file_of`) is read with ``os.preadv``: large sequential reads that the kernel's
    read-ahead serves at the disk's speed whatever advice the mapping carries (a feature
    table is ``MADV_RANDOM`` for the sampler); ``drop`` then removes the pages read from the
    page cache (``POSIX_FADV_DONTNEED``: a table larger than the memory would otherwise push
    out pages that are used again). A file shorter than the array is a one-line
    :class:`~twopgraph.errors.GraphFormatError`. Memory: two ranges."""
    ranges = [(int(a), int(b)) for a, b in ranges]
    loc = _file_of(arr)
    if loc is None:
        for a, b in ranges:
            yield np.array(arr[a:b])
        return
    path, base = loc
    row = arr.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64))
    fd = os.open(path, os.O_RDONLY)

    def read(a: int, b: int) -> np.ndarray:
        out = np.empty((b - a,) + arr.shape[1:], dtype=arr.dtype)
        view = memoryview(out.reshape(-1).view(np.uint8))
        off, n, got = base + a * row, (b - a) * row, 0
        while got < n:
            k = os.preadv(fd, [view[got:]], off + got)
            if k <= 0:
                raise GraphFormatError(f"{path}: the file ends at byte {off + got:,}, before "
                                       f"the {arr.shape[0]:,} rows its array holds (it "
                                       f"changed while this run read it)")
            got += k
        if drop and n and hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, off, n, os.POSIX_FADV_DONTNEED)
        return out

    try:
        with ThreadPoolExecutor(1, thread_name_prefix="twopgraph-read") as pool:
            ahead = pool.submit(read, *ranges[0]) if ranges else None
            for i in range(len(ranges)):
                got = ahead.result()
                ahead = pool.submit(read, *ranges[i + 1]) if i + 1 < len(ranges) else None
                yield got
    finally:
        os.close(fd)
