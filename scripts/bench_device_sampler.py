#!/usr/bin/env python
"""The device sampler (torch ops, ``--sampler-device cuda``) against the numba sampler, run on
this machine's torch device (CPU here): training accuracy over seeds and sampling throughput.

    .venv/bin/python scripts/bench_device_sampler.py --dataset synthetic-small --seeds 0,1,2
    .venv/bin/python scripts/bench_device_sampler.py --dataset ../shared/datasets/cora.npz

For each seed, the same configuration is trained twice (``neighbor`` and ``device`` sampler;
same scheduler, model initialisation and hyperparameters) and evaluated exactly; the table
gives both test accuracies, their difference, and the sampling time per batch of each
sampler. The two samplers run the same algorithm on the same random stream, so their batches
(and, on the same device, the trained models) are expected to be identical.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from twopgraph.config import TrainConfig  # noqa: E402
from twopgraph.inference import accuracy, layerwise_inference
from twopgraph.pipeline.assemble import eval_features, locality_for, make_loader
from twopgraph.pipeline.epoch import train_epoch
from twopgraph.run.checkpoint import build_training
from twopgraph.sampler import make_sampler  # noqa: E402


def run(cfg: TrainConfig, data, parts, sampler_name: str, device: str) -> tuple[float, float]:
    """Test accuracy after ``cfg.run.epochs`` epochs and the mean sampling seconds per batch."""
    s = cfg.sampling
    options = {"device": device} if sampler_name == "device" else {}
    sampler = make_sampler(sampler_name, data.graph, s.fanouts, seed=cfg.run.seed, **options)
    loader = make_loader(cfg, data, device, parts=parts, sampler=sampler)
    model, opt, _, _ = build_training(cfg, data, device)
    per_batch = []
    with loader.plan.applied():
        for e in range(cfg.run.epochs):
            rec = train_epoch(model, opt, loader, e, progress=False)
            per_batch.append(rec["sample_s"] / max(rec["num_batches"], 1))
        logits = layerwise_inference(model, loader.sampler, eval_features(data, loader),
                                     torch.device(device), cfg.run.eval_batch_edges)
    return accuracy(logits, loader.labels.cpu(), data.test_idx), statistics.median(per_batch)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", default="synthetic-small")
    p.add_argument("--data-root", default=None)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--schedule", default="locality")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu", help="torch device of both runs")
    a = p.parse_args(argv)
    seeds = [int(x) for x in a.seeds.split(",")]
    base = TrainConfig.of(dataset=a.dataset, data_root=a.data_root, fanouts=a.fanouts,
                          batch_size=a.batch_size, schedule=a.schedule, epochs=a.epochs,
                          threads=a.threads, device=a.device, progress=False).validate()
    data = base.data.load(progress=False)
    base, _ = base.resolved(data.num_nodes)  # --lr by graph size, as `twopgraph train`
    prep = locality_for(data, [a.schedule], base)
    parts = None if prep.clustering is None else prep.clustering.parts
    print(f"{data.name}: {data.num_nodes} vertices, fanouts {a.fanouts}, batch {a.batch_size}, "
          f"{a.schedule}, {a.epochs} epochs, device {a.device}")
    print(f"{'seed':>4} {'numba acc':>10} {'device acc':>11} {'diff pt':>8} "
          f"{'numba ms/batch':>15} {'device ms/batch':>16}")
    diffs = []
    for seed in seeds:
        cfg = TrainConfig.from_dict({**base.flat(), "seed": seed})
        t = time.perf_counter()
        acc_n, s_n = run(cfg, prep.data, parts, "neighbor", a.device)
        acc_d, s_d = run(cfg, prep.data, parts, "device", a.device)
        diffs.append(100 * (acc_d - acc_n))
        print(f"{seed:>4} {acc_n:>10.4f} {acc_d:>11.4f} {diffs[-1]:>+8.2f} {1e3 * s_n:>15.1f} "
              f"{1e3 * s_d:>16.1f}   ({time.perf_counter() - t:.0f} s)", flush=True)
    print(f"mean difference {np.mean(diffs):+.2f} points (max |diff| {np.max(np.abs(diffs)):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
