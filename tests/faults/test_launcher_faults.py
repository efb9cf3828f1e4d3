"""Faults of the ``--nproc`` launcher's job (issue 40, item 6): ``kill -9`` of the launcher
stops torchrun's agent and every rank (parent-death signals) and frees the ``--out`` lock; a
frozen rank (SIGSTOP) is reported within ``--dist-timeout`` as a rank that stopped answering,
naming it and the timeout, and ``metrics.json`` ends ``failed``. Tests that start torchrun are
marked ``slow``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_signals import _alive, _descendants, _wait_for_checkpoint, tiny_parts  # noqa: F401

from twopgraph.distributed.launch import _failure, die_with_parent
from twopgraph.run.outdir import RunDir

ROOT = Path(__file__).resolve().parents[2]
linux_proc = pytest.mark.skipif(not Path("/proc/self/environ").exists(),
                                reason="needs Linux /proc")


def _launch(parts: Path, root: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "twopgraph", "train", "--partitions", str(parts), "--nproc",
            "2", "--data-root", str(root), "--batch-size", "16", "--epochs", "500", "--device",
            "cpu", "--threads", "1", "--no-progress", "--seed", "3", "--out", str(out), *extra]


def _ranks(launcher: int) -> dict[int, int]:
    """rank -> pid of the torchrun workers below the launcher ``launcher``."""
    out = {}
    for pid in _descendants(launcher):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        out.update({int(e[5:]): pid for e in env if e.startswith(b"RANK=")})
    return out


def _start(cmd: list[str], out: Path) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_checkpoint(out, proc)
    return proc


@pytest.mark.slow
@linux_proc
def test_kill_9_of_the_launcher_stops_the_agent_and_every_rank(tiny_parts, tmp_path):  # noqa: F811
    """Before: torchrun and both ranks trained on (500 epochs) holding the --out lock. Now the
    agent gets SIGTERM when the launcher dies and stops the ranks; rank 0 marks the run
    interrupted and releases the lock; a new run can take the folder."""
    root, _, parts = tiny_parts
    out = tmp_path / "run"
    proc = _start(_launch(parts, root, out), out)
    below = _descendants(proc.pid)
    try:
        assert len(_ranks(proc.pid)) == 2 and len(below) >= 3, below  # agent and two ranks
        t = time.monotonic()
        proc.kill()
        proc.wait()
        while any(_alive(p) for p in below) and time.monotonic() - t < 30:
            time.sleep(0.1)
        left = [p for p in below if _alive(p)]
        assert not left, f"still running 30 s after kill -9 of the launcher: {left}"
    finally:
        for p in below:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
    m = json.loads((out / "metrics.json").read_text())
    assert m["status"] == "interrupted" and len(m["epochs"]) < 500
    RunDir(out, resume=True).claim().release()  # the lock is free: a new run can start


@pytest.mark.slow
@linux_proc
def test_a_frozen_rank_is_reported_as_not_answering_in_time(tiny_parts, tmp_path):  # noqa: F811
    """SIGSTOP of rank 1 with --dist-timeout 15. Before: ~47 s later "rank 1 was killed by
    signal SIGKILL" (torchrun's kill after its SIGTERM could not land) and metrics.json left
    "running". Now: one line naming rank 1 and the --dist-timeout soon after the timeout,
    metrics.json "failed" with rank 0's line, no process left, the lock free."""
    root, _, parts = tiny_parts
    out = tmp_path / "run"
    proc = _start(_launch(parts, root, out, "--dist-timeout", "15"), out)
    ranks = _ranks(proc.pid)
    below = _descendants(proc.pid)
    try:
        os.kill(ranks[1], signal.SIGSTOP)
        t = time.monotonic()
        _, err = proc.communicate(timeout=120)
        took = time.monotonic() - t
    finally:
        for p in below:
            if _alive(p):  # SIGKILL ends a stopped process too
                os.kill(p, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 2, err[-3000:]
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("twopgraph:")]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert lines[0].startswith(f"twopgraph: error: rank 1 (pid {ranks[1]}) stopped answering"), \
        lines[0]
    assert "--dist-timeout 15 s" in lines[0] and "SIGKILL" not in lines[0], lines[0]
    assert took < 15 + 20, took  # torchrun alone would wait 30 s more for the stopped rank
    m = json.loads((out / "metrics.json").read_text())
    assert m["status"] == "failed" and not m["final"], m["status"]
    assert "did not answer within 15 s (--dist-timeout)" in m["error"]["message"]
    assert not [p for p in below if _alive(p)]
    assert not (out / ".twopgraph.lock").exists()


def _case(d: Path, ranks: dict, failures: dict, frozen: list | None = None,
          attempt: int = 0) -> tuple:
    d.mkdir()
    for r, rec in ranks.items():
        (d / f"rank{r}.json").write_text(json.dumps({"rank": r, "exit_code": 2, **rec}))
    (d / "agent.json").write_text(json.dumps({"failures": {
        str(r): {"pid": 100 + r, "exitcode": c, "local_rank": r} for r, c in failures.items()}}))
    if frozen is not None:
        (d / "frozen.json").write_text(json.dumps(frozen))
    return _failure(d, 1, attempt=attempt)


def test_failure_line_of_a_rank_that_stopped_answering(tmp_path):
    """The launcher's line when a peer timed out: the rank found stopped, else the rank that
    said nothing and was SIGKILLed by torchrun, is named with the --dist-timeout; a killed
    rank without a timeout stays "killed by signal"; only the last attempt's errors count."""
    timed = {"time": 1.0, "message": "rank 0/2: another rank did not answer within 15 s "
             "(--dist-timeout); stopping (...)", "timed_out": True, "timeout_s": 15.0}
    line, code = _case(tmp_path / "a", {0: timed}, {0: 2, 1: -9},
                       [{"rank": 1, "pid": 101, "attempt": 0}])
    assert code == 2 and line.startswith("rank 1 (pid 101) stopped answering (its process was "
                                         "stopped"), line
    assert "rank 0 waited longer than --dist-timeout 15 s" in line, line
    line, code = _case(tmp_path / "b", {0: timed}, {0: 2, 1: -9})  # hung, killed by torchrun
    assert code == 2 and line.startswith("rank 1 (pid 101) stopped answering (it ignored"), line
    lost = {"time": 1.0, "message": "rank 0/2: another rank failed (connection lost)"}
    line, code = _case(tmp_path / "c", {0: lost}, {0: 2, 1: -9})
    assert code == 137 and line.startswith("rank 1 (pid 101) was killed by signal SIGKILL")
    # a restarted job that failed again: the first attempt's error is not the one said
    line, code = _case(tmp_path / "d", {0: {**timed, "attempt": 0},
                                        1: {"time": 5.0, "message": "bad part", "attempt": 1}},
                       {1: 2, 0: -15}, attempt=1)
    assert (line, code) == ("bad part", 2)
    (tmp_path / "e").mkdir()  # the agent killed (its ranks die with it): no report at all
    assert _failure(tmp_path / "e", -9) == (("torchrun's agent was killed by signal SIGKILL; "
                                             "its ranks stopped with it"), 137)


@linux_proc
def test_die_with_parent_signals_at_once_when_the_parent_is_gone():
    """The race of prctl(PR_SET_PDEATHSIG): a parent that died before the request is never
    signalled by the kernel, so the process sends itself the signal."""
    code = ("import os, sys, time; from twopgraph.distributed.launch import die_with_parent; "
            "die_with_parent(int(sys.argv[1])); time.sleep(30)")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that is no process now: "the parent died before"
    proc = subprocess.run([sys.executable, "-c", code, str(gone.pid)], timeout=25,
                          cwd=ROOT, check=False)
    assert proc.returncode == -signal.SIGTERM
    assert die_with_parent(os.getppid(), 0) is True  # signal 0 = none: asking is harmless
