"""``twopgraph bench renumber-feat``: the renumbered store's feature copy, measured -- one
training epoch on a renumbered graph with its features read from a renumbered copy of the
table (``copy``, what :func:`twopgraph.store.writer.permuted_store` writes) or from the
dataset's own table through the renumbering's row map (``map``: id ``i`` reads row
``perm[i]``, :class:`~twopgraph.cache.host.HostTable` ``rows``), or the feature gathers alone
(``gather``).

``copy`` and ``map`` train the same batches (the renumbered graph, the locality scheduler over
its clusters; the same loss) and differ only in where a batch's feature rows lie: contiguous
ranges of the renumbered table, or the original table's rows scattered by the permutation.
Each runs in its own process, alternately (``--modes copy,map``; ``--repeat`` for more
pairs). ``gather`` samples one epoch's batches once, then times every batch's gather from
both tables in turn on one thread (the same load on both), ``--reps`` passes each
(``--cold``: each table's file evicted from the page cache before each pass; ``--cgroup
FOLDER``: the passes inside a cgroup v1 memory group, joined once the batches are sampled).

The clusters and the renumbered store are cached in ``DATA_ROOT/clusters`` (made by the first
run); the ``copy`` table is ``DATA_ROOT/clusters/featcopy-<store>/feat.npy``, written once.

Rows: ``mode`` (copy | map | gather), ``table`` (gather: copy | map). Figures: ``epoch_s``,
``sample_s``, ``load_s``, ``compute_s``, ``input_nodes_per_batch``, ``loss``, ``setup_s``;
gather: ``gather_s`` (median of the passes), ``gather_s_all``, ``rows``, ``batches``.

Example::

    twopgraph bench renumber-feat --graph synthetic-products --modes copy,map --repeat 3
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from twopgraph.bench.harness import BENCHMARKS, Benchmark, Context, Row
from twopgraph.errors import ConfigError, TwopgraphError

if TYPE_CHECKING:
    import numpy as np

    from twopgraph.config import TrainConfig
    from twopgraph.graph.data import GraphData
    from twopgraph.locality import LocalityPrep

log = logging.getLogger("twopgraph")

MODES = ("copy", "map", "gather")


@BENCHMARKS.register("renumber-feat")
class RenumberFeatBenchmark(Benchmark):
    """A renumbered graph's features from a renumbered copy of the table against the
    original table through the row map: one training epoch each (own processes), or the
    gathers alone.

    Rows: mode, table. Figures: epoch_s, load_s, compute_s, loss; gather_s."""

    help = "renumbered features: a renumbered copy vs the original table via the row map"
    columns = ("epoch_s", "sample_s", "load_s", "compute_s", "input_nodes_per_batch", "loss",
               "gather_s", "rows")

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--modes", default="copy,map",
                       help="comma-separated, of copy, map, gather (default: copy,map)")
        p.add_argument("--batch-size", type=int, default=1024, help="(default: 1024)")
        p.add_argument("--threads", type=int, default=0, help="(default: 0 = all cores)")
        p.add_argument("--seed", type=int, default=0, help="(default: 0)")
        p.add_argument("--reps", type=int, default=3, help="gather: passes per table "
                       "(default: 3)")
        p.add_argument("--batches", type=int, default=0,
                       help="gather: the first N batches only (default: 0 = all)")
        p.add_argument("--cold", action="store_true",
                       help="gather: evict the table's file before each pass")
        p.add_argument("--cgroup", default=None,
                       help="gather: a cgroup v1 memory folder the passes run in")

    def check(self, a: argparse.Namespace) -> None:
        a._modes = [m.strip() for m in a.modes.split(",") if m.strip()]
        if not a._modes or set(a._modes) - set(MODES):
            raise ConfigError(f"--modes: of {', '.join(MODES)}, got {a.modes!r}")
        if a.batch_size < 1 or a.reps < 1 or a.threads < 0 or a.batches < 0:
            raise ConfigError("need --batch-size, --reps >= 1, --threads, --batches >= 0")

    def measure(self, a: argparse.Namespace, ctx: Context) -> list[Row]:
        ctx.data()  # a bad --graph is one line, before any process starts
        rows = []
        for mode in a._modes:
            cmd = [sys.executable, "-c", ("import sys; from twopgraph.bench.renumber_feat "
                                          "import child; sys.exit(child(sys.argv[1:]))"),
                   "--mode", mode,
                   "--dataset", ctx.dataset(), "--batch-size", str(a.batch_size),
                   "--threads", str(a.threads), "--seed", str(a.seed), "--reps", str(a.reps),
                   "--batches", str(a.batches), *(["--cold"] if a.cold else []),
                   *(["--cgroup", a.cgroup] if a.cgroup else []),
                   *(["--data-root", ctx.data_root] if ctx.data_root else [])]
            log.info("bench renumber-feat: %s", mode)
            r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
            lines = [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]
            if r.returncode != 0 or not lines:
                raise TwopgraphError(f"bench renumber-feat: mode {mode} failed (exit code "
                                     f"{r.returncode})")
            if mode != "gather":
                rows.append(Row({"mode": mode, "table": mode}, lines[-1]))
                continue
            for table in ("copy", "map"):
                passes = [x for x in lines if x["table"] == table]
                times = [x["gather_s"] for x in passes]
                rows.append(Row({"mode": "gather", "table": table}, {
                    "gather_s": statistics.median(times), "gather_s_all": times,
                    "rows": passes[-1]["rows"], "batches": passes[-1]["batches"],
                    "cold": passes[-1]["cold"]}))
        return rows


def child(argv: list[str]) -> int:
    """One mode in this process: JSON lines on stdout (one; gather: one per pass)."""
    import numpy as np

    from twopgraph.config import TrainConfig
    from twopgraph.datasets import load_dataset, resolve_data_root
    from twopgraph.pipeline.assemble import locality_for, make_loader
    from twopgraph.pipeline.epoch import train_epoch
    from twopgraph.run.checkpoint import build_training
    from twopgraph.runtime.jit import configure_threading
    p = argparse.ArgumentParser(prog="bench renumber-feat child")
    p.add_argument("--mode", choices=MODES, required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--data-root", default=None)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--batches", type=int, default=0)
    p.add_argument("--cold", action="store_true")
    p.add_argument("--cgroup", default=None)
    a = p.parse_args(argv)
    configure_threading()
    t0 = time.perf_counter()
    data = load_dataset(a.dataset, a.data_root, progress=False)
    cfg = TrainConfig.from_dict({"dataset": a.dataset, "data_root": a.data_root,
                                 "schedule": "locality", "batch_size": a.batch_size,
                                 "threads": a.threads, "seed": a.seed, "device": "cpu",
                                 "progress": False, "epochs": 1})
    cfg, _ = cfg.resolved(data.num_nodes)
    prep = locality_for(data, ["locality"], cfg)
    rdata, perm, src = prep.data, prep.perm, data.feat
    if perm is None:
        raise TwopgraphError("bench renumber-feat: the graph was not renumbered")
    table, rows = src, perm
    if a.mode in ("copy", "gather"):
        table, rows = feature_copy(src, perm, resolve_data_root(a.data_root) / "clusters"
                                   / f"featcopy-{Path(str(rdata.store)).name}"), None
    if a.mode == "gather":
        return gather_only(cfg, rdata, prep, table, src, perm, a)
    loader = make_loader(cfg, rdata, "cpu", parts=prep.clustering.parts, feat=table, rows=rows)
    model, opt, _, _ = build_training(cfg, rdata, "cpu")
    setup_s = time.perf_counter() - t0
    with loader.plan.applied():
        rec = train_epoch(model, opt, loader, 0, progress=False)
    keep = ("epoch_s", "sample_s", "load_s", "compute_s", "input_nodes_per_batch", "loss")
    print(json.dumps({**{k: rec.get(k) for k in keep}, "setup_s": setup_s,
                      "num_nodes": int(np.asarray(src).shape[0])}), flush=True)
    return 0


def feature_copy(src: np.ndarray, perm: np.ndarray, folder: Path) -> np.ndarray:
    """The renumbered copy of ``src`` (row ``i`` = ``src[perm[i]]``) as ``folder/feat.npy``,
    written once in chunks; memory-mapped."""
    import numpy as np
    path = folder / "feat.npy"
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".feat.npy.tmp{os.getpid()}"
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=src.dtype, shape=src.shape)
        step = max(1, (64 << 20) // max(1, src[:1].nbytes))
        for start in range(0, perm.shape[0], step):
            rows = perm[start:start + step]
            order = np.argsort(rows, kind="stable")  # ascending reads of the source map
            chunk = np.empty((rows.shape[0],) + src.shape[1:], dtype=src.dtype)
            chunk[order] = src[rows[order]]
            out[start:start + rows.shape[0]] = chunk
        out.flush()
        del out
        os.replace(tmp, path)
    return np.load(path, mmap_mode="r")


def gather_only(cfg: TrainConfig, rdata: GraphData, prep: LocalityPrep, copy_table: np.ndarray,
                src: np.ndarray, perm: np.ndarray, a: argparse.Namespace) -> int:
    """Time the feature gathers of one epoch's batches (sampled once) from the renumbered
    copy and from the source through the row map, alternately, on one thread; one JSON line
    per pass."""
    import numpy as np
    import torch

    from twopgraph.cache.host import HostTable
    from twopgraph.pipeline.assemble import make_loader
    loader = make_loader(cfg, rdata, "cpu", parts=prep.clustering.parts)
    stream = [np.ascontiguousarray(ids, dtype=np.int64) for ids in loader.input_stream(0)]
    stream = stream[:a.batches] if a.batches else stream
    tables = {"copy": HostTable(copy_table, readahead=False),
              "map": HostTable(src, rows=perm, readahead=False)}
    torch.set_num_threads(1)
    for ids in stream[:8]:  # both tables in the page cache, equal
        for t in tables.values():
            t.take(ids)
    if not torch.equal(tables["copy"].take(stream[0]), tables["map"].take(stream[0])):
        raise TwopgraphError("bench renumber-feat: the copy and the map read different rows")
    cold = a.cold
    if a.cgroup is not None:
        Path(a.cgroup, "cgroup.procs").write_text(str(os.getpid()))
        cold = True
    maps = {"copy": copy_table, "map": src}
    for r in range(a.reps):
        for name, t in tables.items():
            if cold:
                evict(maps[name])
            t0 = time.perf_counter()
            rows = sum(t.take(ids).shape[0] for ids in stream)
            print(json.dumps({"table": name, "pass": r, "gather_s": time.perf_counter() - t0,
                              "rows": rows, "batches": len(stream), "cold": cold}), flush=True)
    return 0


def evict(table: np.memmap) -> None:
    """Drop the file of the memory map ``table`` from this process's page tables and from
    the page cache (this file only)."""
    import mmap
    table._mmap.madvise(mmap.MADV_DONTNEED)
    fd = os.open(table.filename, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
