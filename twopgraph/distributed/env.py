"""torchrun environment detection and an explicitly managed process group (nanoGPT style).

torchrun sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``
and ``MASTER_PORT`` for each worker, and ``TORCHELASTIC_RESTART_COUNT`` (how many times it
restarted the group, ``--max-restarts``); :func:`detect` reads them (no variables = one process,
rank 0 of 1). :func:`job_started` says when the torchrun job began (its agent, this worker's
parent, started), so a restarted rank knows which files of ``--out`` its job wrote
(:func:`written_in_job`). :func:`lost_peer` words the failure of a collective.
:func:`rank_device` and :func:`rank_plan` say which GPU and how many CPU threads a rank takes.
:func:`process_group` initialises the default group (NCCL for CUDA devices, gloo
for CPU) with a bounded ``timeout`` and always destroys it on exit: a collective that waits
longer than ``timeout`` for a rank that died or hung raises instead of blocking forever.

NCCL: a collective that fails or times out is seen by ProcessGroupNCCL's watchdog thread,
which by default (``TORCH_NCCL_ASYNC_ERROR_HANDLING`` 3 in torch 2.x, and 1 as torchrun sets
it) takes the whole process down (SIGABRT) instead of raising in Python. :data:`NCCL_ENV`
(:func:`nccl_env_defaults`: set where the user set nothing, by ``--nproc``'s torchrun agent
and by :func:`process_group` for an NCCL group) asks for mode 2, "CleanUpOnly": the watchdog
aborts the communicators (a GPU stream stuck on a dead or frozen peer is released) and leaves
the process alive; the next use of the group then raises in the Python thread ("NCCL
communicator was aborted on rank R. Original reason for failure was: ... Watchdog caught
collective operation timeout ..."), which :func:`peer_error` maps to the one-line
:class:`~twopgraph.errors.PeerLost` as it does gloo's errors. ``TORCH_NCCL_BLOCKING_WAIT`` is
left alone: it turns the watchdog's handling off and only protects host threads that
``wait()`` on a collective, while DDP's gradient all-reduce is waited for by the GPU stream.
With a torchrun of your own, ``export TORCH_NCCL_ASYNC_ERROR_HANDLING=2`` for the same.

Example::

    >>> env = detect({})          # not under torchrun
    >>> env.rank, env.world_size, env.is_main
    (0, 1, True)
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from twopgraph.config import resolve_device
from twopgraph.errors import ConfigError, PeerLost
from twopgraph.pipeline.loader import ThreadPlan, available_cores

log = logging.getLogger("twopgraph")
# Longest collective timeout accepted (a week; ``timedelta`` overflows on huge values).
MAX_TIMEOUT_S = 7 * 24 * 3600
#: Set by torchrun in each worker: how many times it restarted the group (``--max-restarts``).
RESTART_COUNT_ENV = "TORCHELASTIC_RESTART_COUNT"
# "[.../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error ...": raised by gloo itself
_GLOO_ERROR = re.compile(r"\[[^\]]*gloo/[^\]]*:\d+\]")
#: What NCCL (through ProcessGroupNCCL) says when a collective failed or timed out: its error
#: codes of a failed call ("NCCL error in: .../ProcessGroupNCCL.cpp:1970, unhandled system
#: error ... ncclSystemError: ..."), the watchdog's timeout, a communicator the watchdog
#: aborted. Not ncclInvalidUsage (a bug, e.g. two ranks on one GPU: it keeps its traceback).
NCCL_ERROR = re.compile(r"NCCL error|ncclRemoteError|ncclSystemError|ncclInternalError|"
                        r"ncclUnhandledCudaError|Watchdog caught collective operation timeout|"
                        r"NCCL communicator was aborted|Some NCCL operations have failed|"
                        r"ProcessGroupNCCL\.cpp:\d+\].*(error|timeout|abort)|"
                        r"NCCL watchdog thread terminated", re.IGNORECASE)
# NCCL refusing how it is used ("ncclInvalidUsage ... Duplicate GPU detected"): not a peer
_NCCL_MISUSE = re.compile(r"ncclInvalidUsage|ncclInvalidArgument|Duplicate GPU detected")
# How a failed collective says why: the peer's connection went away (it died) ...
_CONNECTION_LOST = re.compile(r"connection (reset|closed|refused|aborted|lost)|closed by "
                              r"(remote )?peer|broken pipe|remote process exit(ed|ing)|socket "
                              r"closed|end of file|\bEOF\b|ncclRemoteError", re.IGNORECASE)
# ... or it did not answer in time (alive but hung, or still working)
_TIMED_OUT = re.compile(r"timed? ?out|timeout", re.IGNORECASE)
#: The environment ProcessGroupNCCL reads at its creation, as twopgraph wants it where the
#: user set nothing (:func:`nccl_env_defaults`; see the module docstring): on a failed or
#: timed-out collective the watchdog aborts the communicators, not the process.
NCCL_ENV = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2"}


@dataclass(frozen=True)
class DistEnv:
    """This process' place in the job: ``rank`` of ``world_size``, ``local_rank`` of
    ``local_world_size`` on its machine, and the attempt: ``restart_count`` restarts of the
    group by torchrun (``--max-restarts``) came before it."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    #: how many times torchrun restarted the group so far (0: the first attempt)
    restart_count: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def detect(environ: Mapping[str, str] | None = None) -> DistEnv:
    """The torchrun variables of ``environ`` (default ``os.environ``), validated."""
    env = os.environ if environ is None else environ
    if "RANK" not in env and "WORLD_SIZE" not in env:
        return DistEnv()
    try:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        local_rank = int(env.get("LOCAL_RANK", rank))
        local_world = int(env.get("LOCAL_WORLD_SIZE", world))
        restarts = int(env.get(RESTART_COUNT_ENV, 0))
    except (KeyError, ValueError):
        raise ConfigError(f"RANK and WORLD_SIZE must both be set to integers (as torchrun "
                          f"does), and {RESTART_COUNT_ENV} too if set") from None
    if not (world >= 1 and 0 <= rank < world and 0 <= local_rank < local_world
            and restarts >= 0):
        raise ConfigError(f"inconsistent torchrun environment: RANK={rank} WORLD_SIZE={world} "
                          f"LOCAL_RANK={local_rank} LOCAL_WORLD_SIZE={local_world} "
                          f"{RESTART_COUNT_ENV}={restarts}")
    return DistEnv(rank, world, local_rank, local_world, restarts)


def job_started(pid: int | None = None) -> float | None:
    """When the torchrun job of this worker began, in seconds since the epoch: the start of
    its agent, the worker's parent (``pid``, default ``os.getppid()``), which lives through
    every restart of the group. From Linux ``/proc`` (to about a second: the boot time is
    whole seconds); None elsewhere or when it cannot be read."""
    pid = os.getppid() if pid is None else pid
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
        ticks = int(stat[stat.rindex(")") + 2:].split()[19])  # field 22: starttime
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def written_in_job(path: str | os.PathLike) -> bool:
    """Whether the file ``path`` was last written since this worker's torchrun job started
    (:func:`job_started`); False if it is missing or the job's start cannot be read."""
    job = job_started()
    try:
        return job is not None and os.stat(path).st_mtime >= job
    except OSError:
        return False


def rank_device(name: str, env: DistEnv) -> torch.device:
    """The device of this rank: ``auto``/``cuda`` -> ``cuda:LOCAL_RANK`` when CUDA is there
    (``auto`` falls back to cpu); ``cpu`` is taken as given, and so is ``cuda:N`` with one
    rank on this machine. ``cuda:N`` with several local ranks (``LOCAL_WORLD_SIZE`` > 1)
    would put all of them on one GPU (NCCL refuses: "Duplicate GPU detected"): a one-line
    :class:`~twopgraph.errors.ConfigError` (names are checked by
    :func:`~twopgraph.config.resolve_device`)."""
    device = resolve_device(name)
    if device.type != "cuda":
        return device
    if device.index is None:  # one GPU per local rank
        if env.local_rank >= torch.cuda.device_count():
            raise ConfigError(f"local rank {env.local_rank} but only "
                              f"{torch.cuda.device_count()} CUDA devices")
        return torch.device("cuda", env.local_rank)
    if env.local_world_size > 1:
        raise ConfigError(f"--device {name} would put all {env.local_world_size} ranks of this "
                          f"machine on one GPU; use --device cuda (each rank takes "
                          f"cuda:LOCAL_RANK), and CUDA_VISIBLE_DEVICES to choose the GPUs")
    return device


def nccl_env_defaults(environ: dict | None = None) -> dict:
    """Set :data:`NCCL_ENV` in ``environ`` (default ``os.environ``) where the user set
    nothing (a value of the user's is kept); before ProcessGroupNCCL is created (it reads
    them then), or in torchrun's agent, whose workers inherit them. Returns what was set."""
    env = os.environ if environ is None else environ
    done = {}
    for k, v in NCCL_ENV.items():
        if k not in env:
            env[k] = done[k] = v
    return done


@contextlib.contextmanager
def process_group(env: DistEnv, device: torch.device, timeout_s: float) -> Iterator[str]:
    """Initialise the default process group for ``env`` (``nccl`` on CUDA, ``gloo`` on CPU)
    and destroy it on exit, whatever happens. Yields the backend name. A group that torchrun
    restarted (``env.restart_count`` > 0) keeps its keys apart from the attempts before it
    in torchrun's store."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) \
            or not (0 < timeout_s <= MAX_TIMEOUT_S):  # NaN and inf fail too
        raise ConfigError(f"dist-timeout must be a positive number of seconds (at most a week), "
                          f"got {timeout_s!r}")
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
        nccl_env_defaults()  # a failed collective raises here, not SIGABRT (module docstring)
    kwargs = {}
    if "MASTER_ADDR" not in os.environ:  # one process outside torchrun: a private store
        kwargs["store"] = dist.HashStore()
    elif env.restart_count and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        # torchrun's agent keeps one store through its restarts, and the process group's
        # keys of the attempt before (each rank's address) are still in it: a rank that read
        # those would connect to a dead peer. Each attempt gets keys of its own.
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                              env.world_size, is_master=False,
                              timeout=datetime.timedelta(seconds=timeout_s))
        kwargs["store"] = dist.PrefixStore(f"twopgraph/attempt_{env.restart_count}", store)
    dist.init_process_group(backend, rank=env.rank, world_size=env.world_size,
                            timeout=datetime.timedelta(seconds=timeout_s),
                            **({"device_id": device} if backend == "nccl" else {}), **kwargs)
    try:
        yield backend
        dist.barrier()  # leave together: no rank tears down while a peer still talks to it
    finally:
        dist.destroy_process_group()


def peer_error(env: DistEnv, timeout_s: float, e: RuntimeError) -> PeerLost | None:
    """:func:`lost_peer` of a failed collective ``e``, or None if ``e`` is not one (a bug:
    it keeps its traceback). A ``DistError`` is one; so is a plain ``RuntimeError`` from gloo
    or NCCL: DDP hands gloo's transport errors (a killed peer: "Connection reset by peer")
    and NCCL's (a communicator its watchdog aborted, "ncclRemoteError", ...) through autograd
    as plain RuntimeErrors, recognised by gloo's own source location, or NCCL's texts
    (:data:`NCCL_ERROR`), which no error of twopgraph carries. NCCL refusing its use
    ("ncclInvalidUsage", "Duplicate GPU detected") is a bug, whatever its type."""
    text = str(e)
    if _NCCL_MISUSE.search(text):  # e.g. two ranks on one GPU: a bug, not a lost peer
        return None
    if isinstance(e, dist.DistError) or _GLOO_ERROR.match(text) or NCCL_ERROR.search(text):
        return lost_peer(env, timeout_s, e)
    return None


def lost_peer(env: DistEnv, timeout_s: float, e: BaseException) -> PeerLost:
    """The one line of a failed collective ``e`` on rank ``env.rank`` (``timeout_s``: the
    group's timeout, seconds): a peer that died (its connection was lost) is not reported as
    a peer that did not answer in time, nor the other way round; ``timed_out`` says which."""
    text = str(e).strip()
    first = (text.splitlines() or [""])[0][:200]
    timed_out = False
    if _CONNECTION_LOST.search(text):
        what = "another rank failed (connection lost)"
    elif isinstance(e, TimeoutError) or _TIMED_OUT.search(text):
        what = f"another rank did not answer within {timeout_s:g} s (--dist-timeout)"
        timed_out = True
    else:
        what = f"another rank failed or did not answer within {timeout_s:g} s"
    return PeerLost(f"rank {env.rank}/{env.world_size}: {what}; stopping "
                    f"({type(e).__name__}: {first})", timed_out=timed_out, timeout_s=timeout_s)


def rank_plan(threads: int, device, env: DistEnv, prefetch: int = 2,
              cores: int | None = None) -> ThreadPlan:
    """How this rank spends its CPU threads (:class:`~twopgraph.pipeline.loader.ThreadPlan`),
    logged once per rank.

    ``--threads N`` (``threads`` > 0) is taken as given, per rank
    (:meth:`ThreadPlan.for_threads`). Else (0) the machine's ``cores`` (default: the cores
    this process may use) are shared fairly among its ``LOCAL_WORLD_SIZE`` ranks, on CUDA as
    on CPU: each rank's torch compute threads plus sampling workers make its share
    ``max(1, cores // local ranks)``, so the ranks together keep at most ``cores`` threads
    busy (one each when there are more ranks than cores). On CUDA the model computes on the
    GPU and the host's threads mostly feed it, so the share favours sampling workers (about
    three quarters) over torch compute threads; on CPU the other way round
    (:meth:`ThreadPlan.for_rank`). torchrun's ``OMP_NUM_THREADS=1`` is thereby replaced by
    the share's torch threads, not by every core."""
    if threads:
        plan = ThreadPlan.for_threads(threads, prefetch)
        why = "--threads"
    else:
        cores = int(cores or available_cores())
        plan = ThreadPlan.for_rank(env.local_world_size, device.type == "cuda", prefetch,
                                   cores)
        why = f"{cores} cores / {env.local_world_size} local ranks"
    log.info("rank %d: %d threads (%s): %d torch compute, %d sampling workers%s", env.rank,
             plan.total, why, plan.compute, plan.workers,
             "" if plan.background else ", no prefetch thread")
    return plan
