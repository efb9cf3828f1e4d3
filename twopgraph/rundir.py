"""A run's output folder (``--out``): owned by one run at a time, checked before any work,
written with one-line errors, and not left behind empty by a run that failed.

- **Ownership**: :class:`RunDir` creates the folder (remembering which folders it created) and
  holds an exclusive ``flock`` on ``OUT/.twopgraph.lock`` for the whole run; the file names the
  holder (pid, host). A second run into a held folder is refused with a
  :class:`~twopgraph.errors.ConfigError` (exit 2) naming the holder, before it loads any data.
  The kernel drops the lock when its process dies, however it dies (``kill -9`` included), so a
  lock file left by a dead run never blocks the next one. The lock file is removed when the run
  ends. The lock is as good as the file system's ``flock``: local file systems and NFS (Linux
  >= 2.6.12 emulates it with POSIX locks) honour it, between processes of one host and, on
  NFS, of several. Where Python has no ``fcntl`` (Windows) the folder is **not** locked: two
  runs into one ``--out`` then overwrite each other's files, as before; a file system that
  refuses locks (``ENOLCK``) gets one warning and no lock.
- **One run per folder**: a folder that already holds a run (:data:`RUN_FILES`: a
  ``metrics.json`` or ``checkpoint.pt``) is refused (:func:`check_out`, one line) unless the
  new run continues it (``--resume``) or replaces it (``--overwrite``: the old files are
  removed as soon as the run holds the lock, so a new run that then fails never leaves the old
  run's files looking like its own). An empty folder or one with other files is fine.
- **Writability up front**: creating and writing the lock file is the probe: an ``--out`` that
  cannot be written (read-only, ``/proc/...``, a full disk) is refused before loading data.
  :func:`check_data_root` does the same for the data root, where a dataset must be generated
  or converted.
- **Writes during the run**: :func:`~twopgraph.files.writing` turns an ``OSError`` (full
  disk, read-only, removed folder) into one :class:`~twopgraph.errors.TwopgraphError` line
  naming the file and the space left; files are written atomically
  (:func:`~twopgraph.files.atomic_write_bytes`),
  so the previous checkpoint and metrics stay intact and no half-written file remains.
- **Cleanup**: a run that fails removes the folders it created if they are still empty (bad
  data, a refused ``--resume``, Ctrl-C before the first epoch ends): no empty ``--out`` is left.

Example::

    >>> with RunDir("runs/x") as rd:                        # doctest: +SKIP
    ...     with writing(rd.path / "metrics.json"):
    ...         write_json(rd.path / "metrics.json", {...})
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import tempfile
from pathlib import Path

from .errors import ConfigError
from .files import free_note

try:
    import fcntl
except ImportError:  # Windows: no flock, the folder is not locked (see the module doc)
    fcntl = None

log = logging.getLogger("twopgraph")

LOCK_NAME = ".twopgraph.lock"
#: The files that mark a folder as holding a run (``metrics.json``, ``checkpoint.pt``: what
#: :mod:`twopgraph.train` writes); a second run into it needs ``--resume`` or ``--overwrite``.
RUN_FILES = ("metrics.json", "checkpoint.pt")


def run_files(path: str | os.PathLike) -> list[str]:
    """The :data:`RUN_FILES` present in the folder ``path`` (none if it does not exist)."""
    return [name for name in RUN_FILES if (Path(path) / name).exists()]


def check_out(path: str | os.PathLike, resume: bool = False, overwrite: bool = False,
              flag: str = "--out") -> list[str]:
    """Refuse (:class:`ConfigError`, one line) ``resume`` with ``overwrite``, and a folder
    ``path`` that already holds a run (:func:`run_files`) unless ``resume`` or ``overwrite``;
    returns the run files found. Reads only: :meth:`RunDir.claim` checks again under the
    lock, and removes the files with ``overwrite``."""
    if resume and overwrite:
        raise ConfigError("--resume and --overwrite exclude each other: --resume continues the "
                          f"run in {flag} {path}, --overwrite replaces it; give one of them")
    held = run_files(path)
    if held and not (resume or overwrite):
        raise ConfigError(f"{flag} {path} already holds a run ({', '.join(held)}); give "
                          f"--overwrite to replace it, --resume to continue it, or another "
                          f"{flag}")
    return held


def refuse_dangling(path: str | os.PathLike, flag: str = "--out") -> None:
    """Refuse in one line (:class:`ConfigError`) a ``path`` that is, or lies below, a symbolic
    link to nothing: the link exists, so creating the folder fails, but it is not "a file in
    the way". The message names the link and its target."""
    path = Path(path)
    for p in (path, *path.parents):
        if p.is_symlink() and not p.exists():
            try:
                target = os.readlink(p)
            except OSError:
                target = "?"
            raise ConfigError(f"{flag} {path}: {p} is a dangling symbolic link (to {target}, "
                              f"which does not exist); create its target or remove the link")
        if p.exists():
            return


class RunDir:
    """The output folder ``path`` of one run, claimed by :meth:`claim` (or ``with``) and
    given back by :meth:`release` (see the module doc). ``flag`` names the option in
    messages; ``resume`` and ``overwrite`` (``--resume``, ``--overwrite``) allow a folder that
    already holds a run (:func:`check_out`)."""

    def __init__(self, path: str | os.PathLike, flag: str = "--out", *, resume: bool = False,
                 overwrite: bool = False):
        self.path = Path(path)
        self.flag = flag
        self.resume, self.overwrite = resume, overwrite
        self.created: list[Path] = []  # folders this run created, outermost first
        self._flock: FileLock | None = None

    @property
    def lock_path(self) -> Path:
        return self.path / LOCK_NAME

    def __enter__(self) -> "RunDir":
        self.claim()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.release(failed=exc_type is not None)
        return False

    def claim(self) -> "RunDir":
        """Create the folder if needed and take its lock; :class:`ConfigError` if another
        run holds it, if it holds a finished or stopped run (without ``resume`` or
        ``overwrite``), or if it cannot be created or written. With ``overwrite``, the old
        run's files are removed once the lock is held."""
        if self.resume and self.overwrite:  # before creating anything
            check_out(self.path, self.resume, self.overwrite, self.flag)
        try:
            self._make_folders()
            self._lock()
            # under the lock (a run still writing the folder is refused as in use above)
            held = check_out(self.path, self.resume, self.overwrite, self.flag)
            if held and self.overwrite:
                self._remove_run(held)
        except BaseException:
            self.release(failed=True)
            raise
        return self

    def release(self, failed: bool = False) -> None:
        """Remove the lock file and drop the lock; with ``failed``, also remove the folders
        :meth:`claim` created if nothing was written into them."""
        if self._flock is not None:
            self._flock.release()
            self._flock = None
        if failed:
            self._remove_created()

    # -- internals ----------------------------------------------------------------------------
    def _remove_run(self, names: list[str]) -> None:
        for name in names:
            try:
                (self.path / name).unlink(missing_ok=True)
            except OSError as e:
                raise ConfigError(f"--overwrite: cannot remove {self.path / name} "
                                  f"({e.strerror or e})") from None
        log.info("--overwrite: removed the previous run's %s from %s", ", ".join(names),
                 self.path)

    def _make_folders(self) -> None:
        refuse_dangling(self.path, self.flag)
        missing = []
        p = self.path
        while not p.exists() and p != p.parent:
            missing.append(p)
            p = p.parent
        for folder in reversed(missing):
            try:
                folder.mkdir()
            except FileExistsError:  # created meanwhile by someone else: not ours
                if not folder.is_dir():
                    raise ConfigError(f"{self.flag} {self.path}: {folder} exists and is not "
                                      f"a folder") from None
                continue
            except OSError as e:
                raise ConfigError(f"{self.flag} {self.path}: cannot create the folder "
                                  f"({e.strerror or e})") from None
            self.created.append(folder)
        if not self.path.is_dir():
            raise ConfigError(f"{self.flag} {self.path} exists and is not a folder")

    def _lock(self) -> None:
        self._flock = FileLock(self.lock_path, str(self.path), self.flag, run=True).acquire()

    def _remove_created(self) -> None:
        for folder in reversed(self.created):  # innermost first; only empty ones go
            try:
                folder.rmdir()
            except OSError:
                break
        self.created = []


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
                 blocking: bool = False, run: bool = False):
        self.lock_path = Path(lock_path)
        self.what, self.flag, self.blocking, self.run = what, flag, blocking, run
        self.holder = "run" if run else "process"
        self._fd: int | None = None
        self._key = os.path.abspath(self.lock_path)

    def __enter__(self) -> "FileLock":
        self.acquire()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
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


def _read_holder(fd: int) -> str:
    """``pid N on host H`` from a held lock file (best effort: it may be half-written)."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        d = json.loads(os.read(fd, 4096).decode())
        return f"pid {int(d['pid'])} on host {d['host']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "pid unknown"


def check_data_root(data_root=None, dataset: str | None = None) -> None:
    """Refuse, before anything is loaded, a data root (``data_root``, else
    ``$TWOPGRAPH_DATA``, else ``./datasets``) that is not a folder, or that cannot be written
    when ``dataset`` must be generated or converted there (it is not cached yet). A read-only
    data root holding what the run needs is fine (a shared cache): a cluster cache it cannot
    write costs a METIS rerun and a warning. Creates nothing."""
    from .datasets import dataset_path, resolve_data_root
    root = resolve_data_root(data_root)
    flag = "--data-root" if data_root else "the data root"
    existing = root
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{flag} {root}: {existing} is not a folder")
    problem = _probe(existing)
    if problem is None:
        return
    cache = dataset_path(dataset, data_root) if dataset else None  # a file or a store folder
    if cache is not None and not cache.exists():
        raise ConfigError(f"{flag} {root} is not writable ({problem}): {dataset} is not cached "
                          f"there and cannot be generated or converted; choose a writable "
                          f"--data-root (or $TWOPGRAPH_DATA)")


def _probe(folder: Path) -> str | None:
    """None if a file can be created (and removed again) in ``folder``, else the reason."""
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".twopgraph-probe-")
    except OSError as e:
        return e.strerror or str(e)
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(name)
    return None
