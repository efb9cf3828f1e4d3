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

A store is written under a temporary name (:mod:`twopgraph.files`) beside it and renamed when
complete, so a writer killed half-way never leaves a folder that reads as a store; the
temporary folders of dead writers on this host are removed by the next write beside them.
Conversion validates the content once (:meth:`GraphData.validate`, features read in chunks);
opening a store checks only ``store.json`` against the files (dtype, shape, size: cheap), so a
truncated, foreign or inconsistent folder is a one-line :class:`GraphFormatError`.

``.npz`` files (the exchange format of docs/formats.md) are converted *streaming*: each zip member is
read in chunks of :data:`CHUNK_BYTES` and written to its ``.npy`` file, so an ``.npz`` whose
feature table is larger than memory converts within a few chunks of memory.

Example::

    >>> path = convert_npz("cora.npz", "/tmp/stores/cora")          # doctest: +SKIP
    >>> data = open_store(path)                                      # doctest: +SKIP
    >>> type(data.feat).__name__, data.store == path                 # doctest: +SKIP
    ('memmap', True)
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import weakref
import zipfile
import zlib
from pathlib import Path

import numpy as np

from . import livemap
from .errors import GraphFormatError, OutputError, TwopgraphError
from .files import atomic_write_bytes, host_tag, output_error, sweep_orphans, temp_folder
from .graph import CSRGraph, GraphData, check_permutation, inverse_permutation
from .graphio import SPLITS
from .graphkernels import permute_csr
from .livemap import StoreChanged

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

    def __init__(self, folder, problem: str):
        super().__init__(f"{folder}: {problem}")
        self.problem = problem


def is_store(path) -> bool:
    """Whether ``path`` is a folder holding a ``store.json`` (complete or not: see
    :func:`open_store` for the checks)."""
    p = Path(path)
    return p.is_dir() and (p / STORE_META).is_file()


def read_store_meta(path) -> dict:
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


def open_store(path, name: str | None = None, check_symmetric: bool = True) -> GraphData:
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


def file_identity(path) -> dict:
    """What tells a file's content has not been touched since: ``size``, ``mtime_ns``,
    ``inode``, ``ctime_ns`` (an in-place rewrite changes the times, a replacement the inode;
    the change time cannot be set back by a user)."""
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino,
            "ctime_ns": st.st_ctime_ns}


def files_changed(folder, meta: dict) -> list[str]:
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
    again. Other content: :class:`~twopgraph.livemap.StoreChanged` (one line; the loaders of
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


def rewrite_meta(folder, meta: dict) -> bool:
    """Replace the ``store.json`` of the store at ``folder`` by ``meta`` (atomically: temporary
    file, then rename); False where the folder is not writable (nothing changes then)."""
    text = (json.dumps(meta, indent=1) + "\n").encode()
    try:
        atomic_write_bytes(Path(folder) / STORE_META, lambda f: f.write(text))
        return True
    except OSError:  # a read-only store (OutputError is one too): checked again next time
        return False


def source_digest(path) -> str:
    """blake2b digest (16 bytes, hex) of the bytes of the file at ``path``, read
    :data:`CHUNK_BYTES` at a time: tells a source file copied elsewhere (another inode and
    change time, same bytes) from one replaced by other content of the same size and mtime."""
    import hashlib
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            h.update(chunk)
    return h.hexdigest()


def source_identity(path, key: str | None) -> dict:
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


def disk_bytes(path) -> int:
    """Bytes of the arrays of the store at ``path`` (from its metadata)."""
    meta = read_store_meta(path)
    return sum(int(r["bytes"]) for r in meta["arrays"].values())


# ----------------------------------------------------------------------------------------------
# writing
# ----------------------------------------------------------------------------------------------
class _Writer:
    """A store being written: arrays go to a temporary folder beside ``folder``; :meth:`commit`
    validates, fingerprints, writes ``store.json`` and renames it into place."""

    def __init__(self, folder):
        self.folder = Path(folder).absolute()
        parent = self.folder.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
            clean_orphans(parent)
            self.tmp = temp_folder(self.folder)
        except OSError as e:
            raise _write_error(self.folder, e) from e
        self.records = {}

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if kind is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return False

    def put(self, name: str, shape: tuple, dtype, chunks) -> None:
        """Write array ``name`` of ``shape``/``dtype`` from ``chunks`` (an iterable of arrays
        whose concatenation along axis 0 is the array), one chunk in memory at a time."""
        dtype = np.dtype(dtype).newbyteorder("=")
        header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                  "shape": tuple(int(x) for x in shape)}
        path = self.tmp / f"{name}.npy"
        total = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        written = 0
        try:
            with open(path, "wb") as f:
                np.lib.format.write_array_header_2_0(f, header)
                for chunk in chunks:
                    c = np.ascontiguousarray(chunk, dtype=dtype)
                    f.write(c.reshape(-1).view(np.uint8).data)
                    written += c.nbytes
        except OSError as e:
            raise _write_error(self.folder, e) from e
        if written != total:
            raise AssertionError(f"{name}: wrote {written} of {total} bytes")
        self.records[name] = {"dtype": dtype.str, "shape": list(header["shape"]),
                              "bytes": total}

    def adopt(self, name: str, path) -> None:
        """Take the ``.npy`` file at ``path`` (written by someone else, e.g. the CSR builder)
        as array ``name`` of the store: moved into the store's folder, recorded as it is."""
        path = Path(path)
        target = self.tmp / f"{name}.npy"
        try:
            if path != target:
                os.replace(path, target)
            arr = np.load(target, mmap_mode="r", allow_pickle=False)
        except OSError as e:
            raise _write_error(self.folder, e) from e
        self.records[name] = {"dtype": arr.dtype.str, "shape": list(arr.shape),
                              "bytes": int(arr.nbytes)}

    def scratch(self, name: str) -> Path:
        """A path for a temporary file inside the store being written (removed with it if the
        write fails; the caller removes it before :meth:`commit`)."""
        return self.tmp / name

    def put_array(self, name: str, arr: np.ndarray, dtype=None) -> None:
        """Write ``arr`` (any array, memory-mapped included), in row chunks."""
        dtype = arr.dtype if dtype is None else np.dtype(dtype)
        self.put(name, arr.shape, dtype, _row_chunks(arr))

    def commit(self, meta: dict, validate: bool, progress: bool = False,
               undirected: bool = False) -> Path:
        """Validate (``validate``), fingerprint, write ``store.json``, rename into place.
        ``undirected``: the graph is undirected by construction (the CSR builder's, or a
        renumbering of a graph known undirected), so its O(E) check is skipped. ``store.json``
        records ``undirected`` true only when it was checked or known so; a store opened
        with it is not checked again (:meth:`~twopgraph.graph.CSRGraph.undirected_problem`)."""
        data = open_store_arrays(self.tmp, self.records, meta)
        problem = None
        if validate:
            data.validate(check_symmetric=False)
            if not undirected:
                problem = data.graph.undirected_problem()
        t = time.perf_counter()
        fp = data.fingerprint()
        log.debug("fingerprinted %s in %.1f s", self.folder.name, time.perf_counter() - t)
        full = {"format": STORE_FORMAT, "version": STORE_VERSION, **meta,
                "num_nodes": data.num_nodes, "num_edges": data.graph.num_edges,
                "num_features": data.num_features, "num_classes": int(data.num_classes),
                "feat_dtype": str(data.feat.dtype), "fingerprint": fp,
                "undirected_problem": problem,
                "undirected": bool(undirected or (validate and problem is None)),
                "arrays": self.records}
        del data
        try:  # what tells later opens that the files are as written (checked by open_store)
            full["files"] = {k: file_identity(self.tmp / f"{k}.npy") for k in self.records}
        except OSError as e:
            raise _write_error(self.folder, e) from e
        try:
            with open(self.tmp / STORE_META, "w") as f:
                f.write(json.dumps(full, indent=1) + "\n")
                f.flush()
                os.fsync(f.fileno())
            _replace_folder(self.tmp, self.folder)
        except OSError as e:
            raise _write_error(self.folder, e) from e
        return self.folder


def open_store_arrays(folder: Path, records: dict, meta: dict) -> GraphData:
    """The arrays written so far into ``folder`` as a :class:`GraphData` (for validation and
    fingerprinting before ``store.json`` exists)."""
    arr = {k: (np.load(folder / f"{k}.npy", mmap_mode="r") if k in records else None)
           for k in ARRAYS}
    return GraphData(CSRGraph(arr["indptr"], arr["indices"]), arr["feat"], arr["label"],
                     arr["train_idx"], arr["val_idx"], arr["test_idx"],
                     name=str(meta.get("name", "")), node_ids=arr["node_ids"],
                     num_classes=int(meta.get("num_classes", -1)))


def _replace_folder(tmp: Path, folder: Path) -> None:
    """Rename the complete ``tmp`` to ``folder``, replacing an older store there. If another
    writer finished the same store first, theirs is kept and ``tmp`` removed."""
    if folder.exists():
        old = folder.parent / f".{folder.name}.old-{os.getpid()}-{host_tag()}"
        try:
            os.rename(folder, old)
        except FileNotFoundError:
            old = None
        try:
            os.rename(tmp, folder)
        finally:
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        return
    try:
        os.rename(tmp, folder)
    except OSError:
        if is_store(folder):  # a concurrent writer of the same store won the race
            shutil.rmtree(tmp, ignore_errors=True)
            return
        raise


def _write_error(folder: Path, e: OSError) -> TwopgraphError:
    if isinstance(e, OutputError):
        return e
    return output_error(folder, e, None)


def clean_orphans(parent) -> list[Path]:
    """Remove temporary store folders in ``parent`` whose writer (a process of this host) is
    gone; returns what was removed."""
    return sweep_orphans(parent, accept=Path.is_dir)


def _row_chunks(arr: np.ndarray, rows: np.ndarray | None = None):
    """``arr`` (or ``arr[rows]``) in chunks of about :data:`CHUNK_BYTES`."""
    n = arr.shape[0] if rows is None else rows.shape[0]
    row_bytes = max(1, arr.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64)))
    step = max(1, CHUNK_BYTES // row_bytes)
    for a in range(0, n, step):
        if rows is None:
            yield arr[a:a + step]
        else:
            yield _take_rows(arr, rows[a:a + step])


def _take_rows(arr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``arr[rows]``, read in ascending row order (near-sequential reads of a memory map)."""
    order = np.argsort(rows, kind="stable")
    out = np.empty((rows.shape[0],) + arr.shape[1:], dtype=arr.dtype)
    out[order] = arr[rows[order]]
    return out


#: Copies smaller than this show no progress bar (they take a moment).
PROGRESS_MIN_BYTES = 256 << 20


def _progress(total: int, desc: str, enabled: bool):
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
                disable=not enabled or total < PROGRESS_MIN_BYTES, leave=False)


def write_store(data: GraphData, folder, *, source: dict | None = None,
                validate: bool = True, progress: bool = False) -> Path:
    """Write ``data`` (in memory or memory-mapped) as a store at ``folder``, array by array
    in chunks; ``source`` is recorded for staleness checks. Returns the folder."""
    with _Writer(folder) as w:
        with _progress(_data_bytes(data), f"store {Path(folder).name}", progress) as bar:
            for key in ARRAYS:
                arr = data.node_ids if key == "node_ids" else (
                    getattr(data.graph, key) if key in ("indptr", "indices")
                    else getattr(data, key))
                if arr is None:
                    continue
                w.put_array(key, arr)
                bar.update(arr.nbytes)
        meta = {"name": data.name, "num_classes": int(data.num_classes), "source": source,
                "derived": None}
        return w.commit(meta, validate=validate)


def _data_bytes(data: GraphData) -> int:
    return (data.graph.indptr.nbytes + data.graph.indices.nbytes + data.feat.nbytes
            + data.label.nbytes + sum(getattr(data, s).nbytes for s in SPLITS))


def permuted_store(data: GraphData, perm: np.ndarray, folder, *,
                   progress: bool = False, key: str | None = None) -> GraphData:
    """``data.permute(perm)`` written as a store at ``folder`` chunk by chunk (features read in
    ascending row order per chunk, never the whole table in memory) and opened memory-mapped.
    New vertex ``i`` is old vertex ``perm[i]``; ``node_ids`` keeps the original ids."""
    perm = check_permutation(perm, data.num_nodes)
    inv = inverse_permutation(perm)
    g = data.graph
    with _Writer(folder) as w:
        indptr, indices = permute_csr(g.indptr, g.indices, perm, inv)
        w.put_array("indptr", indptr)
        w.put_array("indices", indices)
        del indptr, indices
        with _progress(data.feat.nbytes, "renumber features", progress) as bar:
            def feats():
                for c in _row_chunks(data.feat, perm):
                    bar.update(c.nbytes)
                    yield c
            w.put("feat", data.feat.shape, data.feat.dtype, feats())
        w.put_array("label", _take_rows(data.label, perm))
        for s in SPLITS:
            w.put_array(s, np.sort(inv[getattr(data, s)]))
        w.put_array("node_ids", _take_rows(data.original_ids(), perm))
        meta = {"name": data.name, "num_classes": int(data.num_classes), "source": None,
                "derived": {"from": data.fingerprint(), "key": key,
                             "permutation": "cluster-renumbering"}}
        folder = w.commit(meta, validate=False,
                          undirected=bool(g.__dict__.get("_undirected")))
    out = open_store(folder, name=data.name, check_symmetric=False)
    return out


# ----------------------------------------------------------------------------------------------
# .npz conversion (streaming) and export
# ----------------------------------------------------------------------------------------------
def _read_header(f, where: str):
    """``(shape, fortran_order, dtype)`` of the ``.npy`` stream ``f``."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(f)
        if version == (1, 0):
            return fmt.read_array_header_1_0(f)
        if version == (2, 0):
            return fmt.read_array_header_2_0(f)
        return fmt._read_array_header(f, version)  # 3.0: utf-8 field names
    except _READ_ERRORS as e:
        raise GraphFormatError(f"{where}: not a readable .npy member, damaged or truncated "
                               f"({e})") from None


def _member_chunks(f, shape, dtype, where: str):
    """The array of ``.npy`` stream ``f`` (C order) in row chunks, read :data:`CHUNK_BYTES` at
    a time."""
    n = shape[0] if shape else 1
    row_items = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
    row_bytes = max(1, row_items * dtype.itemsize)
    step = max(1, CHUNK_BYTES // row_bytes)
    for a in range(0, n, step):
        rows = min(step, n - a)
        want = rows * row_bytes
        buf = bytearray(want)
        view = memoryview(buf)
        got = 0
        try:
            while got < want:
                k = f.readinto(view[got:])
                if not k:
                    break
                got += k
        except _READ_ERRORS as e:
            raise GraphFormatError(f"{where}: damaged or truncated ({type(e).__name__}: "
                                   f"{e})") from None
        if got != want:
            raise GraphFormatError(f"{where}: truncated ({a * row_bytes + got:,} of "
                                   f"{n * row_bytes:,} bytes)")
        yield np.frombuffer(buf, dtype=dtype).reshape((rows,) + tuple(shape[1:]))


# dtype each key is stored in (None: keep the source's when it is one of ``_KEEP``)
_TARGET = {"indptr": np.int64, "label": np.int64, "train_idx": np.int64, "val_idx": np.int64,
           "test_idx": np.int64, "node_ids": np.int64, "indices": None, "feat": None}
_KEEP = {"indices": (np.int32, np.int64), "feat": (np.float32, np.float16)}
_FALLBACK = {"indices": np.int64, "feat": np.float32}


class HalfRangeError(GraphFormatError):
    """A feature does not fit float16's range: a float16 store of it is refused."""


#: Largest finite float16 value: features beyond it are refused, not stored as infinity.
HALF_MAX = float(np.finfo(np.float16).max)


def half_checked(chunks, where: str):
    """``chunks`` of features on their way into a float16 store, each checked to lie within
    float16's range (+-65504): a larger value would be stored as an infinity."""
    for c in chunks:
        if c.dtype != np.float16 and c.size:
            big = float(np.max(np.abs(c), initial=0.0))
            if big > HALF_MAX:
                raise HalfRangeError(f"{where}: a feature of magnitude {big:g} does not fit "
                                       f"float16 (largest {HALF_MAX:g}); keep --store-dtype "
                                       f"float32 or scale the features")
        yield c


def convert_npz(npz, folder, *, progress: bool = False, name: str | None = None,
                source_key: str | None = None, feat_dtype=None) -> Path:
    """Convert the exchange-format ``.npz`` at ``npz`` into a store at ``folder``, streaming: each
    member is read and written in chunks (an ``.npz`` larger than memory converts), then the
    store is validated once. Any problem is a one-line :class:`GraphFormatError` naming the
    file; nothing is left at ``folder`` then. ``source_key`` is recorded with the file's
    identity (the data root's key for it; :func:`source_identity`). ``feat_dtype``
    (``float16``) stores the features in that type instead of the file's (float32 or float16
    kept, others float32). Keys outside the format are named in one warning and ignored.
    Returns the folder."""
    from .graphio import REQUIRED_KEYS
    npz = Path(npz)
    _check_npz(npz)
    try:
        source = source_identity(npz, source_key)
    except OSError as e:
        raise GraphFormatError(f"{npz}: cannot read the file ({e.strerror or e})") from None
    try:
        zf = zipfile.ZipFile(npz)
    except _READ_ERRORS as e:
        raise GraphFormatError(f"{npz}: not a readable .npz file, damaged or truncated "
                               f"({type(e).__name__}: {e})") from None
    t = time.perf_counter()
    with zf, _Writer(folder) as w:
        members = {m.filename[:-4]: m for m in zf.infolist() if m.filename.endswith(".npy")}
        missing = [k for k in REQUIRED_KEYS if k not in members]
        if missing:
            raise GraphFormatError(f"{npz}: missing keys {', '.join(missing)}")
        warn_extra_keys(npz, [m.filename.removesuffix(".npy") for m in zf.infolist()],
                        (*ARRAYS, "num_classes"))
        total = sum(members[k].file_size for k in ARRAYS if k in members)
        num_classes = -1
        if "num_classes" in members:
            num_classes = _scalar(zf, members["num_classes"], npz)
        with _progress(total, f"convert {npz.name}", progress) as bar:
            for key in ARRAYS:
                if key not in members:
                    continue
                _convert_member(zf, members[key], key, npz, w, bar, feat_dtype)
        meta = {"name": name if name is not None else npz.stem, "num_classes": num_classes,
                "source": source, "derived": None}
        try:
            out = w.commit(meta, validate=True)
        except GraphFormatError as e:
            raise GraphFormatError(f"{npz}: {e}") from None
    log.debug("converted %s into the store %s in %.1f s", npz, out, time.perf_counter() - t)
    return out


def warn_extra_keys(path, keys, known) -> list[str]:
    """One warning naming the keys of the ``.npz`` at ``path`` that are not in ``known`` (the
    format's keys): they are ignored (e.g. ``edge_weight``: twopgraph's graphs are
    unweighted). Returns them."""
    extra = sorted(k for k in keys if k not in known)
    if extra:
        log.warning("%s: ignoring key%s %s: not part of the dataset format (known: %s; "
                    "docs/formats.md)", path, "s" if len(extra) > 1 else "",
                    ", ".join(repr(k) for k in extra), ", ".join(known))
    return extra


def _check_npz(npz: Path) -> os.stat_result:
    try:
        with open(npz, "rb") as f:
            magic = f.read(6)
        st = npz.stat()
    except FileNotFoundError:
        raise GraphFormatError(f"dataset file not found: {npz}") from None
    except OSError as e:
        raise GraphFormatError(f"{npz}: cannot read the file ({e.strerror or e})") from None
    if not magic.startswith(b"PK"):
        if magic == b"\x93NUMPY":
            raise GraphFormatError(f"{npz} is a .npy file (one array), not a .npz file")
        what = "it is empty" if not magic else "no zip archive signature"
        raise GraphFormatError(f"{npz} is not a .npz file (zip archive; {what})")
    return st


def _scalar(zf, member, npz) -> int:
    with zf.open(member) as f:
        shape, _, dtype = _read_header(f, f"{npz}:num_classes")
        if shape != () or not np.issubdtype(dtype, np.integer):
            raise GraphFormatError(f"{npz}: 'num_classes' must be an integer scalar")
        return int(next(_member_chunks(f, (1,), dtype, f"{npz}:num_classes"))[0])


def _convert_member(zf, member, key: str, npz: Path, w: _Writer, bar,
                    feat_dtype=None) -> None:
    where = f"{npz}: '{key}'"
    try:
        f = zf.open(member)
    except _READ_ERRORS as e:
        raise GraphFormatError(f"{where}: unreadable ({type(e).__name__}: {e})") from None
    with f:
        shape, fortran, dtype = _read_header(f, where)
        if dtype.hasobject:
            raise GraphFormatError(f"{where} holds Python objects (a pickled object array), "
                                   f"which twopgraph does not load; save it as a numeric array")
        integer_keys = ("indptr", "indices", *SPLITS, "node_ids")
        if key == "label" and not np.issubdtype(dtype, np.integer):
            raise GraphFormatError(f"{npz}: 'label' must hold integer class ids (int64; -1 = "
                                   f"unlabelled), got {dtype}")
        if key in integer_keys and not np.issubdtype(dtype, np.integer):
            hint = ("; a boolean mask? list vertex ids with np.flatnonzero(mask)"
                    if dtype == np.bool_ else "")
            raise GraphFormatError(f"{npz}: '{key}' must hold integers (int64 or int32), got "
                                   f"{dtype}{hint}")
        if key == "feat" and not (np.issubdtype(dtype, np.number) or dtype == np.bool_):
            raise GraphFormatError(f"{where} must hold numbers (float32), got {dtype}")
        shape = tuple(int(x) for x in shape)
        if key == "label" and len(shape) == 2 and shape[1] == 1:
            shape = (shape[0],)
        want = {"feat": 2}.get(key, 1)
        if len(shape) != want:
            what = "an N x F matrix" if want == 2 else "a 1-D array"
            raise GraphFormatError(f"{where} must be {what}, got shape {shape}")
        if key == "feat" and shape[1] == 0:
            raise GraphFormatError(f"{where} has 0 columns (shape {shape}): every vertex needs "
                                   f"at least one feature (a column of ones will do)")
        target = _TARGET[key]
        if target is None:
            native = dtype.newbyteorder("=")
            target = native if native.type in _KEEP[key] else _FALLBACK[key]
        half = key == "feat" and feat_dtype is not None and np.dtype(feat_dtype) == np.float16
        if half:
            target = np.dtype(np.float16)
        narrow = None
        if key == "indices" and np.issubdtype(dtype, np.integer) and \
                np.dtype(dtype).itemsize > 4 and "indptr" in w.records:
            n = int(w.records["indptr"]["shape"][0]) - 1
            if n < 2**31:  # compact: half the bytes and bandwidth of int64 ids
                target, narrow = np.int32, n
        if fortran and len(shape) == 2 and shape[1] > 1:
            # column-major on disk: rows are not contiguous; read it whole (rare)
            raw = np.frombuffer(f.read(), dtype=dtype)
            arr = raw.reshape(shape[::-1]).T
            chunks = _row_chunks(arr)
            w.put(key, shape, target, half_checked(chunks, where) if half else chunks)
        else:
            chunks = _member_chunks(f, shape, dtype, where)
            if narrow is not None:
                chunks = (_in_range(c, narrow, where) for c in chunks)
            if half:
                chunks = half_checked(chunks, where)
            w.put(key, shape, target, (_counted(c, bar) for c in chunks))


def _in_range(chunk: np.ndarray, n: int, where: str) -> np.ndarray:
    """``chunk`` of neighbour ids, checked to lie in ``[0, n)`` before it is narrowed to int32
    (a wrapped id could otherwise pass validation)."""
    if chunk.shape[0] and (chunk.min() < 0 or chunk.max() >= n):
        raise GraphFormatError(f"{where}: neighbour ids out of range [0, {n}): min "
                               f"{chunk.min()}, max {chunk.max()}")
    return chunk


def _counted(chunk, bar):
    bar.update(chunk.nbytes)
    return chunk


def export_npz(data: GraphData, path) -> Path:
    """Write ``data`` as an exchange-format ``.npz`` (uncompressed, zip64), streaming each array in
    chunks so a memory-mapped table larger than memory can be exported. Atomic (temp file,
    then rename)."""
    from .files import atomic_write_bytes
    path = Path(path)
    arrays = {"indptr": data.graph.indptr, "indices": data.graph.indices, "feat": data.feat,
              "label": data.label, **{s: getattr(data, s) for s in SPLITS},
              "num_classes": np.asarray(np.int64(data.num_classes))}
    if data.node_ids is not None:
        arrays["node_ids"] = data.node_ids

    def write(f):
        with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            for key, arr in arrays.items():
                write_npy_member(zf, key, arr.shape, arr.dtype,
                                 [arr] if arr.ndim == 0 else _row_chunks(arr))
    atomic_write_bytes(path, write)
    return path


def write_npy_member(zf: zipfile.ZipFile, key: str, shape, dtype, chunks) -> None:
    """Append ``KEY.npy`` (``shape``/``dtype``, C order) to the open zip ``zf`` from
    ``chunks`` (arrays concatenated along axis 0), one chunk in memory at a time."""
    dtype = np.dtype(dtype)
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
              "shape": tuple(int(x) for x in shape)}
    with zf.open(f"{key}.npy", "w", force_zip64=True) as m:
        np.lib.format.write_array_header_2_0(m, header)
        for c in chunks:
            c = np.ascontiguousarray(c, dtype=dtype)
            m.write(c.reshape(-1).view(np.uint8).data)
