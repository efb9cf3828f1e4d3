"""``--schedule auto``: locality where it cuts the input vertices per batch, random where a
batch reaches the graph anyway; the choice leaves the training batches as the explicit
schedule's, is logged and recorded, and is the same on every rank."""

from __future__ import annotations

import json
import logging
import os
import socket

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from conftest import join_all

from twopgraph.config import TrainConfig
from twopgraph.errors import ConfigError
from twopgraph.graph.data import CSRGraph, GraphData
from twopgraph.locality.auto import (
    AUTO_BATCHES,
    AUTO_THRESHOLD,
    LABEL_SKEW_THRESHOLD,
    ScheduleChoice,
    choose_clusters,
    choose_schedule,
    decide,
    describe_clusters,
    label_skew,
    label_tv,
    measure,
)
from twopgraph.pipeline.assemble import make_loader
from twopgraph.pipeline.nodeloader import NodeLoader
from twopgraph.run.train import train
from twopgraph.sampler import NeighborSampler

COMMUNITIES, SIZE = 40, 25  # 1000 vertices in 40 closed communities


def clustered_data(seed: int = 0) -> GraphData:
    """40 communities of 25 vertices, no edge between communities (a ring plus random chords
    in each): a batch of whole communities needs only their own vertices as inputs, a
    uniform batch touches most communities. Labels: community mod 4."""
    rng = np.random.default_rng(seed)
    src, dst = [], []
    for c in range(COMMUNITIES):
        base = c * SIZE
        ring = np.arange(SIZE)
        src += list(base + ring)
        dst += list(base + (ring + 1) % SIZE)
        src += list(base + rng.integers(0, SIZE, 3 * SIZE))
        dst += list(base + rng.integers(0, SIZE, 3 * SIZE))
    n = COMMUNITIES * SIZE
    g = CSRGraph.from_edges(np.array(src), np.array(dst), n)
    comm = np.arange(n) // SIZE
    label = (comm % 4).astype(np.int64)
    centroids = rng.normal(size=(4, 8)).astype(np.float32)
    feat = (centroids[label] + 1.0 * rng.normal(size=(n, 8))).astype(np.float32)
    perm = rng.permutation(n)
    return GraphData(g, feat, label, np.sort(perm[:600]), np.sort(perm[600:800]),
                     np.sort(perm[800:]), name="clustered")


def dense_data(n: int = 200, seed: int = 0) -> GraphData:
    """A small dense random graph (degree ~60): two hops of 10 x 10 from 50 seeds reach
    nearly every vertex, whatever the seeds."""
    rng = np.random.default_rng(seed)
    g = CSRGraph.from_edges(rng.integers(0, n, 30 * n), rng.integers(0, n, 30 * n), n)
    label = rng.integers(0, 3, n).astype(np.int64)
    feat = rng.normal(size=(n, 4)).astype(np.float32)
    return GraphData(g, feat, label, np.arange(n), np.arange(0), np.arange(0), name="dense")


# -- the decision -------------------------------------------------------------------------------
def test_clustered_graph_chooses_locality():
    d = clustered_data()
    parts = np.arange(d.num_nodes) // SIZE
    c = choose_schedule(NeighborSampler(d.graph, [3, 3]), np.arange(d.num_nodes), 50,
                        seed=0, parts=parts, labels=d.label)
    assert isinstance(c, ScheduleChoice)
    assert c.schedule == "locality" and c.threshold == AUTO_THRESHOLD
    assert c.batches == AUTO_BATCHES  # 20 batches per epoch: the first 8 measured
    # a locality batch = 2 whole communities, closed under sampling: 50 input vertices
    assert c.locality_inputs_per_batch == 50.0
    assert c.random_inputs_per_batch > 4 * 50
    assert c.ratio == pytest.approx(c.locality_inputs_per_batch / c.random_inputs_per_batch)
    assert c.seconds >= 0
    rec = c.as_dict()
    assert set(rec) == {"schedule", "ratio", "locality_inputs_per_batch",
                        "random_inputs_per_batch", "batches", "threshold", "seconds", "basis",
                        "balls", "label_skew", "label_threshold"}
    assert rec["basis"] == "clusters" and rec["balls"] is None
    # label-balanced pairs of communities of 4 classes: 2 classes per batch, TV 0.5 less
    # random batches' noise floor
    assert 0.3 < c.label_skew <= LABEL_SKEW_THRESHOLD == c.label_threshold
    json.dumps(rec)  # recorded in metrics.json as it is


def test_dense_graph_chooses_random():
    d = dense_data()
    parts = np.arange(d.num_nodes) // 20
    c = choose_schedule(NeighborSampler(d.graph, [10, 10]), d.train_idx, 50, seed=0,
                        parts=parts, labels=d.label)
    assert c.schedule == "random" and c.ratio > AUTO_THRESHOLD
    assert c.batches == 4  # fewer batches in an epoch than AUTO_BATCHES: all of them
    assert c.random_inputs_per_batch > 0.9 * d.num_nodes


def test_decision_is_deterministic_and_leaves_global_rng_alone():
    d = clustered_data()
    parts = np.arange(d.num_nodes) // SIZE
    torch_state, np_state = torch.get_rng_state(), np.random.get_state()
    a = choose_schedule(NeighborSampler(d.graph, [3, 3], seed=5), d.train_idx, 64, seed=5,
                        parts=parts, labels=d.label, workers=3)
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert all(np.array_equal(x, y) for x, y in zip(np.random.get_state(), np_state))
    b = choose_schedule(NeighborSampler(d.graph, [3, 3], seed=5), d.train_idx, 64, seed=5,
                        parts=parts, labels=d.label, workers=1)
    assert {**a.as_dict(), "seconds": 0} == {**b.as_dict(), "seconds": 0}


def test_decide_threshold_and_summed_figures():
    f = {"locality_inputs": 600, "locality_batches": 10, "random_inputs": 1000,
         "random_batches": 10, "seconds": 0.5}
    assert AUTO_THRESHOLD == 0.6
    assert decide(f).schedule == "locality"  # 0.6 <= 0.6
    assert decide({**f, "locality_inputs": 601}).schedule == "random"
    assert decide(f, threshold=0.5).schedule == "random"
    c = decide(f)
    assert (c.ratio, c.locality_inputs_per_batch, c.random_inputs_per_batch, c.batches) == \
        (pytest.approx(0.6), 60.0, 100.0, 10)
    line = c.describe()
    assert line.startswith("schedule auto -> locality:") and "ratio 0.60 <= 0.60" in line
    assert "10 batches" in line


def test_skewed_labels_keep_random_order():
    """Communities of one class each, 8 classes, batches of two communities: locality batches
    cut the input vertices as before but see 2 of 8 classes -- random order is kept."""
    d = clustered_data()
    parts = np.arange(d.num_nodes) // SIZE
    labels = (np.arange(d.num_nodes) // SIZE % 8).astype(np.int64)
    c = choose_schedule(NeighborSampler(d.graph, [3, 3]), np.arange(d.num_nodes), 50,
                        seed=0, parts=parts, labels=labels)
    assert c.ratio <= AUTO_THRESHOLD  # the inputs alone would take locality
    assert c.label_skew > LABEL_SKEW_THRESHOLD and c.schedule == "random"
    line = c.describe()
    assert "schedule auto -> random:" in line and "too few classes" in line
    # without labels the guard does not apply
    c = choose_schedule(NeighborSampler(d.graph, [3, 3]), np.arange(d.num_nodes), 50,
                        seed=0, parts=parts, labels=None)
    assert c.schedule == "locality" and c.label_skew is None and c.label_threshold is None


def test_label_tv_of_batches():
    from twopgraph.locality.schedule import LocalityScheduler, RandomScheduler
    labels = np.repeat(np.arange(4), 25)  # 4 classes of 25 vertices
    parts = np.arange(100) // 25  # one class per cluster
    tv, n = label_tv(LocalityScheduler(np.arange(100), 25, parts=parts, balance=1),
                     np.arange(100), labels)
    assert n == 4 and tv == pytest.approx(4 * 0.75)  # one class of 4 per batch
    tv, n = label_tv(RandomScheduler(np.arange(100), 100), np.arange(100), labels)
    assert (tv, n) == (0.0, 1)  # the whole training set: its own mix
    assert label_tv(RandomScheduler(np.arange(10), 5), np.arange(10), None) is None
    assert label_tv(RandomScheduler(np.arange(10), 5), np.arange(10),
                    np.full(10, -1)) is None
    assert label_tv(RandomScheduler(np.arange(10), 5), np.arange(10),
                    np.zeros((10, 2), dtype=np.int64)) is None


def test_choose_clusters_takes_the_first_count_with_mixed_labels():
    """64 classes in contiguous blocks, clusters = contiguous blocks: 14 or 16 clusters per
    batch see at most 14 or 16 of the 64 classes (skewed), 32 per batch pass."""
    from types import SimpleNamespace
    n, batch = 65536, 128  # a large graph: >= 512 x batch vertices
    train = np.arange(0, n, 8)  # 8192 training vertices, 64 batches
    labels = (np.arange(n) * 64 // n).astype(np.int64)
    asked = []

    def cluster(k):
        asked.append(k)
        return SimpleNamespace(parts=np.arange(n) * k // n)
    k, tried = choose_clusters(n, train, labels, batch, 0, cluster)
    assert asked == [14 * 64, 16 * 64, 32 * 64] and k == 32 * 64
    assert [t["clusters_per_batch"] for t in tried] == [14, 16, 32]
    skews = [t["label_skew"] for t in tried]
    assert skews[0] > skews[1] > LABEL_SKEW_THRESHOLD >= skews[2]
    assert skews[2] == pytest.approx(label_skew(train, batch, 0, parts=np.arange(n) * k // n,
                                                labels=labels))
    line = describe_clusters(k, tried)
    assert line.startswith(f"14 per batch -> label skew {skews[0]:.2f}, 16 per batch")
    assert line.endswith(f"32 per batch -> label skew {skews[2]:.2f}; kept {k} clusters")
    # none passes: the first count (the decision then keeps random order)
    asked.clear()
    k, tried = choose_clusters(n, train, labels, batch, 0, cluster, threshold=0.01)
    assert k == 14 * 64 and len(tried) == 3
    # small graph, or no labels: the default count, nothing clustered here
    asked.clear()
    assert choose_clusters(4000, train[:400], labels, batch, 0, cluster) == (
        max(14 * 4, 500), [])
    assert choose_clusters(n, train, None, batch, 0, cluster) == (14 * 64, [])
    assert asked == []


def test_decide_label_skew():
    f = {"locality_inputs": 500, "locality_batches": 10, "random_inputs": 1000,
         "random_batches": 10, "seconds": 0.5, "locality_label_tv": 6.0,
         "locality_label_batches": 10, "random_label_tv": 1.0, "random_label_batches": 10}
    c = decide(f)  # skew 0.6 - 0.1 = 0.5 > 0.46
    assert c.schedule == "random" and c.label_skew == pytest.approx(0.5)
    assert decide({**f, "locality_label_tv": 5.5}).schedule == "locality"  # 0.45
    assert decide(f, label_threshold=0.5).schedule == "locality"
    assert "label skew 0.50 > 0.46" in c.describe()


# -- training draws the explicit schedule's batches -----------------------------------------------
def _cfg(tmp_path, name, **kw):
    base = dict(fanouts=[3, 3], batch_size=50, epochs=2, hidden=16, lr=0.01, seed=3,
                device="cpu", out=str(tmp_path / name), progress=False, prefetch=0, threads=1,
                renumber=False, num_clusters=40, data_root=str(tmp_path / "data"))
    base.update(kw)
    return TrainConfig.of(**base).validate()


def _batches(loader, epoch):
    return [(mb.seeds.clone(), mb.input_nodes.clone()) for mb in loader.epoch(epoch)]


@pytest.mark.parametrize("data_fn,expect", [(clustered_data, "locality"),
                                            (dense_data, "random")])
def test_auto_loader_draws_the_batches_of_the_explicit_schedule(tmp_path, data_fn, expect):
    from twopgraph.pipeline.assemble import locality_for
    data = data_fn()
    kw = dict(fanouts=[10, 10]) if expect == "random" else {}
    auto = _cfg(tmp_path, "a", schedule="auto", **kw)
    prep = locality_for(data, ["auto"], auto)
    # dense: the probe shows that clusters cannot pay, nothing is clustered
    assert (prep.clustering is None) == (expect == "random")
    parts = None if prep.clustering is None else prep.clustering.parts
    torch.manual_seed(0)
    before = torch.get_rng_state()
    la = make_loader(auto, data, "cpu", parts=parts, schedule_choice=prep.schedule_choice)
    assert torch.equal(torch.get_rng_state(), before)  # dropout draws stay the same
    assert la.schedule == expect and la.schedule_choice["schedule"] == expect
    lx = make_loader(_cfg(tmp_path, "x", schedule=expect, **kw), data, "cpu", parts=parts)
    assert lx.schedule == expect and lx.schedule_choice is None
    for epoch in (0, 1):
        a, x = _batches(la, epoch), _batches(lx, epoch)
        assert len(a) == len(x) == len(la)
        for (sa, ia), (sx, ix) in zip(a, x):
            assert torch.equal(sa, sx) and torch.equal(ia, ix)


def test_auto_trains_as_explicit_locality_and_is_recorded(tmp_path, caplog):
    data = clustered_data()
    with caplog.at_level(logging.INFO, logger="twopgraph"):
        a = train(_cfg(tmp_path, "auto", schedule="auto"), data)
    x = train(_cfg(tmp_path, "loc", schedule="locality"), data)
    assert [e["loss"] for e in a.epochs] == [e["loss"] for e in x.epochs]
    assert a.test_acc == x.test_acc
    assert torch.equal(a.logits, x.logits)
    lines = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith("schedule auto -> ")]
    assert len(lines) == 1 and lines[0].startswith("schedule auto -> locality: locality "
                                                   "batches reach ")
    ma = json.loads((tmp_path / "auto" / "metrics.json").read_text())
    mx = json.loads((tmp_path / "loc" / "metrics.json").read_text())
    assert ma["config"]["schedule"] == "auto" and ma["schedule"] == "locality"
    choice = ma["schedule_choice"]
    assert choice["schedule"] == "locality" and choice["ratio"] <= choice["threshold"]
    assert choice["batches"] == AUTO_BATCHES
    assert mx["schedule"] == "locality" and mx["schedule_choice"] is None


@pytest.mark.parametrize("name", ["amazon_photo", "cora"])
def test_small_graph_decides_without_clustering(tmp_path, monkeypatch, name):
    """On a small graph the probe builds each batch from as many balls as a locality batch
    would hold clusters: amazon_photo (one ball per batch: 0.62 x random's inputs, so it was
    clustered and renumbered, then measured at 0.95: random) and cora (one batch per epoch:
    both schedules give the same batch) take random without any clustering."""
    import sys

    from conftest import shared_dataset

    from twopgraph.locality.auto import PROBE_BALLS_THRESHOLD, probe_balls
    from twopgraph.pipeline.assemble import locality_for
    data = shared_dataset(name)
    calls = []
    renumber_mod = sys.modules["twopgraph.locality.renumber"]
    monkeypatch.setattr(renumber_mod, "cluster_graph",
                        lambda *a, **k: calls.append(1) or pytest.fail("clustered"))
    cfg = TrainConfig.of(dataset=name, data_root=str(tmp_path / "data"), fanouts=[10, 10],
                         batch_size=1024, out=str(tmp_path / "run"), progress=False).validate()
    prep = locality_for(data, ["auto"], cfg)
    choice = prep.schedule_choice
    assert not calls and prep.clustering is None and prep.perm is None
    assert choice.schedule == "random" and choice.basis == "probe"
    assert choice.balls == probe_balls(data.num_nodes, len(data.train_idx), 1024) > 1
    assert choice.ratio > PROBE_BALLS_THRESHOLD
    if name == "cora":  # 140 training vertices: one batch, the same whatever the order
        assert choice.batches == 1 and choice.ratio == 1.0
    # a large graph keeps one ball per batch (the calibration of PROBE_THRESHOLD)
    assert probe_balls(2_450_000, 196_615, 1024) == 1


def test_nodeloader_auto_probes_before_clustering(tmp_path, monkeypatch):
    """NodeLoader's schedule="auto" (its default) decides as train does: where the probe shows
    that clusters cannot pay, nothing is clustered (it always ran METIS); the batches are
    those of schedule="random"."""
    import sys
    renumber_mod = sys.modules["twopgraph.locality.renumber"]
    monkeypatch.setattr(renumber_mod, "cluster_graph",
                        lambda *a, **k: pytest.fail("clustered"))
    data = dense_data()
    auto = NodeLoader(data, [10, 10], batch_size=50, threads=1, data_root=tmp_path)
    assert auto.schedule == "random" and auto.schedule_choice["basis"] == "probe"
    rnd = NodeLoader(data, [10, 10], batch_size=50, threads=1, schedule="random")
    for a, b in zip(auto, rnd):
        assert torch.equal(a.seeds, b.seeds) and torch.equal(a.input_nodes, b.input_nodes)
    assert not (tmp_path / "clusters").exists()


def test_auto_without_clusters_is_refused(tmp_path):
    data = dense_data()
    with pytest.raises(ConfigError, match="needs the METIS cluster"):
        make_loader(_cfg(tmp_path, "a", schedule="auto"), data, "cpu", parts=None)


# -- NodeLoader ---------------------------------------------------------------------------------
def test_nodeloader_auto(tmp_path, monkeypatch):
    data = clustered_data()
    loader = NodeLoader(data, [3, 3], batch_size=50, schedule="auto", data_root=tmp_path,
                        threads=1, num_clusters=40)
    assert loader.schedule == "locality" and loader.schedule_choice["ratio"] < AUTO_THRESHOLD
    assert "schedule='locality'" in repr(loader)
    explicit = NodeLoader(data, [3, 3], batch_size=50, schedule="locality",
                          data_root=tmp_path, threads=1, num_clusters=40)
    assert explicit.schedule_choice is None
    for (a, b) in zip(loader, explicit):
        assert torch.equal(a.seeds, b.seeds) and torch.equal(a.input_nodes, b.input_nodes)
    # in-order batches: nothing to choose, no clusters needed
    ordered = NodeLoader(data, [3, 3], batch_size=50, split="test", schedule="auto")
    assert ordered.schedule == "random" and ordered.schedule_choice is None
    # without a data root the clusters are computed in memory: nothing written, same choice
    monkeypatch.delenv("TWOPGRAPH_DATA", raising=False)
    monkeypatch.chdir(tmp_path / "clusters")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    default = NodeLoader(data, [3, 3], batch_size=50, threads=1, num_clusters=40)
    assert default.schedule == "locality"
    assert default.schedule_choice["ratio"] == loader.schedule_choice["ratio"]
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    with pytest.raises(ConfigError, match="needs fanouts"):
        NodeLoader(data, None)


# -- ranks decide together -----------------------------------------------------------------------
def _rank(rank, port, out_dir):
    import torch.distributed as dist

    from twopgraph.distributed.trainer import summed_over_ranks
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        # rank 0 alone would choose locality (ratio 0.2), rank 1 random (ratio 0.87);
        # together: (200 + 1300) / (1000 + 1500) = 0.6 -> locality, on both
        mine = [{"locality_inputs": 200, "locality_batches": 8, "random_inputs": 1000,
                 "random_batches": 8, "seconds": 0.1},
                {"locality_inputs": 1300, "locality_batches": 8, "random_inputs": 1500,
                 "random_batches": 8, "seconds": 0.3}][rank]
        choice = decide(summed_over_ranks(mine, 2))
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(choice.as_dict(), f)
    finally:
        dist.destroy_process_group()


def test_ranks_decide_on_figures_summed_over_ranks(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.start_processes(_rank, args=(port, str(tmp_path)), nprocs=2, join=False,
                             start_method="spawn")
    join_all(ctx.processes)
    assert [p.exitcode for p in ctx.processes] == [0, 0]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0 == r1
    assert r0["schedule"] == "locality" and r0["ratio"] == pytest.approx(0.6)
    assert r0["locality_inputs_per_batch"] == 1500 / 16 and r0["seconds"] == 0.3


def test_measure_counts_each_scheduler():
    d = dense_data()
    f = measure(NeighborSampler(d.graph, [2]), d.train_idx, 64, parts=np.arange(200) // 20,
                batches=2)
    assert f["locality_batches"] == f["random_batches"] == 2
    assert 128 <= f["locality_inputs"] <= 2 * 64 * 3 and 128 <= f["random_inputs"]
