"""Vertex ids onto table rows: the sorted distinct ids a chunk reads and their places.

:func:`id_dtype` (int32 ids below 2**31 vertices), :func:`sorted_unique`; :class:`Relabel`
(a chunk's distinct ids by an n-byte mark array or by sorting) and its torch twin
:func:`relabel_on_device`; :func:`_local_block` (a whole-graph block relabelled onto the rows
it reads); :class:`LevelIndex` (positions of ids in a level of restricted inference: binary
search, or an N-entry int32 map for a dense level, :data:`DENSE_LEVEL`).
"""

from __future__ import annotations

import numpy as np
import torch

from twopgraph.core.minibatch import Block


def id_dtype(n: int) -> type[np.signedinteger]:
    """The dtype of vertex id tables over ``n`` vertices: int32 while ``n < 2**31``."""
    return np.int32 if n < 2 ** 31 else np.int64


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``a`` (a sort and one comparison; same dtype)."""
    if a.shape[0] == 0:
        return a.copy()
    s = np.sort(a)
    return s[np.concatenate([[True], s[1:] != s[:-1]])]


class Relabel:
    """The sorted distinct ids ``u`` of a chunk's src (and dst) ids in ``[0, n)`` and their
    places in ``u``. Large chunks use an n-byte mark array and an n-entry position map
    (int32 while n < 2**31) kept across chunks; small ones -- or all, without ``marks`` --
    sort and search. :meth:`__call__` serves a dst range of the whole-graph block,
    :meth:`union` + :meth:`places` any id arrays (the places computed only once the chunk is
    kept)."""

    def __init__(self, n: int, marks: bool = True) -> None:
        self.n, self.marks = n, marks
        self.mark: np.ndarray | None = None
        self.pos: np.ndarray | None = None
        self._marked = False  # how the last union was made

    def _uses_marks(self, count: int) -> bool:
        return self.marks and 16 * count >= self.n  # else sorting beats a scan of all n

    def _arrays(self):
        if self.mark is None:
            self.mark = np.zeros(self.n, dtype=bool)
            self.pos = np.empty(self.n, dtype=np.int32 if self.n < 2 ** 31 else np.int64)
        return self.mark, self.pos

    def __call__(self, idx: np.ndarray, a: int, b: int) -> tuple[np.ndarray, np.ndarray, int]:
        if not self._uses_marks(idx.shape[0] + b - a):
            u = sorted_unique(np.concatenate([idx, np.arange(a, b, dtype=np.int64)]))
            return u, np.searchsorted(u, idx), int(np.searchsorted(u, a))
        mark, pos = self._arrays()
        mark[idx] = True
        mark[a:b] = True
        u = np.flatnonzero(mark)
        mark[u] = False
        pos[u] = np.arange(u.shape[0], dtype=pos.dtype)
        return u, pos[idx].astype(np.int64), int(pos[a])

    def union(self, *parts: np.ndarray) -> np.ndarray:
        """The sorted distinct ids (int64) of ``parts``."""
        self._marked = self._uses_marks(sum(x.shape[0] for x in parts))
        if not self._marked:
            return sorted_unique(np.concatenate(parts))
        mark, _ = self._arrays()
        for x in parts:
            mark[x] = True
        u = np.flatnonzero(mark)
        mark[u] = False
        return u

    def places(self, u: np.ndarray, *parts: np.ndarray) -> list[np.ndarray]:
        """The places (int64) in ``u`` -- the last :meth:`union`, of these ``parts`` -- of
        each of ``parts``."""
        if not self._marked:
            return [np.searchsorted(u, x) for x in parts]
        pos = self.pos
        pos[u] = np.arange(u.shape[0], dtype=pos.dtype)
        return [pos[x].astype(np.int64) for x in parts]


def relabel_on_device(indices: torch.Tensor, a: int,
                      b: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """:class:`Relabel` with torch ops where ``indices`` live (a device sampler's block):
    ``(sorted distinct ids (same device), indices relabelled, position of vertex a)``."""
    ids = torch.cat([torch.arange(a, b, device=indices.device), indices])
    u, inv = torch.unique(ids, sorted=True, return_inverse=True)
    return u, inv[b - a:], int(inv[0]) if b > a else 0


def _local_block(block: Block, a: int, b: int, relabel: Relabel):
    """``block`` (a dst range ``[a, b)`` over global src ids) relabelled onto its distinct src
    ids: ``(local block, ids (host int64, sorted), position of vertex a in them)``; the
    range's vertices are ``ids[k:k + b - a]``."""
    if block.indices.device.type == "cpu":
        u, local, k = relabel(block.indices.numpy(), a, b)
        ut, local_t = torch.from_numpy(u), torch.from_numpy(local)
    else:  # a device sampler's block: relabelled where it lives
        ut, local_t, k = relabel_on_device(block.indices, a, b)
        u = ut.cpu().numpy()
    lb = Block(int(u.shape[0]), b - a, block.indptr, local_t, block.src_deg[ut], block.dst_deg)
    return lb, u, k


#: A level whose ids cover at least this share of the graph's vertices is indexed by a
#: position map of all N vertices (one int32 per vertex: no larger than the level's own id
#: table then, give or take this factor) instead of a binary search per neighbour.
DENSE_LEVEL = 1 / 8


class LevelIndex:
    """Positions of vertex ids in ``level`` (sorted distinct ids of a layer's table, over a
    graph of ``n`` vertices; None: all ``n`` vertices, position = id): a binary search while
    the level is sparse, an N-entry position map (int32; built once) when it holds at least
    :data:`DENSE_LEVEL` of the vertices -- the same positions, a gather instead of
    ~log2(|level|) cache misses per id. ``relabel`` (a :class:`Relabel` over the level's
    positions) maps a chunk onto its distinct rows; for ``level`` None its n-entry arrays are
    used only when ``dense`` says the rows read are a dense share of the graph."""

    def __init__(self, level: np.ndarray | None, n: int, dense: bool | None = None) -> None:
        self.level, self.n = level, n
        self.dense = level.shape[0] >= DENSE_LEVEL * n if dense is None else dense
        size = n if level is None else int(level.shape[0])
        self.relabel = Relabel(size, marks=level is not None or self.dense)
        self.pos: np.ndarray | None = None  # built on first use

    def positions(self, ids: np.ndarray) -> np.ndarray:
        """Positions (int64) of ``ids`` (all present in the level)."""
        if self.level is None:
            return ids.astype(np.int64)
        if self.dense:  # a map of all N: no larger than 8 x this level's own ids
            if self.pos is None:
                m = self.level.shape[0]
                self.pos = np.full(self.n, -1, dtype=np.int32 if m < 2**31 else np.int64)
                self.pos[self.level] = np.arange(m, dtype=self.pos.dtype)
            return self.pos[ids].astype(np.int64)
        level = self.level  # same dtypes: a mixed search would convert all of it every time
        return np.searchsorted(level, ids.astype(level.dtype, copy=False))

    def ids(self, u: np.ndarray) -> np.ndarray:
        """The vertex ids (int64) at positions ``u``."""
        return u if self.level is None else self.level[u].astype(np.int64)
