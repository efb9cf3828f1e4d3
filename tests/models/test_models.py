"""Conv layers and models against dense formulas (float64, 1e-5); layer-wise inference is exact."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from conftest import community_data, random_graph

from twopgraph.core.minibatch import Block
from twopgraph.graph.data import CSRGraph
from twopgraph.inference import layerwise_inference
from twopgraph.models import build_model
from twopgraph.sampler import NeighborSampler


# -- dense references, written from the formulas in the docstrings (float64) --------------------
def _dense_block(block) -> torch.Tensor:
    """The block's edges as a dense num_dst x num_src float64 matrix (entry = edge count)."""
    a = torch.zeros((block.num_dst, block.num_src), dtype=torch.float64)
    dst = torch.repeat_interleave(torch.arange(block.num_dst), block.indptr.diff())
    a.index_put_((dst, block.indices), torch.ones(block.num_edges, dtype=torch.float64),
                 accumulate=True)
    return a


def dense_sage(conv, a, h_src, h_dst):
    """``W_self h_v + b + W_neigh mean_{u in S(v)} h_u`` (0 for a vertex without neighbours)."""
    mean = (a @ h_src) / a.sum(1, keepdim=True).clamp(min=1)
    return h_dst @ conv.lin_self.weight.T + conv.lin_self.bias + mean @ conv.lin_neigh.weight.T


def dense_gcn(conv, a, h_src, h_dst, d_src, d_dst):
    """``W (h_v/(d_v+1) + (d_v/s_v) sum_{u in S(v)} h_u / sqrt((d_u+1)(d_v+1))) + b`` with the
    full-graph degrees d and the s_v sampled neighbours S(v)."""
    s = a.sum(1)
    norm = a / torch.sqrt(d_dst + 1)[:, None] / torch.sqrt(d_src + 1)[None, :]
    rescale = torch.where(s > 0, d_dst / s.clamp(min=1), torch.zeros_like(s))
    inner = h_dst / (d_dst + 1)[:, None] + rescale[:, None] * (norm @ h_src)
    return inner @ conv.lin.weight.T + conv.bias


def _dense_layer(name, conv, block, h_src, h_dst, deg_src):
    a = _dense_block(block)
    if name == "sage":
        return dense_sage(conv, a, h_src, h_dst)
    return dense_gcn(conv, a, h_src, h_dst, deg_src, deg_src[:block.num_dst])


def _graph_with_isolated(n=60, m=200, seed=1):
    """random_graph plus two isolated vertices (no neighbours: the s_v = 0 case)."""
    g = random_graph(n, m, seed=seed)
    src = np.repeat(np.arange(n), g.degrees())
    return CSRGraph.from_edges(src, g.indices.astype(np.int64), n + 2)


def _randomize_params(module, seed):
    """Random parameters, non-zero biases too (GCN's bias starts at zero and would hide a
    wrong bias term)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():  # weights scaled by fan-in: outputs stay O(1)
            scale = 0.5 / p.shape[1] ** 0.5 if p.ndim == 2 else 0.5
            p.copy_(scale * torch.randn(p.shape, generator=gen, dtype=p.dtype))


@pytest.mark.parametrize("name", ["sage", "gcn"])
@pytest.mark.parametrize("in_dim,out_dim", [(6, 4), (4, 6)])  # projection first / after
@pytest.mark.parametrize("fanout", [2, 5, -1])
@pytest.mark.parametrize("given_degrees", [False, True])
def test_conv_equals_dense_formula_on_sampled_blocks(name, in_dim, out_dim, fanout,
                                                     given_degrees):
    """Every dst vertex (the hub, low-degree and isolated ones) of a sampled block, against the
    dense formula with the degrees taken from the graph (or from ``degrees=``, as a partition's
    sampler gives full-graph degrees of truncated rows), float64, 1e-5."""
    g = _graph_with_isolated()
    n = g.num_nodes
    deg = g.degrees().astype(np.int64)
    if given_degrees:  # full-graph degrees larger than the local rows (truncated halo rows)
        deg = deg + np.random.default_rng(0).integers(0, 4, n)
    sampler = NeighborSampler(g, [fanout], seed=3, degrees=deg if given_degrees else None)
    seeds = np.array([0, 1, 2, 7, n - 2, n - 1, 30])  # 0 = hub, n-2 and n-1 isolated
    mb = sampler.sample(seeds, key=11)
    block = mb.blocks[0]
    ids = mb.input_nodes.numpy()
    d_src = torch.from_numpy(deg[ids].astype(np.float64))
    # the block carries the degrees the normalisation needs
    np.testing.assert_array_equal(block.src_deg.numpy(), deg[ids])
    np.testing.assert_array_equal(block.dst_deg.numpy(), deg[seeds])
    conv = build_model(name, in_dim, out_dim, out_dim, num_layers=1).convs[0].double()
    _randomize_params(conv, 5)
    x = torch.randn(n, in_dim, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    h_src = x[mb.input_nodes]
    with torch.no_grad():
        got = conv(block, h_src, h_src[:block.num_dst])
        want = _dense_layer(name, conv, block, h_src, h_src[:block.num_dst], d_src)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    if fanout == -1 and not given_degrees and name == "gcn":  # Kipf & Welling, written apart
        a = _dense_block(block)
        a_hat = torch.zeros((n, n), dtype=torch.float64)
        a_hat[torch.from_numpy(seeds)[:, None], mb.input_nodes[None, :]] = a
        a_hat += torch.eye(n, dtype=torch.float64)
        dinv = (torch.from_numpy(deg).double() + 1).rsqrt()
        kw = ((dinv[:, None] * a_hat * dinv[None, :]) @ x)[torch.from_numpy(seeds)]
        torch.testing.assert_close(got, kw @ conv.lin.weight.T + conv.bias, rtol=1e-5,
                                   atol=1e-5)


@pytest.mark.parametrize("name", ["sage", "gcn"])
@pytest.mark.parametrize("in_dim,out_dim", [(6, 4), (4, 6)])
@pytest.mark.parametrize("fanout", [3, -1])
def test_aggregate_over_tiles_sums_to_the_whole_block(name, in_dim, out_dim, fanout):
    """The streamed-inference contract: a block's edges split into tiles (each dst's edges
    dealt out at random, some dsts absent from a tile), each tile a Block with the dsts'
    whole ``num_neighbors``, summed ``aggregate`` == the block's, and ``combine`` of it ==
    ``forward`` (float64, 1e-10). With the tiles' own edge counts as the neighbour counts it
    would be another (wrong) mean."""
    g = _graph_with_isolated()
    sampler = NeighborSampler(g, [fanout], seed=3)
    seeds = np.array([0, 1, 2, 7, g.num_nodes - 1, 30])
    mb = sampler.sample(seeds, key=5)
    block = mb.blocks[0]
    conv = build_model(name, in_dim, out_dim, out_dim, num_layers=1).convs[0].double()
    _randomize_params(conv, 1)
    h = torch.randn(block.num_src, in_dim, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(4))
    rng = np.random.default_rng(0)
    tile_of = rng.integers(0, 3, block.num_edges)
    dst_of = np.repeat(np.arange(block.num_dst), block.indptr.diff().numpy())
    with torch.no_grad():
        whole = conv.aggregate(block, h)
        acc = torch.zeros_like(whole)
        for t in range(3):
            e = np.flatnonzero(tile_of == t)
            d, first = np.unique(dst_of[e], return_index=True)
            indptr = torch.from_numpy(np.append(first, e.shape[0]).astype(np.int64))
            tile = Block(block.num_src, d.shape[0], indptr, block.indices[torch.from_numpy(e)],
                         block.src_deg, block.dst_deg[torch.from_numpy(d)],
                         block.sampled_deg()[torch.from_numpy(d)])
            acc.index_add_(0, torch.from_numpy(d), conv.aggregate(tile, h))
        torch.testing.assert_close(acc, whole, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(conv.combine(h[:block.num_dst], acc, block.dst_deg),
                                   conv(block, h, h[:block.num_dst]), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", ["sage", "gcn"])
@pytest.mark.parametrize("fanouts", [[3, 2], [4, -1, 2]])
def test_model_forward_equals_dense_stack(name, fanouts):
    """BlockGNN on a sampled mini-batch = the dense layers stacked with ReLU between them
    (eval mode: dropout is the identity); float32 model vs float64 reference."""
    g = _graph_with_isolated(120, 500, seed=4)
    deg = torch.from_numpy(g.degrees().astype(np.float64))
    m = build_model(name, 5, 7, 3, num_layers=len(fanouts), dropout=0.5)
    _randomize_params(m, 6)
    m.eval()
    x = torch.randn(g.num_nodes, 5, generator=torch.Generator().manual_seed(1))
    mb = NeighborSampler(g, fanouts, seed=2).sample(np.array([0, 5, 9, 120, 121, 64]), key=4)
    mb.features = x[mb.input_nodes]
    with torch.no_grad():
        got = m(mb)
    h = mb.features.double()
    d_in = deg[mb.input_nodes]
    for i, block in enumerate(mb.blocks):
        conv = copy.deepcopy(m.convs[i]).double()
        h = _dense_layer(name, conv, block, h, h[:block.num_dst], d_in[:block.num_src])
        if i < len(mb.blocks) - 1:
            h = torch.relu(h)
    torch.testing.assert_close(got.double(), h, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["sage", "gcn"])
@pytest.mark.parametrize("hidden,layers", [(16, 2), (3, 3), (64, 3)])
def test_layerwise_inference_equals_dense_whole_graph(name, hidden, layers):
    """Exact inference over the whole graph = the dense full-neighbour layers, also with
    width-shrinking layers (computed from projections, fused into the previous layer's pass):
    hidden 3 < features (layer 0 projects), 64 > classes (last layer fused)."""
    d = community_data(300, seed=4)
    assert d.num_features > 3 and d.num_classes < 64
    m = build_model(name, d.num_features, hidden, d.num_classes, num_layers=layers, dropout=0.5)
    _randomize_params(m, hidden)
    feat = torch.from_numpy(d.feat)
    sampler = NeighborSampler(d.graph, [-1] * layers)
    got = layerwise_inference(m, sampler, feat, torch.device("cpu"), batch_edges=97)
    assert m.training  # restored
    full = sampler.full_block(0, d.num_nodes)
    deg = torch.from_numpy(d.graph.degrees().astype(np.float64))
    h = feat.double()
    for i in range(layers):
        conv = copy.deepcopy(m.convs[i]).double()
        h = _dense_layer(name, conv, full, h, h, deg)
        if i < layers - 1:
            h = torch.relu(h)
    torch.testing.assert_close(got.double(), h, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stream", [False, True])
def test_exact_inference_applies_the_models_own_activation(stream):
    """A model whose layers are followed by tanh, not ReLU (its ``activate``): whole-graph
    and scored inference (streamed or not) give its own full-neighbour forward pass, not a
    ReLU network's."""
    from twopgraph.inference import plan_scope, scored_ids, scored_inference
    from twopgraph.models import BlockGNN, SAGEConv

    class TanhGNN(BlockGNN):
        def activate(self, i, h):
            return torch.tanh(h) if i < self.num_layers - 1 else h

    d = community_data(300, seed=4)
    m = TanhGNN(SAGEConv, d.num_features, 16, d.num_classes, 3, dropout=0.0)
    _randomize_params(m, 16)
    feat = torch.from_numpy(d.feat)
    sampler = NeighborSampler(d.graph, [-1] * 3)
    m.eval()
    with torch.no_grad():
        seeds = np.arange(d.num_nodes)
        want = m(_with_features(sampler, seeds, feat))
    got = layerwise_inference(m, sampler, feat, torch.device("cpu"), batch_edges=97)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    s = d.val_idx
    plan = plan_scope(m, d.graph, scored_ids(d.num_nodes, s), "scored")
    part = scored_inference(m, sampler, feat, torch.device("cpu"), s, plan=plan, stream=stream,
                            batch_edges=97)
    torch.testing.assert_close(part.take(s), want[torch.from_numpy(s)], rtol=1e-5, atol=1e-5)


def _with_features(sampler, seeds, feat):
    mb = sampler.sample(seeds)
    mb.features = feat[torch.from_numpy(np.asarray(mb.input_nodes, dtype=np.int64))]
    return mb


def test_sampled_gcn_is_unbiased_estimate():
    """With sampling, GCN's d/s rescaling keeps the expected output equal to the full one:
    the mean over many sampled blocks is within 5 standard errors of it, per coordinate."""
    g = random_graph(80, 500, seed=5)
    x = torch.randn(80, 3, generator=torch.Generator().manual_seed(0))
    conv = build_model("gcn", 3, 3, 3, num_layers=1).convs[0]
    _randomize_params(conv, 1)
    nodes = np.arange(80)
    trials = 400
    s = NeighborSampler(g, [2])
    # all trials' blocks side by side in one block: one conv call
    parts = [s.sample(nodes, key=t, parallel=False) for t in range(trials)]
    src_off = np.cumsum([0] + [mb.input_nodes.shape[0] for mb in parts])
    edge_off = np.cumsum([0] + [mb.blocks[0].num_edges for mb in parts])
    blocks = [mb.blocks[0] for mb in parts]
    big = Block(int(src_off[-1]), 80 * trials,
                torch.cat([blocks[0].indptr[:1]] + [b.indptr[1:] + int(e)
                                                     for b, e in zip(blocks, edge_off)]),
                torch.cat([b.indices + int(o) for b, o in zip(blocks, src_off)]),
                torch.cat([b.src_deg for b in blocks]), torch.cat([b.dst_deg for b in blocks]))
    xs = torch.cat([x[mb.input_nodes] for mb in parts])
    with torch.no_grad():
        full = conv(NeighborSampler(g, [-1]).full_block(0, 80), x, x)
        outs = conv(big, xs, torch.cat([x[mb.input_nodes[:80]] for mb in parts]))
    outs = outs.view(trials, 80, 3)
    mean, sd = outs.double().mean(0), outs.double().std(0)
    exact = g.degrees() <= 2  # nothing to sample: every draw is the full layer
    torch.testing.assert_close(outs[:, exact], full[exact].expand(trials, -1, -1), rtol=1e-5,
                               atol=1e-5)
    z = (mean - full.double())[~exact] / (sd[~exact] / trials ** 0.5)
    assert (~exact).sum() > 40 and float(z.abs().max()) < 5, float(z.abs().max())


def test_unknown_model():
    from twopgraph.errors import ConfigError
    with pytest.raises(ConfigError):
        build_model("gin", 4, 4, 2, 2)


@pytest.mark.parametrize("p", [0.3, 0.5])
def test_relu_dropout_semantics(p):
    from torch.nn import Dropout

    from twopgraph.models.dropout import relu_dropout
    torch.manual_seed(0)
    d = Dropout(p)
    x = (torch.rand(301, 257) - 0.25).requires_grad_()  # odd sizes: a lone last element
    y = relu_dropout(x, d)
    pos = x.detach() > 0
    zero = (y[pos] == 0).double().mean().item()
    n = int(pos.sum())  # kept with probability 1 - p among positives: |z| < 5
    assert abs(zero - p) / (p * (1 - p) / n) ** 0.5 < 5, (zero, p, n)
    assert torch.all(y[~pos] == 0)  # ReLU
    kept = y != 0
    torch.testing.assert_close(y[kept], x.detach()[kept] / (1 - p))
    g = torch.randn_like(y)
    y.backward(g)  # gradient: through ReLU and the same mask
    torch.testing.assert_close(x.grad, torch.where(kept, g / (1 - p), torch.zeros_like(g)))
    torch.manual_seed(0)
    again = relu_dropout((torch.rand(301, 257) - 0.25), d)
    assert torch.equal(again, y.detach())  # torch.manual_seed makes the mask reproducible
    d.eval()
    assert torch.equal(relu_dropout(x, d), torch.relu(x))


@pytest.mark.skipif(__import__("numba").config.NUMBA_NUM_THREADS < 2, reason="one thread only")
def test_relu_dropout_thread_count_independent():
    import numba
    from torch.nn import Dropout

    from twopgraph.models.dropout import relu_dropout
    x = torch.randn(1000, 77)
    outs = []
    prev = numba.get_num_threads()
    try:
        for t in (1, 2):
            numba.set_num_threads(t)
            torch.manual_seed(3)
            outs.append(relu_dropout(x, Dropout(0.5)))
    finally:
        numba.set_num_threads(prev)
    assert torch.equal(outs[0], outs[1])


def test_inference_products_match_trainings(monkeypatch):
    """Without a gradient (evaluation) a block's aggregation runs the numba CSR kernel
    (:mod:`twopgraph.graph.spmm`); with one, the same kernel inside ``HostSpmm`` (its backward
    is tested against torch's in test_host_spmm.py). Training and evaluation agree to float
    rounding, for SAGE and GCN, and the kernel is what both call."""
    import twopgraph.graph.spmm as spmm_mod
    from twopgraph.core.minibatch import Block
    from twopgraph.models import build_model
    rng = np.random.default_rng(3)
    ns, nd = 50, 20
    cnt = rng.integers(0, 6, nd)
    indptr = torch.from_numpy(np.concatenate([[0], np.cumsum(cnt)]))
    indices = torch.from_numpy(rng.integers(0, ns, int(cnt.sum())))
    deg = torch.from_numpy(rng.integers(1, 9, ns).astype(np.float32))
    block = Block(ns, nd, indptr, indices, deg, deg[:nd])
    h = torch.from_numpy(rng.standard_normal((ns, 16)).astype(np.float32))
    calls = []
    real = spmm_mod.spmm
    monkeypatch.setattr(spmm_mod, "spmm", lambda *a: calls.append(1) or real(*a))
    for name in ("sage", "gcn"):
        conv = build_model(name, 16, 8, 3, 1).convs[0]
        trained = conv(block, h.requires_grad_(), h[:nd])
        assert calls and trained.grad_fn is not None
        calls.clear()
        with torch.no_grad():
            evaluated = conv(block, h, h[:nd])
        assert calls
        calls.clear()
        torch.testing.assert_close(evaluated, trained.detach(), rtol=1e-5, atol=1e-5)
