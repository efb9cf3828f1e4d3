#!/usr/bin/env python
"""Neighbour vs LABOR sampling under the random and locality schedules, side by side.

    .venv/bin/python scripts/bench_sampling.py --datasets synthetic-products --seeds 0,1,2
    .venv/bin/python scripts/bench_sampling.py \\
        --datasets ../shared/datasets/cora.npz,../shared/datasets/amazon_photo.npz

Rows: {random, locality} x {``neighbor``, ``labor`` (LABOR-0, or LABOR-* with
``--labor-iterations``), ``labor+layer`` (``--labor-layer-dependency``), ``labor+batch``
(``--labor-batch-dependency K``)} per dataset. Columns, each from the CLI the user runs:

- ``input_nodes_per_batch``, ``sampled_edges_per_batch``, ``sample_epoch_s``: ``twopgraph bench
  sampler --json`` (median of ``--sample-epochs`` epochs after one warm-up);
- ``h2d_bytes``: the ``layer`` cache policy at cache ratio ``--cache-ratio`` (default 0.1) on
  one epoch's access stream, ``twopgraph bench cache`` (exact counts, no copies);
- ``epoch_s`` (mean training epoch, evaluation excluded) and ``test_acc`` (mean and spread
  over ``--seeds``): ``twopgraph train`` with its defaults otherwise (``--epochs``; 0 seeds
  = no training). ``vs_*`` columns are ratios to the ``neighbor`` row of the same schedule
  and to ``random`` + ``neighbor``.

Every run is a fresh process with ``--threads``; clusters come from the data root's cache,
so the first locality run of a dataset pays for them once (not in any figure). Writes
``OUT/sampling.csv``, ``OUT/sampling.json`` (every run's record) and prints a Markdown
table. ``--resume`` keeps the runs already in ``OUT/runs/``.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "twopgraph"]
SCHEDULES = ("random", "locality")


def variants(a) -> dict[str, list[str]]:
    """Sampler name -> its flags."""
    it = ["--labor-iterations", str(a.labor_iterations)]
    return {"neighbor": ["--sampler", "neighbor"],
            "labor": ["--sampler", "labor", *it],
            "labor+layer": ["--sampler", "labor", *it, "--labor-layer-dependency"],
            "labor+batch": ["--sampler", "labor", *it, "--labor-batch-dependency",
                            str(a.batch_dependency)]}


def run(cmd: list[str], out: Path, resume: bool) -> list[dict]:
    """The JSON lines ``cmd`` prints (its records), kept in ``out``; read back from ``out``
    instead of running when ``resume``."""
    if resume and out.exists():
        return json.loads(out.read_text())
    print("  $", " ".join(cmd[2:]), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        sys.exit(f"bench_sampling: {' '.join(cmd[2:])} failed ({p.returncode}):\n"
                 f"{p.stderr[-2000:]}")
    rec = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    _write(out, rec)
    return rec


def train_run(base: list[str], flags: list[str], seed: int, out: Path, a) -> dict:
    """One ``twopgraph train``; its ``metrics.json`` (kept as ``out``)."""
    if a.resume and out.exists():
        return json.loads(out.read_text())
    work = out.with_suffix("")
    cmd = [*CLI, "train", *base, *flags, "--seed", str(seed), "--out", str(work),
           "--overwrite", "--no-progress"]
    if a.epochs is not None:
        cmd += ["--epochs", str(a.epochs)]
    print("  $", " ".join(cmd[2:]), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        sys.exit(f"bench_sampling: train failed ({p.returncode}):\n{p.stderr[-2000:]}")
    m = json.loads((work / "metrics.json").read_text())
    rec = {"test_acc": m["test_acc"], "val_acc": m["val_acc"],
           "epoch_s": statistics.mean(e["epoch_s"] for e in m["epochs"]),  # no eval
           "input_nodes_per_batch": statistics.mean(e["input_nodes_per_batch"]
                                                    for e in m["epochs"]),
           "schedule": m.get("schedule")}
    _write(out, rec)
    return rec


def _write(out: Path, rec) -> None:
    """``rec`` as JSON at ``out``, atomically (a killed run leaves no half record that
    ``--resume`` would read)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(rec))
    tmp.replace(out)


def measure(ds: str, a) -> list[dict]:
    """Every schedule x variant of dataset ``ds``: one row each."""
    name = Path(ds).stem if ds.endswith(".npz") else ds
    if ds.endswith(".npz"):  # the runs start in the repository root
        ds = str(Path(ds).resolve())
    base = ["--dataset", ds, "--threads", str(a.threads)]
    if a.data_root:
        base += ["--data-root", a.data_root]
    if a.fanouts:
        base += ["--fanouts", a.fanouts]
    if a.batch_size:
        base += ["--batch-size", str(a.batch_size)]
    runs = Path(a.out) / "runs" / name
    rows = []
    for schedule in a.schedule_list:
        for var, flags in variants(a).items():
            if var not in a.sampler_list:
                continue
            tag = f"{schedule}-{var}"
            sflags = [*flags, "--schedule", schedule]
            s = run([*CLI, "bench", "sampler", *base, *sflags, "--epochs",
                     str(a.sample_epochs), "--warmup", "1", "--json"],
                    runs / f"{tag}-sampler.json", a.resume)[-1]
            c = run([*CLI, "bench", "cache", *base, *flags, "--schedules", schedule,
                     "--policies", "layer", "--ratios", str(a.cache_ratio),
                     "--out", str(runs / f"{tag}-cache"), "--json"],
                    runs / f"{tag}-cache.json", a.resume)
            c = next(r for r in c if r["policy"] == "layer")
            row = {"dataset": name, "schedule": schedule, "sampler": var,
                   "fanouts": ",".join(map(str, s["fanouts"])), "batch_size": s["batch_size"],
                   "input_nodes_per_batch": s["input_nodes_per_batch"],
                   "sampled_edges_per_batch": s["sampled_edges_per_batch"],
                   "sample_epoch_s": s["sample_epoch_s"], "h2d_bytes": c["h2d_bytes"],
                   "hit_rate": c["hit_rate"]}
            trains = [train_run(base, sflags, seed, runs / f"{tag}-train-{seed}.json", a)
                      for seed in a.seed_list]
            if trains:
                accs = [t["test_acc"] for t in trains]
                row.update(epoch_s=statistics.mean(t["epoch_s"] for t in trains),
                           test_acc=statistics.mean(accs),
                           test_acc_sd=statistics.stdev(accs) if len(accs) > 1 else 0.0,
                           seeds=len(accs))
            rows.append(row)
    by = {(r["schedule"], r["sampler"]): r for r in rows}
    for r in rows:
        same, base_row = by[(r["schedule"], "neighbor")], by.get(("random", "neighbor"), {})
        for k in ("input_nodes_per_batch", "sampled_edges_per_batch", "h2d_bytes",
                  "sample_epoch_s", "epoch_s"):
            if k in r and r.get(k) is not None and same.get(k):
                r[f"{k}_vs_neighbor"] = r[k] / same[k]
        if base_row.get("input_nodes_per_batch"):
            r["input_vs_random_neighbor"] = (r["input_nodes_per_batch"]
                                             / base_row["input_nodes_per_batch"])
        if "test_acc" in r:
            r["acc_vs_neighbor_pt"] = 100.0 * (r["test_acc"] - same["test_acc"])
    return rows


def markdown(rows: list[dict]) -> str:
    cols = [("dataset", "dataset"), ("schedule", "schedule"), ("sampler", "sampler"),
            ("input_nodes_per_batch", "inputs/batch"), ("input_nodes_per_batch_vs_neighbor",
                                                        "vs nbr"),
            ("input_vs_random_neighbor", "vs rnd+nbr"), ("sampled_edges_per_batch",
                                                         "edges/batch"),
            ("sample_epoch_s", "sample s"), ("h2d_bytes_vs_neighbor", "h2d vs nbr"),
            ("epoch_s", "epoch s"), ("epoch_s_vs_neighbor", "epoch vs nbr"),
            ("test_acc", "test acc"), ("acc_vs_neighbor_pt", "acc pt vs nbr")]

    def fmt(v):
        if isinstance(v, float):
            return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}" if abs(v) < 1 else f"{v:.4g}"
        return "" if v is None else str(v)
    lines = ["| " + " | ".join(h for _, h in cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(k)) for k, _ in cols) + " |" for r in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", default="synthetic-products",
                   help="comma-separated dataset names or .npz paths")
    p.add_argument("--data-root", default=None)
    p.add_argument("--fanouts", default=None, help="default: twopgraph's by graph size")
    p.add_argument("--batch-size", type=int, default=None, help="default: twopgraph's")
    p.add_argument("--labor-iterations", type=int, default=0)
    p.add_argument("--batch-dependency", type=int, default=16,
                   help="K of the labor+batch rows (--labor-batch-dependency)")
    p.add_argument("--samplers", default="neighbor,labor,labor+layer,labor+batch",
                   help="rows to run, of: neighbor, labor, labor+layer, labor+batch "
                        "(neighbor is required: the ratios' base)")
    p.add_argument("--schedules", default=",".join(SCHEDULES),
                   help="schedules to run, of: random, locality (the vs rnd+nbr column needs "
                        "random)")
    p.add_argument("--cache-ratio", type=float, default=0.1)
    p.add_argument("--sample-epochs", type=int, default=3)
    p.add_argument("--seeds", default="0,1,2", help="training seeds; '' = no training")
    p.add_argument("--epochs", type=int, default=None,
                   help="training epochs (default: twopgraph's by graph size)")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--out", default="bench-sampling")
    p.add_argument("--resume", action="store_true")
    a = p.parse_args(argv)
    a.seed_list = [int(x) for x in a.seeds.split(",") if x.strip()]
    a.sampler_list = [x.strip() for x in a.samplers.split(",") if x.strip()]
    a.schedule_list = [x.strip() for x in a.schedules.split(",") if x.strip()]
    if not a.schedule_list or set(a.schedule_list) - set(SCHEDULES):
        p.error(f"--schedules: choose from {', '.join(SCHEDULES)}")
    unknown = sorted(set(a.sampler_list) - set(variants(a)))
    if unknown or "neighbor" not in a.sampler_list:
        p.error(f"--samplers: {'unknown ' + str(unknown) if unknown else 'needs neighbor'}; "
                f"choose from {', '.join(variants(a))} (neighbor included: the ratios' base)")
    rows = []
    for ds in [d for d in a.datasets.split(",") if d]:
        print(f"== {ds}", file=sys.stderr, flush=True)
        rows += measure(ds, a)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(out / "sampling.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    (out / "sampling.json").write_text(json.dumps(rows, indent=1))
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
