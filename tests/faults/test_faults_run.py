"""Fault injection for a run's life (issue 14): who owns ``--out``, a diverging model, errors
found up front, a full or read-only disk during a run, lost peers, and no empty ``--out``
left behind. Each case checks the exit code, the one-line message and the files left.

Cases that need a tmpfs mount (root) skip where ``mount`` is not permitted; the ones that
start real processes are marked ``slow``."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import community_data, join_all, run_cli

from twopgraph.cli import main
from twopgraph.core.files import human_bytes
from twopgraph.errors import ConfigError, TrainingDiverged, TwopgraphError
from twopgraph.run.outdir import LOCK_NAME, RunDir

TRAIN_FAST = ["--epochs", "1", "--hidden", "16", "--fanouts", "5,5", "--batch-size", "256",
              "--no-progress", "--device", "cpu"]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """A data root with synthetic-tiny (and its clusters) cached by one run."""
    root = tmp_path_factory.mktemp("data")
    out = tmp_path_factory.mktemp("warm") / "out"
    assert main(["train", "--dataset", "synthetic-tiny", *TRAIN_FAST, "--out", str(out),
                 "--data-root", str(root)]) == 0
    return root




def one_error_line(err: str) -> str:
    """The single ``twopgraph: error:`` line of ``err`` (log lines with a time stamp, which
    come before it, are allowed)."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("twopgraph:")]
    assert len(lines) == 1, err
    assert lines[0].startswith("twopgraph: error: "), err
    return lines[0]


def strict_json(path: Path):
    def refuse(c):
        raise ValueError(f"non-strict JSON constant {c}")
    return json.loads(path.read_text(), parse_constant=refuse)


def train_args(root, out, *extra) -> list[str]:
    return [str(a) for a in ["train", "--dataset", "synthetic-tiny", *TRAIN_FAST,
                             "--data-root", root, "--out", out, *extra]]


@contextlib.contextmanager
def tmpfs(path: Path, size: str, *opts: str):
    """A tmpfs of ``size`` at ``path`` (skips the test where mounting is not permitted)."""
    path.mkdir(parents=True, exist_ok=True)
    options = ",".join([f"size={size}", *opts])
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def remount_ro(path: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)


def no_tmp_files(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if ".tmp" in p.name]


# ----------------------------------------------------------------------------------------------
# 1. run ownership
# ----------------------------------------------------------------------------------------------


def test_held_out_is_refused_before_loading_data(tmp_path, capsys):
    """A second run into a held --out: exit 2, one line naming the holder; refused before the
    data is loaded (an unknown dataset is not even looked at); the holder's lock survives."""
    out = tmp_path / "out"
    with RunDir(out) as held:
        rc, o, err = run_cli(["train", "--dataset", "no-such-dataset", *TRAIN_FAST,
                              "--data-root", tmp_path / "data", "--out", out], capsys)
        assert rc == 2 and o == ""
        line = one_error_line(err)
        assert (f"--out {out} is in use by another twopgraph run (pid {os.getpid()} on host "
                f"{socket.gethostname()})") in line, line
        assert held.lock_path.is_file()
        assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]
    assert out.is_dir() and not any(out.iterdir())  # released: the lock file is gone


def test_lock_released_and_removed_at_the_end(root, tmp_path, capsys):
    """A finished run leaves only its files (no lock file); a lock file left by a dead
    process (stale pid) does not block: the kernel lock is what counts."""
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).write_text('{"pid": 999999999, "host": "elsewhere"}\n')
    rc, o, err = run_cli(train_args(root, out), capsys)
    assert rc == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.pt", "epochs.csv", "metrics.json"]
    assert strict_json(out / "metrics.json")["status"] == "ok"
    with RunDir(out, resume=True):  # free again (resume: the folder holds a run)
        pass


def test_rundir_same_process_twice_and_relock():
    """flock is per open file: a second claim in the same process is refused too; after a
    release the folder can be claimed again."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        a = RunDir(Path(d) / "o").claim()
        with pytest.raises(ConfigError, match="is in use by another twopgraph run"):
            RunDir(Path(d) / "o").claim()
        a.release()
        b = RunDir(Path(d) / "o").claim()
        b.release()
        assert not (Path(d) / "o" / LOCK_NAME).exists()


def _spawn_train(root, out, *extra) -> subprocess.Popen:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.Popen([sys.executable, "-m", "twopgraph", *map(str, train_args(
        root, out, *extra))], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)


@pytest.mark.slow
def test_two_concurrent_runs_same_out_one_wins(root, tmp_path):
    """The issue's reproduction: two runs started together into one --out. Exactly one exits
    0; the other exits 2 with one line naming the winner's pid; metrics.json and the
    checkpoint are the winner's."""
    out = tmp_path / "out"
    procs = {s: _spawn_train(root, out, "--epochs", str(1 + s), "--seed", str(s))
             for s in (1, 2)}
    res = {s: (p.wait(timeout=240), *p.communicate()) for s, p in procs.items()}
    codes = sorted(r[0] for r in res.values())
    assert codes == [0, 2], {s: r[2][-2000:] for s, r in res.items()}
    win = next(s for s, r in res.items() if r[0] == 0)
    lose = 3 - win
    line = one_error_line(res[lose][2])
    assert f"is in use by another twopgraph run (pid {procs[win].pid} on host" in line, line
    assert res[lose][1] == ""
    m = strict_json(out / "metrics.json")
    assert m["config"]["seed"] == win and len(m["epochs"]) == 1 + win
    assert json.loads(res[win][1])["test_acc"] == m["test_acc"]
    ckpt = torch.load(out / "checkpoint.pt", weights_only=False)
    assert ckpt["epochs_done"] == 1 + win
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.pt", "epochs.csv", "metrics.json"]


@pytest.mark.slow
def test_kill9_holder_does_not_block_the_next_run(root, tmp_path):
    out = tmp_path / "out"
    a = _spawn_train(root, out, "--epochs", "200", "--eval-every", "0")
    deadline = time.time() + 120
    while not (out / "checkpoint.pt").exists():  # a is inside training, holding the lock
        assert a.poll() is None and time.time() < deadline, a.communicate()
        time.sleep(0.1)
    a.send_signal(signal.SIGKILL)
    a.wait()
    holder = json.loads((out / LOCK_NAME).read_text())
    assert holder["pid"] == a.pid  # the stale lock file is there ...
    done = torch.load(out / "checkpoint.pt", weights_only=False)["epochs_done"]
    b = _spawn_train(root, out, "--resume", "--epochs", str(done + 1))  # ... and does not block
    o, err = b.communicate(timeout=240)
    assert b.returncode == 0, err[-2000:]
    assert strict_json(out / "metrics.json")["status"] == "ok"
    assert not (out / LOCK_NAME).exists()


# ----------------------------------------------------------------------------------------------
# 2. divergence
# ----------------------------------------------------------------------------------------------


def test_divergence_exit_3_strict_metrics_no_accuracy(root, tmp_path, capsys):
    out = tmp_path / "out"
    rc, o, err = run_cli(train_args(root, out, "--lr", "1e30", "--epochs", "3"), capsys)
    assert rc == 3 and o == "", err
    line = one_error_line(err)
    assert line.startswith("twopgraph: error: training diverged at epoch 0 step "), line
    assert "(loss nan)" in line and "lower --lr (now 1e+30)" in line
    m = strict_json(out / "metrics.json")  # NaN/Infinity would be refused here
    assert m["status"] == "diverged" and m["val_acc"] is None and m["test_acc"] is None
    assert m["diverged"]["epoch"] == 0 and m["diverged"]["loss"] == "nan"
    assert not (out / "checkpoint.pt").exists()  # no checkpoint of non-finite weights
    assert sorted(p.name for p in out.iterdir()) == ["metrics.json"]


def test_nonfinite_weights_after_a_good_epoch(root, tmp_path, capsys, monkeypatch):
    """Weights that turn non-finite with a finite loss (checked after every epoch): exit 3,
    no accuracy; the checkpoint of the last good epoch is kept as it was."""
    import twopgraph.pipeline.epoch as ep
    import twopgraph.run.loop as tr
    out = tmp_path / "out"
    real = ep.train_epoch

    def poisoning(model, opt, loader, epoch, *a, **k):
        rec = real(model, opt, loader, epoch, *a, **k)
        if epoch == 1:
            with torch.no_grad():
                next(model.parameters()).fill_(float("inf"))
        return rec
    monkeypatch.setattr(tr, "train_epoch", poisoning)
    rc, o, err = run_cli(train_args(root, out, "--epochs", "3"), capsys)
    assert rc == 3, err
    line = one_error_line(err)
    assert "training diverged at epoch 1 step" in line and "non-finite weights" in line
    m = strict_json(out / "metrics.json")
    assert m["status"] == "diverged" and m["val_acc"] is None and m["test_acc"] is None
    assert [e["epoch"] for e in m["epochs"]] == [0]
    ckpt = torch.load(out / "checkpoint.pt", weights_only=False)
    assert ckpt["epochs_done"] == 1
    assert all(torch.isfinite(v).all() for v in ckpt["model"].values())


def test_success_metrics_status_ok_and_running(root, tmp_path, monkeypatch):
    import twopgraph.run.records as rr
    seen = []
    real = rr.write_json
    monkeypatch.setattr(rr, "write_json", lambda p, obj: (seen.append(obj["status"]),
                                                          real(p, obj)))
    assert main(train_args(root, tmp_path / "out", "--epochs", "2")) == 0
    assert seen == ["running", "running", "ok"]


# ----------------------------------------------------------------------------------------------
# 3. errors up front
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("out", ["/proc/self", "/proc/self/x/y"])
def test_unwritable_out_refused_before_loading_data(tmp_path, capsys, out):
    rc, o, err = run_cli(["train", "--dataset", "no-such-dataset", *TRAIN_FAST,
                          "--data-root", tmp_path / "data", "--out", out], capsys)
    assert rc == 2
    line = one_error_line(err)
    assert line.startswith(f"twopgraph: error: --out {out}: cannot "), line


def test_read_only_out_refused_before_loading_data(tmp_path, capsys):
    mnt = tmp_path / "ro"
    with tmpfs(mnt, "1m", "ro"):
        rc, o, err = run_cli(["train", "--dataset", "no-such-dataset", *TRAIN_FAST,
                              "--data-root", tmp_path / "data", "--out", mnt / "out"], capsys)
        assert rc == 2
        line = one_error_line(err)
        assert "--out" in line and "Read-only file system" in line, line
        assert not (mnt / "out").exists()


def test_full_out_refused_before_loading_data(tmp_path, capsys):
    mnt = tmp_path / "full"
    with tmpfs(mnt, "64k"):
        with open(mnt / "filler", "wb", buffering=0) as f:
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * 4096)
        rc, o, err = run_cli(["train", "--dataset", "no-such-dataset", *TRAIN_FAST,
                              "--data-root", tmp_path / "data", "--out", mnt], capsys)
        assert rc == 2
        line = one_error_line(err)
        assert "No space left on device" in line and "free on" in line, line
        assert sorted(p.name for p in mnt.iterdir()) == ["filler"]


@pytest.mark.parametrize("what", ["file", "under-file"])
def test_data_root_not_a_folder_refused_up_front(tmp_path, capsys, what):
    f = tmp_path / "afile"
    f.write_text("x")
    data_root = f if what == "file" else f / "sub"
    rc, o, err = run_cli(["train", "--dataset", "synthetic-tiny", *TRAIN_FAST,
                          "--data-root", data_root, "--out", tmp_path / "out"], capsys)
    assert rc == 2
    line = one_error_line(err)
    assert f"--data-root {data_root}: {f} is not a folder" in line, line
    assert not (tmp_path / "out").exists()


def test_read_only_data_root(root, tmp_path, capsys):
    """A read-only data root: refused up front for a dataset it would have to generate; fine
    for one it holds (a shared cache)."""
    mnt = tmp_path / "ro"
    with tmpfs(mnt, "64m"):
        for p in root.iterdir():
            (shutil.copytree if p.is_dir() else shutil.copy2)(p, mnt / p.name)
        remount_ro(mnt)
        rc, o, err = run_cli(["train", "--dataset", "synthetic-small", *TRAIN_FAST,
                              "--data-root", mnt, "--out", tmp_path / "a"], capsys)
        assert rc == 2
        line = one_error_line(err)
        assert f"--data-root {mnt} is not writable (Read-only file system)" in line, line
        assert "synthetic-small is not cached there" in line
        assert not (tmp_path / "a").exists()
        rc, o, err = run_cli(["train", "--dataset", "synthetic-tiny", *TRAIN_FAST,
                              "--data-root", mnt, "--out", tmp_path / "b"], capsys)
        assert rc == 0, err


@pytest.mark.parametrize("extra", [["--seed", "-1"], ["--seed", "1e23"], ["--seed", "2**63"],
                                   ["--epochs", "0"], ["--out", ""], ["--out", " "]])
def test_bad_flags_refused_without_output(tmp_path, capsys, extra, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, o, err = run_cli(["train", "--dataset", "synthetic-tiny", *TRAIN_FAST,
                          "--data-root", tmp_path / "data", "--out", tmp_path / "out", *extra],
                         capsys)
    assert rc == 2
    one_error_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no out folder, no data root


@pytest.mark.parametrize("timeout", ["inf", "0", "nan", "-5", "1e9"])
def test_dist_timeout_refused_by_the_launcher(tmp_path, capsys, monkeypatch, timeout):
    """--dist-timeout is checked by the --nproc launcher before torchrun starts a rank."""
    import twopgraph.distributed.launch as launch

    def no_launch(*a, **k):
        raise AssertionError("torchrun was started")
    monkeypatch.setattr(launch, "launch", no_launch)
    monkeypatch.delenv("RANK", raising=False)
    rc, o, err = run_cli(["train", "--partitions", tmp_path / "parts", "--nproc", "2",
                          "--dist-timeout", timeout, "--out", tmp_path / "out"], capsys)
    assert rc == 2
    assert "dist-timeout must be a positive number" in one_error_line(err)
    assert not (tmp_path / "out").exists()


# -- a full or unwritable disk during the run ---------------------------------------------------


def _failing_writes(monkeypatch, name: str, after: int, err=errno.ENOSPC):
    """Make the ``after``-th and later writes of ``name`` by a run (checkpoint.py, metrics.py)
    fail half-way with ``err``, inside the real atomic writer (which must leave no temp
    file)."""
    import twopgraph.core.files as metrics
    import twopgraph.run.checkpoint as ck
    real = ck.atomic_write_bytes
    count = [0]

    def atomic(path, write):
        def half(f):
            if Path(path).name == name:
                count[0] += 1
                if count[0] >= after:
                    f.write(b"partial")
                    raise OSError(err, os.strerror(err))
            write(f)
        return real(path, half)
    monkeypatch.setattr(ck, "atomic_write_bytes", atomic)
    monkeypatch.setattr(metrics, "atomic_write_bytes", atomic)


@pytest.mark.parametrize("name,err", [("checkpoint.pt", errno.ENOSPC),
                                      ("metrics.json", errno.EACCES)])
def test_write_failure_during_run_one_line_earlier_files_kept(root, tmp_path, capsys,
                                                              monkeypatch, name, err):
    out = tmp_path / "out"
    assert main(train_args(root, out)) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    _failing_writes(monkeypatch, name, after=1, err=err)
    rc, o, err_text = run_cli(train_args(root, out, "--resume", "--epochs", "3"), capsys)
    assert rc == 2 and o == ""
    line = one_error_line(err_text)
    # the file, why, and the space left (whichever layer words it: rundir.writing or the
    # atomic writer)
    assert str(out / name) in line and os.strerror(err) in line and "free" in line, line
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert set(after) == set(before) and not no_tmp_files(out)
    if name == "checkpoint.pt":  # epoch 1's checkpoint could not be written: epoch 0's stays
        assert after == before
    else:  # epoch 1's checkpoint was written, the metrics of epoch 0 stayed
        assert after["metrics.json"] == before["metrics.json"]
        assert torch.load(out / "checkpoint.pt", weights_only=False)["epochs_done"] == 2


def test_full_tmpfs_during_run(root, tmp_path, capsys):
    """A real full disk: room for the lock file but not for the checkpoint."""
    mnt = tmp_path / "small"
    with tmpfs(mnt, "4m"):
        out = mnt / "out"
        assert main(train_args(root, out)) == 0
        ckpt = (out / "checkpoint.pt").read_bytes()
        metrics = (out / "metrics.json").read_bytes()
        free = shutil.disk_usage(mnt).free
        with open(mnt / "filler", "wb") as f:
            f.write(b"\0" * (free - 8192))
        rc, o, err = run_cli(train_args(root, out, "--resume", "--epochs", "2"), capsys)
        assert rc == 2, err
        line = one_error_line(err)
        assert str(out / "checkpoint.pt") in line and "No space left on device" in line, line
        assert "free" in line
        assert sorted(p.name for p in out.iterdir()) == ["checkpoint.pt", "epochs.csv",
                                                         "metrics.json"]
        assert (out / "checkpoint.pt").read_bytes() == ckpt
        assert (out / "metrics.json").read_bytes() == metrics


# ----------------------------------------------------------------------------------------------
# 4. a lost peer is not a slow peer
# ----------------------------------------------------------------------------------------------


def test_lost_peer_messages():
    from twopgraph.distributed import DistEnv
    from twopgraph.distributed.trainer import _lost_peer
    env = DistEnv(0, 2, 0, 2)
    reset = RuntimeError("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Read "
                         "error [127.0.0.1]:41234: Connection reset by peer")
    closed = RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:589] Connection "
                          "closed by peer [127.0.0.1]:6000")
    timeout = RuntimeError("[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] "
                           "Timed out waiting 60000ms for recv operation to complete")
    for e in (reset, closed):
        msg = str(_lost_peer(env, 60.0, e))
        assert "another rank failed (connection lost)" in msg and "60 s" not in msg, msg
        assert msg.startswith("rank 0/2: ") and "\n" not in msg
    msg = str(_lost_peer(env, 60.0, timeout))
    assert "another rank did not answer within 60 s" in msg and "connection" not in msg, msg
    msg = str(_lost_peer(env, 60.0, TimeoutError("socket")))
    assert "did not answer within 60 s" in msg


# ----------------------------------------------------------------------------------------------
# 5. no empty --out left behind
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["unknown-dataset", "resume-without-checkpoint"])
def test_failed_before_training_leaves_no_folder(root, tmp_path, capsys, case):
    out = tmp_path / "a" / "b" / "out"
    extra = ["--resume"] if case == "resume-without-checkpoint" else []
    ds = "no-such-dataset" if case == "unknown-dataset" else "synthetic-tiny"
    rc, o, err = run_cli(["train", "--dataset", ds, *TRAIN_FAST, "--data-root", root,
                          "--out", out, *extra], capsys)
    assert rc == 2
    one_error_line(err)
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("fault", ["interrupt", "disk-full"])
def test_failed_in_first_epoch_leaves_no_empty_folder(root, tmp_path, capsys, monkeypatch,
                                                      fault):
    import twopgraph.run.loop as tr
    out = tmp_path / "out"
    if fault == "interrupt":
        def ctrl_c(*a, **k):
            raise KeyboardInterrupt
        monkeypatch.setattr(tr, "train_epoch", ctrl_c)
        expect = 130
    else:
        _failing_writes(monkeypatch, "checkpoint.pt", after=1)
        expect = 2
    rc, o, err = run_cli(train_args(root, out), capsys)
    assert rc == expect, err
    assert not out.exists()


def test_existing_out_kept_when_a_run_fails(root, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    rc, o, err = run_cli(train_args(root, out, "--resume"), capsys)
    assert rc == 2
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, o, err = run_cli(train_args(root, empty, "--resume"), capsys)
    assert rc == 2 and empty.is_dir()  # not created by the run: not removed


# ----------------------------------------------------------------------------------------------
# distributed: rank 0 owns --out, ranks diverge together
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def parts1(tmp_path_factory):
    from twopgraph.distributed.partition.selfdep import partition_selfdep
    folder = tmp_path_factory.mktemp("parts") / "p1"
    partition_selfdep(community_data(600, k=4), 1, 2, folder, num_clusters=6)
    return folder


def _dist_cfg(out, **kw):
    from twopgraph.config import TrainConfig
    base = dict(fanouts=[5, 5], batch_size=64, epochs=2, hidden=16, lr=0.01, out=str(out),
                device="cpu", progress=False, prefetch=1, threads=1, dist_timeout=30)
    base.update(kw)
    return TrainConfig.of(**base)


def test_distributed_rank0_owns_out_and_diverges(parts1, tmp_path, monkeypatch):
    from twopgraph.distributed import DistEnv, train_distributed
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    env = DistEnv(0, 1, 0, 1)
    out = tmp_path / "run"
    with RunDir(out):
        with pytest.raises(ConfigError, match="is in use by another twopgraph run"):
            train_distributed(_dist_cfg(out), parts1, env=env)
    with pytest.raises(TrainingDiverged, match="training diverged at epoch 0 step .* "
                                               r"\(rank 0, loss nan\)"):
        train_distributed(_dist_cfg(out, lr=1e30), parts1, env=env)
    m = strict_json(out / "metrics.json")
    assert m["status"] == "diverged" and m["test_acc"] is None
    assert m["distributed"]["world_size"] == 1
    assert sorted(p.name for p in out.iterdir()) == ["metrics.json"]
    res = train_distributed(_dist_cfg(tmp_path / "ok", epochs=1), parts1, env=env)
    assert strict_json(res.out / "metrics.json")["status"] == "ok"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _diverge_worker(rank, world, port, parts, out, result_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    import twopgraph.pipeline.epoch as ep
    from twopgraph.distributed import train_distributed
    if rank == 1:  # only rank 1 sees a non-finite loss, in epoch 1
        real = ep.F.cross_entropy

        class Poison:
            def __getattr__(self, name):
                return getattr(ep.torch.nn.functional, name)

            def cross_entropy(self, logits, labels):
                loss = real(logits, labels)
                return loss * float("nan") if tr_epoch[0] >= 1 else loss
        tr_epoch = [0]
        real_epoch = ep.train_epoch

        def counting(model, opt, loader, epoch, *a, **k):
            tr_epoch[0] = epoch
            return real_epoch(model, opt, loader, epoch, *a, **k)
        ep.F = Poison()
        import twopgraph.run.loop as loop
        loop.train_epoch = counting
    try:
        train_distributed(_dist_cfg(out, epochs=4), parts)
    except TwopgraphError as e:
        Path(result_dir, f"rank{rank}.err").write_text(f"{type(e).__name__}\n{e}")
        return
    Path(result_dir, f"rank{rank}.ok").write_text("ok")


@pytest.mark.slow
def test_two_ranks_stop_together_on_divergence(tmp_path_factory, tmp_path):
    import torch.multiprocessing as mp

    from twopgraph.distributed.partition.selfdep import partition_selfdep
    parts = tmp_path_factory.mktemp("parts2") / "p2"
    partition_selfdep(community_data(1200, k=4), 2, 2, parts, num_clusters=12)
    out = tmp_path / "run"
    ctx = mp.start_processes(_diverge_worker, args=(2, _free_port(), str(parts), str(out),
                                                    str(tmp_path)),
                             nprocs=2, join=False, start_method="spawn")
    t = time.perf_counter()
    join_all(ctx.processes)
    assert time.perf_counter() - t < 100  # nobody waited for a timeout
    assert [p.exitcode for p in ctx.processes] == [0, 0]
    for r in (0, 1):
        kind, msg = (tmp_path / f"rank{r}.err").read_text().split("\n", 1)
        assert kind == "TrainingDiverged" and "at epoch 1 step 0 (rank 1, loss nan)" in msg
    m = strict_json(out / "metrics.json")
    assert m["status"] == "diverged" and [e["epoch"] for e in m["epochs"]] == [0]
    assert torch.load(out / "checkpoint.pt", weights_only=False)["epochs_done"] == 1


def test_human_bytes():
    assert human_bytes(0) == "0 B" and human_bytes(1536) == "1.5 KiB"
    assert human_bytes(3 * 2 ** 30) == "3.0 GiB"
