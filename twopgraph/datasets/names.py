"""A dataset by a plain name (``--dataset NAME``: not a preset, OGB name or path): the
file ``NAME.npz`` or the store folder ``NAME/`` in the data root, then in each folder of
``$TWOPGRAPH_DATASET_PATH`` (:func:`dataset_search_path`), else a store an earlier run
converted from a ``NAME.npz`` (:func:`named_dataset`); and a ``.npz`` path found relative to
those folders.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from twopgraph.datasets.builtin import OGB_DATASETS, _synthetic_presets
from twopgraph.datasets.paths import (
    DATASET_PATH_ENV,
    STORES_DIR,
    _dtype_suffix,
    _source_path,
    resolve_data_root,
)
from twopgraph.errors import ConfigError, TwopgraphError
from twopgraph.store.reader import is_store, read_store_meta


def dataset_search_path() -> list[Path]:
    """The folders of ``$TWOPGRAPH_DATASET_PATH`` (separated by ``os.pathsep``, ``~``
    expanded; empty entries skipped), where ``--dataset NAME`` also finds ``NAME.npz``."""
    env = os.environ.get(DATASET_PATH_ENV, "")
    return [Path(p).expanduser() for p in env.split(os.pathsep) if p.strip()]


def _plain_name(name: str) -> bool:
    """Whether ``name`` can name a dataset file or store: no folder part, no ``.npz``."""
    return bool(name) and "/" not in name and os.sep not in name and \
        not name.endswith(".npz") and name not in (".", "..")


def _npz_file(name: str, root: Path) -> Path | None:
    """``name`` as an existing ``.npz`` path, else ``root / name`` if that exists, else in a
    folder of ``$TWOPGRAPH_DATASET_PATH`` (a relative ``name``), else None."""
    path = Path(name).expanduser()
    folders = [root] + (dataset_search_path() if not path.is_absolute() else [])
    for p in (path, *(f / path for f in folders)):
        if p.is_file():
            return p
    return None


def named_dataset(name: str, data_root: str | os.PathLike | None = None,
                  store_dtype: str = "float32") -> tuple[str, Path] | None:
    """What the plain name ``name`` (not a preset, OGB name or path) loads, without loading
    it: in the data root, then in each folder of :func:`dataset_search_path`, the file
    ``<name>.npz`` (``("npz", path)``) or the store folder ``<name>/`` (``("store",
    folder)``), the first found; else the source file of the store an earlier run converted
    from a ``<name>.npz`` while that file exists, or that store once the file is gone (of
    ``store_dtype`` features where both exist); None if the name is none of these. Stores of
    several different files with that name are ambiguous: one-line :class:`ConfigError`
    naming them."""
    if not _plain_name(name):
        return None
    root = resolve_data_root(data_root)
    for folder in [root, *dataset_search_path()]:
        path = folder / f"{name}.npz"
        if path.is_file():
            return "npz", path
        if is_store(folder / name):
            return "store", folder / name
    by_source = _converted_stores(root).get(name, {})
    if not by_source:
        return None
    if len(by_source) > 1:
        raise ConfigError(
            f"dataset name {name!r} is ambiguous: {root / STORES_DIR} holds stores of "
            f"{len(by_source)} different files of that name ("
            f"{', '.join(sorted(by_source))}); give the .npz file or the store folder")
    source, folders = next(iter(by_source.items()))
    path = _source_path(source, root)
    if path.is_file():
        return "npz", path
    want = [f for f in folders if f.name.endswith(_dtype_suffix(store_dtype))
            and (store_dtype != "float32" or not f.name.endswith(_dtype_suffix("float16")))]
    return "store", (want or folders)[0]


def _converted_stores(root: Path) -> dict[str, dict[str, list[Path]]]:
    """The stores under ``<root>/stores`` converted from a ``.npz`` file (a store a user can
    name by the file's stem), as ``{stem: {source key: [store folders]}}``; not those of the
    synthetic presets, ``synthetic-papers`` or OGB datasets (named as such), nor a damaged
    or foreign folder."""
    import re
    stores = root / STORES_DIR
    out: dict[str, dict[str, list[Path]]] = {}
    reserved = set(_synthetic_presets()) | set(OGB_DATASETS)
    with contextlib.suppress(OSError):  # an unreadable data root: no stores from it
        for folder in sorted(stores.iterdir()) if stores.is_dir() else []:
            m = re.fullmatch(r"(.+)-[0-9a-f]{8}(-float16)?", folder.name)
            if m is None or m.group(1) in reserved or m.group(1).startswith("synthetic-papers"):
                continue
            if not is_store(folder):
                continue
            try:
                source = read_store_meta(folder).get("source") or {}
            except TwopgraphError:
                continue
            key = source.get("key") or source.get("path")
            if not key or source.get("spec_fingerprint") or not str(key).endswith(".npz"):
                continue
            out.setdefault(m.group(1), {}).setdefault(str(key), []).append(folder)
    return out
