#!/usr/bin/env python
"""Memory latency as the sampler sees it: dependent vs independent loads into a dataset's CSR.

    .venv/bin/python scripts/bench_latency.py synthetic-products
    .venv/bin/python scripts/bench_latency.py synthetic-products --data-root R --loads 886000

Reads ``--loads`` random entries of the dataset's ``indices`` (the store's file mapping, what
sampling reads) three ways, each a numba loop, median of ``--repeats`` after a warm-up:
``chained`` (each position depends on the value loaded before it: one miss at a time, as in a
sampler that waits for ``indptr`` before reading a row), ``independent`` (positions known in
advance: the CPU overlaps the misses) and ``prefetched`` (independent, with
:func:`twopgraph.runtime.prefetch.prefetch` ``PREFETCH_DIST`` loads ahead). Prints ns per load; the
ratio chained / independent is what the sampling kernels' prefetching works against.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from twopgraph.datasets import load_dataset  # noqa: E402
from twopgraph.runtime.prefetch import PREFETCH_DIST, prefetch  # noqa: E402


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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset")
    p.add_argument("--data-root", default=None)
    p.add_argument("--loads", type=int, default=886_000)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args(argv)
    indices = load_dataset(a.dataset, a.data_root, progress=False).graph.indices
    pos = np.random.default_rng(0).integers(0, indices.shape[0], a.loads)
    runs = {"chained": lambda: chained(indices, pos),
            "independent": lambda: independent(indices, pos, 0),
            "prefetched": lambda: independent(indices, pos, PREFETCH_DIST)}
    print(f"{a.dataset}: indices {indices.dtype} x {indices.shape[0]:,} "
          f"({indices.nbytes / 2**20:,.0f} MiB), {a.loads:,} random loads")
    ns = {}
    for name, fn in runs.items():
        fn()  # compile, warm
        ts = []
        for _ in range(a.repeats):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        ns[name] = 1e9 * statistics.median(ts) / a.loads
        print(f"  {name:12s} {ns[name]:7.1f} ns/load")
    print(f"  chained / independent: {ns['chained'] / ns['independent']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
