#!/usr/bin/env python
"""Memory of the data plane: P ranks vs one process; training over a memory cap.

    .venv/bin/python scripts/bench_memory.py --json runs/bench_memory/bench_memory.json
    .venv/bin/python scripts/bench_memory.py --dataset synthetic-tiny --ranks 2 \\
        --wide-nodes 2000 --wide-features 64 --cap-gib 1 --out /tmp/bench_memory  # smoke size

Every figure is measured on real ``twopgraph`` runs, each a subprocess, one after the other:

A. **Ranks x summed PSS.** ``twopgraph info`` (generates/converts ``--dataset``), then for each
   P of ``--ranks``: ``twopgraph partition --num-parts P --hops 3``; then the same training in
   one process (``twopgraph train --dataset D --epochs 1``: 1 epoch + exact evaluation), then
   ``twopgraph train --partitions DIR --nproc P --epochs 1`` for each P. Columns: ranks, the
   summed peak PSS of the ranks (peak over time of the sum over the ranks at one instant), of
   the whole process tree (launcher and torchrun agent too), the ratio ranks' PSS / one
   process's peak RSS (``ru_maxrss``), the ``peak_pss_mib_total`` / ``peak_rss_mib`` that the
   run's ``metrics.json`` reports, wall time, epoch time, test accuracy.
B. **Out of core.** A wide variant of ``--wide-preset`` (``--wide-nodes`` x ``--wide-features``
   float32, ~5 GB by default) written *streaming* as an ``.npz`` (the graph, labels and splits
   come from the synthetic generator run at the preset's feature width; the wide features are
   those features through a random orthonormal projection plus a little Gaussian noise, made
   and written in row chunks, so the table never exists in memory and stays as learnable as
   the preset's). Then, under a cgroup v1 memory cap of ``--cap-gib``: (1) conversion to the
   store (``twopgraph info --dataset WIDE.npz``; the file's mtime is bumped first so the store
   is converted again, not reused); (2) one epoch + exact evaluation with ``--schedule
   locality`` and ``--schedule random``, uncapped and capped, same seed: epoch time
   (``metrics.json`` ``epochs[0].epoch_s``), evaluation time, peaks, test accuracy and the
   capped / uncapped epoch-time ratio. The page cache is dropped before each run of B (cold
   start; page cache that another cgroup touched first would not count against the cap).
C. **Conversion** (from B.1): wall time, peaks, throughput, store size on disk.

How memory is measured: a thread samples, every ``--sample-interval`` s, the
``/proc/PID/smaps_rollup`` of every process of the run's tree (found through the parent ids in
``/proc/*/stat``): summed ``Pss`` and ``Pss_Anon``, the largest single ``Rss``; a rank is a
process with ``LOCAL_RANK`` in its environment. ``ru_maxrss`` (from ``wait4``) is the exact peak
RSS of the largest process of the tree. Capped runs run in their own memory cgroup
(``/sys/fs/cgroup/memory/<name>``: ``memory.limit_in_bytes``; ``memory.max_usage_in_bytes`` is the
cgroup's peak, page cache included; ``oom_kill`` its OOM kills); uncapped runs of B run in an
unlimited cgroup of their own for the same counters. Without root or cgroup v1 one line says so
and the capped runs are skipped. Child output goes to ``OUT/logs/<run>.log``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Self

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
log = logging.getLogger("bench_memory")

CGROUP_V1 = Path("/sys/fs/cgroup/memory")
MIB = 1 << 20
KIB_PER_MIB = 1024.0


# ----------------------------------------------------------------------------------------------
# measuring a process tree
# ----------------------------------------------------------------------------------------------
def parse_smaps_rollup(text: str) -> dict[str, int]:
    """``/proc/PID/smaps_rollup`` as ``{field: KiB}`` (``Rss``, ``Pss``, ``Pss_Anon``, ...);
    the header line and anything not ``Name: N kB`` is skipped."""
    out = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        parts = rest.split()
        if sep and len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            out[key.strip()] = int(parts[0])
    return out


def parent_ids() -> dict[int, int]:
    """``{pid: ppid}`` of every process visible in ``/proc``."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1:
            out[int(d)] = int(fields[1])
    return out


def descendants(root: int, ppids: dict[int, int]) -> list[int]:
    """``root`` and every process below it in ``ppids`` (``{pid: ppid}``)."""
    kids: dict[int, list[int]] = {}
    for pid, ppid in ppids.items():
        kids.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, ()))
    return out


def _is_rank(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return any(v.startswith(b"LOCAL_RANK=") for v in f.read().split(b"\0"))
    except OSError:
        return False


class TreeMonitor:
    """Samples the memory of a process tree in a thread (see the module docstring).

    Peaks (MiB): ``pss`` summed over the tree, ``pss_anon`` summed, ``rank_pss`` summed over
    the ranks (processes with ``LOCAL_RANK`` in their environment), ``rss`` of the largest
    process; ``procs`` the most processes seen at once, ``samples`` the samples taken."""

    def __init__(self, pid: int, interval: float = 0.2):
        self.pid, self.interval = pid, interval
        self.peak = {"pss": 0.0, "pss_anon": 0.0, "rank_pss": 0.0, "rss": 0.0}
        self.procs = self.ranks = self.samples = 0
        self._ranks: dict[int, bool] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-monitor", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        pss = anon = rank_pss = rss = 0.0
        pids = descendants(self.pid, parent_ids())
        n = ranks = 0
        for pid in pids:
            try:
                with open(f"/proc/{pid}/smaps_rollup") as f:
                    m = parse_smaps_rollup(f.read())
            except OSError:  # exited, or a zombie (no memory map left)
                continue
            if "Pss" not in m:
                continue
            n += 1
            if pid not in self._ranks:
                self._ranks[pid] = _is_rank(pid)
            pss += m["Pss"]
            anon += m.get("Pss_Anon", 0)
            rss = max(rss, m.get("Rss", 0))
            if self._ranks[pid]:
                ranks += 1
                rank_pss += m["Pss"]
        for k, v in (("pss", pss), ("pss_anon", anon), ("rank_pss", rank_pss), ("rss", rss)):
            self.peak[k] = max(self.peak[k], v / KIB_PER_MIB)
        self.procs, self.ranks = max(self.procs, n), max(self.ranks, ranks)
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def result(self) -> dict:
        return {"peak_pss_mib": self.peak["pss"], "peak_pss_anon_mib": self.peak["pss_anon"],
                "peak_rank_pss_mib": self.peak["rank_pss"] if self.ranks else None,
                "peak_rss_sampled_mib": self.peak["rss"], "max_procs": self.procs,
                "ranks_seen": self.ranks, "samples": self.samples}


# ----------------------------------------------------------------------------------------------
# memory cgroup (v1) and the page cache
# ----------------------------------------------------------------------------------------------
class MemCgroup:
    """A cgroup v1 memory group for one run: ``limit_bytes`` None = no limit (counters only).
    ``wrap(cmd)`` starts ``cmd`` inside it; leaving the ``with`` block removes the group
    (waiting for its processes to end first; any left after 10 s are processes this script
    started, killed by pid)."""

    def __init__(self, name: str, limit_bytes: int | None = None, base: Path | None = None):
        self.path = (CGROUP_V1 if base is None else base) / name
        self.limit_bytes = limit_bytes
        self.path.mkdir()
        try:
            if limit_bytes is not None:
                (self.path / "memory.limit_in_bytes").write_text(str(int(limit_bytes)))
                got = int((self.path / "memory.limit_in_bytes").read_text())
                if got > limit_bytes:
                    raise OSError(f"limit {limit_bytes} not taken (reads {got})")
        except BaseException:
            self.remove()
            raise

    @staticmethod
    def probe(base: Path | None = None) -> str | None:
        """None if a memory cgroup can be made under ``base`` (default :data:`CGROUP_V1`),
        else why not (one line)."""
        base = CGROUP_V1 if base is None else base
        if not (base / "memory.limit_in_bytes").is_file():
            return f"no cgroup v1 memory controller at {base}"
        try:
            MemCgroup(f"twopgraph-bench-probe-{os.getpid()}", 1 << 30, base).remove()
        except OSError as e:
            return f"cannot create a memory cgroup under {base} ({e.strerror or e})"
        return None

    def wrap(self, cmd: list[str]) -> list[str]:
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs"), *cmd]

    def stats(self) -> dict:
        def num(name):
            try:
                return int((self.path / name).read_text())
            except (OSError, ValueError):
                return None
        oom = None
        try:
            for line in (self.path / "memory.oom_control").read_text().splitlines():
                k, _, v = line.partition(" ")
                if k == "oom_kill":
                    oom = int(v)
        except OSError:
            pass
        peak = num("memory.max_usage_in_bytes")
        return {"cgroup_peak_mib": None if peak is None else peak / MIB,
                "cgroup_failcnt": num("memory.failcnt"), "cgroup_oom_kills": oom}

    def remove(self) -> None:
        procs = self.path / "cgroup.procs"
        deadline = time.monotonic() + 10
        while procs.exists():
            try:
                left = [int(x) for x in procs.read_text().split()]
            except OSError:
                left = []
            if not left:
                break
            if time.monotonic() > deadline:
                for pid in left:  # started by this script (the cgroup holds nothing else)
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                deadline = time.monotonic() + 10
            time.sleep(0.1)
        try:
            self.path.rmdir()
        except FileNotFoundError:
            pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def drop_caches() -> str | None:
    """Write back dirty pages and drop the page cache; None, or why it could not."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError as e:
        return f"cannot drop the page cache ({e.strerror or e})"
    return None


# ----------------------------------------------------------------------------------------------
# running the CLI
# ----------------------------------------------------------------------------------------------
def twopgraph_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "twopgraph", *args]


@dataclass
class Runner:
    """Runs commands one at a time with their output in ``logs/<name>.log`` (stdout in
    ``<name>.out``) and measures them."""

    logs: Path
    env: dict
    interval: float = 0.2
    commands: list | None = None

    def run(self, name: str, cmd: list[str], cgroup: MemCgroup | None = None) -> dict:
        self.logs.mkdir(parents=True, exist_ok=True)
        out_path, log_path = self.logs / f"{name}.out", self.logs / f"{name}.log"
        full = cgroup.wrap(cmd) if cgroup is not None else cmd
        if self.commands is not None:
            self.commands.append({"run": name, "cmd": shlex.join(cmd),
                                  "cap_bytes": cgroup.limit_bytes if cgroup else None})
        log.info("%s: %s%s", name, shlex.join(cmd[2:] if cmd[:2] == [sys.executable, "-m"]
                                              else cmd),
                 f"  [cgroup {cgroup.path.name}]" if cgroup else "")
        t = time.perf_counter()
        with open(out_path, "wb") as fo, open(log_path, "wb") as fe:
            proc = subprocess.Popen(full, stdout=fo, stderr=fe, env=self.env, cwd=ROOT)
            try:
                with TreeMonitor(proc.pid, self.interval) as mon:
                    _, status, usage = os.wait4(proc.pid, 0)
            except BaseException:  # KeyboardInterrupt: the child got SIGINT too
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                raise
        proc.returncode = rc = os.waitstatus_to_exitcode(status)
        rec = {"rc": rc, "wall_s": time.perf_counter() - t,
               "ru_maxrss_mib": usage.ru_maxrss / 1024.0, **mon.result()}
        if cgroup is not None:
            rec.update(cgroup.stats())
        if rc != 0:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
            why = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exit code {rc}"
            if rec.get("cgroup_oom_kills"):
                why += " (OOM kill in the cgroup)"
            rec["error"] = why
            log.warning("%s failed: %s; log %s%s", name, why, log_path,
                        "".join(f"\n    {ln}" for ln in tail))
        rec["stdout"] = out_path.read_text(errors="replace")
        return rec


def read_metrics(run_dir: Path) -> dict:
    """What ``metrics.json`` of a run says about memory, time and accuracy ({} if absent)."""
    try:
        m = json.loads((run_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        return {}
    eps = m.get("epochs") or [{}]
    out = {"test_acc": m.get("test_acc"), "val_acc": m.get("val_acc"),
           "status": m.get("status"), "epoch_s": eps[0].get("epoch_s"),
           "eval_s": eps[-1].get("eval_s"), "input_nodes_per_batch":
           eps[0].get("input_nodes_per_batch"), "load_s": eps[0].get("load_s")}
    for k in ("peak_rss_mib", "peak_pss_mib", "peak_pss_mib_total"):
        if k in m:
            out[f"metrics_{k}"] = m[k]
    return out


def _last_json(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return {}


# ----------------------------------------------------------------------------------------------
# the wide dataset, written streaming
# ----------------------------------------------------------------------------------------------
@dataclass
class Chunked:
    """An array given as row chunks: ``chunks()`` yields arrays that stack (axis 0) into
    ``shape``/``dtype``; only one chunk is in memory at a time."""

    shape: tuple
    dtype: np.dtype
    chunks: Callable[[], Iterable[np.ndarray]]


def _write_member(zf: zipfile.ZipFile, key: str, shape, dtype, chunks) -> None:
    """``KEY.npy`` into ``zf`` from row chunks: the store's own streaming writer."""
    from twopgraph.store.npz import write_npy_member
    write_npy_member(zf, key, shape, dtype, chunks)


def _rows(arr: np.ndarray, chunk_bytes: int = 64 * MIB):
    if arr.ndim == 0:
        yield arr
        return
    row = max(1, arr[:1].nbytes)
    step = max(1, chunk_bytes // row)
    for a in range(0, arr.shape[0], step):
        yield arr[a:a + step]


def write_npz_streaming(path, arrays: dict) -> Path:
    """Write ``arrays`` (``{key: ndarray | Chunked}``) as an uncompressed zip64 ``.npz``, one
    chunk at a time, atomically (``.<name>.tmp-<pid>`` beside it, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            for key, arr in arrays.items():
                if isinstance(arr, Chunked):
                    _write_member(zf, key, arr.shape, arr.dtype, _checked(key, arr))
                else:
                    arr = np.asarray(arr)
                    _write_member(zf, key, arr.shape, arr.dtype, _rows(arr))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _checked(key: str, arr: Chunked):
    rows = 0
    for c in arr.chunks():
        if c.shape[1:] != tuple(arr.shape[1:]):
            raise ValueError(f"{key}: chunk of shape {c.shape} in an array of shape {arr.shape}")
        rows += c.shape[0]
        yield c
    if rows != arr.shape[0]:
        raise ValueError(f"{key}: chunks hold {rows} rows, expected {arr.shape[0]}")


def wide_spec(preset: str, num_nodes: int, num_features: int):
    """The spec of ``preset`` scaled to ``num_nodes`` vertices (edges and communities in
    proportion: the same mean degree and community size) at ``num_features`` features."""
    from twopgraph.datasets.synthetic import SYNTHETIC_PRESETS
    base = SYNTHETIC_PRESETS[preset]
    s = num_nodes / base.num_nodes
    comms = max(base.num_classes, round(base.num_communities * s))
    comms = min(comms, max(base.num_classes, num_nodes // base.min_community_size))
    edges = min(max(1, round(base.num_edges * s)), num_nodes * (num_nodes - 1) // 4)
    return replace(base, num_nodes=num_nodes, num_edges=edges, num_features=num_features,
                   num_communities=comms, name=f"wide-{preset}",
                   description=f"{preset} scaled to {num_nodes} vertices (bench_memory)")


def wide_features(base: np.ndarray, width: int, noise: float, seed: int,
                  chunk_rows: int) -> Chunked:
    """``base`` (N x f) through a random map with orthonormal rows (f x ``width``: distances,
    hence class and community signal, are kept) plus Gaussian noise of std ``noise`` per
    dimension, as float32 row chunks (deterministic for a ``seed``)."""
    n, f = base.shape
    g = np.random.default_rng([seed, 0]).standard_normal((width, f))
    q = np.linalg.qr(g)[0] if width >= f else g / np.linalg.norm(g, axis=1, keepdims=True)
    proj = np.ascontiguousarray(q.T, dtype=np.float32)  # f x width

    def chunks():
        for i, a in enumerate(range(0, n, chunk_rows)):
            x = base[a:a + chunk_rows].astype(np.float32) @ proj
            if noise:
                rng = np.random.default_rng([seed, 1, i])
                x += noise * rng.standard_normal(x.shape, dtype=np.float32)
            yield x
    return Chunked((n, width), np.dtype(np.float32), chunks)


def make_wide(path: Path, preset: str, nodes: int, width: int, noise: float, seed: int) -> dict:
    """Write (or reuse, if made with the same parameters) the wide ``.npz`` at ``path``."""
    from twopgraph.datasets.synthetic import generate
    params = {"preset": preset, "nodes": nodes, "features": width, "noise": noise,
              "seed": seed, "version": 1}
    side = path.with_suffix(".wide.json")
    if path.is_file() and side.is_file():
        try:
            if json.loads(side.read_text()).get("params") == params:
                log.info("wide dataset: reusing %s", path)
                return {"path": str(path), "bytes": path.stat().st_size, "reused": True,
                        **json.loads(side.read_text())}
        except ValueError:
            pass
    spec = wide_spec(preset, nodes, min(width, _preset_features(preset)))
    t = time.perf_counter()
    data = generate(replace(spec, seed=seed))
    gen_s = time.perf_counter() - t
    rows = max(1, (64 * MIB) // (4 * width))
    arrays = {"indptr": data.graph.indptr, "indices": data.graph.indices,
              "feat": wide_features(data.feat, width, noise, seed, rows), "label": data.label,
              "train_idx": data.train_idx, "val_idx": data.val_idx, "test_idx": data.test_idx,
              "num_classes": np.asarray(np.int64(data.num_classes))}
    log.info("wide dataset: writing %s (%d x %d float32 = %.2f GiB of features, streaming)",
             path, nodes, width, nodes * width * 4 / 2**30)
    t = time.perf_counter()
    write_npz_streaming(path, arrays)
    info = {"params": params, "num_edges": int(data.graph.num_edges // 2),
            "num_classes": int(data.num_classes), "generate_s": gen_s,
            "write_s": time.perf_counter() - t, "feat_bytes": nodes * width * 4}
    side.write_text(json.dumps(info, indent=2) + "\n")
    return {"path": str(path), "bytes": path.stat().st_size, "reused": False, **info}


def _preset_features(preset: str) -> int:
    from twopgraph.datasets.synthetic import SYNTHETIC_PRESETS
    return SYNTHETIC_PRESETS[preset].num_features


# ----------------------------------------------------------------------------------------------
# A: ranks x summed PSS
# ----------------------------------------------------------------------------------------------
def table_a(a, r: Runner, root: Path, out: Path, train_flags: list[str]) -> dict:
    data = ["--dataset", a.dataset, "--data-root", str(root)]
    res: dict = {"dataset": a.dataset, "rows": []}
    prep = r.run("A-prepare", twopgraph_cmd("info", *data, "--json"))
    res["prepare"] = _strip(prep) | {"info": _last_json(prep["stdout"])}
    parts = {}
    for p in a.ranks:
        pdir = out / f"parts-{p}"
        rec = r.run(f"A-partition-{p}", twopgraph_cmd(
            "partition", *data, "--num-parts", str(p), "--hops", str(a.hops), "--out",
            str(pdir), "--force"))
        try:
            meta = json.loads((pdir / "meta.json").read_text()) if rec["rc"] == 0 else {}
        except (OSError, ValueError):
            meta = {}
        parts[p] = (pdir, _strip(rec) | {k: meta.get(k) for k in (
            "replication_factor", "edge_cut_fraction")})
    single = out / "train-single"
    shutil.rmtree(single, ignore_errors=True)
    rec = r.run("A-train-single", twopgraph_cmd("train", *data, "--out", str(single),
                                                *train_flags))
    one = _strip(rec) | read_metrics(single)
    base = one["ru_maxrss_mib"] if rec["rc"] == 0 else None
    res["single"] = one
    res["rows"].append({"ranks": 1, "mode": "one process", "pss_mib": one["peak_pss_mib"],
                        "tree_pss_mib": one["peak_pss_mib"], "rss_mib": one["ru_maxrss_mib"],
                        "ratio": None, **_pick(one)})
    for p in a.ranks:
        pdir, prec = parts[p]
        row = {"ranks": p, "mode": "partitions", "partition_s": prec["wall_s"],
               "partition_rss_mib": prec["ru_maxrss_mib"],
               "replication_factor": prec.get("replication_factor"), "partition_rc": prec["rc"]}
        if prec["rc"] == 0:
            run = out / f"train-{p}"
            shutil.rmtree(run, ignore_errors=True)
            rec = r.run(f"A-train-{p}", twopgraph_cmd(
                "train", "--partitions", str(pdir), "--nproc", str(p), "--data-root", str(root),
                "--out", str(run), *train_flags))
            t = _strip(rec) | read_metrics(run)
            pss = t["peak_rank_pss_mib"]
            row.update(pss_mib=pss, tree_pss_mib=t["peak_pss_mib"], rss_mib=t["ru_maxrss_mib"],
                       ratio=pss / base if pss and base else None, detail=t, **_pick(t))
        res["rows"].append(row)
    return res


def _pick(rec: dict) -> dict:
    out = {k: rec.get(k) for k in ("wall_s", "epoch_s", "eval_s", "test_acc", "rc", "error",
                                   "metrics_peak_pss_mib_total")}
    rss = rec.get("metrics_peak_rss_mib")  # a list (one per rank) for distributed runs
    nums = [x for x in (rss if isinstance(rss, list) else [rss]) if isinstance(x, (int, float))]
    out["metrics_peak_rss_mib_max"] = max(nums) if nums else None
    return out


def _strip(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k != "stdout"}


# ----------------------------------------------------------------------------------------------
# B + C: out of core
# ----------------------------------------------------------------------------------------------
def table_b(a, r: Runner, root: Path, out: Path, train_flags: list[str]) -> dict:
    npz = root / f"wide-{a.wide_preset}-{a.wide_nodes}x{a.wide_features}.npz"
    wide = make_wide(npz, a.wide_preset, a.wide_nodes, a.wide_features, a.wide_noise, a.seed)
    cap = int(a.cap_gib * 2**30)
    res: dict = {"wide": wide, "cap_gib": a.cap_gib, "cap_bytes": cap,
                 "feat_over_cap": wide["feat_bytes"] / cap, "runs": []}
    why = MemCgroup.probe()
    res["cgroup"] = why or "ok"
    if why:
        log.warning("%s: the capped runs are skipped", why)
    res["drop_caches"] = "no" if a.no_drop_caches else "before each run"
    counter = iter(range(1 << 30))

    def cold():
        if a.no_drop_caches:
            return
        err = drop_caches()
        if err:
            log.warning("%s: runs may start with a warm page cache", err)
            res["drop_caches"] = err

    def measured(name, cmd, capped):
        if why and capped:
            return None
        cold()
        if why:
            return r.run(name, cmd)
        with MemCgroup(f"twopgraph-bench-{os.getpid()}-{next(counter)}",
                       cap if capped else None) as cg:
            return r.run(name, cmd, cg)

    data = ["--dataset", str(npz), "--data-root", str(root)]
    os.utime(npz)  # a new mtime: the cached store is stale, so this converts again
    conv = measured("B-convert", twopgraph_cmd("info", *data, "--json"), capped=not why)
    info = _last_json(conv["stdout"])
    res["conversion"] = _strip(conv) | {"capped": not why, "info": info,
                                        "store_bytes": _store_bytes(npz, root)}
    for sched in ("locality", "random"):
        for capped in (False, True):
            name = f"B-train-{sched}-{'capped' if capped else 'uncapped'}"
            run = out / name
            shutil.rmtree(run, ignore_errors=True)
            rec = measured(name, twopgraph_cmd("train", *data, "--schedule", sched, "--out",
                                               str(run), *train_flags), capped)
            row = {"schedule": sched, "capped": capped,
                   "cap_gib": a.cap_gib if capped else None}
            if rec is None:
                row["error"] = f"skipped ({why})"
            else:
                row.update(_strip(rec) | read_metrics(run))
            res["runs"].append(row)
    for sched in ("locality", "random"):
        u, c = (next((x for x in res["runs"] if x["schedule"] == sched and x["capped"] == k),
                     {}) for k in (False, True))
        if u.get("epoch_s") and c.get("epoch_s"):
            c["epoch_ratio"] = c["epoch_s"] / u["epoch_s"]
        if u.get("test_acc") is not None and c.get("test_acc") is not None:
            c["test_acc_diff"] = c["test_acc"] - u["test_acc"]
    return res


def _store_bytes(npz: Path, root: Path) -> int | None:
    """Size on disk of the store converted from ``npz`` (None where there is none)."""
    try:
        from twopgraph.datasets import store_folder
        from twopgraph.store.reader import disk_bytes, is_store
    except ImportError:
        return None
    folder = store_folder(npz, root)
    return disk_bytes(folder) if is_store(folder) else None


# ----------------------------------------------------------------------------------------------
# printing
# ----------------------------------------------------------------------------------------------
def fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def print_table(title: str, cols: list[tuple[str, str]], rows: list[dict]) -> None:
    print(f"\n{title}")
    print("| " + " | ".join(h for _, h in cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(fmt(row.get(k)) for k, _ in cols) + " |")


def report(res: dict) -> None:
    a = res.get("A")
    if a:
        print_table(
            f"A. {a['dataset']}: ranks x summed peak PSS (1 epoch + exact evaluation); ratio = "
            "ranks' summed peak PSS / peak RSS of one process",
            [("ranks", "ranks"), ("pss_mib", "ranks' summed peak PSS MiB"),
             ("tree_pss_mib", "tree peak PSS MiB"), ("rss_mib", "largest process peak RSS MiB"),
             ("ratio", "ratio to one process"),
             ("metrics_peak_pss_mib_total", "metrics peak_pss_mib_total"),
             ("metrics_peak_rss_mib_max", "metrics peak_rss_mib (max rank)"),
             ("partition_s", "partition s"), ("partition_rss_mib", "partition peak RSS MiB"),
             ("replication_factor", "replication"), ("wall_s", "train wall s"),
             ("epoch_s", "epoch s"), ("test_acc", "test_acc"), ("error", "error")], a["rows"])
    b = res.get("B")
    if b:
        w = b["wide"]
        p = w["params"]
        print_table(
            f"B. out of core: {p['nodes']} x {p['features']} float32 features "
            f"({w['feat_bytes'] / 2**30:.2f} GiB, {b['feat_over_cap']:.2f}x the cap) from "
            f"{p['preset']}; cap {b['cap_gib']} GiB (cgroup: {b['cgroup']}); page cache "
            f"dropped: {b['drop_caches']}",
            [("schedule", "schedule"), ("cap_gib", "cap GiB"), ("epoch_s", "epoch s"),
             ("epoch_ratio", "capped/uncapped epoch"), ("eval_s", "eval s"),
             ("wall_s", "wall s"), ("peak_pss_mib", "peak PSS MiB"),
             ("peak_pss_anon_mib", "peak anon PSS MiB"), ("ru_maxrss_mib", "peak RSS MiB"),
             ("cgroup_peak_mib", "cgroup peak MiB (with page cache)"),
             ("test_acc", "test_acc"), ("test_acc_diff", "acc diff vs uncapped"),
             ("error", "error")], b["runs"])
        c = b["conversion"]
        c = c | {"npz_mib": w["bytes"] / MIB,
                 "mib_per_s": w["bytes"] / MIB / c["wall_s"] if c["rc"] == 0 else None,
                 "store_mib": c["store_bytes"] / MIB if c.get("store_bytes") else None,
                 "cap_gib": b["cap_gib"] if c["capped"] else None}
        print_table(f"C. conversion .npz -> store (`twopgraph info`; page cache dropped: "
                    f"{b['drop_caches']})",
                    [("npz_mib", ".npz MiB"), ("cap_gib", "cap GiB"), ("wall_s", "wall s"),
                     ("mib_per_s", "MiB/s"), ("peak_pss_mib", "peak PSS MiB"),
                     ("ru_maxrss_mib", "peak RSS MiB"),
                     ("cgroup_peak_mib", "cgroup peak MiB (with page cache)"),
                     ("store_mib", "store on disk MiB"), ("error", "error")], [c])
    print("\ncommands:")
    for c in res["commands"]:
        cap = f"  (cap {c['cap_bytes'] / 2**30:g} GiB)" if c["cap_bytes"] else ""
        print(f"  {c['run']}: {c['cmd']}{cap}")
    m = res["machine"]
    print(f"machine: {m['cpus']} cpus, {m['mem_total_mib']:.0f} MiB, {m['kernel']}")


def machine() -> dict:
    mem = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = int(line.split()[1]) / KIB_PER_MIB
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "mem_total_mib": mem or 0.0, "kernel": platform.release(),
            "python": sys.version.split()[0]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="synthetic-products", help="dataset of table A")
    p.add_argument("--ranks", default="4,8", help="comma-separated rank counts of table A")
    p.add_argument("--hops", type=int, default=3, help="partition halo depth (table A)")
    p.add_argument("--cap-gib", type=float, default=2.5, help="memory cap of table B, GiB")
    p.add_argument("--wide-preset", default="synthetic-products",
                   help="synthetic preset the wide dataset is scaled from")
    p.add_argument("--wide-nodes", type=int, default=660_000,
                   help="vertices of the wide dataset (660k x 2048 float32 = 5.04 GiB of "
                        "features: over 2x the default cap)")
    p.add_argument("--wide-features", type=int, default=2048)
    p.add_argument("--wide-noise", type=float, default=0.05,
                   help="extra per-dimension noise std of the wide features")
    p.add_argument("--data-root", default=str(ROOT / "runs" / "bench_memory" / "data"),
                   help="where datasets, stores and clusters go (default: %(default)s)")
    p.add_argument("--out", default=str(ROOT / "runs" / "bench_memory"),
                   help="run folders, partitions and logs")
    p.add_argument("--json", default=None, help="also write everything as JSON here")
    p.add_argument("--skip", default="", help="comma list of tables to skip: A, B (B has C)")
    p.add_argument("--threads", type=int, default=0,
                   help="twopgraph --threads of every training (0 = its default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--train-args", default="",
                   help="extra `twopgraph train` flags for every training, e.g. "
                        "'--fanouts 10,5 --batch-size 512'")
    p.add_argument("--wide-train-args", default="--fanouts 10,5 --batch-size 512",
                   help="extra `twopgraph train` flags of table B only (after --train-args): "
                        "a batch of the wide dataset gathers input rows x F x 4 bytes, so the "
                        "default keeps a few batches in flight well under the cap")
    p.add_argument("--sample-interval", type=float, default=0.2, help="seconds between samples")
    p.add_argument("--no-drop-caches", action="store_true",
                   help="do not drop the page cache before the runs of table B")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[bench_memory %(asctime)s] %(message)s",
                        datefmt="%H:%M:%S", stream=sys.stderr)
    skip = {s.strip().upper() for s in a.skip.split(",") if s.strip()}
    if skip - {"A", "B"}:
        p.error(f"--skip: unknown {sorted(skip - {'A', 'B'})}; known: A, B")
    try:
        a.ranks = [int(x) for x in a.ranks.split(",") if x.strip()]
    except ValueError:
        p.error(f"--ranks must be comma-separated integers, got {a.ranks!r}")
    if not a.cap_gib > 0 or a.wide_nodes < 100 or a.wide_features < 1:
        p.error("need --cap-gib > 0, --wide-nodes >= 100, --wide-features >= 1")
    sys.path.insert(0, str(ROOT))
    out, root = Path(a.out), Path(a.data_root)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, TWOPGRAPH_DATA=str(root))
    if a.threads:
        env.update(OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads),
                   NUMBA_NUM_THREADS=str(a.threads))
    train_flags = ["--epochs", "1", "--eval-every", "0", "--seed", str(a.seed), "--device",
                   a.device, "--no-progress", *(["--threads", str(a.threads)] if a.threads
                                                else []), *shlex.split(a.train_args)]
    r = Runner(out / "logs", env, a.sample_interval, commands=[])
    res: dict = {"args": vars(a) | {"ranks": a.ranks}, "machine": machine(),
                 "commands": r.commands}
    if "A" not in skip:
        res["A"] = table_a(a, r, root, out, train_flags)
    if "B" not in skip:
        res["B"] = table_b(a, r, root, out, train_flags + shlex.split(a.wide_train_args))
    report(res)
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(res, indent=2, default=str) + "\n")
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
