""":class:`HostFeatures`: the plain feature source -- every input row read from the host table
for every batch (what DGL's and PyG's loaders do), counted with the same accounting as the
cache (every row is a miss: ``h2d_bytes`` = all the rows' bytes, ``transfer_ratio`` 1).

On CPU it is what the model reads directly (one ``index_select``, no second copy of any row);
on CUDA each batch's rows are gathered into pinned memory and copied in one ``non_blocking``
transfer on a stream of its own.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import ConfigError
from ..metrics import CacheCounters


class HostFeatures:
    """Rows of ``feat`` (host, N x F) served on ``device``, stored as ``dtype`` (default:
    feat's; a different dtype makes one converted copy) and returned as float32.

    Example::

        >>> src = HostFeatures(torch.arange(6.).view(3, 2))
        >>> src.gather(np.array([2, 0]))[0].tolist(), src.counters.h2d_rows
        ([[4.0, 5.0], [0.0, 1.0]], 2)
    """

    budget = 0
    lookahead = 0

    def __init__(self, feat: torch.Tensor, device="cpu", dtype: torch.dtype | None = None):
        if not isinstance(feat, torch.Tensor) or feat.ndim != 2:
            raise ConfigError("feat must be a 2-D torch tensor (N x F) on the host")
        if feat.device.type != "cpu":
            raise ConfigError(f"feat must live in host memory, got {feat.device}")
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.store = feat if dtype is None or dtype == feat.dtype else feat.to(dtype)
        self.dtype = self.store.dtype
        self.num_rows, self.num_features = int(feat.shape[0]), int(feat.shape[1])
        self.row_bytes = self.num_features * self.store.element_size()
        self.counters = CacheCounters()
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None

    def begin_stream(self) -> None:
        """Nothing to forget: no window."""

    def announce(self, ids) -> None:
        """No window: announcements are not needed."""

    def gather(self, ids) -> tuple[torch.Tensor, torch.cuda.Event | None]:
        index = ids if isinstance(ids, torch.Tensor) else torch.from_numpy(
            np.ascontiguousarray(ids, dtype=np.int64))
        if index.device.type != "cpu":
            raise ConfigError("ids must be a host tensor")
        n = int(index.shape[0])
        c = self.counters
        c.num_batches += 1
        c.feature_rows += n
        c.h2d_rows += n
        if not self.cuda:
            return _float32(torch.index_select(self.store, 0, index)), None
        staging = torch.empty((n, self.num_features), dtype=self.dtype, pin_memory=True)
        torch.index_select(self.store, 0, index, out=staging)
        with torch.cuda.stream(self.stream):
            out = _float32(staging.to(self.device, non_blocking=True))
            ev = torch.cuda.Event()
            ev.record(self.stream)
        out.record_stream(torch.cuda.current_stream(self.device))
        return out, ev


def _float32(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.float32 else t.to(torch.float32)
