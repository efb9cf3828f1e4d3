"""The public interface of ``twopgraph.graph``: a :class:`CSRGraph` from edges (also by the
bounded-memory builder), a :class:`GraphData` validated, renumbered and round-tripped through
its ``.npz`` file."""

from __future__ import annotations

import numpy as np
import pytest

import twopgraph.graph as pkg
from twopgraph.errors import GraphFormatError
from twopgraph.graph import (
    REQUIRED_KEYS,
    SPLITS,
    CSRGraph,
    GraphData,
    build_csr,
    check_permutation,
    inverse_permutation,
    permute_csr,
    random_split,
)

# 0-1 twice, 1-0, a self loop on 2, 2-3 in one direction only, vertex 4 isolated
SRC, DST = np.array([0, 0, 1, 2, 2]), np.array([1, 1, 0, 2, 3])
ROWS = [[1], [0], [3], [2], []]


def test_every_public_name_imports():
    for n in pkg.__all__:
        getattr(pkg, n)


def test_graph_from_edges_and_by_the_csr_builder(tmp_path):
    g = CSRGraph.from_edges(SRC, DST, num_nodes=5)
    assert [g.neighbors(v).tolist() for v in range(5)] == ROWS
    assert g.degrees().tolist() == [1, 1, 1, 1, 0] and g.validate(check_symmetric=True) is g
    built = build_csr(SRC, DST, 5, tmp_path)
    assert np.array_equal(built.indptr, g.indptr) and np.array_equal(built.indices, g.indices)
    assert built.changes["self_loops"] == 1 and built.changes["entries"] == 4
    with pytest.raises(GraphFormatError):
        CSRGraph.from_edges([0], [5], num_nodes=5)


def test_data_renumbers_and_round_trips_npz(tmp_path):
    g = CSRGraph.from_edges(SRC, DST, num_nodes=5)
    many = np.arange(12) % 3
    many[5] = -1  # unlabelled: in no split
    tr, va, te = random_split(many, seed=1)  # 60/20/20 of the 11 labelled, train the rest
    assert (len(tr), len(va), len(te)) == (7, 2, 2)
    assert sorted(np.concatenate([tr, va, te]).tolist()) == np.flatnonzero(many >= 0).tolist()
    label = np.array([0, 1, 1, 0, -1])
    feat = np.arange(10, dtype=np.float32).reshape(5, 2)
    d = GraphData(g, feat, label, [0, 1], [2], [3], name="tiny").validate()
    assert (d.num_nodes, d.num_features, d.num_classes) == (5, 2, 2)

    perm = check_permutation([3, 4, 0, 1, 2], 5)  # new i = old perm[i]
    p = d.permute(perm)
    assert np.array_equal(p.feat, feat[perm]) and np.array_equal(p.original_ids(), perm)
    inv = inverse_permutation(perm)
    assert np.array_equal(inv[perm], np.arange(5))
    assert np.array_equal(p.graph.indices, permute_csr(g.indptr, g.indices, perm, inv)[1])
    assert [p.graph.neighbors(v).tolist() for v in range(5)] == [[4], [], [3], [2], [0]]
    with pytest.raises(GraphFormatError):
        check_permutation([0, 0, 1, 2, 3], 5)

    path = p.save_npz(tmp_path / "tiny.npz")
    with np.load(path) as z:
        assert set(REQUIRED_KEYS) <= set(z.files) and set(SPLITS) <= set(z.files)
    back = GraphData.load_npz(path)
    assert back.name == "tiny" and back.fingerprint() == p.fingerprint()
    assert np.array_equal(back.node_ids, perm) and np.array_equal(back.label, p.label)
