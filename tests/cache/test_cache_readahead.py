"""The one host copy of the features (issue 11): sources read the host table as it is given
(a memory map stays a memory map, no whole-table conversion), reusable staging buffers, the
row map of a part's source, read-ahead of sampled rows (page ranges vs their plain-Python
twin, the ``madvise`` calls, the sampling worker calling it before the batch is queued, the
epoch's ``readahead_*`` counts)."""

from __future__ import annotations

import mmap
import os
import threading
import warnings

import numpy as np
import pytest
import torch
from conftest import community_data
from test_cache import sampled_stream

from twopgraph.cache import FeatureCache, HostFeatures, build_feature_source, make_policy
from twopgraph.cache.host import HostTable, Staging
from twopgraph.cache.readahead import PAGE, Readahead, find_mmap, page_ranges, page_ranges_reference
from twopgraph.errors import ConfigError
from twopgraph.locality import RandomScheduler
from twopgraph.pipeline.loader import Loader
from twopgraph.sampler import NeighborSampler


@pytest.fixture(scope="module")
def cdata():
    return community_data()


@pytest.fixture
def mapped(tmp_path, cdata):
    """The community features as a read-only memory map of a ``.npy`` file (a store's
    ``feat.npy``)."""
    np.save(tmp_path / "feat.npy", cdata.feat)
    return np.load(tmp_path / "feat.npy", mmap_mode="r")


class FakeMap:
    """Stands in for the ``mmap.mmap`` of a :class:`Readahead`: records ``madvise`` calls."""

    def __init__(self, size):
        self.size, self.calls = size, []
        self.lock = threading.Lock()

    def __len__(self):
        return self.size

    def madvise(self, option, start, length):
        with self.lock:
            self.calls.append((option, start, length))


# -- page ranges -----------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
def test_page_ranges_match_the_reference(seed):
    rng = np.random.default_rng(seed)
    page = int(rng.choice([64, 512, 4096]))
    row_len = int(rng.integers(1, 3 * page))
    stride = row_len + int(rng.choice([0, 0, rng.integers(1, page)]))
    offset = int(rng.integers(0, 2 * page))
    n = int(rng.integers(1, 3000))
    for gap in (0, 1, 3):
        for k in (0, 1, 5, 200, n):
            rows = np.sort(rng.integers(0, n, k)).astype(np.int64)  # with duplicates
            got = page_ranges(rows, offset, stride, row_len, page, gap)
            want = page_ranges_reference(rows, offset, stride, row_len, page, gap)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
            if k:  # ascending, disjoint, separated by more than the gap, covering every row
                s, e = got
                assert (s < e).all() and (s[1:] > e[:-1] + gap).all()
                first = (offset + rows * stride) // page
                last = (offset + rows * stride + row_len - 1) // page
                i = np.searchsorted(s, first, side="right") - 1
                assert (i >= 0).all() and (last < e[i]).all()


def test_page_ranges_merge_neighbours():
    # rows of 1000 bytes on pages of 4096: rows 0..4 on pages 0-1, row 40 on pages 9-10
    s, e = page_ranges(np.array([0, 1, 2, 3, 4, 40]), 0, 1000, 1000, 4096)
    assert s.tolist() == [0, 9] and e.tolist() == [2, 11]
    # row 20 on pages 4-5: 3 pages after row 0's page 0, merged with gap_pages=3, not 2
    s, e = page_ranges(np.array([0, 20]), 0, 1000, 1000, 4096, gap_pages=3)
    assert s.tolist() == [0] and e.tolist() == [6]
    s, e = page_ranges(np.array([0, 20]), 0, 1000, 1000, 4096, gap_pages=2)
    assert s.tolist() == [0, 4] and e.tolist() == [1, 6]


# -- finding the mapping ---------------------------------------------------------------------------
def test_find_mmap(mapped, cdata):
    mm, off = find_mmap(mapped)
    assert isinstance(mm, mmap.mmap)
    header = len(mm) - mapped.nbytes  # .npy header before the data
    assert off == header > 0
    assert find_mmap(mapped[5:])[1] == header + 5 * mapped.strides[0]
    assert find_mmap(cdata.feat) is None  # an in-memory array
    assert not Readahead(cdata.feat).active
    assert not Readahead(mapped, enabled=False).active


@pytest.mark.skipif(not hasattr(mmap.mmap, "madvise"), reason="no madvise on this OS")
def test_readahead_advises_the_pages_of_the_rows(mapped):
    ra = Readahead(mapped)
    assert ra.active
    rows = np.array([7, 3, 3, 300, 301, 599])
    n, nbytes = ra.advise(rows)  # the real madvise: no error
    size = len(find_mmap(mapped)[0])
    s, e = page_ranges(np.unique(rows), find_mmap(mapped)[1], mapped.strides[0],
                       mapped.shape[1] * 4, PAGE)
    starts, ends = s * PAGE, np.minimum(e * PAGE, size)  # the last page ends with the file
    assert n == s.shape[0] == 3 and nbytes == int((ends - starts).sum())
    assert ra.counts() == (n, nbytes)
    fake = ra._mm = FakeMap(size)
    ra.advise(rows)
    assert [c[0] for c in fake.calls] == [mmap.MADV_WILLNEED] * n
    assert [(c[1], c[1] + c[2]) for c in fake.calls] == list(zip(starts.tolist(),
                                                                 ends.tolist()))
    assert ra.counts() == (2 * n, 2 * nbytes)


# -- one host copy ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [None, torch.float16])
def test_sources_keep_the_host_table_as_it_is(mapped, cdata, dtype):
    """No whole-table conversion or copy: the source reads the memory map itself, the rows
    come converted per gather, and reading a read-only map does not warn."""
    _, ctx = sampled_stream(cdata)
    want = torch.from_numpy(cdata.feat)
    if dtype is not None:
        want = want.to(dtype).to(torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        srcs = [HostFeatures(mapped, dtype=dtype),
                FeatureCache(mapped, make_policy("degree", ctx), 100, dtype=dtype)]
        for src in srcs:
            assert src.host.array is mapped
            assert src.host.tensor.data_ptr() == mapped.__array_interface__["data"][0]
            ids = np.array([5, 0, 599, 17])
            out, _ = src.gather(ids)
            assert torch.equal(out, want[ids])
            assert torch.equal(src.read(ids), want[ids])
            assert torch.equal(src.read_range(10, 20), want[10:20])
            assert src.row_bytes == cdata.feat.shape[1] * (2 if dtype else 4)


def test_staging_is_reused_and_grows():
    s = Staging(pinned=False)
    a = s.take(10, 4, torch.float32)
    b = s.take(10, 4, torch.float32)
    assert s.allocations == 2 and a.data_ptr() != b.data_ptr()  # two slots in turn
    c = s.take(6, 4, torch.float32)
    assert s.allocations == 2 and c.data_ptr() == a.data_ptr()  # reused, not reallocated
    s.take(30, 4, torch.float32)  # slot 2 grows
    assert s.allocations == 3 and s.nbytes == 4 * (40 + 120)
    s.take(3, 4, torch.float16)  # another dtype: a new buffer
    assert s.allocations == 4


def test_host_table_refuses_bad_input(cdata):
    with pytest.raises(ConfigError, match="2-D"):
        HostTable(np.zeros(4, dtype=np.float32))
    with pytest.raises(ConfigError, match="NumPy array or torch tensor"):
        HostTable([[1.0]])
    with pytest.raises(ConfigError, match="rows must be host rows"):
        HostTable(cdata.feat, rows=np.array([0, cdata.num_nodes]))


# -- the row map -----------------------------------------------------------------------------------
@pytest.mark.parametrize("policy, ratio", [("none", 0.0), ("layer", 0.2), ("degree", 0.3)])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_source_with_rows_is_a_source_over_feat_rows(cdata, policy, ratio, dtype):
    """A source over the whole table with ``rows`` = a source over ``feat[rows]``: the same
    rows, counters, buffer contents; reads and read-ahead go to the mapped host rows."""
    stream, ctx = sampled_stream(cdata)
    rng = np.random.default_rng(0)
    n = cdata.num_nodes
    big = rng.normal(size=(3 * n, cdata.feat.shape[1])).astype(np.float32)
    rows = rng.choice(3 * n, n, replace=False).astype(np.int64)
    big[rows] = cdata.feat
    mapped = build_feature_source(policy, big, ctx, "cpu", ratio=ratio, dtype=dtype, rows=rows)
    plain = build_feature_source(policy, cdata.feat, ctx, "cpu", ratio=ratio, dtype=dtype)
    assert type(mapped) is type(plain) and mapped.num_rows == n == plain.num_rows
    assert mapped.budget == plain.budget and mapped.row_bytes == plain.row_bytes
    la = plain.lookahead or 0
    for t, ids in enumerate(stream):
        for src in (mapped, plain):
            if t == 0:
                for k in range(min(len(stream), la)):
                    src.announce(stream[k])
            if t + la < len(stream) and la:
                src.announce(stream[t + la])
        x, _ = mapped.gather(ids)
        y, _ = plain.gather(ids)
        assert torch.equal(x, y)
    assert mapped.counters.__dict__ == plain.counters.__dict__
    ids = np.array([3, 1, n - 1])
    assert torch.equal(mapped.read(ids), plain.read(ids))
    assert torch.equal(mapped.read_range(5, 50), plain.read_range(5, 50))
    if policy != "none":
        assert torch.equal(mapped.buffer, plain.buffer)


def test_rows_map_drives_the_readahead(tmp_path, cdata):
    n, f = cdata.num_nodes, cdata.feat.shape[1]
    np.save(tmp_path / "big.npy", np.zeros((4 * n, f), dtype=np.float32))
    big = np.load(tmp_path / "big.npy", mmap_mode="r")
    rows = np.arange(n, dtype=np.int64)[::-1] * 4  # local id i -> host row 4 (n - 1 - i)
    src = HostFeatures(big, rows=rows)
    if not src.readahead.active:
        pytest.skip("no madvise on this OS")
    fake = src.readahead._mm = FakeMap(len(src.readahead._mm))
    ids = np.array([0, 2])
    src.advise(ids)
    off, stride = find_mmap(big)[1], big.strides[0]
    want = page_ranges(np.sort(rows[ids]), off, stride, f * 4)
    assert [(c[1] // PAGE, -(-(c[1] + c[2]) // PAGE)) for c in fake.calls] == list(
        zip(want[0].tolist(), want[1].tolist()))


def test_cache_advises_only_rows_outside_the_buffer(mapped, cdata):
    _, ctx = sampled_stream(cdata)
    cache = FeatureCache(mapped, make_policy("degree", ctx), 300)
    if not cache.readahead.active:
        pytest.skip("no madvise on this OS")
    cache.gather(np.array([0]))  # the initial fill
    cached = cache.directory.cached_rows()
    seen = []
    cache.host.advise = lambda ids: seen.append(np.asarray(ids).copy()) or (0, 0)
    ids = np.arange(cdata.num_nodes)
    cache.advise(ids)
    assert sorted(seen[0].tolist()) == sorted(set(ids.tolist()) - set(cached.tolist()))


# -- the loader ------------------------------------------------------------------------------------
@pytest.mark.parametrize("threads", [1, 8])
def test_sampling_workers_advise_each_batch_before_it_is_gathered(mapped, cdata, threads):
    sampler = NeighborSampler(cdata.graph, [5, 5], seed=0)
    sched = RandomScheduler(cdata.train_idx, 64, seed=0)
    src = HostFeatures(mapped)
    if not src.readahead.active:
        pytest.skip("no madvise on this OS")
    events = []
    lock = threading.Lock()
    advise, gather = src.advise, src.gather

    def spy_advise(ids):
        with lock:
            events.append(("advise", threading.current_thread().name, ids.numpy().copy()))
        return advise(ids)

    def spy_gather(ids):
        with lock:
            events.append(("gather", threading.current_thread().name, np.asarray(ids).copy()))
        return gather(ids)

    src.advise, src.gather = spy_advise, spy_gather
    loader = Loader(sched, sampler, src, threads=threads, prefetch=2)
    n = sum(1 for _ in loader.epoch(0))
    advised = [e for e in events if e[0] == "advise"]
    gathered = [e for e in events if e[0] == "gather"]
    assert len(advised) == len(gathered) == n == sched.num_batches
    for j, g in enumerate(events):  # every gathered batch was advised before
        if g[0] == "gather":
            assert any(e[0] == "advise" and np.array_equal(e[2], g[2]) for e in events[:j])
    if threads > 1:
        assert all(e[1].startswith("twopgraph-sampler") for e in advised)
    stats = loader.stats.as_dict()
    assert stats["readahead_ranges"] == src.readahead.ranges > 0
    assert stats["readahead_bytes"] == src.readahead.bytes >= stats["readahead_ranges"] * PAGE
    # the next epoch counts its own
    sum(1 for _ in loader.epoch(1))
    assert 0 < loader.stats.readahead_bytes < src.readahead.bytes


def test_no_readahead_for_an_in_memory_table(cdata):
    loader = Loader(RandomScheduler(cdata.train_idx, 64, seed=0),
                    NeighborSampler(cdata.graph, [5, 5], seed=0), HostFeatures(cdata.feat),
                    threads=1)
    sum(1 for _ in loader.epoch(0))
    assert loader.stats.readahead_ranges == loader.stats.readahead_bytes == 0


def test_reads_of_no_rows(cdata):
    _, ctx = sampled_stream(cdata)
    for src in (HostFeatures(cdata.feat), FeatureCache(cdata.feat, make_policy("degree", ctx),
                                                       50)):
        out = src.read(np.empty(0, dtype=np.int64))
        assert out.shape == (0, cdata.feat.shape[1]) and out.dtype == torch.float32


def test_read_ahead_only_a_table_larger_than_memory(monkeypatch):
    """Training reads ahead (and marks the map MADV_RANDOM) only for a table larger than half
    the memory the process can fill: one that stays in the page cache gains nothing."""
    import twopgraph.runtime.memory as metrics
    from twopgraph.cache.readahead import worth_reading_ahead
    monkeypatch.setattr(metrics, "available_host_bytes", lambda: 1000)
    assert worth_reading_ahead(501) and not worth_reading_ahead(500)
    monkeypatch.setattr(metrics, "available_host_bytes", lambda: None)
    assert not worth_reading_ahead(10**12)


# -- pages already in the page cache are not advised (--readahead auto) ------------------------
def _evict(path, ranges=None) -> None:
    """Drop ``path``'s clean pages (all, or the page ranges ``[(first, count)]``) from the
    page cache."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())
        for first, count in ranges or [(0, 0)]:
            os.posix_fadvise(f.fileno(), first * PAGE, count * PAGE, os.POSIX_FADV_DONTNEED)


@pytest.fixture
def paged(tmp_path):
    """A 400 x 1024 float32 ``.npy`` (4 KiB rows, one page each but for the header's
    offset) mapped read-only, its path, and rows every 4th of 0..156: 40 disjoint two-page
    ranges."""
    path = tmp_path / "paged.npy"
    np.save(path, np.arange(400 * 1024, dtype=np.float32).reshape(400, 1024))
    table = np.load(path, mmap_mode="r")
    ra = Readahead(table, skip_resident=True)
    if not ra.active or ra.residency is None or not ra.residency.available:
        pytest.skip("no madvise / mincore on this OS")
    _evict(path)
    if ra.residency.pages(0, 10).any():
        pytest.skip("this file system keeps its pages cached (tmpfs?)")
    return path, table, ra, np.arange(0, 160, 4, dtype=np.int64)


def test_residency_reads_the_page_cache(paged):
    path, table, ra, _ = paged
    pages = -(-len(find_mmap(table)[0]) // PAGE)
    assert not ra.residency.pages(0, pages).any()
    with open(path, "rb") as f:
        f.read()  # into the page cache, without mapping anything
    assert ra.residency.pages(0, pages).all()
    _evict(path, [(7, 3)])
    got = ra.residency.pages(0, pages)
    assert not got[7:10].any() and got[:7].all() and got[10:].all()


@pytest.mark.parametrize("chunk", [None, 3, 1])
def test_advise_leaves_out_resident_pages(paged, monkeypatch, chunk):
    """``chunk``: the span asked about in chunks of that many pages (ranges across their
    boundaries), or the default."""
    import twopgraph.cache.readahead as readahead
    if chunk is not None:
        monkeypatch.setattr(readahead, "SPAN_CHUNK_PAGES", chunk)
    path, table, ra, rows = paged
    off = find_mmap(table)[1]
    starts, ends = page_ranges(rows, off, table.strides[0], table.shape[1] * 4)
    assert starts.shape[0] == 40
    size = len(ra._mm)
    fake = ra._mm = FakeMap(size)  # the calls recorded; residency still read from the file

    def advised():
        got = [(c[1] // PAGE, -(-(c[1] + c[2]) // PAGE)) for c in fake.calls]
        fake.calls.clear()
        return got

    # nothing resident: every range (at least half the probes miss)
    assert ra.advise(rows)[0] == 40
    assert advised() == list(zip(starts.tolist(), ends.tolist())) and ra.skipped == 0
    # everything resident: no call at all
    with open(path, "rb") as f:
        f.read()
    assert ra.advise(rows) == (0, 0) and advised() == [] and ra.skipped == 40
    # a few ranges lost a page (the last of three, the first of two): exactly those
    lost = [3, 11, 20, 27, 35]
    _evict(path, [(int(ends[i]) - 1 if i < 25 else int(starts[i]), 1) for i in lost])
    assert ra.advise(rows)[0] == len(lost)
    assert advised() == [(int(starts[i]), int(ends[i])) for i in lost]
    assert ra.skipped == 40 + 40 - len(lost)
    assert ra.counts()[0] == 40 + len(lost)
    # without skip_resident every range is advised whatever is cached
    ra.skip_resident = False
    assert ra.advise(rows)[0] == 40 and len(advised()) == 40


def test_readahead_auto_skips_resident_pages_on_explicit_on_it_does_not(tmp_path, monkeypatch):
    """``make_loader``: ``--readahead auto`` (a table larger than memory) turns on
    ``skip_resident``; ``on`` advises every range."""
    import twopgraph.pipeline.assemble as pipeline
    from twopgraph.config import TrainConfig
    from twopgraph.datasets import load_dataset
    from twopgraph.pipeline.assemble import make_loader
    data = load_dataset("synthetic-tiny", data_root=str(tmp_path), progress=False)
    monkeypatch.setattr(pipeline, "worth_reading_ahead", lambda nbytes: True)
    for mode, skip in (("auto", True), ("on", False)):
        cfg = TrainConfig.of(dataset="synthetic-tiny", data_root=str(tmp_path),
                             readahead=mode, schedule="random")
        cfg, _ = cfg.resolved(data.num_nodes)
        loader = make_loader(cfg, data, torch.device("cpu"))
        ra = loader.features.readahead
        if ra is None or not ra.active:
            pytest.skip("the store is not a memory map here / no madvise")
        assert ra.skip_resident is skip
