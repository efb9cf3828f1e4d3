"""A run's records: ``metrics.json`` (:func:`write_metrics`; of a diverged run
:func:`write_diverged`, of a failed one :func:`write_failed`), the log line of each epoch
(:func:`log_epoch`), the log line of a run's end (:func:`final_line`) and the JSON line
``twopgraph train`` prints (:func:`result_record`). The keys of ``metrics.json`` are listed in
:mod:`twopgraph.run.train`'s module doc and docs/formats.md. Used alike by the single-process loop
and the ranks of a distributed run (:mod:`twopgraph.distributed.trainer`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from twopgraph.config import TrainConfig
from twopgraph.core.files import write_json, writing
from twopgraph.errors import TrainingDiverged, TwopgraphError
from twopgraph.pipeline.loader import ThreadPlan
from twopgraph.run.selection import Selection
from twopgraph.runtime.memory import peak_rss_mib, process_pss_monitor

if TYPE_CHECKING:
    import torch

log = logging.getLogger("twopgraph")

METRICS = "metrics.json"


class _RunResult(Protocol):
    """What :func:`result_record` reads of a run's result: a
    :class:`~twopgraph.run.train.TrainResult` or a distributed run's ``DistResult``."""

    val_acc: float | None
    test_acc: float | None
    val_score: float | None
    test_score: float | None
    metric: str
    selected_epoch: int | None
    out: Path


def write_metrics(out: Path, cfg: TrainConfig, device: torch.device | str, plan: ThreadPlan,
                  epochs_log: list, selection: Selection, *, final: bool = False,
                  status: str | None = None, **extra: Any) -> None:
    """``out/metrics.json``: the ``selection``'s figures at the top level (``val_acc``,
    ``test_acc``, ``val_score``, ``test_score`` of the selected epoch -- the best so far
    while running --, ``metric``, ``select``, ``selected_epoch``); ``final`` once training
    has ended. ``status``: ``running`` (default before ``final``), ``ok`` (default with it),
    ``interrupted`` (a signal), ``failed`` (an error: :func:`write_failed`) or ``diverged``
    (no figures, no selected epoch: the model's weights are not finite).
    ``extra`` adds (or replaces) top-level keys. Memory: ``peak_rss_mib`` and ``peak_pss_mib``
    of this process (:mod:`twopgraph.runtime.memory`; PSS counts the pages of a memory-mapped store
    shared with other processes in part; null where it cannot be read)."""
    if status is None:
        status = "ok" if final else "running"
    chosen = selection.summary()
    if status == "diverged":
        chosen.update(dict.fromkeys(Selection.FIGURES), selected_epoch=None,
                      selected_by=None, selection_note=None)
    metrics = {
        "status": status,
        **chosen,
        "final": bool(final),
        "epochs": epochs_log,
        "config": cfg.flat(),
        "device": str(device),
        "threads": {"total": plan.total, "torch": plan.compute, "numba": plan.compute,
                    "sample_workers": plan.workers, "background": plan.background},
        "peak_rss_mib": peak_rss_mib(),
        "peak_pss_mib": process_pss_monitor().peak_mib,
        **extra,
    }
    with writing(out / METRICS):
        write_json(out / METRICS, metrics)


def result_record(res: _RunResult) -> dict:
    """The JSON line ``twopgraph train`` prints at the end, the same for a single-process
    (:class:`~twopgraph.run.train.TrainResult`) and a distributed run (``DistResult``)."""
    return {"val_acc": res.val_acc, "test_acc": res.test_acc, "metric": res.metric,
            "val_score": res.val_score, "test_score": res.test_score,
            "selected_epoch": res.selected_epoch, "metrics": str(res.out / METRICS)}


def final_line(selection: Selection, path: Path) -> str:
    """The log line of a run's end: the selected epoch and its figures (4 decimals)."""
    f = selection.figures
    scores = "" if selection.metric == "acc" else \
        f"  val_{selection.metric} {_fmt(f['val_score'])}  test_{selection.metric} " \
        f"{_fmt(f['test_score'])}"
    rule = selection.select
    if selection.selected_by not in (None, rule):  # best-val without a validation score
        rule = f"{rule} without a validation score, so {selection.selected_by}"
    return (f"final ({rule}: epoch {selection.epoch})  val_acc "
            f"{_fmt(f['val_acc'])}  test_acc {_fmt(f['test_acc'])}{scores}  -> {path}")


def write_diverged(out: Path, cfg: TrainConfig, device: torch.device | str, plan: ThreadPlan,
                   epochs_log: list, err: TrainingDiverged, selection: Selection,
                   **extra: Any) -> None:
    """``metrics.json`` of a run stopped by ``err``: ``"status": "diverged"``, where
    (``diverged``: epoch, step, loss as text), no accuracies or scores (``selection`` gives
    the metric and the rule). A failure to write it is logged: the divergence stays the error
    reported."""
    record = {"epoch": err.epoch, "step": err.step, "loss": f"{err.loss:g}",
              "message": str(err)}
    try:
        write_metrics(out, cfg, device, plan, epochs_log, selection, status="diverged",
                      diverged=record, **extra)
    except TwopgraphError as w:
        log.warning("%s", w)


def write_failed(out: Path, cfg: TrainConfig, device: torch.device | str, plan: ThreadPlan,
                 epochs_log: list, err: TwopgraphError, selection: Selection,
                 **extra: Any) -> None:
    """``metrics.json`` of a run that ``err`` stopped after the epochs of ``epochs_log`` (a
    store changed under it, a full disk, ...): ``"status": "failed"`` and ``error`` (its
    one-line message and the epoch it stopped in); the figures of the model selected so far
    stay (the checkpoint holds it). Not called for a failed write (:class:`OutputError`),
    which leaves the files written so far as they were. A failure to write it is logged:
    ``err`` stays the error reported."""
    record = {"epoch": len(epochs_log), "message": str(err)}
    try:
        write_metrics(out, cfg, device, plan, epochs_log, selection, status="failed",
                      error=record, **extra)
    except TwopgraphError as w:
        log.warning("%s", w)


def _fmt(v) -> str:
    """A figure as the log lines print it: 4 decimals, ``-`` for None."""
    return "-" if v is None else f"{v:.4f}"


def log_epoch(rec: dict, metric: str = "acc", tail: str = "") -> None:
    """The log line of an epoch (its validation ``metric`` besides the accuracy when that is
    not ``acc``); ``tail`` is appended to it (a distributed run's counters: one line per
    epoch)."""
    extra = "" if metric == "acc" or "val_score" not in rec else \
        f"  val_{metric} {_fmt(rec['val_score'])}"
    log.info("epoch %d  loss %.4f  val_acc %s%s  epoch_s %.2f  sample_s %.2f  load_s %.2f  "
             "compute_s %.2f  inputs/batch %.0f%s", rec["epoch"], rec["loss"],
             _fmt(rec.get("val_acc")), extra, rec["epoch_s"], rec["sample_s"], rec["load_s"],
             rec["compute_s"], rec["input_nodes_per_batch"], tail)
