"""The check of one part of a partition folder against its ``meta.json``
(:func:`check_part`): every array's dtype, shape and value range, the invariants of the layout
(:mod:`twopgraph.distributed.partition.format`) and last its content fingerprint, which catches what
keeps shapes and ranges (zeroed labels, permuted ids). Each failure is one line naming the file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from twopgraph.core.fingerprint import fingerprint
from twopgraph.distributed.partition.format import _ARRAYS, PartitionError, _value_range
from twopgraph.graph.io import SPLITS


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


def check_part(pdir: Path, arr: dict, meta: dict, p: int) -> None:
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

    def splits_disjoint(high, positions):
        """Every split's ids in [0, high), increasing, and (by ``positions(split, ids)``,
        the owned rows they name) in no other split."""
        taken = np.zeros(own, dtype=bool)
        for s in SPLITS:
            idx = arr[s]
            if not idx.shape[0]:
                continue
            bounded(s, 0, high)
            increasing(s)
            pos = positions(s, idx)
            if taken[pos].any():
                raise _damaged(pdir, s, "ids also in another split")
            taken[pos] = True

    def increasing(name):
        a = arr[name]
        if a.shape[0] > 1 and np.any(a[1:] <= a[:-1]):
            raise _damaged(pdir, name, "not sorted or repeated ids")

    if info["representation"] == "global":
        bounded("owned", 0, big_n)
        increasing("owned")
        owned = arr["owned"]

        def owned_positions(s, idx):  # a global part's splits hold global ids of owned rows
            pos = np.minimum(np.searchsorted(owned, idx), max(own - 1, 0))
            if not own or not np.array_equal(owned[pos], idx):
                raise _damaged(pdir, s, "ids of vertices the part does not own")
            return pos
        splits_disjoint(big_n, owned_positions)
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
        def labelled(s, idx):  # a local part's splits hold local ids, labelled ones
            if int(arr["label"][idx].min()) < 0:
                raise _damaged(pdir, "label", f"unlabelled (-1) vertices in {s}")
            return idx
        splits_disjoint(own, labelled)
    for name in names:  # last: the content itself
        if fingerprint("partition-array", None, arr[name]) != recs[name]["fingerprint"]:
            raise _damaged(pdir, name, "content differs from its fingerprint in meta.json")
