"""The public interface of ``twopgraph.inference``: exact layer-wise inference equals the model
on full-neighbour mini-batches, restricted inference equals it on the scored vertices (either
scope), intermediate tables on disk change nothing, and the scores are what they say."""

from __future__ import annotations

import numpy as np
import torch
from conftest import community_data

import twopgraph.inference as pkg
from twopgraph.inference import (
    EvalTable,
    accuracy,
    edge_balanced_ranges,
    evaluate_scored,
    expand_frontier,
    layerwise_inference,
    resolve_metric,
    rocauc,
    score,
    scored_ids,
    scored_inference,
    table_place,
)
from twopgraph.models import build_model
from twopgraph.sampler import NeighborSampler


def test_every_public_name_imports():
    for n in pkg.__all__:
        getattr(pkg, n)


def test_exact_inference_whole_graph_and_scored(tmp_path):
    data = community_data(n=150, f=6, k=3, seed=1)
    g = data.graph
    torch.manual_seed(0)
    model = build_model("sage", 6, 16, 3, num_layers=2).eval()
    sampler = NeighborSampler(g, [-1, -1])  # every neighbour: a batch is exact
    want = layerwise_inference(model, sampler, data.feat, "cpu", batch_edges=400)
    assert want.shape == (150, 3) and model.training is False
    seeds = np.array([3, 77, 149])
    mb = sampler.sample(seeds)
    mb.features = torch.from_numpy(data.feat[mb.input_nodes.numpy()])
    with torch.no_grad():
        torch.testing.assert_close(model(mb), want[seeds], rtol=1e-5, atol=1e-5)
    on_disk = layerwise_inference(model, sampler, data.feat, "cpu", batch_edges=400,
                                  place="disk", scratch_dir=tmp_path)
    torch.testing.assert_close(on_disk, want, rtol=1e-5, atol=1e-5)

    s = np.array([9, 0, 9, 140])
    got = scored_inference(model, sampler, data.feat, "cpu", s, batch_edges=400)
    assert got.ids.tolist() == [0, 9, 140] == scored_ids(150, s).tolist()
    torch.testing.assert_close(got.take(s), want[torch.from_numpy(s)], rtol=1e-5, atol=1e-5)
    for scope in ("all", "scored"):
        logits, plan = evaluate_scored(model, sampler, data.feat, "cpu", s, scope=scope)
        assert plan.scope == scope
        torch.testing.assert_close(logits.take(s), want[torch.from_numpy(s)], rtol=1e-5,
                                   atol=1e-5)
    ids = np.array([0, 9])
    hood = np.unique(np.concatenate([ids, g.neighbors(0), g.neighbors(9)]))
    assert expand_frontier(g, ids.astype(np.int32)).tolist() == hood.tolist()
    bounds = edge_balanced_ranges(g.indptr, 64)
    assert bounds[0] == 0 and bounds[-1] == 150 and np.all(np.diff(bounds) > 0)
    assert len(bounds) - 1 == -(-int(g.indptr[-1]) // 64)


def test_scores_and_tables(tmp_path):
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 1.0], [0.0, 5.0]])
    labels = torch.tensor([0, 0, 1, 1])
    assert accuracy(logits, labels, np.array([0, 1, 2, 3])) == 0.5
    assert accuracy(logits, labels, np.array([], dtype=np.int64)) is None
    assert rocauc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])) == 0.75
    assert score("rocauc", logits, labels, np.arange(4)) == 0.625  # l1 - l0: -2, 1 | -2, 5
    assert resolve_metric("auto", 2) == "rocauc" and resolve_metric("auto", 5) == "acc"
    assert table_place(100, "cpu", host_bytes=1000) == "host"
    assert table_place(600, "cpu", host_bytes=1000) == "disk"
    t = EvalTable(4, 2, "disk", "cpu", tmp_path)  # an anonymous scratch file
    assert isinstance(t.array, np.memmap) and t.resident is None
    t.write(1, 3, torch.ones(2, 2))
    assert t.read(np.array([0, 2])).tolist() == [[0.0, 0.0], [1.0, 1.0]]
