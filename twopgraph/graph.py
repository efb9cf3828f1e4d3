"""Graphs and node data: :class:`CSRGraph` and :class:`GraphData`, validation, renumbering, I/O.

On-disk format (``.npz``, docs/formats.md): ``indptr`` int64 (N+1), ``indices`` int32/int64 (E),
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

import logging
import os
import weakref
import zipfile
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from numba import njit, prange

from .errors import GraphFormatError
from .files import atomic_write_bytes
from .fingerprint import fingerprint
from .jit import register
from .rng import splitmix64

REQUIRED_KEYS = ("indptr", "indices", "feat", "label", "train_idx", "val_idx", "test_idx")
SPLITS = ("train_idx", "val_idx", "test_idx")
#: The fix named by every "graph is not undirected" error.
SYMMETRIZE_HINT = ("Rerun with --symmetrize (load_dataset(..., symmetrize=True)) to make it "
                   "undirected while loading: reverse entries added, self loops and duplicates "
                   "dropped")
#: ``num_classes`` may be at most max(N, this): a larger class id is a damaged label, and the
#: model (and the scheduler's label counts) would allocate memory per class.
MIN_CLASS_LIMIT = 1024


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
        (:meth:`undirected_problem`: O(E), parallel numba).
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
            problem = self.undirected_problem()
            if problem is not None:
                raise GraphFormatError(problem)
        return self

    def undirected_problem(self) -> str | None:
        """None if the graph is undirected as the dataset format requires (every u->v also as
        v->u, no self loops, no duplicate entries), else the one-line reason naming the first
        offending edge of each kind and the fix (``--symmetrize``).

        Needs a structurally valid CSR (:meth:`validate` checks that first). Cost: one
        streaming pass in parallel numba (:func:`csr_violations`; about 0.6 CPU-seconds for
        the 124M entries of synthetic-products), plus a binary search per entry only when the
        graph is found faulty; rows need not be sorted (a row-sorted copy is checked then, at
        the cost of one more copy of ``indices``). A graph found undirected is remembered on this (frozen)
        instance, like :meth:`fingerprint`; graphs from :meth:`from_edges` (symmetrised,
        without self loops) are undirected by construction and not checked again.
        """
        if self.__dict__.get("_undirected"):
            return None
        ip = np.ascontiguousarray(self.indptr, dtype=np.int64)
        ix = self.indices
        if ix.dtype not in (np.int32, np.int64):
            ix = ix.astype(np.int64)
        ix = np.ascontiguousarray(ix)
        v = csr_violations(ip, ix)
        if v[0] >= 0:  # unsorted rows: check a row-sorted copy (same edges)
            ident = np.arange(self.num_nodes, dtype=np.int64)
            ip, ix = permute_csr(ip, ix, ident, ident)
            v = csr_violations(ip, ix)
        _, loops, first_loop, dups, first_dup, missing, first_missing = (int(x) for x in v)
        if loops == dups == missing == 0:
            object.__setattr__(self, "_undirected", True)
            return None

        def edge(pos: int) -> tuple[int, int]:
            return int(np.searchsorted(ip, pos, side="right")) - 1, int(ix[pos])

        what = []
        if missing:
            u, w = edge(first_missing)
            what.append(f"{missing:,} of {ix.shape[0]:,} entries u->v have no v->u (first: "
                        f"{u}->{w} without {w}->{u})")
        if loops:
            u, _ = edge(first_loop)
            what.append(f"{loops:,} self loop{'s' if loops > 1 else ''} (first: {u}->{u})")
        if dups:
            u, w = edge(first_dup)
            what.append(f"{dups:,} duplicate entr{'ies' if dups > 1 else 'y'} (first: "
                        f"{u}->{w} repeated)")
        return ("graph is not undirected (symmetric, without self loops or duplicate edges) "
                f"as the dataset format requires: {'; '.join(what)}. {SYMMETRIZE_HINT}")

    def symmetrized(self) -> tuple["CSRGraph", dict]:
        """The undirected graph of this one and what changed.

        Every entry u->v (u != v) becomes the edge {u, v}; self loops and repeated entries are
        dropped; rows come out sorted (:meth:`from_edges`). The dict counts ``self_loops`` and
        ``duplicates`` removed and reverse entries ``added``; all 0 means nothing changed
        (the graph returned is then this one). Needs a structurally valid CSR.
        """
        if self.undirected_problem() is None:
            return self, {"self_loops": 0, "duplicates": 0, "added": 0}
        n, e = self.num_nodes, self.num_edges
        src = np.repeat(np.arange(n, dtype=np.int64), self.degrees())
        loops = int(np.count_nonzero(src == self.indices))
        directed = CSRGraph.from_edges(src, self.indices, n, symmetrize=False)
        del src
        dups = e - loops - directed.num_edges
        src = np.repeat(np.arange(n, dtype=np.int64), directed.degrees())
        out = CSRGraph.from_edges(
            src, directed.indices, n, symmetrize=True,
            index_dtype=self.indices.dtype if self.indices.dtype in (np.int32, np.int64) else None)
        return out, {"self_loops": loops, "duplicates": dups,
                     "added": out.num_edges - directed.num_edges}

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
        graph = cls(indptr, indices)
        if symmetrize and remove_self_loops:  # undirected by construction
            object.__setattr__(graph, "_undirected", True)
        return graph

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


def _as_features(x) -> np.ndarray:
    """``x`` as a C-contiguous float32 (or float16) array; non-numeric input is left for
    :meth:`GraphData.validate` to refuse."""
    x = x if isinstance(x, np.ndarray) else np.asarray(x)
    if x.dtype not in (np.float32, np.float16) and (
            np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)
            or x.dtype == np.bool_):
        x = x.astype(np.float32)
    return x if x.flags.c_contiguous else np.ascontiguousarray(x)


def _as_ints(x, column: bool = False) -> np.ndarray:
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


@dataclass
class GraphData:
    """A graph with node features, labels and the train/val/test split.

    ``feat`` float32 (N x F; float16 is kept for compact stores), ``label`` int64 (N) class
    ids ``0..num_classes-1``, or -1 for an unlabelled vertex (OGB's convention; allowed
    outside the splits only), splits int64 sorted ids. ``node_ids`` int64 (N) gives each
    vertex's id in the original numbering (identity unless :meth:`permute` was applied), so
    results can always be reported in original ids. ``num_classes`` defaults to the largest
    label + 1.

    Construction converts what it can without judging it: other integer label, split and id
    dtypes become int64, an (N x 1) label column becomes a vector, other numeric features
    become float32, non-contiguous arrays are copied (torch needs them contiguous). It does not
    validate (graphs can be large): :meth:`validate` refuses what is left (float labels,
    boolean masks as splits, labels out of range, a graph that is not undirected, ...) with a
    one-line :class:`GraphFormatError`.
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
    #: The store folder (:mod:`twopgraph.store`) whose memory-mapped arrays this data is, or
    #: None for data held in memory. Derived data (:meth:`permute`, a symmetrised graph) has
    #: None: it is not that folder's content.
    store: Path | None = field(default=None, compare=False, repr=False)
    # (weak references to the arrays it was computed from, num_classes, fingerprint)
    _fingerprint: tuple | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        self.feat = _as_features(self.feat)
        self.label = _as_ints(self.label, column=True)
        for name in SPLITS:
            setattr(self, name, _as_ints(getattr(self, name)))
        if self.node_ids is not None:
            self.node_ids = _as_ints(self.node_ids)
        if self.num_classes is None or self.num_classes < 0:
            lab = self.label
            ok = lab.ndim == 1 and lab.shape[0] and np.issubdtype(lab.dtype, np.integer)
            # -1 (unlabelled) never raises the count; validate() bounds it
            self.num_classes = max(int(lab.max()) + 1, 0) if ok else 0
        self.num_classes = int(self.num_classes)

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    @property
    def num_features(self) -> int:
        return int(self.feat.shape[1])

    def class_problem(self) -> str | None:
        """Why a classifier cannot learn much from these labels, else None: a single class
        (``num_classes`` 1), or training vertices that all hold one class (the model can only
        learn to predict it). O(|train_idx|)."""
        name = self.name or "the dataset"
        if self.num_classes <= 1:
            return (f"{name} has one class only (num_classes {self.num_classes}): every "
                    f"prediction is that class and accuracy is 1 by construction")
        seen = np.unique(np.asarray(self.label)[np.asarray(self.train_idx)])
        if seen.shape[0] == 1:
            return (f"the training vertices of {name} all hold class {int(seen[0])} (of "
                    f"{self.num_classes}): the model can only learn to predict that class")
        return None

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

    def validate(self, check_symmetric: bool = True) -> "GraphData":
        """Check every array against the graph; raise :class:`GraphFormatError` naming it.

        Labels are bounded before anything is sized by them: class ids ``0..num_classes-1``
        with ``num_classes <= max(N, MIN_CLASS_LIMIT)``, or -1 (unlabelled) outside the
        splits. Features must be finite. ``check_symmetric`` (the default: the dataset
        format) also checks that the graph is undirected without self loops or duplicates
        (:meth:`CSRGraph.undirected_problem`); pass False only for graphs that are not whole
        datasets (e.g. a partition's local graph).
        """
        self.graph.validate()
        n = self.num_nodes
        feat = self.feat
        if feat.ndim != 2 or feat.shape[0] != n:
            raise GraphFormatError(f"feat must be N x F with N = {n}, got shape {feat.shape}")
        if feat.dtype not in (np.float32, np.float16):
            raise GraphFormatError(f"feat must hold numbers (float32, float16; other numeric "
                                   f"types are converted to float32), got {feat.dtype}")
        rows = max(1, (1 << 22) // max(feat.shape[1], 1))
        for a in range(0, n, rows):
            if not np.isfinite(feat[a:a + rows]).all():
                bad = a + int(np.flatnonzero(~np.isfinite(feat[a:a + rows]).all(1))[0])
                raise GraphFormatError(f"feat has NaN or infinite values (first: vertex {bad})")
        self._validate_labels()
        owner = np.zeros(n, dtype=np.int8)
        for k, name in enumerate(SPLITS, start=1):
            idx = getattr(self, name)
            if idx.dtype == np.bool_:
                raise GraphFormatError(f"{name} is a boolean mask; it must list vertex ids "
                                       f"(np.flatnonzero(mask))")
            if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
                raise GraphFormatError(f"{name} must be a 1-D array of integer vertex ids, got "
                                       f"{idx.dtype} of shape {idx.shape}")
            if idx.shape[0] and (idx.min() < 0 or idx.max() >= n):
                raise GraphFormatError(f"{name} has ids out of range [0, {n})")
            if np.any(owner[idx] != 0):
                raise GraphFormatError(f"{name} overlaps an earlier split")
            owner[idx] = k
            if np.count_nonzero(owner == k) != idx.shape[0]:  # O(N), no sort
                mask = idx.shape[0] == n and idx.max(initial=0) <= 1
                raise GraphFormatError(
                    f"{name} repeats ids" + ("; it looks like a 0/1 mask (one entry per "
                                             "vertex, values 0 and 1): list the vertex ids "
                                             "instead, np.flatnonzero(mask)" if mask else ""))
            unlabelled = np.flatnonzero(self.label[idx] < 0)
            if unlabelled.shape[0]:
                many = unlabelled.shape[0]
                raise GraphFormatError(
                    f"{name} holds {many:,} unlabelled vert{'ices' if many > 1 else 'ex'} "
                    f"(label -1; first: vertex {int(idx[unlabelled[0]])}); unlabelled vertices "
                    "may only lie outside train_idx, val_idx and test_idx")
        if self.train_idx.shape[0] == 0:
            raise GraphFormatError("train_idx is empty")
        if self.node_ids is not None and (self.node_ids.shape != (n,) or not np.issubdtype(
                self.node_ids.dtype, np.integer)):
            raise GraphFormatError(f"node_ids must be {n} integer ids (one per vertex), got "
                                   f"{self.node_ids.dtype} of shape {self.node_ids.shape}")
        if check_symmetric:
            problem = self.graph.undirected_problem()
            if problem is not None:
                raise GraphFormatError(problem)
        return self

    def _validate_labels(self) -> None:
        """Class ids in ``0..num_classes-1`` or -1, ``num_classes`` bounded by the graph's
        size (checked before any array is sized by the number of classes)."""
        n, lab, c = self.num_nodes, self.label, self.num_classes
        if lab.ndim != 1 or lab.shape[0] != n:
            raise GraphFormatError(f"label must have length N = {n}, got shape {lab.shape}")
        if not np.issubdtype(lab.dtype, np.integer):
            raise GraphFormatError(f"label must hold integer class ids (-1: unlabelled), got "
                                   f"{lab.dtype}; convert with label.astype(np.int64)")
        if lab.dtype != np.int64:  # construction converts: this array was assigned later
            raise GraphFormatError(f"label must be int64 (torch's class-index type), got "
                                   f"{lab.dtype}, assigned after construction; assign "
                                   f"label.astype(np.int64), or build the GraphData anew "
                                   f"(construction converts)")
        limit = max(n, MIN_CLASS_LIMIT)
        rule = (f"class ids must be 0..C-1 with C <= max(N, {MIN_CLASS_LIMIT}) = {limit}, "
                f"and -1 marks an unlabelled vertex")
        lo, hi = (int(lab.min()), int(lab.max())) if n else (0, -1)
        if lo < -1:
            v = int(np.argmax(lab < -1))
            raise GraphFormatError(f"label of vertex {v} is {int(lab[v])}: {rule}")
        if hi >= limit:
            v = int(np.argmax(lab))
            raise GraphFormatError(f"label of vertex {v} is {hi}, too large for a graph of {n} "
                                   f"vertices: {rule} (renumber the classes, e.g. "
                                   f"np.unique(label, return_inverse=True))")
        if c > limit:
            raise GraphFormatError(f"num_classes is {c}, too large for a graph of {n} vertices: "
                                   f"{rule}")
        if hi >= c:
            raise GraphFormatError(f"label has class {hi} but num_classes is {c}")

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
                       node_ids=self.original_ids()[perm], store=None, **splits)

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
        """Write the ``.npz`` exchange format (uncompressed) atomically: temp file, then rename."""
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
        """Read an ``.npz`` of the exchange format; any problem raises
        :class:`GraphFormatError` (one line)."""
        path = Path(path)
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

    # -- from other libraries -------------------------------------------------------------------
    @classmethod
    def from_scipy(cls, adj, feat, label, train_idx=None, val_idx=None, test_idx=None, *,
                   num_classes: int | None = None, name: str = "",
                   split_seed: int = 0) -> "GraphData":
        """A validated :class:`GraphData` from an adjacency matrix and node arrays.

        ``adj``: any N x N scipy sparse matrix or array (``csr_matrix``, ``coo_array``, ...)
        or a dense 2-D array; every stored nonzero entry ``(u, v)`` is an edge (explicit zeros
        are not). The graph is made undirected as :meth:`CSRGraph.from_edges` does:
        symmetrised, duplicates merged, self loops dropped; edge weights are not kept (one
        warning when the nonzero entries are not all 1).
        ``feat`` (N x F; NumPy, torch or scipy sparse) becomes float32, ``label`` (N, or
        N x 1; -1 = unlabelled) int64. Splits are vertex ids or boolean masks of length N
        (NumPy or torch). With no split given, the labelled vertices (label >= 0) are split
        60/20/20 into train/val/test by a permutation drawn from ``split_seed`` (default 0:
        the same split every call); with some given, the missing ones are empty (and a
        missing ``train_idx`` is refused). Anything that cannot be used -- float labels, a
        non-square matrix, NaN features, splits that overlap -- raises a one-line
        :class:`GraphFormatError` here, never later inside torch.

        Example::

            >>> import scipy.sparse as sp
            >>> adj = sp.coo_matrix(([1, 1, 1], ([0, 1, 2], [1, 2, 2])), shape=(3, 3))
            >>> d = GraphData.from_scipy(adj, np.eye(3), [0, 1, 0], train_idx=[0, 1],
            ...                          test_idx=[2])
            >>> d.graph.num_edges, d.feat.dtype, d.label.dtype, d.val_idx.tolist()
            (4, dtype('float32'), dtype('int64'), [])
        """
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
        return cls._from_parts(src, dst, n, feat, label, (train_idx, val_idx, test_idx),
                               num_classes=num_classes, name=name, split_seed=split_seed)

    @classmethod
    def from_dgl(cls, g, feat_key: str = "feat", label_key: str = "label",
                 train_idx=None, val_idx=None, test_idx=None, *, num_classes: int | None = None,
                 name: str = "", split_seed: int = 0) -> "GraphData":
        """A validated :class:`GraphData` from a homogeneous DGL graph (``dgl`` is not
        imported: any object with ``num_nodes()``, ``edges()`` and ``ndata`` will do).

        Features and labels are ``g.ndata[feat_key]`` and ``g.ndata[label_key]``; splits not
        given are read from the boolean masks ``g.ndata["train_mask"]``, ``"val_mask"``,
        ``"test_mask"`` (DGL's built-in datasets) when present, else split as in
        :meth:`from_scipy`, which also describes the conversions (undirected graph,
        float32 features, int64 labels).
        """
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
                  for s, k in zip((train_idx, val_idx, test_idx), ("train", "val", "test"))]
        return cls._from_parts(src, dst, int(g.num_nodes()), ndata[feat_key], ndata[label_key],
                               splits, num_classes=num_classes, name=name,
                               split_seed=split_seed)

    @classmethod
    def from_pyg(cls, data, train_idx=None, val_idx=None, test_idx=None, *,
                 num_classes: int | None = None, name: str = "",
                 split_seed: int = 0) -> "GraphData":
        """A validated :class:`GraphData` from a PyG ``Data`` object (``torch_geometric`` is
        not imported: any object with ``edge_index``, ``x`` and ``y`` will do).

        ``data.edge_index`` (2 x E) gives the edges, ``data.x`` the features, ``data.y`` the
        labels; splits not given are read from the boolean masks ``data.train_mask``,
        ``data.val_mask``, ``data.test_mask`` when present (a 2-D mask holds several splits:
        pass one column, e.g. ``train_idx=data.train_mask[:, 0]``), else split as in
        :meth:`from_scipy`, which also describes the conversions.
        """
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
                  for s, k in zip((train_idx, val_idx, test_idx), ("train", "val", "test"))]
        return cls._from_parts(ei[0], ei[1], n, data.x, data.y, splits,
                               num_classes=num_classes, name=name, split_seed=split_seed)

    @classmethod
    def _from_parts(cls, src, dst, n: int, feat, label, splits, *, num_classes, name: str,
                    split_seed: int) -> "GraphData":
        """The graph of edges ``src -> dst`` over ``n`` vertices, made undirected, with the
        node arrays converted (see :meth:`from_scipy`) and validated."""
        src, dst = _host_array(src, "src").ravel(), _host_array(dst, "dst").ravel()
        if not (np.issubdtype(src.dtype, np.integer) and np.issubdtype(dst.dtype, np.integer)):
            raise GraphFormatError(f"edge endpoints must be integers, got {src.dtype}/{dst.dtype}")
        graph = CSRGraph.from_edges(src, dst, n)
        feat = _host_array(feat, "feat")
        if feat.ndim == 1:
            feat = feat.reshape(-1, 1)
        label = _as_ints(_host_array(label, "label"), column=True)
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
        data = cls(graph, feat, label, *ids, name=name,
                   num_classes=-1 if num_classes is None else num_classes)
        return data.validate()


def random_split(label: np.ndarray, fractions=(0.6, 0.2, 0.2),
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


# -- undirected-format check (numba) and its NumPy twin -------------------------------------------
_CHECK_CHUNKS = 1024  # row chunks of about equal edge counts (load balance with hubs)


@njit(parallel=True, nogil=True, cache=True)
def csr_violations(indptr, indices):
    """Where a structurally valid CSR breaks the undirected format (``indptr`` int64 monotone
    from 0 to E, every index in [0, N) -- :meth:`CSRGraph.validate` checks that first).

    Returns int64 ``[unsorted_row, loops, first_loop, dups, first_dup, missing,
    first_missing]``: ``unsorted_row`` is the first row whose entries decrease (-1: every row
    sorted); when it is >= 0 the rest is ``0 / -1`` (duplicates and reverses are looked up in
    sorted rows). ``loops`` counts entries u->u; ``dups`` entries equal to the one before them
    in their row; ``missing`` entries u->v (u != v) whose row v holds no u. Each ``first_*``
    is the CSR position of the first such entry (-1: none).

    Pass 1 streams the rows once (parallel over chunks of about equal edge counts): order,
    self loops, duplicates, and the sum (mod 2**64) of a 64-bit hash of the undirected pair
    {u, v} over entries with u < v minus the same over entries with u > v. Without duplicates
    the graph is symmetric iff those two sets of pairs are equal, so a zero sum clears it (a
    non-symmetric graph passes only if the hash sums collide, ~2**-64).
    Only otherwise does pass 2 look up every reverse (a binary search of u in row v: random
    reads, ~10x the cost of pass 1) to count and locate the missing ones. O(E) for a valid
    graph, O(E log d) for an invalid one.
    """
    n = indptr.shape[0] - 1
    e = indices.shape[0]
    k = max(1, min(n, _CHECK_CHUNKS))
    bounds = np.empty(k + 1, dtype=np.int64)
    for c in range(k):
        bounds[c] = np.searchsorted(indptr, (e // k) * c + min(c, e % k))
    bounds[0] = 0
    bounds[k] = n
    unsorted = np.full(k, -1, dtype=np.int64)
    loops = np.zeros(k, dtype=np.int64)
    first_loop = np.full(k, -1, dtype=np.int64)
    dups = np.zeros(k, dtype=np.int64)
    first_dup = np.full(k, -1, dtype=np.int64)
    bal = np.zeros(k, dtype=np.uint64)
    nn = np.uint64(n)
    # pass 1: sorted rows, self loops, duplicates, hash balance of u<v vs u>v pairs (streaming)
    for c in prange(k):
        up = np.uint64(0)
        down = np.uint64(0)
        for u in range(bounds[c], bounds[c + 1]):
            s, t = indptr[u], indptr[u + 1]
            uu = np.uint64(u)
            for j in range(s, t):
                v = indices[j]
                if j > s:
                    if v < indices[j - 1]:
                        unsorted[c] = u
                        break
                    if v == indices[j - 1]:
                        dups[c] += 1
                        if first_dup[c] < 0:
                            first_dup[c] = j
                if v == u:
                    loops[c] += 1
                    if first_loop[c] < 0:
                        first_loop[c] = j
                elif v > u:
                    up += splitmix64(uu * nn + np.uint64(v))
                else:
                    down += splitmix64(np.uint64(v) * nn + uu)
            if unsorted[c] >= 0:
                break
        bal[c] = up - down
    out = np.full(7, -1, dtype=np.int64)
    out[1] = 0
    out[3] = 0
    out[5] = 0
    for c in range(k):
        if unsorted[c] >= 0:
            out[0] = unsorted[c]
            return out
    out[1] = loops.sum()
    out[3] = dups.sum()
    h = np.uint64(0)
    for c in range(k):
        h += bal[c]
    for c in range(k - 1, -1, -1):  # the first chunk with a hit holds the first position
        if first_loop[c] >= 0:
            out[2] = first_loop[c]
        if first_dup[c] >= 0:
            out[4] = first_dup[c]
    if out[3] == 0 and h == np.uint64(0):
        return out  # symmetric (the multisets of u->v and v->u agree)
    # pass 2: every u->v (u != v) has v->u (binary search of u in the sorted row v)
    missing = np.zeros(k, dtype=np.int64)
    first_missing = np.full(k, -1, dtype=np.int64)
    for c in prange(k):
        for u in range(bounds[c], bounds[c + 1]):
            for j in range(indptr[u], indptr[u + 1]):
                v = indices[j]
                if v == u:
                    continue
                lo, hi = indptr[v], indptr[v + 1]
                end = hi
                while lo < hi:
                    mid = (lo + hi) >> 1
                    if indices[mid] < u:
                        lo = mid + 1
                    else:
                        hi = mid
                if lo == end or indices[lo] != u:
                    missing[c] += 1
                    if first_missing[c] < 0:
                        first_missing[c] = j
    out[5] = missing.sum()
    for c in range(k - 1, -1, -1):
        if first_missing[c] >= 0:
            out[6] = first_missing[c]
    return out


def csr_violations_ref(indptr, indices):
    """NumPy twin of :func:`csr_violations`."""
    n = indptr.shape[0] - 1
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    dst = indices.astype(np.int64)
    out = np.array([-1, 0, -1, 0, -1, 0, -1], dtype=np.int64)
    same_row = src[1:] == src[:-1]
    down = np.flatnonzero(same_row & (dst[1:] < dst[:-1]))
    if down.shape[0]:
        out[0] = src[down[0] + 1]
        return out
    loops = np.flatnonzero(src == dst)
    dups = np.flatnonzero(same_row & (dst[1:] == dst[:-1])) + 1
    key = src * n + dst  # sorted: rows in order, each row sorted
    rev = dst * n + src
    pos = np.minimum(np.searchsorted(key, rev), max(key.shape[0] - 1, 0))
    has_rev = key[pos] == rev if key.shape[0] else np.zeros(0, dtype=bool)
    missing = np.flatnonzero(~has_rev & (src != dst))
    for i, hits in ((1, loops), (3, dups), (5, missing)):
        out[i] = hits.shape[0]
        if hits.shape[0]:
            out[i + 1] = hits[0]
    return out


register(csr_violations, csr_violations_ref)
