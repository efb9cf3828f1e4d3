"""The ``twopgraph`` command: ``train | bench | datasets | info``.

Bad input (unknown dataset, unreadable file, malformed flag, incompatible checkpoint) prints one
line ``twopgraph: error: ...`` on stderr and exits with code 2; no traceback, no output files.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time

from .errors import TwopgraphError

log = logging.getLogger("twopgraph")


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (exit 2)."""

    def error(self, message):
        self.exit(2, f"twopgraph: error: {message} (see `{self.prog} --help`)\n")


def _add_data_args(p: argparse.ArgumentParser, default_dataset: str | None = "synthetic-small"):
    p.add_argument("--dataset", default=default_dataset, required=default_dataset is None,
                   help="synthetic-tiny | synthetic-small | synthetic-products | ogbn-arxiv | "
                        "ogbn-products | ogbn-papers100M | a .npz path | NAME for "
                        "DATA_ROOT/NAME.npz (default: %(default)s)")
    p.add_argument("--data-root", default=None,
                   help="where datasets are generated, cached and looked up; ogb's root "
                        "(default: $TWOPGRAPH_DATA, else ./datasets)")


def _add_sampling_args(p: argparse.ArgumentParser, schedule: bool = True):
    p.add_argument("--fanouts", default="15,10,5",
                   help="neighbours per GNN layer, input layer first; -1 = all; the number "
                        "of entries is the number of layers (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=1024,
                   help="seed vertices per mini-batch (default: %(default)s)")
    if schedule:
        p.add_argument("--schedule", default="locality",
                       help="seed scheduler: locality (batches from METIS clusters, "
                            "label-balanced) | random (uniform shuffle) (default: %(default)s)")
    p.add_argument("--num-clusters", type=int, default=0,
                   help="METIS clusters for --schedule locality and --renumber; fewer = more "
                        "locality, less batch diversity; 0 = 4 clusters per batch on graphs of >= "
                        "512 x batch-size vertices, else at least min(2048, N/8) clusters "
                        "(default: %(default)s)")
    p.add_argument("--renumber", action=argparse.BooleanOptionalAction, default=True,
                   help="renumber the graph so that each cluster is a contiguous id range "
                        "(results stay in original ids) (default: on)")
    p.add_argument("--balance", type=int, default=16,
                   help="locality: label-balancing pool, the next cluster of a batch is the "
                        "best of this many; 1 = plain shuffled cluster order "
                        "(default: %(default)s)")
    p.add_argument("--seed", type=int, default=0,
                   help="random seed of sampling, shuffling and model init (default: %(default)s)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch and numba threads; 0 = all cores (default: %(default)s)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="twopgraph", description="Locality-aware mini-batch GNN training (2PGraph).")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    t = sub.add_parser("train", help="train GraphSAGE/GCN with sampled mini-batches")
    _add_data_args(t)
    _add_sampling_args(t)
    t.add_argument("--model", default="sage", help="sage | gcn (default: %(default)s)")
    t.add_argument("--epochs", type=int, default=5, help="training epochs (default: %(default)s)")
    t.add_argument("--hidden", type=int, default=256, help="hidden width (default: %(default)s)")
    t.add_argument("--lr", type=float, default=0.003, help="Adam learning rate (default: %(default)s)")
    t.add_argument("--weight-decay", type=float, default=0.0,
                   help="Adam weight decay (default: %(default)s)")
    t.add_argument("--dropout", type=float, default=0.5,
                   help="dropout between layers (default: %(default)s)")
    t.add_argument("--device", default="auto",
                   help="cpu | cuda | cuda:N | auto (= cuda if available) (default: %(default)s)")
    t.add_argument("--out", default="runs/train",
                   help="output folder: metrics.json, checkpoint.pt (default: %(default)s)")
    t.add_argument("--resume", action="store_true",
                   help="continue from OUT/checkpoint.pt (same configuration; --epochs may grow)")
    t.add_argument("--eval-every", type=int, default=1,
                   help="exact evaluation every N epochs; 0 = after the last only "
                        "(default: %(default)s)")
    t.add_argument("--eval-batch-edges", type=int, default=4_000_000,
                   help="edges per chunk of layer-wise inference (default: %(default)s)")
    t.add_argument("--prefetch", type=int, default=2,
                   help="batches sampled ahead in a background thread; 0 = none "
                        "(default: %(default)s)")
    t.add_argument("--no-progress", action="store_true", help="no progress bars")
    t.add_argument("--cache-policy", default="none",
                   help="device feature cache: none | degree (PaGraph) | presample (GNNLab) | "
                        "layer (2PGraph: layer-aware + schedule lookahead) (default: %(default)s)")
    t.add_argument("--cache-ratio", type=float, default=None,
                   help="cache budget as a fraction of the feature rows, in [0, 1] "
                        "(default: what fits: CUDA free memory after a training margin; CPU all)")
    t.add_argument("--cache-gb", type=float, default=None,
                   help="cache budget in GiB (instead of --cache-ratio)")
    t.add_argument("--feat-dtype", default="float32",
                   help="stored/transferred feature type: float32 | float16 | bfloat16 (halves "
                        "the bytes; the model computes in float32) (default: %(default)s)")
    from .dist import commands as dist_commands
    dist_commands.add_train_args(t)
    dist_commands.add_partition_parser(sub)

    b = sub.add_parser("bench", help="benchmarks of twopgraph's components")
    bsub = b.add_subparsers(dest="bench", required=True, parser_class=_Parser)
    s = bsub.add_parser("sampler", help="sampling-only epochs: throughput and input sizes")
    _add_data_args(s)
    _add_sampling_args(s)
    s.add_argument("--epochs", type=int, default=3,
                   help="timed epochs; the median is reported (default: %(default)s)")
    s.add_argument("--warmup", type=int, default=1,
                   help="untimed epochs first (JIT compile, caches) (default: %(default)s)")
    s.add_argument("--json", action="store_true", help="print one JSON line")
    c = bsub.add_parser(
        "cache", help="feature-cache policies x schedules x budgets vs the offline optimum")
    _add_data_args(c)
    _add_sampling_args(c, schedule=False)  # --schedules instead
    from . import bench_cache
    bench_cache.add_arguments(c)

    sub.add_parser("datasets", help="list known and cached datasets").add_argument(
        "--data-root", default=None, help="data root (default: $TWOPGRAPH_DATA, else ./datasets)")
    i = sub.add_parser("info", help="statistics of a dataset (generates/converts it if needed)")
    _add_data_args(i, default_dataset=None)
    i.add_argument("--json", action="store_true", help="print JSON")
    return p


def _apply_threads(n: int) -> None:
    if n < 0:
        raise TwopgraphError(f"threads must be >= 0, got {n}")
    from .train import apply_threads
    apply_threads(n)


def _print_record(rec: dict, as_json: bool) -> None:
    """One JSON line, or one ``key  value`` line per field."""
    if as_json:
        print(json.dumps(rec))
    else:
        for k, v in rec.items():
            print(f"{k:>22}  {v}")


def cmd_train(a) -> int:
    from .train import TrainConfig, train
    cfg = TrainConfig(
        dataset=a.dataset, data_root=a.data_root, model=a.model, fanouts=a.fanouts,
        batch_size=a.batch_size, epochs=a.epochs, hidden=a.hidden, lr=a.lr,
        weight_decay=a.weight_decay, dropout=a.dropout, seed=a.seed, device=a.device, out=a.out,
        resume=a.resume, schedule=a.schedule, num_clusters=a.num_clusters,
        renumber=a.renumber, balance=a.balance, eval_every=a.eval_every,
        eval_batch_edges=a.eval_batch_edges, prefetch=a.prefetch, threads=a.threads,
        progress=not a.no_progress, cache_policy=a.cache_policy, cache_ratio=a.cache_ratio,
        cache_gb=a.cache_gb, feat_dtype=a.feat_dtype)
    from .dist.commands import run_partitioned
    code = run_partitioned(a, cfg)  # --partitions: data-parallel over self-dependence parts
    if code is not None:
        return code
    res = train(cfg)
    print(json.dumps({"val_acc": res.val_acc, "test_acc": res.test_acc,
                      "metrics": str(res.out / "metrics.json")}))
    return 0


def cmd_bench_sampler(a) -> int:
    from . import kernels
    from .datasets import load_dataset
    from .loader import sample_epoch
    from .sampler import SCHEDULERS, NeighborSampler, make_scheduler, parse_fanouts
    from .train import locality_for
    if a.epochs <= 0 or a.warmup < 0:
        raise TwopgraphError("epochs must be positive and warmup >= 0")
    fanouts = parse_fanouts(a.fanouts)
    _apply_threads(a.threads)
    if a.schedule not in SCHEDULERS:
        raise TwopgraphError(f"unknown schedule {a.schedule!r}; known: {', '.join(SCHEDULERS)}")
    if a.batch_size <= 0:
        raise TwopgraphError(f"batch size must be positive, got {a.batch_size}")
    data = load_dataset(a.dataset, a.data_root)
    prep = locality_for(data, [a.schedule], batch_size=a.batch_size,
                        num_clusters=a.num_clusters, renumber=a.renumber, data_root=a.data_root)
    data = prep.data
    sampler = NeighborSampler(data.graph, fanouts, seed=a.seed)
    sched = make_scheduler(a.schedule, data.train_idx, a.batch_size, seed=a.seed,
                           balance=a.balance, labels=data.label,
                           parts=None if prep.clustering is None else prep.clustering.parts)
    times, stats = [], None
    for e in range(a.warmup + a.epochs):
        t = time.perf_counter()
        stats = sample_epoch(sched, sampler, epoch=e)
        if e >= a.warmup:
            times.append(time.perf_counter() - t)
    epoch_s = statistics.median(times)
    res = {
        "dataset": data.name, "schedule": a.schedule, "fanouts": fanouts,
        "batch_size": a.batch_size, "threads": kernels.num_threads(),
        "num_batches": stats.num_batches, "num_seeds": stats.num_seeds,
        "seeds_per_s": stats.num_seeds / epoch_s, "sample_epoch_s": epoch_s,
        "sample_epoch_s_all": times, "input_nodes_per_batch": stats.input_nodes_per_batch,
        "feature_rows": stats.feature_rows, "locality": prep.summary(),
    }
    _print_record(res, a.json)
    return 0


def cmd_datasets(a) -> int:
    from .datasets import list_datasets, resolve_data_root
    rows = list_datasets(a.data_root)
    print(f"data root: {resolve_data_root(a.data_root)}")
    print(f"{'name':<22} {'kind':<10} {'cached':<7} description")
    for r in rows:
        print(f"{r['name']:<22} {r['kind']:<10} {'yes' if r['cached'] else 'no':<7} "
              f"{r.get('description', '')}")
    return 0


def cmd_info(a) -> int:
    from .datasets import dataset_path, load_dataset
    data = load_dataset(a.dataset, a.data_root)
    info = data.summary()
    path = dataset_path(a.dataset, a.data_root)
    info["path"] = str(path) if path is not None else None
    _print_record(info, a.json)
    return 0


def cmd_bench_cache(a) -> int:
    from .bench_cache import cmd_bench_cache as run
    return run(a)


def cmd_partition(a) -> int:
    from .dist.commands import cmd_partition as run
    return run(a)


COMMANDS = {"train": cmd_train, "datasets": cmd_datasets, "info": cmd_info,
            ("bench", "sampler"): cmd_bench_sampler, ("bench", "cache"): cmd_bench_cache,
            "partition": cmd_partition}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # train --nproc passes it on
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(message)s", datefmt="%H:%M:%S", stream=sys.stderr)
    key = (args.command, args.bench) if args.command == "bench" else args.command
    try:
        return COMMANDS[key](args)
    except TwopgraphError as e:
        print(f"twopgraph: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("twopgraph: interrupted", file=sys.stderr)
        return 130
