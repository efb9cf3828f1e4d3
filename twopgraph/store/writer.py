"""Writing a dataset store (the folder format of :mod:`twopgraph.store.reader`): from a
:class:`~twopgraph.graph.data.GraphData` in memory or memory-mapped (:func:`write_store`),
renumbered (:func:`permuted_store`), or array by array from chunks (:class:`StoreWriter`, used by
the ``.npz`` conversion, the ingestion of raw datasets and the synthetic generators).

A store is written under a temporary name (:mod:`twopgraph.core.files`) beside it and renamed when
complete, so a writer killed half-way never leaves a folder that reads as a store; the
temporary folders of dead writers on this host are removed by the next write beside them.
Writing validates the content once (:meth:`GraphData.validate`, features read in chunks),
fingerprints it and records both in ``store.json``. Arrays are written in chunks of about
:data:`~twopgraph.store.reader.CHUNK_BYTES`; features headed for a float16 store are checked to fit
its range (:func:`half_checked`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Literal

import numpy as np
from numpy.typing import DTypeLike

from twopgraph.core.files import host_tag, output_error, sweep_orphans, temp_folder
from twopgraph.errors import GraphFormatError, OutputError, TwopgraphError
from twopgraph.graph.data import CSRGraph, GraphData, check_permutation, inverse_permutation
from twopgraph.graph.io import SPLITS
from twopgraph.graph.kernels import permute_csr
from twopgraph.store.reader import (
    ARRAYS,
    CHUNK_BYTES,
    STORE_FORMAT,
    STORE_META,
    STORE_VERSION,
    file_identity,
    is_store,
    open_store,
)

if TYPE_CHECKING:
    from tqdm import tqdm

log = logging.getLogger("twopgraph")


class StoreWriter:
    """A store being written: arrays go to a temporary folder beside ``folder``; :meth:`commit`
    validates, fingerprints, writes ``store.json`` and renames it into place."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder).absolute()
        parent = self.folder.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
            clean_orphans(parent)
            self.tmp = temp_folder(self.folder)
        except OSError as e:
            raise _write_error(self.folder, e) from e
        self.records = {}

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        if kind is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return False

    def put(self, name: str, shape: tuple, dtype: DTypeLike,
            chunks: Iterable[np.ndarray]) -> None:
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

    def adopt(self, name: str, path: str | os.PathLike) -> None:
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

    def put_array(self, name: str, arr: np.ndarray, dtype: DTypeLike | None = None) -> None:
        """Write ``arr`` (any array, memory-mapped included), in row chunks."""
        dtype = arr.dtype if dtype is None else np.dtype(dtype)
        self.put(name, arr.shape, dtype, _row_chunks(arr))

    def commit(self, meta: dict, validate: bool, progress: bool = False,
               undirected: bool = False) -> Path:
        """Validate (``validate``), fingerprint, write ``store.json``, rename into place.
        ``undirected``: the graph is undirected by construction (the CSR builder's, or a
        renumbering of a graph known undirected), so its O(E) check is skipped. ``store.json``
        records ``undirected`` true only when it was checked or known so; a store opened
        with it is not checked again (:meth:`~twopgraph.graph.data.CSRGraph.undirected_problem`)."""
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


def clean_orphans(parent: str | os.PathLike) -> list[Path]:
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


def progress_bar(total: int, desc: str, enabled: bool) -> tqdm:
    """A tqdm bar of ``total`` bytes named ``desc``; hidden when not ``enabled`` or for less
    than :data:`PROGRESS_MIN_BYTES`."""
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
                disable=not enabled or total < PROGRESS_MIN_BYTES, leave=False)


def write_store(data: GraphData, folder: str | os.PathLike, *, source: dict | None = None,
                validate: bool = True, progress: bool = False) -> Path:
    """Write ``data`` (in memory or memory-mapped) as a store at ``folder``, array by array
    in chunks; ``source`` is recorded for staleness checks. Returns the folder."""
    with StoreWriter(folder) as w:
        with progress_bar(_data_bytes(data), f"store {Path(folder).name}", progress) as bar:
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


def permuted_store(data: GraphData, perm: np.ndarray, folder: str | os.PathLike, *,
                   progress: bool = False, key: str | None = None) -> GraphData:
    """``data.permute(perm)`` written as a store at ``folder`` chunk by chunk (features read in
    ascending row order per chunk, never the whole table in memory) and opened memory-mapped.
    New vertex ``i`` is old vertex ``perm[i]``; ``node_ids`` keeps the original ids."""
    perm = check_permutation(perm, data.num_nodes)
    inv = inverse_permutation(perm)
    g = data.graph
    with StoreWriter(folder) as w:
        indptr, indices = permute_csr(g.indptr, g.indices, perm, inv)
        w.put_array("indptr", indptr)
        w.put_array("indices", indices)
        del indptr, indices
        with progress_bar(data.feat.nbytes, "renumber features", progress) as bar:
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


class HalfRangeError(GraphFormatError):
    """A feature does not fit float16's range: a float16 store of it is refused."""


#: Largest finite float16 value: features beyond it are refused, not stored as infinity.
HALF_MAX = float(np.finfo(np.float16).max)


def half_checked(chunks: Iterable[np.ndarray], where: str) -> Iterator[np.ndarray]:
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
