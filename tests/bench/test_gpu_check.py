"""``scripts/gpu_check.sh --device cpu`` runs end to end on a small dataset and writes the
summary every GPU session reads (so the script cannot rot between sessions that have a GPU).

The unit-test step is narrowed here to the CUDA parametrisations of test_cache/test_cli (skipped
on CPU, bar one): the device-sampler and GPU-path files run in the suite itself, so running them
again inside the check would only cost time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
CONTRACT = ("device", "cuda_unit_tests", "runs", "bench_cache", "ddp",
            "peak_device_memory_bytes", "total_s", "errors")
RUN_KEYS = ("epoch_s", "sample_s", "load_s", "compute_s", "hit_rate", "h2d_bytes", "test_acc")
pytestmark = pytest.mark.skipif(os.environ.get("TWOPGRAPH_GPU_CHECK") == "1",
                                reason="inside gpu_check.py's own unit-test step")


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@pytest.fixture(scope="module")
def summary(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu_check")
    env = dict(os.environ, PYTHON=sys.executable)
    env.pop("TWOPGRAPH_DATA", None)
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--device", "cpu", "--out", str(tmp / "out"),
         "--work", str(tmp / "work"), "--data-root", str(tmp / "data"),
         "--unit-k", "cuda and (test_cache or test_cli)"],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    written = json.loads((tmp / "out" / "gpu_check.json").read_text())
    return proc, written, tmp


def test_cpu_check_writes_the_whole_summary(summary):
    proc, s, tmp = summary
    assert s["errors"] == [], proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout) == s  # printed = written
    for key in CONTRACT:
        assert key in s, key
    assert s["complete"] is True and s["device"] == "cpu"
    assert is_number(s["total_s"]) and s["total_s"] > 0
    assert s["peak_device_memory_bytes"] is None  # no device memory on CPU
    # only the two files come back from a device machine's $OUT
    assert sorted(p.name for p in (tmp / "out").iterdir()) == ["gpu_check.json", "gpu_check.log"]


def test_unit_test_counts_are_numbers(summary):
    _, s, _ = summary
    u = s["cuda_unit_tests"]
    for k in ("passed", "failed", "skipped"):
        assert is_number(u[k]), k
    assert u["failed"] == 0 and u["passed"] + u["skipped"] > 0
    # on CPU every CUDA parametrisation is skipped, with its reason recorded
    assert u["skipped"] == sum(u["skip_reasons"].values())


def test_runs_cover_both_budgets_and_samplers(summary):
    _, s, _ = summary
    runs = {(r["cache_ratio"], r["sampler"]): r for r in s["runs"]}
    assert set(runs) == {(0.1, "host"), (None, "host"), (0.1, "device"), (None, "device")}
    for (ratio, sampler), r in runs.items():
        if sampler == "device":  # needs CUDA: skipped with a reason, not an error
            assert r["status"] == "skipped" and "cuda" in r["reason"]
            continue
        assert r["status"] == "ok", r
        for k in RUN_KEYS:
            assert is_number(r[k]), (r["name"], k)
        assert 0 <= r["hit_rate"] <= 1 and 0 <= r["test_acc"] <= 1 and r["epoch_s"] > 0
    assert runs[(0.1, "host")]["hit_rate"] > 0  # the layer cache holds 10% of the rows
    assert runs[(None, "host")]["cache_budget_rows"] == 0  # CPU default: no cache
    skipped = {x["step"] for x in s["skipped"]}
    assert skipped == {f"run {r['name']}" for r in s["runs"] if r["status"] == "skipped"} | {
        "run layer-default-device-amp"}  # the bf16 run is a CUDA figure
    assert all("cuda" in x["reason"] for x in s["skipped"])


def test_bench_cache_and_ddp(summary):
    _, s, _ = summary
    rows = s["bench_cache"]["rows"]
    assert {(r["policy"], r["ratio"]) for r in rows} >= {("layer", 0.1), ("layer", 1.0),
                                                         ("none", 0.1)}
    assert all(is_number(r["gather_s"]) and r["gather_s"] >= 0 for r in rows)
    full = next(r for r in rows if r["policy"] == "layer" and r["ratio"] == 1.0)
    assert full["hit_rate"] == 1.0 and full["h2d_bytes"] == 0
    d = s["ddp"]
    assert d["backend"] == "gloo" and d["world_size"] == 1
    assert is_number(d["test_acc"]) and is_number(d["epoch_s"])


@pytest.mark.slow
def test_failing_steps_are_recorded_and_the_rest_still_runs(tmp_path):
    """A step that fails (here: an unknown dataset) leaves a one-line reason in ``errors``,
    exit 1, and the steps after it still run; ``--skip`` steps are listed as skipped."""
    env = dict(os.environ, PYTHON=sys.executable)
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--device", "cpu", "--out", str(tmp_path / "out"),
         "--work", str(tmp_path / "work"), "--data-root", str(tmp_path / "data"),
         "--dataset", "no-such-dataset", "--samplers", "host", "--caches", "0.1",
         "--skip", "cuda_unit_tests,bench_cache,ddp,amp_run"],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr[-2000:]
    s = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    steps = [e["step"] for e in s["errors"]]
    assert steps == ["data no-such-dataset", "run layer-0.1-host"]
    assert all("\n" not in e["reason"] and "no-such-dataset" in e["reason"]
               for e in s["errors"])
    assert s["complete"] is True and s["runs"][0]["status"] == "error"
    assert {x["step"] for x in s["skipped"]} == {"cuda_unit_tests", "bench_cache", "ddp",
                                                  "amp_run"}


def test_reason_is_the_one_error_line():
    """The reason recorded for a failed step is twopgraph's error line when there is one, else
    the last line of the output (a traceback's exception line)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    assert gpu_check.last_line("log\ntwopgraph: error: bad dataset\nmore\n") == \
        "twopgraph: error: bad dataset"
    assert gpu_check.last_line("Traceback ...\n  File x\nValueError: boom\n\n") == \
        "ValueError: boom"
    assert gpu_check.last_line("") == "no output"
