"""Every numba kernel against its NumPy/Python reference twin, plus the sampling law."""

from __future__ import annotations

import os
import subprocess
import sys

import numba
import numpy as np
import pytest

from twopgraph import kernels
from conftest import random_graph


@pytest.mark.parametrize("fanout", [1, 3, 10, -1])
def test_sample_neighbors_matches_reference(fanout):
    g = random_graph(300, 1500, seed=1)
    nodes = np.random.default_rng(0).permutation(300)[:120].astype(np.int64)
    key = kernels.mix_key(7, 3)
    o1, n1 = kernels.sample_neighbors(g.indptr, g.indices, nodes, fanout, np.uint64(key))
    o2, n2 = kernels.sample_neighbors_ref(g.indptr, g.indices, nodes, fanout, key)
    np.testing.assert_array_equal(o1, o2)
    np.testing.assert_array_equal(n1, n2)
    o3, n3 = kernels.sample_neighbors_serial(g.indptr, g.indices, nodes, fanout, np.uint64(key))
    np.testing.assert_array_equal(o3, o2)
    np.testing.assert_array_equal(n3, n2)


def test_reset_map_serial_and_parallel():
    for fn in (kernels.reset_map, kernels.reset_map_serial):
        m = np.arange(50, dtype=np.int64)
        fn(m, np.array([3, 7, 49], dtype=np.int64))
        want = np.arange(50)
        want[[3, 7, 49]] = -1
        np.testing.assert_array_equal(m, want)


def test_sample_neighbors_is_a_subset_without_repeats():
    g = random_graph(300, 3000, seed=2)
    nodes = np.arange(300, dtype=np.int64)
    off, nb = kernels.sample_neighbors(g.indptr, g.indices, nodes, 4, np.uint64(5))
    deg = g.degrees()
    for i, v in enumerate(nodes):
        got = nb[off[i]:off[i + 1]]
        assert len(got) == min(4, deg[v])
        assert len(set(got.tolist())) == len(got)
        assert set(got.tolist()) <= set(g.neighbors(v).tolist())


def test_sampling_distribution_is_uniform():
    """Each neighbour of a degree-d vertex is taken with probability min(1, f/d)."""
    g = random_graph(50, 100, seed=3)  # vertex 0 is a hub of degree ~25+
    v = 0
    d = int(g.degrees()[v])
    f = 5
    assert d > 2 * f
    trials = 6000
    counts = np.zeros(g.num_nodes, dtype=np.int64)
    nodes = np.array([v], dtype=np.int64)
    for t in range(trials):
        _, nb = kernels.sample_neighbors(g.indptr, g.indices, nodes, f, np.uint64(kernels.mix_key(t)))
        assert len(np.unique(nb)) == f
        counts[nb] += 1
    freq = counts[g.neighbors(v)] / trials
    p = f / d
    sd = np.sqrt(p * (1 - p) / trials)
    assert np.all(np.abs(freq - p) < 5 * sd), (freq, p)
    # chi-square-like aggregate check
    z = (freq - p) / sd
    assert np.mean(z ** 2) < 2.0


def test_sampling_does_not_depend_on_thread_count():
    g = random_graph(2000, 20000, seed=4)
    nodes = np.arange(0, 2000, 2, dtype=np.int64)
    prev = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        a = kernels.sample_neighbors(g.indptr, g.indices, nodes, 3, np.uint64(9))
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        b = kernels.sample_neighbors(g.indptr, g.indices, nodes, 3, np.uint64(9))
    finally:
        numba.set_num_threads(prev)
    np.testing.assert_array_equal(a[1], b[1])


def test_relabel_matches_reference():
    rng = np.random.default_rng(0)
    n = 100
    for trial in range(5):
        known = rng.choice(n, 10, replace=False)
        nbrs = rng.integers(0, n, 200).astype(np.int32)
        maps, outs = [], []
        for fn in (kernels.relabel, kernels.relabel_ref):
            node_map = np.full(n, -1, dtype=np.int64)
            node_map[known] = np.arange(10)
            frontier = np.zeros(200, dtype=np.int64)
            local, num_new = fn(nbrs, node_map, 10, frontier)
            maps.append(node_map)
            outs.append((local, num_new, frontier[:num_new].copy()))
        np.testing.assert_array_equal(maps[0], maps[1])
        np.testing.assert_array_equal(outs[0][0], outs[1][0])
        assert outs[0][1] == outs[1][1]
        np.testing.assert_array_equal(outs[0][2], outs[1][2])


def test_permute_csr_matches_reference():
    g = random_graph(400, 3000, seed=5)
    perm = np.random.default_rng(1).permutation(400).astype(np.int64)
    inv = np.argsort(perm)
    a = kernels.permute_csr(g.indptr, g.indices, perm, inv)
    b = kernels.permute_csr_ref(g.indptr, g.indices, perm, inv)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_splitmix_matches_reference():
    for x in [0, 1, 12345, 2**63 + 5]:
        assert int(kernels._splitmix64(np.uint64(x))) == kernels.splitmix64_ref(x)
    assert int(kernels._draw(np.uint64(11), 3, 4)) == kernels.draw_ref(11, 3, 4)


@pytest.mark.parametrize("n,p", [(1, 0.5), (7, 0.3), (40_001, 0.5), (100_000, 0.1)])
def test_relu_dropout_matches_reference(n, p):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float32)
    key, thr, scale = 0xDEADBEEF12345, round(p * 2**32), np.float32(1 / (1 - p))
    out = np.empty_like(x)
    keep = np.empty(n, dtype=np.uint8)
    kernels.relu_dropout_fwd(x, out, keep, np.uint64(key), np.uint64(thr), scale)
    out_ref, keep_ref = kernels.relu_dropout_fwd_ref(x, key, thr, scale)
    np.testing.assert_array_equal(keep, keep_ref)
    np.testing.assert_array_equal(out, out_ref)
    if n > 1000:  # kept with probability 1 - p among the positive entries
        assert abs(keep[x > 0].mean() - (1 - p)) < 0.01
    g = rng.standard_normal(n).astype(np.float32)
    gin = np.empty_like(g)
    kernels.relu_dropout_bwd(g, keep, scale, gin)
    np.testing.assert_array_equal(gin, kernels.relu_dropout_bwd_ref(g, keep, scale))


@pytest.mark.skipif(os.environ.get("NUMBA_DISABLE_JIT") == "1", reason="already pure Python")
def test_kernels_pure_python_mode():
    """The kernel tests also pass with the JIT disabled (kernels run as plain Python)."""
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    here = os.path.dirname(__file__)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                        os.path.join(here, "test_kernels.py"), "-k",
                        "reference or subset or thread"],
                       env=env, capture_output=True, text=True, timeout=600, cwd=here)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
