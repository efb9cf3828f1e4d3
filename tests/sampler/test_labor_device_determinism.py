"""``labor-device`` deterministic (issue 42, defect 5): its float row sums on CUDA take a fixed
pairwise order (:func:`~twopgraph.sampler.labor_device.tree_row_sum`) instead of
``index_add_``'s atomics. On the CPU: the reduction against its NumPy twin, the CUDA order
run on CPU torch against ``labor`` (the same batches), repeated sampling identical, the
order chosen per device. CUDA: repeated batches identical, and equal to ``labor``'s."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import random_graph

from twopgraph.core.rng import batch_key
from twopgraph.sampler.labor import LaborSampler
from twopgraph.sampler.labor_device import (
    TorchLaborSampler,
    tree_row_sum,
    tree_row_sum_ref,
)

OPTIONS = [{}, {"iterations": 1}, {"iterations": 3}, {"batch_dependency": 3},
           {"iterations": 2, "layer_dependency": True, "batch_dependency": 4}]


def _rows(seed: int = 0, n: int = 300, longest: int = 70):
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, longest, n)
    lens[:6] = [0, 1, 2, 3, 4, 0]
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    # magnitudes over 16 decades: the order of the additions shows in the bits
    values = rng.uniform(0, 1, offsets[-1]) * 10.0 ** rng.integers(-8, 8, offsets[-1])
    return values, offsets, np.repeat(np.arange(n), lens), int(lens.max())


def test_tree_row_sum_equals_its_numpy_twin_bit_for_bit():
    values, offsets, row, longest = _rows()
    got = tree_row_sum(torch.from_numpy(values), torch.from_numpy(offsets),
                       torch.from_numpy(row), longest).numpy()
    ref = tree_row_sum_ref(values, offsets)
    assert np.array_equal(got, ref)
    sequential = np.array([sum(values[a:b].tolist(), 0.0)
                           for a, b in zip(offsets[:-1], offsets[1:])])
    short = np.diff(offsets) <= 3  # 3 entries or fewer: the sequential sum exactly
    assert np.array_equal(got[short], sequential[short])
    assert (got != sequential).sum() > 50  # the order is not index_add_'s: the test can see it
    np.testing.assert_allclose(got, sequential, rtol=1e-14)
    # a longer max_len bound changes nothing (the rounds past a row's length add nothing)
    again = tree_row_sum(torch.from_numpy(values), torch.from_numpy(offsets),
                         torch.from_numpy(row), 4 * longest).numpy()
    assert np.array_equal(again, got)


def test_tree_row_sum_of_nothing():
    offsets = torch.tensor([0, 0, 0])
    got = tree_row_sum(torch.zeros(0, dtype=torch.float64), offsets,
                       torch.zeros(0, dtype=torch.int64), 0)
    assert got.tolist() == [0.0, 0.0]


def _assert_same(x, y) -> None:
    assert torch.equal(x.input_nodes, y.input_nodes)
    for bx, by in zip(x.blocks, y.blocks):
        assert bx.size == by.size
        assert torch.equal(bx.indptr, by.indptr) and torch.equal(bx.indices, by.indices)
        assert torch.equal(bx.edge_weight, by.edge_weight)


@pytest.mark.parametrize("options", OPTIONS)
def test_the_cuda_order_on_the_cpu_draws_labors_batches(options):
    """The sums CUDA takes (tree), run on CPU torch: the same batches as ``labor``, weights
    bit for bit (the rounding differences the docs bound do not occur on these graphs)."""
    g = random_graph(600, 6000, seed=3)  # vertex 0: a hub of degree ~300
    host = LaborSampler(g, [15, 10, 5], seed=11, **options)
    dev = TorchLaborSampler(g, [15, 10, 5], seed=11, **options)
    dev.row_sums = "tree"
    assert dev._tree_sums()
    rng = np.random.default_rng(1)
    for key in (0, batch_key(2, 5)):
        seeds = rng.choice(600, 40, replace=False)
        seeds[0] = 0
        _assert_same(host.sample(seeds, key=key), dev.sample(seeds, key=key))


@pytest.mark.parametrize("row_sums", ["auto", "tree"])
def test_repeated_sampling_gives_identical_batches(row_sums):
    g = random_graph(400, 4000, seed=5)
    dev = TorchLaborSampler(g, [10, 5], seed=2, iterations=2, batch_dependency=3)
    dev.row_sums = row_sums
    seeds = np.arange(0, 400, 9)
    threads = torch.get_num_threads()
    try:
        batches = []
        for n in (1, 2, 1):  # torch's thread count changes nothing
            torch.set_num_threads(n)
            batches.append(dev.sample(seeds, key=batch_key(1, 3)))
    finally:
        torch.set_num_threads(threads)
    for b in batches[1:]:
        _assert_same(batches[0], b)


def test_the_order_is_chosen_per_device():
    pick = TorchLaborSampler._tree_sums
    assert pick(SimpleNamespace(row_sums="auto", device=torch.device("cuda", 0)))
    assert not pick(SimpleNamespace(row_sums="auto", device=torch.device("cpu")))
    assert pick(SimpleNamespace(row_sums="tree", device=torch.device("cpu")))
    assert not pick(SimpleNamespace(row_sums="sequential", device=torch.device("cuda")))
    assert TorchLaborSampler.row_sums == "auto"


def test_the_switch_to_the_twin_has_its_note():
    assert LaborSampler.device_twin == "labor-device"
    assert "deterministic" in LaborSampler.device_twin_note


# ----------------------------------------------------------------------------------------------
# CUDA
# ----------------------------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.parametrize("options", OPTIONS)
def test_cuda_labor_device_is_deterministic_and_equals_labor(options):
    g = random_graph(3000, 60000, seed=7)  # hub of degree ~1500: long rows, many atomics
    host = LaborSampler(g, [15, 10, 5], seed=11, **options)
    dev = TorchLaborSampler(g, [15, 10, 5], seed=11, device="cuda", **options)
    rng = np.random.default_rng(2)
    differ = total = 0
    for key in (0, 7, batch_key(2, 5), batch_key(2, 6)):
        seeds = rng.choice(3000, 256, replace=False)
        seeds[0] = 0
        runs = [dev.sample(seeds, key=key) for _ in range(3)]
        for b in runs[1:]:  # bit for bit, run after run
            _assert_same(runs[0], b)
        a, d = host.sample(seeds, key=key), runs[0]
        assert torch.equal(a.input_nodes, d.input_nodes.cpu())
        for ba, bd in zip(a.blocks, d.blocks):
            assert torch.equal(ba.indptr, bd.indptr.cpu())
            assert torch.equal(ba.indices, bd.indices.cpu())
            w = bd.edge_weight.cpu()
            np.testing.assert_allclose(w.numpy(), ba.edge_weight.numpy(), rtol=1e-6)
            differ += int((w != ba.edge_weight).sum())
            total += w.numel()
    assert differ <= max(1, total // 100_000)  # one float32 ulp, rarely (module doc)
