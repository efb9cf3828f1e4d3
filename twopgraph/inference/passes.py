"""Layer 0's inputs streamed: passes that read the feature table and the CSR once, in order.

:func:`_push_inputs` decides whether layer 0 of restricted inference streams its inputs (the
table exceeds :data:`INPUT_CACHE_SHARE` of the available memory); :func:`_input_passes`
yields one :class:`~twopgraph.inference.push._Push` per pass over a range of the level,
sized to :data:`INPUT_PASS_SHARE` of the fillable memory less the chunks in flight
(:func:`_chunk_bytes`, bytes, at most :data:`CHUNK_SHARE` of it).
"""

from __future__ import annotations

import itertools
import logging
import math

import numpy as np
import torch

from twopgraph.core.files import human_bytes
from twopgraph.inference.convs import _agg_width
from twopgraph.inference.push import _Push
from twopgraph.inference.reads import _file_of, read_ranges
from twopgraph.inference.rows import edge_balanced_ranges
from twopgraph.inference.tables import EvalTable, table_place
from twopgraph.runtime.memory import available_host_bytes, fillable_host_bytes

log = logging.getLogger("twopgraph")


#: Layer 0 of :func:`scored_inference` streams its inputs (by default) when the input
#: table's bytes exceed this share of :func:`available_host_bytes`: the page cache could not
#: keep it while a layer reads it at random.
INPUT_CACHE_SHARE = 0.5


def _push_inputs(conv, graph, src, stream_inputs: bool | None) -> bool:
    """Whether layer 0 (``conv``) of :func:`scored_inference` streams its inputs from the
    feature source ``src`` (see there): never for a resident table (on the device) or a
    row-mapped one, nor without ``conv.aggregate``/``combine`` and an undirected graph."""
    if stream_inputs is False or isinstance(src, EvalTable):
        return False
    if not (hasattr(conv, "aggregate") and hasattr(conv, "combine")):
        return False
    host = getattr(src, "host", None)
    if host is not None and getattr(host, "rows", None) is not None:
        return False
    if graph.undirected_problem() is not None:
        return False
    if stream_inputs:
        return True
    nbytes = int(getattr(src, "num_rows", 0)) * int(getattr(src, "row_bytes", 0))
    avail = available_host_bytes()
    return avail is not None and nbytes > INPUT_CACHE_SHARE * avail


def _input_passes(conv, src, sampler, level: np.ndarray, device, batch_edges: int,
                  place: str | None, scratch_dir, pass_rows: int | None):
    """Layer 0's inputs streamed (:func:`scored_inference`): yields ``(d0, d1, push)`` per
    pass over positions ``[d0, d1)`` of ``level`` (the layer's dst vertices), ``push`` a
    :class:`_Push` holding their summed aggregations (not their own rows: those are read
    back from ``src`` when combined, a near-sequential read of the range's ids) after one
    read of the feature table ``src`` and the CSR in id order (:func:`read_ranges`: large
    sequential reads, the next range read while this one is pushed; the table's pages are
    dropped from the page cache behind the reads when it exceeds the memory available). A
    pass covers ``pass_rows`` vertices, by default as many as :data:`INPUT_PASS_SHARE` of
    :func:`fillable_host_bytes` (or of the device's free memory on CUDA, when larger)
    holds less what the chunks in flight take (:func:`_chunk_bytes`; chunks are made smaller
    until they take at most :data:`CHUNK_SHARE` of that memory). Memory per pass: the
    accumulators (``4 x agg width`` bytes a vertex), an n-byte mark, and per chunk of
    ``batch_edges`` edges its rows and edges (two chunks at once)."""
    graph = sampler.graph
    indptr, indices = graph.indptr, graph.indices
    width = _agg_width(conv, device)
    row_bytes = 4 * width
    m = level.shape[0]
    host = fillable_host_bytes()
    table = _plain_table(src)
    src_row = (table.itemsize * int(np.prod(table.shape[1:])) if table is not None
               else 4 * conv.in_dim)
    while True:
        ranges = list(itertools.pairwise(edge_balanced_ranges(indptr, batch_edges)))
        edges = [(int(indptr[a]), int(indptr[b])) for a, b in ranges]
        chunk = _chunk_bytes(ranges, edges, src_row, conv.in_dim, width, indices.itemsize)
        if host is None or chunk <= CHUNK_SHARE * host or batch_edges <= 1 << 16:
            break
        batch_edges //= 2
    if pass_rows is None:
        free = math.inf if host is None else max(0, host - chunk)
        budget = INPUT_PASS_SHARE * free
        if device.type == "cuda":
            budget = max(budget, INPUT_PASS_SHARE * torch.cuda.mem_get_info(device)[0])
        pass_rows = m if math.isinf(budget) else max(1, int(budget // row_bytes))
    k = max(1, -(-m // max(1, pass_rows)))
    bounds = np.linspace(0, m, k + 1).round().astype(np.int64)
    avail = available_host_bytes()
    drop = table is not None and avail is not None and table.nbytes > avail
    for p, (d0, d1) in enumerate(itertools.pairwise(bounds.tolist())):
        if d1 <= d0:
            continue
        log.info("exact evaluation: layer 0 inputs, pass %d of %d (%d of %d vertices; sums "
                 "%s, chunks of %d edges %s, fillable %s)", p + 1, k, d1 - d0, m,
                 human_bytes(row_bytes * (d1 - d0)), batch_edges, human_bytes(chunk),
                 "unknown" if host is None else human_bytes(host))
        rows = d1 - d0
        # sized to INPUT_PASS_SHARE of the fillable memory: placed by the same share (at the
        # default TABLE_SHARE they went to a scratch file whose random updates were written
        # back again and again: 600 GB written at 1/4 papers under 12 GiB)
        where = place or table_place(row_bytes * rows, device, host_bytes=host,
                                     share=INPUT_PASS_SHARE)
        push = _Push(conv, None, level[d0:d1], sampler, device,
                     [EvalTable(rows, width, where, device, scratch_dir)])
        feats = read_ranges(table, ranges, drop=drop) if table is not None else \
            (None for _ in ranges)
        nbrs_of = read_ranges(indices, edges)
        for (a, b), (lo, hi), x, nbrs in zip(ranges, edges, feats, nbrs_of):
            offs = np.asarray(indptr[a:b + 1], dtype=np.int64) - lo
            y = src.read_range(a, b) if x is None else _as_read(src, torch.from_numpy(x))
            push.push(a, b, y, np.arange(a, b, dtype=np.int64), offs, nbrs)
        yield int(d0), int(d1), push
        # Dropped before the next pass makes its table: bound here, this pass's accumulators
        # lived on beside the next one's (2 x INPUT_PASS_SHARE of the memory: at 1/4 papers
        # under 12 GiB the cgroup killed the run in its second pass).
        push = feats = nbrs_of = y = x = None


#: Share of :func:`fillable_host_bytes`, less the chunks in flight, the accumulators of one
#: pass of layer 0's streamed inputs take (:func:`_input_passes`); the rest is for the page
#: cache, the combine steps (at most :data:`CHUNK_SHARE`) and what the process allocates
#: besides. At 0.75, with the combine steps sized by ``chunk_bytes`` alone (about 4 KB a row
#: with the output, its message and the row's edges), a 2M-vertex papers graph was killed in
#: a 1.5 GiB cgroup in its first pass.
INPUT_PASS_SHARE = 0.5
#: The chunks in flight of a pass (:func:`_chunk_bytes`) take at most this share of
#: :func:`fillable_host_bytes` (smaller chunks where they would take more).
CHUNK_SHARE = 0.125


def _chunk_bytes(ranges, edges, src_row: int, in_dim: int, width: int, id_bytes: int) -> int:
    """Bytes the chunks of a streamed input pass hold at once at most: the largest chunk's
    rows (as read: ``src_row`` bytes each; as float32 inputs; as ``width``-column messages;
    ids and offsets) and edges (neighbour ids, targets, sources, weights), for the chunk
    being pushed, the one read ahead and one more for the copies pushing makes."""
    rows = max((b - a for a, b in ranges), default=0)
    ed = max((hi - lo for lo, hi in edges), default=0)
    per = rows * (src_row + 4 * in_dim + 4 * width + 24) + ed * (id_bytes + 20)
    return 3 * int(per)


def _plain_table(src) -> np.ndarray | None:
    """The memory-mapped host table under the feature source ``src`` when its rows are read
    as they are (no row map, no row cache), else None."""
    host = getattr(src, "host", None)
    array = getattr(host, "array", None)
    if array is None or host.rows is not None or host.row_cache is not None:
        return None
    return array if _file_of(array) is not None else None


def _as_read(src, t: torch.Tensor) -> torch.Tensor:
    """Host rows ``t`` as ``src.read_range`` returns them: converted to the source's copy
    dtype, then float32, on its device."""
    host = src.host
    if t.dtype != host.dtype:
        t = t.to(host.dtype)
    t = t.to(src.device)
    return t if t.dtype == torch.float32 else t.to(torch.float32)
