"""Graphs and node data, the data model: :class:`CSRGraph` and :class:`GraphData`, validation,
renumbering.

The ``.npz`` exchange format and the conversions from other libraries that the methods
``GraphData.load_npz``, ``save_npz``, ``from_scipy``, ``from_dgl`` and ``from_pyg`` offer are
in :mod:`twopgraph.graph.io`; the numba kernels (renumbering, the undirected check) in
:mod:`twopgraph.graph.kernels`.

Example::

    >>> g = CSRGraph.from_edges([0, 1], [1, 2], num_nodes=3)   # symmetrised
    >>> g.num_nodes, g.num_edges, g.neighbors(1).tolist()
    (3, 4, [0, 2])
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from twopgraph.core.fingerprint import fingerprint
from twopgraph.errors import GraphFormatError
from twopgraph.graph.io import (
    SPLITS,
    adjacency_edges,
    as_features,
    as_ints,
    dgl_parts,
    edge_arrays,
    node_arrays,
    pyg_parts,
    read_npz,
    write_npz,
)
from twopgraph.graph.kernels import csr_violations, permute_csr

if TYPE_CHECKING:
    import scipy.sparse as sp

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
        :mod:`twopgraph.core.fingerprint`), cached on this (frozen) instance: changing the arrays in
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
        the cost of one more copy of ``indices``). A graph found undirected is remembered on this
        (frozen) instance, like :meth:`fingerprint`; graphs from :meth:`from_edges` (symmetrised,
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
    def from_edges(cls, src: ArrayLike, dst: ArrayLike, num_nodes: int,
                   symmetrize: bool = True, remove_self_loops: bool = True,
                   index_dtype: DTypeLike | None = None) -> "CSRGraph":
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

    def to_scipy(self) -> sp.csr_matrix:
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


def check_permutation(perm: ArrayLike, n: int) -> np.ndarray:
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
    #: The store folder (:mod:`twopgraph.store.reader`) whose memory-mapped arrays this data is, or
    #: None for data held in memory. Derived data (:meth:`permute`, a symmetrised graph) has
    #: None: it is not that folder's content.
    store: Path | None = field(default=None, compare=False, repr=False)
    # (weak references to the arrays it was computed from, num_classes, fingerprint)
    _fingerprint: tuple | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.feat = as_features(self.feat)
        self.label = as_ints(self.label, column=True)
        for name in SPLITS:
            setattr(self, name, as_ints(getattr(self, name)))
        if self.node_ids is not None:
            self.node_ids = as_ints(self.node_ids)
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
        """Content fingerprint (:mod:`twopgraph.core.fingerprint`) of everything that changes a
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
            "name": self.name, "num_nodes": self.num_nodes,
            "num_edges_directed": self.graph.num_edges,
            "num_edges_undirected": self.graph.num_edges // 2,
            "num_features": self.num_features, "num_classes": self.num_classes,
            "feat_dtype": str(self.feat.dtype), "train": int(self.train_idx.shape[0]),
            "val": int(self.val_idx.shape[0]), "test": int(self.test_idx.shape[0]),
            "mean_degree": float(deg.mean()) if deg.shape[0] else 0.0,
            "max_degree": int(deg.max()) if deg.shape[0] else 0,
            "isolated_nodes": int((deg == 0).sum()), "feat_mib": round(self.feat.nbytes / 2**20, 2),
            "graph_mib": round(self.graph.nbytes() / 2**20, 2),
        }

    # -- I/O -------------------------------------------------------------------------------------
    def save_npz(self, path: str | os.PathLike) -> Path:
        """Write the ``.npz`` exchange format (uncompressed) atomically: temp file, then rename."""
        arrays = dict(indptr=self.graph.indptr, indices=self.graph.indices, feat=self.feat,
                      label=self.label, train_idx=self.train_idx, val_idx=self.val_idx,
                      test_idx=self.test_idx, num_classes=np.int64(self.num_classes))
        if self.node_ids is not None:
            arrays["node_ids"] = self.node_ids
        return write_npz(arrays, path)

    @classmethod
    def load_npz(cls, path: str | os.PathLike, name: str | None = None,
                 validate: bool = True) -> "GraphData":
        """Read an ``.npz`` of the exchange format; any problem raises
        :class:`GraphFormatError` (one line)."""
        path = Path(path)
        arr = read_npz(path)
        data = cls(graph=CSRGraph(arr.pop("indptr"), arr.pop("indices")),
                   name=name if name is not None else path.stem, **arr)
        if validate:
            try:
                data.validate()
            except GraphFormatError as e:
                raise GraphFormatError(f"{path}: {e}") from None
        return data

    # -- from other libraries -------------------------------------------------------------------
    @classmethod
    def from_scipy(cls, adj: sp.spmatrix | sp.sparray | ArrayLike,
                   feat: ArrayLike | sp.spmatrix | sp.sparray, label: ArrayLike,
                   train_idx: ArrayLike | None = None, val_idx: ArrayLike | None = None,
                   test_idx: ArrayLike | None = None, *, num_classes: int | None = None,
                   name: str = "", split_seed: int = 0) -> "GraphData":
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
        src, dst, n = adjacency_edges(adj)
        return cls._from_parts(src, dst, n, feat, label, (train_idx, val_idx, test_idx),
                               num_classes=num_classes, name=name, split_seed=split_seed)

    @classmethod
    def from_dgl(cls, g: Any, feat_key: str = "feat", label_key: str = "label",
                 train_idx: ArrayLike | None = None, val_idx: ArrayLike | None = None,
                 test_idx: ArrayLike | None = None, *, num_classes: int | None = None,
                 name: str = "", split_seed: int = 0) -> "GraphData":
        """A validated :class:`GraphData` from a homogeneous DGL graph (``dgl`` is not
        imported: any object with ``num_nodes()``, ``edges()`` and ``ndata`` will do).

        Features and labels are ``g.ndata[feat_key]`` and ``g.ndata[label_key]``; splits not
        given are read from the boolean masks ``g.ndata["train_mask"]``, ``"val_mask"``,
        ``"test_mask"`` (DGL's built-in datasets) when present, else split as in
        :meth:`from_scipy`, which also describes the conversions (undirected graph,
        float32 features, int64 labels).
        """
        parts = dgl_parts(g, feat_key, label_key, (train_idx, val_idx, test_idx))
        return cls._from_parts(*parts, num_classes=num_classes, name=name,
                               split_seed=split_seed)

    @classmethod
    def from_pyg(cls, data: Any, train_idx: ArrayLike | None = None,
                 val_idx: ArrayLike | None = None, test_idx: ArrayLike | None = None, *,
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
        parts = pyg_parts(data, (train_idx, val_idx, test_idx))
        return cls._from_parts(*parts, num_classes=num_classes, name=name,
                               split_seed=split_seed)

    @classmethod
    def _from_parts(cls, src, dst, n: int, feat, label, splits, *, num_classes, name: str,
                    split_seed: int) -> "GraphData":
        """The graph of edges ``src -> dst`` over ``n`` vertices, made undirected, with the
        node arrays converted (see :meth:`from_scipy`) and validated."""
        src, dst = edge_arrays(src, dst)
        graph = CSRGraph.from_edges(src, dst, n)
        feat, label, ids = node_arrays(feat, label, splits, n, split_seed)
        data = cls(graph, feat, label, *ids, name=name,
                   num_classes=-1 if num_classes is None else num_classes)
        return data.validate()
