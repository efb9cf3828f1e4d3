"""The host row cache of a memory-mapped feature table larger than memory (issue 19, item 6):
hits from the cache and misses from the table give exactly the table's rows (any dtype, with
a row map), only misses are read ahead, the rows come from a policy's rank, the automatic size
leaves the structure and the batches their memory, and training with it is training without
it, counted per epoch."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import community_data
from test_cache import sampled_stream

from twopgraph.cache import FeatureCache, HostFeatures, attach_host_cache, make_policy
from twopgraph.cache.host import HostTable
from twopgraph.cache.hostrows import HostRowCache, host_cache_rows
from twopgraph.errors import ConfigError
from twopgraph.locality import RandomScheduler
from twopgraph.pipeline.loader import Loader
from twopgraph.sampler import NeighborSampler


@pytest.fixture(scope="module")
def cdata():
    return community_data()


@pytest.fixture
def mapped(tmp_path, cdata):
    np.save(tmp_path / "feat.npy", cdata.feat)
    return np.load(tmp_path / "feat.npy", mmap_mode="r")


@pytest.mark.parametrize("share", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_take_is_the_table_whatever_is_cached(mapped, cdata, share, dtype):
    rng = np.random.default_rng(0)
    n = cdata.num_nodes
    kept = rng.permutation(n)[:int(share * n)]
    cache = HostRowCache(mapped, np.concatenate([kept, kept[:5]]))  # duplicates merge
    assert cache.num_rows == kept.shape[0]
    ids = rng.integers(0, n, 500)
    want = torch.from_numpy(cdata.feat[ids])
    got = cache.take(ids, mapped)
    assert got.dtype == torch.float32 and torch.equal(got, want)
    if dtype is not None:
        out = torch.empty(500, cdata.feat.shape[1], dtype=dtype)
        assert cache.take(ids, mapped, out) is out
        assert torch.equal(out, want.to(dtype))
    hits = int(np.isin(ids, kept).sum())
    assert cache.counts() == (hits * (2 if dtype else 1), 500 * (2 if dtype else 1))
    assert sorted(cache.misses(ids).tolist()) == sorted(ids[~np.isin(ids, kept)].tolist())


def test_cache_holds_a_copy_in_anonymous_memory(mapped):
    cache = HostRowCache(mapped, np.arange(10))
    assert cache.data.data_ptr() != torch.from_numpy(np.asarray(mapped)).data_ptr()
    assert cache.nbytes == 10 * mapped.shape[1] * 4
    assert cache.record()["rows"] == 10 and cache.record()["hit_rate"] is None


def test_bad_rows_are_refused(mapped):
    with pytest.raises(ConfigError, match=r"in \[0, "):
        HostRowCache(mapped, np.array([mapped.shape[0]]))
    with pytest.raises(ConfigError, match="2-D"):
        HostRowCache(np.zeros(5, np.float32), np.array([0]))


@pytest.mark.parametrize("with_rows", [False, True])
def test_host_table_with_a_row_cache_reads_the_same_rows(tmp_path, cdata, with_rows):
    n = cdata.num_nodes
    if with_rows:  # a part: local id i reads host row 2 (n - 1 - i) of a larger table
        big = np.zeros((2 * n, cdata.feat.shape[1]), np.float32)
        rows = (np.arange(n, dtype=np.int64)[::-1]) * 2
        big[rows] = cdata.feat
    else:
        big, rows = cdata.feat, None
    np.save(tmp_path / "t.npy", big)
    table = np.load(tmp_path / "t.npy", mmap_mode="r")
    plain, cached = HostTable(table, rows=rows), HostTable(table, rows=rows)
    cached.attach_row_cache(HostRowCache(table, cached.host_rows(np.arange(0, n, 3))))
    ids = np.random.default_rng(1).integers(0, n, 400)
    assert torch.equal(cached.take(ids), plain.take(ids))
    assert torch.equal(cached.take(ids, advise=True), torch.from_numpy(cdata.feat[ids]))
    assert torch.equal(cached.slice(3, 40), plain.slice(3, 40))


def test_only_misses_are_read_ahead(mapped, cdata):
    src = HostFeatures(mapped)
    if not src.readahead.active:
        pytest.skip("no madvise on this OS")
    src.host.attach_row_cache(HostRowCache(mapped, np.arange(0, cdata.num_nodes, 2)))
    seen = []
    src.readahead.advise = lambda rows, count=True: seen.append(np.asarray(rows)) or (0, 0)
    ids = np.arange(40)
    src.advise(ids)
    src.read(ids)
    assert [s.tolist() for s in seen] == [list(range(1, 40, 2))] * 2


def test_rows_come_from_the_policy_rank(mapped, cdata):
    _, ctx = sampled_stream(cdata)
    src = HostFeatures(mapped)
    f = mapped.shape[1] * 4
    cache = attach_host_cache(src, "degree", ctx, gb=50 * f / 2**30)
    assert cache is not None and src.host.row_cache is cache
    want = make_policy("degree", ctx).initial_rows(50)
    assert sorted(np.flatnonzero(cache.slot >= 0).tolist()) == sorted(want.tolist())
    # a device cache's host table takes one as well
    dev = FeatureCache(mapped, make_policy("degree", ctx), 30)
    assert attach_host_cache(dev, "degree", ctx, gb=20 * f / 2**30).num_rows == 20


def test_when_no_cache_is_built(mapped, cdata):
    _, ctx = sampled_stream(cdata)
    assert attach_host_cache(HostFeatures(mapped), "none", ctx, gb=1.0) is None
    # an in-memory table has nothing to gain
    assert attach_host_cache(HostFeatures(cdata.feat), "degree", ctx, gb=1.0) is None
    # auto: the table fits in half of what is left -> none; else a share of what is left
    nbytes = mapped.nbytes
    assert attach_host_cache(HostFeatures(mapped), "auto", ctx, available=2 * nbytes) is None
    got = attach_host_cache(HostFeatures(mapped), "auto", ctx, available=nbytes // 2,
                            structure_bytes=2 * (nbytes // 8))
    assert got is not None and got.policy == "degree"
    assert got.num_rows == int(0.5 * (nbytes // 2 - 2 * (nbytes // 8))) // (mapped.shape[1] * 4)


def test_host_cache_rows():
    assert host_cache_rows(100, 10, 10, 0, None) == 0
    assert host_cache_rows(100, 10, 10, 0, 200) == 0  # fits
    assert host_cache_rows(100, 10, 10, 0, 199) == 9
    assert host_cache_rows(100, 10, 10, 120, 100) == 0  # nothing left
    assert host_cache_rows(10**6, 10, 10, 0, 1000) == 10  # at most every row


def test_loader_counts_host_cache_hits_per_epoch(mapped, cdata):
    src = HostFeatures(mapped)
    cache = HostRowCache(mapped, np.arange(0, cdata.num_nodes, 4))
    src.host.attach_row_cache(cache)
    loader = Loader(RandomScheduler(cdata.train_idx, 64, seed=0),
                    NeighborSampler(cdata.graph, [5, 5], seed=0), src, threads=1)
    got = [mb.features for mb in loader.epoch(0)]
    s = loader.stats
    assert s.host_cache_lookups == s.feature_rows == cache.lookups > 0
    assert 0 < s.host_cache_hits == cache.hits < s.host_cache_lookups
    plain = Loader(RandomScheduler(cdata.train_idx, 64, seed=0),
                   NeighborSampler(cdata.graph, [5, 5], seed=0), HostFeatures(mapped),
                   threads=1)
    assert all(torch.equal(a, b.features) for a, b in zip(got, plain.epoch(0)))


def test_training_with_a_host_cache_is_training_without(tmp_path):
    from twopgraph.cli import main
    runs = {}
    for hc in ("none", "degree"):
        out = tmp_path / hc
        size = [] if hc == "none" else ["--host-cache-gb", "0.00005"]
        assert main(["train", "--dataset", "synthetic-tiny", "--data-root", str(tmp_path / "d"),
                     "--epochs", "1", "--batch-size", "256", "--out", str(out), "--no-progress",
                     "--host-cache", hc, *size]) == 0
        runs[hc] = json.loads((out / "metrics.json").read_text())
    none, deg = runs["none"], runs["degree"]
    assert none["host_cache"] is None
    assert 0 < deg["host_cache"]["rows"] < deg["dataset"]["num_nodes"]
    e = deg["epochs"][0]
    assert 0 < e["host_cache_hits"] < e["host_cache_lookups"] == e["feature_rows"]
    assert deg["test_acc"] == none["test_acc"] and deg["val_acc"] == none["val_acc"]
    assert deg["epochs"][0]["loss"] == none["epochs"][0]["loss"]


def test_bad_host_cache_flags(tmp_path, capsys):
    from twopgraph.cli import main
    for flags, msg in ((["--host-cache", "lru"], "host-cache must be auto or a cache policy"),
                       (["--host-cache", "degree", "--host-cache-gb", "-1"],
                        "host-cache-gb must be"),
                       (["--host-cache-gb", "1"], "give --host-cache auto or a policy")):
        assert main(["train", "--dataset", "synthetic-tiny", "--out", str(tmp_path / "o"),
                     *flags]) == 2
        assert msg in capsys.readouterr().err


def test_readahead_flag(tmp_path, capsys):
    """``--readahead on`` advises a memory-mapped table even when it fits (auto would not),
    ``off`` never does; the same training either way."""
    from twopgraph.cache.readahead import _CAN_ADVISE
    from twopgraph.cli import main
    got = {}
    for ra in ("on", "off", "auto"):
        out = tmp_path / ra
        assert main(["train", "--dataset", "synthetic-tiny", "--data-root", str(tmp_path / "d"),
                     "--epochs", "1", "--batch-size", "256", "--out", str(out), "--no-progress",
                     "--readahead", ra]) == 0
        got[ra] = json.loads((out / "metrics.json").read_text())
    ranges = {k: m["epochs"][0]["readahead_ranges"] for k, m in got.items()}
    assert ranges["off"] == ranges["auto"] == 0  # the tiny table fits: auto is off
    assert (ranges["on"] > 0) == _CAN_ADVISE
    assert got["on"]["test_acc"] == got["off"]["test_acc"] == got["auto"]["test_acc"]
    capsys.readouterr()
    assert main(["train", "--dataset", "synthetic-tiny", "--out", str(tmp_path / "x"),
                 "--readahead", "maybe"]) == 2
    assert "unknown readahead 'maybe'" in capsys.readouterr().err


def test_an_explicit_host_cache_that_cannot_be_built_says_so(tmp_path, caplog, cdata):
    """A table held in memory (here a caller's arrays) gets no host row cache: one warning."""
    from twopgraph.config import TrainConfig
    from twopgraph.run.train import train
    cfg = TrainConfig.of(epochs=1, out=str(tmp_path / "o"), host_cache="degree",
                         host_cache_gb=0.001, progress=False, batch_size=256)
    with caplog.at_level("WARNING", logger="twopgraph"):
        train(cfg, cdata)
    assert "--host-cache degree: no host row cache" in caplog.text
    assert json.loads((tmp_path / "o" / "metrics.json").read_text())["host_cache"] is None
