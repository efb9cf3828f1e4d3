"""Durable files in one place: atomic writes, the one temporary-name format, the sweep of
temporaries left by killed writers, the one liveness check, and one-line write errors.

**Temporary names.** Everything twopgraph writes under a temporary name first (a file, a
store folder, a partition folder) is named ``.NAME.tmp-PID-HOST-XXXXXXXX`` beside its target
``NAME``: the writer's pid, its host (:func:`host_tag`) and 8 random characters
(:func:`temp_prefix`, given to ``tempfile.mkstemp``/``mkdtemp``). :func:`parse_temp` also reads
the names older versions used (``.NAME.tmp-PID-HOST`` for stores, ``.NAME.tmp-PID@HOST`` and
``.NAME.tmp-PID`` for partitions), so their orphans are still found.

**Orphans.** :func:`sweep_orphans` removes the temporaries in a folder whose writer ran on
this host and is gone (:func:`pid_alive`: no such process, or a zombie); a caller may restrict
it to one target and check the content before anything is removed. Temporaries of other hosts
(a data root on a shared file system) and of live writers are never touched.

**Write errors.** A destination that cannot take a file (disk or quota full, read-only, not a
folder) is one :class:`~twopgraph.errors.OutputError` line naming the file and the free space
(:func:`output_error`, raised by :func:`atomic_write_bytes`); :func:`writing` turns any
``OSError`` of a block that writes a file into such a line.

Example::

    >>> parse_temp(".metrics.json.tmp-12-myhost-ab12cd34").target
    'metrics.json'
    >>> human_bytes(1536)
    '1.5 KiB'
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from twopgraph.errors import ConfigError, OutputError, TwopgraphError

if TYPE_CHECKING:  # annotations only: this module imports numpy where it needs it
    import numpy as np
    from numpy.typing import DTypeLike

# errno values that mean the disk or quota is full, the file too large or the file system
# read-only (also while ``write`` runs) ...
SPACE_ERRNOS = frozenset(getattr(errno, n) for n in ("ENOSPC", "EDQUOT", "EFBIG", "EROFS")
                         if hasattr(errno, n))
# ... or that the destination cannot take a file at all (checked where the file is created and
# renamed: while ``write`` runs, a permission error may come from a file it reads)
DESTINATION_ERRNOS = SPACE_ERRNOS | {errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR,
                                     errno.ENAMETOOLONG}
_UMASK_LOCK = threading.Lock()

# .NAME.tmp-PID-HOST-XXXXXXXX (this version), .NAME.tmp-PID-HOST (stores of older versions),
# .NAME.tmp-PID@HOST and .NAME.tmp-PID (partitions of older versions)
# (host_tag has no "-", so the "-" before the 8 random characters is unambiguous)
_TEMP = re.compile(r"^\.(?P<target>.+)\.tmp-(?P<pid>\d+)(?:-(?P<host>[A-Za-z0-9._]+?)"
                   r"(?:-[a-z0-9_]{8})?|@(?P<at>[A-Za-z0-9_.-]+))?$")


def reserve(fd: int, nbytes: int) -> None:
    """Allocate the first ``nbytes`` of the open file ``fd`` on disk now. A file written
    through a memory map is sparse until its pages are written back, and a full disk then
    kills the process with SIGBUS at some later store; reserved, a full disk is an
    ``OSError`` (ENOSPC) here, which the callers turn into one line. File systems that cannot
    allocate ahead (EOPNOTSUPP, ENOSYS) are left as they were."""
    if nbytes <= 0:
        return
    try:
        os.posix_fallocate(fd, 0, int(nbytes))
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise


def map_new_npy(path: str | os.PathLike, dtype: DTypeLike,
                shape: tuple[int, ...]) -> np.memmap:
    """A new ``.npy`` file ``path`` of ``dtype``/``shape`` memory-mapped for writing, its blocks
    reserved (:func:`reserve`): a full disk raises ``OSError`` here, never SIGBUS later."""
    import numpy as np
    arr = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
    with open(path, "r+b") as f:
        reserve(f.fileno(), os.fstat(f.fileno()).st_size)
    return arr


def host_tag() -> str:
    """This host's name, reduced to ``[A-Za-z0-9.]`` (a data root on a shared file system may
    hold temporaries of writers on other hosts, whose pids mean nothing here)."""
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())[:64] or "localhost"


def _legacy_host() -> str:
    """The host as partition writers of older versions wrote it after ``@``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()) or "localhost"


def temp_prefix(name: str) -> str:
    """``.NAME.tmp-PID-HOST-``: the prefix of this process's temporaries for target ``name``
    (``tempfile`` adds the 8 random characters)."""
    return f".{name}.tmp-{os.getpid()}-{host_tag()}-"


def temp_folder(target: str | os.PathLike) -> Path:
    """A new empty folder beside ``target`` named by :func:`temp_prefix` (``OSError`` if it
    cannot be made), with the mode of a plain ``mkdir`` (``0o777`` less the umask), not
    ``mkdtemp``'s ``0o700``: renamed into place it is a store or partition that other users
    of a shared data root read."""
    target = Path(target)
    folder = Path(tempfile.mkdtemp(dir=target.parent, prefix=temp_prefix(target.name)))
    with contextlib.suppress(OSError):  # no modes (vfat, some network mounts)
        os.chmod(folder, 0o777 & ~process_umask())
    return folder


@dataclass(frozen=True)
class TempName:
    """What a temporary's name says: its ``target``, its writer's ``pid`` and whether that
    writer ran on this host (``ours``; names without a host, of older versions, count as
    ours)."""
    target: str
    pid: int
    ours: bool


def parse_temp(name: str) -> TempName | None:
    """The :class:`TempName` of a temporary's file or folder name, None for any other name."""
    m = _TEMP.fullmatch(name)
    if m is None:
        return None
    if m["host"] is not None:
        ours = m["host"] == host_tag()
    elif m["at"] is not None:
        ours = m["at"] == _legacy_host()
    else:
        ours = True
    return TempName(m["target"], int(m["pid"]), ours)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host exists and is not a zombie (killed, not yet
    reaped). This process counts as alive (another of its threads may be writing); a pid of 0
    or less, or one too large to exist, as gone; another user's process as alive."""
    if pid == os.getpid():
        return True
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3] != b"Z"
    except (OSError, ValueError):  # no /proc: trust os.kill
        return True


def sweep_orphans(parent: str | os.PathLike, *, target: str | None = None,
                  accept: Callable[[Path], bool] | None = None) -> list[Path]:
    """Remove the temporaries in ``parent`` (of ``target`` only, when given) whose writer ran
    on this host and is gone, and that ``accept(path)`` approves (default: any); a file is
    unlinked, a folder removed with its content. Best effort: what cannot be removed stays.
    Returns what was removed. Does nothing where ``os.kill(pid, 0)`` is no liveness test (not
    POSIX)."""
    removed: list[Path] = []
    if os.name != "posix":
        return removed
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        t = parse_temp(entry.name)
        if t is None or not t.ours or (target is not None and t.target != target) \
                or pid_alive(t.pid):
            continue
        path = Path(entry.path)
        try:
            if entry.is_symlink() or (accept is not None and not accept(path)):
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except OSError:  # removed by another sweeper meanwhile, or not ours to remove
            continue
        removed.append(path)
    return removed


def atomic_write_bytes(path: str | os.PathLike, write: Callable[[BinaryIO], object]) -> None:
    """Write ``path`` through ``write(binary file)`` into a temporary beside it, then rename
    (readers never see a half-written file; the temporary is removed on failure).

    The temporary is named by :func:`temp_prefix`; one left behind by a writer killed with
    SIGKILL is removed by the next write of the same ``path`` from the same host once that pid
    is gone (:func:`sweep_orphans`). The file gets the mode of a plain ``open()`` (``0o666``
    less the process umask), not ``mkstemp``'s ``0o600``.

    A destination that cannot take the file (disk or quota full, read-only or not writable
    folder, a path that cannot name a file) raises :class:`~twopgraph.errors.OutputError`
    naming ``path`` and the free space there; an existing ``path`` is left as it was. Any other
    error (a bug in ``write``) propagates unchanged.
    """
    path = Path(path)
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        sweep_orphans(folder, target=path.name, accept=Path.is_file)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=temp_prefix(path.name))
    except OSError as e:
        # EEXIST: the folder is a file; ENOENT: a folder that cannot hold files (/proc/self)
        if e.errno == errno.EEXIST:
            raise output_error(path, e, f"{e.filename or folder} is not a folder") from e
        if e.errno in DESTINATION_ERRNOS or e.errno == errno.ENOENT:
            raise output_error(path, e) from e
        raise
    stage = "write"
    try:
        with os.fdopen(fd, "wb") as f:
            try:
                os.fchmod(f.fileno(), 0o666 & ~process_umask())
            except (OSError, AttributeError):  # no modes (vfat, some network mounts; Windows)
                pass
            write(f)
        stage = "rename"
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:  # already gone, or cannot be removed: the first error matters
            pass
        errnos = DESTINATION_ERRNOS if stage == "rename" else SPACE_ERRNOS
        cause = destination_fault(e, errnos)
        if cause is not None:
            raise output_error(path, cause) from e
        raise


def process_umask() -> int:
    """The process umask: from /proc/self/status on Linux, else set and restored under a lock
    (``os.umask`` is the only portable reader, and it writes the process-wide value)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def destination_fault(exc: BaseException, errnos: frozenset) -> OSError | None:
    """The :class:`OSError` with an errno in ``errnos`` that caused ``exc`` (``exc`` itself or
    an exception it was raised from or while handling: ``torch.save`` turns a full disk into a
    ``RuntimeError``), or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and not isinstance(exc, OutputError) and exc.errno in errnos:
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def output_error(path: Path, e: OSError, reason: str | None = None) -> OutputError:
    """``cannot write PATH: REASON (FREE free in FOLDER)`` as an :class:`OutputError`
    (``FOLDER``: the nearest existing folder above ``path``)."""
    path = Path(path)
    folder = path.parent.absolute()
    while not os.path.isdir(folder) and folder != folder.parent:
        folder = folder.parent
    try:
        free = human_bytes(shutil.disk_usage(folder).free)
    except OSError:
        free = "unknown space"
    err = OutputError(f"cannot write {path}: {reason or e.strerror or e} ({free} free in "
                      f"{folder})")
    err.errno, err.strerror, err.filename = e.errno, e.strerror, str(path)
    return err


@contextlib.contextmanager
def writing(path: str | os.PathLike) -> Iterator[None]:
    """Run the block that writes ``path``; an ``OSError`` it raises becomes one
    :class:`TwopgraphError` line naming the file, the reason and the space left there.
    (Write atomically inside, so that nothing half-written remains.)"""
    try:
        yield
    except TwopgraphError:
        raise
    except OSError as e:
        path = Path(path)
        hint = ""
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            hint = "; free some space or choose another --out"
        raise TwopgraphError(f"cannot write {path} ({e.strerror or e}{free_note(path.parent)})"
                             f"{hint}; the files written before are kept") from None


def free_note(folder: Path) -> str:
    """``", 1.2 MiB free on FOLDER"`` (empty if unknown)."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return ""
    return f", {human_bytes(free)} free on {folder}"


def human_bytes(n: int) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if v < 1024 or unit == "TiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{v:.1f} TiB"


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


def write_json(path: Path, obj: object) -> None:
    """``obj`` as strict, indented JSON at ``path``, atomically (numpy scalars become numbers;
    NaN and infinities, which strict JSON parsers reject, become ``null``)."""
    text = json.dumps(_strict(obj), indent=2, allow_nan=False)
    atomic_write_bytes(path, lambda f: f.write((text + "\n").encode()))


def _strict(o):
    if isinstance(o, dict):
        return {k: _strict(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_strict(v) for v in o]
    if isinstance(o, bool) or o is None or isinstance(o, (str, int)):
        return o
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    item = getattr(o, "item", None)  # numpy / torch scalars
    if callable(item) and getattr(o, "ndim", 1) == 0:
        return _strict(item())
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
