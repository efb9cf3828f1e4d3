"""GAT (twopgraph/models/gat.py): the layer against its formula written densely (float64), the
edge softmax, exact evaluation (whole graph, restricted, scratch tables) against the dense
stack, every training path (single process, ``--partitions`` ranks, ``predict``, NodeLoader),
the cache budget's estimate and the option checks."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import community_data, random_graph

from twopgraph.cache.feature_cache import (
    activation_reserve_bytes,
    eval_bytes,
    input_rows_estimate,
    train_step_bytes,
)
from twopgraph.config import TrainConfig
from twopgraph.distributed.partition.selfdep import partition_selfdep
from twopgraph.errors import ConfigError
from twopgraph.graph.data import CSRGraph, GraphData
from twopgraph.inference import layerwise_inference, scored_ids, scored_inference
from twopgraph.models import SAGEConv, build_model
from twopgraph.models.gat import GATConv, edge_softmax
from twopgraph.pipeline.nodeloader import NodeLoader
from twopgraph.run.predict import prediction
from twopgraph.run.train import train
from twopgraph.sampler import NeighborSampler


def _graph_with_isolated(n=60, m=200, seed=1):
    """random_graph plus two isolated vertices (a dst without neighbours gets its bias)."""
    g = random_graph(n, m, seed=seed)
    src = np.repeat(np.arange(n), g.degrees())
    return CSRGraph.from_edges(src, g.indices.astype(np.int64), n + 2)


def dense_gat(conv: GATConv, block, h_src, h_dst) -> torch.Tensor:
    """The GAT formula, one dst and one head at a time, float64: ``z = W h``;
    ``e_uv = LeakyReLU(a_src . z_u + a_dst . z_v)`` over v's edges and its self loop (u = v,
    ``z_v`` from ``h_dst``: PyG's ``add_self_loops``); ``alpha = softmax over them``;
    ``sum alpha_uv z_u + b``, heads concatenated (hidden) or averaged (output)."""
    heads, f = conv.heads, conv.head_dim
    w = conv.fc.weight.double()
    z_src = (h_src @ w.T).view(-1, heads, f)
    z_dst = (h_dst @ w.T).view(-1, heads, f)
    out = torch.zeros(block.num_dst, heads, f, dtype=torch.float64)
    for v in range(block.num_dst):
        nbrs = block.indices[block.indptr[v]:block.indptr[v + 1]]
        for k in range(heads):
            z = torch.cat([z_src[nbrs, k], z_dst[v, k].unsqueeze(0)])
            e = z @ conv.attn_src[0, k].double() + z_dst[v, k] @ conv.attn_dst[0, k].double()
            e = torch.where(e > 0, e, 0.2 * e)
            alpha = torch.exp(e - e.max()) / torch.exp(e - e.max()).sum()
            out[v, k] = alpha @ z
    out = out + conv.bias.double().view(1, heads, f)
    return out.reshape(block.num_dst, heads * f) if conv.concat else out.mean(1)


def _randomize(module, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=gen, dtype=p.dtype)
                    / max(1, p.shape[-1]) ** 0.5)


@pytest.mark.parametrize("last", [False, True])  # heads concatenated / averaged
@pytest.mark.parametrize("fanout", [2, 5, -1])
def test_gat_layer_equals_its_dense_formula(last, fanout):
    """Every dst of a sampled block (a hub, low-degree and isolated ones), float64, 1e-8;
    in the dst rows given apart (exact inference) and as the leading src rows (training)."""
    g = _graph_with_isolated()
    n = g.num_nodes
    mb = NeighborSampler(g, [fanout], seed=3).sample(np.array([0, 1, 2, 7, n - 2, n - 1, 30]),
                                                     key=11)
    block = mb.blocks[0]
    conv = GATConv.build(6, 8, last=last, heads=4).double()
    _randomize(conv, 5)
    h = torch.randn(block.num_src, 6, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = dense_gat(conv, block, h, h[:block.num_dst])
        led = conv(block, h, h[:block.num_dst])
        apart = conv(block, h, h[:block.num_dst].clone())
    trained = conv(block, h, h[:block.num_dst])  # with gradients: the gathered messages
    torch.testing.assert_close(trained.detach(), want, rtol=1e-8, atol=1e-8)
    trained.sum().backward()
    assert conv.attn_src.grad is not None and torch.isfinite(conv.fc.weight.grad).all()
    assert led.shape == (block.num_dst, 8)
    torch.testing.assert_close(led, want, rtol=1e-8, atol=1e-8)
    torch.testing.assert_close(apart, want, rtol=1e-8, atol=1e-8)
    isolated = (block.indptr.diff() == 0).nonzero().flatten()
    assert isolated.numel() == 2  # n - 2 and n - 1: their own row (self loop) + the bias
    z = (h[isolated] @ conv.fc.weight.T).view(2, 4, -1) + conv.bias.view(1, 4, -1)
    torch.testing.assert_close(led[isolated], z.reshape(2, -1) if not last else z.mean(1))
    assert not torch.allclose(led[isolated[0]], led[isolated[1]])


def test_edge_softmax_normalises_each_dst_and_has_the_right_gradient():
    dst = torch.tensor([0, 0, 0, 2, 2, 3])
    scores = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    a = edge_softmax(scores, dst, 4)
    sums = torch.zeros(4, 3, dtype=torch.float64).index_add(0, dst, a.detach())
    torch.testing.assert_close(sums[[0, 2, 3]], torch.ones(3, 3, dtype=torch.float64))
    assert float(sums[1].abs().sum()) == 0  # no edges: nothing
    # large scores do not overflow (the max is subtracted)
    assert torch.isfinite(edge_softmax(scores.detach() * 1e4, dst, 4)).all()
    assert torch.autograd.gradcheck(lambda s: edge_softmax(s, dst, 4), (scores,))


@pytest.mark.parametrize("hidden,layers,heads", [(16, 2, 4), (8, 3, 2)])
def test_gat_exact_inference_equals_the_dense_stack(hidden, layers, heads, tmp_path):
    """Whole-graph layer-wise inference (small edge ranges: many chunks; tables in host
    memory and in a scratch file) and restricted inference over the scored vertices = the
    dense full-neighbour layers with ReLU between them."""
    d = community_data(300, seed=4)
    m = build_model("gat", d.num_features, hidden, d.num_classes, layers, heads=heads)
    _randomize(m, hidden)
    feat = torch.from_numpy(d.feat)
    sampler = NeighborSampler(d.graph, [-1] * layers)
    full = sampler.full_block(0, d.num_nodes)
    h = feat.double()
    for i in range(layers):
        h = dense_gat(copy.deepcopy(m.convs[i]).double(), full, h, h)
        if i < layers - 1:
            h = torch.relu(h)
    for place in ("host", "disk"):
        got = layerwise_inference(m, sampler, feat, torch.device("cpu"), batch_edges=97,
                                  place=place, scratch_dir=tmp_path)
        torch.testing.assert_close(torch.as_tensor(np.asarray(got)).double(), h, rtol=1e-5,
                                   atol=1e-5)
    ids = scored_ids(d.num_nodes, d.val_idx, d.test_idx)
    part = scored_inference(m, sampler, feat, torch.device("cpu"), ids, batch_edges=97)
    torch.testing.assert_close(part.take(ids).double(), h[torch.from_numpy(ids)], rtol=1e-5,
                               atol=1e-5)


@pytest.fixture(scope="module")
def gat_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("gat")
    data = community_data(1200, k=4)
    cfg = TrainConfig.of(model="gat", heads=2, hidden=16, fanouts=[5, 5], batch_size=64,
                         epochs=3, lr=0.01, dropout=0.1, seed=0, device="cpu",
                         out=str(root / "run"), progress=False, threads=2)
    return root, data, train(cfg, data=data)


def test_gat_trains_and_predicts_what_it_reported(gat_run):
    """train --model gat learns the communities; the checkpoint records heads and predict
    rebuilds the same model (its accuracies are the run's)."""
    root, data, res = gat_run
    assert res.test_acc > 0.5  # 4 classes
    spec = torch.load(root / "run" / "checkpoint.pt", weights_only=True)["model_spec"]
    assert spec["model"] == "gat" and spec["heads"] == 2 and spec["hidden"] == 16
    pred = prediction(root / "run" / "checkpoint.pt", data=data)
    assert pred.test_acc == pytest.approx(res.test_acc)
    assert pred.val_acc == pytest.approx(res.val_acc)
    metrics = json.loads((root / "run" / "metrics.json").read_text())
    assert metrics["config"]["model"] == "gat" and metrics["config"]["heads"] == 2


def test_gat_through_nodeloader():
    """A hand-written loop over NodeLoader batches trains a GAT (the loss falls)."""
    data = community_data(600, k=4)
    torch.manual_seed(0)
    model = build_model("gat", data.num_features, 16, data.num_classes, 2, heads=4)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for _ in range(3):
        for mb in NodeLoader(data, fanouts=[5, 5], batch_size=64, schedule="random",
                             threads=1):
            loss = torch.nn.functional.cross_entropy(model(mb), mb.labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    assert np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5])


def test_gat_on_two_ranks(tmp_path):
    """``train --partitions --nproc 2 --model gat``: both ranks train, rank 0 reports."""
    data = community_data(1200, k=4)
    partition_selfdep(data, 2, 2, tmp_path / "p2", num_clusters=12)
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "twopgraph", "train", "--partitions", str(tmp_path / "p2"),
         "--nproc", "2", "--model", "gat", "--heads", "2", "--fanouts", "5,5",
         "--batch-size", "64", "--epochs", "2", "--hidden", "16", "--lr", "0.01",
         "--device", "cpu", "--threads", "1", "--no-progress", "--out", str(out)],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    assert len(lines) == 1 and lines[0]["test_acc"] > 0.5
    spec = torch.load(out / "checkpoint.pt", weights_only=True)["model_spec"]
    assert spec["model"] == "gat" and spec["heads"] == 2


def test_activation_reserve_by_model():
    """The model estimates its layers' widths: SAGE charges each layer its output columns,
    GAT also its heads' projections, and per sampled edge its message and 3 x heads values."""
    kw = dict(num_nodes=10 ** 6, num_edges=5 * 10 ** 7, num_features=100, hidden=256,
              num_classes=47, fanouts=[15, 10, 5], batch_size=1024)
    rows_in = input_rows_estimate(1024, [15, 10, 5], 10 ** 6, 50.0)
    sage = activation_reserve_bytes(**kw, conv=SAGEConv)
    assert sage == train_step_bytes(rows_in, 100, 256, 3, layer_widths=[256, 256, 47])
    gat = activation_reserve_bytes(**kw, conv=GATConv, conv_options={"heads": 4})
    # projection + output per row; per edge its message (the projection's width) + 12
    widths = [256 + 256 + (256 + 12) * 15, 256 + 256 + (256 + 12) * 10,
              4 * 47 + 47 + (4 * 47 + 12) * 5]
    assert gat == train_step_bytes(rows_in, 100, 256, 3, layer_widths=widths) > sage
    ev = eval_bytes(10 ** 6, 5 * 10 ** 7, 100, 256, 47, 1000, edge_values=12)
    assert ev == eval_bytes(10 ** 6, 5 * 10 ** 7, 100, 256, 47, 1000) + 4 * 12 * 1000


@pytest.mark.parametrize("kw,msg", [
    (dict(hidden=30, heads=4), "hidden must be a multiple of heads"),
    (dict(heads=0), "heads must be"),
])
def test_bad_heads_is_one_line(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        TrainConfig.of(model="gat", **kw).validate()


def test_cli_bad_heads_exits_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "twopgraph", "train", "--model", "gat",
                           "--hidden", "30", "--heads", "4", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "hidden must be a multiple of heads" in proc.stderr


def _with_isolated_labelled(n=600, isolated=200, k=4, seed=0):
    """community_data plus ``isolated`` vertices without edges whose label only their own
    features tell (a noisy one-hot of the class): half of them train, half test."""
    d = community_data(n, k=k, seed=seed)
    rng = np.random.default_rng(seed + 1)
    lab = rng.integers(0, k, isolated)
    feat = np.zeros((isolated, d.num_features), dtype=np.float32)
    feat[np.arange(isolated), lab] = 3.0
    feat += 0.3 * rng.normal(size=feat.shape).astype(np.float32)
    src = np.repeat(np.arange(n), d.graph.degrees())
    g = CSRGraph.from_edges(src, d.graph.indices.astype(np.int64), n + isolated)
    iso = n + np.arange(isolated)
    return GraphData(g, np.concatenate([d.feat, feat]), np.concatenate([d.label, lab]),
                     np.sort(np.concatenate([d.train_idx, iso[::2]])), d.val_idx,
                     np.sort(np.concatenate([d.test_idx, iso[1::2]])), name="isolated"), iso


def test_gat_sees_each_vertex_own_features():
    """Every dst attends over itself too (PyG's self loops): isolated vertices whose own
    features give their class are predicted from them (not all one class, as with their bias
    alone); and exact inference (whole graph and scored) = the full-neighbourhood sampled
    forward pass over the same graph, in the training (gathered) and evaluation paths."""
    data, iso = _with_isolated_labelled()
    torch.manual_seed(0)
    model = build_model("gat", data.num_features, 16, data.num_classes, 2, heads=2,
                        dropout=0.0)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(8):
        for mb in NodeLoader(data, fanouts=[5, 5], batch_size=128, schedule="random",
                             threads=1, seed=0):
            loss = torch.nn.functional.cross_entropy(model(mb), mb.labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    sampler = NeighborSampler(data.graph, [-1, -1])
    feat = torch.from_numpy(data.feat)
    exact = layerwise_inference(model, sampler, feat, torch.device("cpu"), batch_edges=211)
    test_iso = iso[1::2]
    pred = exact[torch.from_numpy(test_iso)].argmax(1).numpy()
    assert len(set(pred.tolist())) == data.num_classes
    assert (pred == data.label[test_iso]).mean() > 0.9
    seeds = np.concatenate([np.arange(0, 600, 7), iso[::9]])
    mb = sampler.sample(seeds, key=1)
    mb.features = feat[mb.input_nodes]
    with torch.no_grad():
        evaluated = model(mb)
    gathered = model(mb).detach()  # with gradients: the gathered messages
    want = exact[torch.from_numpy(seeds)]
    torch.testing.assert_close(evaluated, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gathered, want, rtol=1e-5, atol=1e-5)
    ids = scored_ids(data.num_nodes, data.val_idx, data.test_idx)
    part = scored_inference(model, sampler, feat, torch.device("cpu"), ids, batch_edges=211)
    torch.testing.assert_close(part.take(ids), exact[torch.from_numpy(ids)], rtol=1e-5,
                               atol=1e-5)
