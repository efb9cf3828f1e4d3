"""The input features of :class:`~twopgraph.pyg.NeighborLoader` batches served by twopgraph's
feature sources (:mod:`twopgraph.cache`) instead of PyG's slicing: ``batch.x`` on a device,
through a device feature cache that keeps the rows batches read most.

``device=`` alone: ``batch.x`` is gathered from the host table straight onto ``device``
(:class:`~twopgraph.cache.HostFeatures`: one copy of the batch's rows, converted per batch).
``cache_policy=`` adds a :class:`~twopgraph.cache.FeatureCache` of ``cache_ratio`` of the rows
(or ``cache_gb`` GiB; default: what fits in the free device memory after a 25 % margin on
CUDA, nothing on the CPU) managed by the policy: ``"degree"`` (the rows of the nodes with the
most out-edges, i.e. those sampled most often as neighbours; PaGraph), or a
:class:`~twopgraph.cache.CachePolicy` object of your own (static or dynamic; it sees the
batches' rows when they are gathered). Hits, rows and bytes copied are counted in
:attr:`LoaderFeatures.counters` (:class:`~twopgraph.core.metrics.CacheCounters`).

``data.x`` (N x F, a tensor, a NumPy array or memory map) is read as it is: no second host
copy; a memory-mapped table is read per batch (rows advised ahead). Memory on the device:
the cache's budget rows x F x the row's bytes, plus one batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from twopgraph.errors import ConfigError

#: cache policies a loader builds by name (policies needing a schedule's lookahead or
#: pre-sampled epochs belong to twopgraph's own NodeLoader / ``twopgraph train``)
NAMED_POLICIES = ("degree",)


class LoaderFeatures:
    """``batch.x`` for a loader: ``source.gather`` of a batch's ``n_id`` on ``device``."""

    def __init__(self, x: Any, src: np.ndarray, device: torch.device | str | None,
                 cache_policy: Any = None, cache_ratio: float | None = None,
                 cache_gb: float | None = None) -> None:
        from twopgraph.cache import CachePolicy, FeatureCache, HostFeatures, resolve_budget
        from twopgraph.cache.degree import DegreeCache
        if x is None:
            raise ConfigError("device= / cache_policy= serve data.x, and data has no x")
        self.device = torch.device(device if device is not None else "cpu")
        feat = x.cpu() if isinstance(x, torch.Tensor) else x
        if feat.ndim != 2:
            raise ConfigError(f"device= / cache_policy= need a 2-D data.x, got shape "
                              f"{tuple(feat.shape)}")
        n = int(feat.shape[0])
        if cache_policy is None:
            if cache_ratio is not None or cache_gb is not None:
                raise ConfigError("cache_ratio / cache_gb need a cache_policy")
            self.source = HostFeatures(feat, self.device)
        else:
            if isinstance(cache_policy, CachePolicy):
                policy = cache_policy
            elif cache_policy == "degree":
                policy = DegreeCache(np.bincount(src, minlength=n))
            else:
                raise ConfigError(f"cache_policy {cache_policy!r}: give one of "
                                  f"{', '.join(NAMED_POLICIES)} or a CachePolicy object")
            row_bytes = int(feat.shape[1]) * (feat.element_size() if isinstance(
                feat, torch.Tensor) else np.dtype(feat.dtype).itemsize)
            budget = resolve_budget(n, row_bytes, self.device, cache_ratio, cache_gb)
            self.source = (FeatureCache(feat, policy, budget, self.device)
                           if budget > 0 else HostFeatures(feat, self.device))

    @property
    def counters(self) -> Any:
        """Rows read, cache hits, rows copied (:class:`~twopgraph.core.metrics.CacheCounters`)."""
        return self.source.counters

    @property
    def budget(self) -> int:
        """Rows the device cache holds (0: no cache)."""
        return int(getattr(self.source, "budget", 0))

    def gather(self, n_id: torch.Tensor) -> torch.Tensor:
        """The float32 rows of ``n_id`` (a batch's nodes, possibly repeated) on the device,
        ready to use (CUDA: the current stream waits for the copies)."""
        uniq, inverse = torch.unique(n_id.cpu(), return_inverse=True)
        out, ready = self.source.gather(uniq.numpy())
        if ready is not None:
            torch.cuda.current_stream(self.device).wait_event(ready)
        return out.index_select(0, inverse.to(out.device))
