"""Graphs and node data: :class:`CSRGraph` and :class:`GraphData`, validation, renumbering, I/O.

On-disk format (``.npz``, see DESIGN.md): ``indptr`` int64 (N+1), ``indices`` int32/int64 (E),
the CSR of an undirected graph without self loops or duplicates; ``feat`` float32 (N x F);
``label`` int64 (N); ``train_idx``, ``val_idx``, ``test_idx`` int64. Files written by
twopgraph may also hold ``node_ids`` int64 (N): the original id of each vertex when the graph
was renumbered, and ``num_classes``.

Example::

    >>> g = CSRGraph.from_edges([0, 1], [1, 2], num_nodes=3)   # symmetrised
    >>> g.num_nodes, g.num_edges, g.neighbors(1).tolist()
    (3, 4, [0, 2])
"""

from __future__ import annotations

import os
import tempfile
import weakref
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from numba import njit, prange

from .errors import GraphFormatError
from .fingerprint import fingerprint
from .jit import register

REQUIRED_KEYS = ("indptr", "indices", "feat", "label", "train_idx", "val_idx", "test_idx")
SPLITS = ("train_idx", "val_idx", "test_idx")


@dataclass(frozen=True)
class CSRGraph:
    """Compressed sparse rows: neighbours of ``v`` are ``indices[indptr[v]:indptr[v+1]]``.

    ``indptr`` is int64 of length N+1; ``indices`` is int32 (when N < 2**31) or int64.
    Construction does not validate (graphs can be large); call :meth:`validate`.
    """

    indptr: np.ndarray
    indices: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.shape[0]) - 1

    @property
    def num_edges(self) -> int:
        """Number of directed CSR entries (2x the undirected edges of a symmetric graph)."""
        return int(self.indices.shape[0])

    def degrees(self) -> np.ndarray:
        """Out-degree of every vertex, int64 (N)."""
        return np.diff(self.indptr)

    def neighbors(self, v: int) -> np.ndarray:
        return self.indices[self.indptr[v]:self.indptr[v + 1]]

    def nbytes(self) -> int:
        return int(self.indptr.nbytes + self.indices.nbytes)

    def fingerprint(self) -> str:
        """Content fingerprint of the CSR (``indptr`` and ``indices``: dtype, shape, bytes; see
        :mod:`twopgraph.fingerprint`), cached on this (frozen) instance: changing the arrays in
        place afterwards is not noticed. Cost: one read of both arrays (1-2 s/GB per thread)."""
        fp = self.__dict__.get("_fingerprint")
        if fp is None:
            fp = fingerprint("csr", None, self.indptr, self.indices)
            object.__setattr__(self, "_fingerprint", fp)
        return fp

    # -- validation ---------------------------------------------------------------------------
    def validate(self, check_symmetric: bool = False) -> "CSRGraph":
        """Check sizes, monotone ``indptr`` and index ranges; raise :class:`GraphFormatError`.

        With ``check_symmetric`` also check u->v <=> v->u, no self loops and no duplicates
        (O(E log E)).
        """
        ip, ix = self.indptr, self.indices
        if ip.ndim != 1 or ip.shape[0] < 1:
            raise GraphFormatError(f"indptr must be 1-D with N+1 >= 1 entries, got shape {ip.shape}")
        if ix.ndim != 1:
            raise GraphFormatError(f"indices must be 1-D, got shape {ix.shape}")
        if not np.issubdtype(ip.dtype, np.integer) or not np.issubdtype(ix.dtype, np.integer):
            raise GraphFormatError(f"indptr/indices must be integers, got {ip.dtype}/{ix.dtype}")
        if ip[0] != 0:
            raise GraphFormatError(f"indptr[0] must be 0, got {ip[0]}")
        if ip[-1] != ix.shape[0]:
            raise GraphFormatError(
                f"indptr[-1] = {ip[-1]} but indices has {ix.shape[0]} entries (sizes disagree)")
        if ip.shape[0] > 1 and np.any(ip[1:] < ip[:-1]):
            raise GraphFormatError("indptr is not monotone non-decreasing")
        n = self.num_nodes
        if ix.shape[0] and (ix.min() < 0 or ix.max() >= n):
            raise GraphFormatError(
                f"indices out of range [0, {n}): min {ix.min()}, max {ix.max()}")
        if check_symmetric:
            src = np.repeat(np.arange(n, dtype=np.int64), self.degrees())
            dst = ix.astype(np.int64)
            if np.any(src == dst):
                raise GraphFormatError("graph has self loops")
            key = src * n + dst
            if np.unique(key).shape[0] != key.shape[0]:
                raise GraphFormatError("graph has duplicate edges")
            if not np.array_equal(np.sort(key), np.sort(dst * n + src)):
                raise GraphFormatError("graph is not symmetric (u->v without v->u)")
        return self

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def from_edges(cls, src, dst, num_nodes: int, symmetrize: bool = True,
                   remove_self_loops: bool = True, index_dtype=None) -> "CSRGraph":
        """CSR from an edge list; symmetrises, drops self loops and merges duplicates.

        Rows come out sorted. ``index_dtype`` defaults to int32 when ``num_nodes < 2**31``.
        """
        src = np.asarray(src, dtype=np.int64).ravel()
        dst = np.asarray(dst, dtype=np.int64).ravel()
        if src.shape != dst.shape:
            raise GraphFormatError(f"src and dst differ in length: {src.shape[0]} vs {dst.shape[0]}")
        if src.shape[0] and (min(src.min(), dst.min()) < 0
                             or max(src.max(), dst.max()) >= num_nodes):
            raise GraphFormatError(f"edge endpoints out of range [0, {num_nodes})")
        if remove_self_loops:
            keep = src != dst
            src, dst = src[keep], dst[keep]
        key = src * num_nodes + dst
        del src, dst
        if symmetrize:
            rev = (key % num_nodes) * num_nodes + key // num_nodes
            key = np.concatenate([key, rev])
            del rev
        key = np.unique(key)  # sorts by (src, dst) and merges duplicates
        counts = np.bincount(key // num_nodes, minlength=num_nodes)
        indptr = np.zeros(num_nodes + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        if index_dtype is None:
            index_dtype = np.int32 if num_nodes < 2**31 else np.int64
        indices = (key % num_nodes).astype(index_dtype)
        return cls(indptr, indices)

    def to_scipy(self):
        """The adjacency as ``scipy.sparse.csr_matrix`` with unit weights (float32)."""
        import scipy.sparse as sp
        n = self.num_nodes
        data = np.ones(self.num_edges, dtype=np.float32)
        return sp.csr_matrix((data, self.indices, self.indptr), shape=(n, n))

    # -- renumbering ---------------------------------------------------------------------------
    def permute(self, perm: np.ndarray) -> "CSRGraph":
        """Renumbered graph in which new vertex ``i`` is old vertex ``perm[i]``."""
        perm = check_permutation(perm, self.num_nodes)
        inv = inverse_permutation(perm)
        indptr, indices = permute_csr(self.indptr, self.indices, perm, inv)
        return CSRGraph(indptr, indices)


def check_permutation(perm, n: int) -> np.ndarray:
    perm = np.asarray(perm, dtype=np.int64)
    if perm.shape != (n,):
        raise GraphFormatError(f"permutation must have length {n}, got shape {perm.shape}")
    seen = np.zeros(n, dtype=bool)
    if n and (perm.min() < 0 or perm.max() >= n):
        raise GraphFormatError("permutation has entries out of range")
    seen[perm] = True
    if not seen.all():
        raise GraphFormatError("permutation has repeated entries")
    return perm


def inverse_permutation(perm: np.ndarray) -> np.ndarray:
    inv = np.empty_like(perm)
    inv[perm] = np.arange(perm.shape[0], dtype=perm.dtype)
    return inv


def _scalar_int(arr: dict, key: str, path) -> int:
    v = arr[key]
    if v.shape != () or not np.issubdtype(v.dtype, np.integer):
        raise GraphFormatError(f"{path}: '{key}' must be an integer scalar")
    return int(v)


@dataclass
class GraphData:
    """A graph with node features, labels and the train/val/test split.

    ``feat`` float32 (N x F; float16/bfloat16-as-uint16 are allowed for compact stores),
    ``label`` int64 (N), splits int64 sorted ids. ``node_ids`` int64 (N) gives each vertex's
    id in the original numbering (identity unless :meth:`permute` was applied), so results can
    always be reported in original ids.
    """

    graph: CSRGraph
    feat: np.ndarray
    label: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    name: str = ""
    node_ids: np.ndarray | None = None
    num_classes: int = field(default=-1)
    # (weak references to the arrays it was computed from, num_classes, fingerprint)
    _fingerprint: tuple | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.num_classes < 0:
            self.num_classes = int(self.label.max()) + 1 if self.label.shape[0] else 0

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    @property
    def num_features(self) -> int:
        return int(self.feat.shape[1])

    def original_ids(self) -> np.ndarray:
        """Original id of each vertex (int64, N)."""
        if self.node_ids is None:
            return np.arange(self.num_nodes, dtype=np.int64)
        return self.node_ids

    def fingerprint(self) -> str:
        """Content fingerprint (:mod:`twopgraph.fingerprint`) of everything that changes a
        result computed from this data: the CSR (``indptr``, ``indices``), ``feat``,
        ``label``, the three splits, ``node_ids`` and ``num_classes``; not ``name``.

        Cached on the instance: it is recomputed when a field is assigned another array or
        value, but changing an array in place afterwards is not noticed. Cost of the first
        call: one read of every array, about 1-2 s/GB per thread (up to 8 threads; ~1.5 GB,
        mostly features, for ogbn-products); memory-mapped arrays are read from disk once.
        """
        arrays = (self.graph, self.feat, self.label, self.train_idx, self.val_idx,
                  self.test_idx, self.node_ids)
        cached = self._fingerprint
        if cached is not None and cached[1] == self.num_classes and all(
                (r() is a) if r is not None else (a is None) for r, a in zip(cached[0], arrays)):
            return cached[2]
        fp = fingerprint("graph-data", {"graph": self.graph.fingerprint(),
                                        "num_classes": int(self.num_classes)}, *arrays[1:])
        self._fingerprint = (tuple(None if a is None else weakref.ref(a) for a in arrays),
                             self.num_classes, fp)
        return fp

    def validate(self, check_symmetric: bool = False) -> "GraphData":
        """Check every array against the graph; raise :class:`GraphFormatError` naming it."""
        self.graph.validate(check_symmetric=check_symmetric)
        n = self.num_nodes
        if self.feat.ndim != 2 or self.feat.shape[0] != n:
            raise GraphFormatError(f"feat must be N x F with N = {n}, got shape {self.feat.shape}")
        if self.label.ndim != 1 or self.label.shape[0] != n:
            raise GraphFormatError(f"label must have length N = {n}, got shape {self.label.shape}")
        if not np.issubdtype(self.label.dtype, np.integer):
            raise GraphFormatError(f"label must be integer, got {self.label.dtype}")
        if n and self.label.min() < 0:
            raise GraphFormatError("label has negative entries")
        if n and self.label.max() >= self.num_classes:
            raise GraphFormatError(f"label has class {int(self.label.max())} but num_classes "
                                   f"is {self.num_classes}")
        owner = np.zeros(n, dtype=np.int8)
        for k, name in enumerate(SPLITS, start=1):
            idx = getattr(self, name)
            if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
                raise GraphFormatError(f"{name} must be a 1-D integer array")
            if idx.shape[0] and (idx.min() < 0 or idx.max() >= n):
                raise GraphFormatError(f"{name} has ids out of range [0, {n})")
            if np.any(owner[idx] != 0) or np.unique(idx).shape[0] != idx.shape[0]:
                raise GraphFormatError(f"{name} repeats ids or overlaps an earlier split")
            owner[idx] = k
        if self.train_idx.shape[0] == 0:
            raise GraphFormatError("train_idx is empty")
        if self.node_ids is not None and self.node_ids.shape != (n,):
            raise GraphFormatError(f"node_ids must have length N = {n}")
        return self

    def permute(self, perm: np.ndarray) -> "GraphData":
        """Renumber: new vertex ``i`` is old vertex ``perm[i]``; features, labels, splits follow.

        ``node_ids`` of the result still give original ids, so a chain of permutations keeps
        the link to the ids the user knows.
        """
        perm = check_permutation(perm, self.num_nodes)
        inv = inverse_permutation(perm)
        graph = CSRGraph(*permute_csr(self.graph.indptr, self.graph.indices, perm, inv))
        splits = {s: np.sort(inv[getattr(self, s)]) for s in SPLITS}
        return replace(self, graph=graph, feat=self.feat[perm], label=self.label[perm],
                       node_ids=self.original_ids()[perm], **splits)

    def summary(self) -> dict:
        """Statistics for ``twopgraph info`` (plain Python types)."""
        deg = self.graph.degrees()
        return {
            "name": self.name,
            "num_nodes": self.num_nodes,
            "num_edges_directed": self.graph.num_edges,
            "num_edges_undirected": self.graph.num_edges // 2,
            "num_features": self.num_features,
            "num_classes": self.num_classes,
            "feat_dtype": str(self.feat.dtype),
            "train": int(self.train_idx.shape[0]),
            "val": int(self.val_idx.shape[0]),
            "test": int(self.test_idx.shape[0]),
            "mean_degree": float(deg.mean()) if deg.shape[0] else 0.0,
            "max_degree": int(deg.max()) if deg.shape[0] else 0,
            "isolated_nodes": int((deg == 0).sum()),
            "feat_mib": round(self.feat.nbytes / 2**20, 2),
            "graph_mib": round(self.graph.nbytes() / 2**20, 2),
        }

    # -- I/O -------------------------------------------------------------------------------------
    def save_npz(self, path: str | os.PathLike) -> Path:
        """Write the DESIGN.md ``.npz`` (uncompressed) atomically: temp file, then rename."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays = dict(indptr=self.graph.indptr, indices=self.graph.indices, feat=self.feat,
                      label=self.label, train_idx=self.train_idx, val_idx=self.val_idx,
                      test_idx=self.test_idx, num_classes=np.int64(self.num_classes))
        if self.node_ids is not None:
            arrays["node_ids"] = self.node_ids
        atomic_write_bytes(path, lambda f: np.savez(f, **arrays))
        return path

    @classmethod
    def load_npz(cls, path: str | os.PathLike, name: str | None = None,
                 validate: bool = True) -> "GraphData":
        """Read a DESIGN.md ``.npz``; any problem raises :class:`GraphFormatError` (one line)."""
        path = Path(path)
        if not path.is_file():
            raise GraphFormatError(f"dataset file not found: {path}")
        try:
            with np.load(path, allow_pickle=False) as z:
                missing = [k for k in REQUIRED_KEYS if k not in z.files]
                if missing:
                    raise GraphFormatError(f"{path}: missing keys {', '.join(missing)}")
                arr = {k: z[k] for k in z.files}
        except GraphFormatError:
            raise
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
            raise GraphFormatError(f"{path}: not a readable .npz file ({type(e).__name__}: {e})")
        for k in ("indptr", "label", *SPLITS):
            if not np.issubdtype(arr[k].dtype, np.integer):
                raise GraphFormatError(f"{path}: '{k}' must be integer, got {arr[k].dtype}")
        if not np.issubdtype(arr["indices"].dtype, np.integer):
            raise GraphFormatError(f"{path}: 'indices' must be integer, got {arr['indices'].dtype}")
        indices = arr["indices"]
        if indices.dtype not in (np.int32, np.int64):
            indices = indices.astype(np.int64)
        feat = arr["feat"]
        if feat.dtype not in (np.float32, np.float16):
            if not (np.issubdtype(feat.dtype, np.floating) or np.issubdtype(feat.dtype, np.integer)
                    or feat.dtype == np.bool_):
                raise GraphFormatError(f"{path}: 'feat' must be numeric, got {feat.dtype}")
            feat = feat.astype(np.float32)
        if feat.ndim == 2 and not np.isfinite(feat).all():
            raise GraphFormatError(f"{path}: 'feat' has NaN or infinite values")
        data = cls(
            graph=CSRGraph(arr["indptr"].astype(np.int64, copy=False), indices),
            feat=feat, label=arr["label"].astype(np.int64, copy=False),
            train_idx=arr["train_idx"].astype(np.int64, copy=False),
            val_idx=arr["val_idx"].astype(np.int64, copy=False),
            test_idx=arr["test_idx"].astype(np.int64, copy=False),
            name=name if name is not None else path.stem,
            node_ids=arr["node_ids"].astype(np.int64) if "node_ids" in arr else None,
            num_classes=_scalar_int(arr, "num_classes", path) if "num_classes" in arr else -1,
        )
        if validate:
            try:
                data.validate()
            except GraphFormatError as e:
                raise GraphFormatError(f"{path}: {e}") from None
        return data


def atomic_write_bytes(path: str | os.PathLike, write) -> None:
    """Write ``path`` through ``write(binary file)`` into a temp file beside it, then rename
    (readers never see a half-written file; the temp file is removed on failure)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# -- renumbering kernel (numba) and its NumPy twin ------------------------------------------------


@njit(parallel=True, nogil=True, cache=True)
def permute_csr(indptr, indices, perm, inv):
    """CSR of the graph renumbered so that new vertex i is old vertex ``perm[i]``.

    ``inv`` is the inverse permutation (``inv[perm[i]] = i``). Rows of the result are sorted.
    Parallel over rows; ``indptr`` int64, ``indices`` keep their dtype.
    """
    n = perm.shape[0]
    deg = np.empty(n + 1, dtype=np.int64)
    deg[0] = 0
    for i in prange(n):
        v = perm[i]
        deg[i + 1] = indptr[v + 1] - indptr[v]
    new_indptr = np.cumsum(deg)
    new_indices = np.empty(indices.shape[0], dtype=indices.dtype)
    for i in prange(n):
        v = perm[i]
        s = indptr[v]
        d = indptr[v + 1] - s
        o = new_indptr[i]
        for j in range(d):
            new_indices[o + j] = inv[indices[s + j]]
        new_indices[o:o + d].sort()
    return new_indptr, new_indices


def permute_csr_ref(indptr, indices, perm, inv):
    """NumPy twin of :func:`permute_csr`."""
    deg = np.diff(indptr)[perm]
    new_indptr = np.zeros(perm.shape[0] + 1, dtype=np.int64)
    np.cumsum(deg, out=new_indptr[1:])
    rows = [np.sort(inv[indices[indptr[v]:indptr[v + 1]]]) for v in perm]
    new_indices = (np.concatenate(rows) if rows else np.empty(0)).astype(indices.dtype)
    return new_indptr, new_indices


register(permute_csr, permute_csr_ref)
