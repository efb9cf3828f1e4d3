#!/usr/bin/env python
"""DGL GraphBolt baseline: sampling-only epochs of GraphBolt's CPU samplers (DGL 2.1).

Runs INSIDE the GraphBolt virtualenv (scripts/setup_graphbolt_baseline.sh: torch 2.1.2,
torchdata 0.7.1, dgl 2.1.0); needs only numpy, torch and dgl. It must not import twopgraph.

    $GRAPHBOLT_VENV/bin/python scripts/graphbolt_baseline.py --npz ../shared/datasets/cora.npz \
        --fanouts 15,10,5 --batch-size 1024 --sampler labor --json

One epoch = every training vertex once, in shuffled batches of --batch-size, each expanded by
GraphBolt's ``NeighborSampler`` (--sampler neighbor: uniform, without replacement) or
``LayerNeighborSampler`` (--sampler labor: LABOR-0, Balin & Catalyurek 2023; DGL 2.1 has no
importance-sampling iterations and no layer/batch dependency) with the seeds deduplicated
between hops, on the graph in GraphBolt's fused CSC form. No features are read.

Measurements (the names of twopgraph's ``bench sampling``):
  sample_epoch_s           median over --sample-epochs epochs (after 1 warm-up) of iterating
                           GraphBolt's DataLoader (num_workers=0): sampling + compaction
  sample_epoch_s_all       every timed epoch
  seeds_per_s              len(train_idx) / sample_epoch_s
  input_nodes_per_batch    mean |input_nodes| over the batches of the timed epochs
  sampled_edges_per_batch  mean edges of all the batch's sampled layers
  feature_rows             sum of |input_nodes| over one epoch (mean over the timed epochs)
  num_batches              batches per epoch
With --json exactly one JSON object is written to stdout; everything else goes to stderr.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dgl_baseline import load_arrays  # noqa: E402  (numpy only; imports no DGL)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--npz", required=True,
                   help="dataset .npz (or a twopgraph store folder) with indptr, indices, "
                        "train_idx")
    p.add_argument("--fanouts", default="15,10,5",
                   help="comma-separated, input layer first (DGL's order: the seeds' own "
                        "neighbours use the last)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--sampler", choices=["neighbor", "labor"], default="neighbor")
    p.add_argument("--sample-epochs", type=int, default=3,
                   help="timed sampling-only epochs (after 1 warm-up)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mode", choices=["sample"], default="sample",
                   help="only sampling-only epochs (the peer protocol's mode flag)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = p.parse_args(argv)
    try:
        args.fanouts = [int(x) for x in args.fanouts.split(",") if x.strip()]
    except ValueError:
        p.error(f"--fanouts: expected integers, got {args.fanouts!r}")
    if not args.fanouts or args.batch_size < 1 or args.sample_epochs < 1 or args.threads < 1:
        p.error("--fanouts must be non-empty; --batch-size, --sample-epochs and --threads "
                "must be positive")
    return args


def main(argv=None):
    args = parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ["MKL_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("DGLBACKEND", "pytorch")
    real_stdout, sys.stdout = sys.stdout, sys.stderr  # stdout holds only the JSON
    warnings.filterwarnings("ignore")

    import dgl
    import dgl.graphbolt as gb
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    dgl.seed(args.seed)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    d = load_arrays(args.npz)
    indptr = torch.from_numpy(np.ascontiguousarray(d["indptr"], dtype=np.int64))
    indices = torch.from_numpy(np.ascontiguousarray(d["indices"], dtype=np.int64))
    train_idx = torch.from_numpy(np.ascontiguousarray(d["train_idx"], dtype=np.int64))
    # row v of the CSR lists v's neighbours: as CSC, v's in-edges (the graphs are symmetric)
    graph = gb.fused_csc_sampling_graph(indptr, indices)
    load_s = time.perf_counter() - t0
    log(f"[graphbolt_baseline] {os.path.basename(os.path.normpath(args.npz))}: "
        f"{indptr.numel() - 1} nodes, {indices.numel()} edges, {train_idx.numel()} training "
        f"vertices (load {load_s:.2f}s); sampler {args.sampler}, fanouts {args.fanouts}")

    fanouts = [torch.LongTensor([k]) for k in args.fanouts]
    make = gb.NeighborSampler if args.sampler == "neighbor" else gb.LayerNeighborSampler

    def loader():
        items = gb.ItemSampler(gb.ItemSet(train_idx, names="seed_nodes"),
                               batch_size=args.batch_size, shuffle=True)
        return gb.DataLoader(make(items, graph, fanouts), num_workers=0)

    times, inputs, edges = [], [], []
    batches = 0
    for ep in range(1 + args.sample_epochs):
        sizes, nedges = [], []
        t = time.perf_counter()
        for mb in loader():
            sizes.append(int(mb.input_nodes.numel()))
            nedges.append(sum(int(s.sampled_csc.indices.numel())
                              for s in mb.sampled_subgraphs))
        dt = time.perf_counter() - t
        log(f"[graphbolt_baseline] epoch {ep}{' (warm-up)' if ep == 0 else ''}: {dt:.4f}s, "
            f"{len(sizes)} batches, mean input nodes {np.mean(sizes):.1f}")
        if ep == 0:
            continue
        times.append(dt)
        inputs.extend(sizes)
        edges.extend(nedges)
        batches = len(sizes)

    result = {
        "dataset": os.path.splitext(os.path.basename(os.path.normpath(args.npz)))[0],
        "num_nodes": int(indptr.numel() - 1), "num_edges": int(indices.numel()),
        "num_train": int(train_idx.numel()), "load_s": load_s,
        "sampler": args.sampler, "fanouts": args.fanouts, "batch_size": args.batch_size,
        "sample_epoch_s": statistics.median(times), "sample_epoch_s_all": times,
        "seeds_per_s": int(train_idx.numel()) / statistics.median(times),
        "input_nodes_per_batch": float(np.mean(inputs)),
        "sampled_edges_per_batch": float(np.mean(edges)),
        "feature_rows": int(round(sum(inputs) / len(times))),
        "num_batches": batches, "threads": args.threads, "seed": args.seed,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "graphbolt_version": dgl.__version__, "torch_version": torch.__version__,
    }
    sys.stdout = real_stdout
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:<24}  {v}")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
