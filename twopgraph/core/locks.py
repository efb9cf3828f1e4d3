"""Exclusive file locks (``flock``) that name their holder: one output written by one process.

:class:`FileLock` guards an output that is not a run folder (a partition folder, a cache under
the data root) and is what :class:`~twopgraph.run.outdir.RunDir` holds for a run folder. The
kernel drops a lock when its process dies, however it dies, so a lock file left by a dead
process never blocks the next one (:func:`remove_stale_lock` removes such a file). Where Python
has no ``fcntl`` (Windows) nothing is locked; a file system that refuses locks (``ENOLCK``) gets
one warning and no lock.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from pathlib import Path
from types import TracebackType

from twopgraph.core.files import free_note
from twopgraph.errors import ConfigError

try:
    import fcntl
except ImportError:  # Windows: no flock, nothing is locked (see the module doc)
    fcntl = None

log = logging.getLogger("twopgraph")


class FileLock:
    """An exclusive ``flock`` on ``lock_path``, for an output that is not a run folder: a
    partition folder (which is replaced as a whole, so its lock lives beside it:
    :func:`sibling_lock`) or a cache under the data root. The same rules as :class:`RunDir`'s
    lock: the file names the holder (pid, host), the kernel drops the lock when its process
    dies, the file is removed on release, a file system without locks gets no lock.

    ``blocking`` False (an output the user names): a held lock is refused with a
    :class:`ConfigError`, one line naming ``what``, the holder and ``flag``. ``blocking`` True
    (a shared cache: the holder is building what this process needs): wait for it, with one
    log line, then go on (the caller finds the holder's result). Re-entrant within a process
    (one lock per path and process: ``flock`` would refuse a second descriptor of the same
    process). Use as a context manager.

    ``run`` True: the lock of a run folder (:class:`RunDir`): refused as "in use by another
    twopgraph run", never re-entrant (a second run in this process is refused too), and
    writing the holder into the file is the folder's writability probe: a folder that cannot
    take it is refused in one line with the space left there."""

    _held: dict[str, int] = {}  # lock path -> depth, this process

    def __init__(self, lock_path: str | os.PathLike, what: str, flag: str = "--out", *,
                 blocking: bool = False, run: bool = False) -> None:
        self.lock_path = Path(lock_path)
        self.what, self.flag, self.blocking, self.run = what, flag, blocking, run
        self.holder = "run" if run else "process"
        self._fd: int | None = None
        self._key = os.path.abspath(self.lock_path)

    def __enter__(self) -> "FileLock":
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        self.release()
        return False

    def acquire(self) -> "FileLock":
        if self._key in FileLock._held and not self.run:
            FileLock._held[self._key] += 1
            return self
        info = json.dumps({"pid": os.getpid(), "host": socket.gethostname()}) + "\n"
        if self.blocking:  # a cache folder: created by its first writer anyway
            with contextlib.suppress(OSError):
                self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(20):
            try:
                fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                if self.blocking:  # a read-only cache folder: nothing is written there anyway
                    log.debug("cannot lock %s (%s)", self.lock_path, e.strerror or e)
                    FileLock._held[self._key] = 1
                    return self
                raise ConfigError(f"{self.flag} {self.what}: cannot write there "
                                  f"({e.strerror or e})") from None
            if fcntl is not None:
                try:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        holder = _read_holder(fd)
                        if not self.blocking:
                            raise ConfigError(
                                f"{self.flag} {self.what} is in use by another twopgraph "
                                f"{self.holder} ({holder}); wait for it to end or choose "
                                f"another {self.flag}") from None
                        log.info("waiting for %s, which another twopgraph process (%s) is "
                                 "writing", self.what, holder)
                        fcntl.flock(fd, fcntl.LOCK_EX)
                except OSError as e:  # ENOLCK & co.: a file system without locks
                    log.warning("%s %s: cannot lock %s (%s): a concurrent %s is not refused",
                                self.flag, self.what, self.lock_path.name, e.strerror or e,
                                "run" if self.run else "writer")
                except BaseException:
                    os.close(fd)
                    raise
                try:  # the holder before us may have removed the file: start over
                    same = os.path.samestat(os.fstat(fd), os.stat(self.lock_path))
                except FileNotFoundError:
                    same = False
                if not same:
                    os.close(fd)
                    continue
            try:  # for a run folder also the writability probe: a full or read-only disk
                os.ftruncate(fd, 0)
                os.write(fd, info.encode())
            except OSError as e:
                if self.run:
                    with contextlib.suppress(OSError):
                        os.unlink(self.lock_path)
                    os.close(fd)
                    raise ConfigError(f"{self.flag} {self.what}: cannot write there "
                                      f"({e.strerror or e}{free_note(self.lock_path.parent)})"
                                      ) from None
            self._fd = fd
            FileLock._held[self._key] = FileLock._held.get(self._key, 0) + 1
            return self
        raise ConfigError(f"{self.flag} {self.what}: could not take {self.lock_path.name} "
                          f"(other {'runs' if self.run else 'processes'} keep replacing it)")

    def release(self) -> None:
        depth = FileLock._held.get(self._key, 0)
        if depth > 1:
            FileLock._held[self._key] = depth - 1
            return
        FileLock._held.pop(self._key, None)
        if self._fd is not None:
            with contextlib.suppress(OSError):  # while still locked
                os.unlink(self.lock_path)
            os.close(self._fd)
            self._fd = None


def remove_stale_lock(lock_path: str | os.PathLike) -> bool:
    """Remove the lock file ``lock_path`` if no process holds its lock (its holder died: the
    kernel dropped the lock, the file stayed); returns whether it was removed. A lock this
    process holds, or any other's, is left alone."""
    lock_path = Path(lock_path)
    if fcntl is None or os.path.abspath(lock_path) in FileLock._held:
        return False
    try:
        fd = os.open(lock_path, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if not os.path.samestat(os.fstat(fd), os.stat(lock_path)):
            return False
        os.unlink(lock_path)  # while locked: a new holder then locks a fresh file
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def sibling_lock(folder: str | os.PathLike) -> Path:
    """The lock file of an output folder that is replaced as a whole (a partition):
    ``.NAME.lock`` beside it, so that the replacement does not remove it."""
    folder = Path(folder)
    return folder.parent / f".{folder.name}.lock"


def _read_holder(fd: int, wait_s: float = 1.0) -> str:
    """``pid N on host H`` from a held lock file. The holder writes its name just after it
    takes the lock, so a file read in between is empty or half-written: read again for up to
    ``wait_s`` seconds before giving up with ``pid unknown``."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            d = json.loads(os.pread(fd, 4096, 0).decode())
            return f"pid {int(d['pid'])} on host {d['host']}"
        except (OSError, ValueError, KeyError, TypeError):
            if time.monotonic() >= deadline:
                return "pid unknown"
            time.sleep(0.01)
