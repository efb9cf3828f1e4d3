#!/usr/bin/env python
"""Clustering methods on several graph families: time, memory, edge cut and locality.

    .venv/bin/python scripts/bench_cluster.py                       # the default table
    .venv/bin/python scripts/bench_cluster.py --families rmat:20,rgg:1000000 \\
        --methods metis,coarsen --json runs/bench_cluster.json
    .venv/bin/python scripts/bench_cluster.py --families synthetic:5000000:75000000 \\
        --methods coarsen --no-locality

Every (method, graph) runs in a fresh child process that memory-maps the graph (``indptr``
int64, ``indices`` int32 ``.npy`` files, as a store holds them), warms numba up on a tiny
graph, then clusters: ``seconds`` is that call's wall time, ``peak_rss_mib`` the child's
peak resident set (the mapped CSR pages it read included), ``anon_mib`` its peak anonymous
memory (sampled every 10 ms) above what it held before the call. The parent computes the
edge cut and the locality ratio: input vertices per batch of the locality scheduler over the
random scheduler's (the project's sampler and schedulers, first 8 batches of epoch 0,
:func:`twopgraph.locality.auto.measure`; lower = more locality), and ``reach``, the
share of the graph a random batch reaches (what ``--schedule auto`` estimates before it
clusters). Clusters: ``default_num_clusters`` for batch size 1024; fanouts 10,10 below 50,000
vertices, else 15,10,5 (the training defaults).

Families (``NAME[:ARGS]``): ``real:FILE`` (a ``.npz`` of ../shared/datasets), ``synthetic:N:E``
(the project's generator, ``twopgraph.datasets.synthetic``), ``rmat:SCALE[:EDGEFACTOR]`` (R-MAT /
Kronecker, a=0.57, b=c=0.19, ids permuted), ``rgg:N[:DEGREE]`` (random geometric graph in the
unit square), ``ba:N[:M]`` (Barabasi-Albert-like preferential attachment, M edges per new
vertex). Generated graphs are cached under ``--cache`` (default /tmp/twopgraph-bench-cluster).
Methods: ``metis-full`` (METIS on the whole graph), ``metis`` (METIS on the degree-capped graph,
the pre-existing default), ``coarsen``, ``lp`` (see twopgraph/locality/cluster.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_FAMILIES = ("real:amazon_photo,real:coauthor_physics,real:tolokers,"
                    "synthetic:2449029:61859140,rmat:20:8,rgg:1000000:12,ba:1000000:6")
DEFAULT_METHODS = "metis-full,metis,coarsen,lp"
SHARED = ROOT.parent / "shared" / "datasets"


# -- graph families -------------------------------------------------------------------------------
def _csr_from_pairs(src, dst, n):
    """Symmetric, deduplicated, loop-free CSR (int64 indptr, int32 indices) of the pairs."""
    keep = src != dst
    src, dst = src[keep], dst[keep]
    lo, hi = np.minimum(src, dst).astype(np.int64), np.maximum(src, dst).astype(np.int64)
    key = np.unique(lo * n + hi)
    lo, hi = key // n, key % n
    del key
    u = np.concatenate([lo, hi])
    v = np.concatenate([hi, lo])
    del lo, hi
    order = np.lexsort((v, u))
    indices = v[order].astype(np.int32)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(u, minlength=n), out=indptr[1:])
    return indptr, indices


def gen_rmat(scale: int, edge_factor: int = 16, seed: int = 0):
    rng = np.random.default_rng(seed)
    n = 1 << scale
    m = n * edge_factor
    a, b, c = 0.57, 0.19, 0.19
    src = np.zeros(m, dtype=np.int64)
    dst = np.zeros(m, dtype=np.int64)
    for bit in range(scale):
        r = rng.random(m)
        # quadrant: a (0,0), b (0,1), c (1,0), d (1,1)
        sbit = r >= a + b
        dbit = ((r >= a) & (r < a + b)) | (r >= a + b + c)
        src |= sbit.astype(np.int64) << bit
        dst |= dbit.astype(np.int64) << bit
    perm = rng.permutation(n)
    return _csr_from_pairs(perm[src], perm[dst], n)


def gen_rgg(n: int, degree: float = 12.0, seed: int = 0):
    from scipy.spatial import cKDTree
    rng = np.random.default_rng(seed)
    pts = rng.random((n, 2))
    r = np.sqrt(degree / (np.pi * n))
    pairs = cKDTree(pts).query_pairs(r, output_type="ndarray")
    return _csr_from_pairs(pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64), n)


def gen_ba(n: int, m: int = 6, seed: int = 0):
    """Preferential attachment by copying a random endpoint of a random earlier edge,
    vectorised over blocks of vertices (a block links to the edges of earlier blocks)."""
    rng = np.random.default_rng(seed)
    m0 = m + 1
    src = [np.repeat(np.arange(m0), m0)]
    dst = [np.tile(np.arange(m0), m0)]
    e_src = np.concatenate(src)
    e_dst = np.concatenate(dst)
    lo = m0
    while lo < n:
        hi = min(n, max(lo + 1, int(lo * 1.25)))
        cnt = (hi - lo) * m
        pick = rng.integers(0, e_src.shape[0], cnt)
        side = rng.random(cnt) < 0.5
        tgt = np.where(side, e_src[pick], e_dst[pick])
        s = np.repeat(np.arange(lo, hi), m)
        e_src = np.concatenate([e_src, s])
        e_dst = np.concatenate([e_dst, tgt])
        lo = hi
    perm = rng.permutation(n)
    return _csr_from_pairs(perm[e_src], perm[e_dst], n)


def gen_synthetic(n: int, e: int, seed: int = 0):
    from twopgraph.datasets.synthetic import SyntheticSpec, generate
    spec = SyntheticSpec(name=f"bench-{n}", num_nodes=n, num_edges=e, num_features=1,
                         num_classes=47, num_communities=max(20, n // 1000), train_frac=0.08,
                         val_frac=0.02, max_degree_ratio=350.0, seed=seed)
    d = generate(spec)
    return d.graph.indptr, d.graph.indices.astype(np.int32), d.train_idx, d.label


def family_graph(spec: str, cache: Path) -> Path:
    """The folder holding ``indptr.npy``, ``indices.npy``, ``train_idx.npy`` (and
    ``label.npy``) of the family ``spec``, generated on first use."""
    folder = cache / spec.replace(":", "_").replace("/", "_")
    if (folder / "done").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    name, *args = spec.split(":")
    label = None
    t = time.perf_counter()
    if name == "real":
        from twopgraph.datasets import load_dataset
        path = Path(args[0])
        if not path.suffix:
            path = SHARED / f"{args[0]}.npz"
        d = load_dataset(str(path))
        indptr, indices = np.asarray(d.graph.indptr), np.asarray(d.graph.indices, np.int32)
        train, label = np.asarray(d.train_idx), np.asarray(d.label)
    elif name == "synthetic":
        indptr, indices, train, label = gen_synthetic(int(args[0]), int(args[1]))
    else:
        if name == "rmat":
            indptr, indices = gen_rmat(int(args[0]), *(int(a) for a in args[1:]))
        elif name == "rgg":
            indptr, indices = gen_rgg(int(args[0]), *(float(a) for a in args[1:]))
        elif name == "ba":
            indptr, indices = gen_ba(int(args[0]), *(int(a) for a in args[1:]))
        else:
            raise SystemExit(f"unknown family {name!r}")
        n = indptr.shape[0] - 1
        train = np.sort(np.random.default_rng(1).permutation(n)[: max(1, n // 12)])
    np.save(folder / "indptr.npy", np.asarray(indptr, dtype=np.int64))
    np.save(folder / "indices.npy", np.asarray(indices, dtype=np.int32))
    np.save(folder / "train_idx.npy", np.asarray(train, dtype=np.int64))
    if label is not None:
        np.save(folder / "label.npy", np.asarray(label, dtype=np.int64))
    (folder / "done").write_text(f"{time.perf_counter() - t:.1f}\n")
    return folder


def load_graph(folder: Path, mmap: bool = True):
    from twopgraph.graph.data import CSRGraph
    mode = "r" if mmap else None
    g = CSRGraph(np.load(folder / "indptr.npy", mmap_mode=mode),
                 np.load(folder / "indices.npy", mmap_mode=mode))
    train = np.load(folder / "train_idx.npy")
    label = np.load(folder / "label.npy") if (folder / "label.npy").is_file() else None
    return g, train, label


# -- the child: one clustering run ---------------------------------------------------------------
def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def worker(a) -> None:
    from twopgraph.graph.data import CSRGraph
    from twopgraph.locality import cluster_graph, default_num_clusters
    from twopgraph.runtime.jit import configure_threading
    configure_threading()
    method = a.worker
    kw = {"method": "metis", "max_degree": None} if method == "metis-full" else {"method": method}
    # warm-up: compile (or load) every kernel of the method
    from twopgraph.locality import coarsen
    rng = np.random.default_rng(0)
    tiny = CSRGraph.from_edges(rng.integers(0, 3000, 20000), rng.integers(0, 3000, 20000), 3000)
    saved = coarsen.COARSE_MIN, coarsen.COARSE_PER_PART
    coarsen.COARSE_MIN, coarsen.COARSE_PER_PART = 10, 1  # every level's kernels compile
    cluster_graph(tiny, 8, train_idx=np.arange(0, 3000, 7), **kw)
    coarsen.COARSE_MIN, coarsen.COARSE_PER_PART = saved
    g, train, _ = load_graph(Path(a.graph))
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


# -- the parent ---------------------------------------------------------------------------------
def locality(folder: Path, parts, seed: int = 0) -> dict:
    from twopgraph.locality.auto import measure
    from twopgraph.sampler import NeighborSampler
    g, train, label = load_graph(folder)
    fanouts = [10, 10] if g.num_nodes < 50_000 else [15, 10, 5]
    f = measure(NeighborSampler(g, fanouts, seed=seed), train, 1024, seed, parts=parts,
                labels=label, workers=2)
    loc = f["locality_inputs"] / max(f["locality_batches"], 1)
    rnd = f["random_inputs"] / max(f["random_batches"], 1)
    return {"locality_ratio": loc / rnd, "reach": rnd / g.num_nodes,
            "inputs_locality": loc, "inputs_random": rnd}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", default=DEFAULT_FAMILIES)
    p.add_argument("--methods", default=DEFAULT_METHODS)
    p.add_argument("--k", type=int, default=0, help="clusters (0 = default_num_clusters)")
    p.add_argument("--cache", default="/tmp/twopgraph-bench-cluster")
    p.add_argument("--threads", type=int, default=2, help="NUMBA_NUM_THREADS of the children")
    p.add_argument("--timeout", type=float, default=900, help="seconds per clustering run")
    p.add_argument("--max-full-metis-edges", type=int, default=40_000_000,
                   help="skip metis-full on graphs with more directed edges than this")
    p.add_argument("--no-locality", action="store_true", help="skip the locality measurement")
    p.add_argument("--json", help="also write the rows to this file")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--graph", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        return worker(a)
    cache = Path(a.cache)
    rows = []
    header = (f"{'method':<11} {'family':<28} {'N':>10} {'E':>12} {'k':>6} {'seconds':>8} "
              f"{'peak_rss':>9} {'anon_mib':>9} {'edge_cut':>7} {'loc/rnd':>7} {'reach':>6}")
    print(header, flush=True)
    for fam in a.families.split(","):
        folder = family_graph(fam, cache)
        g, train, _ = load_graph(folder)
        n, e = g.num_nodes, g.num_edges
        for method in a.methods.split(","):
            if method == "metis-full" and e > a.max_full_metis_edges:
                continue
            out = folder / f"parts-{method}.npy"
            env = dict(os.environ, NUMBA_NUM_THREADS=str(a.threads))
            try:
                r = subprocess.run([sys.executable, __file__, "--worker", method, "--graph",
                                    str(folder), "--out", str(out), "--k", str(a.k)],
                                   capture_output=True, text=True, env=env, timeout=a.timeout)
            except subprocess.TimeoutExpired:
                print(f"{method:<11} {fam:<28} timed out after {a.timeout:.0f} s", flush=True)
                continue
            if r.returncode != 0:
                print(f"{method:<11} {fam:<28} failed: {r.stderr.strip()[-400:]}", flush=True)
                continue
            row = {"method": method, "family": fam, "N": n, "E": e,
                   **json.loads(r.stdout.strip().splitlines()[-1])}
            row["cut_share"] = row["edge_cut"] / max(e // 2, 1)
            parts = np.load(out)
            tr = np.bincount(parts[train], minlength=row["k"])
            row["train_imbalance"] = float(tr.max() / max(tr.mean(), 1e-9))
            if not a.no_locality:
                row.update(locality(folder, parts))
            rows.append(row)
            print(f"{method:<11} {fam:<28} {n:>10,} {e:>12,} {row['k']:>6} "
                  f"{row['seconds']:>8.1f} {row['peak_rss_mib']:>9.0f} {row['anon_mib']:>9.0f} "
                  f"{row['cut_share']:>7.3f} {row.get('locality_ratio', float('nan')):>7.3f} "
                  f"{row.get('reach', float('nan')):>6.3f}  (train max/mean "
                  f"{row['train_imbalance']:.2f})", flush=True)
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
