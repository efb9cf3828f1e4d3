"""The device cache's initial fill (issue 42, item 3): a large fill logs its start, progress
and end; ``prefill`` makes it before the first batch, counted once."""

from __future__ import annotations

import logging

import numpy as np
import torch

import twopgraph.cache.feature_cache as fc
from twopgraph.cache import FeatureCache
from twopgraph.cache.degree import DegreeCache


def _cache(n=40, budget=10):
    feat = torch.arange(n * 4, dtype=torch.float32).view(n, 4)
    return feat, FeatureCache(feat, DegreeCache(np.arange(n)[::-1].copy()), budget=budget)


def test_large_fill_logs_its_progress(monkeypatch, caplog):
    monkeypatch.setattr(fc, "FILL_LOG_BYTES", 0)
    monkeypatch.setattr(fc, "FILL_LOG_S", 0.0)
    monkeypatch.setattr(fc, "_FILL_CHUNK_BYTES", 32)  # two rows per chunk
    _, c = _cache()
    with caplog.at_level(logging.INFO, logger="twopgraph"):
        c.gather(np.array([0, 1]))
    text = [r.getMessage() for r in caplog.records]
    assert any("filling 10 rows" in t for t in text)
    assert any("fill: 10 of 10 rows (100%)" in t for t in text)
    assert any("filled: 10 rows" in t for t in text) and c.fill_s >= 0.0


def test_small_fill_is_quiet(caplog):
    _, c = _cache()
    with caplog.at_level(logging.INFO, logger="twopgraph"):
        c.gather(np.array([0, 1]))
    assert not [r for r in caplog.records if "fill" in r.getMessage()]


def test_prefill_before_the_first_batch_counts_once():
    feat, c = _cache()
    assert c.prefill() == 10 and c.counters.fill_rows == 10 and c.counters.num_batches == 0
    assert c.prefill() == 0
    out, _ = c.gather(np.array([39, 0]))  # 39 is a best-ranked row: a hit
    assert torch.equal(out, feat[[39, 0]])
    assert c.counters.fill_rows == 10 and c.counters.cache_hits == 1
