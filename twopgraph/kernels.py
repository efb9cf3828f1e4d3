"""All numba kernels of twopgraph, each next to its plain NumPy/Python reference twin.

Every kernel ``foo`` has a twin ``foo_ref`` that computes the same result the obvious way; the
tests compare the two (also under ``NUMBA_DISABLE_JIT=1``). Kernels are compiled lazily on first
call and cached on disk (``cache=True``); a kernel that cannot compile raises at that first call,
there is no silent fallback.

Randomness is counter-based: a draw is ``splitmix64(key ^ counter)``, where the key mixes the
user seed, the batch and the layer, and the counter mixes the vertex id and the draw number. A
result therefore depends only on (seed, batch, layer, vertex), never on the number of threads or
the order in which they run.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

_MASK64 = (1 << 64) - 1

# ----------------------------------------------------------------------------------------------
# Counter-based random numbers
# ----------------------------------------------------------------------------------------------


@njit(inline="always", cache=True)
def _splitmix64(x):
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & np.uint64(0xFFFFFFFFFFFFFFFF)
    z = x
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def splitmix64_ref(x: int) -> int:
    """Reference twin of the splitmix64 finaliser on Python ints (mod 2**64)."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def mix_key(*parts: int) -> int:
    """Fold integers (seed, epoch, batch, layer, ...) into one 64-bit stream key."""
    k = 0x2545F4914F6CDD1D
    for p in parts:
        k = splitmix64_ref(k ^ (int(p) & _MASK64))
    return k


@njit(inline="always", cache=True)
def _draw(key, v, j):
    # Stream for vertex v, draw j: two rounds so that nearby (v, j) pairs decorrelate.
    return _splitmix64(key ^ _splitmix64(np.uint64(v) * np.uint64(0x100000001B3) + np.uint64(j)))


def draw_ref(key: int, v: int, j: int) -> int:
    return splitmix64_ref(key ^ splitmix64_ref((v * 0x100000001B3 + j) & _MASK64))


# ----------------------------------------------------------------------------------------------
# Neighbour sampling (uniform, without replacement; Floyd's algorithm)
# ----------------------------------------------------------------------------------------------


@njit(inline="always", cache=True)
def _num_sampled(indptr, v, fanout):
    d = indptr[v + 1] - indptr[v]
    return d if (fanout < 0 or d <= fanout) else fanout


@njit(inline="always", cache=True)
def _sample_one(indptr, indices, v, fanout, key, nbrs, o):
    """Neighbours of ``v`` into ``nbrs[o:o + _num_sampled(v)]`` (see :func:`sample_neighbors`)."""
    start = indptr[v]
    d = indptr[v + 1] - start
    if fanout < 0 or d <= fanout:
        for j in range(d):
            nbrs[o + j] = indices[start + j]
        return
    # Floyd: for j in d-f..d-1 pick t in [0, j]; take t unless taken, else take j.
    # Positions are kept in nbrs (as positions) and translated at the end.
    c = 0
    for j in range(d - fanout, d):
        t = np.int64(_draw(key, v, j) % np.uint64(j + 1))
        seen = False
        for q in range(c):
            if nbrs[o + q] == t:
                seen = True
                break
        nbrs[o + c] = j if seen else t
        c += 1
    for q in range(fanout):
        nbrs[o + q] = indices[start + nbrs[o + q]]


@njit(parallel=True, nogil=True, cache=True)
def sample_neighbors(indptr, indices, nodes, fanout, key):
    """Sample up to ``fanout`` distinct neighbours of each vertex in ``nodes``.

    Returns ``(offsets, nbrs)``: the neighbours of ``nodes[i]`` are ``nbrs[offsets[i]:offsets[i+1]]``
    (global ids, dtype of ``indices``). A vertex of degree d gives all d neighbours when
    ``fanout < 0`` or ``d <= fanout``; otherwise ``fanout`` distinct ones, each neighbour being
    taken with probability ``fanout / d`` (Floyd's algorithm, positions in CSR order).
    Parallel over vertices; :func:`sample_neighbors_serial` is the same on one thread.
    """
    n = nodes.shape[0]
    counts = np.empty(n + 1, dtype=np.int64)
    counts[0] = 0
    for i in prange(n):
        counts[i + 1] = _num_sampled(indptr, nodes[i], fanout)
    offsets = np.cumsum(counts)
    nbrs = np.empty(offsets[n], dtype=indices.dtype)
    for i in prange(n):
        _sample_one(indptr, indices, nodes[i], fanout, key, nbrs, offsets[i])
    return offsets, nbrs


@njit(nogil=True, cache=True)
def sample_neighbors_serial(indptr, indices, nodes, fanout, key):
    """:func:`sample_neighbors` on the calling thread only (same output), for samplers that
    run several batches at once, one per thread."""
    n = nodes.shape[0]
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    for i in range(n):
        offsets[i + 1] = offsets[i] + _num_sampled(indptr, nodes[i], fanout)
    nbrs = np.empty(offsets[n], dtype=indices.dtype)
    for i in range(n):
        _sample_one(indptr, indices, nodes[i], fanout, key, nbrs, offsets[i])
    return offsets, nbrs


def sample_neighbors_ref(indptr, indices, nodes, fanout, key):
    """Plain-Python twin of :func:`sample_neighbors` (same random stream, same output)."""
    key = int(key)
    offsets = [0]
    out = []
    for v in np.asarray(nodes).tolist():
        start, end = int(indptr[v]), int(indptr[v + 1])
        d = end - start
        if fanout < 0 or d <= fanout:
            chosen = list(range(d))
        else:
            chosen = []
            for j in range(d - fanout, d):
                t = draw_ref(key, v, j) % (j + 1)
                chosen.append(j if t in chosen else t)
        out.extend(int(indices[start + p]) for p in chosen)
        offsets.append(len(out))
    return np.asarray(offsets, dtype=np.int64), np.asarray(out, dtype=indices.dtype)


# ----------------------------------------------------------------------------------------------
# Relabelling: global ids -> batch-local ids (dst first, then new srcs in order of appearance)
# ----------------------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def relabel(nbrs, node_map, num_known, frontier_out):
    """Assign local ids to the vertices of ``nbrs`` not seen yet in this batch.

    ``node_map`` (length N, -1 = unseen) maps global -> local id and is updated in place;
    ``num_known`` local ids are already used. New vertices are appended to ``frontier_out`` in
    order of first appearance and get ids ``num_known, num_known+1, ...``. Returns
    ``(local_nbrs, num_new)`` where ``local_nbrs[e] = node_map[nbrs[e]]`` (int64).
    """
    m = nbrs.shape[0]
    local = np.empty(m, dtype=np.int64)
    nxt = num_known
    for e in range(m):
        g = nbrs[e]
        x = node_map[g]
        if x < 0:
            x = nxt
            node_map[g] = x
            frontier_out[x - num_known] = g
            nxt += 1
        local[e] = x
    return local, nxt - num_known


def relabel_ref(nbrs, node_map, num_known, frontier_out):
    """NumPy twin of :func:`relabel` (same in-place effects, same output)."""
    nbrs = np.asarray(nbrs)
    _, first = np.unique(nbrs, return_index=True)
    first.sort()
    cand = nbrs[first]
    new = cand[node_map[cand] < 0]
    node_map[new] = np.arange(num_known, num_known + new.shape[0])
    frontier_out[: new.shape[0]] = new
    return node_map[nbrs].astype(np.int64), new.shape[0]


@njit(parallel=True, nogil=True, cache=True)
def reset_map(node_map, nodes):
    """Set ``node_map[nodes] = -1`` (undo a batch's relabelling in O(|nodes|))."""
    for i in prange(nodes.shape[0]):
        node_map[nodes[i]] = -1


@njit(nogil=True, cache=True)
def reset_map_serial(node_map, nodes):
    """:func:`reset_map` on the calling thread only."""
    for i in range(nodes.shape[0]):
        node_map[nodes[i]] = -1


# ----------------------------------------------------------------------------------------------
# Graph permutation (renumbering)
# ----------------------------------------------------------------------------------------------


@njit(parallel=True, nogil=True, cache=True)
def permute_csr(indptr, indices, perm, inv):
    """CSR of the graph renumbered so that new vertex i is old vertex ``perm[i]``.

    ``inv`` is the inverse permutation (``inv[perm[i]] = i``). Rows of the result are sorted.
    """
    n = perm.shape[0]
    deg = np.empty(n + 1, dtype=np.int64)
    deg[0] = 0
    for i in prange(n):
        v = perm[i]
        deg[i + 1] = indptr[v + 1] - indptr[v]
    new_indptr = np.cumsum(deg)
    new_indices = np.empty(indices.shape[0], dtype=indices.dtype)
    for i in prange(n):
        v = perm[i]
        s = indptr[v]
        d = indptr[v + 1] - s
        o = new_indptr[i]
        for j in range(d):
            new_indices[o + j] = inv[indices[s + j]]
        new_indices[o:o + d].sort()
    return new_indptr, new_indices


def permute_csr_ref(indptr, indices, perm, inv):
    """NumPy twin of :func:`permute_csr`."""
    deg = np.diff(indptr)[perm]
    new_indptr = np.zeros(perm.shape[0] + 1, dtype=np.int64)
    np.cumsum(deg, out=new_indptr[1:])
    rows = [np.sort(inv[indices[indptr[v]:indptr[v + 1]]]) for v in perm]
    new_indices = (np.concatenate(rows) if rows else np.empty(0)).astype(indices.dtype)
    return new_indptr, new_indices


def num_threads() -> int:
    """Threads numba's parallel kernels use (``NUMBA_NUM_THREADS`` / ``numba.set_num_threads``)."""
    return numba.get_num_threads()


# ----------------------------------------------------------------------------------------------
# Cluster-contiguous renumbering (partition/renumber.py)
# ----------------------------------------------------------------------------------------------


@njit(parallel=True, nogil=True, cache=True)
def cluster_bfs_order(indptr, indices, parts, members, cluster_start):
    """Vertices cluster by cluster, each cluster in BFS order over its own induced subgraph.

    ``members`` lists the vertices sorted by cluster (ascending ids within a cluster) and
    ``cluster_start`` (C+1) delimits each cluster's range in it. Cluster ``c`` fills
    ``order[cluster_start[c]:cluster_start[c+1]]``: a BFS from its lowest unvisited id,
    following only edges inside ``c``, restarted at the next unvisited member until all are
    placed. Clusters run in parallel (a vertex is only ever touched by its own cluster).
    """
    n = parts.shape[0]
    order = np.empty(n, dtype=np.int64)
    visited = np.zeros(n, dtype=np.uint8)
    for c in prange(cluster_start.shape[0] - 1):
        pos = cluster_start[c]
        head = pos
        for k in range(cluster_start[c], cluster_start[c + 1]):
            r = members[k]
            if visited[r]:
                continue
            visited[r] = 1
            order[pos] = r
            pos += 1
            while head < pos:
                u = order[head]
                head += 1
                for j in range(indptr[u], indptr[u + 1]):
                    w = indices[j]
                    if parts[w] == c and visited[w] == 0:
                        visited[w] = 1
                        order[pos] = w
                        pos += 1
    return order


def cluster_bfs_order_ref(indptr, indices, parts, members, cluster_start):
    """Plain-Python twin of :func:`cluster_bfs_order`."""
    from collections import deque
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


def sparsify_csr_ref(indptr, indices, max_degree, salt):
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


def cut_edges_ref(indptr, indices, parts):
    """NumPy twin of :func:`cut_edges`."""
    parts = np.asarray(parts)
    src = np.repeat(parts, np.diff(indptr))
    return int(np.count_nonzero(src != parts[np.asarray(indices)]))


# ----------------------------------------------------------------------------------------------
# Feature cache: next-use tracking over a lookahead window of batches (twopgraph.cache)
# ----------------------------------------------------------------------------------------------
# Every announced row occurrence gets a flat, ever-growing index g; the occurrences still in
# the window live in a ring ``link`` (size a power of two, ``mask = size - 1``) where
# ``link[g & mask]`` is the batch of the *next* occurrence of the same row (NO_USE if none is
# announced yet). ``last_g[r]`` is the flat index of the latest announced occurrence of row r
# (-1: none); ``next_use[r]`` is the batch in which r is next used (NO_USE: not in the window).

NO_USE = np.int64(1 << 40)


@njit(nogil=True, cache=True)
def window_announce(ids, g0, batch, live_start, last_g, next_use, link, mask):
    """Register batch ``batch`` (rows ``ids``, flat indices ``g0..``) at the end of the window.

    ``live_start`` is the flat index of the oldest occurrence not yet consumed.
    """
    no_use = np.int64(1 << 40)
    for i in range(ids.shape[0]):
        r = ids[i]
        g = g0 + i
        link[g & mask] = no_use
        p = last_g[r]
        if p >= live_start:
            link[p & mask] = batch      # a pending occurrence: chain the new one after it
        else:
            next_use[r] = batch         # no pending occurrence: this is the next use
        last_g[r] = g


def window_announce_ref(ids, g0, batch, live_start, last_g, next_use, link, mask):
    """Plain-Python twin of :func:`window_announce` (same in-place effects)."""
    for i, r in enumerate(np.asarray(ids).tolist()):
        g = g0 + i
        link[g & mask] = NO_USE
        p = int(last_g[r])
        if p >= live_start:
            link[p & mask] = batch
        else:
            next_use[r] = batch
        last_g[r] = g


@njit(nogil=True, cache=True)
def window_consume(ids, g0, next_use, link, mask):
    """Batch with rows ``ids`` (flat indices ``g0..``) is used now: move each row's next use
    on to its following occurrence in the window (NO_USE when none is announced)."""
    for i in range(ids.shape[0]):
        next_use[ids[i]] = link[(g0 + i) & mask]


def window_consume_ref(ids, g0, next_use, link, mask):
    """NumPy twin of :func:`window_consume`."""
    g = np.arange(g0, g0 + len(ids), dtype=np.int64) & mask
    next_use[np.asarray(ids)] = link[g]


# ----------------------------------------------------------------------------------------------
# Fused ReLU + inverted dropout (CPU training)
# ----------------------------------------------------------------------------------------------

_RD_CHUNK = 1 << 14  # pairs of elements per parallel work item


@njit(parallel=True, nogil=True, cache=True)
def relu_dropout_fwd(x, out, keep, key, threshold, scale):
    """``out = relu(x) * mask * scale`` over flat float32 ``x``; ``keep[i] = 1`` where the
    gradient passes (x[i] > 0 and element kept), else 0.

    Element i is kept when its 32-bit uniform draw is >= ``threshold`` (= round(p * 2**32)),
    so with probability 1 - p. Elements 2j and 2j+1 take the low and high halves of
    ``splitmix64(key ^ j)``: the mask depends only on (key, i), not on the thread count.
    """
    n = x.shape[0]
    pairs = (n + 1) // 2
    chunks = (pairs + _RD_CHUNK - 1) // _RD_CHUNK
    thr = np.uint64(threshold)
    lo32 = np.uint64(0xFFFFFFFF)
    for c in prange(chunks):
        j0 = c * _RD_CHUNK
        j1 = min(pairs, j0 + _RD_CHUNK)
        for j in range(j0, j1):
            r = _splitmix64(key ^ np.uint64(j))
            i = 2 * j
            v = x[i]
            if v > 0 and (r & lo32) >= thr:
                out[i] = v * scale
                keep[i] = 1
            else:
                out[i] = 0
                keep[i] = 0
            i += 1
            if i < n:
                v = x[i]
                if v > 0 and (r >> np.uint64(32)) >= thr:
                    out[i] = v * scale
                    keep[i] = 1
                else:
                    out[i] = 0
                    keep[i] = 0


def relu_dropout_fwd_ref(x, key, threshold, scale):
    """NumPy twin of :func:`relu_dropout_fwd`; returns ``(out, keep)``."""
    n = x.shape[0]
    j = np.arange((n + 1) // 2, dtype=np.uint64)
    z = (np.uint64(key) ^ j) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    r = z ^ (z >> np.uint64(31))
    u = np.empty(2 * r.shape[0], dtype=np.uint64)
    u[0::2] = r & np.uint64(0xFFFFFFFF)
    u[1::2] = r >> np.uint64(32)
    keep = ((x > 0) & (u[:n] >= np.uint64(threshold))).astype(np.uint8)
    out = np.where(keep == 1, x * np.float32(scale), np.float32(0)).astype(x.dtype)
    return out, keep


@njit(parallel=True, nogil=True, cache=True)
def relu_dropout_bwd(grad, keep, scale, out):
    """``out = grad * keep * scale`` (the gradient of :func:`relu_dropout_fwd`), flat arrays."""
    n = grad.shape[0]
    chunks = (n + 2 * _RD_CHUNK - 1) // (2 * _RD_CHUNK)
    for c in prange(chunks):
        i0 = c * 2 * _RD_CHUNK
        i1 = min(n, i0 + 2 * _RD_CHUNK)
        for i in range(i0, i1):
            out[i] = grad[i] * scale if keep[i] else 0


def relu_dropout_bwd_ref(grad, keep, scale):
    """NumPy twin of :func:`relu_dropout_bwd`."""
    return np.where(keep == 1, grad * np.float32(scale), np.float32(0)).astype(grad.dtype)
