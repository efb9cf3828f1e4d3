"""``twopgraph bench csr``: the graph's CSR in memory as the sampler sees it -- how long a load
into it waits, and what its pages cost a sampling epoch.

Two parts (``--parts``):

- ``latency``: ``--loads`` random entries of the graph's ``indices`` (the store's file
  mapping, what sampling reads) read three ways, each a numba loop, median of ``--reps`` after
  a warm-up: ``chained`` (each position depends on the value loaded before it: one miss at a
  time, as a sampler waiting for ``indptr`` before reading a row), ``independent`` (positions
  known in advance: the CPU overlaps the misses) and ``prefetched`` (independent, with
  :func:`twopgraph.runtime.prefetch.prefetch` ``PREFETCH_DIST`` loads ahead). Figure:
  ``ns_per_load`` (and ``over_independent``): what the sampling kernels' prefetching works
  against.
- ``layout``: the same sampler and schedule over three copies of the CSR -- ``map`` (the
  store's read-only file mapping, what training uses), ``anon-huge`` (an anonymous copy
  advised ``MADV_HUGEPAGE``), ``anon-4k`` (advised ``MADV_NOHUGEPAGE``) -- sampling-only
  epochs round robin after one warm-up: ``sample_epoch_s`` (median), ``over_map``, and the
  process's ``anon_huge_pages_kib`` (``/proc/self/smaps_rollup``: whether huge pages were
  granted).

Example::

    twopgraph bench csr --graph synthetic-products --schedule locality --epochs 3
"""

from __future__ import annotations

import argparse
import functools
import logging
import statistics
import time
from typing import TYPE_CHECKING

from twopgraph.bench.harness import BENCHMARKS, Benchmark, Context, Row
from twopgraph.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger("twopgraph")

PARTS = ("latency", "layout")


@BENCHMARKS.register("csr")
class CsrBenchmark(Benchmark):
    """The CSR as the sampler sees it: dependent, independent and prefetched loads into it
    (ns per load), and sampling epochs over its file mapping vs anonymous copies with and
    without huge pages.

    Rows: part, access or csr. Figures: ns_per_load, over_independent; sample_epoch_s,
    over_map, anon_huge_pages_kib."""

    help = "the CSR as the sampler sees it: load latency, file map vs anonymous pages"
    columns = ("ns_per_load", "over_independent", "sample_epoch_s", "over_map",
               "anon_huge_pages_kib")

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--parts", default="latency,layout",
                       help="comma-separated, of latency, layout (default: both)")
        p.add_argument("--loads", type=int, default=886_000,
                       help="latency: random loads per timing (default: 886000)")
        p.add_argument("--reps", type=int, default=5,
                       help="latency: timings per access pattern, median (default: 5)")
        p.add_argument("--schedule", default="random", help="layout: (default: random)")
        p.add_argument("--epochs", type=int, default=3,
                       help="layout: timed epochs per copy (default: 3)")
        p.add_argument("--fanouts", default=None, help="layout: (default: by graph size)")
        p.add_argument("--batch-size", type=int, default=1024, help="(default: 1024)")
        p.add_argument("--threads", type=int, default=2, help="layout: (default: 2)")

    def check(self, a: argparse.Namespace) -> None:
        a._parts = [x.strip() for x in a.parts.split(",") if x.strip()]
        if not a._parts or set(a._parts) - set(PARTS):
            raise ConfigError(f"--parts: of {', '.join(PARTS)}, got {a.parts!r}")
        if a.loads < 1 or a.reps < 1 or a.epochs < 1 or a.threads < 1:
            raise ConfigError("need --loads, --reps, --epochs, --threads >= 1")

    def measure(self, a: argparse.Namespace, ctx: Context) -> list[Row]:
        rows = []
        if "latency" in a._parts:
            rows += latency(ctx.data().graph.indices, a.loads, a.reps)
        if "layout" in a._parts:
            rows += layout(ctx, a)
        return rows


@functools.lru_cache(maxsize=1)
def _kernels():
    """The two numba loops (compiled on first use: importing this module stays light)."""
    from numba import njit

    from twopgraph.runtime.prefetch import prefetch

    @njit(nogil=True)
    def chained(a, pos):
        s = 0
        n = a.shape[0]
        for e in range(pos.shape[0]):
            s += a[(pos[e] + (s & 1)) % n]  # the next address waits for the last value
        return s

    @njit(nogil=True)
    def independent(a, pos, dist):
        s = 0
        m = pos.shape[0]
        for e in range(m):
            if dist > 0 and e + dist < m:
                prefetch(a, pos[e + dist])
            s += a[pos[e]]
        return s
    return chained, independent


def latency(indices: np.ndarray, loads: int, reps: int) -> list[Row]:
    """ns per load of the three access patterns into ``indices``."""
    import numpy as np

    from twopgraph.runtime.prefetch import PREFETCH_DIST
    chained, independent = _kernels()
    pos = np.random.default_rng(0).integers(0, indices.shape[0], loads)
    runs = {"chained": lambda: chained(indices, pos),
            "independent": lambda: independent(indices, pos, 0),
            "prefetched": lambda: independent(indices, pos, PREFETCH_DIST)}
    ns = {}
    for name, fn in runs.items():
        fn()  # compile, warm
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        ns[name] = 1e9 * statistics.median(ts) / loads
    return [Row({"part": "latency", "access": k}, {
        "ns_per_load": v, "over_independent": v / ns["independent"], "loads": loads,
        "indices_mib": indices.nbytes / 2**20}) for k, v in ns.items()]


def _anon(arr: np.ndarray, huge: bool) -> np.ndarray:
    """An anonymous copy of ``arr`` advised (no) huge pages."""
    import mmap

    import numpy as np
    buf = mmap.mmap(-1, max(arr.nbytes, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    buf.madvise(mmap.MADV_HUGEPAGE if huge else mmap.MADV_NOHUGEPAGE)
    out = np.frombuffer(buf, dtype=arr.dtype, count=arr.size).reshape(arr.shape)
    out[:] = arr
    return out


def _anon_huge_kib() -> int | None:
    try:
        with open("/proc/self/smaps_rollup") as f:
            text = f.read()
        return int(text.split("AnonHugePages:")[1].split()[0])
    except (OSError, IndexError, ValueError):
        return None


def layout(ctx: Context, a: argparse.Namespace) -> list[Row]:
    """Sampling-only epochs over the three copies of the CSR, round robin."""
    import numpy as np

    from twopgraph.bench.sampling import sampler_config
    from twopgraph.graph.data import CSRGraph
    from twopgraph.locality import make_scheduler
    from twopgraph.pipeline.assemble import locality_for
    from twopgraph.pipeline.loader import Loader
    from twopgraph.sampler import make_sampler
    data = ctx.data()
    b = argparse.Namespace(**{**vars(a), "warmup": 1, "seed": 0})
    cfg, _ = sampler_config(b, ctx, a.schedule).validate().resolved(data.num_nodes)
    s = cfg.sampling
    prep = locality_for(data, [a.schedule], cfg)
    g = prep.data.graph
    parts = None if prep.clustering is None else prep.clustering.parts
    copies = {"map": g,
              "anon-huge": CSRGraph(_anon(np.asarray(g.indptr), True),
                                    _anon(np.asarray(g.indices), True)),
              "anon-4k": CSRGraph(_anon(np.asarray(g.indptr), False),
                                  _anon(np.asarray(g.indices), False))}
    loaders = {k: Loader(make_scheduler(a.schedule, prep.data.train_idx, s.batch_size, seed=0,
                                        balance=s.balance, labels=prep.data.label, parts=parts),
                         make_sampler("neighbor", gr, s.fanouts, seed=0), threads=a.threads)
               for k, gr in copies.items()}
    times = {k: [] for k in copies}
    for e in range(a.epochs + 1):
        for k, loader in loaders.items():
            t = time.perf_counter()
            loader.sample_epoch(e)
            if e:
                times[k].append(time.perf_counter() - t)
    huge = _anon_huge_kib()
    base = statistics.median(times["map"])
    return [Row({"part": "layout", "csr": k}, {
        "sample_epoch_s": statistics.median(v), "sample_epoch_s_all": v,
        "over_map": statistics.median(v) / base, "anon_huge_pages_kib": huge,
        "schedule": a.schedule, "fanouts": s.fanouts}) for k, v in times.items()]
