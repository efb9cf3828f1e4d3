"""The measuring children of ``scripts/gpu_check.py``: each subcommand runs in its own process
(``python -X faulthandler scripts/gpu_checks/child.py CMD ...``), prints or writes one JSON
record and exits 0; the parent turns the records into checks. Nothing here decides pass/fail.

- ``env``: torch, CUDA, GPU, numba threading layer, the flags of ``twopgraph train``;
- ``samplers DATASET ROOT DEVICE``: the host samplers (numba ``neighbor``, ``labor``) against
  their torch twins (``device``, ``labor-device``) on ``DEVICE``, batch by batch on the same
  seeds and keys, plus ``labor-device`` drawn twice (determinism);
- ``train PROBE [--sync] [--profile-dir DIR] -- ARGS``: ``twopgraph ARGS`` in this process,
  with probes around every epoch (device memory, the CUDA sync audit, a torch.profiler trace
  of one epoch when ``train --profile`` is not there) written to ``PROBE``;
- ``weights A B``: the largest difference between the resume weights of two checkpoints;
- ``accuracy DATASET ROOT PRED``: the accuracy of a ``twopgraph predict`` output on the
  validation and test vertices.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path

#: the message torch's sync debug mode warns with (``torch.cuda.set_sync_debug_mode("warn")``)
SYNC_TEXT = "called a synchronizing CUDA operation"


def dump(obj, path: str | None = None) -> None:
    text = json.dumps(obj, default=str)
    if path is None:
        print(text, flush=True)
    else:
        tmp = path + ".tmp"
        Path(tmp).write_text(text + "\n")
        os.replace(tmp, path)


# -- env ---------------------------------------------------------------------------------------
def cmd_env(_a) -> None:
    import platform
    from importlib import metadata

    import numba
    import numpy
    import torch
    import torch.distributed

    info = {"python": platform.python_version(), "torch": torch.__version__,
            "numpy": numpy.__version__, "numba": numba.__version__,
            "cuda_available": torch.cuda.is_available(), "torch_cuda": torch.version.cuda,
            "cpu_count": os.cpu_count(),
            "affinity_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else os.cpu_count()}
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
    try:
        from twopgraph.runtime.jit import configure_threading
        info["numba_threading_layer"] = configure_threading()
    except Exception as e:  # noqa: BLE001 -- reported as a failed check
        info["numba_threading_layer"] = None
        info["numba_threading_error"] = f"{type(e).__name__}: {e}"
    from twopgraph.cli import build_parser
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    info["train_flags"] = sorted(opt for act in sub.choices["train"]._actions
                                 for opt in act.option_strings if opt.startswith("--"))
    dump(info)


# -- samplers ----------------------------------------------------------------------------------
def _same(a, b) -> bool:
    """Two mini-batches with the same input vertices and block CSRs (edge weights within
    1e-6: LABOR's float32 weights)."""
    import torch
    if not torch.equal(a.input_nodes.cpu(), b.input_nodes.cpu()):
        return False
    if len(a.blocks) != len(b.blocks):
        return False
    for x, y in zip(a.blocks, b.blocks):
        if x.size != y.size or not torch.equal(x.indptr.cpu(), y.indptr.cpu()) \
                or not torch.equal(x.indices.cpu(), y.indices.cpu()):
            return False
        if (x.edge_weight is None) != (y.edge_weight is None):
            return False
        if x.edge_weight is not None and not torch.allclose(
                x.edge_weight.cpu().float(), y.edge_weight.cpu().float(), atol=1e-6):
            return False
    return True


def cmd_samplers(a) -> None:
    import numpy as np

    from twopgraph.datasets import load_dataset
    from twopgraph.sampler.device import TorchNeighborSampler
    from twopgraph.sampler.labor import LaborSampler
    from twopgraph.sampler.labor_device import TorchLaborSampler
    from twopgraph.sampler.neighbor import NeighborSampler

    data = load_dataset(a.dataset, a.data_root, progress=False)
    g = data.graph
    fanouts = [int(x) for x in a.fanouts.split(",")]
    rng = np.random.default_rng(a.seed)
    train = rng.permutation(np.asarray(data.train_idx, dtype=np.int64))
    bs = min(a.batch_size, len(train))
    batches = [(np.sort(train[i * bs:(i + 1) * bs]), 1000 + i)
               for i in range(min(a.batches, max(1, len(train) // bs)))]
    out: dict = {"batches": len(batches), "batch_size": bs, "fanouts": fanouts,
                 "device": a.device, "num_nodes": int(g.num_nodes)}

    def compare(name, host, dev, counts=False) -> None:
        t = time.perf_counter()
        rec = {"equal": 0, "batches": len(batches), "max_rel_input_diff": 0.0,
               "host_inputs": [], "device_inputs": []}
        for seeds, key in batches:
            h, d = host.sample(seeds, key=key), dev.sample(seeds, key=key)
            rec["equal"] += int(_same(h, d))
            nh, nd = int(h.input_nodes.shape[0]), int(d.input_nodes.shape[0])
            rec["host_inputs"].append(nh)
            rec["device_inputs"].append(nd)
            rec["max_rel_input_diff"] = max(rec["max_rel_input_diff"], abs(nd - nh) / max(nh, 1))
        rec["seconds"] = round(time.perf_counter() - t, 3)
        out[name] = rec

    def run(name, fn) -> None:
        try:
            fn()
        except Exception as e:  # noqa: BLE001 -- one failed comparison, the others still run
            traceback.print_exc()
            out[name] = {"error": f"{type(e).__name__}: {e}"}

    run("neighbor", lambda: compare(
        "neighbor", NeighborSampler(g, fanouts, seed=a.seed),
        TorchNeighborSampler(g, fanouts, seed=a.seed, device=a.device)))
    run("labor0", lambda: compare(
        "labor0", LaborSampler(g, fanouts, seed=a.seed),
        TorchLaborSampler(g, fanouts, seed=a.seed, device=a.device)))
    run("labor_star", lambda: compare(
        "labor_star", LaborSampler(g, fanouts, seed=a.seed, iterations=a.labor_iterations),
        TorchLaborSampler(g, fanouts, seed=a.seed, device=a.device,
                          iterations=a.labor_iterations)))

    def determinism() -> None:
        s1 = TorchLaborSampler(g, fanouts, seed=a.seed, device=a.device,
                               iterations=a.labor_iterations)
        s2 = TorchLaborSampler(g, fanouts, seed=a.seed, device=a.device,
                               iterations=a.labor_iterations)
        same = sum(int(_same(s1.sample(s, key=k), s2.sample(s, key=k))) for s, k in batches)
        out["labor_repeat"] = {"equal": same, "batches": len(batches)}
    run("labor_repeat", determinism)
    dump(out)


# -- train ---------------------------------------------------------------------------------------
class SyncAudit:
    """Counts torch's sync warnings (``set_sync_debug_mode("warn")``) while an epoch runs.

    A sync in the main thread between two optimizer steps of the epoch is *in the steps*
    (``step_syncs``, with its twopgraph line in ``step_sync_places``) unless the periodic tally
    made it (``StepTally.read``: ``tally_syncs``); syncs before the epoch's first step or after
    its last (the first batch, the epoch's end) are ``edge_syncs``; other threads' (prefetch,
    device sampler) ``other_thread_syncs``. ``steps`` counts optimizer steps (a global
    post-hook)."""

    def __init__(self) -> None:
        self.step = self.tally = self.other = self.edge = self.steps = 0
        self.places: dict[str, int] = {}
        self.pending: list[str] = []  # main-thread syncs since the last optimizer step
        self.started = False  # an optimizer step happened in this epoch
        self.active = False
        self.lock = threading.Lock()
        self.previous = None

    def begin(self) -> None:
        self.pending, self.started, self.active = [], False, True

    def end(self) -> None:
        with self.lock:
            self.edge += len(self.pending)  # after the epoch's last step
            self.pending, self.active = [], False

    def on_step(self, *_args, **_kw) -> None:
        if not self.active or threading.current_thread() is not threading.main_thread():
            return
        with self.lock:
            self.steps += 1
            if self.started:
                self.step += len(self.pending)
                for where in self.pending:
                    self.places[where] = self.places.get(where, 0) + 1
            else:
                self.edge += len(self.pending)  # before the epoch's first step
            self.pending, self.started = [], True

    def showwarning(self, message, category, filename, lineno, file=None, line=None):
        if SYNC_TEXT not in str(message):
            return self.previous(message, category, filename, lineno, file, line)
        if not self.active:
            return None
        frames = traceback.extract_stack()[:-1]
        with self.lock:
            if threading.current_thread() is not threading.main_thread():
                self.other += 1
            elif any(f.name == "read" and f.filename.endswith(os.path.join("pipeline", "epoch.py"))
                     for f in frames):
                self.tally += 1
            else:
                mine = [f for f in frames if f"{os.sep}twopgraph{os.sep}" in f.filename]
                f = mine[-1] if mine else frames[-1]
                self.pending.append(f"{f.filename.split(os.sep + 'twopgraph' + os.sep)[-1]}:"
                                    f"{f.lineno} ({f.name})")
        return None

    def record(self) -> dict:
        top = sorted(self.places.items(), key=lambda kv: -kv[1])[:8]
        return {"step_syncs": self.step, "tally_syncs": self.tally, "edge_syncs": self.edge,
                "other_thread_syncs": self.other, "steps": self.steps,
                "step_sync_places": dict(top)}


def _cuda_tensor_bytes(obj, seen=None, depth=0) -> int:
    """Bytes of the CUDA tensors an object holds in its attributes (two levels deep)."""
    import torch
    seen = set() if seen is None else seen
    total = 0
    for v in list(getattr(obj, "__dict__", {}).values()):
        if isinstance(v, torch.Tensor):
            if v.is_cuda and v.data_ptr() not in seen:
                seen.add(v.data_ptr())
                total += v.numel() * v.element_size()
        elif depth < 1 and hasattr(v, "__dict__") and not isinstance(v, type):
            total += _cuda_tensor_bytes(v, seen, depth + 1)
    return total


def cmd_train(a, rest) -> int:
    import warnings

    import torch

    probe: dict = {"code": None, "epochs": [], "cuda": torch.cuda.is_available()}

    def save() -> None:
        dump(probe, a.probe)

    if probe["cuda"]:
        free, total = torch.cuda.mem_get_info()
        probe.update(free_at_start=free, total=total)
    try:
        from twopgraph.cache.feature_cache import DEFAULT_TRAIN_MARGIN
        probe["margin"] = DEFAULT_TRAIN_MARGIN
    except ImportError:
        probe["margin"] = 0.25
    from twopgraph.cli import main

    instances: dict[str, list] = {"cache": [], "sampler": []}

    def track(cls, kind) -> None:
        init = cls.__init__

        def __init__(self, *args, **kw):
            init(self, *args, **kw)
            instances[kind].append(self)
        cls.__init__ = __init__
    try:
        from twopgraph.cache.feature_cache import FeatureCache
        track(FeatureCache, "cache")
    except ImportError as e:
        probe["track_error"] = str(e)
    try:
        from twopgraph.sampler.device import TorchNeighborSampler
        track(TorchNeighborSampler, "sampler")
    except ImportError as e:
        probe["track_error"] = str(e)

    audit = SyncAudit() if a.sync else None
    if audit is not None:
        audit.previous = warnings.showwarning
        warnings.showwarning = audit.showwarning
        warnings.filterwarnings("always", message=".*" + SYNC_TEXT)
        try:
            from torch.optim.optimizer import register_optimizer_step_post_hook
            register_optimizer_step_post_hook(audit.on_step)
        except ImportError as e:
            probe["hook_error"] = f"no global optimizer step hook in this torch: {e}"

    try:
        import twopgraph.pipeline.epoch as ep
        import twopgraph.run.loop as loop
        orig = ep.train_epoch
    except (ImportError, AttributeError) as e:
        probe["hook_error"] = f"no twopgraph.pipeline.epoch.train_epoch to probe: {e}"
        orig = None

    def probed(*args, **kw):
        epoch = args[3] if len(args) > 3 else kw.get("epoch")
        cuda = probe["cuda"] and torch.cuda.is_initialized()
        if cuda:
            torch.cuda.synchronize()
            probe["run_peak_allocated"] = max(probe.get("run_peak_allocated", 0),
                                              torch.cuda.max_memory_allocated())
            probe["run_peak_reserved"] = max(probe.get("run_peak_reserved", 0),
                                             torch.cuda.max_memory_reserved())
            torch.cuda.reset_peak_memory_stats()
        prof = None
        if a.profile_dir and epoch == a.profile_epoch:
            from torch.profiler import ProfilerActivity, profile
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
            prof = profile(activities=acts)
            prof.__enter__()
        if audit is not None and cuda:
            audit.begin()
            torch.cuda.set_sync_debug_mode("warn")
        t = time.perf_counter()
        try:
            rec = orig(*args, **kw)
        finally:
            if audit is not None and cuda:
                torch.cuda.set_sync_debug_mode(0)
                audit.end()
            if prof is not None:
                prof.__exit__(None, None, None)
                Path(a.profile_dir).mkdir(parents=True, exist_ok=True)
                prof.export_chrome_trace(str(Path(a.profile_dir) / "trace.json"))
        e = {"epoch": epoch, "seconds": time.perf_counter() - t,
             "steps": rec.get("num_batches") if isinstance(rec, dict) else None}
        if cuda:
            torch.cuda.synchronize()
            e.update(peak_allocated=torch.cuda.max_memory_allocated(),
                     peak_reserved=torch.cuda.max_memory_reserved(),
                     end_allocated=torch.cuda.memory_allocated())
        probe["epochs"].append(e)
        if audit is not None:
            probe["sync"] = audit.record()
        save()
        return rec

    if orig is not None:
        for mod in (ep, loop):
            if getattr(mod, "train_epoch", None) is orig:
                mod.train_epoch = probed
    code = 1
    try:
        code = main(rest)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    finally:
        probe["code"] = code
        if probe["cuda"] and torch.cuda.is_initialized():
            # the whole run's peaks (the epochs reset the counters: see probed)
            probe.update(peak_allocated=max(probe.get("run_peak_allocated", 0),
                                            torch.cuda.max_memory_allocated()),
                         peak_reserved=max(probe.get("run_peak_reserved", 0),
                                           torch.cuda.max_memory_reserved()))
            try:
                probe["cache_bytes"] = sum(_cuda_tensor_bytes(c) for c in instances["cache"])
                probe["sampler_bytes"] = sum(_cuda_tensor_bytes(s) for s in instances["sampler"])
            except Exception as e:  # noqa: BLE001 -- a figure, not the run
                probe["track_error"] = f"{type(e).__name__}: {e}"
        if audit is not None:
            probe["sync"] = audit.record()
        save()
    return code


# -- weights, accuracy ---------------------------------------------------------------------------
def cmd_weights(a) -> None:
    import torch
    sa = torch.load(a.a, map_location="cpu", weights_only=False)["model"]
    sb = torch.load(a.b, map_location="cpu", weights_only=False)["model"]
    diff, keys = 0.0, sorted(set(sa) | set(sb))
    missing = [k for k in keys if k not in sa or k not in sb]
    for k in keys:
        if k in sa and k in sb:
            x, y = sa[k].float(), sb[k].float()
            if x.shape != y.shape:
                missing.append(k)
                continue
            if x.numel():
                diff = max(diff, float((x - y).abs().max()))
    dump({"max_abs_diff": diff, "tensors": len(keys), "mismatched": missing})


def cmd_accuracy(a) -> None:
    import numpy as np

    from twopgraph.datasets import load_dataset
    data = load_dataset(a.dataset, a.data_root, progress=False)
    pred = np.load(a.pred)
    label = np.asarray(data.label)
    out = {"rows": int(pred.shape[0]), "num_nodes": int(data.num_nodes)}
    for split in ("val", "test"):
        idx = np.asarray(getattr(data, f"{split}_idx"))
        out[f"{split}_acc"] = float((pred[idx] == label[idx]).mean()) if len(idx) else None
        out[f"{split}_size"] = int(len(idx))
    dump(out)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, rest = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("env")
    s = sub.add_parser("samplers")
    s.add_argument("dataset")
    s.add_argument("data_root")
    s.add_argument("device")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--batches", type=int, default=4)
    s.add_argument("--batch-size", type=int, default=256)
    s.add_argument("--fanouts", default="15,10,5")
    s.add_argument("--labor-iterations", type=int, default=2)
    t = sub.add_parser("train")
    t.add_argument("probe")
    t.add_argument("--sync", action="store_true")
    t.add_argument("--profile-dir", default=None)
    t.add_argument("--profile-epoch", type=int, default=0)
    w = sub.add_parser("weights")
    w.add_argument("a")
    w.add_argument("b")
    c = sub.add_parser("accuracy")
    c.add_argument("dataset")
    c.add_argument("data_root")
    c.add_argument("pred")
    a = ap.parse_args(argv)
    if a.cmd == "train":
        return cmd_train(a, rest)
    {"env": cmd_env, "samplers": cmd_samplers, "weights": cmd_weights,
     "accuracy": cmd_accuracy}[a.cmd](a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
