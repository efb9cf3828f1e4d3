"""What :class:`~twopgraph.graph.data.GraphData` reads, writes and converts, in arrays: the ``.npz``
exchange format and the conversion of other libraries' graphs and arrays. The data model's
methods (``GraphData.load_npz``, ``save_npz``, ``from_scipy``, ``from_dgl``, ``from_pyg``)
build on these functions, which know arrays only, never the data model's classes.

On-disk format (``.npz``, docs/formats.md): ``indptr`` int64 (N+1), ``indices`` int32/int64 (E),
the CSR of an undirected graph without self loops or duplicates; ``feat`` float32 (N x F);
``label`` int64 (N); ``train_idx``, ``val_idx``, ``test_idx`` int64. Files written by
twopgraph may also hold ``node_ids`` int64 (N): the original id of each vertex when the graph
was renumbered, and ``num_classes``.

Conversions: anything array-like (NumPy, a torch tensor on any device, scipy sparse, a list)
becomes NumPy; features float32 (float16 kept), labels, ids and splits int64, a boolean mask
the ids where it is True; with no split given, the labelled vertices are split 60/20/20.
"""

from __future__ import annotations

import logging
import os
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from twopgraph.core.files import atomic_write_bytes
from twopgraph.errors import GraphFormatError

if TYPE_CHECKING:
    import scipy.sparse as sp

REQUIRED_KEYS = ("indptr", "indices", "feat", "label", "train_idx", "val_idx", "test_idx")
SPLITS = ("train_idx", "val_idx", "test_idx")


def as_features(x: ArrayLike) -> np.ndarray:
    """``x`` as a C-contiguous float32 (or float16) array; non-numeric input is left for
    :meth:`GraphData.validate` to refuse."""
    x = x if isinstance(x, np.ndarray) else np.asarray(x)
    if x.dtype not in (np.float32, np.float16) and (
            np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)
            or x.dtype == np.bool_):
        x = x.astype(np.float32)
    return x if x.flags.c_contiguous else np.ascontiguousarray(x)


def as_ints(x: ArrayLike, column: bool = False) -> np.ndarray:
    """``x`` as a C-contiguous int64 array if it holds integers (``column``: an N x 1 array
    becomes a vector); other dtypes are left for :meth:`GraphData.validate` to refuse."""
    x = x if isinstance(x, np.ndarray) else np.asarray(x)
    if column and x.ndim == 2 and x.shape[1] == 1:
        x = x.reshape(-1)
    if np.issubdtype(x.dtype, np.integer) and x.dtype != np.int64:
        x = x.astype(np.int64)
    return x if x.flags.c_contiguous else np.ascontiguousarray(x)



_ZIP_MAGIC = b"PK"
_NPY_MAGIC = b"\x93NUMPY"
# What numpy, zipfile and zlib raise for a damaged archive or member.
_NPZ_ERRORS = (OSError, ValueError, zipfile.BadZipFile, EOFError, zlib.error)


def _read_npz_arrays(path: Path) -> dict:
    """Every array of the ``.npz`` at ``path``; a file that is no ``.npz``, lacks a required
    key or holds a damaged or pickled member raises a one-line :class:`GraphFormatError`."""
    try:
        with open(path, "rb") as f:
            magic = f.read(len(_NPY_MAGIC))
    except OSError as e:
        raise GraphFormatError(f"{path}: cannot read the file ({e.strerror or e})") from None
    if not magic.startswith(_ZIP_MAGIC):
        if magic == _NPY_MAGIC:
            raise GraphFormatError(f"{path} is a .npy file (one array), not a .npz file (zip "
                                   f"archive of the arrays {', '.join(REQUIRED_KEYS)})")
        what = "it is empty" if not magic else "no zip archive signature"
        raise GraphFormatError(f"{path} is not a .npz file (zip archive; {what}); write one "
                               f"with np.savez(path, {'=..., '.join(REQUIRED_KEYS)}=...)")
    arr = {}
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in REQUIRED_KEYS if k not in z.files]
            if missing:
                raise GraphFormatError(f"{path}: missing keys {', '.join(missing)}")
            for k in z.files:
                try:
                    arr[k] = z[k]
                except ValueError as e:
                    if "allow_pickle" not in str(e):
                        raise
                    raise GraphFormatError(
                        f"{path}: '{k}' holds Python objects (a pickled object array), which "
                        f"twopgraph does not load; save it as a numeric array") from None
    except GraphFormatError:
        raise
    except _NPZ_ERRORS as e:
        raise GraphFormatError(f"{path}: not a readable .npz file, damaged or truncated "
                               f"({type(e).__name__}: {e})") from None
    return arr


def _scalar_int(arr: dict, key: str, path) -> int:
    v = arr[key]
    if v.shape != () or not np.issubdtype(v.dtype, np.integer):
        raise GraphFormatError(f"{path}: '{key}' must be an integer scalar")
    return int(v)


def write_npz(arrays: dict[str, np.ndarray], path: str | os.PathLike) -> Path:
    """Write ``arrays`` (:data:`REQUIRED_KEYS`, optionally ``node_ids`` and ``num_classes``) in
    the ``.npz`` exchange format (uncompressed) atomically: temp file, then rename
    (:meth:`GraphData.save_npz <twopgraph.graph.data.GraphData.save_npz>` gives its arrays)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, lambda f: np.savez(f, **arrays))
    return path


def read_npz(path: Path) -> dict:
    """The arrays of the ``.npz`` at ``path``, converted to the data model's dtypes: ``indptr``,
    ``indices``, ``feat``, ``label``, the splits, ``node_ids`` (None when absent) and
    ``num_classes`` (-1 when absent), the keyword arguments of
    :class:`~twopgraph.graph.data.GraphData` but the graph's two. Any problem raises
    :class:`GraphFormatError` (one line); the content is not validated."""
    if not path.is_file():
        raise GraphFormatError(f"dataset file not found: {path}")
    arr = _read_npz_arrays(path)
    for k in ("indptr", "indices", *SPLITS):
        if not np.issubdtype(arr[k].dtype, np.integer):
            raise GraphFormatError(f"{path}: '{k}' must hold integers (int64 or int32), got "
                                   f"{arr[k].dtype}")
    if not np.issubdtype(arr["label"].dtype, np.integer):
        raise GraphFormatError(f"{path}: 'label' must hold integer class ids (int64; -1 = "
                               f"unlabelled), got {arr['label'].dtype}")
    if "node_ids" in arr and not np.issubdtype(arr["node_ids"].dtype, np.integer):
        raise GraphFormatError(f"{path}: 'node_ids' must hold integers, got "
                               f"{arr['node_ids'].dtype}")
    indices = arr["indices"]
    if indices.dtype not in (np.int32, np.int64):
        indices = indices.astype(np.int64)
    feat = arr["feat"]
    if feat.dtype not in (np.float32, np.float16):
        if not (np.issubdtype(feat.dtype, np.floating) or np.issubdtype(feat.dtype, np.integer)
                or feat.dtype == np.bool_):
            raise GraphFormatError(f"{path}: 'feat' must hold numbers (float32), got "
                                   f"{feat.dtype}")
        feat = feat.astype(np.float32)
    return dict(
        indptr=arr["indptr"].astype(np.int64, copy=False), indices=indices,
        feat=feat, label=arr["label"].astype(np.int64, copy=False),
        train_idx=arr["train_idx"].astype(np.int64, copy=False),
        val_idx=arr["val_idx"].astype(np.int64, copy=False),
        test_idx=arr["test_idx"].astype(np.int64, copy=False),
        node_ids=arr["node_ids"].astype(np.int64) if "node_ids" in arr else None,
        num_classes=_scalar_int(arr, "num_classes", path) if "num_classes" in arr else -1,
    )


# -- from other libraries -------------------------------------------------------------------------
def adjacency_edges(
        adj: sp.spmatrix | sp.sparray | ArrayLike) -> tuple[np.ndarray, np.ndarray, int]:
    """``(src, dst, N)`` of the N x N adjacency ``adj`` (scipy sparse, or dense): every stored
    nonzero entry ``(u, v)`` is an edge, explicit zeros are not; one warning when the nonzero
    entries are not all 1 (:func:`_warn_weights`). A non-square matrix raises
    :class:`GraphFormatError`."""
    import scipy.sparse as sp
    if sp.issparse(adj):
        if len(adj.shape) != 2 or adj.shape[0] != adj.shape[1]:
            raise GraphFormatError(f"adj must be a square N x N matrix, got shape "
                                   f"{adj.shape}")
        coo = sp.coo_matrix(adj)
        nz = coo.data != 0
        src, dst = coo.row[nz], coo.col[nz]
        n = int(adj.shape[0])
        _warn_weights(coo.data[nz])
    else:
        dense = _host_array(adj, "adj")
        if dense.ndim != 2 or dense.shape[0] != dense.shape[1]:
            raise GraphFormatError(f"adj must be a square N x N matrix (scipy sparse or "
                                   f"dense), got shape {dense.shape}")
        src, dst = np.nonzero(dense)
        n = int(dense.shape[0])
        _warn_weights(dense[src, dst])
    return src, dst, n


def dgl_parts(g: Any, feat_key: str, label_key: str,
              splits: Sequence[ArrayLike | None]) -> tuple:
    """``(src, dst, N, feat, label, splits)`` of the homogeneous DGL graph ``g``: features and
    labels ``g.ndata[feat_key]``, ``g.ndata[label_key]``; a split of ``splits`` (train, val,
    test) that is None is read from ``g.ndata["<split>_mask"]`` when present."""
    ntypes = getattr(g, "ntypes", None)
    if ntypes is not None and len(ntypes) > 1:
        raise GraphFormatError(f"from_dgl takes a homogeneous graph, this one has node "
                               f"types {list(ntypes)} (dgl.to_homogeneous converts it)")
    ndata = g.ndata
    for key in (feat_key, label_key):
        if key not in ndata:
            raise GraphFormatError(f"the DGL graph has no ndata[{key!r}]; its node data: "
                                   f"{', '.join(map(repr, ndata.keys())) or 'none'}")
    src, dst = g.edges()
    splits = [s if s is not None else ndata.get(f"{k}_mask")
              for s, k in zip(splits, ("train", "val", "test"))]
    return src, dst, int(g.num_nodes()), ndata[feat_key], ndata[label_key], splits


def pyg_parts(data: Any, splits: Sequence[ArrayLike | None]) -> tuple:
    """``(src, dst, N, feat, label, splits)`` of the PyG ``Data`` object ``data``: edges
    ``data.edge_index`` (2 x E), features ``data.x``, labels ``data.y``; a split of ``splits``
    (train, val, test) that is None is read from ``data.<split>_mask`` when present."""
    for key in ("edge_index", "x", "y"):
        if getattr(data, key, None) is None:
            raise GraphFormatError(f"the PyG data has no {key}; from_pyg needs edge_index "
                                   f"(2 x E), x (N x F features) and y (N labels)")
    ei = _host_array(data.edge_index, "edge_index")
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise GraphFormatError(f"edge_index must be 2 x E, got shape {ei.shape}")
    n = getattr(data, "num_nodes", None)
    n = int(n) if n is not None else int(_host_array(data.x, "x").shape[0])
    splits = [s if s is not None else getattr(data, f"{k}_mask", None)
              for s, k in zip(splits, ("train", "val", "test"))]
    return ei[0], ei[1], n, data.x, data.y, splits


def edge_arrays(src: ArrayLike, dst: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """``src`` and ``dst`` (any array-like) as flat NumPy arrays of integers."""
    src, dst = _host_array(src, "src").ravel(), _host_array(dst, "dst").ravel()
    if not (np.issubdtype(src.dtype, np.integer) and np.issubdtype(dst.dtype, np.integer)):
        raise GraphFormatError(f"edge endpoints must be integers, got {src.dtype}/{dst.dtype}")
    return src, dst


def node_arrays(feat: ArrayLike | sp.spmatrix | sp.sparray, label: ArrayLike,
                splits: Sequence[ArrayLike | None], n: int, split_seed: int) -> tuple:
    """``(feat, label, [train, val, test])`` of ``n`` vertices as NumPy arrays: ``feat`` N x F
    (a vector becomes one column), ``label`` int64 (an N x 1 column becomes a vector), splits
    sorted int64 ids (from ids or boolean masks; missing ones empty). With no split given,
    the labelled vertices are split 60/20/20 by :func:`random_split` (seed ``split_seed``);
    with some given, a missing ``train_idx`` is refused."""
    feat = _host_array(feat, "feat")
    if feat.ndim == 1:
        feat = feat.reshape(-1, 1)
    label = as_ints(_host_array(label, "label"), column=True)
    ids = [_split_ids(s, n, k) for s, k in zip(splits, SPLITS)]
    if all(s is None for s in ids):
        if label.ndim != 1 or label.shape[0] != n or not np.issubdtype(label.dtype,
                                                                       np.integer):
            raise GraphFormatError(f"label must be {n} integer class ids (-1: "
                                   f"unlabelled), got {label.dtype} of shape {label.shape}")
        ids = list(random_split(label, seed=split_seed))
    elif ids[0] is None:
        raise GraphFormatError("train_idx is missing (val_idx/test_idx are given); give "
                               "all three splits, or none for a random 60/20/20 split")
    ids = [np.empty(0, dtype=np.int64) if s is None else s for s in ids]
    return feat, label, ids


def random_split(label: np.ndarray, fractions: Sequence[float] = (0.6, 0.2, 0.2),
                 seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted int64 ``(train, val, test)`` ids: the labelled vertices (``label >= 0``) in a
    permutation drawn from ``seed``, cut by ``fractions`` (train gets the rounding rest)."""
    labelled = np.flatnonzero(np.asarray(label) >= 0)
    perm = np.random.default_rng(seed).permutation(labelled)
    m = perm.shape[0]
    n_val, n_test = int(m * fractions[1]), int(m * fractions[2])
    n_train = m - n_val - n_test
    return (np.sort(perm[:n_train]), np.sort(perm[n_train:n_train + n_val]),
            np.sort(perm[n_train + n_val:]))


def _warn_weights(values: np.ndarray) -> None:
    """One warning when the adjacency's nonzero entries are not all 1: twopgraph's graphs are
    unweighted, so the weights (NaN and negative ones included) are ignored, not used."""
    values = np.asarray(values)
    odd = np.count_nonzero(values != 1)
    if not odd:
        return
    nan = int(np.count_nonzero(np.isnan(values))) if values.dtype.kind in "fc" else 0
    neg = int(np.count_nonzero(values < 0)) if values.dtype.kind in "iuf" else 0
    logging.getLogger("twopgraph").warning(
        "from_scipy: edge weights are ignored, every nonzero entry of adj is an unweighted "
        "edge (%s of %s entries are not 1: %s NaN, %s negative)", f"{odd:,}",
        f"{values.shape[0]:,}", f"{nan:,}", f"{neg:,}")


def _host_array(x, what: str) -> np.ndarray:
    """``x`` (NumPy, torch tensor on any device, scipy sparse, list) as a NumPy array."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor, without importing torch
        return x.detach().cpu().numpy()
    if hasattr(x, "toarray"):  # scipy sparse (bag-of-words features)
        return np.asarray(x.toarray())
    try:
        return np.asarray(x)
    except (TypeError, ValueError) as e:
        raise GraphFormatError(f"{what} is not an array ({type(x).__name__}: {e})") from None


def _split_ids(x, n: int, what: str) -> np.ndarray | None:
    """A split as sorted int64 ids: ids pass through, a boolean mask of length ``n`` becomes
    the ids where it is True; None stays None."""
    if x is None:
        return None
    a = _host_array(x, what)
    if a.dtype == np.bool_:
        if a.ndim != 1 or a.shape[0] != n:
            raise GraphFormatError(f"{what}: a boolean mask must have length N = {n}, got shape "
                                   f"{a.shape}" + (" (one column per split: pass one, e.g. "
                                                   "mask[:, 0])" if a.ndim == 2 else ""))
        return np.flatnonzero(a).astype(np.int64)
    if not np.issubdtype(a.dtype, np.integer) or a.ndim != 1:
        raise GraphFormatError(f"{what} must be vertex ids (1-D integers) or a boolean mask, "
                               f"got {a.dtype} of shape {a.shape}")
    return np.sort(a.astype(np.int64))
