"""GPU stage times (issue 42, defect 8): ``load_gpu_s``, ``sample_gpu_s``, ``compute_gpu_s``
from CUDA events, read once an epoch, no host synchronisation per step.

On the CPU: the event ring (:class:`~twopgraph.runtime.gputime.StageTimer`) with a fake event
type that keeps the real logic (pending bound, folding, waits only for a running event), the
keys in an epoch record on the CPU (null), a training epoch timing its steps through a timer
(fake events on host clocks), and TF32 left alone on the CPU. CUDA cases are marked."""

from __future__ import annotations

import json
import time

import pytest
import torch
from conftest import community_data

import twopgraph.pipeline.epoch as ep
from twopgraph.config import TrainConfig
from twopgraph.pipeline.assemble import make_loader
from twopgraph.pipeline.epoch import tf32, train_epoch
from twopgraph.run.checkpoint import build_training
from twopgraph.run.train import train
from twopgraph.runtime.gputime import STAGES, StageTimer, gpu_span, gpu_times, stage_timer

GPU_KEYS = ("load_gpu_s", "sample_gpu_s", "compute_gpu_s")


class FakeDevice:
    """A device clock: ``now`` (ms) advances as work runs; events up to ``done`` completed."""

    def __init__(self) -> None:
        self.now, self.done, self.syncs, self.queries = 0.0, 0.0, 0, 0


class FakeEvent:
    """A CUDA timing event on :class:`FakeDevice`: recorded at the stream's clock; complete
    once the device has run past it; ``elapsed_time`` of an incomplete event is an error
    (as CUDA's)."""

    def __init__(self, dev: FakeDevice) -> None:
        self.dev, self.t = dev, None

    def record(self, stream) -> None:
        self.t = self.dev.now

    def query(self) -> bool:
        self.dev.queries += 1
        return self.t <= self.dev.done

    def synchronize(self) -> None:
        self.dev.syncs += 1
        self.dev.done = max(self.dev.done, self.t)

    def elapsed_time(self, end: FakeEvent) -> float:
        if not (self.query() and end.query()):
            raise RuntimeError("event not complete")
        return end.t - self.t


def test_ring_bounds_pending_spans_and_folds_without_waiting():
    dev = FakeDevice()
    t = StageTimer(STAGES, capacity=3, event=lambda: FakeEvent(dev))
    made = []
    for i in range(10):
        with t.span("compute", "stream"):
            dev.now += i + 1.0  # step i runs i + 1 ms on the device
        made.append(i + 1.0)
        dev.done = dev.now  # the device keeps up: every event completes
        assert t.pending("compute") <= 3
    assert t.pending("compute") == 3 and t.spans("compute") == 10
    assert dev.syncs == 0 and t.waits == 0  # folding complete events waits for nothing
    got = t.read()
    assert got["compute_gpu_s"] == pytest.approx(sum(made) / 1000.0)
    assert got["load_gpu_s"] is None and got["sample_gpu_s"] is None  # nothing timed
    assert t.pending("compute") == 0


def test_a_full_ring_waits_only_for_a_running_oldest_event():
    dev = FakeDevice()
    t = StageTimer(("load",), capacity=2, event=lambda: FakeEvent(dev))
    for _ in range(5):  # the device lags behind: nothing completes meanwhile
        with t.span("load", None):
            dev.now += 2.0
    # spans 3, 4, 5 each found the ring full with a running oldest pair: one wait each
    assert t.waits == 3 and dev.syncs == 3
    assert t.read() == {"load_gpu_s": pytest.approx(0.010)}
    assert dev.syncs == 4  # read: one wait for the last event, none for the others


def test_events_are_reused_and_a_failed_block_records_nothing():
    dev = FakeDevice()
    made = []

    def event():
        made.append(FakeEvent(dev))
        return made[-1]
    t = StageTimer(("compute",), capacity=2, event=event)
    for _ in range(6):
        with t.span("compute", None):
            dev.now += 1.0
        dev.done = dev.now
    assert len(made) == 6  # 3 pairs: the ring's 2 and the one being recorded
    with pytest.raises(ValueError), t.span("compute", None):
        raise ValueError("step failed")
    assert t.spans("compute") == 6
    with pytest.raises(KeyError, match="unknown stage"), t.span("eval", None):
        pass
    assert t.read()["compute_gpu_s"] == pytest.approx(0.006)


def test_no_timer_on_the_cpu():
    assert stage_timer("cpu") is None
    assert gpu_times(None) == {k: None for k in GPU_KEYS}
    with gpu_span(None, "compute", "s"), gpu_span(StageTimer(), "compute", None):
        pass  # null contexts: nothing recorded, no CUDA call
    assert isinstance(stage_timer("cuda"), StageTimer)  # made lazily: no CUDA call yet


@pytest.fixture(scope="module")
def cdata():
    return community_data()


def _cfg(out, data_root, **kw) -> TrainConfig:
    base = dict(dataset="community", epochs=1, hidden=16, fanouts=[5, 5], batch_size=64,
                lr=0.01, dropout=0.0, seed=0, device="cpu", out=str(out), progress=False,
                prefetch=2, threads=2, data_root=str(data_root), schedule="random")
    base.update(kw)
    return TrainConfig.of(**base)


def test_cpu_epoch_records_the_gpu_keys_as_null(cdata, tmp_path):
    train(_cfg(tmp_path / "o", tmp_path / "data", epochs=2), data=cdata)

    def refuse(c):
        raise ValueError(c)
    m = json.loads((tmp_path / "o" / "metrics.json").read_text(), parse_constant=refuse)
    for e in m["epochs"]:
        for k in GPU_KEYS:
            assert k in e and e[k] is None, k
        for k in ("load_s", "sample_s", "compute_s"):  # the host times stay
            assert isinstance(e[k], float), k
    assert "load_gpu_s" in (tmp_path / "o" / "epochs.csv").read_text().splitlines()[0]


def test_the_epoch_times_every_step_through_its_timer(cdata, tmp_path, monkeypatch):
    """train_epoch with a timer of fake events on the host clock (what CUDA would get): one
    ``compute`` span per step on the step's stream, the loader handed the timer for the
    epoch and given it back, the record's ``compute_gpu_s`` = the spans' sum."""
    c = _cfg(tmp_path / "o", tmp_path / "data")
    model, opt, _, _ = build_training(c, cdata, torch.device("cpu"))
    loader = make_loader(c, cdata, "cpu")

    class HostEvent(FakeEvent):
        def record(self, stream):
            assert stream == "step-stream"
            self.t = time.perf_counter() * 1000.0

        def query(self):
            return True

        def synchronize(self):
            pass

    timers, seen = [], []
    real_epoch = loader.epoch

    def epoch(e):
        seen.append(loader.gpu_timer)  # handed over before the first batch
        return real_epoch(e)

    def timer(device):
        timers.append(StageTimer(STAGES, capacity=4, event=lambda: HostEvent(None)))
        return timers[-1]
    monkeypatch.setattr(ep, "stage_timer", timer)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: "step-stream")
    monkeypatch.setattr(loader, "epoch", epoch)
    t0 = time.perf_counter()
    rec = train_epoch(model, opt, loader, 0, progress=False)
    wall = time.perf_counter() - t0
    (t,) = timers
    assert seen == [t] and loader.gpu_timer is None
    assert t.spans("compute") == rec["num_batches"] == len(loader)
    assert 0 < rec["compute_gpu_s"] <= wall
    assert rec["compute_gpu_s"] <= rec["compute_s"] + 1e-6  # the spans sit inside compute_s
    assert rec["load_gpu_s"] is None and rec["sample_gpu_s"] is None  # no spans recorded


def _loader_has_the_hook() -> bool:
    import inspect

    import twopgraph.pipeline.loader as lm
    return "gpu_timer" in inspect.getsource(lm)


@pytest.mark.skipif(not _loader_has_the_hook(), reason="the loader's gpu_timer hook is not "
                    "wired into twopgraph/pipeline/loader.py yet")
def test_the_loader_times_its_gathers_through_the_epochs_timer(cdata, tmp_path, monkeypatch):
    """The loader's hook: one ``load`` span per batch on the feature source's stream (a fake
    stream name on the CPU source; fake events on the host clock)."""
    c = _cfg(tmp_path / "o", tmp_path / "data")
    model, opt, _, _ = build_training(c, cdata, torch.device("cpu"))
    loader = make_loader(c, cdata, "cpu")
    streams = []

    class HostEvent(FakeEvent):
        def record(self, stream):
            streams.append(stream)
            self.t = time.perf_counter() * 1000.0

        def query(self):
            return True

        def synchronize(self):
            pass

    timers = []

    def timer(device):
        timers.append(StageTimer(STAGES, capacity=4, event=lambda: HostEvent(None)))
        return timers[-1]
    monkeypatch.setattr(ep, "stage_timer", timer)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: "step-stream")
    monkeypatch.setattr(loader.features, "stream", "gather-stream", raising=False)
    rec = train_epoch(model, opt, loader, 0, progress=False)
    (t,) = timers
    assert t.spans("load") == t.spans("compute") == rec["num_batches"]
    assert set(streams) == {"gather-stream", "step-stream"}
    assert rec["load_gpu_s"] > 0 and rec["sample_gpu_s"] is None


def _matmul_precision_per_epoch(monkeypatch) -> list[str]:
    """The float32 matmul precision each epoch of the next run trains under (a list filled as
    the run's loop calls train_epoch)."""
    seen = []
    real = ep.train_epoch

    def spy(*a, **k):
        seen.append(torch.get_float32_matmul_precision())
        return real(*a, **k)
    import twopgraph.run.loop as loop
    monkeypatch.setattr(loop, "train_epoch", spy)
    return seen


def test_tf32_left_alone_on_the_cpu(cdata, tmp_path, monkeypatch):
    before = torch.get_float32_matmul_precision()
    assert before == "highest"
    with tf32("cpu") as on:
        assert on is False and torch.get_float32_matmul_precision() == "highest"
    seen = _matmul_precision_per_epoch(monkeypatch)
    train(_cfg(tmp_path / "o", tmp_path / "data"), data=cdata)
    assert seen == ["highest"] and torch.get_float32_matmul_precision() == "highest"


def test_tf32_on_for_a_cuda_run_and_restored(caplog):
    # set_float32_matmul_precision needs no GPU: the switch itself is checked here
    with caplog.at_level("INFO", logger="twopgraph"), tf32("cuda") as on:
        assert on is True and torch.get_float32_matmul_precision() == "high"
    assert torch.get_float32_matmul_precision() == "highest"
    assert sum("TF32 on" in r.getMessage() for r in caplog.records) == 1
    torch.set_float32_matmul_precision("medium")  # the caller's own choice is kept
    try:
        with tf32("cuda"):
            assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision("highest")


# ----------------------------------------------------------------------------------------------
# CUDA
# ----------------------------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.parametrize("sampler_device", ["cpu", "cuda"])
def test_cuda_epoch_measures_gpu_times(cdata, tmp_path, sampler_device):
    res = train(_cfg(tmp_path / "o", tmp_path / "data", epochs=2, device="cuda",
                     sampler_device=sampler_device, cache_policy="none"), data=cdata)
    for e in res.epochs:
        assert e["compute_gpu_s"] > 0 and e["compute_gpu_s"] < 10 * e["epoch_s"]
        # the gather's spans: the loader's hook (loader.gpu_timer) on the source's stream
        assert e["load_gpu_s"] is not None and e["load_gpu_s"] > 0
        if sampler_device == "cuda":
            assert e["sample_gpu_s"] is not None and e["sample_gpu_s"] > 0
        else:
            assert e["sample_gpu_s"] is None  # host sampling: nothing on the device


@pytest.mark.cuda
def test_cuda_run_uses_tf32_and_restores_it(cdata, tmp_path, monkeypatch):
    seen = _matmul_precision_per_epoch(monkeypatch)
    train(_cfg(tmp_path / "o", tmp_path / "data", device="cuda"), data=cdata)
    assert seen == ["high"] and torch.get_float32_matmul_precision() == "highest"
