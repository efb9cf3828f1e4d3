"""Where datasets and their stores lie: the data root (``--data-root``, else
``$TWOPGRAPH_DATA``, else ``$XDG_CACHE_HOME/twopgraph``, ``~/.cache/twopgraph`` without it:
:func:`resolve_data_root`), the folder of its stores (``<root>/stores``) and a
store's folder name for its source file (``<stem>-<8 hex digits of the file's path>``,
``-float16`` appended for float16 features), the source key (a file's path relative to the
data root), and OGB's own folder of a dataset with the raw file that identifies its download.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from twopgraph.datasets.builtin import OGB_BINARY, OGB_DATASETS, PLANETOID_DATASETS

DATA_ROOT_ENV = "TWOPGRAPH_DATA"


#: Folders (separated by ``os.pathsep``) where ``--dataset NAME`` also finds ``NAME.npz``.
DATASET_PATH_ENV = "TWOPGRAPH_DATASET_PATH"


#: The data root without ``--data-root`` and ``$TWOPGRAPH_DATA`` (``$XDG_CACHE_HOME`` replaces
#: ``~/.cache``): outside the working directory, so no run leaves data in a clone.
DEFAULT_DATA_ROOT = "~/.cache/twopgraph"


#: The default data root of twopgraph before 0.2.0, relative to the working directory.
LEGACY_DATA_ROOT = "datasets"

_said: list[Path] = []  # the default data root was logged (once per process)


OGB_CACHE_FILE = "twopgraph.npz"


#: Folder of the data root that holds the stores converted from ``.npz`` files.
STORES_DIR = "stores"


def resolve_data_root(arg: str | os.PathLike | None = None) -> Path:
    """The data root: ``arg`` if given, else ``$TWOPGRAPH_DATA``, else
    :func:`default_data_root`."""
    if arg is not None and str(arg) != "":
        return Path(arg).expanduser()
    env = os.environ.get(DATA_ROOT_ENV, "")
    return Path(env).expanduser() if env else default_data_root()


def default_data_root() -> Path:
    """``$XDG_CACHE_HOME/twopgraph``, else ``~/.cache/twopgraph`` (:data:`DEFAULT_DATA_ROOT`).
    The first time in a process that a ``./datasets`` holding twopgraph data (the former
    default root: a ``stores`` or ``clusters`` folder in it) is passed over for it, one log
    line says so and how to keep using it."""
    cache = os.environ.get("XDG_CACHE_HOME", "")
    root = (Path(cache).expanduser() / "twopgraph" if cache and Path(cache).is_absolute()
            else Path(DEFAULT_DATA_ROOT).expanduser())
    legacy = Path(LEGACY_DATA_ROOT)
    if not _said and any((legacy / d).is_dir() for d in (STORES_DIR, "clusters")):
        _said.append(root)
        logging.getLogger("twopgraph").info(
            "data root %s (the default; ./%s holds data of the earlier default: give "
            "--data-root %s or set %s=%s to use it)", root, LEGACY_DATA_ROOT, LEGACY_DATA_ROOT,
            DATA_ROOT_ENV, LEGACY_DATA_ROOT)
    return root


def store_folder(npz: str | os.PathLike, data_root: str | os.PathLike | None = None,
                 stem: str | None = None, dtype: str = "float32") -> Path:
    """Where the store converted from the ``.npz`` at ``npz`` lives: ``<data root>/stores/
    <stem>-<8 hex digits of the file's path>`` (two files of one name do not collide; ``stem``
    defaults to the file's, an OGB dataset's is its name), ``-float16`` appended for a store
    of float16 features (``dtype``). The path is taken relative to the data root when the
    file lies inside it, so a data root copied or mounted elsewhere keeps finding its
    stores."""
    import hashlib
    root = resolve_data_root(data_root)
    tag = hashlib.blake2b(_source_key(npz, root).encode(), digest_size=4).hexdigest()
    return root / STORES_DIR / f"{stem or Path(npz).stem}-{tag}{_dtype_suffix(dtype)}"


def _store_of_source(name: str, path: Path, root: Path, dtype: str = "float32") -> Path:
    """The store folder of the source file ``path`` of dataset ``name``: OGB and Planetoid
    raw files give ``stores/<name>-<hash>``, every other file ``stores/<file stem>-<hash>``
    (``-float16`` after either for ``dtype`` float16)."""
    raw = (name in OGB_DATASETS and path.name != OGB_CACHE_FILE) or (
        name in PLANETOID_DATASETS and path.name.startswith("ind."))
    return store_folder(path, root, stem=name if raw else None, dtype=dtype)


def _dtype_suffix(dtype: str) -> str:
    return "" if dtype == "float32" else f"-{dtype}"


def _source_key(npz, root: Path) -> str:
    """``npz``'s path relative to the data root if inside it, else its absolute path."""
    path = Path(npz).expanduser().absolute()
    try:
        return path.relative_to(root.expanduser().absolute()).as_posix()
    except ValueError:
        return str(path)


def _source_path(key: str, root: Path) -> Path:
    """The file a store's source ``key`` names: the key itself when absolute, else relative
    to the data root (:func:`_source_key`)."""
    path = Path(key)
    return path if path.is_absolute() else root / path


def _ogb_folder(name: str, root: Path) -> Path:
    """ogb's own folder for ``name``: ``<root>/ogbn_<x>`` (hyphens become underscores)."""
    return root / name.replace("-", "_")


def _ogb_source(name: str, root: Path) -> Path:
    """The raw file that identifies OGB dataset ``name``'s download: ``raw/data.npz`` (binary
    layout) or ``raw/edge.csv.gz`` (CSV layout), whichever is there, else the one the dataset
    comes in (it need not exist yet)."""
    raw = _ogb_folder(name, root) / "raw"
    for f in ("data.npz", "edge.csv.gz"):
        if (raw / f).is_file():
            return raw / f
    return raw / ("data.npz" if name in OGB_BINARY else "edge.csv.gz")
