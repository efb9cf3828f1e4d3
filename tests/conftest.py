"""Small shared builders: random CSR graphs, a tiny community graph with node data."""

from __future__ import annotations

import numpy as np
import pytest

from twopgraph.graph import CSRGraph, GraphData


def random_graph(n: int = 200, m: int = 1000, seed: int = 0, hub: bool = True) -> CSRGraph:
    """Symmetric random graph; with ``hub`` vertex 0 is joined to half the vertices."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    if hub:
        others = np.arange(1, n, 2)
        src = np.concatenate([src, np.zeros_like(others)])
        dst = np.concatenate([dst, others])
    return CSRGraph.from_edges(src, dst, n)


def community_data(n: int = 600, k: int = 4, f: int = 8, seed: int = 0) -> GraphData:
    """k communities, labels = community, features = noisy label centroids."""
    rng = np.random.default_rng(seed)
    comm = rng.integers(0, k, n)
    src, dst = [], []
    for _ in range(n * 4):
        u = rng.integers(n)
        same = np.flatnonzero(comm == comm[u])
        v = rng.choice(same) if rng.random() < 0.85 else rng.integers(n)
        src.append(u)
        dst.append(v)
    g = CSRGraph.from_edges(np.array(src), np.array(dst), n)
    centroids = rng.normal(size=(k, f)).astype(np.float32)
    feat = (centroids[comm] + 1.5 * rng.normal(size=(n, f))).astype(np.float32)
    perm = rng.permutation(n)
    tr, va, te = np.sort(perm[: n // 2]), np.sort(perm[n // 2: 3 * n // 4]), np.sort(perm[3 * n // 4:])
    return GraphData(g, feat, comm.astype(np.int64), tr, va, te, name="community")


@pytest.fixture
def graph():
    return random_graph()


@pytest.fixture
def data():
    return community_data()
