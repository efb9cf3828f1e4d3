"""Elastic restarts (issue 40, item 5): ``train --nproc P --max-restarts N`` passes the
restarts on to torchrun; a rank killed mid-training makes torchrun restart the group, and the
restarted ranks resume from the job's last checkpoint, so the run ends with the figures and
weights of a run that was never killed. A restart whose first attempt wrote no checkpoint
starts afresh; a checkpoint the job did not write (an older run's) is never resumed without
``--resume``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_dist import FANOUTS, _cfg, parts2  # noqa: F401  (parts2: a fixture)
from test_launcher_faults import _ranks
from test_signals import _alive

from twopgraph.cli import main
from twopgraph.distributed import DistEnv, train_distributed
from twopgraph.distributed.launch import max_restarts_of, torchrun_command
from twopgraph.distributed.partition.selfdep import partition_selfdep
from twopgraph.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
EPOCHS = 8


def test_max_restarts_reaches_torchrun():
    argv = ["train", "--partitions", "d", "--nproc", "2", "--max-restarts", "3"]
    assert max_restarts_of(argv) == 3
    assert max_restarts_of(["train", "--max-restarts=1", "--fanouts", "-1,-1"]) == 1
    assert max_restarts_of(["train", "--max-r", "2", "--nproc", "2"]) == 2  # as argparse reads
    assert max_restarts_of(["train", "--nproc", "2"]) == 0
    cmd = torchrun_command(2, argv, max_restarts=3)
    assert cmd[3:7] == ["--standalone", "--nproc-per-node=2", "--max-restarts=3", "-m"]
    assert "--max-restarts=" not in " ".join(torchrun_command(2, argv))  # 0: as before


def test_max_restarts_is_checked(tmp_path, capsys):
    assert main(["train", "--max-restarts", "1", "--out", str(tmp_path / "x")]) == 2
    assert "--max-restarts needs --partitions" in capsys.readouterr().err
    for bad in ("-1", "101"):
        assert main(["train", "--partitions", "d", "--nproc", "2", "--max-restarts", bad,
                     "--out", str(tmp_path / "x")]) == 2
        assert "max-restarts must be" in capsys.readouterr().err


# -- a restarted rank (in-process, one rank: the decision of what to resume) ------------------
@pytest.fixture(scope="module")
def parts1(parts2, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("elastic") / "p1"
    partition_selfdep(parts2[0], 1, len(FANOUTS), out, num_clusters=12)
    return out


def _train(parts: Path, out: Path, restart: int = 0, **kw):
    """Rank 0 of 1, attempt ``restart`` (torchrun's restart count), 3 epochs by default."""
    os.environ.pop("MASTER_ADDR", None)  # one process: a private store
    return train_distributed(_cfg(out, **{"epochs": 3, **kw}), parts,
                             env=DistEnv(0, 1, 0, 1, restart_count=restart))


def _params(out: Path) -> dict:
    return torch.load(out / "checkpoint.pt", weights_only=False)["model"]


def test_a_restart_resumes_its_own_checkpoint(parts1, tmp_path):
    """The checkpoint of this job (written since its torchrun agent, here the test's parent
    process, started) is resumed on a restart without --resume; the run ends as an
    uninterrupted one."""
    whole, out = tmp_path / "whole", tmp_path / "run"
    _train(parts1, whole)
    _train(parts1, out, epochs=2)  # the attempt that "died" after 2 epochs ...
    first = json.loads((out / "metrics.json").read_text())["epochs"]
    res = _train(parts1, out, restart=1)  # ... and its restart, given the same flags
    assert [e["epoch"] for e in res.epochs] == [0, 1, 2]
    a, b = (json.loads((d / "metrics.json").read_text()) for d in (out, whole))
    assert a["epochs"][:2] == first  # resumed (the records, times included), not redone
    assert a["status"] == b["status"] == "ok"
    assert [e["loss"] for e in a["epochs"]] == [e["loss"] for e in b["epochs"]]
    assert (a["val_acc"], a["test_acc"]) == (b["val_acc"], b["test_acc"])
    pa, pb = _params(out), _params(whole)
    assert all(torch.equal(pa[k], pb[k]) for k in pb)


def test_a_restart_without_a_checkpoint_starts_afresh(parts1, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    res = _train(parts1, out, restart=1)
    assert [e["epoch"] for e in res.epochs] == [0, 1, 2]


def test_a_restart_never_resumes_a_checkpoint_it_did_not_write(parts1, tmp_path):
    """An older run's checkpoint (written before this job started) is the user's: a restart
    refuses it as the first attempt did (no --resume, no --overwrite), and --overwrite
    replaces it."""
    out = tmp_path / "run"
    _train(parts1, out)
    old = time.time() - 10 * 24 * 3600
    os.utime(out / "checkpoint.pt", (old, old))
    with pytest.raises(ConfigError, match="already holds a run"):
        _train(parts1, out, restart=1)
    res = _train(parts1, out, restart=1, overwrite=True)
    assert [e["epoch"] for e in res.epochs] == [0, 1, 2]


# -- a rank killed once under --max-restarts 1 (torchrun, 2 ranks) -----------------------------
def _cmd(parts: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "twopgraph", "train", "--partitions", str(parts), "--nproc", "2",
            "--fanouts", ",".join(map(str, FANOUTS)), "--batch-size", "16", "--epochs",
            str(EPOCHS), "--hidden", "16", "--device", "cpu", "--threads", "1", "--no-progress",
            "--seed", "3", "--out", str(out), *extra]


@pytest.fixture(scope="module")
def uninterrupted(parts2, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("elastic") / "whole"
    proc = subprocess.run(_cmd(parts2[1], out), capture_output=True, text=True, timeout=300,
                          cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("victim", [1, 0])
def test_a_killed_rank_restarts_and_ends_as_an_uninterrupted_run(
        parts2, uninterrupted, tmp_path, victim):  # noqa: F811
    """SIGKILL of one rank once the first epoch is checkpointed, under --max-restarts 1:
    torchrun restarts both ranks, they resume from the checkpoint (rank 0, the lock's
    holder, included: its lock does not block the restart), and metrics.json and the weights
    equal those of a run that was never killed."""
    out = tmp_path / "run"
    proc = subprocess.Popen(_cmd(parts2[1], out, "--max-restarts", "1"), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not (out / "checkpoint.pt").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.02)
        pid = _ranks(proc.pid)[victim]
        os.kill(pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    assert "torchrun restart 1: resuming from" in err, err[-3000:]
    assert not _alive(pid)
    a, b = (json.loads((d / "metrics.json").read_text()) for d in (out, uninterrupted))
    assert a["status"] == b["status"] == "ok" and a["final"]
    assert len(a["epochs"]) == EPOCHS
    for key in ("loss", "train_acc", "val_acc", "test_acc", "num_seeds"):
        assert [e[key] for e in a["epochs"]] == [e[key] for e in b["epochs"]], key
    for key in ("val_acc", "test_acc", "selected_epoch"):
        assert a[key] == b[key], key
    ca, cb = (torch.load(d / "checkpoint.pt", weights_only=False) for d in (out, uninterrupted))
    for which in ("model", "selected"):
        sa, sb = (c[which] if which == "model" else c[which]["model"] for c in (ca, cb))
        assert all(torch.equal(sa[k], sb[k]) for k in sb), which
    assert not (out / ".twopgraph.lock").exists()
