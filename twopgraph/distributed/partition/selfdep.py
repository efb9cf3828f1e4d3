"""Self-dependence partitions (2PGraph): each worker's training vertices together with everything
their H-hop sampling can reach, renumbered locally, so that training needs no communication.

:func:`partition_selfdep` splits the graph into ``P`` parts with METIS, balancing training
vertices (and all vertices) across parts (:func:`~twopgraph.distributed.partition.split.rebalance`
moves whole clusters where METIS misses
:data:`~twopgraph.distributed.partition.split.BALANCE_TOLERANCE`, as it does on small coarse
graphs). The split is computed on the graph of the fine METIS clusters that the locality scheduler
uses (one vertex per cluster, weighted by its vertices and training vertices; edge weights =
edges between clusters): every fine cluster lies in one part, and the P-way split costs
seconds on top of the (cached) fine clustering. Part ``i``'s *self-dependence cluster* is

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
the dataset's *store* (:mod:`twopgraph.store.reader`: memory-mapped ``.npy`` files, read-only), so
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

``partition_id`` is :func:`partition_fingerprint`: the provenance fingerprint
(:mod:`twopgraph.core.fingerprint`) of the source's content, ``num_parts``, ``hops``, ``seed``, the
resolved ``num_clusters``, the fine clustering's key (METIS settings) and
:data:`~twopgraph.distributed.partition.format.FORMAT_VERSION`. A partition is thus reused only when
all of them are equal (``partition_selfdep(..., reuse=True)``, what ``twopgraph partition``
does without ``--force``); any other value recomputes it.

A folder is written under a temporary name beside ``OUT`` (:mod:`twopgraph.core.files`) and renamed
when complete; the temporary folders of writers that were killed are removed by the next write
into the same parent folder (:func:`~twopgraph.distributed.partition.orphans.clean_orphans`: only
folders of that pattern whose process is gone, holding nothing but partition files).

The on-disk layout is in :mod:`twopgraph.distributed.partition.format`; reading and checking a
folder in :mod:`twopgraph.distributed.partition.load` and
:mod:`twopgraph.distributed.partition.check`.

Example::

    >>> meta = partition_selfdep(data, num_parts=4, hops=3, out="parts/small-4")  # doctest: +SKIP
    >>> part = load_part("parts/small-4", 0)                                       # doctest: +SKIP
    >>> part.data.graph.num_nodes, part.num_owned, meta["replication_factor"]      # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np

from twopgraph.core.files import atomic_write_bytes, temp_folder
from twopgraph.core.fingerprint import fingerprint
from twopgraph.core.locks import FileLock, sibling_lock
from twopgraph.core.names import REPRESENTATIONS
from twopgraph.distributed.partition.format import (
    _ARRAYS,
    FORMAT_VERSION,
    META,
    PART_JSON,
    ROOT_CLUSTER,
    STORE_DIR,
    PartitionError,
    _record,
    source_store,
    store_paths,
)
from twopgraph.distributed.partition.load import read_meta, verify_partition
from twopgraph.distributed.partition.orphans import clean_orphans
from twopgraph.distributed.partition.split import (
    SPLIT_VERSION,
    _check_train_in_every_part,
    halos,
    part_masks,
    split_clusters,
)
from twopgraph.errors import ConfigError
from twopgraph.graph.data import CSRGraph, GraphData
from twopgraph.graph.io import SPLITS
from twopgraph.locality import kernels
from twopgraph.locality.cluster import (
    DEFAULT_UFACTOR,
    cluster_graph,
    cluster_key,
    default_num_clusters,
)
from twopgraph.locality.renumber import cluster_permutation
from twopgraph.store.writer import write_store

log = logging.getLogger("twopgraph")

#: A part is stored ``global`` (no CSR of its own: the store's is used) when its local CSR
#: would take more than this share of the bytes of the store's CSR.
GLOBAL_SHARE = 0.5
# REPRESENTATIONS (twopgraph.core.names, imported above): auto | local | global
# Batch size the default fine clustering is sized for (`default_num_clusters`: the same
# clusters, and cache entry, as `twopgraph train --batch-size 1024`).
DEFAULT_CLUSTER_BATCH = 1024
# Entries gathered per chunk when extracting rows: bounds the temporaries on large graphs.
_CHUNK = 1 << 24


def partition_selfdep(data: GraphData, num_parts: int, hops: int, out, *, seed: int = 0,
                      num_clusters: int = 0, cache_dir=None, source_path=None,
                      reuse: bool = False, representation: str = "auto") -> dict:
    """Write the ``num_parts``-way self-dependence partition of ``data`` with ``hops``-hop halos
    to ``out`` (layout in the module docstring); returns the ``meta.json`` contents
    (``source.store`` as an absolute path, as :func:`read_meta` gives it).

    ``seed`` is METIS' seed for the part split; ``num_clusters`` the number of fine clusters
    for the locality scheduler (0 = ``default_num_clusters`` for batch size 1024); ``cache_dir``
    caches both METIS results (see :func:`~twopgraph.locality.cluster_graph`);
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
    steps = _Steps()
    fine = cluster_graph(g, k, train_idx=data.train_idx, cache_dir=cache_dir)
    steps.done("clusters", k)
    fine_to_part, cut = split_clusters(g, fine.parts, k, data.train_idx, num_parts, seed)
    # 1 byte a vertex up to 127 parts: the kernels below look it up once per CSR entry
    owner = kernels.compact_labels(fine_to_part, num_parts - 1)[fine.parts]
    steps.done("split", num_parts)
    metis_s = steps.total()
    _check_train_in_every_part(owner, data.train_idx, num_parts, n)
    reached = halos(g, owner, data.train_idx, num_parts, hops)
    steps.done("halos", hops)
    entries = local_entries(g, owner, reached, num_parts)
    steps.done("local edges", int(entries.sum()))
    reps = [_representation(g, int(np.count_nonzero(reached[:, p] | (owner == p))),
                            int(entries[p]), representation) for p in range(num_parts)]
    rank = None  # position of each vertex in cluster-BFS order: the local ids' order
    if "local" in reps:  # global parts keep global ids: none of them needs it
        rank = np.empty(n, dtype=np.int64)
        rank[cluster_permutation(g, fine)] = np.arange(n, dtype=np.int64)
        steps.done("cluster order", n)
    tmp = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        clean_orphans(out.parent)
        tmp = temp_folder(out)
        if data.store is None:  # the ranks read features and rows from a store: write one
            log.info("%s has no store: writing one into %s", data.name or "the dataset",
                     out / STORE_DIR)
            write_store(data, tmp / STORE_DIR, validate=False)
        part_meta = []
        for p in range(num_parts):
            part_meta.append(_write_part(tmp / f"part{p}", p, pid, data, owner == p,
                                         reached[:, p], rank, fine.parts,
                                         int(entries[p]), reps[p]))
            steps.done(f"part {p}", part_meta[-1]["num_nodes"])
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
    meta["source"]["store"] = str(source_store(out, meta))  # absolute, as read_meta gives it
    return meta


class _Steps:
    """Logs each step of a partition with its wall seconds (progress, and the breakdown
    ``twopgraph bench scale``'s stage logs carry; ``twopgraph bench partition-steps`` times
    the steps one by one)."""

    def __init__(self):
        self.t0 = self.t = time.perf_counter()

    def done(self, what: str, size) -> None:
        now = time.perf_counter()
        log.info("partition: %s (%s) in %.1f s", what, f"{size:,}", now - self.t)
        self.t = now

    def total(self) -> float:
        return time.perf_counter() - self.t0


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
        src.update(store_paths(folder / STORE_DIR, folder), store_embedded=True)
    if src != json.loads((folder / META).read_text())["source"]:  # as recorded
        meta["source"] = src
        try:
            atomic_write_bytes(folder / META,
                               lambda f: f.write((json.dumps(meta, indent=2) + "\n").encode()))
        except OSError as e:  # read-only folder: the parts are right, the record stays old
            log.warning("could not record the source's new mtime in %s (%s); loading it will "
                        "call it stale", folder / META, e.strerror or e)
    meta["source"]["store"] = str(source_store(folder, meta))  # absolute, as read_meta's
    return meta


def _check_replaceable(out: Path) -> None:
    from twopgraph.core.files import refuse_dangling
    refuse_dangling(out)
    if not out.exists():
        return
    if not out.is_dir():
        raise ConfigError(f"--out {out} exists and is not a folder")
    if any(out.iterdir()) and not (out / META).is_file():
        raise ConfigError(f"--out {out} is a non-empty folder that is not a twopgraph partition; "
                          "refusing to replace it")


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


def local_entries(g: CSRGraph, owner: np.ndarray, reached: np.ndarray,
                  num_parts: int) -> np.ndarray:
    """CSR entries (directed edges) of the subgraph each part induces on its vertices, the
    ones it owns or reaches (int64, ``num_parts`` entries). ``owner`` is the part of every
    vertex (N entries), ``reached`` the N x ``num_parts`` bool table of :func:`halos
    <twopgraph.distributed.partition.split.halos>`. One parallel pass over the edges per
    eight parts (:func:`~twopgraph.locality.kernels.shared_edges`)."""
    out = np.zeros(num_parts, dtype=np.int64)
    for first, mask in part_masks(lambda p: reached[:, p] | (owner == p), num_parts):
        k = min(8, num_parts - first)
        out[first:first + k] = kernels.shared_edges(g.indptr, g.indices, mask)[:k]
    return out


def _csr_bytes(num_nodes: int, num_edges: int, index_itemsize: int) -> int:
    return 8 * (num_nodes + 1) + index_itemsize * num_edges


def _representation(g: CSRGraph, nloc: int, local_entries: int, asked: str) -> str:
    """``local`` or ``global``: what was ``asked``, or for ``auto`` the cheaper one
    (:data:`GLOBAL_SHARE`) for a part of ``nloc`` vertices whose induced subgraph has
    ``local_entries`` CSR entries."""
    if asked != "auto":
        return asked
    local_bytes = _csr_bytes(nloc, local_entries, 4 if nloc < 2**31 else 8)
    return "global" if local_bytes > GLOBAL_SHARE * (g.indptr.nbytes + g.indices.nbytes) \
        else "local"


def _write_part(folder: Path, p: int, pid: str, data: GraphData, owned: np.ndarray,
                reached: np.ndarray, rank: np.ndarray | None, fine_parts: np.ndarray,
                local_entries: int, representation: str) -> dict:
    """Part ``p``'s folder: the vertices it owns and reaches, its splits, and its CSR (local
    ids, in ``rank`` order: owned first, then the halo) or a reference to the global one, as
    ``representation`` (``local`` | ``global``, :func:`_representation`) says;
    ``local_entries`` = its induced subgraph's CSR entries."""
    g = data.graph
    member = reached | owned
    nloc = int(np.count_nonzero(member))
    num_owned = int(np.count_nonzero(owned))
    local_bytes = _csr_bytes(nloc, local_entries, 4 if nloc < 2**31 else 8)
    global_bytes = int(g.indptr.nbytes + g.indices.nbytes)
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


def _source_info(data: GraphData, source_path, out: Path) -> dict:
    """``meta.json``'s ``source``: the content's fingerprint and counts, the store the ranks
    read (``data.store``, or ``out/store`` written for data without one; relative to ``out``
    where they share a parent folder: :func:`store_paths`) and the source file's size and
    mtime (staleness check)."""
    embedded = data.store is None
    store = (Path(out) / STORE_DIR) if embedded else Path(data.store)
    info = {"name": data.name, "fingerprint": data.fingerprint(), "num_nodes": data.num_nodes,
            "num_edges": data.graph.num_edges, "num_features": data.num_features,
            "num_classes": int(data.num_classes), **store_paths(store, out),
            "store_embedded": embedded, "path": None, "size": None, "mtime_ns": None}
    if source_path is not None and Path(source_path).is_file():
        st = Path(source_path).stat()
        info.update(path=str(Path(source_path).resolve()), size=st.st_size,
                    mtime_ns=st.st_mtime_ns)
    return info
