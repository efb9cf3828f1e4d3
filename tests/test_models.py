"""Conv layers against dense references; layer-wise inference is exact."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from twopgraph.models import build_model
from twopgraph.sampler import NeighborSampler
from twopgraph.train import layerwise_inference
from conftest import community_data, random_graph


def _dense_adj(g):
    n = g.num_nodes
    a = np.zeros((n, n), dtype=np.float32)
    for v in range(n):
        a[v, g.neighbors(v)] = 1.0
    return torch.from_numpy(a)


@pytest.mark.parametrize("in_dim,out_dim", [(6, 4), (4, 6)])
def test_sage_conv_full_neighbourhood_is_mean(in_dim, out_dim):
    torch.manual_seed(0)
    g = random_graph(60, 200, seed=1)
    x = torch.randn(60, in_dim)
    m = build_model("sage", in_dim, out_dim, out_dim, num_layers=1, dropout=0.0)
    conv = m.convs[0]
    block = NeighborSampler(g, [-1]).full_block(0, 60)
    got = conv(block, x, x)
    a = _dense_adj(g)
    mean = (a @ x) / a.sum(1, keepdim=True).clamp(min=1)
    want = conv.lin_self(x) + conv.lin_neigh(mean)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("in_dim,out_dim", [(6, 4), (4, 6)])
def test_gcn_conv_full_neighbourhood_is_kipf_welling(in_dim, out_dim):
    torch.manual_seed(0)
    g = random_graph(60, 200, seed=2)
    x = torch.randn(60, in_dim)
    conv = build_model("gcn", in_dim, out_dim, out_dim, num_layers=1).convs[0]
    got = conv(NeighborSampler(g, [-1]).full_block(0, 60), x, x)
    a = _dense_adj(g) + torch.eye(60)
    dinv = a.sum(1).rsqrt()
    want = conv.lin((dinv[:, None] * a * dinv[None, :]) @ x) + conv.bias
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model", ["sage", "gcn"])
@pytest.mark.parametrize("hidden,layers", [(16, 2), (3, 3), (64, 3)])
def test_layerwise_inference_equals_full_fanout_minibatch(model, hidden, layers):
    """Also with width-shrinking layers (computed from projections, fused into the previous
    layer's pass): hidden 3 < features (layer 0 projects), 64 > classes (last layer fused)."""
    torch.manual_seed(0)
    d = community_data(300, seed=4)
    assert d.num_features > 3 and d.num_classes < 64
    m = build_model(model, d.num_features, hidden, d.num_classes, num_layers=layers, dropout=0.5)
    m.eval()
    sampler = NeighborSampler(d.graph, [-1] * layers)
    feat = torch.from_numpy(d.feat)
    full = layerwise_inference(m, sampler, feat, torch.device("cpu"), batch_edges=97)
    seeds = np.arange(0, 300, 11)
    mb = sampler.sample(seeds)
    mb.features = feat[mb.input_nodes]
    with torch.no_grad():
        out = m(mb)
    torch.testing.assert_close(out, full[torch.from_numpy(seeds)], rtol=1e-4, atol=1e-5)


def test_sampled_gcn_is_unbiased_estimate():
    """With sampling, GCN's d/s rescaling keeps the expected aggregation equal to the full one."""
    torch.manual_seed(0)
    g = random_graph(80, 500, seed=5)
    x = torch.randn(80, 3)
    conv = build_model("gcn", 3, 3, 3, num_layers=1).convs[0]
    full = conv(NeighborSampler(g, [-1]).full_block(0, 80), x, x)[:5]
    s = NeighborSampler(g, [2])
    acc = torch.zeros_like(full)
    trials = 3000
    with torch.no_grad():
        for t in range(trials):
            mb = s.sample(np.arange(5), key=t)
            xs = x[mb.input_nodes]
            acc += conv(mb.blocks[0], xs, xs[:5])
    torch.testing.assert_close(acc / trials, full.detach(), rtol=0.1, atol=0.05)


def test_unknown_model():
    from twopgraph.errors import ConfigError
    with pytest.raises(ConfigError):
        build_model("gat", 4, 4, 2, 2)


@pytest.mark.parametrize("p", [0.3, 0.5])
def test_relu_dropout_semantics(p):
    from torch.nn import Dropout
    from twopgraph.models import relu_dropout
    torch.manual_seed(0)
    d = Dropout(p)
    x = (torch.rand(301, 257) - 0.25).requires_grad_()  # odd sizes: a lone last element
    y = relu_dropout(x, d)
    pos = x.detach() > 0
    zero = (y[pos] == 0).float().mean().item()
    assert abs(zero - p) < 0.01  # kept with probability 1 - p among positives
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
    from twopgraph.models import relu_dropout
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
