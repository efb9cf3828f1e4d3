"""Sparse (CSR) x dense products on the CPU without autograd: a numba kernel and its twin.

A block's aggregation is ``A @ h`` with ``A`` the block's ``num_dst x num_src`` CSR matrix of
edge weights (:func:`twopgraph.models._spmm`). torch's CPU kernel for a sparse CSR matrix
times a dense one runs at a few tens of MFLOP/s on this machine's torch build: 0.4-1.6 s for
200k edges x 256 columns, where a plain loop over the rows takes 0.05-0.2 s. Where no
gradient is needed (exact evaluation, ``torch.no_grad``) :func:`spmm` runs :func:`csr_spmm`:
one parallel pass over the rows, each row's sum taken in its entries' order. In training,
:class:`HostSpmm` runs it forward and :func:`spmm_t` (``A^T @ g``) backward where the edge
values are constants; torch's kernel (its autograd) where they need a gradient (GAT). They
agree to float rounding.

Example::

    >>> import torch
    >>> indptr, indices = torch.tensor([0, 2, 3]), torch.tensor([0, 1, 1])
    >>> spmm(indptr, indices, torch.tensor([1., 2., 3.]), torch.eye(2)).tolist()
    [[1.0, 2.0], [0.0, 3.0]]
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange

from twopgraph.runtime.jit import register
from twopgraph.runtime.prefetch import PREFETCH_DIST, prefetch


@njit(inline="always", cache=True)
def _prefetch_rowof(flat, row, f, lines):
    """Prefetch every cache line of row ``row`` (``f`` float32 wide, ``lines`` lines) of the
    matrix whose flat view is ``flat``."""
    base = row * f
    for c in range(lines):
        prefetch(flat, base + c * 16)


@njit(parallel=True, nogil=True, cache=True)
def csr_spmm(indptr, indices, values, h, out):
    """``out[i] = sum_e values[e] * h[indices[e]]`` over the entries ``e`` of CSR row ``i``
    (``indptr`` length rows + 1; ``h`` and ``out`` C-contiguous float32, ``out`` rows x
    h's columns, overwritten), rows in parallel, each row's entries in order. The row of
    ``h`` that the entry ``PREFETCH_DIST`` ahead reads is prefetched (every line of it): the
    rows lie anywhere in ``h``, and on a block of the 2M-vertex graph's shape (178k entries
    over 65k rows of 100 columns) the product took 2.5 ms without, 1.1 ms with."""
    n = indptr.shape[0] - 1
    f = h.shape[1]
    flat = h.reshape(-1)
    lines = (f + 15) // 16
    m = indices.shape[0]
    for i in prange(n):
        for j in range(f):
            out[i, j] = 0.0
        for e in range(indptr[i], indptr[i + 1]):
            if e + PREFETCH_DIST < m:
                _prefetch_rowof(flat, indices[e + PREFETCH_DIST], f, lines)
            w = values[e]
            s = indices[e]
            for j in range(f):
                out[i, j] += w * h[s, j]


def csr_spmm_ref(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray, h: np.ndarray,
                 out: np.ndarray) -> None:
    """NumPy twin of :func:`csr_spmm`."""
    rows = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
    out[:] = 0
    np.add.at(out, rows, values[:, None] * h[indices])


register(csr_spmm, csr_spmm_ref)


def spmm(indptr: torch.Tensor, indices: torch.Tensor, values: torch.Tensor,
         h: torch.Tensor) -> torch.Tensor:
    """``A @ h`` for the CSR matrix ``(indptr, indices, values)`` with ``len(indptr) - 1``
    rows (host tensors; ``values`` and ``h`` float32, no gradient): :func:`csr_spmm`."""
    h = h.contiguous()
    out = torch.empty((indptr.shape[0] - 1, h.shape[1]), dtype=torch.float32)
    if out.numel():
        csr_spmm(indptr.numpy(), indices.numpy(), values.contiguous().numpy(), h.numpy(),
                 out.numpy())
    return out


def spmm_t(indptr: torch.Tensor, indices: torch.Tensor, values: torch.Tensor,
           g: torch.Tensor, num_src: int, parts: int | None = None) -> torch.Tensor:
    """``A^T @ g`` (``num_src`` x g's columns) for the CSR matrix ``(indptr, indices,
    values)`` of ``len(indptr) - 1`` rows (host tensors; ``values`` and ``g`` float32): the
    gradient of :func:`spmm` with respect to its dense operand, by :func:`scatter_rows` on
    ``parts`` workers (default: numba's thread count), each src row's sum in the entries'
    order (deterministic)."""
    g = g.contiguous()
    out = torch.zeros((int(num_src), g.shape[1]), dtype=torch.float32)
    if out.numel() and indices.numel():
        ip = indptr.numpy()
        dst = np.repeat(np.arange(ip.shape[0] - 1, dtype=np.int64), np.diff(ip))
        if parts is None:
            import numba
            parts = numba.get_num_threads()
        scatter_rows(indices.numpy(), dst, values.contiguous().numpy(), g.numpy(),
                     out.numpy(), max(1, int(parts)))
    return out


class HostSpmm(torch.autograd.Function):
    """``A @ h`` on the host with a gradient to ``h`` only (the edge values are constants:
    the mean's weights, LABOR's): :func:`spmm` forward and :func:`spmm_t` backward, both
    numba, several times faster than torch's sparse CSR product and its backward (which
    also converts ``A`` to a transposed CSR, with a sort, at every step)."""

    @staticmethod
    def forward(ctx, indptr: torch.Tensor, indices: torch.Tensor, values: torch.Tensor,
                h: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(indptr, indices, values)
        ctx.num_src = h.shape[0]
        return spmm(indptr, indices, values.detach(), h.detach())

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        indptr, indices, values = ctx.saved_tensors
        gh = spmm_t(indptr, indices, values, grad.detach(), ctx.num_src) \
            if ctx.needs_input_grad[3] else None
        return None, None, None, gh


def trainable(values: torch.Tensor, h: torch.Tensor) -> bool:
    """Whether :class:`HostSpmm` computes this product with its gradient: host float32
    operands, constant ``values`` (no gradient to them)."""
    return (h.device.type == "cpu" and values.device.type == "cpu"
            and h.dtype == torch.float32 and values.dtype == torch.float32
            and not values.requires_grad)


def usable(values: torch.Tensor, h: torch.Tensor) -> bool:
    """Whether :func:`spmm` computes this product: host float32 operands and no gradient
    to record."""
    return (h.device.type == "cpu" and values.device.type == "cpu"
            and h.dtype == torch.float32 and values.dtype == torch.float32
            and not (torch.is_grad_enabled() and (h.requires_grad or values.requires_grad)))


@njit(parallel=True, nogil=True, cache=True)
def scatter_rows(tgt, src, w, y, acc, parts):
    """``acc[tgt[e]] += w[e] * y[src[e]]`` for every entry ``e`` in order (``y`` and ``acc``
    C-contiguous float32): ``parts`` workers in parallel, each owning an equal range of
    ``acc``'s rows and scanning all entries, so no two write one row and each row's sum
    follows the entries' order; the row the entry ``PREFETCH_DIST`` ahead adds to is
    prefetched when the worker owns it."""
    n = acc.shape[0]
    f = y.shape[1]
    flat = acc.reshape(-1)
    lines = (f + 15) // 16
    m = tgt.shape[0]
    for k in prange(parts):
        lo = n * k // parts
        hi = n * (k + 1) // parts
        for e in range(m):
            if e + PREFETCH_DIST < m:  # the row the entry ahead adds to, if it is ours
                t2 = tgt[e + PREFETCH_DIST]
                if lo <= t2 < hi:
                    _prefetch_rowof(flat, t2, f, lines)
            t = tgt[e]
            if t < lo or t >= hi:
                continue
            we = w[e]
            s = src[e]
            for j in range(f):
                acc[t, j] += we * y[s, j]


def scatter_rows_ref(tgt: np.ndarray, src: np.ndarray, w: np.ndarray, y: np.ndarray,
                     acc: np.ndarray, parts: int) -> None:
    """NumPy twin of :func:`scatter_rows`."""
    np.add.at(acc, tgt, w[:, None] * y[src])


register(scatter_rows, scatter_rows_ref)
