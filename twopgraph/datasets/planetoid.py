"""The classic small citation graphs by name (``--dataset cora``, ``citeseer``, ``pubmed``:
:data:`~twopgraph.datasets.builtin.PLANETOID_DATASETS`), as PyG's ``Planetoid`` gets them.

Their raw files (the eight ``ind.NAME.*`` of :data:`~twopgraph.ingest.PLANETOID_FILES`) lie in
``<root>/planetoid/<name>/raw/`` (:func:`planetoid_raw_folder`); those missing are downloaded
from :data:`PLANETOID_URL` (one network operation may block :data:`PLANETOID_NET_TIMEOUT_S`
seconds), then read once (:func:`~twopgraph.ingest.read_planetoid`: PyG's reading, the public
split) into the store ``<root>/stores/<name>-<hash>/``; later loads read the store while the
raw files are as they were. Without a network, a download failure is one line naming the URL
and the folder to put the files in.

These names come after a user's own data: ``<root>/cora.npz`` (or a store ``<root>/cora/``,
or the same in a folder of ``$TWOPGRAPH_DATASET_PATH``) is what ``--dataset cora`` loads when
it exists (:func:`~twopgraph.datasets.load_dataset`, step 5).
"""

from __future__ import annotations

import contextlib
import logging
import os
import urllib.error
import urllib.request
from pathlib import Path

from twopgraph.datasets.builtin import PLANETOID_DATASETS
from twopgraph.datasets.paths import DATA_ROOT_ENV, _source_key, store_folder
from twopgraph.datasets.sourcestore import _fresh, _rebuilding
from twopgraph.errors import GraphFormatError, OutputError, TwopgraphError
from twopgraph.graph.data import GraphData
from twopgraph.ingest import PLANETOID_FILES, planetoid_files, read_planetoid, source_record
from twopgraph.store.reader import is_store, open_store, read_store_meta
from twopgraph.store.writer import half_checked, write_store

log = logging.getLogger("twopgraph")

#: Where the raw files are downloaded from (PyG's ``Planetoid.url``): ``URL/ind.NAME.SUFFIX``.
PLANETOID_URL = "https://github.com/kimiyoung/planetoid/raw/master/data"

#: Seconds one network operation of a download (connect, one read) may block before it fails.
PLANETOID_NET_TIMEOUT_S = 60.0

#: Folder of the data root that holds the Planetoid datasets' raw files.
PLANETOID_DIR = "planetoid"


def planetoid_raw_folder(name: str, data_root: Path) -> Path:
    """Where Planetoid dataset ``name``'s raw files lie: ``<root>/planetoid/<name>/raw`` (PyG's
    layout under its ``root``)."""
    return Path(data_root) / PLANETOID_DIR / name / "raw"


def planetoid_source(name: str, data_root: Path) -> Path:
    """The raw file that identifies dataset ``name``'s download (its ``ind.NAME.graph``; the
    store records every file's size and time): it need not exist yet."""
    return planetoid_raw_folder(name, data_root) / f"ind.{name}.graph"


def download_planetoid(name: str, data_root: Path) -> list[Path]:
    """Download those of ``name``'s raw files that are missing into
    :func:`planetoid_raw_folder` (each written under a temporary name and renamed when
    complete); the eight files. One-line :class:`TwopgraphError` naming the URL and the
    folder when a download fails (no network, a timeout, an HTTP error) or the folder cannot be
    written."""
    folder = planetoid_raw_folder(name, data_root)
    files = planetoid_files(folder, name)
    missing = [f for f in files if not f.is_file()]
    if not missing:
        return files
    put = (f"put the Planetoid files ind.{name}.{{{','.join(PLANETOID_FILES)}}} (from "
           f"{PLANETOID_URL}) in {folder}")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TwopgraphError(f"{name}: cannot create {folder} ({e.strerror or e}); choose a "
                             f"writable --data-root or ${DATA_ROOT_ENV}") from None
    log.info("%s: downloading %d raw file(s) from %s into %s", name, len(missing),
             PLANETOID_URL, folder)
    for path in missing:
        url = f"{PLANETOID_URL}/{path.name}"
        part = path.with_name(f".{path.name}.part")
        try:
            with urllib.request.urlopen(url, timeout=PLANETOID_NET_TIMEOUT_S) as r, \
                    open(part, "wb") as f:
                while chunk := r.read(1 << 20):
                    f.write(chunk)
            os.replace(part, path)
        except (urllib.error.URLError, OSError, ValueError) as e:  # HTTPError, timeouts too
            with contextlib.suppress(OSError):
                part.unlink()
            reason = getattr(e, "reason", None) or getattr(e, "strerror", None) or e
            raise TwopgraphError(f"{name}: could not download {url} ({type(e).__name__}: "
                                 f"{str(reason).splitlines()[0] if str(reason) else ''}); "
                                 f"offline, {put}") from None
    return files


def load_planetoid(name: str, data_root: Path, progress: bool = True,
                   store_dtype: str = "float32") -> GraphData:
    """Planetoid dataset ``name`` (a key of :data:`PLANETOID_DATASETS`) from its store in the
    data root ``data_root``: reused while the raw files are unchanged, else read from them
    (downloaded first where missing) and written (features as ``store_dtype``)."""
    if name not in PLANETOID_DATASETS:
        raise TwopgraphError(f"{name} is not a Planetoid dataset; known: "
                             f"{', '.join(PLANETOID_DATASETS)}")
    src = planetoid_source(name, data_root)
    folder = store_folder(src, data_root, stem=name, dtype=store_dtype)
    if src.is_file() and is_store(folder):
        try:
            if _fresh(read_store_meta(folder), src, data_root, folder):
                return open_store(folder, name=name)
            log.info("the raw files of %s changed since they were read: reading them again",
                     name)
        except GraphFormatError as e:
            _rebuilding(folder, e)
    files = download_planetoid(name, data_root)
    raw = planetoid_raw_folder(name, data_root)
    try:
        data = read_planetoid(raw, name)
    except GraphFormatError as e:
        raise TwopgraphError(f"{name}: {e}; delete {raw} to download the files afresh") from None
    if store_dtype != "float32":
        data.feat = next(half_checked([data.feat], f"{name} features")).astype(store_dtype)
    try:
        source = source_record([src, *(f for f in files if f != src)],
                               _source_key(src, data_root))
        write_store(data, folder, source=source, progress=progress)
    except OutputError as e:
        log.warning("cannot write the dataset store of %s (%s): keeping it in memory "
                    "(give a writable --data-root or $%s)", name, e, DATA_ROOT_ENV)
        return data
    return open_store(folder, name=name)

