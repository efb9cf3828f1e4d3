"""Every registered numba kernel against its NumPy/Python twin, the sampling law, and numba's
set-up (threading layer, per-thread counts). The whole file also runs with the JIT disabled.

Each kernel module registers ``(kernel, twin)`` pairs in :mod:`twopgraph.runtime.jit`; ``CHECKS``
below holds one check per registered name, and a kernel registered without a check fails the suite.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import random_graph

from twopgraph.core.rng import mix_key
from twopgraph.runtime import jit
from twopgraph.sampler.kernels import sample_neighbors

PURE = os.environ.get("NUMBA_DISABLE_JIT") == "1"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEEDS = (0, 1, 2)


def graphs(index_dtype=None):
    """A few random graphs (hub or not, sparse or dense); ``index_dtype`` recasts indices."""
    for seed, (n, m, hub) in zip(SEEDS, [(300, 1500, True), (200, 3000, False), (50, 100, True)]):
        g = random_graph(n, m, seed=seed, hub=hub)
        if index_dtype is not None:
            g = type(g)(g.indptr, g.indices.astype(index_dtype))
        yield seed, g


# -- one check per kernel: check(kernel, twin) ---------------------------------------------------
def check_splitmix64(kernel, twin):
    xs = [0, 1, 12345, 2**63 + 5, 2**64 - 1]
    xs += np.random.default_rng(0).integers(0, 2**63, 50, dtype=np.uint64).tolist()
    for x in xs:
        assert int(kernel(np.uint64(x))) == twin(int(x))


def check_draw(kernel, twin):
    rng = np.random.default_rng(1)
    for _ in range(100):
        key, v, j = (int(rng.integers(0, hi)) for hi in (2**63, 10**9, 10**4))
        assert int(kernel(np.uint64(key), v, j)) == twin(key, v, j)


def check_draw_at(kernel, twin):
    from twopgraph.core.rng import draw_ref, vertex_base_ref
    rng = np.random.default_rng(2)
    for _ in range(100):
        key, v, j = (int(rng.integers(0, hi)) for hi in (2**63, 10**9, 10**4))
        base = vertex_base_ref(v)
        assert int(kernel(np.uint64(key), np.uint64(base), j)) == twin(key, base, j)
        assert twin(key, base, j) == draw_ref(key, v, j)


def check_take(kernel, twin):
    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.int64):
        values = rng.integers(0, 1000, 500).astype(dtype)
        for m in (0, 1, 5, 40, 3000):
            idx = rng.integers(0, 500, m)
            got, want = kernel(values, idx), twin(values, idx)
            np.testing.assert_array_equal(got, want)
            assert got.dtype == want.dtype


def check_vertex_base(kernel, twin):
    for v in [0, 1, 7, 10**9, 2**40 + 3]:
        assert int(kernel(v)) == twin(v)


def check_sample_neighbors(kernel, twin):
    # several chunks of the parallel kernel's passes, hubs of many bitmap words, repeated dsts
    big = random_graph(5000, 60000, seed=9, hub=True)
    nodes = np.random.default_rng(9).integers(0, 5000, 3000).astype(np.int64)
    for fanout in (2, 15, 200, -1):
        o1, n1 = kernel(big.indptr, big.indices, nodes, fanout, np.uint64(77))
        o2, n2 = twin(big.indptr, big.indices, nodes, fanout, 77)
        np.testing.assert_array_equal(o1, o2)
        np.testing.assert_array_equal(n1, n2)
    for dtype in (None, np.int64):
        for seed, g in graphs(dtype):
            n = g.num_nodes
            nodes = np.random.default_rng(seed).permutation(n)[: n // 2 + 1].astype(np.int64)
            for fanout in (1, 3, 10, -1):
                key = mix_key(seed, fanout)
                o1, n1 = kernel(g.indptr, g.indices, nodes, fanout, np.uint64(key))
                o2, n2 = twin(g.indptr, g.indices, nodes, fanout, key)
                np.testing.assert_array_equal(o1, o2)
                np.testing.assert_array_equal(n1, n2)
                assert n1.dtype == n2.dtype == g.indices.dtype


def check_sample_hops_mapped(kernel, twin):
    """Every hop's offsets and local ids, the vertices and the per-hop sizes as the twin (the
    twins of ``sample_neighbors`` and ``relabel`` hop by hop), both readings (in order / draw
    ahead), int32 and int64 maps; the map all -1 again afterwards."""
    big = random_graph(5000, 60000, seed=9, hub=True)
    cases = [(big, [15, 10, 5]), (big, [2, 200]), (big, [40, -1])]
    cases += [(g, f) for dtype in (None, np.int64) for _, g in graphs(dtype)
              for f in ([3], [10, 4], [-1, 1, 2])]
    rng = np.random.default_rng(4)
    for trial, (g, fanouts) in enumerate(cases):
        n = g.num_nodes
        seeds = rng.permutation(n)[: int(rng.integers(1, min(n, 700)))].astype(np.int64)
        hops = np.asarray(fanouts, dtype=np.int64)
        keys = np.asarray([mix_key(trial, h) for h in range(len(fanouts))], dtype=np.uint64)
        map_dtype = (np.int32, np.int64)[trial % 2]
        want_map = np.full(n, -1, dtype=map_dtype)
        want = twin(g.indptr, g.indices, seeds, hops, keys, want_map, True)
        for resident in (True, False):
            node_map = np.full(n, -1, dtype=map_dtype)
            got = kernel(g.indptr, g.indices, seeds, hops, keys, node_map, resident)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
            assert got[0].dtype == np.int64 and len(got[2]) == len(got[3]) == len(fanouts)
            for a, b in zip(got[2] + got[3], want[2] + want[3]):
                np.testing.assert_array_equal(a, b)
                assert a.dtype == np.int64
            assert (node_map == -1).all()
        np.testing.assert_array_equal(want[0][: seeds.shape[0]], seeds)
    # a seed out of range or repeated stops the call: sizes[0] = -1 - its position, nothing
    # sampled, the map as it was
    g, hops, keys = big, np.asarray([3, 2], np.int64), np.asarray([1, 2], np.uint64)
    for seeds, first in (([5, 7, 5, 9], 2), ([3, 5000, 4], 1), ([-1, 2], 0), ([8, 9, 9], 2)):
        seeds = np.asarray(seeds, dtype=np.int64)
        for fn in (kernel, twin):
            node_map = np.full(g.num_nodes, -1, dtype=np.int32)
            got = fn(g.indptr, g.indices, seeds, hops, keys, node_map, True)
            assert got[1][0] == -1 - first and got[0].shape == (0,), (fn, seeds)
            assert (node_map == -1).all()


def check_label_balanced(kernel, twin):
    """The same cluster order as the NumPy twin, bit for bit: many labels (past 128, NumPy's
    pairwise block), a pool wider than the clusters, ties (identical clusters: the first
    minimum), one cluster; its sums in NumPy's order, bit for bit, at every length."""
    from twopgraph.locality.kernels import _numpy_sum
    rng = np.random.default_rng(6)
    for n in range(1, 400):
        x = rng.standard_normal(n + 3) * 10.0 ** rng.uniform(-3, 3)
        assert _numpy_sum(x, 3, n) == x[3:].sum(), n
    cases = [(600, 47, 16, 1024), (120, 172, 16, 512), (40, 3, 4, 100), (7, 5, 16, 10),
             (1, 2, 16, 5), (30, 4, 8, 64)]
    for trial, (c, k, pool, batch) in enumerate(cases):
        counts = rng.integers(0, 30, (c, k))
        counts[:, 0] += 1
        if trial == len(cases) - 1:
            counts[:] = counts[0]  # every cluster alike: ties everywhere
        size = counts.sum(1)
        target = counts.sum(0) / counts.sum()
        order = rng.permutation(c)
        got = kernel(order, counts, size, target, batch, pool)
        want = twin(order, counts, size, target, batch, pool)
        np.testing.assert_array_equal(got, want)
        assert sorted(got.tolist()) == list(range(c))


def check_relabel(kernel, twin):
    rng = np.random.default_rng(0)
    n = 100
    for trial in range(6):
        num_known = int(rng.integers(0, 20))
        known = rng.choice(n, num_known, replace=False)
        nbrs = rng.integers(0, n, int(rng.integers(0, 300))).astype((np.int32, np.int64)[trial % 2])
        got = []
        map_dtype = (np.int64, np.int64, np.int32)[trial % 3]
        for fn in (kernel, twin):
            node_map = np.full(n, -1, dtype=map_dtype)
            node_map[known] = np.arange(num_known)
            frontier = np.full(nbrs.shape[0], -5, dtype=np.int64)
            local, num_new = fn(nbrs, node_map, num_known, frontier)
            got.append((local, int(num_new), frontier[:num_new].copy(), node_map))
        (la, na, fa, ma), (lb, nb, fb, mb) = got
        np.testing.assert_array_equal(la, lb)
        assert la.dtype == lb.dtype == np.int64 and na == nb
        np.testing.assert_array_equal(fa, fb)
        np.testing.assert_array_equal(ma, mb)


def check_relabel_hashed(kernel, twin):
    """Same local ids, frontier, table contents and stop position as the twin; and the same
    relabelling as :func:`relabel` with an N-sized map (when the table does not fill up)."""
    from twopgraph.sampler.kernels import relabel_ref
    rng = np.random.default_rng(1)
    n = 300
    for trial in range(8):
        bits = int(rng.integers(3, 10))
        cap = 1 << bits
        limit = cap // 2
        num_known = int(rng.integers(0, min(20, limit)))
        known = rng.choice(n, num_known, replace=False)
        nbrs = rng.integers(0, n, int(rng.integers(0, 400))).astype((np.int32, np.int64)[trial % 2])
        start = int(rng.integers(0, 3)) if nbrs.shape[0] > 3 else 0
        got = []
        for fn in (kernel, twin):
            keys = np.full(cap, -1, dtype=np.int64)
            vals = np.zeros(cap, dtype=np.int64)
            slot_of = np.zeros(limit, dtype=np.int64)
            scratch = np.zeros(max(num_known, 1), dtype=np.int64)
            loc0 = np.zeros(num_known, dtype=np.int64)
            e0, c0 = fn(known.astype(np.int64), 0, loc0, keys, vals, slot_of, 64 - bits, 0,
                        limit, 0, scratch)
            assert (e0, c0) == (num_known, num_known)
            local = np.full(nbrs.shape[0], -7, dtype=np.int64)
            frontier = np.full(nbrs.shape[0], -5, dtype=np.int64)
            e, c = fn(nbrs, start, local, keys, vals, slot_of, 64 - bits, num_known, limit,
                      num_known, frontier)
            got.append((int(e), int(c), local, frontier, keys, vals, slot_of[:c].copy()))
        a, b = got
        assert a[:2] == b[:2]
        for x, y in zip(a[2:], b[2:]):
            np.testing.assert_array_equal(x, y)
        e, c, local, frontier = a[:4]
        # the slots hold exactly the known + new ids, each where slot_of says
        keys, vals, slots = a[4], a[5], a[6]
        np.testing.assert_array_equal(vals[slots], np.arange(c))
        assert (keys != -1).sum() == c
        if e == nbrs.shape[0]:  # completed: same result as the N-sized map
            node_map = np.full(n, -1, dtype=np.int64)
            node_map[known] = np.arange(num_known)
            fr = np.full(nbrs.shape[0], -5, dtype=np.int64)
            ref_local, ref_new = relabel_ref(nbrs[start:], node_map, num_known, fr)
            np.testing.assert_array_equal(local[start:], ref_local)
            np.testing.assert_array_equal(frontier[:c - num_known], fr[:ref_new])
        else:
            assert c == limit


def check_clear_table(kernel, twin):
    rng = np.random.default_rng(3)
    for cap in (8, 64, 1024):
        keys = rng.integers(-1, 50, cap).astype(np.int64)
        count = int(rng.integers(0, cap // 2 + 1))
        slot_of = rng.choice(cap, cap // 2, replace=False).astype(np.int64)
        a, b = keys.copy(), keys.copy()
        kernel(a, slot_of, count)
        twin(b, slot_of, count)
        np.testing.assert_array_equal(a, b)


def check_reset_map(kernel, twin):
    rng = np.random.default_rng(2)
    for size in (1, 50, 1000):
        base = rng.integers(-1, size, size).astype(np.int64)
        nodes = rng.choice(size, int(rng.integers(0, size + 1)), replace=False).astype(np.int64)
        a, b = base.copy(), base.copy()
        kernel(a, nodes)
        twin(b, nodes)
        np.testing.assert_array_equal(a, b)


def check_permute_csr(kernel, twin):
    for dtype in (None, np.int64):
        for seed, g in graphs(dtype):
            perm = np.random.default_rng(seed).permutation(g.num_nodes).astype(np.int64)
            inv = np.argsort(perm)
            a = kernel(g.indptr, g.indices, perm, inv)
            b = twin(g.indptr, g.indices, perm, inv)
            np.testing.assert_array_equal(a[0], b[0])
            np.testing.assert_array_equal(a[1], b[1])
            assert a[1].dtype == b[1].dtype == g.indices.dtype


def check_csr_violations(kernel, twin):
    """Valid graphs and each kind of violation (missing reverses, fully directed either way,
    self loops, duplicates, symmetric duplicates), with sorted and with unsorted rows."""
    rng = np.random.default_rng(0)

    def raw_csr(n, src, dst, dtype):  # CSR of the entries as given (sorted rows)
        o = np.lexsort((dst, src))
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
        return indptr, np.asarray(dst)[o].astype(dtype)

    for dtype in (np.int32, np.int64):
        for seed, g in graphs():
            n = g.num_nodes
            src, dst = np.repeat(np.arange(n), g.degrees()), g.indices.astype(np.int64)
            keep = rng.random(src.shape[0]) > 0.05
            d = rng.integers(0, src.shape[0], 4)
            loops = rng.integers(0, n, 3)
            for s, t in [(src, dst), (src[keep], dst[keep]), (src[src < dst], dst[src < dst]),
                         (src[src > dst], dst[src > dst]), (np.r_[src, loops], np.r_[dst, loops]),
                         (np.r_[src, src[d], dst[d]], np.r_[dst, dst[d], src[d]]),
                         (np.r_[src, src[d]], np.r_[dst, dst[d]])]:
                indptr, indices = raw_csr(n, s, t, dtype)
                for ix in (indices, indices[::-1].copy()):  # sorted rows, then unsorted ones
                    np.testing.assert_array_equal(kernel(indptr, ix), twin(indptr, ix))
    for n in (1, 3):  # no edges
        indptr, ix = np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int32)
        np.testing.assert_array_equal(kernel(indptr, ix), twin(indptr, ix))


def bfs_inputs(g, parts):
    members = np.argsort(parts, kind="stable")
    start = np.zeros(parts.max() + 2, dtype=np.int64)
    np.cumsum(np.bincount(parts), out=start[1:])
    return g.indptr, g.indices, parts.astype(np.int64), members, start


def check_cluster_bfs_order(kernel, twin):
    for k in (1, 3, 9):
        for seed, (n, m) in zip(SEEDS, [(300, 700), (120, 900), (40, 30)]):
            g = random_graph(n, m, seed=seed + k, hub=False)
            parts = np.random.default_rng(seed + k).integers(0, k, n)
            args = bfs_inputs(g, parts)
            a = kernel(*args)
            np.testing.assert_array_equal(a, twin(*args))
            assert sorted(a.tolist()) == list(range(n))
            for dt in (np.int8, np.int16):  # the narrow ids callers pass (label_dtype)
                narrow = (*args[:2], args[2].astype(dt), *args[3:])
                np.testing.assert_array_equal(kernel(*narrow), a)
                np.testing.assert_array_equal(narrow[2], args[2])  # input left as it was


def check_sparsify_csr(kernel, twin):
    for seed, g in graphs():
        for max_degree in (1, 3, 6, 1000):
            salt = np.uint64(mix_key(seed, max_degree))
            ip, ix = kernel(g.indptr, g.indices, max_degree, salt)
            rip, rix = twin(g.indptr, g.indices, max_degree, salt)
            np.testing.assert_array_equal(ip, rip)
            np.testing.assert_array_equal(ix, rix)


def check_cut_edges(kernel, twin):
    for seed, g in graphs():
        for k in (1, 2, 7):
            parts = np.random.default_rng(seed).integers(0, k, g.num_nodes)
            want = twin(g.indptr, g.indices, parts)
            for dt in (np.int64, np.int8):
                assert int(kernel(g.indptr, g.indices, parts.astype(dt))) == want


def check_edge_chunks(kernel, twin):
    for seed, g in graphs():
        for num in (1, 2, 7, 64, 1000):
            got = kernel(g.indptr, num)
            np.testing.assert_array_equal(got, twin(g.indptr, num))
            assert got[0] == 0 and got[-1] == g.num_nodes and np.all(np.diff(got) >= 0)


def check_halo_masks(kernel, twin):
    for seed, g in graphs():
        rng = np.random.default_rng(seed)
        mask = (rng.random(g.num_nodes) < 0.05).astype(np.uint8) << rng.integers(
            0, 8, g.num_nodes).astype(np.uint8)
        # seeds of only some bits (bits 0 and 5, many seeds): most bytes fill up to 0b100001
        # within the hops, and the kernel stops pulling them (its early exit)
        dense = np.where(rng.random(g.num_nodes) < 0.3, np.uint8(1),
                         np.uint8(0)) << rng.choice(np.array([0, 5], dtype=np.uint8),
                                                    g.num_nodes)
        for hops, mask in itertools.product((0, 1, 2, 3), (mask, dense)):
            got = kernel(g.indptr, g.indices, mask, hops)
            np.testing.assert_array_equal(got, twin(g.indptr, g.indices, mask, hops))
            # bit b set <=> a seed of bit b within `hops` hops (BFS from every seed)
            a = g.to_scipy().astype(bool)
            for b in (0, 5):
                x = ((mask >> b) & 1).astype(bool)
                for _ in range(hops):
                    x = x | ((a @ x.astype(np.float32)) > 0)
                np.testing.assert_array_equal(((got >> b) & 1).astype(bool), x)


def check_shared_edges(kernel, twin):
    for seed, g in graphs():
        rng = np.random.default_rng(seed)
        mask = rng.integers(0, 256, g.num_nodes).astype(np.uint8)
        got = kernel(g.indptr, g.indices, mask)
        np.testing.assert_array_equal(got, twin(g.indptr, g.indices, mask))
        for b in (0, 3, 7):  # the induced subgraph's entries, from its vertex set
            keep = ((mask >> b) & 1).astype(bool)
            sub = g.to_scipy()[keep][:, keep]
            assert int(got[b]) == sub.nnz


def check_cluster_pairs(kernel, twin):
    for seed, g in graphs():
        for k, chunks in ((1, 1), (2, 3), (7, 16), (40, 2)):
            cid = np.random.default_rng(seed).integers(0, k, g.num_nodes).astype(np.int32)
            got = kernel(g.indptr, g.indices, cid, k, chunks)
            np.testing.assert_array_equal(got, twin(g.indptr, g.indices, cid, k, chunks))
            np.testing.assert_array_equal(
                kernel(g.indptr, g.indices, cid.astype(np.int16), k, chunks), got)
            assert got.trace() == 0 and (got == got.T).all()  # symmetric graph, no self pairs


def random_stream(num_rows, num_batches, max_batch, seed):
    rng = np.random.default_rng(seed)
    return [rng.choice(num_rows, size=rng.integers(1, max_batch + 1), replace=False)
            .astype(np.int64) for _ in range(num_batches)]


def run_window(announce, consume, stream, n, ahead):
    """Announce ``ahead`` batches in advance, consume one at a time; the state after each step."""
    last_g = np.full(n, -1, dtype=np.int64)
    nu = np.full(n, 1 << 40, dtype=np.int64)
    link = np.full(1024, -7, dtype=np.int64)
    g, live, starts, trace = 0, 0, [], []
    for b, ids in enumerate(stream):
        announce(ids, g, b, live, last_g, nu, link, 1023)
        starts.append(g)
        g += ids.shape[0]
        if b >= ahead:
            c = b - ahead
            consume(stream[c], starts[c], nu, link, 1023)
            live = starts[c] + stream[c].shape[0]
        trace.append(np.concatenate([nu, last_g, link]))
    return np.array(trace)


def window_cases():
    for seed in SEEDS:
        for ahead in (0, 1, 3, 8):
            yield random_stream(40, 30, 15, seed), 40, ahead


def check_window_announce(kernel, twin):
    from twopgraph.cache.kernels import window_consume_ref
    for stream, n, ahead in window_cases():
        np.testing.assert_array_equal(run_window(kernel, window_consume_ref, stream, n, ahead),
                                      run_window(twin, window_consume_ref, stream, n, ahead))


def check_window_consume(kernel, twin):
    from twopgraph.cache.kernels import window_announce_ref
    for stream, n, ahead in window_cases():
        np.testing.assert_array_equal(run_window(window_announce_ref, kernel, stream, n, ahead),
                                      run_window(window_announce_ref, twin, stream, n, ahead))


DROPOUT_CASES = [(1, 0.5), (7, 0.3), (40_001, 0.5), (100_000, 0.1), (5000, 0.9)]


def check_relu_dropout_fwd(kernel, twin):
    for n, p in DROPOUT_CASES:
        rng = np.random.default_rng(n)
        x = rng.standard_normal(n).astype(np.float32)
        key, thr, scale = mix_key(n), round(p * 2**32), np.float32(1 / (1 - p))
        out = np.empty_like(x)
        keep = np.empty(n, dtype=np.uint8)
        kernel(x, out, keep, np.uint64(key), np.uint64(thr), scale)
        out_ref, keep_ref = twin(x, key, thr, scale)
        np.testing.assert_array_equal(keep, keep_ref)
        np.testing.assert_array_equal(out, out_ref)
        if n > 1000:  # kept with probability 1 - p among the positive entries (z-score)
            kept = keep[x > 0]
            z = (kept.mean() - (1 - p)) / np.sqrt(p * (1 - p) / kept.shape[0])
            assert abs(z) < 5, (n, p, z)


def check_relu_dropout_bwd(kernel, twin):
    for n, p in DROPOUT_CASES:
        rng = np.random.default_rng(n + 1)
        grad = rng.standard_normal(n).astype(np.float32)
        keep = (rng.random(n) >= p).astype(np.uint8)
        scale = np.float32(1 / (1 - p))
        out = np.empty_like(grad)
        kernel(grad, keep, scale, out)
        np.testing.assert_array_equal(out, twin(grad, keep, scale))


def check_csr_spmm(kernel, twin):
    """Rows with no entries, repeated columns, int32 and int64 ids, 1 and 300 columns; each
    row's sum in entry order (the twin's np.add.at too): equal to 1e-6."""
    rng = np.random.default_rng(11)
    for rows, cols, nnz, f, idt in ((1, 1, 0, 1, np.int64), (5, 3, 12, 4, np.int32),
                                    (400, 90, 3000, 300, np.int64), (2000, 7, 50, 16, np.int32)):
        r = np.sort(rng.integers(0, rows, nnz))
        indptr = np.searchsorted(r, np.arange(rows + 1)).astype(np.int64)
        indices = rng.integers(0, cols, nnz).astype(idt)
        values = rng.standard_normal(nnz).astype(np.float32)
        h = rng.standard_normal((cols, f)).astype(np.float32)
        out = np.full((rows, f), np.nan, dtype=np.float32)
        want = np.empty_like(out)
        kernel(indptr, indices, values, h, out)
        twin(indptr, indices, values, h, want)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
        dense = np.zeros((rows, cols), np.float64)
        np.add.at(dense, (np.repeat(np.arange(rows), np.diff(indptr)), indices), values)
        np.testing.assert_allclose(out, dense @ h, rtol=1e-4, atol=1e-4)


def check_scatter_rows(kernel, twin):
    """Repeated targets, rows never hit, 1..5 workers: the twin's sums to 1e-5."""
    rng = np.random.default_rng(12)
    for rows, srcs, e, f, parts in ((1, 1, 0, 1, 1), (7, 5, 40, 3, 2), (300, 80, 5000, 64, 5),
                                    (3, 900, 2000, 8, 4)):
        tgt = rng.integers(0, rows, e).astype(np.int64)
        src = rng.integers(0, srcs, e).astype(np.int64)
        w = rng.standard_normal(e).astype(np.float32)
        y = rng.standard_normal((srcs, f)).astype(np.float32)
        acc = rng.standard_normal((rows, f)).astype(np.float32)
        want = acc.copy()
        kernel(tgt, src, w, y, acc, parts)
        twin(tgt, src, w, y, want, parts)
        np.testing.assert_allclose(acc, want, rtol=1e-5, atol=1e-5)


def _edge_lists():
    """Edge lists with duplicates, self loops and reverse pairs (and an empty one)."""
    rng = np.random.default_rng(7)
    for n, e in ((1, 0), (5, 40), (60, 500), (300, 4000)):
        s, d = rng.integers(0, n, e), rng.integers(0, n, e)
        if e:
            s = np.concatenate([s, d[:10], s[:5], [0]])
            d = np.concatenate([d, s[:10], d[:5], [0]])
        yield n, s.astype(np.int64), d.astype(np.int64)


def check_count_degrees(kernel, twin):
    for n, s, d in _edge_lists():
        for bad in (None, -1, n):  # an id out of range stops the count at that edge
            s2 = s.copy()
            if bad is not None and s2.shape[0]:
                s2[s2.shape[0] // 2] = bad
            d1, d2 = np.zeros(n, np.int64), np.zeros(n, np.int64)
            np.testing.assert_array_equal(kernel(s2, d, d1, n), twin(s2, d, d2, n))
            if bad is None:
                np.testing.assert_array_equal(d1, d2)


def _scattered(n, s, d, dtype):
    from twopgraph.graph.csrbuild import count_degrees_ref, scatter_edges_ref
    deg = np.zeros(n, np.int64)
    count_degrees_ref(s, d, deg, n)
    indptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    out = np.zeros(int(indptr[-1]), dtype=dtype)
    scatter_edges_ref(s, d, indptr[:-1].copy(), out)
    return indptr, out


def _scatter_with(fn, s, d, indptr, dtype, *bounds):
    """``fn``'s scatter of the edges into slots by ``indptr``: ``(out, pos)``."""
    out = np.full(int(indptr[-1]), 99, dtype=dtype)
    pos = indptr[:-1].copy()
    fn(s, d, pos, out, *bounds)
    return out, pos


def check_scatter_edges(kernel, twin):
    for dtype in (np.int32, np.int64):
        for n, s, d in _edge_lists():
            indptr, _ = _scattered(n, s, d, dtype)
            (o1, p1), (o2, p2) = (_scatter_with(fn, s, d, indptr, dtype) for fn in (kernel, twin))
            np.testing.assert_array_equal(p1, indptr[1:])
            np.testing.assert_array_equal(p2, indptr[1:])
            np.testing.assert_array_equal(o1, o2)


def check_scatter_edges_range(kernel, twin):
    for n, s, d in _edge_lists():
        indptr, _ = _scattered(n, s, d, np.int32)
        for lo, hi in ((0, n), (0, n // 2), (n // 3, n), (n // 2, n // 2 + 1)):
            (o1, p1), (o2, p2) = (_scatter_with(fn, s, d, indptr, np.int32, lo, hi)
                                  for fn in (kernel, twin))
            np.testing.assert_array_equal(o1, o2)
            np.testing.assert_array_equal(p1, p2)


def check_sort_dedup_rows(kernel, twin):
    for dtype in (np.int32, np.int64):
        for n, s, d in _edge_lists():
            indptr, out = _scattered(n, s, d, dtype)
            got = []
            for fn in (kernel, twin):
                e, deg = out.copy(), np.zeros(n, np.int64)
                f = fn(indptr, e, deg)
                rows = [e[indptr[v]:indptr[v] + deg[v]].tolist() for v in range(n)]
                got.append((int(f), deg.tolist(), rows))
            assert got[0] == got[1]


def check_compact_rows(kernel, twin):
    from twopgraph.graph.csrbuild import sort_dedup_rows_ref
    for n, s, d in _edge_lists():
        indptr0, out = _scattered(n, s, d, np.int32)
        deg = np.zeros(n, np.int64)
        sort_dedup_rows_ref(indptr0, out, deg)
        indptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
        res = []
        for fn in (kernel, twin):
            fin = np.full(int(indptr[-1]), -7, dtype=np.int32)
            fn(indptr0, out, indptr, fin)
            res.append(fin)
        np.testing.assert_array_equal(res[0], res[1])
        assert (res[0] >= 0).all()


# -- twopgraph.locality.labelprop, .contract, .coarsen, kernels.ball_seeds ------------------------
def _lp_state(g, seed, coarse=False):
    """Labels (some merged), vertex weights and label weights for the label-propagation
    checks; ``coarse``: int64 edge weights too."""
    rng = np.random.default_rng(seed)
    n = g.num_nodes
    labels = np.where(rng.random(n) < 0.4, rng.integers(0, max(1, n // 10), n),
                      np.arange(n)).astype(np.int32)
    vw = rng.integers(1, 4, n).astype(np.int32)
    cw = np.bincount(labels, weights=vw, minlength=n).astype(np.int64)
    ew = np.empty(0, np.int64)
    if coarse:  # symmetric weights: the weight of (u, v) from the unordered pair
        src = np.repeat(np.arange(n), g.degrees())
        lo, hi = np.minimum(src, g.indices), np.maximum(src, g.indices)
        ew = ((lo * 7919 + hi * 104729) % 9 + 1).astype(np.int64)
    return labels, vw, cw, ew


def check_lp_propose(kernel, twin):
    for seed, g in graphs():
        for coarse in (False, True):
            labels, vw, cw, ew = _lp_state(g, seed, coarse)
            members = np.arange(seed % 3, g.num_nodes, 2, dtype=np.int64)
            for cap, max_visit in ((4, 0), (10**6, 0), (12, 3), (10**6, 5)):
                key = np.uint64(mix_key(seed, cap, max_visit))
                args = (g.indptr, g.indices, ew, labels, vw, cw, cap, members, key, max_visit)
                a, b = kernel(*args), twin(*args)
                np.testing.assert_array_equal(a, b)
                assert (a >= 0).any() or cap == 4


def check_lp_apply(kernel, twin):
    for seed, g in graphs():
        labels, vw, cw, ew = _lp_state(g, seed)
        members = np.arange(g.num_nodes, dtype=np.int64)
        targets = np.random.default_rng(seed).integers(-1, g.num_nodes // 10 + 1, g.num_nodes)
        for cap in (5, 50):
            got = []
            for fn in (kernel, twin):
                lab, w = labels.copy(), cw.copy()
                moved = fn(members, targets, lab, vw, w, cap)
                got.append((int(moved), lab, w))
            assert got[0][0] == got[1][0] > 0
            np.testing.assert_array_equal(got[0][1], got[1][1])
            np.testing.assert_array_equal(got[0][2], got[1][2])
            np.testing.assert_array_equal(got[0][2], np.bincount(got[0][1], weights=vw,
                                                                 minlength=g.num_nodes))


def check_subround_order(kernel, twin):
    for n, nsub in ((0, 4), (1, 8), (100, 8), (1000, 3)):
        res = []
        for fn in (kernel, twin):
            out, start = np.full(n, -1, np.int32), np.zeros(nsub + 1, np.int64)
            fn(np.uint64(mix_key(n, nsub)), nsub, out, start)
            res.append((out, start))
        np.testing.assert_array_equal(res[0][0], res[1][0])
        np.testing.assert_array_equal(res[0][1], res[1][1])
        assert sorted(res[0][0].tolist()) == list(range(n))


def check_group_by(kernel, twin):
    rng = np.random.default_rng(0)
    for n, num in ((0, 1), (50, 7), (1000, 100)):
        cid = rng.integers(0, num, n).astype(np.int32)
        for a, b in zip(kernel(cid, num), twin(cid, num)):
            np.testing.assert_array_equal(a, b)


def check_contract(kernel, twin):
    from twopgraph.locality.contract import group_by_ref
    rng = np.random.default_rng(1)
    for seed, g in graphs():
        for num in (1, 3, g.num_nodes // 7 + 1):
            cid = rng.integers(0, num, g.num_nodes).astype(np.int32)
            start, members = group_by_ref(cid, num)
            a = kernel(g.indptr, g.indices, np.empty(0, np.int64), cid, start, members)
            b = twin(g.indptr, g.indices, np.empty(0, np.int64), cid, start, members)
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y)
            # one more level: weighted input
            c2 = (np.arange(num) % 2).astype(np.int64)
            s2, m2 = group_by_ref(c2, 2)
            for x, y in zip(kernel(a[0], a[1], a[2], c2, s2, m2),
                            twin(a[0], a[1], a[2], c2, s2, m2)):
                np.testing.assert_array_equal(x, y)
            assert a[2].sum() == (cid[np.repeat(np.arange(g.num_nodes), g.degrees())]
                                  != cid[g.indices]).sum()


def check_heavy_edges(kernel, twin):
    for seed, g in graphs():
        _, _, _, ew = _lp_state(g, seed, coarse=True)
        for keep in (1, 2, 5, 1000):
            a = kernel(g.indptr, g.indices, ew, keep)
            b = twin(g.indptr, g.indices, ew, keep)
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y)
            src = np.repeat(np.arange(g.num_nodes), np.diff(a[0]))
            pairs = set(zip(src.tolist(), a[1].tolist()))
            assert all((v, u) in pairs for u, v in pairs)  # symmetric


def check_greedy_pack(kernel, twin):
    for seed, g in graphs():
        vw = np.random.default_rng(seed).integers(1, 5, g.num_nodes).astype(np.int64)
        order = np.random.default_rng(seed).permutation(g.num_nodes).astype(np.int64)
        for k in (1, 4, 17):
            cap = int(np.ceil(vw.sum() / k * 1.05))
            a = kernel(g.indptr, g.indices, np.empty(0, np.int64), vw, k, cap, order)
            b = twin(g.indptr, g.indices, np.empty(0, np.int64), vw, k, cap, order)
            np.testing.assert_array_equal(a, b)
            assert a.min() >= 0 and a.max() < k


def check_ball_seeds(kernel, twin):
    for seed, g in graphs():
        n = g.num_nodes
        is_train = (np.random.default_rng(seed).random(n) < 0.3).astype(np.uint8)
        starts = np.flatnonzero(is_train)[::7].astype(np.int64)
        for count, limit in ((1, n), (10, n), (40, 30), (10**6, n)):
            visited = np.zeros(n, np.uint8)
            a = kernel(g.indptr, g.indices, is_train, starts, count, limit, visited)
            b = twin(g.indptr, g.indices, is_train, starts, count, limit, visited)
            np.testing.assert_array_equal(a, b)
            assert not visited.any() and is_train[a].all() and len(set(a.tolist())) == len(a)


def _labor_layers(index_dtype=None):
    """``(graph, nodes, cand, num_cand, seed)`` of a few LABOR layers: half the vertices as
    dsts, their neighbours numbered in order of first appearance."""
    from twopgraph.sampler.kernels import sample_neighbors_ref
    for seed, g in graphs(index_dtype):
        n = g.num_nodes
        nodes = np.random.default_rng(seed).permutation(n)[: n // 2 + 1].astype(np.int64)
        _, every = sample_neighbors_ref(g.indptr, g.indices, nodes, -1, 0)
        _, first, inv = np.unique(every, return_index=True, return_inverse=True)
        order = np.argsort(np.argsort(first))  # rank of each distinct id by first appearance
        yield g, nodes, order[inv].astype(np.int64), int(first.shape[0]), seed


def check_variate(kernel, twin):
    rng = np.random.default_rng(4)
    for _ in range(200):
        k0, k1 = (int(x) for x in rng.integers(0, 2**63, 2))
        t = int(rng.integers(0, 10**9))
        a = float(rng.random())
        ca, cb = np.cos(a * np.pi / 2), np.sin(a * np.pi / 2)
        for smooth in (False, True):
            r = kernel(np.uint64(k0), np.uint64(k1), ca, cb, smooth, t)
            assert r == twin(k0, k1, ca, cb, smooth, t) and 0.0 <= r < 1.0


def check_labor_pi(kernel, twin):
    for g, nodes, cand, num_cand, seed in _labor_layers():
        for fanout in (1, 3, 10, -1):
            for iterations in (0, 1, 3):
                c1, p1 = kernel(g.indptr, nodes, cand, num_cand, fanout, iterations)
                c2, p2 = twin(g.indptr, nodes, cand, num_cand, fanout, iterations)
                np.testing.assert_array_equal(c1, c2)
                np.testing.assert_array_equal(p1, p2)


def _every_nbr(g, nodes):
    """The dsts' concatenated CSR rows (every in-edge's neighbour, in candidate-edge order)."""
    return np.concatenate([g.indices[g.indptr[v]:g.indptr[v + 1]] for v in nodes]
                          ).astype(np.int64)


def check_labor_variates(kernel, twin):
    rng = np.random.default_rng(4)
    vertices = rng.integers(0, 10**6, 500)
    for smooth in (False, True):
        k0, k1 = mix_key(4, smooth, 0), mix_key(4, smooth, 1)
        got = kernel(np.uint64(k0), np.uint64(k1), 0.6, 0.8, smooth, vertices)
        np.testing.assert_array_equal(got, twin(k0, k1, 0.6, 0.8, smooth, vertices))
        assert got.dtype == np.float64


def check_labor_sample(kernel, twin):
    from twopgraph.sampler.labor_pi import labor_pi_ref
    from twopgraph.sampler.labor_variates import labor_variates_ref
    none_f, none_i = np.empty(0, dtype=np.float64), np.empty(0, dtype=np.int64)
    for dtype in (None, np.int64):
        for g, nodes, cand, num_cand, seed in _labor_layers(dtype):
            for fanout, iterations in ((1, 0), (3, 0), (3, 2), (10, 1), (-1, 0)):
                c, pi = labor_pi_ref(g.indptr, nodes, cand, num_cand, fanout, iterations)
                if iterations == 0:
                    pi, cnd = none_f, none_i
                else:
                    cnd = cand
                for smooth in (False, True):
                    k0, k1 = mix_key(seed, fanout, 0), mix_key(seed, fanout, 1)
                    args = (g.indptr, g.indices, nodes, c, pi, cnd)
                    o2, n2, w2 = twin(*args, none_f, k0, k1, 0.6, 0.8, smooth)
                    # variates per edge, and per candidate (the candidates' own variates)
                    distinct = np.empty(num_cand, dtype=np.int64)
                    distinct[cand] = _every_nbr(g, nodes)
                    rv = labor_variates_ref(k0, k1, 0.6, 0.8, smooth, distinct)
                    for cnd_k, rv_k in ((cnd, none_f), (cand, rv)):
                        o1, n1, w1 = kernel(g.indptr, g.indices, nodes, c, pi, cnd_k, rv_k,
                                            np.uint64(k0), np.uint64(k1), 0.6, 0.8, smooth)
                        np.testing.assert_array_equal(o1, o2)
                        np.testing.assert_array_equal(n1, n2)
                        np.testing.assert_array_equal(w1, w2)
                        assert n1.dtype == n2.dtype == g.indices.dtype
                        assert w1.dtype == np.float64



def check_labor_min_degree(kernel, twin):
    from twopgraph.sampler.labor_dense import _pi_of
    from twopgraph.sampler.labor_pi import labor_pi_ref
    for dtype in (None, np.int64):
        for g, nodes, cand, num_cand, seed in _labor_layers(dtype):
            n = g.num_nodes
            for mdtype in (np.int32, np.int64):
                d1, d2 = np.zeros(n, dtype=mdtype), np.zeros(n, dtype=mdtype)
                t1 = kernel(g.indptr, g.indices, nodes, d1)
                t2 = twin(g.indptr, g.indices, nodes, d2)
                np.testing.assert_array_equal(t1, t2)
                np.testing.assert_array_equal(d1, d2)
                assert t1.dtype == g.indices.dtype
                assert np.count_nonzero(d1) == t1.shape[0] == num_cand
                # LABOR-1's pi from it: labor_pi's one round, candidate by candidate
                for fanout in (1, 3, 10):
                    _, p = labor_pi_ref(g.indptr, nodes, cand, num_cand, fanout, 1)
                    got = [_pi_of(d1, int(t), fanout) for t in t1]
                    np.testing.assert_array_equal(got, p)


def check_labor_sample_dense(kernel, twin):
    from twopgraph.sampler.labor_dense import labor_min_degree_ref
    for dtype in (None, np.int64):
        for g, nodes, cand, num_cand, seed in _labor_layers(dtype):
            dmin = np.zeros(g.num_nodes, dtype=np.int32)
            labor_min_degree_ref(g.indptr, g.indices, nodes, dmin)
            for fanout in (1, 3, 10):
                for smooth in (False, True):
                    k0, k1 = mix_key(seed, fanout, 0), mix_key(seed, fanout, 1)
                    got = kernel(g.indptr, g.indices, nodes, fanout, dmin, np.uint64(k0),
                                 np.uint64(k1), 0.6, 0.8, smooth)
                    want = twin(g.indptr, g.indices, nodes, fanout, dmin, k0, k1, 0.6, 0.8,
                                smooth)
                    for a, b in zip(got, want):
                        np.testing.assert_array_equal(a, b)
                    assert got[1].dtype == g.indices.dtype and got[2].dtype == np.float64

def check_labor_sample_dense_onepass(kernel, twin):
    for dtype in (None, np.int64):
        for g, nodes, cand, num_cand, seed in _labor_layers(dtype):
            for fanout in (1, 3, 10):
                for smooth in (False, True):
                    k0, k1 = mix_key(seed, fanout, 0), mix_key(seed, fanout, 1)
                    d1 = np.zeros(g.num_nodes, dtype=np.int32)
                    d2 = np.zeros(g.num_nodes, dtype=np.int32)
                    got = kernel(g.indptr, g.indices, nodes, fanout, d1, np.uint64(k0),
                                 np.uint64(k1), 0.6, 0.8, smooth)
                    want = twin(g.indptr, g.indices, nodes, fanout, d2, k0, k1, 0.6, 0.8,
                                smooth)
                    for a, b in zip(got[:3], want[:3]):
                        np.testing.assert_array_equal(a, b)
                    np.testing.assert_array_equal(np.sort(got[3]), np.sort(want[3]))
                    assert not d1.any() and not d2.any()  # zero again on return
                    assert got[1].dtype == got[3].dtype == g.indices.dtype
                    assert got[2].dtype == np.float64


CHECKS = {
    "twopgraph.core.rng.splitmix64": check_splitmix64,
    "twopgraph.core.rng.draw": check_draw,
    "twopgraph.core.rng.draw_at": check_draw_at,
    "twopgraph.core.rng.vertex_base": check_vertex_base,
    "twopgraph.graph.kernels.permute_csr": check_permute_csr,
    "twopgraph.graph.kernels.csr_violations": check_csr_violations,
    "twopgraph.graph.csrbuild.count_degrees": check_count_degrees,
    "twopgraph.graph.csrbuild.scatter_edges": check_scatter_edges,
    "twopgraph.graph.csrbuild.scatter_edges_range": check_scatter_edges_range,
    "twopgraph.graph.csrbuild.sort_dedup_rows": check_sort_dedup_rows,
    "twopgraph.graph.csrbuild.compact_rows": check_compact_rows,
    "twopgraph.sampler.kernels.sample_neighbors": check_sample_neighbors,
    "twopgraph.sampler.kernels.sample_neighbors_serial": check_sample_neighbors,
    "twopgraph.sampler.batch_kernels.sample_hops_mapped": check_sample_hops_mapped,
    "twopgraph.sampler.kernels.relabel": check_relabel,
    "twopgraph.sampler.kernels.relabel_hashed": check_relabel_hashed,
    "twopgraph.sampler.kernels.clear_table": check_clear_table,
    "twopgraph.sampler.kernels.reset_map": check_reset_map,
    "twopgraph.sampler.kernels.reset_map_serial": check_reset_map,
    "twopgraph.sampler.kernels.take": check_take,
    "twopgraph.sampler.labor_variates.variate": check_variate,
    "twopgraph.sampler.labor_pi.labor_pi": check_labor_pi,
    "twopgraph.sampler.labor_pi.labor_pi_serial": check_labor_pi,
    "twopgraph.sampler.labor_variates.labor_variates": check_labor_variates,
    "twopgraph.sampler.labor_variates.labor_variates_serial": check_labor_variates,
    "twopgraph.sampler.labor_kernels.labor_sample": check_labor_sample,
    "twopgraph.sampler.labor_kernels.labor_sample_serial": check_labor_sample,
    "twopgraph.sampler.labor_dense.labor_min_degree": check_labor_min_degree,
    "twopgraph.sampler.labor_dense.labor_sample_dense": check_labor_sample_dense,
    "twopgraph.sampler.labor_dense.labor_sample_dense_serial": check_labor_sample_dense,
    "twopgraph.sampler.labor_dense.labor_sample_dense_onepass":
        check_labor_sample_dense_onepass,
    "twopgraph.cache.kernels.window_announce": check_window_announce,
    "twopgraph.cache.kernels.window_consume": check_window_consume,
    "twopgraph.locality.kernels.cluster_bfs_order": check_cluster_bfs_order,
    "twopgraph.locality.kernels.sparsify_csr": check_sparsify_csr,
    "twopgraph.locality.kernels.cut_edges": check_cut_edges,
    "twopgraph.locality.labelprop.lp_propose": check_lp_propose,
    "twopgraph.locality.labelprop.lp_apply": check_lp_apply,
    "twopgraph.locality.labelprop.subround_order": check_subround_order,
    "twopgraph.locality.contract.group_by": check_group_by,
    "twopgraph.locality.contract.contract": check_contract,
    "twopgraph.locality.contract.heavy_edges": check_heavy_edges,
    "twopgraph.locality.coarsen.greedy_pack": check_greedy_pack,
    "twopgraph.locality.kernels.ball_seeds": check_ball_seeds,
    "twopgraph.locality.kernels.label_balanced": check_label_balanced,
    "twopgraph.locality.kernels.edge_chunks": check_edge_chunks,
    "twopgraph.locality.kernels.halo_masks": check_halo_masks,
    "twopgraph.locality.kernels.shared_edges": check_shared_edges,
    "twopgraph.locality.kernels.cluster_pairs": check_cluster_pairs,
    "twopgraph.models.dropout.relu_dropout_fwd": check_relu_dropout_fwd,
    "twopgraph.models.dropout.relu_dropout_bwd": check_relu_dropout_bwd,
    "twopgraph.graph.spmm.csr_spmm": check_csr_spmm,
    "twopgraph.graph.spmm.scatter_rows": check_scatter_rows,
}


def test_every_registered_kernel_has_a_check():
    registered = set(jit.all_kernels())
    assert registered == set(CHECKS), {"unchecked": sorted(registered - set(CHECKS)),
                                       "not registered": sorted(set(CHECKS) - registered)}


@pytest.mark.parametrize("name", sorted(set(CHECKS) | set(jit.all_kernels())))
def test_kernel_matches_twin(name):
    kernel, twin = jit.all_kernels()[name]
    CHECKS[name](kernel, twin)


def test_jit_is_on_unless_disabled():
    """The kernels are numba dispatchers, or plain functions under ``NUMBA_DISABLE_JIT=1``
    (so the pure-Python run below really runs the Python code)."""
    for name, (kernel, _) in jit.all_kernels().items():
        assert hasattr(kernel, "py_func") != PURE, name


# -- properties of the sampler beyond its twin ---------------------------------------------------
def test_sample_neighbors_is_a_subset_without_repeats():
    g = random_graph(300, 3000, seed=2)
    nodes = np.arange(300, dtype=np.int64)
    off, nb = sample_neighbors(g.indptr, g.indices, nodes, 4, np.uint64(5))
    deg = g.degrees()
    for i, v in enumerate(nodes):
        got = nb[off[i]:off[i + 1]]
        assert len(got) == min(4, deg[v])
        assert len(set(got.tolist())) == len(got)
        assert set(got.tolist()) <= set(g.neighbors(v).tolist())


def test_sampling_distribution_is_uniform():
    """Each neighbour of a degree-d vertex is taken with probability min(1, f/d) (z-scores)."""
    g = random_graph(50, 100, seed=3)  # vertex 0 is a hub of degree ~25+
    v = 0
    d = int(g.degrees()[v])
    f = 5
    assert d > 2 * f
    trials = 6000
    counts = np.zeros(g.num_nodes, dtype=np.int64)
    nodes = np.array([v], dtype=np.int64)
    for t in range(trials):
        _, nb = sample_neighbors(g.indptr, g.indices, nodes, f, np.uint64(mix_key(t)))
        assert len(np.unique(nb)) == f
        counts[nb] += 1
    freq = counts[g.neighbors(v)] / trials
    p = f / d
    sd = np.sqrt(p * (1 - p) / trials)
    z = (freq - p) / sd
    assert np.all(np.abs(z) < 5), (freq, p)
    assert np.mean(z ** 2) < 2.0  # chi-square-like aggregate (expected 1)


def test_sampling_does_not_depend_on_thread_count():
    g = random_graph(2000, 20000, seed=4)
    nodes = np.arange(0, 2000, 2, dtype=np.int64)
    with jit.thread_count(1):
        a = sample_neighbors(g.indptr, g.indices, nodes, 3, np.uint64(9))
    with jit.thread_count(jit.max_threads()):
        b = sample_neighbors(g.indptr, g.indices, nodes, 3, np.uint64(9))
    np.testing.assert_array_equal(a[1], b[1])


# -- numba set-up ---------------------------------------------------------------------------------
def run_python(code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """``python -c code args...`` in a fresh process (numba's layer is chosen once per process)."""
    full_env = dict(os.environ, **env)
    full_env.pop("NUMBA_DISABLE_JIT", None)  # these tests are about numba's threads
    full_env["PYTHONPATH"] = os.pathsep.join([ROOT, full_env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=full_env,
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


CONCURRENT = """
    import sys, threading
    import numba, numpy as np
    from twopgraph.runtime import jit
    from twopgraph.graph.data import CSRGraph
    from twopgraph.sampler.kernels import sample_neighbors
    jit.all_kernels()  # importing every kernel module changes nothing
    assert numba.config.THREADING_LAYER == "workqueue", numba.config.THREADING_LAYER
    try:
        numba.threading_layer()
        sys.exit("a threading layer was launched at import")
    except ValueError:
        pass
    if sys.argv[1:] != ["raw"]:
        print("layer", jit.configure_threading(), jit.configure_threading())
    rng = np.random.default_rng(0)
    g = CSRGraph.from_edges(rng.integers(0, 2000, 20000), rng.integers(0, 2000, 20000), 2000)
    nodes = np.arange(2000, dtype=np.int64)
    def work():
        for i in range(300):
            sample_neighbors(g.indptr, g.indices, nodes, 5, np.uint64(i))
    ts = [threading.Thread(target=work) for _ in range(3)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    print("used", numba.threading_layer())
"""


@pytest.mark.skipif(PURE, reason="numba's threading layer is not used without the JIT")
def test_configure_threading_replaces_workqueue():
    """Parallel kernels called from several threads at once: numba's workqueue layer aborts the
    process; after configure_threading() they run on a thread-safe layer, with one warning."""
    env = dict(NUMBA_THREADING_LAYER="workqueue", NUMBA_NUM_THREADS="2")
    r = run_python(CONCURRENT, **env)
    assert r.returncode == 0, r.stdout + r.stderr
    layer = r.stdout.split()[1]
    assert layer in jit.SAFE_LAYERS and r.stdout.split() == ["layer", layer, layer, "used", layer]
    warned = [ln for ln in r.stderr.splitlines() if "workqueue" in ln]
    assert len(warned) == 1 and "thread-safe" in warned[0], r.stderr
    # the same work without configure_threading: numba aborts (what the test guards against)
    raw = run_python(CONCURRENT, "raw", **env)
    assert raw.returncode != 0 and "Concurrent access" in raw.stderr


@pytest.mark.skipif(PURE, reason="numba's threading layer is not used without the JIT")
def test_configure_threading_refuses_in_one_line():
    # no thread-safe layer can be loaded (both pools made unimportable)
    r = run_python("""
        import sys
        sys.modules["numba.np.ufunc.omppool"] = None
        sys.modules["numba.np.ufunc.tbbpool"] = None
        from twopgraph.runtime import jit
        from twopgraph.errors import ConfigError
        try:
            jit.configure_threading()
        except ConfigError as e:
            print(e)
    """)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and "tbb" in lines[0] and "install" in lines[0], r.stdout
    # workqueue already launched before twopgraph could choose
    r = run_python("""
        import numba
        numba.get_num_threads()
        from twopgraph.runtime import jit
        from twopgraph.errors import ConfigError
        try:
            jit.configure_threading()
        except ConfigError as e:
            print(e)
    """, NUMBA_THREADING_LAYER="workqueue")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and "'workqueue'" in lines[0], r.stdout


def test_thread_count_sets_calling_thread_and_restores():
    r = run_python("""
        import threading
        import numba
        from twopgraph.runtime import jit
        assert jit.max_threads() == 3
        assert jit.num_threads() == 3
        with jit.thread_count(1) as n:
            assert n == 1 and jit.num_threads() == 1
            seen = []
            t = threading.Thread(target=lambda: seen.append(jit.num_threads()))
            t.start(); t.join()
            assert seen == [3], seen  # other threads keep their own count
            with jit.thread_count(2):
                assert jit.num_threads() == 2
            assert jit.num_threads() == 1
            with jit.thread_count(0):  # 0: unchanged
                assert jit.num_threads() == 1
            with jit.thread_count(64) as n:  # clipped to NUMBA_NUM_THREADS
                assert n == 3 and jit.num_threads() == 3
            assert jit.num_threads() == 1
        assert jit.num_threads() == 3
        try:
            with jit.thread_count(2):
                raise KeyError("boom")
        except KeyError:
            pass
        assert jit.num_threads() == 3  # restored on error too
        try:
            with jit.thread_count(-1):
                pass
        except ValueError:
            print("ok")
    """, NUMBA_NUM_THREADS="3")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


# -- the whole file with the JIT disabled --------------------------------------------------------
@pytest.mark.skipif(PURE, reason="already pure Python")
def test_kernel_suite_with_jit_disabled():
    """Every test of this file also passes with ``NUMBA_DISABLE_JIT=1`` (kernels run as
    plain Python: index errors and integer semantics show up that compiled code hides)."""
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        os.path.abspath(__file__)],
                       env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert " failed" not in r.stdout and " passed" in r.stdout, r.stdout[-3000:]
