"""The Planetoid citation graphs (Cora, CiteSeer, PubMed; Yang et al., 2016) from their raw
files, read as PyG's ``Planetoid`` reads them (``torch_geometric.io.read_planetoid_data``).

A dataset ``NAME`` is eight files ``ind.NAME.SUFFIX`` in one folder (:data:`PLANETOID_FILES`):

- ``x``, ``tx``, ``allx``: the features of the labelled training vertices, of the test vertices
  and of every vertex but the test ones (scipy sparse matrices -- or arrays --, pickled by
  Python 2: read with ``encoding="latin1"``);
- ``y``, ``ty``, ``ally``: their one-hot labels (arrays, same rows);
- ``graph``: ``{vertex: [neighbours]}`` (a ``defaultdict`` of lists);
- ``test.index``: the test vertices' ids, one per line (text).

The vertices are ``allx``'s rows, then ``tx``'s, the test rows moved to the ids
``test.index`` gives. Where those ids leave gaps (CiteSeer: 15 isolated vertices have no
features in the files), the gaps are vertices of zero features and label 0, in no split, as in
PyG. Labels: the argmax of the one-hot rows. The public split: train = the ``len(y)`` first
vertices (20 per class), val = the next 500, test = ``test.index``. The graph is made
undirected, without self loops or duplicate edges (:meth:`CSRGraph.from_edges`; PyG keeps
the files' few one-way edges). Features float32 (dense: 2708 x 1433 for Cora, 19717 x 500 for
PubMed).

The pickles are read by an unpickler that builds numpy arrays, scipy sparse matrices and plain
containers only (:class:`_ArraysOnly`), so a foreign file cannot run code. A missing, damaged or
inconsistent file is one line (:class:`~twopgraph.errors.GraphFormatError`) naming it.

Example::

    >>> data = read_planetoid("datasets/planetoid/cora/raw", "cora")   # doctest: +SKIP
    >>> data.num_nodes, data.train_idx.shape[0], data.val_idx.shape[0]  # doctest: +SKIP
    (2708, 140, 500)
"""

from __future__ import annotations

import os
import pickle
import warnings
from pathlib import Path

import numpy as np

from twopgraph.errors import GraphFormatError
from twopgraph.graph.data import CSRGraph, GraphData

#: The suffixes of a Planetoid dataset's raw files ``ind.NAME.SUFFIX``, in PyG's order.
PLANETOID_FILES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")

#: Vertices of the public split's validation set (after the training ones).
PLANETOID_VAL_SIZE = 500


def planetoid_files(folder: str | os.PathLike, name: str) -> list[Path]:
    """The raw files of Planetoid dataset ``name`` in ``folder`` (they need not exist), in
    :data:`PLANETOID_FILES`' order."""
    return [Path(folder) / f"ind.{name.lower()}.{s}" for s in PLANETOID_FILES]


class _ArraysOnly(pickle.Unpickler):
    """An unpickler of numpy arrays, scipy sparse matrices and builtin containers: what the
    Planetoid files hold; any other global (a function a foreign file would call) is
    refused."""

    _MODULES = ("numpy", "scipy.sparse")
    _GLOBALS = frozenset({("collections", "defaultdict"), ("collections", "OrderedDict"),
                ("copy_reg", "_reconstructor"), ("copyreg", "_reconstructor"),
                ("_codecs", "encode")})
    _BUILTINS = frozenset({"object", "list", "dict", "set", "frozenset", "tuple", "int",
                           "float", "complex", "bytes", "bytearray", "str", "bool", "slice",
                           "range"})

    def find_class(self, module: str, name: str):
        if module in ("builtins", "__builtin__") and name in self._BUILTINS:
            return super().find_class(module, name)
        if (module, name) in self._GLOBALS or any(
                module == m or module.startswith(m + ".") for m in self._MODULES):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} (a Planetoid file "
                                     f"holds arrays and lists only)")


def _read_pickle(path: Path):
    """The object pickled in ``path`` (Python 2's str read as latin1)."""
    try:
        with open(path, "rb") as f, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # scipy.sparse.csr / numpy.core: deprecated names
            return _ArraysOnly(f, encoding="latin1").load()
    except FileNotFoundError:
        raise GraphFormatError(f"{path}: no such file") from None
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError,
            ValueError, TypeError, IndexError, KeyError) as e:
        raise GraphFormatError(f"{path}: not a Planetoid file ({type(e).__name__}: "
                               f"{str(e).splitlines()[0][:200] if str(e) else ''})") from None


def _matrix(path: Path, what: str) -> np.ndarray:
    """The 2-D array pickled in ``path`` (a sparse matrix made dense)."""
    obj = _read_pickle(path)
    if hasattr(obj, "toarray"):
        obj = obj.toarray()
    arr = np.asarray(obj)
    if arr.ndim != 2 or not np.issubdtype(arr.dtype, np.number):
        raise GraphFormatError(f"{path}: expected a 2-D numeric {what}, got "
                               f"{arr.dtype} of shape {arr.shape}")
    return arr


def _test_index(path: Path) -> np.ndarray:
    try:
        text = path.read_text(encoding="latin1")
    except FileNotFoundError:
        raise GraphFormatError(f"{path}: no such file") from None
    except OSError as e:
        raise GraphFormatError(f"{path}: cannot read it ({e.strerror or e})") from None
    try:
        ids = np.array([int(t) for t in text.split()], dtype=np.int64)
    except ValueError:
        raise GraphFormatError(f"{path}: expected one vertex id per line") from None
    if ids.shape[0] == 0 or ids.min() < 0:
        raise GraphFormatError(f"{path}: expected non-negative vertex ids, one per line")
    return ids


def _edges(path: Path, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` of the adjacency lists pickled in ``path``."""
    adj = _read_pickle(path)
    if not isinstance(adj, dict):
        raise GraphFormatError(f"{path}: expected a dict of adjacency lists, got "
                               f"{type(adj).__name__}")
    try:
        src = np.concatenate([np.full(len(v), int(k), dtype=np.int64) for k, v in adj.items()]
                             or [np.zeros(0, np.int64)])
        dst = np.concatenate([np.asarray(list(v), dtype=np.int64).reshape(-1)
                              for v in adj.values()] or [np.zeros(0, np.int64)])
    except (TypeError, ValueError):
        raise GraphFormatError(f"{path}: expected integer vertex ids in its adjacency "
                               f"lists") from None
    bad = (src < 0) | (src >= n) | (dst < 0) | (dst >= n)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise GraphFormatError(f"{path}: edge {src[i]} -> {dst[i]} is outside the {n} vertices "
                               f"the feature files give")
    return src, dst


def read_planetoid(folder: str | os.PathLike, name: str) -> GraphData:
    """Planetoid dataset ``name`` (``cora``, ``citeseer``, ``pubmed``, or any set of files in
    that layout) from its raw files in ``folder``, as PyG's ``Planetoid`` (public split) reads
    it (see the module docstring): float32 features, int64 labels, the public split, an
    undirected graph. One-line :class:`GraphFormatError` for a missing, damaged or
    inconsistent file."""
    paths = dict(zip(PLANETOID_FILES, planetoid_files(folder, name)))
    x, tx, allx = (_matrix(paths[k], "feature matrix") for k in ("x", "tx", "allx"))
    y, ty, ally = (_matrix(paths[k], "one-hot label matrix") for k in ("y", "ty", "ally"))
    test_index = _test_index(paths["test.index"])
    for feats, labels, what in ((x, y, "x/y"), (tx, ty, "tx/ty"), (allx, ally, "allx/ally")):
        if feats.shape[0] != labels.shape[0]:
            raise GraphFormatError(f"{folder}: {name}'s {what} have {feats.shape[0]} and "
                                   f"{labels.shape[0]} rows")
    if not x.shape[1] == tx.shape[1] == allx.shape[1] or \
            not y.shape[1] == ty.shape[1] == ally.shape[1]:
        raise GraphFormatError(f"{folder}: {name}'s x, tx, allx (or y, ty, ally) differ in "
                               f"columns")
    order = np.sort(test_index)
    lo, span = int(order[0]), int(order[-1] - order[0]) + 1
    if lo != allx.shape[0] or tx.shape[0] != test_index.shape[0] or \
            np.unique(test_index).shape[0] != test_index.shape[0]:
        raise GraphFormatError(f"{paths['test.index']}: {test_index.shape[0]} test ids from "
                               f"{lo} for {tx.shape[0]} tx rows after {allx.shape[0]} allx "
                               f"rows: expected distinct ids from {allx.shape[0]}")
    if span != tx.shape[0]:  # ids with gaps (CiteSeer): zero rows there, as PyG pads
        tx_ext = np.zeros((span, tx.shape[1]), dtype=tx.dtype)
        ty_ext = np.zeros((span, ty.shape[1]), dtype=ty.dtype)
        tx_ext[order - lo], ty_ext[order - lo] = tx, ty
        tx, ty = tx_ext, ty_ext
    feat = np.concatenate([allx, tx]).astype(np.float32)
    feat[test_index] = feat[order]
    label = np.concatenate([ally, ty]).argmax(axis=1).astype(np.int64)
    label[test_index] = label[order]
    n = feat.shape[0]
    if y.shape[0] + PLANETOID_VAL_SIZE > allx.shape[0]:
        raise GraphFormatError(f"{folder}: {name} has {allx.shape[0]} non-test vertices, fewer "
                               f"than the {y.shape[0]} training and {PLANETOID_VAL_SIZE} "
                               f"validation ones of the public split")
    src, dst = _edges(paths["graph"], n)
    graph = CSRGraph.from_edges(src, dst, num_nodes=n)
    data = GraphData(graph=graph, feat=feat, label=label,
                     train_idx=np.arange(y.shape[0], dtype=np.int64),
                     val_idx=np.arange(y.shape[0], y.shape[0] + PLANETOID_VAL_SIZE,
                                       dtype=np.int64),
                     test_idx=order, name=name, num_classes=int(y.shape[1]))
    try:
        data.validate()
    except GraphFormatError as e:
        raise GraphFormatError(f"{folder}: {name}'s files are inconsistent: {e}") from None
    return data
