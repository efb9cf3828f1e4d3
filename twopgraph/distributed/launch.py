"""``twopgraph train --partitions DIR --nproc P``: start ``torchrun`` on this machine.

The command line is passed on unchanged except ``--nproc``, so each worker runs
``python -m twopgraph train --partitions DIR ...`` under ``torchrun --standalone
--nproc-per-node P`` (one machine; for several machines call torchrun yourself, see the README).

Errors reach the user as one line, not as torchrun's traceback: the torchrun agent runs in a
small wrapper (``python -m twopgraph.distributed.launch <torchrun arguments>``, :func:`agent_main`)
that keeps the agent's own log lines quiet and, when workers fail, writes what torchrun knows of
them (rank, pid, exit code or signal) to a report file instead of raising
``ChildFailedError``. A worker that stops on a user error (a
:class:`~twopgraph.errors.TwopgraphError`: a damaged part, a lost peer, ...) writes its one-line
message to a file of the same temporary folder (:func:`report_rank_error`; the folder is passed
in the environment variable :data:`ERROR_DIR_ENV`) and exits quietly. :func:`launch` then
prints one line for the failure that came first:

* a rank that stopped answering: another rank reported that a collective timed out
  (``--dist-timeout``: a :class:`~twopgraph.errors.PeerLost` with ``timed_out``) and this one
  reported nothing and had to be killed -- ``rank R (pid N) stopped answering (...): rank Q
  waited longer than --dist-timeout S s in a collective``; the exit code of the rank that
  timed out (2). A rank whose process is stopped (SIGSTOP, Ctrl-Z: state ``T``) cannot honour
  torchrun's SIGTERM, so the launcher kills it as soon as a peer reports the timeout
  (:func:`_kill_frozen`) instead of torchrun 30 s later;
* else a worker that NCCL's watchdog took down (killed by SIGABRT, with the watchdog's text
  on the job's stderr, which the launcher passes through unchanged and watches:
  :mod:`twopgraph.distributed.watchdog`): ``rank R (pid N) was stopped by NCCL's watchdog
  (SIGABRT): a collective did not finish within --dist-timeout (...)`` or ``... a collective failed
  (...)``; exit code 2, as a lost peer's. With twopgraph's default
  ``TORCH_NCCL_ASYNC_ERROR_HANDLING=2`` (set in the agent, see
  :mod:`twopgraph.distributed.env`) the watchdog aborts the communicators instead and the
  rank words the error itself; this covers a user's own setting and a watchdog that hung;
* else a worker killed by a signal (other than the SIGTERM with which torchrun stops the
  others): ``rank R (pid N) was killed by signal SIGKILL``; exit code ``128 + signal``;
* else the earliest user error of a worker, as the worker worded it; its exit code (2, or 3
  for a diverged run);
* else a worker that crashed (a bug: its traceback is above); exit code 1;
* else, the agent itself killed by a signal (its workers stop with it, see below):
  ``torchrun's agent was killed by signal SIGKILL ...``; exit code ``128 + signal``.

Bugs keep their traceback: a worker's own traceback is printed by the worker, and an error of
torchrun itself (not a worker failure) by the wrapper.

Stop signals (SIGINT, SIGTERM, SIGHUP) sent to the launcher are passed on to the agent, which
stops every worker with the same signal; the workers stop quietly at their next safe point
(rank 0 marks ``metrics.json`` ``interrupted``), the launcher waits for them within
:data:`STOP_GRACE_S`, kills any left, and the CLI prints one line (``twopgraph: stopped by
SIGTERM ...``; exit 128 + signal, 130 for SIGINT). See :func:`launch`.

A launcher killed without a chance to pass anything on (``kill -9``, the OOM killer) takes the
job with it: the agent wrapper and every worker ask the kernel for a parent-death signal
(:func:`die_with_parent`, Linux ``prctl(PR_SET_PDEATHSIG, SIGTERM)``), so the agent stops the
workers as for a SIGTERM, and a worker whose agent died stops by itself; rank 0 marks
``metrics.json`` ``interrupted`` and the ``--out`` lock is released.

Elastic restarts: ``--max-restarts N`` (:func:`max_restarts_of`) is passed on to torchrun,
which restarts every worker (up to N times) when one fails; a restarted rank resumes from the
job's last checkpoint (:mod:`twopgraph.distributed.trainer`). The failure reported is that of
the last attempt (each rank's error file records its attempt).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from twopgraph.distributed.watchdog import StderrWatch, nccl_abort
from twopgraph.errors import ConfigError, Stopped

# Folder (created by :func:`launch`) where workers report their user errors and the agent
# wrapper its failure report.
ERROR_DIR_ENV = "TWOPGRAPH_ERROR_DIR"
# Set (to anything) to keep the torchrun agent's own log lines (``twopgraph -v`` does).
AGENT_LOGS_ENV = "TWOPGRAPH_AGENT_LOGS"
# The pids that the agent wrapper and the workers must die with (:func:`die_with_parent`):
# the launcher's, set by :func:`launch`, and the agent's, set by :func:`agent_main`.
LAUNCHER_PID_ENV = "TWOPGRAPH_LAUNCHER_PID"
AGENT_PID_ENV = "TWOPGRAPH_AGENT_PID"
# Set by torchrun in each worker: how many times it restarted the group so far.
_RESTART_COUNT_ENV = "TORCHELASTIC_RESTART_COUNT"
_AGENT_REPORT = "agent.json"
# Ranks the launcher found stopped (state T) when a peer timed out, and killed.
_FROZEN_REPORT = "frozen.json"
# The lines of NCCL's watchdog seen on the job's stderr, by rank (:class:`StderrWatch`).
_NCCL_REPORT = "nccl.json"
# Linux prctl option: the signal a process gets when its parent dies.
_PR_SET_PDEATHSIG = 1


def strip_nproc(argv: list[str]) -> list[str]:
    """``argv`` without ``--nproc N`` / ``--nproc=N``."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            out.append(a)
    return out


def torchrun_command(nproc: int, argv: list[str], max_restarts: int = 0) -> list[str]:
    """The torchrun command line that runs ``twopgraph <argv>`` in ``nproc`` workers,
    restarted up to ``max_restarts`` times when one fails (torchrun's ``--max-restarts``)."""
    if nproc < 1:
        raise ConfigError(f"nproc must be >= 1, got {nproc}")
    if max_restarts < 0:
        raise ConfigError(f"max-restarts must be >= 0, got {max_restarts}")
    restarts = [f"--max-restarts={max_restarts}"] if max_restarts else []
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={nproc}", *restarts, "-m", "twopgraph", *strip_nproc(argv)]


def agent_command(nproc: int, argv: list[str], max_restarts: int = 0) -> list[str]:
    """:func:`torchrun_command` with the agent run through :func:`agent_main`."""
    cmd = torchrun_command(nproc, argv, max_restarts)
    return [cmd[0], "-m", "twopgraph.distributed.launch", *cmd[3:]]


def max_restarts_of(argv: list[str]) -> int:
    """``--max-restarts N`` of the ``train`` command line ``argv`` (0 when absent), read by
    argparse's rules as the CLI reads it (the last one given wins; an abbreviation such as
    ``--max-r`` counts). The CLI has validated the value already."""
    from twopgraph.config import DistConfig, add_section_arguments
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    add_section_arguments(parser, DistConfig)
    try:
        ns, _ = parser.parse_known_args(argv)
    except (argparse.ArgumentError, SystemExit):
        return 0
    value = getattr(ns, "max_restarts", 0)
    return value if isinstance(value, int) and value > 0 else 0


#: The signals the launcher passes on to the job: torchrun's agent stops every rank with the
#: same signal (each rank stops at its next safe point: rank 0 marks ``metrics.json``
#: ``interrupted``, the lock is released, the last checkpoint kept), then exits.
FORWARDED_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP")
                          if hasattr(signal, n))
#: Seconds the launcher waits for the job to stop after passing a signal on (torchrun's agent
#: gives the ranks 30 s, then kills them); then it kills the agent and every rank left.
STOP_GRACE_S = 60.0


def launch(nproc: int, argv: list[str], grace_s: float | None = None) -> int:
    """Run ``twopgraph <argv>`` in ``nproc`` torchrun workers; returns the exit code (0, or
    that of the failure reported, see the module docstring: torchrun stops the other workers
    when one fails, and with ``--max-restarts N`` in ``argv`` starts them all again, up to N
    times, before it gives up).

    SIGINT, SIGTERM and SIGHUP sent to the launcher (:data:`FORWARDED_SIGNALS`; Ctrl-C, ``kill``,
    ``timeout``, a batch scheduler, a closed terminal) are passed on to torchrun's agent --
    which runs in a session of its own, so a terminal's signal reaches it once, through the
    launcher -- and the agent stops every rank with it. The launcher waits for the job at most
    ``grace_s`` seconds (:data:`STOP_GRACE_S`), kills what is left (agent and ranks), and
    raises :class:`~twopgraph.errors.Stopped` (``KeyboardInterrupt`` for SIGINT): the CLI
    prints one line and exits with 128 + the signal. Further signals while it waits are
    ignored."""
    grace_s = STOP_GRACE_S if grace_s is None else float(grace_s)
    max_restarts = max_restarts_of(argv)
    cmd = agent_command(nproc, argv, max_restarts)
    errdir = Path(tempfile.mkdtemp(prefix="twopgraph-launch-"))
    env = dict(os.environ, **{ERROR_DIR_ENV: str(errdir), LAUNCHER_PID_ENV: str(os.getpid())})
    env.pop(AGENT_PID_ENV, None)
    if any(a in ("-v", "--verbose") for a in argv):
        env[AGENT_LOGS_ENV] = "1"
    forward = threading.current_thread() is threading.main_thread()
    received: list[int] = []
    previous: dict = {}
    proc = None
    watch = None
    try:
        # a session of its own: only the launcher passes signals on (torchrun's agent would
        # cut its own shutdown short on a second one). Its stderr (and its workers') comes
        # through the launcher, unchanged, watched for NCCL's watchdog (StderrWatch).
        proc = subprocess.Popen(cmd, env=env, start_new_session=True, stderr=subprocess.PIPE)
        watch = StderrWatch(proc.stderr)
        if forward:
            def on_signal(signum, frame):
                if not received:
                    received.append(signum)
                    with contextlib.suppress(OSError):
                        proc.send_signal(signum)
            previous = {sig: signal.signal(sig, on_signal) for sig in FORWARDED_SIGNALS}
        try:
            code = _wait(proc, received, grace_s, errdir)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        watch.join(timeout=5.0)  # the job's last words are out before ours
        if received:
            sig = received[0]
            if sig == signal.SIGINT:
                raise KeyboardInterrupt
            raise Stopped(sig)
        if code == 0:
            return 0
        watch.save(errdir / _NCCL_REPORT)
        line, code = _failure(errdir, code, attempt=max_restarts)
        if line and max_restarts:
            line += (f" (the last of {max_restarts + 1} attempts: --max-restarts "
                     f"{max_restarts})")
        if line:
            print(f"twopgraph: error: {line}", file=sys.stderr, flush=True)
        return code
    except BaseException:
        if proc is not None and proc.poll() is None:  # e.g. a bug above: leave nothing behind
            _kill_job(proc, _descendants(proc.pid))
        raise
    finally:
        if watch is not None:
            watch.join(timeout=1.0)
        shutil.rmtree(errdir, ignore_errors=True)


def _wait(proc: subprocess.Popen, received: list, grace_s: float,
          errdir: Path | None = None) -> int:
    """Wait for the agent; once a signal was passed on, for at most ``grace_s`` seconds
    more, then kill the agent and its ranks. Returns the agent's exit code. The ranks are
    in sessions of their own (torchrun's): they are looked up while the agent lives, and
    any still alive when it has exited are killed too. Meanwhile, when a rank reports in
    ``errdir`` that a collective timed out, the ranks found stopped are killed
    (:func:`_kill_frozen`)."""
    ranks: set[int] = set()
    deadline = None
    handled: set[int] = set()  # attempts whose timeout was dealt with
    while True:
        if errdir is not None and not received:
            for attempt in _timed_out_attempts(errdir) - handled:
                handled.add(attempt)
                _kill_frozen(errdir, proc.pid, attempt)
        if received and deadline is None:
            deadline = time.monotonic() + grace_s
            ranks |= _descendants(proc.pid)  # while the agent lives
        try:
            code = proc.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            pass
        if deadline is not None and time.monotonic() > deadline:
            _kill_job(proc, ranks)
            code = proc.wait()
            break
    if received:  # a rank that outlived the agent (it should not) does not outlive us
        _kill_job(proc, ranks)
    return code


def _timed_out_attempts(errdir: Path) -> set[int]:
    """The attempts (restart counts) in which a rank reported a collective that timed out."""
    out = set()
    for p in errdir.glob("rank*.json"):
        rec = _read_json(p)
        if isinstance(rec, dict) and rec.get("timed_out"):
            out.add(int(rec.get("attempt", 0)))
    return out


def _kill_frozen(errdir: Path, agent: int, attempt: int) -> None:
    """SIGKILL the workers of ``agent`` (attempt ``attempt``, started by this launcher) whose
    process is stopped (state ``T``: SIGSTOP, Ctrl-Z): they can neither answer their peers
    nor honour torchrun's SIGTERM. Each is recorded in ``errdir/frozen.json`` (rank, pid,
    attempt) for :func:`_failure`."""
    found = []
    for pid in sorted(_descendants(agent)):
        if _state(pid) != "T":
            continue
        env = _environ(pid)
        if env.get(ERROR_DIR_ENV) != str(errdir) or "RANK" not in env:
            continue
        if _attempt(env) != attempt:
            continue
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            found.append({"rank": int(env["RANK"]), "pid": pid, "attempt": attempt})
    if found:
        old = _read_json(errdir / _FROZEN_REPORT)
        with contextlib.suppress(OSError):
            (errdir / _FROZEN_REPORT).write_text(
                json.dumps((old if isinstance(old, list) else []) + found))


def _state(pid: int) -> str | None:
    """The state letter of process ``pid`` (``R``, ``S``, ``T`` stopped, ``Z``, ...)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
        return stat[stat.rindex(")") + 2:].split()[0]
    except (OSError, ValueError, IndexError):
        return None


def _environ(pid: int) -> dict[str, str]:
    """The environment process ``pid`` was started with (empty if it cannot be read)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            items = f.read().decode(errors="replace").split("\0")
    except OSError:
        return {}
    return dict(x.split("=", 1) for x in items if "=" in x)


def _descendants(pid: int) -> set[int]:
    """The pids of every descendant of ``pid`` (Linux ``/proc``; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), ()):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def _kill_job(proc: subprocess.Popen, ranks: set[int]) -> None:
    """SIGKILL the agent and the processes ``ranks`` (those still alive), and wait until the
    ranks are gone (at most a few seconds: a process in uninterruptible sleep may linger)."""
    for pid in ranks | _descendants(proc.pid):
        if _is_twopgraph(pid):  # not a pid reused by another program meanwhile
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            proc.kill()
        proc.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(p) for p in ranks):
        time.sleep(0.05)


def _is_twopgraph(pid: int) -> bool:
    """Whether process ``pid`` runs twopgraph or torch's launcher (its command line)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return False
    return b"twopgraph" in cmdline or b"torch.distributed" in cmdline


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its new parent, does not)."""
    return _state(pid) not in (None, "Z")


def die_with_parent(expected: int, sig: int = signal.SIGTERM) -> bool:
    """Have the kernel send ``sig`` to this process when its parent dies (Linux
    ``prctl(PR_SET_PDEATHSIG)``), the parent being ``expected`` (a pid). If ``expected`` died
    before the request was made (this process was re-parented already: the kernel will not
    signal it), ``sig`` is sent now, as the kernel would have. Returns whether the request
    was made (False off Linux or where ``prctl`` is unavailable: nothing changes).

    The kernel signals when the *thread* that started this process ends: the launcher and
    torchrun's agent start their children from their main thread, which lives as long as
    they do."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(int(sig)), ctypes.c_ulong(0),
                      ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != expected and not _exists(expected):  # it died before we asked
        os.kill(os.getpid(), sig)
    return True


def watch_agent() -> bool:
    """In a worker started by :func:`launch`: stop (SIGTERM, a stop signal the worker
    honours at its next safe point) when torchrun's agent dies, whatever kills it (see
    :func:`die_with_parent`). Does nothing elsewhere (returns False)."""
    agent = os.environ.get(AGENT_PID_ENV, "")
    if not (agent.isdigit() and os.environ.get(ERROR_DIR_ENV) and "RANK" in os.environ):
        return False
    return die_with_parent(int(agent))


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # alive, another user's
        return True
    return True


def report_rank_error(rank: int, error: BaseException) -> bool:
    """In a worker started by :func:`launch`: record ``error``'s one-line message for the
    launcher to print; returns False (nothing recorded) outside such a worker, or if the
    folder cannot be written, in which case the caller prints it itself."""
    folder = os.environ.get(ERROR_DIR_ENV)
    if not folder or not Path(folder).is_dir():
        return False
    rec = {"rank": int(rank), "time": time.time(), "message": str(error),
           "exit_code": int(getattr(error, "exit_code", 2)),
           "attempt": _attempt(os.environ),
           "timed_out": bool(getattr(error, "timed_out", False)),
           "timeout_s": getattr(error, "timeout_s", None)}
    path = Path(folder) / f"rank{int(rank)}.json"
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        tmp.write_text(json.dumps(rec))
        os.replace(tmp, path)
    except OSError:
        return False
    return True


def _attempt(environ) -> int:
    """The attempt of a worker: torchrun's restart count (0 for the first)."""
    try:
        return max(0, int(environ.get(_RESTART_COUNT_ENV, 0)))
    except ValueError:
        return 0


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _failure(errdir: Path, code: int, attempt: int = 0) -> tuple[str | None, int]:
    """The line to print and the exit code for a failed torchrun (see the module docstring);
    ``attempt``: the restart count of the attempt that failed last (torchrun's
    ``--max-restarts``: it gives up after its last restart), whose errors alone count."""
    ranks = {}
    for p in errdir.glob("rank*.json"):
        rec = _read_json(p)
        if (isinstance(rec, dict) and isinstance(rec.get("message"), str)
                and int(rec.get("attempt", 0)) == attempt):
            ranks[int(rec.get("rank", -1))] = rec
    agent = _read_json(errdir / _AGENT_REPORT) or {}
    failures = {int(r): f for r, f in agent.get("failures", {}).items()}
    hung = _hung(errdir, ranks, failures, attempt)
    if hung is not None:
        return hung
    nccl = nccl_abort(_read_json(errdir / _NCCL_REPORT), failures)
    if nccl is not None:
        return nccl
    killed = sorted((r, f) for r, f in failures.items()
                    if f.get("exitcode", 0) < 0 and -f["exitcode"] != signal.SIGTERM)
    if killed:
        r, f = killed[0]
        sig = -int(f["exitcode"])
        return (f"rank {r} (pid {f.get('pid')}) was killed by signal {_signal_name(sig)}; "
                "the other ranks were stopped"), 128 + sig
    if ranks:
        rec = min(ranks.values(), key=lambda x: x.get("time", 0))
        return rec["message"], int(rec.get("exit_code", 2)) or 2
    crashed = sorted((r, f) for r, f in failures.items() if f.get("exitcode", 0) > 0)
    if crashed:  # a bug (its traceback is above), or a message the rank printed itself
        r, f = crashed[0]
        c = int(f["exitcode"])
        return (f"rank {r} (pid {f.get('pid')}) failed with exit code {c} (see its output "
                "above)"), (c if c in (2, 3) else 1)
    if failures:  # only SIGTERMs: someone stopped a worker
        r, f = sorted(failures.items())[0]
        sig = -int(f["exitcode"])
        return f"rank {r} (pid {f.get('pid')}) was stopped by signal {_signal_name(sig)}", \
            128 + sig
    if "signal" in agent:  # the agent itself was stopped (Ctrl-C, kill)
        return None, 128 + int(agent["signal"])
    if code < 0:  # the agent itself was killed (kill -9, the OOM killer): no report
        return (f"torchrun's agent was killed by signal {_signal_name(-code)}; its ranks "
                "stopped with it"), 128 - code
    return None, code  # torchrun failed before any worker ran: its own message is above


def _hung(errdir: Path, ranks: dict, failures: dict, attempt: int
          ) -> tuple[str, int] | None:
    """The line of a job in which a rank stopped answering: another rank's collective timed
    out (its record says ``timed_out``) and the culprit is a rank found stopped and killed by
    the launcher (``frozen.json``), else a rank that reported nothing and was killed by
    SIGKILL (torchrun's, after it ignored the SIGTERM); None when no rank timed out or no
    culprit is known (the rank's own line is said then)."""
    timed = [rec for rec in ranks.values() if rec.get("timed_out")]
    if not timed:
        return None
    first = min(timed, key=lambda x: x.get("time", 0))
    frozen = _read_json(errdir / _FROZEN_REPORT)
    stopped = " (its process was stopped: SIGSTOP or Ctrl-Z)"
    culprits = {int(f["rank"]): (f.get("pid"), stopped)
                for f in (frozen if isinstance(frozen, list) else [])
                if isinstance(f, dict) and int(f.get("attempt", 0)) == attempt}
    if not culprits:
        culprits = {r: (f.get("pid"), " (it ignored torchrun's SIGTERM and was killed)")
                    for r, f in failures.items()
                    if f.get("exitcode") == -signal.SIGKILL and r not in ranks}
    if not culprits:
        return None
    who = ", ".join(f"rank {r} (pid {pid})" for r, (pid, _) in sorted(culprits.items()))
    how = culprits[min(culprits)][1]
    timeout = first.get("timeout_s")
    within = f"--dist-timeout {timeout:g} s" if isinstance(timeout, (int, float)) \
        else "--dist-timeout"
    return (f"{who} stopped answering{how}: rank {first.get('rank')} waited longer than "
            f"{within} in a collective; the other ranks were stopped"), \
        int(first.get("exit_code", 2)) or 2


def agent_environment(environ: dict | None = None) -> dict:
    """What torchrun's agent sets in its environment (``environ``, default ``os.environ``) for
    its workers to inherit, where the user set nothing: ``OMP_NUM_THREADS=1`` (torchrun's
    default, without its banner; each rank then sets its share of the cores,
    :func:`~twopgraph.distributed.env.rank_plan`) and
    :data:`~twopgraph.distributed.env.NCCL_ENV` (a failed NCCL collective raises in the rank,
    one line, instead of SIGABRT; torchrun would set ``TORCH_NCCL_ASYNC_ERROR_HANDLING=1``
    otherwise). Returns what was set."""
    from twopgraph.distributed.env import nccl_env_defaults
    env = os.environ if environ is None else environ
    done = {} if "OMP_NUM_THREADS" in env else {"OMP_NUM_THREADS": "1"}
    env.update(done)
    return done | nccl_env_defaults(env)


def agent_main(args: list[str]) -> int:
    """``python -m twopgraph.distributed.launch <torchrun arguments>``: torchrun's agent, with its
    log lines off (unless :data:`AGENT_LOGS_ENV` is set) and worker failures written to
    :data:`ERROR_DIR_ENV`/``agent.json`` instead of raised; returns the exit code."""
    launcher = os.environ.get(LAUNCHER_PID_ENV, "")
    if launcher.isdigit():  # a launcher killed by SIGKILL stops the job through us
        die_with_parent(int(launcher))
    os.environ[AGENT_PID_ENV] = str(os.getpid())  # the workers die with us (watch_agent)
    if not os.environ.get(AGENT_LOGS_ENV):
        logging.disable(logging.CRITICAL)
    agent_environment()
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run
    report = Path(os.environ.get(ERROR_DIR_ENV, "")) / _AGENT_REPORT
    try:
        run(parse_args(args))
    except ChildFailedError as e:
        failures = {str(r): {"local_rank": f.local_rank, "pid": f.pid, "exitcode": f.exitcode}
                    for r, f in e.failures.items()}
        _write_report(report, {"failures": failures})
        return 1
    except SignalException as e:
        _write_report(report, {"signal": int(e.sigval)})
        return 128 + int(e.sigval)
    return 0


def _write_report(path: Path, rec: dict) -> None:
    if os.environ.get(ERROR_DIR_ENV):
        try:
            path.write_text(json.dumps(rec))
        except OSError:
            pass
    else:  # run by hand: say it on stderr
        print(json.dumps(rec), file=sys.stderr)


if __name__ == "__main__":
    sys.exit(agent_main(sys.argv[1:]))
