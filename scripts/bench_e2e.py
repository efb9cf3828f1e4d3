#!/usr/bin/env python
"""End to end, side by side: the same GraphSAGE trained by DGL 1.1.3 and by twopgraph.

    bash scripts/setup_dgl_baseline.sh            # once: the DGL venv (.venv-dgl)
    .venv/bin/python scripts/bench_e2e.py --dataset synthetic-small --epochs 3 \
        --json runs/e2e/synthetic-small.json

Three sides, same fanouts, batch size, hidden size, epochs, learning rate, dropout, seed and
thread count, each run in its own process(es), one after the other (never concurrently):

- ``dgl``: ``scripts/dgl_baseline.py --mode both`` in the DGL venv (``NeighborSampler`` +
  shuffled ``DataLoader`` + ``SAGEConv``; exact layer-wise inference);
- ``twopgraph`` (default configuration): ``--schedule locality --cache-policy layer``;
- ``twopgraph-random`` (DGL-equivalent configuration): ``--schedule random --cache-policy none``.

For each twopgraph side: ``twopgraph bench sampler`` (sampling-only epochs) then
``twopgraph train`` (training epochs; exact evaluation of the final model only).

Reported per side (metrics as docs/formats.md defines them):
  sample_epoch_s   sampling-only epoch, median of ``--sample-epochs`` timed epochs after 1 warm-up
  seeds_per_s      training seeds / sample_epoch_s
  train_epoch_s    training epoch, median of the epochs after the first (all in train_epoch_s_all)
  sample_s, load_s, compute_s
                   time split of a training epoch (median of the epochs after the first).
                   DGL: time in the DataLoader's next(), in feat[input_nodes], in forward +
                   backward + step (they add up to the epoch). twopgraph: its metrics.json
                   fields; sampling runs ahead in ``--threads`` worker threads and the
                   gather in the prefetch thread (``--prefetch`` > 0), so sample_s (summed
                   over workers) and load_s overlap compute_s and the three may add up to more
                   than the epoch.
  input_nodes_per_batch, feature_rows, hit_rate, transfer_ratio (twopgraph)
  peak_rss_mib     peak RSS of the training process (ru_maxrss; includes loading + evaluation)
  test_acc, val_acc
  wall_s           wall time of the side's processes (load, clustering, sampling, training, eval)
and the ratio side / DGL (below 1 = faster / smaller than DGL; for accuracies, the difference
in points). ``--json PATH`` writes everything as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from bench_vs_dgl import add_side_by_side_args, dgl_python, run_json, twopgraph_cmd, write_json  # noqa: E402

SIDES = {  # name -> twopgraph flags (None = DGL)
    "dgl": None,
    "twopgraph": ["--schedule", "locality", "--cache-policy", "layer"],
    "twopgraph-random": ["--schedule", "random", "--cache-policy", "none"],
}
ROWS = [  # (key, label, kind): kind "time" -> ratio, "acc" -> difference in points
    ("sample_epoch_s", "sampling-only epoch s", "time"),
    ("seeds_per_s", "sampling seeds/s", "rate"),
    ("train_epoch_s", "training epoch s", "time"),
    ("sample_s", "  split: sample s", "time"),
    ("load_s", "  split: load s", "time"),
    ("compute_s", "  split: compute s", "time"),
    ("input_nodes_per_batch", "input nodes / batch", "time"),
    ("hit_rate", "cache hit rate", "none"),
    ("transfer_ratio", "transfer ratio", "none"),
    ("peak_rss_mib", "peak RSS MiB", "time"),
    ("test_acc", "test acc", "acc"),
    ("val_acc", "val acc", "acc"),
    ("wall_s", "wall s (all of the side)", "time"),
]


def _median_after_first(xs: list[float]) -> float:
    return statistics.median(xs[1:] or xs)


def run_dgl(a, npz: str, common: list[str], hp: list[str], env, train: bool = True) -> dict:
    dgl_py = dgl_python(a.dgl_venv, "bench_e2e")
    t = time.perf_counter()
    d = run_json([dgl_py, "scripts/dgl_baseline.py", "--npz", npz,
                  "--mode", "both" if train else "sample",
                  "--sample-epochs", str(a.sample_epochs), "--json", *hp, *common], env)
    wall = time.perf_counter() - t
    out = {k: d.get(k) for k in ("sample_epoch_s", "sample_epoch_s_all", "seeds_per_s",
                                 "input_nodes_per_batch", "feature_rows", "num_batches",
                                 "train_epoch_s", "train_epoch_s_all", "test_acc", "val_acc",
                                 "train_acc", "peak_rss_mib", "load_s", "eval_s",
                                 "dgl_version", "torch_version")}
    out.update(d.get("time_split") or {})
    out["time_split_all"] = d.get("time_split_all")
    out["wall_s"] = wall
    return out


def run_twopgraph(a, npz: str, flags: list[str], common: list[str], hp: list[str], env,
                  train: bool = True) -> dict:
    sched = flags[flags.index("--schedule") + 1]
    t = time.perf_counter()
    s = run_json(twopgraph_cmd("bench", "sampler", "--dataset", npz, "--json", "--epochs",
                        str(a.sample_epochs), "--warmup", "1", "--schedule", sched, *common), env)
    out = {"sample_epoch_s": s["sample_epoch_s"], "seeds_per_s": s["seeds_per_s"],
           "sample_input_nodes_per_batch": s.get("input_nodes_per_batch"),
           "sample_epoch_s_all": s.get("sample_epoch_s_all", s.get("epoch_s_all")),
           "locality": s.get("locality")}
    if not train:
        out["wall_s"] = time.perf_counter() - t
        return out
    with tempfile.TemporaryDirectory(prefix="bench_e2e_") as tmp:
        run_json(twopgraph_cmd("train", "--dataset", npz, "--out", tmp, "--no-progress",
                        "--eval-every", "0", "--device", a.device, "--prefetch",
                        str(a.prefetch), *flags, *hp, *common), env)
        m = json.loads((Path(tmp) / "metrics.json").read_text())
    out["wall_s"] = time.perf_counter() - t
    eps = m["epochs"]
    timed = eps[1:] or eps
    out.update(train_epoch_s=_median_after_first([e["epoch_s"] for e in eps]),
               train_epoch_s_all=[e["epoch_s"] for e in eps],
               test_acc=m["test_acc"], val_acc=m["val_acc"], peak_rss_mib=m.get("peak_rss_mib"))
    for k in ("sample_s", "load_s", "compute_s", "input_nodes_per_batch", "hit_rate",
              "transfer_ratio"):
        vals = [e[k] for e in timed if isinstance(e.get(k), (int, float))]
        out[k] = statistics.median(vals) if vals else None
    out["feature_rows"] = timed[-1].get("feature_rows")
    out["time_split_all"] = [{k: e.get(k) for k in ("sample_s", "load_s", "compute_s")}
                             for e in eps]
    out["threads"] = m.get("threads")
    out["device"] = m.get("device")
    return out


def fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def print_table(res: dict) -> None:
    sides = [s for s in res["sides"] if res["sides"][s]]
    a = res["args"]
    print(f"\n{res['dataset']}  fanouts {a['fanouts']}  batch {a['batch_size']}  hidden "
          f"{a['hidden']}  epochs {a['epochs']}  lr {a['lr']}  threads {a['threads']}  "
          f"device {a['device']}")
    head = f"{'metric':<26}" + "".join(f"{s:>18}" for s in sides)
    others = [s for s in sides if s != "dgl"]
    if "dgl" in sides:
        head += "".join(f"{s + '/dgl':>22}" for s in others)
    print(head)
    for key, label, kind in ROWS:
        vals = [res["sides"][s].get(key) for s in sides]
        if all(v is None for v in vals):
            continue
        line = f"{label:<26}" + "".join(f"{fmt(v):>18}" for v in vals)
        if "dgl" in sides:
            for s in others:
                r = res["ratio"].get(s, {}).get(key)
                txt = "" if r is None else (f"{r:+.2f} pt" if kind == "acc" else f"{r:.3f}x")
                line += f"{txt:>22}"
        print(line)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_side_by_side_args(p)
    p.add_argument("--device", default="cpu", help="twopgraph's device (DGL runs on CPU)")
    p.add_argument("--prefetch", type=int, default=2, help="twopgraph's --prefetch")
    p.add_argument("--sides", default=",".join(SIDES),
                   help=f"comma-separated subset of {', '.join(SIDES)}")
    p.add_argument("--train-sides", default=None,
                   help="sides that also train (default: all of --sides); the others run only "
                        "the sampling-only epochs (e.g. the random side on a large graph, "
                        "where only its sampler figure is wanted)")
    a = p.parse_args(argv)
    sides = [s.strip() for s in a.sides.split(",") if s.strip()]
    bad = [s for s in sides if s not in SIDES]
    if bad or not sides:
        p.error(f"--sides: unknown {bad}; known: {', '.join(SIDES)}")
    train_sides = sides if a.train_sides is None else \
        [s.strip() for s in a.train_sides.split(",") if s.strip()]
    if set(train_sides) - set(sides):
        p.error(f"--train-sides must be a subset of --sides ({', '.join(sides)})")

    root = ["--data-root", a.data_root] if a.data_root else []
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads),
               NUMBA_NUM_THREADS=str(a.threads))
    if a.data_root:
        env["TWOPGRAPH_DATA"] = a.data_root
    info = run_json(twopgraph_cmd("info", "--dataset", a.dataset, "--json", *root), env)
    npz = info["path"]
    common = ["--fanouts", a.fanouts, "--batch-size", str(a.batch_size), "--seed", str(a.seed),
              "--threads", str(a.threads)]
    hp = ["--epochs", str(a.epochs), "--hidden", str(a.hidden), "--lr", str(a.lr),
          "--dropout", str(a.dropout)]
    res: dict = {"dataset": info.get("name", a.dataset), "npz": npz, "args": vars(a),
                 "sides": {s: {} for s in sides}, "ratio": {}}
    for s in sides:  # sequentially, each in its own process(es)
        train = s in train_sides
        if SIDES[s] is None:
            res["sides"][s] = run_dgl(a, npz, common, hp, env, train)
        else:
            res["sides"][s] = run_twopgraph(a, npz, SIDES[s], common, hp, env, train)
        res["sides"][s]["config"] = "dgl 1.1.3" if SIDES[s] is None else " ".join(SIDES[s])

    dg = res["sides"].get("dgl")
    if dg:
        for s in sides:
            if s == "dgl":
                continue
            tp, r = res["sides"][s], {}
            for key, _, kind in ROWS:
                x, y = tp.get(key), dg.get(key)
                if not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
                    continue
                if kind == "acc":
                    r[key] = 100.0 * (x - y)
                elif kind in ("time", "rate") and y:
                    r[key] = x / y
            res["ratio"][s] = r
    print_table(res)
    if dg:
        print("ratios: side / DGL (< 1 = faster or smaller; seeds/s > 1 = faster); "
              "accuracy: difference in points")
    if a.json:
        write_json(a.json, res)
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
