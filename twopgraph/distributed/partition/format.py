"""The on-disk format of a self-dependence partition folder: file names,
:data:`FORMAT_VERSION`, the arrays of each representation of a part, and the record
``meta.json`` keeps of every array (dtype, shape, value range, content fingerprint).
:mod:`twopgraph.distributed.partition.selfdep` writes such a folder,
:mod:`twopgraph.distributed.partition.load` reads it and
:mod:`twopgraph.distributed.partition.check` checks its parts.

On-disk layout (``OUT/``), every array a plain ``.npy`` file that can be memory-mapped::

    meta.json            format (FORMAT_VERSION), partition_id (= partition_fingerprint),
                         cluster_key (the fine clustering's cache key), source {name,
                         fingerprint (GraphData.fingerprint of the source: CSR, features,
                         labels, splits), store (the store folder: relative to OUT when
                         the two share a parent folder other than /, else absolute; older
                         partitions: absolute), store_absolute (its absolute path when
                         written; the fallback where the relative one finds nothing),
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
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from twopgraph.core.fingerprint import fingerprint
from twopgraph.errors import TwopgraphError
from twopgraph.graph.io import SPLITS

# 4: no features in the parts (read from the dataset's store), a global or local representation
#    per part; 3: meta.json records every part array (dtype, shape, value range, content
#    fingerprint), and loading checks them; 2: partition_id is the provenance fingerprint,
#    part arrays unchecked; 1: a hash of the CSR, the settings and the time
FORMAT_VERSION = 4
META = "meta.json"
PART_JSON = "part.json"
#: Folder of the store written inside a partition whose data had none.
STORE_DIR = "store"
#: File of the fine cluster of every vertex, written when a part is global.
ROOT_CLUSTER = "cluster.npy"
_LOCAL_ARRAYS = ("indptr", "indices", "label", *SPLITS, "node_ids", "degree", "cluster")
_GLOBAL_ARRAYS = ("owned", *SPLITS)
_ARRAYS = {"local": _LOCAL_ARRAYS, "global": _GLOBAL_ARRAYS}


class PartitionError(TwopgraphError):
    """A partition folder is missing, stale, damaged or does not fit the run."""


def store_paths(store: str | os.PathLike, folder: str | os.PathLike) -> dict:
    """``meta.json``'s record of the ``store`` folder a partition in ``folder`` reads:
    ``store`` relative to ``folder`` when both lie under one parent folder other than the
    file system's root (a partition moved together with its store, to another folder or
    machine, still finds it), else absolute; ``store_absolute``: the absolute path."""
    store_abs = Path(store).resolve()
    folder_abs = Path(folder).resolve()
    common = Path(os.path.commonpath([store_abs, folder_abs]))
    rel = common != Path(common.anchor)
    return {"store": os.path.relpath(store_abs, folder_abs) if rel else str(store_abs),
            "store_absolute": str(store_abs)}


def source_store(folder: str | os.PathLike, meta: dict) -> Path:
    """The store folder the partition in ``folder`` reads (its ``meta.json`` is ``meta``), an
    absolute path: its own ``store/`` when it was written there; else ``source.store``, a
    relative one taken from ``folder`` (:func:`store_paths`), falling back to
    ``source.store_absolute`` when that finds no folder and the absolute one does."""
    src = meta["source"]
    if src.get("store_embedded"):
        return (Path(folder) / STORE_DIR).resolve()
    path = Path(src["store"])
    if path.is_absolute():
        return path
    here = (Path(folder) / path).resolve()
    alt = src.get("store_absolute")
    if not here.is_dir() and isinstance(alt, str) and Path(alt).is_dir():
        return Path(alt)
    return here


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
    fingerprint (:func:`~twopgraph.core.fingerprint.fingerprint` of kind ``partition-array``)."""
    lo, hi = _value_range(arr)
    return {"dtype": arr.dtype.str, "shape": list(arr.shape), "min": lo, "max": hi,
            "fingerprint": fingerprint("partition-array", None, arr)}
