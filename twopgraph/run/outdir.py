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
- **Writes during the run**: :func:`~twopgraph.core.files.writing` turns an ``OSError`` (full
  disk, read-only, removed folder) into one :class:`~twopgraph.errors.TwopgraphError` line
  naming the file and the space left; files are written atomically
  (:func:`~twopgraph.core.files.atomic_write_bytes`),
  so the previous checkpoint and metrics stay intact and no half-written file remains.
- **Cleanup**: a run that fails removes the folders it created if they are still empty (bad
  data, a refused ``--resume``, Ctrl-C before the first epoch ends): no empty ``--out`` is left.

Example::

    >>> with RunDir("runs/x") as rd:                        # doctest: +SKIP
    ...     with writing(rd.path / "metrics.json"):
    ...         write_json(rd.path / "metrics.json", {...})
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from twopgraph.core.files import refuse_dangling
from twopgraph.core.locks import FileLock
from twopgraph.errors import ConfigError

if TYPE_CHECKING:
    from types import TracebackType

log = logging.getLogger("twopgraph")

LOCK_NAME = ".twopgraph.lock"
#: The files that mark a folder as holding a run (``metrics.json``, ``checkpoint.pt``: what
#: :mod:`twopgraph.run.train` writes); a second run into it needs ``--resume`` or ``--overwrite``.
RUN_FILES = ("metrics.json", "checkpoint.pt")
#: The logs of a run beside them (``epochs.csv``), removed with its files by ``--overwrite``.
RUN_LOGS = ("epochs.csv",)


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


class RunDir:
    """The output folder ``path`` of one run, claimed by :meth:`claim` (or ``with``) and
    given back by :meth:`release` (see the module doc). ``flag`` names the option in
    messages; ``resume`` and ``overwrite`` (``--resume``, ``--overwrite``) allow a folder that
    already holds a run (:func:`check_out`)."""

    def __init__(self, path: str | os.PathLike, flag: str = "--out", *, resume: bool = False,
                 overwrite: bool = False) -> None:
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

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
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
                self._remove_run(held + [n for n in RUN_LOGS if (self.path / n).exists()])
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

