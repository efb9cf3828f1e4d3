"""The public interface of ``twopgraph.models``: SAGE and GCN layers against their formulas on
a hand-made sampled block, and a registered model stacked by :func:`build_model` /
:func:`model_from_config` over a mini-batch."""

from __future__ import annotations

import pytest
import torch

import twopgraph.models as pkg
from twopgraph.config import TrainConfig
from twopgraph.core import Block, MiniBatch
from twopgraph.errors import ConfigError
from twopgraph.models import (
    MODELS,
    BlockGNN,
    Conv,
    GCNConv,
    SAGEConv,
    build_model,
    model_from_config,
)

# 4 src -> 2 dst: dst 0 sampled neighbours 1, 2, 3; dst 1 neighbour 0; full-graph degrees
DEG = torch.tensor([5.0, 2.0, 3.0, 1.0])
BLOCK = Block(4, 2, torch.tensor([0, 3, 4]), torch.tensor([1, 2, 3, 0]), DEG, DEG[:2])
NBRS = [[1, 2, 3], [0]]


def test_every_public_name_imports():
    for n in pkg.__all__:
        getattr(pkg, n)


@pytest.mark.parametrize("in_dim, out_dim", [(3, 2), (2, 4)])  # projected first / after
def test_convs_follow_their_formulas(in_dim, out_dim):
    torch.manual_seed(0)
    h = torch.randn(4, in_dim)
    sage, gcn = SAGEConv(in_dim, out_dim), GCNConv(in_dim, out_dim)
    torch.nn.init.normal_(gcn.bias)
    for v, nb in enumerate(NBRS):
        mean = h[nb].mean(0)
        want = sage.lin_self(h[v]) + sage.lin_neigh(mean)
        torch.testing.assert_close(sage(BLOCK, h, h[:2])[v], want, rtol=1e-5, atol=1e-5)
        d = DEG[v]  # GCN: h_v/(d_v+1) + (d_v/s_v) sum_u h_u/sqrt((d_u+1)(d_v+1)), then W, b
        s = sum(h[u] / torch.sqrt((DEG[u] + 1) * (d + 1)) for u in nb)
        want = gcn.lin(h[v] / (d + 1) + d / len(nb) * s) + gcn.bias
        torch.testing.assert_close(gcn(BLOCK, h, h[:2])[v], want, rtol=1e-5, atol=1e-5)


def test_models_stack_registered_convs():
    assert {"sage", "gcn"} <= set(MODELS.names()) and issubclass(SAGEConv, Conv)
    m = build_model("sage", in_dim=3, hidden=5, num_classes=2, num_layers=2, dropout=0.5)
    assert isinstance(m, BlockGNN) and m.num_layers == 2
    assert [type(c) for c in m.convs] == [SAGEConv, SAGEConv] and m.convs[0].out_dim == 5
    top = Block(2, 1, torch.tensor([0, 1]), torch.tensor([1]), DEG[:2], DEG[:1])
    x = torch.randn(4, 3)
    mb = MiniBatch(torch.tensor([7]), torch.tensor([7, 8, 9, 6]), [BLOCK, top], features=x)
    m.eval()  # no dropout: ReLU between the layers, nothing after the last
    hidden = torch.relu(m.convs[0](BLOCK, x, x[:2]))
    out = m(mb)
    assert out.shape == (1, 2)
    torch.testing.assert_close(out, m.convs[1](top, hidden, hidden[:1]))
    section = TrainConfig.of(model="gcn", hidden=8, dropout=0.0).validate().model
    g = model_from_config(section, num_features=3, num_classes=4, num_layers=3)
    assert [type(c) for c in g.convs] == [GCNConv] * 3 and g.convs[-1].out_dim == 4
    with pytest.raises(ConfigError, match="did you mean 'sage'"):
        build_model("sag", 3, 5, 2, 2)
