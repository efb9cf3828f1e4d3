"""``twopgraph bench sampler``: sampling-only epochs (no features, no model) -- seeds per
second, epoch time and input vertices per batch of a schedule, with its locality set-up cost.

Every thread samples (``--threads``, 0 = all cores): whole batches per worker thread, exactly
the batches training would see. Timed epochs follow ``--warmup`` untimed ones (JIT
compilation, page cache); the median is reported. ``--json`` prints the record (:func:`run`)
as one JSON line; otherwise :func:`format_record` prints one aligned, rounded line per field.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import logging
import statistics
import time

from twopgraph.bench.config import BenchSamplerConfig
from twopgraph.bench.harness import BENCHMARKS, STDOUT, Benchmark, Context, Row

log = logging.getLogger("twopgraph")


@BENCHMARKS.register("sampler")
class SamplerBenchmark(Benchmark):
    """Sampling-only epochs of one configuration (no features, no model): seeds per second,
    epoch seconds, input vertices and sampled edges per batch, with the locality set-up.

    The flags are ``twopgraph train``'s sampling flags plus ``--epochs`` (timed, median),
    ``--warmup``; ``--json`` alone prints the record as one JSON line (its keys: see
    :func:`run`), else one aligned line per field. ``bench sampling`` compares
    several samplers and schedules (and DGL) side by side."""

    help = "sampling-only epochs: throughput and input sizes"
    own_data_flags = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        BenchSamplerConfig.add_arguments(parser, exclude=("json",))

    def config(self, a: argparse.Namespace) -> BenchSamplerConfig:
        """The verb's config from the parsed flags (``--json`` alone: the JSON record)."""
        ns = copy.copy(a)
        ns.json = a.json == STDOUT
        return BenchSamplerConfig.from_args(ns)

    def check(self, a: argparse.Namespace) -> None:
        self.config(a).validate()

    def measure(self, a: argparse.Namespace, ctx: Context) -> list[Row]:
        return [Row({}, run(self.config(a)))]

    def show(self, records: list[dict], a: argparse.Namespace) -> None:
        rec = records[0]["figures"]
        print(json.dumps(rec) if a.json == STDOUT else format_record(rec))


def run(cfg: BenchSamplerConfig) -> dict:
    """The ``bench sampler`` record: ``seeds_per_s``, ``sample_epoch_s`` (median of the timed
    epochs), ``input_nodes_per_batch``, ``sampled_edges_per_batch`` (the edges of all blocks
    of a batch), ``feature_rows``, ``num_batches``, ``sampler`` and ``sampler_options`` (its
    ``--labor-*`` values; ``--sampler auto`` decided as ``train`` decides it, on the
    scheduler sampled, its figures in ``sampler_choice``), ``locality`` (clustering and
    renumbering times, edge cut);
    ``schedule`` is the scheduler sampled, ``schedule_choice`` the figures of a ``--schedule
    auto`` decision, ``defaults`` what ``--fanouts`` left at its default became for the
    graph's size."""
    from twopgraph.locality import make_scheduler
    from twopgraph.locality.auto import choose_schedule
    from twopgraph.pipeline.assemble import host_sampler, locality_for
    from twopgraph.pipeline.loader import Loader, ThreadPlan
    from twopgraph.sampler import choose_sampler, make_sampler, sampler_options
    cfg.validate()
    data = cfg.data.load()
    cfg, defaults = cfg.resolved_logged(data.num_nodes)  # --fanouts by graph size
    s, b = cfg.sampling, cfg.bench
    prep = locality_for(data, [s.schedule], cfg)
    data = prep.data
    parts = None if prep.clustering is None else prep.clustering.parts
    name = "neighbor" if s.sampler == "auto" else s.sampler  # auto: decided below, as train
    sampler = make_sampler(name, data.graph, s.fanouts, seed=b.seed,
                           **sampler_options(name, s))
    schedule, choice = s.schedule, prep.schedule_choice  # the probe's: random, no clusters
    if schedule == "auto" and choice is not None:
        schedule = choice.schedule
        log.info("%s", choice.describe())
    elif schedule == "auto":
        choice = choose_schedule(sampler, data.train_idx, s.batch_size, b.seed, parts=parts,
                                 labels=data.label, balance=s.balance,
                                 workers=ThreadPlan.for_threads(b.threads).total)
        schedule = choice.schedule
        log.info("%s", choice.describe())
    sched = make_scheduler(schedule, data.train_idx, s.batch_size, seed=b.seed,
                           balance=s.balance, labels=data.label, parts=parts)
    sampler_choice = None
    if s.sampler == "auto":
        sampler_choice = choose_sampler(functools.partial(host_sampler, s, data.graph, b.seed),
                                        sched, workers=ThreadPlan.for_threads(b.threads).total)
        log.info("%s", sampler_choice.describe())
        name = sampler_choice.sampler
        sampler = make_sampler(name, data.graph, s.fanouts, seed=b.seed,
                               **sampler_options(name, s))
    loader = Loader(sched, sampler, threads=b.threads)
    times, stats = [], None
    for e in range(b.warmup + b.epochs):
        t = time.perf_counter()
        stats = loader.sample_epoch(e)
        if e >= b.warmup:
            times.append(time.perf_counter() - t)
    epoch_s = statistics.median(times)
    return {
        "dataset": data.name, "schedule": schedule,
        "schedule_choice": None if choice is None else choice.as_dict(),
        "defaults": defaults, "fanouts": s.fanouts,
        "batch_size": s.batch_size, "threads": loader.plan.total,
        "num_batches": stats.num_batches, "num_seeds": stats.num_seeds,
        "seeds_per_s": stats.num_seeds / epoch_s, "sample_epoch_s": epoch_s,
        "sample_epoch_s_all": times, "input_nodes_per_batch": stats.input_nodes_per_batch,
        "sampled_edges_per_batch": stats.sampled_edges_per_batch,
        "sampler": name, "sampler_options": sampler_options(name, s),
        "sampler_choice": None if sampler_choice is None else sampler_choice.as_dict(),
        "feature_rows": stats.feature_rows, "locality": prep.summary(),
    }


def _fmt(v) -> str:
    """One value, rounded for reading: 4 significant digits (whole numbers from 1000 up,
    with thousands separators), lists comma-separated."""
    if isinstance(v, bool) or v is None:
        return {True: "yes", False: "no", None: "-"}[v]
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"
    if isinstance(v, (list, tuple)):  # whole numbers as given to the CLI: "15,10,5"
        sep = "," if all(isinstance(x, int) for x in v) else ", "
        return sep.join(_fmt(x) for x in v) if v else "-"
    return str(v)


def _flat(rec: dict, prefix: str = ""):
    for k, v in rec.items():
        if isinstance(v, dict):
            yield from _flat(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def format_record(rec: dict) -> str:
    """The record of :func:`run` for a terminal: one ``key  value`` line per field, keys
    aligned, numbers rounded (see ``--json`` for the exact values), nested dicts such as
    ``locality`` flattened into ``locality.<key>`` lines."""
    items = list(_flat(rec))
    width = max((len(k) for k, _ in items), default=0)
    return "\n".join(f"{k:<{width}}  {_fmt(v)}" for k, v in items)
