"""The public interface of ``twopgraph.cache``: a :class:`FeatureCache` over a registered
policy counts hits, copies and the fill exactly on a known access stream and serves the
table's rows; the directory replay, the plain host source and the offline optimum agree."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import twopgraph.cache as pkg
from twopgraph.cache import (
    CACHE_POLICIES,
    CacheDirectory,
    FeatureCache,
    HostFeatures,
    PolicyContext,
    belady_min,
    build_feature_source,
    make_policy,
    replay,
    resolve_budget,
)
from twopgraph.graph import CSRGraph

# degrees 3, 2, 2, 1, 0: the degree policy's 2 rows are 0 and 1 (ties by id)
GRAPH = CSRGraph.from_edges([0, 0, 0, 1], [1, 2, 3, 2], num_nodes=5)
STREAM = [np.array([0, 2, 4]), np.array([1, 3]), np.array([0, 1])]
FEAT = torch.arange(15, dtype=torch.float32).view(5, 3)


def ctx() -> PolicyContext:
    return PolicyContext(GRAPH, np.arange(5), fanouts=[2], batch_size=2)


def run(source) -> None:
    source.begin_stream()
    for ids in STREAM:  # as the loader: announced when sampled, then gathered
        source.announce(ids)
        rows, _ = source.gather(ids)
        assert torch.equal(rows, FEAT[ids])


def test_every_public_name_imports():
    for n in pkg.__all__:
        getattr(pkg, n)


def test_feature_cache_counts_a_known_stream_exactly():
    assert {"none", "degree", "presample", "layer"} <= set(CACHE_POLICIES.names())
    cache = FeatureCache(FEAT, make_policy("degree", ctx()), budget=2)
    run(cache)
    c = cache.counters  # hits: 0 | 1 | 0, 1; copied: 2, 4 | 3 | -; rows 0, 1 filled once
    assert (c.feature_rows, c.cache_hits, c.h2d_rows, c.fill_rows, c.num_batches) == \
        (7, 4, 3, 2, 3)
    assert cache.h2d_bytes == 3 * 12 and cache.cache_fill_bytes == 2 * 12
    again = replay(STREAM, CacheDirectory(5, 2, make_policy("degree", ctx())))
    assert again == c
    host = HostFeatures(FEAT)
    run(host)
    assert (host.counters.feature_rows, host.counters.h2d_rows) == (7, 7)
    best = belady_min(STREAM, 5, budget=2)  # empty start: 3 + 2 copies, 0 and 1 kept for C
    assert (best.h2d_rows, best.cache_hits) == (5, 2)


def test_budgets_and_the_announce_contract():
    assert resolve_budget(1000, 64, "cpu") == 0 and resolve_budget(1000, 64, "cpu", 0.25) == 250
    assert isinstance(build_feature_source("degree", FEAT, ctx(), "cpu"), HostFeatures)
    layer = build_feature_source("layer", FEAT, ctx(), "cpu", ratio=0.4)
    assert isinstance(layer, FeatureCache) and layer.budget == 2
    run(layer)
    assert layer.counters.feature_rows == 7
    with pytest.raises(RuntimeError, match="announced"):
        layer.gather(np.array([0, 1]))  # a window policy refuses an unannounced batch
