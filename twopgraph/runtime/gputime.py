"""Stage times measured on the GPU: CUDA events around a stage's work, read once an epoch.

The host times of a training epoch (``load_s``, ``compute_s``) are what the host spends
*queueing* work on CUDA -- launches return at once, and the device's backlog drains where the
host waits (the loss read every ``READ_EVERY`` steps). :class:`StageTimer` measures the
device side instead: a :meth:`~StageTimer.span` records a timing event on a stream before a
stage's work is queued and another after it; the device timestamps each event when the stream
reaches it, and the difference is the stage's time *on that stream*:

- from the moment the stream reached the start event (so work queued earlier on that stream
  is not counted, and a ``wait_event`` queued before the start -- the step waiting for its
  batch's copies -- is not counted either) until the stage's last kernel or copy finished;
- where the host is slower to queue than the device to run (an idle stream waiting for the
  next launch), that gap counts too: such a stage's GPU time is its latency on the device,
  not the sum of its kernels' busy times (the profiler, ``--profile``, shows those).

No host synchronisation per step: events are recorded (``cudaEventRecord``, asynchronous) and
kept pending, ``capacity`` span pairs per stage at most (a ring: default
:data:`RING_CAPACITY`). When a stage's ring is full, its oldest pair -- ``capacity`` spans old
-- is folded into the stage's total: normally long complete (a non-blocking
``cudaEventQuery`` says so), in which case nothing waits; only an oldest event still running
is waited for, and each such wait is counted in :attr:`StageTimer.waits`. :meth:`read`, once
at the end of an epoch, waits for each stage's last event (the epoch's own end-of-epoch read
has drained the device already) and folds every pending pair.

Spans may be recorded from several threads (the loader's prefetch thread records ``load`` and
``sample``, the training loop ``compute``); each stage's ring is touched under a lock.

On the CPU nothing is timed: :func:`stage_timer` gives None, :func:`gpu_span` a null context,
and :func:`gpu_times` reports every stage as None (null in ``metrics.json``).

Example (on a GPU)::

    >>> timer = stage_timer("cuda")                                # doctest: +SKIP
    >>> with gpu_span(timer, "compute", torch.cuda.current_stream()):  # doctest: +SKIP
    ...     train_step(mb)
    >>> gpu_times(timer)["compute_gpu_s"]                          # doctest: +SKIP
    0.0123
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

#: The stages a training epoch times (``<stage>_gpu_s`` in its record): the gather of a
#: batch's features on the feature source's stream, device sampling on the loader's sampling
#: stream, and the training step (forward, backward, optimizer) on the step's stream.
STAGES = ("load", "sample", "compute")

#: Span pairs kept pending per stage before the oldest is folded (2 events each): 3 stages x
#: 2 x 1024 events, a few hundred bytes of driver state each.
RING_CAPACITY = 1024


def _timing_event() -> torch.cuda.Event:
    return torch.cuda.Event(enable_timing=True)


class StageTimer:
    """Device time per stage from pairs of timing events (see the module doc).

    ``stages``: the stage names :meth:`span` accepts; ``capacity``: span pairs kept pending per
    stage (>= 1); ``event``: what makes an event (default: a CUDA timing event; tests give a
    fake with the same ``record(stream)``, ``query()``, ``synchronize()``,
    ``elapsed_time(end)`` (milliseconds) methods). Folded event pairs are reused."""

    def __init__(self, stages: Sequence[str] = STAGES, capacity: int = RING_CAPACITY,
                 event: Callable[[], Any] | None = None) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.stages = tuple(stages)
        self.capacity = int(capacity)
        self._event = event or _timing_event
        self._pending: dict[str, deque] = {s: deque() for s in self.stages}
        self._free: list[tuple[Any, Any]] = []
        self._ms = {s: 0.0 for s in self.stages}  # folded totals, milliseconds
        self._spans = {s: 0 for s in self.stages}  # spans recorded
        self._lock = threading.Lock()
        #: oldest events of a full ring that were still running when folded (host waits)
        self.waits = 0

    def pending(self, stage: str) -> int:
        """Span pairs of ``stage`` recorded and not yet folded (at most :attr:`capacity`)."""
        return len(self._pending[stage])

    def spans(self, stage: str) -> int:
        """Spans of ``stage`` recorded so far."""
        return self._spans[stage]

    @contextlib.contextmanager
    def span(self, stage: str, stream: Any) -> Iterator[None]:
        """Time the work queued on ``stream`` inside the block as one span of ``stage``: an
        event recorded on ``stream`` before and after (asynchronous); nothing is recorded
        when the block raises."""
        if stage not in self._pending:
            raise KeyError(f"unknown stage {stage!r}; known: {', '.join(self.stages)}")
        with self._lock:
            pair = self._free.pop() if self._free else (self._event(), self._event())
        pair[0].record(stream)
        try:
            yield
        except BaseException:
            with self._lock:
                self._free.append(pair)
            raise
        pair[1].record(stream)
        with self._lock:
            ring = self._pending[stage]
            if len(ring) >= self.capacity:
                self._fold(stage, ring.popleft())
            ring.append(pair)
            self._spans[stage] += 1

    def _fold(self, stage: str, pair: tuple[Any, Any]) -> None:
        """Add ``pair``'s elapsed time to ``stage``'s total and keep the pair for reuse
        (caller holds the lock)."""
        start, end = pair
        if not end.query():  # still running: the one case that waits
            self.waits += 1
            end.synchronize()
        self._ms[stage] += float(start.elapsed_time(end))
        self._free.append(pair)

    def read(self) -> dict[str, float | None]:
        """Fold every pending pair (waiting for each stage's last event) and return
        ``{"<stage>_gpu_s": seconds}`` for every stage: the sum of its spans, or None for a
        stage with no span recorded (not measured: e.g. host sampling has no ``sample``
        spans)."""
        with self._lock:
            for stage, ring in self._pending.items():
                if ring:
                    ring[-1][1].synchronize()  # the latest; the others completed before it
                while ring:
                    self._fold(stage, ring.popleft())
            return {f"{s}_gpu_s": (self._ms[s] / 1000.0 if self._spans[s] else None)
                    for s in self.stages}


def stage_timer(device: torch.device | str, capacity: int = RING_CAPACITY
                ) -> StageTimer | None:
    """A :class:`StageTimer` of :data:`STAGES` for an epoch on ``device``: None on the CPU
    (nothing to time on a device)."""
    return StageTimer(STAGES, capacity) if torch.device(device).type == "cuda" else None


def gpu_span(timer: StageTimer | None, stage: str, stream: Any):
    """``timer.span(stage, stream)``, or a null context when there is no timer or no stream
    (the CPU; a feature source without a CUDA stream)."""
    if timer is None or stream is None:
        return contextlib.nullcontext()
    return timer.span(stage, stream)


def gpu_times(timer: StageTimer | None) -> dict[str, float | None]:
    """An epoch record's ``<stage>_gpu_s`` keys (:data:`STAGES`): ``timer``'s :meth:`read`,
    or every key None without a timer (the CPU)."""
    if timer is None:
        return {f"{s}_gpu_s": None for s in STAGES}
    return timer.read()
