"""Memory of this process and of its host, measured: peak resident set, proportional set
size (sampled by :class:`PssMonitor`), and the bytes still available under the cgroup limit.

``peak_rss_mib`` is the process's peak resident set (``ru_maxrss``: pages of shared
memory maps count in full in every process that touched them); ``peak_pss_mib`` its peak
*proportional* set size (``Pss`` of ``/proc/self/smaps_rollup``: a page shared by k processes
counts 1/k in each), sampled by :class:`PssMonitor` -- the sum over the ranks of a machine is
what they hold together, shared memory-mapped stores counted once.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Self


def peak_rss_mib() -> float | None:
    """Peak resident memory of this process so far, MiB (None where unsupported)."""
    try:
        import resource
    except ImportError:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


SMAPS_ROLLUP = "/proc/self/smaps_rollup"


def current_pss_mib(path: str = SMAPS_ROLLUP) -> float | None:
    """This process's proportional set size now, MiB (the ``Pss:`` line of ``smaps_rollup``,
    in kB); None where ``/proc`` has no such file (not Linux, or a kernel before 4.14)."""
    try:
        with open(path, "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None


#: the PSS thread waits at least this many times its last read's duration between reads
PSS_COST_RATIO = 25


class PssMonitor:
    """Peak proportional set size of this process (see the module doc), sampled every
    ``interval`` seconds (default 0.2) by a daemon thread between :meth:`start` and
    :meth:`stop` (also a context manager). ``peak_mib`` is None where PSS cannot be read.
    Cost: one read of ``/proc/self/smaps_rollup`` per sample; the kernel walks the page tables
    of every mapping, so a read grows with the memory mapped: about 0.1 ms for a small
    process, 22 ms for one that has synthetic-products' 5.6 GiB store mapped and touched.
    The thread therefore waits at least :data:`PSS_COST_RATIO` times its last read's duration
    between samples (at most 4% of one core).

    Example::

        >>> with PssMonitor() as mon:                       # doctest: +SKIP
        ...     train(cfg)
        >>> mon.peak_mib                                    # doctest: +SKIP
        812.4
    """

    def __init__(self, interval: float = 0.2, path: str = SMAPS_ROLLUP) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval!r}")
        self.interval, self.path = float(interval), path
        self._peak: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def sample(self) -> float | None:
        """Read PSS once, raising the peak; returns the value read (None if unreadable)."""
        v = current_pss_mib(self.path)
        if v is not None:
            with self._lock:
                if self._peak is None or v > self._peak:
                    self._peak = v
        return v

    @property
    def peak_mib(self) -> float | None:
        """The highest PSS seen so far (a sample is taken now, so it is never stale)."""
        self.sample()
        with self._lock:
            return self._peak

    def start(self) -> Self:
        if self._thread is None and self.sample() is not None:  # no /proc: no thread
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="twopgraph-pss",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> float | None:
        """Stop sampling; returns :attr:`peak_mib`."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        return self.peak_mib

    def _loop(self) -> None:
        wait = self.interval
        while not self._stop.wait(wait):
            t = time.perf_counter()
            self.sample()
            wait = max(self.interval, PSS_COST_RATIO * (time.perf_counter() - t))

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


_PROCESS_MONITOR: PssMonitor | None = None
_PROCESS_LOCK = threading.Lock()


def process_pss_monitor() -> PssMonitor:
    """This process's :class:`PssMonitor`, started on the first call and sampling until the
    process ends (like ``ru_maxrss``, its peak covers the process's life since then): call it
    once when a run starts, and report ``process_pss_monitor().peak_mib``."""
    global _PROCESS_MONITOR
    with _PROCESS_LOCK:
        if _PROCESS_MONITOR is None:
            _PROCESS_MONITOR = PssMonitor().start()
        return _PROCESS_MONITOR


#: Bytes every reading of :func:`available_host_bytes` / :func:`fillable_host_bytes` leaves
#: out: memory the run must keep free (set by the memory governor,
#: :mod:`twopgraph.runtime.governor`, through :func:`reserve_host_bytes`; 0 otherwise).
_RESERVED = 0


def reserve_host_bytes(n: int) -> int:
    """Keep ``n`` bytes out of every later reading of the memory this process can fill (its
    safety margin and the library pages it needs resident), so that each memory decision
    sized from those readings (evaluation passes, read-ahead, caches) leaves them free.
    Returns the reserve it replaces."""
    global _RESERVED
    old, _RESERVED = _RESERVED, max(0, int(n))
    return old


def reserved_host_bytes() -> int:
    """The reserve set by :func:`reserve_host_bytes` (0 if none)."""
    return _RESERVED


def file_resident_bytes(path: str = "/proc/self/status") -> int | None:
    """This process's resident file-backed pages now (``RssFile``, bytes): at start, the
    shared libraries' pages it uses (torch, numba) -- page cache a memory cgroup charges and
    that must stay resident for the process to make progress."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("RssFile:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def meminfo_bytes(key: str, proc: str = "/proc") -> int | None:
    """The ``key`` line of ``/proc/meminfo`` (e.g. ``MemAvailable``), bytes; None if unread."""
    try:
        with open(f"{proc}/meminfo") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def memory_cgroups(proc: str = "/proc", cgroup: str = "/sys/fs/cgroup",
                   ) -> list[tuple[Path, str]]:
    """The memory cgroup folders of this process (``/proc/self/cgroup``), each with its
    version: ``(folder, "v1")`` for the ``memory`` controller's line, ``(folder, "v2")`` for
    the unified hierarchy's. Empty where none can be read (not Linux)."""
    try:
        with open(f"{proc}/self/cgroup") as f:
            lines = [ln.strip().split(":", 2) for ln in f if ln.count(":") >= 2]
    except OSError:
        return []
    found = []
    for _, ctrls, path in lines:
        if "memory" in ctrls.split(","):
            found.append((Path(f"{cgroup}/memory{path}"), "v1"))
        elif ctrls == "":
            found.append((Path(f"{cgroup}{path}"), "v2"))
    return found


def fillable_host_bytes(proc: str = "/proc", cgroup: str = "/sys/fs/cgroup") -> int | None:
    """Bytes this process's anonymous memory could grow to if the page cache gave way:
    :func:`available_host_bytes` with the *active* file pages counted as reclaimable too
    (``total_active_file`` / ``active_file`` of its cgroup). For a table whose pages would
    be hot anyway (updated at random), which the kernel could only write back and read again
    from a scratch file."""
    return available_host_bytes(proc, cgroup, active_file=True)


def available_host_bytes(proc: str = "/proc", cgroup: str = "/sys/fs/cgroup", *,
                         active_file: bool = False) -> int | None:
    """Bytes of host memory this process can still fill: ``MemAvailable`` of
    ``/proc/meminfo`` (the kernel's estimate, reclaimable page cache included), capped by the
    limit of this process's memory cgroup when it has one -- v1 (``memory:`` line of
    ``/proc/self/cgroup``): ``memory.limit_in_bytes - memory.usage_in_bytes +
    total_inactive_file`` (usage counts the page cache, whose inactive file pages are
    reclaimed first); v2: ``memory.max - memory.current + inactive_file``; less the reserve
    of :func:`reserve_host_bytes`. ``None`` when none of them can be read (not Linux)."""
    found: list[int] = []
    if (avail := meminfo_bytes("MemAvailable", proc)) is not None:
        found.append(avail)
    for d, version in memory_cgroups(proc, cgroup):
        names = (("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file",
                  "total_active_file") if version == "v1" else
                 ("memory.max", "memory.current", "inactive_file", "active_file"))
        try:
            limit_s = (d / names[0]).read_text().strip()
            if limit_s == "max":
                continue
            limit, usage = int(limit_s), int((d / names[1]).read_text())
            inactive = 0
            for line in (d / "memory.stat").read_text().splitlines():
                key, _, val = line.partition(" ")
                if key == names[2] or (active_file and key == names[3]):
                    inactive += int(val)
        except (OSError, ValueError):
            continue
        if limit < 1 << 60:  # v1 writes "no limit" as ~2**63
            found.append(max(0, limit - usage + inactive))
    return max(0, min(found) - _RESERVED) if found else None
