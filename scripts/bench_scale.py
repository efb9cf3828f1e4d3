#!/usr/bin/env python
"""The cost ladder of papers-shaped graphs: every stage's wall time, memory and bytes written.

For each scale (``--scales``, fractions of ogbn-papers100M: default 1/64 and 1/16; 1/4 takes
about 40 GB of disk) it writes a papers-shaped graph in OGB's binary raw layout
(``twopgraph.datasets.papers.write_ogb_raw``: ``R/ogbn_papers100M/raw/data.npz`` ...) and runs, each
stage in a process of its own, measured from outside:

Every stage uses the store ``twopgraph train``'s default ``--store-dtype auto`` picks in its
cgroup (float16 features when float32 would exceed half the memory the process can fill):
with two stores, a stage that picked the other one ingested the dataset again (the 1/4
partition stage of an earlier ladder did, inside its figure).

* ``ingest``: ``load_dataset("ogbn-papers100M")`` -- raw files to store (its sub-stages
  ``symmetrise`` (CSR build) and ``validate`` (validation + fingerprint) come from the store's
  ``store.json`` ``ingest.seconds``);
* ``cluster``: the default clustering of ``twopgraph train`` (``--num-clusters 0``);
* ``renumber``: the cluster-contiguous store (clusters from the cache);
* ``partition``: ``twopgraph partition --num-parts 4``;
* ``train``: ``twopgraph train --epochs 1`` (defaults otherwise); ``epoch`` and ``eval``
  (exact evaluation) are its ``metrics.json`` figures.

With ``--cap-gib G`` every stage runs inside a cgroup v1 memory group of G GiB (page cache
included, reclaimable); the cgroup's peak, failures and OOM kills are reported too.

After each stage ``os.sync()`` writes back what it left dirty, timed apart as ``sync_s`` (not
in ``seconds``), so the next stage does not start during another's writeback.

Per stage: wall seconds, peak anonymous memory (``Pss_Anon`` summed over the process tree,
sampled every second from ``/proc/PID/smaps_rollup``), peak PSS, bytes written and bytes read
from storage (``/proc/PID/io`` ``write_bytes`` / ``read_bytes`` of the stage's processes: reads
are what missed the page cache). Between consecutive scales, the
growth exponent ``log(t2/t1) / log(E2/E1)`` in the directed edges. Writes ``OUT/scale.json``
and a log-log plot ``OUT/scale.png``.

    .venv/bin/python scripts/bench_scale.py --root /work/scale --scales 1/64,1/16
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_memory import MemCgroup, TreeMonitor  # noqa: E402

PY = sys.executable
STAGES = ("ingest", "cluster", "renumber", "partition", "train")


def _scale(text: str) -> float:
    if "/" in text:
        a, b = text.split("/")
        return int(a) / int(b)
    return float(text)


class IoMonitor:
    """Bytes written and read from storage by a process tree: ``write_bytes`` and
    ``read_bytes`` of every process seen, read until it exits (a process's counters are read
    one last time from its final sample). Reads count what missed the page cache."""

    def __init__(self, pid: int):
        from bench_memory import descendants, parent_ids
        self._desc, self._ppids = descendants, parent_ids
        self.pid = pid
        self.last: dict[int, int] = {}
        self.read: dict[int, int] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            for p in self._desc(self.pid, self._ppids()):
                try:
                    with open(f"/proc/{p}/io") as f:
                        for line in f:
                            if line.startswith("write_bytes:"):
                                self.last[p] = int(line.split()[1])
                            elif line.startswith("read_bytes:"):
                                self.read[p] = int(line.split()[1])
                except OSError:
                    pass
            self._stop.wait(0.2)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()

    @property
    def total(self) -> int:
        return sum(self.last.values())

    @property
    def total_read(self) -> int:
        return sum(self.read.values())


def run_stage(cmd: list[str], env: dict, cgroup_bytes: int | None = None,
              log_path: Path | None = None) -> dict:
    """Run ``cmd`` measured (optionally inside a memory cgroup); returns its figures."""
    t = time.perf_counter()
    out = open(log_path, "w") if log_path else subprocess.DEVNULL
    cg = MemCgroup(f"twopgraph-scale-{os.getpid()}-{time.monotonic_ns()}", cgroup_bytes) \
        if cgroup_bytes else None
    try:
        full = cg.wrap(cmd) if cg else cmd
        proc = subprocess.Popen(full, env=env, stdout=out, stderr=subprocess.STDOUT)
        # 1 s between samples: a read of smaps_rollup walks the page tables of every mapping,
        # and with a 1/4-scale store mapped, 0.2 s cost the monitor half a core
        with TreeMonitor(proc.pid, interval=1.0) as mem, IoMonitor(proc.pid) as io:
            rc = proc.wait()
        res = {"rc": rc, "seconds": round(time.perf_counter() - t, 2),
               "peak_anon_mib": round(mem.peak["pss_anon"], 1),
               "peak_pss_mib": round(mem.peak["pss"], 1),
               "written_mib": round(io.total / 2**20, 1),
               "read_mib": round(io.total_read / 2**20, 1)}
        # the dirty pages the stage left behind are written back before the next stage
        # starts, timed apart: otherwise the next stage's figure pays for this one's writes
        # (measured: the 1/16 cluster stage took 79 s right after ingestion, 34 s alone)
        t = time.perf_counter()
        os.sync()
        res["sync_s"] = round(time.perf_counter() - t, 2)
        if cg:
            res.update(cg.stats())
        return res
    finally:
        if cg:
            cg.remove()
        if log_path:
            out.close()


def one_scale(scale: float, work: Path, a, env: dict) -> dict:
    from twopgraph.datasets.papers import PapersSpec, write_ogb_raw
    spec = PapersSpec(scale=scale)
    root = work / f"papers-{scale:g}".replace("/", "_")
    folder = root / "ogbn_papers100M"
    logs = root / "logs"
    rec = {"scale": scale, "num_nodes": spec.num_nodes, "stages": {}}
    if not (folder / "RELEASE_v1.txt").is_file() or a.fresh:
        shutil.rmtree(root, ignore_errors=True)
        t = time.perf_counter()
        info = write_ogb_raw(spec, folder, compress=a.compress)
        rec["generate_s"] = round(time.perf_counter() - t, 1)
        print(f"[scale {scale:g}] wrote the raw layout in {rec['generate_s']} s", flush=True)
    else:
        import numpy as np
        with np.load(folder / "raw" / "data.npz") as z:
            info = {"num_edges": int(z["num_edges_list"][0])}
    logs.mkdir(parents=True, exist_ok=True)
    rec["num_edges"] = info["num_edges"]
    for stale in ("parts", "run") if a.reuse else ("stores", "clusters", "parts", "run"):
        shutil.rmtree(root / stale, ignore_errors=True)
    r = str(root)
    prelude = ("import sys, logging; logging.basicConfig(level=logging.INFO, format="
               "'%%(asctime)s %%(message)s'); sys.path.insert(0, %r); "
               "from twopgraph.datasets import load_dataset, resolve_store_dtype; "
               "from twopgraph.runtime.jit import configure_threading; configure_threading(); "
               "dt = resolve_store_dtype('auto', 'ogbn-papers100M', %r); "
               "d = load_dataset('ogbn-papers100M', data_root=%r, progress=False, "
               "store_dtype=dt); "
               % (str(ROOT), r, r))
    cluster = ("from twopgraph.config import TrainConfig; from twopgraph.pipeline.assemble import "
               "locality_for; cfg = TrainConfig.of(dataset='ogbn-papers100M', data_root=%r, "
               "schedule='locality', renumber=%s); cfg, _ = cfg.resolved(d.num_nodes); "
               "locality_for(d, ['locality'], cfg)")
    cmds = {
        "ingest": [PY, "-c", prelude],
        "cluster": [PY, "-c", prelude + cluster % (r, False)],
        "renumber": [PY, "-c", prelude + cluster % (r, True)],
        "partition": [PY, "-m", "twopgraph", "partition", "--dataset", "ogbn-papers100M",
                      "--data-root", r, "--num-parts", "4", "--out", str(root / "parts")],
        "train": [PY, "-m", "twopgraph", "train", "--dataset", "ogbn-papers100M",
                  "--data-root", r, "--epochs", "1", "--out", str(root / "run"),
                  "--no-progress", *a.train_flags.split()],
    }
    for stage in a.stages.split(","):
        res = run_stage(cmds[stage], env, log_path=logs / f"{stage}.log",
                        cgroup_bytes=int(a.cap_gib * 2**30) if a.cap_gib else None)
        rec["stages"][stage] = res
        print(f"[scale {scale:g}] {stage}: {json.dumps(res)}", flush=True)
        if res["rc"] != 0:
            print(f"  failed; see {logs / f'{stage}.log'}", flush=True)
            break
        if stage == "ingest":
            stores = sorted((root / "stores").glob("ogbn-papers100M-*"))
            meta = json.loads((stores[0] / "store.json").read_text())
            sec = meta["ingest"]["seconds"]
            rec["ingest_detail"] = sec
            rec["store_mib"] = round(sum(int(v["bytes"]) for v in meta["arrays"].values())
                                     / 2**20, 1)
            rec["csr_entries"] = meta["num_edges"]
        if stage == "train":
            m = json.loads((root / "run" / "metrics.json").read_text())
            ep = m["epochs"][-1]
            rec["train_detail"] = {k: ep.get(k) for k in (
                "epoch_s", "eval_s", "sample_s", "load_s", "compute_s", "eval_scope",
                "eval_rows", "input_nodes_per_batch")}
            rec["train_detail"].update(test_acc=m.get("test_acc"), val_acc=m.get("val_acc"),
                                       schedule=m.get("schedule"))
    return rec


def exponents(recs: list[dict]) -> list[dict]:
    out = []
    for r1, r2 in zip(recs, recs[1:]):
        ratio = math.log(r2["num_edges"] / r1["num_edges"])
        row = {"from": r1["scale"], "to": r2["scale"]}
        for st in STAGES:
            a, b = r1["stages"].get(st), r2["stages"].get(st)
            if a and b and a["rc"] == 0 and b["rc"] == 0:
                row[st] = round(math.log(b["seconds"] / max(a["seconds"], 1e-3)) / ratio, 2)
                row[st + "_anon"] = round(math.log(max(b["peak_anon_mib"], 1) /
                                                   max(a["peak_anon_mib"], 1)) / ratio, 2)
        out.append(row)
    return out


def report(recs: list[dict], exps: list[dict]) -> None:
    print("\n| scale | vertices | directed edges | stage | wall s | peak anon MiB | "
          "peak PSS MiB | written MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for r in recs:
        for st, s in r["stages"].items():
            print(f"| {r['scale']:g} | {r['num_nodes']:,} | {r['num_edges']:,} | {st} | "
                  f"{s['seconds']} | {s['peak_anon_mib']} | {s['peak_pss_mib']} | "
                  f"{s['written_mib']} |")
        if "ingest_detail" in r:
            print(f"|  |  |  | ingest parts (s) | {json.dumps(r['ingest_detail'])} | | | |")
        if "train_detail" in r:
            print(f"|  |  |  | train parts | {json.dumps(r['train_detail'])} | | | |")
    print("\ngrowth exponents (time, anon memory) in the edges:")
    for e in exps:
        print(json.dumps(e))


def plot(recs: list[dict], path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for st in STAGES:
        pts = [(r["num_edges"], r["stages"][st]) for r in recs
               if st in r["stages"] and r["stages"][st]["rc"] == 0]
        if not pts:
            continue
        xs = [p[0] for p in pts]
        axes[0].loglog(xs, [p[1]["seconds"] for p in pts], "o-", label=st)
        axes[1].loglog(xs, [max(p[1]["peak_anon_mib"], 1) for p in pts], "o-", label=st)
    axes[0].set(xlabel="directed edges", ylabel="wall seconds", title="time per stage")
    axes[1].set(xlabel="directed edges", ylabel="peak anonymous MiB", title="memory per stage")
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, required=True, help="work folder (raw files, stores)")
    p.add_argument("--out", type=Path, default=None, help="results folder (default: --root)")
    p.add_argument("--scales", default="1/64,1/16", help="comma-separated papers fractions")
    p.add_argument("--stages", default=",".join(STAGES), help="stages to run, in order")
    p.add_argument("--compress", action="store_true", help="deflate data.npz's members")
    p.add_argument("--fresh", action="store_true", help="rewrite the raw files")
    p.add_argument("--reuse", action="store_true",
                   help="keep the stores and clusters of an earlier run at the same scale "
                        "(to rerun some stages: their figures then start from warm files); "
                        "the default starts every scale from the raw files")
    p.add_argument("--train-flags", default="", help="extra flags for the train stage")
    p.add_argument("--cap-gib", type=float, default=None,
                   help="run every stage inside a memory cgroup of this many GiB (root)")
    a = p.parse_args(argv)
    out = a.out or a.root
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    recs = [one_scale(_scale(s), a.root, a, env) for s in a.scales.split(",")]
    exps = exponents(recs)
    (out / "scale.json").write_text(json.dumps({"scales": recs, "exponents": exps}, indent=1))
    report(recs, exps)
    plot(recs, out / "scale.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
