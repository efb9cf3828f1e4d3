"""Command-line glue of partitioned training: the ``twopgraph partition`` verb and the
``--partitions`` / ``--nproc`` / ``--dist-timeout`` flags of ``twopgraph train``."""

from __future__ import annotations

import argparse
import json
import logging
import os

from ..errors import ConfigError
from . import DEFAULT_TIMEOUT_S

log = logging.getLogger("twopgraph")


def add_train_args(t: argparse.ArgumentParser) -> None:
    t.add_argument("--partitions", default=None, metavar="DIR",
                   help="train data-parallel on the parts of DIR (written by `twopgraph "
                        "partition`; one process per part; --dataset is taken from DIR); run "
                        "under torchrun or give --nproc")
    t.add_argument("--nproc", type=int, default=None,
                   help="with --partitions: start torchrun with this many processes on this "
                        "machine (= the number of parts)")
    t.add_argument("--dist-timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help="seconds a rank waits for the others in a collective before it stops "
                        "with an error (default: %(default)s)")


def add_partition_parser(sub) -> None:
    p = sub.add_parser("partition", help="write self-dependence partitions for data-parallel "
                                         "training (`train --partitions`)")
    p.add_argument("--dataset", default="synthetic-small",
                   help="dataset name or .npz path, as for train (default: %(default)s)")
    p.add_argument("--data-root", default=None,
                   help="data root (default: $TWOPGRAPH_DATA, else ./datasets)")
    p.add_argument("--num-parts", type=int, required=True,
                   help="parts = training processes (GPUs or CPU workers)")
    p.add_argument("--hops", type=int, default=3,
                   help="halo depth H; H >= the model's layers (len of --fanouts) makes sampling "
                        "in a part exact, smaller H replicates less but truncates sampling at "
                        "part boundaries (default: %(default)s, the layers of the default model)")
    p.add_argument("--out", required=True, metavar="DIR", help="partition folder to write")
    p.add_argument("--num-clusters", type=int, default=0,
                   help="fine METIS clusters of the locality scheduler; 0 = the `twopgraph train` "
                        "default for batch size 1024 (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="METIS seed (default: %(default)s)")
    p.add_argument("--force", action="store_true",
                   help="rewrite DIR even if it already holds this partition")
    p.add_argument("--json", action="store_true", help="print meta.json as one JSON line")


def cmd_partition(a) -> int:
    from ..datasets import dataset_path, load_dataset, resolve_data_root
    from ..partition.selfdep import partition_selfdep, read_meta, source_matches
    data = load_dataset(a.dataset, a.data_root)
    if not a.force and source_matches(a.out, data, a.num_parts, a.hops):
        log.info("%s already holds this partition (use --force to rewrite it)", a.out)
        meta = read_meta(a.out)
    else:
        meta = partition_selfdep(data, a.num_parts, a.hops, a.out, seed=a.seed,
                                 num_clusters=a.num_clusters,
                                 cache_dir=resolve_data_root(a.data_root) / "clusters",
                                 source_path=dataset_path(a.dataset, a.data_root))
    if a.json:
        print(json.dumps(meta))
    else:
        for k in ("num_parts", "hops", "replication_factor", "edge_cut", "edge_cut_fraction",
                  "seconds"):
            print(f"{k:>20}  {meta[k]}")
        print(f"{'part':>5} {'vertices':>10} {'owned':>10} {'halo':>10} {'edges':>12} "
              f"{'train':>8} {'val':>8} {'test':>8}")
        for i, p in enumerate(meta["parts"]):
            print(f"{i:>5} {p['num_nodes']:>10} {p['num_owned']:>10} {p['num_halo']:>10} "
                  f"{p['num_edges']:>12} {p['num_train']:>8} {p['num_val']:>8} "
                  f"{p['num_test']:>8}")
    return 0


def run_partitioned(a, cfg) -> int | None:
    """``twopgraph train --partitions``: launch torchrun (``--nproc`` outside torchrun) or
    train as this torchrun rank. Returns the exit code, or None without ``--partitions``."""
    if a.partitions is None:
        if a.nproc is not None:
            raise ConfigError("--nproc needs --partitions DIR (see `twopgraph partition`)")
        return None
    if a.nproc is not None and "RANK" not in os.environ:
        from ..partition.selfdep import read_meta
        from .launch import launch
        cfg.validate()  # refuse bad flags and stale partitions once, before any worker starts
        parts = read_meta(a.partitions)["num_parts"]
        if a.nproc != parts:
            raise ConfigError(f"{a.partitions} has {parts} parts; use --nproc {parts}")
        return launch(a.nproc, a.argv)
    from .env import detect
    from .trainer import train_distributed
    env = detect()
    if a.nproc is not None and a.nproc != env.world_size:
        raise ConfigError(f"--nproc {a.nproc} but torchrun started {env.world_size} processes")
    res = train_distributed(cfg, a.partitions, timeout_s=a.dist_timeout, env=env)
    if env.is_main:
        print(json.dumps({"val_acc": res.val_acc, "test_acc": res.test_acc,
                          "metrics": str(res.out / "metrics.json")}))
    return 0
