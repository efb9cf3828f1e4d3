"""A host row cache for a feature table larger than memory: :class:`HostRowCache`.

When the feature table is a memory map of a store and does not fit in the memory left to
the process (a memory cgroup, or a table larger than the host), every input row that is not
in the page cache costs a page fault and a disk read, and the page cache keeps *pages*, not
rows: with 512-byte rows (128 float32, ogbn-papers100M's width) a 4 KiB page holds eight
rows, most of which the next batches do not need, so the page cache holds the hot rows at
an eighth of its density, and the kernel's LRU keeps whatever was touched last. The row cache
keeps the rows a static policy of the registry ranks best
(:data:`~twopgraph.core.protocols.CACHE_POLICIES`: ``degree`` by default, PaGraph's rank, or
``presample``) packed in anonymous memory, read once at the start (a sequential pass over the
table, read ahead in row ranges); a gather then takes the hits from there and only the misses
from the mapping, and read-ahead is asked for the misses alone. The page cache still serves
the misses with what memory is left: anonymous memory is not reclaimed, so the cache is sized
to leave room for the graph structure, the batches and the page cache
(:func:`host_cache_rows`).

Memory: ``rows x F`` of the table's dtype (the cache), plus the slot map, int32 per row of the
table (4 bytes x N: it must grow with the table, to find a row's slot in O(1); int64 beyond
2**31 - 1 cached rows).

Example::

    >>> import numpy as np, torch
    >>> table = torch.arange(12.).view(6, 2)
    >>> cache = HostRowCache(table, np.array([4, 1]))
    >>> cache.take(np.array([1, 2, 4]), table).tolist(), cache.hits, cache.lookups
    ([[2.0, 3.0], [4.0, 5.0], [8.0, 9.0]], 2, 3)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch

from twopgraph.cache.host import host_tensor
from twopgraph.errors import ConfigError

if TYPE_CHECKING:
    from twopgraph.cache.readahead import Readahead

#: Share of the memory left (after the memory-mapped graph structure) that an
#: automatic host row cache takes; the rest stays page cache for the misses and the CSR.
HOST_CACHE_SHARE = 0.5
#: Rows copied per step of the initial fill.
FILL_CHUNK_BYTES = 64 << 20


class HostRowCache:
    """``rows`` (host rows of ``table``: int, any order, duplicates allowed) copied out of
    ``table`` (N x F, NumPy array / memory map or host torch tensor) into anonymous memory,
    in ``table``'s dtype. ``readahead``: the table's
    :class:`~twopgraph.cache.readahead.Readahead` (optional; the fill advises each range it
    is about to copy). ``hits`` / ``lookups`` count the rows :meth:`take` served (thread-safe);
    ``fill_s`` is the fill's wall time, seconds."""

    def __init__(self, table: np.ndarray | torch.Tensor, rows: np.ndarray,
                 readahead: Readahead | None = None, policy: str = "",
                 progress: Callable[[int, int], object] | None = None) -> None:
        t0 = time.perf_counter()
        tensor = host_tensor(table)
        if tensor.ndim != 2:
            raise ConfigError(f"a host row cache needs a 2-D table, got {tuple(tensor.shape)}")
        n, f = int(tensor.shape[0]), int(tensor.shape[1])
        rows = np.unique(np.asarray(rows, dtype=np.int64))
        if rows.shape[0] and (rows[0] < 0 or rows[-1] >= n):
            raise ConfigError(f"host row cache rows must be in [0, {n})")
        k = int(rows.shape[0])
        self.policy = policy
        self.num_rows, self.num_features = k, f
        self.slot = np.full(n, -1, dtype=np.int32 if k < 2**31 - 1 else np.int64)
        self.slot[rows] = np.arange(k, dtype=self.slot.dtype)
        self.data = torch.empty((k, f), dtype=tensor.dtype)
        self.nbytes = int(self.data.numel() * self.data.element_size())
        step = max(1, FILL_CHUNK_BYTES // max(1, f * self.data.element_size()))
        for i in range(0, k, step):
            part = rows[i:i + step]
            if readahead is not None:  # one range: the rows are sorted
                readahead.advise_range(int(part[0]), int(part[-1]) + 1)
            torch.index_select(tensor, 0, torch.from_numpy(part), out=self.data[i:i + step])
            if progress is not None:
                progress(min(k, i + step), k)
        self.fill_s = time.perf_counter() - t0
        self.hits = self.lookups = 0
        self._lock = threading.Lock()

    def misses(self, host: np.ndarray) -> np.ndarray:
        """The rows of ``host`` (int64 host rows) that are not cached."""
        return host[self.slot[host] < 0]

    def take(self, host: np.ndarray, table: np.ndarray | torch.Tensor,
             out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows ``host`` (int64 host rows of ``table``, the table this cache was filled from)
        as a tensor of ``table``'s dtype (or written, converted, into ``out``): hits from the
        cache, misses from ``table``. Counted in :attr:`hits` / :attr:`lookups`."""
        tensor = host_tensor(table)
        host = np.ascontiguousarray(host, dtype=np.int64)
        slots = self.slot[host]
        hit = slots >= 0
        nh, n = int(np.count_nonzero(hit)), int(host.shape[0])
        with self._lock:
            self.hits += nh
            self.lookups += n
        if out is None:
            out = torch.empty((n, self.num_features), dtype=self.data.dtype)
        if nh == n:
            _select(self.data, slots.astype(np.int64), out)
        elif nh == 0:
            _select(tensor, host, out)
        else:
            hp = np.flatnonzero(hit)
            mp = np.flatnonzero(~hit)
            out.index_copy_(0, torch.from_numpy(hp), _selected(self.data, slots[hp], out.dtype))
            out.index_copy_(0, torch.from_numpy(mp), _selected(tensor, host[mp], out.dtype))
        return out

    def counts(self) -> tuple[int, int]:
        """``(hits, lookups)`` so far."""
        with self._lock:
            return self.hits, self.lookups

    def record(self) -> dict:
        """The figures ``metrics.json`` reports under ``host_cache``."""
        hits, lookups = self.counts()
        return {"policy": self.policy, "rows": self.num_rows, "bytes": self.nbytes,
                "slot_map_bytes": int(self.slot.nbytes), "fill_s": round(self.fill_s, 3),
                "hits": hits, "lookups": lookups,
                "hit_rate": hits / lookups if lookups else None}


def host_cache_rows(table_bytes: int, row_bytes: int, num_rows: int, structure_bytes: int,
                    available: int | None, share: float = HOST_CACHE_SHARE) -> int:
    """Rows of an automatic host row cache: 0 when ``available`` (bytes the process can still
    fill, :func:`~twopgraph.runtime.memory.available_host_bytes`) is unknown or the table
    (``table_bytes``) fits in half of it (the page cache keeps it: nothing to gain), else
    ``share`` of what is left after the memory-mapped graph structure (``structure_bytes``:
    it wants the page cache too), in rows of ``row_bytes``, at most ``num_rows``; the rest
    stays for the batches and the page cache.

    Example::

        >>> host_cache_rows(10 << 30, 1024, 10 << 20, 2 << 30, 6 << 30)
        2097152
        >>> host_cache_rows(1 << 30, 1024, 1 << 20, 0, 6 << 30)  # fits: no cache
        0
    """
    if available is None or table_bytes <= available // 2 or row_bytes <= 0:
        return 0
    left = available - structure_bytes
    return int(max(0, min(num_rows, int(share * left) // row_bytes)))


def _select(src: torch.Tensor, idx: np.ndarray, out: torch.Tensor) -> None:
    index = torch.from_numpy(np.ascontiguousarray(idx, dtype=np.int64))
    if out.dtype == src.dtype:
        torch.index_select(src, 0, index, out=out)
    else:
        out.copy_(torch.index_select(src, 0, index))


def _selected(src: torch.Tensor, idx: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    t = torch.index_select(src, 0, torch.from_numpy(np.ascontiguousarray(idx, np.int64)))
    return t if t.dtype == dtype else t.to(dtype)
