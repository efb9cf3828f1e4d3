"""``twopgraph.pyg.to_pyg_data``: a twopgraph dataset as a PyG ``Data`` -- the edges point from
the neighbour to the vertex (PyG's source -> target), the masks are the splits, ``x`` a copy
or the dataset's own array, and ``GraphData.from_pyg`` gives the dataset back."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import community_data

from twopgraph.graph.data import GraphData
from twopgraph.pyg import NeighborLoader, to_pyg_data

pytest.importorskip("torch_geometric.data")


def test_edges_masks_and_features():
    d = community_data(n=300)
    data = to_pyg_data(d)
    g = d.graph
    assert data.num_nodes == g.num_nodes and data.edge_index.shape == (2, g.indices.shape[0])
    src, dst = data.edge_index.numpy()
    for v in (0, 17, 299):  # the sources of v's in-edges are its CSR neighbours
        assert sorted(src[dst == v]) == sorted(g.indices[g.indptr[v]:g.indptr[v + 1]])
    for split in ("train", "val", "test"):
        mask = getattr(data, f"{split}_mask")
        assert np.array_equal(np.flatnonzero(mask.numpy()), np.sort(getattr(d, f"{split}_idx")))
    assert torch.equal(data.x, torch.from_numpy(np.asarray(d.feat, dtype=np.float32)))
    assert data.x.data_ptr() != torch.from_numpy(np.asarray(d.feat)).data_ptr()  # a copy
    assert torch.equal(data.y, torch.from_numpy(np.asarray(d.label)))


def test_round_trip_through_from_pyg():
    d = community_data(n=200)
    back = GraphData.from_pyg(to_pyg_data(d))
    assert np.array_equal(back.graph.indptr, d.graph.indptr)
    assert np.array_equal(back.graph.indices, d.graph.indices)
    assert np.array_equal(back.train_idx, np.sort(d.train_idx))
    assert np.array_equal(np.asarray(back.feat), np.asarray(d.feat))


def test_mapped_features_are_the_datasets_own_array_and_the_loader_reads_them(tmp_path):
    d = community_data(n=200)
    feat = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=np.float32,
                                     shape=np.shape(d.feat))
    feat[:] = d.feat
    mapped = GraphData(d.graph, feat, d.label, d.train_idx, d.val_idx, d.test_idx)
    data = to_pyg_data(mapped, features="map")
    assert data.x is feat
    batch = NeighborLoader(data, [3, 3], batch_size=16, input_nodes=data.train_mask)([0, 1])
    assert torch.equal(torch.as_tensor(np.asarray(batch.x)),
                       torch.from_numpy(np.asarray(d.feat)[batch.n_id.numpy()]))
    with pytest.raises(ValueError, match="copy"):
        to_pyg_data(d, features="mmap")


@pytest.mark.parametrize("workers", [0, 2])
def test_feature_cache_serves_the_same_rows_and_counts_hits(workers):
    d = community_data(n=400)
    data = to_pyg_data(d)
    loader = NeighborLoader(data, [4, 4], batch_size=32, input_nodes=data.train_mask,
                            shuffle=True, num_workers=workers, device="cpu",
                            cache_policy="degree", cache_ratio=0.25,
                            transform=lambda b: setattr(b, "x_seen", b.x.clone()) or b)
    assert loader.features.budget == 100
    for batch in loader:
        assert torch.equal(batch.x, data.x[batch.n_id]) and torch.equal(batch.x_seen, batch.x)
        assert torch.equal(batch.y, data.y[batch.n_id])  # other attributes still sliced
    c = loader.features.counters
    assert c.feature_rows > 0 and 0 < c.cache_hits < c.feature_rows
    # the cached rows are those of the nodes sampled most often: the highest out-degrees
    src = data.edge_index[0]
    deg = torch.bincount(src, minlength=data.num_nodes)
    cached = torch.from_numpy(np.flatnonzero(loader.features.source.directory.slot_of >= 0))
    assert deg[cached].float().mean() > deg.float().mean()


def test_feature_cache_options_are_checked():
    data = to_pyg_data(community_data(n=100))
    with pytest.raises(Exception, match="cache_policy 'layer'"):
        NeighborLoader(data, [2], batch_size=8, cache_policy="layer")
    with pytest.raises(Exception, match="need a cache_policy"):
        NeighborLoader(data, [2], batch_size=8, cache_ratio=0.5)
    plain = NeighborLoader(data, [2], batch_size=8, device="cpu")  # no cache: host gather
    assert plain.features.budget == 0
    b = plain([0, 1, 1])
    assert torch.equal(b.x, data.x[b.n_id])


def test_feature_cache_over_a_bfloat16_table():
    """The budget counts a row's bytes of any torch dtype (bfloat16 has no NumPy twin)."""
    data = to_pyg_data(community_data(n=100))
    data.x = data.x.to(torch.bfloat16)
    loader = NeighborLoader(data, [3], batch_size=8, device="cpu", cache_policy="degree",
                            cache_ratio=0.2)
    assert loader.features.budget == 20
    b = loader([0, 1])
    assert torch.equal(b.x, data.x[b.n_id].float())
