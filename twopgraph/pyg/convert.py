"""twopgraph's :class:`~twopgraph.graph.data.GraphData` as a PyG ``Data``
(:func:`to_pyg_data`), the other way of :meth:`GraphData.from_pyg
<twopgraph.graph.data.GraphData.from_pyg>`: any dataset twopgraph loads (a shared ``.npz``, an
OGB store, a generated graph) becomes a ``Data`` for :class:`~twopgraph.pyg.NeighborLoader`
and PyG models.

Example::

    >>> from twopgraph.datasets import load_dataset          # doctest: +SKIP
    >>> data = to_pyg_data(load_dataset("synthetic-tiny"))    # doctest: +SKIP
    >>> data.edge_index.shape[0], bool(data.train_mask.any())  # doctest: +SKIP
    (2, True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from twopgraph.graph.data import GraphData


def _mask(n: int, idx: Any) -> torch.Tensor:
    """A boolean mask of ``n`` nodes, true at ``idx``."""
    mask = torch.zeros(n, dtype=torch.bool)
    mask[torch.from_numpy(np.array(idx, dtype=np.int64, copy=True))] = True
    return mask


def to_pyg_data(data: GraphData, features: str = "copy") -> Any:
    """``data`` as a ``torch_geometric.data.Data``: ``edge_index`` (2 x E, int64) from the CSR
    with each edge pointing from the neighbour to the vertex that aggregates it (source ->
    target, PyG's direction), ``y`` (the labels, int64; ``label`` as stored when it is a
    multi-label matrix), boolean ``train_mask`` / ``val_mask`` / ``test_mask``, and ``x``:
    ``features="copy"`` a float32 tensor in memory (N x F x 4 bytes), ``"map"`` the
    dataset's own array as it is (a NumPy memory map for a store: rows are read as batches
    need them, so ``x`` may be larger than memory; the loader slices NumPy arrays).
    Memory: the edge list takes 16 E bytes."""
    from torch_geometric.data import Data
    if features not in ("copy", "map"):
        raise ValueError(f"features must be 'copy' or 'map', not {features!r}")
    g = data.graph
    n = g.num_nodes
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(g.indptr))
    src = np.asarray(g.indices, dtype=np.int64)
    edge_index = torch.stack([torch.from_numpy(src), torch.from_numpy(dst)])
    x = (torch.from_numpy(np.array(data.feat, dtype=np.float32, copy=True))
         if features == "copy" else data.feat)
    return Data(x=x, y=torch.from_numpy(np.array(data.label, dtype=np.int64, copy=True)),
                edge_index=edge_index, num_nodes=n,
                train_mask=_mask(n, data.train_idx), val_mask=_mask(n, data.val_idx),
                test_mask=_mask(n, data.test_idx))
