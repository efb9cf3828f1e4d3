"""The OGB datasets (``ogbn-arxiv``, ``ogbn-products``, ``ogbn-papers100M``) from disk: OGB's
raw files in ogb's own folder ``<root>/ogbn_<x>/`` ingested once, streaming, into the store
``<root>/stores/<name>-<hash>/`` (:mod:`twopgraph.ingest`), downloaded first
(:mod:`.download`) when absent; an older twopgraph's ``twopgraph.npz`` cache, or ogb's
``processed/data_processed`` when it is all there is, is read instead.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import sys
from pathlib import Path

import numpy as np

from twopgraph.datasets.download import _download_ogb, _ogb_meta
from twopgraph.datasets.dtype import _converted
from twopgraph.datasets.paths import (
    DATA_ROOT_ENV,
    OGB_CACHE_FILE,
    _ogb_folder,
    _ogb_source,
    _source_key,
    _store_of_source,
    store_folder,
)
from twopgraph.datasets.sourcestore import _fresh, _rebuilding, _stored
from twopgraph.errors import GraphFormatError, OutputError, TwopgraphError
from twopgraph.graph.data import CSRGraph, GraphData
from twopgraph.ingest import ingest, ogb_raw, read_ogb_split, source_record
from twopgraph.store.reader import is_store, open_store, read_store_meta, source_identity
from twopgraph.store.writer import half_checked, write_store

log = logging.getLogger("twopgraph")

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
    for f in ("data.npz", "edge.csv.gz"):  # what identifies the download, not a file:
        odd = folder / "raw" / f  # a download would not replace it
        if odd.exists() and not odd.is_file():
            kind = "folder" if odd.is_dir() else "special file"
            raise TwopgraphError(f"{name}: {odd} is a {kind}, not ogb's raw file; move it "
                                 f"away (and the rest of {folder} with it to download "
                                 f"afresh)")
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


# What torch.load raises for a damaged or foreign pickle.
_PICKLE_ERRORS = (OSError, EOFError, RuntimeError, ValueError, pickle.UnpicklingError,
                  ImportError, AttributeError)


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
