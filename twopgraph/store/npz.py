"""``.npz`` files (the exchange format of docs/formats.md) into stores and back, streaming:
:func:`convert_npz` reads each zip member in chunks of :data:`~twopgraph.store.reader.CHUNK_BYTES`
and writes it to its ``.npy`` file of the store (:mod:`twopgraph.store.writer`), so an ``.npz``
whose feature table is larger than memory converts within a few chunks of memory; the store is
validated once. :func:`export_npz` writes any dataset, memory-mapped included, as an ``.npz``
the same way. The ``.npy`` stream readers (:func:`read_npy_header`, :func:`npy_chunks`) and
the member writer (:func:`write_npy_member`) serve the raw-dataset ingestion too.

Example::

    >>> path = convert_npz("cora.npz", "/tmp/stores/cora")          # doctest: +SKIP
"""

from __future__ import annotations

import io
import logging
import os
import time
import zipfile
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
from numpy.typing import DTypeLike

from twopgraph.errors import GraphFormatError
from twopgraph.graph.data import GraphData
from twopgraph.graph.io import SPLITS
from twopgraph.store.reader import _READ_ERRORS, ARRAYS, CHUNK_BYTES, source_identity
from twopgraph.store.writer import StoreWriter, _row_chunks, half_checked, progress_bar

log = logging.getLogger("twopgraph")


def read_npy_header(f: io.BufferedIOBase,
                    where: str) -> tuple[tuple[int, ...], bool, np.dtype]:
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


def npy_chunks(f: io.BufferedIOBase, shape: tuple[int, ...], dtype: np.dtype,
               where: str) -> Iterator[np.ndarray]:
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


def convert_npz(npz: str | os.PathLike, folder: str | os.PathLike, *, progress: bool = False,
                name: str | None = None, source_key: str | None = None,
                feat_dtype: DTypeLike | None = None) -> Path:
    """Convert the exchange-format ``.npz`` at ``npz`` into a store at ``folder``, streaming: each
    member is read and written in chunks (an ``.npz`` larger than memory converts), then the
    store is validated once. Any problem is a one-line :class:`GraphFormatError` naming the
    file; nothing is left at ``folder`` then. ``source_key`` is recorded with the file's
    identity (the data root's key for it; :func:`source_identity`). ``feat_dtype``
    (``float16``) stores the features in that type instead of the file's (float32 or float16
    kept, others float32). Keys outside the format are named in one warning and ignored.
    Returns the folder."""
    from twopgraph.graph.io import REQUIRED_KEYS
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
    with zf, StoreWriter(folder) as w:
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
        with progress_bar(total, f"convert {npz.name}", progress) as bar:
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


def warn_extra_keys(path: str | os.PathLike, keys: Iterable[str],
                    known: Collection[str]) -> list[str]:
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
        shape, _, dtype = read_npy_header(f, f"{npz}:num_classes")
        if shape != () or not np.issubdtype(dtype, np.integer):
            raise GraphFormatError(f"{npz}: 'num_classes' must be an integer scalar")
        return int(next(npy_chunks(f, (1,), dtype, f"{npz}:num_classes"))[0])


def _convert_member(zf, member, key: str, npz: Path, w: StoreWriter, bar,
                    feat_dtype=None) -> None:
    where = f"{npz}: '{key}'"
    try:
        f = zf.open(member)
    except _READ_ERRORS as e:
        raise GraphFormatError(f"{where}: unreadable ({type(e).__name__}: {e})") from None
    with f:
        shape, fortran, dtype = read_npy_header(f, where)
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
            chunks = npy_chunks(f, shape, dtype, where)
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


def export_npz(data: GraphData, path: str | os.PathLike) -> Path:
    """Write ``data`` as an exchange-format ``.npz`` (uncompressed, zip64), streaming each array in
    chunks so a memory-mapped table larger than memory can be exported. Atomic (temp file,
    then rename)."""
    from twopgraph.core.files import atomic_write_bytes
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


def write_npy_member(zf: zipfile.ZipFile, key: str, shape: Sequence[int], dtype: DTypeLike,
                     chunks: Iterable[np.ndarray]) -> None:
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
