"""Which seeds share a batch, batch by batch, and which batches a process of a distributed
run takes.

Seeds are *positions* in the loader's ``input_nodes`` (PyG's ``input_id``). An epoch's batches
come from one of:

- PyG's order (``schedule=None``): positions ``0..n-1`` in order, or a fresh permutation per
  epoch with ``shuffle=True`` (drawn from ``seed + epoch``, or from the ``generator`` given,
  as ``DataLoader``'s ``RandomSampler``), or a ``torch.utils.data.Sampler`` of positions;
- a twopgraph scheduler over the positions (``schedule="random"`` / ``"locality"``, see
  :mod:`twopgraph.locality.schedule`): a permutation drawn from ``seed + epoch``, or batches
  of whole METIS clusters (the clusters are those of the seeds' nodes).

**Distributed runs** (``world_size > 1``): every rank computes the same batches of the
epoch (the random orders are drawn from ``seed + epoch``, never from a rank's own generator)
and takes every ``world_size``-th one, starting at its ``rank``: batch ``b`` of the epoch goes
to rank ``b % world_size``, so a batch stays whole (a locality batch keeps its clusters).
Every rank gets the same number of batches, as ``DistributedSampler`` gives every rank the same
number of samples: ``ceil(B / world_size)`` of the ``B`` batches, the missing ones taken again
from the start of the epoch, or ``floor(B / world_size)`` with ``drop_last`` (the rest is
dropped).
"""

from __future__ import annotations

import logging
from typing import Any, Iterable

import numpy as np
import torch

from twopgraph.core.protocols import Scheduler
from twopgraph.errors import ConfigError

log = logging.getLogger("twopgraph")

SCHEDULES = ("random", "locality", "auto")


def dist_rank_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """``(rank, world_size)``: the values given, else torch.distributed's when it is
    initialised, else ``(0, 1)``; a ``ConfigError`` unless ``0 <= rank < world_size``."""
    initialised = torch.distributed.is_available() and torch.distributed.is_initialized()
    if world_size is None:
        world_size = torch.distributed.get_world_size() if initialised else 1
    if rank is None:
        rank = torch.distributed.get_rank() if initialised else 0
    rank, world_size = int(rank), int(world_size)
    if world_size < 1 or not 0 <= rank < world_size:
        raise ConfigError(f"need 0 <= rank < world_size, got rank {rank}, world_size "
                          f"{world_size}")
    return rank, world_size


class BatchPlan:
    """The batches (arrays of positions) of every epoch for one rank; see the module doc.

    ``scheduler``: a twopgraph :class:`~twopgraph.core.protocols.Scheduler` over the
    positions (it cuts its own batches); else ``index_sampler`` (an iterable of positions
    with ``len``, e.g. a ``torch.utils.data.Sampler``) or PyG's order (``shuffle``,
    ``generator``), cut into batches of ``batch_size`` (the last one shorter, or dropped with
    ``drop_last``).
    """

    def __init__(self, num_inputs: int, batch_size: int, *, shuffle: bool = False,
                 drop_last: bool = False, scheduler: Scheduler | None = None,
                 index_sampler: Iterable[int] | None = None,
                 generator: torch.Generator | None = None, seed: int = 0, rank: int = 0,
                 world_size: int = 1) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.num_inputs = int(num_inputs)
        self.batch_size = int(batch_size)
        self.shuffle, self.drop_last = bool(shuffle), bool(drop_last)
        self.scheduler, self.index_sampler = scheduler, index_sampler
        self.generator, self.seed = generator, int(seed)
        self.rank, self.world_size = rank, world_size
        total = self.global_batches()
        self.num_batches = total // world_size if drop_last or world_size == 1 \
            else -(-total // world_size)
        if self.num_batches == 0 and total > 0:
            raise ConfigError(f"{total} batches per epoch cannot give each of {world_size} "
                              f"ranks one with drop_last; lower batch_size")

    def global_batches(self) -> int:
        """Batches of an epoch before the split between ranks."""
        if self.scheduler is not None:
            return int(self.scheduler.num_batches)
        n = len(self.index_sampler) if self.index_sampler is not None else self.num_inputs
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def epoch_batches(self, epoch: int) -> list[tuple[int, np.ndarray]]:
        """``(global batch index, positions)`` of this rank's batches of ``epoch``."""
        if self.scheduler is not None:
            every = [np.asarray(b, dtype=np.int64) for b in self.scheduler.batches(epoch)]
        else:
            order = self._order(epoch)
            stop = len(order) - len(order) % self.batch_size if self.drop_last else len(order)
            every = [order[i:i + self.batch_size] for i in range(0, stop, self.batch_size)]
        if self.world_size == 1:
            return list(enumerate(every))
        picks = [(self.rank + i * self.world_size) % len(every)
                 for i in range(self.num_batches)]
        return [(b, every[b]) for b in picks]

    def _order(self, epoch: int) -> np.ndarray:
        if self.index_sampler is not None:
            return np.fromiter((int(i) for i in self.index_sampler), dtype=np.int64)
        if not self.shuffle:
            return np.arange(self.num_inputs, dtype=np.int64)
        gen = self.generator
        if gen is None or self.world_size > 1:  # the same order on every rank
            gen = torch.Generator().manual_seed(self.seed + int(epoch))
        return torch.randperm(self.num_inputs, generator=gen).numpy()


def node_labels(data: Any, nodes: np.ndarray) -> np.ndarray | None:
    """The class of each of ``nodes`` from ``data.y`` when it is one non-negative integer per
    node (what the locality scheduler balances batches by), else None."""
    y = getattr(data, "y", None)
    if not isinstance(y, torch.Tensor) or y.dim() != 1 or y.is_floating_point() \
            or y.numel() != data.num_nodes:
        return None
    lab = y[torch.from_numpy(nodes)].cpu().numpy().astype(np.int64)
    return lab if lab.shape[0] and lab.min() >= 0 else None


def twopgraph_scheduler(name: str, *, undirected: Any, nodes: np.ndarray,
                        labels: np.ndarray | None, batch_size: int, drop_last: bool, seed: int,
                        num_neighbors: list[int], sampler: Any = None, num_clusters: int = 0,
                        parts: np.ndarray | None = None) -> tuple[Scheduler, Any, list | None]:
    """``(scheduler over the positions of nodes, the auto decision or None, the cluster
    counts auto tried or None)`` for ``name`` (:data:`SCHEDULES`).

    ``undirected``: a callable giving the undirected :class:`~twopgraph.graph.data.CSRGraph`
    to cluster (built only when clusters are needed). ``parts`` (the cluster of every node of
    the graph) skips the clustering; else METIS makes ``num_clusters`` clusters (0:
    :func:`~twopgraph.locality.cluster.default_num_clusters`). ``auto`` first runs the probe
    of :func:`~twopgraph.locality.auto.probe_schedule` (random without clustering when batches
    of nearby seeds would not need fewer input nodes), then measures both schedules on
    ``sampler`` (the loader's own: ``sample(positions, key, parallel)``) and keeps the one
    :func:`~twopgraph.locality.auto.choose_schedule` picks. Under ``auto`` with
    ``num_clusters`` 0 and labels, the number of clusters is
    :func:`~twopgraph.locality.auto.choose_clusters`' (14, 16, then 32 clusters per batch, the
    first whose batches' label skew passes), as ``twopgraph train`` chooses it.
    """
    from twopgraph.locality import LocalityScheduler, RandomScheduler
    from twopgraph.locality.auto import choose_schedule, probe_schedule
    from twopgraph.locality.cluster import cluster_graph, default_num_clusters

    if name not in SCHEDULES:
        raise ConfigError(f"schedule must be one of {SCHEDULES} or None, got {name!r}")
    positions = np.arange(nodes.shape[0], dtype=np.int64)

    def random() -> Scheduler:
        return RandomScheduler(positions, batch_size, seed=seed, drop_last=drop_last)

    if name == "random":
        return random(), None, None
    graph = None
    distinct = np.unique(nodes)
    if name == "auto" and parts is None:
        graph = undirected()
        fanouts = [max(f, 1) if f >= 0 else -1 for f in reversed(num_neighbors)]
        probe = probe_schedule(graph, distinct, fanouts, batch_size, seed,
                               num_clusters=num_clusters)
        if probe.schedule == "random":
            return random(), probe, None
    tried = None
    if parts is None:
        graph = graph if graph is not None else undirected()
        k = num_clusters or default_num_clusters(graph.num_nodes, distinct.shape[0], batch_size)
        made: dict[int, np.ndarray] = {}
        if name == "auto" and not num_clusters and labels is not None:
            k, tried = _auto_clusters(graph, nodes, distinct, labels, batch_size, seed, made)
        parts = made[k] if k in made else cluster_graph(graph, k, train_idx=distinct,
                                                         seed=seed).parts
    parts = np.asarray(parts)
    if parts.ndim != 1 or parts.shape[0] <= int(nodes.max(initial=0)):
        raise ConfigError("parts must hold the cluster of every node of the graph")
    seed_parts = parts[nodes]
    if name == "auto":
        choice = choose_schedule(sampler, positions, batch_size, seed, parts=seed_parts,
                                 labels=labels)
        if choice.schedule == "random":
            return random(), choice, tried
        return LocalityScheduler(positions, batch_size, seed, parts=seed_parts, labels=labels,
                                 drop_last=drop_last), choice, tried
    return LocalityScheduler(positions, batch_size, seed, parts=seed_parts, labels=labels,
                             drop_last=drop_last), None, None


def _auto_clusters(graph: Any, nodes: np.ndarray, distinct: np.ndarray, labels: np.ndarray,
                   batch_size: int, seed: int, made: dict) -> tuple[int, list]:
    """:func:`~twopgraph.locality.auto.choose_clusters` over the loader's seeds (positions
    of ``nodes``, ``labels`` per position); the latest clustering's parts are left in ``made``
    (one N-vector at a time). Logs the candidates when more than one was tried."""
    from types import SimpleNamespace

    from twopgraph.locality.auto import choose_clusters, describe_clusters
    from twopgraph.locality.cluster import cluster_graph

    def cluster(k: int) -> SimpleNamespace:
        made.clear()
        made[k] = cluster_graph(graph, k, train_idx=distinct, seed=seed).parts
        return SimpleNamespace(parts=made[k][nodes])  # per position, as the labels
    positions = np.arange(nodes.shape[0], dtype=np.int64)
    k, tried = choose_clusters(graph.num_nodes, positions, labels, batch_size, seed, cluster)
    if len(tried) > 1:
        log.info("clusters: %s", describe_clusters(k, tried))
    return k, tried
