"""GraphSAGE with the mean aggregator (Hamilton et al., 2017) over blocks.

Example::

    >>> from twopgraph.models import build_model
    >>> m = build_model("sage", in_dim=16, hidden=32, num_classes=5, num_layers=2)
    >>> sum(p.numel() for p in m.parameters()) > 0
    True
"""

from __future__ import annotations

import torch
from torch import nn

from twopgraph.core.minibatch import Block
from twopgraph.core.protocols import MODELS
from twopgraph.models.base import Conv
from twopgraph.models.ops import mean_weights, spmm_block


@MODELS.register("sage")
class SAGEConv(Conv):
    """GraphSAGE, mean aggregator: ``W_self h_v + W_neigh mean_{u in N(v)} h_u + b``.

    When ``in_dim > out_dim`` the neighbour projection runs before aggregation (fewer flops).
    """

    def __init__(self, in_dim: int, out_dim: int) -> None:
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
        w = mean_weights(block).to(h_src.dtype)
        if self.in_dim > self.out_dim:
            return spmm_block(block, w, self.lin_neigh(h_src))
        return spmm_block(block, w, h_src)

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
        out = self.lin_self(h_dst)
        if self.in_dim > self.out_dim:
            return out + agg
        if out.dtype == agg.dtype and not torch.is_autocast_enabled(out.device.type):
            # W_neigh agg accumulated into the self term by the GEMM itself (beta = 1): no
            # separate pass over the N x out sum, forward or backward
            return out.addmm_(agg, self.lin_neigh.weight.t())
        return out + self.lin_neigh(agg)

    # Exact inference over the whole graph (see inference.layerwise_inference): when in_dim >
    # out_dim, every vertex's row is projected once, then each dst range only aggregates.
    def project(self, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Per-vertex part of the layer for rows ``h``: (self term + bias, neighbour term)."""
        return self.lin_self(h), self.lin_neigh(h)

    def from_projection(self, block: Block, proj: tuple[torch.Tensor, ...], dst_start: int,
                        dst_end: int) -> torch.Tensor:
        """The layer's output for dst rows ``[dst_start, dst_end)`` of a whole-graph block,
        from :meth:`project` of every vertex (equal to ``forward`` up to float rounding)."""
        w = mean_weights(block).to(proj[1].dtype)
        return proj[0][dst_start:dst_end] + spmm_block(block, w, proj[1])
