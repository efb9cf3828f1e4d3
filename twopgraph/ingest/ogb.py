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

from twopgraph.core.files import output_error
from twopgraph.errors import GraphFormatError, OutputError
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
        ids = _read_csv(path, np.int64, ncols=1).reshape(-1)
        if ids.shape[0] == 0:  # OGB's splits are never empty: a failed or cut download
            raise GraphFormatError(f"split file {path} holds no vertex ids "
                                   f"({path.stat().st_size} bytes; incomplete download?)")
        out[key] = _split_ids(ids, n, str(path))
    return out


def _read_csv(path: Path, dtype, ncols: int | None = None) -> np.ndarray:
    """A small headerless CSV(.gz) file as one array (one line on any failure)."""
    return np.concatenate(list(_csv_chunks(path, dtype, 1 << 20, ncols)) or
                          [np.empty((0, ncols or 1), dtype=dtype)])


def _csv_chunks(path: Path, dtype, rows: int, ncols: int | None = None, *,
                blank_rows: bool = False) -> Iterator[np.ndarray]:
    """A headerless CSV(.gz) file in chunks of ``rows`` rows (2-D arrays of ``dtype``);
    ``blank_rows``: a blank line is a row of NaN (what pandas writes for a missing value in
    a one-column file), not skipped."""
    import pandas as pd
    try:
        reader = pd.read_csv(path, header=None, chunksize=rows, dtype=dtype,
                             skip_blank_lines=not blank_rows,
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


def _count_lines(path: Path) -> int:
    """Lines of a (gzipped) text file, the last one counted without its newline too: one
    pass of decompression, nothing parsed or kept."""
    import gzip
    lines, last = 0, b"\n"
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as f:
            while block := f.read(1 << 24):
                lines += block.count(b"\n")
                last = block[-1:]
    except (*READ_ERRORS, EOFError) as e:
        raise GraphFormatError(f"{path}: cannot read it ({type(e).__name__}: {e}); damaged "
                               f"or truncated?") from e
    return lines + (last != b"\n")


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
    # the declared vertex count sizes the CSR and the feature table: checked against the
    # feature file's rows before anything of that size is made
    rows = _count_lines(feat_path)
    if rows != n:
        raise _fail(str(raw / "num-node-list.csv.gz"), f"says {n:,} vertices but "
                    f"{feat_path.name} has {rows:,} rows", fix)

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

    def labels():  # a blank line is NaN: unlabelled (-1), as papers100M's NaN labels
        path = raw / "node-label.csv.gz"
        y = np.concatenate(list(_csv_chunks(path, np.float64, 1 << 20, blank_rows=True)) or
                           [np.empty((0, 1))])
        if y.shape[0] != n:
            raise _fail(str(raw / "node-label.csv.gz"), f"{y.shape[0]:,} labels for {n:,} "
                        f"vertices", fix)
        return labels_from(y, str(raw / "node-label.csv.gz"))

    def edges(scratch):
        # appended as read (E x 2), never sized by num-edge-list.csv.gz ahead: a wrong count
        # is found by reading, not by reserving its scratch
        path, tmp = raw / "edge.csv.gz", scratch("edge_index.npy")
        a = 0
        try:
            with open(tmp, "wb") as out:
                np.lib.format.write_array_header_1_0(out, {
                    "descr": np.lib.format.dtype_to_descr(np.dtype(np.int64)),
                    "fortran_order": False, "shape": (e, 2)})
                for c in _csv_chunks(path, np.int64, 1 << 22, ncols=2):
                    if a + c.shape[0] > e:
                        raise _fail(str(path), f"more than {e:,} edges "
                                    f"(num-edge-list.csv.gz)", fix)
                    out.write(np.ascontiguousarray(c).tobytes())
                    a += c.shape[0]
        except OutputError:
            raise
        except OSError as err:  # the readers' errors are GraphFormatErrors: a write failed
            raise output_error(tmp, err) from None
        if a != e:
            raise _fail(str(path), f"{a:,} edges, num-edge-list.csv.gz says {e:,} "
                        f"(truncated?)", fix)
        if e == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        m = np.load(tmp, mmap_mode="r")
        return m[:, 0], m[:, 1]

    return RawDataset(
        name=name, where=str(raw), num_nodes=n, num_edges=e, feat_shape=(n, f),
        feat_dtype=np.dtype(np.float32), edges=edges, feat_chunks=feat_chunks, labels=labels,
        splits=lambda: read_ogb_split(folder / "split" / split, n), num_classes=num_classes,
        fix=fix, edges_where=str(raw / "edge.csv.gz"),
        files=[raw / "edge.csv.gz", feat_path, raw / "node-label.csv.gz"])
