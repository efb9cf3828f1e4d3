"""``twopgraph bench partition-steps``: the in-process steps of ``twopgraph partition`` on one
graph, each timed alone, and the per-vertex label width the label-driven kernels look up,
int64 against narrow, in one run.

The label-driven kernels (:mod:`twopgraph.locality.kernels`) look a vertex's cluster or part
up once per CSR entry, at random. They run here with the labels as int64 (``wide``, what they
were given before) and as :func:`~twopgraph.locality.kernels.compact_labels` narrows them
(``narrow``: int8 parts, int16 clusters), on the same graph in the same process:

* ``cut``: :func:`~twopgraph.locality.kernels.cut_edges` with the part of every vertex (the
  partition sums its cut from the cluster graph instead, ``cut_from_cluster_graph`` on the
  ``split`` row, which must equal ``cut_edges``: ``cut_agrees``);
* ``cluster_graph``: :func:`~twopgraph.locality.kernels.cluster_pairs` (the part split's
  cluster graph) with the fine cluster of every vertex;
* ``cluster_order``: :func:`~twopgraph.locality.kernels.cluster_bfs_order` (cluster-BFS order
  of the parts' local ids).

and, once each: ``split`` (:func:`~twopgraph.distributed.partition.split.split_clusters`:
cluster graph, METIS on it, rebalancing; labels int64), ``halos``
(:func:`~twopgraph.distributed.partition.split.halos`, ``--hops`` hops, with the share of
vertex-part pairs reached; labels: a byte mask per eight parts either way) and
``local_edges`` (:func:`~twopgraph.distributed.partition.selfdep.local_entries`, with the
parts' summed induced CSR entries).

The fine clustering is the one ``twopgraph partition`` uses (``default_num_clusters`` for
batches of 1024), from the data root's cluster cache (``DATA_ROOT/clusters``, what
``partition`` and ``train`` fill) or computed once first (not timed). Each step: one warm-up
call (numba compilation, page cache), then ``step_s`` = the median of ``--reps`` calls.

Rows: ``step`` x ``labels`` (wide | narrow; int64 for ``split``, mask for ``halos`` and
``local_edges``). Figures: ``step_s``, ``label_bytes`` (bytes per label looked up),
``narrow_over_wide`` (narrow rows: their ``step_s`` over the wide row's; below 1 = narrow is
faster); ``cut_edges``, ``cut_from_cluster_graph``, ``cut_agrees``, ``reached_share``,
``local_entries``, ``num_nodes``, ``csr_entries``, ``num_clusters``.

Example::

    twopgraph bench partition-steps --graph ogbn-papers100M --data-root /work/scale/papers-0.0625
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Callable
from typing import TypeVar

from twopgraph.bench.harness import BENCHMARKS, Benchmark, Context, Row
from twopgraph.errors import ConfigError

log = logging.getLogger("twopgraph")

T = TypeVar("T")


def timed(fn: Callable[[], T], reps: int) -> tuple[float, T]:
    """``(median seconds of reps calls of fn after one warm-up call, the last result)``."""
    fn()  # warm-up: compilation, page cache
    times, out = [], None
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


@BENCHMARKS.register("partition-steps")
class PartitionStepsBenchmark(Benchmark):
    """The steps of ``twopgraph partition`` timed one by one (part split, edge cut, cluster
    graph, cluster-BFS order with int64 vs narrow labels; halos; induced edges), and the cut
    summed from the cluster graph checked against a pass over the CSR.

    Rows: step x labels. Figures: step_s, label_bytes, narrow_over_wide, cut_edges,
    cut_from_cluster_graph, cut_agrees, reached_share, local_entries."""

    help = "the steps of `twopgraph partition`, each timed alone; int64 vs narrow labels"
    columns = ("step_s", "narrow_over_wide", "label_bytes", "cut_edges",
               "cut_from_cluster_graph", "reached_share", "local_entries")

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--num-parts", type=int, default=4,
                       help="parts of the split (default: 4)")
        p.add_argument("--hops", type=int, default=3, help="halo hops (default: 3)")
        p.add_argument("--reps", type=int, default=3,
                       help="timed calls per step after one warm-up, median (default: 3)")
        p.add_argument("--seed", type=int, default=0, help="METIS' seed (default: 0)")

    def check(self, a: argparse.Namespace) -> None:
        if a.num_parts < 1 or a.num_parts > 127:
            raise ConfigError(f"--num-parts must be in 1..127, got {a.num_parts}")
        if a.hops < 0 or a.reps < 1:
            raise ConfigError("need --hops >= 0 and --reps >= 1")

    def measure(self, a: argparse.Namespace, ctx: Context) -> list[Row]:
        import numpy as np

        from twopgraph.datasets import resolve_data_root
        from twopgraph.distributed.partition.selfdep import DEFAULT_CLUSTER_BATCH, local_entries
        from twopgraph.distributed.partition.split import halos, split_clusters
        from twopgraph.locality import kernels
        from twopgraph.locality.cluster import cluster_graph, default_num_clusters
        from twopgraph.locality.contract import group_by
        data = ctx.data()
        g, train = data.graph, data.train_idx
        k = default_num_clusters(data.num_nodes, int(train.shape[0]), DEFAULT_CLUSTER_BATCH)
        log.info("bench partition-steps: %d fine clusters of %s", k, ctx.graph_name)
        fine = cluster_graph(g, k, train_idx=train,
                             cache_dir=resolve_data_root(ctx.data_root) / "clusters")
        size = {"num_nodes": int(data.num_nodes), "csr_entries": int(g.num_edges),
                "num_clusters": int(k)}
        rows = []
        split_s, (to_part, split_cut) = timed(
            lambda: split_clusters(g, fine.parts, k, train, a.num_parts, a.seed), a.reps)
        split = {"step_s": split_s, "label_bytes": 8, "cut_from_cluster_graph": int(split_cut),
                 **size}
        rows.append(Row({"step": "split", "labels": "int64"}, split))
        widths = {"wide": lambda x, top: np.ascontiguousarray(x, dtype=np.int64),
                  "narrow": lambda x, top: kernels.compact_labels(x, top)}
        wide_s: dict[str, float] = {}
        chunks = int(max(1, min(16, (1 << 28) // (8 * k * k))))
        for width, as_width in widths.items():
            owner = as_width(to_part, a.num_parts - 1)[fine.parts]
            cid = as_width(fine.parts, k - 1)
            start, members = group_by(cid, k)
            steps = {
                "cut": (lambda: kernels.cut_edges(g.indptr, g.indices, owner), owner),
                "cluster_graph": (lambda: kernels.cluster_pairs(g.indptr, g.indices, cid, k,
                                                                chunks), cid),
                "cluster_order": (lambda: kernels.cluster_bfs_order(g.indptr, g.indices, cid,
                                                                    members, start), cid),
            }
            for step, (fn, labels) in steps.items():
                log.info("bench partition-steps: %s (%s labels)", step, width)
                sec, out = timed(fn, a.reps)
                fig = {"step_s": sec, "label_bytes": int(labels.itemsize)}
                if width == "wide":
                    wide_s[step] = sec
                else:
                    fig["narrow_over_wide"] = sec / max(wide_s[step], 1e-9)
                if step == "cut":
                    fig["cut_edges"] = int(out) // 2  # entries: each undirected edge twice
                    split["cut_edges"] = fig["cut_edges"]
                rows.append(Row({"step": step, "labels": width}, fig))
        split["cut_agrees"] = split["cut_edges"] == split["cut_from_cluster_graph"]
        owner = kernels.compact_labels(to_part, a.num_parts - 1)[fine.parts]
        log.info("bench partition-steps: halos (%d hops)", a.hops)
        sec, reached = timed(lambda: halos(g, owner, train, a.num_parts, a.hops), a.reps)
        rows.append(Row({"step": "halos", "labels": "mask"},
                        {"step_s": sec, "label_bytes": 1,
                         "reached_share": float(reached.mean())}))
        log.info("bench partition-steps: local edges")
        sec, entries = timed(lambda: local_entries(g, owner, reached, a.num_parts), a.reps)
        rows.append(Row({"step": "local_edges", "labels": "mask"},
                        {"step_s": sec, "label_bytes": 1,
                         "local_entries": int(entries.sum())}))
        return rows
