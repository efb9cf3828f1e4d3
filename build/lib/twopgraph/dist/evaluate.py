"""Exact (full-neighbour, layer-wise) evaluation spread over the ranks of a partitioned run.

Each rank computes layer ``k`` for the vertices it owns, from the full rows stored with its
part (``owned_indptr`` / ``owned_indices``, global ids); the layer's outputs are then summed
into one N x d table on every rank (ownership is disjoint, so the sum is a concatenation), and
the next layer reads it. The last layer is not exchanged: each rank counts the correct val/test
predictions of its own vertices and the counts are summed. The result equals single-process
:func:`~twopgraph.train.layerwise_inference` on the whole graph (up to float rounding); each
rank holds an N x max(F, hidden) table, as single-process exact inference does, and the
exchange is one all-reduce of that table per layer. Training itself never uses it.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from ..models import BlockGNN
from ..partition.selfdep import Part
from ..sampler.minibatch import Block
from ..train import edge_balanced_ranges


def global_degrees(part: Part, device) -> torch.Tensor:
    """Full-graph degree of every global vertex (float32, N) on ``device``, from the owners."""
    deg = torch.zeros(part.num_global_nodes, dtype=torch.float32, device=device)
    own = torch.from_numpy(np.asarray(part.data.node_ids[:part.num_owned], dtype=np.int64))
    deg[own.to(device)] = torch.from_numpy(
        np.diff(part.owned_indptr).astype(np.float32)).to(device)
    dist.all_reduce(deg)
    return deg


def _scatter_owned(rows: torch.Tensor, own: torch.Tensor, n: int) -> torch.Tensor:
    table = torch.zeros((n, rows.shape[1]), dtype=rows.dtype, device=rows.device)
    table[own] = rows
    dist.all_reduce(table)
    return table


@torch.no_grad()
def evaluate_distributed(model: BlockGNN, part: Part, feat: torch.Tensor, labels: torch.Tensor,
                         device, batch_edges: int = 4_000_000,
                         gdeg: torch.Tensor | None = None) -> tuple[float | None, float | None]:
    """``(val_acc, test_acc)`` of ``model`` over all ranks' owned val/test vertices (the same
    on every rank). ``feat`` / ``labels`` are the part's local rows (owned first); ``gdeg``
    optionally caches :func:`global_degrees`. Every rank must call it (collective)."""
    was_training = model.training
    model.eval()
    n, num_own = part.num_global_nodes, part.num_owned
    gdeg = global_degrees(part, device) if gdeg is None else gdeg
    own = torch.from_numpy(np.asarray(part.data.node_ids[:num_own], dtype=np.int64)).to(device)
    h = _scatter_owned(feat[:num_own].to(device, torch.float32), own, n)
    indptr = np.asarray(part.owned_indptr)
    bounds = edge_balanced_ranges(indptr, batch_edges) if num_own else [0]
    out = None
    for i in range(model.num_layers):
        pieces = []
        for a, b in zip(bounds[:-1], bounds[1:]):
            s, e = int(indptr[a]), int(indptr[b])
            block = Block(n, b - a, torch.from_numpy(indptr[a:b + 1] - s),
                          torch.from_numpy(np.asarray(part.owned_indices[s:e], dtype=np.int64)),
                          gdeg, gdeg[own[a:b]]).to(device)
            pieces.append(model.layer(i, block, h, h[own[a:b]]))
        width = model.convs[i].out_dim
        out = torch.cat(pieces) if pieces else torch.zeros((0, width), device=device)
        if i < model.num_layers - 1:
            h = _scatter_owned(out, own, n)
    model.train(was_training)
    pred = out.argmax(1).cpu()
    lab = labels[:num_own]
    counts = []
    for idx in (part.data.val_idx, part.data.test_idx):
        idx_t = torch.from_numpy(np.asarray(idx, dtype=np.int64))
        counts += [float((pred[idx_t] == lab[idx_t]).sum()), float(idx_t.shape[0])]
    tot = torch.tensor(counts, dtype=torch.float64, device=device)
    dist.all_reduce(tot)
    c = tot.cpu().tolist()
    return (c[0] / c[1] if c[1] else None), (c[2] / c[3] if c[3] else None)
