""":class:`HostFeatures`: the plain feature source -- every input row read from the host table
for every batch (what DGL's and PyG's loaders do), counted with the same accounting as the
cache (every row is a miss: ``h2d_bytes`` = all the rows' bytes, ``transfer_ratio`` 1) -- and
:class:`HostTable`, the one host copy of the features every source reads.

The host table is used as it is given (usually a read-only ``np.memmap`` of a store: the page
cache is the one copy of the features on the machine): no source converts, pins or copies the
whole table. Rows are converted to the source's dtype per gathered chunk. On CPU the gathered
rows are what the model reads; on CUDA each batch's rows are gathered into reusable pinned
staging buffers (:class:`Staging`) and copied in one ``non_blocking`` transfer on a stream of
the source's own.

Row map: with ``rows`` (int64, one host row per id), id ``i`` of a source reads host row
``rows[i]`` -- a part of a partitioned run reads its local vertices out of the machine's one
shared table; ids, counters and cache slots stay in the source's ids.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import TYPE_CHECKING

import numpy as np
import torch

from twopgraph.cache.readahead import Readahead
from twopgraph.core.metrics import CacheCounters
from twopgraph.errors import ConfigError

if TYPE_CHECKING:
    from twopgraph.cache.hostrows import HostRowCache


def host_tensor(table: np.ndarray | torch.Tensor) -> torch.Tensor:
    """A torch view of the host array ``table`` (no copy; a read-only memory map is read,
    never written, so torch's warning about non-writable arrays is silenced here)."""
    if isinstance(table, torch.Tensor):
        return table
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(table)


def store_dtype(feat: np.ndarray | torch.Tensor) -> torch.dtype:
    """The torch dtype of the host table ``feat`` as it is stored (a NumPy array's, mapped)."""
    if isinstance(feat, torch.Tensor):
        return feat.dtype
    return torch.from_numpy(np.empty(0, dtype=feat.dtype)).dtype


def transfer_dtype(store: torch.dtype, dtype: torch.dtype,
                   device: torch.device | str) -> torch.dtype:
    """The dtype rows cross to ``device`` in, for a table stored as ``store`` whose rows the
    model reads rounded to ``dtype`` (``--feat-dtype``): on CUDA the store's own dtype when it
    is real (not complex or bool) and no wider than ``dtype`` -- the rows are gathered and
    copied as they are stored (no host conversion, the fewest PCIe bytes) and converted on
    the device, which gives the same values (IEEE conversions round alike on both) -- else
    ``dtype`` (a wider store is narrowed on the host, before the copy). On the CPU always
    ``dtype`` (the rows are converted once, where they are read).

    Example::

        >>> transfer_dtype(torch.float16, torch.float32, "cuda")  # no upcast on the host
        torch.float16
        >>> transfer_dtype(torch.float32, torch.float16, "cuda")  # narrowed before the copy
        torch.float16
        >>> transfer_dtype(torch.float16, torch.float32, "cpu")
        torch.float32
    """
    if torch.device(device).type != "cuda" or store == dtype:
        return dtype
    if store.is_complex or store == torch.bool:
        return dtype
    if _itemsize(store) <= _itemsize(dtype):
        return store
    return dtype


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()


def on_device_dtype(t: torch.Tensor, dtype: torch.dtype,
                    out_dtype: torch.dtype | None) -> torch.Tensor:
    """Rows ``t`` (copied in their transfer dtype) rounded to ``dtype`` (``--feat-dtype``:
    what the model is trained on) and returned as ``out_dtype`` (None: as ``dtype``); no
    copy where a step is already done."""
    if t.dtype != dtype:
        t = t.to(dtype)
    if out_dtype is not None and t.dtype != out_dtype:
        t = t.to(out_dtype)
    return t



def side_stream(stream: torch.cuda.Stream | None) -> contextlib.AbstractContextManager:
    """``torch.cuda.stream(stream)`` under a guard of the stream's own device (a null context
    for None): entering and leaving the block then touch only that device's streams, never
    those of the calling thread's current device (GPU 0 in a thread that never set one, where
    it would create a CUDA context of ~0.5 GB)."""
    if stream is None:
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    stack.enter_context(torch.cuda.device(stream.device))
    stack.enter_context(torch.cuda.stream(stream))
    return stack

class Staging:
    """Reusable host buffers for rows on their way to the device: ``slots`` buffers used in
    turn, each allocated once (pinned when ``pinned``) and grown (x1.5) when a larger chunk
    comes. Before a buffer is refilled, the copy that last read it is waited for (its event):
    with two slots, gathering one batch overlaps the copy of the previous one. Used by one
    gathering thread at a time.

    Example::

        >>> s = Staging(pinned=False)
        >>> s.take(3, 2, torch.float16).shape, s.take(2, 2, torch.float16).shape
        (torch.Size([3, 2]), torch.Size([2, 2]))
    """

    def __init__(self, pinned: bool, slots: int = 2) -> None:
        self.pinned = bool(pinned)
        self._bufs: list[torch.Tensor | None] = [None] * slots
        self._events: list = [None] * slots
        self._next = 0
        self._cur = 0
        self.allocations = 0  # buffers allocated so far (growth included)

    @property
    def nbytes(self) -> int:
        """Bytes held by the buffers."""
        return sum(b.numel() * b.element_size() for b in self._bufs if b is not None)

    def take(self, n: int, f: int, dtype: torch.dtype) -> torch.Tensor:
        """An ``n x f`` buffer of ``dtype`` (contents undefined), free to be written."""
        i = self._cur = self._next
        self._next = (i + 1) % len(self._bufs)
        ev = self._events[i]
        if ev is not None:
            ev.synchronize()  # the copy that read this buffer last has finished
            self._events[i] = None
        need = n * f
        buf = self._bufs[i]
        if buf is None or buf.dtype != dtype or buf.numel() < need:
            old = 0 if buf is None or buf.dtype != dtype else buf.numel()
            self._bufs[i] = buf = torch.empty(max(need, old + old // 2, 1), dtype=dtype,
                                              pin_memory=self.pinned)
            self.allocations += 1
        return buf[:need].view(n, f)

    def record(self, stream: torch.cuda.Stream) -> None:
        """The buffer last taken is being read by a copy queued on ``stream`` (CUDA)."""
        if self.pinned:
            ev = torch.cuda.Event()
            ev.record(stream)
            self._events[self._cur] = ev


class HostTable:
    """Rows of the host feature table ``feat`` (N x F: an ``np.ndarray``/``np.memmap`` or a
    host torch tensor, used as it is) as a source reads them: ids mapped through ``rows``
    (int64, optional), converted to ``dtype`` (default: feat's) per chunk. ``row_bytes`` is a
    row's size in ``dtype`` (what crosses to the device). ``readahead`` (default: on)
    advises the rows of a batch ahead when ``feat`` is a memory map
    (:class:`~twopgraph.cache.readahead.Readahead`).
    """

    def __init__(self, feat: np.ndarray | torch.Tensor, dtype: torch.dtype | None = None,
                 rows: np.ndarray | None = None, readahead: bool = True) -> None:
        if isinstance(feat, torch.Tensor):
            if feat.device.type != "cpu":
                raise ConfigError(f"feat must live in host memory, got {feat.device}")
            array = None
        elif isinstance(feat, np.ndarray):
            array = feat
        else:
            raise ConfigError(f"feat must be a 2-D NumPy array or torch tensor (N x F) on the "
                              f"host, got {type(feat).__name__}")
        if feat.ndim != 2:
            raise ConfigError(f"feat must be 2-D (N x F), got shape {tuple(feat.shape)}")
        self.array = array
        self.tensor = host_tensor(feat)
        if rows is not None:
            rows = np.ascontiguousarray(rows, dtype=np.int64)
            if rows.ndim != 1:
                raise ConfigError("rows must be a 1-D int64 array (one host row per id)")
            if rows.shape[0] and (rows.min() < 0 or rows.max() >= feat.shape[0]):
                raise ConfigError(f"rows must be host rows in [0, {feat.shape[0]})")
        self.rows = rows
        self.num_rows = int(feat.shape[0] if rows is None else rows.shape[0])
        self.num_features = int(feat.shape[1])
        self.dtype = self.tensor.dtype if dtype is None else dtype
        self.row_bytes = self.num_features * torch.empty(0, dtype=self.dtype).element_size()
        self.readahead = Readahead(array, enabled=readahead) if array is not None else None
        self.row_cache = None  # a HostRowCache over this table (attach_row_cache)

    def attach_row_cache(self, cache: HostRowCache) -> None:
        """Serve the rows ``cache`` (a :class:`~twopgraph.cache.hostrows.HostRowCache`
        filled from this table) holds from it, and read ahead only the others."""
        self.row_cache = cache

    def host_rows(self, ids: np.ndarray) -> np.ndarray:
        """The host rows of ids ``ids`` (int64)."""
        return ids if self.rows is None else self.rows[ids]

    def take(self, ids: np.ndarray, out: torch.Tensor | None = None,
             advise: bool = False) -> torch.Tensor:
        """Rows of ``ids`` (int64, this table's ids) as a host tensor of ``dtype``, written
        into ``out`` (``len(ids) x F``) when given; ``advise`` reads their pages ahead first
        (uncounted: for reads no sampling worker announced, e.g. exact evaluation)."""
        host = np.ascontiguousarray(self.host_rows(ids), dtype=np.int64)
        rc = self.row_cache
        if advise and self.readahead is not None:
            self.readahead.advise(host if rc is None else rc.misses(host), count=False)
        if rc is not None:  # hits from the row cache, misses from the table
            if out is None:
                t = rc.take(host, self.tensor)
                return t if t.dtype == self.dtype else t.to(self.dtype)
            return rc.take(host, self.tensor, out)
        index = torch.from_numpy(host)
        if out is None:
            t = torch.index_select(self.tensor, 0, index)
            return t if t.dtype == self.dtype else t.to(self.dtype)
        if out.dtype == self.tensor.dtype:
            torch.index_select(self.tensor, 0, index, out=out)
        else:  # converted chunk by chunk, never the whole table
            out.copy_(torch.index_select(self.tensor, 0, index))
        return out

    def slice(self, a: int, b: int) -> torch.Tensor:
        """Rows ``[a, b)`` (this table's ids) as a host tensor of ``dtype``: a contiguous
        read without a row map."""
        if self.rows is not None:
            return self.take(np.arange(a, b, dtype=np.int64), advise=True)
        if self.readahead is not None:
            self.readahead.advise_range(a, b)
        t = self.tensor[a:b]  # a view: callers only read it
        return t.to(self.dtype) if t.dtype != self.dtype else t

    def advise(self, ids: np.ndarray | torch.Tensor) -> tuple[int, int]:
        """Read-ahead of the rows of ``ids``; ``(ranges, bytes)`` advised."""
        if self.readahead is None or not self.readahead.active:
            return 0, 0
        host = self.host_rows(_as_ids(ids))
        if self.row_cache is not None:  # cached rows are not read from the table
            host = self.row_cache.misses(host)
        return self.readahead.advise(host)


class HostFeatures:
    """Rows of ``feat`` (host, N x F, NumPy or torch) served on ``device``, rounded to
    ``dtype`` (default: feat's; converted per batch, the table stays as it is) and returned as
    float32; ``rows``: the optional row map (see the module doc); ``readahead``: advise a
    batch's rows when it is sampled (memory-mapped tables only). On CUDA rows are copied in
    ``transfer_dtype`` (:func:`transfer_dtype`: the store's dtype when it is not wider than
    ``dtype``) and converted on the device; ``row_bytes`` (what ``h2d_bytes`` counts) is a
    row in that dtype.

    Example::

        >>> src = HostFeatures(torch.arange(6.).view(3, 2))
        >>> src.gather(np.array([2, 0]))[0].tolist(), src.counters.h2d_rows
        ([[4.0, 5.0], [0.0, 1.0]], 2)
    """

    budget = 0
    lookahead = 0

    def __init__(self, feat: np.ndarray | torch.Tensor, device: torch.device | str = "cpu",
                 dtype: torch.dtype | None = None, rows: np.ndarray | None = None,
                 readahead: bool = True) -> None:
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        store = store_dtype(feat)
        self.dtype = store if dtype is None else dtype  # what the model's rows are rounded to
        # what crosses to the device: on CUDA the store's dtype when not wider (transfer_dtype)
        self.transfer_dtype = transfer_dtype(store, self.dtype, self.device)
        self.host = HostTable(feat, self.transfer_dtype, rows, readahead)
        self.num_rows, self.num_features = self.host.num_rows, self.host.num_features
        self.row_bytes = self.host.row_bytes
        self.counters = CacheCounters()
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.staging = Staging(pinned=self.cuda)

    @property
    def readahead(self) -> Readahead | None:
        return self.host.readahead

    def begin_stream(self) -> None:
        """Nothing to forget: no window."""

    def announce(self, ids: np.ndarray | torch.Tensor) -> None:
        """No window: announcements are not needed."""

    def advise(self, ids: np.ndarray | torch.Tensor) -> tuple[int, int]:
        """Read-ahead of a sampled batch's rows (called by the sampling workers)."""
        return self.host.advise(ids)

    def gather(
            self, ids: np.ndarray | torch.Tensor) -> tuple[torch.Tensor, torch.cuda.Event | None]:
        ids = _as_ids(ids)
        n = int(ids.shape[0])
        c = self.counters
        c.num_batches += 1
        c.feature_rows += n
        c.h2d_rows += n
        if not self.cuda:
            return _float32(self.host.take(ids)), None
        return self._to_device(self.host.take(ids, self.staging.take(
            n, self.num_features, self.transfer_dtype)))

    def read(self, ids: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Rows of ``ids`` as float32 on the device, not counted (exact evaluation)."""
        ids = _as_ids(ids)
        if not self.cuda:
            return _float32(self.host.take(ids, advise=True))
        out, ev = self._to_device(self.host.take(ids, self.staging.take(
            ids.shape[0], self.num_features, self.transfer_dtype), advise=True))
        torch.cuda.current_stream(self.device).wait_event(ev)
        return out

    def read_range(self, a: int, b: int) -> torch.Tensor:
        """Rows ``[a, b)`` as float32 on the device (a contiguous host read), not counted."""
        if self.host.rows is not None:
            return self.read(np.arange(a, b, dtype=np.int64))
        return on_device_dtype(self.host.slice(a, b).to(self.device), self.dtype, torch.float32)

    def _to_device(self, staged: torch.Tensor):
        """``staged`` (pinned, in the transfer dtype) copied on the source's stream and
        converted there (rounded to ``dtype``, returned as float32), and the copy's event."""
        with side_stream(self.stream):
            out = on_device_dtype(staged.to(self.device, non_blocking=True), self.dtype,
                                  torch.float32)
            self.staging.record(self.stream)
            ev = torch.cuda.Event()
            ev.record(self.stream)
        out.record_stream(torch.cuda.current_stream(self.device))
        return out, ev


def _as_ids(ids) -> np.ndarray:
    if isinstance(ids, torch.Tensor):
        if ids.device.type != "cpu":
            raise ConfigError("ids must be a host tensor")
        ids = ids.numpy()
    return np.ascontiguousarray(ids, dtype=np.int64)


def _float32(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.float32 else t.to(torch.float32)
