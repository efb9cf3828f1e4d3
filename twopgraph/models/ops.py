"""Sparse products over a :class:`~twopgraph.core.minibatch.Block`, shared by the convs.

:func:`spmm_block` is ``A @ h`` where A (num_dst x num_src) holds the block's edges with
per-edge values: the numba kernel of :mod:`twopgraph.graph.spmm` when no gradient is needed (5-10x
torch's CPU kernel), else torch's sparse CSR product (gradients flow to the values and to
``h``). :func:`mean_weights` and :func:`edge_dst` are per-edge helpers.
"""

from __future__ import annotations

import threading
import warnings

import torch

from twopgraph.core.minibatch import Block
from twopgraph.graph import spmm

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


def spmm_block(block: Block, values: torch.Tensor, h_src: torch.Tensor) -> torch.Tensor:
    """``A @ h_src`` where A (num_dst x num_src) has the block's edges with ``values`` (one
    per edge, in the block's CSR order).

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


def mean_weights(block: Block) -> torch.Tensor:
    """Each edge's weight in the mean of its dst: the block's ``edge_weight`` when the
    sampler gave one (LABOR: normalised inverse inclusion probabilities, the weighted mean
    that estimates the full-neighbour mean), else 1 / the dst's neighbour count."""
    if block.edge_weight is not None:
        return block.edge_weight.to(torch.float32)
    w = 1.0 / block.sampled_deg().clamp(min=1).to(torch.float32)
    return torch.repeat_interleave(w, block.edge_counts(), output_size=block.num_edges)


def edge_dst(block: Block) -> torch.Tensor:
    """The local dst id of every edge (int64, E), in the block's CSR order."""
    return torch.repeat_interleave(torch.arange(block.num_dst, device=block.indptr.device),
                                   block.edge_counts(), output_size=block.num_edges)
