"""``twopgraph bench memory``: training (or the feature gather alone) under a memory cap against
the same run uncapped, per variant -- features larger than memory, on any graph.

The graph is ``--graph`` as it is, or, with ``--wide-features F``, a wide copy of it written
*streaming* as an uncompressed ``.npz`` under ``DATA_ROOT/bench/wide/`` (reused while its
parameters are unchanged): the graph, labels and splits of ``--graph`` and F float32
features, the graph's own features through a random map with orthonormal rows plus Gaussian
noise (``--noise``), made in row chunks so the table never exists in memory and stays as
learnable as the original. A graph with one class (the generated families ``rmat:``,
``rgg:``, ``ba:``) gets ``--classes`` labels over graph Voronoi regions of ~2000 vertices (a
vertex takes the class of its nearest of N/2000 random seeds, by hops) and class-centroid
features, so its labels follow its structure.

Runs, one process after the other, measured from outside
(:class:`~twopgraph.bench.procmem.Runner`; the page cache dropped before each unless
``--no-drop-caches``):

- ``convert`` (``--convert``): ``twopgraph info`` converting the ``.npz`` into its store (its
  mtime bumped so it converts again), inside the cap;
- ``reference``: the first variant uncapped, in a cgroup without limit (``--uncapped all``:
  every variant);
- ``capped``: every variant of ``--variants`` (``;``-separated ``train`` flags, default
  ``--host-cache none;--host-cache auto``) inside a cgroup v1 memory group of ``--cap-gib``
  (default: half the feature bytes: the features are twice the cap; page cache included).

``--workload gather`` replaces training by one epoch of sampled batches whose input rows are
gathered from the memory-mapped store (no model; read-ahead on, as training reads a table
larger than memory; variants are ``--host-cache-gb G`` and ``--policy P``).

Without root or cgroup v1 one line says so and the capped runs are skipped (rows with
``skipped``); the uncapped runs still run. Figures: ``wall_s``, ``ru_maxrss_mib``,
``peak_pss_mib``, ``peak_pss_anon_mib``, ``cgroup_peak_mib`` (page cache included),
``cgroup_oom_kills``; from the run: ``epoch_s`` (last epoch), ``first_epoch_s``,
``eval_s``, ``sample_s``, ``load_s``, ``host_cache_rows``, ``host_cache_hit_rate``,
``test_acc``; ``epoch_ratio`` and ``test_acc_diff`` against the reference; ``feat_bytes``,
``feat_over_cap``.

Example::

    twopgraph bench memory --graph scaled:660k --wide-features 2048 --cap-gib 2.5 \\
        --variants "--schedule locality;--schedule random" --train-args "--fanouts 10,5"
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import shutil
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from twopgraph.bench.harness import BENCHMARKS, Benchmark, Context, Row
from twopgraph.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

    from twopgraph.graph.data import GraphData

log = logging.getLogger("twopgraph")

MIB = 1 << 20
BASE_DIM = 64
WIDE_VERSION = 2


@BENCHMARKS.register("memory")
class MemoryBenchmark(Benchmark):
    """Training (or the gather alone) under a memory cap against the same run uncapped, per
    variant, on the graph or a wide copy of it (features larger than memory).

    Rows: run (convert | reference | capped), variant. Figures: wall_s, peak PSS / RSS,
    cgroup_peak_mib, epoch_s, epoch_ratio (capped over uncapped), host cache rows and hit
    rate, test_acc and test_acc_diff."""

    help = "training or gathering under a memory cap vs uncapped (features beyond memory)"
    columns = ("cap_gib", "epoch_s", "epoch_ratio", "first_epoch_s", "load_s", "eval_s",
               "host_cache_hit_rate", "ru_maxrss_mib", "peak_pss_mib", "cgroup_peak_mib",
               "test_acc", "test_acc_diff", "wall_s", "error", "skipped")

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--workload", choices=("train", "gather"), default="train",
                       help="what runs: `twopgraph train`, or one epoch of feature gathers "
                            "without a model (default: train)")
        p.add_argument("--variants", default=None,
                       help="';'-separated flag sets, one run each (default: train: "
                            "'--host-cache none;--host-cache auto'; gather: "
                            "'--host-cache-gb 0;--host-cache-gb 0.25')")
        p.add_argument("--cap-gib", type=float, default=0.0,
                       help="memory cap of the capped runs, GiB (0 = half the feature "
                            "bytes) (default: 0)")
        p.add_argument("--uncapped", choices=("first", "all"), default="first",
                       help="uncapped reference runs: of the first variant, or of all "
                            "(default: first)")
        p.add_argument("--wide-features", type=int, default=0,
                       help="write a wide copy of the graph with this many float32 features "
                            "(0 = the graph as it is) (default: 0)")
        p.add_argument("--noise", type=float, default=0.05,
                       help="noise std of the wide features (default: 0.05)")
        p.add_argument("--classes", type=int, default=8,
                       help="classes of a one-class graph's wide copy (default: 8)")
        p.add_argument("--convert", action="store_true",
                       help="also time the .npz -> store conversion (inside the cap)")
        p.add_argument("--epochs", type=int, default=2,
                       help="training epochs (+ exact evaluation) (default: 2)")
        p.add_argument("--train-args", default="",
                       help="`twopgraph train` flags of every run, e.g. '--fanouts 10,5 "
                            "--batch-size 512' (default: none)")
        p.add_argument("--fanouts", default="15,10,5", help="gather: (default: 15,10,5)")
        p.add_argument("--batch-size", type=int, default=1024, help="gather: (default: 1024)")
        p.add_argument("--batches", type=int, default=0,
                       help="gather: stop after this many batches (0 = the epoch)")
        p.add_argument("--threads", type=int, default=0, help="threads (0 = all) (default: 0)")
        p.add_argument("--seed", type=int, default=0, help="(default: 0)")
        p.add_argument("--out", default="runs/bench_memory",
                       help="run folders and logs (default: runs/bench_memory)")
        p.add_argument("--sample-interval", type=float, default=0.5,
                       help="seconds between memory samples (default: 0.5)")
        p.add_argument("--no-drop-caches", action="store_true",
                       help="keep the page cache between runs")

    def check(self, a: argparse.Namespace) -> None:
        default = ("--host-cache none;--host-cache auto" if a.workload == "train"
                   else "--host-cache-gb 0;--host-cache-gb 0.25")
        a._variants = [v.strip() for v in (a.variants or default).split(";") if v.strip()]
        try:
            for v in [*a._variants, a.train_args]:
                shlex.split(v)
        except ValueError as e:
            raise ConfigError(f"--variants/--train-args: {e}") from None
        from twopgraph.core.fanouts import parse_fanouts
        parse_fanouts(a.fanouts)  # checked here, not in each run it starts
        if not a._variants:
            raise ConfigError("--variants: give at least one")
        if a.cap_gib < 0 or a.wide_features < 0 or a.epochs < 1 or a.classes < 2:
            raise ConfigError("need --cap-gib >= 0, --wide-features >= 0, --epochs >= 1, "
                              "--classes >= 2")
        if Path(a.out).exists() and not Path(a.out).is_dir():
            raise ConfigError(f"--out {a.out} exists and is not a folder")

    def measure(self, a: argparse.Namespace, ctx: Context) -> list[Row]:
        from twopgraph.bench.procmem import MemCgroup, Runner, drop_caches, strip
        data = ctx.data()
        dataset, feat_bytes = ctx.dataset(), int(data.num_nodes) * data.num_features * 4
        if a.wide_features:
            wide = make_wide(data, ctx, a)
            dataset, feat_bytes = wide["path"], wide["feat_bytes"]
        cap = int(a.cap_gib * 2**30) if a.cap_gib else max(1, feat_bytes // 2)
        why = MemCgroup.probe()
        if why:
            log.warning("bench memory: %s: the capped runs are skipped", why)
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        runner = Runner(out / "logs", dict(os.environ), a.sample_interval)
        data_flags = ["--dataset", dataset] + (["--data-root", ctx.data_root]
                                               if ctx.data_root else [])
        plan = [("convert", "", True)] if a.convert and dataset.endswith(".npz") else []
        plan += [("reference", v, False) for v in
                 (a._variants if a.uncapped == "all" else a._variants[:1])]
        plan += [("capped", v, True) for v in a._variants]
        rows = []
        for i, (run, variant, capped) in enumerate(plan):
            params = {"run": run, "variant": variant, "capped": capped}
            fig = {"feat_bytes": feat_bytes, "feat_over_cap": feat_bytes / cap,
                   "cap_gib": cap / 2**30 if capped else None}
            if capped and why:
                rows.append(Row(params, {**fig, "skipped": why}))
                continue
            if not a.no_drop_caches and (err := drop_caches()):
                log.debug("bench memory: %s", err)
            name = f"{run}-{i}"
            folder = out / name
            shutil.rmtree(folder, ignore_errors=True)
            cmd = self.command(a, run, variant, data_flags, folder)
            if run == "convert":
                os.utime(dataset)  # a new mtime: the cached store is stale, converts again
            if why:  # no cgroups: uncapped runs without the cgroup's counters
                rec = runner.run(name, cmd)
            else:
                with MemCgroup(f"twopgraph-bench-{os.getpid()}-{ctx.repeat}-{i}",
                               cap if capped else None) as cg:
                    rec = runner.run(name, cmd, cg)
            fig.update(strip(rec))
            fig.update(self.figures(a, run, rec, folder))
            rows.append(Row(params, fig))
        compare(rows)
        return rows

    def command(self, a: argparse.Namespace, run: str, variant: str, data_flags: list[str],
                folder: Path) -> list[str]:
        """The command of one run."""
        from twopgraph.bench.procmem import twopgraph_cmd
        threads = ["--threads", str(a.threads)]
        if run == "convert":
            return twopgraph_cmd("info", *data_flags, "--json")
        if a.workload == "gather":
            return [sys.executable, "-c", ("import sys; from twopgraph.bench.memory import "
                                           "gather_child; sys.exit(gather_child(sys.argv[1:]))"),
                    *data_flags,
                    "--fanouts", a.fanouts, "--batch-size", str(a.batch_size), "--batches",
                    str(a.batches), *threads, *shlex.split(variant)]
        return twopgraph_cmd("train", *data_flags, "--out", str(folder), "--epochs",
                             str(a.epochs), "--eval-every", "0", "--seed", str(a.seed),
                             "--no-progress", *threads, *shlex.split(a.train_args),
                             *shlex.split(variant))

    def figures(self, a: argparse.Namespace, run: str, rec: dict, folder: Path) -> dict:
        """What the run itself reports."""
        from twopgraph.bench.procmem import last_json, read_metrics
        if run == "convert":
            info = last_json(rec["stdout"])
            return {"store_disk_mib": info.get("store_disk_mib")}
        if a.workload == "gather":
            return last_json(rec["stdout"])
        return read_metrics(folder)


def compare(rows: list[Row]) -> None:
    """``epoch_ratio`` and ``test_acc_diff`` of every run against the first reference."""
    ref = next((r.figures for r in rows if r.params["run"] == "reference"), {})
    for r in rows:
        f = r.figures
        if r.params["run"] == "convert" or f is ref:
            continue
        if ref.get("epoch_s") and f.get("epoch_s"):
            f["epoch_ratio"] = f["epoch_s"] / ref["epoch_s"]
        if ref.get("test_acc") is not None and f.get("test_acc") is not None:
            f["test_acc_diff"] = f["test_acc"] - ref["test_acc"]


def gather_child(argv: list[str]) -> int:
    """``--workload gather``'s child: one epoch of sampled batches whose input rows are
    gathered (read-ahead on, optional host row cache), in this process; one JSON line."""
    import numpy as np

    from twopgraph.cache import HostFeatures, PolicyContext, attach_host_cache
    from twopgraph.config import DataConfig
    from twopgraph.locality import make_scheduler
    from twopgraph.pipeline.loader import Loader
    from twopgraph.runtime.jit import configure_threading
    from twopgraph.sampler import make_sampler
    p = argparse.ArgumentParser(prog="bench memory gather")
    for flag, kind, default in (("--dataset", str, None), ("--data-root", str, None),
                                ("--fanouts", str, "15,10,5"), ("--batch-size", int, 1024),
                                ("--batches", int, 0), ("--threads", int, 0),
                                ("--host-cache-gb", float, 0.0), ("--policy", str, "degree"),
                                ("--store-dtype", str, "auto")):
        p.add_argument(flag, type=kind, default=default)
    a = p.parse_args(argv)
    configure_threading()
    data = DataConfig(a.dataset, a.data_root, store_dtype=a.store_dtype).validate().load(
        progress=False)
    fanouts = [int(x) for x in a.fanouts.split(",")]
    sampler = make_sampler("neighbor", data.graph, fanouts, seed=0)
    sched = make_scheduler("random", data.train_idx, a.batch_size, seed=0)
    src = HostFeatures(data.feat, readahead=True)
    ctx = PolicyContext(data.graph, data.train_idx, fanouts, a.batch_size, scheduler=sched,
                        sampler=sampler)
    t = time.perf_counter()
    rc = (attach_host_cache(src, a.policy, ctx, gb=a.host_cache_gb)
          if a.host_cache_gb > 0 else None)
    fill = time.perf_counter() - t
    loader = Loader(sched, sampler, src, threads=a.threads, prefetch=2)
    t = time.perf_counter()
    rows = 0
    for i, mb in enumerate(loader.epoch(0)):
        rows += int(mb.input_nodes.shape[0])
        if a.batches and i + 1 >= a.batches:
            break
    s = loader.stats
    print(json.dumps({"epoch_s": time.perf_counter() - t, "load_s": s.load_s,
                      "sample_s": s.sample_s, "num_batches": s.num_batches,
                      "input_nodes_per_batch": rows / max(1, s.num_batches),
                      "host_cache_rows": rc.num_rows if rc else 0, "host_cache_fill_s": fill,
                      "host_cache_hit_rate": s.host_cache_hits / s.host_cache_lookups
                      if s.host_cache_lookups else None,
                      "readahead_ranges": s.readahead_ranges,
                      "feat_bytes": int(np.asarray(data.feat).nbytes)}), flush=True)
    return 0


# -- the wide dataset, written streaming ---------------------------------------------------------
@dataclass
class Chunked:
    """An array given as row chunks: ``chunks()`` yields arrays that stack (axis 0) into
    ``shape``/``dtype``; only one chunk is in memory at a time."""

    shape: tuple
    dtype: object
    chunks: Callable[[], Iterable]


def _rows(arr, chunk_bytes: int = 64 * MIB):
    if arr.ndim == 0:
        yield arr
        return
    step = max(1, chunk_bytes // max(1, arr[:1].nbytes))
    for i in range(0, arr.shape[0], step):
        yield arr[i:i + step]


def _checked(key: str, arr: Chunked):
    rows = 0
    for c in arr.chunks():
        if c.shape[1:] != tuple(arr.shape[1:]):
            raise ValueError(f"{key}: chunk of shape {c.shape} in an array of shape {arr.shape}")
        rows += c.shape[0]
        yield c
    if rows != arr.shape[0]:
        raise ValueError(f"{key}: chunks hold {rows} rows, expected {arr.shape[0]}")


def write_npz_streaming(path: str | Path, arrays: dict) -> Path:
    """Write ``arrays`` (``{key: ndarray | Chunked}``) as an uncompressed zip64 ``.npz``, one
    chunk at a time, atomically (``.<name>.tmp-<pid>`` beside it, then rename)."""
    import numpy as np

    from twopgraph.store.npz import write_npy_member
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            for key, arr in arrays.items():
                if isinstance(arr, Chunked):
                    write_npy_member(zf, key, arr.shape, arr.dtype, _checked(key, arr))
                else:
                    arr = np.asarray(arr)
                    write_npy_member(zf, key, arr.shape, arr.dtype, _rows(arr))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def wide_features(base: np.ndarray, width: int, noise: float, seed: int, chunk_rows: int) -> Chunked:
    """``base`` (N x f) through a random map with orthonormal rows (f x ``width``: distances,
    hence class and community signal, are kept) plus Gaussian noise of std ``noise`` per
    dimension, as float32 row chunks (deterministic for a ``seed``)."""
    import numpy as np
    n, f = base.shape
    g = np.random.default_rng([seed, 0]).standard_normal((width, f))
    q = np.linalg.qr(g)[0] if width >= f else g / np.linalg.norm(g, axis=1, keepdims=True)
    proj = np.ascontiguousarray(q.T, dtype=np.float32)  # f x width

    def chunks():
        for i, start in enumerate(range(0, n, chunk_rows)):
            x = np.asarray(base[start:start + chunk_rows], dtype=np.float32) @ proj
            if noise:
                x += noise * np.random.default_rng([seed, 1, i]).standard_normal(
                    x.shape, dtype=np.float32)
            yield x
    return Chunked((n, width), np.dtype(np.float32), chunks)


def voronoi_labels(indptr: np.ndarray, indices: np.ndarray, seed: int, classes: int = 8,
                   region: int = 2000) -> np.ndarray:
    """A class per vertex following the graph's structure: the class of its nearest (by
    hops) of N/``region`` random seeds, each seed a random class of ``classes``."""
    import numpy as np
    import scipy.sparse as sp
    from scipy.sparse.csgraph import dijkstra
    n = indptr.shape[0] - 1
    rng = np.random.default_rng([seed, 7])
    seeds = rng.choice(n, size=min(n, max(classes, n // region)), replace=False)
    adj = sp.csr_matrix((np.ones(indices.shape[0], np.float32), indices, indptr), shape=(n, n))
    _, _, src = dijkstra(adj, directed=False, indices=seeds, unweighted=True, min_only=True,
                         return_predecessors=True)
    where = np.full(n, -1, np.int64)
    where[seeds] = rng.integers(0, classes, seeds.shape[0])
    return np.where(src >= 0, where[np.maximum(src, 0)],
                    rng.integers(0, classes, n)).astype(np.int64)


def make_wide(data: GraphData, ctx: Context, a: argparse.Namespace) -> dict:
    """Write (or reuse, when made with the same parameters) the wide ``.npz`` of the
    context's graph: ``{"path", "feat_bytes", ...}``."""
    import numpy as np

    from twopgraph.datasets import resolve_data_root
    width = a.wide_features
    params = {"graph": ctx.dataset(), "num_nodes": int(data.num_nodes), "features": width,
              "noise": a.noise, "classes": a.classes, "seed": a.seed, "version": WIDE_VERSION}
    folder = resolve_data_root(ctx.data_root) / "bench" / "wide"
    path = folder / f"wide-{data.name}-{data.num_nodes}x{width}.npz"
    side = path.with_suffix(".wide.json")
    try:
        info = json.loads(side.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        info = {}
    if info.get("params") == params:
        log.info("bench memory: reusing %s", path)
        return info
    n = int(data.num_nodes)
    label, classes = np.asarray(data.label), int(data.num_classes)
    base = data.feat
    if classes < 2:  # a generated family: labels and features that follow the structure
        label = voronoi_labels(np.asarray(data.graph.indptr), np.asarray(data.graph.indices),
                               a.seed, a.classes)
        classes = a.classes
        rng = np.random.default_rng([a.seed, 3])
        centroids = rng.standard_normal((classes, BASE_DIM)).astype(np.float32)
        base = centroids[label] + 8.0 * rng.standard_normal((n, BASE_DIM), dtype=np.float32)
    arrays = {"indptr": data.graph.indptr, "indices": data.graph.indices,
              "feat": wide_features(base, width, a.noise, a.seed, max(1, 64 * MIB // (4 * width))),
              "label": label, "train_idx": data.train_idx, "val_idx": data.val_idx,
              "test_idx": data.test_idx, "num_classes": np.asarray(np.int64(classes))}
    log.info("bench memory: writing %s (%d x %d float32 = %.2f GiB of features, streaming)",
             path, n, width, n * width * 4 / 2**30)
    t = time.perf_counter()
    write_npz_streaming(path, arrays)
    info = {"params": params, "path": str(path), "feat_bytes": n * width * 4,
            "write_s": time.perf_counter() - t, "bytes": path.stat().st_size}
    with tempfile.NamedTemporaryFile("w", dir=folder, delete=False, suffix=".tmp") as f:
        f.write(json.dumps(info, indent=1) + "\n")
    os.replace(f.name, side)
    return info
