"""Measuring a benchmark's subprocesses from outside: wall time, the kernel's resource usage,
the memory of the whole process tree over time, its storage I/O, a memory cgroup's counters.

- :class:`Runner` runs one command at a time (output in ``LOGS/<name>.log``, stdout in
  ``<name>.out``) and returns its figures: ``rc``, ``wall_s``, from ``wait4``: ``ru_maxrss_mib``
  (peak RSS of the largest process of the tree), ``minflt``/``majflt`` (page faults),
  ``user_s``/``sys_s`` (CPU seconds); from :class:`TreeMonitor`: the peaks of the tree's
  summed PSS (``peak_pss_mib``), anonymous PSS (``peak_pss_anon_mib``), the ranks' summed PSS
  (``peak_rank_pss_mib``: processes with ``LOCAL_RANK`` in their environment); with
  ``io=True``, :class:`IoMonitor`'s ``written_mib``/``read_mib``; inside a :class:`MemCgroup`:
  ``cgroup_peak_mib`` (page cache included), ``cgroup_failcnt``, ``cgroup_oom_kills``. A
  failed command adds ``error`` (one line) and a log warning with its last lines.
- :class:`MemCgroup`: a cgroup v1 memory group (needs root and ``/sys/fs/cgroup/memory``;
  :meth:`MemCgroup.probe` says why not, in one line) with an optional limit.
- :func:`drop_caches`: write back and drop the page cache (root), for cold starts.

Memory is sampled every ``interval`` s from ``/proc/PID/smaps_rollup`` of every process below
the command (found through the parent ids in ``/proc/*/stat``). Linux only.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Self

log = logging.getLogger("twopgraph")

CGROUP_V1 = Path("/sys/fs/cgroup/memory")
MIB = 1 << 20


def twopgraph_cmd(*args: str) -> list[str]:
    """``python -m twopgraph ARGS`` with this interpreter."""
    return [sys.executable, "-m", "twopgraph", *args]


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
        fields = stat[stat.rfind(b")") + 2:].split()  # "pid (comm) state ppid ..."
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


class _Sampler:
    """A thread calling :meth:`sample` every ``interval`` s inside a ``with`` block."""

    def __init__(self, pid: int, interval: float) -> None:
        self.pid, self.interval = pid, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=type(self).__name__,
                                        daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        """Take one sample."""

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)


class TreeMonitor(_Sampler):
    """Samples the memory of the process tree of ``pid`` every ``interval`` s (MiB peaks:
    summed ``pss``, summed ``pss_anon``, the ranks' summed ``rank_pss``, the largest single
    ``rss``); ``procs``: the most processes seen at once, ``samples``: samples taken."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        super().__init__(pid, interval)
        self.peak = {"pss": 0.0, "pss_anon": 0.0, "rank_pss": 0.0, "rss": 0.0}
        self.procs = self.ranks = self.samples = 0
        self._ranks: dict[int, bool] = {}

    def sample(self) -> None:
        pss = anon = rank_pss = rss = 0.0
        n = ranks = 0
        for pid in descendants(self.pid, parent_ids()):
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
            self.peak[k] = max(self.peak[k], v / 1024.0)
        self.procs, self.ranks = max(self.procs, n), max(self.ranks, ranks)
        self.samples += 1

    def result(self) -> dict:
        """The peaks (MiB) and counts as figures."""
        return {"peak_pss_mib": self.peak["pss"], "peak_pss_anon_mib": self.peak["pss_anon"],
                "peak_rank_pss_mib": self.peak["rank_pss"] if self.ranks else None,
                "peak_rss_sampled_mib": self.peak["rss"], "max_procs": self.procs,
                "ranks_seen": self.ranks, "samples": self.samples}


class IoMonitor(_Sampler):
    """Bytes written to and read from storage by the process tree of ``pid``
    (``/proc/PID/io`` ``write_bytes``/``read_bytes``, each process's last reading; reads
    count what missed the page cache)."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        super().__init__(pid, interval)
        self.written: dict[int, int] = {}
        self.read: dict[int, int] = {}

    def sample(self) -> None:
        for p in descendants(self.pid, parent_ids()):
            try:
                with open(f"/proc/{p}/io") as f:
                    for line in f:
                        if line.startswith("write_bytes:"):
                            self.written[p] = int(line.split()[1])
                        elif line.startswith("read_bytes:"):
                            self.read[p] = int(line.split()[1])
            except OSError:
                pass

    def result(self) -> dict:
        """``written_mib`` and ``read_mib``."""
        return {"written_mib": sum(self.written.values()) / MIB,
                "read_mib": sum(self.read.values()) / MIB}


class MemCgroup:
    """A cgroup v1 memory group for one run: ``limit_bytes`` None = no limit (counters only).
    :meth:`wrap` makes a command start inside it; leaving the ``with`` block removes the
    group (waiting for its processes to end first; any left after 10 s were started by the
    benchmark and are killed by pid)."""

    def __init__(self, name: str, limit_bytes: int | None = None,
                 base: Path | None = None) -> None:
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
        """``cmd`` started inside this group."""
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs"),
                *cmd]

    def stats(self) -> dict:
        """``cgroup_peak_mib`` (page cache included), ``cgroup_failcnt``,
        ``cgroup_oom_kills``."""
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
        """Remove the group (see the class doc)."""
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
                for pid in left:  # started by this benchmark (the group holds nothing else)
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

    def __enter__(self) -> MemCgroup:  # noqa: PYI034 (typing.Self: Python 3.11)
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def drop_caches() -> str | None:
    """Write back dirty pages and drop the page cache; None, or why it could not (root)."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError as e:
        return f"cannot drop the page cache ({e.strerror or e})"
    return None


@dataclass
class Runner:
    """Runs commands one at a time, measured (see the module doc); ``logs``: the folder of
    their output, ``env``: their environment, ``interval``: seconds between memory samples,
    ``io``: also count storage bytes."""

    logs: Path
    env: dict = field(default_factory=lambda: dict(os.environ))
    interval: float = 0.2
    io: bool = False

    def run(self, name: str, cmd: list[str], cgroup: MemCgroup | None = None,
            env: dict | None = None, cwd: str | Path | None = None) -> dict:
        """Run ``cmd`` (inside ``cgroup`` if given; ``env``: extra variables); its figures,
        with ``stdout`` (its output) and ``log`` (the log file)."""
        self.logs.mkdir(parents=True, exist_ok=True)
        out_path, log_path = self.logs / f"{name}.out", self.logs / f"{name}.log"
        full = cgroup.wrap(cmd) if cgroup is not None else cmd
        shown = cmd[2:] if cmd[:2] == [sys.executable, "-m"] else cmd
        log.info("%s: %s%s", name, shlex.join(shown),
                 f"  [cgroup {cgroup.path.name}]" if cgroup else "")
        t = time.perf_counter()
        io = None
        with open(out_path, "wb") as fo, open(log_path, "wb") as fe:
            proc = subprocess.Popen(full, stdout=fo, stderr=fe, env={**self.env, **(env or {})},
                                    cwd=cwd)
            try:
                with TreeMonitor(proc.pid, self.interval) as mon:
                    if self.io:
                        with IoMonitor(proc.pid, self.interval) as io:
                            _, status, usage = os.wait4(proc.pid, 0)
                    else:
                        _, status, usage = os.wait4(proc.pid, 0)
            except BaseException:  # KeyboardInterrupt, a stop signal: the child too
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                raise
        proc.returncode = rc = os.waitstatus_to_exitcode(status)
        rec = {"rc": rc, "wall_s": time.perf_counter() - t,
               "ru_maxrss_mib": usage.ru_maxrss / 1024.0, "minflt": usage.ru_minflt,
               "majflt": usage.ru_majflt, "user_s": usage.ru_utime, "sys_s": usage.ru_stime,
               **mon.result(), **(io.result() if io is not None else {})}
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
        rec["log"] = str(log_path)
        return rec


def strip(rec: dict) -> dict:
    """A :meth:`Runner.run` record without its output (for figures)."""
    return {k: v for k, v in rec.items() if k not in ("stdout", "log")}


def last_json(text: str) -> dict:
    """The last line of ``text`` that is a JSON object ({} when none)."""
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return {}


def read_metrics(run_dir: Path) -> dict:
    """What a training run's ``metrics.json`` says about time, memory, caches and accuracy
    (``epoch_s`` etc. of the last epoch; ``first_epoch_s``; ``{}`` when absent)."""
    try:
        m = json.loads((Path(run_dir) / "metrics.json").read_text())
    except (OSError, ValueError):
        return {}
    eps = m.get("epochs") or [{}]
    last = eps[-1]
    look = last.get("host_cache_lookups") or 0
    out = {"test_acc": m.get("test_acc"), "val_acc": m.get("val_acc"), "status": m.get("status"),
           "epoch_s": last.get("epoch_s"), "first_epoch_s": eps[0].get("epoch_s"),
           "eval_s": last.get("eval_s"), "sample_s": last.get("sample_s"),
           "load_s": last.get("load_s"), "compute_s": last.get("compute_s"),
           "input_nodes_per_batch": last.get("input_nodes_per_batch"),
           "feature_rows": last.get("feature_rows"), "hit_rate": last.get("hit_rate"),
           "readahead_ranges": last.get("readahead_ranges"), "epochs_run": len(eps),
           "host_cache_rows": (m.get("host_cache") or {}).get("rows"),
           "host_cache_hit_rate": last.get("host_cache_hits", 0) / look if look else None}
    for k in ("peak_rss_mib", "peak_pss_mib", "peak_pss_mib_total"):
        if k in m:
            out[f"metrics_{k}"] = m[k]
    return out
