"""Unmodified PyG models on ``twopgraph.pyg.NeighborLoader`` batches: full-neighbourhood
batches give the full-graph output of their seeds, PyG's documented training loop trains
GraphSAGE, GCN and GAT, and GraphSAGE learns cora; where PyG can sample (pyg-lib or
torch-sparse), its own loader's batches agree with ours."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import community_data, shared_dataset
from pyg_helpers import directed_data, from_graphdata

from twopgraph.pyg import NeighborLoader

models = pytest.importorskip("torch_geometric.nn.models")


@pytest.mark.parametrize("make", [
    lambda f: models.GraphSAGE(f, 16, num_layers=2, out_channels=5),
    lambda f: models.GAT(f, 8, num_layers=2, out_channels=5, heads=2),
], ids=["GraphSAGE", "GAT"])
def test_full_neighbourhood_batch_gives_the_full_graph_output(make):
    data = directed_data(n=150, m=900, seed=3)
    torch.manual_seed(0)
    model = make(data.num_features).eval()
    with torch.no_grad():
        full = model(data.x, data.edge_index)
        seeds = torch.tensor([0, 7, 9, 33, 148, 60, 61, 2])  # hub, self loops, isolated
        loader = NeighborLoader(data, [-1, -1], input_nodes=seeds, batch_size=3)
        got = []
        for b in loader:
            out = model(b.x, b.edge_index)[:b.batch_size]
            got.append(out)
        torch.testing.assert_close(torch.cat(got), full[seeds], atol=1e-5, rtol=0)
        # a sampled batch is not the full graph: its output differs somewhere
        b = NeighborLoader(data, [1, 1], input_nodes=seeds, batch_size=8, seed=0)([0])
        assert b.num_nodes < 150


@pytest.mark.parametrize("name", ["GraphSAGE", "GCN", "GAT"])
def test_pyg_training_loop_lowers_the_loss(name):
    data = from_graphdata(community_data(n=400))  # labels = communities: homophilous
    torch.manual_seed(0)
    model = getattr(models, name)(data.num_features, 16, num_layers=2, out_channels=4)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    loader = NeighborLoader(data, [5, 5], batch_size=32, shuffle=True, num_workers=1)
    losses = []
    for _ in range(3):
        total = 0.0
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
            total += loss.item() * batch.batch_size
        losses.append(total / data.num_nodes)
    assert losses[-1] < 0.7 * losses[0], losses


@pytest.mark.parametrize("extra", [{}, {"sampler": "labor", "schedule": "locality"}],
                         ids=["pyg-defaults", "labor-locality"])
def test_graphsage_learns_cora_in_two_epochs(extra):
    data = from_graphdata(shared_dataset("cora"))
    torch.manual_seed(0)
    model = models.GraphSAGE(data.num_features, 64, num_layers=2,
                             out_channels=int(data.y.max()) + 1, dropout=0.5)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    train = NeighborLoader(data, [10, 10], input_nodes=data.train_mask, batch_size=32,
                           shuffle=True, num_workers=2, **extra)
    for _ in range(2):
        model.train()
        for batch in train:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            opt.step()
    model.eval()
    test = NeighborLoader(data, [-1, -1], input_nodes=data.test_mask, batch_size=512)
    correct = total = 0
    with torch.no_grad():
        for batch in test:
            pred = model(batch.x, batch.edge_index)[:batch.batch_size].argmax(-1)
            correct += int((pred == batch.y[:batch.batch_size]).sum())
            total += batch.batch_size
    assert total == int(data.test_mask.sum())
    print(f"cora test accuracy {correct / total:.3f} ({extra})")
    assert correct / total > 0.7, correct / total  # 2-layer SAGE on cora: ~0.8


def _pyg_can_sample() -> bool:
    import torch_geometric.typing as t
    return bool(t.WITH_PYG_LIB or t.WITH_TORCH_SPARSE)


@pytest.mark.skipif(not _pyg_can_sample(), reason="PyG's loader needs pyg-lib or torch-sparse")
@pytest.mark.parametrize("fanouts", [[-1, -1], [3, 2]])
def test_agrees_with_pyg_own_loader(fanouts):
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader as PygLoader
    data = directed_data(n=150, m=900, seed=5)
    # sorted by target (stably) and is_sorted: both loaders see the same CSC order
    perm = torch.sort(data.edge_index[1], stable=True).indices
    data = Data(x=data.x, edge_index=data.edge_index[:, perm], edge_attr=data.edge_attr[perm])
    seeds = torch.tensor([0, 7, 31, 9, 140, 3])
    kw = dict(input_nodes=seeds, batch_size=6, is_sorted=True)
    ours = NeighborLoader(data, fanouts, **kw)(torch.arange(6))
    theirs = PygLoader(data, fanouts, **kw)(torch.arange(6))
    assert ours.batch_size == theirs.batch_size
    assert torch.equal(ours.input_id, theirs.input_id)
    assert ours.n_id[:6].tolist() == theirs.n_id[:6].tolist()
    for b in (ours, theirs):  # both: real edges, attributes by e_id
        assert torch.equal(b.n_id[b.edge_index], data.edge_index[:, b.e_id])
        assert torch.equal(b.edge_attr, data.edge_attr[b.e_id])
    if theirs.get("num_sampled_nodes") is not None:
        assert len(ours.num_sampled_nodes) == len(theirs.num_sampled_nodes)
        assert ours.num_sampled_nodes[0] == theirs.num_sampled_nodes[0]
    if fanouts == [-1, -1]:  # deterministic: the same batch, id for id
        assert ours.n_id.tolist() == theirs.n_id.tolist()
        assert ours.edge_index.tolist() == theirs.edge_index.tolist()
        assert ours.e_id.tolist() == theirs.e_id.tolist()
        if theirs.get("num_sampled_nodes") is not None:
            assert ours.num_sampled_nodes == list(theirs.num_sampled_nodes)
            assert ours.num_sampled_edges == list(theirs.num_sampled_edges)
    else:  # per target at most its fanout in both
        for b in (ours, theirs):
            assert int(torch.bincount(b.edge_index[1]).max()) <= max(fanouts)
