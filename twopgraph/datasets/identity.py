"""What identifies a dataset without loading it (nothing generated, converted or
downloaded): the file or store :func:`load_dataset` reads (:func:`dataset_path`), the record a
partition's ``meta.json`` ``source`` keeps (:func:`dataset_identity`: name, path, store,
content fingerprint), whether two such records name one dataset (:func:`same_dataset`), and
the ``--dataset`` of a run on a partition folder (:func:`partition_dataset`).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from twopgraph.datasets.builtin import OGB_DATASETS, PLANETOID_DATASETS, _synthetic_presets
from twopgraph.datasets.names import _npz_file, named_dataset
from twopgraph.datasets.paths import (
    OGB_CACHE_FILE,
    _ogb_folder,
    _ogb_source,
    _store_of_source,
    resolve_data_root,
)
from twopgraph.datasets.planetoid import planetoid_source
from twopgraph.datasets.presets import _legacy_preset_cache, _preset_meta, preset_store
from twopgraph.datasets.sourcestore import _fresh
from twopgraph.errors import ConfigError, TwopgraphError
from twopgraph.store.reader import files_changed, is_store, read_store_meta


def dataset_path(name: str, data_root: str | os.PathLike | None = None,
                 store_dtype: str = "float32") -> Path | None:
    """What :func:`load_dataset` reads or caches for ``name``: its ``.npz`` file, an OGB
    dataset's raw file, a synthetic preset's store folder (:func:`preset_store`; an older
    twopgraph's ``<root>/<name>.npz`` cache of the same spec where the store is not there but
    that file is); None if unknown.

    For synthetic presets, OGB and Planetoid names the path need not exist yet (it is the
    cache path; Planetoid's: its raw ``ind.NAME.graph``, unless a file or store of the user's
    has that name): ``path.exists()`` tells whether loading needs no generation, download or
    conversion (OGB, Planetoid: ingestion aside).
    """
    root = resolve_data_root(data_root)
    presets = _synthetic_presets()
    if name in presets:
        store = preset_store(presets[name], root, store_dtype)
        if not is_store(store):
            legacy = _legacy_preset_cache(presets[name], root)
            if legacy is not None:
                return legacy
        return store
    if name.endswith(".npz"):
        return _npz_file(name, root)
    if name in OGB_DATASETS:
        cache = _ogb_folder(name, root) / OGB_CACHE_FILE
        return cache if cache.is_file() else _ogb_source(name, root)
    with contextlib.suppress(ConfigError):  # an ambiguous name: none (loading says why)
        found = named_dataset(name, root, store_dtype)
        if found is not None:
            return found[1]
        return planetoid_source(name, root) if name in PLANETOID_DATASETS else None
    return None


def dataset_identity(name: str, data_root: str | os.PathLike | None = None,
                     store_dtype: str = "float32") -> dict:
    """What identifies dataset ``name`` without loading it (nothing is generated, converted or
    downloaded): ``name`` (the name it loads under: a ``.npz`` path's stem), ``path`` (the
    ``.npz`` it is read from, resolved; None if there is none yet), ``store`` (its store folder,
    resolved: the folder given, the one converted from ``path``, a synthetic preset's; None if
    none) and ``fingerprint`` (of its content, from a store up to date with its file or spec
    and whose files are as written; None if unknown). A synthetic preset's fingerprint is
    that of its arrays, the same whether an older twopgraph's ``.npz`` cache or its store
    holds them.
    The keys are those of a partition's ``meta.json`` ``source`` (:func:`same_dataset`)."""
    root = resolve_data_root(data_root)
    ident = {"name": name, "path": None, "store": None, "fingerprint": None}
    presets = _synthetic_presets()
    if name in presets:
        store = preset_store(presets[name], root, store_dtype)
        with contextlib.suppress(TwopgraphError, OSError):
            meta = _preset_meta(presets[name], store)
            if meta is not None and not files_changed(store, meta):
                ident.update(store=str(store.resolve()), fingerprint=str(meta["fingerprint"]))
                return ident
    folder = Path(name).expanduser()
    if name not in _synthetic_presets() and is_store(folder):
        ident["store"] = str(folder.resolve())
        with contextlib.suppress(TwopgraphError):
            meta = read_store_meta(folder)
            if not files_changed(folder, meta):  # else unknown until opened (fingerprinted)
                ident["fingerprint"] = str(meta["fingerprint"])
        return ident
    if name.endswith(".npz"):
        ident["name"] = Path(name).stem
    path = dataset_path(name, data_root, store_dtype)
    if path is not None and name not in _synthetic_presets() and is_store(path):  # named
        ident["store"] = str(path.resolve())
        with contextlib.suppress(TwopgraphError):
            meta = read_store_meta(path)
            if not files_changed(path, meta):
                ident["fingerprint"] = str(meta["fingerprint"])
        return ident
    if path is None or not path.is_file():
        return ident
    ident["path"] = str(path.resolve())
    store = _store_of_source(name, path, root, store_dtype)
    if is_store(store):
        with contextlib.suppress(TwopgraphError, OSError):
            meta = read_store_meta(store)
            if _fresh(meta, path, root) and not files_changed(store, meta):
                ident.update(store=str(store.resolve()), fingerprint=str(meta["fingerprint"]))
    return ident


def same_dataset(ident: dict, source: dict) -> bool:
    """Whether :func:`dataset_identity` ``ident`` names the dataset described by ``source``
    (same keys, e.g. a partition's ``meta.json`` ``source``): by content fingerprint where both
    are known, else by file (the ``.npz`` or the store folder) where both are known, else by
    name -- except a file against a dataset known by its store alone (a synthetic preset, a
    store folder), which only fingerprints could tell apart: not the same."""
    if ident.get("fingerprint") and source.get("fingerprint"):
        return ident["fingerprint"] == source["fingerprint"]
    if ident.get("path") and not source.get("path") and source.get("store"):
        return False
    known = False
    for key in ("path", "store"):
        mine, theirs = ident.get(key), source.get(key)
        if mine and theirs:
            known = True
            with contextlib.suppress(OSError):
                if Path(mine).resolve() == Path(theirs).resolve() or \
                        os.path.samefile(mine, theirs):
                    return True
    return not known and ident.get("name") == source.get("name")


def source_dataset(source: dict) -> str:
    """The ``--dataset`` value that names the dataset ``source`` describes (a partition's
    ``meta.json`` ``source``): a preset or OGB name as such, else its ``.npz`` file, else its
    store folder, else its name."""
    name = str(source.get("name") or "")
    if name in _synthetic_presets() or name in OGB_DATASETS:
        return name
    if name in PLANETOID_DATASETS and Path(str(source.get("path") or "")).name.startswith("ind."):
        return name  # its raw files: the name loads them (a user's own file of it wins)
    return str(source.get("path") or source.get("store") or name)


def partition_dataset(name: str, data_root: str | os.PathLike | None,
                      partitions: str | os.PathLike, source: dict, given: bool) -> str:
    """The ``--dataset`` of a run on the partition folder ``partitions`` made from the dataset
    ``source`` describes (its ``meta.json`` ``source``): the partition's own
    (:func:`source_dataset`), or ``name`` as spelled when ``given`` (given explicitly) and the
    same dataset (:func:`same_dataset`); another dataset given is refused in one line
    (:class:`ConfigError`) naming both."""
    if not given:
        return source_dataset(source)
    if not same_dataset(dataset_identity(name, data_root), source):
        where = source.get("path") or source.get("store")
        raise ConfigError(f"--dataset {name} is not the dataset the partition {partitions} was "
                          f"made from ({source.get('name')}: {where}); leave --dataset out "
                          f"(the partition's is used) or partition {name} first")
    return name


def check_data_root(data_root: str | os.PathLike | None = None, dataset: str | None = None) -> None:
    """Refuse, before anything is loaded, a data root (``data_root``, else
    ``$TWOPGRAPH_DATA``, else ``~/.cache/twopgraph``) that is not a folder, or that cannot be
    written when ``dataset`` must be generated or converted there (it is not cached yet). A
    read-only data root holding what the run needs is fine (a shared cache): a cluster cache
    it cannot write costs a METIS rerun and a warning. Creates nothing."""
    root = resolve_data_root(data_root)
    flag = "--data-root" if data_root else "the data root"
    existing = root
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{flag} {root}: {existing} is not a folder")
    problem = _probe(existing)
    if problem is None:
        return
    cache = dataset_path(dataset, data_root) if dataset else None  # a file or a store folder
    if cache is not None and not cache.exists():
        raise ConfigError(f"{flag} {root} is not writable ({problem}): {dataset} is not cached "
                          f"there and cannot be generated or converted; choose a writable "
                          f"--data-root (or $TWOPGRAPH_DATA)")


def _probe(folder: Path) -> str | None:
    """None if a file can be created (and removed again) in ``folder``, else the reason."""
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".twopgraph-probe-")
    except OSError as e:
        return e.strerror or str(e)
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(name)
    return None
