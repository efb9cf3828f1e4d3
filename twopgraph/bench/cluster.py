"""``twopgraph bench cluster``: clustering methods on one graph -- time, memory, edge cut and the
locality they give the sampler.

Every method of ``--methods`` runs in a fresh child process that opens the graph (the store's
memory-mapped CSR), warms numba up on a tiny graph, then clusters: ``seconds`` is that call's
wall time, ``peak_rss_mib`` the child's peak resident set (the mapped CSR pages it read
included), ``anon_mib`` its peak anonymous memory (sampled every 10 ms) above what it held
before the call. This process then computes ``cut_share`` (edge cut over undirected edges),
``train_imbalance`` (most training vertices in a cluster over the mean) and, unless
``--no-locality``, ``locality_ratio``: input vertices per batch of the locality scheduler over
the random scheduler's (the project's sampler and schedulers, first 8 batches of epoch 0,
:func:`twopgraph.locality.auto.measure`; lower = more locality) and ``reach``, the share of
the graph a random batch reaches (what ``--schedule auto`` estimates before it clusters).
Clusters: ``--k`` (0 = ``default_num_clusters`` for batches of 1024); fanouts 10,10 below
50,000 vertices, else 15,10,5.

Methods: ``metis-full`` (METIS on the whole graph; skipped beyond
``--max-full-metis-edges``), ``metis`` (METIS on the degree-capped graph), ``coarsen``,
``lp`` (see :mod:`twopgraph.locality.cluster`). Graphs: any ``--graph``, the generated
families (``rmat:20:8``, ``rgg:1000000:12``, ``ba:1000000:6``) included.

Example::

    twopgraph bench cluster --graph rmat:18:8 --methods metis,coarsen,lp
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from twopgraph.bench.harness import BENCHMARKS, Benchmark, Context, Row
from twopgraph.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

    from twopgraph.graph.data import GraphData

log = logging.getLogger("twopgraph")

METHODS = ("metis-full", "metis", "coarsen", "lp")


@BENCHMARKS.register("cluster")
class ClusterBenchmark(Benchmark):
    """Clustering methods on one graph, each in a fresh process: seconds, peak and anonymous
    memory, edge cut, training balance, and the locality the clusters give the sampler.

    Rows: method. Figures: seconds, peak_rss_mib, anon_mib, cut_share, train_imbalance,
    locality_ratio, reach."""

    help = "clustering methods: time, memory, edge cut, locality"
    columns = ("k", "seconds", "peak_rss_mib", "anon_mib", "cut_share", "train_imbalance",
               "locality_ratio", "reach", "error")

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--methods", default="metis-full,metis,coarsen,lp",
                       help="comma-separated, of metis-full, metis, coarsen, lp (default: "
                            "all)")
        p.add_argument("--k", type=int, default=0,
                       help="clusters (0 = default_num_clusters) (default: 0)")
        p.add_argument("--threads", type=int, default=2,
                       help="NUMBA_NUM_THREADS of the children (default: 2)")
        p.add_argument("--timeout", type=float, default=900,
                       help="seconds per clustering run (default: 900)")
        p.add_argument("--max-full-metis-edges", type=int, default=40_000_000,
                       help="skip metis-full beyond this many directed edges (default: 4e7)")
        p.add_argument("--no-locality", action="store_true",
                       help="skip the locality measurement")

    def check(self, a: argparse.Namespace) -> None:
        a._methods = [m.strip() for m in a.methods.split(",") if m.strip()]
        bad = [m for m in a._methods if m not in METHODS]
        if bad or not a._methods:
            raise ConfigError(f"--methods: unknown {bad}; known: {', '.join(METHODS)}")
        if a.k < 0 or a.threads < 1 or a.timeout <= 0:
            raise ConfigError("need --k >= 0, --threads >= 1, --timeout > 0")

    def measure(self, a: argparse.Namespace, ctx: Context) -> list[Row]:
        import numpy as np
        data = ctx.data()
        g = data.graph
        n, e = g.num_nodes, int(g.indices.shape[0])
        rows = []
        with tempfile.TemporaryDirectory(prefix="twopgraph-bench-cluster-") as tmp:
            for method in a._methods:
                params = {"method": method}
                if method == "metis-full" and e > a.max_full_metis_edges:
                    rows.append(Row(params, {"error": f"skipped: {e} edges"}))
                    continue
                out = Path(tmp) / f"parts-{method}.npy"
                cmd = [sys.executable, "-c", ("import sys; from twopgraph.bench.cluster import "
                                              "worker; sys.exit(worker(sys.argv[1:]))"),
                       "--method", method,
                       "--dataset", ctx.dataset(), "--out", str(out), "--k", str(a.k),
                       *(["--data-root", ctx.data_root] if ctx.data_root else [])]
                env = dict(os.environ, NUMBA_NUM_THREADS=str(a.threads))
                log.info("bench cluster: %s on %s", method, ctx.graph_name)
                try:
                    r = subprocess.run(cmd, capture_output=True, text=True, env=env,
                                       timeout=a.timeout, check=False)
                except subprocess.TimeoutExpired:
                    rows.append(Row(params, {"error": f"timed out after {a.timeout:g} s"}))
                    continue
                if r.returncode != 0:
                    last = (r.stderr.strip().splitlines() or ["no output"])[-1]
                    rows.append(Row(params, {"error": f"failed: {last}"}))
                    continue
                fig = {"num_nodes": n, "num_edges": e,
                       **json.loads(r.stdout.strip().splitlines()[-1])}
                fig["cut_share"] = fig["edge_cut"] / max(e // 2, 1)
                parts = np.load(out)
                tr = np.bincount(parts[data.train_idx], minlength=fig["k"])
                fig["train_imbalance"] = float(tr.max() / max(tr.mean(), 1e-9))
                if not a.no_locality:
                    fig.update(locality(data, parts))
                rows.append(Row(params, fig))
        return rows


def locality(data: GraphData, parts: np.ndarray) -> dict:
    """``locality_ratio`` (locality scheduler's input vertices per batch over random's),
    ``reach`` (share of the graph a random batch reaches), and both input counts."""
    from twopgraph.locality.auto import measure
    from twopgraph.sampler import NeighborSampler
    g = data.graph
    fanouts = [10, 10] if g.num_nodes < 50_000 else [15, 10, 5]
    label = data.label if data.num_classes > 1 else None
    f = measure(NeighborSampler(g, fanouts, seed=0), data.train_idx, 1024, 0, parts=parts,
                labels=label, workers=2)
    loc = f["locality_inputs"] / max(f["locality_batches"], 1)
    rnd = f["random_inputs"] / max(f["random_batches"], 1)
    return {"locality_ratio": loc / rnd, "reach": rnd / g.num_nodes, "inputs_locality": loc,
            "inputs_random": rnd}


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def worker(argv: list[str]) -> int:
    """The child of one clustering run: prints one JSON line (``seconds``, ``k``,
    ``edge_cut``, ``peak_rss_mib``, ``anon_mib``, ``base_anon_mib``) and saves the parts."""
    import numpy as np

    from twopgraph.config import DataConfig
    from twopgraph.graph.data import CSRGraph
    from twopgraph.locality import cluster_graph, coarsen, default_num_clusters
    from twopgraph.runtime.jit import configure_threading
    p = argparse.ArgumentParser(prog="bench cluster worker")
    p.add_argument("--method", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--data-root", default=None)
    p.add_argument("--out", required=True)
    p.add_argument("--k", type=int, default=0)
    a = p.parse_args(argv)
    configure_threading()
    kw = ({"method": "metis", "max_degree": None} if a.method == "metis-full"
          else {"method": a.method})
    rng = np.random.default_rng(0)  # warm-up: compile (or load) every kernel of the method
    tiny = CSRGraph.from_edges(rng.integers(0, 3000, 20000), rng.integers(0, 3000, 20000), 3000)
    saved = coarsen.COARSE_MIN, coarsen.COARSE_PER_PART
    coarsen.COARSE_MIN, coarsen.COARSE_PER_PART = 10, 1  # every level's kernels compile
    cluster_graph(tiny, 8, train_idx=np.arange(0, 3000, 7), **kw)
    coarsen.COARSE_MIN, coarsen.COARSE_PER_PART = saved
    data = DataConfig(a.dataset, a.data_root).validate().load(progress=False)
    g, train = data.graph, data.train_idx
    k = a.k or default_num_clusters(g.num_nodes, train.shape[0], 1024)
    base = _status("RssAnon")
    peak = [base]
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            peak[0] = max(peak[0], _status("RssAnon"))
            stop.wait(0.01)
    th = threading.Thread(target=poll, daemon=True)
    th.start()
    t = time.perf_counter()
    c = cluster_graph(g, k, train_idx=train, **kw)
    seconds = time.perf_counter() - t
    stop.set()
    th.join()
    peak[0] = max(peak[0], _status("RssAnon"))
    np.save(a.out, c.parts.astype(np.int32))
    print(json.dumps({"seconds": seconds, "k": k, "edge_cut": int(c.edge_cut),
                      "peak_rss_mib": _status("VmHWM") / 2**20,
                      "anon_mib": (peak[0] - base) / 2**20, "base_anon_mib": base / 2**20}))
    return 0
