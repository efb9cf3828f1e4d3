"""The public interface of ``twopgraph.sampler``: a sampler built by name expands seeds into
blocks whose local ids are in range, seeds first, each edge a real edge; an epoch of batches
is the same on one worker or two."""

from __future__ import annotations

import numpy as np
import torch
from conftest import random_graph

import twopgraph.sampler as pkg
from twopgraph.config import TrainConfig
from twopgraph.sampler import (
    SAMPLERS,
    Block,
    MiniBatch,
    NeighborSampler,
    make_sampler,
    parse_fanouts,
    sampled_batches,
    sampler_options,
)


class Fixed:
    """A scheduler of three given batches, the same every epoch."""

    num_batches = 3

    def batches(self, epoch):
        return iter([np.array([3, 1, 4]), np.array([10, 0]), np.array([50])])


def test_every_public_name_imports():
    for n in pkg.__all__:
        getattr(pkg, n)


def test_blocks_of_a_sampled_batch():
    g = random_graph(120, 600, seed=1)
    s = make_sampler("neighbor", g, parse_fanouts("4,3"), seed=2)
    assert isinstance(s, NeighborSampler) and {"neighbor", "labor"} <= set(SAMPLERS.names())
    seeds = np.array([17, 0, 5])
    mb = s.sample(seeds, key=9)
    assert isinstance(mb, MiniBatch) and all(isinstance(b, Block) for b in mb.blocks)
    ids = mb.input_nodes.numpy()
    assert ids[:3].tolist() == [17, 0, 5] and len(set(ids.tolist())) == len(ids)
    assert mb.blocks[0].num_src == len(ids) and mb.blocks[-1].num_dst == 3
    assert mb.blocks[0].num_dst == mb.blocks[1].num_src
    deg = g.degrees()
    for b, fanout in zip(mb.blocks, [4, 3]):  # input layer first
        assert int(b.indices.max()) < b.num_src and b.indptr[-1] == b.num_edges
        dst = ids[:b.num_dst]
        assert b.sampled_deg().tolist() == np.minimum(deg[dst], fanout).tolist()
        src, d = b.edge_index.numpy()
        assert all(ids[u] in g.neighbors(ids[v]) for u, v in zip(src, d))
        assert b.src_deg.tolist() == deg[ids[:b.num_src]].tolist()
    again = s.sample(seeds, key=9)
    assert torch.equal(again.input_nodes, mb.input_nodes)
    full = s.full_block(5, 8)  # every in-edge of vertices 5..7, global ids
    assert full.indices.tolist() == g.indices[g.indptr[5]:g.indptr[8]].tolist()


def test_an_epoch_is_the_same_on_any_number_of_workers():
    g = random_graph(120, 600, seed=1)
    s = NeighborSampler(g, [3, 3], seed=0)
    one = [mb for mb, _ in sampled_batches(Fixed(), s, epoch=1)]
    two = [mb for mb, _ in sampled_batches(Fixed(), s, epoch=1, workers=2)]
    assert [mb.batch_id for mb in two] == [0, 1, 2]
    assert [mb.seeds.tolist() for mb in one] == [[3, 1, 4], [10, 0], [50]]
    for a, b in zip(one, two):
        assert torch.equal(a.input_nodes, b.input_nodes)
    other = [mb for mb, _ in sampled_batches(Fixed(), s, epoch=2)]
    assert any(not torch.equal(a.input_nodes, b.input_nodes) for a, b in zip(one, other))
    section = TrainConfig.of(labor_iterations=2).sampling
    assert sampler_options("neighbor", section) == {}
    assert sampler_options("labor", section)["iterations"] == 2
