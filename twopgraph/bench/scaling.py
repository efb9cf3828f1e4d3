"""``twopgraph bench scaling``: the scaling curve -- sampling throughput (and, with ``--train``,
the training epoch) as the graph grows, twopgraph against DGL 1.1.3 (``--peers dgl``).

Graphs: ``scaled:N`` of :mod:`twopgraph.bench.families` for every N of ``--sizes``
(``synthetic-products`` scaled to N vertices at the same mean degree, community size,
features and classes; the training share raised so an epoch has at least 8 batches), written
once under ``DATA_ROOT/bench/graphs/``. Per size: the sampling-only epochs of ``bench
sampling`` for every schedule of ``--schedules`` (neighbour sampler, round robin), DGL's
sampling epochs; with ``--train``, one ``twopgraph train`` per schedule (``locality`` with the
``layer`` cache, ``random`` without one) and DGL's training, ``--train-epochs`` epochs.

Rows: ``num_nodes``, ``system``, ``schedule``. Figures: ``seeds_per_s``, ``sample_epoch_s``,
``input_nodes_per_batch``, ``num_batches``, ``num_edges``, ``num_train``, ``speedup_vs_dgl``
(DGL's sampling epoch over this one: above 1 = faster), and with ``--train``
``train_epoch_s``, ``test_acc``, ``peak_rss_mib``. ``OUT/scaling.png``: seeds/s (and training
epoch seconds) against vertices, log-log (matplotlib, optional).

Example::

    twopgraph bench scaling --sizes 10k,100k,1m --peers dgl --train --out runs/scaling
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
from pathlib import Path

from twopgraph.bench.harness import BENCHMARKS, Benchmark, Context, Row
from twopgraph.errors import ConfigError

log = logging.getLogger("twopgraph")

DEFAULT_SIZES = "10k,30k,100k,300k,1m"


@BENCHMARKS.register("scaling")
class ScalingBenchmark(Benchmark):
    """The scaling curve: sampling throughput (and the training epoch with ``--train``) of
    ``synthetic-products`` scaled to each of ``--sizes`` vertices, twopgraph and DGL.

    Rows: num_nodes, system, schedule. Figures: seeds_per_s, sample_epoch_s,
    input_nodes_per_batch, speedup_vs_dgl; train_epoch_s, test_acc, peak_rss_mib with
    --train. Writes OUT/scaling.png."""

    help = "scaling curve: sampling (and training) as the graph grows, vs DGL"
    default_graph = None
    peers = ("dgl",)
    columns = ("num_edges", "seeds_per_s", "sample_epoch_s", "input_nodes_per_batch",
               "speedup_vs_dgl", "train_epoch_s", "test_acc", "peak_rss_mib")

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        from twopgraph.bench.sampling import add_sampling_arguments
        p.add_argument("--sizes", default=DEFAULT_SIZES,
                       help="comma-separated vertex counts, k/m suffixes (default: "
                            f"{DEFAULT_SIZES}; the issue's full range adds 2.5m)")
        p.add_argument("--schedules", default="random",
                       help="twopgraph's schedules: random (like DGL's shuffle), locality "
                            "(default: random)")
        p.add_argument("--train", action="store_true", help="also time training epochs")
        p.add_argument("--train-epochs", type=int, default=2, help="(default: 2)")
        p.add_argument("--hidden", type=int, default=256, help="(default: 256)")
        p.add_argument("--out", default="runs/scaling",
                       help="folder of scaling.png (default: runs/scaling)")
        add_sampling_arguments(p)

    def check(self, a: argparse.Namespace) -> None:
        from twopgraph.bench.families import parse_count
        from twopgraph.bench.sampling import check_sampling_arguments, sampler_config
        a._sizes = sorted({parse_count(s) for s in a.sizes.split(",") if s.strip()})
        if not a._sizes or min(a._sizes) < 1000:
            raise ConfigError("--sizes: need vertex counts >= 1000")
        a._schedules = [s.strip() for s in a.schedules.split(",") if s.strip()]
        bad = set(a._schedules) - {"random", "locality"}
        if bad or not a._schedules:
            raise ConfigError(f"--schedules: random and/or locality, got {a.schedules!r}")
        if a.train_epochs < 1 or a.hidden < 1:
            raise ConfigError("--train-epochs and --hidden must be >= 1")
        if Path(a.out).exists() and not Path(a.out).is_dir():
            raise ConfigError(f"--out {a.out} exists and is not a folder")
        check_sampling_arguments(a)
        sampler_config(a, None, "random").validate()

    def measure(self, a: argparse.Namespace, ctx: Context) -> list[Row]:
        from twopgraph.bench.families import size_name
        from twopgraph.bench.sampling import dgl_row, measure_configs, sampler_config
        rows = []
        for n in a._sizes:
            sub = ctx.sub(f"scaled:{size_name(n)}")
            data = sub.data()
            meta = {"num_edges": int(data.graph.indices.shape[0]),
                    "num_train": int(data.train_idx.shape[0])}
            configs = [({"num_nodes": n, "system": "twopgraph", "schedule": s},
                        sampler_config(a, sub, s).validate()) for s in a._schedules]
            mine = measure_configs(configs, data, a)
            if "dgl" in a.peers:
                d = dgl_row(a, sub, mine)
                d.params = {"num_nodes": n, "system": "dgl", "schedule": "random"}
                mine.append(d)
            if a.train:
                self.train(a, sub, mine)
            dgl = next((r.figures for r in mine if r.params["system"] == "dgl"), {})
            for r in mine:
                r.figures.update(meta)
                if dgl.get("sample_epoch_s") and r.params["system"] == "twopgraph":
                    r.figures["speedup_vs_dgl"] = (dgl["sample_epoch_s"]
                                                   / r.figures["sample_epoch_s"])
            rows += mine
        return rows

    def train(self, a: argparse.Namespace, ctx: Context, rows: list[Row]) -> None:
        """Training epochs of every row (``--train``), in place."""
        from twopgraph.bench.procmem import Runner
        from twopgraph.bench.train import dgl_run, train_run
        train_a = argparse.Namespace(**{**vars(a), "epochs": a.train_epochs, "model": "sage",
                                        "lr": None, "dropout": 0.5, "device": "cpu",
                                        "train_args": ""})
        resolved = {}
        with tempfile.TemporaryDirectory(prefix="twopgraph-bench-scaling-") as tmp:
            runner = Runner(Path(tmp) / "logs")
            for r in rows:
                if r.params["system"] != "twopgraph":
                    continue
                s = r.params["schedule"]
                flags = ["--schedule", s, "--cache-policy", "layer" if s == "locality"
                         else "none"]
                fig = train_run(train_a, ctx, runner, Path(tmp) / f"train-{s}", flags, {},
                                a.seed)
                resolved = resolved or fig["_resolved"]
                r.figures.update({k: fig.get(k) for k in ("train_epoch_s", "test_acc",
                                                          "peak_rss_mib")})
        for r in rows:
            if r.params["system"] == "dgl":
                d = dgl_run(train_a, ctx, resolved, a.seed)
                r.figures.update({k: d.get(k) for k in ("train_epoch_s", "test_acc",
                                                        "peak_rss_mib")})

    def finish(self, records: list[dict], a: argparse.Namespace, ctx: Context) -> None:
        path = Path(a.out) / "scaling.png"
        if plot(records, path, a):
            log.info("bench scaling: wrote %s", path)


def plot(records: list[dict], path: Path, a: argparse.Namespace) -> bool:
    """``scaling.png``: seeds/s (and training epoch seconds) against vertices, one line per
    system x schedule, log-log; False without matplotlib (optional)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        log.warning("no plot: %s needs matplotlib (pip install 'twopgraph[plot]')", path.name)
        return False
    from twopgraph.core.files import atomic_write_bytes
    panels = [("seeds_per_s", "sampling seeds/s")]
    if a.train:
        panels.append(("train_epoch_s", "training epoch s"))
    fig = Figure(figsize=(6 * len(panels), 4.5), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    lines = sorted({(r["params"]["system"], r["params"]["schedule"]) for r in records})
    for ax, (key, title) in zip(axes, panels):
        for name in lines:
            pts = sorted((r["params"]["num_nodes"], r["figures"].get(key)) for r in records
                         if (r["params"]["system"], r["params"]["schedule"]) == name
                         and r["figures"].get(key))
            if pts:
                ax.plot(*zip(*pts), marker="o", label=f"{name[0]} ({name[1]})")
        ax.set(xscale="log", yscale="log", xlabel="vertices", title=title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"synthetic-products scaled, batch {a.batch_size}, threads "
                 f"{a.threads or os.cpu_count()}")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, lambda f: fig.savefig(f, dpi=120, format="png"))
    return True
