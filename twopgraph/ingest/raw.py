"""What a dataset's raw files give, and the checks of their arrays.

:class:`RawDataset` is the one input of :func:`~twopgraph.ingest.ingest`: sizes, and lazy
readers of the edges, features (in chunks), labels and splits. The readers of the OGB layouts
(:mod:`.ogb`), of the COO exchange format (:mod:`.coo`) and of the papers-shaped generator
(:mod:`twopgraph.datasets.papers`) make one. The checks shared by those readers live here: labels
(:func:`labels_from`: NaN -> -1), split ids, counts, the ``edge_index`` shape and its
``(src, dst)`` views, the feature table's shape, and the rows per feature chunk (about
:data:`~twopgraph.store.reader.CHUNK_BYTES` bytes of float32).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from twopgraph.errors import GraphFormatError
from twopgraph.ingest.npz import NpzMember
from twopgraph.store.reader import CHUNK_BYTES


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
