""":class:`NodeLoader`: the training pipeline as a loader for a hand-written loop.

Iterating a ``NodeLoader`` is one epoch: :class:`~twopgraph.core.minibatch.MiniBatch`
objects whose ``blocks`` (PyG style: ``block.edge_index``, ``block.size``; or DGL style:
``block.indptr``/``indices``), ``features`` (float32, rows of ``input_nodes``) and ``labels``
(int64, of ``seeds``) are on ``device``. It is the very pipeline ``twopgraph train`` runs
(:func:`twopgraph.pipeline.assemble.make_loader` -> :class:`twopgraph.pipeline.loader.Loader`):
scheduler, sampling workers, the feature cache with its lookahead, the prefetch thread and, on CUDA,
the side-stream copies. Nothing is renumbered: ``seeds`` and ``input_nodes`` are the caller's
vertex ids.

Example (``synthetic-tiny`` is generated into the data root on first use; a real graph loads
by name the same way, e.g. ``load_dataset("cora")`` with ``cora.npz`` in the data root or
with ``export TWOPGRAPH_DATASET_PATH=../shared/datasets``)::

    >>> from twopgraph.datasets import load_dataset                     # doctest: +SKIP
    >>> data = load_dataset("synthetic-tiny", data_root="datasets")      # doctest: +SKIP
    >>> loader = NodeLoader(data, fanouts=[10, 5], batch_size=256)       # doctest: +SKIP
    >>> for mb in loader:                                                # doctest: +SKIP
    ...     loss = F.cross_entropy(model(mb.blocks, mb.features), mb.labels)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from twopgraph.cache.base import CachePolicy
from twopgraph.config import TrainConfig, resolve_device
from twopgraph.core.minibatch import MiniBatch
from twopgraph.core.protocols import CACHE_POLICIES, SAMPLERS, SCHEDULERS, Sampler, Scheduler
from twopgraph.datasets import DATA_ROOT_ENV
from twopgraph.datasets.identity import check_data_root
from twopgraph.errors import ConfigError, GraphFormatError
from twopgraph.graph.data import GraphData
from twopgraph.locality.schedule import RandomScheduler
from twopgraph.pipeline.assemble import locality_for, make_loader, needs_clusters
from twopgraph.pipeline.loader import EpochStats

log = logging.getLogger("twopgraph")

SPLIT_NAMES = ("train", "val", "test")


class InOrderScheduler(RandomScheduler):
    """The seeds in the order given, cut into batches, the same every epoch (``shuffle=False``:
    evaluation and prediction)."""

    def epoch_order(self, epoch: int) -> np.ndarray:
        return self.train_idx


class NodeLoader:
    """Mini-batches of ``split``'s seed vertices for one epoch per iteration.

    Arguments (defaults in brackets):

    - ``data``: a :class:`~twopgraph.graph.data.GraphData` (``load_dataset``, ``from_scipy``,
      ``from_pyg``, ``from_dgl``);
    - ``fanouts``: neighbours sampled per layer, input layer first (DGL's order), -1 = all;
      ``len(fanouts)`` blocks per batch. Also ``"10,5"``;
    - ``batch_size`` [1024]: seeds per batch (the last batch may be smaller);
    - ``split`` ["train"]: ``"train"``, ``"val"``, ``"test"``, or the seed vertex ids
      themselves (a 1-D integer array, or a boolean mask of length N);
    - ``schedule`` ["auto"]: ``"random"`` (a uniform shuffle per epoch, as DGL and PyG),
      ``"locality"`` (batches of whole METIS clusters, label-balanced; the clusters are cached
      under ``DATA_ROOT/clusters``, where ``DATA_ROOT`` is ``data_root`` or
      ``$TWOPGRAPH_DATA``; with neither they are computed in memory and not kept -- nothing
      is written into the working directory) or ``"auto"`` (as ``twopgraph train``'s
      default: locality where it cuts the input vertices per batch by a meaningful share,
      measured on a few batches here, else random; first the probe of ``twopgraph train``,
      which takes random without any clustering where even nearby seeds cannot pay; else
      clusters as for locality; with ``shuffle=False``, random).
      ``loader.schedule`` is the scheduler used, ``loader.schedule_choice`` the figures of
      an ``auto`` decision (None otherwise). Or a scheduler object of your own: anything
      implementing :class:`~twopgraph.core.protocols.Scheduler` (``num_batches`` and
      ``batches(epoch)`` yielding int64 seed arrays of ``split``'s vertices), used as it is
      (``batch_size`` and ``shuffle`` are then its business);
    - ``shuffle`` [None = True for ``split="train"``, else False]: False keeps the seeds in
      the order given (sorted ids for a named split), the same batches' seeds every epoch
      (the neighbours sampled still differ per epoch); random schedule only;
    - ``seed`` [0]: shuffling and sampling randomness (epoch ``e`` of seed ``s`` is always the
      same batches, whatever the threads);
    - ``device`` ["cpu"]: ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"auto"`` or a
      ``torch.device``; blocks, features and labels arrive there (``seeds`` and
      ``input_nodes`` stay on the host);
    - ``cache_policy`` ["none"], ``cache_ratio`` [None]: the device feature cache
      (``none`` | ``degree`` | ``presample`` | ``layer``; ratio of the rows in [0, 1]; None on
      CUDA = what fits, on CPU = 0). ``cache_policy`` may also be a policy object of your own
      (a :class:`~twopgraph.cache.base.CachePolicy`: ``initial_rows(budget)``, and for a
      dynamic policy ``keys(rows)``), or a factory ``f(ctx) -> CachePolicy`` given the
      :class:`~twopgraph.cache.base.PolicyContext` (graph, seeds, scheduler, sampler);
    - ``prefetch`` [2]: batches prepared ahead in a background thread (0 = none);
    - ``threads`` [0 = all cores]: CPU threads the pipeline plans for (sampling workers =
      threads // 4 when prefetching);
    - ``data_root`` [None]: see ``schedule``;
    - keyword only: ``num_clusters`` [0 = automatic], ``balance`` [16] (locality options, as
      ``twopgraph train --num-clusters/--balance``), ``sampler_device`` ["auto": on the GPU
      when ``device`` is CUDA and the graph fits], ``feat_dtype`` ["float32"; "float16" or
      "bfloat16" halve the bytes copied, ``mb.features`` is still float32], ``sampler``
      ["neighbor"]: a registered sampler's name (``twopgraph train --sampler``), or an object
      implementing :class:`~twopgraph.core.protocols.Sampler` over ``data.graph`` (used as it is:
      ``fanouts`` then only names the layers' count for the config); ``sampler_options``
      [None]: a named sampler's own keywords, e.g. ``{"iterations": 1, "layer_dependency":
      True, "batch_dependency": 4}`` for ``sampler="labor"`` (``twopgraph train
      --labor-iterations 1 --labor-layer-dependency --labor-batch-dependency 4``).

    ``len(loader)`` is the number of batches per epoch. ``loader.epoch`` is the epoch the next
    iteration yields (0 first; each iteration advances it; assign it to replay an epoch).
    After an epoch, ``loader.stats`` holds its :class:`~twopgraph.pipeline.loader.EpochStats` (input
    rows, cache hits, bytes copied, times). ``loader.sampler`` is the sampler, whose
    ``full_block`` exact inference uses (:func:`twopgraph.inference.layerwise_inference`).

    Labels of unlabelled seeds (-1) come as -1 (mask them before a loss). Bad arguments raise
    :class:`~twopgraph.errors.ConfigError` (or ``GraphFormatError`` for the data) at
    construction, one line each.

    Example::

        >>> import scipy.sparse as sp
        >>> adj = sp.random(200, 200, density=0.05, random_state=0)
        >>> data = GraphData.from_scipy(adj, np.random.rand(200, 8), np.arange(200) % 3)
        >>> loader = NodeLoader(data, fanouts=[5, 5], batch_size=50)
        >>> len(loader), loader.epoch
        (3, 0)
        >>> mb = next(iter(loader))
        >>> mb.features.dtype, tuple(mb.labels.shape), len(mb.blocks), loader.epoch
        (torch.float32, (50,), 2, 1)
    """

    def __init__(self, data: GraphData, fanouts: Sequence[int], batch_size: int = 1024,
                 split: str | np.ndarray | torch.Tensor | Sequence[int] = "train",
                 schedule: str | Scheduler = "auto", shuffle: bool | None = None,
                 seed: int = 0, device: torch.device | str = "cpu",
                 cache_policy: str | CachePolicy | Callable[..., CachePolicy] = "none",
                 cache_ratio: float | None = None,
                 prefetch: int = 2, threads: int = 0,
                 data_root: str | os.PathLike | None = None, *,
                 num_clusters: int = 0, balance: int = 16, sampler_device: str = "auto",
                 feat_dtype: str = "float32", sampler: str | Sampler = "neighbor",
                 sampler_options: dict | None = None) -> None:
        if not isinstance(data, GraphData):
            raise TypeError(f"NodeLoader takes a GraphData (GraphData.from_scipy, from_pyg, "
                            f"from_dgl, load_dataset), got {type(data).__name__}")
        _check_arrays(data)
        if fanouts is None:
            raise ConfigError("NodeLoader needs fanouts (neighbours per layer, input layer "
                              "first, e.g. [10, 5]; -1 = all)")
        seeds = _seed_ids(split, data)
        named = isinstance(split, str)
        if shuffle is None:
            shuffle = named and split == "train"
        if not isinstance(shuffle, bool):
            raise ConfigError(f"shuffle must be True, False or None, got {shuffle!r}")
        own_scheduler = None
        if not isinstance(schedule, str):  # the caller's scheduler, used as it is
            if not isinstance(schedule, Scheduler):
                raise ConfigError(f"schedule must be a registered name ({', '.join(SCHEDULERS)}, "
                                  f"auto) or an object with num_batches and batches(epoch), "
                                  f"got {type(schedule).__name__}")
            own_scheduler, schedule, shuffle = schedule, "random", True
        if schedule == "auto" and not shuffle:  # in-order batches: nothing to choose
            schedule = "random"
        if schedule != "auto":
            SCHEDULERS.check(schedule)
        clustered = needs_clusters(schedule)
        if clustered and not shuffle:
            raise ConfigError(f"shuffle=False keeps the seeds in order, schedule {schedule!r} "
                              f"orders them by cluster; use schedule='random' with it")
        if isinstance(device, torch.device):
            device = str(device)
        given = None
        if not isinstance(sampler, str):
            if not isinstance(sampler, Sampler):
                raise ConfigError(f"sampler must be a registered name ({', '.join(SAMPLERS)}) "
                                  f"or an object with sample(seeds, key, parallel) and graph, "
                                  f"got {type(sampler).__name__}")
            if getattr(sampler, "graph", None) is not data.graph:
                raise ConfigError("the sampler given samples another graph than data.graph")
            given, sampler = sampler, "neighbor"
        own = _sampler_fields(sampler, sampler_options, given is not None)
        own_policy = None
        if not isinstance(cache_policy, str):  # the caller's policy (or its factory)
            if not (isinstance(cache_policy, CachePolicy) or callable(cache_policy)):
                raise ConfigError(f"cache_policy must be a registered name "
                                  f"({', '.join(CACHE_POLICIES)}), a CachePolicy or a factory "
                                  f"of one, got {type(cache_policy).__name__}")
            own_policy, cache_policy = cache_policy, "none"
        # Labels of unlabelled seeds (-1) cannot be balanced over: plain cluster order then.
        if clustered and np.any(data.label[seeds] < 0):
            balance = 1
        self.config = TrainConfig.of(
            fanouts=fanouts, batch_size=batch_size, schedule=schedule,
            num_clusters=num_clusters, balance=balance, renumber=False,
            sampler=sampler, sampler_device=sampler_device, cache_policy=cache_policy,
            cache_ratio=cache_ratio,
            feat_dtype=feat_dtype, seed=seed, device=device, prefetch=prefetch,
            threads=threads, data_root=None if data_root is None else str(data_root),
            progress=False, **own).validate()
        self.device = resolve_device(self.config.run.device)
        self.data = data
        self.seeds = seeds
        self.shuffle = shuffle
        self.epoch = 0
        view = data if seeds is data.train_idx else replace(data, train_idx=seeds, store=None)
        parts, choice = None, None
        if clustered:  # the probe of --schedule auto first, clusters where they may pay
            prep = locality_for(view, [schedule], self.config,
                                cache_dir=_cluster_dir(data_root))
            choice = prep.schedule_choice
            parts = None if prep.clustering is None else prep.clustering.parts
        self._loader = make_loader(
            self.config, view, self.device, parts=parts, schedule_choice=choice, sampler=given,
            scheduler=own_scheduler, cache_policy=own_policy,
            wrap_scheduler=None if shuffle else
            (lambda s: InOrderScheduler(s.train_idx, s.batch_size, seed=s.seed)))

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[MiniBatch]:
        """One epoch (``self.epoch``, which advances): fresh shuffle and sampling."""
        epoch = self.epoch
        self.epoch += 1
        batches = self._loader.epoch(epoch)
        try:
            for mb in batches:
                if mb.features is not None and mb.features.dtype != torch.float32:
                    mb.features = mb.features.float()  # feat_dtype float16/bfloat16
                yield mb
        finally:
            batches.close()

    @property
    def sampler(self) -> Sampler:
        return self._loader.sampler

    @property
    def schedule(self) -> str:
        """The scheduler the batches come from (``"random"`` | ``"locality"``: ``"auto"``
        resolved)."""
        return self._loader.schedule

    @property
    def schedule_choice(self) -> dict | None:
        """The figures of a ``schedule="auto"`` decision
        (:class:`~twopgraph.locality.auto.ScheduleChoice`), None otherwise."""
        return self._loader.schedule_choice

    @property
    def stats(self) -> EpochStats:
        return self._loader.stats

    def __repr__(self) -> str:
        s = self.config.sampling
        return (f"NodeLoader({self.data.name or 'data'}, {self.seeds.shape[0]} seeds, "
                f"fanouts={s.fanouts}, batch_size={s.batch_size}, schedule={self.schedule!r}, "
                f"shuffle={self.shuffle}, device={str(self.device)!r}, "
                f"{len(self)} batches/epoch)")


def _sampler_fields(name: str, options, given: bool) -> dict:
    """``NodeLoader``'s ``sampler_options`` (the named sampler's keywords) as the sampling
    config's fields (``labor`` + ``iterations`` -> ``labor_iterations``); a one-line
    ConfigError for options the sampler does not take, or given with a sampler object."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise ConfigError(f"sampler_options must be a dict of the sampler's keywords, "
                          f"got {type(options).__name__}")
    if given:
        raise ConfigError("sampler_options go with a sampler's name; a sampler object is "
                          "used as it is")
    fields = {f.split("_", 1)[1]: f for f in getattr(SAMPLERS.get(name), "options", ())}
    unknown = sorted(set(options) - set(fields))
    if unknown:
        raise ConfigError(f"sampler {name!r} takes no option {', '.join(map(str, unknown))}; "
                          f"it takes: {', '.join(sorted(fields)) or 'none'}")
    return {fields[k]: v for k, v in options.items()}


def _check_arrays(data: GraphData) -> None:
    """What the pipeline relies on, checked in O(N) (no feature scan, no graph check:
    ``data.validate()`` does those): float features with a row per vertex, int64 labels."""
    n = data.num_nodes
    if data.feat.ndim != 2 or data.feat.shape[0] != n:
        raise GraphFormatError(f"feat must be N x F with N = {n}, got shape {data.feat.shape}")
    if data.feat.dtype not in (np.float32, np.float16):
        raise GraphFormatError(f"feat must be float32 or float16, got {data.feat.dtype}, "
                               f"assigned after construction (construction converts)")
    data._validate_labels()


def _seed_ids(split, data: GraphData) -> np.ndarray:
    """The seed vertices of ``split``: a named split's ids, or the caller's ids / mask."""
    n = data.num_nodes
    if isinstance(split, str):
        if split not in SPLIT_NAMES:
            raise ConfigError(f"unknown split {split!r}; use 'train', 'val', 'test' or an "
                              f"array of vertex ids")
        ids = getattr(data, f"{split}_idx")
        if ids.shape[0] == 0:
            raise ConfigError(f"split {split!r} of {data.name or 'the data'} is empty")
        return ids
    if isinstance(split, torch.Tensor):
        split = split.detach().cpu().numpy()
    ids = np.asarray(split)
    if ids.dtype == np.bool_:
        if ids.shape != (n,):
            raise ConfigError(f"a boolean split mask must have length N = {n}, got shape "
                              f"{ids.shape}")
        ids = np.flatnonzero(ids)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise ConfigError(f"split must be 'train', 'val', 'test' or 1-D integer vertex ids, got "
                          f"{ids.dtype} of shape {ids.shape}")
    if ids.shape[0] == 0:
        raise ConfigError("split holds no vertex ids")
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    if ids.min() < 0 or ids.max() >= n:
        raise ConfigError(f"split has vertex ids out of range [0, {n}): min {int(ids.min())}, "
                          f"max {int(ids.max())}")
    if np.unique(ids).shape[0] != ids.shape[0]:
        raise ConfigError("split repeats vertex ids")
    return ids


def _cluster_dir(data_root) -> Path | None:
    """Where a locality loader caches its clusters: ``clusters`` under ``data_root``, else
    under ``$TWOPGRAPH_DATA``; with neither, None: the clusters are computed in memory and not
    kept (never the working directory), said in one log line."""
    if data_root is None or str(data_root) == "":
        data_root = os.environ.get(DATA_ROOT_ENV, "")
    if not data_root:
        log.info("NodeLoader: METIS clusters computed in memory, not cached (pass data_root= "
                 "or set $%s to keep them)", DATA_ROOT_ENV)
        return None
    check_data_root(data_root)
    return Path(data_root).expanduser() / "clusters"
