"""The training loop: config, sampled training, exact layer-wise evaluation, checkpoints, metrics.

Outputs in ``out`` (written by :func:`train`):

- ``checkpoint.pt`` -- after every epoch, atomically (temp file + rename): the resume state
  (``model``: the weights after the last epoch, optimizer, torch RNG state, the epochs done
  and the config that matters for resuming), the selected model (``selected``: its epoch,
  weights, figures and the ``--select``/``--metric`` that chose it; :class:`Selection`), and
  what :func:`twopgraph.predict.load_model` rebuilds the model from (``model_spec``:
  :func:`model_record`; ``dataset``: :func:`dataset_record`);
- ``metrics.json`` -- ``status`` (``running`` after an epoch, ``ok`` at the end,
  ``diverged``, ``interrupted`` by a signal, ``failed`` with ``error`` when an error such as
  a store changed under the run stopped it); at the top level the selected model's
  (``--select``: ``best-val`` = the evaluated epoch with the best validation score, ``last``
  = the final epoch; the best so far while running) ``val_acc``, ``test_acc`` (accuracies), ``val_score``, ``test_score`` (in
  ``metric``: ``acc`` or ``rocauc``, from ``--metric``), ``selected_epoch`` (0-based),
  ``metric`` and ``select`` (figures null for a diverged run); ``epochs`` (one object per
  epoch with the metrics of docs/formats.md; evaluated epochs also ``val_acc``, ``test_acc``,
  ``val_score``, ``test_score``), the config, the dataset summary, the seed ``schedule``
  used and ``schedule_choice`` (the figures of ``--schedule auto``'s decision, null for a
  schedule given explicitly), and the process's ``peak_rss_mib`` / ``peak_pss_mib``; strict
  JSON (a NaN or infinity is written as null).

Exact evaluation (:class:`RunEvaluator`, ``--eval-scope``: whole-graph
:func:`layerwise_inference` or :func:`~twopgraph.inference.scored_inference` of the val and
test vertices' L-hop neighbourhood; each evaluated epoch records ``eval_scope``, ``eval_rows``,
``eval_edges``, ``eval_choice``) may keep its intermediate tables in scratch files in ``out``
when host memory is short: anonymous files (no name in the folder, their space freed when
evaluation ends, also when the process dies). The run keeps the selected model's logits of the
scored vertices only; :attr:`TrainResult.logits` (N x C) is computed when first read.

The run owns ``out`` while it runs (:class:`~twopgraph.rundir.RunDir`: a second run into it is
refused; a run that fails before writing anything leaves no empty folder behind). A
non-finite loss (or non-finite weights after an epoch) stops training with
:class:`~twopgraph.errors.TrainingDiverged` (CLI exit code 3) after writing ``metrics.json``
with ``"status": "diverged"``; the last checkpoint, of the last finite epoch, is kept. A file
that cannot be written (full disk, read-only) ends the run with one
:class:`~twopgraph.errors.TwopgraphError` line; the files written before stay intact.

Example::

    >>> cfg = TrainConfig.of(dataset="synthetic-tiny", epochs=1, out="runs/doc")  # doctest: +SKIP
    >>> result = train(cfg)                                                      # doctest: +SKIP
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from .cache.feature_cache import feat_dtype
from .cache.host import HostFeatures
from .checkpoint import (CHECKPOINT, build_training, dataset_record, model_record,
                         read_checkpoint, run_signature, save_checkpoint)
from .config import TrainConfig, describe_defaults, resolve_device
from .errors import ConfigError, OutputError, Stopped, TrainingDiverged, TwopgraphError
from .files import writing
from .graph import GraphData
from .heap import BatchHeap
from .inference import (ScoredLogits, accuracy, evaluate_scored, layerwise_inference,
                        resolve_metric, score, scored_ids)
from .jit import configure_threading
from .loader import Loader, ThreadPlan
from .metrics import peak_rss_mib, process_pss_monitor, write_json
from .models import build_model
from .partition import to_original_order
from .pipeline import eval_features, host_cache_record, locality_for, make_loader
from .rundir import RunDir, check_data_root
from .sampler import make_sampler

log = logging.getLogger("twopgraph")

METRICS = "metrics.json"
# ----------------------------------------------------------------------------------------------
# model selection and metrics files
# ----------------------------------------------------------------------------------------------


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

    def __init__(self, select: str, metric: str):
        self.select, self.metric = select, metric
        self.epoch: int | None = None
        self.figures: dict = dict.fromkeys(self.FIGURES)
        self.state: dict | None = None
        # of the selected model, when at hand: the scored (val + test) rows only
        self.logits: ScoredLogits | None = None

    @classmethod
    def resumed(cls, select: str, metric: str, ckpt: dict | None, path=None) -> Selection:
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

    def offer(self, rec: dict, model, logits: ScoredLogits | None = None) -> bool:
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
        """The top-level keys of ``metrics.json`` (see :func:`write_metrics`)."""
        return {**self.figures, "metric": self.metric, "select": self.select,
                "selected_by": self.selected_by, "selected_epoch": self.epoch,
                "selection_note": self.no_score_reason()}


def score_epoch(rec: dict, metric: str, logits, labels: torch.Tensor,
                data: GraphData, warned: set | None = None) -> dict:
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


def scored_vertices(data: GraphData) -> np.ndarray:
    """What a run's evaluation scores: the sorted distinct val and test vertices."""
    return scored_ids(data.num_nodes, data.val_idx, data.test_idx)


def write_metrics(out: Path, cfg: TrainConfig, device, plan: ThreadPlan, epochs_log: list,
                  selection: Selection, *, final: bool = False, status: str | None = None,
                  **extra) -> None:
    """``out/metrics.json``: the ``selection``'s figures at the top level (``val_acc``,
    ``test_acc``, ``val_score``, ``test_score`` of the selected epoch -- the best so far
    while running --, ``metric``, ``select``, ``selected_epoch``); ``final`` once training
    has ended. ``status``: ``running`` (default before ``final``), ``ok`` (default with it),
    ``interrupted`` (a signal), ``failed`` (an error: :func:`write_failed`) or ``diverged``
    (no figures, no selected epoch: the model's weights are not finite).
    ``extra`` adds (or replaces) top-level keys. Memory: ``peak_rss_mib`` and ``peak_pss_mib``
    of this process (:mod:`twopgraph.metrics`; PSS counts the pages of a memory-mapped store
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


def result_record(res) -> dict:
    """The JSON line ``twopgraph train`` prints at the end, the same for a single-process
    (:class:`TrainResult`) and a distributed run (``DistResult``)."""
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


# ----------------------------------------------------------------------------------------------
# the pipeline and the loop
# ----------------------------------------------------------------------------------------------


class RunEvaluator:
    """A run's exact evaluation: the logits of the scored vertices ``scored`` (val + test)
    of a model, by ``--eval-scope`` ``scope``
    (:func:`~twopgraph.inference.evaluate_scored`). The scope is planned on the first call
    (:func:`~twopgraph.inference.plan_scope`; one log line) and kept for the run: the graph and
    the splits do not change, so neither do the levels (``sum_i |V_i|`` int32 ids kept
    between evaluations for ``scored``). A call with ``rec`` adds the plan's ``eval_scope``,
    ``eval_rows``, ``eval_edges``, ``eval_choice`` to it."""

    def __init__(self, sampler, feat, device, scored: np.ndarray, batch_edges: int,
                 scope: str = "auto", scratch_dir=None):
        self.sampler, self.feat, self.device = sampler, feat, device
        self.scored, self.batch_edges, self.scope = scored, batch_edges, scope
        self.scratch_dir = scratch_dir
        self.plan = None

    def __call__(self, model, rec: dict | None = None) -> ScoredLogits:
        first = self.plan is None
        logits, self.plan = evaluate_scored(model, self.sampler, self.feat, self.device,
                                            self.scored, self.batch_edges, scope=self.scope,
                                            plan=self.plan, scratch_dir=self.scratch_dir)
        if first:
            p, c = self.plan, self.plan.choice
            why = "" if c is None else (f" (--eval-scope auto: estimated work of scored "
                                        f"{'>=' if c['cost_scored'] is None else '='} "
                                        f"{c['ratio']:.3f} x all's, threshold "
                                        f"{c['threshold']:g})")
            log.info("exact evaluation: scope %s, rows per layer %s for %d scored vertices"
                     "%s", p.scope, p.rows, self.scored.shape[0], why)
        if rec is not None:
            rec.update(self.plan.record())
        return logits


def _in_original_ids(logits: ScoredLogits | None, perm) -> ScoredLogits | None:
    """``logits`` (over renumbered ids) over the ids before renumbering (``perm``)."""
    if logits is None or perm is None or logits.ids is None:
        return logits
    orig = np.asarray(perm, dtype=np.int64)[logits.ids]
    order = np.argsort(orig, kind="stable")
    return ScoredLogits(logits.values[torch.from_numpy(order)], orig[order])


class WholeLogits:
    """What computes :attr:`TrainResult.logits` when it is first read: the selected
    weights ``state`` run through whole-graph :func:`layerwise_inference` on ``data`` (the
    run's numbering; features in ``--feat-dtype`` through a
    :class:`~twopgraph.cache.host.HostFeatures`, so no device cache is kept alive for it),
    the scored rows replaced by the run's own (``scored``, so the result scores exactly the
    figures reported), then put in the caller's ids (``perm``). N x C float32; the CLI never
    reads it."""

    def __init__(self, cfg: TrainConfig, data: GraphData, device, state: dict,
                 scored: ScoredLogits | None, perm, scratch_dir):
        self.cfg, self.data, self.device, self.state = cfg, data, device, state
        self.scored, self.perm, self.scratch_dir = scored, perm, scratch_dir

    def __call__(self) -> torch.Tensor:
        cfg, data = self.cfg, self.data
        m = cfg.model
        model = build_model(m.model, data.num_features, m.hidden, data.num_classes,
                            len(cfg.sampling.fanouts), m.dropout)
        model.load_state_dict(self.state)
        model.to(self.device)
        sampler = make_sampler("neighbor", data.graph, cfg.sampling.fanouts, seed=cfg.run.seed)
        feat = HostFeatures(data.feat, self.device, dtype=feat_dtype(cfg.cache.feat_dtype),
                            readahead=False)
        with ThreadPlan.for_threads(cfg.run.threads, cfg.run.prefetch).applied():
            logits = layerwise_inference(model, sampler, feat, self.device,
                                         cfg.run.eval_batch_edges, scratch_dir=self.scratch_dir)
        if self.scored is not None and self.scored.ids is not None:
            logits[torch.from_numpy(self.scored.ids)] = self.scored.values
        if self.perm is not None:  # in the caller's ids
            logits = to_original_order(logits, self.perm)
        return logits


@dataclass
class TrainResult:
    """What :func:`train` returns: the selected model's (``--select``) ``val_acc`` and
    ``test_acc`` (accuracies), ``val_score`` / ``test_score`` (``metric``),
    ``selected_epoch`` (0-based), every epoch's record, ``scored``: the selected model's
    logits of the val and test vertices (a :class:`~twopgraph.inference.ScoredLogits` in the
    caller's ids: ``|val + test| x C``), and :attr:`logits`, all N x C of them in the
    caller's vertex ids -- computed on first access (one whole-graph inference, N x C float32
    kept from then on), not by the run itself: ``whole`` is the tensor or what computes it
    (:class:`WholeLogits`)."""

    val_acc: float | None
    test_acc: float | None
    epochs: list[dict]
    out: Path
    whole: torch.Tensor | Callable[[], torch.Tensor] | None = field(default=None, repr=False)
    val_score: float | None = None
    test_score: float | None = None
    metric: str = "acc"
    selected_epoch: int | None = None
    scored: ScoredLogits | None = field(default=None, repr=False)

    @property
    def logits(self) -> torch.Tensor | None:
        """The selected model's N x C logits (float32, host, the caller's vertex ids; their
        val and test rows are :attr:`scored`'s); computed on first access."""
        if callable(self.whole):
            self.whole = self.whole()
        return self.whole


def train(cfg: TrainConfig, data: GraphData | None = None) -> TrainResult:
    """Train per ``cfg`` (loading ``cfg.data.dataset`` unless ``data`` is given); see the
    module doc. Every flag, the data root and ``--out`` (free, writable) are checked before
    any data is loaded."""
    cfg.validate()
    process_pss_monitor()  # peak PSS sampled from here on (metrics.json: peak_pss_mib)
    configure_threading()  # before the first parallel kernel (clustering, renumbering)
    device = resolve_device(cfg.run.device)
    if data is None:
        check_data_root(cfg.data.data_root, cfg.data.dataset)
    # held until the run ends: a second run into it is refused, and so is a folder holding
    # a run unless --resume or --overwrite (which removes the old files here)
    with RunDir(cfg.run.out, resume=cfg.run.resume, overwrite=cfg.run.overwrite):
        return _train(cfg, data, device)


def _train(cfg: TrainConfig, data: GraphData | None, device) -> TrainResult:
    run = cfg.run
    named = data is None  # the dataset of cfg, which `twopgraph predict` can load again
    if data is None:
        data = cfg.data.load(progress=run.progress)  # validated, --symmetrize applied
    else:  # a caller's GraphData: checked like a file (dtypes, labels, undirected graph)
        data.validate()
    # --fanouts/--lr/--epochs left at None: by graph size; before the signature, so that a
    # resumed run resolves (and fingerprints) them the same
    cfg, defaults = cfg.resolved(data.num_nodes)
    run = cfg.run
    if (line := describe_defaults(defaults)) is not None:
        log.info("%s", line)
    if (line := data.class_problem()) is not None:
        log.warning("%s", line)
    out = Path(run.out)
    signature = run_signature(cfg.result_params(), data.fingerprint())
    # what load_model / predict rebuild the model and find its data from (original ids)
    from .datasets import store_dtype_of
    rebuild = {"model_spec": model_record(cfg, data.num_features, data.num_classes),
               "dataset": dataset_record(cfg.data.dataset if named else None,
                                         cfg.data.data_root, cfg.data.symmetrize, data.name,
                                         data.fingerprint(), data.num_nodes,
                                         store_dtype_of(data, cfg.data.store_dtype))}
    ckpt = read_checkpoint(out / CHECKPOINT, signature, run.epochs) if run.resume else None
    if cfg.sampling.batch_size > data.train_idx.shape[0]:
        log.warning("batch size %d exceeds the %d training vertices: one batch per epoch",
                    cfg.sampling.batch_size, data.train_idx.shape[0])
    model, opt, epochs_log, start_epoch = build_training(cfg, data, device, ckpt)
    if ckpt is not None:
        torch.set_rng_state(ckpt["torch_rng"])
        log.info("resuming from %s after epoch %d", out / CHECKPOINT, start_epoch)
    metric = resolve_metric(run.metric, data.num_classes)
    sel = Selection.resumed(run.select, metric, ckpt, out / CHECKPOINT)

    prep = locality_for(data, [cfg.sampling.schedule], cfg)
    data = prep.data
    loader = make_loader(cfg, data, device,
                         parts=None if prep.clustering is None else prep.clustering.parts,
                         schedule_choice=prep.schedule_choice)
    feat = eval_features(data, loader)
    labels = loader.labels
    summary = data.summary()
    static = {"dataset": summary, "schedule": loader.schedule,
              "schedule_choice": loader.schedule_choice, "defaults": defaults}

    def info() -> dict:  # the top-level extras of metrics.json, as they are now
        return {**static, "host_cache": host_cache_record(loader),
                "early_stop": early_stop_record(cfg, epochs_log)}

    warned: set = set()  # the one-class ROC-AUC warning is logged once
    evaluator = RunEvaluator(loader.sampler, feat, device, scored_vertices(data),
                             run.eval_batch_edges, run.eval_scope, out)

    try:
        with loader.plan.applied():
            for epoch in range(start_epoch, run.epochs):
                if patience_exhausted(epochs_log, run.patience):  # --patience: stop early
                    break
                try:
                    rec = train_epoch(model, opt, loader, epoch, run.progress,
                                      amp=cfg.model.amp)
                    check_finite_weights(model, opt, rec)
                except TrainingDiverged as e:
                    write_diverged(out, cfg, device, loader.plan, epochs_log, e, sel, **info())
                    raise
                if evaluates_after(cfg, epoch):
                    t = time.perf_counter()
                    logits = evaluator(model, rec)  # the val + test rows only
                    score_epoch(rec, metric, logits, labels, data, warned)
                    rec["eval_s"] = time.perf_counter() - t
                    # the selected model's scored rows are kept (no copy); others dropped
                    sel.offer(rec, model, logits)
                    del logits
                epochs_log.append(rec)
                log_epoch(rec, metric)
                save_checkpoint(out, model, opt, signature, epochs_log,
                                torch_rng=torch.get_rng_state(), config=cfg.flat(),
                                selected=sel.record(), **rebuild)
                write_metrics(out, cfg, device, loader.plan, epochs_log, sel, **info())

            if sel.epoch is None:  # resumed a finished run of a checkpoint without a selection
                logits = evaluator(model)
                sel.offer(score_epoch({"epoch": run.epochs - 1}, metric, logits, labels, data,
                                      warned), model, logits)
                del logits
            if sel.logits is None:  # selected before a resume: evaluate its weights again
                model.load_state_dict(sel.state)
                sel.logits = evaluator(model)
    except (KeyboardInterrupt, Stopped):  # the checkpoint of the last epoch stays
        if epochs_log:  # (before the first epoch: nothing to record, no folder left)
            write_metrics(out, cfg, device, loader.plan, epochs_log, sel,
                          status="interrupted", **info())
        raise
    except TwopgraphError as e:  # e.g. a store changed under the run: its line, exit 2
        # (diverged: recorded above; a failed write: the disk is the problem, and the files
        # written so far stay as they were)
        if epochs_log and not isinstance(e, (TrainingDiverged, OutputError)):
            write_failed(out, cfg, device, loader.plan, epochs_log, e, sel, **info())
        raise
    write_metrics(out, cfg, device, loader.plan, epochs_log, sel, final=True, **info())
    log_early_stop(cfg, epochs_log)
    if (warning := sel.warning()) is not None:
        log.warning("%s", warning)
    log.info("%s", final_line(sel, out / METRICS))
    f = sel.figures
    # The N x C logits in the caller's ids only when asked for (TrainResult.logits): the
    # scored rows are at hand; the others take one more whole-graph inference.
    whole = WholeLogits(cfg, data, device, sel.state, sel.logits, prep.perm, out)
    return TrainResult(f["val_acc"], f["test_acc"], epochs_log, out, whole, f["val_score"],
                       f["test_score"], metric, sel.epoch,
                       scored=_in_original_ids(sel.logits, prep.perm))


def diverged(epoch: int, step: int, loss: float, opt, what: str = "") -> TrainingDiverged:
    """The :class:`TrainingDiverged` of a non-finite loss (or, ``what``, weights) at
    ``epoch``/``step`` (0-based) of a run optimised by ``opt``."""
    lr = opt.param_groups[0]["lr"] if opt.param_groups else float("nan")
    return TrainingDiverged(f"training diverged at epoch {epoch} step {step} ({what}loss "
                            f"{loss:g}); lower --lr (now {lr:g}) or check the features for "
                            f"non-finite values", epoch=epoch, step=step, loss=loss)


def check_finite_weights(model, opt, rec: dict) -> None:
    """Raise :func:`diverged` if a parameter of ``model`` is no longer finite after the epoch
    of ``rec`` (one reduction per parameter tensor, once an epoch)."""
    if all(bool(torch.isfinite(p).all()) for p in model.parameters()):
        return
    raise diverged(rec["epoch"], max(rec.get("num_batches", 1) - 1, 0), rec["loss"], opt,
                   what="non-finite weights, ")


def write_diverged(out: Path, cfg: TrainConfig, device, plan: ThreadPlan, epochs_log: list,
                   err: TrainingDiverged, selection: Selection, **extra) -> None:
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


def write_failed(out: Path, cfg: TrainConfig, device, plan: ThreadPlan, epochs_log: list,
                 err: TwopgraphError, selection: Selection, **extra) -> None:
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


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.4f}"


def log_epoch(rec: dict, metric: str = "acc") -> None:
    """The log line of an epoch (its validation ``metric`` besides the accuracy when that is
    not ``acc``)."""
    extra = "" if metric == "acc" or "val_score" not in rec else \
        f"  val_{metric} {_fmt(rec['val_score'])}"
    log.info("epoch %d  loss %.4f  val_acc %s%s  epoch_s %.2f  sample_s %.2f  load_s %.2f  "
             "compute_s %.2f  inputs/batch %.0f", rec["epoch"], rec["loss"],
             _fmt(rec.get("val_acc")), extra, rec["epoch_s"], rec["sample_s"], rec["load_s"],
             rec["compute_s"], rec["input_nodes_per_batch"])


# The step's loss and accuracy stay on the device; the host reads them (one synchronisation)
# every READ_EVERY steps, at the end of the epoch and, with a progress bar, READ_SECONDS after
# the last read (so a slow epoch's bar still moves).
READ_EVERY = 20
READ_SECONDS = 0.5


class StepTally:
    """Loss x seeds, correct predictions and the first non-finite loss of an epoch's steps,
    kept on the device without a host synchronisation per step.

    :meth:`add` writes step ``k``'s loss and correct count into row ``k`` of a small device
    buffer (two device copies, no sync); :meth:`read` copies the rows written since the last
    read to the host -- the one synchronisation -- and folds them into host sums, noting the
    first non-finite loss with its exact step and value. ``rows`` steps fit between reads.
    """

    def __init__(self, device, rows: int = READ_EVERY):
        self.buf = torch.zeros((rows, 2), dtype=torch.float64, device=device)
        self.pending: list[int] = []  # seeds of each step written since the last read
        self.steps = 0  # steps read so far
        self.loss_sum, self.correct, self.seen = 0.0, 0, 0
        self.nonfinite: dict | None = None  # {"step", "loss"} of the first non-finite loss
        self.reads = 0

    @property
    def full(self) -> bool:
        return len(self.pending) == self.buf.shape[0]

    def add(self, loss: torch.Tensor, correct: torch.Tensor, n: int) -> None:
        """Step ``loss`` (0-d, detached) with ``correct`` (0-d count) of ``n`` seeds. The
        caller reads before the buffer overflows (:attr:`full`)."""
        row = self.buf[len(self.pending)]
        row[0] = loss
        row[1] = correct
        self.pending.append(n)

    def read(self) -> int:
        """Fold the steps since the last read into the host sums; returns how many."""
        k = len(self.pending)
        if k == 0:
            return 0
        vals = self.buf[:k].cpu().numpy()  # the one host synchronisation
        n = np.asarray(self.pending, dtype=np.float64)
        bad = ~np.isfinite(vals[:, 0])
        if self.nonfinite is None and bad.any():
            i = int(np.argmax(bad))
            self.nonfinite = {"step": self.steps + i, "loss": float(vals[i, 0])}
        self.loss_sum += float((vals[:, 0] * n).sum())
        self.correct += round(float(vals[:, 1].sum()))
        self.seen += int(n.sum())
        self.steps += k
        self.pending.clear()
        self.reads += 1
        return k


def autocast(device, amp: str = "off"):
    """The autocast context of ``--amp``: ``bf16`` = ``torch.autocast`` to bfloat16 on
    ``device``'s type (CUDA or CPU), ``off`` = a disabled one."""
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16,
                          enabled=amp == "bf16")


def train_epoch(model, opt, loader: Loader, epoch: int, progress: bool = True,
                stop_on_nonfinite: bool = True, amp: str = "off") -> dict:
    """One epoch of ``loader``'s batches through ``model`` (cross-entropy, ``opt`` step per
    batch; forward and loss under :func:`autocast` ``amp``); returns the epoch's record
    (the metrics of docs/formats.md, seconds, ``sampler_device``, ``amp``).

    No host synchronisation inside a step: loss and accuracy are accumulated on the device
    (:class:`StepTally`) and read every ``READ_EVERY`` steps, at the end of the epoch and, with
    a progress bar, after ``READ_SECONDS``. On CUDA ``compute_s`` is therefore the host's time
    queueing the steps plus its waits at those reads (where the device's backlog drains), and
    ``epoch_s`` ends with the last read. A non-finite loss is found at the next read, with its
    exact step: it raises :class:`TrainingDiverged` (:func:`diverged`), or, without
    ``stop_on_nonfinite`` (ranks of a distributed run, which must stop together), is recorded
    as ``rec["nonfinite"] = {"step", "loss"}`` while the epoch runs to its end."""
    model.train()
    t0, cpu0 = time.perf_counter(), time.process_time()
    compute_s = 0.0
    tally = StepTally(loader.device)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(loader), desc=f"epoch {epoch}", unit="batch",
                   leave=False, dynamic_ncols=True)

    def read() -> None:
        k = tally.read()
        if tally.nonfinite is not None and stop_on_nonfinite:
            bad = tally.nonfinite
            raise diverged(epoch, bad["step"], bad["loss"], opt)
        if bar is not None and k:
            el = time.perf_counter() - t0
            bar.set_postfix(loss=f"{tally.loss_sum / max(tally.seen, 1):.4f}",
                            seeds_s=f"{tally.seen / el:.0f}")
            bar.update(k)

    batches = loader.epoch(epoch)
    last_read = t0
    heap = BatchHeap().__enter__()  # batches reuse the pages the last one freed
    try:
        for mb in batches:
            tc = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with autocast(loader.device, amp):
                logits = model(mb)
                loss = F.cross_entropy(logits, mb.labels)
            loss.backward()
            opt.step()
            tally.add(loss.detach(), (logits.detach().argmax(1) == mb.labels).sum(),
                      mb.num_seeds)
            now = time.perf_counter()
            if tally.full or (bar is not None and now - last_read >= READ_SECONDS):
                read()
                last_read = now = time.perf_counter()
            heap.step()
            compute_s += time.perf_counter() - tc
        tc = time.perf_counter()
        read()  # the epoch's last steps
        compute_s += time.perf_counter() - tc
    finally:
        batches.close()
        heap.__exit__(None, None, None)  # after the loader's threads stopped
        if bar is not None:
            bar.close()
    epoch_s = time.perf_counter() - t0
    cpu_s = time.process_time() - cpu0  # every thread of the process
    seen = tally.seen
    rec = {"epoch": epoch, "loss": tally.loss_sum / max(seen, 1),
           "train_acc": tally.correct / max(seen, 1), "epoch_s": epoch_s,
           "compute_s": compute_s, "seeds_per_s": seen / epoch_s, "cpu_s": cpu_s,
           "cpu_per_wall": cpu_s / epoch_s, "sampler_device": loader.sampler_device.type,
           "amp": amp, "heap_trims": heap.trims}
    rec.update(loader.stats.as_dict())
    if tally.nonfinite is not None:
        rec["nonfinite"] = tally.nonfinite
    return rec
