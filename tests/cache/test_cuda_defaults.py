"""The defaults of the CUDA feature path (issue 42, defects 3 and 6), seen from the CPU:

- ``--cache-policy auto`` (the default) resolves to ``layer`` on a CUDA device and ``none`` on
  the CPU, without building a CUDA object, and ``make_loader`` hands the resolved policy on
  and logs the decision once;
- rows cross to a CUDA device in the store's dtype when it is not wider than ``--feat-dtype``
  (no host upcast of a float16 store) and are converted on the device to the same values;
  the default budget counts rows in that dtype; the CPU path is unchanged;
- the default budget keeps the device sampler's lookahead blocks, its relabelling maps and
  cuSPARSE's workspaces free, and is never negative.

CUDA cases are marked ``cuda`` (skipped here, selected by ``pytest -m cuda``).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from conftest import community_data

import twopgraph.pipeline.assemble as pl
from twopgraph.cache import (
    AUTO_CACHE_POLICY,
    FeatureCache,
    HostFeatures,
    PolicyContext,
    build_feature_source,
    make_policy,
    policy_lookahead,
    resolve_cache_policy,
    transfer_dtype,
)
from twopgraph.cache.feature_cache import (
    CUSPARSE_FIXED_BYTES,
    device_block_bytes,
    pipeline_reserve_parts,
    resolve_budget,
)
from twopgraph.cache.host import on_device_dtype, store_dtype
from twopgraph.cache.layer import DEFAULT_LOOKAHEAD
from twopgraph.config import CacheConfig, TrainConfig
from twopgraph.errors import ConfigError
from twopgraph.graph.data import CSRGraph

needs_cuda = pytest.mark.cuda
F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64


@pytest.fixture(scope="module")
def cdata():
    return community_data()


def _cfg(tmp_path, **kw) -> TrainConfig:
    base = dict(dataset="community", epochs=1, hidden=16, fanouts=[5, 5], batch_size=64,
                seed=0, device="cpu", out=str(tmp_path / "o"), progress=False, prefetch=2,
                threads=2, data_root=str(tmp_path / "data"), sampler_device="cpu",
                schedule="random")
    base.update(kw)
    return TrainConfig.of(**base)


def _ctx(n=6):
    g = CSRGraph.from_edges(np.arange(n - 1), np.arange(1, n), num_nodes=n)
    return PolicyContext(g, np.arange(n), fanouts=[2], batch_size=2)


# -- --cache-policy auto ---------------------------------------------------------------------------
def test_auto_policy_is_layer_on_cuda_and_none_on_cpu():
    assert AUTO_CACHE_POLICY == "layer"
    assert resolve_cache_policy("auto", "cpu")[0] == "none"
    for dev in ("cuda", "cuda:3", torch.device("cuda", 1)):
        name, why = resolve_cache_policy("auto", dev)
        assert name == "layer" and "auto" in why
    # an explicit choice is kept, on either device (none stays an explicit choice)
    for dev in ("cpu", "cuda"):
        assert resolve_cache_policy("none", dev)[0] == "none"
        assert resolve_cache_policy("degree", dev)[0] == "degree"


def test_cache_policy_defaults_to_auto_and_keeps_every_choice():
    assert CacheConfig().cache_policy == "auto"
    CacheConfig().validate()
    for name in ("none", "degree", "presample", "layer"):
        CacheConfig(cache_policy=name).validate()
    with pytest.raises(ConfigError, match="lru"):
        CacheConfig(cache_policy="lru").validate()


def test_auto_on_cpu_builds_no_cache_even_with_a_budget():
    src = build_feature_source("auto", torch.ones(6, 3), _ctx(), "cpu", ratio=0.5)
    assert isinstance(src, HostFeatures)
    src = build_feature_source("degree", torch.ones(6, 3), _ctx(), "cpu", ratio=0.5)
    assert isinstance(src, FeatureCache) and src.budget == 3


def _capture_source(monkeypatch, free=8 << 30, total=16 << 30):
    """make_loader on a fake CUDA device: the feature source's arguments are recorded and the
    loader is not built (no CUDA object is made)."""
    got = {}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, total))

    def source(policy, feat, ctx, device, *, budget=None, dtype="float32", **kw):
        got.update(policy=policy, budget=budget, dtype=dtype, feat=feat)
        return HostFeatures(feat)

    class FakeLoader:
        def __init__(self, *a, **k):
            pass
    monkeypatch.setattr(pl, "build_feature_source", source)
    monkeypatch.setattr(pl, "Loader", FakeLoader)
    return got


def test_make_loader_resolves_auto_and_logs_it_once(cdata, tmp_path, monkeypatch, caplog):
    got = _capture_source(monkeypatch)
    with caplog.at_level(logging.INFO, logger="twopgraph"):
        pl.make_loader(_cfg(tmp_path), cdata, torch.device("cuda"))
    assert got["policy"] == "layer" and got["budget"] > 0
    lines = [r.getMessage() for r in caplog.records if "--cache-policy auto" in r.getMessage()]
    assert len(lines) == 1 and "layer" in lines[0]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="twopgraph"):
        pl.make_loader(_cfg(tmp_path), cdata, torch.device("cpu"))
    assert got["policy"] == "none"
    with caplog.at_level(logging.INFO, logger="twopgraph"):
        pl.make_loader(_cfg(tmp_path, cache_policy="none"), cdata, torch.device("cuda"))
    assert got["policy"] == "none"  # explicit: kept, and not logged as an auto decision
    assert sum("--cache-policy auto" in r.getMessage() for r in caplog.records) == 1


# -- rows moved in the store's dtype -------------------------------------------------------------
def test_transfer_dtype():
    assert transfer_dtype(F16, F32, "cuda") == F16  # no upcast on the host
    assert transfer_dtype(F16, F32, torch.device("cuda", 2)) == F16
    assert transfer_dtype(F32, F16, "cuda") == F16  # a wider store is narrowed before the copy
    assert transfer_dtype(F64, F32, "cuda") == F32
    assert transfer_dtype(BF16, F16, "cuda") == BF16
    assert transfer_dtype(F32, F32, "cuda") == F32
    assert transfer_dtype(torch.uint8, F32, "cuda") == torch.uint8
    for store in (F16, F32, F64, BF16):  # the CPU path: converted where it is read
        assert transfer_dtype(store, F32, "cpu") == F32
        assert transfer_dtype(store, F16, "cpu") == F16


def test_store_dtype():
    assert store_dtype(np.zeros((2, 2), np.float16)) == F16
    assert store_dtype(torch.zeros(2, 2, dtype=BF16)) == BF16


def test_conversion_on_the_device_gives_the_host_values():
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((50, 7)).astype(np.float32) * 1000)
    for store, dtype in ((F16, F32), (BF16, F16), (F16, BF16), (F32, F16)):
        stored = x.to(store)
        moved = stored.to(transfer_dtype(store, dtype, "cuda"))  # what crosses
        host_way = stored.to(dtype).to(F32)  # converted on the host, then widened
        assert torch.equal(on_device_dtype(moved, dtype, F32), host_way), (store, dtype)
    same = x.clone()
    assert on_device_dtype(same, F32, F32) is same  # nothing to convert: no copy


def test_cpu_cache_unchanged_for_a_float16_store():
    feat = np.arange(24, dtype=np.float16).reshape(8, 3)
    c = FeatureCache(feat, make_policy("degree", _ctx(8)), budget=3, dtype=F32)
    assert c.transfer_dtype == F32 and c.buffer.dtype == F32 and c.row_bytes == 12
    out, ev = c.gather(np.array([0, 5, 7]))
    assert ev is None and out.dtype == F32
    assert torch.equal(out, torch.from_numpy(feat[[0, 5, 7]].astype(np.float32)))
    h = HostFeatures(feat, dtype=F32)
    assert h.transfer_dtype == F32 and h.row_bytes == 12


def test_default_cuda_budget_counts_rows_in_the_store_dtype(cdata, tmp_path, monkeypatch):
    c, f, n = _cfg(tmp_path), cdata.num_features, cdata.num_nodes
    reserve = sum(pl.device_reserve(c, cdata, 64, sampler_on_device=False,
                                    device="cuda").values())
    total = 16 << 30
    free = total // 4 + reserve + (n // 4) * 4 * f  # a quarter of the rows in float32
    got = _capture_source(monkeypatch, free, total)
    half = np.ascontiguousarray(cdata.feat, dtype=np.float16)
    loader = pl.make_loader(c, cdata, torch.device("cuda"), feat=half)
    assert sum(loader.device_reserve_parts.values()) == reserve
    assert got["feat"] is half  # the store's table as it is: no converted copy
    assert got["budget"] == 2 * (n // 4) < n  # float16 rows: twice as many fit
    pl.make_loader(c, cdata, torch.device("cuda"))  # a float32 store
    assert got["budget"] == n // 4


@needs_cuda
@pytest.mark.parametrize("policy", ["degree", "layer"])
def test_cuda_cache_moves_float16_rows_and_converts_on_the_device(policy):
    rng = np.random.default_rng(0)
    n, f = 64, 16
    feat = (rng.standard_normal((n, f)) * 100).astype(np.float16)
    ctx = _ctx(n)
    c = FeatureCache(feat, make_policy(policy, ctx), budget=16, device="cuda", dtype=F32)
    assert c.transfer_dtype == F16 and c.buffer.dtype == F16 and c.row_bytes == 2 * f
    for ids in (np.arange(0, 40), np.arange(20, 60), np.arange(0, 64, 3)):
        c.announce(ids)
    for ids in (np.arange(0, 40), np.arange(20, 60), np.arange(0, 64, 3)):
        out, ev = c.gather(ids)
        torch.cuda.current_stream().wait_event(ev)
        assert out.dtype == F32 and out.device.type == "cuda"
        assert torch.equal(out.cpu(), torch.from_numpy(feat[ids].astype(np.float32)))
    assert c.h2d_bytes == c.counters.h2d_rows * 2 * f  # the bytes really copied
    assert all(b is None or b.dtype == F16 for b in c.staging._bufs)
    ids = np.array([3, 9, 40])
    assert torch.equal(c.read(ids).cpu(), torch.from_numpy(feat[ids].astype(np.float32)))


@needs_cuda
def test_cuda_host_features_move_float16_rows():
    feat = np.arange(40, dtype=np.float16).reshape(10, 4)
    h = HostFeatures(feat, "cuda", dtype=F32)
    assert h.transfer_dtype == F16 and h.row_bytes == 8
    out, ev = h.gather(np.array([9, 1]))
    torch.cuda.current_stream().wait_event(ev)
    assert out.dtype == F32 and torch.equal(out.cpu(), torch.from_numpy(
        feat[[9, 1]].astype(np.float32)))
    assert h.counters.h2d_rows * h.row_bytes == 16


# -- the default budget's reserve ------------------------------------------------------------------
def test_lookahead_blocks_shrink_the_default_budget():
    kw = dict(num_nodes=10 ** 6, num_edges=2 * 10 ** 7, fanouts=[15, 10, 5], batch_size=1024,
              lookahead=DEFAULT_LOOKAHEAD, prefetch=2, eval_batch_edges=4_000_000)
    host = pipeline_reserve_parts(sampler_on_device=False, **kw)
    dev = pipeline_reserve_parts(sampler_on_device=True, **kw)
    block, biggest = device_block_bytes(1024, [15, 10, 5], 10 ** 6, 20.0)
    assert host["lookahead_blocks"] == 0 and host["relabel_maps"] == 0
    assert dev["lookahead_blocks"] == (DEFAULT_LOOKAHEAD + 2 + 1) * block > 0
    assert dev["relabel_maps"] == 2 * 8 * 10 ** 6
    assert host["cusparse"] == dev["cusparse"] >= CUSPARSE_FIXED_BYTES + 24 * biggest
    gib, row_bytes = 1 << 30, 400
    mem = (40 * gib, 80 * gib)
    on_host = resolve_budget(10 ** 9, row_bytes, "cuda", reserve=sum(host.values()), memory=mem)
    on_dev = resolve_budget(10 ** 9, row_bytes, "cuda", reserve=sum(dev.values()), memory=mem)
    avail = 40 * gib - 20 * gib
    assert on_host == (avail - sum(host.values())) // row_bytes
    assert on_dev == (avail - sum(dev.values())) // row_bytes
    assert on_host - on_dev >= (dev["lookahead_blocks"] + dev["relabel_maps"]) // row_bytes
    # a reserve larger than the free memory: 0 rows, never negative
    assert resolve_budget(10 ** 9, row_bytes, "cuda", reserve=100 * gib, memory=mem) == 0
    assert resolve_budget(10 ** 9, row_bytes, "cuda", memory=(gib, 80 * gib)) == 0


def test_device_block_bytes_arithmetic():
    # 2 seeds, one hop of fanout 3 on mean degree 5: 6 edges, then 2 x 4 = 8 input rows
    assert device_block_bytes(2, [3], 1000, 5.0) == (8 * 2 + 12 * 6 + 8 * 3 + 12 * 8, 6)


def test_the_window_counted_is_the_policys():
    assert policy_lookahead("layer") == DEFAULT_LOOKAHEAD
    assert policy_lookahead("layer", {"lookahead": 4}) == 4
    assert policy_lookahead("degree") == policy_lookahead("none") == 0
    assert policy_lookahead(make_policy("layer", _ctx(), lookahead=7)) == 7


def test_make_loader_keeps_the_device_samplers_lookahead(cdata, tmp_path, monkeypatch, caplog):
    """The reserve make_loader takes on CUDA grows by the lookahead blocks and the relabelling
    maps when the sampler samples on the device; its parts are logged once."""
    c = _cfg(tmp_path)
    host = pl.device_reserve(c, cdata, 64, sampler_on_device=False, device="cuda")
    dev = pl.device_reserve(c, cdata, 64, sampler_on_device=True, device="cuda")
    block, _ = device_block_bytes(64, [5, 5], cdata.num_nodes,
                                  cdata.graph.num_edges / cdata.num_nodes)
    assert dev["activations"] == host["activations"] > 0
    assert sum(dev.values()) - sum(host.values()) == (
        (DEFAULT_LOOKAHEAD + 3) * block + 16 * cdata.num_nodes)
    _capture_source(monkeypatch)
    with caplog.at_level(logging.INFO, logger="twopgraph"):
        loader = pl.make_loader(c, cdata, torch.device("cuda"))
    assert loader.device_reserve_parts == host  # the sampler is on the host here
    lines = [r.getMessage() for r in caplog.records if "kept from the cache budget" in
             r.getMessage()]
    assert len(lines) == 1 and "cusparse" in lines[0] and "lookahead blocks" in lines[0]


def test_side_stream_enters_the_streams_device_first(monkeypatch):
    """The cache's stream blocks (cache.host.side_stream) guard the stream's device before
    entering the stream, and leave in the reverse order; None is a null context."""
    import contextlib

    from twopgraph.cache import host

    seen = []

    @contextlib.contextmanager
    def rec(kind):
        def cm(arg):
            @contextlib.contextmanager
            def inner():
                seen.append(("enter", kind, arg))
                yield
                seen.append(("exit", kind, arg))
            return inner()
        yield cm

    class FakeStream:
        device = torch.device("cuda", 3)

    with rec("device") as dev, rec("stream") as st:
        monkeypatch.setattr(torch.cuda, "device", dev)
        monkeypatch.setattr(torch.cuda, "stream", st)
        s = FakeStream()
        with host.side_stream(s):
            seen.append(("body",))
    assert seen == [("enter", "device", s.device), ("enter", "stream", s), ("body",),
                    ("exit", "stream", s), ("exit", "device", s.device)]
    with host.side_stream(None):
        pass
    assert len(seen) == 5
