"""Issue 41 item 2: ``--sampler auto`` (the default) takes LABOR where it cuts a batch's input
vertices by at least 10%, else neighbour sampling; the decision is measured on the run's own
scheduler, logged, recorded in metrics.json, made on figures combined over ranks, and training
afterwards draws exactly the batches of the explicit sampler."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch
from conftest import community_data

from twopgraph.config import TrainConfig
from twopgraph.graph.data import CSRGraph, GraphData
from twopgraph.locality.schedule import make_scheduler
from twopgraph.pipeline.assemble import make_loader
from twopgraph.run.train import train
from twopgraph.sampler import make_sampler
from twopgraph.sampler.auto import AUTO_THRESHOLD, choose_sampler, decide
from twopgraph.sampler.labor import LaborSampler
from twopgraph.sampler.neighbor import NeighborSampler


def _figures(labor: float, neighbor: float, batches: int = 4) -> dict:
    return {"labor_inputs": labor * batches, "labor_batches": batches,
            "neighbor_inputs": neighbor * batches, "neighbor_batches": batches,
            "seconds": 0.1}


def test_the_rule_at_and_around_the_threshold():
    assert AUTO_THRESHOLD == 0.9
    at = decide(_figures(90.0, 100.0))
    assert (at.sampler, at.ratio) == ("labor", pytest.approx(0.9))
    assert decide(_figures(90.5, 100.0)).sampler == "neighbor"
    assert decide(_figures(40.0, 100.0)).sampler == "labor"
    assert decide(_figures(0.0, 0.0)).sampler == "neighbor"  # nothing measured: the default
    c = decide(_figures(60.0, 100.0))
    assert "sampler auto -> labor" in c.describe() and "0.60 <= 0.90" in c.describe()
    assert c.as_dict()["neighbor_inputs_per_batch"] == 100.0


def _bipartite(k: int = 64) -> CSRGraph:
    """K(k, k): every left vertex's neighbourhood is the whole right side."""
    src = np.repeat(np.arange(k), k)
    dst = np.tile(np.arange(k, 2 * k), k)
    return CSRGraph.from_edges(np.r_[src, dst], np.r_[dst, src], num_nodes=2 * k)


def test_overlapping_neighbourhoods_choose_labor_covered_graphs_neighbor():
    g = _bipartite()
    sched = make_scheduler("random", np.arange(64), 16, seed=0)
    c = choose_sampler(lambda n: make_sampler(n, g, [4, 4]), sched)
    assert c.sampler == "labor" and c.ratio <= 0.9 and c.batches == 4
    # a ring whose every vertex keeps all its neighbours: both samplers reach the same ones
    n = 40
    ring = CSRGraph.from_edges(np.r_[np.arange(n), (np.arange(n) + 1) % n],
                               np.r_[(np.arange(n) + 1) % n, np.arange(n)], num_nodes=n)
    sched = make_scheduler("random", np.arange(n), 8, seed=0)
    c = choose_sampler(lambda name: make_sampler(name, ring, [5, 5]), sched)
    assert c.sampler == "neighbor" and c.ratio == pytest.approx(1.0)


def test_the_measurement_touches_no_global_random_state():
    g = _bipartite()
    sched = make_scheduler("random", np.arange(64), 16, seed=0)
    np_state, torch_state = np.random.get_state()[1].copy(), torch.get_rng_state().clone()
    choose_sampler(lambda n: make_sampler(n, g, [4, 4]), sched)
    assert np.array_equal(np.random.get_state()[1], np_state)
    assert torch.equal(torch.get_rng_state(), torch_state)


def _dense_community(k: int = 200, size: int = 50, degree: int = 20) -> GraphData:
    """``k`` communities of ``size`` vertices, each vertex linked to ``degree`` others of its
    own: a batch's sampled neighbourhoods overlap inside communities without covering the
    graph (where labor pays). Labels: community mod 4."""
    rng = np.random.default_rng(1)
    n = k * size
    comm = np.arange(n) // size
    src = np.repeat(np.arange(n), degree)
    dst = comm[src] * size + rng.integers(0, size, src.shape[0])
    g = CSRGraph.from_edges(np.r_[src, dst], np.r_[dst, src], num_nodes=n)
    label = (comm % 4).astype(np.int64)
    feat = (np.eye(4, 8, dtype=np.float32)[label] + rng.normal(size=(n, 8))).astype(np.float32)
    perm = rng.permutation(n)
    tr, va, te = (np.sort(perm[:n // 2]), np.sort(perm[n // 2:3 * n // 4]),
                  np.sort(perm[3 * n // 4:]))
    return GraphData(g, feat, label, tr, va, te, name="dense-communities")


def _first_inputs(loader, batches: int = 3) -> list[np.ndarray]:
    from twopgraph.sampler.stream import sampled_batches
    out = []
    for mb, _ in sampled_batches(loader.scheduler, loader.sampler, 0):
        out.append(mb.input_nodes.numpy().copy())
        if len(out) == batches:
            break
    return out


@pytest.mark.parametrize("data_fn, fanouts, batch, expected", [
    (_dense_community, "5,5", 64, "labor"),
    (community_data, "10,10", 128, "neighbor"),  # a batch reaches nearly all 600 vertices
])
def test_loader_decides_then_samples_like_the_explicit_sampler(data_fn, fanouts, batch, expected,
                                                               caplog):
    data = data_fn()
    base = dict(fanouts=fanouts, batch_size=batch, schedule="random", threads=1, prefetch=0)
    with caplog.at_level(logging.INFO, logger="twopgraph"):
        auto = make_loader(TrainConfig.of(**base).validate(), data, "cpu")
    assert auto.sampler_choice["sampler"] == expected == auto.sampler_name
    assert any("sampler auto -> " + expected in r.message for r in caplog.records)
    kind = LaborSampler if expected == "labor" else NeighborSampler
    assert type(auto.sampler) is kind
    explicit = make_loader(TrainConfig.of(sampler=expected, **base).validate(), data, "cpu")
    assert explicit.sampler_choice is None and explicit.sampler_name == expected
    for a, b in zip(_first_inputs(auto), _first_inputs(explicit), strict=True):
        assert np.array_equal(a, b)


def test_the_decision_is_made_on_the_combined_figures():
    """A distributed run sums every rank's figures: the decision follows the sums, not this
    process's own figures."""
    data = _dense_community()
    cfg = TrainConfig.of(fanouts="5,5", batch_size=64, schedule="random", threads=1,
                         prefetch=0).validate()
    seen = []

    def combine(f):  # another rank's labor batches reached everything
        seen.append(dict(f))
        if "labor_inputs" in f:
            return {**f, "labor_inputs": f["labor_inputs"] + 10 * f["neighbor_inputs"],
                    "labor_batches": 2 * f["labor_batches"]}
        return f
    loader = make_loader(cfg, data, "cpu", combine_schedule_figures=combine)
    assert any("labor_inputs" in f for f in seen)
    assert loader.sampler_choice["sampler"] == "neighbor"
    assert type(loader.sampler) is NeighborSampler


def test_train_records_the_choice_and_an_explicit_sampler_none(tmp_path):
    data = _dense_community()
    common = dict(fanouts="5,5", batch_size=64, epochs=1, threads=1, progress=False,
                  schedule="random", hidden=16)
    train(TrainConfig.of(out=str(tmp_path / "auto"), **common), data)
    m = json.loads((tmp_path / "auto" / "metrics.json").read_text())
    assert m["sampler"] == m["sampler_choice"]["sampler"] == "labor"
    assert m["sampler_choice"]["ratio"] <= AUTO_THRESHOLD
    train(TrainConfig.of(out=str(tmp_path / "nbr"), sampler="neighbor", **common), data)
    m = json.loads((tmp_path / "nbr" / "metrics.json").read_text())
    assert m["sampler"] == "neighbor" and m["sampler_choice"] is None


def test_labor_flags_under_auto_are_not_reported_as_ignored():
    from twopgraph.pipeline.assemble import ignored_flags
    cfg = TrainConfig.of(labor_iterations=2).validate()
    assert ignored_flags(cfg) == []
    cfg = TrainConfig.of(sampler="neighbor", labor_iterations=2).validate()
    assert any("--labor-iterations" in ln for ln in ignored_flags(cfg))


def test_a_resumed_auto_run_keeps_the_checkpoints_sampler(tmp_path, caplog):
    """``sampler`` is not in the resume signature while it is the default ``auto``: a resumed
    run goes on with the sampler its checkpoint was trained with (recorded in the checkpoint;
    a checkpoint written before that key: its config's sampler, ``neighbor`` when it was the
    default) instead of deciding again."""
    from twopgraph.run.checkpoint import CHECKPOINT, resumed_sampler
    data = _dense_community()
    common = dict(fanouts="5,5", batch_size=64, threads=1, progress=False, schedule="random",
                  hidden=16)
    out = tmp_path / "run"
    train(TrainConfig.of(out=str(out), epochs=1, **common), data)
    ckpt = torch.load(out / CHECKPOINT, weights_only=False)
    assert ckpt["sampler"] == "labor" and resumed_sampler(ckpt) == "labor"
    train(TrainConfig.of(out=str(out), epochs=2, resume=True, **common), data)
    assert json.loads((out / "metrics.json").read_text())["sampler"] == "labor"
    # a checkpoint of the time neighbour sampling was the default
    ckpt = torch.load(out / CHECKPOINT, weights_only=False)
    del ckpt["sampler"]
    ckpt["config"]["sampler"] = "neighbor"
    torch.save(ckpt, out / CHECKPOINT)
    with caplog.at_level(logging.INFO, logger="twopgraph"):
        train(TrainConfig.of(out=str(out), epochs=3, resume=True, **common), data)
    m = json.loads((out / "metrics.json").read_text())
    assert m["sampler"] == "neighbor" and len(m["epochs"]) == 3
    assert any("resuming with the checkpoint's sampler, neighbor" in r.message
               for r in caplog.records)
    assert resumed_sampler({"config": {"sampler": "auto"}}) is None


def test_resume_keeps_a_checkpoints_labor_iterations_from_before_the_default_changed():
    """--labor-iterations' default became 1 (LABOR-1); a checkpoint of a run trained at the
    old default (0, left out of the signature either way) goes on with 0; a value given
    now, or a checkpoint without the key, changes nothing."""
    from twopgraph.config import TrainConfig
    from twopgraph.run.checkpoint import resume_sampler
    cfg = TrainConfig.of(sampler="labor")
    assert cfg.sampling.labor_iterations == 1
    old = {"config": {"sampler": "labor", "labor_iterations": 0}}
    assert resume_sampler(cfg, old).sampling.labor_iterations == 0
    assert resume_sampler(TrainConfig.of(sampler="labor", labor_iterations=2),
                          old).sampling.labor_iterations == 2
    assert resume_sampler(cfg, {"config": {"sampler": "labor"}}) is cfg
    auto = resume_sampler(TrainConfig.of(), {"sampler": "labor", **old})
    assert (auto.sampling.sampler, auto.sampling.labor_iterations) == ("labor", 0)
