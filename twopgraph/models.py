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

import warnings
from typing import Callable

import numpy as np
import torch
from torch import nn

from . import kernels
from .errors import ConfigError
from .sampler.minibatch import Block, MiniBatch


# torch warns that sparse CSR support is in beta on every tensor built; one filter at import
# (a catch_warnings block per call would rewrite the global filters from several threads).
warnings.filterwarnings("ignore", message=".*[Ss]parse CSR tensor support is in beta.*")


def _spmm(block: Block, values: torch.Tensor, h_src: torch.Tensor) -> torch.Tensor:
    """``A @ h_src`` where A (num_dst x num_src) has the block's edges with ``values``."""
    a = torch.sparse_csr_tensor(block.indptr, block.indices, values,
                                size=(block.num_dst, h_src.shape[0]), check_invariants=False)
    return torch.sparse.mm(a, h_src)


def _mean_weights(block: Block) -> torch.Tensor:
    cnt = block.sampled_deg()
    w = 1.0 / cnt.clamp(min=1).to(torch.float32)
    return torch.repeat_interleave(w, cnt, output_size=block.num_edges)


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
        w = _mean_weights(block).to(h_src.dtype)
        if self.in_dim > self.out_dim:
            neigh = _spmm(block, w, self.lin_neigh(h_src))
        else:
            neigh = self.lin_neigh(_spmm(block, w, h_src))
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
        w = self._weights(block).to(h_src.dtype)
        self_term = h_dst / (block.dst_deg + 1.0).to(h_dst.dtype).unsqueeze(1)
        if self.in_dim > self.out_dim:
            return _spmm(block, w, self.lin(h_src)) + self.lin(self_term) + self.bias
        return self.lin(_spmm(block, w, h_src) + self_term) + self.bias

    def _weights(self, block: Block) -> torch.Tensor:
        cnt = block.sampled_deg()
        dst_deg = block.dst_deg
        scale = dst_deg / cnt.clamp(min=1).to(dst_deg.dtype) / torch.sqrt(dst_deg + 1.0)
        w = torch.repeat_interleave(scale, cnt, output_size=block.num_edges)
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


class _ReluDropoutCPU(torch.autograd.Function):
    """ReLU then inverted dropout in one numba pass (CPU, float32), 1 byte of mask per element."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float, key: int) -> torch.Tensor:
        xc = x.detach().contiguous()
        out = torch.empty_like(xc)
        keep = torch.empty(xc.shape, dtype=torch.uint8)
        scale = np.float32(1.0 / (1.0 - p))
        kernels.relu_dropout_fwd(xc.view(-1).numpy(), out.view(-1).numpy(),
                                 keep.view(-1).numpy(), np.uint64(key),
                                 np.uint64(min(round(p * 2.0 ** 32), 2 ** 32)), scale)
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (keep,) = ctx.saved_tensors
        g = grad.contiguous()
        out = torch.empty_like(g)
        kernels.relu_dropout_bwd(g.view(-1).numpy(), keep.view(-1).numpy(), ctx.scale,
                                 out.view(-1).numpy())
        return out, None, None


def relu_dropout(x: torch.Tensor, dropout: nn.Dropout) -> torch.Tensor:
    """``dropout(relu(x))``. In training on CPU with float32 this is one fused numba pass
    (:func:`twopgraph.kernels.relu_dropout_fwd`): torch draws a CPU dropout mask with a serial
    kernel (``bernoulli_``/``rand_like``), which cost 25-30% of a GraphSAGE training step here
    (profile of issue 6). The mask's key is drawn from torch's generator, so
    ``torch.manual_seed`` makes runs reproducible, whatever the number of threads. Elsewhere
    (CUDA, eval, other dtypes) torch's own ReLU and dropout.
    """
    p = dropout.p
    if (not dropout.training or p == 0.0 or x.device.type != "cpu"
            or x.dtype != torch.float32 or p >= 1.0):
        return dropout(torch.relu(x))
    key = int(torch.randint(0, 2 ** 62, (1,)).item())
    return _ReluDropoutCPU.apply(x, p, key)


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
        h = self.convs[i](block, h_src, h_dst)
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


MODELS: dict[str, Callable[[int, int], nn.Module]] = {"sage": SAGEConv, "gcn": GCNConv}


def build_model(name: str, in_dim: int, hidden: int, num_classes: int, num_layers: int,
                dropout: float = 0.5) -> BlockGNN:
    """``name`` in ``MODELS`` ("sage", "gcn")."""
    try:
        conv = MODELS[name]
    except KeyError:
        raise ConfigError(f"unknown model {name!r}; known: {', '.join(MODELS)}") from None
    return BlockGNN(conv, in_dim, hidden, num_classes, num_layers, dropout)
