"""Self-dependence partitions (2PGraph): each worker's training vertices together with everything
their H-hop sampling can reach, renumbered locally, so that training needs no communication.

:func:`partition_selfdep` splits the graph into ``P`` parts with METIS, balancing training
vertices (and all vertices) across parts (:func:`rebalance` moves whole clusters where METIS
misses :data:`BALANCE_TOLERANCE`, as it does on small coarse graphs). The split is computed
on the graph of the fine METIS clusters that the locality scheduler uses (one vertex per
cluster, weighted by its vertices and training vertices; edge weights = edges between
clusters): every fine cluster lies in one part, and the P-way split costs seconds on top of
the (cached) fine clustering. Part ``i``'s
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

**Features are not in the parts.** Every rank reads the features, labels and full rows of
the dataset's *store* (:mod:`twopgraph.store`: memory-mapped ``.npy`` files, read-only), so
the ranks of one machine share one copy of them in the page cache. ``meta.json`` records the
store's folder and fingerprint; a rank refuses a store whose fingerprint differs (it was
rebuilt from a changed source). Data that has no store (in memory, or derived such as a
symmetrised graph) gets one written inside the partition (``OUT/store``).

**Two representations of a part**, the cheaper one chosen per part (``representation`` in
``meta.json``; :data:`GLOBAL_SHARE`):

- ``local``: the induced subgraph above, renumbered (``node_ids`` = local -> global id); the
  rank reads feature rows through ``node_ids`` from the store's table.
- ``global``: when the local CSR would take more than :data:`GLOBAL_SHARE` of the bytes of the
  store's CSR (the halo covers most of the graph), the part holds no structure at all: the
  rank samples on the store's own memory-mapped CSR (shared by the ranks of the machine),
  restricted to its owned training seeds; local ids = global ids. Sampling is then exact for
  any number of layers and the remote counters are 0.

Exact (full-neighbour) evaluation reads the full row of each owned vertex from the store's
CSR (see :mod:`twopgraph.distributed.evaluate`).

On-disk layout (``OUT/``), every array a plain ``.npy`` file that can be memory-mapped::

    meta.json            format (FORMAT_VERSION), partition_id (= partition_fingerprint),
                         cluster_key (the fine clustering's cache key), source {name,
                         fingerprint (GraphData.fingerprint of the source: CSR, features,
                         labels, splits), store (absolute path of the store folder),
                         store_embedded (true: OUT/store), num_nodes, num_edges, num_features,
                         num_classes, path, size, mtime_ns}, num_parts, hops, seed,
                         num_clusters (the resolved count), replication_factor (= sum of the
                         self-dependence clusters' sizes / N), edge_cut (undirected edges
                         between parts), edge_cut_fraction, seconds, arrays {cluster: record
                         of OUT/cluster.npy, or null}, and parts: one object per part with
                         representation, num_nodes (the rank's vertex ids: N for a global
                         part), num_owned, num_halo, num_edges, num_train, num_val, num_test,
                         num_incomplete (vertices whose row is truncated), local_csr_bytes,
                         global_csr_bytes and arrays: for each array file below {dtype,
                         shape, min, max, fingerprint} (value range and content fingerprint)
    cluster.npy          int32 (N)     fine METIS cluster of every vertex (only with a
                                       global part: its scheduler reads it)
    store/               the dataset's store, when it had none (see above)
    part{i}/part.json    part, partition_id (must equal meta's), representation, num_nodes,
                         num_owned
    a local part:
    part{i}/indptr.npy   int64 (n+1)   local CSR (n = num_nodes of the part)
    part{i}/indices.npy  int32 (E_i)   local neighbour ids
    part{i}/label.npy    int64 (n)
    part{i}/train_idx.npy, val_idx.npy, test_idx.npy   int64, local ids of *owned* vertices
    part{i}/node_ids.npy int64 (n)     local -> global (store) id; owned first
    part{i}/degree.npy   int64 (n)     full-graph degree of each local vertex
    part{i}/cluster.npy  int32 (n)     fine METIS cluster of each local vertex (scheduler)
    a global part:
    part{i}/owned.npy    int64 (num_owned)   sorted global ids of the owned vertices
    part{i}/train_idx.npy, val_idx.npy, test_idx.npy   int64, sorted global ids (owned)

``partition_id`` is :func:`partition_fingerprint`: the provenance fingerprint
(:mod:`twopgraph.fingerprint`) of the source's content, ``num_parts``, ``hops``, ``seed``, the
resolved ``num_clusters``, the fine clustering's key (METIS settings) and
:data:`FORMAT_VERSION`. A partition is thus reused only when all of them are equal
(``partition_selfdep(..., reuse=True)``, what ``twopgraph partition`` does without
``--force``); any other value recomputes it.

A folder is written under a temporary name beside ``OUT`` (:mod:`twopgraph.files`) and renamed
when complete; the temporary folders of writers that were killed are removed by the next write
into the same parent folder (:func:`clean_orphans`: only folders of that pattern whose process
is gone, holding nothing but partition files). :func:`read_meta` / :func:`load_part` refuse,
with a one-line :class:`~twopgraph.errors.TwopgraphError`, a folder of another format (1: a
hash of the CSR only; 2: part arrays without records; 3: features in every part -- re-run
``twopgraph partition``), a part of another partitioning run, a partition whose source
``.npz`` changed since it was written (size or mtime: a cheap check that needs no hashing of
the source at load time), and a store that is missing or holds other content.

**Integrity.** :func:`load_part` verifies the part it loads (:func:`check_part`): every array's
dtype, shape, value range and the invariants of the layout (monotone CSRs, local ids ``<`` the
part's vertices, ``node_ids`` distinct and ``<`` N, labels in ``[-1, num_classes)`` and
labelled on the splits, splits sorted, disjoint and owned, ...) against ``meta.json``, then its
content fingerprint, which catches what keeps shapes and ranges (zeroed labels, permuted
ids). :func:`verify_partition` does it for every part and checks that the parts own each
vertex once; ``twopgraph train --partitions DIR --nproc P`` runs it before starting any rank,
and ``twopgraph partition`` before reusing a folder (a damaged one is rewritten); both also open
the store and compare its fingerprint (``store.json``: no hashing). Cost: one read of the part
arrays (structure and ids, no features), dominated by hashing (BLAKE2b, 1-2 s/GB per thread).

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
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError, TwopgraphError
from ..fingerprint import fingerprint
from ..files import atomic_write_bytes, parse_temp, sweep_orphans, temp_folder
from ..graph import CSRGraph, GraphData
from ..graphio import SPLITS
from ..rundir import FileLock, remove_stale_lock, sibling_lock
from ..store import open_store
from ..storewriter import write_store
from .cluster import (
    DEFAULT_UFACTOR,
    cluster_graph,
    cluster_key,
    default_num_clusters,
    edge_cut,
    metis_output_to_log,
)
from .renumber import cluster_permutation

log = logging.getLogger("twopgraph")

# 4: no features in the parts (read from the dataset's store), a global or local representation
#    per part; 3: meta.json records every part array (dtype, shape, value range, content
#    fingerprint), and loading checks them; 2: partition_id is the provenance fingerprint, part arrays unchecked;
#    1: a hash of the CSR, the settings and the time
FORMAT_VERSION = 4
META = "meta.json"
PART_JSON = "part.json"
#: Folder of the store written inside a partition whose data had none.
STORE_DIR = "store"
#: File of the fine cluster of every vertex, written when a part is global.
ROOT_CLUSTER = "cluster.npy"
#: A part is stored ``global`` (no CSR of its own: the store's is used) when its local CSR
#: would take more than this share of the bytes of the store's CSR.
GLOBAL_SHARE = 0.5
REPRESENTATIONS = ("auto", "local", "global")
# Batch size the default fine clustering is sized for (`default_num_clusters`: the same
# clusters, and cache entry, as `twopgraph train --batch-size 1024`).
DEFAULT_CLUSTER_BATCH = 1024
# Entries gathered per chunk when extracting rows: bounds the temporaries on large graphs.
_CHUNK = 1 << 24
_LOCAL_ARRAYS = ("indptr", "indices", "label", *SPLITS, "node_ids", "degree", "cluster")
_GLOBAL_ARRAYS = ("owned", *SPLITS)
_ARRAYS = {"local": _LOCAL_ARRAYS, "global": _GLOBAL_ARRAYS}
_PART_DIR = re.compile(r"^part\d+$")
# The lock file of a partition folder (:func:`~twopgraph.rundir.sibling_lock`): ``.OUT.lock``
_LOCK_NAME = re.compile(r"^\..+\.lock$")
# the store writer's temporary folder inside a partition being written
_STORE_TMP = re.compile(r"^\.store\.tmp-")


class PartitionError(TwopgraphError):
    """A partition folder is missing, stale, damaged or does not fit the run."""


@dataclass
class Part:
    """One part as a rank trains on it.

    ``data`` is the graph the rank samples on, with its node data: for a ``local`` part the
    local CSR (``data.node_ids`` = global ids, owned first; splits = local ids of owned
    vertices), for a ``global`` part the store's own CSR (local ids = global ids; splits =
    owned global ids). ``data.feat`` is always the store's whole feature table (memory-mapped,
    N rows): local id ``v`` reads row ``rows[v]`` (``rows`` = ``node_ids`` of a local part,
    None = the identity). ``owned`` holds the global ids of the owned vertices (a local part's
    in local order, so local id ``i < num_owned`` is ``owned[i]``; a global part's sorted).
    ``degree`` holds full-graph degrees (None: the graph's own, complete rows), ``cluster``
    the fine cluster of each of the rank's vertex ids, ``store`` the dataset's store.
    Arrays are memory-mapped by default.
    """

    index: int
    data: GraphData
    num_owned: int
    degree: np.ndarray | None
    cluster: np.ndarray
    owned: np.ndarray
    meta: dict
    representation: str
    store: GraphData
    rows: np.ndarray | None

    @property
    def num_global_nodes(self) -> int:
        return int(self.meta["source"]["num_nodes"])

    @property
    def complete(self) -> np.ndarray:
        """Whether each of the rank's vertices has its whole source row (bool)."""
        if self.degree is None:
            return np.ones(self.data.num_nodes, dtype=bool)
        return self.data.graph.degrees() == self.degree

    def is_owned(self, ids: np.ndarray) -> np.ndarray:
        """Whether each of the rank's vertex ids ``ids`` is owned (bool, O(len(ids)) memory)."""
        ids = np.asarray(ids)
        if self.representation == "local":
            return ids < self.num_owned
        pos = np.searchsorted(self.owned, ids)
        hit = pos < self.owned.shape[0]
        hit[hit] = self.owned[pos[hit]] == ids[hit]
        return hit

    def owned_positions(self, ids: np.ndarray) -> np.ndarray:
        """Positions in ``owned`` of the rank's owned vertex ids ``ids`` (e.g. its splits)."""
        ids = np.asarray(ids, dtype=np.int64)
        return ids if self.representation == "local" else np.searchsorted(self.owned, ids)


# ----------------------------------------------------------------------------------------------
# writing
# ----------------------------------------------------------------------------------------------


def partition_selfdep(data: GraphData, num_parts: int, hops: int, out, *, seed: int = 0,
                      num_clusters: int = 0, cache_dir=None, source_path=None,
                      reuse: bool = False, representation: str = "auto") -> dict:
    """Write the ``num_parts``-way self-dependence partition of ``data`` with ``hops``-hop halos
    to ``out`` (layout in the module docstring); returns the ``meta.json`` contents.

    ``seed`` is METIS' seed for the part split; ``num_clusters`` the number of fine clusters
    for the locality scheduler (0 = ``default_num_clusters`` for batch size 1024); ``cache_dir``
    caches both METIS results (see :func:`~twopgraph.partition.cluster_graph`);
    ``source_path`` (the dataset's ``.npz``) lets a later load detect that it changed. With
    ``reuse``, an ``out`` that already holds this very partition (same
    :func:`partition_fingerprint`) is kept: only its record of ``source_path`` is refreshed.
    An existing ``out`` is replaced only if it is a twopgraph partition (or empty).
    ``representation`` is ``auto`` (per part, the cheaper: see :data:`GLOBAL_SHARE`) or forces
    ``local`` or ``global`` for every part. ``data`` should be store-backed (``data.store``,
    what :func:`~twopgraph.datasets.load_dataset` returns); other data is first written as a
    store inside ``out`` (``OUT/store``), which the ranks then read.
    """
    num_parts, hops, k = _check_args(data, num_parts, hops, num_clusters)
    if representation not in REPRESENTATIONS:
        raise ConfigError(f"representation must be one of {', '.join(REPRESENTATIONS)}, got "
                          f"{representation!r}")
    out = Path(out)
    _check_replaceable(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PartitionError(f"cannot write the partition {out}: {_os_error(e, out.parent)}") \
            from None
    # one writer per folder: a second one into it is refused (the lock lives beside OUT,
    # which is replaced as a whole)
    with FileLock(sibling_lock(out), str(out)):
        _check_replaceable(out)  # again, under the lock
        return _partition_locked(data, num_parts, hops, out, seed=seed, k=k,
                                 cache_dir=cache_dir, source_path=source_path, reuse=reuse,
                                 representation=representation)


def _partition_locked(data: GraphData, num_parts: int, hops: int, out: Path, *, seed: int,
                      k: int, cache_dir, source_path, reuse: bool, representation: str) -> dict:
    """:func:`partition_selfdep` once ``out``'s lock is held."""
    n = data.num_nodes
    t0 = time.perf_counter()
    pid = partition_fingerprint(data, num_parts, hops, seed=seed, num_clusters=k,
                                representation=representation)
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
    tmp = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        clean_orphans(out.parent)
        tmp = temp_folder(out)
        if data.store is None:  # the ranks read features and rows from a store: write one
            log.info("%s has no store: writing one into %s", data.name or "the dataset",
                     out / STORE_DIR)
            write_store(data, tmp / STORE_DIR, validate=False)
        part_meta = [_write_part(tmp / f"part{p}", p, pid, data, owner == p, reached[:, p],
                                 rank, fine.parts, representation) for p in range(num_parts)]
        total = sum(m["num_owned"] + m["num_halo"] for m in part_meta)
        root = {"cluster": None}
        if any(m["representation"] == "global" for m in part_meta):
            clusters = np.ascontiguousarray(fine.parts, dtype=np.int32)
            root["cluster"] = _record(clusters)
            np.save(tmp / ROOT_CLUSTER, clusters)
            del clusters
        meta = {
            "format": FORMAT_VERSION, "partition_id": pid, "cluster_key": fine.key,
            "source": _source_info(data, source_path, out),
            "num_parts": num_parts, "hops": hops, "seed": int(seed), "num_clusters": k,
            "replication_factor": total / max(n, 1), "arrays": root,
            "edge_cut": int(cut), "edge_cut_fraction": cut / max(g.num_edges // 2, 1),
            "metis_s": round(metis_s, 3), "seconds": round(time.perf_counter() - t0, 3),
            "parts": part_meta,
        }
        (tmp / META).write_text(json.dumps(meta, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except OSError as e:  # full disk, read-only or vanished folder: nothing half-written stays
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise PartitionError(f"cannot write the partition {out}: {_os_error(e, out.parent)}") \
            from None
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("partition: %d parts (%s), %d hops, replication factor %.3f, edge cut %d "
             "(%.1f%%), %.1f s -> %s", num_parts,
             ", ".join(m["representation"] for m in part_meta), hops,
             meta["replication_factor"], cut, 100 * meta["edge_cut_fraction"], meta["seconds"],
             out)
    return meta


def partition_fingerprint(data: GraphData, num_parts: int, hops: int, *, seed: int = 0,
                          num_clusters: int = 0, representation: str = "auto") -> str:
    """The ``partition_id`` that :func:`partition_selfdep` gives this partition: the
    fingerprint of ``data``'s content (:meth:`GraphData.fingerprint`: graph, features, labels,
    splits), ``num_parts``, ``hops``, ``seed``, the resolved ``num_clusters`` (0 = the
    default count), the fine clustering's cache key (its METIS settings), the part split's
    METIS tolerance, the ``representation`` asked for and :data:`FORMAT_VERSION`. Raises
    :class:`ConfigError` for bad values."""
    num_parts, hops, k = _check_args(data, num_parts, hops, num_clusters)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ConfigError(f"seed must be an integer, got {seed!r}")
    return fingerprint("selfdep-partition", {
        "source": data.fingerprint(),
        "clusters": cluster_key(data.graph, k, train_idx=data.train_idx),
        "num_parts": num_parts, "hops": hops, "seed": int(seed), "num_clusters": k,
        "split_ufactor": DEFAULT_UFACTOR, "split_version": SPLIT_VERSION,
        "representation": str(representation),
        "format": FORMAT_VERSION})


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


def _is_partition_tmp(folder: Path) -> bool:
    """Whether ``folder`` holds only what a partition writer puts there (``meta.json``,
    ``cluster.npy``, ``partN/`` folders of ``.npy`` files and ``part.json``, and a ``store/``
    folder -- or the store writer's temporary one -- of ``.npy`` and ``.json`` files)."""

    def only_files(d: Path, ok) -> bool:
        return all(not f.is_symlink() and f.is_file() and ok(f.name) for f in d.iterdir())

    try:
        for e in folder.iterdir():
            if e.name in (META, ROOT_CLUSTER) and e.is_file() and not e.is_symlink():
                continue
            if e.is_symlink() or not e.is_dir():
                return False
            if _PART_DIR.match(e.name):
                if not only_files(e, lambda f: f == PART_JSON or f.endswith(".npy")):
                    return False
            elif e.name == STORE_DIR or _STORE_TMP.match(e.name):
                if not only_files(e, lambda f: f.endswith((".npy", ".json"))):
                    return False
            else:
                return False
    except OSError:
        return False
    return True


def clean_orphans(parent) -> list[Path]:
    """Remove the temporary folders (:func:`~twopgraph.files.parse_temp`) that partition
    writers killed before they finished (``kill -9``, power loss) left in ``parent``, and their lock files
    (``.NAME.lock``) that no process holds any more; returns them.

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
    for e in entries:
        if _LOCK_NAME.match(e.name) and e.is_file() and not e.is_symlink():
            # of a writer that died (it names its holder, as twopgraph's do); a held one stays
            if _names_holder(e) and remove_stale_lock(e):
                removed.append(e)
    for e in sweep_orphans(parent, accept=lambda p: p.is_dir() and _is_partition_tmp(p)):
        log.info("removed %s, left by a partition writer (pid %s) that was killed", e,
                 parse_temp(e.name).pid)
        removed.append(e)
    return removed


def _names_holder(path: Path) -> bool:
    """Whether ``path`` reads as a twopgraph lock file: ``{"pid": ..., "host": ...}``."""
    try:
        rec = json.loads(path.read_text()[:4096])
    except (OSError, ValueError):
        return False
    return isinstance(rec, dict) and set(rec) == {"pid", "host"}


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
    src = _source_info(data, source_path, folder)
    if meta["source"].get("store_embedded"):  # the store written inside the partition
        src.update(store=str((folder / STORE_DIR).resolve()), store_embedded=True)
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
    from ..rundir import refuse_dangling
    refuse_dangling(out)
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
    parts = np.asarray(parts, dtype=np.int64)
    return rebalance(parts, w, cg, num_parts)


#: The imbalance :func:`rebalance` accepts: a part may exceed the mean of a weight (training
#: vertices, vertices) by this share, or by the largest single cluster's weight where that is
#: more (whole clusters move, so finer balance may not exist).
BALANCE_TOLERANCE = DEFAULT_UFACTOR / 1000
# Bumped when the part split changes (the partition_id covers it: old folders are recomputed).
SPLIT_VERSION = 2


def rebalance(parts: np.ndarray, weights: np.ndarray, adjacency, num_parts: int,
              tolerance: float = BALANCE_TOLERANCE) -> np.ndarray:
    """Move whole clusters between parts until every part is within ``tolerance`` of the mean
    of every weight column (:data:`BALANCE_TOLERANCE`); returns the new part of each cluster.

    METIS' multi-constraint k-way split misses its tolerance by far on small coarse graphs
    (cora in 2 parts: 2145/563 vertices, 94/46 training vertices): ``parts`` is taken as the
    start and, while a part is over the tolerance, the move that lowers the squared relative
    deviation from the means (summed over parts and columns) is made -- among the moves that
    achieve at least half of the best lowering, the one that cuts the fewest cluster-graph
    edges (``adjacency``: symmetric sparse k x k edge counts). A split already within the
    tolerance is returned unchanged. Deterministic."""
    parts = np.asarray(parts, dtype=np.int64).copy()
    w = np.asarray(weights, dtype=np.float64).reshape(parts.shape[0], -1)
    if num_parts < 2 or parts.shape[0] == 0:
        return parts
    total = w.sum(0)
    cols = total > 0  # a column without weight cannot be unbalanced
    if not cols.any():
        return parts
    w, total = w[:, cols], total[cols]
    target = total / num_parts
    slack = np.maximum(tolerance * target, w.max(0))
    load = np.zeros((num_parts, w.shape[1]))
    np.add.at(load, parts, w)
    import scipy.sparse as sp
    adj = sp.csr_matrix(adjacency, dtype=np.float64)
    onehot = sp.csr_matrix((np.ones(parts.shape[0]), (np.arange(parts.shape[0]), parts)),
                           shape=(parts.shape[0], num_parts))
    conn = np.asarray((adj @ onehot).todense())  # edges of each cluster into each part
    rows = np.arange(parts.shape[0])
    for _ in range(4 * parts.shape[0]):  # each move lowers the deviation: a bound, not a goal
        over = load - target - slack
        if (over <= 1e-9).all():
            break
        src = int(np.argmax(over.max(1)))
        cand = rows[parts == src]
        if cand.shape[0] == 0:
            break
        wc = w[cand]  # (m, c)
        # squared relative deviation change of moving candidate i from src to part b
        before_src = (((load[src] - target) / target) ** 2).sum()
        after_src = ((((load[src] - wc) - target) / target) ** 2).sum(1)  # (m,)
        before_b = (((load - target) / target) ** 2).sum(1)  # (P,)
        after_b = ((((load[None, :, :] + wc[:, None, :]) - target) / target) ** 2).sum(2)
        gain = (before_src - after_src)[:, None] + (before_b[None, :] - after_b)  # (m, P)
        gain[:, src] = -np.inf
        best = gain.max()
        if not best > 1e-12:
            break
        ok = gain >= 0.5 * best
        cut = np.where(ok, conn[cand] - conn[cand, src][:, None], -np.inf)
        i, b = np.unravel_index(int(np.argmax(np.where(ok, cut * (1 + 1e-9) + gain * 1e-6,
                                                       -np.inf))), cut.shape)
        c = int(cand[i])
        parts[c] = b
        load[src] -= w[c]
        load[b] += w[c]
        col = adj.getrow(c)
        conn[col.indices, src] -= col.data
        conn[col.indices, b] += col.data
    return parts


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


def _local_edges(g: CSRGraph, member: np.ndarray) -> int:
    """Edges of the subgraph induced by the vertices where ``member`` is True (entries of its
    CSR), counted in chunks of rows."""
    deg = g.degrees()
    total, step = 0, max(1, _CHUNK // max(1, int(deg.mean()) if deg.size else 1))
    for a in range(0, g.num_nodes, step):
        b = min(a + step, g.num_nodes)
        src = np.repeat(member[a:b], deg[a:b])
        total += int(np.count_nonzero(src & member[g.indices[g.indptr[a]:g.indptr[b]]]))
    return total


def _csr_bytes(num_nodes: int, num_edges: int, index_itemsize: int) -> int:
    return 8 * (num_nodes + 1) + index_itemsize * num_edges


def _write_part(folder: Path, p: int, pid: str, data: GraphData, owned: np.ndarray,
                reached: np.ndarray, rank: np.ndarray, fine_parts: np.ndarray,
                representation: str = "auto") -> dict:
    g = data.graph
    member = reached | owned
    nloc = int(np.count_nonzero(member))
    num_owned = int(np.count_nonzero(owned))
    local_bytes = _csr_bytes(nloc, _local_edges(g, member), 4 if nloc < 2**31 else 8)
    global_bytes = int(g.indptr.nbytes + g.indices.nbytes)
    if representation == "auto":
        representation = "global" if local_bytes > GLOBAL_SHARE * global_bytes else "local"
    own = np.flatnonzero(owned)
    if representation == "global":
        arrays = {"owned": own.astype(np.int64)}
        for s in SPLITS:
            idx = getattr(data, s)
            arrays[s] = np.sort(np.asarray(idx[owned[idx]], dtype=np.int64))
        nodes, edges, degree_ok = g.num_nodes, g.num_edges, 0
    else:
        halo = np.flatnonzero(member & ~owned)
        own = own[np.argsort(rank[own], kind="stable")]
        halo = halo[np.argsort(rank[halo], kind="stable")]
        l2g = np.concatenate([own, halo]).astype(np.int64)
        del halo
        g2l = np.full(g.num_nodes, -1, dtype=np.int32 if nloc < 2**31 else np.int64)
        g2l[l2g] = np.arange(nloc, dtype=g2l.dtype)
        indptr, indices = _gather_rows(g.indptr, g.indices, l2g, g2l)
        degree = (g.indptr[l2g + 1] - g.indptr[l2g]).astype(np.int64)
        arrays = {"indptr": indptr, "indices": indices,
                  "label": np.asarray(data.label[l2g], dtype=np.int64), "node_ids": l2g,
                  "degree": degree, "cluster": fine_parts[l2g].astype(np.int32)}
        for s in SPLITS:
            idx = getattr(data, s)
            arrays[s] = np.sort(g2l[idx[owned[idx]]].astype(np.int64))
        del g2l
        nodes, edges = nloc, int(indices.shape[0])
        degree_ok = int(np.count_nonzero(np.diff(indptr) != degree))
    folder.mkdir(parents=True)
    records = {}
    for name in _ARRAYS[representation]:
        arr = np.ascontiguousarray(arrays[name])
        records[name] = _record(arr)
        np.save(folder / f"{name}.npy", arr)
    info = {"part": p, "partition_id": pid, "representation": representation,
            "num_nodes": int(nodes), "num_owned": num_owned,
            "num_halo": nloc - num_owned, "num_edges": int(edges),
            "num_train": int(arrays["train_idx"].shape[0]),
            "num_val": int(arrays["val_idx"].shape[0]),
            "num_test": int(arrays["test_idx"].shape[0]),
            "num_incomplete": degree_ok}
    (folder / PART_JSON).write_text(json.dumps(info, indent=2) + "\n")
    return dict(info, local_csr_bytes=local_bytes, global_csr_bytes=global_bytes,
                arrays=records)


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


def _source_info(data: GraphData, source_path, out: Path) -> dict:
    """``meta.json``'s ``source``: the content's fingerprint and counts, the store the ranks
    read (``data.store``, or ``out/store`` written for data without one) and the source
    file's size and mtime (staleness check)."""
    embedded = data.store is None
    store = (Path(out) / STORE_DIR) if embedded else Path(data.store)
    info = {"name": data.name, "fingerprint": data.fingerprint(), "num_nodes": data.num_nodes,
            "num_edges": data.graph.num_edges, "num_features": data.num_features,
            "num_classes": int(data.num_classes), "store": str(store.resolve()),
            "store_embedded": embedded, "path": None, "size": None, "mtime_ns": None}
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
        if not isinstance(src["store"], str) or not isinstance(src["fingerprint"], str):
            raise TypeError("store")
        int(meta["num_clusters"]), str(meta["partition_id"])
        if len(meta["parts"]) != num_parts or num_parts < 1:
            raise KeyError("parts")
        root = meta["arrays"]["cluster"]
        for info in meta["parts"]:
            int(info["num_nodes"]), int(info["num_owned"]), int(info["num_edges"])
            for s in SPLITS:
                int(info[f"num_{s[:-4]}"])
            rep = info["representation"]
            if rep == "global" and root is None:
                raise KeyError("cluster")
            for name in _ARRAYS[rep]:
                rec = info["arrays"][name]
                np.dtype(rec["dtype"]), [int(x) for x in rec["shape"]], str(rec["fingerprint"])
        if root is not None:
            np.dtype(root["dtype"]), [int(x) for x in root["shape"]], str(root["fingerprint"])
    except (KeyError, TypeError, ValueError, IndexError):
        raise PartitionError(f"{path}: incomplete meta.json; re-run `twopgraph partition`") \
            from None
    if check_source and src.get("path") and Path(src["path"]).is_file():
        st = Path(src["path"]).stat()
        if st.st_size != src["size"] or st.st_mtime_ns != src["mtime_ns"]:
            raise PartitionError(f"{folder} is stale: its source {src['path']} changed since it "
                                 "was partitioned; re-run `twopgraph partition`")
    return meta


def open_source_store(folder, meta: dict) -> GraphData:
    """The store the partition in ``folder`` was made from (``meta["source"]["store"]``; the
    partition's own ``store/`` when it was written there), memory-mapped read-only, after
    checking that its fingerprint is the one partitioned (a store rebuilt from a changed
    source is refused). Raises :class:`PartitionError` (one line)."""
    src = meta["source"]
    path = Path(folder) / STORE_DIR if src.get("store_embedded") else Path(src["store"])
    try:
        store = open_store(path, check_symmetric=False)
    except TwopgraphError as e:
        raise PartitionError(f"{folder}: the dataset store it reads ({path}) cannot be "
                             f"opened: {e}") from None
    if store.fingerprint() != src["fingerprint"]:
        raise PartitionError(f"{folder}: the store {path} holds other content than was "
                             f"partitioned (fingerprint {store.fingerprint()[:12]}, expected "
                             f"{src['fingerprint'][:12]}: rebuilt from a changed source?); "
                             "re-run `twopgraph partition`")
    return store


def _root_cluster(folder: Path, meta: dict, mmap: bool, verify: bool) -> np.ndarray:
    """``OUT/cluster.npy`` (fine cluster of every vertex), checked against its record."""
    rec, path = meta["arrays"]["cluster"], folder / ROOT_CLUSTER
    try:
        arr = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise PartitionError(f"{path}: missing or unreadable ({type(e).__name__}); re-run "
                             "`twopgraph partition`") from None
    n = int(meta["source"]["num_nodes"])
    what = None
    if arr.dtype != np.int32 or arr.shape != (n,) or arr.dtype.str != rec["dtype"]:
        what = f"{arr.dtype} of shape {arr.shape}, expected int32 ({n},)"
    elif verify:
        lo, hi = _value_range(arr)
        if (lo, hi) != (rec["min"], rec["max"]) or (
                lo is not None and (lo < 0 or hi >= int(meta["num_clusters"]))):
            what = f"values in [{lo}, {hi}]"
        elif fingerprint("partition-array", None, arr) != rec["fingerprint"]:
            what = "content differs from its fingerprint in meta.json"
    if what is not None:
        raise PartitionError(f"{path}: {what} (damaged partition); re-run "
                             "`twopgraph partition`")
    return arr


def load_part(folder, index: int, meta: dict | None = None, mmap: bool = True,
              verify: bool = True, store: GraphData | None = None) -> Part:
    """Part ``index`` of the partition in ``folder`` (arrays memory-mapped unless ``mmap`` is
    False; features, labels of a global part and the graph of a global part are always the
    store's read-only maps); refuses parts of another run, a store that is missing or holds
    other content (:func:`open_source_store`; ``store`` skips opening it again) and, with
    ``verify`` (the default), any array that disagrees with ``meta.json``: dtype, shape,
    value range, the invariants of the layout (see :func:`check_part`) and its content
    fingerprint. Cost of ``verify``: one read of the part's arrays (hashing about 1-2 s/GB
    per thread; see the module docstring)."""
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
    rep = want["representation"]
    if any(info.get(k) != want[k] for k in ("num_nodes", "num_owned", "representation")):
        raise PartitionError(f"{pdir}/{PART_JSON} disagrees with {folder / META} (stale or "
                             "damaged partition); re-run `twopgraph partition`")
    arr = {}
    for name in _ARRAYS[rep]:
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
    store = open_source_store(folder, meta) if store is None else store
    splits = [np.asarray(arr[s]) for s in SPLITS]
    name = f"{src['name']}/part{p}"
    if rep == "global":
        data = GraphData(store.graph, store.feat, store.label, *splits, name=name,
                         node_ids=store.node_ids, num_classes=int(src["num_classes"]),
                         store=store.store)
        return Part(p, data, int(want["num_owned"]), None,
                    _root_cluster(folder, meta, mmap, verify), arr["owned"], meta, rep, store,
                    None)
    data = GraphData(CSRGraph(arr["indptr"], arr["indices"]), store.feat, arr["label"],
                     *splits, name=name, node_ids=arr["node_ids"],
                     num_classes=int(src["num_classes"]))
    own = int(want["num_owned"])
    return Part(p, data, own, arr["degree"], arr["cluster"], arr["node_ids"][:own], meta, rep,
                store, arr["node_ids"])


def verify_partition(folder, meta: dict | None = None) -> dict:
    """Check every part of the partition in ``folder`` against its ``meta.json``
    (:func:`check_part`: dtypes, shapes, value ranges, layout invariants, content
    fingerprints), its store (:func:`open_source_store`) and that the owned vertices of the
    parts are each of the source's vertices exactly once. Returns ``meta``; raises
    :class:`PartitionError` (one line naming the file) for the first problem found.
    ``twopgraph train --partitions DIR --nproc P`` calls it before it starts any rank; it
    reads every byte of the partition once (see the module docstring for the cost)."""
    folder = Path(folder)
    meta = read_meta(folder) if meta is None else meta
    t = time.perf_counter()
    store = open_source_store(folder, meta)
    n = int(meta["source"]["num_nodes"])
    owned = np.zeros(n, dtype=bool)
    total = 0
    for p in range(meta["num_parts"]):
        part = load_part(folder, p, meta, mmap=True, verify=True, store=store)
        own = part.owned
        if own.shape[0] and owned[own].any():
            what = "node_ids" if part.representation == "local" else "owned"
            raise PartitionError(f"{folder}/part{p}/{what}.npy: owned vertices also owned by "
                                 "an earlier part (damaged partition); re-run "
                                 "`twopgraph partition`")
        owned[own] = True
        total += int(own.shape[0])
        if part.representation == "global":
            for s in SPLITS:  # the store's labels (a local part's are checked in check_part)
                idx = getattr(part.data, s)
                if idx.shape[0] and int(store.label[idx].min()) < 0:
                    raise PartitionError(f"{folder}/part{p}/{s}.npy: unlabelled (-1) vertices "
                                         f"(damaged partition); re-run `twopgraph partition`")
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
    info = meta["parts"][p]
    n, own = int(info["num_nodes"]), int(info["num_owned"])
    if info["representation"] == "global":
        shapes = {"owned": (own,)}
    else:
        shapes = {"indptr": (n + 1,), "indices": (int(info["num_edges"]),), "label": (n,),
                  "node_ids": (n,), "degree": (n,), "cluster": (n,)}
    for s in SPLITS:
        shapes[s] = (int(info[f"num_{s[:-4]}"]),)
    return shapes


def _check_shapes(pdir: Path, arr: dict, meta: dict, p: int) -> None:
    for name, shape in _expected_shapes(arr, meta, p).items():
        if arr[name].shape != shape:
            raise _damaged(pdir, name, f"has shape {arr[name].shape}, expected {shape}")


# dtypes a part array may have
_INT64 = (np.dtype(np.int64),)
_IDS = (np.dtype(np.int32), np.dtype(np.int64))
_DTYPES = {"indptr": _INT64, "indices": _IDS, "label": _INT64, "node_ids": _INT64,
           "degree": _INT64, "cluster": (np.dtype(np.int32),), "owned": _INT64,
           **{s: _INT64 for s in SPLITS}}


def check_part(pdir, arr: dict, meta: dict, p: int) -> None:
    """Check the arrays ``arr`` (name -> array, as loaded from ``pdir``) of part ``p`` against
    ``meta.json``; raise :class:`PartitionError` naming the first bad file.

    In order: dtype and shape (against the counts and the record of each array), the value
    range against the record, the invariants of the layout -- of a local part: the CSR starts
    at 0, is monotone and ends at its number of entries; local neighbour ids ``< num_nodes``
    of the part; ``node_ids`` distinct and ``<`` the source's vertices; labels in
    ``[-1, num_classes)``, and ``>= 0`` on the splits; splits sorted, distinct, disjoint and
    owned (local ids ``< num_owned``); clusters ``< num_clusters``; full-graph degrees ``>=``
    the local ones; of a global part: ``owned`` sorted, distinct and ``<`` the source's
    vertices, splits sorted, distinct, disjoint and in ``owned`` -- and last the content
    fingerprint of every array (what catches a same-shape, in-range change such as zeroed
    labels or permuted ids)."""
    pdir = Path(pdir)
    info, src = meta["parts"][p], meta["source"]
    recs = info["arrays"]
    names = _ARRAYS[info["representation"]]
    for name in names:
        a, rec = arr[name], recs[name]
        if a.dtype.str != rec["dtype"] or a.dtype not in _DTYPES[name]:
            raise _damaged(pdir, name, f"dtype {a.dtype}, meta.json records {rec['dtype']}")
        if list(a.shape) != [int(x) for x in rec["shape"]]:
            raise _damaged(pdir, name, f"has shape {a.shape}, expected "
                                       f"{tuple(int(x) for x in rec['shape'])} (meta.json)")
    _check_shapes(pdir, arr, meta, p)
    rng = {}
    for name in names:
        lo, hi = rng[name] = _value_range(arr[name])
        rec = recs[name]
        if (lo, hi) != (rec["min"], rec["max"]):
            raise _damaged(pdir, name, f"values in [{lo}, {hi}], meta.json records "
                                       f"[{rec['min']}, {rec['max']}]")
    n, own = int(info["num_nodes"]), int(info["num_owned"])
    big_n, classes = int(src["num_nodes"]), int(src["num_classes"])

    def bounded(name, low, high):  # every value in [low, high)
        lo, hi = rng[name]
        if lo is not None and (lo < low or hi >= high):
            raise _damaged(pdir, name, f"values in [{lo}, {hi}], must lie in [{low}, {high})")

    def increasing(name):
        a = arr[name]
        if a.shape[0] > 1 and np.any(a[1:] <= a[:-1]):
            raise _damaged(pdir, name, "not sorted or repeated ids")

    if info["representation"] == "global":
        bounded("owned", 0, big_n)
        increasing("owned")
        owned = arr["owned"]
        taken = np.zeros(own, dtype=bool)
        for s in SPLITS:
            idx = arr[s]
            if not idx.shape[0]:
                continue
            bounded(s, 0, big_n)
            increasing(s)
            pos = np.minimum(np.searchsorted(owned, idx), max(own - 1, 0))
            if not own or not np.array_equal(owned[pos], idx):
                raise _damaged(pdir, s, "ids of vertices the part does not own")
            if taken[pos].any():
                raise _damaged(pdir, s, "ids also in another split")
            taken[pos] = True
    else:
        ip = arr["indptr"]
        if int(ip[0]) != 0 or int(ip[-1]) != arr["indices"].shape[0]:
            raise _damaged(pdir, "indptr", f"starts at {int(ip[0])} and ends at {int(ip[-1])}, "
                                           f"must run from 0 to {arr['indices'].shape[0]} "
                                           "(indices)")
        if ip.shape[0] > 1 and np.any(ip[1:] < ip[:-1]):
            raise _damaged(pdir, "indptr", "not monotone non-decreasing")
        bounded("indices", 0, n)
        bounded("node_ids", 0, big_n)
        if n:
            seen = np.zeros(big_n, dtype=bool)
            seen[arr["node_ids"]] = True
            if int(np.count_nonzero(seen)) != n:
                raise _damaged(pdir, "node_ids", "repeated vertex ids")
            del seen
        bounded("label", -1, classes)
        bounded("cluster", 0, int(meta["num_clusters"]))
        if n and np.any(np.diff(arr["indptr"]) > arr["degree"]):
            raise _damaged(pdir, "degree", "full-graph degrees below the local ones")
        taken = np.zeros(own, dtype=bool)
        for s in SPLITS:
            idx = arr[s]
            if not idx.shape[0]:
                continue
            bounded(s, 0, own)
            increasing(s)
            if taken[idx].any():
                raise _damaged(pdir, s, "ids also in another split")
            taken[idx] = True
            if int(arr["label"][idx].min()) < 0:
                raise _damaged(pdir, "label", f"unlabelled (-1) vertices in {s}")
    for name in names:  # last: the content itself
        if fingerprint("partition-array", None, arr[name]) != recs[name]["fingerprint"]:
            raise _damaged(pdir, name, "content differs from its fingerprint in meta.json")
