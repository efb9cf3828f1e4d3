"""Stop signals (issue 22, item 1, single process): SIGTERM and SIGHUP stop ``twopgraph train``
at its next safe point with one line and exit 128 + signal, ``metrics.json`` says
``interrupted``, the lock is released, the last checkpoint is kept and a resume finishes the
run as an uninterrupted one would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _train(out: Path, root: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "twopgraph", "train", "--dataset", "synthetic-tiny",
            "--data-root", str(root), "--batch-size", "16", "--epochs", "6", "--out", str(out),
            "--no-progress", "--seed", "3", *extra]


def _wait_for_checkpoint(out: Path, proc, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (out / "checkpoint.pt").is_file():
            return
        if proc.poll() is not None:
            raise AssertionError(f"train ended early: {proc.stderr.read()}")
        time.sleep(0.05)
    raise AssertionError("no checkpoint written in time")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_stops_train_cleanly_and_resume_finishes(tmp_path, sig):
    root, out = tmp_path / "data", tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run(_train(tmp_path / "warm", root, "--epochs", "1"), check=True, env=env,
                   capture_output=True)  # the dataset and numba's cache, outside the timing
    proc = subprocess.Popen(_train(out, root), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _wait_for_checkpoint(out, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the run finished before the signal arrived")
    assert proc.returncode == 128 + sig, err
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("twopgraph:")]
    assert lines == [f"twopgraph: stopped by {signal.Signals(sig).name} (the checkpoint of the "
                     "last completed epoch is kept: rerun with --resume to continue)"], err
    assert "Traceback" not in err
    m = json.loads((out / "metrics.json").read_text())
    assert m["status"] == "interrupted" and not m["final"]
    done = len(m["epochs"])
    assert 1 <= done < 6
    assert not (out / ".twopgraph.lock").exists()
    assert not [p for p in out.iterdir() if ".tmp" in p.name]
    # resumed, it ends as the uninterrupted run does
    subprocess.run(_train(out, root, "--resume"), check=True, env=env, capture_output=True)
    subprocess.run(_train(tmp_path / "whole", root), check=True, env=env, capture_output=True)
    a = json.loads((out / "metrics.json").read_text())
    b = json.loads((tmp_path / "whole" / "metrics.json").read_text())
    assert a["status"] == b["status"] == "ok"
    assert [e["loss"] for e in a["epochs"]] == [e["loss"] for e in b["epochs"]]
    assert a["test_acc"] == b["test_acc"]


def test_stop_signals_restore_their_handlers():
    from twopgraph.cli import STOP_SIGNALS, main
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    assert main(["datasets"]) == 0
    assert {s: signal.getsignal(s) for s in STOP_SIGNALS} == before


# a callback run by numba's compiled code (a frame of numba's files), and what it calls (a
# frame of another library's): the signal lands in the innermost frame
_NUMBA_CALLBACK = """
def callback(os, sig, inner):
    return inner(os, sig)
"""
_INNER = """
def inner(os, sig):
    os.kill(os.getpid(), sig)  # the handler runs at the loop's next check, in this frame
    for _ in range(100000):
        pass
    return "done"
"""


def _compiled(src: str, *path: str) -> dict:
    ns: dict = {}
    exec(compile(src, os.path.join("site-packages", *path), "exec"), ns)
    return ns


@pytest.mark.parametrize("where", ["numba", "called by numba"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_stop_signal_inside_a_numba_callback_is_sent_again_outside_it(sig, where):
    """numba's compiled code calls back into Python (``serialize._numba_unpickle``, which calls
    cloudpickle) and may print and drop what is raised there: a rank's SIGHUP landing in it
    left a traceback on stderr (CI, once in ~10 runs). The handler raises nothing while a
    frame of numba's is on the stack and sends the signal again shortly, so the stop happens
    in the caller's code."""
    from twopgraph.cli import _stop_on_signals
    from twopgraph.errors import Stopped
    callback = _compiled(_NUMBA_CALLBACK, "numba", "core", "serialize.py")["callback"]
    inner = _compiled(_INNER, *(("numba", "core", "inner.py") if where == "numba"
                                else ("cloudpickle", "cloudpickle.py")))["inner"]
    before_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    previous = _stop_on_signals()
    try:
        assert callback(os, sig, inner) == "done"  # nothing raised inside the callback
        with pytest.raises(KeyboardInterrupt if sig == signal.SIGINT else Stopped):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        signal.signal(signal.SIGINT, before_int)


# -- the --nproc launcher (issue 22, items 1 and 2) -------------------------------------------
@pytest.fixture(scope="module")
def tiny_parts(tmp_path_factory):
    """synthetic-tiny in 2 parts and in 1 part (its data root, the two folders)."""
    from twopgraph.cli import main
    base = tmp_path_factory.mktemp("parts")
    root = base / "data"
    for p in (1, 2):
        assert main(["partition", "--dataset", "synthetic-tiny", "--data-root", str(root),
                     "--num-parts", str(p), "--hops", "2", "--out", str(base / f"p{p}"),
                     "--json"]) == 0
    return root, base / "p1", base / "p2"


def _launch(parts: Path, root: Path, out: Path, nproc: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "twopgraph", "train", "--partitions", str(parts), "--nproc",
            str(nproc), "--data-root", str(root), "--batch-size", "16", "--epochs", "200",
            "--device", "cpu", "--threads", "1", "--no-progress", "--seed", "3", "--out",
            str(out), *extra]


def _stat(pid: int) -> list[str] | None:
    """``/proc/PID/stat``'s fields after the command name (state, ppid, ...); None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and (st := _stat(int(d.name))) is not None:
            children.setdefault(int(st[1]), []).append(int(d.name))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), ()):
            out.add(c)
            todo.append(c)
    return out


def _alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] != "Z"


def _stop_launcher(cmd: list[str], out: Path, sig: int):
    """Start ``cmd`` (the launcher), send ``sig`` once it has a checkpoint; returns (exit
    code, stderr, the launcher's processes below it at the time of the signal)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        _wait_for_checkpoint(out, proc)
        below = _descendants(proc.pid)
        proc.send_signal(sig)
        t = time.monotonic()
        _, err = proc.communicate(timeout=120)
        assert time.monotonic() - t < 70  # bounded: the launcher's grace
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err, below


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_launcher_passes_stop_signals_to_every_rank(tiny_parts, tmp_path, sig):
    """SIGINT to the launcher used to leave the ranks training on (400 epochs) and the run
    `ok`; SIGTERM/SIGHUP left `running` and no line. Every rank stops with the signal; one
    line, exit 128 + signal, `interrupted`, lock released, no process left."""
    root, _, parts = tiny_parts
    out = tmp_path / "run"
    code, err, below = _stop_launcher(_launch(parts, root, out, 2), out, sig)
    assert len(below) >= 3, below  # the agent and two ranks were running
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("twopgraph:")]
    if sig == signal.SIGINT:
        assert code == 130 and lines == ["twopgraph: interrupted"], err[-3000:]
    else:
        assert code == 128 + sig, err[-3000:]
        assert lines == [f"twopgraph: stopped by {signal.Signals(sig).name} (the checkpoint of "
                         "the last completed epoch is kept: rerun with --resume to "
                         "continue)"], err[-3000:]
    assert "Traceback" not in err
    m = json.loads((out / "metrics.json").read_text())
    assert m["status"] == "interrupted" and not m["final"] and len(m["epochs"]) < 200
    assert not (out / ".twopgraph.lock").exists()
    assert not [p for p in out.iterdir() if ".tmp" in p.name]
    assert not [p for p in below if _alive(p)], below  # every rank (and the agent) is gone


def test_launcher_stop_then_resume_equals_an_uninterrupted_run(tiny_parts, tmp_path):
    """1 rank through the launcher, stopped by SIGTERM, resumed (in-process: the same code as a
    rank, world size 1): the same epochs and figures as a run never stopped."""
    from twopgraph.config import TrainConfig
    from twopgraph.distributed import DistEnv, train_distributed
    root, parts, _ = tiny_parts
    out = tmp_path / "run"
    code, err, _ = _stop_launcher(_launch(parts, root, out, 1, "--epochs", "5"), out,
                                  signal.SIGTERM)
    if code == 0:
        pytest.skip("the run finished before the signal arrived")
    assert code == 143, err[-3000:]
    done = len(json.loads((out / "metrics.json").read_text())["epochs"])
    assert 1 <= done < 5

    def cfg(o, **kw):
        return TrainConfig.of(data_root=str(root), batch_size=16, epochs=5, device="cpu",
                              threads=1, progress=False, seed=3, out=str(o), **kw)
    os.environ.pop("MASTER_ADDR", None)
    train_distributed(cfg(out, resume=True), parts, env=DistEnv(0, 1, 0, 1))
    train_distributed(cfg(tmp_path / "whole"), parts, env=DistEnv(0, 1, 0, 1))
    a = json.loads((out / "metrics.json").read_text())
    b = json.loads((tmp_path / "whole" / "metrics.json").read_text())
    assert a["status"] == b["status"] == "ok"
    assert [e["loss"] for e in a["epochs"]] == [e["loss"] for e in b["epochs"]]
    assert (a["test_acc"], a["selected_epoch"]) == (b["test_acc"], b["selected_epoch"])


# -- partition, predict, bench (issue 22, item 1) ---------------------------------------------
_SELF_SIGNAL = """
import os, signal, sys, time
# as in a terminal's foreground: a suite started in the background (bash without job control)
# hands its children SIGINT ignored, and a process keeps an ignored SIGINT ignored
signal.signal(signal.SIGINT, signal.default_int_handler)
sig = int(sys.argv[1])
def stop():  # the signal arrives from outside, as from kill or a scheduler
    os.kill(os.getpid(), sig)
    time.sleep(5)  # never reached: the handler raises at the next safe point
{patch}
from twopgraph.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _run_stopped(patch: str, sig: int, args: list) -> tuple[int, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", _SELF_SIGNAL.format(patch=patch), str(int(sig)),
                           *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=120)
    return proc.returncode, proc.stderr


def _one_stop_line(code: int, err: str, sig: int, hint: str = "") -> None:
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("twopgraph:")]
    if sig == signal.SIGINT:
        assert (code, lines) == (130, ["twopgraph: interrupted"]), err[-3000:]
    else:
        assert code == 128 + sig, err[-3000:]
        assert lines == [f"twopgraph: stopped by {signal.Signals(sig).name}{hint}"], err[-3000:]
    assert "Traceback" not in err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_partition_stops_on_a_signal_and_leaves_nothing(tmp_path, sig):
    patch = """
from twopgraph.distributed.partition import selfdep
real = selfdep._write_part
def write_part(folder, p, *a):
    out = real(folder, p, *a)
    if p == 1:
        stop()
    return out
selfdep._write_part = write_part
"""
    out = tmp_path / "parts" / "p"
    code, err = _run_stopped(patch, sig, [
        "partition", "--dataset", "synthetic-tiny", "--data-root", tmp_path / "data",
        "--num-parts", "2", "--hops", "1", "--out", out])
    _one_stop_line(code, err, sig)
    assert not out.exists()
    assert sorted(p.name for p in out.parent.iterdir()) == []  # no temporary folder, no lock


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A 1-epoch synthetic-tiny run: (data root, its checkpoint)."""
    from twopgraph.cli import main
    base = tmp_path_factory.mktemp("tiny")
    assert main(["train", "--dataset", "synthetic-tiny", "--data-root", str(base / "data"),
                 "--batch-size", "64", "--epochs", "1", "--no-progress", "--out",
                 str(base / "run"), "--device", "cpu"]) == 0
    return base / "data", base / "run" / "checkpoint.pt"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_predict_stops_on_a_signal_while_writing_and_leaves_no_file(tiny_run, tmp_path, sig):
    patch = """
import twopgraph.run.predict as pr
real = pr.write_rows
def write_rows(f, *a, **k):
    f.write(b"x" * 4096)
    stop()
pr.write_rows = write_rows
"""
    root, ckpt = tiny_run
    code, err = _run_stopped(patch, sig, ["predict", "--checkpoint", ckpt, "--data-root", root,
                                          "--out", tmp_path / "preds.npy"])
    _one_stop_line(code, err, sig)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no output, no temporary file


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_bench_cache_stops_on_a_signal_while_writing_and_leaves_no_half_file(tiny_run,
                                                                            tmp_path, sig):
    patch = """
import csv
real = csv.DictWriter.writerow
rows = []
def writerow(self, row):
    rows.append(row)
    if len(rows) == 3:  # the header and a row written
        stop()
    return real(self, row)
csv.DictWriter.writerow = writerow
"""
    root, _ = tiny_run
    out = tmp_path / "bench"
    code, err = _run_stopped(patch, sig, [
        "bench", "cache", "--dataset", "synthetic-tiny", "--data-root", root, "--policies",
        "none,degree", "--ratios", "0.1,0.2", "--schedules", "random", "--batch-size", "64",
        "--out", out])
    _one_stop_line(code, err, sig)
    assert not (out / "cache.csv").exists()  # not half a table
    assert not [p for p in out.iterdir() if ".tmp" in p.name] if out.exists() else True


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_bench_sampler_stops_on_a_signal(tiny_run, sig):
    patch = """
import twopgraph.bench.sampler as bs
real = bs.run
def run(cfg):
    stop()
bs.run = run
"""
    root, _ = tiny_run
    code, err = _run_stopped(patch, sig, ["bench", "sampler", "--dataset", "synthetic-tiny",
                                          "--data-root", root])
    _one_stop_line(code, err, sig)
