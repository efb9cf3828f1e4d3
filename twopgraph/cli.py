"""The ``twopgraph`` command: ``train | predict | partition | bench NAME | datasets | info``
(``bench NAME``: the benchmarks of :mod:`twopgraph.bench.harness`, ``sampler`` and ``cache``
among them).

Every verb's flags are generated from its config (:mod:`twopgraph.config` and the verbs'
own: :mod:`twopgraph.run.predictconfig`, :mod:`twopgraph.bench.config`,
:mod:`twopgraph.distributed.partition.config`; help texts and defaults live there). Bad input
(unknown dataset -- with the closest known names --, unreadable file, malformed flag, incompatible
checkpoint, an ``--out`` in use by another run, holding a run without ``--resume``/``--overwrite``
or not writable, a ``--dataset`` that is not the one of ``--partitions``, a full disk)
prints one line ``twopgraph: error: ...`` on stderr and exits with code 2; no traceback, no
output files. Exit codes: 0 ok, 2 user error, 3 training diverged (non-finite loss:
``metrics.json`` says ``"status": "diverged"``), 130 interrupted (SIGINT), 128 + N stopped by
signal N (SIGTERM 143, SIGHUP 129: one line ``twopgraph: stopped by SIGTERM``; a training run's
``metrics.json`` says ``"status": "interrupted"``, its lock is released and its last checkpoint
kept). Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import threading
from typing import NoReturn

from twopgraph.bench.harness import add_parsers as add_bench_parsers
from twopgraph.bench.harness import join_values
from twopgraph.config import DataConfig, TrainConfig, add_section_arguments
from twopgraph.distributed.partition.config import PartitionConfig
from twopgraph.errors import Stopped, TwopgraphError
from twopgraph.run.predictconfig import PredictConfig

log = logging.getLogger("twopgraph")


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"twopgraph: error: {message} (see `{self.prog} --help`)\n")


# A default no flag can produce: the parsed value says whether the flag was given.
_UNSET = object()


def build_parser(unset: tuple[str, ...] = ()) -> argparse.ArgumentParser:
    """The parser of every verb; ``unset``: ``train`` options whose default becomes
    :data:`_UNSET` (see :func:`given`)."""
    from twopgraph import __version__
    p = _Parser(prog="twopgraph", description="Locality-aware mini-batch GNN training (2PGraph): "
                                              "GraphSAGE/GCN/GAT, or a model of your own.")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("--version", action="version", version=f"twopgraph {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    t = sub.add_parser("train", help="train GraphSAGE/GCN/GAT (or --model MODULE:CLASS) with "
                                     "sampled mini-batches",
                       description="Train GraphSAGE/GCN/GAT (or --model MODULE:CLASS) with "
                                   "sampled mini-batches; writes OUT/metrics.json, "
                                   "OUT/checkpoint.pt and OUT/epochs.csv (one row per epoch).")
    TrainConfig.add_arguments(t)
    t.set_defaults(**{dest: _UNSET for dest in unset})
    PredictConfig.add_arguments(sub.add_parser(
        "predict", help="predictions of a trained model (checkpoint.pt) for every vertex, "
                        "by exact inference (default --out: predictions.npy beside the "
                        "checkpoint)"))
    PartitionConfig.add_arguments(sub.add_parser(
        "partition", help="write self-dependence partitions for data-parallel training "
                          "(`train --partitions`)"))

    add_bench_parsers(sub.add_parser("bench", help="benchmarks of twopgraph's components "
                                                   "(`twopgraph bench NAME --help`)"), _Parser)

    add_section_arguments(sub.add_parser("datasets", help="list known and cached datasets"),
                          DataConfig, exclude=("dataset", "symmetrize", "store_dtype"))
    i = sub.add_parser("info", help="statistics of a dataset (generates/converts it if needed)")
    add_section_arguments(i, DataConfig, required=("dataset",))
    i.add_argument("--json", action="store_true", help="print JSON")
    return p


def _print_record(rec: dict, as_json: bool) -> None:
    """One JSON line, or one ``key  value`` line per field."""
    if as_json:
        print(json.dumps(rec))
    else:
        for k, v in rec.items():
            print(f"{k:>22}  {v}")


def given(argv: list[str], dest: str) -> bool:
    """Whether the ``train`` command line ``argv`` gives the option ``dest`` (in any spelling
    argparse accepts: ``--flag v``, ``--flag=v``, an abbreviation)."""
    ns = build_parser(unset=(dest,)).parse_args(join_values(argv))
    return getattr(ns, dest, _UNSET) is not _UNSET


def cmd_train(a: argparse.Namespace) -> int:
    from twopgraph.run.records import result_record
    from twopgraph.run.train import train
    cfg = TrainConfig.from_args(a)
    from twopgraph.distributed.commands import run_partitioned
    # --partitions: data-parallel over self-dependence parts; the dataset is the partition's
    code = run_partitioned(cfg, a.argv, dataset_given=given(a.argv, "dataset")
                           if cfg.dist.partitions is not None else None)
    if code is not None:
        return code
    res = train(cfg)
    print(json.dumps(result_record(res)))
    return 0


def cmd_predict(a: argparse.Namespace) -> int:
    from twopgraph.run.predict import run_predict
    print(json.dumps(run_predict(PredictConfig.from_args(a))))
    return 0


def cmd_bench(a: argparse.Namespace) -> int:
    from twopgraph.bench.harness import run
    return run(a)


def cmd_partition(a: argparse.Namespace) -> int:
    from twopgraph.distributed.commands import cmd_partition as run
    PartitionConfig.from_args(a).validate()
    return run(a)


def cmd_datasets(a: argparse.Namespace) -> int:
    from twopgraph.datasets import (
        DATASET_PATH_ENV,
        dataset_search_path,
        list_datasets,
        resolve_data_root,
    )
    rows = list_datasets(a.data_root)
    print(f"data root: {resolve_data_root(a.data_root)}")
    folders = dataset_search_path()
    print(f"dataset path (${DATASET_PATH_ENV}): "
          f"{', '.join(map(str, folders)) if folders else '(not set)'}")
    print(f"{'name':<22} {'kind':<10} {'cached':<7} description")
    for r in rows:
        print(f"{r['name']:<22} {r['kind']:<10} {'yes' if r['cached'] else 'no':<7} "
              f"{r.get('description', '')}")
    return 0


def cmd_info(a: argparse.Namespace) -> int:
    from twopgraph.datasets import dataset_path, store_dtype_of
    data = DataConfig(a.dataset, a.data_root, a.symmetrize, a.store_dtype).validate().load()
    info = data.summary()
    path = dataset_path(a.dataset, a.data_root, store_dtype_of(data, a.store_dtype))
    info["path"] = str(path) if path is not None else None
    info.update(_memory_plan(data))
    _print_record(info, a.json)
    return 0


def _memory_plan(data) -> dict:
    """What a training run keeps in memory, MiB: ``store`` (folder) and ``store_disk_mib``;
    ``resident_shared_mib``: the memory-mapped arrays (graph, features, labels, splits) --
    page cache, shared by every process on the machine and, for the features, paged in from
    disk as batches read them (a table larger than memory still trains); and
    ``resident_private_mib``: the largest private tables of a run with the default model, the
    N x hidden output of an evaluation layer plus its N x 2 x classes projections (float32;
    written to a scratch file instead when memory is short)."""
    from twopgraph.config import ModelConfig
    from twopgraph.store.reader import disk_bytes
    mib = 2 ** 20
    n = data.num_nodes
    shared = (data.graph.indptr.nbytes + data.graph.indices.nbytes + data.feat.nbytes
              + data.label.nbytes + sum(getattr(data, s).nbytes
                                        for s in ("train_idx", "val_idx", "test_idx")))
    private = n * 4 * (ModelConfig().hidden + 2 * data.num_classes)
    out = {"store": str(data.store) if data.store is not None else None,
           "store_disk_mib": round(disk_bytes(data.store) / mib, 2)
           if data.store is not None else None,
           "resident_shared_mib": round(shared / mib, 2),
           "resident_private_mib": round(private / mib, 2)}
    return out


COMMANDS = {"train": cmd_train, "predict": cmd_predict, "datasets": cmd_datasets,
            "info": cmd_info,
            "bench": cmd_bench,
            "partition": cmd_partition}

def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(join_values(argv))
    args.argv = argv  # train --nproc passes it on
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(message)s", datefmt="%H:%M:%S", stream=sys.stderr)
    key = args.command
    previous = _stop_on_signals()
    try:
        from twopgraph.runtime.heap import configure_heap
        from twopgraph.runtime.jit import configure_threading
        configure_heap()  # before the worker threads exist: their arenas follow it
        configure_threading()  # before any parallel kernel: numba picks its layer at the first
        return COMMANDS[key](args)
    except TwopgraphError as e:  # exit_code: 2, or 3 for TrainingDiverged
        print(f"twopgraph: error: {e}", file=sys.stderr)
        return e.exit_code
    except Stopped as e:
        print(f"twopgraph: {e}{_RESUME_HINT.get(args.command, '')}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("twopgraph: interrupted", file=sys.stderr)
        return 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


#: Signals that stop a command at its next safe point (:class:`~twopgraph.errors.Stopped`):
#: what ``kill``, ``timeout``, batch schedulers and a closed terminal send. SIGINT stays
#: Python's ``KeyboardInterrupt`` (exit 130).
STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))
_RESUME_HINT = {"train": " (the checkpoint of the last completed epoch is kept: rerun with "
                         "--resume to continue)"}


#: Seconds after which a stop signal that arrived inside a library's callback
#: (:func:`_swallowing_frame`) is sent again.
REDELIVER_S = 0.05
_SWALLOWING = (f"{os.sep}numba{os.sep}",)


def _swallowing_frame(frame) -> bool:
    """Whether an exception raised in ``frame`` may be dropped by C code on its way up: numba's
    compiled code calls back into Python (``serialize._numba_unpickle``, rebuilding a kernel's
    exception or a boxed object, and what that calls: cloudpickle), and an error there can
    end as an "unraisable" traceback on stderr while the run goes on. Any frame of numba's
    files on the stack counts."""
    while frame is not None:
        if any(s in frame.f_code.co_filename for s in _SWALLOWING):
            return True
        frame = frame.f_back
    return False


def _resend(signum: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(os.getpid(), signum)


def _stop_on_signals() -> dict:
    """Install the :data:`STOP_SIGNALS` handlers (main thread only), and SIGINT's where it is
    Python's default; the previous handlers. The first stop signal raises
    :class:`~twopgraph.errors.Stopped` (SIGINT: ``KeyboardInterrupt``); later stop signals are
    ignored so that the unwinding (lock release, metrics, temporary files) is not cut short.
    A signal that lands in a frame where the exception could be swallowed
    (:func:`_swallowing_frame`) is not raised there but sent again :data:`REDELIVER_S` later."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    fired = []

    def defer(signum, frame) -> bool:
        if not _swallowing_frame(frame):
            return False
        timer = threading.Timer(REDELIVER_S, _resend, (signum,))
        timer.daemon = True
        timer.start()
        return True

    def handler(signum, frame):
        if not fired and not defer(signum, frame):
            fired.append(signum)
            raise Stopped(signum)

    def on_sigint(signum, frame):
        if not defer(signum, frame):
            raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, on_sigint)
    return previous
