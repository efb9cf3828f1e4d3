"""``twopgraph bench dist``: data-parallel training over self-dependence partitions for P ranks
each, against one process: what partitioning costs, what each rank reads, and the summed
memory of the ranks.

For each P of ``--ranks``: ``twopgraph partition --num-parts P --hops H`` (wall time, peak
memory, replication factor, edge cut, each part's training vertices and representation),
then ``twopgraph train --partitions DIR --nproc P`` (P torchrun workers); ``--baseline``
adds the same training in one process (``twopgraph train``: the reference of the memory
ratio). Every run is a subprocess measured from outside
(:class:`~twopgraph.bench.procmem.Runner`: the tree's summed PSS over time, the ranks' own
sum, the largest RSS), one after the other.

Rows: ``ranks`` (``mode``: partitions | one process). Figures: ``partition_s``,
``partition_peak_rss_mib``, ``replication_factor``, ``edge_cut_fraction``,
``train_per_rank``, ``representation``; of the training: ``epoch_s`` (last epoch),
``steps_per_epoch``, ``input_nodes_per_batch``, ``feature_rows``, ``h2d_bytes``,
``halo_input_rows``, ``remote_graph_requests``, ``remote_feature_bytes``, ``test_acc``,
``wall_s``; memory: ``peak_rank_pss_mib`` (the ranks' summed PSS, sampled),
``peak_pss_mib`` (the whole tree: launcher and agent too), ``ru_maxrss_mib``,
``metrics_peak_pss_mib_total`` (what the run reports), ``pss_vs_one_process`` (the ranks'
summed PSS over one process's peak RSS, with ``--baseline``).

Timings depend on the machine: with fewer cores than ranks the epoch times say little;
replication, rows, bytes, remote counters, accuracy and memory hold anywhere.

Example::

    twopgraph bench dist --graph synthetic-small --ranks 2,4 --epochs 1 --baseline
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
from pathlib import Path

from twopgraph.bench.harness import BENCHMARKS, Benchmark, Context, Row
from twopgraph.errors import ConfigError

log = logging.getLogger("twopgraph")

#: per-epoch figures of a partitioned run's metrics.json (its last epoch)
EPOCH_KEYS = ("epoch_s", "input_nodes_per_batch", "feature_rows", "h2d_bytes",
              "halo_input_rows", "remote_graph_requests", "remote_feature_bytes")


@BENCHMARKS.register("dist")
class DistBenchmark(Benchmark):
    """Data-parallel training over self-dependence partitions for P ranks each (``--ranks``),
    and one process with ``--baseline``: partitioning cost, replication, rows and remote
    counters per rank, epoch time, accuracy, the ranks' summed memory.

    Rows: ranks, mode. Figures: partition_s, replication_factor, epoch_s, feature_rows,
    remote_feature_bytes, test_acc, peak_rank_pss_mib, pss_vs_one_process."""

    help = "data-parallel training over partitions for P ranks: cost, rows, memory"
    columns = ("partition_s", "replication_factor", "edge_cut_fraction", "epoch_s",
               "input_nodes_per_batch", "feature_rows", "remote_feature_bytes", "test_acc",
               "peak_rank_pss_mib", "peak_pss_mib", "ru_maxrss_mib", "pss_vs_one_process",
               "error")

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--ranks", default="2,4", help="comma-separated rank counts P "
                       "(default: 2,4)")
        p.add_argument("--hops", type=int, default=None,
                       help="partition halo depth (default: the number of layers)")
        p.add_argument("--fanouts", default="15,10,5", help="(default: 15,10,5)")
        p.add_argument("--batch-size", type=int, default=1024,
                       help="global batch size (default: 1024)")
        p.add_argument("--epochs", type=int, default=2, help="(default: 2)")
        p.add_argument("--device", default="cpu", help="(default: cpu)")
        p.add_argument("--baseline", action="store_true", help="also one process")
        p.add_argument("--skip-train", action="store_true", help="partition only")
        p.add_argument("--train-args", default="", help="more `twopgraph train` flags")
        p.add_argument("--out", default=None,
                       help="keep the partitions and runs here (default: a temporary folder)")
        p.add_argument("--sample-interval", type=float, default=0.2,
                       help="seconds between memory samples (default: 0.2)")

    def check(self, a: argparse.Namespace) -> None:
        import shlex
        try:
            a._ranks = [int(x) for x in a.ranks.split(",") if x.strip()]
            shlex.split(a.train_args)
        except ValueError as e:
            raise ConfigError(f"--ranks must be comma-separated integers ({e})") from None
        if not a._ranks or min(a._ranks) < 1:
            raise ConfigError("--ranks: give counts >= 1")
        from twopgraph.core.fanouts import parse_fanouts
        parse_fanouts(a.fanouts)  # checked here, not in each run it starts
        if a.epochs < 1 or a.batch_size < 1 or (a.hops is not None and a.hops < 0):
            raise ConfigError("need --epochs >= 1, --batch-size >= 1, --hops >= 0")
        if a.out and Path(a.out).exists() and not Path(a.out).is_dir():
            raise ConfigError(f"--out {a.out} exists and is not a folder")

    def measure(self, a: argparse.Namespace, ctx: Context) -> list[Row]:
        ctx.data()  # a bad --graph is one line, before any process starts
        if a.out:
            Path(a.out).mkdir(parents=True, exist_ok=True)
            return self._measure(a, ctx, Path(a.out))
        with tempfile.TemporaryDirectory(prefix="twopgraph-bench-dist-") as tmp:
            return self._measure(a, ctx, Path(tmp))

    def _measure(self, a: argparse.Namespace, ctx: Context, out: Path) -> list[Row]:
        import shlex

        from twopgraph.bench.procmem import Runner, read_metrics, strip, twopgraph_cmd
        r = Runner(out / "logs", interval=a.sample_interval)
        hops = a.hops if a.hops is not None else len(a.fanouts.split(","))
        data = ["--dataset", ctx.dataset()] + (["--data-root", ctx.data_root]
                                               if ctx.data_root else [])
        train = ["--fanouts", a.fanouts, "--batch-size", str(a.batch_size), "--epochs",
                 str(a.epochs), "--device", a.device, "--no-progress", "--eval-every", "0",
                 *shlex.split(a.train_args)]
        rows, one_rss = [], None
        if a.baseline and not a.skip_train:
            run = out / "train-single"
            shutil.rmtree(run, ignore_errors=True)
            rec = strip(r.run("train-single", twopgraph_cmd("train", *data, *train, "--out",
                                                            str(run))))
            fig = {**rec, **read_metrics(run), **_epoch(run)}
            one_rss = rec["ru_maxrss_mib"] if rec["rc"] == 0 else None
            rows.append(Row({"ranks": 1, "mode": "one process"}, fig))
        for p in a._ranks:
            pdir = out / f"parts-{p}"
            rec = strip(r.run(f"partition-{p}", twopgraph_cmd(
                "partition", *data, "--num-parts", str(p), "--hops", str(hops), "--out",
                str(pdir), "--force")))
            fig = {"hops": hops, "partition_s": rec["wall_s"],
                   "partition_peak_rss_mib": rec["ru_maxrss_mib"], "partition_rc": rec["rc"]}
            if rec["rc"] != 0:
                rows.append(Row({"ranks": p, "mode": "partitions"},
                                {**fig, "error": f"partition: {rec['error']}"}))
                continue
            meta = json.loads((pdir / "meta.json").read_text())
            fig.update(replication_factor=meta.get("replication_factor"),
                       edge_cut_fraction=meta.get("edge_cut_fraction"),
                       train_per_rank=[q.get("num_train") for q in meta.get("parts", [])],
                       vertices_per_rank=[q.get("num_nodes") for q in meta.get("parts", [])],
                       representation=[q.get("representation") for q in meta.get("parts", [])])
            if not a.skip_train:
                run = out / f"train-{p}"
                shutil.rmtree(run, ignore_errors=True)
                rec = strip(r.run(f"train-{p}", twopgraph_cmd(
                    "train", "--partitions", str(pdir), "--nproc", str(p), *train, "--out",
                    str(run), *(["--data-root", ctx.data_root] if ctx.data_root else []))))
                fig.update({**rec, **read_metrics(run), **_epoch(run)})
                if fig.get("num_batches"):
                    fig["steps_per_epoch"] = fig["num_batches"] // p
                pss = fig.get("peak_rank_pss_mib")
                if pss and one_rss:
                    fig["pss_vs_one_process"] = pss / one_rss
            rows.append(Row({"ranks": p, "mode": "partitions"}, fig))
        return rows


def _epoch(run: Path) -> dict:
    """The last epoch's :data:`EPOCH_KEYS` and ``num_batches`` of a run ({} if absent)."""
    try:
        m = json.loads((run / "metrics.json").read_text())
    except (OSError, ValueError):
        return {}
    ep = (m.get("epochs") or [{}])[-1]
    return {k: ep.get(k) for k in (*EPOCH_KEYS, "num_batches")}
