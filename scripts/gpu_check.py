"""One prepared check of the GPU path: unit tests, training runs, cache gathers, 1-rank DDP.

Writes one JSON summary, ``OUT/gpu_check.json`` (rewritten after every step, so a run killed
half-way still leaves what it measured; ``complete`` says whether it ran to the end), prints it
to stdout at the end and writes every step's output to ``OUT/gpu_check.log``. Nothing else goes
into ``OUT`` (on the device machine of this workplace only 8 files come back from ``$OUT``):
the training runs, partitions and caches live in ``--work`` and the datasets in ``--data-root``.

    bash scripts/gpu_check.sh --device cuda --out runs/gpu_check      # on a GPU machine
    bash scripts/gpu_check.sh --device cpu  --out /tmp/gpu_check      # what CI runs (small data)

Steps (each a subprocess with its own time limit, all within ``--budget-s``; a failing step is
recorded in ``errors`` with a one-line reason and the script goes on; a step that cannot run on
this device, e.g. the device sampler without CUDA, goes to ``skipped`` with its reason):

1. ``environment``: torch, CUDA, GPU, numba threading layer, pymetis/ogb, and whether
   ``twopgraph train`` has ``--sampler-device`` and ``--amp``.
2. ``data``: generate/convert the datasets (``twopgraph info``), so no run below pays for it.
3. ``runs``: ``twopgraph train`` for 2 epochs with ``--cache-policy layer`` at
   ``--cache-ratio 0.1`` and at the default budget, each with the host sampler
   (``--sampler-device cpu``) and the device sampler (``--sampler-device cuda``; on CPU these
   two runs are skipped: the flag's ``cpu`` is the numba sampler), evaluated once at the end
   (``--eval-every 0``). From ``metrics.json``: the last epoch's ``epoch_s``, ``sample_s``,
   ``load_s``, ``compute_s``, ``hit_rate``, ``h2d_bytes`` (the cache is warm by then) and
   ``test_acc``; ``peak_device_memory_bytes`` (``torch.cuda.max_memory_allocated``) is read
   inside the training process itself (the top-level key: the largest over the runs).
4. ``cuda_unit_tests``: ``pytest tests -k "cuda or device_sampler or gpu_path"`` (every CUDA
   parametrisation plus the device-sampler and GPU-path files; on CPU their CPU run), counted
   from a junit report, with the reasons of the skips.
5. ``bench_cache``: ``twopgraph bench cache --copy --device D --ratios 0.1,1.0``: gather
   seconds, hit rate and h2d bytes per policy x ratio from ``cache.csv``.
6. ``ddp``: ``twopgraph partition --num-parts 1`` then ``twopgraph train --partitions P
   --nproc 1`` (NCCL on CUDA, gloo on CPU): backend, test accuracy, epoch seconds.
7. ``amp_run``: on CUDA one more run, the device sampler at the default budget with
   ``--amp bf16``, appended to ``runs`` (last: it is the first thing a short budget drops).

Defaults: on CUDA ``synthetic-products`` (DDP on ``synthetic-small``), budget 450 s, which
fits an H200 with the dataset generated on the spot (~1 min) and METIS clustered in the first
run (~40 s); on CPU ``synthetic-tiny`` for everything, about a minute on 2 cores.

Exit status: 0 when ``errors`` is empty, 1 otherwise, 2 for bad arguments of this script.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: set in every child; tests/bench/test_gpu_check.py skips itself under it (no recursion)
CHILD_ENV = "TWOPGRAPH_GPU_CHECK"
RUN_KEYS = ("epoch_s", "sample_s", "load_s", "compute_s", "hit_rate", "h2d_bytes", "test_acc")
DEFAULTS = {  # per device: dataset of the runs and of bench cache, of DDP, whole time budget
    "cuda": {"dataset": "synthetic-products", "ddp_dataset": "synthetic-small", "budget_s": 450},
    "cpu": {"dataset": "synthetic-tiny", "ddp_dataset": "synthetic-tiny", "budget_s": 150},
}
UNIT_K = "cuda or device_sampler or gpu_path"
STEPS = ("runs", "cuda_unit_tests", "bench_cache", "ddp", "amp_run")  # in this order

# Runs ``twopgraph`` in this process and records the device memory peak it reached.
TRAIN_CHILD = r"""
import json, sys
import torch
from twopgraph.cli import main
code = 1
try:
    code = main(sys.argv[2:])
finally:
    peak = reserved = None
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    with open(sys.argv[1], "w") as f:
        json.dump({"code": code, "peak": peak, "reserved": reserved}, f)
sys.exit(code)
"""

ENV_CHILD = r"""
import argparse, json, os, platform
from importlib import metadata
import numba, numpy, torch
import torch.distributed
info = {"python": platform.python_version(), "torch": torch.__version__,
        "numpy": numpy.__version__, "numba": numba.__version__,
        "cuda_available": torch.cuda.is_available(), "torch_cuda": torch.version.cuda,
        "cpu_count": os.cpu_count()}
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    info.update(gpu=p.name, gpu_count=torch.cuda.device_count(),
                gpu_memory_bytes=p.total_memory, capability=f"{p.major}.{p.minor}",
                nccl=torch.distributed.is_nccl_available())
for dist in ("pymetis", "ogb"):
    try:
        info[dist] = metadata.version(dist)
    except metadata.PackageNotFoundError:
        info[dist] = None
try:  # reported, not fatal: every run would show the same one line
    from twopgraph.runtime.jit import configure_threading
    info["numba_threading_layer"] = configure_threading()
except Exception as e:
    info["numba_threading_layer"] = None
    info["numba_threading_error"] = f"{type(e).__name__}: {e}"
from twopgraph.cli import build_parser
sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
info["train_flags"] = {opt: act.help for act in sub.choices["train"]._actions
                       for opt in act.option_strings if opt.startswith("--")}
print(json.dumps(info))
"""


class Check:
    """The summary being built, the budget, and how every step runs."""

    def __init__(self, a: argparse.Namespace):
        self.a = a
        self.t0 = time.monotonic()
        self.out = Path(a.out)
        self.work = Path(a.work)
        self.log_path = self.out / "gpu_check.log"
        self.json_path = self.out / "gpu_check.json"
        self.env = dict(os.environ)
        self.env[CHILD_ENV] = "1"
        self.env["PYTHONUNBUFFERED"] = "1"
        self.env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT)] + [p for p in self.env.get("PYTHONPATH", "").split(os.pathsep) if p])
        self.tw = [sys.executable, "-m", "twopgraph"]
        self.train_flags: set[str] = set()
        self.summary: dict = {
            "complete": False, "device": a.device, "device_name": None, "environment": {},
            "dataset": a.dataset, "epochs": a.epochs,
            "cuda_unit_tests": None, "runs": [], "bench_cache": None, "ddp": None,
            "peak_device_memory_bytes": None, "total_s": None, "errors": [], "skipped": [],
            "steps": [],
        }

    # -- bookkeeping ------------------------------------------------------------------------
    def left(self) -> float:
        return self.a.budget_s - (time.monotonic() - self.t0)

    def error(self, step: str, reason: str) -> None:
        self.summary["errors"].append({"step": step, "reason": reason})
        self.note(f"ERROR {step}: {reason}")

    def skip(self, step: str, reason: str) -> None:
        self.summary["skipped"].append({"step": step, "reason": reason})
        self.note(f"skipped {step}: {reason}")

    def note(self, line: str) -> None:
        print(f"[gpu_check {time.monotonic() - self.t0:6.1f}s] {line}", file=sys.stderr,
              flush=True)
        with open(self.log_path, "a") as f:
            f.write(f"## {line}\n")

    def save(self) -> None:
        self.summary["total_s"] = round(time.monotonic() - self.t0, 2)
        tmp = self.json_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.summary, indent=1, allow_nan=False) + "\n")
        os.replace(tmp, self.json_path)

    # -- running a step ---------------------------------------------------------------------
    def run(self, step: str, cmd: list[str], limit: float) -> tuple[int | None, str, float]:
        """Run ``cmd`` in its own process group for at most ``min(limit, budget left)`` s.

        Returns (exit code or None when it was stopped at the limit, its output, seconds)."""
        limit = min(limit, self.left())
        if limit < 5:
            return None, "not started: the time budget (--budget-s) is spent", 0.0
        shown = ["<code>" if len(x) > 200 else x for x in cmd]  # python -c CODE
        self.note(f"{step}: {' '.join(shown)}  (limit {limit:.0f} s)")
        self.save()  # what is known so far survives a step that hangs the whole script
        t = time.monotonic()
        with open(self.log_path, "ab") as log:  # streamed: a killed run still leaves its log
            start = log.tell()
            proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                code = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # the step's own group (torchrun's ranks)
                except ProcessLookupError:
                    pass
                proc.wait()
                code = None
        with open(self.log_path, "rb") as log:
            log.seek(start)
            out = log.read().decode(errors="replace")
        if code is None:
            out += f"\n[stopped after {limit:.0f} s]\n"
            with open(self.log_path, "a") as log:
                log.write(f"\n[stopped after {limit:.0f} s]\n")
        secs = time.monotonic() - t
        self.summary["steps"].append({"step": step, "seconds": round(secs, 2), "code": code})
        return code, out, secs

    def failed(self, step: str, code: int | None, out: str) -> bool:
        """Record a failed step (non-zero exit or stopped); True when it failed."""
        if code == 0:
            return False
        if code is None:  # stopped at its limit, or never started
            lines = out.strip().splitlines()
            why = lines[-1].strip("[]") if lines else "stopped"
            if len(lines) > 1:
                why += f"; last output: {last_line(chr(10).join(lines[:-1]))}"
            self.error(step, why)
        else:
            self.error(step, f"exit {code}: {last_line(out)}")
        return True

    # -- the steps --------------------------------------------------------------------------
    def environment(self) -> bool:
        code, out, _ = self.run("environment", [sys.executable, "-c", ENV_CHILD], 120)
        if self.failed("environment", code, out):
            return False
        try:
            info = json.loads(next(ln for ln in reversed(out.splitlines()) if ln[:1] == "{"))
        except (StopIteration, ValueError):
            self.error("environment", f"no environment record: {last_line(out)}")
            return False
        flags = info.pop("train_flags")
        self.train_flags = set(flags)
        info["twopgraph_train_flags"] = {f: f in flags for f in ("--sampler-device", "--amp")}
        self.summary["environment"] = info
        if info.get("numba_threading_error"):
            self.error("environment", info["numba_threading_error"])
        if self.a.device == "cuda":
            if not info["cuda_available"]:
                self.error("environment", "--device cuda, but torch sees no CUDA device "
                           f"(torch {info['torch']}, built for CUDA {info['torch_cuda']})")
                return False
            self.summary["device_name"] = info.get("gpu")
        else:
            self.summary["device_name"] = "cpu"
        return True

    def data(self) -> None:
        root = ["--data-root", self.a.data_root]
        for ds in dict.fromkeys([self.a.dataset, self.a.ddp_dataset]):
            code, out, _ = self.run(f"data {ds}", [*self.tw, "info", "--dataset", ds, *root,
                                                   "--json"], self.a.data_timeout)
            self.failed(f"data {ds}", code, out)

    def sampler_args(self, sampler: str) -> tuple[list[str] | None, str | None]:
        """Flags for the host/device sampler, or (None, why this run is skipped)."""
        has_flag = "--sampler-device" in self.train_flags
        if sampler == "host":
            return (["--sampler-device", "cpu"] if has_flag else []), None
        if self.a.device == "cuda":
            return (["--sampler-device", "cuda"] if has_flag else None), None
        return None, ("the device sampler runs with --device cuda (on CPU torch it is "
                      "tested by tests/sampler/test_device_sampler.py)")

    def runs(self) -> None:
        for cache in self.a.caches.split(","):
            for sampler in self.a.samplers.split(","):
                self.train_run(cache, sampler, None)

    def amp_run(self) -> None:
        """One more run with bf16 autocast (device sampler, default budget): on CUDA only,
        where its speed is a figure worth having; last, since the budget may be spent."""
        if self.a.device != "cuda":
            self.skip("run layer-default-device-amp", "the bf16 run is made with --device "
                      "cuda only (AMP on CPU is tested by tests/pipeline/test_gpu_path.py)")
            return
        self.train_run("default", "device", "bf16")

    def train_run(self, cache: str, sampler: str, amp: str | None) -> None:
        name = f"layer-{cache}-{sampler}" + (f"-{amp}" if amp else "")
        step = f"run {name}"
        rec = {"name": name, "cache_ratio": None if cache == "default" else float(cache),
               "sampler": sampler, "amp": amp, "status": "error", **dict.fromkeys(RUN_KEYS),
               "first_epoch_s": None, "cache_budget_rows": None, "input_nodes_per_batch": None,
               "peak_device_memory_bytes": None, "peak_device_reserved_bytes": None,
               "wall_s": None}
        self.summary["runs"].append(rec)
        sargs, why = self.sampler_args(sampler)
        if why:
            rec["status"], rec["reason"] = "skipped", why
            self.skip(step, why)
            return
        if sargs is None:
            rec["reason"] = "twopgraph train has no --sampler-device flag"
            self.error(step, rec["reason"])
            return
        if amp and "--amp" not in self.train_flags:
            rec["reason"] = "twopgraph train has no --amp flag"
            self.error(step, rec["reason"])
            return
        run_dir = self.work / "runs" / name
        shutil.rmtree(run_dir, ignore_errors=True)
        peak_file = self.work / f"{name}.peak.json"
        peak_file.unlink(missing_ok=True)
        cmd = [sys.executable, "-c", TRAIN_CHILD, str(peak_file), "train",
               "--dataset", self.a.dataset, "--data-root", self.a.data_root,
               "--device", self.a.device, "--epochs", str(self.a.epochs),
               "--eval-every", "0", "--no-progress", "--seed", str(self.a.seed),
               "--cache-policy", "layer", *sargs, *(["--amp", amp] if amp else []),
               *([] if cache == "default" else ["--cache-ratio", cache]),
               *self.a.train_args.split(), "--out", str(run_dir)]
        code, out, secs = self.run(step, cmd, self.a.run_timeout)
        rec["wall_s"] = round(secs, 2)
        if self.failed(step, code, out):
            rec["reason"] = self.summary["errors"][-1]["reason"]
            return
        try:
            m = json.loads((run_dir / "metrics.json").read_text())
            last, first = m["epochs"][-1], m["epochs"][0]
            rec.update({k: last[k] for k in RUN_KEYS if k != "test_acc"})
            rec.update(test_acc=m["test_acc"], val_acc=m.get("val_acc"),
                       first_epoch_s=first["epoch_s"],
                       cache_budget_rows=last.get("cache_budget_rows"),
                       input_nodes_per_batch=last.get("input_nodes_per_batch"),
                       metrics_device=m.get("device"),
                       sampler_device=last.get("sampler_device"))
        except (OSError, ValueError, KeyError, IndexError) as e:
            rec["reason"] = f"metrics.json unreadable: {type(e).__name__}: {e}"
            self.error(step, rec["reason"])
            return
        try:
            peak = json.loads(peak_file.read_text())
            rec["peak_device_memory_bytes"] = peak["peak"]
            rec["peak_device_reserved_bytes"] = peak["reserved"]
        except (OSError, ValueError, KeyError) as e:
            self.error(step, f"peak memory unreadable: {type(e).__name__}: {e}")
        if self.a.device == "cuda":
            peaks = [r["peak_device_memory_bytes"] for r in self.summary["runs"]
                     if is_number(r["peak_device_memory_bytes"])]
            self.summary["peak_device_memory_bytes"] = max(peaks, default=None)
        bad = [k for k in RUN_KEYS if not is_number(rec[k])]
        if bad:
            rec["reason"] = f"metrics.json has no number for {', '.join(bad)}"
            self.error(step, rec["reason"])
            return
        want = "cuda" if sampler == "device" else "cpu"
        if rec["sampler_device"] not in (None, want):
            rec["reason"] = f"sampled on {rec['sampler_device']}, not {want}"
            self.error(step, rec["reason"])
            return
        rec["status"] = "ok"

    def unit_tests(self) -> None:
        xml = self.work / "unit_tests.xml"
        xml.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
               f"--junitxml={xml}", "tests", "-k", self.a.unit_k]
        code, out, secs = self.run("cuda_unit_tests", cmd, self.a.unit_timeout)
        res = {"selection": f"tests -k '{self.a.unit_k}'", "passed": None, "failed": None,
               "errors": None, "skipped": None, "seconds": round(secs, 2), "exit_code": code,
               "skip_reasons": {}, "failures": []}
        self.summary["cuda_unit_tests"] = res
        try:
            suite = ET.parse(xml).getroot()
            suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
            n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
            res.update(passed=n["tests"] - n["failures"] - n["errors"] - n["skipped"],
                       failed=n["failures"], errors=n["errors"], skipped=n["skipped"])
            for case in suite.iter("testcase"):
                name = f"{case.get('classname')}::{case.get('name')}"
                for child in case:
                    if child.tag == "skipped":
                        why = (child.get("message") or "").strip()
                        res["skip_reasons"][why] = res["skip_reasons"].get(why, 0) + 1
                    elif child.tag in ("failure", "error"):
                        res["failures"].append(f"{name}: {(child.get('message') or '')[:200]}")
        except (OSError, ET.ParseError, AttributeError, ValueError) as e:
            self.error("cuda_unit_tests", f"no test report ({type(e).__name__}); "
                       f"exit {code}: {last_line(out)}")
            return
        if code not in (0, 5) or res["failed"] or res["errors"]:
            self.error("cuda_unit_tests", f"{res['failed']} failed, {res['errors']} errors: "
                       + "; ".join(res["failures"][:3]))

    def bench_cache(self) -> None:
        out_dir = self.work / "bench_cache"
        shutil.rmtree(out_dir, ignore_errors=True)
        cmd = [*self.tw, "bench", "cache", "--dataset", self.a.dataset, "--data-root",
               self.a.data_root, "--copy", "--device", self.a.device, "--ratios", "0.1,1.0",
               "--policies", self.a.bench_policies, "--schedules", self.a.bench_schedules,
               "--seed", str(self.a.seed), "--out", str(out_dir)]
        code, out, secs = self.run("bench_cache", cmd, self.a.bench_timeout)
        self.summary["bench_cache"] = {"dataset": self.a.dataset, "seconds": round(secs, 2),
                                       "rows": []}
        if self.failed("bench_cache", code, out):
            return
        try:
            with open(out_dir / "cache.csv", newline="") as f:
                for r in csv.DictReader(f):
                    if r["policy"] == "optimal":  # no gathers: the offline optimum
                        continue
                    self.summary["bench_cache"]["rows"].append({
                        "policy": r["policy"], "schedule": r["schedule"],
                        "ratio": float(r["ratio"]), "gather_s": float(r["gather_s"]),
                        "hit_rate": float(r["hit_rate"]), "h2d_bytes": int(r["h2d_bytes"]),
                        "num_batches": int(r["num_batches"])})
        except (OSError, KeyError, ValueError) as e:
            self.error("bench_cache", f"cache.csv unreadable: {type(e).__name__}: {e}")
            return
        if not self.summary["bench_cache"]["rows"]:
            self.error("bench_cache", "cache.csv has no gather timings")

    def ddp(self) -> None:
        parts = self.work / "parts-1"
        run_dir = self.work / "runs" / "ddp-1"
        shutil.rmtree(run_dir, ignore_errors=True)
        res = {"dataset": self.a.ddp_dataset, "world_size": None, "backend": None,
               "test_acc": None, "epoch_s": None, "partition_s": None, "wall_s": None}
        self.summary["ddp"] = res
        code, out, secs = self.run("ddp partition", [
            *self.tw, "partition", "--dataset", self.a.ddp_dataset, "--data-root",
            self.a.data_root, "--num-parts", "1", "--out", str(parts)], self.a.ddp_timeout)
        res["partition_s"] = round(secs, 2)
        if self.failed("ddp partition", code, out):
            return
        code, out, secs = self.run("ddp train", [
            *self.tw, "train", "--partitions", str(parts), "--nproc", "1", "--data-root",
            self.a.data_root, "--device", self.a.device, "--epochs", str(self.a.epochs),
            "--eval-every", "0", "--no-progress", "--seed", str(self.a.seed),
            *self.a.train_args.split(), "--out", str(run_dir)], self.a.ddp_timeout)
        res["wall_s"] = round(secs, 2)
        if self.failed("ddp train", code, out):
            return
        try:
            m = json.loads((run_dir / "metrics.json").read_text())
            res.update(test_acc=m["test_acc"], epoch_s=m["epochs"][-1]["epoch_s"],
                       world_size=m["distributed"]["world_size"],
                       backend=m["distributed"]["backend"])
        except (OSError, ValueError, KeyError, IndexError) as e:
            self.error("ddp train", f"metrics.json unreadable: {type(e).__name__}: {e}")
            return
        want = "nccl" if self.a.device == "cuda" else "gloo"
        if res["backend"] != want:
            self.error("ddp train", f"backend {res['backend']}, expected {want}")


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def last_line(out: str) -> str:
    """The line that says why a command failed: twopgraph's one error line, else the last
    line of a traceback, else the last line."""
    lines = [ln.strip() for ln in out.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith("twopgraph: error:"):
            return ln
    return lines[-1][:300] if lines else "no output"


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--out", default="runs/gpu_check",
                    help="folder of gpu_check.json and gpu_check.log (only these two files)")
    ap.add_argument("--work", default=None,
                    help="training runs, partitions, test reports; None = $TMPDIR/twopgraph-gpu-check "
                         "(TMPDIR: /tmp if unset)")
    ap.add_argument("--data-root", default=None,
                    help="datasets; None = $TWOPGRAPH_DATA, else WORK/data")
    ap.add_argument("--dataset", default=None,
                    help="runs and bench cache; None = synthetic-products on cuda, "
                         "synthetic-tiny on cpu")
    ap.add_argument("--ddp-dataset", default=None,
                    help="DDP run; None = synthetic-small on cuda, synthetic-tiny on cpu")
    ap.add_argument("--epochs", type=int, default=2, help="epochs of every training run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--caches", default="0.1,default",
                    help="layer-cache budgets of the runs: ratios and/or 'default'")
    ap.add_argument("--samplers", default="host,device", help="host and/or device")
    ap.add_argument("--train-args", default="",
                    help="more flags for every training run (one string)")
    ap.add_argument("--unit-k", default=UNIT_K, help="pytest -k expression of the unit tests")
    ap.add_argument("--bench-policies", default="none,degree,presample,layer")
    ap.add_argument("--bench-schedules", default="locality")
    ap.add_argument("--skip", default="", help="comma-separated steps not to run: "
                    + ",".join(STEPS))
    ap.add_argument("--budget-s", type=float, default=None,
                    help="whole time budget in s; steps past it are recorded as errors; "
                         "None = 450 on cuda, 150 on cpu")
    ap.add_argument("--data-timeout", type=float, default=240)
    ap.add_argument("--run-timeout", type=float, default=150)
    ap.add_argument("--unit-timeout", type=float, default=180)
    ap.add_argument("--bench-timeout", type=float, default=150)
    ap.add_argument("--ddp-timeout", type=float, default=150)
    a = ap.parse_args(argv)
    d = DEFAULTS[a.device]
    a.dataset = a.dataset or d["dataset"]
    a.ddp_dataset = a.ddp_dataset or d["ddp_dataset"]
    a.budget_s = a.budget_s if a.budget_s is not None else d["budget_s"]
    a.work = a.work or os.path.join(os.environ.get("TMPDIR", "/tmp"), "twopgraph-gpu-check")
    a.data_root = str(Path(a.data_root or os.environ.get("TWOPGRAPH_DATA")
                           or Path(a.work) / "data").resolve())
    a.out = str(Path(a.out).resolve())
    a.work = str(Path(a.work).resolve())
    for c in a.caches.split(","):
        if c != "default":
            try:
                float(c)
            except ValueError:
                ap.error(f"--caches: {c!r} is neither a ratio nor 'default'")
    if not set(a.samplers.split(",")) <= {"host", "device"}:
        ap.error("--samplers: host and/or device")
    a.skip = set(filter(None, a.skip.split(",")))
    if not a.skip <= set(STEPS):
        ap.error(f"--skip: unknown steps {', '.join(sorted(a.skip - set(STEPS)))}")
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    Path(a.work).mkdir(parents=True, exist_ok=True)
    c = Check(a)
    c.log_path.write_text("")
    c.note(f"device {a.device}, dataset {a.dataset}, budget {a.budget_s:.0f} s, "
           f"work {a.work}, data {a.data_root}")
    if c.environment():
        c.data()
        for step in STEPS:
            if step in a.skip:
                c.skip(step, "--skip")
                continue
            c.save()
            try:
                getattr(c, step if step != "cuda_unit_tests" else "unit_tests")()
            except Exception as e:  # noqa: BLE001 -- a bug here must not cost the other steps
                with open(c.log_path, "a") as f:  # (a device lease is short): traceback in the log
                    f.write(traceback.format_exc())
                c.error(step, f"gpu_check.py failed: {type(e).__name__}: {e}")
    c.summary["complete"] = True
    c.save()
    print(c.json_path.read_text(), end="")
    return 0 if not c.summary["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
