"""METIS clustering (through ``pymetis``) with an on-disk cache.

:func:`cluster_graph` splits a graph into ``num_clusters`` parts with few cut edges; with
``train_idx`` given it balances the *training* vertices across parts as well as all vertices
(METIS multi-constraint vertex weights ``[1, is_train]``), so every cluster contributes about
the same number of seeds to an epoch.

``method`` ``coarsen`` (and ``lp``) computes the same contract at scale (:mod:`.coarsen`);
``auto`` picks METIS on graphs below :data:`COARSEN_EDGES` directed edges, else ``coarsen``.

Cache format (one file per result, written atomically): ``<cache_dir>/metis-<key>.npz``
(``coarsen-<key>.npz``, ``lp-<key>.npz`` for the other methods) with
``parts`` (int32, N: the cluster of each vertex), ``edge_cut`` (undirected edges between
clusters), ``num_clusters``, ``seconds`` (METIS wall time when it was computed) and
``format`` (:data:`CACHE_FORMAT`). ``key`` is :func:`cluster_key`: the provenance fingerprint
(:mod:`twopgraph.core.fingerprint`) of the CSR content, the training ids (when balancing),
``num_clusters``, the seed, the METIS options and the format version, so a stale or foreign
result is never read back: another graph simply gets another file, and a file of an older
format has another name (it is left unread; METIS runs again).

Example::

    >>> from twopgraph.graph.data import CSRGraph
    >>> g = CSRGraph.from_edges([0, 1, 2, 3, 4, 5], [1, 2, 0, 4, 5, 3], num_nodes=6)
    >>> c = cluster_graph(g, 2)
    >>> c.num_clusters, c.edge_cut, sorted(np.bincount(c.parts).tolist())
    (2, 0, [3, 3])
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import threading
import time
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from twopgraph.core.files import atomic_write_bytes
from twopgraph.core.fingerprint import fingerprint
from twopgraph.core.names import CLUSTER_METHODS
from twopgraph.errors import ConfigError
from twopgraph.graph.data import CSRGraph
from twopgraph.locality import kernels

log = logging.getLogger("twopgraph")

# 3: keyed by twopgraph.core.fingerprint (2: by a hash of the CSR as int64 ids)
CACHE_FORMAT = 3
# Default cluster count (see default_num_clusters): on a graph much larger than what one batch
# reaches, a batch is DEFAULT_CLUSTERS_PER_BATCH whole clusters ...
DEFAULT_CLUSTERS_PER_BATCH = 14
# ... where "much larger" means at least LOCALITY_NODES_PER_SEED vertices per seed of a batch
# (a 3-layer 15,10,5 batch of B random seeds reaches ~540 x B distinct vertices on
# synthetic-products); on smaller graphs a batch reaches most of the graph whatever the order,
# so clusters only cost diversity and the default favours many small clusters:
LOCALITY_NODES_PER_SEED = 512
# at least min(DEFAULT_MIN_CLUSTERS, N / 8) clusters.
DEFAULT_MIN_CLUSTERS = 2048
# METIS imbalance tolerance in 1/1000 (ufactor): 30 = parts up to 3% over the mean (METIS'
# own default for k-way).
DEFAULT_UFACTOR = 30
# Before METIS, an edge {u, v} is kept with probability min(1, max_degree / min(deg u, deg v))
# (a symmetric hash decides), so METIS sees about max_degree edges per vertex: on an
# ogbn-products-sized graph this cuts METIS' time and memory several-fold, while the clusters
# of a community graph barely change (the edge cut is measured on the full graph).
DEFAULT_METIS_MAX_DEGREE = 12
# Graphs with at least this many directed edges get the fast settings: cap FAST_METIS_MAX_DEGREE
# and FAST_METIS_NITER refinement passes per level (METIS' default: 10). Measured on
# synthetic-products (384 clusters, under load): cap 12 + 10 passes: METIS 95 s, cut 19.8%;
# cap 6 + 3 passes: 28 s, cut 20.1%. Smaller graphs take seconds either way and keep the
# default settings.
FAST_METIS_EDGES = 16_000_000
FAST_METIS_MAX_DEGREE = 6
FAST_METIS_NITER = 3
DEFAULT_METIS_NITER = 10
# --cluster-method (CLUSTER_METHODS, from twopgraph.core.names): ``metis`` (METIS on the
# degree-capped graph, as above; ``max_degree=None``: on the full graph), ``coarsen`` (multilevel
# label propagation in numba down to a small weighted graph, METIS on that, projection back with
# label-propagation refinement: see :mod:`.coarsen`), ``lp`` (the same coarsening with part-sized
# clusters, a greedy packing instead of METIS), ``auto`` (``metis`` below COARSEN_EDGES directed CSR
# entries, where it takes seconds, else ``coarsen``).
COARSEN_EDGES = 64_000_000
# bump when the coarsening's result changes for the same input (part of the cache key)
COARSEN_VERSION = 2


@dataclass(frozen=True)
class Clustering:
    """The cluster of every vertex: ``parts`` int64 (N), ids in ``[0, num_clusters)``.

    ``edge_cut`` counts undirected edges whose ends lie in different clusters; ``seconds`` is
    the METIS wall time (of the run that computed it, also when read from the cache);
    ``from_cache`` says whether this call read the cache; ``key`` is the cache key.
    """

    parts: np.ndarray
    num_clusters: int
    edge_cut: int
    seconds: float = 0.0
    from_cache: bool = False
    key: str = ""
    method: str = "metis"

    def sizes(self) -> np.ndarray:
        """Vertices per cluster (int64, num_clusters)."""
        return np.bincount(self.parts, minlength=self.num_clusters)

    def permute(self, perm: np.ndarray) -> "Clustering":
        """The same clustering for a renumbered graph (new vertex ``i`` = old ``perm[i]``)."""
        return Clustering(self.parts[perm], self.num_clusters, self.edge_cut, self.seconds,
                          self.from_cache, self.key, self.method)

    def summary(self) -> dict:
        sizes = self.sizes()
        return {"num_clusters": self.num_clusters, "edge_cut": self.edge_cut,
                "cluster_method": self.method,
                "metis_s": round(self.seconds, 3), "from_cache": self.from_cache,
                "cluster_size_min": int(sizes.min()), "cluster_size_max": int(sizes.max())}


def default_num_clusters(num_nodes: int, num_train: int, batch_size: int,
                         clusters_per_batch: int = DEFAULT_CLUSTERS_PER_BATCH,
                         min_clusters: int = DEFAULT_MIN_CLUSTERS) -> int:
    """The default number of METIS clusters for a training set of ``num_train`` vertices cut
    into batches of ``batch_size`` seeds.

    Large graphs (``num_nodes >= LOCALITY_NODES_PER_SEED * batch_size``): ``clusters_per_batch``
    clusters per batch, i.e. ``clusters_per_batch * ceil(num_train / batch_size)`` clusters.
    Chosen on scaled:2000000 (157 batches, LABOR-1, 2 epochs, seeds 0-5; `twopgraph bench
    train --variants` with ``--num-clusters`` 1256 / 1884 / 2198 / 2512,
    benchmarks/results/train.jsonl; mean test accuracy, input vertices per batch): 8 clusters
    per batch 0.8517 (sd 0.0011), 65,102; 12 per batch 0.8533 (sd 0.0005), 70,678; 14 per
    batch 0.8537 (sd 0.0002), 73,241; 16 per batch 0.8539 (sd 0.0001), 75,878; DGL 1.1.3
    (random order, neighbour sampling, seeds 0-2) 0.8536. The epoch follows the input
    vertices: against 12 per batch, alternated over 3 repeats (the median of the repeats'
    ratios, their range), 16 per batch cost 7 % more (6-12 %), 14 per batch 4 % (3-10 %).
    14 is the fewest clusters per batch at DGL's accuracy (12 per batch are 0.03 point under
    it). Checked on synthetic-products (not used to choose; seeds 0, 1): 14 per batch 0.8541,
    0.8544 against 12 per batch's 0.8537, 0.8537.
    Issue 41: 4 per batch were the default before 8 (chosen on synthetic-products at 3 epochs;
    0.8235 here), 8 before 12, 12 before 14.
    Where even these leave a batch with too few classes, ``--schedule auto`` tries more
    (:data:`~twopgraph.locality.auto.CLUSTERS_PER_BATCH_CANDIDATES`) or takes random order
    (:data:`~twopgraph.locality.auto.LABEL_SKEW_THRESHOLD`).

    Small graphs: at least ``min(min_clusters, num_nodes // 8)`` clusters (and at least
    ``clusters_per_batch`` per batch). With few batches per epoch every batch must mix many
    clusters or its labels are skewed and accuracy drops (amazon_photo, 5 batches per epoch:
    72 clusters cost 4 points, 956 clusters of ~8 vertices 0.3 points); there a 3-hop batch
    reaches most of the graph anyway, so small clusters cost no locality.
    """
    batches = max(1, -(-int(num_train) // max(1, int(batch_size))))
    k = clusters_per_batch * batches
    if num_nodes < LOCALITY_NODES_PER_SEED * batch_size:
        k = max(k, min(min_clusters, num_nodes // 8))
    return int(max(1, min(num_nodes, k)))


def edge_cut(graph: CSRGraph, parts: np.ndarray) -> int:
    """Undirected edges of a symmetric ``graph`` whose ends are in different ``parts``."""
    return int(kernels.cut_edges(graph.indptr, graph.indices,
                                 kernels.compact_labels(parts))) // 2


def sparsify(graph: CSRGraph, max_degree: int, seed: int = 0) -> CSRGraph:
    """Symmetric subgraph keeping edge {u, v} with probability min(1, max_degree /
    min(deg u, deg v)); the coin is a hash of (min(u,v), max(u,v), seed), so both directions
    agree and the result is deterministic. Vertices of degree <= max_degree keep every edge.
    (numba, parallel: ~1 s for ogbn-products' 62M directed edges.)"""
    if max_degree < 1:
        raise ConfigError(f"max_degree must be >= 1, got {max_degree}")
    salt = np.uint64((int(seed) * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & ((1 << 64) - 1))
    return CSRGraph(*kernels.sparsify_csr(graph.indptr, graph.indices, int(max_degree), salt))


def resolve_method(graph: CSRGraph, method: str = "auto") -> str:
    """The clustering method ``method`` (one of :data:`CLUSTER_METHODS`) runs on ``graph``:
    ``auto`` is ``metis`` below :data:`COARSEN_EDGES` directed CSR entries, else
    ``coarsen``. Raises :class:`ConfigError` for an unknown name."""
    if method not in CLUSTER_METHODS:
        raise ConfigError(f"cluster-method must be one of {', '.join(CLUSTER_METHODS)}, "
                          f"got {method!r}")
    if method == "auto":
        return "metis" if graph.num_edges < COARSEN_EDGES else "coarsen"
    return method


def cluster_key(graph: CSRGraph, num_clusters: int, *, train_idx: np.ndarray | None = None,
                seed: int = 0, ufactor: int = DEFAULT_UFACTOR,
                max_degree: int | None = DEFAULT_METIS_MAX_DEGREE,
                method: str = "auto") -> str:
    """The cache key of :func:`cluster_graph` with these arguments (no clustering run): the
    fingerprint of the CSR content, ``train_idx``, ``num_clusters``, ``seed``, ``ufactor``,
    the method actually used (``auto`` resolved: :func:`resolve_method`) with its settings --
    for METIS ``max_degree`` and refinement passes after the large-graph adjustment, for the
    coarsening methods :data:`COARSEN_VERSION` -- and :data:`CACHE_FORMAT`. (METIS keys carry
    no method entry, so the caches of earlier versions, all METIS, stay valid.)"""
    method = resolve_method(graph, method)
    if train_idx is not None:
        train_idx = np.asarray(train_idx, dtype=np.int64)
    params = {"graph": graph.fingerprint(), "num_clusters": int(num_clusters),
              "seed": int(seed), "ufactor": int(ufactor), "format": CACHE_FORMAT}
    if method == "metis":
        max_degree, niter = _metis_settings(graph, max_degree)
        params.update(max_degree=max_degree, niter=niter)
    else:
        params.update(method=method, coarsen_version=COARSEN_VERSION,
                      niter=DEFAULT_METIS_NITER if method == "coarsen" else None)
    return fingerprint("metis-clusters", params, train_idx)


def cache_path(cache_dir: str | os.PathLike, key: str, method: str) -> Path:
    """The cache file of a result of ``method`` (resolved) under ``key``."""
    return Path(cache_dir) / f"{'metis' if method == 'metis' else method}-{key}.npz"


def _metis_settings(graph: CSRGraph, max_degree: int | None) -> tuple[int | None, int]:
    """``(max_degree, niter)`` METIS runs with: the fast settings on large graphs."""
    if graph.num_edges >= FAST_METIS_EDGES:
        return (None if max_degree is None else int(min(max_degree, FAST_METIS_MAX_DEGREE)),
                FAST_METIS_NITER)
    return None if max_degree is None else int(max_degree), DEFAULT_METIS_NITER


def cluster_graph(graph: CSRGraph, num_clusters: int, *, train_idx: np.ndarray | None = None,
                  seed: int = 0, ufactor: int = DEFAULT_UFACTOR,
                  max_degree: int | None = DEFAULT_METIS_MAX_DEGREE,
                  cache_dir: str | os.PathLike | None = None,
                  method: str = "auto") -> Clustering:
    """Partition of the symmetric ``graph`` into ``num_clusters`` clusters with few cut edges.

    ``method`` (:data:`CLUSTER_METHODS`): ``metis`` = METIS k-way; ``coarsen`` = multilevel
    label propagation with METIS on the coarse graph (:mod:`.coarsen`; time about linear in
    the edges, parallel, memory a few arrays of N beyond the CSR, which is only read);
    ``lp`` = the coarsening alone with a greedy packing; ``auto`` = ``metis`` on graphs below
    :data:`COARSEN_EDGES` directed edges, else ``coarsen``.
    ``train_idx`` (optional): also balance the number of training vertices per cluster.
    ``seed`` is the random seed; ``ufactor`` the imbalance tolerance (1/1000).
    ``max_degree`` (None = off; METIS only) sparsifies the graph METIS sees (see
    :data:`DEFAULT_METIS_MAX_DEGREE`; graphs of at least :data:`FAST_METIS_EDGES` edges get
    the fast settings, a cap of at most :data:`FAST_METIS_MAX_DEGREE` and
    :data:`FAST_METIS_NITER` refinement passes); the reported ``edge_cut`` is always on ``graph``.
    ``cache_dir`` (optional): read the result from / write it to this folder (see the module
    docstring); without it the clustering always runs. Raises :class:`ConfigError` for a bad
    ``num_clusters`` or ``method``.
    """
    n = graph.num_nodes
    if isinstance(num_clusters, bool) or not isinstance(num_clusters, (int, np.integer)):
        raise ConfigError(f"num-clusters must be an integer, got {num_clusters!r}")
    if not 1 <= num_clusters <= max(n, 1):
        raise ConfigError(f"num-clusters must be in [1, {n}] (the number of vertices), "
                          f"got {num_clusters}")
    num_clusters = int(num_clusters)
    method = resolve_method(graph, method)
    if train_idx is not None:
        train_idx = np.asarray(train_idx, dtype=np.int64)
    key = cluster_key(graph, num_clusters, train_idx=train_idx, seed=seed, ufactor=ufactor,
                      max_degree=max_degree, method=method)
    path = cache_path(cache_dir, key, method) if cache_dir is not None else None
    if path is None:
        return _compute(graph, num_clusters, train_idx, seed, ufactor, max_degree, method, key,
                        None)
    # one writer per cache entry: a process that finds another computing it waits for that
    # result instead of computing it again (and replacing it under the other's feet)
    from twopgraph.core.locks import FileLock
    with FileLock(path.parent / f".{path.stem}.lock", f"the cluster cache {path}",
                  blocking=True):
        if path.is_file():
            cached = _read_cache(path, n, num_clusters)
            if cached is not None:
                parts, cut, seconds = cached
                log.info("clusters: %d (edge cut %d) read from %s", num_clusters, cut, path)
                return Clustering(parts, num_clusters, cut, seconds, True, key, method)
        return _compute(graph, num_clusters, train_idx, seed, ufactor, max_degree, method, key,
                        path)


def _compute(graph, num_clusters, train_idx, seed, ufactor, max_degree, method, key,
             path) -> Clustering:
    """:func:`cluster_graph`'s work, written to the cache file ``path`` (None: none)."""
    n = graph.num_nodes
    t = time.perf_counter()
    if method == "metis":
        max_degree, niter = _metis_settings(graph, max_degree)
        metis_graph = graph if max_degree is None else sparsify(graph, max_degree, seed)
        parts, cut = _metis(metis_graph, num_clusters, train_idx, seed, ufactor, niter)
        if metis_graph is not graph:
            del metis_graph
            cut = edge_cut(graph, parts)
    else:
        parts = _coarsen(graph, num_clusters, train_idx, seed, ufactor, method)
        cut = edge_cut(graph, parts)
    seconds = time.perf_counter() - t
    log.info("clusters: %s split %d vertices into %d clusters in %.1f s, edge cut %d "
             "(%.1f%% of edges)", "METIS" if method == "metis" else method, n, num_clusters,
             seconds, cut, 100.0 * cut / max(graph.num_edges // 2, 1))
    if path is not None:
        _write_cache(path, parts, cut, num_clusters, seconds)
    return Clustering(parts, num_clusters, cut, seconds, False, key, method)


def vertex_weights(n: int, train_idx: np.ndarray | None) -> np.ndarray:
    """The balance weights of the clustering (int32, N): 1 per vertex, and a training vertex
    as much as all non-training vertices per training vertex on top, so training vertices
    carry half of the total weight and a weight-balanced partition is also roughly balanced
    in training vertices."""
    vw = np.ones(n, dtype=np.int32)
    if train_idx is not None and train_idx.shape[0]:
        vw[train_idx] += max(1, -(-(n - train_idx.shape[0]) // train_idx.shape[0]))
    return vw


def _coarsen(graph: CSRGraph, k: int, train_idx, seed: int, ufactor: int, method: str):
    from twopgraph.locality.coarsen import MultilevelStats, multilevel_partition
    stats = MultilevelStats()
    parts = multilevel_partition(graph.indptr, graph.indices,
                                 vertex_weights(graph.num_nodes, train_idx), k, seed=seed,
                                 ufactor=ufactor,
                                 initial="metis" if method == "coarsen" else "greedy",
                                 metis_niter=DEFAULT_METIS_NITER, quiet=metis_output_to_log,
                                 stats=stats)
    log.info("clusters: %s levels (vertices, entries) %s; %s", method,
             " -> ".join(f"({a:,}, {b:,})" for a, b in stats.sizes),
             ", ".join(f"{name} {sec:.1f} s" for name, sec in stats.seconds.items())
             + f"; {stats.refine_rounds} refinement rounds per coarse level")
    return parts


def _metis(graph: CSRGraph, k: int, train_idx, seed: int, ufactor: int, niter: int):
    n = graph.num_nodes
    if k == 1 or n == 0:
        return np.zeros(n, dtype=np.int64), 0
    import pymetis
    idx = pymetis.zero_copy_dtype()
    xadj = np.ascontiguousarray(graph.indptr, dtype=idx)
    adjncy = np.ascontiguousarray(graph.indices, dtype=idx)
    vweights = None
    if train_idx is not None and train_idx.shape[0]:
        # One constraint (pymetis passes one weight per vertex): see vertex_weights.
        vweights = vertex_weights(n, train_idx).astype(idx)
    opts = pymetis.Options(seed=int(seed), ufactor=int(ufactor), niter=int(niter))
    with metis_output_to_log():
        cut, parts = pymetis.part_graph(k, pymetis.CSRAdjacency(xadj, adjncy),
                                        vweights=vweights, options=opts, recursive=False)
    del adjncy, xadj
    return np.asarray(parts, dtype=np.int64), int(cut)


_CACHE_KEYS = ("parts", "edge_cut", "num_clusters", "seconds", "format")


def _read_cache(path: Path, n: int, k: int):
    """``(parts, edge_cut, seconds)`` from the cache file ``path``, or None after one warning
    naming the file when it is damaged (not an ``.npz``, truncated, other keys, shapes, dtypes
    or values than :func:`_write_cache` writes for ``n`` vertices and ``k`` clusters): the
    caller then runs METIS again and rewrites the file."""
    try:
        z = np.load(path, allow_pickle=False)
        if not isinstance(z, np.lib.npyio.NpzFile):  # a bare .npy under the .npz name
            problem = "not an .npz archive"
        else:
            with z:
                missing = [name for name in _CACHE_KEYS if name not in z.files]
                arrays = {name: z[name] for name in _CACHE_KEYS if name not in missing}
            problem = (f"no {', '.join(missing)} in it" if missing
                       else _cache_problem(arrays, n, k))
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error,
            NotImplementedError) as e:  # unreadable, truncated, pickled, unknown compression
        problem = f"{type(e).__name__}: {e}"
    if problem is not None:
        log.warning("cluster cache %s is damaged (%s); recomputing it", path, problem)
        return None
    return (arrays["parts"].astype(np.int64), int(arrays["edge_cut"]),
            float(arrays["seconds"]))


def _cache_problem(arrays: dict, n: int, k: int) -> str | None:
    """What is wrong with the arrays of a cluster cache file (None: nothing)."""
    for name in ("edge_cut", "num_clusters", "format"):
        a = arrays[name]
        if a.shape != () or a.dtype.kind not in "iu":
            return f"{name} is not an integer (dtype {a.dtype}, shape {a.shape})"
    if arrays["seconds"].shape != () or arrays["seconds"].dtype.kind not in "iuf":
        return "seconds is not a number"
    if int(arrays["format"]) != CACHE_FORMAT:
        return f"format {int(arrays['format'])}, expected {CACHE_FORMAT}"
    if int(arrays["num_clusters"]) != k:
        return f"{int(arrays['num_clusters'])} clusters, expected {k}"
    parts = arrays["parts"]
    if parts.shape != (n,) or parts.dtype.kind not in "iu":
        return f"parts has dtype {parts.dtype}, shape {parts.shape}, expected integers, ({n},)"
    if n and (int(parts.min()) < 0 or int(parts.max()) >= k):
        return f"parts outside [0, {k})"
    if int(arrays["edge_cut"]) < 0:
        return "negative edge_cut"
    return None


def _write_cache(path: Path, parts: np.ndarray, cut: int, k: int, seconds: float) -> None:
    try:
        atomic_write_bytes(path, lambda f: np.savez(
            f, parts=parts.astype(np.int32), edge_cut=np.int64(cut), num_clusters=np.int64(k),
            seconds=np.float64(seconds), format=np.int64(CACHE_FORMAT)))
    except OSError as e:  # a read-only data root costs a METIS rerun, not the run
        log.warning("could not write the cluster cache %s (%s)", path, e.strerror or e)


_STDOUT_LOCK = threading.Lock()


@contextlib.contextmanager
def metis_output_to_log(what: str = "METIS") -> Iterator[None]:
    """Keep what C code prints to the standard output (METIS' ``***Cannot bisect a graph with
    0 vertices!`` and such, written with ``printf``) off this process's stdout, where it would
    land ahead of a ``--json`` line: for the duration, file descriptor 1 points to a temp file
    (restored afterwards, also on errors), and what was printed becomes one log warning.

    File descriptor 1 is process-wide: a lock serialises the callers, and output of other
    threads to fd 1 (not ``sys.stdout``, which stays buffered in Python) meanwhile is captured
    too, so use it where no other thread prints (METIS runs before the pipeline threads).
    """
    with _STDOUT_LOCK:
        try:
            sys.stdout.flush()  # earlier Python output first, in order
        except (AttributeError, OSError, ValueError):  # no stdout, or a closed one
            pass
        try:
            saved = os.dup(1)
        except OSError:  # fd 1 is closed: nothing to protect
            yield
            return
        try:
            capture = tempfile.TemporaryFile()
        except OSError:  # no writable temp folder: send it to stderr instead
            capture = None
        try:
            os.dup2(capture.fileno() if capture is not None else 2, 1)
            try:
                yield
            finally:
                _flush_c_stdout()
                os.dup2(saved, 1)
        finally:
            os.close(saved)
            if capture is not None:
                with capture:
                    capture.seek(0)
                    _log_c_output(what, (raw.decode(errors="replace") for raw in capture))


def _flush_c_stdout() -> None:
    """Flush C stdio buffers (a pipe's stdout is fully buffered: unflushed text would reach
    the real stdout later)."""
    try:
        import ctypes
        ctypes.CDLL(None).fflush(None)
    except (ImportError, OSError, AttributeError, TypeError):  # no C library to flush
        pass


def _log_c_output(what: str, lines) -> None:
    """One warning with the distinct ``lines`` (and how often each came)."""
    counts: dict[str, int] = {}
    for line in lines:
        line = line.strip().lstrip("*").strip()
        if line:
            counts[line] = counts.get(line, 0) + 1
    if counts:
        shown = "; ".join(f"{line} (x{c})" if c > 1 else line
                          for line, c in list(counts.items())[:5])
        more = f"; and {len(counts) - 5} other messages" if len(counts) > 5 else ""
        log.warning("%s printed: %s%s", what, shown, more)
