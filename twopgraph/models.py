"""GraphSAGE (mean aggregator) and GCN over blocks, in pure torch (CPU and CUDA alike).

A conv layer is called as ``conv(block, h_src, h_dst)``: ``h_src`` holds the features of the
block's src vertices, ``h_dst`` those of its dst vertices (in training, the first ``num_dst``
rows of ``h_src``; in exact inference, a range of rows of the whole table). Aggregation is one
sparse CSR x dense product per layer.

Example::

    >>> m = build_model("sage", in_dim=16, hidden=32, num_classes=5, num_layers=2)
    >>> sum(p.numel() for p in m.parameters()) > 0
    True
"""

from __future__ import annotations

import threading
import warnings
from typing import Callable

import torch
from torch import nn

from . import spmm
from .dropout import relu_dropout
from .protocols import MODELS
from .sampler.minibatch import Block, MiniBatch

# torch prints "Sparse CSR tensor support is in beta" once per process, when the first CSR
# tensor is built (TORCH_WARN_ONCE in SparseCsrTensorImpl). We silence exactly that first
# construction with a catch_warnings block instead of a filter installed at import (which would
# change the warning filters of every program that imports twopgraph). catch_warnings swaps the
# process-wide filter list while it is open, so it is entered once per process, under a lock,
# and every later call skips it; models run on one thread (the main one), so nothing else
# builds CSR tensors meanwhile, and the notice cannot come back after the first tensor.
_csr_notice_lock = threading.Lock()
_csr_notice_done = False


def _csr_tensor(block: Block, values: torch.Tensor, num_src: int) -> torch.Tensor:
    global _csr_notice_done
    size = (block.num_dst, num_src)
    if _csr_notice_done:
        return torch.sparse_csr_tensor(block.indptr, block.indices, values, size=size,
                                       check_invariants=False)
    with _csr_notice_lock, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta",
                                category=UserWarning)
        a = torch.sparse_csr_tensor(block.indptr, block.indices, values, size=size,
                                    check_invariants=False)
        _csr_notice_done = True
    return a


def _spmm(block: Block, values: torch.Tensor, h_src: torch.Tensor) -> torch.Tensor:
    """``A @ h_src`` where A (num_dst x num_src) has the block's edges with ``values``.

    Under autocast (``--amp bf16``) the product runs in float32 with autocast off: autocast
    would hand the sparse kernel bfloat16 operands, which MKL's CPU kernel does not take
    (and cuSPARSE's bfloat16 SpMM is not yet measured); the layer's dense parts stay in
    bfloat16."""
    dev = h_src.device.type
    if spmm.usable(values, h_src) and not torch.is_autocast_enabled(dev):  # no gradient:
        return spmm.spmm(block.indptr, block.indices, values, h_src)  # numba, 5-10x faster
    if torch.is_autocast_enabled(dev) or h_src.dtype != values.dtype:
        with torch.autocast(dev, enabled=False):
            return torch.sparse.mm(_csr_tensor(block, values.float(), h_src.shape[0]),
                                   h_src.float())
    return torch.sparse.mm(_csr_tensor(block, values, h_src.shape[0]), h_src)


def _mean_weights(block: Block) -> torch.Tensor:
    """Each edge's weight in the mean of its dst: 1 / the dst's neighbour count."""
    w = 1.0 / block.sampled_deg().clamp(min=1).to(torch.float32)
    return torch.repeat_interleave(w, block.edge_counts(), output_size=block.num_edges)


@MODELS.register("sage")
class SAGEConv(nn.Module):
    """GraphSAGE with the mean aggregator: ``W_self h_v + W_neigh mean_{u in N(v)} h_u + b``.

    When ``in_dim > out_dim`` the neighbour projection runs before aggregation (fewer flops).
    """

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.lin_self = nn.Linear(in_dim, out_dim, bias=True)
        self.lin_neigh = nn.Linear(in_dim, out_dim, bias=False)

    def forward(self, block: Block, h_src: torch.Tensor, h_dst: torch.Tensor) -> torch.Tensor:
        return self.combine(h_dst, self.aggregate(block, h_src), block.dst_deg)

    # The conv contract of streamed exact inference (see inference.scored_inference): the
    # layer is combine(h_dst, sum of aggregate over tiles of each dst's edges), so a dst's
    # neighbours may come in several blocks (``Block.num_neighbors`` = its whole count).
    def aggregate(self, block: Block, h_src: torch.Tensor) -> torch.Tensor:
        """The neighbour sum of each dst of ``block`` (num_dst x :meth:`agg` width): additive
        over blocks that split a dst's edges."""
        w = _mean_weights(block).to(h_src.dtype)
        if self.in_dim > self.out_dim:
            return _spmm(block, w, self.lin_neigh(h_src))
        return _spmm(block, w, h_src)

    def message(self, h_src: torch.Tensor) -> torch.Tensor:
        """What :meth:`aggregate` sums of each src row (weighted by :meth:`edge_weight`)."""
        return self.lin_neigh(h_src) if self.in_dim > self.out_dim else h_src

    def edge_weight(self, src_deg: torch.Tensor, dst_deg: torch.Tensor,
                    count: torch.Tensor) -> torch.Tensor:
        """Each edge's weight in :meth:`aggregate` from its src's and dst's degrees and the
        dst's neighbour count (per edge): ``1 / count`` (the mean)."""
        return 1.0 / count.clamp(min=1).to(torch.float32)

    def combine(self, h_dst: torch.Tensor, agg: torch.Tensor,
                dst_deg: torch.Tensor) -> torch.Tensor:
        """The layer's output from the dst rows ``h_dst`` and their summed :meth:`aggregate`
        (``dst_deg``, the full-graph degrees, unused by the mean)."""
        neigh = agg if self.in_dim > self.out_dim else self.lin_neigh(agg)
        return self.lin_self(h_dst) + neigh

    # Exact inference over the whole graph (see train.layerwise_inference): when in_dim >
    # out_dim, every vertex's row is projected once, then each dst range only aggregates.
    def project(self, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Per-vertex part of the layer for rows ``h``: (self term + bias, neighbour term)."""
        return self.lin_self(h), self.lin_neigh(h)

    def from_projection(self, block: Block, proj: tuple[torch.Tensor, ...], dst_start: int,
                        dst_end: int) -> torch.Tensor:
        """The layer's output for dst rows ``[dst_start, dst_end)`` of a whole-graph block,
        from :meth:`project` of every vertex (equal to ``forward`` up to float rounding)."""
        w = _mean_weights(block).to(proj[1].dtype)
        return proj[0][dst_start:dst_end] + _spmm(block, w, proj[1])


@MODELS.register("gcn")
class GCNConv(nn.Module):
    """GCN with self loops and symmetric normalisation over full-graph degrees d:
    ``h_v' = W (h_v / (d_v+1) + (d_v / s_v) sum_{u in S(v)} h_u / sqrt((d_u+1)(d_v+1))) + b``,
    where S(v) are the s_v sampled neighbours. The ``d_v / s_v`` factor makes a sampled layer
    an unbiased estimate of the full one; with all neighbours it is exactly Kipf & Welling's.
    """

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.lin = nn.Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_dim))

    def forward(self, block: Block, h_src: torch.Tensor, h_dst: torch.Tensor) -> torch.Tensor:
        return self.combine(h_dst, self.aggregate(block, h_src), block.dst_deg)

    def aggregate(self, block: Block, h_src: torch.Tensor) -> torch.Tensor:
        """The normalised neighbour sum of each dst (see :meth:`SAGEConv.aggregate`)."""
        w = self._weights(block).to(h_src.dtype)
        if self.in_dim > self.out_dim:
            return _spmm(block, w, self.lin(h_src))
        return _spmm(block, w, h_src)

    def message(self, h_src: torch.Tensor) -> torch.Tensor:
        """See :meth:`SAGEConv.message`."""
        return self.lin(h_src) if self.in_dim > self.out_dim else h_src

    def edge_weight(self, src_deg: torch.Tensor, dst_deg: torch.Tensor,
                    count: torch.Tensor) -> torch.Tensor:
        """See :meth:`SAGEConv.edge_weight`: ``d_v / s_v / sqrt((d_v + 1) (d_u + 1))``."""
        scale = dst_deg / count.clamp(min=1).to(dst_deg.dtype) / torch.sqrt(dst_deg + 1.0)
        return scale / torch.sqrt(src_deg + 1.0)

    def combine(self, h_dst: torch.Tensor, agg: torch.Tensor,
                dst_deg: torch.Tensor) -> torch.Tensor:
        """See :meth:`SAGEConv.combine`; the self loop's weight is ``1 / (dst_deg + 1)``."""
        self_term = h_dst / (dst_deg + 1.0).to(h_dst.dtype).unsqueeze(1)
        if self.in_dim > self.out_dim:
            return agg + self.lin(self_term) + self.bias
        return self.lin(agg + self_term) + self.bias

    def _weights(self, block: Block) -> torch.Tensor:
        cnt = block.sampled_deg()
        dst_deg = block.dst_deg
        scale = dst_deg / cnt.clamp(min=1).to(dst_deg.dtype) / torch.sqrt(dst_deg + 1.0)
        w = torch.repeat_interleave(scale, block.edge_counts(), output_size=block.num_edges)
        return w / torch.sqrt(block.src_deg[block.indices] + 1.0)

    def project(self, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Per-vertex part of the layer for rows ``h`` (see :meth:`SAGEConv.project`)."""
        return (self.lin(h),)

    def from_projection(self, block: Block, proj: tuple[torch.Tensor, ...], dst_start: int,
                        dst_end: int) -> torch.Tensor:
        """See :meth:`SAGEConv.from_projection`."""
        p = proj[0]
        w = self._weights(block).to(p.dtype)
        self_term = p[dst_start:dst_end] / (block.dst_deg + 1.0).to(p.dtype).unsqueeze(1)
        return _spmm(block, w, p) + self_term + self.bias


class BlockGNN(nn.Module):
    """A stack of conv layers with ReLU and dropout between them (not after the last)."""

    def __init__(self, conv: Callable[[int, int], nn.Module], in_dim: int, hidden: int,
                 num_classes: int, num_layers: int, dropout: float = 0.5):
        super().__init__()
        dims = [in_dim] + [hidden] * (num_layers - 1) + [num_classes]
        self.convs = nn.ModuleList(conv(dims[i], dims[i + 1]) for i in range(num_layers))
        self.dropout = nn.Dropout(dropout)  # applied through relu_dropout

    @property
    def num_layers(self) -> int:
        return len(self.convs)

    def layer(self, i: int, block: Block, h_src: torch.Tensor, h_dst: torch.Tensor):
        """Layer ``i`` alone, with its activation (used by layer-wise inference)."""
        return self.activate(i, self.convs[i](block, h_src, h_dst))

    def activate(self, i: int, h: torch.Tensor) -> torch.Tensor:
        """What follows conv ``i``: ReLU and dropout (the identity in eval mode) between
        layers, nothing after the last. Exact inference, which runs the convs in pieces of
        its own, calls this too, so a model with another activation is evaluated as it
        trains, on one process or on several."""
        if i < self.num_layers - 1:
            h = relu_dropout(h, self.dropout)
        return h

    def forward(self, mb: MiniBatch) -> torch.Tensor:
        if len(mb.blocks) != self.num_layers:
            raise ValueError(f"model has {self.num_layers} layers, mini-batch "
                             f"{len(mb.blocks)} blocks")
        h = mb.features.to(torch.float32)
        for i, block in enumerate(mb.blocks):
            h = self.layer(i, block, h, h[:block.num_dst])
        return h


def build_model(name: str, in_dim: int, hidden: int, num_classes: int, num_layers: int,
                dropout: float = 0.5) -> BlockGNN:
    """A GNN of the conv registered as ``name`` in :data:`~twopgraph.protocols.MODELS`
    ("sage", "gcn"; an unknown name is a one-line :class:`ConfigError`)."""
    return BlockGNN(MODELS.get(name), in_dim, hidden, num_classes, num_layers, dropout)
