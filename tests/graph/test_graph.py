"""CSRGraph / GraphData: construction, validation, renumbering, .npz round trip."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from conftest import community_data, random_graph

from twopgraph.errors import GraphFormatError
from twopgraph.graph.data import CSRGraph, GraphData


def test_from_edges_symmetrises_dedups_and_drops_self_loops():
    g = CSRGraph.from_edges([0, 0, 1, 2, 2], [1, 1, 0, 2, 3], num_nodes=4)
    assert g.indptr.dtype == np.int64 and g.indices.dtype == np.int32
    assert [g.neighbors(v).tolist() for v in range(4)] == [[1], [0], [3], [2]]
    g.validate(check_symmetric=True)


def test_from_edges_rejects_out_of_range():
    with pytest.raises(GraphFormatError):
        CSRGraph.from_edges([0, 5], [1, 2], num_nodes=3)


@pytest.mark.parametrize("indptr,indices,msg", [
    ([0, 2, 1, 2], [0, 1], "monotone"),
    ([0, 1, 3], [1, 0], "sizes disagree"),
    ([0, 1, 2], [1, 7], "out of range"),
    ([1, 1, 2], [1, 0], "indptr\\[0\\]"),
])
def test_validate_errors(indptr, indices, msg):
    g = CSRGraph(np.array(indptr, dtype=np.int64), np.array(indices, dtype=np.int64))
    with pytest.raises(GraphFormatError, match=msg):
        g.validate()


def test_validate_symmetry_check():
    g = CSRGraph(np.array([0, 1, 1], dtype=np.int64), np.array([1], dtype=np.int64))
    g.validate()
    with pytest.raises(GraphFormatError, match="symmetric"):
        g.validate(check_symmetric=True)


def test_permute_round_trip_and_data_follow():
    d = community_data(200, seed=1)
    perm = np.random.default_rng(3).permutation(200)
    p = d.permute(perm)
    p.validate(check_symmetric=True)
    np.testing.assert_array_equal(p.original_ids(), perm)
    np.testing.assert_array_equal(p.feat, d.feat[perm])
    np.testing.assert_array_equal(p.label, d.label[perm])
    # a split id maps back to the same original vertex
    np.testing.assert_array_equal(np.sort(p.original_ids()[p.train_idx]), d.train_idx)
    # edges are the same edges in original ids
    for new_v in range(0, 200, 17):
        old_v = perm[new_v]
        got = sorted(perm[p.graph.neighbors(new_v)].tolist())
        assert got == sorted(d.graph.neighbors(old_v).tolist())
    # permuting back with the inverse restores the arrays; node_ids become identity again
    back = p.permute(np.argsort(perm))
    np.testing.assert_array_equal(back.graph.indptr, d.graph.indptr)
    np.testing.assert_array_equal(back.graph.indices, d.graph.indices)
    np.testing.assert_array_equal(back.original_ids(), np.arange(200))


def test_permute_rejects_non_permutations():
    g = random_graph(10, 20)
    for bad in (np.arange(9), np.zeros(10, dtype=np.int64), np.arange(1, 11)):
        with pytest.raises(GraphFormatError):
            g.permute(bad)


def test_npz_round_trip(tmp_path):
    d = community_data(100, seed=2).permute(np.random.default_rng(0).permutation(100))
    path = d.save_npz(tmp_path / "x.npz")
    e = GraphData.load_npz(path)
    for k in ("feat", "label", "train_idx", "val_idx", "test_idx", "node_ids"):
        np.testing.assert_array_equal(getattr(e, k), getattr(d, k))
    np.testing.assert_array_equal(e.graph.indices, d.graph.indices)
    assert e.num_classes == d.num_classes and e.name == "x"
    assert not list(tmp_path.glob("*.tmp"))


def test_validate_overlapping_splits():
    d = community_data(100, seed=3)
    d.val_idx = np.concatenate([d.val_idx, d.train_idx[:1]])
    with pytest.raises(GraphFormatError, match="overlaps"):
        d.validate()


def test_shared_real_dataset_loads():
    import pathlib
    p = pathlib.Path(__file__).resolve().parents[3] / "shared" / "datasets" / "cora.npz"
    if not p.exists():
        pytest.skip("shared datasets not present")
    d = GraphData.load_npz(p)
    assert d.num_nodes == 2708 and d.graph.num_edges == 2 * 5278 and d.num_classes == 7


def test_fingerprint_covers_every_array_and_num_classes_not_the_name(tmp_path):
    d = community_data(120, seed=4)
    base = d.fingerprint()
    assert d.graph.fingerprint() != base
    # equal content: a copy, a renamed copy, a round trip through .npz (also memory-mapped)
    assert replace(d, name="other", feat=d.feat.copy()).fingerprint() == base
    assert GraphData.load_npz(d.save_npz(tmp_path / "d.npz")).fingerprint() == base
    seen = {base}
    for change in ("indices", "feat", "label", "train_idx", "val_idx", "test_idx", "node_ids",
                   "num_classes"):
        if change == "indices":  # same sizes and degrees, one neighbour moved
            ix = d.graph.indices.copy()
            ix[0] = (ix[0] + 1) % d.num_nodes
            e = replace(d, graph=CSRGraph(d.graph.indptr, ix))
        elif change == "node_ids":
            e = replace(d, node_ids=np.arange(d.num_nodes)[::-1].copy())
        elif change == "num_classes":
            e = replace(d, num_classes=d.num_classes + 1)
        else:
            arr = getattr(d, change).copy()
            arr.reshape(-1)[-1] += 1
            e = replace(d, **{change: arr})
        f = e.fingerprint()
        assert f not in seen, change
        seen.add(f)


def test_fingerprint_cache_follows_reassigned_fields():
    d = community_data(100, seed=5)
    base, feat = d.fingerprint(), d.feat
    d.feat = d.feat + 1  # another array: recomputed
    assert d.fingerprint() != base
    d.feat = feat
    assert d.fingerprint() == base
    d.num_classes += 1
    assert d.fingerprint() != base
    d.num_classes -= 1
    d.label = d.label.copy()
    assert d.fingerprint() == base
