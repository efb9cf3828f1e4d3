"""Dataset registry behind ``--dataset``: synthetic presets, ``.npz`` files and OGB graphs.

Names resolve in this order (:func:`load_dataset`):

1. a synthetic preset (``twopgraph.synthetic.SYNTHETIC_PRESETS``, e.g. ``synthetic-tiny``):
   generated once, straight into its store ``<root>/stores/<name>-<hash of its spec>/`` in
   chunks (see :func:`load_preset`; an older twopgraph's ``<root>/<name>.npz`` cache is no
   longer needed);
2. a path to an existing ``.npz`` file (also tried relative to the data root): the dataset
   format (CSR) or the COO exchange format (``edge_index``; symmetrised while ingested);
3. ``ogbn-arxiv``, ``ogbn-products``, ``ogbn-papers100M``: OGB's raw files in ogb's own
   folder ``<root>/ogbn_<x>/`` (so an existing OGB download is used as is; downloaded by
   ogb's download code when absent) are ingested once, streaming, into the store
   ``<root>/stores/<name>-<hash>/`` (:mod:`twopgraph.ingest`; never through ogb's in-memory
   processing); later runs read only the store, again ingested when the raw files change
   (an older twopgraph's ``<root>/ogbn_<x>/twopgraph.npz`` cache is still read);
4. a name of a dataset file or store (:func:`named_dataset`): ``<root>/<name>.npz`` or the
   store folder ``<root>/<name>/``, else the same in a folder of ``$TWOPGRAPH_DATASET_PATH``
   (folders separated by ``:``, like ``PATH``: e.g. a shared, read-only folder of real
   graphs or stores), else the store an earlier
   run converted from a ``<name>.npz`` (``<root>/stores/<name>-<hash>/``: read through its
   file while that exists, as the store it is once the file is gone). :func:`list_datasets`
   (``twopgraph datasets``) lists all of them.

The data root is ``--data-root``, else ``$TWOPGRAPH_DATA``, else ``./datasets``
(:func:`resolve_data_root`). Every failure a user can fix raises a one-line
:class:`~twopgraph.errors.TwopgraphError` (an unknown name, or a ``.npz`` not found, names the
closest known datasets: "did you mean"); malformed files raise
:class:`~twopgraph.errors.GraphFormatError`. Only exceptions of the kinds a download or a
damaged file produces, raised inside ogb, are turned into such a line; any other exception
(a bug, in twopgraph or in ogb) keeps its traceback.

Example::

    >>> data = load_dataset("synthetic-tiny", data_root="/tmp/data")   # doctest: +SKIP
    >>> [d["name"] for d in list_datasets("/tmp/data")][:1]              # doctest: +SKIP
    ['synthetic-tiny']
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import io
import json
import logging
import os
import pickle
import socket
import sys
import urllib.error
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from .errors import ConfigError, GraphFormatError, OutputError, TwopgraphError
from .files import atomic_write_bytes
from .graph import CSRGraph, GraphData
from .ingest import (NpzMember, coo_npz, ingest, is_coo_npz, ogb_raw, read_ogb_split,
                     source_record)
from .livemap import StoreChanged
from .npzstore import convert_npz
from .store import (NotUndirected, is_store, files_changed, open_store, read_store_meta,
                    rewrite_meta, source_digest, source_identity)
from .storewriter import HalfRangeError, half_checked, write_store

log = logging.getLogger("twopgraph")

DATA_ROOT_ENV = "TWOPGRAPH_DATA"
#: Folders (separated by ``os.pathsep``) where ``--dataset NAME`` also finds ``NAME.npz``.
DATASET_PATH_ENV = "TWOPGRAPH_DATASET_PATH"
DEFAULT_DATA_ROOT = "datasets"
OGB_CACHE_FILE = "twopgraph.npz"
#: Folder of the data root that holds the stores converted from ``.npz`` files.
STORES_DIR = "stores"
# Seconds one network operation of ogb (connect, one read) may block before it fails.
OGB_NET_TIMEOUT_S = 60.0
# Exception types that ogb's download and raw-file reading raise for a user-fixable cause
# (network down or refused, a damaged, truncated or missing file, a declined prompt); they
# become one-line errors only when raised inside ogb (see _raised_in_ogb).
_OGB_FAILURES = (OSError, EOFError, ValueError, KeyError, IndexError, RuntimeError,
                 zipfile.BadZipFile, http.client.HTTPException, SystemExit)
_NETWORK_ERRORS = (urllib.error.URLError, http.client.HTTPException, TimeoutError,
                   ConnectionError)
# What torch.load raises for a damaged or foreign pickle.
_PICKLE_ERRORS = (OSError, EOFError, RuntimeError, ValueError, pickle.UnpicklingError,
                  ImportError, AttributeError)

OGB_DATASETS = {
    "ogbn-arxiv": "OGB citation graph: 169,343 nodes, 1.17M edges, 128 features, 40 classes",
    "ogbn-products": "OGB co-purchase graph: 2.45M nodes, 61.9M edges, 100 features, "
                     "47 classes",
    "ogbn-papers100M": "OGB citation graph: 111M nodes, 1.6B edges, 128 features, 172 classes "
                       "(57 GB of features; ingested streaming from OGB's raw files)",
}


# -- public API ------------------------------------------------------------------------------
def resolve_data_root(arg: str | os.PathLike | None = None) -> Path:
    """The data root: ``arg`` if given, else ``$TWOPGRAPH_DATA``, else ``datasets`` (cwd-relative)."""
    if arg is not None and str(arg) != "":
        return Path(arg).expanduser()
    env = os.environ.get(DATA_ROOT_ENV, "")
    return Path(env).expanduser() if env else Path(DEFAULT_DATA_ROOT)


def load_dataset(name: str, data_root=None, progress: bool = True,
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


def _rebuilding(folder: Path, e: GraphFormatError) -> None:
    """One warning: the store at ``folder`` (a cache of its source) is damaged or its content
    changed since it was written (``e``), so it is rebuilt from its source."""
    if isinstance(e, StoreChanged):
        log.warning("dataset store %s: %s; rebuilding it from its source", folder, e.what)
    else:
        log.warning("dataset store %s is damaged, rebuilding it (%s)", folder, e)


def _papers_spec(name: str):
    """The :class:`~twopgraph.papers.PapersSpec` of ``synthetic-papers[:SCALE]``, else None."""
    if not name.startswith("synthetic-papers"):
        return None
    from .papers import parse_preset
    return parse_preset(name)


def load_papers(spec, data_root=None, progress: bool = False,
                store_dtype: str = "float32") -> GraphData:
    """The store of the papers-shaped preset ``spec`` (:mod:`twopgraph.papers`), generated
    straight into ``<data root>/stores/synthetic-papers-<scale>-<hash>/`` in chunks on first
    use (one copy: no ``.npz``); reused while its spec and generator version match."""
    root = resolve_data_root(data_root)
    from .papers import papers_raw
    fp = spec.fingerprint()
    folder = root / STORES_DIR / (f"synthetic-papers-{spec.scale:g}-{fp[:8]}".replace("/", "_")
                                  + _dtype_suffix(store_dtype))
    if is_store(folder):
        try:
            meta = read_store_meta(folder)
            if (meta.get("source") or {}).get("spec_fingerprint") == fp:
                return open_store(folder, name=spec.name)
        except GraphFormatError as e:
            _rebuilding(folder, e)
    log.info("generating %s (%s vertices, ~%s directed edges) into %s", spec.name,
             f"{spec.num_nodes:,}", f"{spec.num_edges:,}", folder)
    try:
        ingest(papers_raw(spec), folder, progress=progress, feat_dtype=_converted(store_dtype),
               source={"spec_fingerprint": fp, "spec": spec.name})
    except OutputError as e:
        raise TwopgraphError(f"cannot write the dataset store of {spec.name}: {e}; choose a "
                             f"writable --data-root or ${DATA_ROOT_ENV}") from None
    return open_store(folder, name=spec.name)


def preset_store(spec, data_root=None, store_dtype: str = "float32") -> Path:
    """The store of the synthetic preset ``spec`` (:class:`~twopgraph.synthetic.SyntheticSpec`):
    ``<data root>/stores/<name>-<8 hex digits of its spec fingerprint>`` (``-float16``
    appended for ``store_dtype`` float16); it need not exist yet."""
    from .synthetic import spec_fingerprint
    root = resolve_data_root(data_root)
    stem = str(spec.name).replace("/", "_") or "synthetic"
    return root / STORES_DIR / (f"{stem}-{spec_fingerprint(spec)[:8]}"
                                + _dtype_suffix(store_dtype))


def _preset_meta(spec, folder: Path) -> dict | None:
    """``store.json`` of the store at ``folder`` when it holds the preset ``spec`` (its spec
    fingerprint recorded), else None; a damaged one raises :class:`GraphFormatError`."""
    from .synthetic import spec_fingerprint
    if not is_store(folder):
        return None
    meta = read_store_meta(folder)
    return meta if (meta.get("source") or {}).get("spec_fingerprint") == \
        spec_fingerprint(spec) else None


def load_preset(spec, data_root=None, progress: bool = False,
                store_dtype: str = "float32") -> GraphData:
    """The store of the synthetic preset ``spec`` (:func:`preset_store`), generated straight
    into it on first use (:func:`twopgraph.synthetic.write_store`: the features and the CSR
    written chunk by chunk as they are made; one copy on disk, no ``.npz``) and reused while
    it holds this spec (its spec fingerprint: every field that changes the arrays and the
    generator version). A damaged store, or one whose files changed since it was written, is
    rebuilt with one warning. Where the store cannot be written (a read-only data root), an
    older twopgraph's ``<data root>/<name>.npz`` cache of the same spec is read into memory
    instead; without one, one line says to choose a writable data root."""
    from .synthetic import GENERATOR_VERSION, spec_fingerprint, spec_summary
    from .synthetic import write_store as generate_store
    root = resolve_data_root(data_root)
    folder = preset_store(spec, root, store_dtype)
    try:
        if _preset_meta(spec, folder) is not None:
            return open_store(folder, name=spec.name)
    except GraphFormatError as e:
        _rebuilding(folder, e)
    log.info("generating %s (%s vertices, %s undirected edges) into %s", spec.name,
             f"{spec.num_nodes:,}", f"{spec.num_edges:,}", folder)
    source = {"spec_fingerprint": spec_fingerprint(spec), "generator_version": GENERATOR_VERSION,
              "spec": spec_summary(spec)}
    try:
        generate_store(spec, folder, source=source, progress=progress,
                       feat_dtype=_converted(store_dtype))
    except OutputError as e:
        legacy = _legacy_preset_cache(spec, root)
        if legacy is None:
            raise TwopgraphError(f"cannot write the dataset store of {spec.name}: {e}; choose "
                                 f"a writable --data-root or ${DATA_ROOT_ENV}") from None
        log.warning("cannot write the dataset store of %s (%s): reading the older cache %s "
                    "into memory instead (give a writable --data-root or $%s)", spec.name,
                    e.strerror or e, legacy, DATA_ROOT_ENV)
        data = _in_memory(legacy, spec.name, False)
        if store_dtype != "float32":
            data.feat = next(half_checked([np.asarray(data.feat)],
                                          f"{spec.name} features")).astype(np.float16)
        return data
    return open_store(folder, name=spec.name)


def _legacy_preset_cache(spec, root: Path) -> Path | None:
    """``<root>/<name>.npz``, the cache an older twopgraph wrote for the preset ``spec``, when
    its ``.spec.json`` sidecar vouches for this spec; else None. No longer written (the
    preset's store is its one copy), only read where the store cannot be written."""
    from .synthetic import spec_fingerprint
    path = root / f"{spec.name}.npz"
    try:
        have = json.loads(path.with_suffix(".spec.json").read_text()).get("fingerprint")
    except (OSError, ValueError, AttributeError):
        return None
    return path if have == spec_fingerprint(spec) and path.is_file() else None


def store_folder(npz, data_root=None, stem: str | None = None,
                 dtype: str = "float32") -> Path:
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


#: ``--store-dtype``: the types a store may keep its features in (``auto``: chosen by
#: :func:`resolve_store_dtype`).
STORE_DTYPES = ("float32", "float16")
STORE_DTYPE_CHOICES = ("auto",) + STORE_DTYPES
#: ``--store-dtype auto`` keeps float16 features when the float32 table would take more
#: than this share of the memory the process can fill (:func:`available_host_bytes`).
AUTO_HALF_SHARE = 0.5


def float32_feature_bytes(name: str, data_root=None) -> int | None:
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


def resolve_store_dtype(store_dtype: str, name: str, data_root=None) -> str:
    """``--store-dtype`` as a type: ``float32`` / ``float16`` as given; ``auto`` = float16
    when the dataset's float32 features (:func:`float32_feature_bytes`) would take more than
    :data:`AUTO_HALF_SHARE` of the memory this process can fill (MemAvailable, its cgroup's
    limit: :func:`~twopgraph.metrics.available_host_bytes`), so that the table stays in the
    page cache instead of being read from disk batch after batch; else (or when either is
    unknown) float32. The choice is logged when it is float16."""
    if store_dtype not in STORE_DTYPE_CHOICES:
        raise ConfigError(f"unknown store dtype {store_dtype!r}; known: "
                          f"{', '.join(STORE_DTYPE_CHOICES)}")
    if store_dtype != "auto":
        return store_dtype
    from .metrics import available_host_bytes
    need, avail = float32_feature_bytes(name, data_root), available_host_bytes()
    if need is None or avail is None or need <= AUTO_HALF_SHARE * avail:
        return "float32"
    log.info("--store-dtype auto: float16 features (%.1f GB as float32 > %.0f%% of the "
             "%.1f GB this process can fill)", need / 1e9, 100 * AUTO_HALF_SHARE, avail / 1e9)
    return "float16"


def _dtype_suffix(dtype: str) -> str:
    return "" if dtype == "float32" else f"-{dtype}"


def _converted(dtype: str) -> str | None:
    """What the converters take as ``feat_dtype`` for ``--store-dtype`` ``dtype``: None for
    float32 (the source's float32 or float16 kept, anything else float32), else ``dtype``."""
    return None if dtype == "float32" else dtype


def _fresh(meta: dict, path: Path, root: Path, folder: Path | None = None) -> bool:
    """Whether the store of ``meta`` (at ``folder``) was made from the file at ``path`` as it
    is now: same key (path relative to the data root), size and modification time, and,
    where recorded, inode and change time and the sizes and times of the other source files.
    A file of another inode or change time but the same size and mtime is the same source
    when its bytes have the recorded ``digest`` (a copied data root; the record then takes
    the new inode and change time, where ``folder`` is writable); without a digest (ingested
    raw files) it is not."""
    src = meta.get("source") or {}
    st = path.stat()
    if not (src.get("key") == _source_key(path, root) and src.get("size") == st.st_size
            and src.get("mtime_ns") == st.st_mtime_ns):
        return False
    if src.get("inode") is not None and (src["inode"] != st.st_ino
                                         or src.get("ctime_ns") != st.st_ctime_ns):
        if not src.get("digest") or source_digest(path) != src["digest"]:
            return False
        if folder is not None:  # same bytes (copied, hard-linked, chmod): cheap next time
            rewrite_meta(folder, dict(meta, source=dict(src, inode=st.st_ino,
                                                        ctime_ns=st.st_ctime_ns)))
    for fname, (size, mtime) in (src.get("files") or {}).items():
        other = path.parent / fname
        try:
            ost = other.stat()
        except OSError:
            return False
        if (ost.st_size, ost.st_mtime_ns) != (size, mtime):
            return False
    return True


def _source_key(npz, root: Path) -> str:
    """``npz``'s path relative to the data root if inside it, else its absolute path."""
    path = Path(npz).expanduser().absolute()
    try:
        return path.relative_to(root.expanduser().absolute()).as_posix()
    except ValueError:
        return str(path)


def _stored(npz: Path, root: Path, name: str | None, symmetrize: bool = False,
            progress: bool = False, store_dtype: str = "float32") -> GraphData:
    """The memory-mapped store of ``npz`` (features as ``store_dtype``): reused when it was
    converted from this very file (path, size and modification time), else converted
    (streaming) first."""
    folder = store_folder(npz, root, dtype=store_dtype)
    if is_store(folder):
        try:
            if _fresh(read_store_meta(folder), npz, root, folder):
                return open_store(folder, name=name, check_symmetric=not symmetrize)
            log.info("%s changed since it was converted: converting it again", npz)
        except NotUndirected as e:  # the file's graph: the user's to fix (or --symmetrize)
            raise GraphFormatError(f"{npz}: {e.problem}") from None
        except GraphFormatError as e:
            _rebuilding(folder, e)
    try:
        if is_coo_npz(npz):  # the COO exchange format: edges, symmetrised while ingested
            ingest(coo_npz(npz, name), folder, progress=progress,
                   source=dict(source_record([npz], _source_key(npz, root)),
                               digest=source_digest(npz)),
                   feat_dtype=_converted(store_dtype))
        else:
            convert_npz(npz, folder, progress=progress, name=name,
                        source_key=_source_key(npz, root),
                        feat_dtype=_converted(store_dtype))
    except OutputError as e:  # a read-only (shared) data root: read the file into memory
        log.warning("cannot write the dataset store of %s (%s): reading it into memory "
                    "instead (no shared memory-mapped copy; give a writable --data-root or "
                    "$%s)", npz, e.strerror or e, DATA_ROOT_ENV)
        return _in_memory(npz, name, symmetrize)
    try:
        return open_store(folder, name=name, check_symmetric=not symmetrize)
    except NotUndirected as e:
        raise GraphFormatError(f"{npz}: {e.problem}") from None


def dataset_path(name: str, data_root=None, store_dtype: str = "float32") -> Path | None:
    """What :func:`load_dataset` reads or caches for ``name``: its ``.npz`` file, an OGB
    dataset's raw file, a synthetic preset's store folder (:func:`preset_store`; an older
    twopgraph's ``<root>/<name>.npz`` cache of the same spec where the store is not there but
    that file is); None if unknown.

    For synthetic presets and OGB names the path need not exist yet (it is the cache path):
    ``path.exists()`` tells whether loading needs no generation, download or conversion
    (OGB: ingestion aside).
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
        return None if found is None else found[1]
    return None


def dataset_identity(name: str, data_root=None, store_dtype: str = "float32") -> dict:
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


def _store_of_source(name: str, path: Path, root: Path, dtype: str = "float32") -> Path:
    """The store folder of the source file ``path`` of dataset ``name``: OGB raw files give
    ``stores/<name>-<hash>``, every other file ``stores/<file stem>-<hash>`` (``-float16``
    after either for ``dtype`` float16)."""
    ogb = name in OGB_DATASETS and path.name != OGB_CACHE_FILE
    return store_folder(path, root, stem=name if ogb else None, dtype=dtype)


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
    return str(source.get("path") or source.get("store") or name)


def partition_dataset(name: str, data_root, partitions, source: dict, given: bool) -> str:
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


def dataset_search_path() -> list[Path]:
    """The folders of ``$TWOPGRAPH_DATASET_PATH`` (separated by ``os.pathsep``, ``~``
    expanded; empty entries skipped), where ``--dataset NAME`` also finds ``NAME.npz``."""
    env = os.environ.get(DATASET_PATH_ENV, "")
    return [Path(p).expanduser() for p in env.split(os.pathsep) if p.strip()]


def _plain_name(name: str) -> bool:
    """Whether ``name`` can name a dataset file or store: no folder part, no ``.npz``."""
    return bool(name) and "/" not in name and os.sep not in name and \
        not name.endswith(".npz") and name not in (".", "..")


def named_dataset(name: str, data_root=None, store_dtype: str = "float32"):
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


def _source_path(key: str, root: Path) -> Path:
    """The file a store's source ``key`` names: the key itself when absolute, else relative
    to the data root (:func:`_source_key`)."""
    path = Path(key)
    return path if path.is_absolute() else root / path


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


def list_datasets(data_root=None) -> list[dict]:
    """Every known dataset: presets, OGB names, then each ``*.npz`` in the data root.

    Each entry is ``{"name", "kind" ("synthetic"|"ogb"|"npz"|"store"), "cached" (bool),
    "path" (str), "description"}``; ``cached`` says whether loading needs no
    generation/download/conversion. Beyond the presets and OGB names: every name
    :func:`named_dataset` resolves, once (the ``.npz`` files and store folders of the data
    root, then those of each folder of ``$TWOPGRAPH_DATASET_PATH``, then the stores converted
    from ``.npz`` files; a store is of kind ``store``).
    """
    root = resolve_data_root(data_root)
    out = []
    presets = _synthetic_presets()
    for name, preset in presets.items():
        path, cached = preset_store(preset, root), False
        with contextlib.suppress(TwopgraphError, OSError):  # damaged: rebuilt when loaded
            cached = _preset_meta(preset, path) is not None
        out.append(dict(name=name, kind="synthetic", cached=cached, path=str(path),
                        description=_describe_preset(preset)))
    out.append(dict(name="synthetic-papers:SCALE", kind="synthetic", cached=False, path="",
                    description="ogbn-papers100M's shape at SCALE (e.g. 0.25: 27.8M vertices, "
                                "404M directed edges, 128 features, 172 classes, 1.4% "
                                "labelled), generated straight into a store"))
    for name, desc in OGB_DATASETS.items():
        folder = _ogb_folder(name, root)
        path = dataset_path(name, root)
        cached = dataset_identity(name, root)["store"] is not None
        if not cached and path.is_file():
            desc += f" (raw files in {folder}, not ingested yet)"
        out.append(dict(name=name, kind="ogb", cached=cached, path=str(path),
                        description=desc))
    listed = set(presets) | set(OGB_DATASETS)
    for folder in [root, *dataset_search_path()]:
        where = "the data root" if folder == root else f"{folder} (${DATASET_PATH_ENV})"
        with contextlib.suppress(OSError):  # a folder that is not there: nothing from it
            entries = sorted(folder.glob("*.npz")) + sorted(
                p for p in folder.iterdir() if is_store(p)) if folder.is_dir() else []
            for path in entries:
                stem = path.stem if path.suffix == ".npz" else path.name
                if stem in listed or not _plain_name(stem):
                    continue  # a name found earlier wins, as when loading
                listed.add(stem)
                if path.suffix == ".npz":
                    size = path.stat().st_size / 2**20
                    out.append(dict(name=stem, kind="npz", cached=True, path=str(path),
                                    description=f".npz file in {where} ({size:.1f} MiB)"))
                else:
                    out.append(dict(name=stem, kind="store", cached=True, path=str(path),
                                    description=f"store folder in {where}"))
    for stem, by_source in _converted_stores(root).items():
        if stem in listed:
            continue
        folders = [f for fs in by_source.values() for f in fs]
        if len(by_source) > 1:
            desc = (f"ambiguous: stores of {len(by_source)} different {stem}.npz files; load "
                    f"one by its store folder")
        else:
            source = _source_path(next(iter(by_source)), root)
            desc = (f"store converted from {source}" if source.is_file() else
                    f"store converted from {source} (that file is gone: the store is the "
                    f"dataset now)")
        out.append(dict(name=stem, kind="store", cached=True, path=str(folders[0]),
                        description=desc))
    return out


# -- helpers: names, synthetic, npz ----------------------------------------------------------
def _synthetic_presets() -> dict:
    """The preset table of :mod:`twopgraph.synthetic` (imported lazily: it pulls in numba)."""
    from .synthetic import SYNTHETIC_PRESETS
    return SYNTHETIC_PRESETS


def _describe_preset(preset) -> str:
    """One-line description of a preset, whatever shape the preset table uses."""
    if isinstance(preset, str):
        return preset
    if isinstance(preset, dict):
        return str(preset.get("description", "synthetic graph"))
    return str(getattr(preset, "description", "synthetic graph"))


def _known_names(root: Path) -> list[str]:
    """Names for error messages: presets, OGB names, and the names of files and stores
    (:func:`list_datasets`)."""
    names = list(_synthetic_presets()) + list(OGB_DATASETS)
    with contextlib.suppress(OSError):
        names += [d["name"] for d in list_datasets(root)
                  if d["kind"] in ("npz", "store") and d["name"] not in names]
    return names


def _did_you_mean(name: str, root: Path) -> str:
    """``"; did you mean cora (datasets/cora.npz)?"`` for the known names closest to
    ``name`` (presets, OGB names, the files and stores :func:`list_datasets` names; letter
    case ignored), or ``""`` when none is close."""
    import difflib
    shown: dict[str, str] = {}  # name -> what to show
    for n in list(_synthetic_presets()) + list(OGB_DATASETS):
        shown.setdefault(n, n)
    with contextlib.suppress(OSError):  # an unreadable data root: no names from it
        for d in list_datasets(root):  # files and stores, each under the name it loads by
            if d["kind"] in ("npz", "store"):
                shown.setdefault(d["name"], f"{d['name']} ({d['path']})")
    typed = Path(name).name.removesuffix(".npz").lower()
    keys = {k.lower(): k for k in shown}
    score = {k: difflib.SequenceMatcher(None, typed, k).ratio() for k in keys}
    best = max(score.values(), default=0.0)
    if best < 0.6:
        return ""
    # the best and any about as close (at most three), best first
    close = sorted((k for k in keys if score[k] >= best - 0.05), key=lambda k: -score[k])[:3]
    return f"; did you mean {' or '.join(shown[keys[c]] for c in close)}?"


def _read_npz(path: Path, name: str | None, symmetrize: bool, root: Path,
              progress: bool = False, store_dtype: str = "float32") -> GraphData:
    """A user's ``.npz`` through its store (converted once, validated then), or with
    ``symmetrize`` made undirected after (the store keeps the file's graph)."""
    data = _stored(path, root, name if name is not None else path.stem, symmetrize, progress,
                   store_dtype)
    if not symmetrize:
        return data
    try:
        data = _symmetrized(data, str(path))
        data.validate()
    except GraphFormatError as e:
        raise GraphFormatError(f"{path}: {e}") from None
    return data


def _symmetrized(data: GraphData, where: str) -> GraphData:
    """``data`` with an undirected graph (``--symmetrize``); one log line says what changed."""
    graph, changed = data.graph.symmetrized()
    if graph is data.graph:
        log.info("--symmetrize: %s is undirected already; nothing changed", where)
        return data
    log.info("--symmetrize: made %s undirected: %s reverse entries added, %s self loops and "
             "%s duplicate entries removed (%s -> %s CSR entries)", where,
             f"{changed['added']:,}", f"{changed['self_loops']:,}",
             f"{changed['duplicates']:,}", f"{data.graph.num_edges:,}", f"{graph.num_edges:,}")
    return replace(data, graph=graph, store=None)


def _npz_file(name: str, root: Path) -> Path | None:
    """``name`` as an existing ``.npz`` path, else ``root / name`` if that exists, else in a
    folder of ``$TWOPGRAPH_DATASET_PATH`` (a relative ``name``), else None."""
    path = Path(name).expanduser()
    folders = [root] + (dataset_search_path() if not path.is_absolute() else [])
    for p in (path, *(f / path for f in folders)):
        if p.is_file():
            return p
    return None


def load_synthetic(spec, path: str | os.PathLike, progress: bool = False) -> GraphData:
    """The dataset of :class:`~twopgraph.synthetic.SyntheticSpec` ``spec`` in memory, cached
    as the ``.npz`` at ``path`` (for tools that need a file, e.g. ``scripts/bench_scaling.py``
    for DGL): read from there if it was made from this spec, else generated and written
    there. The presets of ``--dataset`` do not use it: they live in their store alone
    (:func:`load_preset`).

    Cache format: the ``.npz`` exchange format (docs/formats.md) plus a sidecar
    ``<path stem>.spec.json`` with ``fingerprint``
    (:func:`~twopgraph.synthetic.spec_fingerprint`: every spec field that changes the arrays
    and the generator version), and, for people, ``generator_version``
    and ``spec``. Only ``fingerprint`` is compared: a cache of another spec or generator
    version, or with a sidecar of an older format (no ``fingerprint``), is regenerated. The
    sidecar is removed before the ``.npz`` is rewritten and written after it, so a crash in
    between leaves no sidecar that vouches for other content. A cache that cannot be read or
    fails validation (damaged, truncated) is reported in one warning naming the file and
    regenerated. ``GraphData.name`` is the spec's name. An unwritable folder raises
    :class:`TwopgraphError`.
    """
    from .synthetic import GENERATOR_VERSION, generate, spec_fingerprint, spec_summary
    path = Path(path)
    sidecar = path.with_suffix(".spec.json")
    want = spec_fingerprint(spec)
    if path.is_file():
        try:
            have = json.loads(sidecar.read_text()).get("fingerprint")
        except (OSError, ValueError, AttributeError):  # missing, unreadable, not an object
            have = None
        if have == want:
            data = _read_cache(path, spec.name)
            if data is not None:
                return data
        elif have is None:
            log.warning("cached %s has no readable %s: regenerating it", path, sidecar.name)
        else:
            log.warning("cached %s was made from another spec or generator version: "
                        "regenerating", path)
    data = generate(spec, progress=progress)
    record = {"fingerprint": want, "generator_version": GENERATOR_VERSION,
              "spec": spec_summary(spec)}
    try:
        sidecar.unlink(missing_ok=True)
        _save_cache(data, path)
        atomic_write_bytes(sidecar, lambda f: f.write(
            (json.dumps(record, indent=1) + "\n").encode()))
    except OutputError:  # already one line, with the free space
        raise
    except OSError as e:
        raise TwopgraphError(f"cannot write dataset cache {path} ({e.strerror or e}); "
                             f"choose a writable --data-root or ${DATA_ROOT_ENV}") from e
    return data


def _in_memory(npz: Path, name: str | None, symmetrize: bool) -> GraphData:
    """The ``.npz`` read into memory (no store), validated unless it is to be symmetrised."""
    data = GraphData.load_npz(npz, name=name, validate=not symmetrize)
    if symmetrize:
        try:
            data.graph.validate()  # symmetrising needs a well-formed CSR
        except GraphFormatError as e:
            raise GraphFormatError(f"{npz}: {e}") from None
    return data


def _read_cache(path: Path, name: str) -> GraphData | None:
    """A cache file twopgraph wrote (generated or converted data), or None after one warning
    if it cannot be read or fails validation: the caller rebuilds it (self-heal)."""
    try:
        return GraphData.load_npz(path, name=name)
    except GraphFormatError as e:
        log.warning("dataset cache %s is damaged, rebuilding it (%s)", path,
                    str(e).removeprefix(f"{path}: "))
        return None


def _save_cache(data: GraphData, path: Path) -> None:
    """Write a cache file; an unwritable data root is a user error, not a crash."""
    try:
        data.save_npz(path)
    except OutputError:  # already one line, with the free space
        raise
    except OSError as e:
        raise TwopgraphError(f"cannot write dataset cache {path} ({e.strerror or e}); "
                             f"choose a writable --data-root or ${DATA_ROOT_ENV}") from e


# -- helpers: OGB ----------------------------------------------------------------------------
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


def _load_ogb(name: str, root: Path, progress: bool, store_dtype: str = "float32") -> GraphData:
    """The store of OGB dataset ``name``: reused while its raw files are unchanged, else
    ingested from the raw files straight into the store (:mod:`twopgraph.ingest`: streaming,
    bounded memory; never ogb's in-memory processing), downloaded first by ogb's own download
    code when absent. An older twopgraph's ``twopgraph.npz`` cache is still read; ogb's
    ``processed/data_processed`` is read when it is all there is (small datasets)."""
    folder = _ogb_folder(name, root)
    cache = folder / OGB_CACHE_FILE
    if cache.is_file():  # written by an older twopgraph: still a valid dataset
        try:
            return _stored(cache, root, name, progress=progress, store_dtype=store_dtype)
        except GraphFormatError as e:
            log.warning("dataset cache %s is damaged, ingesting the raw files instead (%s)",
                        cache, str(e).removeprefix(f"{cache}: "))
    meta = _ogb_meta(name)
    release = folder / f"RELEASE_v{meta['version']}.txt"
    if folder.is_dir() and not release.is_file():
        # ogb would ask on stdin whether to delete the folder and download it again.
        raise TwopgraphError(
            f"{name}: {folder} exists but has no {release.name}, so ogb would offer to delete "
            f"and re-download it; if it holds a complete {name} download, create the empty file "
            f"{release}, otherwise remove the folder to download afresh")
    src = _ogb_source(name, root)
    if not src.is_file() and is_store(_store_of_source(name, src, root, store_dtype)):
        # ingested before, raw files deleted since (papers100M's take 57 GB): the store is
        # the dataset now
        try:
            return open_store(_store_of_source(name, src, root, store_dtype), name=name)
        except GraphFormatError as e:
            log.warning("dataset store of %s is damaged and its raw files are gone (%s)",
                        name, e)
    if not src.is_file():
        processed = folder / "processed" / "data_processed"
        if processed.is_file():
            return _ogb_processed_store(name, root, meta, processed, progress, store_dtype)
        _download_ogb(name, root, meta, progress)
        src = _ogb_source(name, root)
    store = _store_of_source(name, src, root, store_dtype)
    if is_store(store):
        try:
            if _fresh(read_store_meta(store), src, root):
                return open_store(store, name=name)
            log.info("the raw files of %s changed since they were ingested: ingesting again",
                     name)
        except GraphFormatError as e:
            _rebuilding(store, e)
    offline = (f"download {meta['url']} yourself, unzip it in {root} and rename its folder to "
               f"{folder.name}")
    try:
        raw = ogb_raw(name, folder, split=meta["split"], num_classes=int(meta["num classes"]))
        ingest(raw, store, source=source_record(raw.files, _source_key(src, root)),
               progress=progress, feat_dtype=_converted(store_dtype))
    except OutputError as e:
        raise TwopgraphError(f"cannot write the dataset store of {name}: {e}; choose a "
                             f"writable --data-root or ${DATA_ROOT_ENV}") from None
    except GraphFormatError as e:
        raise TwopgraphError(f"{name}: could not read the raw files in {folder / 'raw'} ({e}); "
                             f"delete {folder} to download it afresh, or {offline}") from e
    return open_store(store, name=name)


#: OGB datasets whose download is in the binary layout (``raw/data.npz``).
OGB_BINARY = frozenset({"ogbn-papers100M"})


def _ogb_processed_store(name: str, root: Path, meta: dict, processed: Path,
                         progress: bool, store_dtype: str = "float32") -> GraphData:
    """A store from ogb's own ``processed/data_processed`` (read into memory: what an earlier
    ogb run left when the raw files are gone)."""
    graph, labels = _read_ogb_processed(processed)
    n = int(graph["num_nodes"])
    split = read_ogb_split(_ogb_folder(name, root) / "split" / meta["split"], n)
    data = _ogb_to_graphdata(name, graph, labels, split, progress)
    data.num_classes = max(data.num_classes, int(meta["num classes"]))
    del graph, labels
    source = source_identity(processed, _source_key(processed, root))
    folder = store_folder(processed, root, stem=name, dtype=store_dtype)
    if store_dtype != "float32":  # in memory already (ogb's processed file)
        feat = next(half_checked([np.asarray(data.feat)], f"{name} features"))
        data.feat = feat.astype(np.float16)
    if is_store(folder):
        with contextlib.suppress(GraphFormatError):
            if _fresh(read_store_meta(folder), processed, root, folder):
                return open_store(folder, name=name)
    try:
        write_store(data, folder, source=source, progress=progress)
    except OutputError as e:
        raise TwopgraphError(f"cannot write the dataset store of {name}: {e}; choose a "
                             f"writable --data-root or ${DATA_ROOT_ENV}") from None
    return open_store(folder, name=name)


def _ogb_meta(name: str) -> dict:
    """ogb's row of ``nodeproppred/master.csv`` for ``name`` (read without importing torch)."""
    spec = importlib.util.find_spec("ogb")
    if spec is None or not spec.submodule_search_locations:
        raise TwopgraphError(f"{name} needs the 'ogb' package: pip install ogb")
    import pandas as pd
    master = Path(list(spec.submodule_search_locations)[0]) / "nodeproppred" / "master.csv"
    table = pd.read_csv(master, index_col=0, keep_default_na=False)
    if name not in table:
        raise TwopgraphError(f"the installed ogb does not know {name}; upgrade ogb")
    return table[name].to_dict()


def _download_ogb(name: str, root: Path, meta: dict, progress: bool) -> None:
    """Let ogb's own download code fetch and unzip ``name`` into ``<root>/ogbn_x`` (nothing is
    processed). ogb runs inside :func:`ogb_session` (no stdin, network timeout, prints to
    stderr); exceptions of the kinds in ``_OGB_FAILURES`` that ogb raised become one line
    naming the fix; anything else propagates with its traceback."""
    folder = _ogb_folder(name, root)
    root.mkdir(parents=True, exist_ok=True)
    try:
        with ogb_session(progress):
            _fetch_ogb(name, root, folder, meta)
    except _OGB_FAILURES as e:
        if not _raised_in_ogb(e):
            raise  # twopgraph's own code failed: a bug, keep the traceback
        raise _ogb_failure(name, root, folder, meta["url"], e) from e


def _fetch_ogb(name: str, root: Path, folder: Path, meta: dict) -> None:
    """ogb's download steps (``NodePropPredDataset.pre_process`` without the processing)."""
    import shutil
    from ogb.utils.url import decide_download, download_url, extract_zip
    if not decide_download(meta["url"]):
        raise TwopgraphError(f"{name}: download declined; the raw files are expected in "
                             f"{folder}/raw")
    path = download_url(meta["url"], str(root))
    extract_zip(path, str(root))
    os.unlink(path)
    shutil.rmtree(folder, ignore_errors=True)
    shutil.move(str(root / meta["download_name"]), str(folder))


@contextlib.contextmanager
def ogb_session(progress: bool = True):
    """The scope of one call into ogb; everything it changes is restored on exit.

    ogb asks questions with ``input()`` (whether to re-download an outdated folder, whether
    to download more than 1 GB) and opens URLs without a timeout, so inside this block
    ``sys.stdin`` is an empty stream (a prompt fails at once with ``EOFError`` instead of
    waiting on a terminal or pipe nobody answers), ``socket.setdefaulttimeout`` is
    :data:`OGB_NET_TIMEOUT_S` (a dead connection fails instead of hanging), and stdout goes
    to stderr (or nowhere without ``progress``), so twopgraph's stdout stays machine-readable.
    These are process-wide settings: other threads see them while the block runs (twopgraph
    loads datasets before it starts any thread).
    """
    old_stdin, old_timeout = sys.stdin, socket.getdefaulttimeout()
    sys.stdin = io.StringIO("")
    socket.setdefaulttimeout(OGB_NET_TIMEOUT_S)
    try:
        with contextlib.redirect_stdout(sys.stderr if progress else io.StringIO()):
            yield
    finally:
        sys.stdin = old_stdin
        socket.setdefaulttimeout(old_timeout)


def _raised_in_ogb(e: BaseException) -> bool:
    """Whether ``e`` was raised inside ogb (or a library ogb called): a frame of the ``ogb``
    package lies on its traceback."""
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_globals.get("__name__", "").split(".")[0] == "ogb":
            return True
        tb = tb.tb_next
    return False


def _ogb_failure(name: str, root: Path, folder: Path, url: str,
                 e: BaseException) -> TwopgraphError:
    """The one-line error for a failure ``e`` inside ogb, naming what to do."""
    offline = (f"download {url} yourself, unzip it in {root} and rename its folder to "
               f"{folder.name}")
    if isinstance(e, SystemExit):
        return TwopgraphError(f"{name}: ogb stopped (download refused); the raw files are "
                              f"expected in {folder}/raw")
    if isinstance(e, EOFError) and _innermost_module(e).split(".")[0] == "ogb":
        return TwopgraphError(f"{name}: ogb asked for confirmation (a download over 1 GB); "
                              f"{offline}")
    text = str(e).strip()
    what = f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__
    if isinstance(e, _NETWORK_ERRORS) or isinstance(e.__context__, _NETWORK_ERRORS):
        return TwopgraphError(f"{name}: ogb could not download the dataset ({what}); the raw "
                              f"files are expected in {folder}/raw (offline: {offline})")
    return TwopgraphError(f"{name}: ogb could not read the raw files in {folder}/raw ({what}); "
                          f"delete {folder} to download it afresh, or {offline}")


def _innermost_module(e: BaseException) -> str:
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_globals.get("__name__", "") if tb is not None else ""


def _torch_load_local(path: Path):
    """``torch.load`` of a pickle that ogb wrote in the user's own folder.

    torch >= 2.6 defaults to ``weights_only=True``, which refuses ogb's numpy arrays; the file
    is local and was written by ogb, so the full unpickler is used.
    """
    import torch
    try:
        return torch.load(path, weights_only=False)
    except _PICKLE_ERRORS as e:
        raise GraphFormatError(f"{path}: cannot read ogb's file ({type(e).__name__}: {e}); "
                               "delete it so that ogb rebuilds it from the raw files") from e


def _read_ogb_processed(path: Path):
    """``(graph, labels)`` from ogb's ``processed/data_processed``."""
    loaded = _torch_load_local(path)
    if not isinstance(loaded, dict) or "graph" not in loaded or "labels" not in loaded:
        raise GraphFormatError(f"{path}: not an ogb processed file (no 'graph'/'labels'); "
                               "delete it so that ogb rebuilds it from the raw files")
    return loaded["graph"], loaded["labels"]


def _ogb_to_graphdata(name: str, graph: dict, labels, split: dict,
                      progress: bool) -> GraphData:
    """Convert ogb's graph dict to :class:`GraphData` (symmetric CSR, float32 features).

    Unlabelled nodes (NaN in papers100M) get label -1; they must be in no split.
    """
    from tqdm import tqdm
    n = int(graph["num_nodes"])
    with tqdm(total=4, desc=f"converting {name}", unit="step", disable=not progress,
              file=sys.stderr) as bar:
        bar.set_postfix_str("symmetrising edges")
        edge_index = np.asarray(graph["edge_index"])
        csr = CSRGraph.from_edges(edge_index[0], edge_index[1], num_nodes=n)
        del edge_index
        bar.update()
        bar.set_postfix_str("features")
        feat = graph.get("node_feat")
        if feat is None:
            raise GraphFormatError(f"{name}: ogb graph has no node features")
        feat = np.asarray(feat)
        if feat.dtype not in (np.float32, np.float16):
            feat = feat.astype(np.float32)
        bar.update()
        bar.set_postfix_str("labels and splits")
        splits = {k: np.sort(np.asarray(v, dtype=np.int64).ravel()) for k, v in split.items()}
        label = _ogb_labels(name, labels, n, splits)
        bar.update()
        data = GraphData(graph=csr, feat=feat, label=label, name=name, **splits)
        try:
            data.validate()
        except GraphFormatError as e:
            raise GraphFormatError(f"{name}: converted ogb data is inconsistent: {e}") from None
        bar.update()
    return data


def _ogb_labels(name: str, labels, n: int, splits: dict) -> np.ndarray:
    """int64 (N) labels from ogb's (N x 1) array; NaN (unlabelled) -> -1, refused in a
    split."""
    y = np.asarray(labels).reshape(-1)
    if y.shape[0] != n:
        raise GraphFormatError(f"{name}: {y.shape[0]} labels for {n} nodes")
    if np.issubdtype(y.dtype, np.floating):
        missing = np.isnan(y)
        for key, idx in splits.items():
            if idx.shape[0] and idx.max() < n and missing[idx].any():
                raise GraphFormatError(f"{name}: {int(missing[idx].sum())} nodes of the "
                                       f"{key} split have no label")
        y = np.where(missing, -1, y)
    return y.astype(np.int64)
