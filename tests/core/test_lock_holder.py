"""The refusal of a held lock names its holder even when the holder has locked the file but not
yet written its name (the race behind a flaky two-runs test)."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from twopgraph.core import FileLock
from twopgraph.errors import ConfigError

fcntl = pytest.importorskip("fcntl")  # no flock on Windows: nothing is locked there


def test_refusal_waits_for_the_holder_to_write_its_name(tmp_path):
    lock = tmp_path / ".out.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held, still empty

    def write_later():
        time.sleep(0.2)
        os.write(fd, (json.dumps({"pid": 4242, "host": "nodeA"}) + "\n").encode())

    t = threading.Thread(target=write_later)
    t.start()
    try:
        with pytest.raises(ConfigError, match=r"\(pid 4242 on host nodeA\)"):
            FileLock(lock, "the run folder", run=True).acquire()
    finally:
        t.join()
        os.close(fd)


def test_a_holder_that_never_writes_is_unknown(tmp_path):
    lock = tmp_path / ".out.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        t0 = time.monotonic()
        with pytest.raises(ConfigError, match=r"\(pid unknown\)"):
            FileLock(lock, "the run folder", run=True).acquire()
        assert time.monotonic() - t0 < 5  # bounded wait, no hang
    finally:
        os.close(fd)
