#!/usr/bin/env python
"""twopgraph against DGL 1.1.3 on the same .npz, fanouts, batch size and hyperparameters.

    bash scripts/setup_dgl_baseline.sh
    .venv/bin/python scripts/bench_vs_dgl.py --dataset synthetic-small --epochs 3

Each side runs in its own process, one after the other, with the same thread count:

- twopgraph: ``twopgraph bench sampler`` (sampling-only epochs) and ``twopgraph train``
  (training epochs, exact evaluation of the final model);
- DGL: ``scripts/dgl_baseline.py`` in the DGL venv (``NeighborSampler`` + ``DataLoader`` +
  ``SAGEConv``, or ``GraphConv`` with twopgraph's GCN normalisation for ``--model gcn``; exact
  layer-wise inference).

Both sides evaluate the final model only (``--eval-every 0``): the accuracies are the last
epoch's. ``scripts/recipes.py`` compares the default recipes with best-validation selection.

Prints a table of both sides and the ratio twopgraph / DGL (below 1 = twopgraph is faster /
smaller) for: sampling-only epoch (median of timed epochs after a warm-up), training epoch
(median of epochs after the first), input nodes per batch, test accuracy, peak RSS.
``--json PATH`` also writes everything as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_json(cmd: list[str], env=None) -> dict:
    """Run ``cmd``; its stdout's last line is one JSON object. Stderr passes through."""
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(f"bench_vs_dgl: command failed ({r.returncode}): {' '.join(cmd)}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def twopgraph_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "twopgraph", *args]


def add_side_by_side_args(p: argparse.ArgumentParser) -> None:
    """Flags every DGL-vs-twopgraph script shares: data, model, hyperparameters, DGL venv."""
    p.add_argument("--dataset", default="synthetic-small", help="name or .npz path")
    p.add_argument("--model", choices=["sage", "gcn"], default="sage")
    p.add_argument("--data-root", default=None)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=3, help="training epochs per side")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sample-epochs", type=int, default=3, help="timed sampling-only epochs")
    p.add_argument("--dgl-venv", default=os.environ.get("DGL_VENV", str(ROOT / ".venv-dgl")))
    p.add_argument("--json", default=None, help="write the results to this JSON file")


def dgl_python(venv: str, script: str) -> str:
    """The DGL venv's interpreter; exits with a one-line hint when the venv is missing."""
    py = Path(venv) / "bin" / "python"
    if not py.exists():
        raise SystemExit(f"{script}: no DGL venv at {venv}; run "
                         "scripts/setup_dgl_baseline.sh first")
    return str(py)


def write_json(path: str, obj) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(obj, indent=2) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_side_by_side_args(p)
    p.add_argument("--schedule", default="random",
                   help="twopgraph's seed schedule (default random: like-for-like with DGL's "
                        "shuffled DataLoader; locality = twopgraph's default)")
    p.add_argument("--mode", choices=["sample", "train", "both"], default="both")
    a = p.parse_args(argv)

    dgl_py = dgl_python(a.dgl_venv, "bench_vs_dgl")
    root = ["--data-root", a.data_root] if a.data_root else []
    info = run_json(twopgraph_cmd("info", "--dataset", a.dataset, "--json", *root))
    npz = info["path"]
    common = ["--fanouts", a.fanouts, "--batch-size", str(a.batch_size), "--seed", str(a.seed),
              "--threads", str(a.threads)]
    tp_only = ["--schedule", a.schedule]
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), NUMBA_NUM_THREADS=str(a.threads))
    res: dict = {"dataset": info["name"], "npz": npz, "args": vars(a), "twopgraph": {}, "dgl": {}}
    tp, dg = res["twopgraph"], res["dgl"]

    if a.mode in ("sample", "both"):
        s = run_json(twopgraph_cmd("bench", "sampler", "--dataset", npz, "--json", "--epochs",
                                   str(a.sample_epochs), "--warmup", "1", *common, *tp_only), env)
        tp.update(sample_epoch_s=s["sample_epoch_s"], seeds_per_s=s["seeds_per_s"],
                  input_nodes_per_batch=s["input_nodes_per_batch"])
        d = run_json([str(dgl_py), "scripts/dgl_baseline.py", "--npz", npz, "--mode", "sample",
                      "--sample-epochs", str(a.sample_epochs), "--json", *common], env)
        dg.update(sample_epoch_s=d["sample_epoch_s"], seeds_per_s=d["seeds_per_s"],
                  input_nodes_per_batch=d["input_nodes_per_batch"])
    if a.mode in ("train", "both"):
        hp = ["--model", a.model, "--epochs", str(a.epochs), "--hidden", str(a.hidden),
              "--lr", str(a.lr), "--dropout", str(a.dropout)]
        with tempfile.TemporaryDirectory() as tmp:
            out = str(Path(tmp) / "run")  # a fresh folder: train refuses one holding a run
            run_json(twopgraph_cmd("train", "--dataset", npz, "--out", out, "--no-progress",
                                   "--eval-every", "0", "--device", "cpu", *hp, *common,
                                   *tp_only), env)
            m = json.loads((Path(out) / "metrics.json").read_text())
        ep = [e["epoch_s"] for e in m["epochs"]]
        tp.update(train_epoch_s=statistics.median(ep[1:] or ep), train_epoch_s_all=ep,
                  test_acc=m["test_acc"], val_acc=m["val_acc"], peak_rss_mib=m.get("peak_rss_mib"),
                  time_split={k: statistics.median([e[k] for e in m["epochs"]])
                              for k in ("sample_s", "load_s", "compute_s")})
        tp.setdefault("input_nodes_per_batch", m["epochs"][-1]["input_nodes_per_batch"])
        d = run_json([str(dgl_py), "scripts/dgl_baseline.py", "--npz", npz, "--mode", "train",
                      "--json", *hp, *common], env)
        dg.update(train_epoch_s=d["train_epoch_s"], train_epoch_s_all=d.get("train_epoch_s_all"),
                  test_acc=d["test_acc"], val_acc=d["val_acc"], peak_rss_mib=d.get("peak_rss_mib"))
        dg.setdefault("input_nodes_per_batch", d["input_nodes_per_batch"])

    rows = ["sample_epoch_s", "seeds_per_s", "train_epoch_s", "input_nodes_per_batch",
            "test_acc", "val_acc", "peak_rss_mib"]
    res["ratio"] = {k: tp[k] / dg[k] for k in rows
                    if isinstance(tp.get(k), (int, float)) and dg.get(k)}
    print(f"\n{res['dataset']}  model {a.model}  fanouts {a.fanouts}  batch {a.batch_size}  "
          f"threads {a.threads}  twopgraph schedule {a.schedule}")
    print(f"{'metric':<24}{'twopgraph':>14}{'DGL 1.1.3':>14}{'ratio':>10}")
    for k in rows:
        if k in tp or k in dg:
            fmt = (lambda v: "-" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v))
            r = res["ratio"].get(k)
            print(f"{k:<24}{fmt(tp.get(k)):>14}{fmt(dg.get(k)):>14}"
                  f"{'' if r is None else f'{r:.3f}x':>10}")
    if "test_acc" in tp and "test_acc" in dg:
        res["test_acc_diff_points"] = 100 * (tp["test_acc"] - dg["test_acc"])
        print(f"test accuracy difference: {res['test_acc_diff_points']:+.2f} points")
    if a.json:
        write_json(a.json, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
