"""Exact (full-neighbour) layer-wise inference over all N vertices, within bounded memory.

:func:`layerwise_inference` computes one layer at a time over all N vertices, dst range by dst
range (:func:`~twopgraph.inference.rows.edge_balanced_ranges`): each range reads only the
distinct src rows it needs, through a feature source (never the whole table on the device),
and a range whose rows would exceed ``chunk_bytes`` is halved. Each layer's N x d output goes
where :func:`~twopgraph.inference.tables.table_place` finds room (an
:class:`~twopgraph.inference.tables.EvalTable`).

Example::

    >>> logits = layerwise_inference(model, sampler, feat, torch.device("cpu"))  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import logging
import os

import numpy as np
import torch

from twopgraph.core.protocols import FeatureSource, Sampler
from twopgraph.inference.relabel import Relabel, _local_block
from twopgraph.inference.rows import edge_balanced_ranges
from twopgraph.inference.tables import EVAL_CHUNK_BYTES, EvalTable, _row_source, table_place
from twopgraph.models import BlockGNN
from twopgraph.runtime.memory import fillable_host_bytes

log = logging.getLogger("twopgraph")


#: Host bytes a chunk of exact inference takes per edge of its range: the full block's
#: int64 indptr/indices, the relabelled local block and the temporaries of building them.
HOST_BYTES_PER_EDGE = 64
#: The chunks of :func:`layerwise_inference` take at most this share of the memory the
#: process can still fill (:func:`~twopgraph.runtime.memory.fillable_host_bytes`).
LAYERWISE_CHUNK_SHARE = 0.125


def fit_chunks(batch_edges: int, chunk_bytes: int, host_bytes: int | None = None,
               ) -> tuple[int, int]:
    """``(batch_edges, chunk_bytes)`` made smaller where memory is short: a chunk's edges
    (:data:`HOST_BYTES_PER_EDGE` each) and its gathered rows each take at most
    :data:`LAYERWISE_CHUNK_SHARE` of ``host_bytes`` (default: the fillable memory now, which
    a run's memory governor reads net of its reserve); at least 65,536 edges and 1 MiB."""
    if host_bytes is None:
        host_bytes = fillable_host_bytes()
    if host_bytes is None:
        return batch_edges, chunk_bytes
    cap = int(LAYERWISE_CHUNK_SHARE * host_bytes)
    fitted = (min(batch_edges, max(1 << 16, cap // HOST_BYTES_PER_EDGE)),
              min(chunk_bytes, max(1 << 20, cap)))
    if fitted != (batch_edges, chunk_bytes):
        log.debug("exact evaluation: chunks of %d edges, %d bytes of rows (memory short)",
                  *fitted)
    return fitted


@torch.no_grad()
def layerwise_inference(model: BlockGNN, sampler: Sampler,
                        feat: FeatureSource | np.ndarray | torch.Tensor,
                        device: torch.device | str, batch_edges: int = 4_000_000, *,
                        scratch_dir: str | os.PathLike | None = None,
                        place: str | None = None,
                        chunk_bytes: int = EVAL_CHUNK_BYTES) -> torch.Tensor:
    """Exact full-neighbour inference, one layer at a time over all N vertices.

    ``feat`` is what the input features are read through: a feature source (training's:
    :func:`eval_features`; rows read in its dtype, float32 per chunk, through the device
    cache where there is one) or an N x F host array/tensor. The whole table is never copied
    to the device, nor converted as a whole.

    Each layer runs over ranges of dst vertices holding about ``batch_edges`` edges. A layer
    whose input is not on the device reads, per range, the distinct src rows of the range's
    block (sorted: near-sequential reads of a memory map) and runs on the block relabelled
    onto them; a range whose rows would exceed ``chunk_bytes`` (float32) is halved. A layer
    that shrinks the width (``in_dim > out_dim``, e.g. hidden -> classes) is computed from
    per-vertex projections (:meth:`~twopgraph.models.SAGEConv.project`) made once per vertex
    -- from contiguous row ranges of the input for layer 0, straight from the previous
    layer's output ranges as they come otherwise (so that output is never held in full).

    Intermediate N x d outputs are kept where :func:`table_place` says (``place`` forces
    ``"device"``/``"host"``/``"disk"``): on the device if they fit comfortably, else in host
    memory, else in a memory-mapped scratch file in ``scratch_dir`` (:class:`EvalTable`).
    Peak memory: one N x hidden table plus the next layer's projections, a chunk's rows and
    block. Returns the logits (N x C, float32, on the host; memory-mapped when on disk).
    """
    was_training = model.training
    model.eval()
    device = torch.device(device)
    batch_edges, chunk_bytes = fit_chunks(batch_edges, chunk_bytes)
    n = sampler.graph.num_nodes
    indptr = sampler.graph.indptr
    starts = edge_balanced_ranges(indptr, batch_edges)
    convs = model.convs
    projects = [c.in_dim > c.out_dim and hasattr(c, "project") for c in convs]
    relabel = Relabel(n)

    def new_tables(widths) -> list[EvalTable]:
        where = place or table_place(4 * n * sum(widths), device)
        return [EvalTable(n, w, where, device, scratch_dir) for w in widths]

    def chunks(a: int, b: int, width: int, resident: bool):
        """``(a, b, block on the device, u, k)`` of the dst range ``[a, b)``, split while
        its distinct src rows ``u`` (sorted host ids; vertex ``a`` at ``u[k]``) exceed
        ``chunk_bytes``; a resident input keeps the global block (``u``, ``k`` None)."""
        block = sampler.full_block(a, b)
        if resident:
            yield a, b, block.to(device), None, None
            return
        lb, u, k = _local_block(block, a, b, relabel)
        if b - a > 1 and 4 * width * u.shape[0] > chunk_bytes:
            lo, hi = int(indptr[a]), int(indptr[b])
            mid = int(np.searchsorted(indptr, (lo + hi) // 2, side="right")) - 1
            mid = min(max(mid, a + 1), b - 1)
            yield from chunks(a, mid, width, False)
            yield from chunks(mid, b, width, False)
            return
        yield a, b, lb.to(device), u, k

    src = _row_source(feat, device)
    proj = None
    if projects[0]:  # every input row projected once, range by range (contiguous reads)
        step = max(1, chunk_bytes // (4 * max(1, convs[0].in_dim)))
        for a in range(0, n, step):
            b = min(n, a + step)
            parts = convs[0].project(src.read_range(a, b).to(device))
            if proj is None:
                proj = new_tables([t.shape[1] for t in parts])
            for dst, t in zip(proj, parts):
                dst.write(a, b, t)
        src = None
    for i, conv in enumerate(convs):
        fuse = i + 1 < len(convs) and projects[i + 1]
        inputs = proj if proj is not None else [src]
        resident = all(getattr(t, "resident", None) is not None for t in inputs)
        width = sum(t.table.shape[1] if isinstance(t, EvalTable) else conv.in_dim
                    for t in inputs)  # float32 values per gathered row
        out, nxt = None, None
        for a0, b0 in itertools.pairwise(starts):
            for a, b, block, u, k in chunks(a0, b0, width, resident):
                if resident:
                    rows, lo = [t.resident for t in inputs], a
                else:
                    rows, lo = [t.read(u).to(device) for t in inputs], k
                if proj is not None:
                    y = conv.from_projection(block, tuple(rows), lo, lo + b - a)
                else:
                    y = conv(block, rows[0], rows[0][lo:lo + b - a])
                y = model.activate(i, y)
                if fuse:
                    parts = convs[i + 1].project(y)
                    if nxt is None:
                        nxt = new_tables([t.shape[1] for t in parts])
                    for dst, t in zip(nxt, parts):
                        dst.write(a, b, t)
                else:
                    if out is None:
                        out = new_tables([y.shape[1]])[0]
                    out.write(a, b, y)
        src, proj = out, nxt
    model.train(was_training)
    return src.result()
