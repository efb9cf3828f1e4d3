"""The result record every benchmark writes: one JSON object per measured row, with what was
measured, on what, by which code.

A record (one line of the ``--json`` file; keys in this order)::

    {"benchmark": "sampling",               # the benchmark's name (`twopgraph bench NAME`)
     "params": {...},                       # its options and the row's own keys
     "figures": {...},                      # the measured values: the median over the repeats
     "spread": {"sample_epoch_s": [0.41, 0.47], ...},   # min and max over the repeats
     "repeat": 3,                           # how many repeats the figures summarise
     "time": "2024-05-01T12:00:00Z",        # when the benchmark finished (UTC)
     "machine": {"host", "cpu_count", "cpu_model", "memory_gib", "gpu"},
     "versions": {"python", "torch", "numpy", "numba", "twopgraph", "dgl"?},
     "commit": "9e82147..." | null,         # git HEAD of the source tree, null outside git
     "dirty": false | true | null}          # whether tracked files differed from HEAD

``spread`` holds every number of ``figures`` (``bool`` excluded); with one repeat its min and
max are the figure itself. ``versions["dgl"]`` is there when a DGL peer ran (its own report).
The figures' units are in their names (``_s`` seconds, ``_mib`` MiB, ``_bytes`` bytes,
``_per_s`` per second) or in the benchmark's docstring. Nothing here imports torch or numba
(:func:`versions` reads the installed distributions' metadata).

Example::

    >>> rec = make_record("demo", {"n": 1}, [{"t_s": 2.0}, {"t_s": 1.0}, {"t_s": 4.0}])
    >>> rec["figures"], rec["spread"], rec["repeat"]
    ({'t_s': 2.0}, {'t_s': [1.0, 4.0]}, 3)
"""

from __future__ import annotations

import functools
import json
import os
import platform
import socket
import statistics
import subprocess
import time
from importlib import metadata
from pathlib import Path

from twopgraph.core.files import atomic_write_bytes

#: the distributions whose versions every record carries (``None`` when not installed)
VERSIONED = ("torch", "numpy", "numba", "twopgraph")
_GIB = 2 ** 30


def is_number(v: object) -> bool:
    """Whether ``v`` is a figure that has a median: an int or a float, not a bool."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def summarise(repeats: list[dict]) -> tuple[dict, dict]:
    """``(figures, spread)`` of the same row measured once per repeat (``repeats``: one dict
    of figures each, in order): every number the median of its repeats (``spread``: ``[min,
    max]``), anything else (lists, strings, nested dicts) the last repeat's value. A figure
    missing from some repeats summarises the repeats that have it."""
    if not repeats:
        raise ValueError("no repeat to summarise")
    figures, spread = {}, {}
    for key in dict.fromkeys(k for r in repeats for k in r):
        values = [r[key] for r in repeats if key in r]
        nums = [v for v in values if is_number(v)]
        if nums and len(nums) == len(values):
            med = statistics.median(nums)
            if all(isinstance(v, int) for v in nums) and med == int(med):
                med = int(med)
            figures[key] = med
            spread[key] = [min(nums), max(nums)]
        else:
            figures[key] = values[-1]
    return figures, spread


@functools.lru_cache(maxsize=1)
def machine() -> dict:
    """The machine: ``host`` (host name), ``cpu_count`` (CPUs this process may use),
    ``cpu_model`` (``/proc/cpuinfo``'s model name, else the platform's processor),
    ``memory_gib`` (physical memory, GiB; None where unknown) and ``gpu`` (``[{"name",
    "memory_gib"}]`` of the visible NVIDIA GPUs from ``nvidia-smi``, None without)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return {"host": socket.gethostname(), "cpu_count": cpus, "cpu_model": _cpu_model(),
            "memory_gib": _memory_gib(), "gpu": _gpus()}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / _GIB, 2)
    except (ValueError, OSError, AttributeError):
        return None


def _gpus() -> list[dict] | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total",
                              "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    gpus = []
    for line in out.stdout.splitlines() if out.returncode == 0 else []:
        name, _, mib = line.rpartition(",")
        if name.strip():
            try:
                gpus.append({"name": name.strip(), "memory_gib": round(float(mib) / 1024, 2)})
            except ValueError:
                gpus.append({"name": line.strip(), "memory_gib": None})
    return gpus or None


def versions(peers: dict | None = None) -> dict:
    """``python`` and the :data:`VERSIONED` distributions' versions (None when not
    installed), plus ``peers`` (``{"dgl": "1.1.3"}``: what a peer run reported)."""
    out = {"python": platform.python_version()}
    for dist in VERSIONED:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    out.update(peers or {})
    return out


#: where the committed result files live: rewriting them does not make the code "dirty"
RESULTS_DIR = "benchmarks/results"


def _git(*args: str, src: Path | None = None) -> subprocess.CompletedProcess:
    src = src or Path(__file__).resolve().parents[2]
    return subprocess.run(["git", "-C", str(src), *args], capture_output=True, text=True,
                          timeout=20, check=False)


def tree_dirty(src: Path | None = None) -> bool | None:
    """Whether tracked files of the git tree at ``src`` (default: twopgraph's source tree)
    differ from its HEAD, the result files under :data:`RESULTS_DIR` excepted (a benchmark
    rewriting them is not a change of the code measured); None when git cannot tell."""
    try:
        r = _git("diff", "--quiet", "HEAD", "--", ".", f":(exclude){RESULTS_DIR}", src=src)
    except (OSError, subprocess.SubprocessError):
        return None
    return {0: False, 1: True}.get(r.returncode)


@functools.lru_cache(maxsize=1)
def commit() -> str | None:
    """``git rev-parse HEAD`` of the source tree twopgraph is imported from; None outside a
    git checkout or without git."""
    try:
        head = _git("rev-parse", "HEAD")
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() or None if head.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def dirty() -> bool | None:
    """Whether tracked files of the source tree differ from :func:`commit` (the figures may
    come from uncommitted code; the result files excepted: :func:`tree_dirty`); None without
    a commit."""
    if commit() is None:
        return None
    return tree_dirty()


def make_record(benchmark: str, params: dict, repeats: list[dict],
                peers: dict | None = None) -> dict:
    """The record of one row: ``repeats`` are its figures, one dict per repeat
    (:func:`summarise`); ``peers``: peer versions for :func:`versions`."""
    figures, spread = summarise(repeats)
    return {"benchmark": benchmark, "params": params, "figures": figures, "spread": spread,
            "repeat": len(repeats), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": machine(), "versions": versions(peers), "commit": commit(),
            "dirty": dirty()}


def append_jsonl(path: str | Path, records: list[dict]) -> None:
    """Append ``records`` to the JSON-lines file ``path`` (its folder made), one per line:
    the file is rewritten whole (atomically), so a run stopped while writing leaves the
    previous lines intact and no half line."""
    path = Path(path)
    old = path.read_bytes() if path.is_file() else b""
    if old and not old.endswith(b"\n"):
        old += b"\n"
    new = "".join(json.dumps(r, default=_jsonable) + "\n" for r in records).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, lambda f: f.write(old + new))


def _jsonable(v: object):
    """JSON for the values a figure may hold beyond JSON's own: numpy scalars and arrays,
    paths, sets."""
    if hasattr(v, "tolist"):
        return v.tolist()
    if isinstance(v, (set, frozenset, tuple)):
        return list(v)
    return str(v)


def dumps(record: dict) -> str:
    """One record as one JSON line (numpy values converted)."""
    return json.dumps(record, default=_jsonable)
