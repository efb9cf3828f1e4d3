"""``twopgraph bench scale``: the cost ladder of papers-shaped graphs -- every stage's wall time,
memory and bytes, scale after scale, optionally inside memory caps.

For each scale of ``--scales`` (fractions of ogbn-papers100M: ``1/64``, ``0.018``, ...) a
papers-shaped graph is written once in OGB's binary raw layout
(:func:`twopgraph.datasets.papers.write_ogb_raw`: ``ROOT/papers-S/ogbn_papers100M/raw/...``)
and, for each cap of ``--caps`` (``none`` or GiB; the work folder starts from the raw files
again for each, unless ``--reuse``), the ``--stages`` run in order, each in a process of its
own measured from outside (:class:`~twopgraph.bench.procmem.Runner`, memory sampled every
second, storage bytes counted), inside a cgroup v1 memory group of the cap (root):

* ``ingest``: ``load_dataset("ogbn-papers100M")``: raw files to store (``ingest_detail``:
  the store's ``store.json`` sub-stages);
* ``cluster``: the default clustering of ``twopgraph train``; ``renumber``: the
  cluster-contiguous store (clusters from the cache);
* ``partition``: ``twopgraph partition --num-parts 4``;
* ``train``: ``twopgraph train --epochs 1`` (``--train-flags`` added): ``epoch_s``,
  ``eval_s``, ``test_acc`` from its ``metrics.json``;
* ``pipeline``: the whole pipeline from the raw files (stores and clusters removed first):
  ``twopgraph train --epochs 1``, ingestion included -- capped against uncapped, it says
  whether the papers layout trains in the cap and at what cost.

Every stage uses the store ``--store-dtype auto`` picks in its cgroup. After each stage
``os.sync()`` writes back what it left dirty, timed apart as ``sync_s``.

Rows: ``scale``, ``cap_gib``, ``stage``. Figures: ``wall_s``, ``peak_pss_anon_mib``,
``peak_pss_mib``, ``written_mib``, ``read_mib`` (what missed the page cache), ``sync_s``,
``cgroup_peak_mib``, ``cgroup_oom_kills``, ``num_nodes``, ``num_edges``; between consecutive
scales, ``time_exponent`` and ``anon_exponent``: log(t2/t1) / log(E2/E1) in the directed
edges. ``OUT/scale.png``: time and memory per stage against edges, log-log.

Example::

    twopgraph bench scale --root /work/scale --scales 1/64,1/16
    twopgraph bench scale --root /work/capped --scales 0.018 --stages pipeline --caps none,1.5
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from twopgraph.bench.harness import BENCHMARKS, Benchmark, Context, Row
from twopgraph.errors import ConfigError

if TYPE_CHECKING:
    from twopgraph.bench.procmem import Runner

log = logging.getLogger("twopgraph")

STAGES = ("ingest", "cluster", "renumber", "partition", "train", "pipeline")
DEFAULT_STAGES = "ingest,cluster,renumber,partition,train"
PAPERS = "ogbn-papers100M"


def parse_scale(text: str) -> float:
    """``"1/64"`` -> 0.015625, ``"0.018"`` -> 0.018; ConfigError otherwise."""
    try:
        if "/" in text:
            a, b = text.split("/")
            value = int(a) / int(b)
        else:
            value = float(text)
    except (ValueError, ZeroDivisionError):
        raise ConfigError(f"--scales: cannot read {text!r} (e.g. 1/64, 0.018)") from None
    if not 0 < value <= 1:
        raise ConfigError(f"--scales: {text} is not in (0, 1]")
    return value


@BENCHMARKS.register("scale")
class ScaleBenchmark(Benchmark):
    """The cost ladder of papers-shaped graphs: ingest, cluster, renumber, partition, train
    (or the whole pipeline from the raw files), stage by stage, scale by scale, optionally
    inside memory caps: wall time, peak anonymous memory, bytes written and read.

    Rows: scale, cap_gib, stage. Figures: wall_s, peak_pss_anon_mib, peak_pss_mib,
    written_mib, read_mib, cgroup_peak_mib, time_exponent, anon_exponent."""

    help = "cost ladder of papers-shaped graphs: every stage's time, memory, bytes"
    default_graph = None
    columns = ("num_edges", "wall_s", "peak_pss_anon_mib", "peak_pss_mib", "written_mib",
               "read_mib", "cgroup_peak_mib", "epoch_s", "test_acc", "time_exponent",
               "anon_exponent", "error")

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--root", default="runs/bench_scale",
                       help="work folder: raw files, stores, logs (default: runs/bench_scale)")
        p.add_argument("--scales", default="1/64,1/16",
                       help="comma-separated fractions of papers100M (default: 1/64,1/16)")
        p.add_argument("--stages", default=DEFAULT_STAGES,
                       help=f"stages in order, of {', '.join(STAGES)} "
                            f"(default: {DEFAULT_STAGES})")
        p.add_argument("--caps", default="none",
                       help="comma-separated memory caps in GiB, 'none' = uncapped; the "
                            "stages run once per cap (default: none)")
        p.add_argument("--train-flags", default="", help="more flags of train and pipeline")
        p.add_argument("--compress", action="store_true", help="deflate data.npz's members")
        p.add_argument("--fresh", action="store_true", help="rewrite the raw files")
        p.add_argument("--reuse", action="store_true",
                       help="keep the stores and clusters of an earlier run (figures then "
                            "start from warm files)")
        p.add_argument("--out", default=None, help="folder of scale.png (default: --root)")

    def check(self, a: argparse.Namespace) -> None:
        a._scales = [parse_scale(s.strip()) for s in a.scales.split(",") if s.strip()]
        a._stages = [s.strip() for s in a.stages.split(",") if s.strip()]
        bad = [s for s in a._stages if s not in STAGES]
        if bad or not a._stages or not a._scales:
            raise ConfigError(f"--stages: unknown {bad}; known: {', '.join(STAGES)}")
        try:
            a._caps = [None if c.strip() == "none" else float(c)
                       for c in a.caps.split(",") if c.strip()]
            shlex.split(a.train_flags)
        except ValueError as e:
            raise ConfigError(f"--caps must be 'none' or GiB values ({e})") from None
        if any(c is not None and c <= 0 for c in a._caps) or not a._caps:
            raise ConfigError("--caps: GiB values > 0 or none")
        if any(c is not None for c in a._caps):
            from twopgraph.bench.procmem import MemCgroup
            if why := MemCgroup.probe():
                raise ConfigError(f"--caps needs memory cgroups: {why}")

    def measure(self, a: argparse.Namespace, ctx: Context) -> list[Row]:
        from twopgraph.bench.procmem import Runner
        rows = []
        for scale in a._scales:
            folder, info = raw_layout(Path(a.root), scale, a)
            for cap in a._caps:
                if not a.reuse:  # every cap's ladder starts from the raw files
                    reset(folder)
                runner = Runner(folder / "logs", interval=1.0, io=True)
                for stage in a._stages:
                    fig = run_stage(stage, folder, cap, runner, a, ctx.repeat)
                    rows.append(Row({"scale": scale, "cap_gib": cap, "stage": stage},
                                    {**info, **fig}))
                    log.info("bench scale %g (cap %s) %s: %.1f s", scale, cap, stage,
                             fig.get("wall_s", 0.0))
                    if fig.get("rc"):
                        break
        return rows

    def finish(self, records: list[dict], a: argparse.Namespace, ctx: Context) -> None:
        exponents(records)
        plot(records, Path(a.out or a.root) / "scale.png")


def raw_layout(root: Path, scale: float, a: argparse.Namespace) -> tuple[Path, dict]:
    """The work folder of ``scale`` holding the raw layout (written when absent or
    ``--fresh``) and ``{"num_nodes", "num_edges"}``."""
    import numpy as np

    from twopgraph.datasets.papers import PapersSpec, write_ogb_raw
    spec = PapersSpec(scale=scale)
    folder = root / f"papers-{scale:g}"
    raw = folder / "ogbn_papers100M"
    if not (raw / "RELEASE_v1.txt").is_file() or a.fresh:
        shutil.rmtree(folder, ignore_errors=True)
        t = time.perf_counter()
        write_ogb_raw(spec, raw, compress=a.compress)
        log.info("bench scale %g: wrote the raw layout in %.1f s", scale,
                 time.perf_counter() - t)
    with np.load(raw / "raw" / "data.npz") as z:
        edges = int(z["num_edges_list"][0])
    return folder, {"num_nodes": int(spec.num_nodes), "num_edges": edges}


def reset(folder: Path) -> None:
    """Remove what the stages made in ``folder`` (the raw files stay)."""
    for stale in ("stores", "clusters", "parts", "run"):
        shutil.rmtree(folder / stale, ignore_errors=True)


def _commands(stage: str, folder: Path, a: argparse.Namespace) -> list[str]:
    py, r = sys.executable, str(folder)
    load = ("import logging; logging.basicConfig(level=logging.INFO); "
            "from twopgraph.datasets import load_dataset, resolve_store_dtype; "
            "from twopgraph.runtime.jit import configure_threading; configure_threading(); "
            f"dt = resolve_store_dtype('auto', {PAPERS!r}, {r!r}); "
            f"d = load_dataset({PAPERS!r}, data_root={r!r}, progress=False, store_dtype=dt); ")
    cluster = ("from twopgraph.config import TrainConfig; from twopgraph.pipeline.assemble "
               f"import locality_for; cfg = TrainConfig.of(dataset={PAPERS!r}, data_root={r!r},"
               " schedule='locality', renumber={}); cfg, _ = cfg.resolved(d.num_nodes); "
               "locality_for(d, ['locality'], cfg)")
    train = [py, "-m", "twopgraph", "train", "--dataset", PAPERS, "--data-root", r, "--epochs",
             "1", "--out", str(folder / "run"), "--no-progress", "--overwrite",
             *shlex.split(a.train_flags)]
    return {"ingest": [py, "-c", load], "cluster": [py, "-c", load + cluster.format(False)],
            "renumber": [py, "-c", load + cluster.format(True)],
            "partition": [py, "-m", "twopgraph", "partition", "--dataset", PAPERS,
                          "--data-root", r, "--num-parts", "4", "--out",
                          str(folder / "parts"), "--force"],
            "train": train, "pipeline": train}[stage]


def run_stage(stage: str, folder: Path, cap: float | None, runner: Runner, a: argparse.Namespace,
              repeat: int) -> dict:
    """Run one stage (in a cgroup of ``cap`` GiB); its figures."""
    from twopgraph.bench.procmem import MemCgroup, read_metrics, strip
    if stage == "pipeline":
        reset(folder)
    cmd = _commands(stage, folder, a)
    name = f"{stage}-{'uncapped' if cap is None else f'{cap:g}g'}-{repeat}"
    if cap is None:
        fig = strip(runner.run(name, cmd))
    else:
        with MemCgroup(f"twopgraph-scale-{os.getpid()}-{time.monotonic_ns()}",
                       int(cap * 2**30)) as cg:
            fig = strip(runner.run(name, cmd, cg))
    t = time.perf_counter()
    os.sync()  # the next stage must not pay for this one's writeback
    fig["sync_s"] = time.perf_counter() - t
    stores = sorted((folder / "stores").glob(f"{PAPERS}-*"))
    if stage in ("ingest", "pipeline") and stores and (stores[0] / "store.json").is_file():
        meta = json.loads((stores[0] / "store.json").read_text())
        fig["ingest_detail"] = meta.get("ingest", {}).get("seconds")
        fig["store_mib"] = sum(int(v["bytes"]) for v in meta.get("arrays", {}).values()) / 2**20
    if stage in ("train", "pipeline"):
        fig.update(read_metrics(folder / "run"))
    return fig


def exponents(records: list[dict]) -> None:
    """``time_exponent``/``anon_exponent`` of every stage against the same stage and cap of
    the previous scale: log(t2/t1) / log(E2/E1), in place."""
    prev: dict = {}
    for r in sorted(records, key=lambda r: r["params"]["scale"]):
        key = (r["params"]["stage"], r["params"]["cap_gib"])
        f, p = r["figures"], prev.get(key)
        if p and f.get("rc") == 0 and p.get("rc") == 0 and f["num_edges"] != p["num_edges"]:
            span = math.log(f["num_edges"] / p["num_edges"])
            f["time_exponent"] = math.log(f["wall_s"] / max(p["wall_s"], 1e-3)) / span
            f["anon_exponent"] = math.log(max(f["peak_pss_anon_mib"], 1)
                                          / max(p["peak_pss_anon_mib"], 1)) / span
        prev[key] = f


def plot(records: list[dict], path: Path) -> bool:
    """``scale.png``: wall seconds and peak anonymous MiB per stage against directed edges,
    log-log; False without matplotlib."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        log.warning("no plot: %s needs matplotlib (pip install 'twopgraph[plot]')", path.name)
        return False
    from twopgraph.core.files import atomic_write_bytes
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    axes = fig.subplots(1, 2)
    for key in dict.fromkeys((r["params"]["stage"], r["params"]["cap_gib"]) for r in records):
        pts = sorted((r["figures"]["num_edges"], r["figures"]) for r in records
                     if (r["params"]["stage"], r["params"]["cap_gib"]) == key
                     and r["figures"].get("rc") == 0)
        if not pts:
            continue
        label = key[0] if key[1] is None else f"{key[0]} (cap {key[1]:g} GiB)"
        xs = [x for x, _ in pts]
        axes[0].loglog(xs, [f["wall_s"] for _, f in pts], "o-", label=label)
        axes[1].loglog(xs, [max(f["peak_pss_anon_mib"], 1) for _, f in pts], "o-",
                       label=label)
    axes[0].set(xlabel="directed edges", ylabel="wall seconds", title="time per stage")
    axes[1].set(xlabel="directed edges", ylabel="peak anonymous MiB", title="memory per stage")
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, lambda f: fig.savefig(f, dpi=120, format="png"))
    return True
