"""The bounded-memory CSR builder (twopgraph.graph.csrbuild) against scipy, and its memory bound."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from twopgraph.errors import GraphFormatError
from twopgraph.graph.csrbuild import build_csr
from twopgraph.graph.data import CSRGraph


def scipy_csr(s, d, n):
    """The undirected, self-loop-free, deduplicated CSR by scipy."""
    a = sp.coo_matrix((np.ones(s.shape[0]), (s, d)), shape=(n, n)).tocsr()
    a = a + a.T
    a.setdiag(0)
    a.eliminate_zeros()
    a.sort_indices()
    return a.indptr.astype(np.int64), a.indices


def edges_with_faults(n, e, seed):
    """Random edges plus repeats, self loops and both directions of some pairs."""
    rng = np.random.default_rng(seed)
    s, d = rng.integers(0, n, e), rng.integers(0, n, e)
    k = max(1, e // 10)
    loops = np.arange(min(n, k))
    return (np.concatenate([s, s[:k], d[:k], loops]),
            np.concatenate([d, d[:k], s[:k], loops]))


@pytest.mark.parametrize("n,e,chunk", [(1, 0, 8), (7, 30, 4), (500, 5000, 333),
                                       (3000, 60000, 1 << 23), (200, 20000, 1)])
def test_matches_scipy(tmp_path, n, e, chunk):
    s, d = edges_with_faults(n, e, seed=n)
    csr = build_csr(s, d, n, tmp_path, chunk_edges=chunk)
    indptr, indices = scipy_csr(s, d, n)
    np.testing.assert_array_equal(csr.indptr, indptr)
    np.testing.assert_array_equal(csr.indices, indices)
    assert csr.indices.dtype == np.int32 and csr.indptr.dtype == np.int64
    CSRGraph(np.asarray(csr.indptr), np.asarray(csr.indices)).validate(check_symmetric=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["indices.npy", "indptr.npy"]


@pytest.mark.parametrize("budget", [4, 40, 4000, 10**9])
def test_scatter_in_row_ranges_gives_the_same_csr(tmp_path, budget):
    """A scatter budget of a few bytes (one pass per range of rows) builds the same CSR."""
    from twopgraph.graph.csrbuild import scatter_ranges
    s, d = edges_with_faults(300, 4000, seed=5)
    csr = build_csr(s, d, 300, tmp_path, chunk_edges=777, scatter_bytes=budget)
    indptr, indices = scipy_csr(s, d, 300)
    np.testing.assert_array_equal(csr.indptr, indptr)
    np.testing.assert_array_equal(csr.indices, indices)
    assert csr.changes["entries"] == indices.shape[0]
    ip = np.array([0, 5, 5, 12, 13, 20])
    r = scatter_ranges(ip, 6)
    assert r[0][0] == 0 and r[-1][1] == 5 and all(a[1] == b[0] for a, b in zip(r, r[1:]))
    assert all(ip[hi] - ip[lo] <= 6 or hi == lo + 1 for lo, hi in r)
    assert scatter_ranges(ip, None) == [(0, 5)]


def test_counts_what_changed(tmp_path):
    # 0->1 twice, 1->0 once (a reverse pair), 2->2 (loop), 2->3 once (gets a reverse entry)
    s, d = np.array([0, 0, 1, 2, 2]), np.array([1, 1, 0, 2, 3])
    csr = build_csr(s, d, 4, tmp_path)
    assert csr.changes == {"edges": 5, "self_loops": 1, "duplicates": 1, "added": 1,
                           "entries": 4}
    assert "1 reverse entries added" in csr.describe()


def test_memory_mapped_input_of_other_dtypes(tmp_path):
    s, d = edges_with_faults(400, 3000, seed=3)
    ei = np.lib.format.open_memmap(tmp_path / "ei.npy", mode="w+", dtype=np.int32,
                                   shape=(2, s.shape[0]))
    ei[0], ei[1] = s, d
    ei.flush()
    ei = np.load(tmp_path / "ei.npy", mmap_mode="r")
    out = tmp_path / "out"
    out.mkdir()
    csr = build_csr(ei[0], ei[1], 400, out, chunk_edges=1000)
    np.testing.assert_array_equal(csr.indices, scipy_csr(s, d, 400)[1])


@pytest.mark.parametrize("bad", [-1, 50])
def test_id_out_of_range_is_one_line_and_leaves_nothing(tmp_path, bad):
    s, d = np.arange(40) % 50, (np.arange(40) + 1) % 50
    d[17] = bad
    with pytest.raises(GraphFormatError) as err:
        build_csr(s, d, 50, tmp_path, chunk_edges=8, what="raw/data.npz edge_index")
    msg = str(err.value)
    assert "\n" not in msg and "edge 17 (17 -> " in msg and "raw/data.npz edge_index" in msg
    assert list(tmp_path.iterdir()) == []


def test_non_integer_ids_refused(tmp_path):
    with pytest.raises(GraphFormatError, match="integers"):
        build_csr(np.zeros(3), np.zeros(3), 4, tmp_path)


def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_is_bounded_by_vertices_and_one_chunk(tmp_path):
    """E = 2M edges (int32 ids, memory-mapped) over N = 2,000 vertices: the builder keeps
    N-sized counters and one chunk (converted to int64) in memory, never the edge list. The
    control run without chunking (one chunk = every edge: 32 MB) shows that the bound is what
    fails then."""
    n, e = 2000, 2_000_000
    rng = np.random.default_rng(0)
    ei = np.lib.format.open_memmap(tmp_path / "ei.npy", mode="w+", dtype=np.int32,
                                   shape=(2, e))
    for a in range(0, e, 1 << 18):
        ei[:, a:a + (1 << 18)] = rng.integers(0, n, (2, min(1 << 18, e - a)))
    ei.flush()
    ei = np.load(tmp_path / "ei.npy", mmap_mode="r")
    chunked, whole = tmp_path / "chunked", tmp_path / "whole"
    chunked.mkdir()
    whole.mkdir()
    build_csr(ei[0], ei[1], n, chunked, chunk_edges=1 << 16)  # compile outside the trace
    (chunked / "indptr.npy").unlink()
    (chunked / "indices.npy").unlink()
    bound = 8 * 2**20  # chunk: 2 x 8 B x 65,536 = 1 MiB; counters: 3 x 8 B x N = 48 KB
    peak = _peak_bytes(lambda: build_csr(ei[0], ei[1], n, chunked, chunk_edges=1 << 16))
    assert peak < bound, peak
    peak_whole = _peak_bytes(lambda: build_csr(ei[0], ei[1], n, whole, chunk_edges=e))
    assert peak_whole > 3 * bound, peak_whole
    np.testing.assert_array_equal(np.load(chunked / "indices.npy"),
                                  np.load(whole / "indices.npy"))


def test_scatter_window_is_bounded_by_scatter_bytes(tmp_path, monkeypatch):
    """With ``scatter_bytes`` the scatter runs in anonymous windows of at most that many bytes
    (plus N-sized counters and one chunk): E = 1M edges over N = 2,000 vertices are 8 MB of
    int32 slots, scattered in 1 MiB windows under a 4 MiB bound and with the same result as
    the file-backed scatter. Control: with the ranges' limit ignored (one window of every
    slot) the same call exceeds the bound."""
    import twopgraph.graph.csrbuild as cb
    n, e = 2000, 1_000_000
    rng = np.random.default_rng(1)
    s, d = rng.integers(0, n, e).astype(np.int32), rng.integers(0, n, e).astype(np.int32)
    outs = [tmp_path / x for x in ("plain", "windowed", "whole")]
    for o in outs:
        o.mkdir()
    build_csr(s, d, n, outs[0], chunk_edges=1 << 15)
    budget, bound = 1 << 20, 4 << 20  # chunk 0.5 MiB, counters 4 x 8 B x N = 64 KB
    peak = _peak_bytes(lambda: build_csr(s, d, n, outs[1], chunk_edges=1 << 15,
                                         scatter_bytes=budget))
    assert peak < bound, peak
    np.testing.assert_array_equal(np.load(outs[1] / "indices.npy"),
                                  np.load(outs[0] / "indices.npy"))
    monkeypatch.setattr(cb, "scatter_ranges", lambda indptr, m: [(0, indptr.shape[0] - 1)])
    peak_whole = _peak_bytes(lambda: build_csr(s, d, n, outs[2], chunk_edges=1 << 15,
                                               scatter_bytes=budget))
    assert peak_whole > bound, peak_whole
    np.testing.assert_array_equal(np.load(outs[2] / "indices.npy"),
                                  np.load(outs[0] / "indices.npy"))
