"""twopgraph/core/files.py: the temporary-name format on any host name, and temporary folders
with a plain mkdir's mode (a store or partition renamed into a shared data root)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from twopgraph.core import files


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.mark.parametrize("hostname", ["vm", "build-host-7", "node_3.cluster", "a b/c"])
def test_temporaries_of_this_host_are_recognised_whatever_its_name(tmp_path, monkeypatch,
                                                                    hostname):
    """host_tag turns '-' and other characters into '_': such a name still parses as this
    host's, so a dead writer's temporary is swept (and one of another host is not)."""
    monkeypatch.setattr(socket, "gethostname", lambda: hostname)
    dead = _dead_pid()
    mine = tmp_path / f".{'a.npz'}.tmp-{dead}-{files.host_tag()}-abcd1234"
    other = tmp_path / f".a.npz.tmp-{dead}-elsewhere-abcd1234"
    for p in (mine, other):
        p.write_bytes(b"partial")
    t = files.parse_temp(mine.name)
    assert t is not None and (t.target, t.pid, t.ours) == ("a.npz", dead, True)
    assert files.sweep_orphans(tmp_path, target="a.npz") == [mine]
    assert other.exists() and not mine.exists()


@pytest.mark.skipif(os.name != "posix", reason="file modes")
def test_temp_folder_has_a_plain_mkdirs_mode(tmp_path):
    old = os.umask(0o022)
    try:
        folder = files.temp_folder(tmp_path / "store")
        plain = tmp_path / "plain"
        plain.mkdir()
    finally:
        os.umask(old)
    assert folder.name.startswith(".store.tmp-")
    assert (folder.stat().st_mode & 0o777) == (plain.stat().st_mode & 0o777) == 0o755
