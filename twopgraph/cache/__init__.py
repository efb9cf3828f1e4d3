"""The GNN-layer-aware feature cache: :class:`FeatureCache` over a host store, its policies
(registry ``POLICIES``: name -> factory) and the offline optimum.

Policies (each its own module): ``none`` (no cache), ``degree`` (PaGraph), ``presample``
(GNNLab PreSC), ``layer`` (2PGraph: layer-aware static rank + schedule lookahead window).

Example::

    >>> from twopgraph.graph import CSRGraph
    >>> g = CSRGraph.from_edges([0, 1, 2], [1, 2, 3], num_nodes=4)
    >>> ctx = PolicyContext(g, np.array([0, 1]), fanouts=[2, 2], batch_size=2)
    >>> cache = FeatureCache(torch.ones(4, 3), make_policy("degree", ctx), budget=2)
    >>> cache.gather(torch.tensor([0, 1, 3]))[0].shape
    torch.Size([3, 3])
"""

from __future__ import annotations

import inspect
from typing import Callable

import torch

from ..errors import ConfigError
from . import degree, layer, none, presample
from .base import CachePolicy, PolicyContext
from .directory import CacheCounters, CacheDirectory, GatherPlan, replay
from .feature_cache import FEAT_DTYPES, FeatureCache, feat_dtype, resolve_budget
from .optimal import belady_min, exhaustive_min

POLICIES: dict[str, Callable[..., CachePolicy]] = {
    "none": none.make,
    "degree": degree.make,
    "presample": presample.make,
    "layer": layer.make,
}


def make_policy(name: str, ctx: PolicyContext, **options) -> CachePolicy:
    """Build the policy registered as ``name`` (options go to its factory)."""
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ConfigError(f"unknown cache policy {name!r}; known: {', '.join(POLICIES)}") from None
    try:  # check the options alone: a TypeError from inside the factory is a real error
        inspect.signature(factory).bind(ctx, **options)
    except TypeError as e:
        raise ConfigError(f"bad options for cache policy {name!r}: {e}") from None
    return factory(ctx, **options)


__all__ = ["build_feature_cache", "CachePolicy", "PolicyContext", "CacheCounters", "CacheDirectory", "GatherPlan",
           "replay", "FEAT_DTYPES", "FeatureCache", "feat_dtype", "resolve_budget",
           "belady_min", "exhaustive_min", "POLICIES", "make_policy"]


def build_feature_cache(policy: str, feat: torch.Tensor, ctx: PolicyContext, device, *,
                        ratio: float | None = None, gb: float | None = None,
                        dtype: str = "float32", **options) -> FeatureCache:
    """The :class:`FeatureCache` a training run uses: policy ``policy`` built from ``ctx``,
    features stored and copied as ``dtype`` and served as float32, budget from ``ratio`` or
    ``gb`` (default: see :func:`resolve_budget`; ``none`` always gets 0). A budget of 0 rows
    runs as ``none`` whatever ``policy`` says: nothing to rank, no lookahead window held."""
    if policy not in POLICIES:
        raise ConfigError(f"unknown cache policy {policy!r}; known: {', '.join(POLICIES)}")
    tdtype = feat_dtype(dtype)
    row_bytes = int(feat.shape[1]) * torch.empty(0, dtype=tdtype).element_size()
    budget = resolve_budget(int(feat.shape[0]), row_bytes, device, ratio, gb)
    pol = make_policy(policy if budget > 0 else "none", ctx, **(options if budget > 0 else {}))
    return FeatureCache(feat, pol, budget, device, dtype=tdtype, out_dtype=torch.float32)
