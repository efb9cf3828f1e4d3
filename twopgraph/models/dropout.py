"""Fused ReLU + inverted dropout for CPU training: numba kernels, their twins, the autograd op.

torch draws a CPU dropout mask with a serial kernel (``bernoulli_``/``rand_like``), which cost
25-30% of a GraphSAGE training step here (profile of issue 6). :func:`relu_dropout` does ReLU,
mask and scaling in one parallel pass over float32 and keeps 1 byte of mask per element for
the backward pass. The mask comes from :mod:`twopgraph.core.rng` (counter-based): it depends only
on (key, element index), not on the thread count, and the key is drawn from torch's
generator, so ``torch.manual_seed`` makes runs reproducible.

Example::

    >>> x = torch.randn(6)
    >>> torch.equal(relu_dropout(x, nn.Dropout(0.5).eval()), torch.relu(x))
    True
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange
from torch import nn
from torch.autograd.function import FunctionCtx

from twopgraph.core.rng import splitmix64
from twopgraph.runtime.jit import register

_RD_CHUNK = 1 << 14  # pairs of elements per parallel work item


@njit(parallel=True, nogil=True, cache=True)
def relu_dropout_fwd(x, out, keep, key, threshold, scale):
    """``out = relu(x) * mask * scale`` over flat float32 ``x``; ``keep[i] = 1`` where the
    gradient passes (x[i] > 0 and element kept), else 0.

    Element i is kept when its 32-bit uniform draw is >= ``threshold`` (= round(p * 2**32)),
    so with probability 1 - p. Elements 2j and 2j+1 take the low and high halves of
    ``splitmix64(key ^ j)``: the mask depends only on (key, i), not on the thread count.
    """
    n = x.shape[0]
    pairs = (n + 1) // 2
    chunks = (pairs + _RD_CHUNK - 1) // _RD_CHUNK
    thr = np.uint64(threshold)
    lo32 = np.uint64(0xFFFFFFFF)
    for c in prange(chunks):
        j0 = c * _RD_CHUNK
        j1 = min(pairs, j0 + _RD_CHUNK)
        for j in range(j0, j1):
            r = splitmix64(key ^ np.uint64(j))
            i = 2 * j
            v = x[i]
            if v > 0 and (r & lo32) >= thr:
                out[i] = v * scale
                keep[i] = 1
            else:
                out[i] = 0
                keep[i] = 0
            i += 1
            if i < n:
                v = x[i]
                if v > 0 and (r >> np.uint64(32)) >= thr:
                    out[i] = v * scale
                    keep[i] = 1
                else:
                    out[i] = 0
                    keep[i] = 0


def relu_dropout_fwd_ref(x: np.ndarray, key: int, threshold: int,
                         scale: float | np.floating) -> tuple[np.ndarray, np.ndarray]:
    """NumPy twin of :func:`relu_dropout_fwd`; returns ``(out, keep)``."""
    n = x.shape[0]
    j = np.arange((n + 1) // 2, dtype=np.uint64)
    z = (np.uint64(key) ^ j) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    r = z ^ (z >> np.uint64(31))
    u = np.empty(2 * r.shape[0], dtype=np.uint64)
    u[0::2] = r & np.uint64(0xFFFFFFFF)
    u[1::2] = r >> np.uint64(32)
    keep = ((x > 0) & (u[:n] >= np.uint64(threshold))).astype(np.uint8)
    out = np.where(keep == 1, x * np.float32(scale), np.float32(0)).astype(x.dtype)
    return out, keep


@njit(parallel=True, nogil=True, cache=True)
def relu_dropout_bwd(grad, keep, scale, out):
    """``out = grad * keep * scale`` (the gradient of :func:`relu_dropout_fwd`), flat arrays."""
    n = grad.shape[0]
    chunks = (n + 2 * _RD_CHUNK - 1) // (2 * _RD_CHUNK)
    for c in prange(chunks):
        i0 = c * 2 * _RD_CHUNK
        i1 = min(n, i0 + 2 * _RD_CHUNK)
        for i in range(i0, i1):
            out[i] = grad[i] * scale if keep[i] else 0


def relu_dropout_bwd_ref(grad: np.ndarray, keep: np.ndarray,
                         scale: float | np.floating) -> np.ndarray:
    """NumPy twin of :func:`relu_dropout_bwd`."""
    return np.where(keep == 1, grad * np.float32(scale), np.float32(0)).astype(grad.dtype)


register(relu_dropout_fwd, relu_dropout_fwd_ref)
register(relu_dropout_bwd, relu_dropout_bwd_ref)


class _ReluDropoutCPU(torch.autograd.Function):
    """ReLU then inverted dropout in one numba pass (CPU, float32), 1 byte of mask per element."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: torch.Tensor, p: float, key: int) -> torch.Tensor:
        xc = x.detach().contiguous()
        out = torch.empty_like(xc)
        keep = torch.empty(xc.shape, dtype=torch.uint8)
        scale = np.float32(1.0 / (1.0 - p))
        relu_dropout_fwd(xc.view(-1).numpy(), out.view(-1).numpy(), keep.view(-1).numpy(),
                         np.uint64(key), np.uint64(min(round(p * 2.0 ** 32), 2 ** 32)), scale)
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx: FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (keep,) = ctx.saved_tensors
        g = grad.contiguous()
        out = torch.empty_like(g)
        relu_dropout_bwd(g.view(-1).numpy(), keep.view(-1).numpy(), ctx.scale,
                         out.view(-1).numpy())
        return out, None, None


def relu_dropout(x: torch.Tensor, dropout: nn.Dropout) -> torch.Tensor:
    """``dropout(relu(x))``. In training on CPU with float32 this is one fused numba pass
    (:func:`relu_dropout_fwd`, see the module docstring); elsewhere (CUDA, eval, other dtypes,
    p = 0 or 1) torch's own ReLU and dropout.
    """
    p = dropout.p
    if (not dropout.training or p == 0.0 or x.device.type != "cpu"
            or x.dtype != torch.float32 or p >= 1.0):
        return dropout(torch.relu(x))
    key = int(torch.randint(0, 2 ** 62, (1,)).item())
    return _ReluDropoutCPU.apply(x, p, key)
