"""The store of a source file (a user's ``.npz``, OGB's raw files): converted or ingested
once, reused while the file is as it was (:func:`_fresh`: key, size, mtime, inode, ctime, a
digest of a copied file), rebuilt with one warning when damaged or changed; a ``.npz`` read
into memory where the store cannot be written; ``--symmetrize`` applied after.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from twopgraph.datasets.dtype import _converted
from twopgraph.datasets.paths import DATA_ROOT_ENV, _source_key, store_folder
from twopgraph.errors import GraphFormatError, OutputError
from twopgraph.graph.data import GraphData
from twopgraph.ingest import coo_npz, ingest, is_coo_npz, source_record
from twopgraph.store.mapped import StoreChanged
from twopgraph.store.npz import convert_npz
from twopgraph.store.reader import (
    NotUndirected,
    is_store,
    open_store,
    read_store_meta,
    rewrite_meta,
    source_digest,
)

log = logging.getLogger("twopgraph")

def _rebuilding(folder: Path, e: GraphFormatError) -> None:
    """One warning: the store at ``folder`` (a cache of its source) is damaged or its content
    changed since it was written (``e``), so it is rebuilt from its source."""
    if isinstance(e, StoreChanged):
        log.warning("dataset store %s: %s; rebuilding it from its source", folder, e.what)
    else:
        log.warning("dataset store %s is damaged, rebuilding it (%s)", folder, e)


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


def _in_memory(npz: Path, name: str | None, symmetrize: bool) -> GraphData:
    """The ``.npz`` read into memory (no store), validated unless it is to be symmetrised."""
    data = GraphData.load_npz(npz, name=name, validate=not symmetrize)
    if symmetrize:
        try:
            data.graph.validate()  # symmetrising needs a well-formed CSR
        except GraphFormatError as e:
            raise GraphFormatError(f"{npz}: {e}") from None
    return data


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
