#!/usr/bin/env python
"""Where the CSR lives, for the numba sampler: the store's file mapping vs anonymous copies.

    .venv/bin/python scripts/bench_csr_pages.py synthetic-products random 3
    .venv/bin/python scripts/bench_csr_pages.py synthetic-products locality 3

Arguments: dataset, schedule, timed epochs, and optionally the data root (default: the
CLI's). The same sampler and schedule over three copies of the graph's CSR --
``map`` (the store's read-only file mapping, what training uses), ``anon-huge`` (an anonymous
copy advised ``MADV_HUGEPAGE``) and ``anon-4k`` (an anonymous copy advised
``MADV_NOHUGEPAGE``) -- sampling-only epochs run round robin (epoch e of each, then e+1), one
warm-up; prints the median and every epoch, then the process's ``AnonHugePages``
(``/proc/self/smaps_rollup``) to show the huge pages were granted.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import mmap
import statistics
import time

import numpy as np

from twopgraph.bench.config import BenchSamplerConfig
from twopgraph.cli import build_parser
from twopgraph.graph.data import CSRGraph
from twopgraph.locality import make_scheduler
from twopgraph.pipeline.assemble import locality_for
from twopgraph.pipeline.loader import Loader
from twopgraph.sampler import make_sampler

ds, schedule, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
cfg = BenchSamplerConfig.from_args(build_parser().parse_args(
    ["bench", "sampler", "--dataset", ds, "--schedule", schedule,
     *(["--data-root", sys.argv[4]] if len(sys.argv) > 4 else [])]))
data = cfg.data.load()
cfg, _ = cfg.resolved_logged(data.num_nodes)
s = cfg.sampling
prep = locality_for(data, [schedule], cfg)
data = prep.data
parts = None if prep.clustering is None else prep.clustering.parts

def anon(a, huge):
    buf = mmap.mmap(-1, max(a.nbytes, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    buf.madvise(mmap.MADV_HUGEPAGE if huge else mmap.MADV_NOHUGEPAGE)
    out = np.frombuffer(buf, dtype=a.dtype, count=a.size).reshape(a.shape)
    out[:] = a
    return out

g = data.graph
variants = {"map": g,
            "anon-huge": CSRGraph(anon(np.asarray(g.indptr), True), anon(np.asarray(g.indices), True)),
            "anon-4k": CSRGraph(anon(np.asarray(g.indptr), False), anon(np.asarray(g.indices), False))}
print(type(g.indices), g.indices.dtype, g.indices.nbytes >> 20, "MiB", file=sys.stderr)
loaders = {}
for k, gr in variants.items():
    sm = make_sampler("neighbor", gr, s.fanouts, seed=0)
    sc = make_scheduler(schedule, data.train_idx, s.batch_size, seed=0, balance=s.balance,
                        labels=data.label, parts=parts)
    loaders[k] = Loader(sc, sm, threads=2)
times = {k: [] for k in variants}
for e in range(epochs + 1):
    for k, L in loaders.items():
        t = time.perf_counter(); L.sample_epoch(e); dt = time.perf_counter() - t
        if e: times[k].append(dt)
for k, v in times.items():
    print(f"{ds} {schedule} {k:10s} median {statistics.median(v):.3f}s  all {[round(x,3) for x in v]}")
print(open("/proc/self/smaps_rollup").read().split("AnonHugePages:")[1].split("\n")[0])
