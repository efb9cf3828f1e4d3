"""twopgraph's extras on ``twopgraph.pyg.NeighborLoader``: locality schedules (METIS clusters,
``auto``), the split of an epoch's batches between the ranks of a distributed run, a torch
``Sampler`` of positions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from twopgraph.errors import ConfigError
from twopgraph.pyg import NeighborLoader

pyg_data = pytest.importorskip("torch_geometric.data")


def cliques(k: int = 40, size: int = 10) -> "pyg_data.Data":
    """``k`` disjoint directed cliques of ``size`` nodes, numbered so that a clique's nodes
    are spread over the id range (a random batch touches many cliques)."""
    ids = np.random.default_rng(1234).permutation(k * size).reshape(k, size)
    src, dst = [], []
    for c in ids:
        for u in c:
            for v in c:
                if u != v:
                    src.append(u)
                    dst.append(v)
    n = k * size
    y = torch.zeros(n, dtype=torch.long)
    for j, c in enumerate(ids):
        y[torch.from_numpy(c)] = j % 3
    return pyg_data.Data(x=torch.randn(n, 4), y=y, edge_index=torch.tensor([src, dst]))


def nodes_per_batch(loader) -> float:
    return float(np.mean([b.num_nodes for b in loader]))


def seeds_of(loader) -> list[list[int]]:
    return [b.n_id[:b.batch_size].tolist() for b in loader]


def test_locality_schedule_batches_whole_clusters():
    data = cliques()
    kw = dict(batch_size=20, seed=0)
    loc = NeighborLoader(data, [3, 3], schedule="locality", num_clusters=40, **kw)
    rnd = NeighborLoader(data, [3, 3], schedule="random", **kw)
    for loader in (loc, rnd):  # each epoch: every node once as a seed
        epoch = seeds_of(loader)
        assert len(epoch) == len(loader) == 20
        assert sorted(sum(epoch, [])) == list(range(data.num_nodes))
        for b in loader:
            assert torch.equal(b.n_id[b.edge_index], data.edge_index[:, b.e_id])
    # METIS finds the cliques: a locality batch is two cliques, a random one reaches many
    assert nodes_per_batch(loc) <= 20.0 < 0.5 * nodes_per_batch(rnd)
    assert seeds_of(loc) != seeds_of(loc)  # a new order every epoch
    # the clusters may be given: no clustering
    given = NeighborLoader(data, [3, 3], schedule="locality",
                           parts=np.asarray(_clique_ids(data)), **kw)
    assert nodes_per_batch(given) <= 20.0


def _clique_ids(data) -> list[int]:
    """The clique of every node of :func:`cliques` (its smallest in-neighbour or itself)."""
    smallest = torch.arange(data.num_nodes).scatter_reduce(
        0, data.edge_index[1], data.edge_index[0], reduce="amin")
    return smallest.tolist()


def test_auto_schedule_decides_and_says_why():
    data = cliques()
    loader = NeighborLoader(data, [3, 3], batch_size=20, seed=0, schedule="auto")
    assert loader.schedule_choice is not None
    assert loader.schedule == loader.schedule_choice.schedule == "locality"
    assert loader.schedule_choice.ratio < 0.6
    assert sorted(sum(seeds_of(loader), [])) == list(range(data.num_nodes))
    with pytest.raises(ConfigError, match="schedule"):
        NeighborLoader(data, [3], schedule="fifo")


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("schedule", [None, "locality"])
def test_ranks_split_the_epoch(schedule, drop_last):
    data = cliques()
    kw = dict(batch_size=30, seed=3, shuffle=True, drop_last=drop_last, schedule=schedule,
              num_clusters=40 if schedule else 0)
    single = seeds_of(NeighborLoader(data, [2], **kw))  # 14 batches (13 with drop_last)
    ranks = [NeighborLoader(data, [2], rank=r, world_size=3, **kw) for r in range(3)]
    lens = {len(loader) for loader in ranks}
    want = len(single) // 3 if drop_last else -(-len(single) // 3)
    assert lens == {want}
    got = [seeds_of(loader) for loader in ranks]
    assert all(len(g) == want for g in got)
    # batch b of the single-process epoch goes to rank b % 3; the shortfall repeats batches
    for r, g in enumerate(got):
        assert g == [single[(r + 3 * i) % len(single)] for i in range(want)]
    covered = {tuple(b) for g in got for b in g}
    assert len(covered) == min(len(single), 3 * want)


def test_rank_defaults_come_from_torch_distributed(monkeypatch):
    data = cliques()
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda: 1)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 4)
    loader = NeighborLoader(data, [2], batch_size=50)  # 8 batches: 2 per rank
    assert (loader.rank, loader.world_size, loader.seed, len(loader)) == (1, 4, 0, 2)
    assert seeds_of(loader) == [list(range(50, 100)), list(range(250, 300))]
    with pytest.raises(ConfigError, match="rank"):
        NeighborLoader(data, [2], rank=4, world_size=4)


def test_a_torch_sampler_of_positions():
    data = cliques()
    idx = torch.arange(100, 200)
    order = torch.arange(99, -1, -1)
    loader = NeighborLoader(data, [2], input_nodes=idx, batch_size=40, sampler=order.tolist())
    assert seeds_of(loader) == [list(range(199, 159, -1)), list(range(159, 119, -1)),
                                list(range(119, 99, -1))]
    with pytest.raises(ConfigError, match="shuffle"):
        NeighborLoader(data, [2], sampler=order.tolist(), shuffle=True)
    sub = torch.utils.data.SubsetRandomSampler(list(range(10)))
    assert sorted(sum(seeds_of(NeighborLoader(data, [2], input_nodes=idx, batch_size=4,
                                              sampler=sub)), [])) == list(range(100, 110))


def label_blocks(n: int = 65536, blocks: int = 64, reach: int = 4) -> "pyg_data.Data":
    """A ring lattice (each node linked to the ``reach`` nodes on either side) whose labels
    are ``blocks`` runs of consecutive nodes: METIS clusters are runs of nodes, each of one
    label, so a batch of few clusters sees few labels."""
    src = np.repeat(np.arange(n), 2 * reach)
    off = np.tile(np.r_[np.arange(-reach, 0), np.arange(1, reach + 1)], n)
    dst = (src + off) % n
    y = torch.from_numpy(np.arange(n) * blocks // n)
    return pyg_data.Data(x=torch.randn(n, 2), y=y,
                         edge_index=torch.from_numpy(np.stack([src, dst])))


def test_auto_chooses_clusters_that_keep_labels_mixed(caplog):
    """As ``twopgraph train``: under ``auto`` with no cluster count, 14 clusters per batch
    here give batches of ~14 of 64 labels (skew above the threshold); more clusters per batch
    are tried until one passes, and the decision is measured on those."""
    from twopgraph.locality.auto import LABEL_SKEW_THRESHOLD
    data = label_blocks()
    seeds = torch.arange(0, data.num_nodes, 8)  # 8192 seeds, 64 batches of 128
    with caplog.at_level("INFO", logger="twopgraph"):
        loader = NeighborLoader(data, [4, 4], batch_size=128, seed=0, schedule="auto",
                                input_nodes=seeds)
    tried = loader.clusters_tried
    assert tried is not None and len(tried) >= 2, tried
    assert tried[0]["clusters_per_batch"] == 14 and tried[0]["label_skew"] > LABEL_SKEW_THRESHOLD
    assert tried[-1]["label_skew"] <= LABEL_SKEW_THRESHOLD
    assert any("per batch -> label skew" in r.getMessage() for r in caplog.records)
    choice = loader.schedule_choice  # measured on the clusters kept
    assert choice.basis == "clusters" and loader.schedule == choice.schedule
    assert choice.label_skew == pytest.approx(tried[-1]["label_skew"])
    assert sorted(sum(seeds_of(loader), [])) == seeds.tolist()
    # a cluster count given: nothing tried
    fixed = NeighborLoader(data, [2], batch_size=128, seed=0, schedule="auto",
                           input_nodes=seeds, num_clusters=512)
    assert fixed.clusters_tried is None
