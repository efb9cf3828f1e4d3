"""GCN (Kipf & Welling, 2017) with self loops and symmetric normalisation over blocks; a
sampled layer is an unbiased estimate of the full one (the ``d_v / s_v`` factor below)."""

from __future__ import annotations

import torch
from torch import nn

from twopgraph.core.minibatch import Block
from twopgraph.core.protocols import MODELS
from twopgraph.models.base import Conv
from twopgraph.models.ops import spmm_block


@MODELS.register("gcn")
class GCNConv(Conv):
    """Graph convolution (GCN): self loops, symmetric normalisation, unbiased when sampled.

    Over full-graph degrees d:
    ``h_v' = W (h_v / (d_v+1) + (d_v / s_v) sum_{u in S(v)} h_u / sqrt((d_u+1)(d_v+1))) + b``,
    where S(v) are the s_v sampled neighbours. The ``d_v / s_v`` factor makes a sampled layer
    an unbiased estimate of the full one; with all neighbours it is exactly Kipf & Welling's.
    A block with ``edge_weight`` (LABOR: weights ``w_uv`` summing to 1 over v's sampled edges)
    replaces ``1 / s_v`` by ``w_uv``: ``d_v sum_u w_uv h_u / sqrt(...)``, the weighted mean
    of the normalised messages times ``d_v``, which estimates the full sum as ``d_v / s_v``
    does (uniform weights ``1 / s_v`` give today's factor exactly).
    """

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.lin = nn.Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_dim))

    def forward(self, block: Block, h_src: torch.Tensor, h_dst: torch.Tensor) -> torch.Tensor:
        return self.combine(h_dst, self.aggregate(block, h_src), block.dst_deg)

    def aggregate(self, block: Block, h_src: torch.Tensor) -> torch.Tensor:
        """The normalised neighbour sum of each dst (see
        :meth:`~twopgraph.models.sage.SAGEConv.aggregate`)."""
        w = self._weights(block).to(h_src.dtype)
        if self.in_dim > self.out_dim:
            return spmm_block(block, w, self.lin(h_src))
        return spmm_block(block, w, h_src)

    def message(self, h_src: torch.Tensor) -> torch.Tensor:
        """See :meth:`~twopgraph.models.sage.SAGEConv.message`."""
        return self.lin(h_src) if self.in_dim > self.out_dim else h_src

    def edge_weight(self, src_deg: torch.Tensor, dst_deg: torch.Tensor,
                    count: torch.Tensor) -> torch.Tensor:
        """See :meth:`~twopgraph.models.sage.SAGEConv.edge_weight`: ``d_v / s_v / sqrt((d_v + 1)
        (d_u + 1))``."""
        scale = dst_deg / count.clamp(min=1).to(dst_deg.dtype) / torch.sqrt(dst_deg + 1.0)
        return scale / torch.sqrt(src_deg + 1.0)

    def combine(self, h_dst: torch.Tensor, agg: torch.Tensor,
                dst_deg: torch.Tensor) -> torch.Tensor:
        """See :meth:`~twopgraph.models.sage.SAGEConv.combine`; the self loop's weight is ``1 /
        (dst_deg + 1)``."""
        self_term = h_dst / (dst_deg + 1.0).to(h_dst.dtype).unsqueeze(1)
        if self.in_dim > self.out_dim:
            return agg + self.lin(self_term) + self.bias
        return self.lin(agg + self_term) + self.bias

    def _weights(self, block: Block) -> torch.Tensor:
        """Each edge's weight: ``d_v / s_v / sqrt((d_v + 1) (d_u + 1))``, with the block's
        ``edge_weight`` in place of ``1 / s_v`` when it has one (see the class docstring)."""
        dst_deg = block.dst_deg
        if block.edge_weight is None:
            cnt = block.sampled_deg()
            scale = dst_deg / cnt.clamp(min=1).to(dst_deg.dtype) / torch.sqrt(dst_deg + 1.0)
        else:
            scale = dst_deg / torch.sqrt(dst_deg + 1.0)
        w = torch.repeat_interleave(scale, block.edge_counts(), output_size=block.num_edges)
        if block.edge_weight is not None:
            w = w * block.edge_weight.to(w.dtype)
        return w / torch.sqrt(block.src_deg[block.indices] + 1.0)

    def project(self, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Per-vertex part of the layer for rows ``h`` (see
        :meth:`~twopgraph.models.sage.SAGEConv.project`)."""
        return (self.lin(h),)

    def from_projection(self, block: Block, proj: tuple[torch.Tensor, ...], dst_start: int,
                        dst_end: int) -> torch.Tensor:
        """See :meth:`~twopgraph.models.sage.SAGEConv.from_projection`."""
        p = proj[0]
        w = self._weights(block).to(p.dtype)
        self_term = p[dst_start:dst_end] / (block.dst_deg + 1.0).to(p.dtype).unsqueeze(1)
        return spmm_block(block, w, p) + self_term + self.bias
