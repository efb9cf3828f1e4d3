#!/usr/bin/env python
"""The numba neighbour sampler against DGL 1.1.3's CPU sampler on several graph families.

    bash scripts/setup_dgl_baseline.sh
    .venv/bin/python scripts/bench_sampler_families.py
    .venv/bin/python scripts/bench_sampler_families.py --families rmat:20:8,ba:1000000:6 \\
        --schedules random,locality --rounds 3

Families as ``scripts/bench_cluster.py`` makes them (``real:NAME``, ``synthetic:N:E``,
``rmat:SCALE[:EDGEFACTOR]``, ``rgg:N[:DEGREE]``, ``ba:N[:M]``) or ``store:NAME`` (a dataset of
``--data-root`` by name, e.g. ``store:synthetic-products``). Each graph is written once as an
``.npz`` (its CSR, one zero feature column, labels 0 unless the family has labels, its
training vertices; 1% each for validation and test) under ``--cache``.

Per family, ``--rounds`` rounds of: ``twopgraph bench sampler --json`` per schedule of
``--schedules`` (default ``random``: like for like with DGL's shuffled ``DataLoader``) and
``scripts/dgl_baseline.py --mode sample --json`` in the DGL venv, each in its own process,
one after the other, the same fanouts (default 15,10,5), batch size (1024) and ``--threads``.
Each process reports the median of ``--sample-epochs`` sampling-only epochs after a warm-up;
the table gives the median over rounds and ``speedup`` = DGL's random epoch / twopgraph's
(above 1: twopgraph is faster), with the spread (min-max) of the per-round ratios.
``--json PATH`` writes everything.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

from bench_cluster import family_graph  # noqa: E402
from bench_vs_dgl import dgl_python, run_json  # noqa: E402

DEFAULT_FAMILIES = "store:synthetic-products,rmat:20:8,rgg:1000000:12,ba:1000000:6"


def family_npz(spec: str, cache: Path) -> str:
    """The ``.npz`` (or, for ``store:NAME``, the dataset name) of family ``spec``."""
    if spec.startswith("store:"):
        return spec.split(":", 1)[1]
    out = cache / (spec.replace(":", "_").replace("/", "_") + ".npz")
    if out.is_file():
        return str(out)
    folder = family_graph(spec, cache)
    indptr = np.load(folder / "indptr.npy")
    n = indptr.shape[0] - 1
    train = np.load(folder / "train_idx.npy")
    label = (np.load(folder / "label.npy") if (folder / "label.npy").is_file()
             else np.zeros(n, dtype=np.int64))
    rest = np.setdiff1d(np.arange(n), train)
    pick = np.random.default_rng(2).permutation(rest)[: 2 * max(1, n // 100)]
    half = pick.shape[0] // 2
    tmp = out.with_suffix(".tmp.npz")
    np.savez(tmp, indptr=indptr, indices=np.load(folder / "indices.npy").astype(np.int64),
             feat=np.zeros((n, 1), dtype=np.float32), label=label, train_idx=train,
             val_idx=np.sort(pick[:half]), test_idx=np.sort(pick[half:]))
    os.replace(tmp, out)
    return str(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--families", default=DEFAULT_FAMILIES)
    p.add_argument("--schedules", default="random")
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sample-epochs", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2, help="rounds of every side, interleaved")
    p.add_argument("--data-root", default=None)
    p.add_argument("--cache", default="/tmp/twopgraph-bench-cluster")
    p.add_argument("--dgl-venv", default=os.environ.get("DGL_VENV", str(ROOT / ".venv-dgl")))
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    cache = Path(a.cache)
    cache.mkdir(parents=True, exist_ok=True)
    dgl = dgl_python(a.dgl_venv, "bench_sampler_families")
    common = ["--fanouts", a.fanouts, "--batch-size", str(a.batch_size),
              "--threads", str(a.threads)]
    rows = []
    for spec in [f for f in a.families.split(",") if f]:
        ds = family_npz(spec, cache)
        root = ["--data-root", a.data_root] if a.data_root else []
        runs = {s: [] for s in a.schedules.split(",")}
        runs["dgl"] = []
        dgl_npz = ds
        if spec.startswith("store:"):  # DGL reads an .npz: export the store once
            info = run_json([sys.executable, "-m", "twopgraph", "info", "--dataset", ds,
                             *root, "--json"])
            dgl_npz = str(cache / f"{ds}.npz")
            if not Path(dgl_npz).is_file():
                from twopgraph.datasets import load_dataset
                from twopgraph.store.npz import export_npz
                export_npz(load_dataset(info["store"], progress=False), dgl_npz)
        for r in range(a.rounds):
            for s in runs:
                if s == "dgl":
                    rec = run_json([dgl, str(ROOT / "scripts" / "dgl_baseline.py"), "--npz",
                                    dgl_npz, "--mode", "sample", "--sample-epochs",
                                    str(a.sample_epochs), *common, "--json"])
                else:
                    rec = run_json([sys.executable, "-m", "twopgraph", "bench", "sampler",
                                    "--dataset", ds, *root, "--schedule", s, "--epochs",
                                    str(a.sample_epochs), "--warmup", "1", *common, "--json"])
                runs[s].append(rec)
        dgl_s = [x["sample_epoch_s"] for x in runs["dgl"]]
        for s, recs in runs.items():
            if s == "dgl":
                continue
            ours = [x["sample_epoch_s"] for x in recs]
            ratios = [d / o for d, o in zip(dgl_s, ours)]
            rows.append({"family": spec, "schedule": s,
                         "num_nodes": runs["dgl"][0]["num_nodes"],
                         "num_edges": runs["dgl"][0]["num_edges"],
                         "twopgraph_epoch_s": statistics.median(ours),
                         "dgl_random_epoch_s": statistics.median(dgl_s),
                         "speedup": statistics.median(dgl_s) / statistics.median(ours),
                         "speedup_min": min(ratios), "speedup_max": max(ratios),
                         "vs_dgl_random": statistics.median(ours) / statistics.median(dgl_s),
                         "input_nodes_per_batch": recs[-1]["input_nodes_per_batch"],
                         "dgl_input_nodes_per_batch": runs["dgl"][-1]["input_nodes_per_batch"],
                         "rounds": a.rounds, "runs": {"twopgraph": recs, "dgl": runs["dgl"]}})
    print("| family | N | E | schedule | twopgraph s | DGL random s | speedup (min-max) |")
    print("|---|---:|---:|---|---:|---:|---|")
    for r in rows:
        print(f"| {r['family']} | {r['num_nodes']:,} | {r['num_edges']:,} | {r['schedule']} | "
              f"{r['twopgraph_epoch_s']:.3f} | {r['dgl_random_epoch_s']:.3f} | "
              f"{r['speedup']:.2f}x ({r['speedup_min']:.2f}-{r['speedup_max']:.2f}) |")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
