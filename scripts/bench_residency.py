#!/usr/bin/env python
"""The read-ahead's residency filter (``--readahead auto``) on a table file larger than a few
chunks: time and peak Python memory of :meth:`twopgraph.cache.readahead.Residency.missing`
with the span asked about in chunks of ``SPAN_CHUNK_PAGES`` (the default) against one
``mincore`` over the whole span (the chunk set larger than the table: what it did before).

    .venv/bin/python scripts/bench_residency.py                       # 2 GiB file in /tmp
    .venv/bin/python scripts/bench_residency.py --gib 4 --ranges 600000 --file /data/t.bin

A file of ``--gib`` GiB is written (once; kept for reruns) and read into the page cache, then
``--evict`` of its 2 MiB blocks are dropped (``posix_fadvise(DONTNEED)``; whole blocks,
since the page cache may hold large folios that a 4 KiB drop leaves alone). A batch of
``--ranges`` random one-page ranges is asked about ``--reps`` times per setting, the
settings alternated. Printed: median ms, peak MiB (tracemalloc: NumPy's arrays), ranges
found missing (the same in both). A benchmark, not a test: no timing assertions.
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--file", default="/tmp/twopgraph-residency.bin")
    p.add_argument("--gib", type=float, default=2.0, help="file size in GiB")
    p.add_argument("--ranges", type=int, default=300_000, help="page ranges in the batch")
    p.add_argument("--evict", type=float, default=0.1, help="share of 2 MiB blocks evicted")
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args(argv)
    from twopgraph.cache import readahead

    size = int(a.gib * 2**30) >> 21 << 21
    path = Path(a.file)
    if not path.exists() or path.stat().st_size != size:
        block = b"\1" * (64 << 20)
        with open(path, "wb") as f:
            for _ in range(size // len(block)):
                f.write(block)
            f.write(b"\1" * (size % len(block)))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        with open(path, "rb") as f:
            while f.read(64 << 20):
                pass
        rng = np.random.default_rng(0)
        blocks = size >> 21
        for b in rng.choice(blocks, int(blocks * a.evict), replace=False).tolist():
            os.posix_fadvise(fd, b << 21, 1 << 21, os.POSIX_FADV_DONTNEED)
        mm = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        base = np.frombuffer(mm, dtype=np.uint8).ctypes.data
        pages = size // readahead.PAGE
        starts = np.unique(rng.choice(pages - 1, a.ranges, replace=False)).astype(np.int64)
        ends = starts + 1
        res = readahead.Residency(base, size)
        if not res.available:
            raise SystemExit("bench_residency: no mincore on this system")
        settings = {"chunked": readahead.SPAN_CHUNK_PAGES, "whole span": pages + 1}
        times = {k: [] for k in settings}
        peaks, found = {}, {}
        for _ in range(a.reps):
            for name, chunk in settings.items():
                readahead.SPAN_CHUNK_PAGES = chunk
                tracemalloc.start()
                t = time.perf_counter()
                got = res.missing(starts, ends)
                times[name].append(time.perf_counter() - t)
                peaks[name] = tracemalloc.get_traced_memory()[1] / 2**20
                tracemalloc.stop()
                found[name] = None if got is None else int(got.sum())
        print(f"{size / 2**30:.2f} GiB file ({pages} pages), {starts.shape[0]} ranges, "
              f"{a.evict:.0%} of 2 MiB blocks evicted")
        for name, chunk in settings.items():
            print(f"  {name:10s} (chunk {chunk} pages): {statistics.median(times[name]) * 1e3:7.1f}"
                  f" ms  peak {peaks[name]:6.1f} MiB  missing ranges {found[name]}")
    finally:
        os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
