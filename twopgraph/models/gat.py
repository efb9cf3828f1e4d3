"""Graph attention (GAT; Velickovic et al., ICLR 2018) over blocks: multi-head attention with an
edge softmax over each dst's sampled neighbours.

Head ``k`` of a layer projects every row, ``z = W_k h``, scores each edge (u -> v) as
``e_uv = LeakyReLU_0.2(a_src,k . z_u + a_dst,k . z_v)``, normalises the scores of v's edges
and of its self loop (v -> v, ``e_vv``) with a softmax, and sums ``alpha_uv z_u`` over them
(``alpha_vv z_v`` included), plus a bias: a vertex attends over its neighbours and itself,
as PyG's ``GATConv`` with ``add_self_loops=True`` (the graphs have no self loops of their
own; without it an isolated vertex would get only the bias). Hidden layers concatenate
their ``--heads`` heads of ``hidden / heads`` columns each (``hidden`` must divide by
``heads``); the output layer averages ``heads`` heads of ``num_classes`` columns. This is
DGL's ``GATConv`` over the graph with self loops added (``feat_drop = attn_drop = 0``, no
residual) with the same initialisation, and the ReLU + dropout of
:class:`~twopgraph.models.base.BlockGNN` between layers.

In training the attention-weighted messages are gathered per edge and summed per dst
(``edges x width`` values: torch's sparse product would build a dense ``num_dst x num_src``
gradient of its values); without gradients (exact inference) they are one sparse product per
head with the attention as edge values (:func:`~twopgraph.models.ops.spmm_block`), with no
message tensor. Exact inference runs the layer on whole-neighbourhood blocks
(every dst with all of its edges): the softmax needs all of them at once, so GAT has no
streamed (``aggregate``/``combine``) or projected form. A block's ``edge_weight`` (LABOR's
inverse inclusion probabilities) is ignored: the softmax over the sampled neighbours is the
attention's own normalisation, as with uniform sampling.

Example::

    >>> from twopgraph.models import build_model
    >>> m = build_model("gat", in_dim=16, hidden=32, num_classes=5, num_layers=2, heads=4)
    >>> [c.heads for c in m.convs], m.convs[0].head_dim, m.convs[1].head_dim
    ([4, 4], 8, 5)
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from twopgraph.core.minibatch import Block
from twopgraph.core.protocols import MODELS
from twopgraph.errors import ConfigError
from twopgraph.models.base import Conv
from twopgraph.models.ops import edge_dst, spmm_block

#: LeakyReLU slope of the attention scores (the paper's and DGL's 0.2)
NEGATIVE_SLOPE = 0.2
#: ``--heads`` default
DEFAULT_HEADS = 4


def edge_softmax(scores: torch.Tensor, dst: torch.Tensor, num_dst: int) -> torch.Tensor:
    """Softmax of the edge ``scores`` (E x heads) over the edges of each dst (``dst``: the
    dst of every edge, int64, E): ``exp(e - max) / sum exp(e - max)`` per dst and head. The
    max only keeps ``exp`` in range (its gradient cancels), so it is taken without one."""
    with torch.no_grad():
        top = torch.full((num_dst, scores.shape[1]), -math.inf, dtype=scores.dtype,
                         device=scores.device)
        top.scatter_reduce_(0, dst.unsqueeze(1).expand_as(scores), scores, "amax")
    p = torch.exp(scores - top[dst])
    total = torch.zeros((num_dst, scores.shape[1]), dtype=p.dtype, device=p.device)
    total = total.index_add(0, dst, p)
    return p / total[dst]


@MODELS.register("gat")
class GATConv(Conv):
    """Graph attention (GAT): ``--heads`` attention heads over each dst's neighbours,
    concatenated in hidden layers, averaged in the output layer."""

    options = ("heads",)

    def __init__(self, in_dim: int, out_dim: int, heads: int = DEFAULT_HEADS,
                 concat: bool = True, negative_slope: float = NEGATIVE_SLOPE) -> None:
        super().__init__()
        self.check_options(out_dim if concat else int(heads), heads=heads)
        self.in_dim, self.out_dim = in_dim, out_dim
        self.heads, self.concat = int(heads), bool(concat)
        self.head_dim = out_dim // self.heads if concat else out_dim
        self.negative_slope = float(negative_slope)
        width = self.heads * self.head_dim
        self.fc = nn.Linear(in_dim, width, bias=False)
        self.attn_src = nn.Parameter(torch.empty(1, self.heads, self.head_dim))
        self.attn_dst = nn.Parameter(torch.empty(1, self.heads, self.head_dim))
        self.bias = nn.Parameter(torch.zeros(width))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-normal weights with ReLU's gain, zero bias (as DGL's GATConv)."""
        gain = nn.init.calculate_gain("relu")
        nn.init.xavier_normal_(self.fc.weight, gain=gain)
        nn.init.xavier_normal_(self.attn_src, gain=gain)
        nn.init.xavier_normal_(self.attn_dst, gain=gain)
        nn.init.zeros_(self.bias)

    @classmethod
    def build(cls, in_dim: int, out_dim: int, *, last: bool,
              heads: int = DEFAULT_HEADS) -> "GATConv":
        """Hidden layers concatenate ``heads`` heads of ``out_dim / heads`` columns; the last
        layer averages ``heads`` heads of ``out_dim`` columns."""
        return cls(in_dim, out_dim, heads, concat=not last)

    @classmethod
    def check_options(cls, hidden: int, heads: int = DEFAULT_HEADS) -> None:
        """``heads`` a positive integer that divides ``hidden``."""
        if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1:
            raise ConfigError(f"heads must be a positive integer, got {heads!r}")
        if hidden % heads:
            raise ConfigError(f"gat splits --hidden {hidden} into --heads {heads} heads: "
                              f"hidden must be a multiple of heads")

    @classmethod
    def activation_width(cls, out_dim: int, fanout: int, *, last: bool,
                         heads: int = DEFAULT_HEADS) -> int:
        """Per input row: the projection (``width`` = ``out_dim``; ``heads x out_dim`` in the
        output layer, whose heads are averaged), the output (``out_dim``) and, for each of at
        most ``fanout`` edges, the message (``width``) and ``3 x heads`` values."""
        width = (heads if last else 1) * out_dim
        return width + out_dim + (width + cls.edge_values(heads=heads)) * max(1, fanout)

    @classmethod
    def edge_values(cls, heads: int = DEFAULT_HEADS) -> int:
        """Per edge and head: the score, its exponential and the attention."""
        return 3 * heads

    def forward(self, block: Block, h_src: torch.Tensor, h_dst: torch.Tensor) -> torch.Tensor:
        heads, f = self.heads, self.head_dim
        z_src = self.fc(h_src).view(-1, heads, f)
        if h_dst.data_ptr() == h_src.data_ptr() and h_dst.stride() == h_src.stride():
            z_dst = z_src[:h_dst.shape[0]]  # the dst rows lead the src rows (training)
        else:
            z_dst = self.fc(h_dst).view(-1, heads, f)
        score_src = (z_src * self.attn_src).sum(-1)  # num_src x heads
        score_dst = (z_dst * self.attn_dst).sum(-1)  # num_dst x heads
        n = block.num_dst
        dst = edge_dst(block)
        # each dst's self loop (v -> v, message z_v): scored and normalised with its edges
        scores = F.leaky_relu(torch.cat([score_src[block.indices] + score_dst[dst],
                                         (z_dst * self.attn_src).sum(-1) + score_dst]),
                              self.negative_slope)
        alpha = edge_softmax(scores, torch.cat([dst, torch.arange(n, device=dst.device)]), n)
        alpha, alpha_self = alpha[:block.num_edges], alpha[block.num_edges:]
        if torch.is_grad_enabled() and (alpha.requires_grad or z_src.requires_grad):
            # training: gather the messages and sum them per dst (E x heads x head_dim);
            # the sparse product's gradient in its values would build a dense num_dst x
            # num_src matrix in torch's CPU kernel
            msg = z_src[block.indices] * alpha.unsqueeze(-1).to(z_src.dtype)
            out = torch.zeros((n, heads, f), dtype=msg.dtype,
                              device=msg.device).index_add(0, dst, msg)
        else:  # evaluation: one sparse product per head, no message tensor
            out = torch.stack([spmm_block(block, alpha[:, k].contiguous(),
                                          z_src[:, k].contiguous()) for k in range(heads)],
                              dim=1)
        out = out + alpha_self.unsqueeze(-1).to(z_dst.dtype) * z_dst
        out = out + self.bias.view(1, heads, f).to(out.dtype)
        return out.reshape(n, heads * f) if self.concat else out.mean(1)
