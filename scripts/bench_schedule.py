#!/usr/bin/env python
"""Random vs locality scheduling on one dataset: sampling cost, locality and accuracy.

    .venv/bin/python scripts/bench_schedule.py --dataset synthetic-products --acc-seeds 0
    .venv/bin/python scripts/bench_schedule.py --dataset ../shared/datasets/amazon_photo.npz \\
        --acc-epochs 20 --curve 8,32,72,144,288

Rows: ``random`` and ``locality``, each without and with renumbering. Columns: sampling-only
epoch (median of ``--sample-epochs`` after one warm-up epoch; the four rows run
round-robin, epoch by epoch, so load drift hits them alike), input nodes per batch, feature
rows per epoch, and test accuracy (mean over ``--acc-seeds`` seeds of ``--acc-epochs``
training epochs, exact evaluation of the final model; 0 seeds = skip). Also: the one-off
METIS + renumbering time (METIS run afresh, not from the cache), the DGL baseline's sampling
epoch (``scripts/dgl_baseline.py`` in ``.venv-dgl``, same fanouts, batch size and threads;
skipped with ``--no-dgl`` or without that venv), and with ``--curve K1,K2,...`` the
trade-off curve of the knob (number of clusters -> clusters per batch, input nodes per batch,
test accuracy). ``--json PATH`` writes everything.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from bench_vs_dgl import dgl_python, run_json, write_json  # noqa: E402

from twopgraph.config import TrainConfig
from twopgraph.datasets import (  # noqa: E402
    dataset_path,
    load_dataset,
    resolve_data_root,  # noqa: E402
)
from twopgraph.locality import (  # noqa: E402
    LocalityPrep,
    cluster_graph,
    default_num_clusters,
    make_scheduler,
    prepare_locality,
    renumber,
)
from twopgraph.pipeline.loader import Loader  # noqa: E402
from twopgraph.run.train import train  # noqa: E402
from twopgraph.sampler import NeighborSampler, parse_fanouts  # noqa: E402
from twopgraph.store.npz import export_npz  # noqa: E402


def sampling(data, prep, schedule, a, fanouts) -> dict:
    """One configuration alone (the knob curve); the table uses :func:`sampling_rows`."""
    return sampling_rows({"x": (prep, schedule)}, a, fanouts)["x"]


def sampling_rows(configs: dict, a, fanouts) -> dict:
    """Sampling-only epochs of every ``name -> (prep, schedule)``, run round-robin (epoch e of
    every row, then epoch e+1, ...) so that load drift on a shared machine hits all rows
    alike; the median of the ``a.sample_epochs`` epochs after one warm-up epoch."""
    runs = {}
    for name, (prep, schedule) in configs.items():
        parts = None if prep.clustering is None else prep.clustering.parts
        sched = make_scheduler(schedule, prep.data.train_idx, a.batch_size, seed=0,
                               parts=parts, labels=prep.data.label, balance=a.balance)
        loader = Loader(sched, NeighborSampler(prep.data.graph, fanouts, seed=0),
                        threads=a.threads)
        runs[name] = (loader, [], [None])
    for e in range(1 + a.sample_epochs):
        for name, (loader, times, last) in runs.items():
            t = time.perf_counter()
            last[0] = loader.sample_epoch(e)
            if e:
                times.append(time.perf_counter() - t)
    out = {}
    for name, (_, times, (stats,)) in runs.items():
        out[name] = {"sample_epoch_s": statistics.median(times),
                     "sample_epoch_s_all": [round(t, 3) for t in times],
                     "input_nodes_per_batch": stats.input_nodes_per_batch,
                     "feature_rows": stats.feature_rows, "num_batches": stats.num_batches}
    return out


def accuracy(data, a, schedule, renumber, num_clusters=0) -> dict:
    accs = []
    for seed in range(a.acc_seeds):
        with tempfile.TemporaryDirectory() as out:
            cfg = TrainConfig.of(dataset=data.name, data_root=a.data_root, fanouts=a.fanouts,
                              batch_size=a.batch_size, epochs=a.acc_epochs, seed=seed,
                              device="cpu", out=out, progress=False, eval_every=0,
                              schedule=schedule, renumber=renumber, num_clusters=num_clusters,
                              balance=a.balance, threads=a.threads)
            accs.append(train(cfg, data).test_acc)
    return {"test_acc": float(np.mean(accs)), "test_acc_all": accs} if accs else {}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", default="synthetic-small")
    p.add_argument("--data-root", default=None)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--num-clusters", type=int, default=0, help="0 = automatic")
    p.add_argument("--balance", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sample-epochs", type=int, default=2)
    p.add_argument("--acc-seeds", type=int, default=3, help="0 = no accuracy columns")
    p.add_argument("--acc-epochs", type=int, default=10)
    p.add_argument("--curve", default="", help="numbers of clusters for the knob's curve")
    p.add_argument("--no-dgl", action="store_true")
    p.add_argument("--dgl-venv", default=os.environ.get("DGL_VENV", str(ROOT / ".venv-dgl")))
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    # checked before the long runs: a missing venv is an error unless --no-dgl
    dgl_py = None if a.no_dgl else dgl_python(a.dgl_venv, "bench_schedule")
    fanouts = parse_fanouts(a.fanouts)

    data = load_dataset(a.dataset, a.data_root, progress=False)
    res: dict = {"dataset": data.name, "args": vars(a), "rows": {}}
    # one-off cost, METIS afresh (no cache)
    k = a.num_clusters or default_num_clusters(data.num_nodes, int(data.train_idx.shape[0]),
                                               a.batch_size)
    t = time.perf_counter()
    clustering = cluster_graph(data.graph, k, train_idx=data.train_idx)
    cluster_s = time.perf_counter() - t
    t = time.perf_counter()
    new, new_clustering, perm = renumber(data, clustering)
    prep = LocalityPrep(new, new_clustering, perm, cluster_s, time.perf_counter() - t)
    plain = LocalityPrep(data, clustering, None)
    res["one_off"] = prep.summary()
    # peak RSS of this process so far: the loaded dataset + METIS + renumbering
    res["one_off"]["peak_rss_gib"] = round(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    configs = {f"{schedule}{' +renumber' if renum else ''}": (pr, schedule)
               for schedule in ("random", "locality")
               for renum, pr in ((False, plain), (True, prep))}
    res["rows"] = sampling_rows(configs, a, fanouts)
    for name, row in res["rows"].items():
        schedule, renum = configs[name][1], name.endswith("+renumber")
        if renum == (schedule == "locality"):  # random as DGL does it, locality as default
            row.update(accuracy(data, a, schedule, renum, a.num_clusters))
        print(name, json.dumps(row), file=sys.stderr, flush=True)

    if dgl_py is not None:
        src = dataset_path(a.dataset, a.data_root)
        with tempfile.TemporaryDirectory(prefix="bench_schedule-") as tmp:
            if src is None or not src.is_file():  # a store (the presets): DGL reads a .npz
                src = export_npz(data, Path(tmp) / f"{data.name}.npz")
            env = dict(os.environ, OMP_NUM_THREADS=str(a.threads),
                       NUMBA_NUM_THREADS=str(a.threads))
            d = run_json([dgl_py, str(ROOT / "scripts" / "dgl_baseline.py"), "--npz", str(src),
                          "--mode", "sample", "--sample-epochs", str(a.sample_epochs), "--json",
                          "--fanouts", a.fanouts, "--batch-size", str(a.batch_size), "--seed",
                          "0", "--threads", str(a.threads)], env)
        res["dgl"] = {k: d[k] for k in ("sample_epoch_s", "input_nodes_per_batch")}

    if a.curve:
        res["curve"] = []
        for k in [int(x) for x in a.curve.split(",")]:
            pk = prepare_locality(data, batch_size=a.batch_size, num_clusters=k,
                                  cache_dir=resolve_data_root(a.data_root) / "clusters")
            row = {"num_clusters": k,
                   "clusters_per_batch": k * a.batch_size / data.train_idx.shape[0],
                   **sampling(data, pk, "locality", a, fanouts),
                   **accuracy(data, a, "locality", True, k)}
            res["curve"].append(row)
            print("curve", json.dumps(row), file=sys.stderr, flush=True)

    base = res["rows"]["random"]
    print(f"\n{data.name}  fanouts {a.fanouts}  batch {a.batch_size}  threads {a.threads}  "
          f"clusters {res['one_off'].get('num_clusters')}  "
          f"edge cut {res['one_off'].get('edge_cut')}")
    print(f"one-off METIS {res['one_off']['cluster_s']:.1f} s + renumbering "
          f"{res['one_off']['renumber_s']:.1f} s, peak RSS so far "
          f"{res['one_off']['peak_rss_gib']:.2f} GiB (dataset included)")
    print(f"{'schedule':<22}{'sample_epoch_s':>15}{'vs random':>10}{'vs DGL':>8}"
          f"{'inputs/batch':>14}{'vs random':>10}{'feature_rows':>14}{'test_acc':>10}")
    dgl_s = res.get("dgl", {}).get("sample_epoch_s")
    for name, r in res["rows"].items():
        acc = f"{r['test_acc']:.4f}" if "test_acc" in r else "-"
        vs_dgl = f"{r['sample_epoch_s'] / dgl_s:.2f}x" if dgl_s else "-"
        print(f"{name:<22}{r['sample_epoch_s']:>15.2f}"
              f"{r['sample_epoch_s'] / base['sample_epoch_s']:>9.2f}x{vs_dgl:>8}"
              f"{r['input_nodes_per_batch']:>14.0f}"
              f"{r['input_nodes_per_batch'] / base['input_nodes_per_batch']:>9.2f}x"
              f"{r['feature_rows']:>14}{acc:>10}")
    if "dgl" in res:
        print(f"{'DGL 1.1.3 (random)':<22}{dgl_s:>15.2f}{dgl_s / base['sample_epoch_s']:>9.2f}x"
              f"{'1.00x':>8}{res['dgl']['input_nodes_per_batch']:>14.0f}")
    for r in res.get("curve", []):
        acc = f"{r['test_acc']:.4f}" if "test_acc" in r else "-"
        print(f"curve: {r['num_clusters']:>6} clusters ({r['clusters_per_batch']:.1f}/batch)  "
              f"inputs/batch {r['input_nodes_per_batch']:.0f}  test_acc {acc}")
    if a.json:
        write_json(a.json, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
