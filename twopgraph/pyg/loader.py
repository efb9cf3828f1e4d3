"""``twopgraph.pyg.NeighborLoader``: PyG's ``NeighborLoader`` on twopgraph's sampler.

A drop-in for ``torch_geometric.loader.NeighborLoader`` on a homogeneous
``torch_geometric.data.Data``: the same arguments, and batches built by PyG's own code from
the sampled subgraph (``torch_geometric.loader.utils.filter_data`` slices every node-level
attribute by ``n_id`` and every edge-level one by ``e_id``, then ``n_id``, ``e_id``,
``input_id``, ``batch_size``, ``num_sampled_nodes`` and ``num_sampled_edges`` are set as
``torch_geometric.loader.NodeLoader.filter_fn`` sets them). docs/pyg.md describes the
differences and the keywords PyG lacks.
"""

from __future__ import annotations

import copy
import warnings
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from twopgraph.errors import ConfigError
from twopgraph.pyg.features import LoaderFeatures
from twopgraph.pyg.graph import EdgeCSC
from twopgraph.pyg.sampler import EdgeSampler, Sampled
from twopgraph.pyg.schedule import BatchPlan, dist_rank_world, node_labels, twopgraph_scheduler
from twopgraph.runtime.jit import configure_threading

#: DataLoader keywords that mean nothing for threads in one process: accepted and ignored.
IGNORED = ("pin_memory", "persistent_workers", "timeout", "multiprocessing_context",
           "in_order", "pin_memory_device", "dataset", "collate_fn")


class PositionSampler:
    """The loader's sampler over positions of ``input_nodes`` (what the schedulers and
    :func:`~twopgraph.locality.auto.choose_schedule` hand out): ``sample(positions, key,
    parallel)`` samples the nodes at those positions."""

    def __init__(self, sampler: EdgeSampler, nodes: np.ndarray) -> None:
        self.sampler, self.nodes = sampler, nodes
        self.graph = sampler.csc.graph
        self.fanouts = list(reversed(sampler.num_neighbors))

    def sample(self, positions: np.ndarray, key: int | None = None,
               parallel: bool = True) -> Sampled:
        return self.sampler.sample(self.nodes[np.asarray(positions, dtype=np.int64)], key,
                                   parallel)


class NeighborLoader:
    """PyG's ``NeighborLoader`` (homogeneous ``Data``), sampled by twopgraph.

    PyG's arguments, positionally in PyG's order, with PyG's meaning: ``num_neighbors`` (hop
    1 = the seeds' own neighbours; ``-1`` = all of them, ``0`` = none), ``input_nodes``
    (index tensor, boolean mask or None = all nodes), ``replace``, ``subgraph_type``
    (``"directional"``, ``"bidirectional"``, ``"induced"``; ``directed=False`` is the
    deprecated spelling of ``"induced"``), ``transform``, ``transform_sampler_output``,
    ``is_sorted``, ``filter_per_worker`` and DataLoader's ``batch_size``, ``shuffle``,
    ``drop_last``, ``num_workers``, ``sampler`` (a ``torch.utils.data.Sampler`` of positions
    in ``input_nodes``), ``generator`` and ``prefetch_factor``. ``loader(index)`` samples the
    batch of the positions ``index`` of ``input_nodes`` (PyG's ``__call__``).

    Not supported (each raises ``NotImplementedError``): ``HeteroData`` and remote
    ``(FeatureStore, GraphStore)`` data, ``SparseTensor`` adjacency (``adj_t``), temporal
    sampling (``time_attr``, ``input_time``), ``weight_attr``, ``disjoint=True``, a
    ``neighbor_sampler`` object, ``batch_sampler`` and ``worker_init_fn``.

    ``num_workers`` is the number of **threads** of this process that sample (and, with
    ``filter_per_worker``, slice the features of) whole batches ahead of the training loop,
    at most ``prefetch_factor`` (2) batches each; 0 samples each batch when it is asked for,
    on the calling thread, with numba's parallel kernels. No worker process is started and
    nothing is copied to shared memory. ``filter_per_worker=None`` is PyG's rule (slice in the
    workers unless ``data`` lives on a GPU).

    twopgraph's keywords (keyword-only):

    - ``schedule``: None (PyG's order, by ``shuffle``), ``"random"`` (a permutation from
      ``seed + epoch``), ``"locality"`` (batches of whole METIS clusters, label-balanced by
      ``data.y``: fewer distinct nodes per batch, :mod:`twopgraph.locality.schedule`) or
      ``"auto"`` (locality where it measurably cuts the sampled nodes per batch, else random;
      :mod:`twopgraph.locality.auto`; the decision is in ``schedule_choice``, and with
      ``num_clusters`` 0 the cluster counts it tried, 8, 16 then 32 per batch until a
      batch's label mix is close enough to the seeds', in ``clusters_tried``). A schedule
      shuffles every epoch whatever ``shuffle`` says. ``num_clusters`` (0 = the default) or
      ``parts`` (the cluster of every node: no clustering) shape the locality batches;
    - ``sampler``: ``"neighbor"`` (uniform, PyG's) or ``"labor"`` (LABOR-0: each hop's
      targets share their neighbours' random variates, so a batch holds fewer nodes; a target
      keeps ``num_neighbors[h]`` in-edges *in expectation*; :mod:`twopgraph.pyg.sampler`); a
      ``torch.utils.data.Sampler`` (not a string) is DataLoader's ``sampler`` instead;
    - ``seed``: the sampling and scheduling stream (default: drawn from torch's default
      generator, so ``torch.manual_seed`` makes the batches reproducible; 0 in a distributed
      run, where every rank must draw the same orders);
    - ``rank`` / ``world_size``: the share of a distributed run (default:
      ``torch.distributed``'s when it is initialised, else 0 / 1): this rank's batches are
      every ``world_size``-th of the epoch's (:mod:`twopgraph.pyg.schedule`); ``len(loader)``
      is the same on every rank. ``set_epoch(e)`` fixes the epoch (as ``DistributedSampler``);
      otherwise each pass over the loader is the next epoch;
    - ``device``, ``cache_policy`` (``"degree"`` or a :class:`~twopgraph.cache.CachePolicy`),
      ``cache_ratio`` / ``cache_gb``: ``batch.x`` gathered onto ``device`` by twopgraph's
      feature source, through a device feature cache with a policy
      (:mod:`twopgraph.pyg.features`; hits in ``loader.features.counters``); the other
      attributes stay where PyG's slicing puts them.

    Memory: the CSC of ``edge_index`` (:class:`~twopgraph.pyg.graph.EdgeCSC`: ``8 N + 4 E``
    bytes, ``8 E`` from 2**31 edges, built once) plus O(batch) per sampling thread; the
    locality schedules build the undirected graph for METIS once, at construction.
    ``data.x`` may be a NumPy array or memory map (rows are read per batch).
    """

    def __init__(self, data: Any, num_neighbors: Sequence[int], input_nodes: Any = None,
                 input_time: Any = None, replace: bool = False,
                 subgraph_type: Any = "directional", disjoint: bool = False,
                 temporal_strategy: str = "uniform", time_attr: str | None = None,
                 weight_attr: str | None = None, transform: Callable | None = None,
                 transform_sampler_output: Callable | None = None, is_sorted: bool = False,
                 filter_per_worker: bool | None = None, neighbor_sampler: Any = None,
                 directed: bool = True, *, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False, num_workers: int = 0,
                 sampler: Any = "neighbor", schedule: str | None = None,
                 seed: int | None = None, rank: int | None = None,
                 world_size: int | None = None, num_clusters: int = 0,
                 parts: Any = None, generator: torch.Generator | None = None,
                 prefetch_factor: int | None = None, device: Any = None,
                 cache_policy: Any = None, cache_ratio: float | None = None,
                 cache_gb: float | None = None, **kwargs: Any) -> None:
        from torch_geometric.data import Data

        if not isinstance(data, Data):
            raise NotImplementedError(
                "twopgraph.pyg.NeighborLoader takes a homogeneous torch_geometric.data.Data; "
                f"got {type(data).__name__} (use torch_geometric.loader.NeighborLoader)")
        unsupported = {"input_time": input_time is not None,
                       "time_attr": time_attr is not None,
                       "weight_attr": weight_attr is not None, "disjoint": bool(disjoint),
                       "temporal_strategy": temporal_strategy != "uniform",
                       "neighbor_sampler": neighbor_sampler is not None,
                       "batch_sampler": kwargs.get("batch_sampler") is not None,
                       "worker_init_fn": kwargs.get("worker_init_fn") is not None}
        bad = [k for k, v in unsupported.items() if v]
        if bad:
            raise NotImplementedError(f"twopgraph.pyg.NeighborLoader does not support "
                                      f"{', '.join(bad)} (use PyG's NeighborLoader)")
        unknown = sorted(set(kwargs) - set(IGNORED) - {"batch_sampler", "worker_init_fn"})
        if unknown:
            raise TypeError(f"NeighborLoader() got unexpected keyword arguments {unknown}")
        if not directed:
            warnings.warn("The usage of the 'directed' argument is deprecated. Use "
                          "`subgraph_type='induced'` instead.", stacklevel=2)
            subgraph_type = "induced"
        if data.edge_index is None:
            raise NotImplementedError("data has no edge_index (a SparseTensor adj_t is not "
                                      "supported)")
        configure_threading()
        index_sampler = None
        if not isinstance(sampler, str):
            index_sampler, sampler = sampler, "neighbor"
            if shuffle:
                raise ConfigError("a torch sampler is mutually exclusive with shuffle "
                                  "(as in DataLoader)")
        self.rank, self.world_size = dist_rank_world(rank, world_size)
        if seed is None:
            seed = 0 if self.world_size > 1 else int(torch.randint(0, 2**62, (1,)).item())
        self.seed = int(seed)

        self.data = data
        self.transform = transform
        self.transform_sampler_output = transform_sampler_output
        self.filter_per_worker = (not data.is_cuda) if filter_per_worker is None \
            else bool(filter_per_worker)
        if isinstance(num_workers, bool) or int(num_workers) < 0:
            raise ConfigError(f"num_workers must be >= 0, got {num_workers!r}")
        self.num_workers = int(num_workers)
        self.prefetch_factor = 2 if prefetch_factor is None else max(1, int(prefetch_factor))
        self.batch_size, self.shuffle, self.drop_last = batch_size, bool(shuffle), drop_last
        self.input_nodes, self._input_id = _input_nodes(input_nodes, data.num_nodes)
        self.csc = EdgeCSC.from_edge_index(data.edge_index, data.num_nodes, is_sorted)
        self.features, self._filtered = None, data
        if device is not None or cache_policy is not None:
            self.features = LoaderFeatures(data.x, self.csc.src, device, cache_policy,
                                           cache_ratio, cache_gb)
            self._filtered = copy.copy(data)  # the other attributes, sliced as PyG does
            del self._filtered.x
            self._filtered.num_nodes = data.num_nodes
        elif cache_ratio is not None or cache_gb is not None:
            raise ConfigError("cache_ratio / cache_gb need a cache_policy")
        self.node_sampler = EdgeSampler(self.csc, num_neighbors, replace, subgraph_type,
                                        seed=self.seed, method=sampler)
        self.num_neighbors = self.node_sampler.num_neighbors
        self.subgraph_type = self.node_sampler.subgraph_type
        nodes = self.input_nodes.numpy()
        self._positions = PositionSampler(self.node_sampler, nodes)
        self.schedule, self.schedule_choice, scheduler = schedule, None, None
        self.clusters_tried: list | None = None
        if schedule is not None:
            if index_sampler is not None:
                raise ConfigError("give either a schedule or a torch sampler, not both")
            scheduler, self.schedule_choice, self.clusters_tried = twopgraph_scheduler(
                schedule, undirected=self.csc.undirected, nodes=nodes,
                labels=node_labels(data, nodes), batch_size=batch_size, drop_last=drop_last,
                seed=self.seed, num_neighbors=self.num_neighbors, sampler=self._positions,
                num_clusters=num_clusters, parts=parts)
            if self.schedule_choice is not None:
                self.schedule = self.schedule_choice.schedule
        self._plan = BatchPlan(nodes.shape[0], batch_size, shuffle=shuffle, drop_last=drop_last,
                               scheduler=scheduler, index_sampler=index_sampler,
                               generator=generator, seed=self.seed, rank=self.rank,
                               world_size=self.world_size)
        self._epoch = 0
        self._epoch_set: int | None = None

    # -- PyG's interface ----------------------------------------------------------------
    def __len__(self) -> int:
        return self._plan.num_batches

    def __call__(self, index: Any) -> Any:
        """The batch of the seeds at positions ``index`` of ``input_nodes`` (a list or an
        index tensor), sampled with fresh randomness, filtered and transformed."""
        out = self.collate_fn(index)
        return self._consume(out if self.filter_per_worker else self.filter_fn(out))

    def collate_fn(self, index: Any, key: int | None = None, parallel: bool = True) -> Any:
        """The sampled subgraph of the positions ``index`` as a PyG ``SamplerOutput``
        (filtered into a ``Data`` when ``filter_per_worker``), as PyG's ``collate_fn``."""
        pos = torch.as_tensor(index, dtype=torch.long).reshape(-1)
        if pos.numel() and (int(pos.min()) < 0 or int(pos.max()) >= self.input_nodes.numel()):
            raise IndexError(f"positions out of range [0, {self.input_nodes.numel()})")
        s = self._positions.sample(pos.numpy(), key, parallel)
        out = self._sampler_output(s, pos)
        return self.filter_fn(out) if self.filter_per_worker else out

    def filter_fn(self, out: Any) -> Any:
        """The ``Data`` of a sampled subgraph: ``data`` filtered by PyG's ``filter_data``,
        then PyG's batch attributes and ``transform`` (as ``NodeLoader.filter_fn``)."""
        from torch_geometric.loader.utils import filter_data

        if self.transform_sampler_output is not None:
            out = self.transform_sampler_output(out)
        batch = filter_data(self._filtered, out.node, out.row, out.col, out.edge, None)
        if "n_id" not in batch:
            batch.n_id = out.node
        if out.edge is not None and "e_id" not in batch:
            batch.e_id = out.edge.to(torch.long)
        batch.batch = out.batch
        batch.num_sampled_nodes = out.num_sampled_nodes
        batch.num_sampled_edges = out.num_sampled_edges
        input_id, seed_time = out.metadata
        batch.input_id = input_id
        batch.seed_time = seed_time
        batch.batch_size = input_id.size(0)
        if self.features is not None:  # x and transform on the consuming thread (_consume)
            return batch
        return batch if self.transform is None else self.transform(batch)

    def _consume(self, batch: Any) -> Any:
        """A filtered batch as the training loop receives it: with ``device=`` /
        ``cache_policy=``, ``x`` gathered by the feature source (on the consuming thread, in
        batch order: a cache policy sees the batches as they are used), then ``transform``."""
        if self.features is None:
            return batch
        batch.x = self.features.gather(batch.n_id)
        return batch if self.transform is None else self.transform(batch)

    def __iter__(self) -> Iterator[Any]:
        epoch = self._epoch if self._epoch_set is None else self._epoch_set
        self._epoch += 1
        from twopgraph.core.rng import mix_key
        jobs = [(pos, mix_key(epoch, b)) for b, pos in self._plan.epoch_batches(epoch)]
        return self._run(jobs)

    def set_epoch(self, epoch: int) -> None:
        """Sample epoch ``epoch`` on the next pass (as ``DistributedSampler.set_epoch``)."""
        self._epoch_set = int(epoch)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}()"

    # -- internals ----------------------------------------------------------------------
    def _sampler_output(self, s: Sampled, pos: torch.Tensor) -> Any:
        from torch_geometric.sampler import SamplerOutput

        input_id = pos if self._input_id is None else self._input_id[pos]
        out = SamplerOutput(node=torch.from_numpy(s.node), row=torch.from_numpy(s.row),
                            col=torch.from_numpy(s.col), edge=torch.from_numpy(s.edge),
                            batch=None, num_sampled_nodes=s.num_sampled_nodes,
                            num_sampled_edges=s.num_sampled_edges, metadata=(input_id, None))
        if self.subgraph_type == "bidirectional":
            out = out.to_bidirectional()
        return out

    def _run(self, jobs: list[tuple[np.ndarray, int]]) -> Iterator[Any]:
        finish = (lambda out: out) if self.filter_per_worker else self.filter_fn
        if self.num_workers == 0:
            for pos, key in jobs:
                yield self._consume(finish(self.collate_fn(pos, key)))
            return
        pool = ThreadPoolExecutor(self.num_workers, thread_name_prefix="twopgraph-pyg")
        todo = iter(jobs)
        ahead = self.num_workers * self.prefetch_factor
        pending: deque = deque(pool.submit(self.collate_fn, pos, key, False)
                               for pos, key in _take(todo, ahead))
        try:
            while pending:
                out = pending.popleft().result()
                for pos, key in _take(todo, 1):
                    pending.append(pool.submit(self.collate_fn, pos, key, False))
                yield self._consume(finish(out))
        finally:
            for fut in pending:
                fut.cancel()
            pool.shutdown(wait=True)


def _take(it: Iterator, n: int) -> list:
    out = []
    for _ in range(n):
        nxt = next(it, None)
        if nxt is None:
            break
        out.append(nxt)
    return out


def _input_nodes(input_nodes: Any, num_nodes: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(the seed nodes, their input ids or None)`` of PyG's ``input_nodes``: None = every
    node; a boolean mask = its True nodes (input ids: the nodes themselves, as PyG); else an
    index (input ids: positions)."""
    if input_nodes is None:
        return torch.arange(num_nodes), None
    if isinstance(input_nodes, (str, tuple)):
        raise NotImplementedError("input_nodes by node type is for heterogeneous graphs, "
                                  "which twopgraph.pyg.NeighborLoader does not support")
    t = torch.as_tensor(np.asarray(input_nodes) if not isinstance(input_nodes, torch.Tensor)
                        else input_nodes).cpu().reshape(-1)
    if t.dtype == torch.bool:
        if t.numel() != num_nodes:
            raise ConfigError(f"an input_nodes mask needs {num_nodes} entries, got {t.numel()}")
        nodes = t.nonzero().view(-1)
        return nodes, nodes
    if t.is_floating_point() or t.is_complex():
        raise ConfigError(f"input_nodes must be node ids or a boolean mask, got {t.dtype}")
    t = t.to(torch.long)
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= num_nodes):
        raise ConfigError(f"input_nodes out of range [0, {num_nodes})")
    return t, None
