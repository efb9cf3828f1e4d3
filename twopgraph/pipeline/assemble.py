"""Assembly of a training pipeline from its config: where to sample, the loader (sampler,
scheduler, feature source and caches), what evaluation reads features through, and the
locality preparation (METIS clusters, renumbering, the cheap ``--schedule auto`` probe).

Used alike by the single-process loop (:mod:`twopgraph.run.train`), the ranks of a distributed
run, ``twopgraph predict``, :class:`~twopgraph.pipeline.nodeloader.NodeLoader` and the benchmarks;
it holds no training state.

Example::

    >>> import torch
    >>> from twopgraph.graph.data import CSRGraph
    >>> g = CSRGraph.from_edges([0, 1], [1, 0], num_nodes=2)
    >>> resolve_sampler_device("auto", "cpu", g)[0]
    device(type='cpu')
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from collections.abc import Callable, Collection
from dataclasses import fields
from typing import TYPE_CHECKING

import numpy as np
import torch

from twopgraph.cache import PolicyContext, attach_host_cache, build_feature_source
from twopgraph.cache.base import CachePolicy
from twopgraph.cache.build import policy_lookahead, resolve_cache_policy
from twopgraph.cache.feature_cache import (
    FeatureCache,
    activation_reserve_bytes,
    feat_dtype,
    pipeline_reserve_parts,
    resolve_budget,
)
from twopgraph.cache.host import HostFeatures, host_tensor, store_dtype, transfer_dtype
from twopgraph.cache.readahead import worth_reading_ahead
from twopgraph.config import CacheConfig, ModelConfig, SamplingConfig, TrainConfig
from twopgraph.config.checks import flag_name
from twopgraph.core.files import human_bytes
from twopgraph.core.protocols import (
    MODELS,
    SAMPLERS,
    SCHEDULERS,
    FeatureSource,
    Sampler,
    Scheduler,
)
from twopgraph.errors import ConfigError
from twopgraph.graph.data import CSRGraph, GraphData
from twopgraph.locality import make_scheduler, prepare_locality
from twopgraph.locality.auto import choose_schedule
from twopgraph.pipeline.loader import HostIdSampler, Loader, ThreadPlan
from twopgraph.runtime.governor import MemoryGovernor, measure_step
from twopgraph.runtime.heap import default_keep
from twopgraph.runtime.jit import thread_count
from twopgraph.runtime.memory import available_host_bytes
from twopgraph.sampler import make_sampler, sampler_options
from twopgraph.sampler.auto import CANDIDATES as SAMPLER_CANDIDATES
from twopgraph.sampler.auto import choose_sampler

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

    from twopgraph.config import Config
    from twopgraph.locality import LocalityPrep
    from twopgraph.locality.auto import ScheduleChoice

log = logging.getLogger("twopgraph")


def device_sampler_bytes(graph: CSRGraph) -> int:
    """Device bytes the ``device`` sampler needs for ``graph`` (what
    :meth:`~twopgraph.sampler.device.TorchNeighborSampler.nbytes` reports, plus the one
    relabelling map of its one sampling worker): ``indptr`` int64 ``8 (N + 1)``, ``indices``
    in the graph's dtype, degrees float32 ``4 N``, the map int64 ``8 N``. Per-batch
    temporaries (``O(sampled edges)``) are not counted."""
    n = graph.num_nodes
    return (8 * (n + 1) + graph.indices.dtype.itemsize * graph.num_edges + 4 * n + 8 * n)


def resolve_sampler_device(choice: str, device: torch.device | str, graph: CSRGraph,
                           share: float = 0.25,
                           total_bytes: int | None = None) -> tuple[torch.device, str]:
    """Where to sample (``--sampler-device``) and why, as ``(device, reason)``: ``cpu`` -> the
    host (numba); ``cuda`` -> the training device (``device`` must be a CUDA one); ``auto`` ->
    the training device when it is a CUDA one and :func:`device_sampler_bytes` of ``graph``
    is at most ``share`` of its total memory (``total_bytes``, default: what
    ``torch.cuda.mem_get_info`` says), else the host."""
    device = torch.device(device)
    host = torch.device("cpu")
    if choice == "cpu":
        return host, "--sampler-device cpu"
    if choice == "cuda":
        if device.type != "cuda":
            raise ConfigError(f"--sampler-device cuda samples on the training device; it needs "
                              f"--device cuda (training on {device})")
        return device, "--sampler-device cuda"
    if choice != "auto":
        raise ConfigError(f"unknown sampler device {choice!r}; known: auto, cpu, cuda")
    if device.type != "cuda":
        return host, f"--sampler-device auto, training on {device.type}"
    need = device_sampler_bytes(graph)
    if total_bytes is None:
        total_bytes = torch.cuda.mem_get_info(device)[1]
    fits = need <= share * total_bytes
    why = (f"--sampler-device auto: the graph's CSR, degrees and relabelling map "
           f"({human_bytes(need)}) {'fit in' if fits else 'exceed'} --sampler-memory-share "
           f"{share:g} of the device's {human_bytes(total_bytes)}")
    return (device if fits else host), why


def build_sampler(s: SamplingConfig, graph: CSRGraph, device: torch.device | str, seed: int,
                  log_choice: bool = True) -> Sampler:
    """The training sampler of the sampling options ``s`` (``--sampler``,
    ``--sampler-device``, ``--sampler-memory-share``) over ``graph`` for training on
    ``device``: the registered sampler ``s.sampler`` on the host, or its ``device_twin`` (the
    same batches, torch ops) where :func:`resolve_sampler_device` puts sampling on the GPU; a
    sampler that is itself ``on_device`` samples on ``device``. A ``--sampler-device cuda``
    for a sampler without a device twin is a :class:`ConfigError`; ``auto`` then samples on
    the host. One log line says where and why."""
    name = s.sampler
    factory = SAMPLERS.get(name)
    device = torch.device(device)
    if getattr(factory, "on_device", False):
        where, why, built = device, f"--sampler {name}", name
    else:
        twin = getattr(factory, "device_twin", None)
        if twin is None and s.sampler_device == "cuda":
            raise ConfigError(f"--sampler {name} has no device version: sample on the host "
                              f"(--sampler-device cpu or auto)")
        if twin is None:
            where, why = torch.device("cpu"), f"--sampler {name} samples on the host"
        else:
            where, why = resolve_sampler_device(s.sampler_device, device, graph,
                                                s.sampler_memory_share)
        built = name if where.type == "cpu" else twin
    if log_choice:  # a switch to the device twin is said, with how far the twin may differ
        twin_note = ""
        if built != name:
            note = getattr(SAMPLERS.get(name), "device_twin_note", None)
            twin_note = (f"; --sampler {name} runs as its device twin {built}"
                         + (f" ({note})" if note else ""))
        log.info("sampling on %s (%s sampler): %s%s", where, built, why, twin_note)
    options = sampler_options(built, s)  # the fields it declares, e.g. --labor-iterations
    if getattr(SAMPLERS.get(built), "on_device", False):
        return make_sampler(built, graph, s.fanouts, seed=seed, device=where, **options)
    return make_sampler(built, graph, s.fanouts, seed=seed, **options)


def host_sampler(s: SamplingConfig, graph: CSRGraph, seed: int, name: str) -> Sampler:
    """The registered host sampler ``name`` over ``graph`` with the options of ``s`` it
    declares (``--labor-*``): a candidate of ``--sampler auto`` as
    :func:`~twopgraph.sampler.auto.choose_sampler` measures it (a device twin draws the same
    batches)."""
    return make_sampler(name, graph, s.fanouts, seed=seed, **sampler_options(name, s))


def build_scheduler(s: SamplingConfig, data: GraphData, sampler: Sampler, batch_size: int,
                    seed: int, *, parts: np.ndarray | None = None, workers: int = 1,
                    schedule_choice: ScheduleChoice | None = None,
                    combine_schedule_figures: Callable[[dict], dict] | None = None,
                    ) -> tuple[Scheduler, str, dict | None]:
    """The seed scheduler of the sampling options ``s`` (``--schedule``, ``--balance``) over
    ``data.train_idx`` in batches of ``batch_size``, as ``(scheduler, name, decision)``:
    ``parts`` = the METIS cluster of every vertex (a ``locality`` schedule needs them);
    ``--schedule auto`` is decided here by :func:`~twopgraph.locality.auto.choose_schedule`
    on ``sampler`` (``workers`` sampling threads), its figures mapped by
    ``combine_schedule_figures`` when given -- a distributed run sums them over its ranks --
    unless ``schedule_choice`` holds the decision already (:func:`locality_for`'s probe);
    ``decision`` is that decision's record, None for a schedule given by name."""
    schedule, choice = s.schedule, None
    if schedule == "auto" and schedule_choice is not None:
        # decided before clustering (locality_for's probe: random, no clusters computed)
        choice = schedule_choice
    elif schedule == "auto":
        if parts is None:
            raise ConfigError("--schedule auto compares the locality scheduler with random: "
                              "it needs the METIS cluster of every vertex (parts=, see "
                              "locality_for)")
        choice = choose_schedule(sampler, data.train_idx, batch_size, seed, parts=parts,
                                 labels=data.label, balance=s.balance, workers=workers,
                                 combine=combine_schedule_figures)
    if choice is not None:
        schedule = choice.schedule
        log.info("%s", choice.describe())
    scheduler = make_scheduler(schedule, data.train_idx, batch_size, seed=seed,
                               balance=s.balance, parts=parts, labels=data.label)
    return scheduler, schedule, None if choice is None else choice.as_dict()


def build_features(c: CacheConfig, data: GraphData, device: torch.device,
                   ctx: PolicyContext, *, reserve: int = 0, rows: np.ndarray | None = None,
                   feat: np.ndarray | torch.Tensor | None = None,
                   policy: CachePolicy | Callable[..., CachePolicy] | None = None,
                   threads: int = 1) -> HostFeatures | FeatureCache:
    """The feature source of the cache options ``c`` for ``data`` on ``device``: the cache
    budget decided here, once for a run (``--cache-ratio``, ``--cache-gb``, or on CUDA the free
    device memory less a margin and ``reserve`` bytes left to the model's activations; on the
    host 0 rows: :func:`~twopgraph.cache.feature_cache.resolve_budget`), the policy
    (``--cache-policy``, ``auto`` resolved by :func:`~twopgraph.cache.resolve_cache_policy`
    and logged; or ``policy``: an object or factory of the caller's, see
    :func:`~twopgraph.cache.build_feature_source`) built from ``ctx`` on ``threads`` threads,
    read-ahead for a table that does not stay in the page cache, and a host row cache
    (``--host-cache``) for a memory-mapped table larger than memory. The source reads ``feat``
    (default ``data.feat``, used as it is: no copy), id ``i`` reading row ``rows[i]`` when
    ``rows`` (int64) is given (a part over the machine's shared table)."""
    table = data.feat if feat is None else feat
    name, why = resolve_cache_policy(c.cache_policy, device)
    if policy is None and c.cache_policy == "auto":
        log.info("feature cache policy %s: %s", name, why)
    # a buffer row is a row as it is copied (the store's dtype on CUDA when not wider)
    moved = transfer_dtype(store_dtype(table), feat_dtype(c.feat_dtype), device)
    row_bytes = data.num_features * torch.empty(0, dtype=moved).element_size()
    budget = resolve_budget(data.num_nodes, row_bytes, device, c.cache_ratio, c.cache_gb,
                            reserve=reserve)
    if (c.cache_ratio is None and c.cache_gb is None and device.type == "cuda"
            and (policy is not None or name != "none")):
        log.info("cache budget %d rows (%s, %s rows): free device memory less a 25%% margin "
                 "and a reserve of %s", budget, human_bytes(budget * row_bytes), moved,
                 human_bytes(reserve))
    source_kw = {} if rows is None else {"rows": rows}
    # Read-ahead (and MADV_RANDOM) only for a table that does not stay in the page cache.
    source_kw["readahead"] = (c.readahead == "on" or c.readahead == "auto"
                              and worth_reading_ahead(int(table.nbytes)))
    with thread_count(threads):  # pre-sampling (presample policy) may use every thread
        features = build_feature_source(name if policy is None else policy, table,
                                        ctx, device, budget=budget, dtype=c.feat_dtype,
                                        **source_kw)
        ra = getattr(features, "readahead", None)
        if ra is not None:  # auto: pages already in the page cache are not advised
            ra.skip_resident = c.readahead == "auto"
        # A memory-mapped table larger than memory: its best rows in a host row cache
        # (half of what the structure leaves; the other half for batches and page cache)
        hc = attach_host_cache(features, c.host_cache, ctx, gb=c.host_cache_gb,
                               structure_bytes=int(data.graph.indptr.nbytes
                                                   + data.graph.indices.nbytes),
                               rows=rows, available=_available_per_rank())
    if hc is not None:
        log.info("host row cache: %d of %d rows (%s, %s policy) in %.1f s; the others are "
                 "read from the store", hc.num_rows, features.host.num_rows,
                 human_bytes(hc.nbytes), hc.policy, hc.fill_s)
    elif c.host_cache not in ("none", "auto"):
        log.warning("--host-cache %s: no host row cache (the feature table is not a memory "
                    "map of a store, or its size came to 0 rows)", c.host_cache)
    if (policy is not None or name != "none") and features.budget == 0:
        log.warning("cache policy %s has a budget of 0 rows on %s: every row is copied; give "
                    "--cache-ratio or --cache-gb to build a cache",
                    name if policy is None else type(policy).__name__, device)
    return features


def model_reserve(m: ModelConfig, data: GraphData, fanouts: Sequence[int], batch_size: int, *,
                  prefetch: int, eval_batch_edges: int, extra: int = 0) -> int:
    """Device bytes a default CUDA cache budget leaves to the model ``m``'s activations on
    ``data`` (:func:`~twopgraph.cache.feature_cache.activation_reserve_bytes`; ``extra``:
    bytes the budget's free-memory reading does not see yet). :func:`device_reserve` adds
    the pipeline's parts."""
    return activation_reserve_bytes(
        num_nodes=data.num_nodes, num_edges=data.graph.num_edges,
        num_features=data.num_features, hidden=m.hidden, num_classes=data.num_classes,
        fanouts=fanouts, batch_size=batch_size, prefetch=prefetch,
        eval_batch_edges=eval_batch_edges, extra=extra, conv=MODELS.get(m.model),
        conv_options=m.conv_options())


def device_reserve(cfg: TrainConfig, data: GraphData, batch_size: int, *,
                   sampler_on_device: bool,
                   policy: str | CachePolicy | Callable[..., CachePolicy] | None = None,
                   device: torch.device | str = "cpu") -> dict[str, int]:
    """The parts of the device memory a default CUDA cache budget keeps free, in bytes:
    ``activations`` (:func:`model_reserve`: the model's training step or evaluation) and the
    pipeline's (:func:`~twopgraph.cache.feature_cache.pipeline_reserve_parts`): the blocks of
    the batches a device sampler (``sampler_on_device``) samples ahead -- the cache's
    lookahead window (:func:`~twopgraph.cache.build.policy_lookahead` of ``policy``, default
    ``cfg``'s ``--cache-policy`` resolved for ``device``) and the prefetch queue --, its
    relabelling maps, cuSPARSE's workspaces. The reserve is their sum."""
    s, run = cfg.sampling, cfg.run
    if policy is None:
        policy = resolve_cache_policy(cfg.cache.cache_policy, device)[0]
    parts = {"activations": model_reserve(cfg.model, data, s.fanouts, batch_size,
                                          prefetch=run.prefetch,
                                          eval_batch_edges=run.eval_batch_edges)}
    parts.update(pipeline_reserve_parts(
        num_nodes=data.num_nodes, num_edges=data.graph.num_edges, fanouts=s.fanouts,
        batch_size=batch_size, sampler_on_device=sampler_on_device,
        lookahead=policy_lookahead(policy), prefetch=run.prefetch,
        eval_batch_edges=run.eval_batch_edges))
    return parts


def ignored_flags(cfg: TrainConfig, *, sampler_flags: bool = True) -> list[str]:
    """One line per option set (to a value other than its default) that the chosen component
    does not read, so it changes nothing: a sampler's own options (``labor_*``: fields named
    ``<sampler>_<keyword>``) with another ``--sampler``, where ``sampler_flags``; a model's
    own options (``--heads``: the model spec's fields beyond model, hidden and dropout) with a
    model whose conv does not declare them (:attr:`~twopgraph.models.Conv.options`)."""
    lines = []
    s, m = cfg.sampling, cfg.model
    if sampler_flags:  # under --sampler auto, what either candidate reads counts
        names = SAMPLER_CANDIDATES if s.sampler == "auto" else (s.sampler,)
        read = {o for n in names for o in getattr(SAMPLERS.get(n), "options", ())}
        prefixes = tuple(n.replace("-", "_") + "_" for n in SAMPLERS.declared())
        for f in fields(s):
            value = getattr(s, f.name)
            if f.name.startswith(prefixes) and f.name not in read and value != f.default:
                shown = "" if isinstance(value, bool) else f" {value}"
                lines.append(f"--{flag_name(f.name)}{shown} does nothing with --sampler "
                             f"{s.sampler} (an option of --sampler "
                             f"{f.name.split('_', 1)[0]})")
    own = set(getattr(MODELS.get(m.model), "options", ()))
    defaults = {f.name: f.default for f in fields(m)}
    for name in set(m.spec_fields()) - set(m.spec_fields(required=True)) - own:
        if getattr(m, name) != defaults[name]:
            lines.append(f"--{flag_name(name)} {getattr(m, name)} does nothing with --model "
                         f"{m.model} (its layers do not read it)")
    return sorted(lines)


def warn_ignored_flags(cfg: TrainConfig, *, sampler_flags: bool = True) -> None:
    """A warning line for each of :func:`ignored_flags`."""
    for line in ignored_flags(cfg, sampler_flags=sampler_flags):
        log.warning("%s", line)


def make_loader(cfg: TrainConfig, data: GraphData, device: torch.device | str, *,
                parts: np.ndarray | None = None, batch_size: int | None = None,
                sampler: Sampler | None = None,
                wrap_scheduler: Callable[[Scheduler], Scheduler] | None = None,
                threads: int | None = None, rows: np.ndarray | None = None,
                feat: np.ndarray | torch.Tensor | None = None,
                combine_schedule_figures: Callable[[dict], dict] | None = None,
                schedule_choice: ScheduleChoice | None = None,
                scheduler: Scheduler | None = None,
                cache_policy: CachePolicy | Callable[..., CachePolicy] | None = None,
                sampler_factory: Callable[[str], Sampler] | None = None) -> Loader:
    """The training :class:`~twopgraph.pipeline.loader.Loader` over ``data``, composed of
    objects: a sampler (:func:`build_sampler` of ``cfg.sampling``), a seed scheduler
    (:func:`build_scheduler` of ``cfg.sampling``; ``parts`` = the METIS cluster of every
    vertex; ``wrap_scheduler`` may wrap it; the loader's ``schedule`` is the scheduler used,
    ``schedule_choice`` the ``--schedule auto`` decision's record, None for a schedule given
    by name) and a feature source (:func:`build_features` of ``cfg.cache``, whose default CUDA
    budget leaves the activations of ``cfg.model`` free: :func:`model_reserve`, reported as
    ``activation_reserve_bytes`` per epoch, and the pipeline's device memory: the parts of
    :func:`device_reserve`, logged once and kept as ``loader.device_reserve_parts``). Each
    config section builds its object; none is
    handed further down. ``batch_size`` and ``threads`` override ``cfg``'s; ``rows`` and
    ``feat`` go to the feature source.

    The components may be given as objects instead of being built from ``cfg``: ``sampler``
    (a :class:`~twopgraph.core.protocols.Sampler` over ``data.graph``), ``scheduler`` (a
    :class:`~twopgraph.core.protocols.Scheduler` of ``data.train_idx``: ``cfg``'s schedule is
    then not used) and ``cache_policy`` (a :class:`~twopgraph.cache.base.CachePolicy` or a
    factory ``f(ctx) -> CachePolicy``, in place of ``--cache-policy``; its budget still comes
    from ``cfg``'s cache options).

    ``--sampler auto`` (with no ``sampler`` object) is decided here, after the scheduler, by
    :func:`~twopgraph.sampler.auto.choose_sampler` on the scheduler's first batches (its
    figures mapped by ``combine_schedule_figures`` too), each candidate made by
    ``sampler_factory(name)`` (default: the registered host sampler with ``cfg``'s options);
    the chosen one is then built by ``sampler_factory`` or :func:`build_sampler` (on the
    device where ``--sampler-device`` puts it). ``--schedule auto`` is decided first, with
    neighbour sampling, as with ``--sampler neighbor``. ``loader.sampler_choice`` is the
    decision's record (None for a sampler given by name or as an object)."""
    s, seed = cfg.sampling, cfg.run.seed
    device = torch.device(device)
    batch_size = s.batch_size if batch_size is None else batch_size
    threads = cfg.run.threads if threads is None else threads
    warn_ignored_flags(cfg, sampler_flags=sampler is None)
    auto = sampler is None and s.sampler == "auto"
    # each candidate built once: the schedule's probe sampler is also auto's neighbor
    make = functools.cache(sampler_factory or functools.partial(host_sampler, s, data.graph,
                                                                 seed))
    sampler_name = s.sampler if sampler is None else type(sampler).__name__
    if auto:
        sampler = make(SAMPLER_CANDIDATES[0])  # what --schedule auto measures with
    elif sampler is None:
        sampler = (sampler_factory(s.sampler) if sampler_factory is not None
                   else build_sampler(s, data.graph, device, seed))
    plan = ThreadPlan.for_threads(threads, cfg.run.prefetch)
    torch_sampler = getattr(sampler, "device", None) is not None
    workers = 1 if torch_sampler else plan.total
    if scheduler is not None:
        schedule, choice = getattr(scheduler, "name", type(scheduler).__name__), None
    else:
        scheduler, schedule, choice = build_scheduler(
            s, data, sampler, batch_size, seed, parts=parts, workers=workers,
            schedule_choice=schedule_choice, combine_schedule_figures=combine_schedule_figures)
    sampler_choice = None
    if auto:
        sampler_choice = choose_sampler(make, scheduler, workers=workers,
                                        combine=combine_schedule_figures)
        log.info("%s", sampler_choice.describe())
        chosen = sampler_name = sampler_choice.sampler
        sampler = (sampler_factory(chosen) if sampler_factory is not None else
                   build_sampler(dataclasses.replace(s, sampler=chosen), data.graph, device,
                                 seed))
        torch_sampler = getattr(sampler, "device", None) is not None
        workers = 1 if torch_sampler else plan.total
    if wrap_scheduler is not None:
        scheduler = wrap_scheduler(scheduler)
    # Pre-sampling policies (presample) read host ids: a device sampler's are copied back
    # (HostIdSampler), and it samples in one thread (its ops use torch's threads or the GPU).
    ctx = PolicyContext(data.graph, data.train_idx, s.fanouts, batch_size, scheduler=scheduler,
                        sampler=HostIdSampler(sampler) if torch_sampler else sampler,
                        seed=seed, workers=workers)
    # The device sampler's relabelling maps and blocks are made on its first batches: not yet
    # in the free memory the budget reads (its CSR is: the sampler was built above).
    on_device = torch_sampler and torch.device(sampler.device).type == "cuda"
    parts = device_reserve(cfg, data, batch_size, sampler_on_device=on_device,
                           policy=cache_policy, device=device)
    reserve = sum(parts.values())
    caching = (cache_policy is not None
               or resolve_cache_policy(cfg.cache.cache_policy, device)[0] != "none")
    if (device.type == "cuda" and caching and cfg.cache.cache_ratio is None
            and cfg.cache.cache_gb is None):
        log.info("device memory kept from the cache budget: %s (%s)", human_bytes(reserve),
                 ", ".join(f"{k.replace('_', ' ')} {human_bytes(v)}" for k, v in parts.items()))
    features = build_features(cfg.cache, data, device, ctx, reserve=reserve, rows=rows,
                              feat=feat, policy=cache_policy, threads=plan.total)
    loader = Loader(scheduler, sampler, features, host_tensor(data.label), device,
                    prefetch=cfg.run.prefetch, threads=threads)
    loader.activation_reserve_bytes = parts["activations"]
    loader.device_reserve_parts = parts  # the whole reserve kept from a default budget
    loader.schedule = schedule
    loader.schedule_choice = choice
    loader.sampler_choice = None if sampler_choice is None else sampler_choice.as_dict()
    loader.sampler_name = sampler_name  # --sampler's name (auto: the chosen), else the type
    return loader


def govern_memory(cfg: TrainConfig, data: GraphData, loader: Loader,
                  governor: MemoryGovernor | None = None, *,
                  batch_size: int | None = None) -> MemoryGovernor:
    """Budget the run's host memory (:mod:`twopgraph.runtime.governor`) for ``loader``'s
    batches (of ``batch_size`` seeds, default ``cfg``'s): two batches sampled now give the
    step's size; the plan sets the loader's prefetch depth and its epochs' heap, and the
    governor watches them (``loader.governor``). Raises
    :class:`~twopgraph.errors.MemoryBudgetError` when a step cannot fit."""
    gov = MemoryGovernor() if governor is None else governor
    m, s = cfg.model, cfg.sampling
    conv = MODELS.get(m.model) if isinstance(m.model, str) else None
    dims = [m.hidden] * (len(s.fanouts) - 1) + [data.num_classes]
    mean_degree = data.graph.num_edges / max(1, data.num_nodes)
    if conv is not None and hasattr(conv, "activation_width"):
        opts = m.conv_options()
        widths = [conv.activation_width(d, max(1, int(mean_degree if f < 0 else
                                                      min(f, mean_degree))),
                                        last=i == len(dims) - 1, **opts)
                  for i, (d, f) in enumerate(zip(dims, s.fanouts))]
    else:
        widths = dims
    bs = s.batch_size if batch_size is None else batch_size
    est = measure_step(loader.sampler, data.train_idx, bs, data.num_features,
                       widths, seed=cfg.run.seed)
    mapped = sum(int(a.nbytes) for a in (data.feat, data.graph.indices, data.graph.indptr)
                 if isinstance(a, np.memmap))
    plan = gov.plan(est, prefetch=loader.prefetch, heap_keep=default_keep(),
                    mapped_bytes=mapped,
                    fix="use a smaller --batch-size or --fanouts (the step shrinks with the "
                        "input vertices of a batch), --store-dtype float16, or raise the "
                        "memory limit")
    loader.prefetch = plan.prefetch
    loader.governor = gov
    return gov


def _available_per_rank() -> int | None:
    """Host memory this process may still fill, shared evenly by the ranks of a machine
    (``LOCAL_WORLD_SIZE``, set by torchrun; each rank sizes its own host row cache)."""
    avail = available_host_bytes()
    try:
        ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        ranks = 1
    return None if avail is None else avail // ranks


def host_cache_record(loader: Loader) -> dict | None:
    """The ``host_cache`` figures of ``metrics.json``
    (:meth:`~twopgraph.cache.hostrows.HostRowCache.record`: rows, bytes, policy, fill seconds,
    hits and lookups of every gather so far, training and evaluation), None without one."""
    host = getattr(loader.features, "host", None)
    rc = getattr(host, "row_cache", None)
    return None if rc is None else rc.record()


def eval_features(data: GraphData, loader: Loader) -> FeatureSource:
    """What exact evaluation reads the input features through: the loader's feature source
    (rows in the dtype it copies -- the model is evaluated on the features it was trained on
    -- read per chunk from the host table, and from the device cache where there is one), or,
    for a loader without one, a :class:`~twopgraph.cache.host.HostFeatures` over
    ``data.feat``. Never a copy of the whole table."""
    src = loader.features
    if src is not None and hasattr(src, "read"):
        return src
    return HostFeatures(data.feat, loader.device, readahead=False)


def needs_clusters(schedule: str) -> bool:
    """Whether the scheduler ``schedule`` (a name, or ``auto``, which measures the locality
    scheduler) needs the METIS cluster of every vertex."""
    return schedule == "auto" or getattr(SCHEDULERS.get(schedule), "needs_clusters", False)


class _DataRootClusters:
    def __repr__(self) -> str:
        return "DATA_ROOT_CLUSTERS"


#: :func:`locality_for`'s default cache folder: ``clusters`` under the config's data root (a
#: sentinel, never a path a caller could mean).
DATA_ROOT_CLUSTERS = _DataRootClusters()


def locality_for(data: GraphData, schedules: Collection[str], cfg: Config, *,
                 cache_dir: str | os.PathLike | _DataRootClusters | None = DATA_ROOT_CLUSTERS,
                 ) -> LocalityPrep:
    """:func:`~twopgraph.locality.prepare_locality` for runs using ``schedules`` (scheduler
    names, or ``auto``) with the sampling options of ``cfg``: METIS clusters when one of them
    needs them (:func:`needs_clusters`) or ``renumber``, cached under ``cache_dir`` (default
    DATA_ROOT/clusters; None: computed in memory, not kept). This is the one place where
    ``--schedule auto`` is decided before clustering (``twopgraph train``, ``predict``, the
    ranks' loaders through the partition, :class:`~twopgraph.pipeline.NodeLoader`, the
    benchmarks): with no other schedule in ``schedules`` it first runs the cheap probe
    :func:`~twopgraph.locality.auto.probe_schedule`; where it shows that clusters cannot pay,
    nothing is clustered or renumbered and ``prep.schedule_choice`` holds the decision
    (random) for :func:`make_loader`, which otherwise decides on the clusters. It depends
    only on the data and ``cfg``, so ``twopgraph predict`` (``schedules=[]``) takes the same
    decision on the same data."""
    from twopgraph.datasets import resolve_data_root
    from twopgraph.locality.auto import probe_schedule
    s = cfg.sampling
    seed = getattr(getattr(cfg, "run", None), "seed", 0)
    probe = None
    auto = s.schedule == "auto" and all(n == "auto" for n in schedules) and \
        s.fanouts is not None
    if auto:
        probe = probe_schedule(data.graph, data.train_idx, s.fanouts, s.batch_size, seed,
                               num_clusters=s.num_clusters)
        if probe.schedule != "random":
            probe = None  # clusters may pay: cluster, then measure them (make_loader)
    if cache_dir is DATA_ROOT_CLUSTERS:
        cache_dir = resolve_data_root(cfg.data.data_root) / "clusters"
    num_clusters, tried, made = s.num_clusters, None, {}
    if auto and probe is None and num_clusters == 0:  # as many clusters as keep labels mixed
        from twopgraph.locality.auto import choose_clusters, describe_clusters
        from twopgraph.locality.cluster import cluster_graph

        def cluster(k: int):  # only the latest is kept: one N-vector of parts at a time
            made.clear()
            made[k] = cluster_graph(data.graph, k, train_idx=data.train_idx,
                                    cache_dir=cache_dir, method=s.cluster_method)
            return made[k]
        num_clusters, tried = choose_clusters(data.num_nodes, data.train_idx, data.label,
                                              s.batch_size, seed, cluster, balance=s.balance)
        if len(tried) > 1:
            log.info("clusters: %s", describe_clusters(num_clusters, tried))
    prep = prepare_locality(
        data, batch_size=s.batch_size, num_clusters=num_clusters,
        need_clusters=probe is None and any(needs_clusters(n) for n in schedules),
        renumber_graph=probe is None and s.renumber, cache_dir=cache_dir,
        method=s.cluster_method, clustering=made.get(num_clusters))
    prep.schedule_choice = probe
    prep.clusters_tried = tried or None
    return prep
