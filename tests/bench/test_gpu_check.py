"""``scripts/gpu_check.sh --device cpu``: the acceptance check of the GPU path runs end to end on
a small dataset, writes its list of checks and exits 0 (so it cannot rot between the sessions
that have a GPU); a real defect (resume without the optimizer state, patched in by a test-only
``sitecustomize``) makes it fail; the trace analysis of the CUDA profiler checks is tested on a
hand-made trace (no GPU here)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
BREAKER = Path(__file__).resolve().parent / "gpu_check_breaker"
#: checks that need CUDA: on --device cpu they are recorded as ok with a skip reason
CUDA_ONLY = {"cuda_available", "sync_audit", "cache_peak_memory", "cache_memory_growth",
             "gpu_times", "profile_no_pageable_h2d", "profile_copy_overlap",
             "ddp_one_process_per_gpu"}
pytestmark = pytest.mark.skipif(os.environ.get("TWOPGRAPH_GPU_CHECK") == "1",
                                reason="inside gpu_check.py's own pytest step")


def gpu_check():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gpu_check as mod
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return mod


def run_check(tmp: Path, *args: str, env: dict | None = None, timeout: float = 420):
    e = dict(os.environ, PYTHON=sys.executable) if env is None else env
    e.pop("TWOPGRAPH_DATA", None)
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--device", "cpu", "--out", str(tmp / "out"),
         "--work", str(tmp / "work"), "--data-root", str(tmp / "data"), *args],
        check=False, cwd=ROOT, env=e, capture_output=True, text=True, timeout=timeout)
    path = tmp / "out" / "gpu_check.json"
    return proc, (json.loads(path.read_text()) if path.exists() else None)


@pytest.fixture(scope="module")
def cpu_check(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu_check")
    proc, written = run_check(tmp)
    return proc, written, tmp


def test_cpu_check_passes_with_ten_real_checks(cpu_check):
    proc, s, tmp = cpu_check
    assert s is not None, proc.stderr[-3000:]
    failed = [c for c in s["checks"] if not c["ok"]]
    assert failed == [], failed
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout) == s  # printed = written
    assert s["complete"] is True and s["ok"] is True and s["device"] == "cpu"
    for c in s["checks"]:
        assert {"check", "ok", "value", "limit"} <= set(c), c
    ran = [c for c in s["checks"] if not c.get("skipped")]
    assert len(ran) >= 10, [c["check"] for c in ran]
    # every check of the script is recorded, once
    names = [c["check"] for c in s["checks"]]
    assert sorted(names) == sorted(gpu_check().CHECKS)
    # only the two files come back from a device machine's $OUT
    assert sorted(p.name for p in (tmp / "out").iterdir()) == ["gpu_check.json",
                                                               "gpu_check.log"]


def test_only_cuda_checks_are_skipped_on_cpu(cpu_check):
    _, s, _ = cpu_check
    skipped = {c["check"]: c["reason"] for c in s["checks"] if c.get("skipped")}
    assert set(skipped) == CUDA_ONLY
    assert all(skipped.values())


def test_check_values(cpu_check):
    _, s, _ = cpu_check
    c = {x["check"]: x for x in s["checks"]}
    assert c["cache_hit_rate"]["value"] == 1.0 and c["cache_h2d_bytes"]["value"] == 0
    assert c["cache_accuracy"]["value"]["diff"] <= 0.01
    r = c["resume_equal"]["value"]  # CPU runs are bit-reproducible
    assert r["loss_max_diff"] == 0 and r["weights_max_diff"] == 0 and len(r["losses"]) == 2
    assert c["predict_equal"]["value"]["max_diff"] <= 1e-6  # float32 accuracies
    assert c["pytest_cuda_collected"]["value"] >= 40
    assert c["pytest_cuda_skipped"]["value"] == c["pytest_cuda_collected"]["value"]
    assert c["ddp_2rank"]["value"]["backend"] == "gloo"
    assert c["ddp_2rank"]["value"]["world_size"] == 2
    for name in ("device_sampler_equal", "labor_device_equal", "labor_device_deterministic"):
        same, total = c[name]["value"].split()[0].split("/")  # "3/3 batches identical"
        assert same == total and int(total) > 0
    # timings are kept as values (GPU times: null on CPU, information only)
    assert c["train_run"]["value"]["epoch_s"] > 0
    assert set(c["gpu_times"]["value"]) == {"load_gpu_s", "sample_gpu_s", "compute_gpu_s"}
    assert s["runs"]["main"]["epochs"][-1]["epoch_s"] > 0


def test_broken_resume_makes_the_check_fail(tmp_path):
    """With ``Optimizer.load_state_dict`` broken in every process (a test-only
    sitecustomize), ``--resume`` starts from a fresh Adam: resume_equal fails, exit 1."""
    env = dict(os.environ, PYTHON=sys.executable, TWOPGRAPH_GPU_CHECK_BREAK="optimizer",
               PYTHONPATH=os.pathsep.join(filter(None, [str(BREAKER),
                                                         os.environ.get("PYTHONPATH")])))
    proc, s = run_check(tmp_path, "--only", "resume_equal", env=env, timeout=240)
    assert s is not None, proc.stderr[-3000:]
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert [c["check"] for c in s["checks"]] == ["resume_equal"]
    c = s["checks"][0]
    assert c["ok"] is False and "--resume" in c["reason"]
    assert c["value"]["loss_max_diff"] > 0


def test_bad_arguments_exit_2(tmp_path):
    proc, s = run_check(tmp_path, "--only", "no_such_check", timeout=60)
    assert proc.returncode == 2 and "no_such_check" in proc.stderr and s is None


def test_trace_analysis_finds_pageable_copies_and_overlap():
    """The CUDA profiler checks on a hand-made chrome trace: a pageable copy inside the steps'
    span (extended by one step for queued GPU work) is counted, one long after is not; copy
    time overlapping a kernel on another stream is measured, a kernel on the copy's own stream
    does not count."""
    ev = [
        {"ph": "X", "name": "ProfilerStep#1", "ts": 0, "dur": 100, "cat": "user_annotation"},
        {"ph": "X", "name": "aten::addmm", "ts": 1, "dur": 5, "cat": "cpu_op"},
        {"ph": "X", "name": "autograd::engine::evaluate_function: AddmmBackward0", "ts": 10,
         "dur": 5, "cat": "cpu_op"},
        {"ph": "X", "name": "Optimizer.step#Adam.step", "ts": 20, "dur": 5, "cat": "cpu_op"},
        {"ph": "X", "name": "Memcpy HtoD (Pinned -> Device)", "ts": 30, "dur": 10,
         "cat": "gpu_memcpy", "args": {"stream": 7, "bytes": 64}},
        {"ph": "X", "name": "Memcpy HtoD (Pageable -> Device)", "ts": 50, "dur": 10,
         "cat": "gpu_memcpy", "args": {"stream": 7, "bytes": 128}},
        {"ph": "X", "name": "Memcpy HtoD (Pageable -> Device)", "ts": 500, "dur": 10,
         "cat": "gpu_memcpy", "args": {"stream": 7, "bytes": 4}},
        {"ph": "X", "name": "gemm", "ts": 35, "dur": 20, "cat": "kernel", "args": {"stream": 0}},
        {"ph": "X", "name": "copy_kernel", "ts": 30, "dur": 30, "cat": "kernel",
         "args": {"stream": 7}},
    ]
    t = gpu_check().analyse_trace({"traceEvents": ev})
    assert (t["forward"], t["backward"], t["optimizer"]) == (1, 1, 1)
    assert t["windows"] == 1 and t["h2d"] == 2 and t["pageable_h2d"] == 1
    assert t["pageable_bytes"] == 128
    # gemm (stream 0) covers 35..40 of the first copy and 50..55 of the second: 10 us
    assert t["overlap_s"] == pytest.approx(10e-6) and t["h2d_s"] == pytest.approx(20e-6)


def test_reason_is_the_one_error_line():
    mod = gpu_check()
    assert mod.last_line("log\ntwopgraph: error: bad dataset\nmore\n") == \
        "twopgraph: error: bad dataset"
    assert mod.last_line("Traceback ...\n  File x\nValueError: boom\n\n") == "ValueError: boom"
    assert mod.last_line("") == "no output"


def test_sync_audit_counts_only_syncs_inside_the_steps():
    """The sync audit's bookkeeping without a GPU: torch's sync warnings are fed to it by
    hand; those between two optimizer steps count, the tally's (``read`` in
    pipeline/epoch.py), the epoch's edges and other threads' are counted apart."""
    import threading
    import warnings

    spec = importlib.util.spec_from_file_location("gpu_check_child",
                                                  ROOT / "scripts" / "gpu_checks" / "child.py")
    child = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(child)
    audit = child.SyncAudit()
    audit.previous = warnings.showwarning

    def sync():
        audit.showwarning(UserWarning(child.SYNC_TEXT), UserWarning, "x.py", 1)

    ns: dict = {}
    exec(compile("def read(f):\n    f()\n", os.path.join("twopgraph", "pipeline", "epoch.py"),
                 "exec"), ns)
    sync()  # not auditing yet: ignored
    audit.begin()
    sync()  # before the epoch's first step: an edge
    audit.on_step()
    sync()
    sync()  # two inside the second step
    ns["read"](sync)  # the periodic tally
    t = threading.Thread(target=sync)
    t.start()
    t.join()
    audit.on_step()
    sync()  # after the last step: an edge
    audit.end()
    r = audit.record()
    assert (r["step_syncs"], r["tally_syncs"], r["edge_syncs"], r["other_thread_syncs"],
            r["steps"]) == (2, 1, 2, 1, 2)
    assert sum(r["step_sync_places"].values()) == 2


def test_step_limits_fit_the_budget():
    """Each step has its own limit; on either device they add up to at most the budget, and
    the CUDA budget leaves room in a 10-minute command for the --wheels install."""
    mod = gpu_check()
    for i, device in ((2, "cuda"), (3, "cpu")):
        assert sum(step[i] for step in mod.STEPS) <= mod.DEFAULTS[device]["budget_s"]
    assert mod.DEFAULTS["cuda"]["budget_s"] <= 560


def test_a_step_past_its_limit_leaves_its_stacks_and_fails(tmp_path):
    """A step stopped at its limit gets SIGUSR1 first: every thread's stack is in the log
    (faulthandler, registered by gpu_checks/site/sitecustomize.py), and its checks fail."""
    proc, s = run_check(tmp_path, "--only", "train_run", "--limits", "train=4", "--epochs",
                        "500", timeout=120)  # 500 epochs take far more than 4 s
    assert proc.returncode == 1, proc.stderr[-2000:]
    (c,) = s["checks"]
    assert c["check"] == "train_run" and not c["ok"] and "stopped after 4 s" in c["reason"]
    log = (tmp_path / "out" / "gpu_check.log").read_text()
    assert "most recent call first" in log


def test_cuda_verdicts_on_recorded_figures(tmp_path, monkeypatch):
    """The CUDA-only verdicts of the train step, fed a run's metrics and probe record as the
    GPU would write them (no GPU here): good figures pass; a peak above the planned budget,
    memory growing from epoch 2, a sync inside the steps and missing GPU times fail."""
    mod = gpu_check()
    a = mod.parse_args(["--device", "cuda", "--out", str(tmp_path / "out"),
                        "--work", str(tmp_path / "work")])
    (tmp_path / "out").mkdir()
    mib = 1 << 20

    def run(peak, peaks, step_syncs, gpu_s):
        ep = {"hit_rate": 1.0, "h2d_bytes": 0, "activation_reserve_bytes": 100 * mib,
              "epoch_s": 1.0, "sampler_device": "cuda", "loss": 1.0}
        epochs = [dict(ep, **({"load_gpu_s": 0.1, "sample_gpu_s": 0.1, "compute_gpu_s": 0.5}
                              if gpu_s else {})) for _ in range(3)]
        m = {"status": "ok", "test_acc": 0.8, "val_acc": 0.8, "epochs": epochs}
        pr = {"peak_allocated": peak, "peak_reserved": peak + mib, "cache_bytes": 400 * mib,
              "sampler_bytes": 20 * mib, "free_at_start": 70 << 30, "total": 80 << 30,
              "margin": 0.25, "epochs": [{"peak_allocated": p, "end_allocated": p // 2}
                                         for p in peaks],
              "sync": {"step_syncs": step_syncs, "tally_syncs": 3, "edge_syncs": 2,
                       "other_thread_syncs": 10, "steps": 60, "step_sync_places": {}}}
        c = mod.Check(a)
        monkeypatch.setattr(c, "train", lambda *args, **kw: (m, pr, ""))
        c.step_name, c.step_t0 = "train", 0.0
        c.step_train()
        return {x["check"]: x for x in c.summary["checks"]}

    good = run(500 * mib, [510 * mib, 500 * mib, 500 * mib], 0, True)
    assert all(x["ok"] and not x.get("skipped") for x in good.values()), good
    assert set(good) == set(mod.STEPS[3][1])
    bad = run(530 * mib, [500 * mib, 500 * mib, 600 * mib], 2, False)
    assert [n for n, x in bad.items() if not x["ok"]] == [
        "cache_peak_memory", "cache_memory_growth", "sync_audit", "gpu_times"]
    assert "sample_gpu_s" in bad["gpu_times"]["reason"]


def test_cuda_profile_and_ddp_verdicts(tmp_path, monkeypatch):
    """On CUDA: a trace with a pageable copy in the steps fails profile_no_pageable_h2d; the
    2-rank checks are skipped with the reason on a machine with one GPU (the only skips the
    CUDA check allows)."""
    mod = gpu_check()
    a = mod.parse_args(["--device", "cuda", "--out", str(tmp_path / "out"),
                        "--work", str(tmp_path / "work")])
    (tmp_path / "out").mkdir()
    c = mod.Check(a)
    c.info = {"train_has_profile": True, "gpu_count": 1}
    trace = {"traceEvents": [
        {"ph": "X", "name": "ProfilerStep#2", "ts": 0, "dur": 100},
        {"ph": "X", "name": "aten::mm", "ts": 1, "dur": 5},
        {"ph": "X", "name": "autograd::engine::evaluate_function: MmBackward0", "ts": 9,
         "dur": 5},
        {"ph": "X", "name": "Optimizer.step#Adam.step", "ts": 20, "dur": 5},
        {"ph": "X", "name": "Memcpy HtoD (Pageable -> Device)", "ts": 30, "dur": 10,
         "cat": "gpu_memcpy", "args": {"stream": 7, "bytes": 8}},
        {"ph": "X", "name": "gemm", "ts": 30, "dur": 5, "cat": "kernel", "args": {"stream": 0}},
    ]}

    def train(name, args, **kw):
        pdir = Path(args[args.index("--profile") + 1])
        pdir.mkdir(parents=True)
        (pdir / "trace-epoch0.json").write_text(json.dumps(trace))
        return {"status": "ok", "epochs": [{}]}, None, ""

    monkeypatch.setattr(c, "train", train)
    c.step_name, c.step_t0 = "profile", 0.0
    c.step_profile()
    c.step_name = "ddp"
    c.step_ddp()
    r = {x["check"]: x for x in c.summary["checks"]}
    assert r["profile_trace"]["ok"] and r["profile_trace"]["via"] == "train --profile"
    assert not r["profile_no_pageable_h2d"]["ok"]
    assert r["profile_no_pageable_h2d"]["value"]["pageable_h2d"] == 1
    assert r["profile_copy_overlap"]["ok"] and r["profile_copy_overlap"]["value"][
        "overlapped_fraction"] == 0.5
    for n in ("ddp_2rank", "ddp_threads", "ddp_one_process_per_gpu"):
        assert r[n]["ok"] and r[n]["skipped"] and "two GPUs" in r[n]["reason"]
