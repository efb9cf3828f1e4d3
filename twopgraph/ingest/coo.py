"""The COO exchange format (:func:`coo_npz`, docs/formats.md): one ``.npz`` with
``edge_index`` (2 x E or E x 2, integer ids, directed or not), ``feat`` (N x F), ``label`` (N;
integer class ids, -1 or NaN = unlabelled), ``train_idx``, ``val_idx``, ``test_idx`` and
optionally ``num_nodes`` and ``num_classes``; :func:`is_coo_npz` tells it from the dataset
format (CSR, ``indptr``).
"""

from __future__ import annotations

import os
from pathlib import Path

from twopgraph.errors import GraphFormatError
from twopgraph.graph.io import SPLITS
from twopgraph.ingest.npz import NpzMember, members
from twopgraph.ingest.raw import (
    RawDataset,
    _check_feat,
    _count,
    _edge_arrays,
    _edge_count,
    _npz_labels,
    _rows_per_chunk,
    _split_ids,
)


def coo_npz(path: str | os.PathLike, name: str | None = None) -> RawDataset:
    """The COO exchange ``.npz`` at ``path`` (see the module docstring)."""
    path = Path(path)
    have = members(path)
    missing = [k for k in ("edge_index", "feat", "label", *SPLITS) if k not in have]
    if missing:
        raise GraphFormatError(f"{path}: missing keys {', '.join(missing)} (the COO format has "
                               f"edge_index, feat, label, train_idx, val_idx, test_idx)")
    from twopgraph.store.npz import warn_extra_keys
    warn_extra_keys(path, have, ("edge_index", "feat", "label", *SPLITS, "num_nodes",
                                 "num_classes"))
    feat = NpzMember(path, "feat")
    if len(feat.shape) != 2:
        raise GraphFormatError(f"{path}: 'feat' must be an N x F matrix, got shape "
                               f"{feat.shape}")
    if feat.shape[1] == 0:
        raise GraphFormatError(f"{path}: 'feat' has 0 columns (shape {feat.shape}): every "
                               f"vertex needs at least one feature (a column of ones will do)")
    n = _count(NpzMember(path, "num_nodes"), "num_nodes") if "num_nodes" in have \
        else feat.shape[0]
    _check_feat(feat, n, "")
    ei = NpzMember(path, "edge_index")
    e = _edge_count(ei)
    c = -1
    if "num_classes" in have:
        c = _count(NpzMember(path, "num_classes"), "num_classes")

    def splits():
        return {k: _split_ids(NpzMember(path, k).read(), n, f"{path}: '{k}'") for k in SPLITS}

    return RawDataset(
        name=name or path.stem, where=str(path), num_nodes=n, num_edges=e,
        feat_shape=feat.shape, feat_dtype=feat.dtype,
        edges=lambda scratch: _edge_arrays(ei, scratch),
        feat_chunks=lambda: feat.rows(_rows_per_chunk(feat.shape)),
        labels=lambda: _npz_labels(path, "label", n, ""), splits=splits, num_classes=c,
        edges_where=f"{path}: 'edge_index'", files=[path])


def is_coo_npz(path: str | os.PathLike) -> bool:
    """Whether the ``.npz`` at ``path`` is in the COO exchange format (``edge_index``, no
    ``indptr``)."""
    try:
        have = members(path)
    except GraphFormatError:
        return False
    return "edge_index" in have and "indptr" not in have
