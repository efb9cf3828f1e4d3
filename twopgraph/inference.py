"""Exact (full-neighbour) layer-wise inference over the whole graph, within bounded memory.

:func:`layerwise_inference` computes one layer at a time over all N vertices, dst range by dst
range (:func:`edge_balanced_ranges`): each range reads only the distinct src rows it needs,
through a feature source (:class:`~twopgraph.protocols.FeatureSource` ``read``: never the
whole table on the device, a memory-mapped table read row by row), and a range whose rows would
exceed :data:`EVAL_CHUNK_BYTES` is halved. Each layer's N x d output goes where there is room
(:func:`table_place`: the device, host memory, or a nameless scratch file), judged from the
memory available to this process (:func:`available_host_bytes`: ``MemAvailable`` and the
process's own cgroup limit).

When only some vertices are scored (a run's val + test), :func:`scored_inference` computes the
last layer for them and each layer below for the full in-neighbourhood of the one above
(:func:`plan_scope`'s levels): tables sized by those frontiers, not by N, the same logits up
to float rounding. :func:`plan_scope` picks the scope of ``--eval-scope`` (``auto``: the
cheaper by estimated rows + edges) and :func:`evaluate_scored` returns the scored rows
(:class:`ScoredLogits`) either way.

Scores of the logits on a split (:func:`score`): ``acc`` (:func:`accuracy`) or ``rocauc``
(:func:`rocauc` of class 1's probability, two classes only); :func:`resolve_metric` turns
``--metric`` (``auto`` = ``rocauc`` for two classes) into one of them.

Example::

    >>> logits = layerwise_inference(model, sampler, feat, torch.device("cpu"))  # doctest: +SKIP
    >>> accuracy(logits, labels, data.test_idx)                                  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import logging
import math
import mmap
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from .cache.host import HostFeatures
from .cache.readahead import find_mmap
from .errors import ConfigError, GraphFormatError
from .files import human_bytes
from .loader import as_long_tensor
from .metrics import available_host_bytes, fillable_host_bytes  # noqa: F401 (read here)
from .models import BlockGNN
from .sampler import NeighborSampler
from .sampler.kernels import sample_neighbors, sample_neighbors_serial
from .sampler.minibatch import Block
from .spmm import scatter_rows

log = logging.getLogger("twopgraph")


#: Bytes (float32) of the input rows one chunk of exact inference gathers at most: a dst range
#: whose distinct src rows would take more is halved (down to one vertex).
EVAL_CHUNK_BYTES = 128 << 20
#: Share of the memory available where an intermediate N x d table of exact inference may
#: go (:func:`table_place`): the rest is left to the chunks, the caches and other processes.
TABLE_SHARE = 0.5


def table_place(nbytes: int, device, *, host_bytes: int | None = None,
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

    def __init__(self, n: int, d: int, where: str, device, scratch_dir=None):
        self.device = torch.device(device)
        self.where = where
        if where == "disk" and n * d > 0:
            with tempfile.TemporaryFile(dir=scratch_dir, prefix="twopgraph-eval-") as f:
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


class Relabel:
    """The sorted distinct ids ``u`` of a chunk's src (and dst) ids in ``[0, n)`` and their
    places in ``u``. Large chunks use an n-byte mark array and an n-entry position map
    (int32 while n < 2**31) kept across chunks; small ones -- or all, without ``marks`` --
    sort and search. :meth:`__call__` serves a dst range of the whole-graph block,
    :meth:`union` + :meth:`places` any id arrays (the places computed only once the chunk is
    kept)."""

    def __init__(self, n: int, marks: bool = True):
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


def relabel_on_device(indices: torch.Tensor, a: int, b: int):
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


def _row_source(feat, device):
    """What layer 0 reads: a feature source (its ``read``/``read_range``), or a table given
    as a host array/tensor (read like a :class:`~twopgraph.cache.host.HostFeatures` of it) or
    as a device tensor (resident)."""
    if hasattr(feat, "read") and hasattr(feat, "read_range"):
        return feat
    if isinstance(feat, torch.Tensor) and feat.device.type != "cpu":
        return EvalTable.of(feat)
    return HostFeatures(feat, device)


@torch.no_grad()
def layerwise_inference(model: BlockGNN, sampler: NeighborSampler, feat, device,
                        batch_edges: int = 4_000_000, *, scratch_dir=None,
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


# ----------------------------------------------------------------------------------------------
# restricted exact inference: only the vertices that are scored, and what they need
# ----------------------------------------------------------------------------------------------

#: ``--eval-scope``: ``all`` = :func:`layerwise_inference` over every vertex, ``scored`` =
#: :func:`scored_inference` over the L-hop in-neighbourhood of the scored vertices, ``auto`` =
#: the cheaper by :func:`plan_scope`'s estimate.
EVAL_SCOPES = ("auto", "all", "scored")
#: ``--eval-scope auto`` takes ``scored`` when its estimated work (rows computed + edges
#: aggregated over the layers) is at most this share of whole-graph inference's: a restricted
#: layer also sorts and searches its ids, about as much again per edge.
SCOPE_RATIO = 0.5


def id_dtype(n: int):
    """The dtype of vertex id tables over ``n`` vertices: int32 while ``n < 2**31``."""
    return np.int32 if n < 2 ** 31 else np.int64


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``a`` (a sort and one comparison; same dtype)."""
    if a.shape[0] == 0:
        return a.copy()
    s = np.sort(a)
    return s[np.concatenate([[True], s[1:] != s[:-1]])]


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

    def __init__(self, level: np.ndarray | None, n: int, dense: bool | None = None):
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


def scored_ids(n: int, *splits) -> np.ndarray:
    """The sorted distinct vertices of ``splits`` (id arrays, duplicates and any order
    allowed; None skipped) as :func:`id_dtype` ids; an id outside ``[0, n)`` is a one-line
    :class:`~twopgraph.errors.ConfigError`."""
    parts = [np.asarray(s).reshape(-1) for s in splits if s is not None]
    ids = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    if ids.shape[0] and not np.issubdtype(ids.dtype, np.integer):
        raise ConfigError(f"scored vertex ids must be integers, got {ids.dtype}")
    if ids.shape[0] and (int(ids.min()) < 0 or int(ids.max()) >= n):
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        raise ConfigError(f"scored vertex id {bad} is outside the graph's {n} vertices")
    return sorted_unique(ids.astype(id_dtype(n), copy=False))


def _prefix_degrees(indptr: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``[0, d_0, d_0 + d_1, ...]`` (int64, len(ids) + 1) of the CSR rows ``ids``: the
    ``indptr`` of the rows taken in that order."""
    cum = np.zeros(ids.shape[0] + 1, dtype=np.int64)
    if ids.shape[0]:
        np.cumsum(indptr[ids + 1] - indptr[ids], out=cum[1:])
    return cum


#: Edges below which :func:`_rows_of` gathers on the calling thread (a parallel launch costs
#: more than it saves on a small piece).
SERIAL_EDGES = 1 << 16


def _rows_of(graph, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The full CSR rows of ``ids`` concatenated: ``(offsets int64, neighbours)``, in CSR
    order (the exact-inference block of those dst vertices): the sampling kernel with fanout
    -1, which takes every neighbour; parallel for pieces of at least :data:`SERIAL_EDGES`
    edges."""
    indptr = graph.indptr
    nodes = ids.astype(np.int64, copy=False)
    edges = int((indptr[nodes + 1] - indptr[nodes]).sum()) if nodes.shape[0] < 4096 else \
        SERIAL_EDGES
    kernel = sample_neighbors if edges >= SERIAL_EDGES else sample_neighbors_serial
    return kernel(indptr, graph.indices, nodes, -1, np.uint64(0))


def expand_frontier(graph, ids: np.ndarray, batch_edges: int = 4_000_000) -> np.ndarray:
    """``ids`` (sorted distinct) and all their in-neighbours, sorted distinct, in ``ids``'s
    dtype: the vertices a layer over ``ids`` reads. The rows are read ``batch_edges`` edges at
    a time; each piece's distinct neighbours are merged in whenever they outnumber the set
    so far, so memory is O(result + batch_edges) ids, never O(N)."""
    cum = _prefix_degrees(graph.indptr, ids)
    merged, pending, size = ids, [], 0
    for a, b in itertools.pairwise(edge_balanced_ranges(cum, batch_edges)):
        if cum[b] == cum[a]:
            continue
        u = sorted_unique(_rows_of(graph, ids[a:b])[1].astype(ids.dtype, copy=False))
        pending.append(u)
        size += u.shape[0]
        if size > max(merged.shape[0], batch_edges):
            merged, pending, size = sorted_unique(np.concatenate([merged, *pending])), [], 0
    if pending:
        merged = sorted_unique(np.concatenate([merged, *pending]))
    return merged


@dataclass
class ScopePlan:
    """What :func:`plan_scope` decided: ``scope`` (``all`` | ``scored``), for ``scored`` the
    vertex sets ``levels`` (sorted distinct ids, :func:`id_dtype`): ``levels[i + 1]`` = the
    vertices whose layer-``i`` output is computed (``levels[-1]`` = the scored ones),
    ``levels[0]`` = the input rows layer 0 projects (None unless it projects, see
    :func:`scored_inference`); ``rows`` and ``edges`` per layer (input side first) of the
    scope taken; and ``choice``: the figures of an ``auto`` decision (None for a scope given
    explicitly)."""

    scope: str
    levels: list | None
    rows: list[int]
    edges: list[int]
    choice: dict | None = None
    streamed: list[bool] | None = None
    input_passes: int | None = None

    def record(self) -> dict:
        """The keys an evaluated epoch's record gets: ``eval_scope``, ``eval_rows`` (rows
        computed per layer, input side first), ``eval_edges`` (edges aggregated per layer),
        ``eval_choice``, ``eval_streamed`` (per layer, whether its inputs were streamed
        into it by the layer below; :func:`scored_inference`; None for scope ``all``)."""
        return {"eval_scope": self.scope, "eval_rows": list(self.rows),
                "eval_edges": list(self.edges), "eval_choice": self.choice,
                "eval_streamed": None if self.streamed is None else list(self.streamed),
                "eval_input_passes": self.input_passes}


def _projects(conv) -> bool:
    return conv.in_dim > conv.out_dim and hasattr(conv, "project")


def plan_scope(model: BlockGNN, graph, scored: np.ndarray, scope: str = "auto",
               batch_edges: int = 4_000_000, ratio: float = SCOPE_RATIO, *,
               input_level: bool | None = None) -> ScopePlan:
    """Decide between whole-graph (:func:`layerwise_inference`) and restricted
    (:func:`scored_inference`) exact inference of ``model`` on ``graph`` when only the
    vertices ``scored`` (:func:`scored_ids`) are scored.

    ``scored`` expands layer by layer from the last (:func:`expand_frontier`). The estimated
    work of a scope is the sum over layers of the rows it computes and the edges it
    aggregates: ``L (N + E)`` for ``all`` (``+ N`` when layer 0 projects every input row),
    ``sum_i (|V_i| + E(V_i))`` for ``scored``. ``auto`` takes ``scored`` when that is at most
    ``ratio`` x ``all``'s, and stops expanding (taking ``all``) as soon as the partial sum
    exceeds it, so planning costs at most ``ratio`` of one pass over the edges. Memory: the
    levels, ``sum_i |V_i|`` ids (4 bytes each below 2**31 vertices). ``input_level``: whether
    to expand to the input rows layer 0 projects (default: whether it projects; the
    distributed evaluation never projects layer 0)."""
    if scope not in EVAL_SCOPES:
        raise ConfigError(f"unknown eval scope {scope!r}; known: {', '.join(EVAL_SCOPES)}")
    n, e = graph.num_nodes, int(graph.indptr[-1])
    convs = model.convs
    nl = len(convs)
    if input_level is None:
        input_level = _projects(convs[0])
    cost_all = nl * (n + e) + (n if input_level else 0)
    whole = ScopePlan("all", None, [n] * nl, [e] * nl)
    if scope == "all":
        return whole
    scored = np.asarray(scored)
    if scored.dtype != id_dtype(n):
        scored = scored.astype(id_dtype(n))
    budget = ratio * cost_all if scope == "auto" else math.inf
    levels = [scored]
    edges = [int(_prefix_degrees(graph.indptr, scored)[-1])]
    cost = scored.shape[0] + edges[0]
    need = nl - 1 + (1 if input_level else 0)  # expansions: one per layer below the last
    for k in range(need):
        if cost > budget:
            break
        levels.insert(0, expand_frontier(graph, levels[0], batch_edges))
        if k < nl - 1:  # a layer's own set: its rows and edges count
            edges.insert(0, int(_prefix_degrees(graph.indptr, levels[0])[-1]))
            cost += levels[0].shape[0] + edges[0]
        else:  # the input rows layer 0 projects
            cost += levels[0].shape[0]
    done = len(levels) == need + 1 and cost <= budget
    choice = None
    if scope == "auto":
        choice = {"scope": "scored" if done else "all", "cost_scored": cost if done else None,
                  "cost_scored_at_least": int(cost), "cost_all": int(cost_all),
                  "ratio": float(cost / cost_all) if cost_all else 0.0, "threshold": ratio}
    if not done:
        whole.choice = choice
        return whole
    if not input_level:
        levels.insert(0, None)
    rows = [int(v.shape[0]) for v in levels[1:]]
    return ScopePlan("scored", levels, rows, edges, choice)


class ScoredLogits:
    """Logits of some vertices: ``values`` (R x C float32 host tensor) and ``ids`` (sorted
    distinct int64 (R,): the vertex of each row), or ``ids`` None: every vertex, row i =
    vertex i (whole-graph inference's N x C table). Memory: R x C x 4 bytes + 8 R."""

    def __init__(self, values: torch.Tensor, ids: np.ndarray | None = None):
        self.values = values
        self.ids = None if ids is None else np.asarray(ids, dtype=np.int64)

    @property
    def num_rows(self) -> int:
        return int(self.values.shape[0])

    @property
    def nbytes(self) -> int:
        return self.values.numel() * self.values.element_size() + \
            (0 if self.ids is None else self.ids.nbytes)

    def positions(self, idx) -> np.ndarray:
        """Rows of the vertices ``idx`` (any order, duplicates allowed; int64); a vertex not
        held is a :class:`ValueError`."""
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        if self.ids is None:
            return idx
        pos = np.searchsorted(self.ids, idx)
        if idx.shape[0] and (pos.max() >= self.ids.shape[0]
                             or not np.array_equal(self.ids[pos], idx)):
            missing = idx[(pos >= self.ids.shape[0]) |
                          (self.ids[np.minimum(pos, self.ids.shape[0] - 1)] != idx)]
            raise ValueError(f"vertex {int(missing[0])} has no logits here (only the "
                             f"{self.ids.shape[0]} scored vertices)")
        return pos

    def take(self, idx) -> torch.Tensor:
        """The logits of ``idx`` (one row per entry, in its order)."""
        return self.values[torch.from_numpy(self.positions(idx))]

    def restrict(self, ids: np.ndarray) -> ScoredLogits:
        """The rows of ``ids`` (sorted distinct) only, copied."""
        ids = np.asarray(ids, dtype=np.int64)
        return ScoredLogits(self.take(ids).clone(), ids)


def _degree_of(sampler, ids: np.ndarray) -> torch.Tensor:
    """The degrees (float32) the sampler's blocks carry for ``ids`` (GCN's normalisation:
    the full graph's, or the sampler's own override), without an N-sized copy."""
    deg = getattr(sampler, "_deg", None)
    if deg is not None:
        return torch.from_numpy(np.ascontiguousarray(deg[ids]))
    dev = getattr(sampler, "deg", None)
    if isinstance(dev, torch.Tensor):
        return dev[torch.from_numpy(ids.astype(np.int64, copy=False)).to(dev.device)].cpu()
    indptr = sampler.graph.indptr
    return torch.from_numpy((indptr[ids + 1] - indptr[ids]).astype(np.float32))


@torch.no_grad()
def scored_inference(model: BlockGNN, sampler, feat, device, scored,
                     batch_edges: int = 4_000_000, *, plan: ScopePlan | None = None,
                     scratch_dir=None, place: str | None = None,
                     chunk_bytes: int = EVAL_CHUNK_BYTES,
                     stream: bool | None = None, stream_inputs: bool | None = None,
                     pass_rows: int | None = None) -> ScoredLogits:
    """Exact full-neighbour inference of the vertices ``scored`` only (ids, any order,
    duplicates allowed): the same logits as :func:`layerwise_inference` on those rows (up to
    float rounding), computed over the L-hop in-neighbourhood instead of all N vertices.

    The last layer runs for the scored vertices ``V_{L-1}``, layer ``i`` for ``V_i = V_{i+1}
    and all its in-neighbours`` (:func:`plan_scope`'s levels; computed here unless ``plan``
    gives them), each over its sorted ids in ranges of about ``batch_edges`` edges, a range
    cut into pieces while its distinct src rows exceed ``chunk_bytes``. A range gathers its
    dst rows of the CSR, maps the src ids onto positions in the layer below's table (:class:`LevelIndex`),
    reads those distinct rows -- through ``feat`` (as :func:`layerwise_inference` takes it)
    for layer 0 -- and runs the conv on the block relabelled onto them; degrees are the
    sampler's (the full graph's: GCN's normalisation is exact). A layer that shrinks the
    width is computed from projections as in :func:`layerwise_inference` (layer 0's of the
    input rows ``levels[0]``).

    A layer whose level is much larger than the next one's is *streamed* (``stream`` None:
    when the next layer's input tables are smaller than the table streaming saves; True:
    wherever the conv contract and an undirected graph allow; False: never): each chunk's
    outputs are pushed at once into the next layer's accumulators over its own level
    (:class:`_Push`: the summed ``conv.aggregate`` of each dst's neighbours and the dst
    rows), and the next layer is their ``conv.combine``, so the layer's own ``|V_i| x
    hidden`` table is never made. On a papers-shaped graph the 2-hop level is 93% of the
    vertices and the 1-hop one 7%: streaming replaces an N x hidden table by two 0.07 N x
    hidden ones. Which layers streamed is set as ``plan.streamed``.

    Layer 0 gathers each chunk's distinct input rows at random, which rereads the whole
    feature table per chunk once it no longer stays in the page cache. Its *inputs* are then
    streamed instead (``stream_inputs`` None: when the input table exceeds
    :data:`INPUT_CACHE_SHARE` of the memory available; True: wherever the conv contract and
    an undirected graph allow; False: never): in passes over ranges of its own level sized to
    :data:`TABLE_SHARE` of the memory the page cache could give way to (``pass_rows`` rows
    each, when given), each pass reads the feature table and the CSR once, in order, and
    pushes every row into the accumulators of its neighbours in the range
    (:class:`_Push`): a few sequential reads of the table instead of one random read per
    chunk. ``plan.input_passes`` is the number of passes (0: gathered).

    Every table is sized by its level, ``|V_i| x width`` float32, kept where
    :func:`table_place` says; nothing of size N is made (ids int32 below 2**31 vertices)
    except, for a level holding at least :data:`DENSE_LEVEL` of the vertices, its int32
    position map (4 N bytes, at most 8x that level's own ids), and for a streamed layer an
    N-byte membership mark. Returns a :class:`ScoredLogits` of the distinct scored vertices
    (``|V_{L-1}| x C`` float32 on the host)."""
    was_training = model.training
    model.eval()
    device = torch.device(device)
    graph = sampler.graph
    n = graph.num_nodes
    ids = scored_ids(n, scored)
    if plan is None or plan.scope != "scored":
        plan = plan_scope(model, graph, ids, "scored", batch_edges)
    elif not np.array_equal(plan.levels[-1], ids):
        raise ConfigError("scored_inference: the plan was made for other scored vertices")
    levels = plan.levels
    convs = model.convs

    def new_tables(rows: int, widths) -> list[EvalTable]:
        where = place or table_place(4 * rows * sum(widths), device)
        return [EvalTable(rows, w, where, device, scratch_dir) for w in widths]

    def chunks(level: np.ndarray, below: LevelIndex, cum: np.ndarray, a: int, b: int,
               width: int):
        """``(a, b, block on the device, u, kd, offs, nbrs)`` of positions ``[a, b)`` of
        ``level``: ``u`` the sorted distinct rows read (positions in ``below``, global ids
        when it is None), ``kd`` the dst vertices' places in ``u``, ``offs``/``nbrs`` their
        CSR rows; a range whose ``u`` exceeds
        ``chunk_bytes`` is cut at once into as many edge-balanced pieces as its rows need
        (then again if a piece still exceeds it; halving would sort each edge ~log times)."""
        dst = level[a:b]
        offs, nbrs = _rows_of(graph, dst)
        p_src, p_dst = below.positions(nbrs), below.positions(dst)
        u = below.relabel.union(p_src, p_dst)
        if b - a > 1 and 4 * width * u.shape[0] > chunk_bytes:
            k = min(b - a, max(2, -(-5 * 4 * width * u.shape[0] // (4 * chunk_bytes))))
            del offs, nbrs, p_src, p_dst, u
            goal = np.linspace(int(cum[a]), int(cum[b]), k + 1)[1:-1]
            cuts = np.searchsorted(cum[a:b + 1], goal, side="right") - 1 + a
            bounds = sorted({a, b, *np.clip(cuts, a + 1, b - 1).tolist()})
            for lo, hi in itertools.pairwise(bounds):
                yield from chunks(level, below, cum, lo, hi, width)
            return
        l_src, l_dst = below.relabel.places(u, p_src, p_dst)
        glob = below.ids(u)
        block = Block(int(u.shape[0]), b - a, torch.from_numpy(offs),
                      torch.from_numpy(l_src), _degree_of(sampler, glob),
                      _degree_of(sampler, dst))
        yield a, b, block.to(device), u, torch.from_numpy(l_dst).to(device), offs, nbrs

    src = _row_source(feat, device)
    # layer 0 without projections reads global ids (marked in an N-entry array only when
    # its dst level is dense: its input rows are then denser still)
    proj, below = None, LevelIndex(None, n, dense=levels[1].shape[0] >= DENSE_LEVEL * n)
    if levels[0] is not None:  # layer 0 projects: each input row of the neighbourhood once
        rows0 = levels[0]
        step = max(1, chunk_bytes // (4 * max(1, convs[0].in_dim)))
        proj = new_tables(rows0.shape[0], _widths(convs[0], device))
        for a in range(0, rows0.shape[0], step):
            b = min(rows0.shape[0], a + step)
            parts = convs[0].project(src.read(rows0[a:b].astype(np.int64)).to(device))
            for t, p in zip(proj, parts):
                t.write(a, b, p)
        src, below = None, LevelIndex(rows0, n)
    inpush = src is not None and _push_inputs(convs[0], graph, src, stream_inputs)
    input_passes = 0
    pushed: _Push | None = None  # the accumulated inputs of the layer about to run
    streamed = []
    for i, conv in enumerate(convs):
        level = levels[i + 1]
        cum = _prefix_degrees(graph.indptr, level)
        last = i == len(convs) - 1
        widths = None if last else _plan_push(convs[i + 1], conv, graph, level,
                                              levels[i + 2], stream, device)
        streamed.append(pushed is not None)
        fuse = not last and widths is None and _projects(convs[i + 1])
        push = None
        if widths is not None:  # sums updated at random: in memory where the page cache can
            m = levels[i + 2].shape[0]  # give way (a scratch file would be read back again)
            acc = EvalTable(m, widths[0], place or table_place(
                4 * m * widths[0], device, host_bytes=fillable_host_bytes()), device,
                scratch_dir)
            push = _Push(convs[i + 1], level, levels[i + 2], sampler, device,
                         [acc] + new_tables(m, widths[1:]))
        else:
            out = new_tables(level.shape[0], _widths(convs[i + 1], device) if fuse
                             else [conv.out_dim])

        def emit(a: int, b: int, y: torch.Tensor, offs, nbrs) -> None:
            y = model.activate(i, y)
            if push is not None:
                push.push(a, b, y, level[a:b], offs, nbrs)
                return
            parts = convs[i + 1].project(y) if fuse else (y,)
            for t, p in zip(out, parts):
                t.write(a, b, p)

        def combined(got: _Push, a0: int, b0: int, base: int = 0) -> None:
            """Emit positions ``[a0, b0)`` of the level: the combine of what ``got`` holds
            for them (its row 0 is position ``base``; dst rows it does not keep are read
            from the layer's input source)."""
            # per row: what got holds and the own row read back, the output and its message
            # pushed into the next layer, and the row's edges (ids, targets, weights)
            per_row = (4 * (got.width + (0 if got.rows else conv.in_dim) + 2 * conv.out_dim)
                       + 32 * max(1, graph.num_edges // max(1, graph.num_nodes)))
            step = max(1, combine_bytes // per_row)
            for a in range(a0, b0, step):
                b = min(b0, a + step)
                dst = level[a:b]
                own = got.rows.read_range(a - base, b - base) if got.rows is not None \
                    else src.read(dst.astype(np.int64))
                y = conv.combine(own, got.acc.read_range(a - base, b - base),
                                 _degree_of(sampler, dst).to(device))
                offs, nbrs = _rows_of(graph, dst) if push is not None else (None, None)
                emit(a, b, y, offs, nbrs)

        combine_bytes = chunk_bytes
        if pushed is not None:  # this layer = combine of what the layer below pushed
            for a0, b0 in itertools.pairwise(edge_balanced_ranges(cum, batch_edges)):
                combined(pushed, a0, b0)
        elif i == 0 and inpush:  # the inputs pushed in passes over ranges of the level
            host = fillable_host_bytes()  # memory is short here: the combine steps too
            combine_bytes = chunk_bytes if host is None else \
                max(1 << 20, min(chunk_bytes, int(CHUNK_SHARE * host)))
            for d0, d1, got in _input_passes(conv, src, sampler, level, device,
                                            batch_edges, place, scratch_dir, pass_rows):
                input_passes += 1
                combined(got, d0, d1, d0)
                del got
        else:
            inputs = proj if proj is not None else [src]
            width = sum(t.table.shape[1] if isinstance(t, EvalTable) else conv.in_dim
                        for t in inputs)
            for a0, b0 in itertools.pairwise(edge_balanced_ranges(cum, batch_edges)):
                for a, b, block, u, kd, offs, nbrs in chunks(level, below, cum, a0, b0,
                                                              width):
                    rows = [t.read(u).to(device) for t in inputs]
                    if proj is not None:  # the dst rows appended: from_projection slices
                        ext = tuple(torch.cat([r, r[kd]]) for r in rows)
                        lo = int(u.shape[0])
                        y = conv.from_projection(block, ext, lo, lo + b - a)
                    else:
                        y = conv(block, rows[0], rows[0][kd])
                    emit(a, b, y, offs, nbrs)
        src = proj = pushed = None
        if push is not None:
            pushed = push
        elif fuse:
            proj = out
        else:
            src = out[0]
        below = LevelIndex(level, n)
    if plan is not None:
        plan.streamed = streamed
        plan.input_passes = input_passes
    model.train(was_training)
    return ScoredLogits(src.result(), levels[-1].astype(np.int64))


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


def _file_of(arr) -> tuple[str, int] | None:
    """``(path, byte offset of arr[0])`` of a C-contiguous ``np.memmap`` (or a view of one)
    whose file is known, else None."""
    path = getattr(arr, "filename", None)
    if not isinstance(arr, np.memmap) or path is None or not arr.flags.c_contiguous:
        return None
    found = find_mmap(arr)
    if found is None:
        return None
    offset = int(arr.offset)
    return str(path), offset - offset % mmap.ALLOCATIONGRANULARITY + found[1]


def read_ranges(arr, ranges, *, drop: bool = False):
    """``arr[a:b]`` (a copy) for each ``(a, b)`` of ``ranges`` in turn, reading the next
    range on a background thread while the caller works on this one. A memory-mapped array
    (:func:`_file_of`) is read with ``os.preadv``: large sequential reads that the kernel's
    read-ahead serves at the disk's speed whatever advice the mapping carries (a feature
    table is ``MADV_RANDOM`` for the sampler); ``drop`` then removes the pages read from the
    page cache (``POSIX_FADV_DONTNEED``: a table larger than the memory would otherwise push
    out pages that are used again). A file shorter than the array is a one-line
    :class:`~twopgraph.errors.GraphFormatError`. Memory: two ranges."""
    ranges = [(int(a), int(b)) for a, b in ranges]
    loc = _file_of(arr)
    if loc is None:
        for a, b in ranges:
            yield np.array(arr[a:b])
        return
    path, base = loc
    row = arr.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64))
    fd = os.open(path, os.O_RDONLY)

    def read(a: int, b: int) -> np.ndarray:
        out = np.empty((b - a,) + arr.shape[1:], dtype=arr.dtype)
        view = memoryview(out.reshape(-1).view(np.uint8))
        off, n, got = base + a * row, (b - a) * row, 0
        while got < n:
            k = os.preadv(fd, [view[got:]], off + got)
            if k <= 0:
                raise GraphFormatError(f"{path}: the file ends at byte {off + got:,}, before "
                                       f"the {arr.shape[0]:,} rows its array holds (it "
                                       f"changed while this run read it)")
            got += k
        if drop and n and hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, off, n, os.POSIX_FADV_DONTNEED)
        return out

    try:
        with ThreadPoolExecutor(1, thread_name_prefix="twopgraph-read") as pool:
            ahead = pool.submit(read, *ranges[0]) if ranges else None
            for i in range(len(ranges)):
                got = ahead.result()
                ahead = pool.submit(read, *ranges[i + 1]) if i + 1 < len(ranges) else None
                yield got
    finally:
        os.close(fd)


def _agg_width(conv, device) -> int:
    """Columns of ``conv.aggregate``'s output (probed on a one-edge block)."""
    one = torch.ones(1)
    block = Block(1, 1, torch.tensor([0, 1]), torch.tensor([0]), one, one).to(device)
    return int(conv.aggregate(block, torch.zeros((1, conv.in_dim), device=device)).shape[1])


def _plan_push(nxt, conv, graph, level: np.ndarray, upper: np.ndarray,
               stream: bool | None, device) -> list[int] | None:
    """Whether ``conv``'s outputs (over ``level``) are streamed into the next layer ``nxt``
    (over ``upper``, a subset of ``level``) instead of kept in a table: the widths of the
    two tables that then hold ``nxt``'s inputs (summed aggregations, the dst rows), or None.
    ``stream`` None (auto) streams when those tables are smaller than the one streaming
    saves (``|level|`` x the next layer's input width, or its projections'), True whenever
    it can, False never. Streaming needs ``nxt.aggregate``/``combine`` and an undirected
    graph (a vertex's row then lists the dsts its output goes to)."""
    if stream is False or not (hasattr(nxt, "aggregate") and hasattr(nxt, "combine")):
        return None
    widths = [_agg_width(nxt, device), nxt.in_dim]
    saved = sum(_widths(nxt, device)) if _projects(nxt) else conv.out_dim
    if not stream and upper.shape[0] * sum(widths) >= level.shape[0] * saved:
        return None
    if graph.undirected_problem() is not None:
        return None
    return widths


#: :class:`_Push` adds edges straight into its accumulators where the conv allows
#: (:meth:`_Push._scatter`); False: always through ``conv.aggregate`` of sorted tiles.
SCATTER = True

#: :class:`_Push` marks the next level's vertices in an n-byte array when it holds at least
#: 1/PUSH_MARK of the vertices (the array is then at most 4x the level's own int32 ids), and
#: binary-searches each neighbour otherwise.
PUSH_MARK = 16


class _Push:
    """A layer's outputs streamed into the next layer ``conv`` over the smaller level
    ``upper`` (sorted ids, a subset of the layer's own ``level``): :meth:`push` adds each
    chunk's ``conv.aggregate`` over the chunk's edges into ``acc`` (``|upper|`` x agg width;
    a dst's neighbours arrive over several chunks, each a tile :class:`Block` with the dst's
    whole neighbour count) and, given a second table, keeps the rows of ``upper``'s own
    vertices in ``rows`` (else ``rows`` is None); the next layer is then
    ``conv.combine(rows, acc)``. ``level`` None: the chunks are of all vertices in id
    order. Needs an undirected graph: a vertex's CSR row lists the dsts its output goes
    to. Memory: the tables, per chunk O(its edges), and an ``n``-byte membership mark of
    ``upper`` when it is dense (:data:`PUSH_MARK`)."""

    def __init__(self, conv, level: np.ndarray | None, upper: np.ndarray, sampler, device,
                 tables: list[EvalTable]):
        self.conv, self.upper, self.sampler, self.device = conv, upper, sampler, device
        self.acc, self.rows = tables if len(tables) == 2 else (tables[0], None)
        for t in tables:  # zeros (a new scratch file reads as zeros already); in memory,
            if t.where != "disk":  # touched now so that the memory left is seen at once
                t.table.zero_()
        self.width = sum(t.table.shape[1] for t in tables)
        graph = sampler.graph
        self.indptr = graph.indptr
        self.index = LevelIndex(upper, graph.num_nodes)
        self.mark = None  # an n-byte mark only when upper is no sparser than 1/16 of n
        if PUSH_MARK * upper.shape[0] >= graph.num_nodes:
            self.mark = np.zeros(graph.num_nodes, dtype=bool)
            self.mark[upper] = True
        # each upper vertex's place in level (level None: all vertices in id order)
        self.own = upper.astype(np.int64) if level is None else np.searchsorted(level, upper)

    def _scatters(self, y: torch.Tensor) -> bool:
        """Whether :meth:`push` adds each edge straight into ``acc`` (:meth:`_scatter`): the
        conv gives its ``message`` and ``edge_weight`` and both live on the host."""
        return (SCATTER and hasattr(self.conv, "message") and hasattr(self.conv, "edge_weight")
                and y.device.type == "cpu" and self.acc.table.device.type == "cpu")

    def _scatter(self, tgt: np.ndarray, src: np.ndarray, dst: np.ndarray,
                 y: torch.Tensor) -> None:
        """``acc[tgt] += edge_weight * message(y)[src]`` per edge (:func:`scatter_rows`):
        the same sums as ``conv.aggregate`` over the tile, without grouping the edges by
        target (a sort of every edge pushed)."""
        ids = self.upper[tgt].astype(np.int64)
        count = torch.from_numpy(self.indptr[ids + 1] - self.indptr[ids])
        w = self.conv.edge_weight(_degree_of(self.sampler, dst)[torch.from_numpy(src)],
                                  _degree_of(self.sampler, ids), count)
        m = self.conv.message(y).to(torch.float32).contiguous()
        acc = self.acc.table
        scatter_rows(tgt, src, w.to(torch.float32).contiguous().numpy(), m.numpy(),
                     acc.numpy(), max(1, min(torch.get_num_threads(), 8)))

    def push(self, a: int, b: int, y: torch.Tensor, dst: np.ndarray, offs: np.ndarray,
             nbrs: np.ndarray) -> None:
        """Positions ``[a, b)`` of the level, vertices ``dst``, outputs ``y``; their CSR rows
        ``offs``/``nbrs`` (:func:`_rows_of`)."""
        if self.mark is not None:
            hit = self.mark[nbrs]
            tgt = self.index.positions(nbrs[hit])
        else:  # a sparse upper level: one binary search per edge, no n-sized array
            up = self.upper
            pos = np.searchsorted(up, nbrs.astype(up.dtype, copy=False))
            hit = up[np.minimum(pos, max(up.shape[0] - 1, 0))] == nbrs if up.shape[0] \
                else np.zeros(nbrs.shape[0], dtype=bool)
            tgt = pos[hit].astype(np.int64)
        src = np.repeat(np.arange(b - a, dtype=np.int64), np.diff(offs))[hit]
        if tgt.shape[0] and self._scatters(y):
            self._scatter(tgt, src, dst, y)
        elif tgt.shape[0]:  # through conv.aggregate over a tile sorted by target
            order = np.argsort(tgt, kind="stable")
            tgt, src = tgt[order], src[order]
            first = np.flatnonzero(np.concatenate([[True], tgt[1:] != tgt[:-1]]))
            touched = tgt[first]
            ids = self.upper[touched].astype(np.int64)
            whole = (self.indptr[ids + 1] - self.indptr[ids]).astype(np.int64)
            tile = Block(b - a, int(touched.shape[0]),
                         torch.from_numpy(np.append(first, tgt.shape[0]).astype(np.int64)),
                         torch.from_numpy(src), _degree_of(self.sampler, dst),
                         _degree_of(self.sampler, ids), torch.from_numpy(whole))
            agg = self.conv.aggregate(tile.to(self.device), y)
            acc = self.acc.table
            acc.index_add_(0, torch.from_numpy(touched).to(acc.device), agg.to(acc.device))
        if self.rows is None:
            return
        s, t = (int(x) for x in np.searchsorted(self.own, [a, b]))
        if t > s:
            self.rows.write(s, t, y[torch.from_numpy(self.own[s:t] - a).to(y.device)])


def evaluate_scored(model: BlockGNN, sampler, feat, device, scored,
                    batch_edges: int = 4_000_000, *, scope: str = "auto",
                    plan: ScopePlan | None = None, scratch_dir=None,
                    place: str | None = None, stream: bool | None = None,
                    stream_inputs: bool | None = None) -> tuple[ScoredLogits, ScopePlan]:
    """The exact logits of the vertices ``scored`` (ids, any order, duplicates allowed) and
    the plan that computed them: ``plan`` (e.g. kept from an earlier call on the same graph and
    vertices), else :func:`plan_scope` of ``scope`` (``auto`` | ``all`` | ``scored``). Scope
    ``all`` runs :func:`layerwise_inference` and keeps only the scored rows (its N x C table
    is gone when this returns); ``scored`` runs :func:`scored_inference`. Either way the
    result holds ``|scored| x C`` float32 (a :class:`ScoredLogits` over the sorted distinct
    ids)."""
    ids = scored_ids(sampler.graph.num_nodes, scored)
    if plan is None:
        plan = plan_scope(model, sampler.graph, ids, scope, batch_edges)
    if plan.scope == "scored":
        return scored_inference(model, sampler, feat, device, ids, batch_edges, plan=plan,
                                scratch_dir=scratch_dir, place=place, stream=stream,
                                stream_inputs=stream_inputs), plan
    full = layerwise_inference(model, sampler, feat, device, batch_edges,
                               scratch_dir=scratch_dir, place=place)
    return ScoredLogits(full).restrict(ids), plan


def _widths(conv, device) -> list[int]:
    """Columns of each output of ``conv.project``."""
    probe = torch.zeros((1, conv.in_dim), device=device)
    return [int(t.shape[1]) for t in conv.project(probe)]


def edge_balanced_ranges(indptr: np.ndarray, batch_edges: int) -> list[int]:
    """Vertex range bounds ``[0, ..., N]`` cutting the CSR rows into pieces of about
    ``batch_edges`` edges each (a vertex's row is never split)."""
    n = indptr.shape[0] - 1
    cuts = np.searchsorted(indptr, np.arange(batch_edges, int(indptr[-1]), batch_edges))
    bounds = sorted(set([0, n] + [int(c) for c in cuts if 0 < c < n]))
    return bounds


def accuracy(logits: torch.Tensor, labels: torch.Tensor, idx: np.ndarray) -> float | None:
    """Fraction of ``idx`` whose argmax matches its label; None for an empty split."""
    if idx.shape[0] == 0:
        return None
    idx_t = as_long_tensor(idx)
    return float((logits[idx_t].argmax(1) == labels[idx_t]).float().mean())


# ----------------------------------------------------------------------------------------------
# scores: accuracy, ROC-AUC, and the metric of a run (--metric)
# ----------------------------------------------------------------------------------------------

#: The metrics a run can score with (``--metric`` resolved by :func:`resolve_metric`).
SCORES = ("acc", "rocauc")


def resolve_metric(metric: str, num_classes: int) -> str:
    """The metric of ``--metric`` for data of ``num_classes`` classes: ``auto`` = ``rocauc``
    for exactly two classes, else ``acc``; ``acc`` and ``rocauc`` as given, where ``rocauc``
    needs two classes (:class:`~twopgraph.errors.ConfigError` otherwise)."""
    if metric == "auto":
        return "rocauc" if int(num_classes) == 2 else "acc"
    if metric not in SCORES:
        raise ConfigError(f"unknown --metric {metric!r}; known: auto, {', '.join(SCORES)}")
    if metric == "rocauc" and int(num_classes) != 2:
        raise ConfigError(f"--metric rocauc scores two classes; this dataset has {num_classes} "
                          f"(use --metric acc or auto)")
    return metric


def rocauc(scores: np.ndarray, positive: np.ndarray) -> float | None:
    """Area under the ROC curve of ``scores`` (higher = more likely positive) for the boolean
    labels ``positive``: the probability that a random positive scores above a random
    negative, a tie counting one half (Mann-Whitney U over average ranks). None when one
    class is absent (the area is undefined). O(n log n)."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    pos = np.asarray(positive, dtype=bool).reshape(-1)
    n1 = int(pos.sum())
    n0 = pos.shape[0] - n1
    if n1 == 0 or n0 == 0:
        return None
    order = np.argsort(s, kind="stable")
    v = s[order]
    # tie groups of the sorted scores: each gets the average of its 1-based ranks
    start = np.flatnonzero(np.concatenate([[True], v[1:] != v[:-1]]))
    end = np.append(start[1:], v.shape[0])
    avg = (start + end + 1) / 2.0
    ranks = np.empty(v.shape[0], dtype=np.float64)
    ranks[order] = np.repeat(avg, end - start)
    u = float(ranks[pos].sum()) - n1 * (n1 + 1) / 2.0
    return u / (n1 * float(n0))


def positive_scores(logits: torch.Tensor) -> np.ndarray:
    """What ROC-AUC ranks for two-class ``logits`` (N x 2): class 1's probability
    ``softmax(logits)[:, 1]``, as ``logits[:, 1] - logits[:, 0]`` in float64 (the same order:
    the probability is ``sigmoid`` of it, which float32 would round to 1.0 for confident
    predictions, turning them into ties)."""
    lg = torch.as_tensor(logits).detach().to("cpu", torch.float64)
    return (lg[:, 1] - lg[:, 0]).numpy()


#: What :func:`score` notes in a ``warned`` set once it has logged its one-class warning.
ONE_CLASS_KEY = "rocauc-one-class"


def score(metric: str, logits: torch.Tensor, labels: torch.Tensor, idx: np.ndarray, *,
          warned: set | None = None) -> float | None:
    """``metric`` (``acc`` | ``rocauc``, see :func:`resolve_metric`) of ``logits`` (N x C)
    against ``labels`` (N) on the vertices ``idx``; None for an empty split, and for ROC-AUC
    on a split with one class only (undefined: a warning is logged, once per ``warned`` set,
    which the caller keeps for the run)."""
    if metric == "acc":
        return accuracy(logits, labels, idx)
    if metric != "rocauc":
        raise ValueError(f"unknown metric {metric!r}; known: {', '.join(SCORES)}")
    if idx.shape[0] == 0:
        return None
    idx_t = as_long_tensor(idx)
    lab = labels[idx_t].to("cpu").numpy()
    auc = rocauc(positive_scores(logits[idx_t]), lab == 1)
    if auc is None and (warned is None or ONE_CLASS_KEY not in warned):
        if warned is not None:
            warned.add(ONE_CLASS_KEY)
        log.warning("ROC-AUC is undefined on a split whose %d vertices all have class %d: "
                    "its score is null", idx.shape[0], int(lab[0]))
    return auc
