"""Training's host product (``HostSpmm``: numba forward and backward) against torch's sparse
CSR product and its autograd: same output and the same gradient to the dense operand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from twopgraph.core.minibatch import Block
from twopgraph.graph import spmm
from twopgraph.models.ops import spmm_block


def _block(num_dst: int, num_src: int, seed: int) -> tuple[Block, torch.Tensor]:
    rng = np.random.default_rng(seed)
    deg = rng.integers(0, 6, num_dst)
    indptr = torch.from_numpy(np.concatenate([[0], np.cumsum(deg)]).astype(np.int64))
    # distinct neighbours per dst, as a sampler gives them
    indices = torch.from_numpy(np.concatenate(
        [np.sort(rng.choice(num_src, d, replace=False)) for d in deg]).astype(np.int64))
    values = torch.from_numpy(rng.random(int(deg.sum())).astype(np.float32))
    return Block(num_src, num_dst, indptr, indices, torch.ones(num_src),
                 torch.from_numpy(deg).float()), values


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_host_product_and_gradient_match_torch(seed):
    block, values = _block(37, 90, seed)
    h = torch.randn(90, 5, requires_grad=True)
    g = torch.randn(37, 5)
    out = spmm_block(block, values, h)
    assert out.grad_fn is not None and "HostSpmm" in type(out.grad_fn).__name__
    out.backward(g)
    mine = h.grad.clone()
    h.grad = None
    a = torch.sparse_csr_tensor(block.indptr, block.indices, values, size=(37, 90))
    ref = torch.sparse.mm(a, h)
    ref.backward(g)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mine, h.grad, rtol=1e-5, atol=1e-5)
    # untouched src rows get a zero gradient
    unused = np.setdiff1d(np.arange(90), block.indices.numpy())
    assert (mine[unused] == 0).all()


def test_trainable_values_keep_torch_autograd():
    block, values = _block(10, 20, 0)
    values.requires_grad_(True)
    h = torch.randn(20, 3, requires_grad=True)
    assert not spmm.trainable(values, h)
    out = spmm_block(block, values, h)
    out.sum().backward()
    assert values.grad is not None and h.grad is not None


def test_spmm_t_is_the_transposed_product():
    block, values = _block(12, 30, 4)
    g = torch.randn(12, 4)
    dense = torch.zeros(12, 30)
    rows = torch.repeat_interleave(torch.arange(12), block.indptr.diff())
    dense.index_put_((rows, block.indices), values, accumulate=True)
    for parts in (1, 3):
        torch.testing.assert_close(spmm.spmm_t(block.indptr, block.indices, values, g, 30,
                                               parts=parts), dense.t() @ g)
