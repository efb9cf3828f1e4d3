"""Schedulers: exactly-once coverage, exact batch sizes, reproducibility, locality, balance."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import community_data

from twopgraph.cli import main as cli_main
from twopgraph.config import TrainConfig
from twopgraph.errors import ConfigError
from twopgraph.locality import LocalityScheduler, RandomScheduler, cluster_graph, make_scheduler
from twopgraph.run.train import train

N = 3000


def make(name, train_idx, bs, seed=0, parts=None, labels=None, **kw):
    return make_scheduler(name, train_idx, bs, seed=seed, parts=parts, labels=labels, **kw)


@pytest.fixture(scope="module")
def setup():
    rng = np.random.default_rng(0)
    parts = rng.integers(0, 40, N)
    labels = (parts % 7 + (rng.random(N) < 0.2) * rng.integers(0, 7, N)) % 7  # homophilous
    train_idx = np.sort(rng.choice(N, 1111, replace=False))
    return train_idx, parts, labels


@pytest.mark.parametrize("name", ["random", "locality"])
@pytest.mark.parametrize("bs", [1, 64, 100, 1111, 5000])
@pytest.mark.parametrize("balance", [1, 16])
def test_every_training_vertex_exactly_once_per_epoch(setup, name, bs, balance):
    train_idx, parts, labels = setup
    s = make(name, train_idx, bs, seed=3, parts=parts, labels=labels, balance=balance)
    for epoch in range(3):
        batches = list(s.batches(epoch))
        assert len(batches) == s.num_batches == -(-1111 // bs)
        assert all(len(b) == bs for b in batches[:-1]) and 0 < len(batches[-1]) <= bs
        allb = np.concatenate(batches)
        assert allb.dtype == np.int64
        np.testing.assert_array_equal(np.sort(allb), train_idx)


@pytest.mark.parametrize("name", ["random", "locality"])
def test_drop_last(setup, name):
    train_idx, parts, labels = setup
    s = make(name, train_idx, 100, parts=parts, labels=labels, drop_last=True)
    batches = list(s.batches(0))
    assert len(batches) == s.num_batches == 11 and all(len(b) == 100 for b in batches)


@pytest.mark.parametrize("name", ["random", "locality"])
def test_seed_plus_epoch_reproducibility(setup, name):
    train_idx, parts, labels = setup
    a = make(name, train_idx, 64, seed=5, parts=parts, labels=labels)
    b = make(name, train_idx, 64, seed=5, parts=parts, labels=labels)
    for epoch in range(3):
        for x, y in zip(a.batches(epoch), b.batches(epoch), strict=True):
            np.testing.assert_array_equal(x, y)
    e0 = np.concatenate(list(a.batches(0)))
    assert not np.array_equal(e0, np.concatenate(list(a.batches(1))))
    other = make(name, train_idx, 64, seed=6, parts=parts, labels=labels)
    assert not np.array_equal(e0, np.concatenate(list(other.batches(0))))
    # seed + epoch: (seed 5, epoch 1) is (seed 6, epoch 0)
    np.testing.assert_array_equal(np.concatenate(list(a.batches(1))),
                                  np.concatenate(list(other.batches(0))))


def _clusters_per_batch(parts, batches):
    return np.array([np.unique(parts[b]).shape[0] for b in batches])


def _expected_distinct(sizes, total, k):
    """E[number of clusters among k of ``total`` items drawn without replacement], the
    clusters holding ``sizes`` items: sum_c 1 - C(total - n_c, k) / C(total, k)."""
    from scipy.special import gammaln

    def log_comb(a, b):
        return gammaln(a + 1) - gammaln(b + 1) - gammaln(a - b + 1)
    sizes = np.asarray(sizes, dtype=np.float64)
    rest = np.maximum(total - sizes, k)  # C(rest, k) = 0 when fewer than k items remain
    p_absent = np.where(total - sizes >= k,
                        np.exp(log_comb(rest, k) - log_comb(total, k)), 0.0)
    return float((1.0 - p_absent).sum())


@pytest.mark.parametrize("balance", [1, 16])
def test_locality_batches_are_consecutive_clusters(setup, balance):
    """The epoch lays the clusters out whole, one after the other, in ``cluster_order``; so
    a batch's clusters are exactly those its window of that layout covers. A uniform batch
    touches as many clusters as a uniform draw without replacement would (exact expectation,
    5 standard errors over 10 epochs), more than any locality batch can."""
    train_idx, parts, labels = setup
    loc = make("locality", train_idx, 64, seed=4, parts=parts, labels=labels, balance=balance)
    rnd = make("random", train_idx, 64, seed=4)
    ids, sizes = np.unique(parts[train_idx], return_counts=True)
    expected_rnd = _expected_distinct(sizes, train_idx.shape[0], 64)
    loc_counts, rnd_counts = [], []
    for epoch in range(10):
        order = loc.cluster_order(epoch)
        layout = np.repeat(ids[order], sizes[order])  # cluster of each epoch position
        batches = list(loc.batches(epoch))
        np.testing.assert_array_equal(parts[np.concatenate(batches)], layout)
        want = [np.unique(layout[b * 64:(b + 1) * 64]).shape[0] for b in range(len(batches))]
        got = _clusters_per_batch(parts, batches)
        np.testing.assert_array_equal(got, want)
        loc_counts += got[:-1].tolist()
        rnd_counts += _clusters_per_batch(parts, list(rnd.batches(epoch))[:-1]).tolist()
    rnd_counts = np.array(rnd_counts)
    se = rnd_counts.std(ddof=1) / np.sqrt(rnd_counts.shape[0])
    assert abs(rnd_counts.mean() - expected_rnd) < 5 * se, (rnd_counts.mean(), expected_rnd)
    # 64 consecutive seeds over clusters of >= min(sizes) seeds: at most ceil(63 / min) + 1
    assert max(loc_counts) <= -(-63 // sizes.min()) + 1 < expected_rnd


@pytest.mark.parametrize("n,k,clusters", [(2000, 4, 32), (4000, 8, 64), (3000, 12, 48)])
def test_balance_brings_batch_label_mix_closer_to_the_training_set(n, k, clusters):
    """Label-balanced cluster order gives batches whose label mix is closer (mean L1) to the
    training set's than plain cluster order, for every graph, batch size and seed swept."""
    data = community_data(n=n, k=k, seed=k)
    c = cluster_graph(data.graph, clusters, train_idx=data.train_idx)
    lab = data.label[data.train_idx]
    target = np.bincount(lab, minlength=k) / lab.shape[0]

    def l1(balance, bs, seed):
        s = LocalityScheduler(data.train_idx, bs, parts=c.parts, labels=data.label,
                              balance=balance, seed=seed)
        errs = [np.abs(np.bincount(data.label[b], minlength=k) / len(b) - target).sum()
                for e in range(4) for b in list(s.batches(e))[:-1]]
        return np.mean(errs)

    for bs in (100, 250):
        for seed in range(3):
            plain, balanced = l1(1, bs, seed), l1(16, bs, seed)
            assert balanced < plain, (bs, seed, plain, balanced)


def test_cluster_order_is_reproducible_and_a_permutation(setup):
    train_idx, parts, labels = setup
    s = LocalityScheduler(train_idx, 64, parts=parts, labels=labels, seed=2)
    o = s.cluster_order(3)
    assert sorted(o.tolist()) == list(range(s.num_clusters))
    np.testing.assert_array_equal(o, s.cluster_order(3))


def test_scheduler_errors(setup):
    train_idx, parts, labels = setup
    with pytest.raises(ConfigError):
        make("locality", train_idx, 64)  # no parts
    with pytest.raises(ConfigError):
        make("locality", train_idx, 0, parts=parts)
    with pytest.raises(ConfigError):
        make("locality", train_idx, 64, parts=parts, balance=0)
    with pytest.raises(ConfigError):
        make("locality", train_idx, 64, parts=parts[:10])
    with pytest.raises(ConfigError):
        make("nope", train_idx, 64, parts=parts)
    # random ignores the cluster options
    assert isinstance(make("random", train_idx, 64, parts=parts, labels=labels, balance=3),
                      RandomScheduler)


# -- end to end ---------------------------------------------------------------------------------
def small_cfg(out, **kw):
    base = dict(dataset="community", epochs=2, hidden=16, fanouts=[5, 5], batch_size=64,
                lr=0.01, dropout=0.1, seed=0, device="cpu", out=str(out), progress=False,
                prefetch=2, data_root=str(out) + "-data")
    base.update(kw)
    return TrainConfig.of(**base)


def test_train_locality_is_reproducible_and_learns(tmp_path):
    data = community_data()
    a = train(small_cfg(tmp_path / "a"), data)
    b = train(small_cfg(tmp_path / "b", prefetch=0), data)
    assert [e["loss"] for e in a.epochs] == [e["loss"] for e in b.epochs]
    assert a.test_acc == b.test_acc and a.test_acc > 0.5
    c = train(small_cfg(tmp_path / "c", seed=1), data)
    assert [e["loss"] for e in c.epochs] != [e["loss"] for e in a.epochs]
    for cfg in (dict(schedule="random", renumber=False), dict(renumber=False),
                dict(schedule="random"), dict(num_clusters=5, balance=1)):
        r = train(small_cfg(tmp_path / "x", overwrite=True, **cfg), data)  # one folder, reused
        assert r.logits.shape == (600, 4) and r.test_acc > 0.5, cfg


@pytest.mark.parametrize("bad", [dict(num_clusters=-1), dict(balance=0),
                                 dict(renumber="yes"), dict(schedule="clusters")])
def test_train_config_rejects(bad, tmp_path):
    with pytest.raises(ConfigError):
        small_cfg(tmp_path, **bad).validate()


@pytest.mark.parametrize("extra", [[], ["--schedule", "random", "--no-renumber"],
                                   ["--num-clusters", "10", "--balance", "1"]])
def test_bench_sampler_schedules_same_keys(extra, tmp_path, capsys):
    rc = cli_main(["bench", "sampler", "--dataset", "synthetic-tiny", "--fanouts", "5,5",
                   "--batch-size", "256", "--json", "--epochs", "1", "--warmup", "0",
                   "--data-root", str(tmp_path), *extra])
    out = capsys.readouterr().out
    assert rc == 0
    res = json.loads(out.strip().splitlines()[-1])
    for k in ("seeds_per_s", "sample_epoch_s", "input_nodes_per_batch", "feature_rows",
              "num_batches", "num_seeds"):
        assert k in res
    assert res["num_seeds"] == 1000 and res["num_batches"] == 4
    if extra[:1] == ["--schedule"]:
        assert res["schedule"] == extra[1] and res["schedule_choice"] is None
    else:  # --schedule auto (the default): the scheduler its measurement chose
        assert res["schedule"] == res["schedule_choice"]["schedule"] in ("locality", "random")


def test_bench_sampler_bad_num_clusters(tmp_path, capsys):
    rc = cli_main(["bench", "sampler", "--dataset", "synthetic-tiny", "--num-clusters", "-2",
                   "--json", "--epochs", "1", "--data-root", str(tmp_path)])
    assert rc == 2 and "num-clusters" in capsys.readouterr().err
