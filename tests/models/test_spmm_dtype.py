"""The dtype of a block's sparse product under ``--amp bf16`` (issue 42, item 3): bfloat16 on
CUDA where torch's sparse CSR product and its backward take it (probed once), float32 on the
CPU (MKL takes no bfloat16) and wherever the probe says no; no autocast: the operands' own."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import twopgraph.models.ops as ops
from twopgraph.core.minibatch import Block
from twopgraph.models.ops import choose_spmm_dtype, spmm_block, spmm_dtype


def test_choose_spmm_dtype():
    yes, no = (lambda dtype: True), (lambda dtype: False)
    bf16, f32 = torch.bfloat16, torch.float32
    assert choose_spmm_dtype("cuda", None, yes) is None  # no autocast: the operands' dtype
    assert choose_spmm_dtype("cpu", None, yes) is None
    assert choose_spmm_dtype("cuda", bf16, yes) == bf16
    assert choose_spmm_dtype("cuda", bf16, no) == f32
    assert choose_spmm_dtype("cpu", bf16, yes) == f32  # never asked on the CPU
    asked = []
    choose_spmm_dtype("cpu", bf16, lambda d: asked.append(d) or True)
    assert asked == []


def test_spmm_dtype_follows_autocast_on_the_cpu(monkeypatch):
    monkeypatch.setattr(ops, "low_precision_spmm", lambda device, dtype: True)
    assert spmm_dtype("cpu") is None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert spmm_dtype("cpu") == torch.float32
    with torch.autocast("cpu", enabled=False):
        assert spmm_dtype("cpu") is None


def _block(seed: int = 0):
    rng = np.random.default_rng(seed)
    num_src, num_dst = 30, 10
    counts = rng.integers(0, 6, num_dst)
    indptr = torch.from_numpy(np.concatenate([[0], np.cumsum(counts)]))
    indices = torch.from_numpy(rng.integers(0, num_src, int(counts.sum())))
    deg = torch.ones(num_src)
    return Block(num_src, num_dst, indptr, indices, deg, deg[:num_dst])


def test_cpu_product_under_bf16_autocast_runs_in_float32():
    b = _block()
    values = torch.rand(b.num_edges, requires_grad=True)
    h = torch.randn(b.num_src, 8, requires_grad=True)
    want = torch.sparse.mm(torch.sparse_csr_tensor(b.indptr, b.indices, values.detach(),
                                                   size=(b.num_dst, b.num_src)), h.detach())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = spmm_block(b, values, h.to(torch.bfloat16))
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)  # h rounded to bf16 first
    got.sum().backward()
    assert values.grad is not None and h.grad is not None


@pytest.mark.cuda
def test_cuda_product_in_the_autocast_dtype_where_torch_takes_it():
    dev = torch.device("cuda")
    blk = _block(1).to(dev)
    values = torch.rand(blk.num_edges, device=dev, requires_grad=True)
    h = torch.randn(blk.num_src, 8, device=dev, requires_grad=True)
    want = spmm_block(blk, values.detach(), h.detach())
    ok = ops.low_precision_spmm(dev, torch.bfloat16)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        got = spmm_block(blk, values, h)
    assert got.dtype == (torch.bfloat16 if ok else torch.float32)
    torch.testing.assert_close(got.float(), want, rtol=3e-2, atol=3e-2)
    got.float().sum().backward()
    assert values.grad is not None and h.grad is not None
