#!/usr/bin/env python
"""The whole papers100M-layout pipeline under a memory cap, against the same run uncapped.

For a papers-shaped graph in OGB's binary raw layout (``scripts/make_papers.py``; written here
when absent) it runs, from a data root holding only the raw files (no store, no clusters),

    twopgraph train --dataset ogbn-papers100M --data-root R --epochs 1 [--train-flags]

once without a cap and once inside a cgroup v1 memory group of ``--cap-gib`` (the page cache
counts against it but is reclaimable), and prints, per run: exit code, wall seconds, the
ingestion stages (from the store's ``store.json``), the epoch and evaluation seconds and the
test accuracy (``metrics.json``), the cgroup's peak, failures and OOM kills, and the peak
anonymous memory and PSS of the process tree. Needs root (the cgroup). Writes
``OUT/capped.json``.

    .venv/bin/python scripts/bench_capped.py --scale 0.018 --cap-gib 1.5 --root /work/capped
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_scale import run_stage  # noqa: E402


def one_run(root: Path, cap: float | None, flags: list[str], env: dict, tag: str) -> dict:
    for sub in ("stores", "clusters", f"run-{tag}"):
        shutil.rmtree(root / sub, ignore_errors=True)
    cmd = [sys.executable, "-m", "twopgraph", "train", "--dataset", "ogbn-papers100M",
           "--data-root", str(root), "--epochs", "1", "--out", str(root / f"run-{tag}"),
           "--no-progress", *flags]
    res = run_stage(cmd, env, cgroup_bytes=None if cap is None else int(cap * 2**30),
                    log_path=root / f"train-{tag}.log")
    res["cap_gib"] = cap
    metrics = root / f"run-{tag}" / "metrics.json"
    if metrics.is_file():
        m = json.loads(metrics.read_text())
        ep = m["epochs"][-1] if m.get("epochs") else {}
        res.update(test_acc=m.get("test_acc"), val_acc=m.get("val_acc"),
                   schedule=m.get("schedule"), epoch_s=ep.get("epoch_s"),
                   eval_s=ep.get("eval_s"), eval_scope=ep.get("eval_scope"),
                   peak_rss_mib=m.get("peak_rss_mib"))
    stores = sorted((root / "stores").glob("ogbn-papers100M-*"))
    if stores and (stores[0] / "store.json").is_file():
        res["ingest_s"] = json.loads((stores[0] / "store.json").read_text())["ingest"]["seconds"]
    log = (root / f"train-{tag}.log").read_text(errors="replace").splitlines()
    res["log_tail"] = log[-3:]
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", default="0.018", help="papers fraction (0.018: 2M vertices)")
    p.add_argument("--cap-gib", type=float, required=True, help="memory cap of the capped run")
    p.add_argument("--root", type=Path, required=True, help="data root (raw files kept)")
    p.add_argument("--train-flags", default="", help="extra flags of both runs")
    p.add_argument("--only", choices=["capped", "uncapped"], default=None)
    a = p.parse_args(argv)
    from twopgraph.datasets.papers import PapersSpec, parse_preset, write_ogb_raw
    spec = PapersSpec(scale=parse_preset(f"synthetic-papers:{a.scale}").scale)
    folder = a.root / "ogbn_papers100M"
    if not (folder / "RELEASE_v1.txt").is_file():
        t = time.perf_counter()
        info = write_ogb_raw(spec, folder)
        print(f"wrote {info['num_nodes']:,} vertices, {info['num_edges']:,} edges in "
              f"{time.perf_counter() - t:.0f} s", flush=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    flags = a.train_flags.split()
    out = {"scale": spec.scale, "num_nodes": spec.num_nodes, "runs": {}}
    for tag, cap in (("uncapped", None), ("capped", a.cap_gib)):
        if a.only and a.only != tag:
            continue
        out["runs"][tag] = one_run(a.root, cap, flags, env, tag)
        print(tag, json.dumps(out["runs"][tag]), flush=True)
    runs = out["runs"]
    if len(runs) == 2 and all(r.get("test_acc") is not None for r in runs.values()):
        out["test_acc_difference"] = abs(runs["capped"]["test_acc"] - runs["uncapped"]["test_acc"])
        out["time_ratio"] = round(runs["capped"]["seconds"] / runs["uncapped"]["seconds"], 3)
    (a.root / "capped.json").write_text(json.dumps(out, indent=1))
    print(json.dumps({k: v for k, v in out.items() if k != "runs"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
