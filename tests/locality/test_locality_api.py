"""The public interface of ``twopgraph.locality``: METIS clusters of a community graph (few cut
edges, cached), the graph renumbered cluster by cluster, and a :class:`LocalityScheduler` that
covers every seed once per epoch in batches of few clusters."""

from __future__ import annotations

import numpy as np
from conftest import community_data

import twopgraph.locality as pkg
from twopgraph.graph import CSRGraph
from twopgraph.locality import (
    Clustering,
    LocalityScheduler,
    RandomScheduler,
    cluster_graph,
    default_num_clusters,
    edge_cut,
    make_scheduler,
    prepare_locality,
    to_original_order,
)


def test_every_public_name_imports():
    for n in pkg.__all__:
        getattr(pkg, n)


def test_clusters_renumbering_and_schedule(tmp_path):
    data = community_data(n=400, k=4, seed=3)
    g = data.graph
    c = cluster_graph(g, 8, train_idx=data.train_idx, cache_dir=tmp_path)
    assert isinstance(c, Clustering) and c.num_clusters == 8 and not c.from_cache
    assert c.edge_cut == edge_cut(g, c.parts) < edge_cut(g, np.arange(400) % 8) / 2
    assert c.sizes().sum() == 400 and c.sizes().min() > 0
    path = CSRGraph.from_edges([0, 1, 2], [1, 2, 3], num_nodes=4)  # 0-1-2-3: 1 edge cut
    assert edge_cut(path, np.array([0, 0, 1, 1])) == 1
    cached = cluster_graph(g, 8, train_idx=data.train_idx, cache_dir=tmp_path)
    assert cached.from_cache and np.array_equal(cached.parts, c.parts)

    prep = prepare_locality(data, batch_size=50, num_clusters=8, cache_dir=tmp_path)
    new, perm = prep.data, prep.perm
    assert prep.clustering.from_cache and np.all(np.diff(prep.clustering.parts) >= 0)
    assert np.array_equal(new.node_ids, perm) and np.array_equal(new.feat, data.feat[perm])
    assert np.array_equal(to_original_order(new.label, perm), data.label)

    train = new.train_idx
    sched = make_scheduler("locality", train, 50, seed=1, parts=prep.clustering.parts,
                           labels=new.label)
    assert isinstance(sched, LocalityScheduler) and sched.num_batches == -(-len(train) // 50)
    rnd = make_scheduler("random", train, 50, seed=1, parts=prep.clustering.parts)
    assert type(rnd) is RandomScheduler
    for epoch in (0, 1):
        batches = list(sched.batches(epoch))
        assert len(batches) == sched.num_batches and all(len(b) == 50 for b in batches[:-1])
        assert np.array_equal(np.sort(np.concatenate(batches)), train)  # each seed once

    def clusters_per_batch(s):
        return np.mean([len(np.unique(prep.clustering.parts[b])) for b in s.batches(0)])
    assert clusters_per_batch(sched) <= 3 < clusters_per_batch(rnd)
    assert default_num_clusters(10**7, 10**6, 1000) == 14 * 1000  # 14 clusters per batch
