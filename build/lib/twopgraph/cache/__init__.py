"""Feature sources: :class:`HostFeatures` (a plain host table) and the GNN-layer-aware
:class:`FeatureCache` (a device buffer over the host table, driven by a cache policy), and the
offline optimum the policies are judged against.

Policies register in :data:`~twopgraph.protocols.CACHE_POLICIES` (name -> factory), one module
each: ``none`` (no cache), ``degree`` (PaGraph), ``presample`` (GNNLab PreSC), ``layer``
(2PGraph: layer-aware static rank + schedule lookahead window). A new policy is a new module
of this package.

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

import torch

from ..errors import ConfigError
from ..metrics import CacheCounters
from ..protocols import CACHE_POLICIES
from .base import CachePolicy, PolicyContext
from .directory import CacheDirectory, GatherPlan, replay
from .feature_cache import FEAT_DTYPES, FeatureCache, feat_dtype, resolve_budget
from .host import HostFeatures
from .optimal import belady_min


def make_policy(name: str, ctx: PolicyContext, **options) -> CachePolicy:
    """Build the policy registered as ``name`` (options go to its factory)."""
    factory = CACHE_POLICIES.get(name)
    try:  # check the options alone: a TypeError from inside the factory is a real error
        inspect.signature(factory).bind(ctx, **options)
    except TypeError as e:
        raise ConfigError(f"bad options for cache policy {name!r}: {e}") from None
    return factory(ctx, **options)


def build_feature_source(policy: str, feat: torch.Tensor, ctx: PolicyContext, device, *,
                         ratio: float | None = None, gb: float | None = None,
                         dtype: str = "float32", **options):
    """The feature source a training run uses: features stored and copied as ``dtype`` and
    served as float32; a :class:`FeatureCache` with policy ``policy`` built from ``ctx`` and a
    budget from ``ratio`` or ``gb`` (default: see :func:`resolve_budget`), or, when that budget
    is 0 rows or the policy caches nothing, the plain :class:`HostFeatures` (nothing to rank,
    no window held, no second copy of any row)."""
    factory = CACHE_POLICIES.get(policy)
    tdtype = feat_dtype(dtype)
    row_bytes = int(feat.shape[1]) * torch.empty(0, dtype=tdtype).element_size()
    budget = resolve_budget(int(feat.shape[0]), row_bytes, device, ratio, gb)
    if budget == 0 or factory is CACHE_POLICIES.get("none"):
        return HostFeatures(feat, device, dtype=tdtype)
    return FeatureCache(feat, make_policy(policy, ctx, **options), budget, device,
                        dtype=tdtype, out_dtype=torch.float32)


# temporary: old names, removed once tests are migrated
from .optimal import exhaustive_min  # noqa: E402,F401
POLICIES = CACHE_POLICIES
build_feature_cache = build_feature_source
