"""``--profile DIR``: a ``torch.profiler`` trace of a few training steps (Chrome trace JSON).

:class:`StepProfiler` profiles the first epoch a run trains: it skips :data:`WARMUP` steps
(recorded by the profiler as warm-up, left out of the trace: the first steps pay for the
allocator's growth, cuSPARSE handles, lazy initialisation) and records the next :data:`ACTIVE`
steps -- fewer on an epoch too short for both, at least one step -- with CPU activity, plus
CUDA kernels and copies when the run trains on a GPU. The trace is written when the recorded
steps are done (or when the epoch ends first) to ``DIR/trace-epoch<E>.json``
(:meth:`StepProfiler.path`), one log line says where; open it in ``chrome://tracing`` or
Perfetto (https://ui.perfetto.dev). Each step is a ``ProfilerStep#N`` range; the loader's
prefetch thread (sampling, gathering, copies) appears as a thread of its own.

The training loop calls :meth:`StepProfiler.step` after every training step of the profiled
epoch and :meth:`StepProfiler.stop` at its end (also when it fails). Outside ``--profile``
nothing here runs.

Example::

    >>> prof = StepProfiler("runs/prof", "cpu", steps=38, epoch=0)       # doctest: +SKIP
    >>> prof.start()                                                     # doctest: +SKIP
    >>> for mb in loader.epoch(0):                                       # doctest: +SKIP
    ...     train_step(mb); prof.step()
    >>> prof.stop()                                                      # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from twopgraph.core.files import output_error

log = logging.getLogger("twopgraph")

#: Steps run before the recorded ones (profiled as warm-up, not in the trace).
WARMUP = 2
#: Steps recorded in the trace.
ACTIVE = 5


def profile_steps(steps: int, warmup: int = WARMUP, active: int = ACTIVE) -> tuple[int, int]:
    """``(warm-up steps, recorded steps)`` for an epoch of ``steps`` steps: ``warmup`` and
    ``active`` where the epoch is long enough, else fewer warm-up steps first (at least one
    step recorded whenever the epoch has one)."""
    steps = max(int(steps), 1)
    w = min(warmup, steps - 1)
    return w, max(1, min(active, steps - w))


class StepProfiler:
    """A ``torch.profiler`` session over a few steps of epoch ``epoch`` (see the module doc):
    ``folder`` receives the trace, ``device`` says whether CUDA activity is recorded too,
    ``steps`` is the epoch's step count (sizes warm-up and recorded steps:
    :func:`profile_steps`). The folder is made when the profiler starts; a folder that cannot
    be made is an :class:`~twopgraph.errors.OutputError`."""

    def __init__(self, folder: str | os.PathLike, device: torch.device | str, steps: int,
                 epoch: int = 0, warmup: int = WARMUP, active: int = ACTIVE) -> None:
        self.folder = Path(folder)
        self.device = torch.device(device)
        self.epoch = int(epoch)
        self.warmup, self.active = profile_steps(steps, warmup, active)
        self.written: Path | None = None
        self.steps_done = 0
        self._prof: profile | None = None

    @property
    def path(self) -> Path:
        """Where the trace is written."""
        return self.folder / f"trace-epoch{self.epoch}.json"

    def activities(self) -> list[ProfilerActivity]:
        """CPU, plus CUDA on a CUDA device."""
        acts = [ProfilerActivity.CPU]
        if self.device.type == "cuda":
            acts.append(ProfilerActivity.CUDA)
        return acts

    def start(self) -> StepProfiler:
        """Make the folder and start profiling (before the epoch's first step)."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise output_error(self.path, e) from None
        self._prof = profile(activities=self.activities(),
                             schedule=schedule(wait=0, warmup=self.warmup, active=self.active,
                                               repeat=1),
                             on_trace_ready=self._write)
        self._prof.start()
        return self

    def _write(self, prof: profile) -> None:
        try:
            prof.export_chrome_trace(str(self.path))
        except OSError as e:
            raise output_error(self.path, e) from None
        self.written = self.path
        last = min(self.steps_done, self.warmup + self.active) - 1
        log.info("profiler: trace of steps %d-%d of epoch %d written to %s (open in "
                 "chrome://tracing or https://ui.perfetto.dev)", self.warmup, last,
                 self.epoch, self.path)

    def step(self) -> None:
        """After each training step of the profiled epoch."""
        if self._prof is not None:
            self.steps_done += 1
            self._prof.step()

    def stop(self) -> None:
        """End profiling (writes the trace if the recorded steps were cut short); idempotent."""
        prof, self._prof = self._prof, None
        if prof is not None:
            prof.stop()
