"""Self-dependence partitions (2PGraph): each worker's training vertices together with everything
their H-hop sampling can reach, renumbered locally, so that training needs no communication.

:func:`partition_selfdep` splits the graph into ``P`` parts with METIS, balancing training
vertices (and all vertices) across parts. The split is computed on the graph of the fine METIS
clusters that the locality scheduler uses (one vertex per cluster, weighted by its vertices
and training vertices; edge weights = edges between clusters): every fine cluster lies in one
part, and the P-way split costs seconds on top of the (cached) fine clustering. Part ``i``'s
*self-dependence cluster* is

    owned(i)  U  { v : dist(v, train(i)) <= H }

(``owned`` = the vertices METIS gave to part ``i``; ``train(i)`` = its training vertices). Its
induced subgraph is stored with local ids: **owned vertices first, then the halo**, each group in
the order of the fine METIS clusters of the locality scheduler (cluster-contiguous, BFS order
inside a cluster; the same clusters ``twopgraph train`` uses, shared through the cluster cache).
Each local row lists its in-part neighbours **in the same relative order as the source row**, so
with complete rows a position sampled in the local row is the same neighbour as in the source row.

``H`` versus the number of GNN layers ``L``: a vertex within ``H - 1`` hops of a training vertex
has its complete row in the part, so with ``H >= L`` sampling inside a part is exactly sampling
on the whole graph (remote counters 0). ``H < L`` is allowed and trades accuracy for memory: the
halo (replication) shrinks, and rows of vertices at distance ``>= H`` are truncated at the
boundary, i.e. their sampled neighbourhoods are drawn from the in-part neighbours only. The
trainer counts those truncated expansions as ``remote_graph_requests``.

Exact (full-neighbour) evaluation needs the full row of every owned vertex, which the halo may
not hold (an owned test vertex far from any training vertex); these rows are stored apart, in
global ids (``owned_indptr`` / ``owned_indices``: structure only, no replicated features).

On-disk layout (``OUT/``), every array a plain ``.npy`` file that can be memory-mapped::

    meta.json            format (FORMAT_VERSION), partition_id (= partition_fingerprint),
                         cluster_key (the fine clustering's cache key), source {name,
                         fingerprint (GraphData.fingerprint of the source: CSR, features,
                         labels, splits), num_nodes, num_edges, num_features, num_classes,
                         path, size, mtime_ns}, num_parts, hops, seed, num_clusters (the
                         resolved count), replication_factor
                         (= sum of part sizes / N), edge_cut (undirected edges between parts),
                         edge_cut_fraction, seconds, and parts: one object per part with
                         num_nodes, num_owned, num_halo, num_edges, num_train, num_val,
                         num_test, num_incomplete (vertices whose row is truncated) and
                         arrays: for each array file below {dtype, shape, min, max,
                         fingerprint} (its value range and content fingerprint)
    part{i}/part.json    part, partition_id (must equal meta's), num_nodes, num_owned
    part{i}/indptr.npy   int64 (n+1)   local CSR (n = num_nodes of the part)
    part{i}/indices.npy  int32 (E_i)   local neighbour ids
    part{i}/feat.npy     (n x F)       features, dtype of the source
    part{i}/label.npy    int64 (n)
    part{i}/train_idx.npy, val_idx.npy, test_idx.npy   int64, local ids of *owned* vertices
    part{i}/node_ids.npy int64 (n)     local -> global (source) id
    part{i}/degree.npy   int64 (n)     full-graph degree of each local vertex
    part{i}/cluster.npy  int32 (n)     fine METIS cluster of each local vertex (scheduler)
    part{i}/owned_indptr.npy   int64 (num_owned+1)  full rows of the owned vertices ...
    part{i}/owned_indices.npy  int32/int64          ... in global ids (exact evaluation)

``partition_id`` is :func:`partition_fingerprint`: the provenance fingerprint
(:mod:`twopgraph.fingerprint`) of the source's content, ``num_parts``, ``hops``, ``seed``, the
resolved ``num_clusters``, the fine clustering's key (METIS settings) and
:data:`FORMAT_VERSION`. A partition is thus reused only when all of them are equal
(``partition_selfdep(..., reuse=True)``, what ``twopgraph partition`` does without
``--force``); any other value recomputes it.

A folder is written under a temporary name (``.OUT.tmp-PID@HOST`` beside ``OUT``) and renamed
when complete; the temporary folders of writers that were killed are removed by the next write
into the same parent folder (:func:`clean_orphans`: only folders of that pattern whose process
is gone, holding nothing but partition files). :func:`read_meta` / :func:`load_part` refuse,
with a one-line :class:`~twopgraph.errors.TwopgraphError`, a folder of another format (1: a
hash of the CSR only; 2: part arrays without records -- re-run ``twopgraph partition``), a part
of another partitioning run, and a partition whose source ``.npz`` changed since it was written
(size or mtime: a cheap check that needs no hashing of the source at load time).

**Integrity.** :func:`load_part` verifies the part it loads (:func:`check_part`): every array's
dtype, shape, value range and the invariants of the layout (monotone CSRs, local ids ``<`` the
part's vertices, ``node_ids`` distinct and ``<`` N, labels in ``[-1, num_classes)`` and
labelled on the splits, splits sorted, disjoint and owned, ...) against ``meta.json``, then its
content fingerprint, which catches what keeps shapes and ranges (zeroed features, permuted
ids). :func:`verify_partition` does it for every part and checks that the parts own each
vertex once; ``twopgraph train --partitions DIR --nproc P`` runs it before starting any rank,
and ``twopgraph partition`` before reusing a folder (a damaged one is rewritten). Cost: one read
of the arrays, dominated by hashing (BLAKE2b): measured 0.9 s for the 214 MB of synthetic-small
in 4 parts with 3 hops (0.35 s for 76 MB with 1 hop) on a loaded 2-core machine, 0.27 s for
one of its parts in a rank.

Example::

    >>> meta = partition_selfdep(data, num_parts=4, hops=3, out="parts/small-4")  # doctest: +SKIP
    >>> part = load_part("parts/small-4", 0)                                       # doctest: +SKIP
    >>> part.data.graph.num_nodes, part.num_owned, meta["replication_factor"]      # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError, GraphFormatError, TwopgraphError
from ..fingerprint import fingerprint
from ..graph import SPLITS, CSRGraph, GraphData, atomic_write_bytes
from .cluster import (DEFAULT_UFACTOR, cluster_graph, cluster_key, default_num_clusters,
                      edge_cut, metis_output_to_log)
from .renumber import cluster_permutation

log = logging.getLogger("twopgraph")

# 3: meta.json records every part array (dtype, shape, value range, content fingerprint), and
#    loading checks them; 2: partition_id is the provenance fingerprint, part arrays unchecked;
#    1: a hash of the CSR, the settings and the time
FORMAT_VERSION = 3
META = "meta.json"
PART_JSON = "part.json"
# Batch size the default fine clustering is sized for (`default_num_clusters`: the same
# clusters, and cache entry, as `twopgraph train --batch-size 1024`).
DEFAULT_CLUSTER_BATCH = 1024
# Entries gathered per chunk when extracting rows: bounds the temporaries on large graphs.
_CHUNK = 1 << 24
_ARRAYS = ("indptr", "indices", "feat", "label", *SPLITS, "node_ids", "degree", "cluster",
           "owned_indptr", "owned_indices")
# Temporary folder of a writer: ``.OUT.tmp-PID@HOST`` beside ``OUT`` (``@HOST`` absent in
# folders of older versions); a folder of this pattern whose writer is dead is an orphan.
_TMP_NAME = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)(?:@(?P<host>[A-Za-z0-9_.-]+))?$")
_PART_DIR = re.compile(r"^part\d+$")


class PartitionError(TwopgraphError):
    """A partition folder is missing, stale, damaged or does not fit the run."""


@dataclass
class Part:
    """One part as a rank trains on it.

    ``data`` is the local graph with its node data (``data.node_ids`` = global ids, splits =
    local ids of owned vertices); local ids ``< num_owned`` are owned. ``degree`` holds
    full-graph degrees, ``complete[v]`` says whether local row ``v`` is the whole source row,
    ``cluster`` the fine cluster of each local vertex. Arrays are memory-mapped by default.
    """

    index: int
    data: GraphData
    num_owned: int
    degree: np.ndarray
    cluster: np.ndarray
    owned_indptr: np.ndarray
    owned_indices: np.ndarray
    meta: dict

    @property
    def num_global_nodes(self) -> int:
        return int(self.meta["source"]["num_nodes"])

    @property
    def complete(self) -> np.ndarray:
        return self.data.graph.degrees() == self.degree


# ----------------------------------------------------------------------------------------------
# writing
# ----------------------------------------------------------------------------------------------


def partition_selfdep(data: GraphData, num_parts: int, hops: int, out, *, seed: int = 0,
                      num_clusters: int = 0, cache_dir=None, source_path=None,
                      reuse: bool = False) -> dict:
    """Write the ``num_parts``-way self-dependence partition of ``data`` with ``hops``-hop halos
    to ``out`` (layout in the module docstring); returns the ``meta.json`` contents.

    ``seed`` is METIS' seed for the part split; ``num_clusters`` the number of fine clusters
    for the locality scheduler (0 = ``default_num_clusters`` for batch size 1024); ``cache_dir``
    caches both METIS results (see :func:`~twopgraph.partition.cluster_graph`);
    ``source_path`` (the dataset's ``.npz``) lets a later load detect that it changed. With
    ``reuse``, an ``out`` that already holds this very partition (same
    :func:`partition_fingerprint`) is kept: only its record of ``source_path`` is refreshed.
    An existing ``out`` is replaced only if it is a twopgraph partition (or empty).
    """
    n = data.num_nodes
    num_parts, hops, k = _check_args(data, num_parts, hops, num_clusters)
    out = Path(out)
    _check_replaceable(out)
    t0 = time.perf_counter()
    pid = partition_fingerprint(data, num_parts, hops, seed=seed, num_clusters=k)
    if reuse and _holds(out, pid):
        log.info("%s already holds this partition (id %s); reusing it", out, pid)
        return _refresh_source(out, data, source_path)
    g = data.graph
    t_metis = time.perf_counter()
    fine = cluster_graph(g, k, train_idx=data.train_idx, cache_dir=cache_dir)
    fine_to_part = _split_clusters(g, fine.parts, k, data.train_idx, num_parts, seed)
    owner = fine_to_part[fine.parts]
    cut = edge_cut(g, owner)
    rank = np.empty(n, dtype=np.int64)  # position of each vertex in cluster-BFS order
    rank[cluster_permutation(g, fine)] = np.arange(n, dtype=np.int64)
    metis_s = time.perf_counter() - t_metis
    _check_train_in_every_part(owner, data.train_idx, num_parts, n)
    reached = _halos(g, owner, data.train_idx, num_parts, hops)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}@{_host()}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        clean_orphans(out.parent)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        part_meta = [_write_part(tmp / f"part{p}", p, pid, data, owner == p, reached[:, p],
                                 rank, fine.parts) for p in range(num_parts)]
        total = sum(m["num_nodes"] for m in part_meta)
        meta = {
            "format": FORMAT_VERSION, "partition_id": pid, "cluster_key": fine.key,
            "source": _source_info(data, source_path),
            "num_parts": num_parts, "hops": hops, "seed": int(seed), "num_clusters": k,
            "replication_factor": total / max(n, 1),
            "edge_cut": int(cut), "edge_cut_fraction": cut / max(g.num_edges // 2, 1),
            "metis_s": round(metis_s, 3), "seconds": round(time.perf_counter() - t0, 3),
            "parts": part_meta,
        }
        (tmp / META).write_text(json.dumps(meta, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except OSError as e:  # full disk, read-only or vanished folder: nothing half-written stays
        shutil.rmtree(tmp, ignore_errors=True)
        raise PartitionError(f"cannot write the partition {out}: {_os_error(e, out.parent)}") \
            from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("partition: %d parts, %d hops, replication factor %.3f, edge cut %d (%.1f%%), "
             "%.1f s -> %s", num_parts, hops, meta["replication_factor"], cut,
             100 * meta["edge_cut_fraction"], meta["seconds"], out)
    return meta


def partition_fingerprint(data: GraphData, num_parts: int, hops: int, *, seed: int = 0,
                          num_clusters: int = 0) -> str:
    """The ``partition_id`` that :func:`partition_selfdep` gives this partition: the
    fingerprint of ``data``'s content (:meth:`GraphData.fingerprint`: graph, features, labels,
    splits), ``num_parts``, ``hops``, ``seed``, the resolved ``num_clusters`` (0 = the
    default count), the fine clustering's cache key (its METIS settings), the part split's
    METIS tolerance and :data:`FORMAT_VERSION`. Raises :class:`ConfigError` for bad values."""
    num_parts, hops, k = _check_args(data, num_parts, hops, num_clusters)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ConfigError(f"seed must be an integer, got {seed!r}")
    return fingerprint("selfdep-partition", {
        "source": data.fingerprint(),
        "clusters": cluster_key(data.graph, k, train_idx=data.train_idx),
        "num_parts": num_parts, "hops": hops, "seed": int(seed), "num_clusters": k,
        "split_ufactor": DEFAULT_UFACTOR, "format": FORMAT_VERSION})


def _check_args(data: GraphData, num_parts, hops, num_clusters) -> tuple[int, int, int]:
    """``(num_parts, hops, num_clusters)`` checked, with the default cluster count resolved.
    Messages speak of the command's flags (``--num-parts``, ...)."""
    n, num_train = data.num_nodes, int(data.train_idx.shape[0])
    what = f"{data.name or 'the graph'} ({n} vertices, {num_train} training vertices)"
    if isinstance(num_parts, bool) or not isinstance(num_parts, (int, np.integer)) \
            or num_parts < 1:
        raise ConfigError(f"--num-parts must be an integer >= 1, got {num_parts!r}")
    if num_parts > max(1, num_train):
        raise ConfigError(f"--num-parts {num_parts} is too many for {what}: every part needs "
                          f"training vertices; use at most {max(1, num_train)} parts")
    if isinstance(hops, bool) or not isinstance(hops, (int, np.integer)) or hops < 0:
        raise ConfigError(f"--hops must be an integer >= 0, got {hops!r}")
    if isinstance(num_clusters, bool) or not isinstance(num_clusters, (int, np.integer)) \
            or num_clusters < 0:
        raise ConfigError(f"--num-clusters must be an integer >= 0, got {num_clusters!r}")
    if num_clusters == 0:
        k = default_num_clusters(n, num_train, DEFAULT_CLUSTER_BATCH)
        if num_parts > k:
            raise ConfigError(
                f"--num-parts {num_parts} is too many for {what}: a part is made of whole "
                f"METIS clusters and the default clustering has {k}; use at most {k} parts "
                f"(or more clusters: --num-clusters between {num_parts} and {n})")
        return int(num_parts), int(hops), int(k)
    k = int(num_clusters)
    if k > n:
        raise ConfigError(f"--num-clusters {k} is more than the vertices of {what}")
    if k < num_parts:
        raise ConfigError(f"--num-clusters {k} is fewer than --num-parts {num_parts}: a part is "
                          "made of whole METIS clusters")
    return int(num_parts), int(hops), k


def _check_train_in_every_part(owner: np.ndarray, train_idx: np.ndarray, num_parts: int,
                               n: int) -> None:
    """Every part must own training vertices (its rank trains on them)."""
    per_part = np.bincount(owner[train_idx], minlength=num_parts)
    empty = np.flatnonzero(per_part == 0)
    if empty.shape[0]:
        raise ConfigError(f"--num-parts {num_parts} is too many for the graph ({n} vertices, "
                          f"{train_idx.shape[0]} training vertices): METIS left "
                          f"{empty.shape[0]} part(s) without training vertices; use fewer parts")


def _holds(folder: Path, pid: str) -> bool:
    """Whether ``folder`` holds an intact partition of the current format with id ``pid``
    (every part passes :func:`verify_partition`; its source file may have been touched since:
    see :func:`_refresh_source`). A damaged one is reported and will be rewritten."""
    try:
        meta = read_meta(folder, check_source=False)
    except PartitionError:
        return False
    if meta["partition_id"] != pid:
        return False
    try:
        verify_partition(folder, meta)
    except PartitionError as e:
        log.warning("%s is damaged, rewriting it (%s)", folder,
                    str(e).split(" (damaged partition)")[0])
        return False
    return True


def _host() -> str:
    """This machine's name as it appears in temporary folder names."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()) or "localhost"


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this machine exists (unknown = alive: nothing is removed)."""
    if pid <= 0 or pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. PermissionError: it exists, under another user
        return True
    return True


def _is_partition_tmp(folder: Path) -> bool:
    """Whether ``folder`` holds only what a partition writer puts there (``meta.json`` and
    ``partN/`` folders of ``.npy`` files and ``part.json``)."""
    try:
        for e in folder.iterdir():
            if e.name == META and e.is_file() and not e.is_symlink():
                continue
            if not (_PART_DIR.match(e.name) and e.is_dir() and not e.is_symlink()):
                return False
            for f in e.iterdir():
                if f.is_symlink() or not f.is_file() or not (
                        f.name == PART_JSON or f.name.endswith(".npy")):
                    return False
    except OSError:
        return False
    return True


def clean_orphans(parent) -> list[Path]:
    """Remove the temporary folders (``.NAME.tmp-PID@HOST``) that partition writers killed
    before they finished (``kill -9``, power loss) left in ``parent``; returns them.

    A folder is removed only if its name has this pattern, its writer ran on this machine and
    process ``PID`` no longer exists, and it holds nothing but what a writer writes (see
    :func:`_is_partition_tmp`); anything else is left alone. Called by
    :func:`partition_selfdep` before it writes."""
    parent = Path(parent)
    removed = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    host = _host()
    for e in entries:
        m = _TMP_NAME.match(e.name)
        if m is None or (m["host"] is not None and m["host"] != host):
            continue
        if e.is_symlink() or not e.is_dir() or _pid_alive(int(m["pid"])) \
                or not _is_partition_tmp(e):
            continue
        shutil.rmtree(e, ignore_errors=True)
        if not e.exists():
            log.info("removed %s, left by a partition writer (pid %s) that was killed", e,
                     m["pid"])
            removed.append(e)
    return removed


def _os_error(e: OSError, folder: Path) -> str:
    """One line about a failed write: what, where, and the free space left."""
    what = e.strerror or type(e).__name__
    if e.filename:
        what += f" ({e.filename})"
    try:
        free = shutil.disk_usage(folder).free
        what += f"; {free / 2**20:.1f} MiB free in {folder}"
    except OSError:
        pass
    return what


def _refresh_source(folder: Path, data: GraphData, source_path) -> dict:
    """Record ``source_path``'s current size and mtime in ``folder``'s meta.json (the content
    was just found equal through the fingerprint); returns the updated meta."""
    meta = read_meta(folder, check_source=False)
    src = _source_info(data, source_path)
    if src != meta["source"]:
        meta["source"] = src
        try:
            atomic_write_bytes(folder / META,
                               lambda f: f.write((json.dumps(meta, indent=2) + "\n").encode()))
        except OSError as e:  # read-only folder: the parts are right, the record stays old
            log.warning("could not record the source's new mtime in %s (%s); loading it will "
                        "call it stale", folder / META, e.strerror or e)
    return meta


def _check_replaceable(out: Path) -> None:
    if not out.exists():
        return
    if not out.is_dir():
        raise ConfigError(f"--out {out} exists and is not a folder")
    if any(out.iterdir()) and not (out / META).is_file():
        raise ConfigError(f"--out {out} is a non-empty folder that is not a twopgraph partition; "
                          "refusing to replace it")


def _split_clusters(g: CSRGraph, fine: np.ndarray, k: int, train_idx: np.ndarray,
                    num_parts: int, seed: int) -> np.ndarray:
    """Part of each fine cluster (int64, k): METIS on the cluster graph (vertex weights =
    [vertices, training vertices] of a cluster, edge weights = edges between two clusters),
    so parts balance both and every fine cluster lies inside one part."""
    if num_parts == 1:
        return np.zeros(k, dtype=np.int64)
    import pymetis
    import scipy.sparse as sp
    w = np.zeros((k, 2), dtype=np.int64)
    w[:, 0] = np.bincount(fine, minlength=k)
    w[:, 1] = np.bincount(fine[train_idx], minlength=k)
    deg = g.degrees()
    cg = sp.csr_matrix((k, k), dtype=np.int64)
    step = 1 << 19
    for a in range(0, g.num_nodes, step):  # cross-cluster edge counts, chunked
        b = min(a + step, g.num_nodes)
        src = np.repeat(fine[a:b], deg[a:b])
        dst = fine[g.indices[g.indptr[a]:g.indptr[b]]]
        keep = src != dst
        cg = cg + sp.csr_matrix((np.ones(int(keep.sum()), dtype=np.int64),
                                 (src[keep], dst[keep])), shape=(k, k))
    cg.sum_duplicates()
    idx = pymetis.zero_copy_dtype()
    with metis_output_to_log():  # METIS prints to C stdout: keep --json output clean
        _, parts = pymetis.part_graph(
            num_parts, pymetis.CSRAdjacency(np.ascontiguousarray(cg.indptr, dtype=idx),
                                            np.ascontiguousarray(cg.indices, dtype=idx)),
            eweights=np.ascontiguousarray(np.minimum(cg.data, 2**30), dtype=idx),
            vweights=np.ascontiguousarray(w.ravel(), dtype=idx),
            options=pymetis.Options(seed=int(seed), ufactor=DEFAULT_UFACTOR), recursive=False)
    return np.asarray(parts, dtype=np.int64)


def _halos(g: CSRGraph, owner: np.ndarray, train_idx: np.ndarray, num_parts: int,
           hops: int) -> np.ndarray:
    """``reached[v, p]``: v is within ``hops`` hops of a training vertex of part ``p`` (N x P
    bool). One sparse-times-dense product per hop covers all parts at once."""
    n = g.num_nodes
    reached = np.zeros((n, num_parts), dtype=bool)
    reached[train_idx, owner[train_idx]] = True
    if hops == 0:
        return reached
    adj = g.to_scipy()
    for _ in range(hops):  # symmetric graph: (A x)[v] > 0 <=> v has a neighbour in x
        reached |= (adj @ reached.astype(np.float32)) > 0
    return reached


def _gather_rows(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray, g2l=None):
    """Rows ``rows`` of a CSR, concatenated in order; with ``g2l`` (global -> local id, -1 =
    absent) the entries are mapped and the absent ones dropped, keeping each row's order.
    Returns ``(indptr, indices)`` (int64, and int32 when mapped else the dtype of indices)."""
    deg = indptr[rows + 1] - indptr[rows]
    counts = np.empty(rows.shape[0], dtype=np.int64)
    chunks = []
    cum = np.cumsum(deg)
    a = 0
    while a < rows.shape[0]:
        b = int(np.searchsorted(cum, (cum[a - 1] if a else 0) + _CHUNK, side="right"))
        b = max(b, a + 1)
        r, d = rows[a:b], deg[a:b]
        tot = int(d.sum())
        first = np.repeat(indptr[r] - np.concatenate([[0], np.cumsum(d)[:-1]]), d)
        ent = indices[first + np.arange(tot, dtype=np.int64)]
        if g2l is not None:
            loc = g2l[ent]
            keep = loc >= 0
            ent = loc[keep]
            row_of = np.repeat(np.arange(b - a), d)[keep]
            counts[a:b] = np.bincount(row_of, minlength=b - a)
        else:
            counts[a:b] = d
        chunks.append(ent)
        a = b
    out_ptr = np.zeros(rows.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=out_ptr[1:])
    dtype = np.int32 if g2l is not None else indices.dtype
    ent = np.concatenate(chunks).astype(dtype, copy=False) if chunks else \
        np.empty(0, dtype=dtype)
    return out_ptr, ent


def _write_part(folder: Path, p: int, pid: str, data: GraphData, owned: np.ndarray,
                reached: np.ndarray, rank: np.ndarray, fine_parts: np.ndarray) -> dict:
    g = data.graph
    own = np.flatnonzero(owned)
    halo = np.flatnonzero(reached & ~owned)
    own = own[np.argsort(rank[own], kind="stable")]
    halo = halo[np.argsort(rank[halo], kind="stable")]
    l2g = np.concatenate([own, halo]).astype(np.int64)
    nloc = l2g.shape[0]
    g2l = np.full(g.num_nodes, -1, dtype=np.int32 if nloc < 2**31 else np.int64)
    g2l[l2g] = np.arange(nloc, dtype=g2l.dtype)
    indptr, indices = _gather_rows(g.indptr, g.indices, l2g, g2l)
    o_indptr, o_indices = _gather_rows(g.indptr, g.indices, own)
    degree = (g.indptr[l2g + 1] - g.indptr[l2g]).astype(np.int64)
    arrays = {"indptr": indptr, "indices": indices, "feat": data.feat[l2g],
              "label": data.label[l2g].astype(np.int64), "node_ids": l2g, "degree": degree,
              "cluster": fine_parts[l2g].astype(np.int32), "owned_indptr": o_indptr,
              "owned_indices": o_indices}
    for s in SPLITS:
        idx = getattr(data, s)
        loc = g2l[idx[owned[idx]]].astype(np.int64)
        arrays[s] = np.sort(loc)
    folder.mkdir(parents=True)
    records = {}
    for name in _ARRAYS:
        arr = np.ascontiguousarray(arrays[name])
        records[name] = _record(arr)
        if name == "feat" and arr.size and records[name]["min"] is None:
            raise GraphFormatError(f"{data.name}: features have NaN or infinite values")
        np.save(folder / f"{name}.npy", arr)
    info = {"part": p, "partition_id": pid, "num_nodes": int(nloc), "num_owned": int(own.shape[0]),
            "num_halo": int(halo.shape[0]), "num_edges": int(indices.shape[0]),
            "num_train": int(arrays["train_idx"].shape[0]),
            "num_val": int(arrays["val_idx"].shape[0]),
            "num_test": int(arrays["test_idx"].shape[0]),
            "num_incomplete": int(np.count_nonzero(np.diff(indptr) != degree))}
    (folder / PART_JSON).write_text(json.dumps(info, indent=2) + "\n")
    return dict(info, arrays=records)


def _value_range(arr: np.ndarray) -> tuple:
    """``(min, max)`` of ``arr`` as JSON numbers; ``(None, None)`` when empty, and ``None``
    for a float bound that is not finite (NaN propagates: any NaN gives ``None``)."""
    if arr.size == 0:
        return None, None
    lo, hi = arr.min(), arr.max()
    if arr.dtype.kind == "f":
        lo, hi = float(lo), float(hi)
        return (lo if math.isfinite(lo) else None), (hi if math.isfinite(hi) else None)
    return int(lo), int(hi)


def _record(arr: np.ndarray) -> dict:
    """What ``meta.json`` records of a part array: dtype, shape, value range and content
    fingerprint (:func:`~twopgraph.fingerprint.fingerprint` of kind ``partition-array``)."""
    lo, hi = _value_range(arr)
    return {"dtype": arr.dtype.str, "shape": list(arr.shape), "min": lo, "max": hi,
            "fingerprint": fingerprint("partition-array", None, arr)}


def _source_info(data: GraphData, source_path) -> dict:
    info = {"name": data.name, "fingerprint": data.fingerprint(), "num_nodes": data.num_nodes,
            "num_edges": data.graph.num_edges, "num_features": data.num_features,
            "num_classes": int(data.num_classes), "path": None, "size": None, "mtime_ns": None}
    if source_path is not None and Path(source_path).is_file():
        st = Path(source_path).stat()
        info.update(path=str(Path(source_path).resolve()), size=st.st_size,
                    mtime_ns=st.st_mtime_ns)
    return info


# ----------------------------------------------------------------------------------------------
# reading
# ----------------------------------------------------------------------------------------------


def read_meta(folder, check_source: bool = True) -> dict:
    """``meta.json`` of a partition folder, checked (format, part folders and, with
    ``check_source``, that the source file is unchanged since it was partitioned)."""
    folder = Path(folder)
    path = folder / META
    if not path.is_file():
        raise PartitionError(f"{folder} is not a twopgraph partition (no {META}); "
                             "write one with `twopgraph partition`")
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise PartitionError(f"{path}: unreadable ({type(e).__name__}); re-run "
                             "`twopgraph partition`") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_VERSION:
        fmt = meta.get("format") if isinstance(meta, dict) else None
        raise PartitionError(f"{folder}: partition format {fmt!r}, this twopgraph reads "
                             f"{FORMAT_VERSION}; re-run `twopgraph partition` (it rewrites "
                             "the folder; --force rewrites it in any case)")
    try:
        src, num_parts = meta["source"], int(meta["num_parts"])
        int(src["num_nodes"]), int(src["num_features"]), int(src["num_classes"])
        int(meta["num_clusters"]), str(meta["partition_id"])
        if len(meta["parts"]) != num_parts or num_parts < 1:
            raise KeyError("parts")
        for info in meta["parts"]:
            int(info["num_nodes"]), int(info["num_owned"]), int(info["num_edges"])
            for s in SPLITS:
                int(info[f"num_{s[:-4]}"])
            for name in _ARRAYS:
                rec = info["arrays"][name]
                np.dtype(rec["dtype"]), [int(x) for x in rec["shape"]], str(rec["fingerprint"])
    except (KeyError, TypeError, ValueError, IndexError):
        raise PartitionError(f"{path}: incomplete meta.json; re-run `twopgraph partition`") \
            from None
    if check_source and src.get("path") and Path(src["path"]).is_file():
        st = Path(src["path"]).stat()
        if st.st_size != src["size"] or st.st_mtime_ns != src["mtime_ns"]:
            raise PartitionError(f"{folder} is stale: its source {src['path']} changed since it "
                                 "was partitioned; re-run `twopgraph partition`")
    return meta


def load_part(folder, index: int, meta: dict | None = None, mmap: bool = True,
              verify: bool = True) -> Part:
    """Part ``index`` of the partition in ``folder`` (arrays memory-mapped unless ``mmap`` is
    False); refuses parts of another run and, with ``verify`` (the default), any array that
    disagrees with ``meta.json``: dtype, shape, value range, the invariants of the layout
    (see :func:`check_part`) and its content fingerprint. Cost of ``verify``: one read of the
    part's arrays (hashing about 1-2 s/GB per thread; see the module docstring)."""
    folder = Path(folder)
    meta = read_meta(folder) if meta is None else meta
    p = int(index)
    if not 0 <= p < meta["num_parts"]:
        raise PartitionError(f"{folder} has {meta['num_parts']} parts, no part {p}")
    pdir = folder / f"part{p}"
    try:
        info = json.loads((pdir / PART_JSON).read_text())
    except (OSError, ValueError):
        raise PartitionError(f"{pdir}: missing or unreadable {PART_JSON}; re-run "
                             "`twopgraph partition`") from None
    if not isinstance(info, dict) or info.get("partition_id") != meta["partition_id"]:
        raise PartitionError(f"{pdir} belongs to another partitioning run than {folder / META} "
                             "(stale folder); re-run `twopgraph partition`")
    want = meta["parts"][p]
    if any(info.get(k) != want[k] for k in ("num_nodes", "num_owned")):
        raise PartitionError(f"{pdir}/{PART_JSON} disagrees with {folder / META} (stale or "
                             "damaged partition); re-run `twopgraph partition`")
    arr = {}
    for name in _ARRAYS:
        try:
            arr[name] = np.load(pdir / f"{name}.npy", mmap_mode="r" if mmap else None,
                                allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:
            raise PartitionError(f"{pdir}/{name}.npy: missing or unreadable "
                                 f"({type(e).__name__}); re-run `twopgraph partition`") from None
    src = meta["source"]
    if verify:
        check_part(pdir, arr, meta, p)
    else:  # sizes only (what every consumer indexes by)
        _check_shapes(pdir, arr, meta, p)
    data = GraphData(CSRGraph(arr["indptr"], arr["indices"]), arr["feat"], arr["label"],
                     *(np.asarray(arr[s]) for s in SPLITS), name=f"{src['name']}/part{p}",
                     node_ids=arr["node_ids"], num_classes=int(src["num_classes"]))
    return Part(p, data, int(want["num_owned"]), arr["degree"], arr["cluster"],
                arr["owned_indptr"], arr["owned_indices"], meta)


def verify_partition(folder, meta: dict | None = None) -> dict:
    """Check every part of the partition in ``folder`` against its ``meta.json``
    (:func:`check_part`: dtypes, shapes, value ranges, layout invariants, content
    fingerprints) and that the owned vertices of the parts are each of the source's vertices
    exactly once. Returns ``meta``; raises :class:`PartitionError` (one line naming the file)
    for the first problem found. ``twopgraph train --partitions DIR --nproc P`` calls it before
    it starts any rank; it reads every byte of the partition once (see the module docstring
    for the cost)."""
    folder = Path(folder)
    meta = read_meta(folder) if meta is None else meta
    t = time.perf_counter()
    n = int(meta["source"]["num_nodes"])
    owned = np.zeros(n, dtype=bool)
    total = 0
    for p in range(meta["num_parts"]):
        part = load_part(folder, p, meta, mmap=True, verify=True)
        own = part.data.node_ids[:part.num_owned]
        if own.shape[0] and owned[own].any():
            raise PartitionError(f"{folder}/part{p}/node_ids.npy: owned vertices also owned by "
                                 "an earlier part (damaged partition); re-run "
                                 "`twopgraph partition`")
        owned[own] = True
        total += int(own.shape[0])
    if total != n:
        raise PartitionError(f"{folder}: the parts own {total} of the {n} vertices of the "
                             "source (damaged partition); re-run `twopgraph partition`")
    log.debug("verified %s (%d parts) in %.2f s", folder, meta["num_parts"],
              time.perf_counter() - t)
    return meta


def _damaged(pdir: Path, name: str, what: str) -> PartitionError:
    sep = " " if what.startswith("has ") else ": "
    return PartitionError(f"{pdir}/{name}.npy{sep}{what} (damaged partition); re-run "
                          "`twopgraph partition`")


def _expected_shapes(arr: dict, meta: dict, p: int) -> dict:
    info, src = meta["parts"][p], meta["source"]
    n, own = int(info["num_nodes"]), int(info["num_owned"])
    shapes = {"indptr": (n + 1,), "indices": (int(info["num_edges"]),),
              "feat": (n, int(src["num_features"])), "label": (n,), "node_ids": (n,),
              "degree": (n,), "cluster": (n,), "owned_indptr": (own + 1,),
              "owned_indices": tuple(int(x) for x in info["arrays"]["owned_indices"]["shape"])}
    for s in SPLITS:
        shapes[s] = (int(info[f"num_{s[:-4]}"]),)
    return shapes


def _check_shapes(pdir: Path, arr: dict, meta: dict, p: int) -> None:
    for name, shape in _expected_shapes(arr, meta, p).items():
        if arr[name].shape != shape:
            raise _damaged(pdir, name, f"has shape {arr[name].shape}, expected {shape}")


# dtypes a part array may have ("feat": the source's, recorded in meta.json)
_INT64 = (np.dtype(np.int64),)
_IDS = (np.dtype(np.int32), np.dtype(np.int64))
_DTYPES = {"indptr": _INT64, "indices": _IDS, "label": _INT64, "node_ids": _INT64,
           "degree": _INT64, "cluster": (np.dtype(np.int32),), "owned_indptr": _INT64,
           "owned_indices": _IDS, **{s: _INT64 for s in SPLITS}}


def check_part(pdir, arr: dict, meta: dict, p: int) -> None:
    """Check the arrays ``arr`` (name -> array, as loaded from ``pdir``) of part ``p`` against
    ``meta.json``; raise :class:`PartitionError` naming the first bad file.

    In order: dtype and shape (against the counts and the record of each array), the value
    range against the record, the invariants of the layout -- CSRs start at 0, are monotone
    and end at their number of entries; local neighbour ids ``< num_nodes`` of the part;
    ``node_ids`` distinct and ``<`` the source's vertices; labels in ``[-1, num_classes)``,
    and ``>= 0`` on the splits; splits sorted, distinct, disjoint and owned; clusters
    ``< num_clusters``; full-graph degrees ``>=`` the local ones and equal to the stored full
    rows of the owned vertices; global neighbour ids ``<`` the source's vertices -- and last
    the content fingerprint of every array (what catches a same-shape, in-range change such
    as zeroed features or permuted ids)."""
    pdir = Path(pdir)
    info, src = meta["parts"][p], meta["source"]
    recs = info["arrays"]
    for name in _ARRAYS:
        a, rec = arr[name], recs[name]
        allowed = _DTYPES.get(name)
        if a.dtype.str != rec["dtype"] or (allowed is not None and a.dtype not in allowed):
            raise _damaged(pdir, name, f"dtype {a.dtype}, meta.json records {rec['dtype']}")
        if name == "feat" and (a.dtype.kind not in "fiub" or a.ndim != 2):
            raise _damaged(pdir, name, f"features must be a numeric matrix, got {a.dtype} "
                                       f"of shape {a.shape}")
        if list(a.shape) != [int(x) for x in rec["shape"]]:
            raise _damaged(pdir, name, f"has shape {a.shape}, expected "
                                       f"{tuple(int(x) for x in rec['shape'])} (meta.json)")
    _check_shapes(pdir, arr, meta, p)
    rng = {}
    for name in _ARRAYS:
        lo, hi = rng[name] = _value_range(arr[name])
        rec = recs[name]
        if (lo, hi) != (rec["min"], rec["max"]):
            got = "non-finite values" if arr[name].size and None in (lo, hi) else \
                f"values in [{lo}, {hi}]"
            raise _damaged(pdir, name, f"{got}, meta.json records [{rec['min']}, {rec['max']}]")
    n, own = int(info["num_nodes"]), int(info["num_owned"])
    big_n, classes = int(src["num_nodes"]), int(src["num_classes"])

    def bounded(name, low, high):  # every value in [low, high)
        lo, hi = rng[name]
        if lo is not None and (lo < low or hi >= high):
            raise _damaged(pdir, name, f"values in [{lo}, {hi}], must lie in [{low}, {high})")

    for ptr, ind in (("indptr", "indices"), ("owned_indptr", "owned_indices")):
        ip = arr[ptr]
        if int(ip[0]) != 0 or int(ip[-1]) != arr[ind].shape[0]:
            raise _damaged(pdir, ptr, f"starts at {int(ip[0])} and ends at {int(ip[-1])}, "
                                      f"must run from 0 to {arr[ind].shape[0]} ({ind})")
        if ip.shape[0] > 1 and np.any(ip[1:] < ip[:-1]):
            raise _damaged(pdir, ptr, "not monotone non-decreasing")
    bounded("indices", 0, n)
    bounded("owned_indices", 0, big_n)
    bounded("node_ids", 0, big_n)
    if n:
        seen = np.zeros(big_n, dtype=bool)
        seen[arr["node_ids"]] = True
        if int(np.count_nonzero(seen)) != n:
            raise _damaged(pdir, "node_ids", "repeated vertex ids")
        del seen
    bounded("label", -1, classes)
    bounded("cluster", 0, int(meta["num_clusters"]))
    deg = arr["degree"]
    if n and np.any(np.diff(arr["indptr"]) > deg):
        raise _damaged(pdir, "degree", "full-graph degrees below the local ones")
    if own and not np.array_equal(np.diff(arr["owned_indptr"]), deg[:own]):
        raise _damaged(pdir, "owned_indptr", "full rows disagree with the full-graph degrees")
    taken = np.zeros(own, dtype=bool)
    for s in SPLITS:
        idx = arr[s]
        if not idx.shape[0]:
            continue
        bounded(s, 0, own)
        if idx.shape[0] > 1 and np.any(idx[1:] <= idx[:-1]):
            raise _damaged(pdir, s, "not sorted or repeated ids")
        if taken[idx].any():
            raise _damaged(pdir, s, "ids also in another split")
        taken[idx] = True
        if int(arr["label"][idx].min()) < 0:
            raise _damaged(pdir, "label", f"unlabelled (-1) vertices in {s}")
    for name in _ARRAYS:  # last: the content itself
        if fingerprint("partition-array", None, arr[name]) != recs[name]["fingerprint"]:
            raise _damaged(pdir, name, "content differs from its fingerprint in meta.json")
