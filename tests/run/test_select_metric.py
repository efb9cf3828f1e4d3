"""Model selection (``--select best-val|last``) and the run's metric (``--metric
auto|acc|rocauc``): the ROC-AUC scorer against a pairwise twin, the selected epoch and its
figures in ``metrics.json``, ``TrainResult`` and the checkpoint, a resumed run selecting as an
uninterrupted one, and the same keys from a distributed run."""

from __future__ import annotations

import copy
import json
import logging
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import community_data, run_cli, shared_dataset

from twopgraph.config import TrainConfig
from twopgraph.errors import ConfigError
from twopgraph.graph.data import GraphData
from twopgraph.inference import accuracy, layerwise_inference, resolve_metric, rocauc, score
from twopgraph.run.checkpoint import CHECKPOINT
from twopgraph.run.predict import load_model
from twopgraph.run.records import METRICS
from twopgraph.run.selection import Selection
from twopgraph.run.train import train
from twopgraph.sampler import NeighborSampler

CPU = torch.device("cpu")
TOP = ("val_acc", "test_acc", "val_score", "test_score")


# -- the scorer ------------------------------------------------------------------------------
def pairwise_auc(scores: np.ndarray, positive: np.ndarray) -> float | None:
    """Brute force: the share of (positive, negative) pairs in which the positive scores
    higher, a tie counting one half."""
    p, n = scores[positive], scores[~positive]
    if p.shape[0] == 0 or n.shape[0] == 0:
        return None
    wins = (p[:, None] > n[None, :]).sum() + 0.5 * (p[:, None] == n[None, :]).sum()
    return float(wins) / (p.shape[0] * n.shape[0])


def softmax1(logits: np.ndarray) -> np.ndarray:
    """Class 1's probability, softmax(logits)[:, 1], in float64."""
    z = logits.astype(np.float64)
    z = np.exp(z - z.max(1, keepdims=True))
    return z[:, 1] / z.sum(1)


@pytest.mark.parametrize("seed", range(6))
def test_rocauc_equals_the_pairwise_twin_with_ties_and_shuffles(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 300))
    # few distinct values: many ties, within and across the classes
    s = rng.integers(0, int(rng.integers(1, 12)), n).astype(np.float64) / 3
    y = rng.random(n) < rng.uniform(0.05, 0.95)
    if y.all() or not y.any():
        y[0] = not y[0]
    want = pairwise_auc(s, y)
    assert rocauc(s, y) == pytest.approx(want, abs=1e-12)
    perm = rng.permutation(n)  # the order of the vertices does not matter
    assert rocauc(s[perm], y[perm]) == pytest.approx(want, abs=1e-12)
    # continuous scores (no ties)
    c = rng.normal(size=n)
    assert rocauc(c, y) == pytest.approx(pairwise_auc(c, y), abs=1e-12)


def test_rocauc_extremes_and_one_class():
    y = np.array([0, 0, 1, 1], dtype=bool)
    assert rocauc(np.array([0.1, 0.2, 0.3, 0.4]), y) == 1.0
    assert rocauc(np.array([0.4, 0.3, 0.2, 0.1]), y) == 0.0
    assert rocauc(np.ones(4), y) == 0.5
    assert rocauc(np.array([0.1, 0.2]), np.array([True, True])) is None
    assert rocauc(np.zeros(0), np.zeros(0, dtype=bool)) is None


@pytest.mark.parametrize("seed", range(4))
def test_score_rocauc_ranks_class_one_probability(seed):
    """score(rocauc) on logits = the twin on softmax(logits)[:, 1] over the split's vertices,
    with tied rows (identical logits) and the split given in any order."""
    rng = np.random.default_rng(seed)
    n = 200
    rows = rng.normal(size=(40, 2)).astype(np.float32)
    logits = rows[rng.integers(0, 40, n)]  # identical rows: tied probabilities
    labels = rng.integers(0, 2, n)
    idx = rng.permutation(n)[:120]
    want = pairwise_auc(softmax1(logits[idx]), labels[idx] == 1)
    got = score("rocauc", torch.from_numpy(logits), torch.from_numpy(labels), idx)
    assert got == pytest.approx(want, abs=1e-12)
    assert score("rocauc", torch.from_numpy(logits), torch.from_numpy(labels),
                 np.sort(idx)) == got
    # acc is the accuracy; an empty split has no score
    assert score("acc", torch.from_numpy(logits), torch.from_numpy(labels), idx) == \
        accuracy(torch.from_numpy(logits), torch.from_numpy(labels), idx)
    assert score("rocauc", torch.from_numpy(logits), torch.from_numpy(labels),
                 np.zeros(0, dtype=np.int64)) is None


def test_one_class_split_is_null_and_warned_once(caplog):
    logits = torch.randn(10, 2)
    labels = torch.zeros(10, dtype=torch.int64)
    warned: set = set()
    with caplog.at_level(logging.WARNING, logger="twopgraph"):
        for _ in range(3):
            assert score("rocauc", logits, labels, np.arange(10), warned=warned) is None
    msgs = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(msgs) == 1 and "ROC-AUC is undefined" in msgs[0]


def test_resolve_metric():
    assert resolve_metric("auto", 2) == "rocauc"
    assert resolve_metric("auto", 5) == "acc"
    assert resolve_metric("acc", 2) == "acc"
    assert resolve_metric("rocauc", 2) == "rocauc"
    for k in (1, 3, 40):
        with pytest.raises(ConfigError, match="--metric rocauc"):
            resolve_metric("rocauc", k)


def test_cli_rocauc_on_a_multiclass_dataset_is_one_line(tmp_path, capsys):
    out = tmp_path / "run"
    rc, o, err = run_cli(["train", "--dataset", "synthetic-tiny", "--data-root",
                          tmp_path / "data", "--metric", "rocauc", "--epochs", "1",
                          "--no-progress", "--device", "cpu", "--out", out], capsys)
    assert rc == 2 and o == "", err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("twopgraph:")]
    assert len(lines) == 1 and "--metric rocauc" in lines[0] and "5" in lines[0], err
    assert not out.exists()  # refused before anything was written: no folder left


# -- Selection, unit -------------------------------------------------------------------------
def _offers(select: str, scores) -> Selection:
    sel = Selection(select, "acc")
    model = torch.nn.Linear(2, 2)
    for e, s in enumerate(scores):
        sel.offer({"epoch": e, "val_acc": s, "test_acc": e / 10, "val_score": s,
                   "test_score": e / 10}, model)
    return sel


@pytest.mark.parametrize("scores, best, last", [
    ([0.5, 0.7, 0.7, 0.6], 1, 3),          # ties: the earliest
    ([0.9, 0.1], 0, 1),
    ([None, 0.2, None, 0.1], 1, 3),        # a null score loses to any number
    ([None, None, None], 2, 2),            # all null: the latest
    ([0.3], 0, 0),
])
def test_selection_rule(scores, best, last):
    b = _offers("best-val", scores)
    assert b.epoch == best and b.figures["test_acc"] == best / 10
    assert _offers("last", scores).epoch == last
    rec = b.record()
    assert rec["epoch"] == best and rec["select"] == "best-val" and set(TOP) <= set(rec)
    assert all(v.device.type == "cpu" for v in rec["model"].values())


# -- single-process runs ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def cdata() -> GraphData:
    return community_data()


def cfg(out, **kw) -> TrainConfig:
    """6 epochs at a high learning rate on the 4-community graph: the validation accuracy
    peaks at epoch 3 (tied at epoch 5), so best-val does not select the last epoch (LABOR-0,
    the labor default when this trajectory was measured)."""
    base = {"epochs": 6, "hidden": 16, "fanouts": [5, 5], "batch_size": 64, "lr": 0.3,
            "seed": 0, "device": "cpu", "out": str(out), "progress": False, "threads": 1,
            "schedule": "random", "eval_every": 1, "labor_iterations": 0}
    base.update(kw)
    return TrainConfig.of(**base)


def read(out) -> dict:
    return json.loads((Path(out) / METRICS).read_text())


def ckpt_of(out) -> dict:
    return torch.load(Path(out) / CHECKPOINT, map_location="cpu", weights_only=True)


def test_best_val_reports_the_argmax_epoch(cdata, tmp_path):
    out = tmp_path / "run"
    res = train(cfg(out, data_root=str(tmp_path / "data")), cdata)
    m = read(out)
    vals = [e["val_score"] for e in m["epochs"]]
    best = int(np.argmax(vals))  # the first of the maxima
    assert best < len(vals) - 1, vals  # the setup: best-val is not the last epoch
    assert max(vals[best + 1:]) <= vals[best]
    assert m["select"] == "best-val" and m["metric"] == "acc" and m["status"] == "ok"
    assert m["selected_epoch"] == best == res.selected_epoch
    for k in TOP:
        assert m[k] == m["epochs"][best][k], k
        assert all(k in e for e in m["epochs"])
    assert m["val_score"] == m["val_acc"]  # metric acc: the score is the accuracy
    assert (res.val_acc, res.test_acc) == (m["val_acc"], m["test_acc"])
    assert (res.val_score, res.test_score, res.metric) == (m["val_score"], m["test_score"],
                                                           "acc")
    # the logits returned are the selected model's (the caller's vertex ids)
    labels = torch.from_numpy(cdata.label)
    assert accuracy(res.logits, labels, cdata.test_idx) == m["test_acc"]
    assert accuracy(res.logits, labels, cdata.val_idx) == m["val_acc"]
    # the checkpoint: the resume state is the last epoch, the selected weights besides
    ck = ckpt_of(out)
    assert ck["epochs_done"] == 6 and ck["selected"]["epoch"] == best
    assert ck["selected"]["test_acc"] == m["test_acc"]
    assert any(not torch.equal(ck["model"][k], ck["selected"]["model"][k])
               for k in ck["model"])
    model, _ = load_model(out / CHECKPOINT)  # loads the selected weights
    assert all(torch.equal(v, ck["selected"]["model"][k])
               for k, v in model.state_dict().items())


def test_select_last_reports_the_final_epoch(cdata, tmp_path):
    out = tmp_path / "run"
    res = train(cfg(out, select="last", data_root=str(tmp_path / "data")), cdata)
    m = read(out)
    assert m["select"] == "last" and m["selected_epoch"] == 5 == res.selected_epoch
    for k in TOP:
        assert m[k] == m["epochs"][-1][k], k
    ck = ckpt_of(out)
    assert ck["selected"]["epoch"] == 5
    assert all(torch.equal(ck["model"][k], ck["selected"]["model"][k]) for k in ck["model"])
    assert accuracy(res.logits, torch.from_numpy(cdata.label), cdata.test_idx) == m["test_acc"]


def test_eval_every_selects_among_evaluated_epochs(cdata, tmp_path):
    out = tmp_path / "run"
    train(cfg(out, eval_every=2, data_root=str(tmp_path / "data")), cdata)
    m = read(out)
    evaluated = [e["epoch"] for e in m["epochs"] if "val_score" in e]
    assert evaluated == [1, 3, 5] and m["selected_epoch"] in evaluated


def test_running_metrics_hold_the_best_so_far(cdata, tmp_path, monkeypatch):
    import twopgraph.run.records as rr
    seen = []
    real = rr.write_json
    monkeypatch.setattr(rr, "write_json", lambda p, obj: (seen.append(copy.deepcopy(obj)),
                                                          real(p, obj)))
    train(cfg(tmp_path / "run", data_root=str(tmp_path / "data")), cdata)
    assert [s["status"] for s in seen] == ["running"] * 6 + ["ok"]
    for s in seen:
        vals = [e["val_score"] for e in s["epochs"]]
        assert s["selected_epoch"] == int(np.argmax(vals))
        assert s["val_score"] == max(vals)


def two_class(data: GraphData, flip: float = 0.25, seed: int = 0) -> GraphData:
    """``data`` with two classes (community parity), a share ``flip`` of labels flipped so
    that the ROC-AUC stays below 1."""
    rng = np.random.default_rng(seed)
    label = (data.label % 2).astype(np.int64)
    noisy = rng.random(label.shape[0]) < flip
    label[noisy] = 1 - label[noisy]
    return GraphData(data.graph, data.feat, label, data.train_idx, data.val_idx,
                     data.test_idx, name="two-class")


def test_two_classes_score_rocauc(cdata, tmp_path):
    data = two_class(cdata)
    out = tmp_path / "run"
    res = train(cfg(out, epochs=3, lr=0.05, data_root=str(tmp_path / "data")), data)
    m = read(out)
    assert m["metric"] == "rocauc" == res.metric
    lg = res.logits.numpy()
    for split, idx in (("val", data.val_idx), ("test", data.test_idx)):
        auc = pairwise_auc(softmax1(lg[idx]), data.label[idx] == 1)
        assert 0.5 < auc < 1.0
        assert m[f"{split}_score"] == pytest.approx(auc, abs=1e-9)
        assert m[f"{split}_acc"] == accuracy(res.logits, torch.from_numpy(data.label), idx)
    vals = [e["val_score"] for e in m["epochs"]]
    assert m["selected_epoch"] == int(np.argmax(vals))
    # --metric acc on two classes: the score is the accuracy
    train(cfg(tmp_path / "acc", epochs=2, lr=0.05, metric="acc",
              data_root=str(tmp_path / "data")), data)
    m = read(tmp_path / "acc")
    assert m["metric"] == "acc" and m["val_score"] == m["val_acc"]


def test_one_class_validation_split_is_null_not_a_crash(cdata, tmp_path, caplog):
    data = two_class(cdata)
    label = data.label.copy()
    label[data.val_idx] = 0  # validation: one class only
    data = GraphData(data.graph, data.feat, label, data.train_idx, data.val_idx,
                     data.test_idx, name="one-class-val")
    with caplog.at_level(logging.WARNING, logger="twopgraph"):
        res = train(cfg(tmp_path / "run", epochs=3, lr=0.05,
                        data_root=str(tmp_path / "data")), data)
    warned = [r.getMessage() for r in caplog.records if "ROC-AUC is undefined" in r.getMessage()]
    assert len(warned) == 1
    m = json.loads((tmp_path / "run" / METRICS).read_text(), parse_constant=float)
    assert all(e["val_score"] is None for e in m["epochs"])
    assert m["val_score"] is None and m["test_score"] is not None
    assert m["selected_epoch"] == 2 == res.selected_epoch  # no val score: the latest


def test_tolokers_is_scored_by_rocauc(tmp_path):
    data = shared_dataset("tolokers")
    assert data.num_classes == 2
    res = train(cfg(tmp_path / "run", epochs=1, lr=0.01, fanouts=[5, 5], batch_size=1024,
                    data_root=str(tmp_path / "data")), data)
    m = read(tmp_path / "run")
    assert m["metric"] == "rocauc" and 0.0 <= m["val_score"] <= 1.0
    lg = res.logits.numpy()
    auc = rocauc(lg[data.val_idx, 1] - lg[data.val_idx, 0], data.label[data.val_idx] == 1)
    assert m["val_score"] == pytest.approx(auc, abs=1e-12)
    assert m["dataset"]["num_features"] == 10


# -- resume ----------------------------------------------------------------------------------
def test_resume_selects_as_an_uninterrupted_run(cdata, tmp_path):
    root = str(tmp_path / "data")
    full = train(cfg(tmp_path / "full", data_root=root), cdata)
    part = tmp_path / "part"
    train(cfg(part, epochs=4, data_root=root), cdata)
    assert read(part)["selected_epoch"] == full.selected_epoch < 4  # selected before resume
    resumed = train(cfg(part, resume=True, data_root=root), cdata)
    a, b = read(tmp_path / "full"), read(part)
    for k in (*TOP, "selected_epoch", "metric", "select"):
        assert a[k] == b[k], k
    assert (resumed.val_acc, resumed.test_acc, resumed.selected_epoch) == \
        (full.val_acc, full.test_acc, full.selected_epoch)
    assert torch.equal(resumed.logits, full.logits)  # the selected weights evaluated again
    ca, cb = ckpt_of(tmp_path / "full"), ckpt_of(part)
    assert ca["selected"]["epoch"] == cb["selected"]["epoch"]
    assert all(torch.equal(ca["selected"]["model"][k], cb["selected"]["model"][k])
               for k in ca["selected"]["model"])
    # a finished run resumed again reports the same selection
    again = train(cfg(part, resume=True, data_root=root), cdata)
    assert (again.test_acc, again.selected_epoch) == (full.test_acc, full.selected_epoch)
    assert torch.equal(again.logits, full.logits)


def test_resume_with_another_rule_is_refused(cdata, tmp_path):
    out = tmp_path / "run"
    train(cfg(out, epochs=2, data_root=str(tmp_path / "data")), cdata)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(ConfigError, match="--select best-val --metric acc; this run asks "
                                          "--select last"):
        train(cfg(out, epochs=3, resume=True, select="last",
                  data_root=str(tmp_path / "data")), cdata)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_resume_of_a_checkpoint_without_selection(cdata, tmp_path):
    """A checkpoint of a twopgraph before selection: resumed with --select last (its
    earlier epochs' weights are not needed), refused with best-val."""
    out = tmp_path / "run"
    root = str(tmp_path / "data")
    train(cfg(out, epochs=2, data_root=root), cdata)
    ck = torch.load(out / CHECKPOINT, weights_only=False)
    del ck["selected"]
    torch.save(ck, out / CHECKPOINT)
    with pytest.raises(ConfigError, match="without the selected model"):
        train(cfg(out, epochs=3, resume=True, data_root=root), cdata)
    res = train(cfg(out, epochs=3, resume=True, select="last", data_root=root), cdata)
    assert res.selected_epoch == 2 and read(out)["selected_epoch"] == 2


# -- distributed -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def parts1(tmp_path_factory, cdata):
    from twopgraph.distributed.partition.selfdep import partition_selfdep
    folder = tmp_path_factory.mktemp("parts") / "p1"
    partition_selfdep(cdata, 1, 2, folder, num_clusters=6)
    return folder


def _dist(out, parts, **kw):
    from twopgraph.distributed import DistEnv, train_distributed
    os.environ.pop("MASTER_ADDR", None)
    return train_distributed(cfg(out, prefetch=1, dist_timeout=30, **kw), parts,
                             env=DistEnv(0, 1, 0, 1))


def test_distributed_run_records_the_selection(cdata, parts1, tmp_path, caplog):
    out = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="twopgraph"):
        res = _dist(out, parts1, epochs=4)
    m = read(out)
    vals = [e["val_score"] for e in m["epochs"]]
    assert m["metric"] == "acc" and m["select"] == "best-val"
    assert m["selected_epoch"] == int(np.argmax(vals)) == res.selected_epoch
    for k in TOP:
        assert m[k] == m["epochs"][m["selected_epoch"]][k], k
    assert (res.val_acc, res.test_acc) == (m["val_acc"], m["test_acc"])
    # the dataset summary, as a single-process run records it
    d = m["dataset"]
    assert d["name"] == "community" and d["num_nodes"] == cdata.num_nodes
    assert d["num_edges_directed"] == cdata.graph.num_edges
    assert (d["num_features"], d["num_classes"]) == (cdata.num_features, cdata.num_classes)
    assert (d["train"], d["val"], d["test"]) == (cdata.train_idx.shape[0],
                                                 cdata.val_idx.shape[0],
                                                 cdata.test_idx.shape[0])
    assert m["schedule"] in ("locality", "random") and "schedule_choice" in m
    # the final line: 4 decimals, like the single-process one
    final = [r.getMessage() for r in caplog.records if r.getMessage().startswith("final")]
    assert len(final) == 1
    assert re.match(r"final \(best-val: epoch \d\)  val_acc \d\.\d{4}  test_acc \d\.\d{4}  -> ",
                    final[0]), final[0]
    # the checkpoint keeps the selected weights: they score the reported test_acc
    ck = ckpt_of(out)
    assert ck["selected"]["epoch"] == m["selected_epoch"]
    model, _ = load_model(out / CHECKPOINT)
    logits = layerwise_inference(model, NeighborSampler(cdata.graph, [5, 5]),
                                 torch.from_numpy(cdata.feat), CPU)
    pred = logits.argmax(1).numpy()
    test = cdata.test_idx
    assert float((pred[test] == cdata.label[test]).sum()) / test.shape[0] == m["test_acc"]


def test_distributed_rocauc_and_resume(cdata, tmp_path):
    from twopgraph.distributed.partition.selfdep import partition_selfdep
    data = two_class(cdata)
    parts = tmp_path / "p1"
    partition_selfdep(data, 1, 2, parts, num_clusters=6)
    full = _dist(tmp_path / "full", parts, epochs=3, lr=0.05)
    m = read(tmp_path / "full")
    assert m["metric"] == "rocauc" == full.metric
    # the selected weights' whole-graph logits give the reported ROC-AUC
    model, _ = load_model(tmp_path / "full" / CHECKPOINT)
    lg = layerwise_inference(model, NeighborSampler(data.graph, [5, 5]),
                             torch.from_numpy(data.feat), CPU).numpy()
    for split, idx in (("val", data.val_idx), ("test", data.test_idx)):
        auc = pairwise_auc(softmax1(lg[idx]), data.label[idx] == 1)
        assert m[f"{split}_score"] == pytest.approx(auc, abs=1e-6)
    # resumed after 2 epochs: the same selection
    _dist(tmp_path / "part", parts, epochs=2, lr=0.05)
    res = _dist(tmp_path / "part", parts, epochs=3, lr=0.05, resume=True)
    r = read(tmp_path / "part")
    for k in (*TOP, "selected_epoch"):
        assert r[k] == m[k], k
    assert res.selected_epoch == full.selected_epoch


def _rocauc_worker(rank, world, port, parts, out):
    from twopgraph.distributed import DistEnv, train_distributed
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    train_distributed(cfg(out, epochs=2, lr=0.05, prefetch=1, dist_timeout=30), parts,
                      env=DistEnv(rank, world, rank, world))


@pytest.mark.slow
def test_two_ranks_gather_the_rocauc_of_all_their_vertices(cdata, tmp_path):
    """Each rank scores its own val/test vertices; the ROC-AUC ranks them all together
    (2 gloo ranks): the whole graph's ROC-AUC of the selected weights."""
    import socket

    import torch.multiprocessing as mp
    from conftest import join_all

    from twopgraph.distributed.partition.selfdep import partition_selfdep
    data = two_class(cdata)
    parts = tmp_path / "p2"
    partition_selfdep(data, 2, 2, parts, num_clusters=8)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "run"
    ctx = mp.start_processes(_rocauc_worker, args=(2, port, str(parts), str(out)), nprocs=2,
                             join=False, start_method="spawn")
    join_all(ctx.processes)
    assert [p.exitcode for p in ctx.processes] == [0, 0]
    m = read(out)
    assert m["metric"] == "rocauc" and m["distributed"]["world_size"] == 2
    model, _ = load_model(out / CHECKPOINT)
    lg = layerwise_inference(model, NeighborSampler(data.graph, [5, 5]),
                             torch.from_numpy(data.feat), CPU).numpy()
    for split, idx in (("val", data.val_idx), ("test", data.test_idx)):
        auc = pairwise_auc(softmax1(lg[idx]), data.label[idx] == 1)
        assert 0.5 < auc < 1.0
        assert m[f"{split}_score"] == pytest.approx(auc, abs=1e-6)


# -- best-val without a validation score (issue 22, item 8) ----------------------------------
def _no_val(data: GraphData, how: str) -> GraphData:
    if how == "empty":  # no validation vertices at all: they train instead
        return GraphData(data.graph, data.feat, data.label,
                         np.sort(np.concatenate([data.train_idx, data.val_idx])),
                         np.zeros(0, dtype=np.int64), data.test_idx, name="no-val")
    data = two_class(data)  # ROC-AUC; validation: one class only
    label = data.label.copy()
    label[data.val_idx] = 0
    return GraphData(data.graph, data.feat, label, data.train_idx, data.val_idx,
                     data.test_idx, name="one-class-val")


@pytest.mark.parametrize("how", ["empty", "one-class"])
def test_best_val_without_a_validation_score_says_what_it_selected(cdata, tmp_path, caplog,
                                                                   how):
    data = _no_val(cdata, how)
    with caplog.at_level(logging.INFO, logger="twopgraph"):
        res = train(cfg(tmp_path / "run", epochs=3, lr=0.05,
                        data_root=str(tmp_path / "data")), data)
    msgs = [r.getMessage() for r in caplog.records]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
              and "--select best-val" in r.getMessage()]
    assert len(warned) == 1, msgs
    reason = "validation split is empty" if how == "empty" else "hold one class"
    assert reason in warned[0] and "epoch 2" in warned[0], warned[0]
    m = read(tmp_path / "run")
    assert m["select"] == "best-val" and m["selected_by"] == "last"
    assert m["selected_epoch"] == 2 == res.selected_epoch and m["val_score"] is None
    assert reason.split()[-1] in m["selection_note"]
    final = [x for x in msgs if x.startswith("final")]
    assert final and final[0].startswith("final (best-val without a validation score, so "
                                         "last: epoch 2)"), final


def test_best_val_with_scores_records_best_val_as_the_rule(cdata, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="twopgraph"):
        train(cfg(tmp_path / "run", epochs=2, data_root=str(tmp_path / "data")), cdata)
    m = read(tmp_path / "run")
    assert m["selected_by"] == "best-val" and m["selection_note"] is None
    assert not [r for r in caplog.records if "--select best-val" in r.getMessage()]


# -- --patience ------------------------------------------------------------------------------
@pytest.mark.parametrize("log,patience,stops", [
    ([0.5, 0.6, 0.6], 1, True), ([0.5, 0.6, 0.6], 2, False), ([0.5, 0.4, 0.7, 0.6], 2, False),
    ([0.5, 0.4, 0.3], 2, True), ([None, None, None], 1, False), ([0.5, 0.6, 0.4], 0, False),
    ([0.5, None], 1, True)])
def test_patience_counts_evaluated_epochs_without_a_better_score(log, patience, stops):
    from twopgraph.run.selection import patience_exhausted
    epochs = [{"epoch": i, "val_score": v} for i, v in enumerate(log)]
    epochs.insert(1, {"epoch": 99})  # not evaluated: not counted
    assert patience_exhausted(epochs, patience) is stops


def test_patience_stops_the_run_and_a_resume_keeps_it_stopped(cdata, tmp_path, caplog):
    from twopgraph.run.selection import patience_exhausted
    root = str(tmp_path / "data")
    train(cfg(tmp_path / "whole", data_root=root, patience=0), cdata)  # small-graph default: 10
    whole = read(tmp_path / "whole")
    assert whole["early_stop"] is None and whole["config"]["patience"] == 0
    # where patience 1 stops: the first evaluated epoch that is not better than the best
    stop = next(i for i in range(1, 6) if patience_exhausted(whole["epochs"][:i + 1], 1))
    assert stop < 5, [e["val_score"] for e in whole["epochs"]]
    with caplog.at_level(logging.INFO, logger="twopgraph"):
        res = train(cfg(tmp_path / "run", patience=1, data_root=root), cdata)
    m = read(tmp_path / "run")
    assert m["status"] == "ok" and len(m["epochs"]) == stop + 1
    assert m["early_stop"] == {"patience": 1, "epoch": stop}
    assert [e["loss"] for e in m["epochs"]] == [e["loss"] for e in whole["epochs"][:stop + 1]]
    assert res.selected_epoch == m["selected_epoch"] <= stop
    assert any(r.getMessage().startswith("--patience 1: no better validation score")
               for r in caplog.records)
    # a resume of the stopped run trains nothing more and reports the same
    train(cfg(tmp_path / "run", patience=1, resume=True, data_root=root), cdata)
    r = read(tmp_path / "run")
    assert len(r["epochs"]) == stop + 1 and r["early_stop"] == m["early_stop"]
    assert r["selected_epoch"] == m["selected_epoch"] and r["test_acc"] == m["test_acc"]


def test_patience_flag_is_checked(tmp_path, capsys):
    rc, _, err = run_cli(["train", "--patience", "-1", "--out", tmp_path / "x"], capsys)
    assert rc == 2 and err.strip().count("\n") == 0
    assert "patience must be an integer >= 0" in err


# -- the distributed JSON line ---------------------------------------------------------------
def test_distributed_json_line_has_the_single_process_keys(cdata, parts1, tmp_path, capsys,
                                                           monkeypatch):
    from twopgraph.run.records import result_record
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    out = tmp_path / "run"
    rc, stdout, err = run_cli(["train", "--partitions", parts1, "--epochs", "2", "--hidden",
                               "16", "--fanouts", "5,5", "--batch-size", "64", "--device",
                               "cpu", "--threads", "1", "--no-progress", "--out", out], capsys)
    assert rc == 0, err
    line = json.loads([x for x in stdout.splitlines() if x.startswith("{")][-1])
    single = result_record(train(cfg(tmp_path / "single", epochs=1,
                                     data_root=str(tmp_path / "data")), cdata))
    assert set(line) == set(single)
    m = read(out)
    for k in ("metric", "val_score", "test_score", "selected_epoch", "val_acc", "test_acc"):
        assert line[k] == m[k], k
