"""Partitioning kernels: cluster BFS order (renumbering), METIS sparsification, edge cut,
BFS balls of training vertices (the ``--schedule auto`` probe), the halos of self-dependence
partitions (``halo_masks``, ``shared_edges``: eight parts per byte of a vertex mask); and the
locality schedule's label-balanced cluster order (``label_balanced``).

Each kernel is parallel over clusters or vertices (``ball_seeds``: serial) and has a plain
NumPy/Python twin registered in :mod:`twopgraph.runtime.jit`. Graphs are CSR (``indptr`` int64,
``indices`` int32/int64); ``parts`` gives each vertex's cluster (0..C-1, any integer type:
callers pass the narrowest, :func:`label_dtype`, because these kernels look it up once per
CSR entry at random, and an N-sized table of int64 falls out of the CPU's last-level cache
long before one of int8 or int16 does).
"""

from __future__ import annotations

from collections import deque

import numpy as np
from numba import njit, prange

from twopgraph.runtime.jit import register


def label_dtype(upper: int) -> np.dtype:
    """The narrowest signed integer type holding ``-1 .. upper``: the type of per-vertex
    cluster or part ids passed to the kernels here (1 byte a vertex for up to 127 parts, 2 for
    up to 32,767 clusters)."""
    for t in (np.int8, np.int16, np.int32):
        if upper <= np.iinfo(t).max:
            return np.dtype(t)
    return np.dtype(np.int64)


def compact_labels(labels: np.ndarray, upper: int | None = None) -> np.ndarray:
    """``labels`` (non-negative ids) as :func:`label_dtype` of their largest (``upper`` when
    given), contiguous; no copy when already so."""
    labels = np.asarray(labels)
    if upper is None:
        upper = int(labels.max()) if labels.shape[0] else 0
    return np.ascontiguousarray(labels, dtype=label_dtype(upper))


# -- cluster-contiguous renumbering (renumber.py) -------------------------------------------------


@njit(parallel=True, nogil=True, cache=True)
def cluster_bfs_order(indptr, indices, parts, members, cluster_start):
    """Vertices cluster by cluster, each cluster in BFS order over its own induced subgraph.

    ``members`` lists the vertices sorted by cluster (ascending ids within a cluster) and
    ``cluster_start`` (C+1) delimits each cluster's range in it. Cluster ``c`` fills
    ``order[cluster_start[c]:cluster_start[c+1]]``: a BFS from its lowest unvisited id,
    following only edges inside ``c``, restarted at the next unvisited member until all are
    placed. Clusters run in parallel (a vertex is only ever touched by its own cluster).

    ``parts`` (signed, any width: :func:`label_dtype`) is copied once; a placed vertex's copy
    becomes -1, so each CSR entry costs one random lookup in a table of ``parts``' width.
    """
    n = parts.shape[0]
    order = np.empty(n, dtype=np.int64)
    left = parts.copy()  # cluster of a vertex not yet placed, -1 once placed
    for c in prange(cluster_start.shape[0] - 1):
        pos = cluster_start[c]
        head = pos
        for k in range(cluster_start[c], cluster_start[c + 1]):
            r = members[k]
            if left[r] < 0:
                continue
            left[r] = -1
            order[pos] = r
            pos += 1
            while head < pos:
                u = order[head]
                head += 1
                for j in range(indptr[u], indptr[u + 1]):
                    w = indices[j]
                    if left[w] == c:
                        left[w] = -1
                        order[pos] = w
                        pos += 1
    return order


def cluster_bfs_order_ref(indptr: np.ndarray, indices: np.ndarray, parts: np.ndarray,
                          members: np.ndarray, cluster_start: np.ndarray) -> np.ndarray:
    """Plain-Python twin of :func:`cluster_bfs_order`."""
    order, visited = [], set()
    for c in range(cluster_start.shape[0] - 1):
        for r in members[cluster_start[c]:cluster_start[c + 1]]:
            if r in visited:
                continue
            visited.add(r)
            queue = deque([r])
            while queue:
                u = queue.popleft()
                order.append(u)
                for w in indices[indptr[u]:indptr[u + 1]]:
                    if parts[w] == c and w not in visited:
                        visited.add(int(w))
                        queue.append(w)
    return np.asarray(order, dtype=np.int64)


# -- sparsification for METIS (cluster.py) --------------------------------------------------------


@njit(inline="always", cache=True)
def _edge_coin(u, w, salt):
    lo = np.uint64(min(u, w))
    hi = np.uint64(max(u, w))
    x = (lo * np.uint64(0x100000001B3)) ^ (hi + salt)
    x = (x ^ (x >> np.uint64(31))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(29))) * np.uint64(0x94D049BB133111EB)
    x = x ^ (x >> np.uint64(32))
    return np.float64(x >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(parallel=True, nogil=True, cache=True)
def sparsify_csr(indptr, indices, max_degree, salt):
    """Symmetric subgraph for METIS: edge {u, v} is kept when ``coin(u, v) * min(deg u, deg v)
    < max_degree``, ``coin`` a hash of (min(u, v), max(u, v), ``salt``) in [0, 1), so both
    directions agree. Returns ``(indptr, indices)`` of the kept edges (rows keep their order)."""
    n = indptr.shape[0] - 1
    counts = np.empty(n + 1, dtype=np.int64)
    counts[0] = 0
    for u in prange(n):
        du = indptr[u + 1] - indptr[u]
        c = 0
        for j in range(indptr[u], indptr[u + 1]):
            w = indices[j]
            dmin = min(du, indptr[w + 1] - indptr[w])
            if _edge_coin(u, w, salt) * dmin < max_degree:
                c += 1
        counts[u + 1] = c
    new_indptr = np.cumsum(counts)
    out = np.empty(new_indptr[n], dtype=indices.dtype)
    for u in prange(n):
        du = indptr[u + 1] - indptr[u]
        o = new_indptr[u]
        for j in range(indptr[u], indptr[u + 1]):
            w = indices[j]
            dmin = min(du, indptr[w + 1] - indptr[w])
            if _edge_coin(u, w, salt) * dmin < max_degree:
                out[o] = w
                o += 1
    return new_indptr, out


def sparsify_csr_ref(indptr: np.ndarray, indices: np.ndarray, max_degree: int,
                     salt: int | np.integer) -> tuple[np.ndarray, np.ndarray]:
    """NumPy twin of :func:`sparsify_csr` (the same hash on uint64 arrays)."""
    indptr = np.asarray(indptr, dtype=np.int64)
    deg = np.diff(indptr)
    u = np.repeat(np.arange(deg.shape[0], dtype=np.uint64), deg)
    w = np.asarray(indices).astype(np.uint64)
    salt = np.uint64(salt)
    with np.errstate(over="ignore"):
        lo, hi = np.minimum(u, w), np.maximum(u, w)
        x = (lo * np.uint64(0x100000001B3)) ^ (hi + salt)
        x = (x ^ (x >> np.uint64(31))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(29))) * np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(32)
    coin = (x >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
    keep = coin * np.minimum(deg[u.astype(np.int64)], deg[w.astype(np.int64)]) < max_degree
    new_indptr = np.zeros(deg.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(u[keep].astype(np.int64), minlength=deg.shape[0]), out=new_indptr[1:])
    return new_indptr, np.asarray(indices)[keep]


# -- edge cut (cluster.py) ------------------------------------------------------------------------


@njit(parallel=True, nogil=True, cache=True)
def cut_edges(indptr, indices, parts):
    """Directed CSR entries (u, w) with ``parts[u] != parts[w]`` (twice the undirected cut)."""
    n = indptr.shape[0] - 1
    total = 0
    for u in prange(n):
        pu = parts[u]
        c = 0
        for j in range(indptr[u], indptr[u + 1]):
            if parts[indices[j]] != pu:
                c += 1
        total += c
    return total


def cut_edges_ref(indptr: np.ndarray, indices: np.ndarray, parts: np.ndarray) -> int:
    """NumPy twin of :func:`cut_edges`."""
    parts = np.asarray(parts)
    src = np.repeat(parts, np.diff(indptr))
    return int(np.count_nonzero(src != parts[np.asarray(indices)]))


# -- self-dependence halos (partsplit.py, selfdep.py) ---------------------------------------------
@njit(nogil=True, cache=True)
def edge_chunks(indptr, num):
    """``num + 1`` row bounds that cut the CSR into ``num`` runs of about equal entries (a
    power-law graph's hubs would leave prange's equal row ranges unbalanced)."""
    n = indptr.shape[0] - 1
    bounds = np.empty(num + 1, dtype=np.int64)
    bounds[0] = 0
    total = indptr[n]
    v = 0
    for c in range(1, num):
        target = total * c // num
        while v < n and indptr[v] < target:
            v += 1
        bounds[c] = v
    bounds[num] = n
    return bounds


@njit(parallel=True, nogil=True, cache=True)
def halo_masks(indptr, indices, mask, hops):
    """``mask`` (uint8, N: bit p = vertex in part p's seed set) grown ``hops`` times by one hop
    over the symmetric CSR: afterwards bit p is set where a seed of part p is within ``hops``
    hops. One pull pass over the edges per hop for eight parts at once; a new array.

    A vertex whose byte already holds every bit any seed has (``full``) is not pulled again,
    and a row's scan stops once it does: where the halos cover most of the graph (papers-like
    graphs, 3 hops), the last hops read a fraction of the entries."""
    n = mask.shape[0]
    bounds = edge_chunks(indptr, 64)
    full = np.uint8(0)
    for v in range(n):
        full |= mask[v]
    cur = mask.copy()
    nxt = np.empty_like(mask)
    for _ in range(hops):
        for c in prange(bounds.shape[0] - 1):
            for v in range(bounds[c], bounds[c + 1]):
                acc = cur[v]
                if acc != full:
                    for j in range(indptr[v], indptr[v + 1]):
                        acc |= cur[indices[j]]
                        if acc == full:
                            break
                nxt[v] = acc
        cur, nxt = nxt, cur
    return cur


def halo_masks_ref(indptr: np.ndarray, indices: np.ndarray, mask: np.ndarray,
                   hops: int) -> np.ndarray:
    """NumPy twin of :func:`halo_masks`."""
    cur = np.array(mask, dtype=np.uint8, copy=True)
    src = np.repeat(np.arange(cur.shape[0]), np.diff(indptr))
    for _ in range(hops):
        nxt = cur.copy()
        np.bitwise_or.at(nxt, src, cur[np.asarray(indices)])
        cur = nxt
    return cur


@njit(parallel=True, nogil=True, cache=True)
def shared_edges(indptr, indices, mask):
    """Per bit p of ``mask`` (uint8, N), the CSR entries (u, w) with bit p set at both ends:
    the entries of the subgraph each of eight parts induces (int64, 8). One pass; each entry
    adds one to a histogram of ``mask[u] & mask[w]``, whose 256 bins are split into bits at
    the end."""
    bounds = edge_chunks(indptr, 64)
    nc = bounds.shape[0] - 1
    hist = np.zeros((nc, 256), dtype=np.int64)
    for c in prange(nc):
        h = hist[c]
        for u in range(bounds[c], bounds[c + 1]):
            mu = mask[u]
            if mu == 0:
                continue
            for j in range(indptr[u], indptr[u + 1]):
                h[mu & mask[indices[j]]] += 1
    counts = np.zeros(8, dtype=np.int64)
    for val in range(1, 256):
        t = 0
        for c in range(nc):
            t += hist[c, val]
        for b in range(8):
            if (val >> b) & 1:
                counts[b] += t
    return counts


def shared_edges_ref(indptr: np.ndarray, indices: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """NumPy twin of :func:`shared_edges`."""
    mask = np.asarray(mask, dtype=np.uint8)
    both = np.repeat(mask, np.diff(indptr)) & mask[np.asarray(indices)]
    return np.array([np.count_nonzero((both >> b) & 1) for b in range(8)], dtype=np.int64)


@njit(parallel=True, nogil=True, cache=True)
def cluster_pairs(indptr, indices, cid, k, num_chunks):
    """Dense ``k x k`` counts (int64) of the CSR entries (u, w) between different clusters
    ``cid[u] != cid[w]`` (``cid`` in ``0..k-1``): the cluster graph's edge weights. Parallel
    over ``num_chunks`` runs of equal entries, each with a ``k x k`` table of its own."""
    bounds = edge_chunks(indptr, num_chunks)
    part = np.zeros((num_chunks, k, k), dtype=np.int64)
    for c in prange(num_chunks):
        t = part[c]
        for u in range(bounds[c], bounds[c + 1]):
            cu = cid[u]
            for j in range(indptr[u], indptr[u + 1]):
                cw = cid[indices[j]]
                if cw != cu:
                    t[cu, cw] += 1
    out = np.zeros((k, k), dtype=np.int64)
    for c in range(num_chunks):
        out += part[c]
    return out


def cluster_pairs_ref(indptr: np.ndarray, indices: np.ndarray, cid: np.ndarray, k: int,
                      num_chunks: int) -> np.ndarray:
    """NumPy twin of :func:`cluster_pairs`."""
    cid = np.asarray(cid, dtype=np.int64)
    src = np.repeat(cid, np.diff(indptr))
    dst = cid[np.asarray(indices)]
    keep = src != dst
    return np.bincount(src[keep] * k + dst[keep], minlength=k * k).reshape(k, k)


def edge_chunks_ref(indptr: np.ndarray, num: int) -> np.ndarray:
    """NumPy twin of :func:`edge_chunks`."""
    indptr = np.asarray(indptr, dtype=np.int64)
    n = indptr.shape[0] - 1
    targets = indptr[n] * np.arange(1, num, dtype=np.int64) // num
    inner = np.searchsorted(indptr[:n], targets, side="left")
    return np.concatenate([[0], inner, [n]]).astype(np.int64)


# -- BFS balls of training vertices (the --schedule auto probe) ------------------------------------
@njit(nogil=True, cache=True)
def ball_seeds(indptr, indices, is_train, starts, count, limit, visited):
    """Up to ``count`` training vertices (``is_train`` uint8, N) in BFS order from
    ``starts[0]`` (the next start not yet reached when a component is exhausted), visiting at
    most ``limit`` vertices: seeds about as close together as a BFS finds them, a local batch
    without clustering. ``visited`` (uint8, N, zeros) is used and zeroed again."""
    queue = np.empty(limit, dtype=np.int64)
    seeds = np.empty(count, dtype=np.int64)
    found = 0
    tail = 0
    head = 0
    for si in range(starts.shape[0]):
        r = starts[si]
        if visited[r] or found == count or tail == limit:
            continue
        visited[r] = 1
        queue[tail] = r
        tail += 1
        while head < tail and found < count:
            u = queue[head]
            head += 1
            if is_train[u]:
                seeds[found] = u
                found += 1
            for j in range(indptr[u], indptr[u + 1]):
                w = indices[j]
                if visited[w] == 0 and tail < limit:
                    visited[w] = 1
                    queue[tail] = w
                    tail += 1
    for i in range(tail):
        visited[queue[i]] = 0
    return seeds[:found]


def ball_seeds_ref(indptr: np.ndarray, indices: np.ndarray, is_train: np.ndarray,
                   starts: np.ndarray, count: int, limit: int,
                   visited: np.ndarray) -> np.ndarray:
    """Python twin of :func:`ball_seeds`."""
    from collections import deque
    seen: set = set()
    queue: deque = deque()
    seeds: list = []
    for r in np.asarray(starts).tolist():
        if r in seen or len(seeds) == count or len(seen) == limit:
            continue
        seen.add(r)
        queue.append(r)
        while queue and len(seeds) < count:
            u = queue.popleft()
            if is_train[u]:
                seeds.append(u)
            for w in np.asarray(indices[indptr[u]:indptr[u + 1]]).tolist():
                if w not in seen and len(seen) < limit:
                    seen.add(w)
                    queue.append(w)
    return np.asarray(seeds, dtype=np.int64)


# -- the locality schedule's cluster order ---------------------------------------------------------
@njit(inline="always", cache=True)
def _numpy_block_sum(a, lo, n):
    """NumPy's sum of ``a[lo:lo + n]`` for ``n <= 128``: sequential below 8 entries, else
    eight running sums combined pairwise, then the remainder."""
    if n < 8:
        res = 0.0
        for i in range(n):
            res += a[lo + i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    while i < n - (n % 8):
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@njit(inline="always", cache=True)
def _numpy_split(n):
    """Where NumPy's pairwise sum splits ``n > 128`` entries: half, down to a multiple of 8."""
    half = n // 2
    return half - half % 8


#: Depth of :func:`_numpy_sum`'s stack: NumPy's halving of up to 2**64 entries.
SUM_STACK = 64


@njit(cache=True)
def _numpy_sum(a, lo, n):
    """``a[lo:lo + n].sum()`` in NumPy's own order (:func:`_numpy_sum_on`, with a stack of its
    own)."""
    if n <= 128:
        return _numpy_block_sum(a, lo, n)
    return _numpy_sum_on(a, lo, n, np.empty((3, SUM_STACK), dtype=np.int64),
                         np.empty(SUM_STACK))


@njit(cache=True)
def _numpy_sum_on(a, lo, n, stack, left):
    """``a[lo:lo + n].sum()`` in NumPy's own order (pairwise: blocks of up to 128 entries,
    :func:`_numpy_block_sum`, summed as NumPy's recursion halves them), so that a kernel's
    float results equal its NumPy twin's bit for bit (checked against ``ndarray.sum`` for
    lengths 1-2000). The recursion is unrolled on a stack (a recursive numba function cannot
    be loaded back from numba's cache): ``stack`` (3 x :data:`SUM_STACK` int64) and ``left``
    (:data:`SUM_STACK` float64) are its scratch, allocated once by a caller that sums often."""
    if n <= 128:
        return _numpy_block_sum(a, lo, n)
    los, ns, state = stack[0], stack[1], stack[2]  # state 0: not split, 1: left pending, 2: right
    top = 0
    los[0], ns[0], state[0] = lo, n, 0
    while True:
        if ns[top] > 128:
            state[top] = 1
            los[top + 1], ns[top + 1], state[top + 1] = los[top], _numpy_split(ns[top]), 0
            top += 1
            continue
        v = _numpy_block_sum(a, los[top], ns[top])
        while True:  # hand v to the parent
            if top == 0:
                return v
            top -= 1
            if state[top] == 1:  # its left half done: sum the right one next
                left[top] = v
                state[top] = 2
                half = _numpy_split(ns[top])
                los[top + 1], ns[top + 1], state[top + 1] = los[top] + half, ns[top] - half, 0
                top += 1
                break
            v = left[top] + v


@njit(nogil=True, cache=True)
def label_balanced(order, counts, size, target, batch_size, pool):
    """The locality schedule's cluster order (:func:`label_balanced_ref`, its twin): each next
    cluster is the one among the first ``pool`` pending ones of ``order`` whose label counts
    bring the current batch's closest (L1, per vertex) to ``target`` x the batch's fill.
    ``counts`` (C x K int64: training vertices per cluster and label), ``size`` (C int64),
    ``target`` (K float64: the training set's label shares). The same order as the twin, bit
    for bit (its float sums in NumPy's order, :func:`_numpy_sum_on`). O(C x pool x K)."""
    nc = order.shape[0]
    k = counts.shape[1]
    out = np.empty_like(order)
    wlen = min(pool, nc)
    window = np.empty(max(wlen, 1), dtype=order.dtype)
    for w in range(wlen):
        window[w] = order[w]
    nxt = wlen
    cur = np.zeros(k)
    row = np.empty(k)
    stack, left = np.empty((3, SUM_STACK), dtype=np.int64), np.empty(SUM_STACK)
    fill = 0.0
    for i in range(nc):
        j = 0
        best = np.inf
        for w in range(wlen):
            c = window[w]
            f = fill + size[c]
            for q in range(k):
                row[q] = abs(cur[q] + counts[c, q] - f * target[q])
            total = _numpy_block_sum(row, 0, k) if k <= 128 else \
                _numpy_sum_on(row, 0, k, stack, left)
            err = total / f
            if err < best:
                best = err
                j = w
        c = window[j]
        out[i] = c
        for q in range(k):
            cur[q] += counts[c, q]
        fill += size[c]
        if fill >= batch_size:  # the cluster's tail opens the next batch (pro rata labels)
            keep = (fill - batch_size) % batch_size
            share = keep / size[c]
            for q in range(k):
                cur[q] = counts[c, q] * share
            fill = keep
        if nxt < nc:
            window[j] = order[nxt]
            nxt += 1
        else:
            for w in range(j, wlen - 1):
                window[w] = window[w + 1]
            wlen -= 1
    return out


def label_balanced_ref(order: np.ndarray, counts: np.ndarray, size: np.ndarray,
                       target: np.ndarray, batch_size: int, pool: int) -> np.ndarray:
    """NumPy twin of :func:`label_balanced`: greedy reordering of ``order``: next = the
    cluster among the first ``pool`` pending ones that brings the current batch's label
    counts closest (L1) to ``target`` x fill."""
    out = np.empty_like(order)
    window = list(order[:pool])
    nxt = min(pool, order.shape[0])
    cur = np.zeros(counts.shape[1])
    fill = 0.0
    for i in range(order.shape[0]):
        cand = np.asarray(window)
        f = fill + size[cand]
        err = np.abs(cur + counts[cand] - f[:, None] * target).sum(1) / f
        j = int(np.argmin(err))
        c = window[j]
        out[i] = c
        cur += counts[c]
        fill += size[c]
        if fill >= batch_size:  # the cluster's tail opens the next batch (pro rata labels)
            keep = (fill - batch_size) % batch_size
            cur = counts[c] * (keep / size[c])
            fill = keep
        if nxt < order.shape[0]:
            window[j] = order[nxt]
            nxt += 1
        else:
            window.pop(j)
    return out


register(label_balanced, label_balanced_ref)
register(cluster_bfs_order, cluster_bfs_order_ref)
register(sparsify_csr, sparsify_csr_ref)
register(cut_edges, cut_edges_ref)
register(ball_seeds, ball_seeds_ref)
register(edge_chunks, edge_chunks_ref)
register(halo_masks, halo_masks_ref)
register(shared_edges, shared_edges_ref)
register(cluster_pairs, cluster_pairs_ref)
