"""Sparse products over a :class:`~twopgraph.core.minibatch.Block`, shared by the convs.

:func:`spmm_block` is ``A @ h`` where A (num_dst x num_src) holds the block's edges with
per-edge values: the numba kernel of :mod:`twopgraph.graph.spmm` when no gradient is needed (5-10x
torch's CPU kernel) or only ``h`` needs one (:class:`~twopgraph.graph.spmm.HostSpmm`: numba
forward and backward), else torch's sparse CSR product (gradients flow to the values and to
``h``), under ``--amp bf16`` in :func:`spmm_dtype`'s dtype (bfloat16 on CUDA where torch
takes it, float32 otherwise). :func:`mean_weights` and :func:`edge_dst` are per-edge helpers.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable

import torch

from twopgraph.core.minibatch import Block
from twopgraph.graph import spmm

log = logging.getLogger("twopgraph")

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


def choose_spmm_dtype(device_type: str, autocast_dtype: torch.dtype | None,
                      supported: Callable[[torch.dtype], bool]) -> torch.dtype | None:
    """The dtype a block's sparse product runs in on a device of type ``device_type``:
    None without autocast (``autocast_dtype`` None: the operands' own dtype); under autocast
    (``--amp bf16``) the autocast dtype on CUDA where ``supported(dtype)`` says torch's
    sparse CSR product and its backward take it (:func:`low_precision_spmm`), else float32 --
    always on the CPU, whose MKL kernel takes no bfloat16 operands."""
    if autocast_dtype is None:
        return None
    if device_type == "cuda" and autocast_dtype != torch.float32 and supported(autocast_dtype):
        return autocast_dtype
    return torch.float32


def spmm_dtype(device: torch.device | str) -> torch.dtype | None:
    """:func:`choose_spmm_dtype` for ``device`` as autocast is now (in the caller's thread)."""
    dev = torch.device(device)
    low = torch.get_autocast_dtype(dev.type) if torch.is_autocast_enabled(dev.type) else None
    return choose_spmm_dtype(dev.type, low, lambda dtype: low_precision_spmm(dev, dtype))


_probe_lock = threading.Lock()
_probed: dict[tuple[str, torch.dtype], bool] = {}


def low_precision_spmm(device: torch.device | str, dtype: torch.dtype) -> bool:
    """Whether torch's sparse CSR x dense product runs in ``dtype`` on ``device``, forward
    and backward (gradients to both the edge values and the dense operand: cuSPARSE's SpMM
    and SDDMM, whose half/bfloat16 support depends on the torch and CUDA versions). Probed
    once per device and dtype on a 2 x 2 product (an error is a no; no host synchronisation),
    the answer logged once and kept for the process."""
    dev = torch.device(device)
    key = (str(dev), dtype)
    with _probe_lock:
        if key not in _probed:
            ok, why = _probe_spmm(dev, dtype)
            _probed[key] = ok
            log.info("sparse products under autocast on %s: %s (%s)", dev,
                     str(dtype if ok else torch.float32).replace("torch.", ""), why)
        return _probed[key]


def _probe_spmm(device: torch.device, dtype: torch.dtype) -> tuple[bool, str]:
    try:
        with torch.autocast(device.type, enabled=False), torch.enable_grad():
            indptr = torch.tensor([0, 2, 3], device=device)
            indices = torch.tensor([0, 1, 1], device=device)
            v = torch.ones(3, dtype=dtype, device=device, requires_grad=True)
            h = torch.ones((2, 4), dtype=dtype, device=device, requires_grad=True)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                a = torch.sparse_csr_tensor(indptr, indices, v, size=(2, 2))
            out = torch.sparse.mm(a, h)
            out.sum().backward()
    except (RuntimeError, NotImplementedError, TypeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return False, f"torch's sparse CSR product refused {dtype}: {first[:160]}"
    if out.dtype != dtype or v.grad is None or h.grad is None:
        return False, f"torch's sparse CSR product does not keep {dtype}"
    return True, "torch's sparse CSR product and its backward take it"


def spmm_block(block: Block, values: torch.Tensor, h_src: torch.Tensor) -> torch.Tensor:
    """``A @ h_src`` where A (num_dst x num_src) has the block's edges with ``values`` (one
    per edge, in the block's CSR order).

    Under autocast (``--amp bf16``) the product runs with autocast off (autocast would also
    cast the sparse operand) in :func:`spmm_dtype`'s dtype: bfloat16 on CUDA where torch's
    sparse CSR product and its backward take it (probed once, logged), else float32 -- on the
    CPU always (MKL's kernel takes no bfloat16 operands). The layer's dense parts stay in
    bfloat16 either way."""
    dev = h_src.device.type
    dtype = spmm_dtype(h_src.device)
    if dtype is None and spmm.usable(values, h_src):  # no gradient, no autocast:
        return spmm.spmm(block.indptr, block.indices, values, h_src)  # numba, 5-10x faster
    if dtype is None and spmm.trainable(values, h_src):  # a gradient to h only: numba both ways
        return spmm.HostSpmm.apply(block.indptr, block.indices, values, h_src)
    if dtype is None and h_src.dtype != values.dtype:
        dtype = torch.float32
    if dtype is not None:
        with torch.autocast(dev, enabled=False):
            return torch.sparse.mm(_csr_tensor(block, values.to(dtype), h_src.shape[0]),
                                   h_src.to(dtype))
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
