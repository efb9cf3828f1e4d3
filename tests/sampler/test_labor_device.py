"""``labor-device``, the torch twin of ``labor``: the same batches (input vertices, block CSRs,
edge weights, bit for bit) as the numba sampler for every option, the same variates, the
``device_twin`` wiring, and training through it on CPU torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import community_data, random_graph

from twopgraph.core.protocols import SAMPLERS, Sampler
from twopgraph.core.rng import batch_key
from twopgraph.errors import ConfigError
from twopgraph.sampler import make_sampler, sampler_options
from twopgraph.sampler.labor import LaborSampler
from twopgraph.sampler.labor_device import TorchLaborSampler, variates_torch

OPTIONS = [{}, {"iterations": 1}, {"iterations": 3}, {"layer_dependency": True},
           {"batch_dependency": 3}, {"iterations": 2, "layer_dependency": True,
                                     "batch_dependency": 4}]
FANOUTS = [[15, 10, 5], [-1, 4], [2]]


def assert_same_batch(x, y) -> None:
    assert torch.equal(x.seeds, y.seeds)
    assert torch.equal(x.input_nodes, y.input_nodes)
    assert len(x.blocks) == len(y.blocks)
    for bx, by in zip(x.blocks, y.blocks):
        assert bx.size == by.size
        assert torch.equal(bx.indptr, by.indptr)
        assert torch.equal(bx.indices, by.indices)
        assert bx.edge_weight.dtype == by.edge_weight.dtype == torch.float32
        assert torch.equal(bx.edge_weight, by.edge_weight)
        assert torch.equal(bx.src_deg, by.src_deg) and torch.equal(bx.dst_deg, by.dst_deg)


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("fanouts", FANOUTS)
def test_same_batches_as_the_numba_sampler(options, fanouts):
    g = random_graph(600, 6000, seed=3)  # vertex 0 is a hub of degree ~300
    host = LaborSampler(g, fanouts, seed=11, **options)
    dev = TorchLaborSampler(g, fanouts, seed=11, **options)
    rng = np.random.default_rng(0)
    for key in (0, 7, batch_key(2, 5), batch_key(2, 6)):
        seeds = rng.choice(600, 40, replace=False)
        seeds[0] = 0  # the hub among the seeds
        assert_same_batch(host.sample(seeds, key=key), dev.sample(seeds, key=key))


def test_keyless_calls_follow_the_same_stream():
    g = random_graph(300, 2000, seed=1)
    host, dev = LaborSampler(g, [4, 4], seed=2), TorchLaborSampler(g, [4, 4], seed=2)
    seeds = np.arange(0, 300, 7)
    for _ in range(3):  # key-less calls count 0, 1, 2 in the same fresh stream
        assert_same_batch(host.sample(seeds), dev.sample(seeds))


def test_device_tensor_seeds_and_tensors_on_device():
    g = random_graph(200, 1500, seed=4)
    dev = TorchLaborSampler(g, [3, 3], seed=0, iterations=1)
    a = dev.sample(torch.arange(0, 200, 5), key=3)
    b = LaborSampler(g, [3, 3], seed=0, iterations=1).sample(np.arange(0, 200, 5), key=3)
    assert_same_batch(a, b)
    assert all(b.edge_weight.device == dev.device for b in a.blocks)
    with pytest.raises(ConfigError, match="unique"):
        dev.sample(np.array([1, 1]))


@pytest.mark.parametrize("batch_dependency", [1, 5])
def test_variates_equal_the_kernels(batch_dependency):
    g = random_graph(100, 300)
    host = LaborSampler(g, [3], seed=9, batch_dependency=batch_dependency)
    t = np.arange(100)
    for key in (batch_key(0, 0), batch_key(1, 3)):
        ref = host.variates(t, key, hop=1)
        k0, k1, ca, cb = host.variate_keys(*host._stream_index(key), 1)
        got = variates_torch(k0, k1, ca, cb, batch_dependency > 1, torch.from_numpy(t))
        assert got.dtype == torch.float64 and bool(((got >= 0) & (got < 1)).all())
        if batch_dependency == 1:  # one draw: bit-identical
            assert np.array_equal(got.numpy(), ref)
        else:  # torch's log/cos/erfc against libm's: equal to the last bits
            np.testing.assert_allclose(got.numpy(), ref, rtol=0, atol=1e-14)


def test_registered_as_the_twin_and_takes_the_options():
    assert SAMPLERS.get("labor-device") is TorchLaborSampler
    assert LaborSampler.device_twin == "labor-device"
    assert TorchLaborSampler.on_device
    g = random_graph(100, 400)
    s = make_sampler("labor-device", g, [3, 2], seed=1, device="cpu", iterations=2,
                     layer_dependency=True, batch_dependency=3)
    assert isinstance(s, Sampler)
    assert (s.iterations, s.layer_dependency, s.batch_dependency) == (2, True, 3)
    assert TorchLaborSampler.options == LaborSampler.options
    from twopgraph.config import TrainConfig
    sec = TrainConfig.of(sampler="labor", labor_iterations=2).sampling
    assert sampler_options("labor-device", sec) == sampler_options("labor", sec)
    with pytest.raises(ConfigError, match="--labor-iterations"):
        TorchLaborSampler(g, [3], iterations=-1)


def test_nodeloader_trains_with_the_twin():
    from twopgraph.pipeline.nodeloader import NodeLoader
    data = community_data()
    loader = NodeLoader(data, [4, 4], batch_size=64, schedule="random",
                        sampler="labor-device", sampler_options={"iterations": 1}, prefetch=0)
    assert isinstance(loader.sampler, TorchLaborSampler)
    mb = next(iter(loader))
    assert all(b.edge_weight is not None for b in mb.blocks)


def test_the_saturation_loop_matches_the_kernels_row_by_row():
    """Rows whose large ``pi`` saturate (``c pi >= 1``): after the fixed-point rounds of a
    real layer this is rare, so the loop is checked on its own, against the kernel's twin."""
    from twopgraph.sampler.labor_device import _solve
    from twopgraph.sampler.labor_pi import _solve_row_ref
    rng = np.random.default_rng(5)
    deg = rng.integers(0, 30, 400)
    pi = rng.uniform(0.001, 0.2, int(deg.sum()))
    pi[rng.random(pi.shape[0]) < 0.1] = 1.0  # a few vertices every dst keeps
    row = np.repeat(np.arange(400), deg)
    starts = np.concatenate([[0], np.cumsum(deg)])
    saturated = 0
    for k in (1, 3, 8):
        got = _solve(torch.from_numpy(pi), torch.from_numpy(row), torch.from_numpy(deg), k)
        ref = [_solve_row_ref(pi, np.arange(pi.shape[0]), starts[i], deg[i], k)
               for i in range(400)]
        assert np.array_equal(got.numpy(), np.array(ref))
        c = got.numpy()[row]
        saturated += int(((c * pi >= 1.0) & np.isfinite(c)).sum())
    assert saturated > 100  # the case this test is for
