"""Reading a self-dependence partition folder: ``meta.json`` (:func:`read_meta`), the store
it was made from (:func:`open_source_store`), one part as a rank trains on it
(:func:`load_part` -> :class:`Part`) and the check of a whole folder (:func:`verify_partition`).

:func:`read_meta` / :func:`load_part` refuse, with a one-line
:class:`~twopgraph.errors.TwopgraphError`, a folder of another format (1: a hash of the CSR
only; 2: part arrays without records; 3: features in every part -- re-run
``twopgraph partition``), a part of another partitioning run, a partition whose source
``.npz`` changed since it was written (size or mtime: a cheap check that needs no hashing of
the source at load time), and a store that is missing or holds other content.

**What each machine needs.** A rank reads ``meta.json``, its own ``part{i}/`` (and
``cluster.npy`` for a ``global`` part) and the dataset's store (found from ``meta.json``:
relative to the folder, else ``store_absolute``; :func:`~twopgraph.distributed.partition.
format.source_store`). When one of them is not on the machine -- a second machine that was
not given a copy -- the error is one line naming what is missing, where it was looked for and
the machine (``socket.gethostname()``), before anything is read from it
(:func:`require_part`, :func:`open_source_store`).

**Integrity.** :func:`load_part` verifies the part it loads
(:func:`~twopgraph.distributed.partition.check.check_part`): every array's dtype, shape, value range
and the invariants of the layout (monotone CSRs, local ids ``<`` the part's vertices,
``node_ids`` distinct and ``<`` N, labels in ``[-1, num_classes)`` and labelled on the
splits, splits sorted, disjoint and owned, ...) against ``meta.json``, then its content
fingerprint, which catches what keeps shapes and ranges (zeroed labels, permuted ids).
:func:`verify_partition` does it for every part and checks that the parts own each vertex
once; ``twopgraph train --partitions DIR --nproc P`` runs it before starting any rank, and
``twopgraph partition`` before reusing a folder (a damaged one is rewritten); both also open
the store and compare its fingerprint (``store.json``: no hashing). Cost: one read of the
part arrays (structure and ids, no features), dominated by hashing (BLAKE2b, 1-2 s/GB per
thread).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from twopgraph.core.fingerprint import fingerprint
from twopgraph.distributed.partition.check import _check_shapes, check_part
from twopgraph.distributed.partition.format import (
    _ARRAYS,
    FORMAT_VERSION,
    META,
    PART_JSON,
    ROOT_CLUSTER,
    PartitionError,
    _value_range,
    source_store,
)
from twopgraph.errors import TwopgraphError
from twopgraph.graph.data import CSRGraph, GraphData
from twopgraph.graph.io import SPLITS
from twopgraph.store.reader import ARRAYS as STORE_ARRAYS
from twopgraph.store.reader import STORE_META, open_store

log = logging.getLogger("twopgraph")

#: What a missing-data error suggests: how the data gets onto a machine.
COPY_HINT = "copy it to this machine or put it on a file system every machine mounts"


def _host() -> str:
    """This machine's name, as errors about missing data name it."""
    return socket.gethostname()


def _unreadable(path: Path, e: BaseException) -> str:
    """How a load error of ``path`` is worded: ``missing or unreadable`` and why; a file
    that is not there names the machine."""
    where = f" on host {_host()}" if isinstance(e, FileNotFoundError) else ""
    return f"{path}: missing or unreadable ({type(e).__name__}{where})"


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


def read_meta(folder: str | os.PathLike, check_source: bool = True) -> dict:
    """``meta.json`` of a partition folder, checked (format, part folders and, with
    ``check_source``, that the source file is unchanged since it was partitioned), with
    ``source.store`` made the absolute path of the store it reads (recorded relative to the
    folder: :func:`~twopgraph.distributed.partition.format.source_store`)."""
    folder = Path(folder)
    path = folder / META
    if not folder.is_dir():
        raise PartitionError(f"partition folder {folder.absolute()} is missing on host "
                             f"{_host()}: {COPY_HINT} (or write one with `twopgraph "
                             "partition`)")
    if not path.is_file():
        raise PartitionError(f"{folder} is not a twopgraph partition (no {META} on host "
                             f"{_host()}); write one with `twopgraph partition`")
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
    src["store"] = str(source_store(folder, meta))  # as found from here: an absolute path
    return meta


def open_source_store(folder: str | os.PathLike, meta: dict) -> GraphData:
    """The store the partition in ``folder`` was made from (:func:`~twopgraph.distributed.
    partition.format.source_store`: ``meta["source"]["store"]``, relative to ``folder`` or
    absolute; the partition's own ``store/`` when it was written there), memory-mapped
    read-only, after checking that its fingerprint is the one partitioned (a store rebuilt
    from a changed source is refused). Raises :class:`PartitionError` (one line)."""
    src = meta["source"]
    path = source_store(folder, meta)
    why = _store_missing(path)
    if why is not None:
        alt = src.get("store_absolute")
        if src.get("store_embedded"):
            where = "written inside the partition folder"
        elif isinstance(alt, str) and Path(alt) != path:
            where = f"from meta.json's source.store; nor at its store_absolute {alt}"
        else:
            where = "from meta.json's source.store"
        raise PartitionError(f"{folder}: the dataset store it reads ({path}) cannot be opened "
                             f"on host {_host()}: {why} ({where}); {COPY_HINT}")
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


def _store_missing(path: Path) -> str | None:
    """What of the store at ``path`` is not on this machine (its folder, ``store.json`` or
    an array file it lists), or None when every file is there."""
    if not path.is_dir():
        return "no such folder"
    try:
        arrays = json.loads((path / STORE_META).read_text())["arrays"]
    except FileNotFoundError:
        return f"no {STORE_META}"
    except (OSError, ValueError, KeyError, TypeError):
        return None  # there but damaged: open_store says how
    if not isinstance(arrays, dict):
        return None
    for key in STORE_ARRAYS:
        if arrays.get(key) is not None and not (path / f"{key}.npy").is_file():
            return f"no {key}.npy (incomplete copy)"
    return None


def require_part(folder: str | os.PathLike, index: int, meta: dict) -> None:
    """Refuse, in one line naming the machine, a part ``index`` of the partition in
    ``folder`` whose folder (or, for a ``global`` part, ``cluster.npy``) is not on this
    machine -- what a rank on a machine without a copy of the partition meets first. Files
    that are there are checked when they are loaded (:func:`load_part`)."""
    folder = Path(folder)
    pdir = folder / f"part{int(index)}"
    need = [pdir]
    if meta["parts"][int(index)]["representation"] == "global":
        need.append(folder / ROOT_CLUSTER)
    for path in need:
        if not path.exists():
            raise PartitionError(f"{path}: missing on host {_host()}, where part {int(index)} "
                                 f"is loaded; every machine needs meta.json, cluster.npy and "
                                 f"the part folders of its ranks: {COPY_HINT}")


def _root_cluster(folder: Path, meta: dict, mmap: bool, verify: bool) -> np.ndarray:
    """``OUT/cluster.npy`` (fine cluster of every vertex), checked against its record."""
    rec, path = meta["arrays"]["cluster"], folder / ROOT_CLUSTER
    try:
        arr = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise PartitionError(f"{_unreadable(path, e)}; re-run `twopgraph partition`") \
            from None
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


def load_part(folder: str | os.PathLike, index: int, meta: dict | None = None,
              mmap: bool = True, verify: bool = True,
              store: GraphData | None = None) -> Part:
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
    require_part(folder, p, meta)  # what this machine lacks, before reading anything
    store = open_source_store(folder, meta) if store is None else store
    try:
        info = json.loads((pdir / PART_JSON).read_text())
    except (OSError, ValueError) as e:
        where = f" on host {_host()}" if isinstance(e, FileNotFoundError) else ""
        raise PartitionError(f"{pdir}: missing or unreadable {PART_JSON}{where}; re-run "
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
            raise PartitionError(f"{_unreadable(pdir / f'{name}.npy', e)}; re-run "
                                 "`twopgraph partition`") from None
    src = meta["source"]
    if verify:
        check_part(pdir, arr, meta, p)
    else:  # sizes only (what every consumer indexes by)
        _check_shapes(pdir, arr, meta, p)
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


def verify_partition(folder: str | os.PathLike, meta: dict | None = None) -> dict:
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
