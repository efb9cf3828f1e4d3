"""The acceptance check of twopgraph's GPU path: a list of checks that pass or fail.

Writes one JSON file, ``OUT/gpu_check.json``, rewritten after every step (a run killed half-way
keeps what it found; ``complete`` says whether it ran to the end), and prints it at the end;
every step's output goes to ``OUT/gpu_check.log``. Nothing else goes into ``OUT`` (a device
machine of this workplace returns few files): runs, partitions and reports live in ``--work``,
datasets in ``--data-root``. The central content is ``checks``, one entry per check::

    {"check": "cache_hit_rate", "ok": true, "value": 1.0, "limit": ">= 1.0", "step": "train",
     "seconds": 7.1}

plus ``reason`` where it failed or was skipped (``skipped``: a check that cannot run on this
device, recorded as ok only where that is expected: CUDA-only checks on ``--device cpu``, 2-rank
NCCL with one GPU). Exit status: 0 when every check is ok, 1 otherwise, 2 for bad arguments.

    bash scripts/gpu_check.sh --device cuda --out runs/gpu_check      # a GPU machine, <= 9 min
    bash scripts/gpu_check.sh --device cpu  --out /tmp/gpu_check      # CI, ~2 min on 2 cores

Steps, cheapest and most informative first, each a subprocess (``python -X faulthandler``)
under its own time limit (``--limits``; their sum is within ``--budget-s``); a step past its
limit gets SIGUSR1 (every thread's stack into the log) and then SIGKILL, and its checks fail
with the reason. docs/gpu.md lists every check, its limit and why.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = Path(__file__).resolve().parent / "gpu_checks" / "child.py"
SITE = Path(__file__).resolve().parent / "gpu_checks" / "site"
#: set in every child; tests/bench/test_gpu_check.py skips itself under it (no recursion)
CHILD_ENV = "TWOPGRAPH_GPU_CHECK"
TIMING_KEYS = ("epoch_s", "sample_s", "load_s", "compute_s", "load_gpu_s", "sample_gpu_s",
               "compute_gpu_s", "hit_rate", "h2d_bytes", "input_nodes_per_batch")
GPU_TIME_KEYS = ("load_gpu_s", "sample_gpu_s", "compute_gpu_s")
MIB = 1 << 20

#: (step, the checks it records, time limit in s on cuda, on cpu), in the order they run
STEPS = (
    ("environment", ("environment", "cuda_available", "numba_threading_layer"), 25, 20),
    ("data", ("dataset",), 20, 20),
    ("samplers", ("device_sampler_equal", "labor_device_equal", "labor_star_device_vs_host",
                  "labor_device_deterministic"), 30, 25),
    ("train", ("train_run", "cache_hit_rate", "cache_h2d_bytes", "cache_peak_memory",
               "cache_memory_growth", "sync_audit", "gpu_times"), 60, 25),
    ("predict", ("predict_equal",), 30, 20),
    ("pytest_cuda", ("pytest_cuda_collected", "pytest_cuda_failed", "pytest_cuda_skipped"),
     130, 40),
    ("cpu_reference", ("cache_accuracy",), 50, 20),
    ("profile", ("profile_trace", "profile_no_pageable_h2d", "profile_copy_overlap"), 35, 25),
    ("resume", ("resume_equal",), 55, 30),
    ("bf16", ("bf16_accuracy",), 35, 20),
    ("ddp", ("ddp_2rank", "ddp_threads", "ddp_one_process_per_gpu"), 60, 55),
)
CHECKS = tuple(c for _, cs, _, _ in STEPS for c in cs)
#: steps whose checks read the main training run
NEEDS_TRAIN = {"predict", "cpu_reference", "resume", "bf16"}
DEFAULTS = {  # per device: dataset, epochs and batch size of the runs, whole budget
    "cuda": {"dataset": "synthetic-small", "epochs": 3, "batch_size": 1024, "budget_s": 540},
    "cpu": {"dataset": "synthetic-tiny", "epochs": 2, "batch_size": 128, "budget_s": 300},
}
#: tolerances: CPU runs are bit-reproducible, CUDA ones are not (atomics in the backward pass);
#: metrics.json's accuracies are float32, so "equal" accuracies differ by float32 rounding
TOL = {"cpu": {"resume_loss": 0.0, "resume_weights": 0.0, "predict_acc": 1e-6},
       "cuda": {"resume_loss": 1e-3, "resume_weights": 1e-3, "predict_acc": 2e-3}}


class Check:
    """The summary being built, the budget, and how every step runs."""

    def __init__(self, a: argparse.Namespace):
        self.a = a
        self.cuda = a.device == "cuda"
        self.t0 = time.monotonic()
        self.out = Path(a.out)
        self.work = Path(a.work)
        self.log_path = self.out / "gpu_check.log"
        self.json_path = self.out / "gpu_check.json"
        self.env = dict(os.environ)
        self.env[CHILD_ENV] = "1"
        self.env["PYTHONUNBUFFERED"] = "1"
        self.env["PYTHONPATH"] = os.pathsep.join(
            [p for p in self.env.get("PYTHONPATH", "").split(os.pathsep) if p]
            + [str(SITE), str(ROOT)])
        self.py = [sys.executable, "-X", "faulthandler"]
        self.tw = [*self.py, "-m", "twopgraph"]
        self.info: dict = {}
        self.main_run: dict | None = None  # metrics.json of the train step's run
        self.step_name = ""
        self.step_t0 = 0.0
        self.step_deadline = 0.0
        self.summary: dict = {
            "complete": False, "ok": None, "device": a.device, "device_name": None,
            "dataset": a.dataset, "epochs": a.epochs, "budget_s": a.budget_s,
            "checks": [], "failed": [], "runs": {}, "environment": {}, "steps": [],
            "total_s": None,
        }

    # -- bookkeeping --------------------------------------------------------------------------
    def left(self) -> float:
        return self.a.budget_s - (time.monotonic() - self.t0)

    def note(self, line: str) -> None:
        print(f"[gpu_check {time.monotonic() - self.t0:6.1f}s] {line}", file=sys.stderr,
              flush=True)
        with open(self.log_path, "a") as f:
            f.write(f"## {line}\n")

    def save(self) -> None:
        self.summary["total_s"] = round(time.monotonic() - self.t0, 2)
        self.summary["failed"] = [c["check"] for c in self.summary["checks"] if not c["ok"]]
        tmp = self.json_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.summary, indent=1, allow_nan=False, default=str) + "\n")
        os.replace(tmp, self.json_path)

    def wanted(self, name: str) -> bool:
        return not self.a.only or name in self.a.only

    def record(self, name: str, ok: bool, value=None, limit=None, **extra) -> None:
        """One check: ``ok``, the measured ``value`` and the ``limit`` it is held to."""
        if not self.wanted(name):
            return
        entry = {"check": name, "ok": bool(ok), "value": value, "limit": limit,
                 "step": self.step_name,
                 "seconds": round(time.monotonic() - self.step_t0, 2)}
        entry.update({k: v for k, v in extra.items() if v is not None})
        self.summary["checks"].append(entry)
        why = f" ({entry['reason']})" if "reason" in entry else ""
        self.note(f"{'ok  ' if ok else 'FAIL'} {name}: value {_short(value)}, "
                  f"limit {_short(limit)}{why}")

    def fail(self, name: str, reason: str, value=None, limit=None) -> None:
        self.record(name, False, value, limit, reason=reason)

    def skip(self, name: str, reason: str, value=None, limit=None) -> None:
        """A check that cannot run on this device, where the issue allows it: ok, skipped."""
        self.record(name, True, value, limit, skipped=True, reason=reason)

    def fail_all(self, names, reason: str) -> None:
        for n in names:
            if not any(c["check"] == n for c in self.summary["checks"]):
                self.fail(n, reason)

    # -- running a process --------------------------------------------------------------------
    def run(self, what: str, cmd: list[str], env: dict | None = None,
            limit: float | None = None) -> tuple[int | None, str, float]:
        """Run ``cmd`` in its own process group until the step's deadline (or ``limit``).

        Returns (exit code, or None when stopped at the limit, its output, seconds). Past the
        limit the group gets SIGUSR1 (Python children dump every thread's stack: see
        gpu_checks/site/sitecustomize.py), then SIGKILL 3 s later."""
        limit = self.step_deadline - time.monotonic() if limit is None else limit
        if limit < 3:
            return None, "not started: the step's time limit is spent", 0.0
        shown = ["<code>" if len(x) > 200 else x for x in cmd]
        self.note(f"{what}: {' '.join(shown)}  (limit {limit:.0f} s)")
        t = time.monotonic()
        with open(self.log_path, "ab") as log:  # streamed: a killed run still leaves its log
            start = log.tell()
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env or self.env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                code = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                for sig, wait in ((signal.SIGUSR1, 3), (signal.SIGKILL, None)):
                    try:
                        os.killpg(proc.pid, sig)
                    except ProcessLookupError:
                        break
                    try:
                        proc.wait(timeout=wait)
                        break
                    except subprocess.TimeoutExpired:
                        pass
                proc.wait()
                code = None
        with open(self.log_path, "rb") as log:
            log.seek(start)
            out = log.read().decode(errors="replace")
        if code is None:
            msg = f"stopped after {limit:.0f} s (its limit; stacks in gpu_check.log)"
            out += f"\n[{msg}]\n"
            with open(self.log_path, "a") as log:
                log.write(f"\n[{msg}]\n")
        secs = time.monotonic() - t
        self.summary["steps"].append({"step": self.step_name, "process": what,
                                      "seconds": round(secs, 2), "code": code})
        return code, out, secs

    def child(self, what: str, args: list[str], **kw) -> tuple[dict | None, str]:
        """Run a gpu_checks/child.py subcommand printing one JSON line: (record, why not)."""
        code, out, _ = self.run(what, [*self.py, str(CHILD), *args], **kw)
        if code != 0:
            return None, why_failed(code, out)
        try:
            return json.loads(next(ln for ln in reversed(out.splitlines())
                                   if ln.startswith("{"))), ""
        except (StopIteration, ValueError):
            return None, f"no JSON record: {last_line(out)}"

    # -- training runs ------------------------------------------------------------------------
    def train_args(self, device: str | None = None) -> list[str]:
        a = self.a
        return ["train", "--dataset", a.dataset, "--data-root", a.data_root,
                "--device", device or a.device, "--epochs", str(a.epochs),
                "--batch-size", str(a.batch_size), "--seed", str(a.seed), "--dropout", "0",
                "--eval-every", "0", "--select", "last", "--no-progress",
                *a.train_args.split()]

    def cache_args(self) -> list[str]:
        # CUDA: the layer cache at the default budget; CPU has no default device cache
        return ["--cache-policy", "layer"] + ([] if self.cuda else ["--cache-ratio", "1.0"])

    def train(self, name: str, args: list[str], probe: bool = False,
              child_args: list[str] | None = None) -> tuple[dict | None, dict | None, str]:
        """``twopgraph ARGS --out WORK/runs/NAME`` (through the probing child with ``probe``):
        (metrics.json, the child's probe record, why it failed or "")."""
        run_dir = self.work / "runs" / name
        if "--resume" not in args:
            shutil.rmtree(run_dir, ignore_errors=True)
        probe_file = self.work / "runs" / f"{name}.probe.json"
        probe_file.unlink(missing_ok=True)
        if probe:
            cmd = [*self.py, str(CHILD), "train", str(probe_file), *(child_args or []), "--",
                   *args, "--out", str(run_dir)]
        else:
            cmd = [*self.tw, *args, "--out", str(run_dir)]
        code, out, secs = self.run(f"run {name}", cmd)
        pr = None
        if probe:
            try:
                pr = json.loads(probe_file.read_text())
            except (OSError, ValueError):
                pr = None
        if code != 0:
            return None, pr, why_failed(code, out)
        try:
            m = json.loads((run_dir / "metrics.json").read_text())
        except (OSError, ValueError) as e:
            return None, pr, f"metrics.json unreadable: {type(e).__name__}: {e}"
        if m.get("status") != "ok":
            return None, pr, f"metrics.json status {m.get('status')!r}"
        last = m["epochs"][-1] if m.get("epochs") else {}
        self.summary["runs"][name] = {
            "wall_s": round(secs, 2), "test_acc": m.get("test_acc"),
            "val_acc": m.get("val_acc"), "sampler_device": last.get("sampler_device"),
            "epochs": [{k: e.get(k) for k in TIMING_KEYS if k in e} | {"loss": e.get("loss")}
                       for e in m.get("epochs", [])]}
        return m, pr, ""

    # -- the steps ----------------------------------------------------------------------------
    def step_environment(self) -> bool:
        info, why = self.child("environment", ["env"])
        if info is None:
            self.fail("environment", why)
            self.fail_all(["cuda_available", "numba_threading_layer"], "environment failed")
            return False
        self.info = info
        flags = set(info.pop("train_flags", []))
        info["train_has_profile"] = "--profile" in flags
        self.summary["environment"] = info
        self.summary["device_name"] = info.get("gpu") if self.cuda else "cpu"
        self.record("environment", True, {k: info.get(k) for k in (
            "torch", "torch_cuda", "gpu", "gpu_count", "cpu_count", "numba", "pymetis")},
            "torch and twopgraph import")
        if self.cuda:
            ok = bool(info.get("cuda_available"))
            self.record("cuda_available", ok, info.get("cuda_available"), True,
                        reason=None if ok else f"--device cuda, but torch {info.get('torch')} "
                        f"(built for CUDA {info.get('torch_cuda')}) sees no CUDA device")
            if not ok:
                return False
        else:
            self.skip("cuda_available", "--device cpu", info.get("cuda_available"), True)
        layer = info.get("numba_threading_layer")
        self.record("numba_threading_layer", bool(layer) and not info.get(
            "numba_threading_error"), layer, "a threading layer",
                    reason=info.get("numba_threading_error"))
        return True

    def step_data(self) -> None:
        code, out, secs = self.run(f"data {self.a.dataset}", [
            *self.tw, "info", "--dataset", self.a.dataset, "--data-root", self.a.data_root,
            "--json"])
        self.record("dataset", code == 0, self.a.dataset, "generated/converted, exit 0",
                    reason=None if code == 0 else why_failed(code, out))

    def step_samplers(self) -> None:
        names = ["device_sampler_equal", "labor_device_equal", "labor_star_device_vs_host",
                 "labor_device_deterministic"]
        rec, why = self.child("samplers", [
            "samplers", self.a.dataset, self.a.data_root, self.a.device, "--seed",
            str(self.a.seed), "--batches", str(self.a.sampler_batches)])
        if rec is None:
            self.fail_all(names, why)
            return

        def equal(name, key, what):
            r = rec.get(key, {})
            if "error" in r or "equal" not in r:
                self.fail(name, f"{what}: {r.get('error', 'not measured')}")
                return
            self.record(name, r["equal"] == r["batches"] and r["batches"] > 0,
                        f"{r['equal']}/{r['batches']} batches identical",
                        "every batch identical", reason=None if r["equal"] == r["batches"]
                        else f"{what}: batches differ (inputs host {r.get('host_inputs')} vs "
                        f"device {r.get('device_inputs')})")

        equal("device_sampler_equal", "neighbor", "device vs neighbor")
        equal("labor_device_equal", "labor0", "labor-device vs labor (LABOR-0)")
        r = rec.get("labor_star", {})
        if "error" in r or "equal" not in r:
            self.fail("labor_star_device_vs_host", f"labor-device vs labor (LABOR-*): "
                      f"{r.get('error', 'not measured')}")
        elif self.cuda:  # transcendental functions and float sums may differ in the last bit
            v = r["max_rel_input_diff"]
            self.record("labor_star_device_vs_host", v <= self.a.labor_tol,
                        {"max_rel_input_diff": v, "identical": f"{r['equal']}/{r['batches']}"},
                        f"<= {self.a.labor_tol}")
        else:
            equal("labor_star_device_vs_host", "labor_star", "labor-device vs labor (LABOR-*)")
        equal("labor_device_deterministic", "labor_repeat", "labor-device drawn twice")

    def step_train(self) -> None:
        names = STEPS[3][1]
        child_args = ["--sync"] if self.cuda else []
        m, pr, why = self.train("main", self.train_args() + self.cache_args(), probe=True,
                                child_args=child_args)
        self.main_run = m
        if m is None:
            self.fail("train_run", why)
            self.fail_all(names, "the training run failed (train_run)")
            return
        eps = m["epochs"]
        last = eps[-1]
        self.record("train_run", True, {k: last.get(k) for k in TIMING_KEYS if k in last}
                    | {"test_acc": m.get("test_acc"), "sampler_device":
                       last.get("sampler_device")}, "exit 0, status ok")
        later = eps[1:]
        if not later:
            self.fail_all(["cache_hit_rate", "cache_h2d_bytes"], "needs >= 2 epochs")
        else:
            hit = min(float(e.get("hit_rate", 0.0)) for e in later)
            self.record("cache_hit_rate", hit >= 1.0, hit, ">= 1.0 after the first epoch",
                        reason=None if hit >= 1.0 else "the layer cache at this budget "
                        "misses rows of a table that fits")
            h2d = max(int(e.get("h2d_bytes", -1)) for e in later)
            self.record("cache_h2d_bytes", h2d == 0, h2d, "== 0 after the first epoch")
        self.memory_checks(m, pr)
        if not self.cuda:
            self.skip("sync_audit", "torch.cuda.set_sync_debug_mode needs CUDA")
        elif pr is None or "sync" not in pr:
            self.fail("sync_audit", (pr or {}).get("hook_error", "no probe record"))
        else:
            s = pr["sync"]
            steps = s["steps"]
            ok = s["step_syncs"] == 0 and steps >= 30
            self.record("sync_audit", ok, s,
                        "0 syncs in the steps (tally reads apart) over >= 30 steps",
                        reason=None if ok else ("fewer than 30 steps audited" if steps < 30
                                                else "host synchronisations inside the step"))
        values = {k: last.get(k) for k in GPU_TIME_KEYS}
        if not self.cuda:
            self.skip("gpu_times", "CUDA events need CUDA (null on CPU)", values,
                      "numbers on CUDA")
        else:
            missing = [k for k in ("load_gpu_s", "compute_gpu_s") if not is_number(values[k])]
            if last.get("sampler_device") == "cuda" and not is_number(values["sample_gpu_s"]):
                missing.append("sample_gpu_s")
            self.record("gpu_times", not missing, values, "numbers (CUDA events)",
                        reason=f"metrics.json has no number for {', '.join(missing)}"
                        if missing else None)

    def memory_checks(self, m: dict, pr: dict | None) -> None:
        if not self.cuda:
            for n in ("cache_peak_memory", "cache_memory_growth"):
                self.skip(n, "no device memory on CPU")
            return
        if pr is None or not pr.get("epochs"):
            self.fail_all(["cache_peak_memory", "cache_memory_growth"],
                          "no device-memory probe record")
            return
        last = m["epochs"][-1]
        reserve = last.get("activation_reserve_bytes")
        peak = pr.get("peak_allocated")
        parts = {"cache_bytes": pr.get("cache_bytes"), "sampler_bytes": pr.get("sampler_bytes"),
                 "activation_reserve_bytes": reserve}
        value = {"peak_allocated": peak, "peak_reserved": pr.get("peak_reserved"), **parts}
        if all(is_number(v) for v in parts.values()) and is_number(peak):
            limit = int(sum(parts.values()))
            self.record("cache_peak_memory", peak <= limit, value,
                        f"<= cache + device sampler + activation reserve = {limit}",
                        reason=None if peak <= limit else
                        f"peak exceeds the planned budget by {(peak - limit) / MIB:.0f} MiB: the "
                        "activation reserve is an underestimate")
        elif is_number(pr.get("free_at_start")) and is_number(peak):
            limit = int(pr["free_at_start"] - pr["margin"] * pr["total"])
            self.record("cache_peak_memory", pr["peak_reserved"] <= limit, value,
                        f"reserved <= free at start - margin x total = {limit}",
                        reason="cache/sampler bytes or activation_reserve_bytes not found; "
                        "held to the margin instead")
        else:
            self.fail("cache_peak_memory", "no peak figures", value)
        peaks = [e.get("peak_allocated") for e in pr["epochs"]]
        ends = [e.get("end_allocated") for e in pr["epochs"]]
        if len(peaks) < 3 or not all(is_number(p) for p in peaks + ends):
            self.fail("cache_memory_growth", "needs 3 probed epochs", peaks)
            return
        growth = max(max(peaks[2:]) - peaks[1], max(ends[2:]) - ends[1])
        slack = max(8 * MIB, peaks[1] // 100)
        self.record("cache_memory_growth", growth <= slack,
                    {"growth_bytes": growth, "epoch_peaks": peaks, "epoch_end": ends},
                    f"<= {slack} (max(8 MiB, 1% of epoch 1's peak))")

    def step_predict(self) -> None:
        m = self.main_run
        pred = self.work / "predict" / "pred.npy"
        pred.parent.mkdir(parents=True, exist_ok=True)
        pred.unlink(missing_ok=True)
        code, out, _ = self.run("predict", [
            *self.tw, "predict", "--checkpoint", str(self.work / "runs" / "main" /
                                                     "checkpoint.pt"),
            "--out", str(pred), "--device", self.a.device])
        if code != 0:
            self.fail("predict_equal", why_failed(code, out))
            return
        acc, why = self.child("predict accuracy", ["accuracy", self.a.dataset,
                                                   self.a.data_root, str(pred)])
        if acc is None:
            self.fail("predict_equal", why)
            return
        tol = TOL[self.a.device]["predict_acc"]
        diffs = {s: abs(acc[f"{s}_acc"] - m[f"{s}_acc"]) for s in ("val", "test")
                 if is_number(acc.get(f"{s}_acc")) and is_number(m.get(f"{s}_acc"))}
        if not diffs:
            self.fail("predict_equal", "no val/test accuracy to compare", acc)
            return
        worst = max(diffs.values())
        self.record("predict_equal", worst <= tol,
                    {"predict": {s: acc[f"{s}_acc"] for s in diffs},
                     "train": {s: m[f"{s}_acc"] for s in diffs}, "max_diff": worst},
                    f"max |diff| <= {tol}")

    def step_pytest_cuda(self) -> None:
        names = STEPS[5][1]
        xml = self.work / "pytest_cuda.xml"
        xml.unlink(missing_ok=True)
        env = dict(self.env, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
        code, out, _ = self.run("pytest -m cuda", [
            *self.py, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider", "-rs",
            f"--junitxml={xml}", "tests"], env=env)
        n = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        reasons: dict[str, int] = {}
        failures: list[str] = []
        try:
            root = ET.parse(xml).getroot()
            suite = root if root.tag == "testsuite" else root.find("testsuite")
            n = {k: int(suite.get(k, 0)) for k in n}
            for case in suite.iter("testcase"):
                for ch in case:
                    if ch.tag == "skipped":
                        why = (ch.get("message") or "").strip()
                        reasons[why] = reasons.get(why, 0) + 1
                    elif ch.tag in ("failure", "error"):
                        failures.append(f"{case.get('classname')}::{case.get('name')}: "
                                        f"{(ch.get('message') or '')[:160]}")
        except (OSError, ET.ParseError, AttributeError, ValueError) as e:
            self.fail_all(names, f"no junit report ({type(e).__name__}); "
                          f"{why_failed(code, out)}")
            return
        want = self.a.min_cuda_tests
        self.record("pytest_cuda_collected", n["tests"] >= want and code != 5, n["tests"],
                    f">= {want}", reason="pytest exit 5: no tests collected" if code == 5
                    else None)
        bad = n["failures"] + n["errors"]
        self.record("pytest_cuda_failed", bad == 0 and code in (0, 5), bad, 0,
                    failures=failures[:10] or None, exit_code=code,
                    reason=None if bad == 0 and code in (0, 5) else
                    f"pytest exit {code}: " + ("; ".join(failures[:3]) or last_line(out)))
        if self.cuda:
            self.record("pytest_cuda_skipped", n["skipped"] == 0, n["skipped"], 0,
                        skip_reasons=reasons or None,
                        reason=None if not n["skipped"] else "CUDA tests skipped on a GPU")
        else:
            cuda_why = all("cuda" in r.lower() for r in reasons)
            ok = n["skipped"] == n["tests"] and cuda_why
            self.record("pytest_cuda_skipped", ok, n["skipped"],
                        "== collected, each for want of CUDA (on CPU)", skip_reasons=reasons,
                        reason=None if ok else "a CUDA test ran or skipped for another reason")

    def same_accuracy(self, check: str, run: str, args: list[str], what: str,
                      labels: tuple[str, str], tol: float) -> None:
        """Check ``check``: the test accuracy of the run ``run`` (``twopgraph train args``,
        described as ``what`` in a failure) within ``tol`` of the main run's; the value names
        the main run's figure ``labels[0]`` and the other's ``labels[1]``."""
        m, _, why = self.train(run, args)
        if m is None:
            self.fail(check, f"{what} failed: {why}")
            return
        base = self.main_run["test_acc"]
        d = abs(base - m["test_acc"])
        self.record(check, d <= tol, {labels[0]: base, labels[1]: m["test_acc"], "diff": d},
                    f"|diff| <= {tol}")

    def step_cpu_reference(self) -> None:
        self.same_accuracy("cache_accuracy", "cpu_reference",
                           self.train_args("cpu") + ["--cache-policy", "none"],
                           "the CPU run without cache", ("cache_run", "cpu_no_cache"),
                           self.a.acc_tol)

    def step_profile(self) -> None:
        names = STEPS[7][1]
        pdir = self.work / "profile"
        shutil.rmtree(pdir, ignore_errors=True)
        args = self.train_args() + self.cache_args()
        args[args.index("--epochs") + 1] = "1"
        via = "train --profile"
        if self.info.get("train_has_profile"):
            m, _, why = self.train("profile", args + ["--profile", str(pdir)])
        else:
            via = "torch.profiler around epoch 0 in the check (train has no --profile)"
            m, _, why = self.train("profile", args, probe=True,
                                   child_args=["--profile-dir", str(pdir)])
        if m is None:
            self.fail_all(names, f"the profiled run failed: {why}")
            return
        files = sorted([p for p in pdir.rglob("*") if p.name.endswith((".json", ".json.gz"))],
                       key=lambda p: p.stat().st_size, reverse=True) if pdir.exists() else []
        if not files:
            self.fail_all(names, f"no trace written in {pdir} ({via})")
            return
        try:
            opener = gzip.open if files[0].name.endswith(".gz") else open
            with opener(files[0], "rt") as f:
                trace = json.load(f)
        except (OSError, ValueError) as e:
            self.fail_all(names, f"trace {files[0].name} unreadable: {e}")
            return
        t = analyse_trace(trace)
        found = {k: t[k] for k in ("forward", "backward", "optimizer")}
        ok = all(v > 0 for v in found.values())
        self.record("profile_trace", ok, found | {"events": t["events"], "file": files[0].name},
                    "forward, backward and optimizer ops in the trace", via=via,
                    reason=None if ok else "the trace lacks the step's ops")
        if not self.cuda:
            self.skip("profile_no_pageable_h2d", "no host-to-device copies on CPU")
            self.skip("profile_copy_overlap", "no host-to-device copies on CPU")
            return
        self.record("profile_no_pageable_h2d", t["pageable_h2d"] == 0,
                    {"pageable_h2d": t["pageable_h2d"], "pageable_bytes": t["pageable_bytes"],
                     "h2d_copies": t["h2d"], "in_steps": t["windows"]}, 0)
        if t["h2d"] == 0:
            self.record("profile_copy_overlap", True, 0.0, "> 0",
                        reason="no host-to-device copy in the profiled steps")
        else:
            frac = t["overlap_s"] / max(t["h2d_s"], 1e-12)
            self.record("profile_copy_overlap", t["overlap_s"] > 0,
                        {"overlapped_fraction": round(frac, 4), "h2d_copies": t["h2d"],
                         "h2d_s": t["h2d_s"], "streams": t["streams"]},
                        "> 0 of the copy time overlaps a kernel on another stream")

    def step_resume(self) -> None:
        base = self.main_run
        args = self.train_args() + self.cache_args()
        e = self.a.epochs
        first = list(args)
        first[first.index("--epochs") + 1] = str(e - 1)
        m1, _, why = self.train("resume", first)
        if m1 is None:
            self.fail("resume_equal", f"the first {e - 1} epoch(s) failed: {why}")
            return
        m2, _, why = self.train("resume", args + ["--resume"])
        if m2 is None:
            self.fail("resume_equal", f"the --resume run failed: {why}")
            return
        w, why = self.child("resume weights", [
            "weights", str(self.work / "runs" / "main" / "checkpoint.pt"),
            str(self.work / "runs" / "resume" / "checkpoint.pt")])
        if w is None:
            self.fail("resume_equal", f"checkpoints not compared: {why}")
            return
        la = [x["loss"] for x in base["epochs"]]
        lb = [x["loss"] for x in m2["epochs"]]
        loss_diff = max((abs(x - y) for x, y in zip(la, lb)), default=float("inf"))
        if len(la) != len(lb):
            loss_diff = float("inf")
        tol = TOL[self.a.device]
        acc_diff = abs(base["test_acc"] - m2["test_acc"])
        ok = (loss_diff <= tol["resume_loss"] and w["max_abs_diff"] <= tol["resume_weights"]
              and not w["mismatched"] and acc_diff <= tol["resume_loss"])
        self.record("resume_equal", ok,
                    {"loss_max_diff": loss_diff if loss_diff != float("inf") else None,
                     "weights_max_diff": w["max_abs_diff"], "test_acc_diff": acc_diff,
                     "losses": la, "resumed_losses": lb},
                    f"losses, test accuracy and weights within {tol['resume_loss']} / "
                    f"{tol['resume_weights']}",
                    reason=None if ok else f"{e} epochs differ from {e - 1} + --resume")

    def step_bf16(self) -> None:
        self.same_accuracy("bf16_accuracy", "bf16",
                           self.train_args() + self.cache_args() + ["--amp", "bf16"],
                           "the --amp bf16 run", ("float32", "bf16"), self.a.bf16_tol)

    def step_ddp(self) -> None:
        names = STEPS[10][1]
        gpus = int(self.info.get("gpu_count") or 0)
        if self.cuda and gpus < 2:
            for n in names:
                self.skip(n, f"2-rank NCCL needs two GPUs; torch sees {gpus}")
            return
        if not self.cuda:
            self.skip("ddp_one_process_per_gpu", "no GPU on --device cpu")
        parts = self.work / "parts-2"
        shutil.rmtree(parts, ignore_errors=True)
        code, out, _ = self.run("ddp partition", [
            *self.tw, "partition", "--dataset", self.a.dataset, "--data-root",
            self.a.data_root, "--num-parts", "2", "--out", str(parts)])
        if code != 0:
            self.fail_all(names, f"partition: {why_failed(code, out)}")
            return
        probes = self.work / "ddp-probes"
        shutil.rmtree(probes, ignore_errors=True)
        probes.mkdir(parents=True)
        env = dict(self.env, TWOPGRAPH_GPU_CHECK_PROBE=str(probes))
        args = self.train_args()
        i = args.index("--dataset")
        del args[i:i + 2]
        run_dir = self.work / "runs" / "ddp"
        shutil.rmtree(run_dir, ignore_errors=True)
        watcher = GpuWatch() if self.cuda else None
        if watcher:
            watcher.start()
        try:
            code, out, _ = self.run("ddp train", [
                *self.tw, *args, "--partitions", str(parts), "--nproc", "2",
                "--out", str(run_dir)], env=env)
        finally:
            if watcher:
                watcher.stop()
        if code != 0:
            self.fail_all(names, f"train --nproc 2: {why_failed(code, out)}")
            return
        try:
            m = json.loads((run_dir / "metrics.json").read_text())
            dist = m["distributed"]
        except (OSError, ValueError, KeyError) as e:
            self.fail_all(names, f"metrics.json unreadable: {type(e).__name__}: {e}")
            return
        want = "nccl" if self.cuda else "gloo"
        ok = dist.get("world_size") == 2 and dist.get("backend") == want and \
            m.get("status") == "ok" and is_number(m.get("test_acc"))
        self.record("ddp_2rank", ok, {"backend": dist.get("backend"),
                                      "world_size": dist.get("world_size"),
                                      "test_acc": m.get("test_acc"),
                                      "epoch_s": m["epochs"][-1].get("epoch_s")},
                    f"2 ranks, {want}, status ok")
        ranks = []
        for p in probes.glob("*.json"):
            try:
                r = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            if r.get("rank") is not None:
                ranks.append(r)
        cores = int(self.info.get("affinity_cpus") or self.info.get("cpu_count") or 1)
        if len(ranks) != 2 or not all(r.get("steps") for r in ranks):
            self.fail("ddp_threads", f"{len(ranks)} rank probes with optimizer steps written, "
                      "expected 2", ranks)
        else:
            tt = sum(r.get("torch_threads") or 0 for r in ranks)
            nt = sum(r.get("numba_threads") or 0 for r in ranks)
            ok = tt <= cores and nt <= cores
            self.record("ddp_threads", ok, {"torch_threads": tt, "numba_threads": nt,
                                            "per_rank": [{k: r.get(k) for k in (
                                                "rank", "torch_threads", "numba_threads",
                                                "python_threads", "steps")}
                                                for r in ranks]},
                        f"each sum <= {cores} cores",
                        reason=None if ok else "the ranks oversubscribe the host")
        if self.cuda:
            per_gpu = watcher.max_pids if watcher else {}
            devices = sorted(r.get("cuda_device") for r in ranks
                             if r.get("cuda_device") is not None)
            if watcher and watcher.error:
                self.fail("ddp_one_process_per_gpu", f"nvidia-smi: {watcher.error}",
                          {"rank_devices": devices})
            else:
                worst = max(per_gpu.values(), default=0)
                ok = worst <= 1 and len(set(devices)) == len(devices) == 2
                self.record("ddp_one_process_per_gpu", ok,
                            {"max_processes_per_gpu": per_gpu, "rank_devices": devices},
                            "<= 1 process per GPU, ranks on distinct GPUs")

    # -- driver -------------------------------------------------------------------------------
    def go(self) -> None:
        limits = self.a.limits
        abort = None
        for step, names, cuda_s, cpu_s in STEPS:
            if self.a.only and step not in self.a.steps:
                continue
            self.step_name, self.step_t0 = step, time.monotonic()
            limit = min(limits.get(step, cuda_s if self.cuda else cpu_s), self.left())
            self.step_deadline = self.step_t0 + limit
            self.save()
            if abort is not None:
                self.fail_all([n for n in names if self.wanted(n)], abort)
                continue
            if limit < 3:
                self.fail_all([n for n in names if self.wanted(n)],
                              "not started: the time budget (--budget-s) is spent")
                continue
            if step in NEEDS_TRAIN and self.main_run is None:
                self.fail_all([n for n in names if self.wanted(n)],
                              "needs the training run of step train, which failed")
                continue
            try:
                more = getattr(self, f"step_{step}")()
            except Exception as e:  # noqa: BLE001 -- a bug here must not cost the other steps
                with open(self.log_path, "a") as f:
                    f.write(traceback.format_exc())
                more = None
                self.fail_all([n for n in names if self.wanted(n)],
                              f"gpu_check.py failed: {type(e).__name__}: {e}")
            self.fail_all([n for n in names if self.wanted(n)],
                          "not recorded (the step ended before it)")
            if step == "environment" and more is False:
                abort = "not run: the environment check failed"


class GpuWatch:
    """Polls ``nvidia-smi`` every 0.5 s while a DDP run runs: the most processes seen at once
    on each GPU (a rank with a stray context on GPU 0 shows as a second process there)."""

    def __init__(self) -> None:
        self.max_pids: dict[str, int] = {}
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid",
                                      "--format=csv,noheader"], capture_output=True, text=True,
                                     timeout=10, check=True).stdout
            except (OSError, subprocess.SubprocessError) as e:
                self.error = f"{type(e).__name__}: {e}"
                return
            seen: dict[str, set] = {}
            for ln in out.splitlines():
                if "," in ln:
                    gpu, pid = (x.strip() for x in ln.split(",", 1))
                    seen.setdefault(gpu, set()).add(pid)
            for gpu, pids in seen.items():
                self.max_pids[gpu] = max(self.max_pids.get(gpu, 0), len(pids))
            self._stop.wait(0.5)


def analyse_trace(trace: dict) -> dict:
    """Counts of a torch.profiler chrome trace: forward/backward/optimizer ops, pageable and
    all host-to-device copies (inside ``ProfilerStep#`` windows when the trace has them) and
    the copy time that overlaps a kernel on another stream."""
    evs = [e for e in (trace.get("traceEvents", []) if isinstance(trace, dict) else trace)
           if isinstance(e, dict) and e.get("ph") == "X"]
    names = [str(e.get("name", "")) for e in evs]
    fwd = sum(1 for n in names if n in ("aten::mm", "aten::addmm", "aten::linear",
                                        "aten::matmul", "aten::bmm")
              or "sparse" in n and n.startswith("aten::"))
    bwd = sum(1 for n in names if n.startswith("autograd::engine") or n.endswith("Backward0"))
    opt = sum(1 for n in names if n.startswith("Optimizer.step") or "adam" in n.lower())
    windows = [(e["ts"], e["ts"] + e.get("dur", 0)) for e in evs
               if str(e.get("name", "")).startswith("ProfilerStep#")]
    # the steps' CPU time span, extended by one step for the GPU work queued in the last one
    lo = min((a for a, _ in windows), default=None)
    hi = max((b for _, b in windows), default=None)
    if windows:
        hi += max(b - a for a, b in windows)

    def in_steps(e) -> bool:
        return not windows or lo <= e["ts"] <= hi
    copies = [e for e in evs if str(e.get("name", "")).startswith("Memcpy HtoD")
              and in_steps(e)]
    pageable = [e for e in copies if "Pageable" in str(e.get("name"))]
    kernels = [e for e in evs if e.get("cat") == "kernel"]
    overlap = 0.0
    for c in copies:
        c0, c1 = c["ts"], c["ts"] + c.get("dur", 0)
        cs = (c.get("args") or {}).get("stream")
        spans = sorted((max(c0, k["ts"]), min(c1, k["ts"] + k.get("dur", 0))) for k in kernels
                       if (k.get("args") or {}).get("stream") != cs
                       and k["ts"] < c1 and k["ts"] + k.get("dur", 0) > c0)
        end = c0
        for a, b in spans:  # union of the overlapping kernel spans
            a = max(a, end)
            if b > a:
                overlap += b - a
                end = b
    streams = sorted({str((e.get("args") or {}).get("stream")) for e in copies + kernels})
    return {"events": len(evs), "forward": fwd, "backward": bwd, "optimizer": opt,
            "windows": len(windows), "h2d": len(copies), "pageable_h2d": len(pageable),
            "pageable_bytes": sum(int((e.get("args") or {}).get("bytes", 0)) for e in pageable),
            "h2d_s": sum(e.get("dur", 0) for e in copies) / 1e6, "overlap_s": overlap / 1e6,
            "streams": streams}


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _short(v) -> str:
    s = json.dumps(v, default=str)
    return s if len(s) <= 120 else s[:117] + "..."


def last_line(out: str) -> str:
    """The line that says why a command failed: twopgraph's one error line, else the last
    line of a traceback, else the last line."""
    lines = [ln.strip() for ln in out.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith("twopgraph: error:"):
            return ln
    return lines[-1][:300] if lines else "no output"


def why_failed(code: int | None, out: str) -> str:
    if code is None:
        lines = [ln for ln in out.strip().splitlines() if ln.strip()]
        why = lines[-1].strip("[]") if lines else "stopped"
        return f"{why}; last output: {last_line(chr(10).join(lines[:-1]))}" \
            if len(lines) > 1 else why
    return f"exit {code}: {last_line(out)}"


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--out", default="runs/gpu_check",
                    help="folder of gpu_check.json and gpu_check.log (only these two files)")
    ap.add_argument("--work", default=None, help="training runs, partitions, reports; None = "
                    "$TMPDIR/twopgraph-gpu-check (TMPDIR: /tmp if unset)")
    ap.add_argument("--data-root", default=None,
                    help="datasets; None = $TWOPGRAPH_DATA, else WORK/data")
    ap.add_argument("--dataset", default=None,
                    help="every run; None = synthetic-small on cuda, synthetic-tiny on cpu")
    ap.add_argument("--epochs", type=int, default=None,
                    help="epochs of the training runs (>= 2; 3 for the memory-growth check); "
                    "None = 3 on cuda, 2 on cpu")
    ap.add_argument("--batch-size", type=int, default=None,
                    help="None = 1024 on cuda, 128 on cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train-args", default="",
                    help="more flags for every training run (one string)")
    ap.add_argument("--only", default="",
                    help="comma-separated checks (or steps) to run and record; the steps they "
                    "need run too. Checks: " + ",".join(CHECKS))
    ap.add_argument("--min-cuda-tests", type=int, default=40,
                    help="pytest -m cuda must collect at least this many")
    ap.add_argument("--sampler-batches", type=int, default=4)
    ap.add_argument("--acc-tol", type=float, default=0.01,
                    help="cache run vs CPU run without cache: largest test-accuracy difference")
    ap.add_argument("--bf16-tol", type=float, default=0.02,
                    help="--amp bf16 vs float32: largest test-accuracy difference")
    ap.add_argument("--labor-tol", type=float, default=0.01,
                    help="CUDA: largest relative difference of input vertices per batch, "
                    "labor-device vs labor (LABOR-*)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="whole time budget in s; None = 540 on cuda, 300 on cpu")
    ap.add_argument("--limits", default="",
                    help="per-step time limits, STEP=SECONDS,...: "
                    + ",".join(f"{s}={c}/{p}" for s, _, c, p in STEPS) + " (cuda/cpu)")
    a = ap.parse_args(argv)
    d = DEFAULTS[a.device]
    a.dataset = a.dataset or d["dataset"]
    a.epochs = a.epochs or d["epochs"]
    a.batch_size = a.batch_size or d["batch_size"]
    a.budget_s = a.budget_s if a.budget_s is not None else d["budget_s"]
    if a.epochs < 2:
        ap.error("--epochs: at least 2 (the cache checks read the epochs after the first)")
    a.work = a.work or os.path.join(os.environ.get("TMPDIR", "/tmp"), "twopgraph-gpu-check")
    a.data_root = str(Path(a.data_root or os.environ.get("TWOPGRAPH_DATA")
                           or Path(a.work) / "data").resolve())
    a.out = str(Path(a.out).resolve())
    a.work = str(Path(a.work).resolve())
    steps = {s for s, _, _, _ in STEPS}
    a.limits = dict(_limit(ap, x, steps) for x in a.limits.split(",") if x)
    a.only = set(filter(None, a.only.split(",")))
    bad = a.only - set(CHECKS) - steps
    if bad:
        ap.error(f"--only: unknown checks {', '.join(sorted(bad))}")
    a.steps = {"environment"}
    for s, names, _, _ in STEPS:
        if s in a.only or a.only & set(names):
            a.steps.add(s)
            a.only |= set(names) if s in a.only else set()
    if a.steps - {"environment"}:
        a.steps.add("data")
    if a.steps & NEEDS_TRAIN:
        a.steps.add("train")
    return a


def _limit(ap, item: str, steps: set) -> tuple[str, float]:
    name, _, secs = item.partition("=")
    if name not in steps:
        ap.error(f"--limits: unknown step {name!r}")
    try:
        return name, float(secs)
    except ValueError:
        ap.error(f"--limits: {item!r} is not STEP=SECONDS")


def main(argv=None) -> int:
    a = parse_args(argv)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    Path(a.work).mkdir(parents=True, exist_ok=True)
    c = Check(a)
    c.log_path.write_text("")
    c.note(f"device {a.device}, dataset {a.dataset}, budget {a.budget_s:.0f} s, "
           f"work {a.work}, data {a.data_root}"
           + (f", only {','.join(sorted(a.only))}" if a.only else ""))
    c.go()
    c.summary["complete"] = True
    c.summary["ok"] = all(x["ok"] for x in c.summary["checks"])
    c.save()
    n = len(c.summary["checks"])
    c.note(f"{n - len(c.summary['failed'])}/{n} checks ok"
           + (f"; failed: {', '.join(c.summary['failed'])}" if c.summary["failed"] else ""))
    print(c.json_path.read_text(), end="")
    return 0 if c.summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
