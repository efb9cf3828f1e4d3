"""Feature sources built by name: a cache policy from the registry (:func:`make_policy`; the
``auto`` choice of ``--cache-policy`` resolved by :func:`resolve_cache_policy`), the
feature source a run uses (:func:`build_feature_source`: a
:class:`~twopgraph.cache.host.HostFeatures` or a
:class:`~twopgraph.cache.feature_cache.FeatureCache`) and its host row cache
(:func:`attach_host_cache`)."""


from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np
import torch

from twopgraph.cache.base import CachePolicy, PolicyContext
from twopgraph.cache.feature_cache import FeatureCache, feat_dtype, resolve_budget
from twopgraph.cache.host import HostFeatures, store_dtype, transfer_dtype
from twopgraph.cache.hostrows import HostRowCache, host_cache_rows
from twopgraph.cache.readahead import find_mmap
from twopgraph.core.protocols import CACHE_POLICIES
from twopgraph.errors import ConfigError

#: ``--cache-policy auto``: this policy on a CUDA device, ``none`` on the CPU.
AUTO_CACHE_POLICY = "layer"


def resolve_cache_policy(name: str, device: torch.device | str) -> tuple[str, str]:
    """The cache policy ``--cache-policy name`` means for training on ``device``, and why, as
    ``(policy, reason)``: a registered name as it is; ``auto`` -> :data:`AUTO_CACHE_POLICY`
    (``layer``) on a CUDA device (every row a batch reads again is then a device hit, not a
    host-to-device copy), ``none`` on the CPU (the model reads the host table itself: a
    "device" buffer would only be a second copy of its rows). Builds no CUDA object.

    Example::

        >>> resolve_cache_policy("auto", "cuda:1")[0], resolve_cache_policy("auto", "cpu")[0]
        ('layer', 'none')
    """
    if name != "auto":
        return name, f"--cache-policy {name}"
    device = torch.device(device)
    if device.type == "cuda":
        return AUTO_CACHE_POLICY, (f"--cache-policy auto: {AUTO_CACHE_POLICY} on {device.type} "
                                   f"(a batch's rows already on the device are not copied again)")
    return "none", (f"--cache-policy auto: none on {device.type} (the model reads the host "
                    f"table itself)")


def policy_lookahead(policy: str | CachePolicy | Callable[..., CachePolicy],
                     options: dict | None = None) -> int:
    """Batches the loader will sample ahead for ``policy`` (its lookahead window), without
    building it: a policy object's ``lookahead``; a registered name's or a factory's
    ``lookahead`` keyword (given in ``options``, else its default); 0 for a policy without
    one (static policies), :data:`~twopgraph.cache.layer.DEFAULT_LOOKAHEAD` for a factory
    whose window cannot be read. ``None`` (the whole stream: offline replays only) counts
    as 0."""
    from twopgraph.cache.layer import DEFAULT_LOOKAHEAD
    options = options or {}
    if isinstance(policy, CachePolicy):
        return int(policy.lookahead or 0)
    if isinstance(policy, str):
        if CACHE_POLICIES.get(policy) is CACHE_POLICIES.get("none"):
            return 0
        policy = CACHE_POLICIES.get(policy)
    if "lookahead" in options:
        return int(options["lookahead"] or 0)
    try:
        param = inspect.signature(policy).parameters.get("lookahead")
    except (TypeError, ValueError):
        return DEFAULT_LOOKAHEAD
    if param is None:
        return 0
    if param.default is inspect.Parameter.empty or not isinstance(param.default, int):
        return DEFAULT_LOOKAHEAD
    return int(param.default)


def make_policy(name: str, ctx: PolicyContext, **options) -> CachePolicy:
    """Build the policy registered as ``name`` (options go to its factory)."""
    factory = CACHE_POLICIES.get(name)
    try:  # check the options alone: a TypeError from inside the factory is a real error
        inspect.signature(factory).bind(ctx, **options)
    except TypeError as e:
        raise ConfigError(f"bad options for cache policy {name!r}: {e}") from None
    return factory(ctx, **options)


def build_feature_source(policy: str | CachePolicy | Callable[..., CachePolicy], feat,
                         ctx: PolicyContext, device, *,
                         ratio: float | None = None, gb: float | None = None,
                         budget: int | None = None, dtype: str = "float32", rows=None,
                         readahead: bool = True, **options):
    """The feature source a training run uses: features rounded to ``dtype`` (copied in
    the store's dtype on CUDA when it is not wider:
    :func:`~twopgraph.cache.host.transfer_dtype`) and served as float32; a
    :class:`FeatureCache` with policy ``policy`` built from ``ctx`` and a budget
    from ``ratio`` or ``gb`` (default: see :func:`resolve_budget`), or, when that budget is 0
    rows or the policy caches nothing, the plain :class:`HostFeatures` (nothing to rank, no
    window held, no second copy of any row); ``budget`` gives it in rows instead (a caller that
    resolved it already, as :func:`twopgraph.pipeline.assemble.make_loader` does). ``feat`` (host N
    x F, NumPy or torch) is used as it is; ``rows`` (int64, optional) maps the source's ids to rows
    of ``feat`` (a part of a partitioned run over the machine's shared table; ``ctx`` and the budget
    are in the source's ids); ``readahead`` advises sampled rows of a memory-mapped ``feat``.

    ``policy`` is a registered policy's name (``options`` go to its factory; ``auto``:
    :func:`resolve_cache_policy` on ``device``), a
    :class:`~twopgraph.cache.base.CachePolicy` object (used as it is: the caller's own policy,
    no registration needed), or a factory ``policy(ctx, **options) -> CachePolicy``."""
    if isinstance(policy, str):
        policy = resolve_cache_policy(policy, device)[0]
    make = _policy_maker(policy, ctx, options)
    tdtype = feat_dtype(dtype)
    num_rows = int(feat.shape[0] if rows is None else len(rows))
    # the buffer holds rows as they are copied (the store's dtype on CUDA when not wider)
    moved = transfer_dtype(store_dtype(feat), tdtype, device)
    row_bytes = int(feat.shape[1]) * torch.empty(0, dtype=moved).element_size()
    if budget is None:
        budget = resolve_budget(num_rows, row_bytes, device, ratio, gb)
    elif ratio is not None or gb is not None:
        raise ConfigError("give the cache budget in rows, as a ratio or in GB, not two of them")
    budget = min(int(budget), num_rows)
    if budget == 0 or make is None:
        return HostFeatures(feat, device, dtype=tdtype, rows=rows, readahead=readahead)
    return FeatureCache(feat, make(), budget, device, dtype=tdtype, out_dtype=torch.float32,
                        rows=rows, readahead=readahead)


def _policy_maker(policy, ctx: PolicyContext, options: dict) -> Callable[[], CachePolicy] | None:
    """What builds ``policy`` (see :func:`build_feature_source`), or None for a policy that
    caches nothing; a one-line ConfigError for anything else."""
    if isinstance(policy, str):
        if CACHE_POLICIES.get(policy) is CACHE_POLICIES.get("none"):
            return None
        return lambda: make_policy(policy, ctx, **options)
    if isinstance(policy, CachePolicy):
        if options:
            raise ConfigError("cache policy options go with a policy's name or factory; a "
                              "policy object is used as it is")
        return (lambda: policy) if policy.caches else None
    if callable(policy):
        def build() -> CachePolicy:
            made = policy(ctx, **options)
            if not isinstance(made, CachePolicy):
                name = getattr(policy, "__name__", repr(policy))
                raise ConfigError(f"the cache policy factory {name} returned "
                                  f"{type(made).__name__}, not a CachePolicy")
            return made
        return build
    raise ConfigError(f"cache policy must be a registered name ({', '.join(CACHE_POLICIES)}), a "
                      f"CachePolicy or a factory of one, got {type(policy).__name__}")


def attach_host_cache(source, setting: str, ctx: PolicyContext, *, gb: float | None = None,
                      structure_bytes: int = 0, rows=None,
                      available: int | None = None, progress=None) -> HostRowCache | None:
    """Give ``source`` (a :class:`HostFeatures` or :class:`FeatureCache`) a
    :class:`~twopgraph.cache.hostrows.HostRowCache` by ``--host-cache`` ``setting``: ``none``
    (never), ``auto`` (``degree``, sized by :func:`~twopgraph.cache.hostrows.host_cache_rows`
    from ``available`` bytes -- default :func:`~twopgraph.runtime.memory.available_host_bytes` --
    and ``structure_bytes``, when the memory-mapped table does not fit in
    memory) or a registered cache policy's name, whose static rank (``initial_rows``, built
    from ``ctx``) picks the rows; ``gb`` sizes it in GiB instead. Only a table that is a
    memory map gets one (an in-memory table has nothing to gain). ``rows`` is the source's
    row map (ids of ``ctx`` -> host rows). The cache built, or None."""
    if setting == "none":
        return None
    host = source.host
    if host.array is None or find_mmap(host.array) is None:
        return None
    table_bytes = int(host.array.nbytes)
    row_bytes = int(host.array.shape[1] * host.array.itemsize)
    n = int(host.num_rows)
    if gb is not None:
        k = min(n, int(gb * 2**30) // max(1, row_bytes))
    else:
        if available is None:
            from twopgraph.runtime.memory import available_host_bytes
            available = available_host_bytes()
        k = host_cache_rows(table_bytes, row_bytes, n, structure_bytes, available)
    if k <= 0:
        return None
    policy = "degree" if setting == "auto" else setting
    ranked = np.asarray(make_policy(policy, ctx).initial_rows(k), dtype=np.int64)[:k]
    if ranked.shape[0] == 0:
        return None
    picked = ranked if rows is None else np.asarray(rows, dtype=np.int64)[ranked]
    cache = HostRowCache(host.array, picked, host.readahead, policy=policy,
                         progress=progress)
    host.attach_row_cache(cache)
    return cache
