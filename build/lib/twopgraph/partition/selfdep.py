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
                         num_test, num_incomplete (vertices whose row is truncated)
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

A folder is written under a temporary name and renamed when complete. :func:`read_meta` /
:func:`load_part` refuse, with a one-line :class:`~twopgraph.errors.TwopgraphError`, a folder
of another format (format 1 was identified by a hash of the CSR only: re-run
``twopgraph partition``), a part of another partitioning run, arrays whose sizes disagree with
``meta.json``, and a partition whose source ``.npz`` changed since it was written (size or
mtime: a cheap check that needs no hashing of the source at load time).

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
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError, TwopgraphError
from ..fingerprint import fingerprint
from ..graph import SPLITS, CSRGraph, GraphData, atomic_write_bytes
from .cluster import DEFAULT_UFACTOR, cluster_graph, cluster_key, default_num_clusters, edge_cut
from .renumber import cluster_permutation

log = logging.getLogger("twopgraph")

# 2: partition_id is the provenance fingerprint (1: a hash of the CSR, the settings and the time)
FORMAT_VERSION = 2
META = "meta.json"
PART_JSON = "part.json"
# Batch size the default fine clustering is sized for (`default_num_clusters`: the same
# clusters, and cache entry, as `twopgraph train --batch-size 1024`).
DEFAULT_CLUSTER_BATCH = 1024
# Entries gathered per chunk when extracting rows: bounds the temporaries on large graphs.
_CHUNK = 1 << 24
_ARRAYS = ("indptr", "indices", "feat", "label", *SPLITS, "node_ids", "degree", "cluster",
           "owned_indptr", "owned_indices")


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
    reached = _halos(g, owner, data.train_idx, num_parts, hops)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
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
    """``(num_parts, hops, num_clusters)`` checked, with the default cluster count resolved."""
    n, num_train = data.num_nodes, int(data.train_idx.shape[0])
    if isinstance(num_parts, bool) or not isinstance(num_parts, (int, np.integer)) \
            or not 1 <= num_parts <= max(1, num_train):
        raise ConfigError(f"num-parts must be an integer in [1, {num_train}] "
                          f"(the training vertices), got {num_parts!r}")
    if isinstance(hops, bool) or not isinstance(hops, (int, np.integer)) or hops < 0:
        raise ConfigError(f"hops must be an integer >= 0, got {hops!r}")
    if isinstance(num_clusters, bool) or not isinstance(num_clusters, (int, np.integer)) \
            or num_clusters < 0:
        raise ConfigError(f"num-clusters must be an integer >= 0, got {num_clusters!r}")
    k = int(num_clusters) or default_num_clusters(n, num_train, DEFAULT_CLUSTER_BATCH)
    if not num_parts <= k <= n:
        raise ConfigError(f"num-clusters must be in [num-parts {num_parts}, {n}], got {k}")
    return int(num_parts), int(hops), int(k)


def _holds(folder: Path, pid: str) -> bool:
    """Whether ``folder`` holds a readable partition of the current format with id ``pid``
    (its source file may have been touched since: see :func:`_refresh_source`)."""
    try:
        meta = read_meta(folder, check_source=False)
    except PartitionError:
        return False
    return meta["partition_id"] == pid


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
    for name, arr in arrays.items():
        np.save(folder / f"{name}.npy", np.ascontiguousarray(arr))
    info = {"part": p, "partition_id": pid, "num_nodes": int(nloc), "num_owned": int(own.shape[0]),
            "num_halo": int(halo.shape[0]), "num_edges": int(indices.shape[0]),
            "num_train": int(arrays["train_idx"].shape[0]),
            "num_val": int(arrays["val_idx"].shape[0]),
            "num_test": int(arrays["test_idx"].shape[0]),
            "num_incomplete": int(np.count_nonzero(np.diff(indptr) != degree))}
    (folder / PART_JSON).write_text(json.dumps(info, indent=2) + "\n")
    return info


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
        if len(meta["parts"]) != num_parts:
            raise KeyError("parts")
    except (KeyError, TypeError, ValueError):
        raise PartitionError(f"{path}: incomplete meta.json; re-run `twopgraph partition`") \
            from None
    if check_source and src.get("path") and Path(src["path"]).is_file():
        st = Path(src["path"]).stat()
        if st.st_size != src["size"] or st.st_mtime_ns != src["mtime_ns"]:
            raise PartitionError(f"{folder} is stale: its source {src['path']} changed since it "
                                 "was partitioned; re-run `twopgraph partition`")
    return meta


def load_part(folder, index: int, meta: dict | None = None, mmap: bool = True) -> Part:
    """Part ``index`` of the partition in ``folder`` (arrays memory-mapped unless ``mmap`` is
    False); refuses parts of another run or whose arrays disagree with ``meta.json``."""
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
    if info.get("partition_id") != meta["partition_id"]:
        raise PartitionError(f"{pdir} belongs to another partitioning run than {folder / META} "
                             "(stale folder); re-run `twopgraph partition`")
    arr = {}
    for name in _ARRAYS:
        try:
            arr[name] = np.load(pdir / f"{name}.npy", mmap_mode="r" if mmap else None,
                                allow_pickle=False)
        except (OSError, ValueError) as e:
            raise PartitionError(f"{pdir}/{name}.npy: missing or unreadable "
                                 f"({type(e).__name__}); re-run `twopgraph partition`") from None
    n, own, src = info["num_nodes"], info["num_owned"], meta["source"]
    want = {"indptr": (n + 1,), "feat": (n, src["num_features"]), "label": (n,),
            "node_ids": (n,), "degree": (n,), "cluster": (n,), "owned_indptr": (own + 1,),
            "indices": (int(arr["indptr"][-1]),) if arr["indptr"].shape[0] else None,
            "owned_indices": (int(arr["owned_indptr"][-1]),)
            if arr["owned_indptr"].shape[0] else None}
    for name, shape in want.items():
        if arr[name].shape != shape:
            raise PartitionError(f"{pdir}/{name}.npy has shape {arr[name].shape}, expected "
                                 f"{shape} (stale or damaged partition); re-run "
                                 "`twopgraph partition`")
    data = GraphData(CSRGraph(arr["indptr"], arr["indices"]), arr["feat"], arr["label"],
                     *(np.asarray(arr[s]) for s in SPLITS), name=f"{src['name']}/part{p}",
                     node_ids=arr["node_ids"], num_classes=int(src["num_classes"]))
    return Part(p, data, int(own), arr["degree"], arr["cluster"], arr["owned_indptr"],
                arr["owned_indices"], meta)

