"""The public interface of ``twopgraph.pipeline``: a :class:`NodeLoader` epoch yields every seed
once, with the table's feature rows and the seeds' labels; a loader assembled from a config
trains one epoch through a feature cache."""

from __future__ import annotations

import numpy as np
import torch
from conftest import community_data

import twopgraph.pipeline as pkg
from twopgraph.config import TrainConfig
from twopgraph.models import build_model
from twopgraph.pipeline import EpochStats, Loader, NodeLoader, ThreadPlan, make_loader, train_epoch


def test_every_public_name_imports():
    for n in pkg.__all__:
        getattr(pkg, n)


def test_node_loader_epoch_yields_every_seed_once_with_its_rows():
    data = community_data(n=300, seed=2)
    loader = NodeLoader(data, fanouts=[3, 3], batch_size=40, schedule="random", threads=2)
    assert len(loader) == -(-len(data.train_idx) // 40) and loader.epoch == 0
    seeds = []
    for mb in loader:
        ids = mb.input_nodes.numpy()
        assert mb.seeds.tolist() == ids[:mb.num_seeds].tolist() and len(mb.blocks) == 2
        assert torch.equal(mb.features, torch.from_numpy(data.feat[ids]))
        assert mb.labels.tolist() == data.label[mb.seeds.numpy()].tolist()
        seeds.append(mb.seeds.numpy())
    assert np.array_equal(np.sort(np.concatenate(seeds)), data.train_idx)
    assert loader.epoch == 1 and isinstance(loader.stats, EpochStats)
    assert loader.stats.num_seeds == len(data.train_idx) == loader.stats.as_dict()["num_seeds"]


def test_assembled_loader_trains_an_epoch_through_a_cache():
    data = community_data(n=300, seed=2)
    cfg = TrainConfig.of(fanouts=[3, 3], batch_size=40, schedule="random", lr=0.01, epochs=1,
                         hidden=8, device="cpu", threads=2, cache_policy="degree",
                         cache_ratio=0.5, progress=False).validate()
    loader = make_loader(cfg, data, "cpu")
    assert isinstance(loader, Loader) and loader.plan == ThreadPlan.for_threads(2, 2)
    model = build_model("sage", data.num_features, 8, data.num_classes, num_layers=2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    before = [p.detach().clone() for p in model.parameters()]
    rec = train_epoch(model, opt, loader, 0, progress=False)
    assert rec["num_batches"] == len(loader) and rec["num_seeds"] == len(data.train_idx)
    assert np.isfinite(rec["loss"]) and 0 < rec["hit_rate"] < 1
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
