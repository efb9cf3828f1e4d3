"""``twopgraph bench cache``: hit rates and bytes of every cache policy x schedule x budget,
against the offline optimum of the same access stream.

For each schedule, one epoch (epoch ``--epoch``, default 0) is sampled with the real sampler
and scheduler and its access stream (the input vertices of every batch) is recorded. Each
policy x ratio is then replayed on that stream through the real
:class:`~twopgraph.cache.directory.CacheDirectory` (the bookkeeping ``FeatureCache`` runs);
with ``--copy`` the features are really moved on ``--device`` through the feature source
training builds (:func:`~twopgraph.cache.build_feature_source`: the store's table as it is,
rows gathered into small reusable pinned staging buffers -- never the whole table pinned -- and
copied on the source's stream) and the gather time is reported as well: the gathers are
queued as training queues them (the consumer stream waits on each batch's event, no host
synchronisation per batch) and the device is synchronised once, at the end of the timed
region. The counts are exact either way.

Outputs in ``--out``:

- ``cache.csv``: one row per policy x schedule x ratio, plus the offline optimum as rows with
  policy ``optimal``. Columns (bytes are feature bytes, ``row_bytes`` per row): the set-up
  ``dataset``, ``fanouts`` (as given to ``--fanouts``, e.g. ``"15,10,5"``), ``batch_size``,
  ``seed``; ``policy``, ``schedule``, ``ratio``;

  ``feature_rows`` (sum of |input_nodes|), ``cache_hits``, ``hit_rate``, ``h2d_bytes`` (every
  copy after the one-off fill), ``cache_fill_bytes`` (the one-off fill), ``total_bytes`` (the
  two together), ``transfer_ratio`` = h2d_bytes / (feature_rows x row_bytes),
  ``bytes_vs_baseline`` = h2d_bytes / (feature bytes of ``none`` + ``random``: what DGL's
  loader copies), ``total_vs_baseline`` = total_bytes / the same, ``vs_optimal`` =
  h2d_bytes / ``optimal_h2d_bytes`` (the fewest bytes any cache of the budget could copy after
  a free, optimally chosen initial fill), ``total_vs_optimal`` = total_bytes /
  ``optimal_total_bytes`` (the fewest bytes any cache of the budget starting empty could copy,
  i.e. the floor of fill + h2d). For the ``optimal`` rows ``h2d_bytes``/``cache_fill_bytes``
  are those of the free-fill optimum and ``total_bytes`` is the empty-start optimum.
  Also ``budget_rows``, ``num_batches``, ``input_nodes_per_batch``, ``policy_s`` (building
  the policy, pre-sampling included), ``replay_s``, ``presample_s`` (the pre-sampling part of
  ``policy_s``: only when ``presample`` is among ``--policies``) and ``gather_s`` (only with
  ``--copy``). A column no row has a value for is left out; the others keep this order.
- ``cache.png``: hit rate and total bytes / baseline (both on linear axes) against the cache
  ratio (x ticks at the ratios asked for), one line per policy x schedule: the colour and the
  (hollow) marker are the policy's (the same in every run, whatever the order of
  ``--policies``), the line style the schedule's; markers shrink in drawing order, so lines
  that coincide (two policies caching the same rows, two schedules giving the same batches)
  stay visible as nested markers; the optimum of each schedule is pale black in that
  schedule's line style ("optimal / <schedule>"). One legend, below both panels.

A schedule whose epoch is **one batch** (the training set fits in one batch) gives every
schedule the same batch, and no cache is reused within that epoch: its bytes beyond ``none``'s
are the cache's fill only. Such rows are flagged (``*`` in the printed table, with a note; a
warning line in the log) and the plot says so under its title.

Example::

    twopgraph bench cache --dataset synthetic-small --policies none,degree,presample,layer \\
        --ratios 0.01,0.05,0.1,0.2,0.4 --schedules random,locality --out runs/cache
"""

from __future__ import annotations

import argparse
import copy
import csv
import functools
import io
import json
import logging
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

from twopgraph.bench.config import BenchCacheConfig
from twopgraph.bench.harness import BENCHMARKS, STDOUT, Benchmark, Context, Row
from twopgraph.core.files import atomic_write_bytes

if TYPE_CHECKING:
    import numpy as np
    import torch
    from matplotlib.figure import Figure

    from twopgraph.graph.data import GraphData

log = logging.getLogger("twopgraph")

COLUMNS = ["dataset", "fanouts", "batch_size", "seed", "policy", "schedule", "ratio",
           "budget_rows", "feature_rows", "cache_hits", "hit_rate", "h2d_bytes",
           "cache_fill_bytes", "total_bytes", "transfer_ratio",
           "bytes_vs_baseline", "total_vs_baseline", "vs_optimal", "total_vs_optimal",
           "optimal_h2d_bytes", "optimal_total_bytes", "row_bytes", "num_batches",
           "input_nodes_per_batch", "policy_s", "replay_s", "presample_s", "gather_s"]


def run_bench(data: GraphData, policies: list[str], ratios: list[float], schedules: list[str],
              fanouts: list[int], batch_size: int, seed: int = 0, epoch: int = 0,
              parts: np.ndarray | None = None, balance: int = 16,
              policy_options: dict | None = None, copy: bool = False, device: str = "cpu",
              dtype: torch.dtype | None = None,
              threads: int = 0, sampler: str = "neighbor",
              sampler_kwargs: dict | None = None) -> list[dict]:
    """All rows of ``cache.csv`` (see the module doc) for ``data`` (already renumbered /
    clustered as the schedules need: ``parts`` = cluster of every vertex); the registered
    ``sampler`` (``--sampler``, with the keywords ``sampler_kwargs``, e.g. LABOR's options)
    samples; sampling and pre-sampling run on ``threads`` threads (0 = all cores)."""
    import numpy as np
    import torch

    from twopgraph.cache import (
        CacheDirectory,
        PolicyContext,
        belady_min,
        make_policy,
        replay,
    )
    from twopgraph.locality import make_scheduler
    from twopgraph.pipeline.loader import Loader
    from twopgraph.runtime.jit import thread_count
    from twopgraph.sampler import make_sampler
    policy_options = policy_options or {}
    n = data.num_nodes
    row_dtype = dtype or torch.float32
    row_bytes = data.num_features * torch.empty(0, dtype=row_dtype).element_size()
    sampler = make_sampler(sampler, data.graph, fanouts, seed=seed, **(sampler_kwargs or {}))

    streams, scheds = {}, {}
    for s in dict.fromkeys(["random", *schedules]):  # the baseline needs random
        scheds[s] = make_scheduler(s, data.train_idx, batch_size, seed=seed, parts=parts,
                                   labels=data.label, balance=balance)
        loader = Loader(scheds[s], sampler, threads=threads)
        t = time.perf_counter()
        streams[s] = loader.input_stream(epoch)
        secs = time.perf_counter() - t
        log.info("schedule %s: %d batches, %.0f input rows per batch, sampled in %.1f s", s,
                 len(streams[s]), np.mean([x.shape[0] for x in streams[s]]), secs)
    baseline = sum(x.shape[0] for x in streams["random"]) * row_bytes

    rows = []
    for s in schedules:
        stream = streams[s]
        ctx = PolicyContext(data.graph, data.train_idx, list(fanouts), batch_size,
                            scheduler=scheds[s], sampler=sampler, seed=seed,
                            workers=loader.plan.total)
        built = {}
        for p in policies:  # policies do not depend on the budget: build each once
            t = time.perf_counter()
            with thread_count(loader.plan.total):
                built[p] = (make_policy(p, ctx, **policy_options.get(p, {})),
                            time.perf_counter() - t)
        for r in ratios:
            budget = int(r * n)
            t = time.perf_counter()
            best = belady_min(stream, n, budget, start="best")
            empty = belady_min(stream, n, budget, start="empty")
            log.info("%s ratio %g: optimum in %.1f s", s, r, time.perf_counter() - t)
            opt_h2d, opt_total = best.h2d_rows * row_bytes, empty.h2d_rows * row_bytes
            rows.append(_row("optimal", s, r, budget, best, row_bytes, baseline, opt_h2d,
                             opt_total, total=opt_total, policy_s=0.0,
                             replay_s=time.perf_counter() - t))
            for p in policies:
                proto, policy_s = built[p]
                policy = proto.fresh()
                t = time.perf_counter()
                gather_s = None
                if copy:
                    source = copy_source(data, policy, ctx, device, budget, row_dtype)
                    counters, gather_s = _replay_copy(source, stream)
                else:
                    counters = replay(stream, CacheDirectory(n, budget, policy))
                row = _row(p, s, r, budget, counters, row_bytes, baseline, opt_h2d, opt_total,
                           policy_s=policy_s, replay_s=time.perf_counter() - t)
                row["presample_s"] = policy.info().get("presample_s")
                row["gather_s"] = gather_s
                rows.append(row)
                log.info("%-9s %-8s ratio %-5g hit %.3f  total/base %.3f  x opt %.3f", p, s, r,
                         row["hit_rate"], row["total_vs_baseline"], row["total_vs_optimal"])
    return rows


def copy_source(data: GraphData, policy, ctx, device: str, budget: int,
                dtype: torch.dtype):
    """The feature source ``--copy`` moves rows through: the one training builds
    (:func:`~twopgraph.cache.build_feature_source` over ``data.feat`` as it is stored, rows
    rounded to ``dtype``), a :class:`~twopgraph.cache.FeatureCache` of ``budget`` rows driven
    by ``policy`` (a policy object, fresh for this replay), or the plain
    :class:`~twopgraph.cache.HostFeatures` for a budget of 0 rows or a policy that caches
    nothing. Pinned host memory is its staging only (two buffers of a batch's misses; the
    initial fill goes in 64 MiB chunks), never the table."""
    from twopgraph.cache import FEAT_DTYPES, build_feature_source
    name = next(k for k, v in FEAT_DTYPES.items() if v == dtype)
    return build_feature_source(policy, data.feat, ctx, device, budget=budget, dtype=name,
                                readahead=False)


def _replay_copy(source, stream):
    """Replay with real feature movement; returns (counters, seconds spent gathering): the
    host time of every ``gather`` (planning, the host gather into staging, queueing the
    copies) plus, on CUDA, the wait for the device to finish them all -- one synchronisation
    at the end of the timed region, none per batch (the consumer stream waits on each batch's
    event, as training's does)."""
    import torch

    from twopgraph.cache.directory import announced
    cuda = bool(getattr(source, "cuda", False))
    consumer = torch.cuda.current_stream(source.device) if cuda else None
    t_gather = 0.0
    for ids in announced(stream, source.lookahead, source.announce):
        t0 = time.perf_counter()
        out, ev = source.gather(ids)
        if ev is not None:
            consumer.wait_event(ev)
        t_gather += time.perf_counter() - t0
        del out
    if cuda:
        t0 = time.perf_counter()
        torch.cuda.synchronize(source.device)
        t_gather += time.perf_counter() - t0
    return source.counters.copy(), t_gather


def _row(policy, schedule, cache_ratio, budget, c, row_bytes, baseline, opt_h2d, opt_total,
         total=None, **extra) -> dict:
    from twopgraph.core.metrics import ratio, transfer_metrics
    h2d = c.h2d_rows * row_bytes
    fill = c.fill_rows * row_bytes
    total = h2d + fill if total is None else total
    row = {
        "policy": policy, "schedule": schedule, "ratio": cache_ratio, "budget_rows": budget,
        "feature_rows": c.feature_rows, "cache_hits": c.cache_hits,
        "h2d_bytes": h2d, "cache_fill_bytes": fill, "total_bytes": total,
        "bytes_vs_baseline": ratio(h2d, baseline), "total_vs_baseline": ratio(total, baseline),
        "vs_optimal": ratio(h2d, opt_h2d), "total_vs_optimal": ratio(total, opt_total),
        "optimal_h2d_bytes": opt_h2d, "optimal_total_bytes": opt_total, "row_bytes": row_bytes,
        "num_batches": c.num_batches, "presample_s": None, "gather_s": None,
        **transfer_metrics(feature_rows=c.feature_rows, cache_hits=c.cache_hits, h2d_bytes=h2d,
                           row_bytes=row_bytes, num_batches=c.num_batches),
    }
    row.update(extra)
    return row


def write_csv(rows: list[dict], path: Path) -> None:
    """``cache.csv``: the :data:`COLUMNS` (in that order) that at least one row has a value
    for, so that no column is always empty (``presample_s`` without ``presample``,
    ``gather_s`` without ``--copy``)."""
    columns = [k for k in COLUMNS if any(r.get(k) is not None for r in rows)]
    text = io.StringIO(newline="")
    w = csv.DictWriter(text, fieldnames=columns, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in columns})
    # atomically: a run stopped (or failing) while writing leaves the previous file or none
    atomic_write_bytes(path, lambda f: f.write(text.getvalue().encode()))


# Fixed per name, so that a policy has the same colour in every plot of every run (no grey:
# the optimum is drawn in pale black).
POLICY_COLORS = {"none": "#ff7f0e", "degree": "#1f77b4", "presample": "#2ca02c",
                 "layer": "#d62728"}
_EXTRA_COLORS = ("#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf")
POLICY_MARKERS = {"none": "o", "degree": "s", "presample": "^", "layer": "D"}
_EXTRA_MARKERS = ("v", "P", "X", "*", "h")
SCHEDULE_STYLES = {"random": "-", "locality": "--", "auto": "-."}
_EXTRA_STYLES = (":", (0, (5, 1, 1, 1)), (0, (1, 3)))
#: marker sizes (points) of the first and the last line drawn: every line's marker is a bit
#: smaller than the one drawn before it, so coinciding lines show as nested hollow markers
MARKER_SIZES = (12.0, 4.5)


def policy_color(policy: str) -> str:
    """The colour of ``policy`` in ``cache.png``: fixed for the built-in policies, derived
    from the name (not from the order of ``--policies``) for registered extra ones."""
    if policy in POLICY_COLORS:
        return POLICY_COLORS[policy]
    return _EXTRA_COLORS[zlib.crc32(policy.encode()) % len(_EXTRA_COLORS)]


def policy_marker(policy: str) -> str:
    """The marker of ``policy`` in ``cache.png``, fixed per name."""
    if policy in POLICY_MARKERS:
        return POLICY_MARKERS[policy]
    return _EXTRA_MARKERS[zlib.crc32(policy.encode()) % len(_EXTRA_MARKERS)]


def schedule_style(schedule: str) -> str | tuple[int, tuple[int, ...]]:
    """The line style of ``schedule`` in ``cache.png``, fixed per name."""
    if schedule in SCHEDULE_STYLES:
        return SCHEDULE_STYLES[schedule]
    return _EXTRA_STYLES[zlib.crc32(schedule.encode()) % len(_EXTRA_STYLES)]


def one_batch_schedules(rows: list[dict]) -> list[str]:
    """The schedules of ``rows`` whose measured epoch is one batch (every schedule gives that
    batch, so they do not differ, and a cache's bytes beyond ``none``'s are its fill)."""
    return list(dict.fromkeys(r["schedule"] for r in rows if int(r.get("num_batches", 0)) == 1))


ONE_BATCH_NOTE = ("one batch per epoch: every schedule gives the same batch and no cached row "
                  "is reused within the epoch (bytes beyond none's are the cache's fill only)")


def figure(rows: list[dict], title: str = "") -> Figure:
    """The ``cache.png`` figure (a :class:`matplotlib.figure.Figure`, not registered with
    pyplot) of ``rows``; raises ImportError without matplotlib."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

    schedules = list(dict.fromkeys(r["schedule"] for r in rows))
    policies = [p for p in dict.fromkeys(r["policy"] for r in rows) if p != "optimal"]
    fig = Figure(figsize=(12, 5.2 + 0.22 * (len(policies) + 1)), layout="constrained")
    axes = fig.subplots(1, 2)
    drawn = [(s, p) for s in schedules for p in policies
             if any(r["schedule"] == s and r["policy"] == p for r in rows)]
    big, small = MARKER_SIZES
    step = (big - small) / max(1, len(drawn) - 1)
    for s in schedules:
        style = schedule_style(s)
        for p in ["optimal", *policies]:  # per schedule: the optimum first, then the policies
            pts = sorted((r["ratio"], r["hit_rate"], r["total_vs_baseline"])
                         for r in rows if r["schedule"] == s and r["policy"] == p)
            if not pts:
                continue
            x = [a for a, _, _ in pts]
            if p == "optimal":  # wide, pale black below the policies: those that reach it
                kw = {"color": "black", "linestyle": style, "linewidth": 4.5, "alpha": 0.4,
                      "zorder": 1, "label": f"optimal / {s}"}  # stay visible above the floor
            else:
                i = drawn.index((s, p))  # later lines: smaller markers, drawn on top
                kw = {"color": policy_color(p), "linestyle": style, "marker": policy_marker(p),
                      "markersize": big - i * step, "markerfacecolor": "none",
                      "markeredgewidth": 1.5, "linewidth": 1.5, "zorder": 2 + i,
                      "label": f"{p} / {s}"}
            axes[0].plot(x, [b for _, b, _ in pts], **kw)
            axes[1].plot(x, [c for _, _, c in pts], **kw)
    axes[0].set_ylabel("hit rate")
    axes[1].set_ylabel("bytes copied (fill included) / none+random")  # linear: ~0.5-1.5
    ratios = sorted({float(r["ratio"]) for r in rows})
    for ax in axes:
        ax.set_xlabel("cache ratio (fraction of feature rows)")
        if ratios and ratios[0] > 0:  # a log axis cannot show a zero budget
            ax.set_xscale("log")
        ax.xaxis.set_major_locator(FixedLocator(ratios))  # after set_xscale, which resets them
        ax.xaxis.set_major_formatter(FixedFormatter([f"{r:g}" for r in ratios]))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.grid(True, which="major", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:  # entries run schedule by schedule: one column per schedule
        fig.legend(handles, labels, loc="outside lower center", ncol=max(1, len(schedules)),
                   fontsize=8, handlelength=4)
    single = one_batch_schedules(rows)
    if single:
        note = f"{', '.join(single)}: {ONE_BATCH_NOTE}"
        title = f"{title}\n{note}" if title else note
    if title:
        fig.suptitle(title, color="firebrick" if single else "black")
    return fig


def plot(rows: list[dict], path: Path, title: str = "") -> bool:
    """Write :func:`figure` to ``path``; False (and one log line) when matplotlib, an optional
    dependency, is not installed."""
    try:
        fig = figure(rows, title)
    except ImportError:
        log.warning("no plot: %s needs matplotlib (pip install 'twopgraph[plot]')", path.name)
        return False
    atomic_write_bytes(path, lambda f: fig.savefig(f, dpi=120, format="png"))
    return True


def format_table(rows: list[dict]) -> str:
    """The printed table; a schedule of one batch per epoch is marked ``*`` (with a note
    below: :data:`ONE_BATCH_NOTE`)."""
    single = one_batch_schedules(rows)
    head = (f"{'policy':<10}{'schedule':<10}{'ratio':>6}{'hit_rate':>10}{'h2d_MiB':>11}"
            f"{'fill_MiB':>10}{'transfer':>10}{'vs_base':>9}{'tot/base':>9}{'vs_opt':>8}"
            f"{'tot/opt':>8}")
    lines = [head, "-" * len(head)]
    for r in sorted(rows, key=lambda r: (r["schedule"], r["ratio"], r["policy"] != "optimal",
                                         r["policy"])):
        sched = r["schedule"] + ("*" if r["schedule"] in single else "")
        lines.append(
            f"{r['policy']:<10}{sched:<10}{r['ratio']:>6g}{r['hit_rate']:>10.4f}"
            f"{r['h2d_bytes'] / 2**20:>11.1f}{r['cache_fill_bytes'] / 2**20:>10.1f}"
            f"{r['transfer_ratio']:>10.4f}{r['bytes_vs_baseline']:>9.4f}"
            f"{r['total_vs_baseline']:>9.4f}{r['vs_optimal']:>8.3f}{r['total_vs_optimal']:>8.3f}")
    if single:
        lines.append(f"* {ONE_BATCH_NOTE}")
    return "\n".join(lines)


# -- the benchmark ---------------------------------------------------------------------------------
@BENCHMARKS.register("cache")
class CacheBenchmark(Benchmark):
    """Feature-cache policies x schedules x budgets against the offline optimum of the same
    access stream: hit rates and bytes (exact counts), ``cache.csv`` and ``cache.png`` in
    ``--out`` (the module :mod:`twopgraph.bench.cache` describes every column).

    ``--json`` alone prints the rows as JSON lines (the columns of ``cache.csv``), else a
    table; with ``--repeat N`` the timings (``policy_s``, ``replay_s``, ``gather_s``) are
    medians, the counts are the same in every repeat."""

    help = "feature-cache policies x schedules x budgets vs the offline optimum"
    own_data_flags = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        BenchCacheConfig.add_arguments(parser, exclude=("json",))

    def config(self, a: argparse.Namespace) -> BenchCacheConfig:
        """The verb's config from the parsed flags (``--json`` alone: JSON rows)."""
        ns = copy.copy(a)
        ns.json = a.json == STDOUT
        return BenchCacheConfig.from_args(ns)

    def check(self, a: argparse.Namespace) -> None:
        self.config(a).validate()

    def measure(self, a: argparse.Namespace, ctx: Context) -> list[Row]:
        rows, _ = measure_rows(self.config(a))
        return [Row({"policy": r["policy"], "schedule": r["schedule"], "ratio": r["ratio"]}, r)
                for r in rows]

    def finish(self, records: list[dict], a: argparse.Namespace, ctx: Context) -> None:
        self.plotted = write_outputs([r["figures"] for r in records], self.config(a))

    def show(self, records: list[dict], a: argparse.Namespace) -> None:
        print_rows([r["figures"] for r in records], self.config(a),
                   getattr(self, "plotted", False))


def auto_sampler(s, data: GraphData, seed: int, threads: int) -> str:
    """``--sampler`` of the sampling options ``s``, ``auto`` decided as ``train`` decides it
    (:func:`~twopgraph.sampler.choose_sampler`) on random batches of ``data``'s training
    vertices (one decision for every schedule compared)."""
    if s.sampler != "auto":
        return s.sampler
    from twopgraph.locality import make_scheduler
    from twopgraph.pipeline.assemble import host_sampler
    from twopgraph.pipeline.loader import ThreadPlan
    from twopgraph.sampler import choose_sampler
    sched = make_scheduler("random", data.train_idx, s.batch_size, seed=seed)
    choice = choose_sampler(functools.partial(host_sampler, s, data.graph, seed), sched,
                            workers=ThreadPlan.for_threads(threads).total)
    log.info("%s", choice.describe())
    return choice.sampler


def measure_rows(cfg: BenchCacheConfig) -> tuple[list[dict], dict]:
    """Every row of ``cache.csv`` for the config (its set-up columns first), and the
    resolved sizes (``defaults``: what ``--fanouts`` left to the graph's size became)."""
    from twopgraph.cache import feat_dtype
    from twopgraph.pipeline.assemble import locality_for
    from twopgraph.sampler import sampler_options
    cfg.validate()
    data = cfg.data.load()
    cfg, defaults = cfg.resolved_logged(data.num_nodes)  # --fanouts by graph size
    s, b = cfg.sampling, cfg.bench
    options = {"presample": {"epochs": b.presample_epochs}}
    if b.lookahead is not None:
        options["layer"] = {"lookahead": b.lookahead}
    prep = locality_for(data, b.schedules, cfg)
    parts = None if prep.clustering is None else prep.clustering.parts
    sampler = auto_sampler(s, prep.data, b.seed, b.threads)
    rows = run_bench(prep.data, b.policies, b.ratios, b.schedules, s.fanouts, s.batch_size,
                     seed=b.seed, epoch=b.epoch, parts=parts, balance=s.balance,
                     policy_options=options, copy=b.copy, device=b.device,
                     dtype=feat_dtype(b.feat_dtype), threads=b.threads, sampler=sampler,
                     sampler_kwargs=sampler_options(sampler, s))
    setup = {"dataset": data.name, "fanouts": ",".join(map(str, s.fanouts)),
             "batch_size": s.batch_size, "seed": b.seed, "sampler": sampler}
    return [{**setup, **r} for r in rows], defaults


def write_outputs(rows: list[dict], cfg: BenchCacheConfig) -> bool:
    """``cache.csv`` and ``cache.png`` of ``rows`` in ``--out`` (a warning for a schedule of
    one batch per epoch); whether the plot was written (matplotlib is optional)."""
    b = cfg.bench
    if single := one_batch_schedules(rows):
        log.warning("bench cache: %s with --batch-size %d: %s", ", ".join(single),
                    cfg.sampling.batch_size, ONE_BATCH_NOTE)
    out = Path(b.out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, out / "cache.csv")
    head = rows[0] if rows else {}
    return plot(rows, out / "cache.png", title=f"{head.get('dataset')}: fanouts "
                f"{head.get('fanouts')}, batch {head.get('batch_size')}, {b.feat_dtype}")


def print_rows(rows: list[dict], cfg: BenchCacheConfig, plotted: bool) -> None:
    """The rows as JSON lines (``--json`` alone), else the table and the files written."""
    out = Path(cfg.bench.out)
    if cfg.bench.json:
        for r in rows:
            print(json.dumps(r))
    else:
        print(format_table(rows))
        print(f"wrote {out / 'cache.csv'}" + (f" and {out / 'cache.png'}" if plotted else ""))


def run(cfg: BenchCacheConfig) -> int:
    """``twopgraph bench cache`` in one call: measure, write ``cache.csv`` (and
    ``cache.png``), print."""
    rows, _ = measure_rows(cfg)
    print_rows(rows, cfg, write_outputs(rows, cfg))
    return 0
