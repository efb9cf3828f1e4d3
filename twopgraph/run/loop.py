"""The training loop, one for every run: a single process (:func:`twopgraph.run.train.train`)
and each rank of a distributed one (:func:`twopgraph.distributed.train_distributed`).

:func:`train_epochs` runs the epochs of a :class:`Training` (model, optimizer, loader, model
selection, the epochs done so far) and writes what a run writes after each epoch: the
checkpoint, ``metrics.json`` (docs/formats.md) and ``epochs.csv`` (with ``--tensorboard``
also TensorBoard scalars: :mod:`twopgraph.run.logs`). What differs between a process that trains
alone and a rank of a data-parallel job is a :class:`Rank` object: this class is the single
process; :class:`twopgraph.distributed.trainer.DistributedRank` overrides its hooks (the DDP
wrapper the steps go through, the epoch record summed over the ranks, the divergence decided
together, the evaluation spread over the ranks, only rank 0 writing files).

The loop, epoch by epoch: stop early when ``--patience`` is exhausted; one epoch of steps
(:func:`~twopgraph.pipeline.epoch.train_epoch`); the epoch's record for the job
(:meth:`Rank.epoch_record`, where divergence is found); on evaluated epochs the exact
evaluation and the selection (``--select``); the record appended, logged, checkpointed and
written. A stop signal or Ctrl-C writes ``metrics.json`` with status ``interrupted`` (the last
epoch's checkpoint stays) and propagates; a run error writes status ``failed``; divergence
writes the diverged record. At the end the final ``metrics.json`` and the summary line.

On CUDA the epochs run with TF32 float32 matmuls (:func:`~twopgraph.pipeline.epoch.tf32`: set
at the start with one log line, restored at the end); with ``--profile DIR`` the first epoch
the run trains is profiled (:mod:`twopgraph.run.profile`; the main process only).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from twopgraph.config import TrainConfig
from twopgraph.errors import OutputError, Stopped, TrainingDiverged, TwopgraphError
from twopgraph.inference import ScoredLogits
from twopgraph.pipeline.epoch import check_finite_weights, tf32, train_epoch
from twopgraph.pipeline.loader import Loader
from twopgraph.run.checkpoint import save_checkpoint
from twopgraph.run.logs import EpochLogs, write_epochs_csv
from twopgraph.run.records import (
    METRICS,
    final_line,
    log_epoch,
    write_diverged,
    write_failed,
    write_metrics,
)
from twopgraph.run.selection import (
    Selection,
    evaluates_after,
    log_early_stop,
    patience_exhausted,
)

if TYPE_CHECKING:
    from twopgraph.run.profile import StepProfiler

log = logging.getLogger("twopgraph")


@dataclass
class Training:
    """What the loop trains and records: ``model`` (the weights a checkpoint holds) and its
    optimizer ``opt``; ``loader`` (the batches); ``sel`` (model selection); ``epochs_log``
    (the records of the epochs done, appended to); ``start_epoch`` (0, or the epoch after a
    resumed checkpoint's); ``signature`` (what a resume must match) and ``rebuild`` (what
    ``load_model`` / ``predict`` rebuild the model and find its data from), both written into
    every checkpoint; ``metric`` (``acc`` or ``rocauc``)."""

    cfg: TrainConfig
    model: torch.nn.Module
    opt: torch.optim.Optimizer
    loader: Loader
    sel: Selection
    epochs_log: list[dict]
    start_epoch: int
    signature: dict
    rebuild: dict
    metric: str
    device: torch.device

    @property
    def out(self) -> Path:
        return Path(self.cfg.run.out)


class Rank:
    """A process that trains alone: every hook of the loop as a single process has it.

    ``evaluator`` computes the scored vertices' logits of a model
    (:class:`~twopgraph.run.train.RunEvaluator`); ``score`` turns them into an epoch's
    figures (``score(rec, logits)`` updates ``rec`` with ``val_acc``, ``val_score``, ...);
    ``info`` gives the top-level extras of ``metrics.json`` as they are now."""

    is_main = True
    #: train_epoch raises at the first non-finite loss (a distributed rank decides with the
    #: others instead)
    stops_on_nonfinite = True

    def __init__(self, evaluator: Callable[..., ScoredLogits] | None,
                 score: Callable[[dict, ScoredLogits], object] | None,
                 info: Callable[[], dict]) -> None:
        self.evaluator, self.score, self.info = evaluator, score, info

    def module(self, t: Training) -> torch.nn.Module:
        """What the training steps call (a rank of a distributed job: the DDP wrapper)."""
        return t.model

    def begin_epoch(self, t: Training, epoch: int) -> None:
        """Before the epoch's first step."""

    def epoch_record(self, t: Training, rec: dict) -> dict:
        """The epoch's record for the job from this process's ``rec``; raises
        :class:`~twopgraph.errors.TrainingDiverged` when training diverged."""
        check_finite_weights(t.model, t.opt, rec)
        return rec

    def evaluate(self, t: Training, rec: dict) -> ScoredLogits | None:
        """Exact evaluation of ``t.model``: its figures into ``rec``; returns the scored
        vertices' logits when this process keeps them (for the selected model)."""
        logits = self.evaluator(t.model, rec)
        self.score(rec, logits)
        return logits

    def complete(self, t: Training, rec: dict) -> None:
        """Last additions to an epoch's record before it is appended and written."""

    def log_epoch(self, t: Training, rec: dict) -> None:
        """The epoch's log lines."""
        log_epoch(rec, t.metric)

    def checkpoint_options(self) -> dict:
        """The keywords of this process's checkpoint (the torch RNG state, to resume the same
        dropout masks)."""
        return {"torch_rng": torch.get_rng_state()}

    def after_epochs(self, t: Training) -> None:
        """After the last epoch: a selected model whose logits were not kept (selected
        before a resume) is evaluated again."""
        if t.sel.logits is None:
            t.model.load_state_dict(t.sel.state)
            t.sel.logits = self.evaluator(t.model)

    def final_extras(self, t: Training) -> dict:
        """Extra keys of the final ``metrics.json`` (collective on a distributed rank)."""
        return {}


def _write(t: Training, rank: Rank, **kw) -> None:
    write_metrics(t.out, t.cfg, t.device, t.loader.plan, t.epochs_log, t.sel, **rank.info(),
                  **kw)


def train_epochs(t: Training, rank: Rank) -> None:
    """Train ``t`` from ``t.start_epoch`` to ``--epochs`` (see the module doc); every file a
    run writes is written by ``rank.is_main`` only: after each epoch also ``epochs.csv`` and,
    with ``--tensorboard``, the epoch's TensorBoard scalars (:mod:`twopgraph.run.logs`)."""
    run = t.cfg.run
    progress = run.progress and rank.is_main
    logs = EpochLogs(t.out, run.tensorboard, t.start_epoch) if rank.is_main else None
    try:
        _train_epochs(t, rank, progress, logs)
    finally:
        if logs is not None:
            logs.close()


@contextlib.contextmanager
def _profiled(t: Training, rank: Rank, epoch: int) -> Iterator[StepProfiler | None]:
    """``--profile DIR``: a started :class:`~twopgraph.run.profile.StepProfiler` for the
    first epoch this run trains, stopped after it (on the main process only: one trace);
    None for every other epoch and without ``--profile``."""
    folder = getattr(t.cfg.run, "profile", None)
    if folder is None or epoch != t.start_epoch or not rank.is_main:
        yield None
        return
    from twopgraph.run.profile import StepProfiler
    prof = StepProfiler(folder, t.device, len(t.loader), epoch).start()
    try:
        yield prof
    finally:
        prof.stop()


def _train_epochs(t: Training, rank: Rank, progress: bool, logs: EpochLogs | None) -> None:
    cfg, run = t.cfg, t.cfg.run
    try:
        with t.loader.plan.applied(), tf32(t.device):
            for epoch in range(t.start_epoch, run.epochs):
                if patience_exhausted(t.epochs_log, run.patience):  # --patience: stop early
                    break
                rank.begin_epoch(t, epoch)
                try:
                    with _profiled(t, rank, epoch) as prof:
                        rec = train_epoch(rank.module(t), t.opt, t.loader, epoch, progress,
                                          stop_on_nonfinite=rank.stops_on_nonfinite,
                                          amp=cfg.model.amp, profiler=prof)
                    rec = rank.epoch_record(t, rec)
                except TrainingDiverged as e:
                    if rank.is_main:
                        write_diverged(t.out, cfg, t.device, t.loader.plan, t.epochs_log, e,
                                       t.sel, **rank.info())
                    raise
                if evaluates_after(cfg, epoch):
                    start = time.perf_counter()
                    logits = rank.evaluate(t, rec)
                    rec["eval_s"] = time.perf_counter() - start
                    # the selected model's scored rows are kept (no copy); others dropped
                    t.sel.offer(rec, t.model, logits)
                    del logits
                rank.complete(t, rec)
                t.epochs_log.append(rec)
                if rank.is_main:
                    rank.log_epoch(t, rec)
                    save_checkpoint(t.out, t.model, t.opt, t.signature, t.epochs_log,
                                    config=cfg.flat(), selected=t.sel.record(),
                                    sampler=t.loader.sampler_name,
                                    **rank.checkpoint_options(), **t.rebuild)
                    _write(t, rank)
                    logs.epoch(t.epochs_log)

            if t.sel.epoch is None:  # resumed a finished run of a checkpoint without one
                rec = {"epoch": run.epochs - 1}
                t.sel.offer(rec, t.model, rank.evaluate(t, rec))
            rank.after_epochs(t)
    except (KeyboardInterrupt, Stopped):  # the checkpoint of the last epoch stays
        if rank.is_main and t.epochs_log:  # (before the first epoch: nothing to record)
            try:
                _write(t, rank, status="interrupted")
            except TwopgraphError as w:  # the stop wins; the failed write is said
                log.warning("%s", w)
        raise
    except TwopgraphError as e:  # e.g. a store changed under the run: its line, exit 2
        # (diverged: recorded above; a failed write: the disk is the problem, and the files
        # written so far stay as they were)
        if (rank.is_main and t.epochs_log
                and not isinstance(e, (TrainingDiverged, OutputError))):
            write_failed(t.out, cfg, t.device, t.loader.plan, t.epochs_log, e, t.sel,
                         **rank.info())
        raise
    extras = rank.final_extras(t)
    if rank.is_main:
        _write(t, rank, final=True, **extras)
        if t.start_epoch >= t.cfg.run.epochs:  # a resumed run that had no epoch left
            write_epochs_csv(t.out, t.epochs_log)
        log_early_stop(cfg, t.epochs_log)
        if (warning := t.sel.warning()) is not None:
            log.warning("%s", warning)
        log.info("%s", final_line(t.sel, t.out / METRICS))
