"""Faults around files (issue 14): temp files of killed writers, file modes, a full or
unwritable destination, a damaged cluster cache, and METIS printing to stdout.

Each case is a fault a user can cause or meet (kill -9, a full disk, a read-only mount, a
damaged cache file) and the behaviour promised for it: no leftovers after the next write, the
user's umask, one line naming the file and the free space, one warning and a rebuild, one JSON
line on stdout. The tmpfs cases need ``mount`` (root); they are skipped without it.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import community_data, run_cli

from twopgraph.core.files import atomic_write_bytes
from twopgraph.errors import OutputError, TwopgraphError
from twopgraph.locality import cluster_graph

REPO = Path(__file__).resolve().parents[2]
HOST = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())[:64] or "localhost"


def _temp_name(target: str, pid: int, host: str = HOST, rand: str = "abcd1234") -> str:
    """The name atomic_write_bytes gives its temp file for ``target``."""
    return f".{target}.tmp-{pid}-{host}-{rand}"


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.fixture
def tmpfs(tmp_path):
    """``mount(size, ro=False) -> Path``: a fresh tmpfs of ``size`` bytes (unmounted after the
    test); skips the test where mounting is not permitted."""
    mounted = []

    def mount(size: int = 512 * 1024, ro: bool = False) -> Path:
        where = tmp_path / f"mnt{len(mounted)}"
        where.mkdir()
        opts = f"size={size}" + (",ro" if ro else "")
        try:
            r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)],
                               capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            pytest.skip(f"cannot mount a tmpfs here ({e})")
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()})")
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _leftovers(folder: Path, keep=()) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


# -- 1. leftovers and modes ------------------------------------------------------------------------

KILLED_WRITER = """
import sys, time
from pathlib import Path
from twopgraph.core.files import atomic_write_bytes
target, flag = Path(sys.argv[1]), Path(sys.argv[2])
def write(f):
    f.write(b"half a file")
    f.flush()
    flag.write_text("writing")
    time.sleep(120)
atomic_write_bytes(target, write)
"""


def test_temp_file_of_a_killed_writer_is_removed_by_the_next_write(tmp_path):
    target, flag = tmp_path / "metrics.json", tmp_path.parent / f"{tmp_path.name}.flag"
    target.write_text("old\n")
    p = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(target), str(flag)],
                         cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while not flag.exists():
            assert p.poll() is None and time.monotonic() < deadline, "writer did not start"
            time.sleep(0.05)
    finally:
        p.kill()  # SIGKILL: no finally clause runs in the writer
        p.wait()
    left = _leftovers(tmp_path, keep={"metrics.json"})
    assert len(left) == 1, left  # the killed writer's temp file, named after its pid
    assert left[0].startswith(f".metrics.json.tmp-{p.pid}-"), left
    assert target.read_text() == "old\n"  # the rename never happened
    atomic_write_bytes(target, lambda f: f.write(b"new\n"))
    assert target.read_text() == "new\n"
    assert _leftovers(tmp_path) == ["metrics.json"]


def test_only_temp_files_of_dead_writers_of_this_target_and_host_are_removed(tmp_path):
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    dead = _dead_pid()
    try:
        names = {
            "dead": _temp_name("a.npz", dead),
            "dead2": _temp_name("a.npz", dead, rand="zz_9zz_9"),
            "mine": _temp_name("a.npz", os.getpid()),  # another thread of this process
            "live": _temp_name("a.npz", live.pid),
            "other_host": _temp_name("a.npz", dead, host="some.other.host"),
            "other_target": _temp_name("b.npz", dead),
            "longer_target": _temp_name("a.npz.tmp-1-x-abcdefgh", dead),
            "not_pattern": f".a.npz.tmp-{dead}-{HOST}-abc",
            "old_style": "a.npzk3j4h5g6.tmp",
        }
        for name in names.values():
            (tmp_path / name).write_bytes(b"partial")
        (tmp_path / _temp_name("a.npz", dead, rand="dir45678")).mkdir()  # a folder: not ours
        atomic_write_bytes(tmp_path / "a.npz", lambda f: f.write(b"x"))
        left = set(_leftovers(tmp_path))
        assert names["dead"] not in left and names["dead2"] not in left
        expected_kept = set(names.values()) - {names["dead"], names["dead2"]}
        assert expected_kept <= left
        assert left == expected_kept | {"a.npz", _temp_name("a.npz", dead, rand="dir45678")}
    finally:
        live.kill()
        live.wait()


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002, 0o027])
def test_written_files_get_the_umask_mode_not_0600(tmp_path, mask):
    old = os.umask(mask)
    try:
        atomic_write_bytes(tmp_path / "f.json", lambda f: f.write(b"{}"))
        np.save(tmp_path / "ref.npy", np.zeros(1))  # what a plain open() gives
    finally:
        os.umask(old)
    mode = (tmp_path / "f.json").stat().st_mode & 0o777
    assert mode == 0o666 & ~mask == (tmp_path / "ref.npy").stat().st_mode & 0o777, oct(mode)


def test_cluster_cache_is_readable_by_others_under_umask_022(tmp_path):
    old = os.umask(0o022)
    try:
        c = cluster_graph(community_data().graph, 4, cache_dir=tmp_path / "clusters")
    finally:
        os.umask(old)
    path = tmp_path / "clusters" / f"metis-{c.key}.npz"
    assert path.stat().st_mode & 0o777 == 0o644


# -- 2. full disk, unwritable destination ----------------------------------------------------------

def _assert_output_error(e: BaseException, path: Path) -> str:
    assert isinstance(e, OutputError) and isinstance(e, TwopgraphError), repr(e)
    msg = str(e)
    assert "\n" not in msg and str(path) in msg and " free in " in msg, msg
    assert e.filename == str(path)
    return msg


def test_full_disk_is_one_line_naming_file_and_free_space(tmpfs):
    disk = tmpfs(512 * 1024)
    target = disk / "out" / "feat.npz"
    atomic_write_bytes(target, lambda f: np.savez(f, a=np.arange(3)))
    old = target.read_bytes()
    with pytest.raises(OutputError) as ei:
        atomic_write_bytes(target, lambda f: np.savez(f, a=np.zeros(1 << 18)))  # 2 MiB
    msg = _assert_output_error(ei.value, target)
    assert "No space left on device" in msg and ei.value.errno == errno.ENOSPC
    assert re.search(r"\d+(\.\d)? (B|KiB) free in ", msg), msg
    assert target.read_bytes() == old  # the old file is intact ...
    assert _leftovers(disk / "out") == ["feat.npz"]  # ... and the temp file gone


def test_full_disk_during_torch_save_is_an_output_error(tmpfs):
    """torch.save turns the OSError of its file into a RuntimeError: still a full disk."""
    disk = tmpfs(256 * 1024)
    target = disk / "checkpoint.pt"
    atomic_write_bytes(target, lambda f: torch.save({"w": torch.zeros(4)}, f))
    with pytest.raises(OutputError) as ei:
        atomic_write_bytes(target, lambda f: torch.save({"w": torch.zeros(1 << 18)}, f))
    assert "No space left on device" in _assert_output_error(ei.value, target)
    assert torch.load(target)["w"].shape == (4,)
    assert _leftovers(disk) == ["checkpoint.pt"]


def test_read_only_mount_is_an_output_error(tmpfs):
    disk = tmpfs(64 * 1024, ro=True)
    with pytest.raises(OutputError) as ei:
        atomic_write_bytes(disk / "metrics.json", lambda f: f.write(b"{}"))
    assert "Read-only file system" in _assert_output_error(ei.value, disk / "metrics.json")


@pytest.mark.parametrize("where", ["proc", "file_parent", "file_ancestor", "is_dir",
                                   "long_name"])
def test_destinations_that_cannot_hold_the_file(tmp_path, where):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    path = {"proc": Path(f"/proc/{os.getpid()}/metrics.json"),
            "file_parent": blocker / "metrics.json",
            "file_ancestor": blocker / "sub" / "metrics.json",
            "is_dir": tmp_path,
            "long_name": tmp_path / ("n" * 300) / "metrics.json"}[where]
    with pytest.raises(OutputError) as ei:
        atomic_write_bytes(path, lambda f: f.write(b"{}"))
    msg = _assert_output_error(ei.value, path)
    if where == "file_parent":
        assert f"{blocker} is not a folder" in msg
    assert blocker.read_text() == "x"
    assert _leftovers(tmp_path) == ["a_file"]


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS, errno.EPERM])
def test_refused_rename_is_an_output_error(tmp_path, monkeypatch, code):
    """Root ignores permission bits, so the refusal is injected at the rename."""
    target = tmp_path / "m.json"
    target.write_text("old")

    def refuse(src, dst):
        raise OSError(code, os.strerror(code), str(dst))

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OutputError) as ei:
        atomic_write_bytes(target, lambda f: f.write(b"new"))
    assert os.strerror(code) in _assert_output_error(ei.value, target)
    assert target.read_text() == "old" and _leftovers(tmp_path) == ["m.json"]


@pytest.mark.parametrize("code", [errno.EDQUOT, errno.EFBIG, errno.ENOSPC])
def test_quota_and_size_limits_while_writing_are_output_errors(tmp_path, code):
    def write(f):
        f.write(b"some")
        raise OSError(code, os.strerror(code))

    with pytest.raises(OutputError) as ei:
        atomic_write_bytes(tmp_path / "x.npz", write)
    assert os.strerror(code) in _assert_output_error(ei.value, tmp_path / "x.npz")
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("exc", [FileNotFoundError(errno.ENOENT, "No such file", "/in.npy"),
                                 PermissionError(errno.EACCES, "Permission denied", "/in"),
                                 RuntimeError("a bug"), KeyboardInterrupt()])
def test_other_errors_of_the_writer_keep_their_type(tmp_path, exc):
    """An OSError that is not about the destination (a file the writer reads, a bug) keeps
    its traceback: it is not turned into a one-line user error."""
    def write(f):
        f.write(b"x")
        raise exc

    with pytest.raises(type(exc)) as ei:
        atomic_write_bytes(tmp_path / "x.bin", write)
    assert not isinstance(ei.value, OutputError)
    assert _leftovers(tmp_path) == []


def test_unwritable_cluster_cache_stays_a_warning(tmpfs, caplog):
    """OutputError is an OSError: a full data root costs a METIS rerun, not the run."""
    disk = tmpfs(4096)
    (disk / "filler").write_bytes(b"\0" * 4096)  # full
    g = community_data().graph
    with caplog.at_level(logging.WARNING, logger="twopgraph"):
        c = cluster_graph(g, 300, cache_dir=disk / "clusters")
    assert not c.from_cache and c.parts.shape == (g.num_nodes,)
    msgs = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("could not write the cluster cache" in m for m in msgs), msgs
    assert [p.name for p in (disk / "clusters").iterdir()] == []


def _cli(args, cwd, timeout=180) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONWARNINGS="ignore", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "twopgraph", *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("data")


@pytest.mark.slow
def test_train_checkpoint_on_a_full_disk_is_one_line_exit_2(tmpfs, data_root, tmp_path):
    disk = tmpfs(8 * 1024)  # room for the writability probe, not for a checkpoint
    out = disk / "run"
    p = _cli(["train", "--dataset", "synthetic-tiny", "--data-root", data_root, "--out", out,
              "--epochs", "1", "--hidden", "16", "--fanouts", "5,5", "--batch-size", "256",
              "--no-progress", "--device", "cpu"], tmp_path)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and p.stdout.strip() == ""
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("twopgraph: error:") and " free " in last, last
    assert not [q for q in disk.rglob("*") if ".tmp" in q.name]


def test_ingestion_on_a_full_disk_is_one_line_exit_2_not_sigbus(tmpfs, tmp_path):
    """The CSR is scattered into a memory-mapped scratch file: unreserved, a full disk killed
    the process with SIGBUS (exit -7, no message) in the middle of the scatter."""
    from twopgraph.datasets.papers import PapersSpec, write_ogb_raw
    raw = tmp_path / "src" / "ogbn_papers100M"
    write_ogb_raw(PapersSpec(scale=2e-5), raw)  # 2,221 vertices: a 256 KiB CSR scratch file
    disk = tmpfs(128 * 1024)
    (disk / "ogbn_papers100M").symlink_to(raw)
    p = _cli(["info", "--dataset", "ogbn-papers100M", "--data-root", disk], tmp_path)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr and p.stdout.strip() == ""
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("twopgraph: error:") and "No space left" in last, last
    stores = disk / "stores"
    assert not stores.exists() or not [q for q in stores.iterdir()], list(stores.iterdir())


# -- 3. damaged cluster cache ----------------------------------------------------------------------

def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _save(path: Path, save, *args, **kwargs) -> None:
    with open(path, "wb") as f:
        save(f, *args, **kwargs)


def _rewrite(path: Path, **changes) -> None:
    with np.load(path) as z:
        arrays = dict(z)
    arrays.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del arrays[key]
    with open(path, "wb") as f:
        np.savez(f, **arrays)


DAMAGE = {
    "garbage": lambda p: p.write_bytes(b"this is not a zip file\n" * 40),
    "empty": lambda p: p.write_bytes(b""),
    "truncated": _truncate,
    "npy_inside": lambda p: _save(p, np.save, np.arange(5)),
    "pickled": lambda p: _save(p, np.savez, parts=np.array([{"a": 1}], dtype=object)),
    "no_parts": lambda p: _rewrite(p, parts=None),
    "parts_short": lambda p: _rewrite(p, parts=np.zeros(5, dtype=np.int32)),
    "parts_float": lambda p: _rewrite(p, parts=np.zeros(600, dtype=np.float64)),
    "parts_out_of_range": lambda p: _rewrite(p, parts=np.full(600, 99, dtype=np.int32)),
    "format_vector": lambda p: _rewrite(p, format=np.array([3, 3])),
    "other_k": lambda p: _rewrite(p, num_clusters=np.int64(5)),
    "flipped_bytes": lambda p: p.write_bytes(bytes(b ^ 0xFF for b in p.read_bytes())),
}


@pytest.fixture(scope="module")
def cgraph():
    return community_data().graph  # 600 vertices


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_cluster_cache_is_one_warning_and_rebuilt(cgraph, tmp_path, caplog, damage):
    first = cluster_graph(cgraph, 6, cache_dir=tmp_path)
    path = tmp_path / f"metis-{first.key}.npz"
    assert path.is_file()
    DAMAGE[damage](path)
    with caplog.at_level(logging.WARNING, logger="twopgraph"):
        again = cluster_graph(cgraph, 6, cache_dir=tmp_path)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert str(path) in warnings[0] and "\n" not in warnings[0], warnings[0]
    assert not again.from_cache and np.array_equal(again.parts, first.parts)
    assert again.edge_cut == first.edge_cut
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="twopgraph"):
        third = cluster_graph(cgraph, 6, cache_dir=tmp_path)  # the rebuilt file is read back
    assert third.from_cache and np.array_equal(third.parts, first.parts)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# -- 4. METIS output off stdout --------------------------------------------------------------------

def test_c_level_writes_during_metis_do_not_reach_stdout(cgraph, monkeypatch, capfd, caplog):
    import ctypes

    import pymetis
    real = pymetis.part_graph

    def noisy(*a, **kw):
        os.write(1, b"\t***Cannot bisect a graph with 0 vertices!\n" * 3)
        ctypes.CDLL(None).printf(b"***printed through C stdio\n")  # buffered in libc
        return real(*a, **kw)

    monkeypatch.setattr(pymetis, "part_graph", noisy)
    before = os.fstat(1)
    print("before", flush=True)
    with caplog.at_level(logging.WARNING, logger="twopgraph"):
        c = cluster_graph(cgraph, 6)
    print("after", flush=True)
    ctypes.CDLL(None).fflush(None)
    out, err = capfd.readouterr()
    assert out == "before\nafter\n"
    after = os.fstat(1)  # fd 1 is back where it was
    assert (before.st_ino, before.st_dev) == (after.st_ino, after.st_dev)
    assert c.parts.shape == (cgraph.num_nodes,)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "Cannot bisect a graph with 0 vertices! (x3)" in warnings[0]
    assert "printed through C stdio" in warnings[0]


def test_fd1_is_restored_when_metis_raises(monkeypatch, capfd):
    import pymetis

    def fails(*a, **kw):
        os.write(1, b"partial output\n")
        raise MemoryError("metis")

    before = os.fstat(1)
    monkeypatch.setattr(pymetis, "part_graph", fails)
    with pytest.raises(MemoryError):
        cluster_graph(community_data(n=100).graph, 4)
    after = os.fstat(1)
    assert (before.st_ino, before.st_dev) == (after.st_ino, after.st_dev)
    print("still here", flush=True)
    assert capfd.readouterr().out == "still here\n"


def test_partition_json_is_one_stdout_line_when_metis_warns(data_root, tmp_path):
    """2000 clusters of synthetic-tiny's 2000 vertices: METIS prints "too many parts"."""
    p = _cli(["partition", "--dataset", "synthetic-tiny", "--data-root", data_root,
              "--num-parts", "2", "--num-clusters", "2000", "--out", tmp_path / "parts",
              "--json"], tmp_path)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 1, p.stdout[:500]
    assert json.loads(lines[0])["num_parts"] == 2
    assert "METIS printed: " in p.stderr and "too many parts" in p.stderr


# -- issue 22, item 9: truncated checkpoints and dangling --out links ---------------------------
@pytest.fixture(scope="module")
def small_checkpoint(tmp_path_factory):
    from twopgraph.config import TrainConfig
    from twopgraph.run.train import train
    out = tmp_path_factory.mktemp("ckpt") / "o"
    cfg = TrainConfig.of(epochs=1, batch_size=64, out=str(out), progress=False,
                         renumber=False, schedule="random", eval_every=0)
    train(cfg, community_data(n=300, seed=2))
    return out / "checkpoint.pt"


@pytest.mark.parametrize("size", [0, 10, 50_000])
def test_truncated_checkpoint_is_named_truncated_or_corrupt(small_checkpoint, tmp_path, size):
    from twopgraph.errors import ConfigError
    from twopgraph.run.checkpoint import read_checkpoint
    from twopgraph.run.predict import read_model_checkpoint
    bad = tmp_path / "checkpoint.pt"
    bad.write_bytes(small_checkpoint.read_bytes()[:size])
    for read in (lambda: read_model_checkpoint(bad),
                 lambda: read_checkpoint(bad, {"fingerprint": "x"}, 5)):
        with pytest.raises(ConfigError) as err:
            read()
        msg = str(err.value)
        assert "\n" not in msg and str(bad) in msg and "truncated or corrupt" in msg, msg
        assert f"({size:,} bytes;" in msg and "Errno" not in msg


@pytest.mark.parametrize("below", [False, True])
def test_dangling_out_symlink_is_named_as_such(tmp_path, capsys, below):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "gone")
    out = link / "sub" if below else link
    rc, o, err = run_cli(["train", "--dataset", "synthetic-tiny", "--data-root",
                          tmp_path / "root", "--out", out], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "is a dangling symbolic link" in err and str(tmp_path / "gone") in err
    assert "exists and is not a folder" not in err
    assert not (tmp_path / "root").exists() and not (tmp_path / "gone").exists()


@pytest.mark.parametrize("below", [False, True])
def test_dangling_partition_out_is_named_before_any_work(tmp_path, capsys, below):
    """``partition --out`` (distributed/commands.py) through a dangling link: one line naming the
    link, before the data is generated (it said "cannot create ... (File exists)", or failed
    after clustering with "Not a directory")."""
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "gone")
    out = link / "sub" if below else link
    rc, o, err = run_cli(["partition", "--dataset", "synthetic-tiny", "--data-root",
                          tmp_path / "root", "--num-parts", "2", "--out", out], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{link} is a dangling symbolic link (to {tmp_path / 'gone'}" in err
    assert "exists and is not a folder" not in err and "File exists" not in err
    assert not (tmp_path / "root").exists() and not (tmp_path / "gone").exists()


@pytest.mark.parametrize("below", [False, True])
def test_dangling_link_in_the_library_paths(tmp_path, below):
    """The same line from RunDir (any run folder) and partition_selfdep (the Python API)."""
    from twopgraph.distributed.partition.selfdep import partition_selfdep
    from twopgraph.errors import ConfigError
    from twopgraph.run.outdir import RunDir
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "gone")
    out = link / "sub" if below else link
    with pytest.raises(ConfigError, match="is a dangling symbolic link") as err:
        RunDir(out).claim()
    assert "exists and is not a folder" not in str(err.value)
    with pytest.raises(ConfigError, match="is a dangling symbolic link"):
        partition_selfdep(community_data(n=200, seed=1), 2, 1, out)
    assert not (tmp_path / "gone").exists()
