"""``--store-dtype``: the type a store keeps its features in (``float32`` or ``float16``),
and ``auto``'s choice from the size of the float32 table (N x F x 4 bytes, read from what is
on disk) against the memory the process can fill.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from twopgraph.core.names import STORE_DTYPE_CHOICES, STORE_DTYPES
from twopgraph.datasets.builtin import OGB_DATASETS, _papers_spec
from twopgraph.datasets.names import _npz_file, _plain_name, named_dataset
from twopgraph.datasets.paths import _dtype_suffix, _ogb_source, _store_of_source, resolve_data_root
from twopgraph.errors import ConfigError, GraphFormatError
from twopgraph.graph.data import GraphData
from twopgraph.ingest import NpzMember
from twopgraph.store.reader import is_store, read_store_meta

log = logging.getLogger("twopgraph")

# STORE_DTYPES, STORE_DTYPE_CHOICES (twopgraph.core.names, imported above): ``--store-dtype``:
# the types a store may keep its features in, and ``auto`` (chosen by
# :func:`resolve_store_dtype`).

#: ``--store-dtype auto`` keeps float16 features when the float32 table would take more
#: than this share of the memory the process can fill (:func:`available_host_bytes`).
AUTO_HALF_SHARE = 0.5


def float32_feature_bytes(name: str, data_root: str | os.PathLike | None = None) -> int | None:
    """Bytes of dataset ``name``'s features as float32 (N x F x 4), read from what is on disk
    without loading it: a papers preset's shape, an ``.npz``'s ``feat`` header, OGB's raw
    ``node_feat`` header or an existing store's metadata; None when unknown (the synthetic
    presets, OGB's CSV layout before ingestion, a store folder given by path)."""
    root = resolve_data_root(data_root)
    papers = _papers_spec(name)
    if papers is not None:
        return 4 * papers.num_nodes * papers.num_features
    try:
        if name in OGB_DATASETS:
            src = _ogb_source(name, root)
            if src.name == "data.npz" and src.is_file():
                shape = NpzMember(src, "node_feat").shape
                return 4 * int(np.prod(shape, dtype=np.int64))
            for dtype in STORE_DTYPES:
                store = _store_of_source(name, src, root, dtype)
                if is_store(store):
                    meta = read_store_meta(store)
                    return 4 * int(meta["num_nodes"]) * int(meta["num_features"])
            return None
        if _plain_name(name):
            found = named_dataset(name, root)
            path = found[1] if found is not None and found[0] == "npz" else None
        else:
            path = _npz_file(name, root) if name.endswith(".npz") else None
        if path is not None:
            shape = NpzMember(path, "feat").shape
            return 4 * int(np.prod(shape, dtype=np.int64))
    except (GraphFormatError, OSError, KeyError, ValueError):
        return None  # the loader names what is wrong with the file
    return None


def store_dtype_of(data: GraphData, asked: str = "auto") -> str:
    """The ``--store-dtype`` that finds ``data`` again: ``asked`` unless it is ``auto``, then
    what auto chose (``float16`` for data from a float16 store, else ``float32``)."""
    if asked != "auto":
        return asked
    store = getattr(data, "store", None)
    half = store is not None and Path(store).name.endswith(_dtype_suffix("float16"))
    return "float16" if half and data.feat.dtype == np.float16 else "float32"


def resolve_store_dtype(store_dtype: str, name: str,
                        data_root: str | os.PathLike | None = None) -> str:
    """``--store-dtype`` as a type: ``float32`` / ``float16`` as given; ``auto`` = float16
    when the dataset's float32 features (:func:`float32_feature_bytes`) would take more than
    :data:`AUTO_HALF_SHARE` of the memory this process can fill (MemAvailable, its cgroup's
    limit: :func:`~twopgraph.runtime.memory.available_host_bytes`), so that the table stays in the
    page cache instead of being read from disk batch after batch; else (or when either is
    unknown) float32. The choice is logged when it is float16."""
    if store_dtype not in STORE_DTYPE_CHOICES:
        raise ConfigError(f"unknown store dtype {store_dtype!r}; known: "
                          f"{', '.join(STORE_DTYPE_CHOICES)}")
    if store_dtype != "auto":
        return store_dtype
    from twopgraph.runtime.memory import available_host_bytes
    need, avail = float32_feature_bytes(name, data_root), available_host_bytes()
    if need is None or avail is None or need <= AUTO_HALF_SHARE * avail:
        return "float32"
    log.info("--store-dtype auto: float16 features (%.1f GB as float32 > %.0f%% of the "
             "%.1f GB this process can fill)", need / 1e9, 100 * AUTO_HALF_SHARE, avail / 1e9)
    return "float16"


def _converted(dtype: str) -> str | None:
    """What the converters take as ``feat_dtype`` for ``--store-dtype`` ``dtype``: None for
    float32 (the source's float32 or float16 kept, anything else float32), else ``dtype``."""
    return None if dtype == "float32" else dtype
