"""The training loop: config, sampled training, exact layer-wise evaluation, checkpoints, metrics.

Outputs in ``out`` (written by :func:`train`):

- ``checkpoint.pt`` -- after every epoch, atomically (temp file + rename): the resume state
  (``model``: the weights after the last epoch, optimizer, torch RNG state, the epochs done
  and the config that matters for resuming), the selected model (``selected``: its epoch,
  weights, figures and the ``--select``/``--metric`` that chose it;
  :class:`~twopgraph.run.selection.Selection`), and what :func:`twopgraph.run.predict.load_model`
  rebuilds the model from (``model_spec``: :func:`model_record`; ``dataset``:
  :func:`dataset_record`);
- ``metrics.json`` -- ``status`` (``running`` after an epoch, ``ok`` at the end,
  ``diverged``, ``interrupted`` by a signal, ``failed`` with ``error`` when an error such as
  a store changed under the run stopped it); at the top level the selected model's
  (``--select``: ``best-val`` = the evaluated epoch with the best validation score, ``last``
  = the final epoch; the best so far while running) ``val_acc``, ``test_acc`` (accuracies),
  ``val_score``, ``test_score`` (in ``metric``: ``acc`` or ``rocauc``, from ``--metric``),
  ``selected_epoch`` (0-based), ``metric`` and ``select`` (figures null for a diverged run);
  ``epochs`` (one object per epoch with the metrics of docs/formats.md; evaluated epochs also
  ``val_acc``, ``test_acc``, ``val_score``, ``test_score``), the config, the dataset summary, the
  seed ``schedule`` used and ``schedule_choice`` (the figures of ``--schedule auto``'s decision,
  null for a schedule given explicitly), the ``sampler`` used and ``sampler_choice`` (``--sampler
  auto``'s, likewise), and the process's ``peak_rss_mib`` / ``peak_pss_mib``;
  strict JSON (a NaN or infinity is written as null);
- ``epochs.csv`` -- the records of ``metrics.json``'s ``epochs``, one row per epoch, rewritten
  after every epoch (:mod:`twopgraph.run.logs`); with ``--tensorboard DIR`` TensorBoard
  scalars in ``DIR`` as well.

Exact evaluation (:class:`RunEvaluator`, ``--eval-scope``: whole-graph
:func:`layerwise_inference` or :func:`~twopgraph.inference.scored_inference` of the val and
test vertices' L-hop neighbourhood; each evaluated epoch records ``eval_scope``, ``eval_rows``,
``eval_edges``, ``eval_choice``) may keep its intermediate tables in scratch files in ``out``
when host memory is short: anonymous files (no name in the folder, their space freed when
evaluation ends, also when the process dies). The run keeps the selected model's logits of the
scored vertices only; :attr:`TrainResult.logits` (N x C) is computed when first read.

The run owns ``out`` while it runs (:class:`~twopgraph.run.outdir.RunDir`: a second run into it is
refused; a run that fails before writing anything leaves no empty folder behind). A
non-finite loss (or non-finite weights after an epoch) stops training with
:class:`~twopgraph.errors.TrainingDiverged` (CLI exit code 3) after writing ``metrics.json``
with ``"status": "diverged"``; the last checkpoint, of the last finite epoch, is kept. A file
that cannot be written (full disk, read-only) ends the run with one
:class:`~twopgraph.errors.TwopgraphError` line; the files written before stay intact.

The run's parts live in their own modules: model selection and ``--patience`` in
:mod:`twopgraph.run.selection`, ``metrics.json`` and the log lines in :mod:`twopgraph.run.records`,
one training epoch in :mod:`twopgraph.pipeline.epoch`, the epoch loop (shared with the ranks of
a distributed run) in :mod:`twopgraph.run.loop`; this module sets a run up (:func:`train`) and
holds the exact evaluation during a run and :class:`TrainResult`.

Example::

    >>> cfg = TrainConfig.of(dataset="synthetic-tiny", epochs=1, out="runs/doc")  # doctest: +SKIP
    >>> result = train(cfg)                                                      # doctest: +SKIP
"""

from __future__ import annotations

import copy
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from twopgraph.cache.feature_cache import feat_dtype
from twopgraph.cache.host import HostFeatures
from twopgraph.config import TrainConfig, resolve_device
from twopgraph.core.protocols import FeatureSource, Sampler
from twopgraph.datasets.identity import check_data_root
from twopgraph.graph.data import GraphData
from twopgraph.inference import (
    ScoredLogits,
    evaluate_scored,
    layerwise_inference,
    resolve_metric,
    scored_ids,
)
from twopgraph.locality import to_original_order
from twopgraph.models import BlockGNN, build_model
from twopgraph.pipeline.assemble import (
    eval_features,
    govern_memory,
    host_cache_record,
    locality_for,
    make_loader,
)
from twopgraph.pipeline.loader import ThreadPlan
from twopgraph.run.checkpoint import (
    CHECKPOINT,
    build_training,
    dataset_record,
    model_record,
    read_checkpoint,
    resume_sampler,
    resume_schedule,
    run_signature,
)
from twopgraph.run.loop import Rank, Training, train_epochs
from twopgraph.run.outdir import RunDir
from twopgraph.run.race import (
    RACE_KEY,
    RecipeRace,
    race_applies,
    race_pending,
    recorded_race,
)
from twopgraph.run.selection import (
    Selection,
    early_stop_record,
    score_epoch,
)
from twopgraph.runtime.governor import MemoryGovernor
from twopgraph.runtime.jit import configure_threading
from twopgraph.runtime.memory import process_pss_monitor, reserve_host_bytes
from twopgraph.sampler import make_sampler
from twopgraph.sampler.stream import use_device

log = logging.getLogger("twopgraph")

# ----------------------------------------------------------------------------------------------
# exact evaluation during a run
# ----------------------------------------------------------------------------------------------


def scored_vertices(data: GraphData) -> np.ndarray:
    """What a run's evaluation scores: the sorted distinct val and test vertices."""
    return scored_ids(data.num_nodes, data.val_idx, data.test_idx)


class RunEvaluator:
    """A run's exact evaluation: the logits of the scored vertices ``scored`` (val + test)
    of a model, by ``--eval-scope`` ``scope``
    (:func:`~twopgraph.inference.evaluate_scored`). The scope is planned on the first call
    (:func:`~twopgraph.inference.plan_scope`; one log line) and kept for the run: the graph and
    the splits do not change, so neither do the levels (``sum_i |V_i|`` int32 ids kept
    between evaluations for ``scored``). A call with ``rec`` adds the plan's ``eval_scope``,
    ``eval_rows``, ``eval_edges``, ``eval_choice`` to it."""

    def __init__(self, sampler: Sampler, feat: FeatureSource | np.ndarray | torch.Tensor,
                 device: torch.device | str, scored: np.ndarray, batch_edges: int,
                 scope: str = "auto", scratch_dir: str | os.PathLike | None = None) -> None:
        self.sampler, self.feat, self.device = sampler, feat, device
        self.scored, self.batch_edges, self.scope = scored, batch_edges, scope
        self.scratch_dir = scratch_dir
        self.plan = None

    def __call__(self, model: BlockGNN, rec: dict | None = None) -> ScoredLogits:
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

    def __init__(self, cfg: TrainConfig, data: GraphData, device: torch.device | str,
                 state: dict, scored: ScoredLogits | None, perm: np.ndarray | None,
                 scratch_dir: str | os.PathLike | None) -> None:
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
    if device.index is not None:  # --device cuda:N: this thread's work (and contexts) there
        use_device(device)
    if data is None:
        check_data_root(cfg.data.data_root, cfg.data.dataset)
    # held until the run ends: a second run into it is refused, and so is a folder holding
    # a run unless --resume or --overwrite (which removes the old files here)
    governor = MemoryGovernor.for_run()  # before the data: the library pages now are kept
    try:
        with RunDir(cfg.run.out, resume=cfg.run.resume, overwrite=cfg.run.overwrite):
            return _train(cfg, data, device, governor)
    finally:
        reserve_host_bytes(0)


def _probe(cfg: TrainConfig, data: GraphData, device, governor: MemoryGovernor | None,
           named: bool) -> TrainResult:
    """One probe of the recipe race: a run of its own in ``cfg.run.out`` (OUT/race/NAME) on
    the run's loaded ``data`` (``named``: the dataset of ``cfg``, as the run's own)."""
    with RunDir(cfg.run.out, resume=cfg.run.resume, overwrite=cfg.run.overwrite):
        return _train(cfg, data, device, governor, named=named)


def _train(cfg: TrainConfig, data: GraphData | None, device,
           governor: MemoryGovernor | None = None, named: bool | None = None) -> TrainResult:
    run = cfg.run
    if named is None:  # the dataset of cfg, which `twopgraph predict` can load again
        named = data is None
    if data is None:
        data = cfg.data.load(progress=run.progress)  # validated, --symmetrize applied
    elif not named:  # a caller's GraphData: checked like a file (dtypes, labels, undirected)
        data.validate()
    # --fanouts/--lr/--epochs left at None: by graph size, or the recipe race's winner on a
    # small graph (run.race); before the signature, so that a resumed run resolves (and
    # fingerprints) them the same
    race = None
    if race_applies(cfg, data):
        # a --resume continues the race its checkpoint records (none: a run from before the
        # race, standard-es), or the race's probes when it stopped during them
        race = recorded_race(Path(run.out)) if run.resume else None
        if race is None and race_pending(Path(run.out), run.resume):
            race = RecipeRace(cfg, Path(run.out),
                              lambda c: _probe(c, data, device, governor, named),
                              val_vertices=len(data.val_idx)).run()[1]
            cfg = copy.deepcopy(cfg)
            cfg.run.resume = True  # continue the winner's checkpoint, now in OUT
    cfg, defaults = cfg.resolved_logged(data.num_nodes,
                                        None if race is None else race["chosen"])
    if race is not None:
        defaults["race"] = race
    run = cfg.run
    if (line := data.class_problem()) is not None:
        log.warning("%s", line)
    out = Path(run.out)
    signature = run_signature(cfg.result_params(), data.fingerprint())
    # what load_model / predict rebuild the model and find its data from (original ids)
    from twopgraph.datasets import store_dtype_of
    rebuild = {"model_spec": model_record(cfg, data.num_features, data.num_classes),
               "dataset": dataset_record(cfg.data.dataset if named else None,
                                         cfg.data.data_root, cfg.data.symmetrize, data.name,
                                         data.fingerprint(), data.num_nodes,
                                         store_dtype_of(data, cfg.data.store_dtype))}
    if race is not None:  # kept by every checkpoint: a --resume continues the winner
        rebuild[RACE_KEY] = race
    ckpt = read_checkpoint(out / CHECKPOINT, signature, run.epochs) if run.resume else None
    if cfg.sampling.batch_size > data.train_idx.shape[0]:
        log.warning("batch size %d exceeds the %d training vertices: one batch per epoch",
                    cfg.sampling.batch_size, data.train_idx.shape[0])
    model, opt, epochs_log, start_epoch = build_training(cfg, data, device, ckpt)
    if ckpt is not None:
        torch.set_rng_state(ckpt["torch_rng"])
        log.info("resuming from %s after epoch %d", out / CHECKPOINT, start_epoch)
        cfg = resume_sampler(cfg, ckpt)
        cfg = resume_schedule(cfg, ckpt, data.num_nodes, int(data.train_idx.shape[0]))
    metric = resolve_metric(run.metric, data.num_classes)
    sel = Selection.resumed(run.select, metric, ckpt, out / CHECKPOINT)

    prep = locality_for(data, [cfg.sampling.schedule], cfg)
    data = prep.data
    loader = make_loader(cfg, data, device,
                         parts=None if prep.clustering is None else prep.clustering.parts,
                         schedule_choice=prep.schedule_choice)
    # kept by every checkpoint: a --resume draws its batches as this run does
    rebuild["num_clusters"] = None if prep.clustering is None else prep.clustering.num_clusters
    # one budget; a step that cannot fit: exit 2
    governor = govern_memory(cfg, data, loader, governor)
    feat = eval_features(data, loader)
    labels = loader.labels
    summary = data.summary()
    if prep.clusters_tried and loader.schedule_choice is not None:
        loader.schedule_choice["clusters_tried"] = prep.clusters_tried
    static = {"dataset": summary, "schedule": loader.schedule,
              "schedule_choice": loader.schedule_choice, "sampler": loader.sampler_name,
              "sampler_choice": loader.sampler_choice, "defaults": defaults}

    def info() -> dict:  # the top-level extras of metrics.json, as they are now
        return {**static, "host_cache": host_cache_record(loader), "memory": governor.record(),
                "early_stop": early_stop_record(cfg, epochs_log)}

    warned: set = set()  # the one-class ROC-AUC warning is logged once
    evaluator = RunEvaluator(loader.sampler, feat, device, scored_vertices(data),
                             run.eval_batch_edges, run.eval_scope, out)

    def score(rec: dict, logits: ScoredLogits) -> None:
        score_epoch(rec, metric, logits, labels, data, warned)

    training = Training(cfg, model, opt, loader, sel, epochs_log, start_epoch, signature,
                        rebuild, metric, device)
    train_epochs(training, Rank(evaluator, score, info))
    f = sel.figures
    # The N x C logits in the caller's ids only when asked for (TrainResult.logits): the
    # scored rows are at hand; the others take one more whole-graph inference.
    whole = WholeLogits(cfg, data, device, sel.state, sel.logits, prep.perm, out)
    return TrainResult(f["val_acc"], f["test_acc"], epochs_log, out, whole, f["val_score"],
                       f["test_score"], metric, sel.epoch,
                       scored=_in_original_ids(sel.logits, prep.perm))
