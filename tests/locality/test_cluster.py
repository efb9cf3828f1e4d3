"""METIS clustering (cache, edge cut, balance), sparsification and cluster renumbering."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import community_data, random_graph

from twopgraph.config import TrainConfig
from twopgraph.errors import ConfigError
from twopgraph.graph.data import CSRGraph
from twopgraph.inference import accuracy
from twopgraph.locality import (
    Clustering,
    cluster_graph,
    cluster_permutation,
    default_num_clusters,
    edge_cut,
    renumber,
    to_original_order,
)
from twopgraph.locality import cluster as cluster_mod
from twopgraph.locality.cluster import sparsify
from twopgraph.run.train import train


@pytest.fixture(scope="module")
def cdata():
    return community_data()


def test_cluster_graph_parts_cut_and_train_balance(cdata):
    c = cluster_graph(cdata.graph, 4, train_idx=cdata.train_idx, max_degree=None)
    assert c.parts.shape == (cdata.num_nodes,) and c.parts.dtype == np.int64
    assert set(np.unique(c.parts).tolist()) == set(range(4))
    assert c.edge_cut == edge_cut(cdata.graph, c.parts)
    # far fewer cut edges than a random assignment (~3/4 of all edges): the 4 communities
    rnd = np.random.default_rng(123).integers(0, 4, cdata.num_nodes)
    assert c.edge_cut < 0.5 * edge_cut(cdata.graph, rnd)
    per_cluster = np.bincount(c.parts[cdata.train_idx], minlength=4)
    assert per_cluster.min() > 0.5 * per_cluster.mean()


def test_edge_cut_counts_undirected_edges():
    g = random_graph(50, 200, seed=1, hub=False)
    parts = np.arange(50) % 2
    src = np.repeat(np.arange(50), g.degrees())
    assert edge_cut(g, parts) == int((parts[src] != parts[g.indices]).sum()) // 2
    assert edge_cut(g, np.zeros(50, dtype=np.int64)) == 0


def test_cluster_cache_hit_and_key(cdata, tmp_path, monkeypatch):
    first = cluster_graph(cdata.graph, 6, train_idx=cdata.train_idx, cache_dir=tmp_path)
    assert not first.from_cache
    assert len(list(tmp_path.glob("metis-*.npz"))) == 1
    calls = []
    real = cluster_mod._metis
    monkeypatch.setattr(cluster_mod, "_metis", lambda *a: calls.append(a) or real(*a))
    again = cluster_graph(cdata.graph, 6, train_idx=cdata.train_idx, cache_dir=tmp_path)
    assert again.from_cache and not calls  # no second METIS run
    np.testing.assert_array_equal(again.parts, first.parts)
    assert (again.edge_cut, again.key) == (first.edge_cut, first.key)
    # other parameters or another graph: another key, METIS runs
    other = cluster_graph(cdata.graph, 7, train_idx=cdata.train_idx, cache_dir=tmp_path)
    assert not other.from_cache and other.key != first.key and len(calls) == 1
    g2 = random_graph(cdata.num_nodes, 2000, seed=9)
    assert cluster_graph(g2, 6, cache_dir=tmp_path).key != first.key
    # a corrupt cache file is ignored (and rewritten)
    (tmp_path / f"metis-{first.key}.npz").write_bytes(b"garbage")
    fixed = cluster_graph(cdata.graph, 6, train_idx=cdata.train_idx, cache_dir=tmp_path)
    assert not fixed.from_cache
    np.testing.assert_array_equal(fixed.parts, first.parts)  # METIS is deterministic


def test_cluster_cache_is_keyed_by_the_content_fingerprint(cdata, tmp_path, monkeypatch):
    from twopgraph.core.fingerprint import fingerprint
    g, train = cdata.graph, cdata.train_idx
    first = cluster_graph(g, 6, train_idx=train, cache_dir=tmp_path)
    key = cluster_mod.cluster_key(g, 6, train_idx=train)
    assert first.key == key == fingerprint(
        "metis-clusters", {"graph": g.fingerprint(), "num_clusters": 6, "seed": 0,
                           "ufactor": cluster_mod.DEFAULT_UFACTOR,
                           "max_degree": cluster_mod.DEFAULT_METIS_MAX_DEGREE,
                           "niter": cluster_mod.DEFAULT_METIS_NITER,
                           "format": cluster_mod.CACHE_FORMAT}, train)
    assert (tmp_path / f"metis-{key}.npz").is_file()
    calls = []
    real = cluster_mod._metis
    monkeypatch.setattr(cluster_mod, "_metis", lambda *a: calls.append(a) or real(*a))
    # the same content in other array objects: read from the cache
    copy = CSRGraph(g.indptr.copy(), g.indices.copy())
    assert cluster_graph(copy, 6, train_idx=train.copy(), cache_dir=tmp_path).from_cache
    assert not calls
    # one neighbour moved (same sizes and degrees), other training ids, other METIS settings
    ix = g.indices.copy()
    ix[0] = (ix[0] + 1) % g.num_nodes
    moved = CSRGraph(g.indptr, ix)
    variants = [(moved, dict(train_idx=train)), (g, dict(train_idx=train[1:])),
                (g, dict(train_idx=None)), (g, dict(train_idx=train, seed=1)),
                (g, dict(train_idx=train, ufactor=50)), (g, dict(train_idx=train, max_degree=4))]
    keys = {key}
    for graph, kw in variants:
        c = cluster_graph(graph, 6, cache_dir=tmp_path, **kw)
        assert not c.from_cache and c.key == cluster_mod.cluster_key(graph, 6, **kw)
        keys.add(c.key)
    assert len(keys) == len(variants) + 1 and len(calls) == len(variants)
    # a file of another cache format under the key's name is not read back
    path = tmp_path / f"metis-{key}.npz"
    with np.load(path) as z:
        old = dict(z)
    np.savez(path, **dict(old, format=np.int64(cluster_mod.CACHE_FORMAT - 1)))
    again = cluster_graph(g, 6, train_idx=train, cache_dir=tmp_path)
    assert not again.from_cache and len(calls) == len(variants) + 1
    assert cluster_graph(g, 6, train_idx=train, cache_dir=tmp_path).from_cache  # rewritten


def test_cluster_graph_rejects_bad_counts(cdata):
    for bad in (0, -3, cdata.num_nodes + 1, 2.5, True):
        with pytest.raises(ConfigError):
            cluster_graph(cdata.graph, bad)
    assert (cluster_graph(cdata.graph, 1).parts == 0).all()


def test_num_clusters_help_states_the_default_constants():
    """``--num-clusters``' help text spells the automatic count out; it must follow the
    constants of :func:`default_num_clusters` when they change."""
    from twopgraph.config.options import num_clusters_option
    text = num_clusters_option().metadata["help"]
    assert f"({cluster_mod.DEFAULT_CLUSTERS_PER_BATCH} clusters per batch" in text
    assert f">= {cluster_mod.LOCALITY_NODES_PER_SEED} x batch-size" in text
    assert f"min({cluster_mod.DEFAULT_MIN_CLUSTERS}, N/8)" in text


def test_default_num_clusters():
    assert default_num_clusters(2_449_029, 195_922, 1024) == 2688  # large: 14 clusters a batch
    assert default_num_clusters(2_449_029, 195_922, 1024, clusters_per_batch=2) == 384
    assert default_num_clusters(7650, 4590, 1024) == 956  # small graph: the floor N/8
    assert default_num_clusters(100_000, 20_000, 1024) == 2048  # the floor min_clusters
    assert default_num_clusters(100, 50, 8) == 98  # 14 per batch beat the floor N/8 = 12
    assert default_num_clusters(20, 1000, 1024) == 14  # one batch: 14 clusters
    assert default_num_clusters(5, 1000, 1024) == 5  # at most one cluster per vertex


def test_sparsify_is_symmetric_capped_and_deterministic():
    g = random_graph(400, 8000, seed=2)
    h = sparsify(g, 6)
    h.validate(check_symmetric=True)
    assert h.num_edges < 0.5 * g.num_edges
    src = np.repeat(np.arange(400), h.degrees())
    key = set((src * 400 + h.indices).tolist())
    gsrc = np.repeat(np.arange(400), g.degrees())
    assert key <= set((gsrc * 400 + g.indices).tolist())  # a subgraph
    small = g.degrees() <= 6
    assert (h.degrees()[small] == g.degrees()[small]).all()  # low degrees keep every edge
    np.testing.assert_array_equal(sparsify(g, 6).indices, h.indices)
    assert not np.array_equal(sparsify(g, 6, seed=1).indices, h.indices)


# -- renumbering ------------------------------------------------------------------------------
def test_renumber_makes_clusters_contiguous(cdata):
    c = cluster_graph(cdata.graph, 5, train_idx=cdata.train_idx)
    new, c2, perm = renumber(cdata, c)
    assert np.all(np.diff(c2.parts) >= 0)  # cluster 0 first, then 1, ...
    np.testing.assert_array_equal(c2.parts, c.parts[perm])
    np.testing.assert_array_equal(new.node_ids, perm)
    np.testing.assert_array_equal(new.label, cdata.label[perm])
    np.testing.assert_array_equal(new.feat, cdata.feat[perm])
    np.testing.assert_array_equal(np.sort(new.node_ids[new.train_idx]), cdata.train_idx)
    new.validate(check_symmetric=True)
    # the same edges, in original ids
    ids = new.node_ids
    src = ids[np.repeat(np.arange(new.num_nodes), new.graph.degrees())]
    e_new = np.sort(src * cdata.num_nodes + ids[new.graph.indices])
    osrc = np.repeat(np.arange(cdata.num_nodes), cdata.graph.degrees())
    np.testing.assert_array_equal(e_new, np.sort(osrc * cdata.num_nodes + cdata.graph.indices))
    assert new.graph.num_edges == cdata.graph.num_edges


def test_bfs_order_keeps_neighbours_close():
    data = community_data(n=2000, k=4, seed=3)
    c = cluster_graph(data.graph, 20)
    new, _, _ = renumber(data, c)
    def mean_gap(g):
        src = np.repeat(np.arange(g.num_nodes), g.degrees())
        return np.abs(src - g.indices).mean()
    sorted_only = data.permute(np.argsort(c.parts, kind="stable"))
    assert mean_gap(new.graph) < mean_gap(sorted_only.graph) < mean_gap(data.graph)


def test_to_original_order_numpy_and_torch():
    import torch
    perm = np.array([2, 0, 1])
    vals = np.array([[20], [0], [10]])  # row i belongs to old vertex perm[i]
    np.testing.assert_array_equal(to_original_order(vals, perm), [[0], [10], [20]])
    t = to_original_order(torch.tensor([20.0, 0.0, 10.0]), perm)
    assert t.tolist() == [0.0, 10.0, 20.0]
    c = Clustering(np.array([1, 0, 0]), 2, 1)
    assert cluster_permutation(
        __import__("twopgraph.graph.data", fromlist=["CSRGraph"]).CSRGraph.from_edges(
            [0, 1], [1, 2], 3), c).tolist() == [1, 2, 0]


def test_renumbered_training_reports_predictions_in_original_ids(tmp_path):
    """Features name the label exactly, so a trained model is (nearly) always right; had the
    logits come back in renumbered order, accuracy against the original labels would be at
    chance level. Both reported accuracies and the returned logits must agree."""
    data = community_data(n=800, k=4, seed=1)
    data.feat = np.eye(4, dtype=np.float32)[data.label] * 3.0
    cfg = TrainConfig.of(dataset="community", epochs=3, hidden=16, fanouts=[3], batch_size=64,
                      lr=0.05, dropout=0.0, device="cpu", out=str(tmp_path / "r"),
                      progress=False, prefetch=0, schedule="locality", renumber=True,
                      num_clusters=8, data_root=str(tmp_path / "data"))
    res = train(cfg, data)
    import torch
    labels = torch.from_numpy(data.label)
    assert res.logits.shape == (800, 4)
    assert accuracy(res.logits, labels, data.test_idx) == pytest.approx(res.test_acc)
    assert accuracy(res.logits, labels, data.val_idx) == pytest.approx(res.val_acc)
    assert res.test_acc > 0.95
    assert (tmp_path / "data" / "clusters").is_dir()  # the clustering was cached
    # and the caller's data was not renumbered in place
    assert data.node_ids is None
