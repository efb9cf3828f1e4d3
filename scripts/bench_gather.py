#!/usr/bin/env python
"""The feature-reading path alone under a memory cap: one epoch of sampled batches whose
input rows are gathered from a memory-mapped store, no model, per host row cache setting.

    .venv/bin/python scripts/bench_gather.py --dataset synthetic-papers:0.018 --cap-gib 1.0 \\
        --host-cache-gb 0,0.1,0.25 --json runs/bench_gather.json

Each setting runs in a fresh child process inside its own cgroup v1 memory group of
``--cap-gib`` (page cache included; the page cache is dropped first), after one uncapped run
of the same epoch (``--host-cache-gb 0``) as the reference. The child opens the dataset (a
store: ``twopgraph info`` makes it first, outside the timings), builds the training sampler
and random scheduler (``--fanouts``, ``--batch-size``), the plain host feature source with
read-ahead on (what training uses for a table larger than memory) and, for a size > 0, a
host row cache of that many GiB ranked by ``--policy``; then times the epoch: sampling (1
worker ahead in a thread, prefetch 2, as training on 2 threads) and gathering every batch's
rows. Columns: epoch seconds and the ratio to the uncapped run, gather (load) seconds, rows
per batch, host cache rows and hit rate, the cgroup's peak.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

log = logging.getLogger("bench_gather")


def child(a) -> None:
    """One epoch in this process; prints one JSON line."""
    import numpy as np

    from twopgraph.cache import HostFeatures, PolicyContext, attach_host_cache
    from twopgraph.datasets import load_dataset
    from twopgraph.locality import make_scheduler
    from twopgraph.pipeline.loader import Loader
    from twopgraph.runtime.jit import configure_threading
    from twopgraph.sampler import make_sampler
    configure_threading()
    data = load_dataset(a.dataset, a.data_root, progress=False, store_dtype=a.store_dtype)
    fanouts = [int(x) for x in a.fanouts.split(",")]
    sampler = make_sampler("neighbor", data.graph, fanouts, seed=0)
    sched = make_scheduler("random", data.train_idx, a.batch_size, seed=0)
    src = HostFeatures(data.feat, readahead=True)
    ctx = PolicyContext(data.graph, data.train_idx, fanouts, a.batch_size, scheduler=sched,
                        sampler=sampler)
    t = time.perf_counter()
    rc = attach_host_cache(src, a.policy, ctx, gb=a.gb) if a.gb > 0 else None
    fill = time.perf_counter() - t
    loader = Loader(sched, sampler, src, threads=a.threads, prefetch=2)
    t = time.perf_counter()
    rows = 0
    for i, mb in enumerate(loader.epoch(0)):
        rows += int(mb.input_nodes.shape[0])
        if a.batches and i + 1 >= a.batches:
            break
    wall = time.perf_counter() - t
    s = loader.stats
    print(json.dumps({"epoch_s": wall, "load_s": s.load_s, "sample_s": s.sample_s,
                      "batches": s.num_batches, "rows_per_batch": rows / max(1, s.num_batches),
                      "host_cache_rows": rc.num_rows if rc else 0, "fill_s": fill,
                      "hit_rate": s.host_cache_hits / s.host_cache_lookups
                      if s.host_cache_lookups else None,
                      "readahead_ranges": s.readahead_ranges,
                      "feat_bytes": int(np.asarray(data.feat).nbytes)}), flush=True)


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="[bench_gather %(asctime)s] %(message)s",
                        datefmt="%H:%M:%S", stream=sys.stderr)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="synthetic-papers:0.018")
    p.add_argument("--data-root", default=str(ROOT / "runs" / "bench_gather" / "data"))
    p.add_argument("--cap-gib", type=float, required=True)
    p.add_argument("--host-cache-gb", default="0,0.25",
                   help="comma list of host row cache sizes (GiB; 0 = none), each run capped")
    p.add_argument("--policy", default="degree", help="cache policy ranking the cached rows")
    p.add_argument("--store-dtype", default="float32", help="store feature type (float16: "
                   "half the page cache)")
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=0, help="stop after this many (0 = epoch)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--gb", type=float, default=0.0, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        child(a)
        return 0
    from bench_memory import MemCgroup, Runner, drop_caches, print_table, twopgraph_cmd
    why = MemCgroup.probe()
    if why:
        p.error(f"{why}: this benchmark needs memory cgroups (root, cgroup v1)")
    out = Path(a.data_root).parent
    env = dict(os.environ, TWOPGRAPH_DATA=a.data_root)
    r = Runner(out / "logs", env, 1.0, commands=[])
    prep = r.run("prepare", twopgraph_cmd("info", "--dataset", a.dataset, "--data-root",
                                          a.data_root, "--store-dtype", a.store_dtype, "--json"))
    if prep["rc"] != 0:
        raise SystemExit(f"prepare failed: {prep.get('error')}")
    sizes = [float(x) for x in a.host_cache_gb.split(",") if x.strip()]
    rows = []
    base = [sys.executable, str(Path(__file__).resolve()), "--child", "--dataset", a.dataset,
            "--data-root", a.data_root, "--cap-gib", str(a.cap_gib), "--policy", a.policy,
            "--store-dtype", a.store_dtype,
            "--fanouts", a.fanouts, "--batch-size", str(a.batch_size), "--batches",
            str(a.batches), "--threads", str(a.threads)]
    for i, (gb, capped) in enumerate([(0.0, False)] + [(g, True) for g in sizes]):
        drop_caches()
        with MemCgroup(f"twopgraph-gather-{os.getpid()}-{i}",
                       int(a.cap_gib * 2**30) if capped else None) as cg:
            rec = r.run(f"{'capped' if capped else 'uncapped'}-{gb:g}", base + ["--gb", str(gb)],
                        cg)
        res = {}
        for line in reversed(rec["stdout"].splitlines()):
            if line.startswith("{"):
                res = json.loads(line)
                break
        rows.append({"capped": capped, "cap_gib": a.cap_gib if capped else None,
                     "host_cache_gb": gb, **res, "cgroup_peak_mib": rec.get("cgroup_peak_mib"),
                     "error": rec.get("error")})
    ref = rows[0].get("epoch_s")
    for row in rows[1:]:
        if ref and row.get("epoch_s"):
            row["ratio"] = row["epoch_s"] / ref
    print_table(f"{a.dataset} ({a.store_dtype} store): gather epoch, cap {a.cap_gib} GiB, "
                f"policy {a.policy}",
                [("cap_gib", "cap GiB"), ("host_cache_gb", "host cache GiB"),
                 ("epoch_s", "epoch s"), ("ratio", "/ uncapped"), ("load_s", "gather s"),
                 ("sample_s", "sample s"), ("rows_per_batch", "rows/batch"),
                 ("host_cache_rows", "cached rows"), ("hit_rate", "hit rate"),
                 ("fill_s", "fill s"), ("cgroup_peak_mib", "cgroup peak MiB"),
                 ("error", "error")], rows)
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({"args": vars(a), "rows": rows,
                                            "commands": r.commands}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
