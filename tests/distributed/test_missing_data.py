"""What a machine that runs a rank must hold -- the partition's ``meta.json``, the rank's part
folder (and ``cluster.npy`` for a global part) and the dataset's store -- is checked when
the part is loaded: a missing piece is one line naming the path, where it was looked for and
the machine (``socket.gethostname()``), as a second machine without a copy meets it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import community_data

from twopgraph.distributed.partition.format import PartitionError
from twopgraph.distributed.partition.load import load_part, read_meta
from twopgraph.distributed.partition.selfdep import partition_selfdep
from twopgraph.store.reader import open_store
from twopgraph.store.writer import write_store

HOST = "node1"


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """``root/data/store`` (a store) and ``root/parts-{local,global}`` (2-part partitions of
    it, recording the store relative to themselves)."""
    root = tmp_path_factory.mktemp("missing")
    store = write_store(community_data(400, k=4), root / "data" / "store")
    for rep in ("local", "global"):
        partition_selfdep(open_store(store), 2, 1, root / f"parts-{rep}", num_clusters=8,
                          representation=rep)
    return root


@pytest.fixture()
def node1(monkeypatch):
    """This process runs on "node1"."""
    monkeypatch.setattr(socket, "gethostname", lambda: HOST)


def _copy(made: Path, to: Path, rep: str = "local", store: bool = True) -> Path:
    """The partition (and, with ``store``, the store) copied to ``to`` as rsync would to a
    second machine: the same layout below ``to``."""
    shutil.copytree(made / f"parts-{rep}", to / f"parts-{rep}")
    if store:
        shutil.copytree(made / "data", to / "data")
    return to / f"parts-{rep}"


def _one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg and f"on host {HOST}" in msg, msg
    return msg


def test_a_complete_copy_loads(made, tmp_path, node1):
    parts = _copy(made, tmp_path)
    part = load_part(parts, 1)
    assert Path(part.store.store) == (tmp_path / "data" / "store").resolve()


def test_partition_folder_missing_names_the_host(made, tmp_path, node1):
    with pytest.raises(PartitionError) as e:
        read_meta(tmp_path / "nowhere")
    msg = _one_line(e)
    assert "partition folder" in msg and str(tmp_path / "nowhere") in msg
    (tmp_path / "empty").mkdir()
    with pytest.raises(PartitionError, match="no meta.json") as e:
        read_meta(tmp_path / "empty")
    _one_line(e)


def test_store_not_copied_names_where_it_was_looked_for(made, tmp_path, node1):
    """The partition copied without its store (and the store's absolute path not on this
    machine either): the store, the recorded paths and the host in one line."""
    parts = _copy(made, tmp_path, store=False)
    moved = made.parent / (made.name + "-away")  # the absolute path finds nothing too
    os.rename(made, moved)
    try:
        with pytest.raises(PartitionError, match="cannot be opened") as e:
            load_part(parts, 0)
    finally:
        os.rename(moved, made)
    msg = _one_line(e)
    assert str(tmp_path / "data" / "store") in msg and "no such folder" in msg
    assert f"nor at its store_absolute {made / 'data' / 'store'}" in msg


def test_incomplete_store_names_the_missing_file(made, tmp_path, node1):
    parts = _copy(made, tmp_path)
    (tmp_path / "data" / "store" / "feat.npy").unlink()  # an interrupted copy
    with pytest.raises(PartitionError) as e:
        load_part(parts, 1)
    assert "no feat.npy (incomplete copy)" in _one_line(e)


@pytest.mark.parametrize("rep", ["local", "global"])
def test_part_folder_of_another_machine_is_not_needed(made, tmp_path, node1, rep):
    """A machine holds the part folders of its own ranks only: part 1 loads without part0/,
    part 0 is refused naming part0/ and the host."""
    parts = _copy(made, tmp_path, rep)
    shutil.rmtree(parts / "part0")
    load_part(parts, 1)
    with pytest.raises(PartitionError) as e:
        load_part(parts, 0)
    msg = _one_line(e)
    assert f"{parts / 'part0'}: missing" in msg and "where part 0 is loaded" in msg


def test_global_part_needs_the_cluster_file(made, tmp_path, node1):
    parts = _copy(made, tmp_path, "global")
    (parts / "cluster.npy").unlink()
    with pytest.raises(PartitionError) as e:
        load_part(parts, 1)
    assert f"{parts / 'cluster.npy'}: missing" in _one_line(e)


def test_missing_part_file_names_the_host(made, tmp_path, node1):
    parts = _copy(made, tmp_path)
    (parts / "part1" / "indices.npy").unlink()
    with pytest.raises(PartitionError) as e:
        load_part(parts, 1)
    assert "indices.npy: missing or unreadable (FileNotFoundError on host node1)" in \
        _one_line(e)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare(1) for a host name of its own")
def test_cli_on_a_machine_without_the_store(tmp_path):
    """``twopgraph train --partitions`` on "node1" (a UTS namespace of its own), where the
    store was not copied: exit 2 and one line naming the store and node1."""
    store = write_store(community_data(300, k=3), tmp_path / "a" / "data" / "store")
    partition_selfdep(open_store(store), 1, 1, tmp_path / "a" / "parts", num_clusters=6)
    shutil.copytree(tmp_path / "a" / "parts", tmp_path / "b" / "parts")
    shutil.rmtree(tmp_path / "a" / "data")  # nor at the absolute path recorded
    cmd = [sys.executable, "-m", "twopgraph", "train", "--partitions",
           str(tmp_path / "b" / "parts"), "--epochs", "1", "--device", "cpu",
           "--no-progress", "--out", str(tmp_path / "run")]
    proc = subprocess.run(["unshare", "--uts", "sh", "-c", 'hostname node1 && exec "$@"',
                           "sh", *cmd], capture_output=True, text=True, timeout=120,
                          check=False)
    if proc.returncode != 2 and "hostname" in proc.stderr:
        pytest.skip(f"cannot set a host name in a UTS namespace: {proc.stderr.strip()}")
    lines = [x for x in proc.stderr.splitlines() if "error" in x.lower()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("twopgraph: error: ") and "Traceback" not in proc.stderr
    assert "on host node1" in lines[0] and str(tmp_path / "b" / "data" / "store") in lines[0]
