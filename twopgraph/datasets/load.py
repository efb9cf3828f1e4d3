"""``--dataset NAME`` loaded (:func:`load_dataset`): the name resolved in the order the
package docstring gives, the store dtype chosen, the dataset validated or symmetrised.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from twopgraph.datasets.builtin import (
    OGB_DATASETS,
    PLANETOID_DATASETS,
    _papers_spec,
    _synthetic_presets,
)
from twopgraph.datasets.catalogue import _did_you_mean, _known_names
from twopgraph.datasets.dtype import STORE_DTYPE_CHOICES, STORE_DTYPES, resolve_store_dtype
from twopgraph.datasets.names import _npz_file, named_dataset
from twopgraph.datasets.ogb import _load_ogb
from twopgraph.datasets.paths import resolve_data_root
from twopgraph.datasets.planetoid import load_planetoid
from twopgraph.datasets.presets import load_papers, load_preset
from twopgraph.datasets.sourcestore import _read_npz, _symmetrized
from twopgraph.errors import ConfigError, TwopgraphError
from twopgraph.graph.data import GraphData
from twopgraph.store.reader import is_store, open_store
from twopgraph.store.writer import HalfRangeError

log = logging.getLogger("twopgraph")

def load_dataset(name: str, data_root: str | os.PathLike | None = None, progress: bool = True,
                 symmetrize: bool = False, store_dtype: str = "float32") -> GraphData:
    """Load dataset ``name`` (see the module docstring for how names resolve).

    ``data_root`` defaults to :func:`resolve_data_root`; ``progress`` shows progress bars on
    stderr for long steps (generation, OGB conversion). Generated and converted datasets are
    cached in the data root, so only the first call is slow.

    Every dataset is validated where it enters (:meth:`GraphData.validate`: sizes, ranges,
    labels, and an undirected graph without self loops or duplicate edges); a violation is a
    one-line :class:`GraphFormatError` naming the first offending edge. ``symmetrize``
    (``--symmetrize``) repairs the graph instead: every entry u->v becomes the edge {u, v},
    self loops and duplicates are dropped, and one log line says what changed (the file is
    not rewritten). Generated and converted datasets are undirected already.

    ``store_dtype`` (``--store-dtype``) is the type of the features in the store:
    ``float32``, or ``float16`` (half the disk and page cache; a store of its own,
    ``<name>-<hash>-float16``, converted from the same source; features beyond float16's
    range are refused). A store folder given by path is used as it is.
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"dataset name must be a non-empty string, got {name!r}")
    if store_dtype == "auto":  # a store folder given by path is used as it is
        if not is_store(Path(name).expanduser()) and \
                resolve_store_dtype("auto", name, data_root) == "float16":
            try:
                return load_dataset(name, data_root, progress, symmetrize, "float16")
            except TwopgraphError as e:
                if not _caused_by(e, HalfRangeError):
                    raise
                log.warning("--store-dtype auto: keeping float32 features (%s)",
                            _caused_by(e, HalfRangeError))
        store_dtype = "float32"
    if store_dtype not in STORE_DTYPES:
        raise ConfigError(f"unknown store dtype {store_dtype!r}; known: "
                          f"{', '.join(STORE_DTYPE_CHOICES)}")
    root = resolve_data_root(data_root)
    presets = _synthetic_presets()
    papers = _papers_spec(name)
    if papers is not None:
        data = load_papers(papers, root, progress, store_dtype=store_dtype)
    elif name in presets:
        data = load_preset(presets[name], root, progress, store_dtype=store_dtype)
    elif is_store(Path(name).expanduser()):
        data = open_store(Path(name).expanduser(), check_symmetric=not symmetrize)
        if store_dtype != "float32" and data.feat.dtype != np.dtype(store_dtype):
            raise ConfigError(f"{name} is a store of {data.feat.dtype} features: "
                              f"--store-dtype applies to datasets twopgraph converts")
        return _symmetrized(data, name) if symmetrize else data
    elif name.endswith(".npz"):
        path = _npz_file(name, root)
        if path is None:
            raise TwopgraphError(f"dataset file not found: {name} (also looked in {root})"
                                 f"{_did_you_mean(name, root)}")
        return _read_npz(path, None, symmetrize, root, progress, store_dtype)
    elif name in OGB_DATASETS:
        data = _load_ogb(name, root, progress, store_dtype)
    else:
        found = named_dataset(name, root, store_dtype)
        if found is not None and found[0] == "npz":
            return _read_npz(found[1], name, symmetrize, root, progress, store_dtype)
        if found is not None:  # a store folder, or a converted store whose file is gone
            data = open_store(found[1], name=name, check_symmetric=not symmetrize)
            if store_dtype != "float32" and data.feat.dtype != np.dtype(store_dtype):
                raise ConfigError(f"{name} is the store {found[1]} of {data.feat.dtype} "
                                  f"features: --store-dtype applies to datasets twopgraph "
                                  f"converts from a file")
            return _symmetrized(data, name) if symmetrize else data
        if name in PLANETOID_DATASETS:  # after the user's own data of that name
            data = load_planetoid(name, root, progress, store_dtype)
            return _symmetrized(data, name) if symmetrize else data
        hint = _did_you_mean(name, root)
        raise ConfigError(f"unknown dataset {name!r}{hint}{' K' if hint else '; k'}nown: "
                          f"{', '.join(_known_names(root))}, a path to a .npz file or a store "
                          f"folder (data root: {root})")
    return _symmetrized(data, name) if symmetrize else data


def _caused_by(e: BaseException, kind: type) -> BaseException | None:
    """``e`` or the first exception of kind ``kind`` it was raised from, else None."""
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, kind):
            return e
        e, seen = e.__cause__ or e.__context__, seen + 1
    return None
