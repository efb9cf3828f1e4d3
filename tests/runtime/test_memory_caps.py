"""Training under real memory caps (a memory cgroup, v1 or v2, made for the test): below the
uncapped peak the run finishes with the uncapped accuracy; below the smallest step it stops
with the memory governor's one line (exit 2) -- never an OOM-kill without a word.

Needs root and a writable memory cgroup hierarchy; skipped with the reason otherwise."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

MiB = 1 << 20
V1 = Path("/sys/fs/cgroup/memory")
V2 = Path("/sys/fs/cgroup")
_names = itertools.count()


def _cgroup_root() -> tuple[Path | None, str]:
    """(the folder to make a memory cgroup in, "v1"/"v2") or (None, why not)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None, "memory caps need root (to make a memory cgroup)"
    if (V1 / "memory.limit_in_bytes").exists() and os.access(V1, os.W_OK):
        return V1, "v1"
    ctrl = V2 / "cgroup.controllers"
    if ctrl.exists() and "memory" in ctrl.read_text().split() and os.access(V2, os.W_OK):
        return V2, "v2"
    return None, "no writable memory cgroup hierarchy (v1 or v2) on this machine"


ROOT, KIND = _cgroup_root()
needs_cgroup = pytest.mark.skipif(ROOT is None, reason=KIND)


def run_capped(limit: int, argv: list[str], timeout: float = 300) -> tuple[int, str, int]:
    """Run ``python -m twopgraph ARGV`` inside a new memory cgroup limited to ``limit``
    bytes; returns (exit code, stderr, OOM kills the cgroup counted). The cgroup is removed."""
    cg = ROOT / f"twopgraph-test-{os.getpid()}-{next(_names)}"
    cg.mkdir()
    try:
        if KIND == "v1":
            (cg / "memory.limit_in_bytes").write_text(str(limit))
        else:
            (cg / "memory.max").write_text(str(limit))
            (cg / "memory.swap.max").write_text("0") if (cg / "memory.swap.max").exists() \
                else None
        procs = str(cg / "cgroup.procs")

        def enter() -> None:
            with open(procs, "w") as f:
                f.write(str(os.getpid()))

        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        p = subprocess.run([sys.executable, "-m", "twopgraph", *argv], preexec_fn=enter,
                           capture_output=True, text=True, timeout=timeout, env=env)
        if KIND == "v1":
            oom = (cg / "memory.oom_control").read_text()
        else:
            oom = (cg / "memory.events").read_text()
        kills = int(next((ln.split()[1] for ln in oom.splitlines()
                          if ln.startswith("oom_kill ")), "0"))
        return p.returncode, p.stderr, kills
    finally:
        for _ in range(50):  # the process may take a moment to leave
            try:
                cg.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def _train_args(out: Path) -> list[str]:
    # neighbour sampling: the caps below were calibrated on its batches (under --sampler auto
    # synthetic-small takes LABOR, whose smaller batches peak at about the 850 MiB cap)
    return ["train", "--dataset", "synthetic-small", "--epochs", "1", "--store-dtype",
            "float32", "--sampler", "neighbor", "--no-progress", "--out", str(out)]


@needs_cgroup
def test_a_cap_below_the_uncapped_peak_finishes_with_the_same_accuracy(tmp_path):
    free = subprocess.run([sys.executable, "-m", "twopgraph", *_train_args(tmp_path / "free")],
                          capture_output=True, text=True, timeout=300)
    assert free.returncode == 0, free.stderr[-2000:]
    uncapped = json.loads((tmp_path / "free" / "metrics.json").read_text())
    cap = 850 * MiB
    assert uncapped["peak_pss_mib"] * MiB > cap, "the cap must be below the uncapped peak"
    code, err, kills = run_capped(cap, _train_args(tmp_path / "capped"))
    assert code == 0 and kills == 0, err[-3000:]
    capped = json.loads((tmp_path / "capped" / "metrics.json").read_text())
    assert capped["status"] == "ok"
    assert abs(capped["test_acc"] - uncapped["test_acc"]) <= 0.01
    mem = capped["memory"]
    assert mem["limit_bytes"] == cap and mem["source"] == f"cgroup {KIND}"
    assert mem["budget_bytes"] < cap and mem["step_bytes"] <= mem["budget_bytes"]
    assert "memory: limit 850 MiB" in err  # logged once at start
    assert err.count("memory: limit") == 1


@needs_cgroup
def test_a_cap_below_the_smallest_step_is_one_line_and_exit_2(tmp_path):
    code, err, kills = run_capped(600 * MiB, _train_args(tmp_path / "run"))
    assert kills == 0, err[-3000:]
    assert code == 2, err[-3000:]
    lines = [ln for ln in err.splitlines() if ln.startswith("twopgraph: error:")]
    assert len(lines) == 1 and "Traceback" not in err
    assert "a training step needs about" in lines[0] and "600 MiB (cgroup" in lines[0]
    assert "--batch-size" in lines[0]
