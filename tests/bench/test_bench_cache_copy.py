"""``bench cache --copy`` measures the training path (issue 42, defect 9): its rows move
through the feature source training builds (``build_feature_source`` over the store's table as
it is: no converted or pinned copy of the whole table), with the same counts as the replay
without ``--copy``; on CUDA its pinned memory is the staging of a batch, not the table, and
the gathers are not synchronised one by one (checked on a GPU: marked ``cuda``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import community_data

import twopgraph.cache as cache_pkg
from twopgraph.bench.cache import run_bench
from twopgraph.cache import FeatureCache, HostFeatures

POLICIES = ["none", "degree", "layer"]
KEYS = ("feature_rows", "cache_hits", "num_batches", "budget_rows")
BYTES = ("h2d_bytes", "cache_fill_bytes")


@pytest.fixture(scope="module")
def cdata():
    return community_data()


def _recording(monkeypatch):
    made = []
    real = cache_pkg.build_feature_source

    def build(policy, feat, ctx, device, **kw):
        src = real(policy, feat, ctx, device, **kw)
        made.append((feat, kw, src))
        return src
    monkeypatch.setattr(cache_pkg, "build_feature_source", build)
    return made


def _bench(data, ratios=(0.0, 0.2), **kw):
    return run_bench(data, POLICIES, list(ratios), ["random"], [5, 5], 64, seed=0, threads=1,
                     **kw)


def test_copy_goes_through_the_training_feature_source(cdata, monkeypatch):
    plain = _bench(cdata)
    made = _recording(monkeypatch)
    copied = _bench(cdata, copy=True, device="cpu", dtype=torch.float16)
    assert len(made) == len(POLICIES) * 2
    for feat, kw, src in made:
        assert feat is cdata.feat  # the store's table as it is, never a converted copy
        assert kw["dtype"] == "float16" and "budget" in kw
        assert isinstance(src, (FeatureCache, HostFeatures))
        assert src.staging.nbytes == 0  # the CPU path gathers without staging
    assert [type(s).__name__ for _, kw, s in made if kw["budget"] == 0] == ["HostFeatures"] * 3
    for a, b in zip(plain, copied):
        assert a["policy"] == b["policy"]
        if a["policy"] != "optimal":
            assert b["gather_s"] is not None
            assert all(a[k] == b[k] for k in KEYS), a["policy"]
            # same rows; bytes in --feat-dtype (float16 here, float32 without --copy's dtype)
            assert all(a[k] == 2 * b[k] for k in BYTES), a["policy"]


def _wide_data(n=100_000, f=64):
    """A graph whose batches are a small part of it (64 seeds, fanouts 5,5: at most 2,304 input
    rows of 100,000), so "a batch, not the table" is a real bound; 50 batches an epoch."""
    import scipy.sparse as sp

    from twopgraph.graph.data import GraphData
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, n, 4 * n), rng.integers(0, n, 4 * n)
    adj = sp.coo_matrix((np.ones(4 * n), (src, dst)), shape=(n, n))
    return GraphData.from_scipy(adj, rng.standard_normal((n, f)).astype(np.float32),
                                rng.integers(0, 4, n), train_idx=np.arange(3200))


@pytest.mark.cuda
def test_cuda_copy_pins_a_batch_not_the_table(monkeypatch):
    data = _wide_data()
    made = _recording(monkeypatch)
    pinned = []
    real_pin = torch.Tensor.pin_memory

    def pin(self, *a, **k):
        pinned.append(self.numel() * self.element_size())
        return real_pin(self, *a, **k)
    monkeypatch.setattr(torch.Tensor, "pin_memory", pin)
    syncs = []
    real_sync = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize",
                        lambda device=None: (syncs.append(1), real_sync(device))[1])
    rows = _bench(data, ratios=(0.0, 0.02), copy=True, device="cuda")
    table = int(np.asarray(data.feat).nbytes)
    row = data.num_features * 4
    # two staging slots of the most rows a batch can have (or of the fill's 2,000 rows), x1.5
    bound = 2 * 1.5 * max(64 * 6 * 6, 2000) * row
    for _, _, src in made:
        assert 0 < src.staging.nbytes <= bound < table / 4
    assert all(p < table / 4 for p in pinned)
    # one device synchronisation per replay (the end of its timed region), none per batch
    assert len(syncs) == len(made)
    assert all(r["gather_s"] is not None for r in rows if r["policy"] != "optimal")
