"""Streaming ingestion: raw graph files read chunk by chunk straight into a dataset store.

Two kinds of input, one path into the store (:func:`ingest`):

* **OGB node-property datasets in OGB's own raw layout** (:func:`ogb_raw`), the files ogb
  downloads, never through ogb's in-memory processing (which needs ~224 GB for
  ogbn-papers100M):

  - binary (ogbn-papers100M): ``raw/data.npz`` with ``edge_index`` (2 x E, int64),
    ``node_feat`` (N x F), ``num_nodes_list``, ``num_edges_list`` (``node_year`` and other
    keys are ignored); ``raw/node-label.npz`` with ``node_label`` (N x 1, float; NaN =
    unlabelled);
  - CSV (ogbn-arxiv, ogbn-products): ``raw/edge.csv.gz`` (E rows ``src,dst``),
    ``raw/node-feat.csv.gz`` (N rows), ``raw/node-label.csv.gz``, ``raw/num-node-list.csv.gz``,
    ``raw/num-edge-list.csv.gz``;
  - the split: ``split/<kind>/{train,valid,test}.csv.gz`` (or ogb's ``split_dict.pt``).

* **the COO exchange format** (:func:`coo_npz`): one ``.npz`` with ``edge_index`` (2 x E or
  E x 2, integer ids, directed or not), ``feat`` (N x F), ``label`` (N; integer class ids, -1
  or NaN = unlabelled), ``train_idx``, ``val_idx``, ``test_idx`` and optionally
  ``num_nodes`` and ``num_classes`` (docs/formats.md).

Every array is read in chunks of about :data:`~twopgraph.store.CHUNK_BYTES`: an uncompressed
(stored) ``.npz`` member is memory-mapped in place; a compressed one is inflated chunk by
chunk (the edge list into a scratch file inside the store being written, removed before it
is committed). The graph is symmetrised, deduplicated and freed of self loops by the bounded
memory CSR builder (:mod:`twopgraph.csrbuild`), and one log line says what changed. Labels
NaN become -1 (outside every split); a fractional or negative label, an edge id
``>= num_nodes``, a feature table of another row count, a split id out of range, a missing or
truncated file: one line (:class:`~twopgraph.errors.GraphFormatError`) naming the file, and
no store (the half-written one is a temporary folder, removed). Memory: the CSR builder's
per-vertex counters (24 bytes per vertex) plus a few chunks; the labels and splits are read
whole (N and split-sized).

Example::

    >>> raw = ogb_raw("ogbn-arxiv", "datasets/ogbn_arxiv", split="time")   # doctest: +SKIP
    >>> ingest(raw, "datasets/stores/ogbn-arxiv-1a2b3c4d", source=None)   # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from .csrbuild import build_csr
from .errors import GraphFormatError, OutputError
from .graphio import SPLITS
from .metrics import available_host_bytes
from .npzstore import _member_chunks, _read_header
from .store import CHUNK_BYTES
from .storewriter import _progress, _Writer, half_checked

log = logging.getLogger("twopgraph")

#: What reading a damaged or truncated raw file raises (zip, gzip, zlib, pandas' parser).
READ_ERRORS = (OSError, EOFError, ValueError, zipfile.BadZipFile, zlib.error, KeyError,
               IndexError, UnicodeDecodeError)
#: The smallest scatter window of the CSR builder (bytes of scratch file written per pass).
SCATTER_MIN_BYTES = 256 << 20
#: ... and at most this fraction (1/N) of the memory the process can still fill.
SCATTER_SHARE = 8
#: The split files' names in OGB's layout, by the store's split names.
OGB_SPLIT_FILES = {"train_idx": "train", "val_idx": "valid", "test_idx": "test"}


# ----------------------------------------------------------------------------------------------
# one array of an .npz, read without loading it
# ----------------------------------------------------------------------------------------------
class NpzMember:
    """Member ``key`` of the ``.npz`` at ``path``: ``shape``, ``dtype``, ``fortran`` (memory
    order), ``stored`` (uncompressed: memory-mappable in place) -- read from its header only."""

    def __init__(self, path, key: str):
        self.path, self.key = Path(path), key
        self.where = f"{self.path}: '{key}'"
        try:
            with zipfile.ZipFile(self.path) as zf:
                self.info = zf.getinfo(f"{key}.npy")
                with zf.open(self.info) as f:
                    self.shape, self.fortran, self.dtype = _read_header(f, self.where)
                    self._header = f.tell() if self.info.compress_type == zipfile.ZIP_STORED \
                        else None
        except KeyError:
            raise GraphFormatError(f"{self.path} has no '{key}' array") from None
        except READ_ERRORS as e:
            raise GraphFormatError(f"{self.where}: unreadable, damaged or truncated "
                                   f"({type(e).__name__}: {e})") from None
        self.shape = tuple(int(x) for x in self.shape)
        if self.dtype.hasobject:
            raise GraphFormatError(f"{self.where} holds Python objects (a pickled object "
                                   f"array); save it as a numeric array")
        self.stored = self._header is not None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def _mapped_in_place(self) -> np.ndarray:
        """The member's data memory-mapped where it lies in the zip file (stored only)."""
        with open(self.path, "rb") as f:
            f.seek(self.info.header_offset)
            local = f.read(30)
            if len(local) < 30 or local[:4] != b"PK\x03\x04":
                raise GraphFormatError(f"{self.where}: damaged zip entry")
            name_len = int.from_bytes(local[26:28], "little")
            extra_len = int.from_bytes(local[28:30], "little")
        start = self.info.header_offset + 30 + name_len + extra_len + self._header
        if start + self.size * self.dtype.itemsize > self.path.stat().st_size:
            raise GraphFormatError(f"{self.where}: truncated (the file ends inside it)")
        order = "F" if self.fortran else "C"
        return np.memmap(self.path, dtype=self.dtype, mode="r", offset=start,
                         shape=self.shape or (1,), order=order)

    def flat(self, scratch: Path | None = None) -> np.ndarray:
        """The member's values in memory order as a 1-D read-only array: memory-mapped in
        place when stored, else inflated chunk by chunk into ``scratch`` (a ``.npy`` path)."""
        if self.stored:
            m = self._mapped_in_place()
            return m.reshape(-1, order="F" if self.fortran else "C")
        if scratch is None:
            raise ValueError("a compressed member needs a scratch file")
        out = np.lib.format.open_memmap(scratch, mode="w+", dtype=self.dtype.newbyteorder("="),
                                        shape=(self.size,))
        a = 0
        with _open_member(self) as f:
            for c in _member_chunks(f, (self.size,), self.dtype, self.where):
                out[a:a + c.shape[0]] = c
                a += c.shape[0]
        out.flush()
        del out
        return np.load(scratch, mmap_mode="r")

    def rows(self, rows_per_chunk: int) -> Iterator[np.ndarray]:
        """The member (C order) in chunks of whole rows along axis 0."""
        if self.fortran and len(self.shape) == 2 and self.shape[1] > 1:
            raise GraphFormatError(f"{self.where} is stored column-major (Fortran order); "
                                   f"save it in C order (np.ascontiguousarray)")
        n = self.shape[0] if self.shape else 1
        if self.stored:
            m = self._mapped_in_place()
            for a in range(0, n, rows_per_chunk):
                yield np.asarray(m[a:a + rows_per_chunk])
            return
        with _open_member(self) as f:
            shape = self.shape or (1,)
            yield from _member_chunks(f, shape, self.dtype, self.where)

    def read(self) -> np.ndarray:
        """The whole member in memory (small arrays: counts, labels, splits); a scalar comes
        back as one value."""
        if self.size == 0:
            return np.empty(self.shape, self.dtype)
        row = self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))
        return np.concatenate(list(self.rows(max(1, CHUNK_BYTES // max(1, row)))))


@contextlib.contextmanager
def _open_member(m: NpzMember):
    try:
        with zipfile.ZipFile(m.path) as zf, zf.open(m.info) as f:
            _read_header(f, m.where)
            yield f
    except GraphFormatError:
        raise
    except READ_ERRORS as e:
        raise GraphFormatError(f"{m.where}: damaged or truncated ({type(e).__name__}: "
                               f"{e})") from None


def members(path) -> set[str]:
    """The array names of the ``.npz`` at ``path``."""
    try:
        with zipfile.ZipFile(path) as zf:
            return {n[:-4] for n in zf.namelist() if n.endswith(".npy")}
    except READ_ERRORS as e:
        raise GraphFormatError(f"{path}: not a readable .npz file, damaged or truncated "
                               f"({type(e).__name__}: {e})") from None


# ----------------------------------------------------------------------------------------------
# what a dataset's raw files give
# ----------------------------------------------------------------------------------------------
@dataclass
class RawDataset:
    """A dataset's raw files, opened lazily. ``edges(scratch)`` returns ``(src, dst)`` (1-D
    integer arrays, memory-mapped; ``scratch(name)`` gives a temporary path inside the store
    being written), ``feat_shape``/``feat_chunks()`` the features, ``labels()`` int64 (N, -1
    = unlabelled), ``splits()`` ``{train_idx, val_idx, test_idx}`` int64 ids. ``where`` names
    the files in messages; ``fix`` says what to do about a damaged one."""

    name: str
    where: str
    num_nodes: int
    num_edges: int
    feat_shape: tuple
    feat_dtype: np.dtype
    edges: Callable[[Callable[[str], Path]], tuple[np.ndarray, np.ndarray]]
    feat_chunks: Callable[[], Iterator[np.ndarray]]
    labels: Callable[[], np.ndarray]
    splits: Callable[[], dict]
    num_classes: int = -1
    fix: str = ""
    edges_where: str = "edge list"
    files: list = field(default_factory=list)


def _fail(raw_where: str, what: str, fix: str) -> GraphFormatError:
    return GraphFormatError(f"{raw_where}: {what}{'; ' + fix if fix else ''}")


def labels_from(values: np.ndarray, where: str) -> np.ndarray:
    """Class ids (int64) from raw label values: NaN -> -1 (unlabelled); a fractional,
    infinite or negative value is a one-line error naming the first vertex."""
    y = np.asarray(values)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise GraphFormatError(f"{where}: labels must be one column (N or N x 1), got shape "
                               f"{y.shape}")
    if np.issubdtype(y.dtype, np.integer):
        out = y.astype(np.int64)
        bad = np.flatnonzero(out < -1)
    elif np.issubdtype(y.dtype, np.floating):
        nan = np.isnan(y)
        filled = np.where(nan, -1.0, y)
        bad = np.flatnonzero((filled != np.floor(filled)) | ~np.isfinite(filled)
                             | (filled < -1))
        if bad.shape[0]:
            v = int(bad[0])
            raise GraphFormatError(f"{where}: label of vertex {v} is {float(y[v]):g}, not a "
                                   f"class id (integers 0..C-1; NaN or -1 = unlabelled)")
        out = filled.astype(np.int64)
        bad = np.empty(0, dtype=np.int64)
    else:
        raise GraphFormatError(f"{where}: labels must be numbers, got {y.dtype}")
    if bad.shape[0]:
        v = int(bad[0])
        raise GraphFormatError(f"{where}: label of vertex {v} is {int(out[v])}, not a class id "
                               f"(0..C-1; -1 = unlabelled)")
    return out


def _split_ids(values, n: int, where: str) -> np.ndarray:
    ids = np.asarray(values).reshape(-1)
    if ids.dtype == np.bool_:
        raise GraphFormatError(f"{where} is a boolean mask; it must list vertex ids "
                               f"(np.flatnonzero(mask))")
    if not np.issubdtype(ids.dtype, np.integer):
        if np.issubdtype(ids.dtype, np.floating) and np.all(ids == np.floor(ids)):
            ids = ids.astype(np.int64)
        else:
            raise GraphFormatError(f"{where} must hold integer vertex ids, got {ids.dtype}")
    ids = ids.astype(np.int64)
    if ids.shape[0] and (ids.min() < 0 or ids.max() >= n):
        bad = int(ids[(ids < 0) | (ids >= n)][0])
        raise GraphFormatError(f"{where}: vertex id {bad} out of range [0, {n:,})")
    return np.sort(ids)


def read_ogb_split(folder: Path, n: int) -> dict:
    """``{train_idx, val_idx, test_idx}`` from an OGB split folder (``{train,valid,test}
    .csv.gz`` or ogb's ``split_dict.pt``), sorted int64 ids checked against ``n``."""
    pt = folder / "split_dict.pt"
    if pt.is_file():
        import torch
        try:
            split = torch.load(pt, weights_only=False)
            raw = {k: np.asarray(split[v]) for k, v in OGB_SPLIT_FILES.items()}
        except Exception as e:  # a damaged or foreign pickle: any unpickling failure
            raise GraphFormatError(f"{pt}: cannot read ogb's split file ({type(e).__name__})"
                                   f"; delete it") from None
        return {k: _split_ids(v, n, f"{pt} ({OGB_SPLIT_FILES[k]})") for k, v in raw.items()}
    out = {}
    for key, stem in OGB_SPLIT_FILES.items():
        path = folder / f"{stem}.csv.gz"
        if not path.is_file():
            raise GraphFormatError(f"split file {path} is missing (incomplete download?)")
        out[key] = _split_ids(_read_csv(path, np.int64, ncols=1).reshape(-1), n, str(path))
    return out


def _read_csv(path: Path, dtype, ncols: int | None = None) -> np.ndarray:
    """A small headerless CSV(.gz) file as one array (one line on any failure)."""
    return np.concatenate(list(_csv_chunks(path, dtype, 1 << 20, ncols)) or
                          [np.empty((0, ncols or 1), dtype=dtype)])


def _csv_chunks(path: Path, dtype, rows: int, ncols: int | None = None) -> Iterator[np.ndarray]:
    """A headerless CSV(.gz) file in chunks of ``rows`` rows (2-D arrays of ``dtype``)."""
    import pandas as pd
    try:
        reader = pd.read_csv(path, header=None, chunksize=rows, dtype=dtype,
                             compression="gzip" if path.suffix == ".gz" else None)
        with reader:
            for df in reader:
                arr = df.to_numpy(dtype=dtype)
                if ncols is not None and arr.shape[1] != ncols:
                    raise GraphFormatError(f"{path}: {arr.shape[1]} columns, expected {ncols}")
                yield arr
    except GraphFormatError:
        raise
    except pd.errors.EmptyDataError:
        return
    except (*READ_ERRORS, pd.errors.ParserError) as e:
        text = str(e).strip().splitlines()
        raise GraphFormatError(f"{path}: cannot read it ({type(e).__name__}"
                               f"{': ' + text[0] if text else ''}); damaged or truncated?") \
            from e


def ogb_raw(name: str, folder, *, split: str, num_classes: int = -1) -> RawDataset:
    """The raw files of OGB node-property dataset ``name`` in its folder (``<root>/ogbn_x``):
    the binary layout when ``raw/data.npz`` exists, else the CSV layout. ``split`` is the
    split folder's name (ogb's ``master.csv`` column ``split``). Only sizes are read here."""
    folder = Path(folder)
    raw = folder / "raw"
    fix = ""  # the caller (datasets) names the fix: delete the folder or download by hand
    if (raw / "data.npz").is_file():
        return _ogb_binary(name, folder, split, num_classes, fix)
    if (raw / "edge.csv.gz").is_file():
        return _ogb_csv(name, folder, split, num_classes, fix)
    raise GraphFormatError(f"{name}: no raw files in {raw} (neither data.npz nor "
                           f"edge.csv.gz)")


def _ogb_binary(name: str, folder: Path, split: str, num_classes: int, fix: str) -> RawDataset:
    raw = folder / "raw"
    data, label_file = raw / "data.npz", raw / "node-label.npz"
    have = members(data)
    missing = [k for k in ("edge_index", "node_feat", "num_nodes_list") if k not in have]
    if missing:
        raise _fail(str(data), f"missing arrays {', '.join(missing)} (an OGB binary dataset "
                    "has edge_index, node_feat, num_nodes_list, num_edges_list)", fix)
    if not label_file.is_file():
        raise _fail(str(label_file), "missing (an OGB binary dataset has node-label.npz)", fix)
    n = _count(NpzMember(data, "num_nodes_list"), "num_nodes_list")
    ei = NpzMember(data, "edge_index")
    e = _edge_count(ei)
    if "num_edges_list" in have:
        want = _count(NpzMember(data, "num_edges_list"), "num_edges_list")
        if want != e:
            raise _fail(str(data), f"edge_index holds {e:,} edges but num_edges_list says "
                        f"{want:,}", fix)
    feat = NpzMember(data, "node_feat")
    _check_feat(feat, n, fix)
    return RawDataset(
        name=name, where=str(raw), num_nodes=n, num_edges=e, feat_shape=feat.shape,
        feat_dtype=feat.dtype, edges=lambda scratch: _edge_arrays(ei, scratch),
        feat_chunks=lambda: feat.rows(_rows_per_chunk(feat.shape)),
        labels=lambda: _npz_labels(label_file, "node_label", n, fix),
        splits=lambda: read_ogb_split(folder / "split" / split, n), num_classes=num_classes,
        fix=fix, edges_where=f"{data} edge_index", files=[data, label_file])


def _ogb_csv(name: str, folder: Path, split: str, num_classes: int, fix: str) -> RawDataset:
    raw = folder / "raw"
    for f in ("num-node-list.csv.gz", "num-edge-list.csv.gz", "node-feat.csv.gz",
              "node-label.csv.gz"):
        if not (raw / f).is_file():
            raise _fail(str(raw / f), "missing (incomplete download?)", fix)
    n = int(_read_csv(raw / "num-node-list.csv.gz", np.int64).sum())
    e = int(_read_csv(raw / "num-edge-list.csv.gz", np.int64).sum())
    feat_path = raw / "node-feat.csv.gz"
    first = next(_csv_chunks(feat_path, np.float32, 1), None)
    if first is None:
        raise _fail(str(feat_path), "empty", fix)
    f = int(first.shape[1])

    def feat_chunks():
        got = 0
        for c in _csv_chunks(feat_path, np.float32, _rows_per_chunk((n, f)), ncols=f):
            got += c.shape[0]
            if got > n:
                break
            yield c
        if got != n:
            raise _fail(str(feat_path), f"{got:,} feature rows for {n:,} vertices "
                        f"(num-node-list.csv.gz)", fix)

    def labels():
        y = _read_csv(raw / "node-label.csv.gz", np.float64)
        if y.shape[0] != n:
            raise _fail(str(raw / "node-label.csv.gz"), f"{y.shape[0]:,} labels for {n:,} "
                        f"vertices", fix)
        return labels_from(y, str(raw / "node-label.csv.gz"))

    def edges(scratch):
        path = raw / "edge.csv.gz"
        out = np.lib.format.open_memmap(scratch("edge_index.npy"), mode="w+", dtype=np.int64,
                                        shape=(2, e))
        a = 0
        for c in _csv_chunks(path, np.int64, 1 << 22, ncols=2):
            if a + c.shape[0] > e:
                raise _fail(str(path), f"more than {e:,} edges (num-edge-list.csv.gz)", fix)
            out[0, a:a + c.shape[0]] = c[:, 0]
            out[1, a:a + c.shape[0]] = c[:, 1]
            a += c.shape[0]
        if a != e:
            raise _fail(str(path), f"{a:,} edges, num-edge-list.csv.gz says {e:,} "
                        f"(truncated?)", fix)
        out.flush()
        del out
        m = np.load(scratch("edge_index.npy"), mmap_mode="r")
        return m[0], m[1]

    return RawDataset(
        name=name, where=str(raw), num_nodes=n, num_edges=e, feat_shape=(n, f),
        feat_dtype=np.dtype(np.float32), edges=edges, feat_chunks=feat_chunks, labels=labels,
        splits=lambda: read_ogb_split(folder / "split" / split, n), num_classes=num_classes,
        fix=fix, edges_where=str(raw / "edge.csv.gz"),
        files=[raw / "edge.csv.gz", feat_path, raw / "node-label.csv.gz"])


def coo_npz(path, name: str | None = None) -> RawDataset:
    """The COO exchange ``.npz`` at ``path`` (see the module docstring)."""
    path = Path(path)
    have = members(path)
    missing = [k for k in ("edge_index", "feat", "label", *SPLITS) if k not in have]
    if missing:
        raise GraphFormatError(f"{path}: missing keys {', '.join(missing)} (the COO format has "
                               f"edge_index, feat, label, train_idx, val_idx, test_idx)")
    from .npzstore import warn_extra_keys
    warn_extra_keys(path, have, ("edge_index", "feat", "label", *SPLITS, "num_nodes",
                                 "num_classes"))
    feat = NpzMember(path, "feat")
    if len(feat.shape) != 2:
        raise GraphFormatError(f"{path}: 'feat' must be an N x F matrix, got shape "
                               f"{feat.shape}")
    if feat.shape[1] == 0:
        raise GraphFormatError(f"{path}: 'feat' has 0 columns (shape {feat.shape}): every "
                               f"vertex needs at least one feature (a column of ones will do)")
    n = _count(NpzMember(path, "num_nodes"), "num_nodes") if "num_nodes" in have \
        else feat.shape[0]
    _check_feat(feat, n, "")
    ei = NpzMember(path, "edge_index")
    e = _edge_count(ei)
    c = -1
    if "num_classes" in have:
        c = _count(NpzMember(path, "num_classes"), "num_classes")

    def splits():
        return {k: _split_ids(NpzMember(path, k).read(), n, f"{path}: '{k}'") for k in SPLITS}

    return RawDataset(
        name=name or path.stem, where=str(path), num_nodes=n, num_edges=e,
        feat_shape=feat.shape, feat_dtype=feat.dtype,
        edges=lambda scratch: _edge_arrays(ei, scratch),
        feat_chunks=lambda: feat.rows(_rows_per_chunk(feat.shape)),
        labels=lambda: _npz_labels(path, "label", n, ""), splits=splits, num_classes=c,
        edges_where=f"{path}: 'edge_index'", files=[path])


def is_coo_npz(path) -> bool:
    """Whether the ``.npz`` at ``path`` is in the COO exchange format (``edge_index``, no
    ``indptr``)."""
    try:
        have = members(path)
    except GraphFormatError:
        return False
    return "edge_index" in have and "indptr" not in have


def _count(m: NpzMember, what: str) -> int:
    v = m.read().reshape(-1)
    if not np.issubdtype(v.dtype, np.integer) or v.shape[0] == 0 or (v < 0).any():
        raise GraphFormatError(f"{m.where}: must hold non-negative integer counts")
    return int(v.sum())


def _edge_count(ei: NpzMember) -> int:
    if not np.issubdtype(ei.dtype, np.integer):
        raise GraphFormatError(f"{ei.where} must hold integer vertex ids, got {ei.dtype}")
    if len(ei.shape) != 2 or 2 not in ei.shape:
        raise GraphFormatError(f"{ei.where} must be 2 x E (or E x 2), got shape {ei.shape}")
    return int(ei.shape[1] if ei.shape[0] == 2 else ei.shape[0])


def _edge_arrays(ei: NpzMember, scratch) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` views of an ``edge_index`` member, memory-mapped (inflated into a scratch
    file first when compressed)."""
    flat = ei.flat(None if ei.stored else scratch("edge_index.npy"))
    rows, cols = ei.shape
    if rows == 2 and not (cols == 2 and ei.fortran):
        # 2 x E: src then dst in C order; interleaved in Fortran order
        if not ei.fortran:
            return flat[:cols], flat[cols:]
        return flat[0::2], flat[1::2]
    # E x 2: interleaved in C order, src then dst in Fortran order
    if ei.fortran:
        return flat[:rows], flat[rows:]
    return flat[0::2], flat[1::2]


def _check_feat(feat: NpzMember, n: int, fix: str) -> None:
    if len(feat.shape) != 2:
        raise _fail(feat.where, f"must be an N x F matrix, got shape {feat.shape}", fix)
    if feat.shape[0] != n:
        raise _fail(feat.where, f"{feat.shape[0]:,} feature rows for {n:,} vertices", fix)
    if not (np.issubdtype(feat.dtype, np.number) or feat.dtype == np.bool_):
        raise _fail(feat.where, f"must hold numbers, got {feat.dtype}", fix)


def _npz_labels(path: Path, key: str, n: int, fix: str) -> np.ndarray:
    m = NpzMember(path, key)
    if (m.shape[0] if m.shape else 0) != n:
        raise _fail(m.where, f"{m.shape[0] if m.shape else 0:,} labels for {n:,} vertices",
                    fix)
    return labels_from(m.read(), m.where)


def _rows_per_chunk(shape) -> int:
    row = 4 * max(1, int(np.prod(shape[1:], dtype=np.int64)))
    return max(1, CHUNK_BYTES // row)


# ----------------------------------------------------------------------------------------------
# into the store
# ----------------------------------------------------------------------------------------------
class _Stages:
    """Progress of ingestion: one tqdm line over the stages, and their wall times."""

    STAGES = ("edges", "csr", "features", "labels", "splits", "validate")

    def __init__(self, name: str, enabled: bool):
        self.seconds: dict[str, float] = {}
        self.bar = None
        if enabled:
            from tqdm import tqdm
            self.bar = tqdm(total=len(self.STAGES), desc=f"ingest {name}", unit="stage",
                            file=sys.stderr, leave=False)

    @contextlib.contextmanager
    def stage(self, what: str):
        if self.bar is not None:
            self.bar.set_postfix_str(what, refresh=True)
        t = time.perf_counter()
        yield
        self.seconds[what] = round(time.perf_counter() - t, 3)
        if self.bar is not None:
            self.bar.update()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def ingest(raw: RawDataset, folder, *, source: dict | None, progress: bool = False,
           feat_dtype=None) -> Path:
    """Write the dataset of ``raw`` as a store at ``folder``, streaming (module docstring).

    ``feat_dtype`` (``float32`` default, or ``float16``: half the disk and page cache) is the
    stored feature type; ``source`` is recorded in ``store.json`` for staleness checks, with
    ``ingest``: the wall time of every stage and what symmetrising changed. Returns the
    folder. A failure leaves no store there (one-line error; a full disk is an
    :class:`OutputError`)."""
    n = raw.num_nodes
    target = np.dtype(feat_dtype or (raw.feat_dtype if raw.feat_dtype == np.float16
                                     else np.float32))
    if target not in (np.float32, np.float16):
        raise GraphFormatError(f"feature type {target} is not stored; float32 or float16")
    stages = _Stages(raw.name, progress)
    t0 = time.perf_counter()
    try:
        with _Writer(folder) as w:
            with stages.stage("edges"):
                src, dst = raw.edges(w.scratch)
            with stages.stage("csr"):
                # an eighth of the memory this process can still fill: the scratch window
                # stays in memory beside the page cache of the edges it reads (at 1/4-scale
                # papers inside 12 GiB, one pass over a 2.6 GB window wrote 79 GB)
                avail = available_host_bytes()
                budget = None if avail is None else max(SCATTER_MIN_BYTES,
                                                        avail // SCATTER_SHARE)
                csr = build_csr(src, dst, n, w.tmp, what=raw.edges_where,
                                scatter_bytes=budget)
                del src, dst
                w.scratch("edge_index.npy").unlink(missing_ok=True)
                w.adopt("indptr", csr.indptr_path)
                w.adopt("indices", csr.indices_path)
                changes = csr.changes
                csr_phases = csr.phases
                del csr
            log.info("%s: %s", raw.name, _describe(changes))
            with stages.stage("features"):
                total = n * raw.feat_shape[1] * np.dtype(raw.feat_dtype).itemsize
                with _progress(total, f"{raw.name} features", progress) as bar:
                    def chunks():
                        for c in raw.feat_chunks():
                            bar.update(c.nbytes)
                            yield c
                    feats = chunks()
                    if target == np.float16:
                        feats = half_checked(feats, f"{raw.name} features")
                    w.put("feat", (n, raw.feat_shape[1]), target, feats)
            with stages.stage("labels"):
                label = raw.labels()
                w.put_array("label", label)
                num_classes = max(int(raw.num_classes),
                                  int(label.max()) + 1 if label.shape[0] else 0)
                del label
            with stages.stage("splits"):
                for key, ids in raw.splits().items():
                    w.put_array(key, ids)
            meta = {"name": raw.name, "num_classes": num_classes, "source": source,
                    "derived": None,
                    "ingest": {"changes": changes, "seconds": stages.seconds,
                               "csr_phases": csr_phases}}
            with stages.stage("validate"):
                try:
                    out = w.commit(meta, validate=True, undirected=True)
                except GraphFormatError as e:
                    raise GraphFormatError(f"{raw.where}: {e}") from None
    except OutputError:
        raise
    except OSError as e:  # a read error of a raw file that got past the readers
        raise GraphFormatError(f"{raw.where}: cannot read the raw files ({type(e).__name__}: "
                               f"{e}){'; ' + raw.fix if raw.fix else ''}") from e
    finally:
        stages.close()
    log.info("ingested %s into %s in %.1f s (%s)", raw.name, out, time.perf_counter() - t0,
             ", ".join(f"{k} {v:.1f} s" for k, v in stages.seconds.items()))
    return out


def _describe(changes: dict) -> str:
    c = changes
    return (f"{c['edges']:,} directed edges symmetrised: {c['added']:,} reverse entries added, "
            f"{c['self_loops']:,} self loops and {c['duplicates']:,} repeated edges dropped "
            f"-> {c['entries']:,} CSR entries ({c['entries'] // 2:,} undirected edges)")


def source_record(files, key: str | None) -> dict:
    """What identifies the raw files for staleness checks: the first file's path, size,
    mtime, inode and ctime (every file's size and mtime in ``files``)."""
    files = [Path(f) for f in files]
    st = files[0].stat()
    return {"path": str(files[0].resolve()), "key": key, "size": st.st_size,
            "mtime_ns": st.st_mtime_ns, "inode": st.st_ino, "ctime_ns": st.st_ctime_ns,
            "files": {f.name: [f.stat().st_size, f.stat().st_mtime_ns] for f in files}}

