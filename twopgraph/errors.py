"""Errors that carry a one-line message meant for the user.

The CLI turns any :class:`TwopgraphError` into ``error: <message>`` on stderr and its
``exit_code`` (2, a user error; 3 for :class:`TrainingDiverged`); everything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import signal


class TwopgraphError(ValueError):
    """Bad input from the user (arguments, files, configuration). Message is one line."""

    exit_code = 2


class GraphFormatError(TwopgraphError):
    """A graph or dataset file is malformed or inconsistent (missing keys, bad ranges, sizes)."""


class ConfigError(TwopgraphError):
    """An invalid option value or a combination of options that cannot work."""


class OutputError(TwopgraphError, OSError):
    """A file could not be written because of its destination: the disk or quota is full, the
    folder is read-only or not writable, or the path cannot name a file. The message names the
    file and the free space there. Also an :class:`OSError` (``errno``, ``strerror`` and
    ``filename`` are those of the failed call), so code that tolerates an unwritable cache
    with ``except OSError`` keeps doing so."""

    def __str__(self) -> str:  # the message, not OSError's "[Errno n] ..." form
        return str(self.args[0]) if self.args else ""


class TrainingDiverged(TwopgraphError):
    """Training produced a non-finite loss (or non-finite weights): the run stops, it is not a
    bad flag, so the CLI exits with code 3. ``epoch`` and ``step`` (both 0-based) say where."""

    exit_code = 3

    def __init__(self, message: str, *, epoch: int | None = None, step: int | None = None,
                 loss: float | None = None) -> None:
        super().__init__(message)
        self.epoch, self.step, self.loss = epoch, step, loss


class PeerLost(TwopgraphError):
    """A rank of a distributed run lost its peers: a collective failed because another rank
    died (its connection was lost) or did not answer within ``--dist-timeout`` seconds
    (``timed_out``; ``timeout_s`` the timeout). The launcher of ``--nproc`` reads both to
    name the rank that stopped answering."""

    def __init__(self, message: str, *, timed_out: bool = False,
                 timeout_s: float | None = None) -> None:
        super().__init__(message)
        self.timed_out, self.timeout_s = bool(timed_out), timeout_s


class MemoryBudgetError(ConfigError):
    """The smallest configuration of a run does not fit under the process's memory limit
    (:class:`~twopgraph.runtime.governor.MemoryGovernor`): one line with the estimate, the
    limit and the flags that would make it fit, before the first batch (CLI exit 2)."""


class Stopped(BaseException):
    """A stop signal (SIGTERM, SIGHUP) arrived: raised in the main thread at the next safe
    point (between Python bytecodes) by the CLI's handler, unwinding like ``KeyboardInterrupt``
    (locks released, temporary files removed, ``metrics.json`` marked ``interrupted``). A
    ``BaseException``, so no ``except Exception`` swallows it. The CLI exits with
    ``128 + signum``."""

    def __init__(self, signum: int) -> None:
        self.signum = int(signum)
        try:
            self.name = signal.Signals(self.signum).name
        except ValueError:
            self.name = f"signal {self.signum}"
        super().__init__(f"stopped by {self.name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum
