"""Calls into the ``ogb`` package: its table of datasets (``nodeproppred/master.csv``,
read without importing torch) and its download code, run inside :func:`ogb_session` (no
stdin, a network timeout of :data:`OGB_NET_TIMEOUT_S` seconds, its prints on stderr); a
failure ogb raises for a cause a user can fix becomes one line naming the fix, any other
keeps its traceback.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import io
import os
import socket
import sys
import urllib.error
import zipfile
from collections.abc import Iterator
from pathlib import Path

from twopgraph.datasets.paths import _ogb_folder
from twopgraph.errors import TwopgraphError

# Seconds one network operation of ogb (connect, one read) may block before it fails.
OGB_NET_TIMEOUT_S = 60.0


# Exception types that ogb's download and raw-file reading raise for a user-fixable cause
# (network down or refused, a damaged, truncated or missing file, a declined prompt); they
# become one-line errors only when raised inside ogb (see _raised_in_ogb).
_OGB_FAILURES = (OSError, EOFError, ValueError, KeyError, IndexError, RuntimeError,
                 zipfile.BadZipFile, http.client.HTTPException, SystemExit)


_NETWORK_ERRORS = (urllib.error.URLError, http.client.HTTPException, TimeoutError,
                   ConnectionError)


def _ogb_meta(name: str) -> dict:
    """ogb's row of ``nodeproppred/master.csv`` for ``name`` (read without importing torch)."""
    spec = importlib.util.find_spec("ogb")
    if spec is None or not spec.submodule_search_locations:
        raise TwopgraphError(f"{name} needs the 'ogb' package: pip install ogb")
    import pandas as pd
    master = Path(list(spec.submodule_search_locations)[0]) / "nodeproppred" / "master.csv"
    table = pd.read_csv(master, index_col=0, keep_default_na=False)
    if name not in table:
        raise TwopgraphError(f"the installed ogb does not know {name}; upgrade ogb")
    return table[name].to_dict()


def _download_ogb(name: str, root: Path, meta: dict, progress: bool) -> None:
    """Let ogb's own download code fetch and unzip ``name`` into ``<root>/ogbn_x`` (nothing is
    processed). ogb runs inside :func:`ogb_session` (no stdin, network timeout, prints to
    stderr); exceptions of the kinds in ``_OGB_FAILURES`` that ogb raised become one line
    naming the fix; anything else propagates with its traceback."""
    folder = _ogb_folder(name, root)
    root.mkdir(parents=True, exist_ok=True)
    try:
        with ogb_session(progress):
            _fetch_ogb(name, root, folder, meta)
    except _OGB_FAILURES as e:
        if not _raised_in_ogb(e):
            raise  # twopgraph's own code failed: a bug, keep the traceback
        raise _ogb_failure(name, root, folder, meta["url"], e) from e


def _fetch_ogb(name: str, root: Path, folder: Path, meta: dict) -> None:
    """ogb's download steps (``NodePropPredDataset.pre_process`` without the processing)."""
    import shutil

    from ogb.utils.url import decide_download, download_url, extract_zip
    if not decide_download(meta["url"]):
        raise TwopgraphError(f"{name}: download declined; the raw files are expected in "
                             f"{folder}/raw")
    path = download_url(meta["url"], str(root))
    extract_zip(path, str(root))
    os.unlink(path)
    shutil.rmtree(folder, ignore_errors=True)
    shutil.move(str(root / meta["download_name"]), str(folder))


@contextlib.contextmanager
def ogb_session(progress: bool = True) -> Iterator[None]:
    """The scope of one call into ogb; everything it changes is restored on exit.

    ogb asks questions with ``input()`` (whether to re-download an outdated folder, whether
    to download more than 1 GB) and opens URLs without a timeout, so inside this block
    ``sys.stdin`` is an empty stream (a prompt fails at once with ``EOFError`` instead of
    waiting on a terminal or pipe nobody answers), ``socket.setdefaulttimeout`` is
    :data:`OGB_NET_TIMEOUT_S` (a dead connection fails instead of hanging), and stdout goes
    to stderr (or nowhere without ``progress``), so twopgraph's stdout stays machine-readable.
    These are process-wide settings: other threads see them while the block runs (twopgraph
    loads datasets before it starts any thread).
    """
    old_stdin, old_timeout = sys.stdin, socket.getdefaulttimeout()
    sys.stdin = io.StringIO("")
    socket.setdefaulttimeout(OGB_NET_TIMEOUT_S)
    try:
        with contextlib.redirect_stdout(sys.stderr if progress else io.StringIO()):
            yield
    finally:
        sys.stdin = old_stdin
        socket.setdefaulttimeout(old_timeout)


def _raised_in_ogb(e: BaseException) -> bool:
    """Whether ``e`` was raised inside ogb (or a library ogb called): a frame of the ``ogb``
    package lies on its traceback."""
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_globals.get("__name__", "").split(".")[0] == "ogb":
            return True
        tb = tb.tb_next
    return False


def _ogb_failure(name: str, root: Path, folder: Path, url: str,
                 e: BaseException) -> TwopgraphError:
    """The one-line error for a failure ``e`` inside ogb, naming what to do."""
    offline = (f"download {url} yourself, unzip it in {root} and rename its folder to "
               f"{folder.name}")
    if isinstance(e, SystemExit):
        return TwopgraphError(f"{name}: ogb stopped (download refused); the raw files are "
                              f"expected in {folder}/raw")
    if isinstance(e, EOFError) and _innermost_module(e).split(".")[0] == "ogb":
        return TwopgraphError(f"{name}: ogb asked for confirmation (a download over 1 GB); "
                              f"{offline}")
    text = str(e).strip()
    what = f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__
    if isinstance(e, _NETWORK_ERRORS) or isinstance(e.__context__, _NETWORK_ERRORS):
        return TwopgraphError(f"{name}: ogb could not download the dataset ({what}); the raw "
                              f"files are expected in {folder}/raw (offline: {offline})")
    return TwopgraphError(f"{name}: ogb could not read the raw files in {folder}/raw ({what}); "
                          f"delete {folder} to download it afresh, or {offline}")


def _innermost_module(e: BaseException) -> str:
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_globals.get("__name__", "") if tb is not None else ""
