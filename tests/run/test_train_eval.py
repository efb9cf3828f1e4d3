"""Bounded exact evaluation (issue 11): layer 0 read per dst range through the feature source
(never the whole table on the device, never a whole-table conversion), intermediate outputs
on the device, in host memory or in a memory-mapped scratch file, chunks halved when their
rows would not fit -- always the same logits as whole-table inference."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import torch
from conftest import community_data
from test_cache import sampled_stream
from test_models import _randomize_params

import twopgraph.inference.passes as passes_mod
import twopgraph.inference.tables as tables_mod
import twopgraph.run.train as tr
from twopgraph.cache import FeatureCache, HostFeatures, make_policy
from twopgraph.inference import (
    EvalTable,
    Relabel,
    layerwise_inference,
    relabel_on_device,
    table_place,
)
from twopgraph.models import build_model
from twopgraph.pipeline.assemble import eval_features, make_loader
from twopgraph.runtime.memory import available_host_bytes, fillable_host_bytes
from twopgraph.sampler.neighbor import NeighborSampler

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def cdata():
    return community_data()


def reference_inference(model, sampler, feat: torch.Tensor) -> torch.Tensor:
    """What exact inference computed before issue 11: the whole float32 table, one whole-graph
    block per layer."""
    n = sampler.graph.num_nodes
    full = sampler.full_block(0, n)
    h = feat.to(torch.float32)
    with torch.no_grad():
        for i, conv in enumerate(model.convs):
            h = conv(full, h, h)
            if i < len(model.convs) - 1:
                h = torch.relu(h)
    return h


def _model(data, name, hidden, layers, seed=0):
    m = build_model(name, data.num_features, hidden, data.num_classes, num_layers=layers)
    _randomize_params(m, seed)
    return m


@pytest.fixture
def places(monkeypatch):
    """Records where every EvalTable is kept."""
    seen = []
    init = EvalTable.__init__

    def spy(self, n, d, where, device, scratch_dir=None):
        seen.append(where)
        init(self, n, d, where, device, scratch_dir)

    monkeypatch.setattr(EvalTable, "__init__", spy)
    return seen


# -- where the intermediate tables go ---------------------------------------------------------------
@pytest.mark.parametrize("name", ["sage", "gcn"])
@pytest.mark.parametrize("hidden, layers", [(3, 2), (64, 3), (16, 3)])
def test_scratch_file_path_equals_whole_table_inference(cdata, tmp_path, monkeypatch, places,
                                                        name, hidden, layers):
    """Host memory reported as nearly full: every intermediate table goes to an anonymous
    scratch file in the run's folder, nothing is left there, and the logits are those of
    whole-table inference (hidden 3 < features: layer 0 projects; 64 > classes: the last
    layer is fused)."""
    monkeypatch.setattr(tables_mod, "available_host_bytes", lambda: 1000)
    m = _model(cdata, name, hidden, layers)
    sampler = NeighborSampler(cdata.graph, [-1] * layers)
    feat = torch.from_numpy(cdata.feat)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    got = layerwise_inference(m, sampler, cdata.feat, CPU, batch_edges=97, scratch_dir=scratch)
    assert places and set(places) == {"disk"}
    assert os.listdir(scratch) == []  # the scratch files never had a name
    torch.testing.assert_close(got, reference_inference(m, sampler, feat), rtol=1e-5,
                               atol=1e-5)
    places.clear()
    monkeypatch.setattr(tables_mod, "available_host_bytes", lambda: 1 << 40)
    host = layerwise_inference(m, sampler, cdata.feat, CPU, batch_edges=97)
    assert set(places) == {"host"}
    torch.testing.assert_close(got, host, rtol=1e-6, atol=1e-6)


def test_forced_places_agree(cdata, places):
    m = _model(cdata, "sage", 16, 3)
    sampler = NeighborSampler(cdata.graph, [-1] * 3)
    out = {p: layerwise_inference(m, sampler, cdata.feat, CPU, batch_edges=300, place=p)
           for p in ("host", "disk")}
    assert places == ["host"] * 4 + ["disk"] * 4  # h1, 2 projections of layer 2, logits
    torch.testing.assert_close(out["host"], out["disk"], rtol=0, atol=0)


def test_big_chunks_are_halved(cdata, monkeypatch):
    """``chunk_bytes`` bounds the rows a chunk gathers: ranges are halved (more, smaller
    blocks), the logits do not change."""
    m = _model(cdata, "gcn", 16, 2)
    sampler = NeighborSampler(cdata.graph, [-1, -1])
    calls = []
    full_block = sampler.full_block
    monkeypatch.setattr(sampler, "full_block", lambda a, b: calls.append((a, b))
                        or full_block(a, b))
    want = layerwise_inference(m, sampler, cdata.feat, CPU)
    n_big = len(calls)
    calls.clear()
    rows = 10
    got = layerwise_inference(m, sampler, cdata.feat, CPU, chunk_bytes=4 * cdata.num_features
                              * rows)
    # layer 1 reads layer 0's projections, in host memory: one whole-graph block, no split
    assert calls[-1] == (0, cdata.num_nodes) and n_big == 2
    layer0 = calls[:-1]
    assert len(layer0) > 50
    # the chunks that were run (the ranges not split further) gather at most `rows` rows
    # or are single vertices
    ran = [(a, b) for a, b in layer0 if not any(c != (a, b) and a <= c[0] and c[1] <= b
                                                for c in layer0)]
    for a, b in ran:
        s, e = cdata.graph.indptr[a], cdata.graph.indptr[b]
        distinct = np.union1d(cdata.graph.indices[s:e], np.arange(a, b)).shape[0]
        assert distinct <= rows or b - a == 1
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


# -- what layer 0 reads ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("hidden", [3, 16])
def test_reads_through_the_training_cache(cdata, dtype, hidden):
    """Evaluation through a filled cache (hits from its buffer, misses from the host) sees the
    features training saw -- rounded to the cache's dtype -- and leaves the cache's counters,
    slots and buffer as they were."""
    stream, ctx = sampled_stream(cdata)
    cache = FeatureCache(cdata.feat, make_policy("layer", ctx), 150, dtype=dtype)
    for ids in stream[:5]:
        cache.announce(ids)
    for ids in stream[:3]:
        cache.gather(ids)
    counters, slots = cache.counters.copy(), cache.directory.slot_of.copy()
    buf = cache.buffer.clone()
    m = _model(cdata, "sage", hidden, 2)
    sampler = NeighborSampler(cdata.graph, [-1, -1])
    rounded = torch.from_numpy(cdata.feat).to(dtype).to(torch.float32)
    got = layerwise_inference(m, sampler, cache, CPU, batch_edges=200)
    want = layerwise_inference(m, sampler, rounded, CPU, batch_edges=200)
    assert torch.equal(got, want)
    assert cache.counters.__dict__ == counters.__dict__
    assert np.array_equal(cache.directory.slot_of, slots) and torch.equal(cache.buffer, buf)
    host = HostFeatures(cdata.feat, dtype=dtype)
    assert torch.equal(layerwise_inference(m, sampler, host, CPU, batch_edges=200), want)
    assert host.counters.feature_rows == 0


def test_a_read_only_memory_map_is_read_without_a_copy(cdata, tmp_path, monkeypatch):
    np.save(tmp_path / "feat.npy", cdata.feat)
    mapped = np.load(tmp_path / "feat.npy", mmap_mode="r")
    m = _model(cdata, "sage", 16, 2)
    sampler = NeighborSampler(cdata.graph, [-1, -1])
    big = []
    real_to = torch.Tensor.to

    def spy_to(self, *a, **k):  # no whole-table conversion or device copy of the input
        if self.shape and self.shape[0] == cdata.num_nodes and self.shape[-1] == 8:
            big.append(self.shape)
        return real_to(self, *a, **k)

    monkeypatch.setattr(torch.Tensor, "to", spy_to)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = layerwise_inference(m, sampler, mapped, CPU, batch_edges=200)
    monkeypatch.undo()
    assert big == []
    torch.testing.assert_close(got, reference_inference(m, sampler, torch.from_numpy(
        cdata.feat)), rtol=1e-5, atol=1e-5)


def test_eval_features_is_the_loaders_source(cdata, tmp_path):
    from test_train import cfg
    loader = make_loader(cfg(tmp_path / "o", feat_dtype="float16", schedule="random"), cdata,
                         CPU)
    src = eval_features(cdata, loader)
    assert src is loader.features and src.dtype == torch.float16
    assert src.host.array is cdata.feat  # the data's own table, not a converted copy


# -- relabelling ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, k", [(50, 200), (100_000, 30), (1000, 1000)])
def test_relabel_both_ways_agree_with_unique(n, k):
    rng = np.random.default_rng(n + k)
    r = Relabel(n)
    for _ in range(3):  # the mark array is reset between chunks
        a = int(rng.integers(0, n - 5))
        b = a + int(rng.integers(1, 5))
        idx = rng.integers(0, n, k).astype(np.int64)
        u, local, pos = r(idx, a, b)
        want = np.unique(np.concatenate([idx, np.arange(a, b)]))
        assert np.array_equal(u, want) and np.array_equal(u[local], idx)
        assert np.array_equal(u[pos:pos + b - a], np.arange(a, b))
        ut, lt, kt = relabel_on_device(torch.from_numpy(idx), a, b)
        assert np.array_equal(ut.numpy(), want) and np.array_equal(lt.numpy(), local)
        assert kt == pos


# -- the memory rule ------------------------------------------------------------------------------------
def _fake_proc(tmp_path, cgroup_line, meminfo_kb=8 << 20):
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text(f"MemTotal: 99999999 kB\nMemAvailable: {meminfo_kb} kB\n")
    (proc / "self" / "cgroup").write_text(cgroup_line + "\n")
    return proc


def test_available_host_bytes_reads_meminfo_and_the_cgroup(tmp_path):
    cg = tmp_path / "cg"
    v1 = cg / "memory" / "cap3"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(str(3 << 30))
    (v1 / "memory.usage_in_bytes").write_text(str(2 << 30))
    (v1 / "memory.stat").write_text(f"cache 5\ntotal_inactive_file {256 << 20}\n"
                                    f"total_active_file {512 << 20}\n")
    proc = _fake_proc(tmp_path, "9:memory:/cap3")
    assert available_host_bytes(str(proc), str(cg)) == (1 << 30) + (256 << 20)
    # the active file pages too: what anonymous memory could take if the cache gave way
    assert fillable_host_bytes(str(proc), str(cg)) == (1 << 30) + (768 << 20)
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712")  # no limit
    assert available_host_bytes(str(proc), str(cg)) == (8 << 20) * 1024
    v2 = cg / "box"
    v2.mkdir()
    (v2 / "memory.max").write_text(str(1 << 30))
    (v2 / "memory.current").write_text(str(1 << 29))
    (v2 / "memory.stat").write_text("inactive_file 0\n")
    proc = _fake_proc(tmp_path / "2", "0::/box")
    assert available_host_bytes(str(proc), str(cg)) == 1 << 29
    (v2 / "memory.max").write_text("max\n")
    assert available_host_bytes(str(proc), str(cg)) == (8 << 20) * 1024
    assert available_host_bytes(str(tmp_path / "none"), str(cg)) is None


def test_table_place():
    gib = 1 << 30
    assert table_place(gib, "cpu", host_bytes=4 * gib) == "host"
    assert table_place(gib, "cpu", host_bytes=2 * gib - 1) == "disk"
    assert table_place(gib, "cuda", host_bytes=4 * gib, device_bytes=2 * gib) == "device"
    assert table_place(gib, "cuda", host_bytes=4 * gib, device_bytes=gib) == "host"
    assert table_place(gib, "cuda", host_bytes=gib, device_bytes=gib) == "disk"


# -- the run ---------------------------------------------------------------------------------------------
@pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="needs Linux PSS")
def test_a_run_with_scratch_tables_reports_pss_and_leaves_no_files(cdata, tmp_path, monkeypatch,
                                                                   places):
    import json

    from test_train import cfg
    for mod in (tables_mod, passes_mod):
        monkeypatch.setattr(mod, "available_host_bytes", lambda: 1)
    res = tr.train(cfg(tmp_path / "o", epochs=1, schedule="random"), data=cdata)
    assert places and set(places) == {"disk"}
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["checkpoint.pt",
                                                                   "epochs.csv",
                                                                   "metrics.json"]
    m = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert m["peak_pss_mib"] > 0 and m["peak_rss_mib"] > 0
    assert m["test_acc"] == res.test_acc is not None
