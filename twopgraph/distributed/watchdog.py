"""NCCL's watchdog seen from the launcher: the job's stderr passed through unchanged and
scanned for the watchdog's lines (:class:`StderrWatch`), and the one line the launcher prints
for a rank the watchdog took down with SIGABRT (:func:`nccl_abort`; the launcher's failure
order is in :mod:`twopgraph.distributed.launch`).

With twopgraph's default ``TORCH_NCCL_ASYNC_ERROR_HANDLING=2``
(:func:`twopgraph.distributed.env.nccl_env_defaults`) a failed collective raises in the rank,
which words the error itself; this covers a user's own setting and a watchdog that hung.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import threading
from pathlib import Path

#: A line of ProcessGroupNCCL's watchdog on stderr, as torch 2.x logs it before it takes the
#: process down ("[rank1]:[E1218 20:27:21.426 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog
#: caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, ...) ran for
#: 600081 milliseconds before timing out.", "... Process group watchdog thread terminated
#: with exception: NCCL error: remote process exited or there was a network error ...").
NCCL_WATCHDOG_LINE = re.compile(r"Watchdog caught collective operation timeout|watchdog thread "
                                r"terminated with exception|NCCL communicator was aborted|"
                                r"ncclRemoteError|ncclSystemError|ncclInternalError|"
                                r"ncclUnhandledCudaError|NCCL error", re.IGNORECASE)
_RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:")

class StderrWatch:
    """Pass the job's stderr (``pipe``: torchrun's agent's, which its workers share) through
    to ours unchanged, in a thread, and keep the first line of NCCL's watchdog
    (:data:`NCCL_WATCHDOG_LINE`) of each rank (torch prefixes a rank's C++ log lines with
    ``[rankR]:``; -1 for a line without). Bytes pass as they come (progress bars' ``\\r``
    included); only the scan waits for whole lines."""

    def __init__(self, pipe, out=None) -> None:
        self.pipe, self.out = pipe, out
        self.lines: dict[int, str] = {}
        self._thread = threading.Thread(target=self._run, name="twopgraph-stderr",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        tail = b""
        fd = self.pipe.fileno()
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            self._write(chunk)
            *whole, tail = (tail + chunk).split(b"\n")
            for raw in whole:
                self.scan(raw.decode(errors="replace"))
            tail = tail[-(1 << 14):]  # a line without end (a progress bar) stays bounded
        if tail:
            self.scan(tail.decode(errors="replace"))
        with contextlib.suppress(OSError):
            self.pipe.close()

    def _write(self, chunk: bytes) -> None:
        out = self.out if self.out is not None else sys.stderr
        try:
            os.write(out.fileno(), chunk)
        except (OSError, ValueError, AttributeError):  # not a file (e.g. captured): as text
            with contextlib.suppress(OSError, ValueError):
                out.write(chunk.decode(errors="replace"))
                out.flush()

    def scan(self, line: str) -> None:
        """Keep ``line`` if it is the first line of NCCL's watchdog of its rank."""
        line = line.rsplit("\r", 1)[-1].strip()
        if not NCCL_WATCHDOG_LINE.search(line):
            return
        m = _RANK_PREFIX.match(line)
        self.lines.setdefault(int(m.group(1)) if m else -1, line)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def save(self, path: Path) -> None:
        """The lines kept, by rank, into ``path`` (for :func:`_failure`); nothing if none."""
        if self.lines:
            with contextlib.suppress(OSError):
                path.write_text(json.dumps({str(r): t for r, t in self.lines.items()}))


def nccl_abort(seen: object, failures: dict) -> tuple[str, int] | None:
    """The line of a rank that NCCL's watchdog took down: killed by SIGABRT, with a line of
    the watchdog on the job's stderr (``seen``: what :meth:`StderrWatch.save` wrote, read
    back: that rank's line, else one without a rank prefix); None otherwise. A timeout is
    said as one (the collective did not finish within --dist-timeout: another rank died or
    stopped answering), anything else as a failed collective; NCCL's own line is quoted, cut
    to 160 characters."""
    if not isinstance(seen, dict) or not seen:
        return None
    aborted = sorted((r, f) for r, f in failures.items()
                     if f.get("exitcode") == -signal.SIGABRT)
    for r, f in aborted:
        text = seen.get(str(r)) or seen.get("-1")
        if not isinstance(text, str):
            continue
        text = _RANK_PREFIX.sub("", text).strip()
        text = re.sub(r"^\[[A-Z]\d{4} [^\]]*\]\s*", "", text)  # "[E1218 20:27:21.4 x.cpp:629]"
        if re.search(r"Watchdog caught collective operation timeout", text, re.IGNORECASE):
            what = ("a collective did not finish within --dist-timeout (another rank died or "
                    "stopped answering)")
        else:
            what = "a collective failed (another rank died, or the network failed)"
        return (f"rank {r} (pid {f.get('pid')}) was stopped by NCCL's watchdog (SIGABRT): "
                f"{what}; the other ranks were stopped (NCCL: {text[:160]})"), 2
    return None
