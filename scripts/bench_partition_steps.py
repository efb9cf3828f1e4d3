#!/usr/bin/env python
"""The in-process steps of ``twopgraph partition`` on one dataset, each timed alone, and the
per-vertex label width they look up A/B in one run.

The label-driven kernels (:mod:`twopgraph.locality.kernels`) look a vertex's cluster or part
up once per CSR entry, at random. They run here with the labels as int64 (``wide``, what they
were given before) and as :func:`~twopgraph.locality.kernels.label_dtype` picks them
(``narrow``: int8 parts, int16 clusters), on the same graph in the same process:

* ``cut``: :func:`~twopgraph.locality.kernels.cut_edges` with the part of every vertex (the
  partition itself sums its cut from the cluster graph: ``cut_from_cluster_graph``, which
  must equal ``cut_edges``);
* ``cluster_graph``: :func:`~twopgraph.locality.kernels.cluster_pairs` (the part split's
  cluster graph) with the fine cluster of every vertex;
* ``cluster_order``: :func:`~twopgraph.locality.kernels.cluster_bfs_order` (cluster-BFS
  order of the parts' local ids).

and, once each (their input is a byte mask either way): ``halos``
(:func:`~twopgraph.distributed.partition.split._halos`, ``--hops`` hops, with its count of vertices
reached) and ``local_edges`` (:func:`~twopgraph.distributed.partition.selfdep._local_entries`).

The clustering comes from the dataset's cluster cache (``R/clusters``, what ``twopgraph
partition`` and ``train`` fill) or is computed once first (not timed). Seconds are the median
of ``--repeats`` calls after one warm-up call (numba compilation, page cache). Prints one JSON
object.

    .venv/bin/python scripts/bench_partition_steps.py --dataset ogbn-papers100M \\
        --data-root /work/scale/papers-0.0625
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def timed(fn, repeats: int):
    fn()  # warm-up: compilation, page cache
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return round(statistics.median(times), 3), out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", required=True, help="dataset name or path (as for train)")
    p.add_argument("--data-root", default=None, help="data root (as for train)")
    p.add_argument("--num-parts", type=int, default=4, help="parts of the split")
    p.add_argument("--hops", type=int, default=3, help="halo hops")
    p.add_argument("--repeats", type=int, default=3, help="timed calls per step (median)")
    a = p.parse_args(argv)
    import numpy as np

    from twopgraph.config import DataConfig
    from twopgraph.datasets import resolve_data_root
    from twopgraph.distributed.partition.selfdep import DEFAULT_CLUSTER_BATCH, _local_entries
    from twopgraph.distributed.partition.split import _halos, _split_clusters
    from twopgraph.locality import kernels
    from twopgraph.locality.cluster import cluster_graph, default_num_clusters
    from twopgraph.locality.contract import group_by
    from twopgraph.runtime.jit import configure_threading
    configure_threading()
    data = DataConfig(a.dataset, a.data_root, False).validate().load()
    g = data.graph
    k = default_num_clusters(data.num_nodes, int(data.train_idx.shape[0]),
                             DEFAULT_CLUSTER_BATCH)
    fine = cluster_graph(g, k, train_idx=data.train_idx,
                         cache_dir=resolve_data_root(a.data_root) / "clusters")
    to_part, split_cut = _split_clusters(g, fine.parts, k, data.train_idx, a.num_parts, 0)
    res = {"dataset": a.dataset, "num_nodes": data.num_nodes, "csr_entries": g.num_edges,
           "num_clusters": k, "num_parts": a.num_parts, "repeats": a.repeats}
    widths = {"wide": lambda x, top: np.ascontiguousarray(x, dtype=np.int64),
              "narrow": lambda x, top: kernels.compact_labels(x, top)}
    for name, as_width in widths.items():
        owner = as_width(to_part, a.num_parts - 1)[fine.parts]
        cid = as_width(fine.parts, k - 1)
        start, members = group_by(cid, k)
        chunks = int(max(1, min(16, (1 << 28) // (8 * k * k))))
        res[f"cut_s_{name}"], cut = timed(
            lambda: kernels.cut_edges(g.indptr, g.indices, owner), a.repeats)
        res[f"cluster_graph_s_{name}"], _ = timed(
            lambda: kernels.cluster_pairs(g.indptr, g.indices, cid, k, chunks), a.repeats)
        res[f"cluster_order_s_{name}"], _ = timed(
            lambda: kernels.cluster_bfs_order(g.indptr, g.indices, cid, members, start),
            a.repeats)
        res[f"label_bytes_{name}"] = [int(owner.itemsize), int(cid.itemsize)]
        res["cut_entries"] = int(cut)
    # the partition takes its edge cut from the cluster graph (no pass of its own): the same
    res["cut_edges"], res["cut_from_cluster_graph"] = res["cut_entries"] // 2, int(split_cut)
    owner = kernels.compact_labels(to_part, a.num_parts - 1)[fine.parts]
    res["halos_s"], reached = timed(
        lambda: _halos(g, owner, data.train_idx, a.num_parts, a.hops), a.repeats)
    res["reached_share"] = round(float(reached.mean()), 4)
    res["local_edges_s"], _ = timed(
        lambda: _local_entries(g, owner, reached, a.num_parts), a.repeats)
    for step in ("cut", "cluster_graph", "cluster_order"):
        res[f"{step}_narrow_over_wide"] = round(res[f"{step}_s_narrow"] /
                                                max(res[f"{step}_s_wide"], 1e-9), 3)
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
