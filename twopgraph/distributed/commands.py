"""Command-line glue of partitioned training: the ``twopgraph partition`` verb and
``twopgraph train --partitions`` (flags: :class:`~twopgraph.config.DistConfig`)."""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from twopgraph.core.files import refuse_dangling
from twopgraph.errors import ConfigError, Stopped, TwopgraphError

if TYPE_CHECKING:
    from twopgraph.config import TrainConfig

log = logging.getLogger("twopgraph")


def cmd_partition(a: argparse.Namespace) -> int:
    """``twopgraph partition``; ``a`` holds the flags of
    :class:`~twopgraph.distributed.partition.config.PartitionConfig` (the CLI validated them). One
    writer per ``--out``: a second ``partition`` into a folder being written is refused in one line
    (:class:`~twopgraph.core.locks.FileLock`)."""
    from twopgraph.core.locks import FileLock, sibling_lock
    _check_out_folder(a.out)  # before loading data and METIS
    # one writer per --out, from before the data is loaded (partition_selfdep holds it too)
    with FileLock(sibling_lock(a.out), str(a.out)):
        return _partition(a)


def _partition(a) -> int:
    from twopgraph.config import DataConfig
    from twopgraph.datasets import dataset_path, resolve_data_root
    from twopgraph.distributed.partition.selfdep import partition_selfdep
    data = DataConfig(a.dataset, a.data_root, a.symmetrize).validate().load()
    # Reused only if DIR holds the partition of this very content and settings (its
    # partition_id, a fingerprint) and passes verification; any other value, or --force,
    # recomputes it.
    meta = partition_selfdep(data, a.num_parts, a.hops, a.out, seed=a.seed,
                             num_clusters=a.num_clusters,
                             cache_dir=resolve_data_root(a.data_root) / "clusters",
                             source_path=dataset_path(a.dataset, a.data_root),
                             reuse=not a.force, representation=a.representation)
    if a.json:
        print(json.dumps(meta))
    else:
        for k in ("num_parts", "hops", "replication_factor", "edge_cut", "edge_cut_fraction",
                  "seconds"):
            print(f"{k:>20}  {meta[k]}")
        print(f"{'store':>20}  {meta['source']['store']}")
        # global: no structure of its own, the rank samples on the store's CSR
        print(f"{'part':>5} {'repr':>6} {'vertices':>10} {'owned':>10} {'halo':>10} "
              f"{'edges':>12} {'local CSR':>10} {'train':>8} {'val':>8} {'test':>8}")
        for i, p in enumerate(meta["parts"]):
            print(f"{i:>5} {p['representation']:>6} {p['num_nodes']:>10} {p['num_owned']:>10} "
                  f"{p['num_halo']:>10} {p['num_edges']:>12} "
                  f"{p['local_csr_bytes'] / 2**20:>8.1f}Mi {p['num_train']:>8} "
                  f"{p['num_val']:>8} {p['num_test']:>8}")
    return 0


def _check_out_folder(out) -> None:
    """``partition --out DIR``: DIR's parent must be (or become) a writable folder, and DIR a
    folder if it exists; checked before any work."""
    if out is None or not str(out).strip():
        raise ConfigError("--out must name a folder, got an empty path")
    path = Path(out)
    refuse_dangling(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--out {out} exists and is not a folder")
    parent = path.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--out {out}: cannot create {parent} ({e.strerror or e})") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"--out {out}: {parent} is not writable")


def run_partitioned(cfg: TrainConfig, argv: list[str],
                    dataset_given: bool | None = None) -> int | None:
    """``twopgraph train --partitions``: launch torchrun (``--nproc`` outside torchrun) or
    train as this torchrun rank. Returns the exit code, or None without ``--partitions``.
    ``argv`` is the command line, passed on to the workers; ``dataset_given``: whether it
    names ``--dataset`` (see :func:`~twopgraph.datasets.partition_dataset`).

    A run refused before it starts is refused here, before torchrun starts: an ``--out``
    that already holds a run (without ``--resume`` or ``--overwrite``,
    :func:`~twopgraph.run.outdir.check_out`) and a ``--dataset`` that is not the partition's.

    The launcher checks every part (:func:`~twopgraph.distributed.partition.load.verify_partition`)
    before it starts any rank, so a damaged partition is refused in one line; each rank
    verifies its own part again as it loads it (so does a rank started by torchrun directly).
    A rank started by the launcher hands its user errors to the launcher, which prints one
    line (see :mod:`twopgraph.distributed.launch`)."""
    d = cfg.dist
    cfg.validate()  # refuse bad flags once, before any worker starts
    if d.partitions is None:
        return None
    if dataset_given is None:  # not from the command line: given unless the default
        from twopgraph.config import DataConfig
        dataset_given = cfg.data.dataset != DataConfig().dataset
    if d.nproc is not None and "RANK" not in os.environ:
        from twopgraph.datasets import partition_dataset
        from twopgraph.distributed.launch import launch
        from twopgraph.distributed.partition.load import read_meta, verify_partition
        from twopgraph.run.outdir import check_out
        check_out(cfg.run.out, cfg.run.resume, cfg.run.overwrite)  # rank 0 checks it again
        meta = read_meta(d.partitions)  # refuse a stale partition up front
        parts = meta["num_parts"]
        if d.nproc != parts:
            raise ConfigError(f"{d.partitions} has {parts} parts; use --nproc {parts}")
        partition_dataset(cfg.data.dataset, cfg.data.data_root, d.partitions, meta["source"],
                          given=dataset_given)
        verify_partition(d.partitions, meta)
        return launch(d.nproc, argv)
    from twopgraph.distributed.env import detect
    from twopgraph.distributed.launch import ERROR_DIR_ENV, report_rank_error
    from twopgraph.distributed.trainer import train_distributed
    env = detect()
    try:
        if d.nproc is not None and d.nproc != env.world_size:
            raise ConfigError(f"--nproc {d.nproc} but torchrun started {env.world_size} "
                              "processes")
        res = train_distributed(cfg, d.partitions, env=env, dataset_given=dataset_given)
    except TwopgraphError as e:
        if not report_rank_error(env.rank, e):
            raise  # not started by `--nproc`: the CLI prints it
        raise SystemExit(getattr(e, "exit_code", 2)) from None  # the launcher prints it
    except (KeyboardInterrupt, Stopped) as e:  # the launcher passed a stop signal on
        if not os.environ.get(ERROR_DIR_ENV):
            raise  # not started by `--nproc`: the CLI prints it
        raise SystemExit(getattr(e, "exit_code", 130)) from None  # the launcher prints it
    if env.is_main:
        from twopgraph.run.records import result_record
        print(json.dumps(result_record(res)))  # the single-process line's keys
    return 0
