""":class:`FeatureCache`: a host feature store behind a device buffer, driven by a policy.

``gather(ids)`` returns the features of ``ids`` on the device: hits are read from the buffer,
misses are gathered on the host into pinned memory and copied in one ``non_blocking`` transfer
(CUDA), then the rows the policy keeps are moved from that copy into freed buffer slots
(device-to-device; never copied twice). All index bookkeeping happens on the host
(:class:`~twopgraph.cache.directory.CacheDirectory`), so the hot loop has no device->host
synchronisation. On CUDA the work runs on the cache's own stream and ``gather`` returns an
event the consumer waits on; on CPU the "device" is host memory and the same code and the same
accounting apply.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from twopgraph.cache.base import CachePolicy
from twopgraph.cache.directory import CacheDirectory
from twopgraph.cache.host import (
    HostTable,
    Staging,
    on_device_dtype,
    side_stream,
    store_dtype,
    transfer_dtype,
)
from twopgraph.cache.host import _as_ids as _as_numpy
from twopgraph.cache.readahead import Readahead
from twopgraph.core.files import human_bytes
from twopgraph.core.metrics import CacheCounters
from twopgraph.core.names import FEAT_DTYPE_NAMES
from twopgraph.core.protocols import Conv
from twopgraph.errors import ConfigError

#: ``--feat-dtype``: each name of :data:`~twopgraph.core.names.FEAT_DTYPE_NAMES` and its torch dtype
FEAT_DTYPES = {name: getattr(torch, name) for name in FEAT_DTYPE_NAMES}
# Bytes of device memory left free for training when the budget is "whatever fits".
DEFAULT_TRAIN_MARGIN = 0.25
_FILL_CHUNK_BYTES = 64 << 20
#: The initial fill's progress is logged for a fill of this many bytes or more, every
#: ``FILL_LOG_S`` seconds (and at its end when it took that long).
FILL_LOG_BYTES = 1 << 30
FILL_LOG_S = 10.0

log = logging.getLogger("twopgraph")


def feat_dtype(name: str) -> torch.dtype:
    try:
        return FEAT_DTYPES[name]
    except KeyError:
        raise ConfigError(f"unknown feat dtype {name!r}; known: {', '.join(FEAT_DTYPES)}") from None


# Training-step memory per input row and unit of width, in float32 values (see
# train_step_bytes): the activations autograd keeps, their gradients, temporaries.
ACTIVATION_FACTOR = 3
# Device bytes per edge of one chunk of exact inference: indptr/indices (int64), the float32
# edge weights and the index temporaries of building them.
EVAL_BYTES_PER_EDGE = 24


def input_rows_estimate(batch_size: int, fanouts: Sequence[int], num_nodes: int,
                        mean_degree: float) -> int:
    """An upper estimate of the input rows of one mini-batch: ``B`` seeds, each hop multiplying
    the rows by ``1 + min(f, d)`` (``d`` = the mean degree, also for ``f = -1``; E[min(f, deg)]
    <= min(f, d) since min is concave), capped at ``num_nodes``. Overlap between neighbourhoods
    is ignored, which only makes it larger."""
    rows = float(min(batch_size, num_nodes))
    for f in fanouts:
        take = mean_degree if f < 0 else min(float(f), mean_degree)
        rows = min(float(num_nodes), rows * (1.0 + take))
    return math.ceil(rows)


def train_step_bytes(rows_in: int, num_features: int, hidden: int, num_layers: int,
                     prefetch: int = 2, *, layer_widths: Sequence[int] | None = None) -> int:
    """Device bytes of one training step, estimated from above:
    ``4 x rows_in x (ACTIVATION_FACTOR x (F + sum of layer widths) + prefetch x F)``.

    Every layer is charged its width in float32 values per *input* row (layers nearer the
    output have fewer rows: an upper bound): ``layer_widths`` as the model estimates them
    (:meth:`~twopgraph.models.base.Conv.activation_width`), else ``hidden`` each; the input
    features ``F`` per row; the factor covers the values autograd keeps, their gradients and
    temporaries (dropout masks, SpMM operands); ``prefetch`` more feature tensors are the
    batches gathered ahead, waiting on the device."""
    layers = hidden * num_layers if layer_widths is None else sum(layer_widths)
    width = num_features + layers
    return 4 * rows_in * (ACTIVATION_FACTOR * width + max(0, prefetch) * num_features)


def eval_bytes(num_nodes: int, num_edges: int, num_features: int, hidden: int,
               num_classes: int, eval_batch_edges: int = 4_000_000,
               edge_values: int = 0) -> int:
    """Device bytes of exact layer-wise inference (:func:`twopgraph.inference.layerwise_inference`),
    from above: ``4 x N x (F + 3 x max(hidden, classes)) + EVAL_BYTES_PER_EDGE x min(E,
    batch_edges)`` -- one layer's output and the next layer's per-vertex projections (SAGE:
    two of them), kept on the device when they fit there, one chunk's block, and ``4 N F``
    for the input rows the chunks gather. Evaluation no longer copies the feature table to
    the device (a chunk gathers at most ``train.EVAL_CHUNK_BYTES``, 128 MiB) and keeps its
    tables in host memory when they do not fit: a generous bound. ``edge_values``: float32
    values the model computes per edge of a chunk (``Conv.edge_values``: GAT's attention),
    4 bytes each on top."""
    width = max(hidden, num_classes)
    return (4 * num_nodes * (num_features + 3 * width)
            + (EVAL_BYTES_PER_EDGE + 4 * edge_values) * min(num_edges, eval_batch_edges))


def activation_reserve_bytes(*, num_nodes: int, num_edges: int, num_features: int,
                             hidden: int, num_classes: int, fanouts: Sequence[int],
                             batch_size: int,
                             prefetch: int = 2, eval_batch_edges: int = 4_000_000,
                             extra: int = 0, conv: type[Conv] | None = None,
                             conv_options: Mapping[str, Any] | None = None) -> int:
    """Device memory a default cache budget leaves to the model:
    ``max(train_step_bytes, eval_bytes) + extra``. Training and evaluation take turns (the
    caching allocator reuses one's memory for the other), hence the max; ``extra`` is memory
    the pipeline allocates later on the device, e.g. the device sampler's relabelling map
    (``8 N``). ``conv`` (the model's conv class, :class:`~twopgraph.models.base.Conv`, with
    ``conv_options``) estimates each layer's width and its values per edge; without it every
    layer is charged ``hidden``. Not yet measured against a GPU's peak
    (``torch.cuda.max_memory_allocated``): the factors are estimates from above."""
    mean_degree = num_edges / max(1, num_nodes)
    rows_in = input_rows_estimate(batch_size, fanouts, num_nodes, mean_degree)
    widths, per_edge = None, 0
    if conv is not None:
        opts = dict(conv_options or {})
        dims = [hidden] * (len(fanouts) - 1) + [num_classes]
        widths = [conv.activation_width(d, math.ceil(mean_degree if f < 0 else
                                                     min(f, mean_degree)),
                                        last=i == len(dims) - 1, **opts)
                  for i, (d, f) in enumerate(zip(dims, fanouts))]
        per_edge = conv.edge_values(**opts)
    train = train_step_bytes(rows_in, num_features, hidden, len(fanouts), prefetch,
                             layer_widths=widths)
    ev = eval_bytes(num_nodes, num_edges, num_features, hidden, num_classes, eval_batch_edges,
                    per_edge)
    return int(max(train, ev) + extra)


# cuSPARSE's SpMM (training, and its transpose in backward) and CSR conversions: device bytes
# per edge of the largest block (buffers, a transposed copy of indices and values) and a fixed
# part (its handle and first allocations, made after the budget reads the free memory).
CUSPARSE_BYTES_PER_EDGE = 24
CUSPARSE_FIXED_BYTES = 64 << 20
# Device bytes per sampled edge of a block the device sampler returns: int64 indices and a
# float32 edge weight (LABOR); per dst row: int64 indptr; per input row: int64 id + float32
# degree.
BLOCK_BYTES_PER_EDGE = 12
BLOCK_BYTES_PER_ROW = 12


def device_block_bytes(batch_size: int, fanouts: Sequence[int], num_nodes: int,
                       mean_degree: float) -> tuple[int, int]:
    """One mini-batch's blocks on the device, from above, as ``(bytes, largest block's
    edges)``: hop by hop from the seeds (fanouts in reverse, as the samplers go), ``rows``
    dsts take ``e = ceil(rows x min(f, d))`` edges (``d`` = mean degree, also for ``f = -1``)
    -- ``BLOCK_BYTES_PER_EDGE x e + 8 (rows + 1)`` bytes -- and the rows grow
    as in :func:`input_rows_estimate`; plus ``BLOCK_BYTES_PER_ROW`` per input row (ids, degrees)
    and ``8 B`` for the seeds."""
    rows = float(min(batch_size, num_nodes))
    total, biggest = 8.0 * rows, 0
    for f in reversed(list(fanouts)):
        take = mean_degree if f < 0 else min(float(f), mean_degree)
        edges = math.ceil(rows * take)
        biggest = max(biggest, edges)
        total += BLOCK_BYTES_PER_EDGE * edges + 8 * (rows + 1)
        rows = min(float(num_nodes), rows * (1.0 + take))
    total += BLOCK_BYTES_PER_ROW * rows
    return math.ceil(total), int(biggest)


def pipeline_reserve_parts(*, num_nodes: int, num_edges: int, fanouts: Sequence[int],
                           batch_size: int, sampler_on_device: bool, lookahead: int = 0,
                           prefetch: int = 2,
                           eval_batch_edges: int = 4_000_000) -> dict[str, int]:
    """Device bytes a default cache budget must leave to the pipeline besides the model's
    activations (:func:`activation_reserve_bytes`), each from above, in bytes:

    - ``lookahead_blocks``: with the sampler on the device (``sampler_on_device``), the
      blocks of the ``lookahead + prefetch + 1`` batches sampled ahead and waiting there (the
      cache's window, 32 batches for ``layer``, the prefetch queue and the batch in the step):
      ``(lookahead + prefetch + 1) x`` :func:`device_block_bytes`; 0 with a host sampler
      (its blocks wait in host memory);
    - ``relabel_maps``: the device sampler's relabelling maps, int64 over the vertices, made
      on its first batch: ``2 x 8 N`` (a second one for a second sampling thread, or one made
      again after an interrupted batch); 0 with a host sampler;
    - ``cusparse``: cuSPARSE's workspaces of the SpMMs of training (the largest block, its
      transpose in backward) and evaluation (a chunk of at most ``eval_batch_edges``):
      ``CUSPARSE_FIXED_BYTES + CUSPARSE_BYTES_PER_EDGE x max(largest block's edges,
      min(E, eval_batch_edges))``.

    Example::

        >>> parts = pipeline_reserve_parts(num_nodes=100, num_edges=1000, fanouts=[5],
        ...                                batch_size=10, sampler_on_device=False)
        >>> parts["lookahead_blocks"], parts["relabel_maps"]
        (0, 0)
    """
    mean_degree = num_edges / max(1, num_nodes)
    block, biggest = device_block_bytes(batch_size, fanouts, num_nodes, mean_degree)
    on = bool(sampler_on_device)
    return {
        "lookahead_blocks": (max(0, int(lookahead)) + max(0, int(prefetch)) + 1) * block
        if on else 0,
        "relabel_maps": 2 * 8 * int(num_nodes) if on else 0,
        "cusparse": CUSPARSE_FIXED_BYTES + CUSPARSE_BYTES_PER_EDGE * max(
            biggest, min(int(num_edges), int(eval_batch_edges))),
    }


def resolve_budget(num_rows: int, row_bytes: int, device: torch.device | str,
                   ratio: float | None = None,
                   gb: float | None = None, margin: float = DEFAULT_TRAIN_MARGIN,
                   reserve: int = 0, memory: tuple[int, int] | None = None) -> int:
    """Buffer size in rows: ``ratio`` x rows, or ``gb`` GiB, else (CUDA) what fits in the free
    device memory after keeping ``margin`` of the total and ``reserve`` bytes (the model's
    activations, :func:`activation_reserve_bytes`, and the pipeline's device memory,
    :func:`pipeline_reserve_parts`) for training, else (CPU) 0 rows:
    ``min(N, max(0, free - margin x total - reserve) // row_bytes)``, never negative.
    ``memory``: ``(free, total)`` bytes of the device, default what
    ``torch.cuda.mem_get_info`` says.

    On CPU the model reads host memory directly, so a "device" buffer would only be a second
    copy of rows the host table already holds (on synthetic-products: +0.9 GiB and a copy per
    admitted row for nothing); an explicit ``ratio``/``gb`` still builds one, to measure a
    policy's hit rate and transfer bytes on a machine without a GPU.
    """
    if ratio is not None and gb is not None:
        raise ConfigError("give the cache budget as a ratio or in GB, not both")
    if ratio is not None:
        if not (0.0 <= ratio <= 1.0):
            raise ConfigError(f"cache ratio must be in [0, 1], got {ratio}")
        return int(ratio * num_rows)
    if gb is not None:
        if gb < 0:
            raise ConfigError(f"cache GB must be >= 0, got {gb}")
        return min(num_rows, int(gb * (1 << 30)) // max(1, row_bytes))
    device = torch.device(device)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device) if memory is None else memory
        avail = max(0, free - int(margin * total) - int(reserve))
        return min(num_rows, avail // max(1, row_bytes))
    return 0


class FeatureCache:
    """Features of ``feat`` (host, N x F: NumPy array, memory map or torch tensor, used as it
    is: :class:`~twopgraph.cache.host.HostTable`) served on ``device`` through a buffer of
    ``budget`` rows managed by ``policy``; rows are rounded to ``dtype`` (default: feat's)
    and returned as ``out_dtype`` (default float32: the model computes in float32). They are
    copied and held in the buffer as ``transfer_dtype``: on the CPU ``dtype`` (converted per
    gathered chunk), on CUDA the store's dtype when it is not wider than ``dtype``
    (:func:`~twopgraph.cache.host.transfer_dtype`: a float16 store under ``--feat-dtype
    float32`` crosses as float16 and is converted on the device), else ``dtype``. ``rows``
    (int64, optional) maps the cache's ids to host rows (id ``i`` reads ``feat[rows[i]]``);
    ids, slots and counters stay in the cache's ids. ``readahead``: advise the host rows of
    a sampled batch that miss the buffer (:meth:`advise`; memory-mapped tables only).

    Counts go to ``self.counters`` (rows) -- ``row_bytes`` (bytes of one row in
    ``transfer_dtype``: what is really copied) turns them into bytes.

    Example::

        >>> from twopgraph.cache.degree import DegreeCache
        >>> feat = torch.arange(12.).view(6, 2)
        >>> c = FeatureCache(feat, DegreeCache(np.array([5, 4, 3, 2, 1, 0])), budget=2)
        >>> out, _ = c.gather(torch.tensor([4, 0]))
        >>> out.tolist(), c.counters.cache_hits, c.h2d_bytes
        ([[8.0, 9.0], [0.0, 1.0]], 1, 8)
    """

    def __init__(self, feat: np.ndarray | torch.Tensor, policy: CachePolicy, budget: int,
                 device: torch.device | str = "cpu", dtype: torch.dtype | None = None,
                 out_dtype: torch.dtype | None = torch.float32,
                 rows: np.ndarray | None = None, readahead: bool = True) -> None:
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.cuda = self.device.type == "cuda"
        # The host table stays as it is given (one host copy: no converted, no pinned copy);
        # misses are gathered into reusable (pinned on CUDA) staging and converted per chunk.
        store = store_dtype(feat)
        self.dtype = store if dtype is None else dtype
        self.transfer_dtype = transfer_dtype(store, self.dtype, self.device)
        self.host = HostTable(feat, self.transfer_dtype, rows, readahead)
        self.out_dtype = out_dtype
        self.staging = Staging(pinned=self.cuda)
        self.num_rows, self.num_features = self.host.num_rows, self.host.num_features
        self.row_bytes = self.host.row_bytes
        self.directory = CacheDirectory(self.num_rows, budget, policy)
        self.buffer = torch.empty((self.directory.budget, self.num_features),
                                  dtype=self.transfer_dtype, device=self.device)
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None
        # The stream the trainer consumes features on (the one current at construction).
        self._consumer = torch.cuda.current_stream(self.device) if self.cuda else None
        self.fill_s = 0.0  # host seconds of the initial fill (made at the first gather)

    # -- accounting ------------------------------------------------------------------------------
    @property
    def policy(self) -> CachePolicy:
        return self.directory.policy

    @property
    def budget(self) -> int:
        return self.directory.budget

    @property
    def lookahead(self) -> int | None:
        """Batches the loader announces ahead (the policy's window; 0 for static policies)."""
        return self.directory.policy.lookahead

    @property
    def counters(self) -> CacheCounters:
        return self.directory.counters

    @property
    def h2d_bytes(self) -> int:
        return self.counters.h2d_rows * self.row_bytes

    @property
    def cache_fill_bytes(self) -> int:
        return self.counters.fill_rows * self.row_bytes

    # -- data movement ---------------------------------------------------------------------------
    def begin_stream(self) -> None:
        """Start a new access stream (an epoch): batches announced earlier and never
        gathered (an interrupted epoch) are forgotten."""
        self.directory.drain()

    def announce(self, ids: np.ndarray | torch.Tensor) -> None:
        """A batch sampled ahead (the loader's lookahead window)."""
        self.directory.announce(_as_numpy(ids))

    @property
    def readahead(self) -> Readahead | None:
        return self.host.readahead

    def advise(self, ids: np.ndarray | torch.Tensor) -> tuple[int, int]:
        """Read-ahead of the rows of a sampled batch that are not in the buffer now (called
        by the sampling workers, ahead of the gather; a row admitted or evicted meanwhile only
        makes the hint less exact). Returns ``(ranges, bytes)`` advised."""
        ra = self.host.readahead
        if ra is None or not ra.active:
            return 0, 0
        ids = _as_numpy(ids)
        if self.directory.budget:
            ids = ids[self.directory.slot_of[ids] < 0]
        return self.host.advise(ids)

    def read(self, ids: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Rows of ``ids`` as float32 on the device for exact evaluation: the rows in the
        buffer from it, the others from the host table (staged, converted per chunk). Not
        counted, and the buffer and the policy are left as they are."""
        ids = _as_numpy(ids)
        if ids.shape[0] == 0:
            return torch.empty((0, self.num_features), dtype=torch.float32, device=self.device)
        d = self.directory
        slot = d.slot_of[ids] if d.budget else np.full(ids.shape[0], -1, dtype=np.int64)
        hit_pos, miss_pos = np.flatnonzero(slot >= 0), np.flatnonzero(slot < 0)
        rows = self._host_rows(ids[miss_pos], advise=True) if miss_pos.shape[0] else None
        if self.cuda:  # the copies (and the buffer's pending admissions) before reading them
            current = torch.cuda.current_stream(self.device)
            current.wait_stream(self.stream)
            if rows is not None:
                rows.record_stream(current)
        if hit_pos.shape[0] == 0:
            out = rows
        else:
            out = torch.empty((ids.shape[0], self.num_features), dtype=self.transfer_dtype,
                              device=self.device)
            out[self._to_device(hit_pos)] = self.buffer[self._to_device(slot[hit_pos])]
            if rows is not None:
                out[self._to_device(miss_pos)] = rows
        return on_device_dtype(out, self.dtype, torch.float32)

    def read_range(self, a: int, b: int) -> torch.Tensor:
        """Rows ``[a, b)`` as float32 on the device (a contiguous host read), not counted."""
        if self.host.rows is not None:
            return self.read(np.arange(a, b, dtype=np.int64))
        return on_device_dtype(self.host.slice(a, b).to(self.device), self.dtype, torch.float32)

    def gather(
            self, ids: np.ndarray | torch.Tensor) -> tuple[torch.Tensor, torch.cuda.Event | None]:
        """Features of the unique row ids ``ids`` (host int64) on the device, in ``ids`` order,
        and (CUDA) the event after which they are ready, else ``None``."""
        ids_np = _as_numpy(ids)
        if self.cuda:
            with side_stream(self.stream):
                out = self._gather(ids_np)
                ev = torch.cuda.Event()
                ev.record(self.stream)
            return out, ev
        return self._gather(ids_np), None

    def prefill(self) -> int:
        """The one-off initial fill now, if not made yet: the policy's initial rows as the
        batches announced so far rank them (for a window policy, announce the window first).
        For a caller that keeps the fill out of the first batch's gather (counted in
        ``fill_rows`` / :attr:`cache_fill_bytes` all the same). Returns the rows filled."""
        d = self.directory
        if d.filled:
            return 0
        rows, slots = d.fill()
        self._fill(rows, slots)
        return int(rows.shape[0])

    def _gather(self, ids: np.ndarray) -> torch.Tensor:
        d = self.directory
        if not d.filled:
            self._fill(*d.fill())
        p = d.plan(ids)
        n, m = ids.shape[0], p.miss_rows.shape[0]
        # One host->device copy of every index the device needs (pinned on CUDA).
        idx = self._to_device(np.concatenate(
            [p.hit_pos, p.hit_slot, p.miss_pos, p.admit_src, p.admit_slot]))
        h, a = p.hit_pos.shape[0], p.admit_src.shape[0]
        hit_pos, hit_slot = idx[:h], idx[h:2 * h]
        miss_pos = idx[2 * h:2 * h + m]
        admit_src, admit_slot = idx[2 * h + m:2 * h + m + a], idx[2 * h + m + a:]
        # Hits are read before this batch's admissions overwrite freed slots (stream order).
        if h == n:
            out = self.buffer.index_select(0, hit_slot)
        elif m == n:  # miss_pos is 0..n-1: the copied rows are the batch
            out = self._host_rows(p.miss_rows)
            rows = out
        else:
            out = torch.empty((n, self.num_features), dtype=self.transfer_dtype,
                              device=self.device)
            out.index_copy_(0, hit_pos, self.buffer.index_select(0, hit_slot))
            rows = self._host_rows(p.miss_rows)
            out.index_copy_(0, miss_pos, rows)
        if a:
            self.buffer.index_copy_(0, admit_slot, rows.index_select(0, admit_src))
        out = on_device_dtype(out, self.dtype, self.out_dtype)  # converted on the device
        if self.cuda:  # allocated on the cache's stream, consumed on the trainer's
            out.record_stream(self._consumer)
        return out

    def _host_rows(self, ids: np.ndarray, advise: bool = False) -> torch.Tensor:
        """Rows of ``ids`` from the host table on the device, as ``transfer_dtype``: gathered into
        reusable pinned staging, one ``non_blocking`` copy on the cache's stream (CUDA); on
        CPU a plain gather. ``advise``: read their pages ahead first (exact evaluation)."""
        if not self.cuda:
            return self.host.take(ids, advise=advise)
        staged = self.host.take(ids, self.staging.take(ids.shape[0], self.num_features,
                                                        self.transfer_dtype), advise=advise)
        with side_stream(self.stream):
            out = staged.to(self.device, non_blocking=True)
            self.staging.record(self.stream)
        return out

    def _to_device(self, a: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))
        if not self.cuda:
            return t
        return t.pin_memory().to(self.device, non_blocking=True)

    def _fill(self, rows: np.ndarray, slots: np.ndarray) -> None:
        """The one-off initial fill, in chunks so pinned staging memory stays small. A large
        one (:data:`FILL_LOG_BYTES` or more, or one that takes :data:`FILL_LOG_S` seconds) logs
        its start, its progress every ``FILL_LOG_S`` seconds and its end; its host seconds
        are kept in ``fill_s``."""
        chunk = max(1, _FILL_CHUNK_BYTES // max(1, self.row_bytes))
        total = int(rows.shape[0])
        nbytes = total * self.row_bytes
        big = nbytes >= FILL_LOG_BYTES
        if big:
            log.info("device cache: filling %d rows (%s) from the host table", total,
                     human_bytes(nbytes))
        t0 = last = time.perf_counter()
        with side_stream(self.stream if self.cuda else None):
            for s in range(0, total, chunk):
                r, sl = rows[s:s + chunk], slots[s:s + chunk]
                self.buffer.index_copy_(0, self._to_device(sl), self._host_rows(r))
                now = time.perf_counter()
                if now - last >= FILL_LOG_S:
                    done = s + r.shape[0]
                    log.info("device cache fill: %d of %d rows (%.0f%%) in %.0f s", done, total,
                             100.0 * done / total, now - t0)
                    last = now
        self.fill_s = time.perf_counter() - t0
        if big or self.fill_s >= FILL_LOG_S:
            log.info("device cache filled: %d rows (%s, %s rows) in %.1f s", total,
                     human_bytes(nbytes), self.transfer_dtype, self.fill_s)
