"""OGB's raw layouts of a node-property dataset, the files ogb downloads (:func:`ogb_raw`).

* binary (ogbn-papers100M): ``raw/data.npz`` with ``edge_index`` (2 x E, int64),
  ``node_feat`` (N x F), ``num_nodes_list``, ``num_edges_list``; ``raw/node-label.npz`` with
  ``node_label`` (N x 1, float; NaN = unlabelled);
* CSV (ogbn-arxiv, ogbn-products): ``raw/edge.csv.gz``, ``raw/node-feat.csv.gz``,
  ``raw/node-label.csv.gz``, ``raw/num-node-list.csv.gz``, ``raw/num-edge-list.csv.gz``, read
  with pandas in chunks of rows;
* the split (:func:`read_ogb_split`): ``split/<kind>/{train,valid,test}.csv.gz`` or ogb's
  ``split_dict.pt``.

Only sizes are read when the :class:`~twopgraph.ingest.raw.RawDataset` is made; the arrays
are read while it is ingested.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import numpy as np

from twopgraph.core.files import map_new_npy
from twopgraph.errors import GraphFormatError
from twopgraph.ingest.npz import READ_ERRORS, NpzMember, members
from twopgraph.ingest.raw import (
    RawDataset,
    _check_feat,
    _count,
    _edge_arrays,
    _edge_count,
    _fail,
    _npz_labels,
    _rows_per_chunk,
    _split_ids,
    labels_from,
)

#: The split files' names in OGB's layout, by the store's split names.
OGB_SPLIT_FILES = {"train_idx": "train", "val_idx": "valid", "test_idx": "test"}


def read_ogb_split(folder: Path, n: int) -> dict:
    """``{train_idx, val_idx, test_idx}`` from an OGB split folder (``{train,valid,test}
    .csv.gz`` or ogb's ``split_dict.pt``), sorted int64 ids checked against ``n``."""
    pt = folder / "split_dict.pt"
    if pt.is_file():
        import torch
        try:
            split = torch.load(pt, weights_only=False)
            raw = {k: np.asarray(split[v]) for k, v in OGB_SPLIT_FILES.items()}
        except Exception as e:  # a damaged or foreign pickle: any unpickling failure
            raise GraphFormatError(f"{pt}: cannot read ogb's split file ({type(e).__name__})"
                                   f"; delete it") from None
        return {k: _split_ids(v, n, f"{pt} ({OGB_SPLIT_FILES[k]})") for k, v in raw.items()}
    out = {}
    for key, stem in OGB_SPLIT_FILES.items():
        path = folder / f"{stem}.csv.gz"
        if not path.is_file():
            raise GraphFormatError(f"split file {path} is missing (incomplete download?)")
        out[key] = _split_ids(_read_csv(path, np.int64, ncols=1).reshape(-1), n, str(path))
    return out


def _read_csv(path: Path, dtype, ncols: int | None = None) -> np.ndarray:
    """A small headerless CSV(.gz) file as one array (one line on any failure)."""
    return np.concatenate(list(_csv_chunks(path, dtype, 1 << 20, ncols)) or
                          [np.empty((0, ncols or 1), dtype=dtype)])


def _csv_chunks(path: Path, dtype, rows: int, ncols: int | None = None) -> Iterator[np.ndarray]:
    """A headerless CSV(.gz) file in chunks of ``rows`` rows (2-D arrays of ``dtype``)."""
    import pandas as pd
    try:
        reader = pd.read_csv(path, header=None, chunksize=rows, dtype=dtype,
                             compression="gzip" if path.suffix == ".gz" else None)
        with reader:
            for df in reader:
                arr = df.to_numpy(dtype=dtype)
                if ncols is not None and arr.shape[1] != ncols:
                    raise GraphFormatError(f"{path}: {arr.shape[1]} columns, expected {ncols}")
                yield arr
    except GraphFormatError:
        raise
    except pd.errors.EmptyDataError:
        return
    except (*READ_ERRORS, pd.errors.ParserError) as e:
        text = str(e).strip().splitlines()
        raise GraphFormatError(f"{path}: cannot read it ({type(e).__name__}"
                               f"{': ' + text[0] if text else ''}); damaged or truncated?") \
            from e


def ogb_raw(name: str, folder: str | os.PathLike, *, split: str,
            num_classes: int = -1) -> RawDataset:
    """The raw files of OGB node-property dataset ``name`` in its folder (``<root>/ogbn_x``):
    the binary layout when ``raw/data.npz`` exists, else the CSV layout. ``split`` is the
    split folder's name (ogb's ``master.csv`` column ``split``). Only sizes are read here."""
    folder = Path(folder)
    raw = folder / "raw"
    fix = ""  # the caller (datasets) names the fix: delete the folder or download by hand
    if (raw / "data.npz").is_file():
        return _ogb_binary(name, folder, split, num_classes, fix)
    if (raw / "edge.csv.gz").is_file():
        return _ogb_csv(name, folder, split, num_classes, fix)
    raise GraphFormatError(f"{name}: no raw files in {raw} (neither data.npz nor "
                           f"edge.csv.gz)")


def _ogb_binary(name: str, folder: Path, split: str, num_classes: int, fix: str) -> RawDataset:
    raw = folder / "raw"
    data, label_file = raw / "data.npz", raw / "node-label.npz"
    have = members(data)
    missing = [k for k in ("edge_index", "node_feat", "num_nodes_list") if k not in have]
    if missing:
        raise _fail(str(data), f"missing arrays {', '.join(missing)} (an OGB binary dataset "
                    "has edge_index, node_feat, num_nodes_list, num_edges_list)", fix)
    if not label_file.is_file():
        raise _fail(str(label_file), "missing (an OGB binary dataset has node-label.npz)", fix)
    n = _count(NpzMember(data, "num_nodes_list"), "num_nodes_list")
    ei = NpzMember(data, "edge_index")
    e = _edge_count(ei)
    if "num_edges_list" in have:
        want = _count(NpzMember(data, "num_edges_list"), "num_edges_list")
        if want != e:
            raise _fail(str(data), f"edge_index holds {e:,} edges but num_edges_list says "
                        f"{want:,}", fix)
    feat = NpzMember(data, "node_feat")
    _check_feat(feat, n, fix)
    return RawDataset(
        name=name, where=str(raw), num_nodes=n, num_edges=e, feat_shape=feat.shape,
        feat_dtype=feat.dtype, edges=lambda scratch: _edge_arrays(ei, scratch),
        feat_chunks=lambda: feat.rows(_rows_per_chunk(feat.shape)),
        labels=lambda: _npz_labels(label_file, "node_label", n, fix),
        splits=lambda: read_ogb_split(folder / "split" / split, n), num_classes=num_classes,
        fix=fix, edges_where=f"{data} edge_index", files=[data, label_file])


def _ogb_csv(name: str, folder: Path, split: str, num_classes: int, fix: str) -> RawDataset:
    raw = folder / "raw"
    for f in ("num-node-list.csv.gz", "num-edge-list.csv.gz", "node-feat.csv.gz",
              "node-label.csv.gz"):
        if not (raw / f).is_file():
            raise _fail(str(raw / f), "missing (incomplete download?)", fix)
    n = int(_read_csv(raw / "num-node-list.csv.gz", np.int64).sum())
    e = int(_read_csv(raw / "num-edge-list.csv.gz", np.int64).sum())
    feat_path = raw / "node-feat.csv.gz"
    first = next(_csv_chunks(feat_path, np.float32, 1), None)
    if first is None:
        raise _fail(str(feat_path), "empty", fix)
    f = int(first.shape[1])

    def feat_chunks():
        got = 0
        for c in _csv_chunks(feat_path, np.float32, _rows_per_chunk((n, f)), ncols=f):
            got += c.shape[0]
            if got > n:
                break
            yield c
        if got != n:
            raise _fail(str(feat_path), f"{got:,} feature rows for {n:,} vertices "
                        f"(num-node-list.csv.gz)", fix)

    def labels():
        y = _read_csv(raw / "node-label.csv.gz", np.float64)
        if y.shape[0] != n:
            raise _fail(str(raw / "node-label.csv.gz"), f"{y.shape[0]:,} labels for {n:,} "
                        f"vertices", fix)
        return labels_from(y, str(raw / "node-label.csv.gz"))

    def edges(scratch):
        path = raw / "edge.csv.gz"
        out = map_new_npy(scratch("edge_index.npy"), np.int64, (2, e))
        a = 0
        for c in _csv_chunks(path, np.int64, 1 << 22, ncols=2):
            if a + c.shape[0] > e:
                raise _fail(str(path), f"more than {e:,} edges (num-edge-list.csv.gz)", fix)
            out[0, a:a + c.shape[0]] = c[:, 0]
            out[1, a:a + c.shape[0]] = c[:, 1]
            a += c.shape[0]
        if a != e:
            raise _fail(str(path), f"{a:,} edges, num-edge-list.csv.gz says {e:,} "
                        f"(truncated?)", fix)
        out.flush()
        del out
        m = np.load(scratch("edge_index.npy"), mmap_mode="r")
        return m[0], m[1]

    return RawDataset(
        name=name, where=str(raw), num_nodes=n, num_edges=e, feat_shape=(n, f),
        feat_dtype=np.dtype(np.float32), edges=edges, feat_chunks=feat_chunks, labels=labels,
        splits=lambda: read_ogb_split(folder / "split" / split, n), num_classes=num_classes,
        fix=fix, edges_where=str(raw / "edge.csv.gz"),
        files=[raw / "edge.csv.gz", feat_path, raw / "node-label.csv.gz"])
