"""The synthetic datasets: the presets of :mod:`twopgraph.datasets.synthetic` and
``synthetic-papers:SCALE`` (:mod:`twopgraph.datasets.papers`), generated straight into their stores
(``<root>/stores/<name>-<8 hex digits of the spec fingerprint>``) on first use and reused
while they hold the same spec; and :func:`load_synthetic`, a spec cached as a ``.npz`` file
with a ``.spec.json`` sidecar (for tools that need a file).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from twopgraph.core.files import atomic_write_bytes
from twopgraph.datasets.dtype import _converted
from twopgraph.datasets.paths import DATA_ROOT_ENV, STORES_DIR, _dtype_suffix, resolve_data_root
from twopgraph.datasets.sourcestore import _in_memory, _rebuilding
from twopgraph.errors import GraphFormatError, OutputError, TwopgraphError
from twopgraph.graph.data import GraphData
from twopgraph.ingest import ingest
from twopgraph.store.reader import is_store, open_store, read_store_meta
from twopgraph.store.writer import half_checked

if TYPE_CHECKING:  # annotations only: both modules are imported where they are used
    from twopgraph.datasets.papers import PapersSpec
    from twopgraph.datasets.synthetic import SyntheticSpec

log = logging.getLogger("twopgraph")

def load_papers(spec: PapersSpec, data_root: str | os.PathLike | None = None,
                progress: bool = False, store_dtype: str = "float32") -> GraphData:
    """The store of the papers-shaped preset ``spec`` (:mod:`twopgraph.datasets.papers`), generated
    straight into ``<data root>/stores/synthetic-papers-<scale>-<hash>/`` in chunks on first
    use (one copy: no ``.npz``); reused while its spec and generator version match."""
    root = resolve_data_root(data_root)
    from twopgraph.datasets.papers import papers_raw
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


def preset_store(spec: SyntheticSpec, data_root: str | os.PathLike | None = None,
                 store_dtype: str = "float32") -> Path:
    """The store of the synthetic preset ``spec``
    (:class:`~twopgraph.datasets.synthetic.SyntheticSpec`): ``<data root>/stores/<name>-<8 hex
    digits of its spec fingerprint>`` (``-float16`` appended for ``store_dtype`` float16); it need
    not exist yet."""
    from twopgraph.datasets.synthetic import spec_fingerprint
    root = resolve_data_root(data_root)
    stem = str(spec.name).replace("/", "_") or "synthetic"
    return root / STORES_DIR / (f"{stem}-{spec_fingerprint(spec)[:8]}"
                                + _dtype_suffix(store_dtype))


def _preset_meta(spec, folder: Path) -> dict | None:
    """``store.json`` of the store at ``folder`` when it holds the preset ``spec`` (its spec
    fingerprint recorded), else None; a damaged one raises :class:`GraphFormatError`."""
    from twopgraph.datasets.synthetic import spec_fingerprint
    if not is_store(folder):
        return None
    meta = read_store_meta(folder)
    return meta if (meta.get("source") or {}).get("spec_fingerprint") == \
        spec_fingerprint(spec) else None


def load_preset(spec: SyntheticSpec, data_root: str | os.PathLike | None = None,
                progress: bool = False, store_dtype: str = "float32") -> GraphData:
    """The store of the synthetic preset ``spec`` (:func:`preset_store`), generated straight
    into it on first use (:func:`twopgraph.datasets.synthetic.write_store`: the features and the CSR
    written chunk by chunk as they are made; one copy on disk, no ``.npz``) and reused while
    it holds this spec (its spec fingerprint: every field that changes the arrays and the
    generator version). A damaged store, or one whose files changed since it was written, is
    rebuilt with one warning. Where the store cannot be written (a read-only data root), an
    older twopgraph's ``<data root>/<name>.npz`` cache of the same spec is read into memory
    instead; without one, one line says to choose a writable data root."""
    from twopgraph.datasets.synthetic import GENERATOR_VERSION, spec_fingerprint, spec_summary
    from twopgraph.datasets.synthetic import write_store as generate_store
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
    from twopgraph.datasets.synthetic import spec_fingerprint
    path = root / f"{spec.name}.npz"
    try:
        have = json.loads(path.with_suffix(".spec.json").read_text()).get("fingerprint")
    except (OSError, ValueError, AttributeError):
        return None
    return path if have == spec_fingerprint(spec) and path.is_file() else None


def load_synthetic(spec: SyntheticSpec, path: str | os.PathLike,
                   progress: bool = False) -> GraphData:
    """The dataset of :class:`~twopgraph.datasets.synthetic.SyntheticSpec` ``spec`` in memory,
    cached as the ``.npz`` at ``path`` (for tools that need a file, e.g.
    ``twopgraph bench scaling`` for DGL): read from there if it was made from this spec, else
    generated and written there. The presets of ``--dataset`` do not use it: they live in their
    store alone (:func:`load_preset`).

    Cache format: the ``.npz`` exchange format (docs/formats.md) plus a sidecar
    ``<path stem>.spec.json`` with ``fingerprint``
    (:func:`~twopgraph.datasets.synthetic.spec_fingerprint`: every spec field that changes the
    arrays and the generator version), and, for people, ``generator_version``
    and ``spec``. Only ``fingerprint`` is compared: a cache of another spec or generator
    version, or with a sidecar of an older format (no ``fingerprint``), is regenerated. The
    sidecar is removed before the ``.npz`` is rewritten and written after it, so a crash in
    between leaves no sidecar that vouches for other content. A cache that cannot be read or
    fails validation (damaged, truncated) is reported in one warning naming the file and
    regenerated. ``GraphData.name`` is the spec's name. An unwritable folder raises
    :class:`TwopgraphError`.
    """
    from twopgraph.datasets.synthetic import (
        GENERATOR_VERSION,
        generate,
        spec_fingerprint,
        spec_summary,
    )
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
