"""End-to-end tests of :func:`twopgraph.run.train.train`: metrics, determinism, resume, prefetch."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
import torch
from conftest import community_data

from twopgraph.config import TrainConfig
from twopgraph.errors import ConfigError
from twopgraph.run.checkpoint import CHECKPOINT
from twopgraph.run.records import METRICS
from twopgraph.run.train import train
from twopgraph.runtime.governor import PROBE_KEY
from twopgraph.sampler.neighbor import NeighborSampler

EPOCH_KEYS = {"epoch", "epoch_s", "sample_s", "load_s", "compute_s", "input_nodes_per_batch",
              "feature_rows", "h2d_bytes", "loss", "val_acc"}


@pytest.fixture(scope="module")
def cdata():
    """The community graph (600 vertices, 4 classes, 8 features), built once per module."""
    return community_data()


def cfg(out, **kw) -> TrainConfig:
    base = dict(dataset="community", epochs=2, hidden=16, fanouts=[5, 5], batch_size=64,
                lr=0.01, dropout=0.1, seed=0, device="cpu", out=str(out), progress=False,
                prefetch=2, schedule="locality")
    base.update(kw)
    return TrainConfig.of(**base)


def losses(res) -> list[float]:
    return [e["loss"] for e in res.epochs]


def read_metrics(out) -> dict:
    return json.loads((out / METRICS).read_text())


def state_dict(out) -> dict:
    return torch.load(out / CHECKPOINT, map_location="cpu", weights_only=False)["model"]


def assert_same_state(a: dict, b: dict):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def no_tmp_files(out):
    return [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


# -- end to end ---------------------------------------------------------------------------------
def test_train_end_to_end_metrics(cdata, tmp_path, monkeypatch):
    # Record |input_nodes| of every batch the sampler really produces (in sampling order).
    sizes: list[int] = []
    orig = NeighborSampler.sample

    def recording(self, seeds, key=0, parallel=True):  # may run in sampler worker threads
        mb = orig(self, seeds, key=key, parallel=parallel)
        if key is not None and PROBE_KEY <= key < PROBE_KEY + 16:  # governor probes
            return mb
        sizes.append(int(mb.input_nodes.shape[0]))
        return mb

    monkeypatch.setattr(NeighborSampler, "sample", recording)
    out = tmp_path / "run"
    res = train(cfg(out, epochs=4, sampler="neighbor"), data=cdata)  # what is recorded

    m = read_metrics(out)
    assert isinstance(m["val_acc"], float) and isinstance(m["test_acc"], float)
    assert m["val_acc"] == pytest.approx(res.val_acc)
    assert m["test_acc"] == pytest.approx(res.test_acc)
    assert isinstance(m["epochs"], list) and len(m["epochs"]) == 4
    num_batches = -(-cdata.train_idx.shape[0] // 64)
    assert len(sizes) == 4 * num_batches
    f = cdata.num_features
    for i, e in enumerate(m["epochs"]):
        assert EPOCH_KEYS <= set(e), EPOCH_KEYS - set(e)
        assert e["epoch"] == i
        for k in ("epoch_s", "sample_s", "load_s", "compute_s"):
            assert e[k] >= 0
        assert e["compute_s"] <= e["epoch_s"]
        batch_sizes = sizes[i * num_batches:(i + 1) * num_batches]
        assert e["feature_rows"] == sum(batch_sizes)
        assert e["input_nodes_per_batch"] * num_batches == pytest.approx(e["feature_rows"])
        assert e["h2d_bytes"] == e["feature_rows"] * f * 4  # no cache, float32
        assert np.isfinite(e["loss"]) and e["loss"] > 0
        assert 0.0 <= e["val_acc"] <= 1.0
    # each input row set contains at least the seeds
    assert all(s >= 1 for s in sizes)
    assert m["epochs"][-1]["loss"] < m["epochs"][0]["loss"]
    # 4 classes: chance is ~0.25
    assert res.val_acc > 0.6 and res.test_acc > 0.6
    assert (out / CHECKPOINT).is_file()
    assert no_tmp_files(out) == []


def test_train_synthetic_tiny_by_name(tmp_path):
    out = tmp_path / "run"
    res = train(TrainConfig.of(dataset="synthetic-tiny", data_root=str(tmp_path / "data"),
                            epochs=3, hidden=16, fanouts=[5, 5], batch_size=256, lr=0.01,
                            device="cpu", out=str(out), progress=False))
    m = read_metrics(out)
    assert len(m["epochs"]) == 3
    assert m["dataset"]["num_nodes"] == 2000
    nf = m["dataset"]["num_features"]
    for e in m["epochs"]:
        assert e["h2d_bytes"] == e["feature_rows"] * nf * 4
    # 5 classes: chance is ~0.2
    assert res.val_acc > 0.5 and res.test_acc > 0.5
    assert len(list((tmp_path / "data" / "stores").glob("synthetic-tiny-*/feat.npy"))) == 1


# -- determinism ----------------------------------------------------------------------------------
def test_same_seed_same_run_different_seed_differs(cdata, tmp_path):
    a = train(cfg(tmp_path / "a", seed=3), data=cdata)
    b = train(cfg(tmp_path / "b", seed=3), data=cdata)
    c = train(cfg(tmp_path / "c", seed=4), data=cdata)
    assert losses(a) == losses(b)
    assert torch.equal(a.logits, b.logits)
    assert_same_state(state_dict(tmp_path / "a"), state_dict(tmp_path / "b"))
    assert losses(a) != losses(c)
    assert not torch.equal(a.logits, c.logits)
    sa, sc = state_dict(tmp_path / "a"), state_dict(tmp_path / "c")
    assert any(not torch.equal(sa[k], sc[k]) for k in sa)


def test_prefetch_zero_and_two_identical(cdata, tmp_path):
    a = train(cfg(tmp_path / "a", prefetch=0), data=cdata)
    b = train(cfg(tmp_path / "b", prefetch=2), data=cdata)
    assert losses(a) == losses(b)
    assert [e["feature_rows"] for e in a.epochs] == [e["feature_rows"] for e in b.epochs]
    assert torch.equal(a.logits, b.logits)
    assert (a.val_acc, a.test_acc) == (b.val_acc, b.test_acc)
    assert_same_state(state_dict(tmp_path / "a"), state_dict(tmp_path / "b"))


def test_gcn_trains(cdata, tmp_path):
    res = train(cfg(tmp_path / "gcn", model="gcn", epochs=3), data=cdata)
    assert losses(res)[-1] < losses(res)[0]
    assert res.val_acc > 0.6 and res.test_acc > 0.6
    assert read_metrics(tmp_path / "gcn")["config"]["model"] == "gcn"


# -- resume ----------------------------------------------------------------------------------------
def test_resume_equals_uninterrupted_run(cdata, tmp_path):
    full = train(cfg(tmp_path / "full", epochs=3), data=cdata)
    part_out = tmp_path / "part"
    train(cfg(part_out, epochs=2), data=cdata)
    assert len(read_metrics(part_out)["epochs"]) == 2
    resumed = train(cfg(part_out, epochs=3, resume=True), data=cdata)

    assert len(resumed.epochs) == 3
    assert losses(resumed) == losses(full)
    assert [e["epoch"] for e in resumed.epochs] == [0, 1, 2]
    assert [e["val_acc"] for e in resumed.epochs] == [e["val_acc"] for e in full.epochs]
    assert (resumed.val_acc, resumed.test_acc) == (full.val_acc, full.test_acc)
    assert torch.equal(resumed.logits, full.logits)
    assert_same_state(state_dict(part_out), state_dict(tmp_path / "full"))
    ck = torch.load(part_out / CHECKPOINT, map_location="cpu", weights_only=False)
    assert ck["epochs_done"] == 3
    m = read_metrics(part_out)
    assert [e["loss"] for e in m["epochs"]] == losses(full)
    assert m["val_acc"] == pytest.approx(full.val_acc)
    assert no_tmp_files(part_out) == []
    assert no_tmp_files(tmp_path / "full") == []

    # resuming a finished run trains nothing more and reports the same model
    again = train(cfg(part_out, epochs=3, resume=True), data=cdata)
    assert losses(again) == losses(full)
    assert (again.val_acc, again.test_acc) == (full.val_acc, full.test_acc)
    assert_same_state(state_dict(part_out), state_dict(tmp_path / "full"))


@pytest.mark.parametrize("change", [{"hidden": 32}, {"model": "gcn"}, {"fanouts": [4, 5]},
                                    {"seed": 1}, {"batch_size": 32}])
def test_resume_other_config_refused_files_untouched(cdata, tmp_path, change):
    out = tmp_path / "run"
    train(cfg(out, epochs=1), data=cdata)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    mtimes = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    with pytest.raises(ConfigError, match="another configuration"):
        train(cfg(out, epochs=2, resume=True, **change), data=cdata)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == mtimes


def test_resume_fewer_epochs_than_done_refused(cdata, tmp_path):
    out = tmp_path / "run"
    train(cfg(out, epochs=2), data=cdata)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(ConfigError):
        train(cfg(out, epochs=1, resume=True), data=cdata)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_resume_without_checkpoint(cdata, tmp_path):
    out = tmp_path / "nothing"
    with pytest.raises(ConfigError, match="no checkpoint"):
        train(cfg(out, resume=True), data=cdata)
    assert not out.exists()
    out.mkdir()
    with pytest.raises(ConfigError, match="no checkpoint"):
        train(cfg(out, resume=True), data=cdata)
    assert list(out.iterdir()) == []


def test_resume_garbage_checkpoint(cdata, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / CHECKPOINT).write_bytes(b"definitely not a torch file")
    with pytest.raises(ConfigError):
        train(cfg(out, resume=True), data=cdata)
    assert (out / CHECKPOINT).read_bytes() == b"definitely not a torch file"


# -- failures in the pipeline ----------------------------------------------------------------------
class SamplerBoom(RuntimeError):
    pass


@pytest.mark.parametrize("prefetch", [0, 2])
def test_sampler_exception_propagates(cdata, tmp_path, monkeypatch, prefetch):
    orig = NeighborSampler.sample
    calls = {"n": 0}
    sampling_threads = set()

    lock = threading.Lock()

    def failing(self, seeds, key=0, parallel=True):  # may run in sampler worker threads
        if key is not None and PROBE_KEY <= key < PROBE_KEY + 16:  # governor probes
            return orig(self, seeds, key=key, parallel=parallel)
        with lock:
            calls["n"] += 1
            n = calls["n"]
            sampling_threads.add(threading.current_thread().name)
        if n == 3:
            raise SamplerBoom("sampler exploded")
        return orig(self, seeds, key=key, parallel=parallel)

    monkeypatch.setattr(NeighborSampler, "sample", failing)
    result: dict = {}

    def run():
        try:
            train(cfg(tmp_path / "run", epochs=2, prefetch=prefetch), data=cdata)
            result["ok"] = True
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            result["error"] = e

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(timeout=120)
    assert not th.is_alive(), "train() hung after the sampler raised"
    assert isinstance(result.get("error"), SamplerBoom), result
    if prefetch:  # it really ran in the background (prefetch thread or sampler workers)
        assert all(n.startswith("twopgraph-") for n in sampling_threads), sampling_threads

    def ours_alive():
        return any(t.name.startswith(("twopgraph-prefetch", "twopgraph-sampler"))
                   and t.is_alive() for t in threading.enumerate())
    # the prefetch thread and sampler workers are gone, not left spinning
    for _ in range(100):
        if not ours_alive():
            break
        threading.Event().wait(0.05)
    assert not ours_alive()
    # no checkpoint for an epoch that failed
    assert not (tmp_path / "run" / CHECKPOINT).exists()


# -- config validation -----------------------------------------------------------------------------
@pytest.mark.parametrize("change", [{"batch_size": 0}, {"batch_size": -5}, {"epochs": 0},
                                    {"hidden": 0}, {"model": "gin"}, {"schedule": "nope"},
                                    {"fanouts": "1,x"}, {"fanouts": "0"}, {"fanouts": ""},
                                    {"lr": 0.0}, {"dropout": 1.0}, {"prefetch": -1},
                                    {"device": "tpu"}])
def test_bad_config_raises_config_error_without_output(cdata, tmp_path, change):
    out = tmp_path / "run"
    with pytest.raises(ConfigError):
        train(cfg(out, **change), data=cdata)
    assert not out.exists()
