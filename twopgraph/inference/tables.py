"""Where exact inference keeps its intermediate tables, and what layer 0 reads.

:class:`EvalTable`: an N x d (or ``|level|`` x d) float32 table of a layer's outputs on the
device, in host memory or in a nameless memory-mapped scratch file, placed by
:func:`table_place` from the memory available to this process
(:func:`~twopgraph.runtime.memory.available_host_bytes`) or the device's free memory;
:data:`EVAL_CHUNK_BYTES` (bytes) bounds the rows one chunk gathers; :func:`_row_source`
turns what the caller passes as input features into something rows are read from.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import torch

from twopgraph.cache.host import HostFeatures
from twopgraph.core.files import reserve
from twopgraph.runtime.memory import available_host_bytes

#: Bytes (float32) of the input rows one chunk of exact inference gathers at most: a dst range
#: whose distinct src rows would take more is halved (down to one vertex).
EVAL_CHUNK_BYTES = 128 << 20
#: Share of the memory available where an intermediate N x d table of exact inference may
#: go (:func:`table_place`): the rest is left to the chunks, the caches and other processes.
TABLE_SHARE = 0.5


def table_place(nbytes: int, device: torch.device | str, *, host_bytes: int | None = None,
                device_bytes: int | None = None, share: float = TABLE_SHARE) -> str:
    """Where exact inference keeps ``nbytes`` bytes of intermediate N x d tables:
    ``"device"`` (CUDA only) when they take at most ``share`` of the device's free memory
    (``device_bytes``, default ``torch.cuda.mem_get_info``), else ``"host"`` when they take at
    most ``share`` of :func:`available_host_bytes` (``host_bytes``; unknown: host), else
    ``"disk"`` (a memory-mapped scratch file). On CPU the host is the device."""
    device = torch.device(device)
    if device.type == "cuda":
        if device_bytes is None:
            device_bytes = torch.cuda.mem_get_info(device)[0]
        if nbytes <= share * device_bytes:
            return "device"
    if host_bytes is None:
        host_bytes = available_host_bytes()
    if host_bytes is None or nbytes <= share * host_bytes:
        return "host"
    return "disk"


class EvalTable:
    """An N x d float32 table of exact inference's intermediate outputs, kept at ``where``:
    ``"device"`` (a tensor on ``device``), ``"host"`` (a host tensor) or ``"disk"`` (an
    ``np.memmap`` of an anonymous scratch file in ``scratch_dir``, default the system's temp
    folder: the file has no name from the start and its disk space is freed when the table is
    dropped, also after a crash).

    :attr:`resident` is the table as a tensor on ``device`` when the conv can index it with
    global ids directly (on the device; on the host when ``device`` is the CPU), else None:
    then rows are read with :meth:`read` (sorted ids: near-sequential reads of the scratch).
    """

    def __init__(self, n: int, d: int, where: str, device: torch.device | str,
                 scratch_dir: str | os.PathLike | None = None) -> None:
        self.device = torch.device(device)
        self.where = where
        if where == "disk" and n * d > 0:
            with tempfile.TemporaryFile(dir=scratch_dir, prefix="twopgraph-eval-") as f:
                reserve(f.fileno(), n * d * 4)  # a full disk: OSError now, not SIGBUS later
                self.array = np.memmap(f, dtype=np.float32, mode="w+", shape=(n, d))
            self.table = torch.from_numpy(self.array)
        else:
            on = self.device if where == "device" else torch.device("cpu")
            self.table = torch.empty((n, d), dtype=torch.float32, device=on)
        self.resident = self.table if self.table.device == self.device and where != "disk" \
            else None

    @classmethod
    def of(cls, t: torch.Tensor) -> EvalTable:
        """A table over an existing tensor (resident on its device)."""
        self = cls.__new__(cls)
        self.device, self.where = t.device, "device"
        self.table = self.resident = t.to(torch.float32)
        return self

    def write(self, a: int, b: int, y: torch.Tensor) -> None:
        """Rows ``[a, b)`` = ``y``."""
        if self.table.device == y.device:
            self.table[a:b] = y
        else:
            self.table[a:b] = y.to(self.table.device)

    def read(self, ids: np.ndarray) -> torch.Tensor:
        """Rows of ``ids`` (sorted int64) on the device."""
        return self.table[torch.from_numpy(ids)].to(self.device)

    def read_range(self, a: int, b: int) -> torch.Tensor:
        return self.table[a:b].to(self.device)

    def result(self) -> torch.Tensor:
        """The table as a host tensor (a scratch table stays memory-mapped)."""
        return self.table.cpu()


def _row_source(feat, device):
    """What layer 0 reads: a feature source (its ``read``/``read_range``), or a table given
    as a host array/tensor (read like a :class:`~twopgraph.cache.host.HostFeatures` of it) or
    as a device tensor (resident)."""
    if hasattr(feat, "read") and hasattr(feat, "read_range"):
        return feat
    if isinstance(feat, torch.Tensor) and feat.device.type != "cpu":
        return EvalTable.of(feat)
    return HostFeatures(feat, device)
