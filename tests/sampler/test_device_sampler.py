"""TorchNeighborSampler (``device``): the NeighborSampler's blocks and law, with torch ops.

Every test runs on CPU torch and, where CUDA is available, on the GPU too. The device sampler
evaluates the numba sampler's algorithm on the same counter-based stream, so for the same
``(seed, key)`` the batches are identical; the statistical tests below check the law on their
own anyway (with keys the numba sampler never saw where the two are compared), so that they
keep guarding the law if the device algorithm ever changes.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from conftest import power_law_data, random_graph

from twopgraph.core.protocols import SAMPLERS, Sampler
from twopgraph.core.rng import draw_ref, mix_key
from twopgraph.errors import ConfigError
from twopgraph.graph.data import CSRGraph
from twopgraph.locality import RandomScheduler
from twopgraph.sampler import NeighborSampler, make_sampler, sampled_batches
from twopgraph.sampler.device import TorchNeighborSampler, _umod, draw_torch

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]  # skipped without a GPU


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def _graphs():
    return {"random-hub": random_graph(300, 2000, seed=1),
            "power-law": power_law_data(1500, avg_deg=8, seed=2).graph}


def _same_batch(a, b):
    assert torch.equal(a.seeds.cpu(), b.seeds.cpu())
    assert torch.equal(a.input_nodes.cpu(), b.input_nodes.cpu())
    assert len(a.blocks) == len(b.blocks)
    for x, y in zip(a.blocks, b.blocks):
        assert x.size == y.size
        for f in ("indptr", "indices", "src_deg", "dst_deg"):
            u, v = getattr(x, f).cpu(), getattr(y, f).cpu()
            assert u.dtype == v.dtype and torch.equal(u, v), f


# -- the random stream ---------------------------------------------------------------------------
def test_draw_and_unsigned_mod_match_the_kernels_stream(device):
    """splitmix64 in int64 torch arithmetic gives draw()'s uint64 bits; the unsigned modulo
    of those bits is exact (degrees up to 2**31 - 1)."""
    rng = np.random.default_rng(0)
    v = rng.integers(0, 2**40, 2000)
    j = rng.integers(0, 2**31 - 1, 2000)
    key = mix_key(123, 456)
    got = draw_torch(key, torch.from_numpy(v).to(device), torch.from_numpy(j).to(device))
    ref = [draw_ref(key, int(a), int(b)) for a, b in zip(v, j)]
    assert [int(x) % (1 << 64) for x in got.cpu()] == ref
    m = np.concatenate([rng.integers(1, 2**31 - 1, 1998), [1, 2**31 - 1]])
    got_mod = _umod(got, torch.from_numpy(m).to(device)).cpu().tolist()
    assert got_mod == [r % int(q) for r, q in zip(ref, m)]


# -- same batches as the numba sampler -----------------------------------------------------------
@pytest.mark.parametrize("fanouts", [[4, 3, 2], [15, 10, 5], [-1, 3], [1], [2, -1]])
def test_same_batches_as_neighbor_sampler(device, fanouts):
    """Same (seed, key) => bit-identical blocks (input_nodes, indptr, indices, degrees)."""
    rng = np.random.default_rng(1)
    for g in _graphs().values():
        ref = NeighborSampler(g, fanouts, seed=3)
        dev = TorchNeighborSampler(g, fanouts, seed=3, device=device)
        for key in range(8):
            seeds = rng.choice(g.num_nodes, 23, replace=False)
            _same_batch(ref.sample(seeds, key=key), dev.sample(seeds, key=key))


def test_floyd_collisions_match_the_kernel(device):
    """Stars of every degree 1..40 under fanouts 1..33: Floyd's collisions (frequent when d
    is just above f) resolve as in the numba kernel, draw for draw."""
    d = np.arange(1, 41)
    centres = d.shape[0]
    src = np.repeat(np.arange(centres), d)
    g = CSRGraph.from_edges(src, centres + np.arange(d.sum()), centres + int(d.sum()))
    seeds = np.arange(centres)
    for f in (1, 2, 3, 7, 15, 16, 17, 33):
        ref = NeighborSampler(g, [f], seed=f)
        dev = TorchNeighborSampler(g, [f], seed=f, device=device)
        for key in range(5):
            _same_batch(ref.sample(seeds, key=key), dev.sample(seeds, key=key))


def test_degrees_override_and_full_block(device):
    g = random_graph(400, 3000, seed=7)
    deg = np.random.default_rng(0).integers(1, 50, g.num_nodes)
    ref = NeighborSampler(g, [3, 3], degrees=deg)
    dev = TorchNeighborSampler(g, [3, 3], degrees=deg, device=device)
    _same_batch(ref.sample(np.arange(0, 400, 9), key=4), dev.sample(np.arange(0, 400, 9), key=4))
    for a, b in [(0, 400), (0, 1), (17, 18), (100, 250), (399, 400), (5, 5)]:
        x, y = ref.full_block(a, b), dev.full_block(a, b)
        assert (x.num_src, x.num_dst) == (y.num_src, y.num_dst)
        for f in ("indptr", "indices", "src_deg", "dst_deg"):
            u, v = getattr(x, f), getattr(y, f)
            assert v.device.type == torch.device(device).type
            assert u.dtype == v.dtype and torch.equal(u, v.cpu()), f
    with pytest.raises(ConfigError):
        TorchNeighborSampler(g, [3], degrees=deg[:-1], device=device)


# -- block structure -----------------------------------------------------------------------------
def test_minibatch_structure(device):
    """The NeighborSampler conventions: seeds first, each block's dst = the first num_dst of
    its src, blocks input side first, sizes chain, degrees are full-graph float32, counts are
    min(d, f), every edge is a real edge, no neighbour twice."""
    g = random_graph(300, 2000, seed=1)
    s = TorchNeighborSampler(g, [4, 3, 2], seed=0, device=device)
    seeds = np.array([5, 17, 42, 0], dtype=np.int64)
    mb = s.sample(seeds, key=3)
    ids = mb.input_nodes.cpu().numpy()
    assert mb.input_nodes.device.type == torch.device(device).type
    assert ids[:4].tolist() == seeds.tolist() and mb.seeds.cpu().tolist() == seeds.tolist()
    assert np.unique(ids).shape[0] == ids.shape[0]
    assert len(mb.blocks) == 3 and mb.blocks[-1].num_dst == 4
    assert mb.blocks[0].num_src == ids.shape[0]
    for lower, upper in zip(mb.blocks[:-1], mb.blocks[1:]):
        assert lower.num_dst == upper.num_src
    deg = g.degrees()
    for b, f in zip(mb.blocks, [4, 3, 2]):
        assert b.indptr.dtype == b.indices.dtype == torch.int64
        assert b.src_deg.dtype == b.dst_deg.dtype == torch.float32
        cnt = b.sampled_deg().cpu().numpy()
        np.testing.assert_array_equal(cnt, np.minimum(deg[ids[:b.num_dst]], f))
        ei = b.edge_index.cpu().numpy()
        assert ei.shape == (2, b.num_edges) and b.size == (b.num_src, b.num_dst)
        assert ei[0].max() < b.num_src and ei[1].max() < b.num_dst
        np.testing.assert_array_equal(b.src_deg.cpu().numpy(), deg[ids[:b.num_src]])
        np.testing.assert_array_equal(b.dst_deg.cpu().numpy(), deg[ids[:b.num_dst]])
        src, dst = ids[ei[0]], ids[ei[1]]
        for u, v in zip(src, dst):
            assert u in set(g.neighbors(v).tolist())  # a real edge
        flat = dst * g.num_nodes + src
        assert np.unique(flat).shape[0] == flat.shape[0]  # never twice


def test_small_degrees_and_minus_one_take_all(device):
    """fanout -1, or a degree <= fanout, takes every neighbour (in CSR order)."""
    g = random_graph(100, 400, seed=2)
    deg = g.degrees()
    for fanouts in ([-1], [int(deg.max())], [1000]):
        mb = TorchNeighborSampler(g, fanouts, device=device).sample(np.arange(10))
        b, ids = mb.blocks[0], mb.input_nodes.cpu().numpy()
        ip, ix = b.indptr.cpu().numpy(), b.indices.cpu().numpy()
        for i in range(10):
            assert ids[ix[ip[i]:ip[i + 1]]].tolist() == g.neighbors(i).tolist()


def test_isolated_seeds_and_empty_frontier(device):
    g = CSRGraph.from_edges([0, 1], [1, 2], num_nodes=6)  # 3, 4, 5 isolated
    s = TorchNeighborSampler(g, [2, 2], device=device)
    mb = s.sample(np.array([3, 4]), key=0)
    assert mb.input_nodes.cpu().tolist() == [3, 4]
    assert [b.size for b in mb.blocks] == [(2, 2), (2, 2)]
    assert all(b.num_edges == 0 for b in mb.blocks)
    _same_batch(NeighborSampler(g, [2, 2]).sample(np.array([5, 1]), key=1),
                s.sample(np.array([5, 1]), key=1))


# -- keys, seeds, registry, threads -------------------------------------------------------------
def test_keys_reproduce_and_fresh_calls_differ(device):
    g = random_graph(300, 3000, seed=6)
    seeds = np.arange(0, 300, 5)
    s = TorchNeighborSampler(g, [3, 3], seed=0, device=device)
    a, b = s.sample(seeds), s.sample(seeds)
    assert not torch.equal(a.input_nodes, b.input_nodes)
    _same_batch(s.sample(seeds, key=17),
                TorchNeighborSampler(g, [3, 3], seed=0, device=device).sample(seeds, key=17))
    assert not torch.equal(s.sample(seeds, key=17).input_nodes,
                           TorchNeighborSampler(g, [3, 3], seed=1, device=device)
                           .sample(seeds, key=17).input_nodes)
    # key-less calls follow the numba sampler's fresh stream (same counter, same keys)
    ref = NeighborSampler(g, [3, 3], seed=0)
    fresh = TorchNeighborSampler(g, [3, 3], seed=0, device=device)
    for _ in range(3):
        _same_batch(ref.sample(seeds), fresh.sample(seeds))


def test_seed_forms_and_bad_seeds(device):
    g = random_graph(50, 100)
    s = TorchNeighborSampler(g, [2], device=device)
    want = s.sample(np.array([3, 1, 4]), key=2)
    for form in ([3, 1, 4], torch.tensor([3, 1, 4]), torch.tensor([3, 1, 4], device=device),
                 np.array([3, 1, 4], dtype=np.int32)):
        _same_batch(want, s.sample(form, key=2))
    for bad in (np.array([1, 1]), np.array([-1]), np.array([10**6]), np.array([], np.int64),
                np.zeros((2, 2), np.int64)):
        with pytest.raises(ConfigError):
            s.sample(bad)
        with pytest.raises(ConfigError):
            s.sample(torch.from_numpy(bad).to(device))
    with pytest.raises(ConfigError):
        TorchNeighborSampler(g, "3,x", device=device)


def test_registered_and_protocol():
    g = random_graph(60, 200)
    assert SAMPLERS.get("device") is TorchNeighborSampler
    s = make_sampler("device", g, [2, 2], seed=4)
    assert isinstance(s, Sampler) and s.device == torch.device("cpu")
    _same_batch(NeighborSampler(g, [2, 2], seed=4).sample(np.arange(9), key=1),
                s.sample(np.arange(9), key=1, parallel=False))
    assert s.nbytes() == 8 * 61 + g.indices.nbytes + 4 * 60
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError):
            TorchNeighborSampler(g, [2], device="cuda")


def test_threads_and_workers_give_the_same_batches(device):
    """Worker threads (each its own relabelling map) give the batches of the calling thread;
    a failed call leaves no stale state behind."""
    g = random_graph(500, 4000, seed=3)
    s = TorchNeighborSampler(g, [4, 3], seed=5, device=device)
    sched = RandomScheduler(np.arange(0, 500, 3), 16, seed=1)
    ref = [mb for mb, _ in sampled_batches(sched, NeighborSampler(g, [4, 3], seed=5), 2)]
    for workers in (1, 3):
        got = [mb for mb, _ in sampled_batches(sched, s, 2, workers=workers)]
        assert [m.batch_id for m in got] == list(range(sched.num_batches))
        for a, b in zip(ref, got):
            _same_batch(a, b)
    out = {}
    ts = [threading.Thread(target=lambda k=k: out.__setitem__(k, s.sample(np.arange(k, 60), key=k)))
          for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for k in range(4):
        _same_batch(out[k], s.sample(np.arange(k, 60), key=k))


# -- the sampling law, over many keys --------------------------------------------------------------
@pytest.mark.parametrize("graph", ["power-law", "hub"])
def test_sampling_law_inclusion_probability(device, graph):
    """Each neighbour of a dst vertex of degree d is taken with probability min(1, f / d) in
    every block; a seed's draws in two layers are independent (tests/oracles.py)."""
    from oracles import assert_sampling_law
    g = power_law_data(300, avg_deg=6, seed=1).graph if graph == "power-law" \
        else random_graph(200, 600, seed=5)
    assert_sampling_law(TorchNeighborSampler(g, [4, 3], seed=7, device=device),
                        np.flatnonzero(g.degrees() > 0)[::3])


@pytest.mark.parametrize("d,f", [(5, 2), (7, 4)])
def test_sampling_draws_every_subset_equally_often(device, d, f):
    """Each of the C(d, f) neighbour sets of a degree-d vertex comes with probability
    1 / C(d, f)."""
    from oracles import assert_uniform_subsets
    assert_uniform_subsets(
        lambda g, fanouts: TorchNeighborSampler(g, fanouts, seed=3, device=device), d, f)


def test_input_vertex_counts_match_neighbor_sampler(device):
    """Batches of the same seeds have as many input vertices (and edges) as NeighborSampler's
    within sampling noise: two-sample z-scores of the means over 300 keys each, with keys the
    other sampler never used (so this compares laws, not streams)."""
    g = power_law_data(3000, avg_deg=10, seed=4).graph
    seeds = np.random.default_rng(0).choice(g.num_nodes, 64, replace=False)
    fanouts = [10, 5, 3]

    def stats(s, keys):
        rows = []
        for k in keys:
            mb = s.sample(seeds, key=k)
            rows.append([mb.input_nodes.shape[0]] + [b.num_src for b in mb.blocks[1:]]
                        + [sum(b.num_edges for b in mb.blocks)])
        return np.array(rows, dtype=np.float64)

    a = stats(NeighborSampler(g, fanouts, seed=1), range(300))
    b = stats(TorchNeighborSampler(g, fanouts, seed=2, device=device), range(10**6, 10**6 + 300))
    z = (a.mean(0) - b.mean(0)) / np.sqrt(a.var(0, ddof=1) / len(a) + b.var(0, ddof=1) / len(b))
    assert np.abs(z).max() < 5, (a.mean(0), b.mean(0), z)
    assert (a.std(0) > 0).all()  # the statistic does vary: the test has teeth


# -- training ------------------------------------------------------------------------------------
def _train_accuracy(data, sampler, seed: int, epochs: int = 3) -> float:
    from twopgraph.cache import HostFeatures
    from twopgraph.inference import accuracy, layerwise_inference
    from twopgraph.models import build_model
    from twopgraph.pipeline.epoch import train_epoch
    from twopgraph.pipeline.loader import Loader
    torch.manual_seed(seed)
    feat = torch.from_numpy(data.feat)
    labels = torch.from_numpy(data.label)
    loader = Loader(RandomScheduler(data.train_idx, 128, seed=seed), sampler, HostFeatures(feat),
                    labels, "cpu", prefetch=0, threads=1)
    model = build_model("sage", data.num_features, 32, data.num_classes, len(sampler.fanouts))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        train_epoch(model, opt, loader, epoch, progress=False)
    logits = layerwise_inference(model, sampler, feat, torch.device("cpu"))
    return accuracy(logits, labels, data.test_idx)


def test_trains_to_the_accuracy_of_neighbor_sampler():
    """synthetic-tiny, 3 seeds, SAGE 2 layers, 3 epochs: the mean test accuracy with the
    device sampler (other sampler seeds: other batches) is within 3 points of the numba
    sampler's."""
    from twopgraph.datasets.synthetic import generate
    data = generate("synthetic-tiny")
    before = torch.get_num_threads()
    try:
        ref, dev = [], []
        for seed in range(3):
            ref.append(_train_accuracy(data, NeighborSampler(data.graph, [10, 5], seed=seed), seed))
            dev.append(_train_accuracy(
                data, TorchNeighborSampler(data.graph, [10, 5], seed=100 + seed), seed))
    finally:
        torch.set_num_threads(before)
    assert min(ref) > 0.5, ref  # it did learn
    assert abs(np.mean(ref) - np.mean(dev)) < 0.03, (ref, dev)
