"""The dataset store: one folder of memory-mappable arrays per dataset, shared by every process.

Every consumer (training, evaluation, the benchmarks, partitioning, each rank of a distributed
run) reads a dataset through read-only memory maps of its store, so P processes on one machine
share one copy of the features and of the graph in the page cache, and a feature table larger
than memory is paged in from disk as it is read (no process makes a private copy of it).

Layout of a store folder (every array a plain ``.npy`` file, C order, native byte order)::

    indptr.npy     int64 (N+1)      CSR of the undirected graph
    indices.npy    int32 | int64 (E)
    feat.npy       float32 | float16 (N x F)
    label.npy      int64 (N)        class ids, -1 = unlabelled
    train_idx.npy, val_idx.npy, test_idx.npy   int64, sorted vertex ids
    node_ids.npy   int64 (N)        original id of each vertex (renumbered stores only)
    store.json     {"format": "twopgraph-store", "version", "name", "num_nodes", "num_edges",
                    "num_features", "num_classes", "feat_dtype", "fingerprint" (the
                    GraphData.fingerprint of the content), "undirected_problem" (null, or why
                    the graph is not undirected), "undirected" (true when checked or
                    known by construction), "arrays": {name: {"dtype", "shape",
                    "bytes"}}, "source": {"path", "size", "mtime_ns"} or null, "derived"}

Opening a store checks only ``store.json`` against the files (dtype, shape, size: cheap), so a
truncated, foreign or inconsistent folder is a one-line :class:`GraphFormatError`; files
whose identity (size, times, inode) changed since they were written are fingerprinted again.
Stores are written by :mod:`twopgraph.store.writer` (from data in memory or memory-mapped, and
renumbered stores) and converted from ``.npz`` files by :mod:`twopgraph.store.npz`.

Example::

    >>> from twopgraph.store.npz import convert_npz
    >>> path = convert_npz("cora.npz", "/tmp/stores/cora")          # doctest: +SKIP
    >>> data = open_store(path)                                      # doctest: +SKIP
    >>> type(data.feat).__name__, data.store == path                 # doctest: +SKIP
    ('memmap', True)
"""

from __future__ import annotations

import json
import logging
import os
import time
import weakref
import zipfile
import zlib
from pathlib import Path

import numpy as np

from twopgraph.core.files import atomic_write_bytes
from twopgraph.errors import GraphFormatError
from twopgraph.graph.data import CSRGraph, GraphData
from twopgraph.graph.io import SPLITS
from twopgraph.store import mapped as livemap
from twopgraph.store.mapped import StoreChanged

log = logging.getLogger("twopgraph")

STORE_FORMAT = "twopgraph-store"
STORE_VERSION = 1
STORE_META = "store.json"
#: Bytes of one array read or written at a time by conversion and copies (bounds memory).
CHUNK_BYTES = 64 << 20
ARRAYS = ("indptr", "indices", "feat", "label", *SPLITS, "node_ids")
_OPTIONAL = ("node_ids",)
# What numpy, zipfile and zlib raise for a damaged archive or member.
_READ_ERRORS = (OSError, ValueError, zipfile.BadZipFile, EOFError, zlib.error)


# ----------------------------------------------------------------------------------------------
# reading
# ----------------------------------------------------------------------------------------------
class NotUndirected(GraphFormatError):
    """A store whose graph is not undirected (``problem`` says why), opened for a run that
    needs the dataset format (no ``--symmetrize``)."""

    def __init__(self, folder: str | os.PathLike, problem: str) -> None:
        super().__init__(f"{folder}: {problem}")
        self.problem = problem


def is_store(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a folder holding a ``store.json`` (complete or not: see
    :func:`open_store` for the checks)."""
    p = Path(path)
    return p.is_dir() and (p / STORE_META).is_file()


def read_store_meta(path: str | os.PathLike) -> dict:
    """``store.json`` of the store at ``path``, checked for format and required keys."""
    folder = Path(path)
    meta_path = folder / STORE_META
    if not folder.is_dir():
        raise GraphFormatError(f"{folder}: no such store folder")
    if not meta_path.is_file():
        raise GraphFormatError(f"{folder} is not a twopgraph store (no {STORE_META}); a .npz "
                               f"file or a dataset name converts into one")
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as e:
        raise GraphFormatError(f"{meta_path}: unreadable ({type(e).__name__}); delete the "
                               f"folder to rebuild it") from None
    if not isinstance(meta, dict) or meta.get("format") != STORE_FORMAT:
        raise GraphFormatError(f"{folder}: {STORE_META} is not a twopgraph store's")
    if meta.get("version") != STORE_VERSION:
        raise GraphFormatError(f"{folder}: store version {meta.get('version')!r}, this "
                               f"twopgraph reads {STORE_VERSION}; delete it to rebuild it")
    try:
        for k in ("num_nodes", "num_edges", "num_features", "num_classes"):
            int(meta[k])
        str(meta["fingerprint"])
        for name in ARRAYS:
            if name in _OPTIONAL and name not in meta["arrays"]:
                continue
            rec = meta["arrays"][name]
            np.dtype(rec["dtype"]), [int(x) for x in rec["shape"]], int(rec["bytes"])
    except (KeyError, TypeError, ValueError):
        raise GraphFormatError(f"{meta_path}: incomplete store metadata; delete the folder to "
                               f"rebuild it") from None
    return meta


def open_store(path: str | os.PathLike, name: str | None = None,
               check_symmetric: bool = True) -> GraphData:
    """The dataset of the store at ``path``, every array a read-only memory map.

    Checks ``store.json`` against every file (dtype, shape, file size) and refuses, in one
    line, a store whose graph is not undirected when ``check_symmetric`` (the dataset format;
    ``--symmetrize`` passes False and repairs it). The content itself was validated when the
    store was written. ``data.store`` is the resolved folder; ``data.fingerprint()`` is taken
    from ``store.json`` (no hashing).
    """
    folder = Path(path).resolve()
    meta = read_store_meta(folder)
    arrays = {}
    for key in ARRAYS:
        rec = meta["arrays"].get(key)
        if rec is None:
            arrays[key] = None
            continue
        file = folder / f"{key}.npy"
        try:
            arr = np.load(file, mmap_mode="r", allow_pickle=False)
        except FileNotFoundError:
            raise GraphFormatError(f"{folder}: {key}.npy is missing (incomplete store); delete "
                                   f"the folder to rebuild it") from None
        except _READ_ERRORS as e:
            raise GraphFormatError(f"{file}: unreadable or truncated ({type(e).__name__}); "
                                   f"delete the store folder to rebuild it") from None
        shape = tuple(int(x) for x in rec["shape"])
        if arr.dtype != np.dtype(rec["dtype"]) or arr.shape != shape or \
                arr.nbytes != int(rec["bytes"]):
            raise GraphFormatError(f"{file} disagrees with {STORE_META}: {arr.dtype} "
                                   f"{arr.shape}, expected {rec['dtype']} {shape}; delete "
                                   f"the store folder to rebuild it")
        arrays[key] = arr
        livemap.register(arr, file)
    n = int(meta["num_nodes"])
    if arrays["indptr"].shape != (n + 1,) or arrays["feat"].shape[0] != n or \
            arrays["indices"].shape[0] != int(meta["num_edges"]) or \
            arrays["feat"].shape[1] != int(meta["num_features"]):
        raise GraphFormatError(f"{folder}: array sizes disagree with the vertex and edge counts "
                               f"of {STORE_META}; delete the folder to rebuild it")
    if check_symmetric and meta.get("undirected_problem"):
        raise NotUndirected(folder, meta["undirected_problem"])
    graph = CSRGraph(arrays["indptr"], arrays["indices"])
    if meta.get("undirected") is True:  # known when the store was written: not checked again
        object.__setattr__(graph, "_undirected", True)
    data = GraphData(graph, arrays["feat"], arrays["label"], arrays["train_idx"],
                     arrays["val_idx"], arrays["test_idx"],
                     name=name if name is not None else str(meta.get("name") or folder.name),
                     node_ids=arrays["node_ids"], num_classes=int(meta["num_classes"]),
                     store=folder)
    if meta.get("files") and _identity_changed(folder, meta):
        _check_content(data, folder, meta)
    _adopt_fingerprint(data, str(meta["fingerprint"]))
    return data


def file_identity(path: str | os.PathLike) -> dict:
    """What tells a file's content has not been touched since: ``size``, ``mtime_ns``,
    ``inode``, ``ctime_ns`` (an in-place rewrite changes the times, a replacement the inode;
    the change time cannot be set back by a user)."""
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino,
            "ctime_ns": st.st_ctime_ns}


def files_changed(folder: str | os.PathLike, meta: dict) -> list[str]:
    """The arrays of the store at ``folder`` whose file identity differs from its
    ``store.json`` ``meta``'s ``files`` (none for an older store without them): their content
    may differ from what its ``fingerprint`` vouches for. A few ``stat`` calls."""
    return _identity_changed(Path(folder), meta) if meta.get("files") else []


def _identity_changed(folder: Path, meta: dict) -> list[str]:
    """The arrays of the store whose file identity differs from ``store.json``'s ``files``."""
    changed = []
    for key, rec in meta["files"].items():
        try:
            now = file_identity(folder / f"{key}.npy")
        except OSError:
            now = None
        if now != {k: rec.get(k) for k in ("size", "mtime_ns", "inode", "ctime_ns")}:
            changed.append(key)
    return changed


def _check_content(data: GraphData, folder: Path, meta: dict) -> None:
    """A store whose files' identity changed since it was written (copied, touched, or
    rewritten in place): fingerprint the content again (one read of every array). The same
    content: ``store.json`` takes the new identity (where writable), so the next open is cheap
    again. Other content: :class:`~twopgraph.store.mapped.StoreChanged` (one line; the loaders of
    stores converted from a source rebuild them with one warning, a store folder given by
    path is refused)."""
    changed = _identity_changed(folder, meta)
    t = time.perf_counter()
    fp = data.fingerprint()
    log.debug("re-fingerprinted %s in %.1f s", folder, time.perf_counter() - t)
    if fp != str(meta["fingerprint"]):
        names = ", ".join(f"{k}.npy" for k in changed)
        what = (f"{names} changed since the store was written (the content no longer matches "
                f"the fingerprint in {STORE_META}: modified in place?)")
        raise StoreChanged(f"{folder}: {what}; delete the folder to rebuild it from its source",
                           what=what)
    log.info("store %s: %s touched or copied since it was written, content unchanged "
             "(fingerprinted again)", folder, ", ".join(f"{k}.npy" for k in changed))
    rewrite_meta(folder, dict(meta, files={k: file_identity(folder / f"{k}.npy")
                                           for k in meta["files"]}))


def rewrite_meta(folder: str | os.PathLike, meta: dict) -> bool:
    """Replace the ``store.json`` of the store at ``folder`` by ``meta`` (atomically: temporary
    file, then rename); False where the folder is not writable (nothing changes then)."""
    text = (json.dumps(meta, indent=1) + "\n").encode()
    try:
        atomic_write_bytes(Path(folder) / STORE_META, lambda f: f.write(text))
        return True
    except OSError:  # a read-only store (OutputError is one too): checked again next time
        return False


def source_digest(path: str | os.PathLike) -> str:
    """blake2b digest (16 bytes, hex) of the bytes of the file at ``path``, read
    :data:`CHUNK_BYTES` at a time: tells a source file copied elsewhere (another inode and
    change time, same bytes) from one replaced by other content of the same size and mtime."""
    import hashlib
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            h.update(chunk)
    return h.hexdigest()


def source_identity(path: str | os.PathLike, key: str | None) -> dict:
    """What :func:`twopgraph.datasets` records of a source file in ``store.json``'s
    ``source``: ``path``, ``key``, ``size``, ``mtime_ns``, ``inode``, ``ctime_ns`` and
    ``digest`` (:func:`source_digest`)."""
    path = Path(path)
    st = path.stat()
    return {"path": str(path.resolve()), "key": key, "size": st.st_size,
            "mtime_ns": st.st_mtime_ns, "inode": st.st_ino, "ctime_ns": st.st_ctime_ns,
            "digest": source_digest(path)}


def _adopt_fingerprint(data: GraphData, fp: str) -> None:
    """Cache ``fp`` as ``data.fingerprint()`` (the value :meth:`GraphData.fingerprint` keeps for
    these very arrays; it recomputes if a field is reassigned)."""
    arrays = (data.graph, data.feat, data.label, data.train_idx, data.val_idx, data.test_idx,
              data.node_ids)
    data._fingerprint = (tuple(None if a is None else weakref.ref(a) for a in arrays),
                         data.num_classes, fp)


def disk_bytes(path: str | os.PathLike) -> int:
    """Bytes of the arrays of the store at ``path`` (from its metadata)."""
    meta = read_store_meta(path)
    return sum(int(r["bytes"]) for r in meta["arrays"].values())
