"""``twopgraph bench residency``: the read-ahead's residency filter (``--readahead auto``) on a
table file larger than a few chunks -- time and peak Python memory of
:meth:`twopgraph.cache.readahead.Residency.missing` asking about the span in chunks of
``SPAN_CHUNK_PAGES`` (the default) against one ``mincore`` over the whole span.

A file of ``--gib`` GiB is written (once; kept for reruns) and read into the page cache, then
``--evict`` of its 2 MiB blocks are dropped (``posix_fadvise(DONTNEED)``; whole blocks, since
the page cache may hold large folios that a 4 KiB drop leaves alone). A batch of ``--ranges``
random one-page ranges is asked about ``--reps`` times per setting, the settings alternated.

Rows: ``setting`` (chunked | whole span). Figures: ``ms`` (median), ``peak_mib``
(tracemalloc: NumPy's arrays), ``missing_ranges`` (the same in both), ``chunk_pages``.
The benchmark takes no graph.

Example::

    twopgraph bench residency --gib 4 --ranges 600000 --file /data/t.bin
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from twopgraph.bench.harness import BENCHMARKS, Benchmark, Context, Row
from twopgraph.errors import ConfigError


@BENCHMARKS.register("residency")
class ResidencyBenchmark(Benchmark):
    """The read-ahead's residency filter on a large file: ``mincore`` asked chunk by chunk
    against over the whole span (milliseconds, peak memory, ranges found missing).

    Rows: setting. Figures: ms, peak_mib, missing_ranges."""

    help = "read-ahead residency filter: chunked vs whole-span mincore"
    default_graph = None
    columns = ("chunk_pages", "ms", "peak_mib", "missing_ranges")

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--file", default="/tmp/twopgraph-residency.bin",
                       help="the table file, written once (default: %(default)s)")
        p.add_argument("--gib", type=float, default=2.0, help="file size, GiB (default: 2)")
        p.add_argument("--ranges", type=int, default=300_000,
                       help="page ranges in the batch (default: 300000)")
        p.add_argument("--evict", type=float, default=0.1,
                       help="share of 2 MiB blocks evicted (default: 0.1)")
        p.add_argument("--reps", type=int, default=5, help="timings per setting (default: 5)")

    def check(self, a: argparse.Namespace) -> None:
        if not (a.gib > 0 and a.ranges > 0 and 0 <= a.evict <= 1 and a.reps > 0):
            raise ConfigError("need --gib > 0, --ranges > 0, --evict in [0, 1], --reps > 0")
        if (a.gib * 2**30) // 2**21 < 2:
            raise ConfigError("--gib: the file needs at least two 2 MiB blocks")

    def measure(self, a: argparse.Namespace, ctx: Context) -> list[Row]:
        import mmap
        import tracemalloc

        import numpy as np

        from twopgraph.cache import readahead
        size = int(a.gib * 2**30) >> 21 << 21
        path = Path(a.file)
        if not path.exists() or path.stat().st_size != size:
            block = b"\1" * (64 << 20)
            with open(path, "wb") as f:
                f.writelines(block for _ in range(size // len(block)))
                f.write(b"\1" * (size % len(block)))
        pages = size // readahead.PAGE
        if a.ranges >= pages:
            raise ConfigError(f"--ranges {a.ranges}: the file has {pages} pages")
        fd = os.open(path, os.O_RDONLY)
        saved = readahead.SPAN_CHUNK_PAGES
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
            starts = np.unique(rng.choice(pages - 1, a.ranges, replace=False)).astype(np.int64)
            res = readahead.Residency(base, size)
            if not res.available:
                raise ConfigError("bench residency: no mincore on this system")
            settings = {"chunked": saved, "whole span": pages + 1}
            times = {k: [] for k in settings}
            peaks, found = {}, {}
            for _ in range(a.reps):
                for name, chunk in settings.items():
                    readahead.SPAN_CHUNK_PAGES = chunk
                    tracemalloc.start()
                    t = time.perf_counter()
                    got = res.missing(starts, starts + 1)
                    times[name].append(time.perf_counter() - t)
                    peaks[name] = tracemalloc.get_traced_memory()[1] / 2**20
                    tracemalloc.stop()
                    found[name] = None if got is None else int(got.sum())
        finally:
            readahead.SPAN_CHUNK_PAGES = saved
            os.close(fd)
        return [Row({"setting": k}, {"chunk_pages": settings[k],
                                     "ms": 1e3 * statistics.median(times[k]),
                                     "peak_mib": peaks[k], "missing_ranges": found[k],
                                     "file_gib": size / 2**30, "pages": pages,
                                     "ranges": int(starts.shape[0])}) for k in settings]
