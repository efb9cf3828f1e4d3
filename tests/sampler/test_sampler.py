"""NeighborSampler output structure, reproducibility, and the schedulers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import random_graph

from twopgraph.errors import ConfigError
from twopgraph.graph.data import CSRGraph
from twopgraph.locality import RandomScheduler, make_scheduler
from twopgraph.sampler import NeighborSampler, parse_fanouts


def _edges_ok(graph, mb):
    """Every block edge is a real graph edge, mapped through input_nodes."""
    ids = mb.input_nodes.numpy()
    for b in mb.blocks:
        ei = b.edge_index.numpy()
        src, dst = ids[ei[0]], ids[ei[1]]
        for s, d in zip(src, dst):
            assert s in set(graph.neighbors(d).tolist())


def test_minibatch_structure():
    g = random_graph(300, 2000, seed=1)
    s = NeighborSampler(g, [4, 3, 2], seed=0)
    seeds = np.array([5, 17, 42, 0], dtype=np.int64)
    mb = s.sample(seeds, key=3)
    assert mb.input_nodes[:4].tolist() == seeds.tolist()
    assert len(mb.input_nodes.unique()) == len(mb.input_nodes)
    assert len(mb.blocks) == 3
    assert mb.blocks[-1].num_dst == 4
    assert mb.blocks[0].num_src == len(mb.input_nodes)
    for lower, upper in zip(mb.blocks[:-1], mb.blocks[1:]):
        assert lower.num_dst == upper.num_src  # dst of a layer = src of the next
    deg = g.degrees()
    for b, f in zip(mb.blocks, [4, 3, 2]):
        cnt = b.sampled_deg().numpy()
        dst_ids = mb.input_nodes[:b.num_dst].numpy()
        np.testing.assert_array_equal(cnt, np.minimum(deg[dst_ids], f))
        assert b.edge_index.shape == (2, b.num_edges)
        assert b.size == (b.num_src, b.num_dst)
        assert int(b.indices.max()) < b.num_src
        np.testing.assert_array_equal(b.src_deg.numpy(), deg[mb.input_nodes[:b.num_src].numpy()])
    _edges_ok(g, mb)


def test_all_neighbours_fanout():
    g = random_graph(100, 400, seed=2)
    s = NeighborSampler(g, [-1])
    mb = s.sample(np.arange(10))
    b = mb.blocks[0]
    ids = mb.input_nodes.numpy()
    for i in range(10):
        got = sorted(ids[b.indices[b.indptr[i]:b.indptr[i + 1]].numpy()].tolist())
        assert got == sorted(g.neighbors(i).tolist())


def test_reproducible_and_key_dependent():
    g = random_graph(500, 5000, seed=3)
    seeds = np.arange(0, 500, 7)
    a = NeighborSampler(g, [5, 5], seed=1).sample(seeds, key=10)
    b = NeighborSampler(g, [5, 5], seed=1).sample(seeds, key=10)
    c = NeighborSampler(g, [5, 5], seed=1).sample(seeds, key=11)
    d = NeighborSampler(g, [5, 5], seed=2).sample(seeds, key=10)
    assert torch.equal(a.input_nodes, b.input_nodes)
    for x, y in zip(a.blocks, b.blocks):
        assert torch.equal(x.indices, y.indices) and torch.equal(x.indptr, y.indptr)
    assert not torch.equal(a.input_nodes, c.input_nodes)
    assert not torch.equal(a.input_nodes, d.input_nodes)


def test_sampler_map_is_reset_between_batches():
    g = random_graph(200, 1500, seed=4)
    s = NeighborSampler(g, [3, 3])
    first = s.sample(np.arange(10), key=0)
    s.sample(np.arange(50, 80), key=1)
    again = s.sample(np.arange(10), key=0)
    assert torch.equal(first.input_nodes, again.input_nodes)


@pytest.mark.parametrize("bad", [np.array([1, 1]), np.array([-1]), np.array([10**6]),
                                 np.array([], dtype=np.int64)])
def test_bad_seeds(bad):
    s = NeighborSampler(random_graph(50, 100), [2])
    with pytest.raises(ConfigError):
        s.sample(bad)


@pytest.mark.parametrize("text,ok", [("15,10,5", [15, 10, 5]), ("-1", [-1]), ("3, 2", [3, 2])])
def test_parse_fanouts(text, ok):
    assert parse_fanouts(text) == ok


@pytest.mark.parametrize("text", ["", "a,b", "15,,5", "0,1", "-2", "1.5"])
def test_parse_fanouts_rejects(text):
    with pytest.raises(ConfigError):
        parse_fanouts(text)


def test_random_scheduler_covers_train_set_once_per_epoch():
    train = np.random.default_rng(0).choice(1000, 333, replace=False)
    s = RandomScheduler(train, batch_size=50, seed=3)
    for epoch in range(3):
        batches = list(s.batches(epoch))
        assert len(batches) == s.num_batches == 7
        assert all(len(b) == 50 for b in batches[:-1])
        allb = np.concatenate(batches)
        assert sorted(allb.tolist()) == sorted(train.tolist())
    e0 = np.concatenate(list(s.batches(0)))
    assert np.array_equal(e0, np.concatenate(list(RandomScheduler(train, 50, seed=3).batches(0))))
    assert not np.array_equal(e0, np.concatenate(list(s.batches(1))))


def test_scheduler_errors():
    with pytest.raises(ConfigError):
        RandomScheduler(np.arange(10), batch_size=0)
    with pytest.raises(ConfigError):
        make_scheduler("nope", np.arange(10), 4)


@pytest.mark.parametrize("workers", [2, 3])
def test_batch_parallel_sampling_gives_the_same_batches(workers):
    """Several sampler threads (each a whole batch, serial kernels) yield the same batches, in
    the same order, as the calling thread alone; early close stops the workers."""
    from twopgraph.locality import RandomScheduler
    from twopgraph.sampler import sampled_batches
    g = random_graph(500, 4000, seed=3)
    sampler = NeighborSampler(g, [4, 3], seed=5)
    sched = RandomScheduler(np.arange(0, 500, 3), 16, seed=1)
    ref = [mb for mb, _ in sampled_batches(sched, sampler, 2, workers=1)]
    got = [mb for mb, _ in sampled_batches(sched, sampler, 2, workers=workers)]
    assert [m.batch_id for m in got] == list(range(sched.num_batches))
    assert sum(m.num_seeds for m in got) == 167
    for a, b in zip(ref, got):
        assert torch.equal(a.input_nodes, b.input_nodes)
        for x, y in zip(a.blocks, b.blocks):
            assert torch.equal(x.indptr, y.indptr) and torch.equal(x.indices, y.indices)
    it = sampled_batches(sched, sampler, 2, workers=workers)
    next(it)
    it.close()  # must not hang


# -- the sampling law, over many keys ----------------------------------------------------------
@pytest.mark.parametrize("graph", ["power-law", "hub"])
def test_sampling_law_inclusion_probability(graph):
    """Each neighbour of a dst vertex of degree d is taken with probability min(1, f / d), in
    every block; a seed's draws in two layers are independent (tests/oracles.py)."""
    from conftest import power_law_data
    from oracles import assert_sampling_law
    g = power_law_data(300, avg_deg=6, seed=1).graph if graph == "power-law" \
        else random_graph(200, 600, seed=5)
    assert_sampling_law(NeighborSampler(g, [4, 3], seed=7), np.flatnonzero(g.degrees() > 0)[::3])


@pytest.mark.parametrize("d,f", [(5, 2), (6, 3), (7, 4)])
def test_sampling_draws_every_subset_equally_often(d, f):
    """Among the C(d, f) possible neighbour sets of a degree-d vertex each comes with
    probability 1 / C(d, f)."""
    from oracles import assert_uniform_subsets
    assert_uniform_subsets(lambda g, fanouts: NeighborSampler(g, fanouts, seed=3), d, f)


def test_sample_without_key_draws_fresh_randomness():
    """``sample(seeds)`` without a key gives new neighbours at each call (a hand-written loop
    does not see the same neighbourhood every time); an explicit key reproduces."""
    g = random_graph(300, 3000, seed=6)
    seeds = np.arange(0, 300, 5)
    s = NeighborSampler(g, [3, 3], seed=0)
    a, b = s.sample(seeds), s.sample(seeds)
    assert not torch.equal(a.input_nodes, b.input_nodes)
    x, y = s.sample(seeds, key=17), NeighborSampler(g, [3, 3], seed=0).sample(seeds, key=17)
    assert torch.equal(x.input_nodes, y.input_nodes)
    for p, q in zip(x.blocks, y.blocks):
        assert torch.equal(p.indptr, q.indptr) and torch.equal(p.indices, q.indices)
    # the fresh draws follow the sampling law too: the hub's neighbours, min(1, f/d) each
    hub, f = 0, 3
    d = int(g.degrees()[hub])
    counts = np.zeros(g.num_nodes, dtype=np.int64)
    calls = 600
    for _ in range(calls):
        mb = s.sample(np.array([hub]))
        blk = mb.blocks[-1]
        counts[mb.input_nodes.numpy()[blk.indices.numpy()]] += 1
    p = f / d
    z = (counts[g.neighbors(hub)] - calls * p) / np.sqrt(calls * p * (1 - p))
    assert np.abs(z).max() < 5, z


def test_relabel_table_follows_the_batch_not_the_graph(monkeypatch):
    """The per-thread relabelling state grows with the batch (a hash table doubling from a
    small one), gives the same blocks whatever its size or kind (the N-sized map a thread
    switches to once the table would be larger), and on a graph of a million vertices a small
    batch keeps it far below an N-sized map (8 N bytes)."""
    from twopgraph.sampler.neighbor import NodeMap, RelabelTable
    g = random_graph(n=3000, m=30000, seed=5)
    seeds = np.arange(0, 3000, 7)
    ref = NeighborSampler(g, [5, 4, 3], seed=2).sample(seeds, key=9)
    monkeypatch.setattr(RelabelTable, "MIN_BITS", 1)  # grows many times inside one batch
    small = NeighborSampler(g, [5, 4, 3], seed=2)
    got = small.sample(seeds, key=9)
    assert isinstance(small._table(), NodeMap)  # 8 N = 24 KB < the table it grew to
    assert torch.equal(got.input_nodes, ref.input_nodes)
    for a, b in zip(got.blocks, ref.blocks):
        assert torch.equal(a.indptr, b.indptr) and torch.equal(a.indices, b.indices)
    table = RelabelTable()
    nbrs = np.random.default_rng(0).integers(0, 3000, 20000)
    local, count, frontier = table.relabel(nbrs, 0, 0)
    assert table.bits > 4
    m = NodeMap(3000)
    local2, count2, frontier2 = m.relabel(nbrs, 0, 0)
    assert count == count2 and np.array_equal(local, local2)
    assert np.array_equal(frontier[:count], frontier2[:count2])
    table.clear(count)
    assert (table.keys == -1).all()  # emptied for the next batch
    other = np.arange(1, 3000, 5)
    again = small.sample(other, key=3)  # the state was emptied after the batch
    assert torch.equal(again.input_nodes, NeighborSampler(g, [5, 4, 3], seed=2).sample(
        other, key=3).input_nodes)
    monkeypatch.undo()
    n = 1_000_000
    big = CSRGraph.from_edges(np.arange(0, 2000), np.arange(1, 2001), num_nodes=n)
    s = NeighborSampler(big, [10, 10])
    s.sample(np.arange(100))
    assert isinstance(s._table(), RelabelTable) and s._table().nbytes < 8 * n / 20


@pytest.mark.parametrize("resident", [True, False])
def test_fused_batches_equal_hop_by_hop_ones(resident, monkeypatch):
    """On a thread whose state is the N-sized map, a batch is sampled and relabelled in one
    compiled call (both readings of the rows); it equals the hop-by-hop batch of the
    parallel kernels (key by key: vertices, offsets, local ids, degrees), and an interrupted
    call leaves no map entry behind."""
    from twopgraph.sampler import batch_kernels
    from twopgraph.sampler.neighbor import NodeMap
    g = random_graph(n=2000, m=40000, seed=8, hub=True)
    fused = NeighborSampler(g, [15, 10, 5], seed=3)
    fused._resident = resident
    fused._tls.table = NodeMap(g.num_nodes)
    plain = NeighborSampler(g, [15, 10, 5], seed=3)
    rng = np.random.default_rng(1)
    for key in range(4):
        seeds = rng.permutation(2000)[:300]
        a = fused.sample(seeds, key=key, parallel=False)
        assert isinstance(fused._table(), NodeMap)
        b = plain.sample(seeds, key=key, parallel=True)
        assert torch.equal(a.input_nodes, b.input_nodes)
        for x, y in zip(a.blocks, b.blocks):
            assert x.size == y.size
            assert torch.equal(x.indptr, y.indptr) and torch.equal(x.indices, y.indices)
            assert torch.equal(x.src_deg, y.src_deg) and torch.equal(x.dst_deg, y.dst_deg)
    table = fused._table()

    def stopped(*args):
        raise KeyboardInterrupt

    # bad seeds: the same one-line errors as the hop-by-hop path, the map untouched
    for seeds, msg in (([1, 2, 1], "unique"), ([3, 2000], "out of range"),
                       ([-2, 4], "out of range")):
        for s, parallel in ((fused, False), (plain, True)):
            with pytest.raises(ConfigError, match=msg):
                s.sample(np.asarray(seeds), key=0, parallel=parallel)
        assert (table.map == -1).all() and isinstance(fused._table(), NodeMap)
    table.map[:5] = 0  # as if a kernel had stopped part-way
    monkeypatch.setattr(batch_kernels, "sample_hops_mapped", stopped)
    with pytest.raises(KeyboardInterrupt):
        fused.sample(np.arange(10), key=0, parallel=False)
    assert (table.map == -1).all()
