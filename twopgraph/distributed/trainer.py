"""Data-parallel training over self-dependence partitions (one rank per part, DDP).

Each rank loads only its own part (:func:`~twopgraph.distributed.partition.load.load_part`), runs
its own locality scheduler, sampler and feature cache on it, and trains a DDP replica: the only
traffic between ranks in training is the gradient all-reduce. The pieces are those of single-process
training (:mod:`twopgraph.run.train`, :mod:`twopgraph.pipeline.epoch`,
:mod:`twopgraph.run.selection`, :mod:`twopgraph.run.records`: model, epoch pipeline, checkpoints,
metrics), with:

- **batches**: the global ``batch_size`` B is split over the W ranks, ``ceil(B / W)`` seeds per
  rank and step, and every rank runs the same number of steps per epoch: ``ceil(T / (W
  ceil(B / W)))`` for T training vertices in all, i.e. as many optimizer steps as a
  single-process epoch. A rank whose part holds fewer seeds than that wraps around into a fresh
  shuffle of its own; one with more leaves its last few for the next epoch's shuffle. DDP
  averages the gradients, so a step sees about B seeds, as in a single-process run.
- **seeds**: model init from ``seed`` (DDP also broadcasts rank 0's weights); dropout from
  (``seed``, rank, epoch), so a resumed run continues the same streams.
- **files**: rank 0 alone logs and writes ``OUT/metrics.json`` and ``OUT/checkpoint.pt``
  (atomically, after every epoch). ``resume`` makes every rank read that checkpoint (with
  several machines ``OUT`` must be on a shared file system). Rank 0 owns ``OUT`` for the
  whole job (:class:`~twopgraph.run.outdir.RunDir`, taken before any part is loaded): a job or
  run already using it is refused on every rank with one line.
- **accounting** (per rank under ``ranks`` and in total per epoch): the metrics of
  docs/formats.md plus ``remote_graph_requests`` = expansions of a sampled vertex whose row the part
  holds only in part (truncated at the boundary: the requests an exact sampler would send to another
  worker), ``remote_feature_bytes`` = expected bytes of the feature rows those requests would bring
  (sum over them of ``min(fanout, d) (d - d_local) / d`` rows), both 0 when hops >= layers, and
  ``halo_input_rows`` = input rows of replicated (not owned) vertices, which a partition without
  replication would have to fetch remotely. Totals sum counts over ranks and take the slowest
  rank's times; ``input_nodes_per_batch`` is per rank and step. ``eval_exchanged_bytes`` (in
  each evaluated epoch, and at the top level for the last evaluation): the hidden-row bytes
  the ranks sent each other in exact evaluation, summed over ranks (0 on one machine;
  :mod:`twopgraph.distributed.evaluate`).
- **memory**: the part is memory-mapped and features are read from the dataset's store
  (read-only maps, one copy per machine in the page cache; a ``global`` part also samples on
  the store's CSR); ``metrics.json`` reports each rank's ``peak_rss_mib`` and ``peak_pss_mib``
  and their sum ``peak_pss_mib_total`` (:class:`~twopgraph.runtime.memory.PssMonitor`).
- **threads**: the ranks of a machine share its cores
  (:func:`~twopgraph.distributed.env.rank_plan`: each rank's torch threads plus sampling
  workers are its fair share, favouring sampling on CUDA), unless ``--threads``; on CUDA each
  rank takes ``cuda:LOCAL_RANK`` (``--device cuda:N`` with several local ranks is refused:
  :func:`~twopgraph.distributed.env.rank_device`).
- **robustness**: collectives time out after ``--dist-timeout`` seconds; a rank that loses its
  peers raises :class:`~twopgraph.errors.PeerLost` (one line: "connection lost" when a
  peer died, "did not answer within S s" when it timed out; gloo's and NCCL's errors alike,
  :func:`~twopgraph.distributed.env.peer_error`) instead of hanging; rank 0 then
  writes ``"status": "failed"`` with that line. A non-finite loss on any rank stops every rank
  at the end of that epoch (ranks must stop together) with
  :class:`~twopgraph.errors.TrainingDiverged`; rank 0 writes ``"status": "diverged"``.
- **restarts**: under torchrun's ``--max-restarts`` (``train --nproc P --max-restarts N``) a
  failed rank makes torchrun start every rank again; a restarted rank
  (``TORCHELASTIC_RESTART_COUNT`` > 0) resumes from ``OUT/checkpoint.pt`` when this job wrote
  it (written since the job's torchrun agent started), as ``--resume`` would, else starts as
  the first attempt did (:func:`_own_out`). With a worker started by ``--nproc``, the death
  of torchrun's agent stops it (:func:`~twopgraph.distributed.launch.watch_agent`).

Example (inside ``torchrun --nproc-per-node 4``)::

    >>> res = train_distributed(TrainConfig.of(epochs=2), "parts/small-4")  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from twopgraph.config import DataConfig, TrainConfig, describe_defaults
from twopgraph.core.metrics import transfer_metrics
from twopgraph.core.minibatch import Block, MiniBatch
from twopgraph.core.protocols import Scheduler
from twopgraph.core.rng import mix_key
from twopgraph.datasets import partition_dataset
from twopgraph.distributed.env import (
    DistEnv,
    detect,
    peer_error,
    process_group,
    rank_device,
    rank_plan,
    written_in_job,
)
from twopgraph.distributed.env import lost_peer as _lost_peer  # noqa: F401  (imported from here)
from twopgraph.distributed.evaluate import evaluate_scores
from twopgraph.distributed.launch import watch_agent
from twopgraph.distributed.partition.load import Part, load_part, read_meta
from twopgraph.errors import ConfigError, TrainingDiverged
from twopgraph.inference.scores import resolve_metric
from twopgraph.pipeline.assemble import govern_memory, make_loader
from twopgraph.pipeline.epoch import diverged
from twopgraph.run.checkpoint import (
    CHECKPOINT,
    build_training,
    dataset_record,
    model_record,
    read_checkpoint,
    resume_sampler,
    run_signature,
)
from twopgraph.run.loop import Rank, Training, train_epochs
from twopgraph.run.outdir import RunDir
from twopgraph.run.records import log_epoch, write_failed
from twopgraph.run.selection import (
    Selection,
    early_stop_record,
)
from twopgraph.runtime.governor import MemoryGovernor
from twopgraph.runtime.memory import PssMonitor, peak_rss_mib, reserve_host_bytes
from twopgraph.sampler import make_sampler, sampler_options

log = logging.getLogger("twopgraph")

# Result parameters a distributed --resume does not compare: the partition (and so the
# dataset, the clusters and the numbering) is matched through its partition_id instead.
PARTITION_KEYS = ("dataset", "num_clusters", "renumber")
SUM_KEYS = ("num_batches", "num_seeds", "feature_rows", "cache_hits", "h2d_bytes",
            "cache_fill_bytes", "cache_budget_rows", "activation_reserve_bytes",
            "remote_graph_requests", "remote_feature_bytes", "halo_input_rows",
            "readahead_ranges", "readahead_bytes", "host_cache_hits", "host_cache_lookups")
MAX_KEYS = ("epoch_s", "sample_s", "load_s", "compute_s")
class PartSampler:
    """The registered host sampler ``name`` (``--sampler``, a
    :class:`~twopgraph.sampler.NeighborSampler` by default) over a part's graph that also
    counts what exact sampling would have needed from other workers (see the module
    docstring).

    GCN's normalisation reads full-graph degrees, which a local part stores (a halo vertex's
    local row may be truncated), so the sampler is given those instead of the local ones. A
    global part samples on the store's whole CSR: every row is complete, its remote counters
    stay 0 and only ``halo_input_rows`` (input rows of vertices it does not own) counts.
    ``options``: the sampler's own keywords (:func:`~twopgraph.sampler.sampler_options`).
    """

    def __init__(self, part: Part, fanouts: Sequence[int], seed: int = 0,
                 name: str = "neighbor", options: dict | None = None) -> None:
        self.inner = make_sampler(name, part.data.graph, fanouts, seed=seed,
                                  degrees=part.degree, **(options or {}))
        self.graph, self.fanouts, self.seed = self.inner.graph, self.inner.fanouts, seed
        self.num_owned = part.num_owned
        self._is_owned = part.is_owned
        if part.degree is None:  # complete rows
            self._degree = self._missing = None
        else:
            self._degree = np.asarray(part.degree, dtype=np.int64)
            self._missing = self._degree - self.graph.degrees()  # > 0: truncated row
        self.remote_graph_requests = 0
        self.remote_feature_rows = 0.0
        self.halo_input_rows = 0
        self._lock = threading.Lock()

    @property
    def num_layers(self) -> int:
        return self.inner.num_layers

    def sample(self, seeds: np.ndarray | torch.Tensor, key: int | None = None,
               parallel: bool = True) -> MiniBatch:
        """:meth:`NeighborSampler.sample`, counting; safe from several sampler threads."""
        mb = self.inner.sample(seeds, key, parallel)
        ids = mb.input_nodes.numpy()
        requests, rows = 0, 0.0
        if self._missing is not None:
            for fanout, block in zip(self.fanouts, mb.blocks):
                dst = ids[:block.num_dst]
                miss = self._missing[dst]
                cut = miss > 0
                if cut.any():
                    d = self._degree[dst[cut]]
                    take = d if fanout < 0 else np.minimum(fanout, d)
                    requests += int(cut.sum())
                    rows += float((take * miss[cut] / d).sum())
        halo = int(ids.shape[0] - np.count_nonzero(self._is_owned(ids)))
        with self._lock:
            self.remote_graph_requests += requests
            self.remote_feature_rows += rows
            self.halo_input_rows += halo
        return mb

    def counters(self) -> tuple[int, float, int]:
        return self.remote_graph_requests, self.remote_feature_rows, self.halo_input_rows

    def full_block(self, dst_start: int, dst_end: int) -> Block:
        return self.inner.full_block(dst_start, dst_end)


# Refill shuffles of a rank that runs out of batches use epoch numbers this far apart, so
# they never coincide with a real epoch's shuffle (a prime larger than any epoch count).
REFILL_EPOCH_STRIDE = 100003


class FixedSteps:
    """A scheduler that yields exactly ``num_batches`` batches per epoch from ``inner``,
    starting fresh shuffles of ``inner`` (epochs ``epoch + k * REFILL_EPOCH_STRIDE``) when it
    runs out."""

    def __init__(self, inner: Scheduler, num_batches: int) -> None:
        self.inner, self.num_batches = inner, int(num_batches)

    def __getattr__(self, name: str) -> Any:  # batch_size, train_idx, ... of the wrapped scheduler
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def batches(self, epoch: int) -> Iterator[np.ndarray]:
        done, k = 0, 0
        while done < self.num_batches:
            for seeds in self.inner.batches(epoch + k * REFILL_EPOCH_STRIDE):
                yield seeds
                done += 1
                if done == self.num_batches:
                    return
            k += 1


@dataclass
class DistResult:
    """What :func:`train_distributed` returns on every rank: the selected model's
    (``--select``) ``val_acc``, ``test_acc`` (accuracies), ``val_score``, ``test_score``
    (``metric``) and ``selected_epoch``; every epoch's record; ``model``: the rank's replica
    after the last epoch (the selected weights are in the checkpoint)."""

    val_acc: float | None
    test_acc: float | None
    epochs: list[dict]
    out: Path
    rank: int
    model: torch.nn.Module
    val_score: float | None = None
    test_score: float | None = None
    metric: str = "acc"
    selected_epoch: int | None = None


def train_distributed(cfg: TrainConfig, partitions: str | os.PathLike, *,
                      env: DistEnv | None = None,
                      dataset_given: bool | None = None) -> DistResult:
    """Train per ``cfg`` on the partition folder ``partitions`` as rank ``env.rank`` of
    ``env.world_size`` (default: from the torchrun variables). The partition must have
    ``world_size`` parts; the dataset, ``num_clusters`` and ``renumber`` are taken from it
    (``metrics.json`` records the partition's dataset; a ``cfg.data.dataset`` given explicitly
    -- ``dataset_given``, None: when not the default -- that is another dataset is refused:
    :func:`~twopgraph.datasets.partition_dataset`). Collectives wait at most
    ``cfg.dist.dist_timeout`` seconds for the other ranks. Every rank returns the same
    accuracies; ``model`` is its replica (identical on all ranks).
    """
    cfg.validate()
    watch_agent()  # started by --nproc: stop when torchrun's agent dies, however it dies
    if cfg.sampling.sampler_device == "cuda":
        raise ConfigError("--sampler-device cuda is not available with --partitions (the "
                          "partition sampler runs on the host); use cpu or auto")
    env = detect() if env is None else env
    timeout_s = cfg.dist.dist_timeout
    meta = read_meta(partitions)
    if dataset_given is None:
        dataset_given = cfg.data.dataset != DataConfig().dataset
    cfg = copy.deepcopy(cfg)  # the caller's stays as given
    cfg.dist.partitions = str(partitions)  # recorded (checkpoint, metrics.json) as trained on
    cfg.data.dataset = partition_dataset(cfg.data.dataset, cfg.data.data_root, partitions,
                                         meta["source"], dataset_given)
    # --fanouts/--lr/--epochs left at None: by the whole graph's size (logged in _run)
    cfg, defaults = cfg.resolved(meta["source"]["num_nodes"])
    if meta["num_parts"] != env.world_size:
        raise ConfigError(f"{partitions} has {meta['num_parts']} parts but the run has "
                          f"{env.world_size} processes; use --nproc {meta['num_parts']} "
                          f"(or torchrun --nproc-per-node {meta['num_parts']})")
    if meta["hops"] < len(cfg.sampling.fanouts) and env.is_main:
        log.warning("partition hops %d < %d layers: sampling is truncated at part boundaries "
                    "(less replication, approximate neighbourhoods; see remote_graph_requests)",
                    meta["hops"], len(cfg.sampling.fanouts))
    device = rank_device(cfg.run.device, env)
    with _quiet_unless_main(env), process_group(env, device, timeout_s) as backend:
        try:
            with _own_out(cfg.run.out, env, cfg.run.resume, cfg.run.overwrite) as resume, \
                    PssMonitor() as pss:
                if resume and not cfg.run.resume:  # a restart that resumes (this copy)
                    cfg.run.resume, cfg.run.overwrite = True, False
                return _run(cfg, Path(partitions), meta, env, device, backend, pss,
                            defaults)
        except RuntimeError as e:  # a collective failed: a peer died, hung or timed out
            err = peer_error(env, timeout_s, e)
            if err is None:
                raise
            raise err from None
        finally:
            reserve_host_bytes(0)  # the memory governor's reserve (_run) ends with the run


@contextlib.contextmanager
def _quiet_unless_main(env: DistEnv):
    """Only rank 0 logs below WARNING; the logger's level is restored afterwards."""
    before = log.level
    if not env.is_main:
        log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        log.setLevel(before)


@contextlib.contextmanager
def _own_out(out, env: DistEnv, resume: bool = False, overwrite: bool = False):
    """Rank 0 claims ``out`` (:class:`~twopgraph.run.outdir.RunDir`: ``resume`` / ``overwrite``
    allow a folder that already holds a run; ``overwrite`` removes its files) for the block;
    every rank learns the outcome (one broadcast), so a refusal stops all of them with rank
    0's line. The other ranks never touch the lock: the ``--nproc`` launcher does not either
    (it only checks, :func:`~twopgraph.run.outdir.check_out`, before it starts torchrun).

    Yields whether the run resumes from ``OUT/checkpoint.pt``: ``resume``, or, in a group
    that torchrun restarted (``env.restart_count`` > 0), whether this job wrote that
    checkpoint (:func:`~twopgraph.distributed.env.written_in_job`; then ``overwrite`` is
    dropped: the files are the job's own; off Linux a restart starts as its first attempt).
    Rank 0 decides, every rank learns it. The lock of the attempt before a restart does not
    block it: torchrun restarts a group once its workers have exited, and the kernel drops a
    lock with its holder."""
    rundir, refusal = None, None
    if env.is_main:
        if env.restart_count and not resume and written_in_job(Path(out) / CHECKPOINT):
            resume, overwrite = True, False
        rundir = RunDir(out, resume=resume, overwrite=overwrite)
        try:
            rundir.claim()
        except ConfigError as e:
            rundir, refusal = None, str(e)
        if env.restart_count and refusal is None:
            log.info("torchrun restart %d: %s", env.restart_count,
                     f"resuming from {Path(out) / CHECKPOINT}" if resume else
                     "no checkpoint of this job yet: starting from the first epoch")
    if env.world_size > 1:
        box = [refusal, resume]
        dist.broadcast_object_list(box, src=0)
        refusal, resume = box
    if refusal is not None:
        raise ConfigError(refusal)
    failed = True
    try:
        yield bool(resume)
        failed = False
    finally:
        if rundir is not None:
            rundir.release(failed=failed)


def _signature(cfg: TrainConfig, meta: dict, world: int) -> dict:
    params = {k: v for k, v in cfg.result_params().items() if k not in PARTITION_KEYS}
    params["world_size"] = world
    return run_signature(params, meta["partition_id"])


def memory_metrics(ranks: list[tuple]) -> dict:
    """The memory keys of a distributed ``metrics.json`` from each rank's ``(peak RSS, peak
    PSS)`` in MiB: ``peak_rss_mib`` and ``peak_pss_mib`` (lists, by rank) and
    ``peak_pss_mib_total`` (their sum: what the ranks held together, shared maps counted
    once; None where PSS cannot be read)."""
    pss = [r[1] for r in ranks]
    return {"peak_rss_mib": [r[0] for r in ranks], "peak_pss_mib": pss,
            "peak_pss_mib_total": None if None in pss else sum(pss)}


def _run(cfg: TrainConfig, folder: Path, meta: dict, env: DistEnv, device, backend,
         pss: PssMonitor, defaults: dict | None = None) -> DistResult:
    world, rank = env.world_size, env.rank
    run = cfg.run
    if defaults is not None and (line := describe_defaults(defaults)) is not None:
        log.info("%s", line)
    out = Path(run.out)
    sig = _signature(cfg, meta, world)
    ckpt = (read_checkpoint(out / CHECKPOINT, sig, run.epochs, kind="distributed",
                            partitions=str(folder),
                            source_fingerprint=meta["source"]["fingerprint"])
            if run.resume else None)
    metric = resolve_metric(run.metric, meta["source"]["num_classes"])
    # every rank selects alike (the evaluation's figures are global); rank 0 saves it
    sel = Selection.resumed(run.select, metric, ckpt, out / CHECKPOINT)
    t = time.perf_counter()
    governor = MemoryGovernor.for_run()  # before the part: the library pages now are kept
    # memory-mapped: the part's structure, and the store's features (and, for a global part,
    # its CSR), are shared through the page cache by the ranks of this machine
    part = load_part(folder, rank, meta, mmap=True)
    data = part.data
    log.info("rank %d: %s part %d loaded in %.1f s: %d vertices (%d owned), %d edges, %d train; "
             "store %s", rank, part.representation, rank, time.perf_counter() - t,
             data.num_nodes, part.num_owned, data.graph.num_edges, data.train_idx.shape[0],
             part.store.store)

    # the same initial weights on every rank
    model, opt, epochs_log, start_epoch = build_training(cfg, data, device, ckpt)
    if ckpt is not None:
        log.info("resuming from %s after epoch %d", out / CHECKPOINT, start_epoch)
        cfg = resume_sampler(cfg, ckpt)
    ddp = DDP(model)

    local_bs = -(-cfg.sampling.batch_size // world)
    # As many optimizer steps per epoch as a single-process run with the same global batch.
    steps = -(-sum(p["num_train"] for p in meta["parts"]) // (local_bs * world))
    def part_sampler(name: str) -> PartSampler:
        return PartSampler(part, cfg.sampling.fanouts, seed=run.seed, name=name,
                           options=sampler_options(name, cfg.sampling))
    # features: local id v reads the store's row part.rows[v] (a global part: row v)
    # --schedule auto and --sampler auto: every rank measures its part's batches; the
    # decisions are made on the figures summed over the ranks, so all ranks use the same
    # scheduler and sampler
    plan = rank_plan(run.threads, device, env, run.prefetch)
    loader = make_loader(cfg, data, device, parts=part.cluster, batch_size=local_bs,
                         sampler_factory=part_sampler,
                         wrap_scheduler=lambda s: FixedSteps(s, steps),
                         threads=plan.total, rows=part.rows,
                         combine_schedule_figures=lambda f: summed_over_ranks(f, world))
    loader.use_plan(plan)
    # this rank's share of the machine's budget; a step that cannot fit: exit 2 on every rank
    govern_memory(cfg, data, loader, governor, batch_size=local_bs)
    plans: dict = {}  # the --eval-scope plan and halo plan, made at the first evaluation
    warned: set = set()  # the one-class ROC-AUC warning is logged once
    exchanged: dict = {"eval_exchanged_bytes": None}  # of the last evaluation (None: none yet)

    def evaluate() -> dict:
        res = evaluate_scores(model, part, device, run.eval_batch_edges,
                              feat_dtype=loader.features.dtype, scratch_dir=out,
                              metric=metric, warned=warned, scope=run.eval_scope,
                              plans=plans)
        exchanged["eval_exchanged_bytes"] = res["eval_exchanged_bytes"]
        return res

    extra = dict(distributed={"world_size": world, "backend": backend,
                              "batch_size_per_rank": local_bs},
                 partition={k: meta[k] for k in (
                     "partition_id", "num_parts", "hops", "replication_factor",
                     "edge_cut", "edge_cut_fraction", "num_clusters")}
                 | {"source": meta["source"]["name"], "store": meta["source"]["store"],
                    "representation": [p["representation"] for p in meta["parts"]]},
                 dataset=dataset_summary(part) if env.is_main else None,
                 schedule=loader.schedule, schedule_choice=loader.schedule_choice,
                 sampler=loader.sampler_name, sampler_choice=loader.sampler_choice,
                 memory=governor.record())

    def info() -> dict:  # the top-level extras of metrics.json, as they are now
        return {**extra, "early_stop": early_stop_record(cfg, epochs_log), **exchanged}

    # what load_model / predict rebuild the model and find its data from: the source store
    # (original ids) the partition was made from
    src = meta["source"]
    rebuild = {"model_spec": model_record(cfg, src["num_features"], src["num_classes"]),
               "dataset": dataset_record(src["store"], cfg.data.data_root, False, src["name"],
                                         src["fingerprint"], src["num_nodes"])}
    training = Training(cfg, model, opt, loader, sel, epochs_log, start_epoch, sig, rebuild,
                        metric, device)
    try:
        train_epochs(training, DistributedRank(env, ddp, loader.sampler, evaluate, info, pss))
    except RuntimeError as e:  # a peer died or hung: said in metrics.json, then raised
        err = peer_error(env, cfg.dist.dist_timeout, e)
        if err is None:
            raise
        if env.is_main and epochs_log:
            write_failed(out, cfg, device, loader.plan, epochs_log, err, sel, **info())
        raise err from None
    f = sel.figures
    return DistResult(f["val_acc"], f["test_acc"], epochs_log, out, rank, model,
                      f["val_score"], f["test_score"], metric, sel.epoch)


class DistributedRank(Rank):
    """Rank ``env.rank`` of a data-parallel job: the hooks of the training loop
    (:mod:`twopgraph.run.loop`) where a rank differs from a process that trains alone. The
    steps go through the DDP wrapper ``ddp``; each epoch's dropout seed is the rank's own;
    the epoch record is the whole job's (:func:`_total` of every rank's, with this rank's
    remote-sampling counters of ``sampler``); divergence is decided on every rank's records
    together (:func:`_divergence`), so all ranks stop alike; ``evaluate`` is the exact
    evaluation spread over the ranks (collective; the figures are global, so every rank
    selects alike); only rank 0 logs and writes files; the final ``metrics.json`` has every
    rank's peak memory (:func:`memory_metrics`, ``pss`` this rank's monitor)."""

    stops_on_nonfinite = False  # a non-finite loss is recorded: the ranks decide together

    def __init__(self, env: DistEnv, ddp: torch.nn.Module, sampler: PartSampler,
                 evaluate: Callable[[], dict], info: Callable[[], dict],
                 pss: PssMonitor) -> None:
        super().__init__(None, None, info)
        self.env, self.ddp, self.sampler, self._evaluate, self.pss = env, ddp, sampler, \
            evaluate, pss
        self.is_main = env.is_main
        self._before: tuple = (0, 0.0, 0)
        self._ranks: list[dict] = []

    def module(self, t: Training) -> torch.nn.Module:
        return self.ddp

    def begin_epoch(self, t: Training, epoch: int) -> None:
        torch.manual_seed(mix_key(t.cfg.run.seed, self.env.rank, epoch) & 0x7FFFFFFFFFFFFFFF)
        self._before = self.sampler.counters()

    def epoch_record(self, t: Training, rec: dict) -> dict:
        before, after = self._before, self.sampler.counters()
        rec.update(rank=self.env.rank, remote_graph_requests=after[0] - before[0],
                   remote_feature_bytes=int(round((after[1] - before[1])
                                                  * t.loader.features.row_bytes)),
                   halo_input_rows=after[2] - before[2])
        ranks = [None] * self.env.world_size
        dist.all_gather_object(ranks, rec)
        err = _divergence(ranks, t.model, t.opt)
        if err is not None:  # every rank sees the same records and weights: all stop
            raise err
        self._ranks = ranks
        return _total(ranks)

    def evaluate(self, t: Training, rec: dict) -> None:
        rec.update(self._evaluate())
        return None

    def complete(self, t: Training, rec: dict) -> None:
        rec["ranks"] = self._ranks

    def log_epoch(self, t: Training, rec: dict) -> None:
        """One line per epoch: the single process's, the job's remote counters appended."""
        log_epoch(rec, t.metric, tail=f"  remote_graph_requests "
                                      f"{rec['remote_graph_requests']}  halo_input_rows "
                                      f"{rec['halo_input_rows']}")

    def checkpoint_options(self) -> dict:
        return {"kind": "distributed"}

    def after_epochs(self, t: Training) -> None:
        pass  # the selected weights are in the checkpoint; no logits are kept

    def final_extras(self, t: Training) -> dict:
        mem = [None] * self.env.world_size
        dist.all_gather_object(mem, (peak_rss_mib(), self.pss.stop()))
        return memory_metrics(mem)


def dataset_summary(part: Part) -> dict:
    """The ``dataset`` entry of a distributed ``metrics.json``: the summary of the whole
    dataset the partition was made from (its store: :meth:`GraphData.summary`, as a
    single-process run records), named as in the partition's ``meta.json``."""
    return {**part.store.summary(), "name": part.meta["source"]["name"]}


def summed_over_ranks(figures: dict, world: int) -> dict:
    """``figures`` (:func:`~twopgraph.locality.auto.measure`'s, of this rank) summed
    over the ``world`` ranks key by key (``seconds``: the largest), the same on every rank
    (one ``all_gather_object``)."""
    every = [None] * world
    dist.all_gather_object(every, figures)
    return {k: (max if k == "seconds" else sum)(f[k] for f in every) for k in figures}


def _divergence(ranks: list[dict], model, opt) -> TrainingDiverged | None:
    """The divergence of an epoch from every rank's record (``nonfinite``, removed from
    them): the earliest non-finite loss of any rank, else non-finite weights (the same on
    every rank: DDP keeps the replicas equal); None if training is sound."""
    bad = sorted((r["nonfinite"]["step"], r["rank"], r["nonfinite"]["loss"])
                 for r in ranks if r.get("nonfinite"))
    for r in ranks:
        r.pop("nonfinite", None)
    epoch = ranks[0]["epoch"]
    if bad:
        step, rank, loss = bad[0]
        return diverged(epoch, step, loss, opt, what=f"rank {rank}, ")
    if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
        return diverged(epoch, ranks[0]["num_batches"] - 1, ranks[0]["loss"], opt,
                        what="non-finite weights, ")
    return None


def _total(ranks: list[dict]) -> dict:
    """One epoch record for the whole job from the per-rank ones (see module docstring)."""
    tot = {"epoch": ranks[0]["epoch"], "world_size": len(ranks),
           "sampler_device": ranks[0]["sampler_device"], "amp": ranks[0]["amp"]}
    for k in SUM_KEYS:
        tot[k] = sum(r[k] for r in ranks)
    for k in MAX_KEYS:
        tot[k] = max(r[k] for r in ranks)
    seeds = max(tot["num_seeds"], 1)
    tot["loss"] = sum(r["loss"] * r["num_seeds"] for r in ranks) / seeds
    tot["train_acc"] = sum(r["train_acc"] * r["num_seeds"] for r in ranks) / seeds
    tot["row_bytes"] = ranks[0]["row_bytes"]
    tot.update(transfer_metrics(feature_rows=tot["feature_rows"], cache_hits=tot["cache_hits"],
                                h2d_bytes=tot["h2d_bytes"], row_bytes=tot["row_bytes"],
                                num_batches=tot["num_batches"]))
    tot["seeds_per_s"] = tot["num_seeds"] / tot["epoch_s"] if tot["epoch_s"] else 0.0
    tot["cpu_s"] = sum(r["cpu_s"] for r in ranks)  # every rank's threads
    tot["cpu_per_wall"] = tot["cpu_s"] / tot["epoch_s"] if tot["epoch_s"] else 0.0
    for k in ("load_gpu_s", "sample_gpu_s", "compute_gpu_s"):  # the slowest rank's (None: CPU)
        vals = [r[k] for r in ranks if r.get(k) is not None]
        tot[k] = max(vals) if vals else None
    return tot
