"""Bounded-memory CSR construction from an edge list (COO), for ingestion at papers100M scale.

:func:`build_csr` turns ``E`` directed edges ``src[i] -> dst[i]`` (arrays of any integer
dtype, typically read-only memory maps of a raw file) into the CSR of the undirected graph
the dataset format wants: every edge ``u -> v`` (``u != v``) becomes the edge ``{u, v}``,
self loops are dropped, repeated edges merged, rows sorted. It never holds the edge list, nor
a second copy of the CSR, in memory:

1. **count** (chunks of :data:`CHUNK_EDGES` edges): range check, self loops, the degree of
   every vertex in both directions (``deg``: N int64);
2. **scatter** (chunks again): each edge is written into its two rows of a scratch ``.npy``
   file (memory-mapped, 2E entries of the index dtype); a reverse entry is stored as
   ``-(u + 1)`` so that the next step can tell which entries the input gave. With
   ``scatter_bytes`` the rows are taken in ranges whose slots span at most that many bytes,
   one pass over the edges per range; each range is scattered into an anonymous window of
   its slots and written into the file in one sequential copy (random writes into a mapped
   file are written back and read again whenever memory is short: on a 1/4-scale
   papers-shaped graph inside 12 GiB, three passes over file-backed windows of 1.5 GB took
   51.0 s, one pass over an anonymous window of 3.2 GB 21.0 s, see the README); the result
   is the same. Without ``scatter_bytes`` the file is written in place in one pass;
3. **sort and dedup** (parallel over rows): each row is sorted and repeats are merged in place;
   the forward entries of the row count the distinct directed pairs of the input;
4. **compact** (parallel over rows): the distinct entries are copied into the final
   ``indices`` file (skipped, the scratch file renamed, when nothing was merged).

Memory: about ``4 x 8 N`` bytes (degrees, write positions or per-row counts, the two
``indptr``) plus one chunk of
edges (``16 x CHUNK_EDGES`` bytes) and the scatter window (at most ``scatter_bytes``, or one
row's slots where a row is larger) -- it must hold per-vertex counters; everything else that
grows with ``E`` lives in files (the page cache holds what fits and writes back the rest).
Disk: the scratch file and the final ``indices`` (``2E`` entries each, at most), in the
folder given. Indices are int32 when ``N < 2**31``.

Every kernel has a NumPy twin (``*_ref``) registered with :func:`twopgraph.runtime.jit.register`.

Example::

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     csr = build_csr(np.array([0, 1, 1, 2]), np.array([1, 0, 1, 0]), 3, d)
    ...     csr.indptr.tolist(), csr.indices.tolist(), csr.changes["self_loops"]
    ([0, 2, 3, 4], [1, 2, 0, 0], 1)
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numba import njit, prange

from twopgraph.core.files import map_new_npy
from twopgraph.errors import GraphFormatError, OutputError
from twopgraph.runtime.jit import register

log = logging.getLogger("twopgraph")

#: Edges read per step of the count and scatter passes (bounds the memory of a step:
#: 16 bytes per edge for int64 ids).
CHUNK_EDGES = 1 << 23


@dataclass
class BuiltCSR:
    """The result of :func:`build_csr`: ``indptr`` (int64, N+1) and ``indices`` (int32 when
    N < 2**31, else int64) as read-only memory maps of ``indptr_path``/``indices_path``, and
    ``changes``: ``edges`` (input edges), ``self_loops`` dropped, ``duplicates`` (input edges
    that repeat another one, counted per direction), ``added`` (reverse entries added: CSR
    entries whose direction the input did not give), ``entries`` (CSR entries, 2x the
    undirected edges)."""

    indptr: np.ndarray
    indices: np.ndarray
    indptr_path: Path
    indices_path: Path
    changes: dict = field(default_factory=dict)
    #: ``{phase: {"seconds", "written_mib"}}`` of count, scatter, sort, compact (bytes this
    #: process wrote to storage during the phase, from ``/proc/self/io``; None elsewhere).
    phases: dict = field(default_factory=dict)

    def describe(self) -> str:
        """One line: what symmetrising changed."""
        c = self.changes
        return (f"{c['edges']:,} directed input edges -> {c['entries']:,} CSR entries "
                f"({c['entries'] // 2:,} undirected edges): {c['added']:,} reverse entries "
                f"added, {c['self_loops']:,} self loops and {c['duplicates']:,} repeated "
                f"edges dropped")


def index_dtype(num_nodes: int) -> np.dtype:
    """int32 when every id fits (N < 2**31), else int64."""
    return np.dtype(np.int32 if num_nodes < 2**31 else np.int64)


def build_csr(src: np.ndarray, dst: np.ndarray, num_nodes: int, folder: str | os.PathLike, *,
              chunk_edges: int = CHUNK_EDGES,
              progress: Callable[[str, int, int], object] | None = None,
              what: str = "edge list", scatter_bytes: int | None = None) -> BuiltCSR:
    """Build the symmetric, deduplicated, row-sorted CSR of the edges ``src[i] -> dst[i]`` into
    ``folder/indptr.npy`` and ``folder/indices.npy`` (see the module docstring for the steps
    and their memory). ``src``/``dst`` are 1-D integer arrays of one length (memory maps
    welcome: they are read ``chunk_edges`` at a time, twice). ``progress`` is called as
    ``progress(stage, done, total)`` (edges or rows). ``scatter_bytes`` (None: no limit)
    bounds the bytes of scratch file one scatter pass writes (see the module docstring;
    about ``2E x 4 / scatter_bytes`` passes over the edges). An id outside ``[0, num_nodes)`` is a
    one-line :class:`GraphFormatError` naming ``what``, the edge and the id; a write failure
    (full disk) an :class:`OutputError`; in both cases the files written so far are removed.
    """
    folder = Path(folder)
    n = int(num_nodes)
    if src.ndim != 1 or dst.ndim != 1 or src.shape[0] != dst.shape[0]:
        raise GraphFormatError(f"{what}: source and destination ids must be two 1-D arrays of "
                               f"one length, got shapes {src.shape} and {dst.shape}")
    for name, a in (("source", src), ("destination", dst)):
        if not np.issubdtype(a.dtype, np.integer):
            raise GraphFormatError(f"{what}: {name} ids must be integers, got {a.dtype}")
    e = int(src.shape[0])
    step = max(1, int(chunk_edges))
    itype = index_dtype(n)
    scratch = folder / "indices.scratch.npy"
    final = folder / "indices.npy"
    ipath = folder / "indptr.npy"
    t0 = time.perf_counter()
    phases: dict = {}
    mark = [time.perf_counter(), _written()]

    def report(stage, done, total):
        if progress is not None:
            progress(stage, done, total)
        if done == total and stage not in phases:
            now, w = time.perf_counter(), _written()
            phases[stage] = {"seconds": round(now - mark[0], 3),
                             "written_mib": None if w is None or mark[1] is None
                             else round((w - mark[1]) / 2**20, 1)}
            mark[:] = [now, w]
    try:
        # 1. degrees (both directions), self loops, ranges
        deg = np.zeros(n, dtype=np.int64)
        loops = 0
        for a in range(0, e, step):
            s, d = _ids(src[a:a + step]), _ids(dst[a:a + step])
            bad = count_degrees(s, d, deg, n)
            if bad[0] >= 0:
                i = int(bad[0])
                raise GraphFormatError(
                    f"{what}: edge {a + i:,} ({int(s[i])} -> {int(d[i])}) has an id outside "
                    f"[0, {n:,}) (num_nodes = {n:,})")
            loops += int(bad[1])
            report("count", min(a + step, e), e)
        indptr0 = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(deg, out=indptr0[1:])
        total = int(indptr0[-1])
        # 2. scatter both directions into the scratch file (reverse entries as -(u+1))
        out = _open(scratch, total, itype)
        pos = indptr0[:-1].copy()
        ranges = scatter_ranges(indptr0, scatter_bytes // itype.itemsize
                                if scatter_bytes else None)
        if len(ranges) > 1:
            log.info("%s: scattering %s CSR entries in %d passes (an anonymous window of up "
                     "to %s MiB of the scratch file at a time)", what, f"{total:,}", len(ranges),
                     f"{scatter_bytes / 2**20:,.0f}")
        windowed = scatter_bytes is not None
        for k, (lo, hi) in enumerate(ranges):
            base, top = int(indptr0[lo]), int(indptr0[hi])
            if windowed:  # the range's slots in anonymous memory; pos relative to them
                win = np.empty(top - base, dtype=itype)
                pos[lo:hi] -= base
            else:
                win = out
            for a in range(0, e, step):
                s, d = _ids(src[a:a + step]), _ids(dst[a:a + step])
                if len(ranges) == 1:
                    scatter_edges(s, d, pos, win)
                else:
                    scatter_edges_range(s, d, pos, win, lo, hi)
                report("scatter", k * e + min(a + step, e), len(ranges) * e)
            if windowed:  # one sequential write of the window
                out[base:top] = win
                del win
            if windowed or len(ranges) > 1:
                out.flush()
        del pos
        # 3. sort and merge every row in place; deg becomes the distinct count
        forward = sort_dedup_rows(indptr0, out, deg)
        report("sort", n, n)
        entries = int(deg.sum())
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(deg, out=indptr[1:])
        del deg
        # 4. compact into the final file (or keep the scratch file when nothing merged)
        if entries == total:
            out.flush()
            del out
            os.replace(scratch, final)
        else:
            fin = _open(final, entries, itype)
            compact_rows(indptr0, out, indptr, fin)
            fin.flush()
            del out, fin
            scratch.unlink()
        report("compact", n, n)
        del indptr0
        _save(ipath, indptr)
    except BaseException as exc:
        for p in (scratch, final, ipath):
            p.unlink(missing_ok=True)
        if isinstance(exc, OSError) and not isinstance(exc, OutputError):
            raise OutputError(f"cannot write the CSR into {folder} ({exc.strerror or exc})",
                              exc.errno, exc.strerror, str(folder)) from exc
        raise
    changes = {"edges": e, "self_loops": loops, "duplicates": e - loops - int(forward),
               "added": entries - int(forward), "entries": entries}
    built = BuiltCSR(np.load(ipath, mmap_mode="r"), np.load(final, mmap_mode="r"), ipath,
                     final, changes, phases)
    log.info("built the CSR of %s in %.1f s (%s)", what, time.perf_counter() - t0,
             ", ".join(f"{k} {v['seconds']:.1f} s" + (f", wrote {v['written_mib']:,.0f} MiB"
                                                     if v["written_mib"] else "")
                       for k, v in phases.items()))
    return built


def scatter_ranges(indptr: np.ndarray, max_entries: int | None) -> list[tuple[int, int]]:
    """Row ranges ``[lo, hi)`` covering every row whose slots hold at most ``max_entries``
    entries each (a row larger than that is a range of its own); one range without a limit."""
    n = indptr.shape[0] - 1
    if max_entries is None or int(indptr[-1]) <= max_entries:
        return [(0, n)]
    out, lo = [], 0
    while lo < n:
        hi = int(np.searchsorted(indptr, int(indptr[lo]) + max(1, int(max_entries)),
                                 side="right")) - 1
        hi = min(n, max(hi, lo + 1))
        out.append((lo, hi))
        lo = hi
    return out


def _written() -> int | None:
    """Bytes this process has caused to be written to storage (``/proc/self/io``)."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _ids(chunk) -> np.ndarray:
    """One chunk of ids as contiguous int64 (the kernels' input type)."""
    return np.ascontiguousarray(chunk, dtype=np.int64)


def _open(path: Path, length: int, dtype) -> np.ndarray:
    """A new ``.npy`` file of ``length`` entries, memory-mapped for writing (its blocks
    reserved: a full disk is an ``OSError`` here, not SIGBUS in a kernel)."""
    return map_new_npy(path, dtype, (max(0, length),))


def _save(path: Path, arr: np.ndarray) -> None:
    out = _open(path, arr.shape[0], arr.dtype)
    out[:] = arr
    out.flush()
    del out


# ----------------------------------------------------------------------------------------------
# kernels and their twins
# ----------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def count_degrees(src, dst, deg, n):
    """Add 1 to ``deg[u]`` and ``deg[v]`` for every edge ``u -> v`` with ``u != v``; returns
    ``[first edge with an id outside [0, n) or -1, self loops]`` (counting stops at the first
    bad edge; the degrees are then incomplete)."""
    res = np.full(2, -1, dtype=np.int64)
    res[1] = 0
    for i in range(src.shape[0]):
        u, v = src[i], dst[i]
        if u < 0 or u >= n or v < 0 or v >= n:
            res[0] = i
            return res
        if u == v:
            res[1] += 1
            continue
        deg[u] += 1
        deg[v] += 1
    return res


def count_degrees_ref(src: np.ndarray, dst: np.ndarray, deg: np.ndarray,
                      n: int) -> np.ndarray:
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    bad = np.flatnonzero((src < 0) | (src >= n) | (dst < 0) | (dst >= n))
    stop = int(bad[0]) if bad.shape[0] else src.shape[0]
    s, d = src[:stop], dst[:stop]
    keep = s != d
    deg += np.bincount(s[keep], minlength=n)[:n] + np.bincount(d[keep], minlength=n)[:n]
    return np.array([stop if bad.shape[0] else -1, int((~keep).sum())], dtype=np.int64)


@njit(cache=True, nogil=True)
def scatter_edges(src, dst, pos, out):
    """For each edge ``u -> v`` (``u != v``), in order: ``out[pos[u]++] = v`` and
    ``out[pos[v]++] = -(u + 1)`` (a reverse entry). Ids were checked by :func:`count_degrees`."""
    for i in range(src.shape[0]):
        u, v = src[i], dst[i]
        if u == v:
            continue
        out[pos[u]] = v
        pos[u] += 1
        out[pos[v]] = -(u + 1)
        pos[v] += 1


def scatter_edges_ref(src: np.ndarray, dst: np.ndarray, pos: np.ndarray,
                      out: np.ndarray) -> None:
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    keep = src != dst
    s, d = src[keep], dst[keep]
    rows = np.empty(2 * s.shape[0], dtype=np.int64)
    vals = np.empty(2 * s.shape[0], dtype=np.int64)
    rows[0::2], vals[0::2] = s, d
    rows[1::2], vals[1::2] = d, -(s + 1)
    order = np.argsort(rows, kind="stable")  # per row, in edge order
    rows, vals = rows[order], vals[order]
    counts = np.bincount(rows, minlength=pos.shape[0])
    starts = np.repeat(pos, counts)
    rank = np.arange(rows.shape[0]) - np.repeat(np.cumsum(counts) - counts, counts)
    out[starts + rank] = vals
    pos += counts


@njit(cache=True, nogil=True)
def scatter_edges_range(src, dst, pos, out, lo, hi):
    """:func:`scatter_edges` restricted to the entries of rows ``lo <= row < hi`` (the other
    entries of each edge are written by the pass of their own range)."""
    for i in range(src.shape[0]):
        u, v = src[i], dst[i]
        if u == v:
            continue
        if lo <= u < hi:
            out[pos[u]] = v
            pos[u] += 1
        if lo <= v < hi:
            out[pos[v]] = -(u + 1)
            pos[v] += 1


def scatter_edges_range_ref(src: np.ndarray, dst: np.ndarray, pos: np.ndarray,
                            out: np.ndarray, lo: int, hi: int) -> None:
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    full = out.copy()
    before = pos.copy()
    scatter_edges_ref(src, dst, pos, full)
    keep = np.zeros(pos.shape[0], dtype=bool)
    keep[lo:hi] = True
    for v in np.flatnonzero(keep):
        out[before[v]:pos[v]] = full[before[v]:pos[v]]
    pos[~keep] = before[~keep]


@njit(cache=True, nogil=True)
def _sort_dedup_row(row):
    """Sort one row of encoded entries and merge repeats in place; returns ``(distinct,
    distinct forward values)``. Forward entries are ``v >= 0``, reverse ones ``-(u + 1)``."""
    m = row.shape[0]
    if m == 0:
        return 0, 0
    row.sort()  # reverse entries (negative) first, in descending order of their vertex
    nrev = 0
    while nrev < m and row[nrev] < 0:
        nrev += 1
    nfwd = 0  # distinct forward values
    for j in range(nrev, m):
        if j == nrev or row[j] != row[j - 1]:
            nfwd += 1
    # decode the reverse part into ascending vertex ids
    rev = np.empty(nrev, dtype=row.dtype)
    for j in range(nrev):
        rev[j] = -row[nrev - 1 - j] - 1
    fwd = row[nrev:].copy()
    # merge the two sorted runs, dropping repeats, into the front of the row
    i = 0
    k = 0
    w = 0
    while i < nrev or k < fwd.shape[0]:
        if k >= fwd.shape[0] or (i < nrev and rev[i] <= fwd[k]):
            x = rev[i]
            i += 1
        else:
            x = fwd[k]
            k += 1
        if w == 0 or row[w - 1] != x:
            row[w] = x
            w += 1
    return w, nfwd


@njit(cache=True, parallel=True)
def sort_dedup_rows(indptr, entries, deg):
    """Sort and merge every row of ``entries`` (encoded by :func:`scatter_edges`) in place:
    row ``v``'s distinct neighbours, ascending, go to the front of its slot and their count
    to ``deg[v]``. Returns the number of distinct forward pairs (the input's distinct
    directed edges)."""
    n = indptr.shape[0] - 1
    fwd = np.zeros(n, dtype=np.int64)
    for v in prange(n):
        w, f = _sort_dedup_row(entries[indptr[v]:indptr[v + 1]])
        deg[v] = w
        fwd[v] = f
    return fwd.sum()


def sort_dedup_rows_ref(indptr: np.ndarray, entries: np.ndarray, deg: np.ndarray) -> int:
    forward = 0
    for v in range(indptr.shape[0] - 1):
        a, b = int(indptr[v]), int(indptr[v + 1])
        row = np.asarray(entries[a:b], dtype=np.int64)
        forward += np.unique(row[row >= 0]).shape[0]
        vals = np.unique(np.where(row < 0, -row - 1, row))
        entries[a:a + vals.shape[0]] = vals
        deg[v] = vals.shape[0]
    return forward


@njit(cache=True, parallel=True)
def compact_rows(indptr0, entries, indptr, out):
    """Copy the first ``indptr[v+1] - indptr[v]`` entries of each row slot of ``entries``
    (slots by ``indptr0``) to ``out[indptr[v]:indptr[v+1]]``."""
    n = indptr.shape[0] - 1
    for v in prange(n):
        a = indptr0[v]
        lo, hi = indptr[v], indptr[v + 1]
        for j in range(hi - lo):
            out[lo + j] = entries[a + j]


def compact_rows_ref(indptr0: np.ndarray, entries: np.ndarray, indptr: np.ndarray,
                     out: np.ndarray) -> None:
    for v in range(indptr.shape[0] - 1):
        k = int(indptr[v + 1] - indptr[v])
        out[indptr[v]:indptr[v + 1]] = entries[indptr0[v]:indptr0[v] + k]


register(count_degrees, count_degrees_ref)
register(scatter_edges, scatter_edges_ref)
register(scatter_edges_range, scatter_edges_range_ref)
register(sort_dedup_rows, sort_dedup_rows_ref)
register(compact_rows, compact_rows_ref)
