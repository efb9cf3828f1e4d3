#!/usr/bin/env python
"""Scaling curve: sampling throughput (and epoch time) as the graph grows, twopgraph vs DGL.

    .venv/bin/python scripts/bench_scaling.py                       # default sizes, < 15 min on 2 cores
    .venv/bin/python scripts/bench_scaling.py --sizes 10k,100k,1m,2.5m --train --out runs/scaling

Graphs: ``twopgraph.datasets.synthetic`` with the ``synthetic-products`` spec scaled to N vertices
at the same average degree (edges = N x the preset's edges per vertex), the same mean community size
(at least 2 communities per class) and the same features/classes. The training fraction is the
preset's (8%), raised on small graphs so that an epoch has at least ``--min-batches`` batches
(fewer batches make seeds/s meaningless). Graphs are written once as ``.npz`` under
``--cache DIR`` (default ``datasets/scaling``) and reused while the generator version and the
spec match (a ``.spec.json`` sidecar).

Per size, each in its own process, one after the other (never concurrently):
- ``twopgraph bench sampler`` per schedule in ``--schedules`` (default ``random``: like for like
  with DGL's shuffled DataLoader; add ``locality`` for the METIS-cluster schedule);
- ``scripts/dgl_baseline.py --mode sample`` in the DGL venv;
- with ``--train``: ``twopgraph train`` (per schedule; ``locality`` with the ``layer`` cache,
  ``random`` without a cache) and ``dgl_baseline.py --mode train``, ``--train-epochs`` epochs,
  epoch time = median of the epochs after the first.

Writes ``OUT/scaling.csv`` (one row per size x system), ``OUT/scaling.png`` (log-log: seeds/s and,
with ``--train``, training epoch seconds vs vertices) and prints the table.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SIZES = "10k,30k,100k,300k,1m"
BASE = "synthetic-products"


def parse_size(s: str) -> int:
    s = s.strip().lower()
    mult = {"k": 1_000, "m": 1_000_000}.get(s[-1:], 1)
    v = float(s[:-1] if s[-1:] in "km" else s)
    return int(round(v * mult))


def size_name(n: int) -> str:
    if n >= 1_000_000 and n % 100_000 == 0:
        return f"{n / 1e6:g}m"
    if n >= 1_000 and n % 100 == 0:
        return f"{n / 1e3:g}k"
    return str(n)


def scaled_spec(n: int, batch_size: int, min_batches: int):
    from twopgraph.datasets.synthetic import SYNTHETIC_PRESETS
    base = SYNTHETIC_PRESETS[BASE]
    ratio = n / base.num_nodes
    num_edges = int(round(base.num_edges * ratio))
    comm = max(2 * base.num_classes, int(round(base.num_communities * ratio)))
    comm = min(comm, n // max(base.min_community_size, 1))
    train = min(0.5, max(base.train_frac, min_batches * batch_size / n))
    return replace(base, num_nodes=n, num_edges=num_edges, num_communities=comm,
                   train_frac=train, name=f"scaling-{size_name(n)}",
                   description=f"{BASE} scaled to {n} vertices (bench_scaling)")


def ensure_graph(n: int, cache: Path, batch_size: int, min_batches: int) -> Path:
    """Generate (or reuse) the scaled graph of ``n`` vertices; return its .npz path."""
    from twopgraph.datasets import load_synthetic
    spec = scaled_spec(n, batch_size, min_batches)
    path = cache / f"{spec.name}.npz"
    t = time.perf_counter()
    print(f"[bench_scaling] {spec.name}: {n} vertices, {spec.num_edges} edges, "
          f"{spec.num_communities} communities, train_frac {spec.train_frac:.3f}",
          file=sys.stderr, flush=True)
    load_synthetic(spec, path)  # generated unless cached from this very spec
    print(f"[bench_scaling] {spec.name} ready in {time.perf_counter() - t:.1f}s: {path}",
          file=sys.stderr, flush=True)
    return path


def run_json(cmd: list[str], env) -> dict | None:
    """Run ``cmd``; its stdout's last line is one JSON object. None (and a note) on failure."""
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    if r.returncode != 0:
        print(f"[bench_scaling] command failed ({r.returncode}); row left empty",
              file=sys.stderr, flush=True)
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])


def tp_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "twopgraph", *args]


FIELDS = ["num_nodes", "num_edges", "num_train", "system", "schedule", "seeds_per_s",
          "sample_epoch_s", "input_nodes_per_batch", "num_batches", "train_epoch_s",
          "test_acc", "peak_rss_mib", "prep_s"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default=DEFAULT_SIZES,
                   help=f"comma-separated vertex counts, k/m suffixes allowed (default "
                        f"{DEFAULT_SIZES}; the issue's full range: 10k,30k,100k,300k,1m,2.5m)")
    p.add_argument("--cache", default=str(ROOT / "datasets" / "scaling"),
                   help="folder of the generated .npz graphs")
    p.add_argument("--out", default="runs/scaling", help="output folder: scaling.csv, scaling.png")
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--min-batches", type=int, default=8,
                   help="raise the training fraction of small graphs to this many batches")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sample-epochs", type=int, default=2, help="timed sampling-only epochs")
    p.add_argument("--schedules", default="random", help="twopgraph schedules: random,locality")
    p.add_argument("--no-dgl", action="store_true", help="twopgraph only")
    p.add_argument("--train", action="store_true", help="also time training epochs")
    p.add_argument("--train-epochs", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--dgl-venv", default=os.environ.get("DGL_VENV", str(ROOT / ".venv-dgl")))
    a = p.parse_args(argv)
    try:
        sizes = sorted({parse_size(s) for s in a.sizes.split(",") if s.strip()})
    except ValueError:
        p.error(f"--sizes: cannot parse {a.sizes!r}")
    if not sizes or min(sizes) < 1000:
        p.error("--sizes: need vertex counts >= 1000")
    schedules = [s.strip() for s in a.schedules.split(",") if s.strip()]
    dgl_py = Path(a.dgl_venv) / "bin" / "python"
    use_dgl = not a.no_dgl
    if use_dgl and not dgl_py.exists():
        p.error(f"no DGL venv at {a.dgl_venv} (scripts/setup_dgl_baseline.sh), or pass --no-dgl")

    cache, out = Path(a.cache), Path(a.out)
    cache.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads),
               NUMBA_NUM_THREADS=str(a.threads), TWOPGRAPH_DATA=str(cache))
    common = ["--fanouts", a.fanouts, "--batch-size", str(a.batch_size), "--seed", str(a.seed),
              "--threads", str(a.threads)]
    rows: list[dict] = []
    csv_path = out / "scaling.csv"

    def flush():
        with open(csv_path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)

    for n in sizes:
        npz = ensure_graph(n, cache, a.batch_size, a.min_batches)
        import numpy as np
        with np.load(npz) as z:
            meta = {"num_nodes": int(z["indptr"].shape[0] - 1),
                    "num_edges": int(z["indices"].shape[0]),
                    "num_train": int(z["train_idx"].shape[0])}
        for sched in schedules:
            row = dict(meta, system="twopgraph", schedule=sched)
            t = time.perf_counter()
            s = run_json(tp_cmd("bench", "sampler", "--dataset", str(npz), "--json", "--epochs",
                                str(a.sample_epochs), "--warmup", "1", "--schedule", sched,
                                *common), env)
            if s:
                row.update(seeds_per_s=s["seeds_per_s"], sample_epoch_s=s["sample_epoch_s"],
                           input_nodes_per_batch=s.get("input_nodes_per_batch"),
                           num_batches=s.get("num_batches"),
                           prep_s=round(time.perf_counter() - t - s["sample_epoch_s"]
                                        * (a.sample_epochs + 1), 3))
            if a.train:
                cache_flags = ["--cache-policy", "layer" if sched == "locality" else "none"]
                with tempfile.TemporaryDirectory(prefix="bench_scaling_") as tmp:
                    r = run_json(tp_cmd("train", "--dataset", str(npz), "--out", tmp,
                                        "--no-progress", "--eval-every", "0", "--device", "cpu",
                                        "--epochs", str(a.train_epochs), "--hidden",
                                        str(a.hidden), "--schedule", sched, *cache_flags,
                                        *common), env)
                    mp = Path(tmp) / "metrics.json"
                    if r is not None and mp.is_file():
                        m = json.loads(mp.read_text())
                        ep = [e["epoch_s"] for e in m["epochs"]]
                        row.update(train_epoch_s=statistics.median(ep[1:] or ep),
                                   test_acc=m.get("test_acc"), peak_rss_mib=m.get("peak_rss_mib"))
            rows.append(row)
            flush()
        if use_dgl:
            row = dict(meta, system="dgl", schedule="random")
            mode = "both" if a.train else "sample"
            d = run_json([str(dgl_py), "scripts/dgl_baseline.py", "--npz", str(npz), "--mode",
                          mode, "--sample-epochs", str(a.sample_epochs), "--epochs",
                          str(a.train_epochs), "--hidden", str(a.hidden), "--json", *common], env)
            if d:
                row.update(seeds_per_s=d.get("seeds_per_s"), sample_epoch_s=d.get("sample_epoch_s"),
                           input_nodes_per_batch=d.get("input_nodes_per_batch"),
                           num_batches=d.get("num_batches"), train_epoch_s=d.get("train_epoch_s"),
                           test_acc=d.get("test_acc"), peak_rss_mib=d.get("peak_rss_mib"),
                           prep_s=d.get("load_s"))
            rows.append(row)
            flush()

    # table
    def f(v):
        return "-" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))
    cols = ["num_nodes", "system", "schedule", "seeds_per_s", "sample_epoch_s",
            "input_nodes_per_batch", "train_epoch_s", "peak_rss_mib"]
    print("  ".join(f"{c:>21}" for c in cols + ["seeds/s vs dgl"]))
    dgl_rate = {r["num_nodes"]: r.get("seeds_per_s") for r in rows if r["system"] == "dgl"}
    for r in rows:
        ratio = ""
        if r["system"] != "dgl" and r.get("seeds_per_s") and dgl_rate.get(r["num_nodes"]):
            ratio = f"{r['seeds_per_s'] / dgl_rate[r['num_nodes']]:.2f}x"
        print("  ".join(f"{f(r.get(c)):>21}" for c in cols) + f"  {ratio:>21}")
    print(f"wrote {csv_path}")

    # plot
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)
        return 0
    panels = [("seeds_per_s", "sampling seeds/s")]
    if a.train:
        panels.append(("train_epoch_s", "training epoch s (per seed: see CSV)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), squeeze=False)
    for ax, (key, title) in zip(axes[0], panels):
        for name in sorted({(r["system"], r["schedule"]) for r in rows}):
            pts = [(r["num_nodes"], r.get(key)) for r in rows
                   if (r["system"], r["schedule"]) == name and r.get(key)]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, marker="o", label=f"{name[0]} ({name[1]})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("vertices")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"{BASE} scaled, fanouts {a.fanouts}, batch {a.batch_size}, "
                 f"{a.threads} threads")
    fig.tight_layout()
    fig.savefig(out / "scaling.png", dpi=120)
    print(f"wrote {out / 'scaling.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
