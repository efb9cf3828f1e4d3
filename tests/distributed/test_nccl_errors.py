"""NCCL's faults become the project's one-line errors (issue 42, defect 4): the texts torch
2.x raises for a failed or timed-out NCCL collective map to :class:`PeerLost` (a dead peer is
"connection lost", a frozen one "did not answer within S s"); the environment asks NCCL's
watchdog to abort the communicators rather than the process (a user's value kept); a rank that
the watchdog took down anyway (SIGABRT, its text on stderr) is said in one line by the
``--nproc`` launcher."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from contextlib import nullcontext

import pytest
import torch
import torch.distributed as dist

from twopgraph.distributed import DistEnv
from twopgraph.distributed.env import NCCL_ENV, nccl_env_defaults, peer_error, process_group
from twopgraph.distributed.launch import _failure, agent_environment
from twopgraph.distributed.watchdog import StderrWatch
from twopgraph.errors import PeerLost

ENV = DistEnv(1, 2, 1, 2)
KEY = "TORCH_NCCL_ASYNC_ERROR_HANDLING"

# As torch 2.x words them (ProcessGroupNCCL / NCCLUtils, NCCL 2.18 - 2.21).
WATCHDOG_TIMEOUT = (
    "NCCL communicator was aborted on rank 1. Original reason for failure was: [PG ID 0 PG "
    "GUID 0(default_pg) Rank 1] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=2442, NumelOut=2442, Timeout(ms)=60000) ran "
    "for 60008 milliseconds before timing out.")
REMOTE_ERROR = (
    "NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:317, remote process "
    "exited or there was a network error, NCCL version 2.21.5\nncclRemoteError: A call failed "
    "possibly due to a network error or a remote process exiting prematurely.\nLast error:\n"
    "socketProgress: Connection closed by remote peer 127.0.0.1<52372>")
SYSTEM_ERROR = (
    "NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled "
    "system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3\n"
    "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
    "device error. \nLast error:\nsocketStartConnect: Connect to 10.0.0.2<35215> failed : "
    "Software caused connection abort")
INTERNAL_ERROR = (
    "NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, internal error "
    "- please report this issue to the NCCL developers, NCCL version 2.18.1\n"
    "ncclInternalError: Internal check failed.")
ABORTED_AFTER_ERROR = (
    "NCCL communicator was aborted on rank 0. Original reason for failure was: NCCL error: "
    "remote process exited or there was a network error, NCCL version 2.21.5\n"
    "ncclRemoteError: A call failed possibly due to a network error or a remote process "
    "exiting prematurely.\nLast error:\nNET/Socket : peer 127.0.0.1<41234> message truncated")
INVALID_USAGE = (
    "NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, invalid usage (run "
    "with NCCL_DEBUG=WARN for details), NCCL version 2.21.5\nncclInvalidUsage: This usually "
    "reflects invalid usage of NCCL library.\nLast error:\nDuplicate GPU detected : rank 1 "
    "and rank 0 both on CUDA device 1000")


@pytest.mark.parametrize("text, timed_out, says", [
    (WATCHDOG_TIMEOUT, True, "another rank did not answer within 60 s (--dist-timeout)"),
    (REMOTE_ERROR, False, "another rank failed (connection lost)"),
    (ABORTED_AFTER_ERROR, False, "another rank failed (connection lost)"),
    (SYSTEM_ERROR, False, "another rank failed or did not answer within 60 s"),
    (INTERNAL_ERROR, False, "another rank failed or did not answer within 60 s"),
])
def test_nccl_errors_through_autograd_are_one_line(text, timed_out, says):
    """DDP hands them over as plain RuntimeErrors (from the backward's all-reduce)."""
    err = peer_error(ENV, 60.0, RuntimeError(text))
    assert isinstance(err, PeerLost), text
    msg = str(err)
    assert msg.startswith(f"rank 1/2: {says}; stopping (RuntimeError: ") and "\n" not in msg
    assert err.timed_out is timed_out and err.timeout_s == 60.0


def test_nccl_backend_error_is_one_line():
    err = peer_error(ENV, 30.0, dist.DistBackendError(WATCHDOG_TIMEOUT))
    assert isinstance(err, PeerLost) and err.timed_out
    assert "did not answer within 30 s" in str(err) and "DistBackendError" in str(err)


@pytest.mark.parametrize("e", [
    RuntimeError(INVALID_USAGE), dist.DistBackendError(INVALID_USAGE),  # a bug: two ranks, one GPU
    RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    RuntimeError("ProcessGroupNCCL is only supported with GPUs, no GPUs found!"),
    RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x3 and 5x6)"),
])
def test_other_errors_keep_their_traceback(e):
    assert peer_error(ENV, 60.0, e) is None


def test_nccl_env_defaults_keep_the_users_value():
    env = {}
    assert nccl_env_defaults(env) == NCCL_ENV == {KEY: "2"} and env == {KEY: "2"}
    env = {KEY: "1", "PATH": "/bin"}
    assert nccl_env_defaults(env) == {} and env == {KEY: "1", "PATH": "/bin"}


def test_agent_environment_for_the_workers():
    env = {}
    assert agent_environment(env) == {"OMP_NUM_THREADS": "1", KEY: "2"} == env
    env = {"OMP_NUM_THREADS": "4", KEY: "3"}
    assert agent_environment(env) == {} and env == {"OMP_NUM_THREADS": "4", KEY: "3"}


@pytest.fixture
def no_nccl_env(monkeypatch):
    monkeypatch.setenv(KEY, "x")
    monkeypatch.delenv(KEY)  # restored (unset) after the test, whatever sets it


def _stop_at_init(monkeypatch, seen):
    def init(backend, **kw):
        seen.append((backend, os.environ.get(KEY)))
        raise RuntimeError("stop here")
    monkeypatch.setattr(dist, "init_process_group", init)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: None)


@pytest.mark.parametrize("user", [None, "1"])
def test_nccl_group_is_created_with_the_defaults(monkeypatch, no_nccl_env, user):
    """The environment ProcessGroupNCCL reads at its creation: ours, or the user's."""
    if user is not None:
        monkeypatch.setenv(KEY, user)
    seen = []
    _stop_at_init(monkeypatch, seen)
    with pytest.raises(RuntimeError, match="stop here"), \
            process_group(DistEnv(), torch.device("cuda", 0), 10.0):
        pass
    assert seen == [("nccl", user or "2")]


def test_gloo_group_leaves_the_environment_alone(monkeypatch, no_nccl_env):
    seen = []
    _stop_at_init(monkeypatch, seen)
    with pytest.raises(RuntimeError, match="stop here"), \
            process_group(DistEnv(), torch.device("cpu"), 10.0):
        pass
    assert seen == [("gloo", None)]


# -- the launcher: a rank that NCCL's watchdog took down --------------------------------------

WATCHDOG_LINES = [
    "epoch 0 ...\r  12%|#2   | 3/25",  # a progress bar's line, then the watchdog
    "[rank1]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=131072, "
    "NumelOut=131072, Timeout(ms)=60000) ran for 60081 milliseconds before timing out.",
    "[rank1]:[E1218 20:27:21.484903450 ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID 0 Rank 1] "
    "failure detected by watchdog at work sequence id: 1",
    "terminate called after throwing an instance of 'c10::DistBackendError'",
]


def test_stderr_passes_through_and_the_watchdog_is_seen(tmp_path):
    """A real child writes the watchdog's lines and dies by SIGABRT, as torch's watchdog
    makes a rank do: its stderr reaches ours byte for byte, the rank's line is kept."""
    code = ("import os, sys; sys.stderr.write(sys.argv[1]); sys.stderr.flush(); os.abort()")
    text = "\n".join(WATCHDOG_LINES) + "\n"
    out = io.StringIO()
    proc = subprocess.Popen([sys.executable, "-c", code, text], stderr=subprocess.PIPE)
    watch = StderrWatch(proc.stderr, out=out)
    assert proc.wait(timeout=60) == -signal.SIGABRT
    watch.join(timeout=10)
    assert out.getvalue() == text
    assert list(watch.lines) == [1] and "Watchdog caught collective" in watch.lines[1]
    watch.save(tmp_path / "nccl.json")
    assert json.loads((tmp_path / "nccl.json").read_text()) == {"1": watch.lines[1]}


def _job(tmp_path, failures, nccl=None):
    d = tmp_path / "errdir"
    d.mkdir()
    (d / "agent.json").write_text(json.dumps({"failures": failures}))
    if nccl is not None:
        (d / "nccl.json").write_text(json.dumps(nccl))
    return d


def test_launcher_line_of_a_rank_the_watchdog_aborted(tmp_path):
    d = _job(tmp_path, {"0": {"local_rank": 0, "pid": 11, "exitcode": -signal.SIGTERM},
                        "1": {"local_rank": 1, "pid": 12, "exitcode": -signal.SIGABRT}},
             {"1": WATCHDOG_LINES[1]})
    line, code = _failure(d, 1)
    assert code == 2 and "\n" not in line
    assert line.startswith("rank 1 (pid 12) was stopped by NCCL's watchdog (SIGABRT): a "
                           "collective did not finish within --dist-timeout")
    assert "(NCCL: [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(" in line


def test_launcher_line_of_a_failed_nccl_collective(tmp_path):
    text = ("[rank0]:[E1218 09:01:02.000 ProcessGroupNCCL.cpp:1600] [PG ID 0 PG GUID 0 Rank 0] "
            "Process group watchdog thread terminated with exception: NCCL error: remote "
            "process exited or there was a network error, NCCL version 2.21.5")
    d = _job(tmp_path, {"0": {"local_rank": 0, "pid": 21, "exitcode": -signal.SIGABRT}},
             {"0": text})
    line, code = _failure(d, 1)
    assert code == 2 and line.startswith("rank 0 (pid 21) was stopped by NCCL's watchdog "
                                         "(SIGABRT): a collective failed")


@pytest.mark.parametrize("nccl", [None, {"3": WATCHDOG_LINES[1].replace("rank1", "rank3")}])
def test_other_aborts_are_said_as_before(tmp_path, nccl):
    """No watchdog text (or another rank's): the signal, as the launcher always said it."""
    d = _job(tmp_path, {"1": {"local_rank": 1, "pid": 12, "exitcode": -signal.SIGABRT}}, nccl)
    assert _failure(d, 1) == ("rank 1 (pid 12) was killed by signal SIGABRT; the other ranks "
                              "were stopped", 128 + signal.SIGABRT)


def test_stderr_watch_keeps_a_line_without_rank(tmp_path):
    watch = StderrWatch(open(os.devnull, "rb"), out=nullcontext())
    watch.join(timeout=5)
    watch.scan("[E1218 20:27:21.4 ProcessGroupNCCL.cpp:629] [Rank 2] Watchdog caught "
               "collective operation timeout: WorkNCCL(...)")
    watch.scan("epoch 3 loss 0.5")
    assert list(watch.lines) == [-1]
