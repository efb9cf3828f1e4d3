"""Cleanup after killed partition writers. A partition folder is written under a temporary
name beside ``OUT`` (:mod:`twopgraph.core.files`) and renamed when complete; the temporary folders
of writers that were killed are removed by the next write into the same parent folder
(:func:`clean_orphans`: only folders of that pattern whose process is gone, holding nothing but
partition files), and so are their lock files that no process holds any more.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

from twopgraph.core.files import parse_temp, sweep_orphans
from twopgraph.core.locks import remove_stale_lock
from twopgraph.distributed.partition.format import META, PART_JSON, ROOT_CLUSTER, STORE_DIR

log = logging.getLogger("twopgraph")

_PART_DIR = re.compile(r"^part\d+$")
# The lock file of a partition folder (:func:`~twopgraph.core.locks.sibling_lock`): ``.OUT.lock``
_LOCK_NAME = re.compile(r"^\..+\.lock$")
# the store writer's temporary folder inside a partition being written
_STORE_TMP = re.compile(r"^\.store\.tmp-")


def _is_partition_tmp(folder: Path) -> bool:
    """Whether ``folder`` holds only what a partition writer puts there (``meta.json``,
    ``cluster.npy``, ``partN/`` folders of ``.npy`` files and ``part.json``, and a ``store/``
    folder -- or the store writer's temporary one -- of ``.npy`` and ``.json`` files)."""

    def only_files(d: Path, ok) -> bool:
        return all(not f.is_symlink() and f.is_file() and ok(f.name) for f in d.iterdir())

    try:
        for e in folder.iterdir():
            if e.name in (META, ROOT_CLUSTER) and e.is_file() and not e.is_symlink():
                continue
            if e.is_symlink() or not e.is_dir():
                return False
            if _PART_DIR.match(e.name):
                if not only_files(e, lambda f: f == PART_JSON or f.endswith(".npy")):
                    return False
            elif e.name == STORE_DIR or _STORE_TMP.match(e.name):
                if not only_files(e, lambda f: f.endswith((".npy", ".json"))):
                    return False
            else:
                return False
    except OSError:
        return False
    return True


def clean_orphans(parent: str | os.PathLike) -> list[Path]:
    """Remove the temporary folders (:func:`~twopgraph.core.files.parse_temp`) that partition
    writers killed before they finished (``kill -9``, power loss) left in ``parent``, and their lock
    files (``.NAME.lock``) that no process holds any more; returns them.

    A folder is removed only if its name has this pattern, its writer ran on this machine and
    process ``PID`` no longer exists, and it holds nothing but what a writer writes (see
    :func:`_is_partition_tmp`); anything else is left alone. Called by
    :func:`~twopgraph.distributed.partition.selfdep.partition_selfdep` before it writes."""
    parent = Path(parent)
    removed = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    for e in entries:
        if _LOCK_NAME.match(e.name) and e.is_file() and not e.is_symlink():
            # of a writer that died (it names its holder, as twopgraph's do); a held one stays
            if _names_holder(e) and remove_stale_lock(e):
                removed.append(e)
    for e in sweep_orphans(parent, accept=lambda p: p.is_dir() and _is_partition_tmp(p)):
        log.info("removed %s, left by a partition writer (pid %s) that was killed", e,
                 parse_temp(e.name).pid)
        removed.append(e)
    return removed


def _names_holder(path: Path) -> bool:
    """Whether ``path`` reads as a twopgraph lock file: ``{"pid": ..., "host": ...}``."""
    try:
        rec = json.loads(path.read_text()[:4096])
    except (OSError, ValueError):
        return False
    return isinstance(rec, dict) and set(rec) == {"pid", "host"}
