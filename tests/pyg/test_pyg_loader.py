"""``twopgraph.pyg.NeighborLoader``: PyG's batch convention on a directed graph with duplicate
edges and self loops -- ids, order, per-hop counts, real edges, fanout bounds, ``replace``,
masks, ``loader(ids)``, attribute slicing, ``transform``, subgraph types, workers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pyg_helpers import directed_data, reference_full

from twopgraph.errors import ConfigError
from twopgraph.pyg import NeighborLoader


def check_batch(b, data, fanouts=None, replace=False, seeds=None):
    """Every invariant of a directional batch; ``fanouts`` (PyG order) bounds each target's
    in-edges per hop; ``seeds``: the expected first ``batch_size`` nodes."""
    ei = data.edge_index
    n = b.n_id.numel()
    assert b.num_nodes == n and b.x.shape[0] == n
    assert b.edge_index.dtype == torch.long and b.e_id.dtype == torch.long
    if b.edge_index.numel():
        assert int(b.edge_index.min()) >= 0 and int(b.edge_index.max()) < n
    if seeds is not None:
        assert b.n_id[:b.batch_size].tolist() == list(seeds)
    assert b.input_id.numel() == b.batch_size
    assert sum(b.num_sampled_nodes) == n and b.num_sampled_nodes[0] == b.batch_size
    assert sum(b.num_sampled_edges) == b.e_id.numel() == b.edge_index.size(1)
    # every sampled edge is a real edge: the batch's edge_index is the graph's, relabelled
    assert torch.equal(b.n_id[b.edge_index], ei[:, b.e_id])
    # node- and edge-level attributes sliced by n_id / e_id
    for key in ("x", "y", "node_w"):
        assert torch.equal(b[key], data[key][b.n_id]), key
    for key in ("edge_attr", "edge_weight"):
        assert torch.equal(b[key], data[key][b.e_id]), key
    # hop structure: the edges of hop h point at the nodes of hop h-1 (the seeds for h = 0);
    # the nodes of hop h are the new sources of its edges, in order of first appearance
    deg = torch.bincount(ei[1], minlength=data.num_nodes)
    node_off = np.cumsum([0] + b.num_sampled_nodes)
    edge_off = np.cumsum([0] + b.num_sampled_edges)
    seen = set(b.n_id[:b.batch_size].tolist())
    for h in range(len(b.num_sampled_edges)):
        row, col = b.edge_index[:, edge_off[h]:edge_off[h + 1]]
        assert col.numel() == 0 or (int(col.min()) >= node_off[h]
                                    and int(col.max()) < node_off[h + 1])
        assert torch.all(col[1:] >= col[:-1])  # grouped by target, in node order
        new = []
        for u in b.n_id[row].tolist():
            if u not in seen:
                seen.add(u)
                new.append(u)
        assert new == b.n_id[node_off[h + 1]:node_off[h + 2]].tolist()
        if fanouts is None:
            continue
        counts = torch.bincount(col - int(node_off[h]), minlength=b.num_sampled_nodes[h])
        d = deg[b.n_id[node_off[h]:node_off[h + 1]]]
        f = fanouts[h]
        want = d if f < 0 else (torch.where(d > 0, f, 0) if replace else d.clamp(max=f))
        assert torch.equal(counts, want), h
        if not replace:  # distinct edges per target
            e = b.e_id[edge_off[h]:edge_off[h + 1]]
            pairs = set(zip(col.tolist(), e.tolist()))
            assert len(pairs) == e.numel()
    repeats = b.batch_size - len(set(b.n_id[:b.batch_size].tolist()))  # repeated seeds
    assert len(set(b.n_id.tolist())) == n - repeats


@pytest.fixture(scope="module")
def data():
    return directed_data()


def test_full_neighbourhood_matches_pyg_convention_exactly(data):
    """``num_neighbors=[-1, -1]`` is deterministic: the batch equals a plain model of PyG's
    sampling (ids, edge order, per-hop counts), duplicates and self loops kept."""
    seeds = [0, 7, 31, 9, 7, 116]  # the hub, a self-looped node, a repeat, an isolated node
    loader = NeighborLoader(data, [-1, -1], input_nodes=torch.tensor(seeds), batch_size=6)
    b = next(iter(loader))
    n_id, row, col, eid, sizes, edge_sizes = reference_full(data.edge_index, seeds, 2)
    assert b.n_id.tolist() == n_id
    assert b.edge_index.tolist() == [row, col]
    assert b.e_id.tolist() == eid
    assert b.num_sampled_nodes == sizes and b.num_sampled_edges == edge_sizes
    assert b.batch_size == 6 and b.input_id.tolist() == list(range(6))
    check_batch(b, data, [-1, -1], seeds=seeds)
    # the self loop 7->7 given twice: both copies aggregated by each copy of seed 7 (1, 4)
    loops = [(e, c) for e, c in zip(b.e_id.tolist(), b.edge_index[1].tolist())
             if data.edge_index[0, e] == data.edge_index[1, e] == 7]
    assert sorted(c for _, c in loops) == [1, 1, 4, 4] and len({e for e, _ in loops}) == 2


@pytest.mark.parametrize("fanouts", [[3, 2], [2, 0, 4], [5]])
@pytest.mark.parametrize("replace", [False, True])
def test_sampled_batches_keep_the_convention(data, fanouts, replace):
    loader = NeighborLoader(data, fanouts, batch_size=16, replace=replace, seed=1)
    batches = list(loader)
    assert len(batches) == len(loader) == -(-data.num_nodes // 16)
    starts = 0
    for b in batches:
        check_batch(b, data, fanouts, replace,
                    seeds=list(range(starts, min(starts + 16, data.num_nodes))))
        assert b.input_id.tolist() == list(range(starts, starts + b.batch_size))
        starts += b.batch_size
    assert starts == data.num_nodes


def test_replace_draws_repeats_and_without_never(data):
    hub = torch.tensor([0])  # in-degree ~38: 30 draws with replacement repeat edges
    b = NeighborLoader(data, [30], input_nodes=hub, replace=True, seed=0)(torch.tensor([0]))
    assert b.e_id.numel() == 30 and b.e_id.unique().numel() < 30
    b = NeighborLoader(data, [30], input_nodes=hub, replace=False, seed=0)(torch.tensor([0]))
    assert b.e_id.numel() == 30 and b.e_id.unique().numel() == 30


def test_seeds_first_in_input_order_index_and_mask(data):
    idx = torch.tensor([50, 3, 77, 0, 12, 8])
    b = next(iter(NeighborLoader(data, [2, 2], input_nodes=idx, batch_size=4)))
    check_batch(b, data, [2, 2], seeds=[50, 3, 77, 0])
    assert b.input_id.tolist() == [0, 1, 2, 3]  # positions in input_nodes (PyG)
    mask = torch.zeros(data.num_nodes, dtype=torch.bool)
    mask[idx] = True
    batches = list(NeighborLoader(data, [2, 2], input_nodes=mask, batch_size=4))
    assert [b.n_id[:b.batch_size].tolist() for b in batches] == [[0, 3, 8, 12], [50, 77]]
    # PyG: with a mask, input_id holds the node ids themselves
    assert [b.input_id.tolist() for b in batches] == [[0, 3, 8, 12], [50, 77]]
    loader = NeighborLoader(data, [2], input_nodes=None, batch_size=50, drop_last=True)
    assert len(loader) == 2 and all(b.batch_size == 50 for b in loader)


def test_call_returns_the_batch_of_those_positions(data):
    idx = torch.tensor([40, 41, 42, 43, 44])
    loader = NeighborLoader(data, [3, 3], input_nodes=idx, batch_size=2)
    b = loader(torch.tensor([4, 1]))
    check_batch(b, data, [3, 3], seeds=[44, 41])
    assert b.input_id.tolist() == [4, 1] and b.batch_size == 2
    assert loader([0]).n_id[0].item() == 40
    with pytest.raises(IndexError):
        loader([5])


def test_transform_and_transform_sampler_output(data):
    seen = []

    def mark(batch):
        batch.marked = True
        return batch

    def spy(out):
        seen.append(out.node.numel())
        return out

    loader = NeighborLoader(data, [2], batch_size=30, transform=mark,
                            transform_sampler_output=spy)
    batches = list(loader)
    assert all(b.marked for b in batches) and seen == [b.num_nodes for b in batches]


def test_same_seed_same_batches_whatever_the_workers(data):
    def run(workers, filt):
        loader = NeighborLoader(data, [4, 3], batch_size=20, shuffle=True, seed=5,
                                num_workers=workers, filter_per_worker=filt)
        return [(b.n_id.tolist(), b.e_id.tolist()) for b in loader]

    ref = run(0, None)
    assert len(ref) == 6 and run(2, True) == ref and run(3, False) == ref
    # shuffled: every node once as a seed per epoch; a second epoch differs
    loader = NeighborLoader(data, [4, 3], batch_size=20, shuffle=True, seed=5)
    first = [b.n_id[:b.batch_size].tolist() for b in loader]
    second = [b.n_id[:b.batch_size].tolist() for b in loader]
    assert sorted(sum(first, [])) == list(range(data.num_nodes)) and first != second
    loader.set_epoch(0)  # as DistributedSampler: the same epoch again, pass after pass
    again = [[b.n_id.tolist() for b in loader] for _ in range(2)]
    assert again[0] == again[1] and [n[:20] for n in again[0]] == first


def test_torch_manual_seed_makes_batches_reproducible(data):
    def run():
        torch.manual_seed(3)
        return [b.e_id.tolist() for b in NeighborLoader(data, [3], batch_size=40, shuffle=True)]
    assert run() == run()


def test_bidirectional_and_induced(data):
    seeds = torch.tensor([0, 7, 31])
    b = NeighborLoader(data, [3, 2], input_nodes=seeds, batch_size=3, seed=2,
                       subgraph_type="bidirectional")(torch.arange(3))
    d = NeighborLoader(data, [3, 2], input_nodes=seeds, batch_size=3, seed=2)(torch.arange(3))
    assert torch.equal(b.n_id, d.n_id) and "num_sampled_nodes" not in b  # as PyG
    pairs = set(map(tuple, b.edge_index.t().tolist()))
    assert all((j, i) in pairs for i, j in pairs)  # every edge both ways
    assert set(map(tuple, d.edge_index.t().tolist())) <= pairs
    # a reversed edge carries the id (and attributes) of the sampled edge it reverses
    ends = b.n_id[b.edge_index]
    fwd = data.edge_index[:, b.e_id]
    assert torch.all((ends == fwd).all(0) | (ends == fwd.flip(0)).all(0))
    assert torch.equal(b.edge_attr, data.edge_attr[b.e_id])
    # induced: the same nodes, every graph edge between them (duplicates included)
    c = NeighborLoader(data, [3, 2], input_nodes=seeds, batch_size=3, seed=2,
                       subgraph_type="induced")(torch.arange(3))
    assert torch.equal(c.n_id, d.n_id) and "num_sampled_edges" not in c
    inside = torch.isin(data.edge_index, c.n_id).all(0)
    assert sorted(c.e_id.tolist()) == torch.nonzero(inside).view(-1).tolist()
    assert torch.equal(c.n_id[c.edge_index], data.edge_index[:, c.e_id])
    with pytest.warns(UserWarning, match="deprecated"):
        old = NeighborLoader(data, [3, 2], input_nodes=seeds, batch_size=3, seed=2,
                             directed=False)
    assert old.subgraph_type == "induced"


def test_memmap_features(data, tmp_path):
    from torch_geometric.data import Data
    x = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=np.float32,
                                  shape=tuple(data.x.shape))
    x[:] = data.x.numpy()
    x.flush()
    x = np.load(tmp_path / "x.npy", mmap_mode="r")
    mm = Data(x=x, edge_index=data.edge_index, y=data.y)
    b = next(iter(NeighborLoader(mm, [3, 3], batch_size=10, num_workers=1)))
    assert isinstance(b.x, torch.Tensor) and torch.equal(b.x, data.x[b.n_id])


def test_refusals(data):
    from torch_geometric.data import HeteroData
    with pytest.raises(NotImplementedError, match="homogeneous"):
        NeighborLoader(HeteroData(), [2])
    for kw in ({"time_attr": "t"}, {"disjoint": True}, {"weight_attr": "edge_weight"},
               {"worker_init_fn": print}):
        with pytest.raises(NotImplementedError):
            NeighborLoader(data, [2], **kw)
    with pytest.raises(TypeError, match="unexpected"):
        NeighborLoader(data, [2], batch_sise=3)
    for bad in ([-2], [], {"a": [1]}):
        with pytest.raises(ConfigError):
            NeighborLoader(data, bad)
    with pytest.raises(ConfigError, match="subgraph_type"):
        NeighborLoader(data, [2], subgraph_type="sideways")
    with pytest.raises(ConfigError, match="out of range"):
        NeighborLoader(data, [2], input_nodes=torch.tensor([data.num_nodes]))
    with pytest.raises(ConfigError, match="sampler must be one of"):
        NeighborLoader(data, [2], sampler="gibbs")
    with pytest.raises(ConfigError, match="LABOR"):
        NeighborLoader(data, [2], sampler="labor", replace=True)
    # ignored DataLoader keywords are accepted
    assert len(NeighborLoader(data, [2], batch_size=60, pin_memory=False,
                              persistent_workers=False)) == 2


def test_is_sorted_skips_the_sort_and_is_checked(data):
    from torch_geometric.data import Data
    perm = torch.sort(data.edge_index[1], stable=True).indices
    s = Data(x=data.x, edge_index=data.edge_index[:, perm], edge_attr=data.edge_attr[perm])
    a = NeighborLoader(s, [-1, -1], batch_size=8, is_sorted=True)
    b = NeighborLoader(s, [-1, -1], batch_size=8)
    for x, y in zip(a, b):
        assert torch.equal(x.e_id, y.e_id) and torch.equal(x.edge_index, y.edge_index)
    with pytest.raises(ValueError, match="not sorted"):
        NeighborLoader(data, [2], is_sorted=True)


def test_labor_keeps_the_convention_and_shares_neighbours():
    """LABOR-0: real edges, hop structure, distinct in-edges per target, ``fanout`` kept per
    target in expectation; targets share their neighbours, so a batch holds fewer nodes than
    uniform sampling at the same fanouts."""
    data = directed_data(n=300, m=9000, seed=7)  # in-degree ~30
    kw = dict(batch_size=25, seed=4)
    labor = NeighborLoader(data, [6, 6], sampler="labor", **kw)
    uniform = NeighborLoader(data, [6, 6], **kw)
    kept, nodes = [], [0, 0]
    for b, u in zip(labor, uniform):
        check_batch(b, data)  # no fanout bound: LABOR keeps it in expectation only
        ei = b.edge_index[:, :b.num_sampled_edges[0]]
        counts = torch.bincount(ei[1], minlength=b.batch_size)
        deg = torch.bincount(data.edge_index[1], minlength=data.num_nodes)[b.n_id[:25]]
        assert torch.all(counts <= deg)
        assert torch.equal(counts[deg <= 6], deg[deg <= 6])  # small rows: every in-edge
        kept += counts[deg > 6].tolist()
        pairs = set(zip(ei[1].tolist(), b.e_id[:ei.size(1)].tolist()))
        assert len(pairs) == ei.size(1)
        nodes[0] += b.num_nodes
        nodes[1] += u.num_nodes
    assert 5.0 < float(np.mean(kept)) < 7.0, np.mean(kept)
    assert nodes[0] < 0.9 * nodes[1], nodes
    full = NeighborLoader(data, [-1, 0], sampler="labor", **kw)(torch.arange(25))
    ref = NeighborLoader(data, [-1, 0], **kw)(torch.arange(25))
    assert torch.equal(full.e_id, ref.e_id) and full.num_sampled_edges == [ref.e_id.numel(), 0]
