"""``--profile DIR`` (issue 42, item 2): a ``torch.profiler`` Chrome trace of a few steps of
the first epoch, written on the CPU too; the steps it records; the option's checks."""

from __future__ import annotations

import json

import pytest
from conftest import community_data, run_cli

from twopgraph.config import TrainConfig
from twopgraph.errors import ConfigError, OutputError
from twopgraph.run.train import train
from twopgraph.run.profile import ACTIVE, WARMUP, StepProfiler, profile_steps


def test_profile_steps():
    assert (WARMUP, ACTIVE) == (2, 5)
    assert profile_steps(38) == (2, 5)
    assert profile_steps(7) == (2, 5)
    assert profile_steps(5) == (2, 3)
    assert profile_steps(2) == (1, 1)
    assert profile_steps(1) == (0, 1)
    assert profile_steps(0) == (0, 1)


def _cfg(out, data_root, **kw) -> TrainConfig:
    base = dict(dataset="community", epochs=2, hidden=16, fanouts=[5, 5], batch_size=32,
                lr=0.01, seed=0, device="cpu", out=str(out), progress=False, prefetch=2,
                threads=2, data_root=str(data_root), schedule="random")
    base.update(kw)
    return TrainConfig.of(**base)


def test_a_run_with_profile_writes_a_trace_of_its_steps(tmp_path, caplog):
    prof = tmp_path / "prof"
    with caplog.at_level("INFO", logger="twopgraph"):
        res = train(_cfg(tmp_path / "o", tmp_path / "data", profile=str(prof)),
                    data=community_data())
    assert len(res.epochs) == 2
    assert sorted(p.name for p in prof.iterdir()) == ["trace-epoch0.json"]  # first epoch only
    events = json.loads((prof / "trace-epoch0.json").read_text())["traceEvents"]
    names = {e.get("name", "") for e in events}
    # the recorded steps, 2 warm-up steps left out
    assert {n for n in names if n.startswith("ProfilerStep#")} == {
        f"ProfilerStep#{i}" for i in range(WARMUP, WARMUP + ACTIVE)}
    # the training step's ops: forward, the sparse aggregation, backward, optimizer
    assert any(n.startswith("Optimizer.step") for n in names), sorted(names)[:50]
    assert any("Backward" in n for n in names)
    assert "aten::addmm" in names or "aten::mm" in names
    assert any("HostSpmm" in n for n in names)  # the aggregation (graph.spmm.HostSpmm)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("profiler:")]
    assert len(lines) == 1 and str(prof / "trace-epoch0.json") in lines[0]
    assert f"steps {WARMUP}-{WARMUP + ACTIVE - 1} of epoch 0" in lines[0]


def test_a_short_epoch_still_gets_a_trace(tmp_path):
    # 300 training seeds in batches of 128: 3 steps -> 2 warm-up, 1 recorded
    prof = tmp_path / "prof"
    train(_cfg(tmp_path / "o", tmp_path / "data", epochs=1, batch_size=128,
               profile=str(prof)), data=community_data())
    events = json.loads((prof / "trace-epoch0.json").read_text())["traceEvents"]
    assert {e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")} == {
        "ProfilerStep#2"}


def test_profile_option_checked_and_listed(tmp_path, capsys):
    with pytest.raises(ConfigError, match="--profile must name a folder"):
        _cfg(tmp_path / "o", tmp_path / "data", profile=" ").validate()
    (tmp_path / "gone").symlink_to(tmp_path / "nothing")
    with pytest.raises(ConfigError):
        _cfg(tmp_path / "o", tmp_path / "data", profile=str(tmp_path / "gone")).validate()
    rc, out, _ = run_cli(["train", "--help"], capsys)
    assert rc == 0 and "--profile DIR" in out


def test_an_unwritable_folder_is_one_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="cannot write"):
        StepProfiler(tmp_path / "file" / "sub", "cpu", steps=10).start()
