"""Exact (full-neighbour) layer-wise inference over the whole graph, within bounded memory.

:func:`layerwise_inference` computes one layer at a time over all N vertices, dst range by dst
range (:func:`edge_balanced_ranges`): each range reads only the distinct src rows it needs,
through a feature source (:class:`~twopgraph.protocols.FeatureSource` ``read``: never the
whole table on the device, a memory-mapped table read row by row), and a range whose rows would
exceed :data:`EVAL_CHUNK_BYTES` is halved. Each layer's N x d output goes where there is room
(:func:`table_place`: the device, host memory, or a nameless scratch file), judged from the
memory available to this process (:func:`available_host_bytes`: ``MemAvailable`` and the
process's own cgroup limit).

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
import tempfile

import numpy as np
import torch

from .cache.host import HostFeatures
from .errors import ConfigError
from .loader import as_long_tensor
from .metrics import available_host_bytes  # noqa: F401 (table_place reads it here)
from .models import BlockGNN
from .sampler import NeighborSampler
from .sampler.minibatch import Block

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
    """The sorted distinct src ids ``u`` of a dst range's whole-graph block (the range's own
    vertices included) and the block's src ids relabelled onto positions in ``u``. Large
    blocks use an N-byte mark array and an N-entry position map (int32 while N < 2**31)
    kept across chunks; small ones sort."""

    def __init__(self, n: int):
        self.n = n
        self.mark: np.ndarray | None = None
        self.pos: np.ndarray | None = None

    def __call__(self, idx: np.ndarray, a: int, b: int) -> tuple[np.ndarray, np.ndarray, int]:
        if 16 * (idx.shape[0] + b - a) < self.n:  # sorting beats a scan of all N
            s = np.sort(np.concatenate([idx, np.arange(a, b, dtype=np.int64)]))
            u = s[np.concatenate([[True], s[1:] != s[:-1]])]  # (np.unique: ~10x slower)
            return u, np.searchsorted(u, idx), int(np.searchsorted(u, a))
        if self.mark is None:
            self.mark = np.zeros(self.n, dtype=bool)
            self.pos = np.empty(self.n, dtype=np.int32 if self.n < 2 ** 31 else np.int64)
        mark, pos = self.mark, self.pos
        mark[idx] = True
        mark[a:b] = True
        u = np.flatnonzero(mark)
        mark[u] = False
        pos[u] = np.arange(u.shape[0], dtype=pos.dtype)
        return u, pos[idx].astype(np.int64), int(pos[a])


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
                if i < len(convs) - 1:
                    y = torch.relu(y)  # eval: dropout is the identity
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
