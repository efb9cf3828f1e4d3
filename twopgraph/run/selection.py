"""Model selection: which epoch's model a run reports and keeps (``--select``), the scores
of an evaluated epoch (``--metric``), and early stopping (``--patience``).

:class:`Selection` is offered every evaluated epoch (:func:`score_epoch` adds its figures) and
keeps the selected model's weights and scored logits; :func:`patience_exhausted` and
:func:`early_stop_record` decide and record an early stop from the epoch log alone (so a
resumed run stops where an uninterrupted one does); :func:`evaluates_after` says which epochs
end with an exact evaluation. Used alike by the single-process loop (:mod:`twopgraph.run.train`)
and the ranks of a distributed run (:mod:`twopgraph.distributed.trainer`).
"""

from __future__ import annotations

import logging
import os

import numpy as np
import torch

from twopgraph.config import TrainConfig
from twopgraph.errors import ConfigError
from twopgraph.graph.data import GraphData
from twopgraph.inference import ScoredLogits, accuracy, score

log = logging.getLogger("twopgraph")


class Selection:
    """The model a run reports and keeps (``--select``), scored by ``metric`` (``acc`` |
    ``rocauc``, resolved by :func:`~twopgraph.inference.resolve_metric`).

    :meth:`offer` is given every evaluated epoch's record (``val_acc``, ``test_acc``,
    ``val_score``, ``test_score``) and the model after it: ``last`` takes each one (the final
    epoch is always evaluated), ``best-val`` the one with the highest ``val_score`` (ties:
    the earliest; a null score -- empty split, one-class ROC-AUC -- loses to any number, and
    while every score is null the latest is taken). It keeps a host copy of the selected
    weights (:attr:`state`), which the checkpoint stores (:meth:`record`, key ``selected``),
    so a resumed run selects as an uninterrupted one (:meth:`resumed`), and the selected
    model's logits of the scored vertices only (:attr:`logits`, a
    :class:`~twopgraph.inference.ScoredLogits` of val + test: ``|val + test| x C``, never
    N x C)."""

    FIGURES = ("val_acc", "test_acc", "val_score", "test_score")

    def __init__(self, select: str, metric: str) -> None:
        self.select, self.metric = select, metric
        self.epoch: int | None = None
        self.figures: dict = dict.fromkeys(self.FIGURES)
        self.state: dict | None = None
        # of the selected model, when at hand: the scored (val + test) rows only
        self.logits: ScoredLogits | None = None

    @classmethod
    def resumed(cls, select: str, metric: str, ckpt: dict | None,
                path: str | os.PathLike | None = None) -> Selection:
        """The selection of a run resuming ``ckpt`` (None: a fresh one); refuses
        (ConfigError) a checkpoint that selected by another rule or metric, and a
        ``best-val`` resume of a checkpoint written before selection existed (its earlier
        epochs' weights are gone)."""
        sel = cls(select, metric)
        if ckpt is None:
            return sel
        rec = ckpt.get("selected")
        if rec is None:
            if select == "best-val" and any("val_acc" in e for e in ckpt["epochs_log"]):
                raise ConfigError(f"--resume: {path} was written by an older twopgraph, "
                                  f"without the selected model: resume it with --select "
                                  f"last, or retrain")
            return sel
        if (rec["select"], rec["metric"]) != (select, metric):
            raise ConfigError(f"--resume: {path} selected its model by --select "
                              f"{rec['select']} --metric {rec['metric']}; this run asks "
                              f"--select {select} --metric {metric} (resume with the same)")
        sel.epoch, sel.state = int(rec["epoch"]), rec["model"]
        sel.figures = {k: rec[k] for k in cls.FIGURES}
        return sel

    def offer(self, rec: dict, model: torch.nn.Module,
              logits: ScoredLogits | None = None) -> bool:
        """Consider the evaluated epoch ``rec`` of ``model`` (its ``logits``, the scored
        vertices' rows, kept when it is taken); returns whether it is the selected one
        now."""
        new, old = rec.get("val_score"), self.figures["val_score"]
        take = (self.select == "last" or self.epoch is None or old is None
                or (new is not None and new > old))
        if take:
            self.epoch = int(rec["epoch"])
            self.figures = {k: rec.get(k) for k in self.FIGURES}
            self.state = {k: v.detach().to("cpu", copy=True)
                          for k, v in model.state_dict().items()}
            self.logits = logits
        return take

    def record(self) -> dict | None:
        """The checkpoint's ``selected`` entry (None before any evaluated epoch)."""
        if self.epoch is None:
            return None
        return {"epoch": self.epoch, "model": self.state, "select": self.select,
                "metric": self.metric, **self.figures}

    @property
    def selected_by(self) -> str | None:
        """The rule that actually chose the model: ``select``, except ``last`` for a
        ``best-val`` run none of whose evaluated epochs has a validation score (an empty
        validation split; ROC-AUC undefined on a one-class split): then the latest evaluated
        epoch is taken. None before any evaluated epoch."""
        if self.epoch is None:
            return None
        if self.select == "best-val" and self.figures.get("val_score") is None:
            return "last"
        return self.select

    def no_score_reason(self) -> str | None:
        """Why a ``best-val`` run fell back to the last epoch (:attr:`selected_by`), as a
        phrase; None when it did not."""
        if self.select != "best-val" or self.selected_by != "last":
            return None
        if self.figures.get("val_acc") is None:
            return "the validation split is empty"
        return (f"the validation {self.metric} is undefined (the validation vertices hold "
                f"one class)")

    def warning(self) -> str | None:
        """The one warning line of a ``best-val`` run without a usable validation score
        (None otherwise): what was selected instead."""
        reason = self.no_score_reason()
        if reason is None:
            return None
        return (f"--select best-val: no evaluated epoch has a validation score ({reason}); "
                f"the last evaluated epoch's model (epoch {self.epoch}) is reported and kept "
                f"instead (metrics.json: selected_by \"last\")")

    def summary(self) -> dict:
        """The top-level keys of ``metrics.json`` (see
        :func:`~twopgraph.run.records.write_metrics`)."""
        return {**self.figures, "metric": self.metric, "select": self.select,
                "selected_by": self.selected_by, "selected_epoch": self.epoch,
                "selection_note": self.no_score_reason()}


def score_epoch(rec: dict, metric: str, logits: torch.Tensor | ScoredLogits,
                labels: torch.Tensor, data: GraphData, warned: set | None = None) -> dict:
    """Add an evaluated epoch's ``val_acc``, ``test_acc`` (accuracies) and ``val_score``,
    ``test_score`` (``metric``) of ``logits`` to ``rec``; returns it. ``logits``: N x C, or a
    :class:`~twopgraph.inference.ScoredLogits` holding (at least) the val and test rows."""
    for split, idx in (("val", data.val_idx), ("test", data.test_idx)):
        lg, lab, at = logits, labels, idx
        if isinstance(logits, ScoredLogits):  # the split's rows, scored in place
            lg, at = logits.take(idx), np.arange(idx.shape[0])
            lab = labels[torch.from_numpy(np.asarray(idx, dtype=np.int64))]
        rec[f"{split}_acc"] = accuracy(lg, lab, at)
        rec[f"{split}_score"] = (rec[f"{split}_acc"] if metric == "acc" else
                                 score(metric, lg, lab, at, warned=warned))
    return rec


def patience_exhausted(epochs_log: list, patience: int) -> bool:
    """Whether ``--patience`` ``patience`` (0: off) stops the run after the epochs of
    ``epochs_log``: its last ``patience`` evaluated epochs (those with a ``val_score`` key)
    have no better validation score than the best before them. A null score is never
    better; a run without any validation score is never stopped (nothing to be patient
    about). A function of the log alone, so a resumed run stops where an uninterrupted one
    does."""
    if not patience:
        return False
    best, since = None, 0
    for rec in epochs_log:
        if "val_score" not in rec:  # not evaluated
            continue
        v = rec["val_score"]
        if v is not None and (best is None or v > best):
            best, since = v, 0
        else:
            since += 1
    return best is not None and since >= patience


def early_stop_record(cfg: TrainConfig, epochs_log: list) -> dict | None:
    """``metrics.json``'s ``early_stop``: ``{"patience": N, "epoch": E}`` (the last epoch
    trained, 0-based) when ``--patience`` stopped the run before ``--epochs``, else None."""
    run = cfg.run
    if not (epochs_log and run.patience and patience_exhausted(epochs_log, run.patience)
            and epochs_log[-1]["epoch"] < run.epochs - 1):
        return None
    return {"patience": int(run.patience), "epoch": int(epochs_log[-1]["epoch"])}


def log_early_stop(cfg: TrainConfig, epochs_log: list) -> None:
    """Log the one line of an early stop (:func:`early_stop_record`), if ``--patience`` stopped
    the run before ``--epochs``."""
    rec = early_stop_record(cfg, epochs_log)
    if rec is not None:
        log.info("--patience %d: no better validation score in the last %d evaluated epochs; "
                 "stopping after epoch %d of %d", rec["patience"], rec["patience"],
                 rec["epoch"], cfg.run.epochs)


def evaluates_after(cfg: TrainConfig, epoch: int) -> bool:
    """Whether epoch ``epoch`` (0-based) ends with an exact evaluation: every ``eval_every``
    epochs, and always after the last."""
    run = cfg.run
    return epoch == run.epochs - 1 or bool(run.eval_every and (epoch + 1) % run.eval_every == 0)
