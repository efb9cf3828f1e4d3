"""The Python API: ``GraphData.from_scipy`` / ``from_pyg`` / ``from_dgl``, ``NodeLoader``, the
README's "Python API" example, and hand-written (and PyG) models trained on ``NodeLoader``
batches to the accuracy of ``twopgraph train``."""

from __future__ import annotations

import contextlib
import io
import re
import time
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from conftest import community_data, shared_dataset

from twopgraph.config import TrainConfig
from twopgraph.errors import ConfigError, GraphFormatError
from twopgraph.graph.data import CSRGraph, GraphData
from twopgraph.pipeline.nodeloader import NodeLoader

README = Path(__file__).resolve().parents[1] / "README.md"


def edges_of(g: CSRGraph) -> set:
    src = np.repeat(np.arange(g.num_nodes), g.degrees())
    return set(zip(src.tolist(), g.indices.tolist()))


# -- the README example ---------------------------------------------------------------------------
def readme_example() -> str:
    m = re.search(r"<!-- api-example -->\n```python\n(.*?)```", README.read_text(), re.S)
    assert m, "README.md has no python block after <!-- api-example -->"
    return m.group(1)


def test_readme_api_example_runs(tmp_path, monkeypatch):
    """The README's Python API block, as a user runs it: it trains to a useful accuracy and
    writes nothing into the working directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TWOPGRAPH_DATA", raising=False)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(readme_example(), str(README), "exec"), {"__name__": "__main__"})
    m = re.search(r"test accuracy (\d\.\d+)", out.getvalue())
    assert m, out.getvalue()
    assert float(m.group(1)) >= 0.7
    assert list(tmp_path.iterdir()) == []


# -- GraphData.from_scipy / from_pyg / from_dgl ------------------------------------------------------
def test_from_scipy_makes_the_graph_undirected_and_converts_dtypes():
    # 0->1 twice, 1->0, 2->2 (self loop), 3->1 (one direction only); an explicit zero 0->3
    adj = sp.coo_array((np.array([1.0, 1.0, 2.0, 1.0, 1.0, 0.0]),
                        (np.array([0, 0, 1, 2, 3, 0]), np.array([1, 1, 0, 2, 1, 3]))),
                       shape=(4, 4))
    feat = np.arange(8, dtype=np.float64).reshape(4, 2)
    label = np.array([0, 1, 1, 0], dtype=np.int32)
    d = GraphData.from_scipy(adj.tocsr(), feat, label, train_idx=[0, 1],
                             val_idx=np.array([False, False, True, False]), test_idx=[3],
                             name="tiny")
    assert edges_of(d.graph) == {(0, 1), (1, 0), (1, 3), (3, 1)}
    assert d.feat.dtype == np.float32 and np.array_equal(d.feat, feat.astype(np.float32))
    assert d.label.dtype == np.int64 and d.num_classes == 2 and d.name == "tiny"
    assert d.train_idx.tolist() == [0, 1] and d.val_idx.tolist() == [2]
    assert d.test_idx.tolist() == [3]
    assert d.graph.undirected_problem() is None
    dense = GraphData.from_scipy(adj.toarray(), feat, label, train_idx=[0, 1])
    assert edges_of(dense.graph) == edges_of(d.graph) and dense.val_idx.shape == (0,)


def test_from_scipy_default_split_is_seeded_60_20_20_of_labelled_vertices():
    n = 1000
    adj = sp.random(n, n, density=0.01, random_state=0, format="csr")
    label = np.arange(n) % 5
    label[::10] = -1  # 100 unlabelled vertices: in no split
    d = GraphData.from_scipy(adj, torch.randn(n, 3), torch.from_numpy(label))
    sizes = [d.train_idx.shape[0], d.val_idx.shape[0], d.test_idx.shape[0]]
    assert sizes == [540, 180, 180]
    split = np.concatenate([d.train_idx, d.val_idx, d.test_idx])
    assert np.array_equal(np.sort(split), np.flatnonzero(label >= 0))
    again = GraphData.from_scipy(adj, np.ones((n, 3)), label)
    assert np.array_equal(again.train_idx, d.train_idx)
    other = GraphData.from_scipy(adj, np.ones((n, 3)), label, split_seed=1)
    assert not np.array_equal(other.train_idx, d.train_idx)


@pytest.mark.parametrize("args,match", [
    (dict(adj=sp.random(4, 5, density=0.5, random_state=0)), "square N x N"),
    (dict(label=np.array([0.0, 1.0, 1.0, 0.0])), "label must"),
    (dict(feat=np.full((4, 2), np.nan)), "NaN"),
    (dict(val_idx=[1, 2]), "train_idx is missing"),
    (dict(train_idx=[0, 1], test_idx=[1, 2]), "overlaps"),
    (dict(train_idx=np.ones((4, 2), dtype=bool)), "one column per split"),
])
def test_from_scipy_refuses_in_one_line(args, match):
    kw = dict(adj=sp.eye(4, k=1, format="csr"), feat=np.ones((4, 2)), label=[0, 1, 1, 0])
    kw.update(args)
    with pytest.raises(GraphFormatError, match=match) as err:
        GraphData.from_scipy(kw.pop("adj"), kw.pop("feat"), kw.pop("label"), **kw)
    assert "\n" not in str(err.value)


def test_from_pyg():
    pyg = pytest.importorskip("torch_geometric")
    n = 6
    ei = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])

    def mask(ids):
        return torch.isin(torch.arange(n), torch.tensor(ids))

    data = pyg.data.Data(x=torch.rand(n, 3, dtype=torch.float64), edge_index=ei,
                         y=torch.tensor([0, 1, 0, 1, 0, 2], dtype=torch.int32),
                         train_mask=mask([0, 1, 2]), val_mask=mask([3]), test_mask=mask([4, 5]))
    d = GraphData.from_pyg(data, name="pyg")
    assert d.num_nodes == n and d.graph.num_edges == 10 and d.num_classes == 3
    assert d.feat.dtype == np.float32 and d.label.dtype == np.int64
    assert (d.train_idx.tolist(), d.val_idx.tolist(), d.test_idx.tolist()) == \
        ([0, 1, 2], [3], [4, 5])
    del data.train_mask, data.val_mask, data.test_mask
    assert GraphData.from_pyg(data).train_idx.shape[0] == 4  # 60/20/20 of 6


class FakeDGLGraph:
    """What from_dgl reads of a DGL graph (dgl itself is not needed)."""

    def __init__(self, src, dst, n, ndata):
        self.src, self.dst, self.n, self.ndata, self.ntypes = src, dst, n, ndata, ["_N"]

    def num_nodes(self):
        return self.n

    def edges(self):
        return self.src, self.dst


def test_from_dgl_duck_typed():
    n = 5
    ndata = {"h": torch.rand(n, 2), "y": torch.tensor([0, 1, 1, 0, 1]),
             "train_mask": torch.tensor([True, True, False, False, False]),
             "val_mask": torch.tensor([False, False, True, False, False]),
             "test_mask": torch.tensor([False, False, False, True, True])}
    g = FakeDGLGraph(torch.tensor([0, 1, 2, 3]), torch.tensor([1, 2, 3, 4]), n, ndata)
    d = GraphData.from_dgl(g, feat_key="h", label_key="y")
    assert d.graph.num_edges == 8 and d.train_idx.tolist() == [0, 1]
    assert d.test_idx.tolist() == [3, 4]
    with pytest.raises(GraphFormatError, match=r"no ndata\['feat'\]"):
        GraphData.from_dgl(g)
    g.ntypes = ["a", "b"]
    with pytest.raises(GraphFormatError, match="homogeneous"):
        GraphData.from_dgl(g, feat_key="h", label_key="y")


def test_train_on_int32_labels_and_float64_features(tmp_path):
    """The issue's example: int32 labels and float64 features through train(TrainConfig,
    data), on the path that does not renumber (renumbering copied the arrays, which hid the
    problem): converted at construction and trained; an int32 label array assigned after
    construction is refused in one line before training starts."""
    from twopgraph.run.train import train
    c = community_data()
    d = GraphData(c.graph, c.feat.astype(np.float64), c.label.astype(np.int32), c.train_idx,
                  c.val_idx, c.test_idx)
    cfg = dict(epochs=2, schedule="random", renumber=False, fanouts=[5, 5], batch_size=64,
               hidden=16, lr=0.01, device="cpu", progress=False, data_root=str(tmp_path))
    res = train(TrainConfig.of(out=str(tmp_path / "a"), **cfg), d)
    assert res.test_acc > 0.5
    d.label = c.label.astype(np.int32)
    with pytest.raises(GraphFormatError, match="label must be int64.*assigned after") as err:
        train(TrainConfig.of(out=str(tmp_path / "b"), **cfg), d)
    assert "\n" not in str(err.value)


# -- NodeLoader -------------------------------------------------------------------------------------
@pytest.fixture
def cdata():
    return community_data()


def test_nodeloader_epochs_and_batches(cdata):
    loader = NodeLoader(cdata, fanouts=[5, 3], batch_size=64, prefetch=2)
    assert len(loader) == -(-cdata.train_idx.shape[0] // 64) and loader.epoch == 0
    orders = []
    for e in range(2):
        batches = list(loader)
        assert loader.epoch == e + 1 and len(batches) == len(loader)
        seeds = np.concatenate([mb.seeds.numpy() for mb in batches])
        assert np.array_equal(np.sort(seeds), cdata.train_idx)
        orders.append(seeds)
        for mb in batches:
            assert mb.features.dtype == torch.float32 and len(mb.blocks) == 2
            assert torch.equal(mb.features, torch.from_numpy(cdata.feat[mb.input_nodes.numpy()]))
            assert torch.equal(mb.labels, torch.from_numpy(cdata.label[mb.seeds.numpy()]))
            assert torch.equal(mb.input_nodes[:mb.num_seeds], mb.seeds)
            last = mb.blocks[-1]
            assert last.size[1] == mb.num_seeds and last.edge_index.shape[0] == 2
    assert not np.array_equal(orders[0], orders[1])  # a fresh shuffle every epoch
    assert loader.stats.num_batches == len(loader)
    loader.epoch = 0  # replay: the same seeds as the first pass
    assert np.array_equal(np.concatenate([mb.seeds.numpy() for mb in loader]), orders[0])


def test_nodeloader_splits_and_order(cdata):
    test = NodeLoader(cdata, fanouts=[-1], batch_size=50, split="test")
    assert not test.shuffle
    seeds = [np.concatenate([mb.seeds.numpy() for mb in test]) for _ in range(2)]
    assert np.array_equal(seeds[0], cdata.test_idx) and np.array_equal(seeds[1], seeds[0])
    ids = np.array([7, 3, 500, 42])
    mine = NodeLoader(cdata, fanouts=[2, 2], batch_size=3, split=ids)
    assert len(mine) == 2
    assert np.concatenate([mb.seeds.numpy() for mb in mine]).tolist() == ids.tolist()
    mask = np.zeros(cdata.num_nodes, dtype=bool)
    mask[ids] = True
    assert NodeLoader(cdata, [2], split=mask, shuffle=True).seeds.tolist() == sorted(ids)


@pytest.mark.parametrize("kw,match", [
    (dict(split="valid"), "unknown split 'valid'"),
    (dict(split=np.array([0, 600])), "out of range"),
    (dict(split=[1, 1]), "repeats"),
    (dict(schedule="nearest"), "nearest"),
    (dict(fanouts="5,x"), "fanout"),
    (dict(batch_size=0), "batch"),
    (dict(schedule="locality", shuffle=False), "shuffle=False"),
    (dict(sampler="labour"), "unknown sampler 'labour'"),
    (dict(sampler=object()), "sampler must be a registered name"),
])
def test_nodeloader_refuses_bad_arguments(cdata, kw, match):
    args = dict(fanouts=[5, 5])
    args.update(kw)
    with pytest.raises(ConfigError, match=match):
        NodeLoader(cdata, **args)


def test_nodeloader_takes_a_sampler_by_name_or_as_an_object(cdata):
    """By name: the registered sampler (``device``: the torch twin, the same batches on CPU
    torch); as an object: that very sampler, whatever its fanouts."""
    from twopgraph.sampler import NeighborSampler
    from twopgraph.sampler.device import TorchNeighborSampler

    a = NodeLoader(cdata, fanouts=[3, 3], batch_size=64, schedule="random", prefetch=0)
    b = NodeLoader(cdata, fanouts=[3, 3], batch_size=64, schedule="random", prefetch=0,
                   sampler="device")
    assert isinstance(a.sampler, NeighborSampler)
    assert isinstance(b.sampler, TorchNeighborSampler)
    for x, y in zip(a, b):
        assert np.array_equal(x.input_nodes, np.asarray(y.input_nodes))
    mine = NeighborSampler(cdata.graph, [1], seed=5)
    c = NodeLoader(cdata, fanouts=[1], batch_size=64, schedule="random", prefetch=0,
                   sampler=mine)
    assert c.sampler is mine
    mb = next(iter(c))
    assert len(mb.blocks) == 1 and int(mb.blocks[0].edge_counts().max()) <= 1
    with pytest.raises(ConfigError, match="another graph"):
        NodeLoader(cdata, fanouts=[1], sampler=NeighborSampler(
            CSRGraph.from_edges([0], [1], num_nodes=2), [1]))


def test_nodeloader_locality_clusters_go_to_a_data_root_or_stay_in_memory(cdata, tmp_path,
                                                                          monkeypatch):
    """Locality clusters go under data_root or $TWOPGRAPH_DATA, never into the working
    directory (without either they are computed in memory, the same clusters); batches come
    in the caller's ids."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TWOPGRAPH_DATA", raising=False)
    in_memory = NodeLoader(cdata, fanouts=[5, 5], batch_size=64, schedule="locality",
                           num_clusters=16)
    assert list(tmp_path.iterdir()) == []
    root = tmp_path / "root"
    loader = NodeLoader(cdata, fanouts=[5, 5], batch_size=64, schedule="locality",
                        data_root=root, num_clusters=16)
    batches = list(loader)
    assert np.array_equal(np.sort(np.concatenate([mb.seeds.numpy() for mb in batches])),
                          cdata.train_idx)
    for mb in batches:
        assert torch.equal(mb.labels, torch.from_numpy(cdata.label[mb.seeds.numpy()]))
        assert torch.equal(mb.features, torch.from_numpy(cdata.feat[mb.input_nodes.numpy()]))
    assert any((root / "clusters").iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]
    kept = [mb.seeds.numpy() for mb in batches]
    assert all(np.array_equal(a.seeds.numpy(), b) for a, b in zip(in_memory, kept, strict=True))
    monkeypatch.setenv("TWOPGRAPH_DATA", str(root))  # the environment variable does too
    assert len(NodeLoader(cdata, [5, 5], batch_size=64, schedule="locality")) == len(loader)


# -- accuracy against `twopgraph train` ------------------------------------------------------------
HP = dict(fanouts=[10, 10], batch_size=32, hidden=64, lr=0.01, dropout=0.5, epochs=15)
SEEDS = (0, 1, 2)


class HandSAGE(torch.nn.Module):
    """GraphSAGE-mean written against Block.edge_index / size only."""

    def __init__(self, dims, dropout):
        super().__init__()
        pairs = list(zip(dims, dims[1:]))
        self.self_lin = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in pairs)
        self.neigh_lin = torch.nn.ModuleList(torch.nn.Linear(a, b, bias=False) for a, b in pairs)
        self.dropout = dropout

    def forward(self, blocks, h):
        for i, block in enumerate(blocks):
            src, dst = block.edge_index
            total = h.new_zeros(block.size[1], h.shape[1]).index_add_(0, dst, h[src])
            mean = total / torch.bincount(dst, minlength=block.size[1]).clamp(min=1)[:, None]
            h = self.self_lin[i](h[:block.size[1]]) + self.neigh_lin[i](mean)
            if i < len(blocks) - 1:
                h = F.dropout(F.relu(h), self.dropout, self.training)
        return h


class PygSAGE(torch.nn.Module):
    """PyG's SAGEConv (mean) on the same blocks: bipartite (x_src, x_dst), edge_index, size."""

    def __init__(self, dims, dropout):
        super().__init__()
        from torch_geometric.nn import SAGEConv
        self.convs = torch.nn.ModuleList(SAGEConv(a, b) for a, b in zip(dims, dims[1:]))
        self.dropout = dropout

    def forward(self, blocks, h):
        for i, block in enumerate(blocks):
            h = self.convs[i]((h, h[:block.size[1]]), block.edge_index, size=block.size)
            if i < len(blocks) - 1:
                h = F.dropout(F.relu(h), self.dropout, self.training)
        return h


def hand_loop(make_model, data: GraphData, seed: int) -> float:
    """The README's loop: train on NodeLoader batches, test with all neighbours (exact)."""
    torch.manual_seed(seed)
    model = make_model([data.num_features, HP["hidden"], data.num_classes], HP["dropout"])
    opt = torch.optim.Adam(model.parameters(), lr=HP["lr"])
    loader = NodeLoader(data, HP["fanouts"], HP["batch_size"], seed=seed, threads=1)
    for _ in range(HP["epochs"]):
        model.train()
        for mb in loader:
            loss = F.cross_entropy(model(mb.blocks, mb.features), mb.labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    test = NodeLoader(data, [-1] * len(HP["fanouts"]), 4096, split="test", threads=1)
    with torch.no_grad():
        correct = sum(int((model(mb.blocks, mb.features).argmax(1) == mb.labels).sum())
                      for mb in test)
    return correct / data.test_idx.shape[0]


def cli_accuracy(data: GraphData, seed: int, out: Path) -> float:
    """``twopgraph train`` (random schedule) with the same hyperparameters; the final
    model's exact test accuracy."""
    from twopgraph.run.train import train
    kw = dict(HP, model="sage", schedule="random", seed=seed, eval_every=0, device="cpu",
              threads=1, progress=False, out=str(out), data_root=str(out.parent))
    names = {f.name for sec in TrainConfig.sections().values() for f in fields(sec)}
    if "select" in names:  # model selection (issue 13): compare the last epoch's model
        kw["select"] = "last"
    return train(TrainConfig.of(**kw), data).test_acc


@contextlib.contextmanager
def torch_threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@torch_threads(1)  # as `twopgraph train --threads 1`: tiny steps, no threads to spin
def test_nodeloader_models_match_twopgraph_train(tmp_path):
    """A hand-written SAGE and PyG's SAGEConv trained on NodeLoader batches reach the test
    accuracy of `twopgraph train` within 2 points (mean of 3 seeds, cora; all three measured
    here, ~15 s of CPU in all)."""
    data = shared_dataset("cora")
    t = time.perf_counter()
    ref = np.mean([cli_accuracy(data, s, tmp_path / f"run{s}") for s in SEEDS])
    hand = np.mean([hand_loop(HandSAGE, data, s) for s in SEEDS])
    got = {"hand": hand}
    try:
        import torch_geometric  # noqa: F401
    except ImportError:
        pass
    else:
        got["pyg"] = np.mean([hand_loop(PygSAGE, data, s) for s in SEEDS])
    print(f"twopgraph train {ref:.4f}, NodeLoader: "
          + ", ".join(f"{k} {v:.4f}" for k, v in got.items())
          + f" ({time.perf_counter() - t:.1f} s)")
    assert ref > 0.7  # the reference itself learned
    for name, acc in got.items():
        assert abs(acc - ref) <= 0.02, f"{name}: {acc:.4f} vs twopgraph train {ref:.4f}"
    if "pyg" not in got:
        pytest.skip("torch_geometric is not importable: PyG's SAGEConv not compared")
