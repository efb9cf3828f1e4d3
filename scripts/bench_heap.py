#!/usr/bin/env python
"""Training epochs with and without :class:`twopgraph.runtime.heap.BatchHeap`, back to back.

    .venv/bin/python scripts/bench_heap.py --datasets synthetic-small,synthetic-products \\
        --epochs 3 --rounds 1 --json runs/heap.json

For each dataset and round, ``twopgraph train`` runs twice in fresh processes, alternating
which goes first: ``on`` (the default: inside an epoch freed batch pages are reused) and
``off`` (``MALLOC_MMAP_MAX_=65536`` in the environment, glibc's own default, which makes
``BatchHeap`` step aside: every block of 1 MiB or more is mapped and unmapped per batch, as
before it existed). Same flags otherwise (``--schedule random --eval-every 0``, the graph's
default fanouts and hyper-parameters). Reported per side: the median training epoch over the
epochs after the first (``epoch_s``), ``compute_s`` of those epochs, the whole command's wall
time, page faults (minor, ``ru_minflt`` of the child), user and system CPU seconds, peak RSS
(``ru_maxrss``) and test accuracy; and ``on / off`` ratios. The two sides train identical
models: the accuracies must agree.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_side(dataset: str, side: str, epochs: int, data_root: str, threads: int) -> dict:
    env = dict(os.environ)
    env.pop("MALLOC_MMAP_MAX_", None)
    if side == "off":
        env["MALLOC_MMAP_MAX_"] = "65536"  # glibc's default value: BatchHeap steps aside
    with tempfile.TemporaryDirectory(prefix="bench-heap-") as out:
        cmd = [sys.executable, "-m", "twopgraph", "train", "--dataset", dataset,
               "--data-root", data_root, "--epochs", str(epochs), "--schedule", "random",
               "--eval-every", "0", "--no-progress", "--threads", str(threads),
               "--out", out]
        log = Path(out) / "train.log"
        t0 = time.perf_counter()
        with open(log, "wb") as f:
            proc = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
            _, status, ru = os.wait4(proc.pid, 0)  # this child's own rusage
        wall = time.perf_counter() - t0
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{dataset} {side}: exit {os.waitstatus_to_exitcode(status)}: "
                             f"{log.read_text()[-2000:]}")
        m = json.loads((Path(out) / "metrics.json").read_text())
    later = m["epochs"][1:] or m["epochs"]
    return {"side": side, "dataset": dataset,
            "epoch_s": statistics.median(e["epoch_s"] for e in later),
            "compute_s": statistics.median(e["compute_s"] for e in later),
            "epoch_s_all": [round(e["epoch_s"], 3) for e in m["epochs"]],
            "heap_trims": [e.get("heap_trims") for e in m["epochs"]],
            "wall_s": wall, "minor_faults": ru.ru_minflt, "user_s": ru.ru_utime,
            "system_s": ru.ru_stime, "peak_rss_mib": ru.ru_maxrss / 1024,
            "test_acc": m.get("test_acc")}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="synthetic-small,synthetic-products")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--rounds", type=int, default=1, help="on/off pairs per dataset")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--data-root", default=str(ROOT / "datasets"))
    p.add_argument("--json", default=None)
    a = p.parse_args()
    rows = []
    for ds in a.datasets.split(","):
        for r in range(a.rounds):
            order = ("on", "off") if r % 2 == 0 else ("off", "on")
            got = {s: run_side(ds, s, a.epochs, a.data_root, a.threads) for s in order}
            on, off = got["on"], got["off"]
            row = {"dataset": ds, "round": r, "on": on, "off": off,
                   "epoch_ratio": on["epoch_s"] / off["epoch_s"],
                   "wall_ratio": on["wall_s"] / off["wall_s"],
                   "fault_ratio": on["minor_faults"] / max(1, off["minor_faults"]),
                   "same_accuracy": on["test_acc"] == off["test_acc"]}
            rows.append(row)
            print(f"{ds} round {r}: epoch {on['epoch_s']:.2f} s on / {off['epoch_s']:.2f} s off "
                  f"= {row['epoch_ratio']:.3f}x; wall {on['wall_s']:.1f} / {off['wall_s']:.1f} s; "
                  f"faults {on['minor_faults']:,} / {off['minor_faults']:,}; system "
                  f"{on['system_s']:.1f} / {off['system_s']:.1f} s; test acc "
                  f"{on['test_acc']} / {off['test_acc']}", flush=True)
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
