"""Data-parallel training over self-dependence partitions for P = 1, 2, 4, 8 workers.

For each P: partition the dataset (``twopgraph partition``: wall time, peak memory of that
process, replication factor, edge cut), then train on it with P torchrun workers
(``twopgraph train --partitions DIR --nproc P``) and read its ``metrics.json``: training vertices
per rank, input nodes per batch (per rank and step), feature rows and bytes per epoch, the
remote counters, epoch time, test accuracy, each part's representation (local / global) and
the ranks' summed peak PSS (``peak_pss_mib_total``: the store's shared maps counted once).
``--baseline`` adds a single-process run (``twopgraph train``) with the same global batch size and
epochs.

Timings depend on the machine: with fewer cores than workers (e.g. 8 CPU workers on 2 cores)
the epoch times say little; replication factor, rows, bytes, remote counters and accuracy hold
anywhere. Each run is a subprocess, so peak memory is that of the run alone.

    .venv/bin/python scripts/bench_dist.py --dataset synthetic-small --parts 1,2,4,8 \\
        --epochs 2 --baseline --out runs/bench_dist
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def run_measured(cmd: list[str]) -> tuple[float, float, int]:
    """Run ``cmd``; returns (wall seconds, peak RSS MiB of the process tree's largest
    process, exit code)."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - t, usage.ru_maxrss / 1024.0, proc.returncode


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="synthetic-small")
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--parts", default="1,2,4,8", help="comma-separated worker counts")
    ap.add_argument("--hops", type=int, default=None, help="default: the number of layers")
    ap.add_argument("--fanouts", default="15,10,5")
    ap.add_argument("--batch-size", type=int, default=1024, help="global batch size")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--baseline", action="store_true", help="also a single-process run")
    ap.add_argument("--skip-train", action="store_true", help="partition only")
    ap.add_argument("--out", default="runs/bench_dist")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    hops = a.hops if a.hops is not None else len(a.fanouts.split(","))
    tw = [sys.executable, "-m", "twopgraph"]
    data_args = ["--dataset", a.dataset] + (["--data-root", a.data_root] if a.data_root else [])
    train_args = ["--fanouts", a.fanouts, "--batch-size", str(a.batch_size), "--epochs",
                  str(a.epochs), "--device", a.device, "--no-progress", "--eval-every", "0"]
    rows = []
    if a.baseline and not a.skip_train:
        run = out / "single"
        wall, rss, rc = run_measured(tw + ["train", *data_args, *train_args, "--out", str(run),
                                           "--overwrite"])  # a rerun replaces the last one
        m = json.loads((run / "metrics.json").read_text()) if rc == 0 else {}
        ep = m.get("epochs", [{}])[-1]
        rows.append({"P": "single", "test_acc": m.get("test_acc"), "train_wall_s": wall,
                     "epoch_s": ep.get("epoch_s"),
                     "input_nodes_per_batch": ep.get("input_nodes_per_batch"),
                     "feature_rows": ep.get("feature_rows"), "h2d_bytes": ep.get("h2d_bytes"),
                     "train_peak_rss_mib": rss, "rc": rc})
    for p in [int(x) for x in a.parts.split(",")]:
        pdir = out / f"parts-{p}"
        wall, rss, rc = run_measured(tw + ["partition", *data_args, "--num-parts", str(p),
                                           "--hops", str(hops), "--out", str(pdir), "--force"])
        if rc != 0:
            rows.append({"P": p, "rc": rc})
            continue
        meta = json.loads((pdir / "meta.json").read_text())
        row = {"P": p, "hops": hops, "partition_s": wall, "partition_peak_rss_mib": rss,
               "replication_factor": meta["replication_factor"],
               "edge_cut_fraction": meta["edge_cut_fraction"],
               "train_per_rank": [q["num_train"] for q in meta["parts"]],
               "representation": [q["representation"] for q in meta["parts"]],
               "vertices_per_rank": [q["num_nodes"] for q in meta["parts"]]}
        if not a.skip_train:
            run = out / f"train-{p}"
            wall, rss, rc = run_measured(tw + ["train", "--partitions", str(pdir), "--nproc",
                                               str(p), *train_args, "--out", str(run),
                                               "--overwrite"])
            row.update(train_wall_s=wall, train_rc=rc)
            if rc == 0:
                m = json.loads((run / "metrics.json").read_text())
                ep = m["epochs"][-1]
                row.update(test_acc=m["test_acc"], epoch_s=ep["epoch_s"],
                           steps_per_epoch=ep["num_batches"] // p,
                           input_nodes_per_batch=ep["input_nodes_per_batch"],
                           feature_rows=ep["feature_rows"], h2d_bytes=ep["h2d_bytes"],
                           halo_input_rows=ep["halo_input_rows"],
                           remote_graph_requests=ep["remote_graph_requests"],
                           remote_feature_bytes=ep["remote_feature_bytes"],
                           train_peak_rss_mib=m["peak_rss_mib"],
                           train_peak_pss_mib=m.get("peak_pss_mib"),
                           train_peak_pss_mib_total=m.get("peak_pss_mib_total"))
        rows.append(row)
        print(json.dumps(row), flush=True)
    (out / "bench_dist.json").write_text(json.dumps(rows, indent=2) + "\n")
    cols = ["P", "partition_s", "partition_peak_rss_mib", "replication_factor",
            "representation", "edge_cut_fraction", "train_per_rank", "input_nodes_per_batch", "feature_rows",
            "halo_input_rows", "remote_graph_requests", "remote_feature_bytes", "epoch_s",
            "train_peak_pss_mib_total", "test_acc"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |")
    print(f"cores: {os.cpu_count()}; epoch times with more workers than cores say little")
    return 0


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return f"{min(v)}..{max(v)}" if len(v) > 1 else str(v[0])
    return str(v)


if __name__ == "__main__":
    raise SystemExit(main())
