"""``twopgraph bench sampling``: sampling-only epochs of several configurations side by side on
one graph -- samplers x schedules x renumbering x numbers of clusters -- and, with ``--peers
dgl``, DGL 1.1.3's sampler on the same graph; with ``--peers graphbolt``, DGL 2.1 GraphBolt's
``NeighborSampler`` and ``LayerNeighborSampler`` (LABOR-0) for the neighbour and labor rows.

Every configuration is built as ``twopgraph train`` builds it (clusters and renumbered store
from the data root's cache: their one-off cost is in ``locality``, not in any epoch) and
sampled in this process, every thread sampling (``--threads``): ``--warmup`` untimed epochs
each, then ``--epochs`` timed epochs **round robin** (epoch e of every configuration, then
epoch e+1), so that load drift on a shared machine hits them alike; the median is reported.
DGL runs in its own venv and process (median of its ``--epochs`` epochs after one warm-up).

Rows (``params``): ``system`` (twopgraph | dgl | graphbolt), ``schedule``, ``sampler`` (a registered
sampler, or ``labor+layer`` / ``labor+batch``: LABOR with ``--labor-layer-dependency`` /
``--labor-batch-dependency K``), ``renumber``, ``num_clusters`` (the curve of the locality
knob: ``--num-clusters 64,256,1024``).

Figures: ``sample_epoch_s`` (median seconds of a sampling-only epoch), ``sample_epoch_s_all``,
``seeds_per_s``, ``input_nodes_per_batch``, ``sampled_edges_per_batch``, ``feature_rows`` (sum
of input vertices over the epoch), ``num_batches``, ``clusters_per_batch`` (locality);
``epoch_vs_base`` / ``inputs_vs_base`` (this row over the first twopgraph row: ``random`` +
``neighbor`` when asked for); with ``--cache-ratio R``: ``h2d_bytes`` and ``hit_rate`` of the
``layer`` cache holding R of the feature rows over one epoch's access stream (exact counts,
``bench cache``'s replay); with DGL: ``epoch_vs_dgl`` (below 1: twopgraph is faster) and
``speedup_vs_dgl`` (its inverse); with GraphBolt: ``epoch_vs_graphbolt``,
``speedup_vs_graphbolt`` and ``inputs_vs_graphbolt`` against GraphBolt's row of the same
sampler (every labor row against its LABOR-0). ``locality``: the clustering's summary.

Examples::

    twopgraph bench sampling --graph synthetic-products --samplers neighbor,labor,labor+layer
    twopgraph bench sampling --graph rmat:20:8 --schedules random --peers dgl --repeat 3
    twopgraph bench sampling --graph cora --schedules locality --num-clusters 8,32,144
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
from typing import TYPE_CHECKING, Any

from twopgraph.bench.harness import BENCHMARKS, Benchmark, Context, Row
from twopgraph.errors import ConfigError

if TYPE_CHECKING:
    from twopgraph.bench.config import BenchSamplerConfig
    from twopgraph.graph.data import GraphData
    from twopgraph.locality import LocalityPrep

log = logging.getLogger("twopgraph")

#: sampler variants beyond the registered names: (sampler, its extra config fields)
VARIANTS = {"labor+layer": ("labor", {"labor_layer_dependency": True}),
            "labor+batch": ("labor", {})}  # labor_batch_dependency from --labor-batch-dependency
RENUMBER = {"on": (True,), "off": (False,), "both": (False, True)}


def add_sampling_arguments(p: argparse.ArgumentParser) -> None:
    """The flags a sampling configuration takes (also ``bench scaling``'s)."""
    p.add_argument("--fanouts", default=None,
                   help="neighbours per layer, input layer first (default: by graph size, as "
                        "train)")
    p.add_argument("--batch-size", type=int, default=1024, help="seeds per batch (default: 1024)")
    p.add_argument("--epochs", type=int, default=3,
                   help="timed sampling-only epochs per configuration; the median is reported "
                        "(default: 3)")
    p.add_argument("--warmup", type=int, default=1,
                   help="untimed epochs first (JIT compilation, page cache) (default: 1)")
    p.add_argument("--threads", type=int, default=0,
                   help="sampling threads (0 = all cores) (default: 0)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")


@BENCHMARKS.register("sampling")
class SamplingBenchmark(Benchmark):
    """Sampling-only epochs of samplers x schedules x renumbering x numbers of clusters side
    by side on one graph, round robin, and DGL's sampler with ``--peers dgl``.

    Rows: system, schedule, sampler, renumber, num_clusters. Figures: sample_epoch_s (median
    seconds), seeds_per_s, input_nodes_per_batch, sampled_edges_per_batch, feature_rows,
    ratios to the first row (epoch_vs_base, inputs_vs_base) and to DGL (epoch_vs_dgl,
    speedup_vs_dgl); h2d_bytes and hit_rate of the layer cache with --cache-ratio."""

    help = "sampling-only epochs: samplers x schedules x clusters side by side (and DGL)"
    peers = ("dgl", "graphbolt")
    columns = ("sample_epoch_s", "seeds_per_s", "input_nodes_per_batch",
               "sampled_edges_per_batch", "inputs_vs_base", "epoch_vs_base", "h2d_bytes",
               "hit_rate", "speedup_vs_dgl", "speedup_vs_graphbolt", "inputs_vs_graphbolt")

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--schedules", default="random,locality",
                       help="comma-separated seed schedulers (default: random,locality)")
        p.add_argument("--samplers", default="neighbor",
                       help="comma-separated samplers: a registered one (neighbor, labor, "
                            "device, ...) or labor+layer, labor+batch (default: neighbor)")
        p.add_argument("--renumber", choices=tuple(RENUMBER), default="on",
                       help="cluster-contiguous ids: on (train's default) | off | both rows "
                            "(default: on)")
        p.add_argument("--num-clusters", default="0",
                       help="comma-separated numbers of METIS clusters (0 = automatic); "
                            "several: the locality knob's curve (default: 0)")
        p.add_argument("--cluster-method", default="auto",
                       help="how clusters are computed: auto | metis | coarsen | lp "
                            "(default: auto)")
        p.add_argument("--labor-iterations", type=int, default=0,
                       help="LABOR-* iterations of the labor rows (0 = LABOR-0) (default: 0)")
        p.add_argument("--labor-batch-dependency", type=int, default=16,
                       help="K of the labor+batch rows (default: 16)")
        p.add_argument("--cache-ratio", type=float, default=0.0,
                       help="also count the layer cache's host-to-device bytes at this share "
                            "of the feature rows, over one epoch (0 = no) (default: 0)")
        add_sampling_arguments(p)

    def check(self, a: argparse.Namespace) -> None:
        from twopgraph.core.protocols import SAMPLERS, SCHEDULERS
        a._schedules = _names(a.schedules, "--schedules")
        for s in a._schedules:
            if s not in SCHEDULERS.declared():
                raise ConfigError(f"--schedules: unknown scheduler {s!r}; known: "
                                  f"{', '.join(SCHEDULERS.declared())}")
        a._samplers = _names(a.samplers, "--samplers")
        for s in a._samplers:
            if s not in VARIANTS and s not in SAMPLERS.declared():
                raise ConfigError(f"--samplers: unknown sampler {s!r}; known: "
                                  f"{', '.join([*SAMPLERS.declared(), *VARIANTS])}")
        try:
            a._clusters = [int(k) for k in _names(a.num_clusters, "--num-clusters")]
        except ValueError:
            raise ConfigError(f"--num-clusters: expected integers, got {a.num_clusters!r}") \
                from None
        if min(a._clusters) < 0:
            raise ConfigError("--num-clusters must be >= 0 (0 = automatic)")
        if not 0.0 <= a.cache_ratio <= 1.0:
            raise ConfigError(f"--cache-ratio must be in [0, 1], got {a.cache_ratio}")
        check_sampling_arguments(a)
        for _, cfg in self.configs(a, None):  # every flag of every row, before loading
            cfg.validate()

    def configs(self, a: argparse.Namespace,
                ctx: Context | None) -> list[tuple[dict, BenchSamplerConfig]]:
        """``(row params, BenchSamplerConfig)`` of every twopgraph row."""
        from twopgraph.core.protocols import SCHEDULERS
        out = []
        for schedule in a._schedules:
            clustered = getattr(SCHEDULERS.get(schedule), "needs_clusters", False) \
                if ctx is not None else schedule != "random"
            for variant in a._samplers:
                sampler, extra = VARIANTS.get(variant, (variant, {}))
                if variant == "labor+batch":
                    extra = {"labor_batch_dependency": a.labor_batch_dependency}
                for renumber in RENUMBER[a.renumber]:
                    for k in (a._clusters if clustered or renumber else a._clusters[:1]):
                        cfg = sampler_config(a, ctx, schedule, sampler, renumber=renumber,
                                             num_clusters=k, cluster_method=a.cluster_method,
                                             labor_iterations=a.labor_iterations, **extra)
                        out.append(({"system": "twopgraph", "schedule": schedule,
                                     "sampler": variant, "renumber": renumber,
                                     "num_clusters": k}, cfg))
        return out

    def measure(self, a: argparse.Namespace, ctx: Context) -> list[Row]:
        data = ctx.data()
        rows = measure_configs([(p, c.validate()) for p, c in self.configs(a, ctx)], data, a)
        if "dgl" in a.peers:
            rows.append(dgl_row(a, ctx, rows))
        if "graphbolt" in a.peers:
            rows.extend(graphbolt_row(a, ctx, rows, s) for s in graphbolt_samplers(a._samplers))
        add_ratios(rows)
        return rows


def sampler_config(a: argparse.Namespace, ctx: Context | None, schedule: str,
                   sampler: str = "neighbor", **fields: Any) -> BenchSamplerConfig:
    """The :class:`~twopgraph.bench.config.BenchSamplerConfig` of one row: the flags of
    :func:`add_sampling_arguments` in ``a``, the graph of ``ctx`` (None: a stand-in, to
    validate the flags before loading), ``schedule``, ``sampler`` and other config
    ``fields``."""
    from twopgraph.bench.config import BenchSamplerConfig
    return BenchSamplerConfig.of(
        dataset=ctx.dataset() if ctx else "synthetic-tiny",
        data_root=ctx.data_root if ctx else None, fanouts=a.fanouts, batch_size=a.batch_size,
        schedule=schedule, sampler=sampler, epochs=a.epochs, warmup=a.warmup, seed=a.seed,
        threads=a.threads, **fields)


def _names(text: str, flag: str) -> list[str]:
    names = [x.strip() for x in str(text).split(",") if x.strip()]
    if not names:
        raise ConfigError(f"{flag}: give at least one")
    return list(dict.fromkeys(names))


def check_sampling_arguments(a: argparse.Namespace) -> None:
    """The flags of :func:`add_sampling_arguments` (one-line ConfigError)."""
    for flag, low in (("epochs", 1), ("warmup", 0), ("threads", 0), ("batch_size", 1)):
        if getattr(a, flag) < low:
            raise ConfigError(f"--{flag.replace('_', '-')} must be >= {low}, "
                              f"got {getattr(a, flag)}")


def measure_configs(configs: list[tuple[dict, BenchSamplerConfig]], data: GraphData,
                    a: argparse.Namespace) -> list[Row]:
    """Sample every ``(params, config)`` (round robin over the timed epochs); one row each."""
    from twopgraph.locality import make_scheduler
    from twopgraph.pipeline.assemble import locality_for
    from twopgraph.pipeline.loader import Loader
    from twopgraph.sampler import make_sampler, sampler_options
    runs = []
    for params, cfg in configs:
        cfg, _ = cfg.resolved(data.num_nodes)
        s, b = cfg.sampling, cfg.bench
        t = time.perf_counter()
        prep = locality_for(data, [s.schedule], cfg)
        parts = None if prep.clustering is None else prep.clustering.parts
        sampler = make_sampler(s.sampler, prep.data.graph, s.fanouts, seed=b.seed,
                               **sampler_options(s.sampler, s))
        sched = make_scheduler(s.schedule, prep.data.train_idx, s.batch_size, seed=b.seed,
                               balance=s.balance, labels=prep.data.label, parts=parts)
        loader = Loader(sched, sampler, threads=b.threads)
        log.info("sampling: %s ready in %.1f s", _label(params), time.perf_counter() - t)
        runs.append((params, cfg, prep, loader, [], [None]))
    for e in range(a.warmup + a.epochs):
        for params, _, _, loader, times, last in runs:
            t = time.perf_counter()
            last[0] = loader.sample_epoch(e)
            if e >= a.warmup:
                times.append(time.perf_counter() - t)
        log.info("sampling: epoch %d of %d done", e + 1, a.warmup + a.epochs)
    for run in runs:  # their sampling threads end here, not when the loader is collected
        run[3].close()
    rows = []
    for params, cfg, prep, loader, times, (stats,) in runs:
        epoch_s = statistics.median(times)
        fig = {"sample_epoch_s": epoch_s, "sample_epoch_s_all": times,
               "seeds_per_s": stats.num_seeds / epoch_s,
               "input_nodes_per_batch": stats.input_nodes_per_batch,
               "sampled_edges_per_batch": stats.sampled_edges_per_batch,
               "feature_rows": stats.feature_rows, "num_batches": stats.num_batches,
               "num_seeds": stats.num_seeds, "threads": loader.plan.total,
               "fanouts": cfg.sampling.fanouts, "locality": prep.summary()}
        if prep.clustering is not None:
            fig["clusters_per_batch"] = (prep.clustering.num_clusters * cfg.sampling.batch_size
                                         / max(1, int(prep.data.train_idx.shape[0])))
        if getattr(a, "cache_ratio", 0) > 0:
            fig.update(layer_cache(prep, cfg, a.cache_ratio))
        rows.append(Row(params, fig))
    return rows


def layer_cache(prep: LocalityPrep, cfg: BenchSamplerConfig, cache_ratio: float) -> dict:
    """``h2d_bytes`` and ``hit_rate`` of the ``layer`` cache holding ``cache_ratio`` of the
    feature rows over epoch 0 of the configuration (``bench cache``'s exact replay)."""
    from twopgraph.bench.cache import run_bench
    from twopgraph.sampler import sampler_options
    s, b = cfg.sampling, cfg.bench
    parts = None if prep.clustering is None else prep.clustering.parts
    rows = run_bench(prep.data, ["layer"], [cache_ratio], [s.schedule], s.fanouts,
                     s.batch_size, seed=b.seed, parts=parts, balance=s.balance,
                     threads=b.threads, sampler=s.sampler,
                     sampler_kwargs=sampler_options(s.sampler, s))
    layer = next(r for r in rows if r["policy"] == "layer")
    return {"h2d_bytes": layer["h2d_bytes"], "hit_rate": layer["hit_rate"]}


def dgl_row(a: argparse.Namespace, ctx: Context, rows: list[Row]) -> Row:
    """DGL's sampling-only epochs (random shuffle, neighbour sampling) with the fanouts of
    the first twopgraph row."""
    from twopgraph.bench.peers import run_peer
    fanouts = rows[0].figures["fanouts"] if rows else [15, 10, 5]
    d = run_peer("dgl", ctx, "sample", ["--fanouts", ",".join(map(str, fanouts)),
                                        "--batch-size", str(a.batch_size), "--sample-epochs",
                                        str(a.epochs), "--seed", str(a.seed)],
                 peer_threads(a.threads))
    keys = ("sample_epoch_s", "sample_epoch_s_all", "seeds_per_s", "input_nodes_per_batch",
            "feature_rows", "num_batches", "load_s", "peak_rss_mib")
    return Row({"system": "dgl", "schedule": "random", "sampler": "neighbor",
                "renumber": False, "num_clusters": None},
               {**{k: d.get(k) for k in keys}, "fanouts": fanouts, "threads": d.get("threads")})


#: GraphBolt's sampler of each twopgraph sampler row (DGL 2.1's ``LayerNeighborSampler`` is
#: LABOR-0 without layer or batch dependency: the closest to every labor row)
GRAPHBOLT_SAMPLER = {"neighbor": "neighbor", "labor": "labor", "labor+layer": "labor",
                     "labor+batch": "labor"}


def graphbolt_samplers(samplers: list[str]) -> list[str]:
    """GraphBolt's samplers that ``--samplers`` asks to compare with, once each, in order."""
    return list(dict.fromkeys(GRAPHBOLT_SAMPLER[s] for s in samplers if s in GRAPHBOLT_SAMPLER))


def graphbolt_row(a: argparse.Namespace, ctx: Context, rows: list[Row], sampler: str) -> Row:
    """GraphBolt's sampling-only epochs (random shuffle) of ``sampler`` (neighbor, or labor:
    LABOR-0) with the fanouts of the first twopgraph row."""
    from twopgraph.bench.peers import run_peer
    fanouts = rows[0].figures["fanouts"] if rows else [15, 10, 5]
    d = run_peer("graphbolt", ctx, "sample",
                 ["--fanouts", ",".join(map(str, fanouts)), "--batch-size", str(a.batch_size),
                  "--sample-epochs", str(a.epochs), "--seed", str(a.seed), "--sampler", sampler],
                 peer_threads(a.threads))
    keys = ("sample_epoch_s", "sample_epoch_s_all", "seeds_per_s", "input_nodes_per_batch",
            "sampled_edges_per_batch", "feature_rows", "num_batches", "load_s", "peak_rss_mib")
    return Row({"system": "graphbolt", "schedule": "random", "sampler": sampler,
                "renumber": False, "num_clusters": None},
               {**{k: d.get(k) for k in keys}, "fanouts": fanouts, "threads": d.get("threads")})


def peer_threads(threads: int) -> int:
    """A peer's thread count for ``--threads`` (0: the cores this process may use)."""
    if threads > 0:
        return threads
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def add_ratios(rows: list[Row]) -> None:
    """``epoch_vs_base``/``inputs_vs_base`` against the first twopgraph row,
    ``epoch_vs_dgl``/``speedup_vs_dgl`` against the DGL row and
    ``epoch_vs_graphbolt``/``speedup_vs_graphbolt``/``inputs_vs_graphbolt`` against the
    GraphBolt row of the same sampler (:data:`GRAPHBOLT_SAMPLER`), in place."""
    ours = [r for r in rows if r.params["system"] == "twopgraph"]
    base = next((r for r in ours if r.params["schedule"] == "random"
                 and r.params["sampler"] == "neighbor"), ours[0] if ours else None)
    dgl = next((r for r in rows if r.params["system"] == "dgl"), None)
    graphbolt = {r.params["sampler"]: r for r in rows if r.params["system"] == "graphbolt"}
    for r in ours:
        f = r.figures
        if base is not None:
            f["epoch_vs_base"] = f["sample_epoch_s"] / base.figures["sample_epoch_s"]
            f["inputs_vs_base"] = (f["input_nodes_per_batch"]
                                   / base.figures["input_nodes_per_batch"])
        if dgl is not None and dgl.figures.get("sample_epoch_s"):
            f["epoch_vs_dgl"] = f["sample_epoch_s"] / dgl.figures["sample_epoch_s"]
            f["speedup_vs_dgl"] = dgl.figures["sample_epoch_s"] / f["sample_epoch_s"]
        gb = graphbolt.get(GRAPHBOLT_SAMPLER.get(r.params["sampler"]))
        if gb is not None and gb.figures.get("sample_epoch_s"):
            f["epoch_vs_graphbolt"] = f["sample_epoch_s"] / gb.figures["sample_epoch_s"]
            f["speedup_vs_graphbolt"] = gb.figures["sample_epoch_s"] / f["sample_epoch_s"]
            f["inputs_vs_graphbolt"] = (f["input_nodes_per_batch"]
                                        / gb.figures["input_nodes_per_batch"])


def _label(params: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items() if k != "system")
