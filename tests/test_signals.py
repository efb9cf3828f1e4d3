"""Stop signals (issue 22, item 1, single process): SIGTERM and SIGHUP stop ``twopgraph train``
at its next safe point with one line and exit 128 + signal, ``metrics.json`` says
``interrupted``, the lock is released, the last checkpoint is kept and a resume finishes the
run as an uninterrupted one would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _train(out: Path, root: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "twopgraph", "train", "--dataset", "synthetic-tiny",
            "--data-root", str(root), "--batch-size", "16", "--epochs", "6", "--out", str(out),
            "--no-progress", "--seed", "3", *extra]


def _wait_for_checkpoint(out: Path, proc, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (out / "checkpoint.pt").is_file():
            return
        if proc.poll() is not None:
            raise AssertionError(f"train ended early: {proc.stderr.read()}")
        time.sleep(0.05)
    raise AssertionError("no checkpoint written in time")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_stops_train_cleanly_and_resume_finishes(tmp_path, sig):
    root, out = tmp_path / "data", tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run(_train(tmp_path / "warm", root, "--epochs", "1"), check=True, env=env,
                   capture_output=True)  # the dataset and numba's cache, outside the timing
    proc = subprocess.Popen(_train(out, root), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _wait_for_checkpoint(out, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the run finished before the signal arrived")
    assert proc.returncode == 128 + sig, err
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("twopgraph:")]
    assert lines == [f"twopgraph: stopped by {signal.Signals(sig).name} (the checkpoint of the "
                     "last completed epoch is kept: rerun with --resume to continue)"], err
    assert "Traceback" not in err
    m = json.loads((out / "metrics.json").read_text())
    assert m["status"] == "interrupted" and not m["final"]
    done = len(m["epochs"])
    assert 1 <= done < 6
    assert not (out / ".twopgraph.lock").exists()
    assert not [p for p in out.iterdir() if ".tmp" in p.name]
    # resumed, it ends as the uninterrupted run does
    subprocess.run(_train(out, root, "--resume"), check=True, env=env, capture_output=True)
    subprocess.run(_train(tmp_path / "whole", root), check=True, env=env, capture_output=True)
    a = json.loads((out / "metrics.json").read_text())
    b = json.loads((tmp_path / "whole" / "metrics.json").read_text())
    assert a["status"] == b["status"] == "ok"
    assert [e["loss"] for e in a["epochs"]] == [e["loss"] for e in b["epochs"]]
    assert a["test_acc"] == b["test_acc"]


def test_stop_signals_restore_their_handlers():
    from twopgraph.cli import STOP_SIGNALS, main
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    assert main(["datasets"]) == 0
    assert {s: signal.getsignal(s) for s in STOP_SIGNALS} == before
