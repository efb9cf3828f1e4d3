"""Exact (full-neighbour, layer-wise) evaluation spread over the ranks of a partitioned run.

Each rank computes layer ``k`` for the vertices it owns, range by range (about
``batch_edges`` edges each): it reads their full rows from the dataset's store (the
memory-mapped CSR every rank opens), and the previous layer's rows of just the vertices those
rows name. Where the rows come from:

- layer 0's input is the store's feature table, read by row through its read-only memory map
  (rounded to the stored training dtype, ``feat_dtype``: the model is evaluated on the features
  it was trained on);
- the output of a hidden layer goes to a table every rank can read. When all ranks run on one
  machine (their host names agree) it is a float32 ``N x width`` file in a scratch folder
  (``.twopgraph-eval-*`` under ``scratch_dir``, e.g. the run's ``--out``), memory-mapped by
  every rank: each rank writes the rows it owns, a barrier, and the next layer reads the rows
  it needs -- the machine's page cache holds one copy, no collective moves the table, and the
  folder is removed when evaluation ends (also when it fails). Across machines the hidden
  table is all-reduced (``N x width`` per rank and layer; logged once);
- the last layer is not exchanged: each rank counts the correct val/test predictions of its
  own vertices and the counts are summed; for ROC-AUC (:func:`evaluate_scores` with
  ``metric="rocauc"``) each rank's class-1 scores and labels of its val/test vertices are
  gathered (one value and one flag per vertex of the splits) and every rank ranks them all.

With ``scope="scored"`` (``--eval-scope``; ``auto`` decides as
:func:`~twopgraph.inference.plan_scope` does) only what the val/test predictions need is
computed: every rank derives the same levels from the store's CSR and splits (``V_{L-1}`` =
the val and test vertices, ``V_i`` = ``V_{i+1}`` and its in-neighbours), computes layer ``i``
for its owned vertices of ``V_i``, and the shared file or all-reduced table of layer ``i`` has
``|V_i|`` rows (indexed by position in the sorted level) instead of N.

The result equals single-process :func:`~twopgraph.inference.layerwise_inference` on the whole
graph (up to float rounding). Like it, a last layer that shrinks the width (hidden -> classes)
is computed from per-vertex projections that the layer before writes (an N x 2C table for
SAGE instead of N x hidden). Working memory of a rank: one range of rows and the rows of
their neighbours (at most ``batch_edges`` edges and about ``EVAL_CHUNK_BYTES`` of rows), ids
and degrees of the owned vertices; nothing of size N besides the shared maps. Training never
uses it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from twopgraph.core.minibatch import Block
from twopgraph.distributed.partition.load import Part
from twopgraph.distributed.partition.selfdep import _gather_rows
from twopgraph.errors import ConfigError
from twopgraph.inference.rows import edge_balanced_ranges
from twopgraph.inference.scope import ScopePlan, plan_scope, scored_ids
from twopgraph.inference.scores import ONE_CLASS_KEY, positive_scores, rocauc
from twopgraph.inference.tables import EVAL_CHUNK_BYTES
from twopgraph.models import BlockGNN

log = logging.getLogger("twopgraph")

#: Name prefix of the scratch folder of the hidden layers' tables.
SCRATCH_PREFIX = ".twopgraph-eval-"


def same_host() -> bool:
    """Whether every rank of the process group runs on this machine (collective)."""
    names = [None] * dist.get_world_size()
    dist.all_gather_object(names, socket.gethostname())
    return len(set(names)) == 1


class SharedTables:
    """The hidden layers' output tables as float32 files of one folder of this machine,
    memory-mapped by every rank (see the module docstring). Collective: every rank makes
    the same calls in the same order."""

    def __init__(self, n: int, scratch_dir: str | os.PathLike | None = None) -> None:
        self.n, self.main = int(n), dist.get_rank() == 0
        box = [None]
        if self.main:
            parent = Path(scratch_dir) if scratch_dir is not None else Path(tempfile.gettempdir())
            parent.mkdir(parents=True, exist_ok=True)
            box[0] = tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=parent)
        dist.broadcast_object_list(box, src=0)
        self.folder = Path(box[0])

    def new(self, layer: int, width: int, rows: int | None = None) -> np.ndarray:
        """An empty (zero) ``rows x width`` table (default ``n`` rows), mapped read-write by
        every rank."""
        rows = self.n if rows is None else int(rows)
        path = self.folder / f"layer{layer}.f32"
        if self.main:
            with open(path, "wb") as f:  # sparse: disk blocks come as rows are written
                f.truncate(rows * width * 4)
        dist.barrier()
        if rows == 0 or width == 0:
            return np.zeros((rows, width), dtype=np.float32)
        return np.memmap(path, dtype=np.float32, mode="r+", shape=(rows, width))

    def publish(self, table: np.ndarray, layer: int) -> np.ndarray:
        """Wait until every rank wrote its rows of ``table`` (layer ``layer``); the previous
        layer's table, which nobody reads any more, is removed. Returns ``table``."""
        dist.barrier()  # rows written to a shared map are visible to the other ranks now
        if layer > 0:
            if self.main:
                with contextlib.suppress(OSError):
                    os.unlink(self.folder / f"layer{layer - 1}.f32")
            dist.barrier()  # from here on the folder holds this layer's table only
        return table

    def finish(self) -> None:
        """Every rank is done reading (the folder may go)."""
        dist.barrier()

    def close(self) -> None:
        """Remove the folder (rank 0): after :meth:`finish`, or at once when evaluation
        failed (a rank that still maps a removed file keeps its pages)."""
        if self.main:
            shutil.rmtree(self.folder, ignore_errors=True)


class ReducedTables:
    """The hidden layers' output tables all-reduced into a private ``n x width`` array on
    every rank (ranks on several machines, which share no file)."""

    def __init__(self, n: int, device: torch.device | str) -> None:
        self.n, self.device = int(n), device

    def new(self, layer: int, width: int, rows: int | None = None) -> np.ndarray:
        return np.zeros((self.n if rows is None else int(rows), width), dtype=np.float32)

    def publish(self, table: np.ndarray, layer: int) -> np.ndarray:
        t = torch.from_numpy(table).to(self.device)
        dist.all_reduce(t)  # ownership is disjoint: the sum is a concatenation
        return t.cpu().numpy()

    def finish(self) -> None:
        pass

    def close(self) -> None:
        pass


def _degrees(indptr: np.ndarray, ids: np.ndarray) -> torch.Tensor:
    """Full-graph degrees of ``ids`` (float32), from the store's ``indptr``."""
    return torch.from_numpy((indptr[ids + 1] - indptr[ids]).astype(np.float32))


def _rows(table: np.ndarray, ids: np.ndarray, device, dtype: torch.dtype | None) -> torch.Tensor:
    """``table[ids]`` as float32 on ``device`` (rounded through ``dtype`` when given)."""
    t = torch.from_numpy(np.ascontiguousarray(table[ids]))
    if dtype is not None and t.dtype != dtype:
        t = t.to(dtype)
    return t.to(device=device, dtype=torch.float32)


@torch.no_grad()
def _projection_widths(conv) -> list[int]:
    """Columns of each output of ``conv.project`` (stored side by side in one table)."""
    probe = torch.zeros((1, conv.in_dim), device=next(conv.parameters()).device)
    return [int(t.shape[1]) for t in conv.project(probe)]


def _from_projection(conv, block: Block, table: np.ndarray, src: np.ndarray, rows: np.ndarray,
                     device) -> torch.Tensor:
    """``conv``'s output for the dst ``rows`` of ``block`` (src ids ``src``) from the
    projection table (the outputs of ``conv.project`` side by side, one row per vertex): the
    local rows are the src rows, then the dst rows, so ``from_projection`` takes the dst
    range ``[len(src), len(src) + len(rows))``."""
    local = _rows(table, np.concatenate([src, rows]), device, None)
    parts = torch.split(local, _projection_widths(conv), dim=1)
    s = int(src.shape[0])
    return conv.from_projection(block, tuple(parts), s, s + int(rows.shape[0]))


def evaluate_distributed(model: BlockGNN, part: Part, device: torch.device | str,
                         batch_edges: int = 4_000_000, feat_dtype: torch.dtype | None = None,
                         scratch_dir: str | os.PathLike | None = None,
                         shared: bool | None = None,
                         scope: str = "all") -> tuple[float | None, float | None]:
    """``(val_acc, test_acc)`` of ``model`` over all ranks' owned val/test vertices (the same
    on every rank). Features, rows and labels are read from ``part.store``; ``feat_dtype``
    is the dtype the features were trained in (None: the store's); ``scratch_dir`` holds the
    scratch folder of the hidden layers (default: the system's temporary folder); ``shared``
    forces (True) or refuses (False) the shared scratch, None = shared when every rank runs
    on this machine; ``scope``: ``--eval-scope`` (see :func:`evaluate_scores`). Every rank must
    call it (collective)."""
    res = evaluate_scores(model, part, device, batch_edges, feat_dtype, scratch_dir, shared,
                          scope=scope)
    return res["val_acc"], res["test_acc"]


def evaluate_scores(model: BlockGNN, part: Part, device: torch.device | str,
                    batch_edges: int = 4_000_000, feat_dtype: torch.dtype | None = None,
                    scratch_dir: str | os.PathLike | None = None,
                    shared: bool | None = None, metric: str = "acc",
                    warned: set | None = None, scope: str = "all",
                    plans: dict | None = None) -> dict:
    """:func:`evaluate_distributed` with the run's ``metric`` (``acc`` | ``rocauc``): the
    same on every rank, ``{"val_acc", "test_acc", "val_score", "test_score"}`` and the
    scope's record (``eval_scope``, ``eval_rows``, ``eval_edges``, ``eval_choice``; see
    :func:`~twopgraph.inference.plan_scope`). A split with one class only has no ROC-AUC
    (None; rank 0 logs a warning, once per ``warned`` set). ``scope``: ``--eval-scope``
    (``auto`` | ``all`` | ``scored``: each layer only for the vertices the val/test
    predictions need, tables sized by them); ``plans`` (a dict the caller keeps) holds the
    plan between calls. Collective."""
    plan = _plan(model, part, scope, batch_edges, plans)
    pred, pos, ids = _last_layer(model, part, device, batch_edges, feat_dtype, scratch_dir,
                                 shared, keep_scores=metric == "rocauc", plan=plan)
    store, owned = part.store, np.asarray(part.owned, dtype=np.int64)
    order = np.argsort(ids, kind="stable")  # the rows of pred by global id
    sorted_ids = ids[order]
    counts, mine = [], []
    for idx in (part.data.val_idx, part.data.test_idx):
        g = owned[np.asarray(part.owned_positions(idx), dtype=np.int64)]
        at = np.minimum(np.searchsorted(sorted_ids, g), max(sorted_ids.shape[0] - 1, 0))
        if g.shape[0] and not np.array_equal(sorted_ids[at], g):
            raise ConfigError(f"partition {part.index}: its val/test vertices are not the "
                              f"dataset store's (repartition from the store)")
        at = order[at] if g.shape[0] else g
        lab = np.asarray(store.label[g], dtype=np.int64)
        counts += [float((pred[torch.from_numpy(at)] == torch.from_numpy(lab)).sum()),
                   float(at.shape[0])]
        if pos is not None:
            mine.append((pos[at], lab == 1))
    tot = torch.tensor(counts, dtype=torch.float64, device=device)
    dist.all_reduce(tot)
    c = tot.cpu().tolist()
    res = {"val_acc": c[0] / c[1] if c[1] else None, "test_acc": c[2] / c[3] if c[3] else None,
           **plan.record()}
    if metric == "acc":
        res.update(val_score=res["val_acc"], test_score=res["test_acc"])
        return res
    if metric != "rocauc":
        raise ValueError(f"unknown metric {metric!r}; known: acc, rocauc")
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)  # in rank order: the same arrays on every rank
    for k, split in enumerate(("val", "test")):
        s = np.concatenate([r[k][0] for r in every])
        y = np.concatenate([r[k][1] for r in every])
        auc = rocauc(s, y) if s.shape[0] else None
        if auc is None and s.shape[0] and dist.get_rank() == 0 and \
                (warned is None or ONE_CLASS_KEY not in warned):
            if warned is not None:
                warned.add(ONE_CLASS_KEY)
            log.warning("ROC-AUC is undefined on a split whose %d vertices all have one "
                        "class: its score is null", s.shape[0])
        res[f"{split}_score"] = auc
    return res


def _plan(model: BlockGNN, part: Part, scope: str, batch_edges: int,
          plans: dict | None) -> ScopePlan:
    """The :class:`~twopgraph.inference.ScopePlan` of ``scope`` for the whole dataset's val
    and test vertices (read from the store: every rank computes the same plan, with no
    collective), kept in ``plans`` when given."""
    key = ("plan", scope, model.num_layers)
    if plans is not None and key in plans:
        return plans[key]
    store = part.store
    scored = scored_ids(part.num_global_nodes, store.val_idx, store.test_idx)
    plan = plan_scope(model, store.graph, scored, scope, batch_edges, input_level=False)
    if plans is not None:
        plans[key] = plan
    return plan


def _owned_of(level: np.ndarray, owned_sorted: np.ndarray) -> np.ndarray:
    """Positions in ``level`` (sorted global ids) of the vertices in ``owned_sorted``."""
    pos = np.searchsorted(owned_sorted, level)
    hit = pos < owned_sorted.shape[0]
    hit[hit] = owned_sorted[pos[hit]] == level[hit]
    return np.flatnonzero(hit)


@torch.no_grad()
def _last_layer(model: BlockGNN, part: Part, device, batch_edges: int,
                feat_dtype: torch.dtype | None, scratch_dir, shared: bool | None,
                keep_scores: bool = False, plan: ScopePlan | None = None
                ) -> tuple[torch.Tensor, np.ndarray | None, np.ndarray]:
    """The predicted class (int64) of the owned vertices the last layer computes -- every
    owned vertex (in ``part.owned`` order) for a whole-graph ``plan`` (None: whole graph),
    the owned scored ones (sorted) for a ``scored`` one -- and, with ``keep_scores``, their
    class-1 scores (:func:`~twopgraph.inference.positive_scores`, float64), and their global
    ids (int64); see :func:`evaluate_distributed`. With a ``scored`` plan layer ``i`` runs
    for the owned vertices of ``plan.levels[i + 1]`` only and its table has that level's
    rows (``|V_i| x width``, indexed by position in the level), not N. Collective."""
    was_training = model.training
    model.eval()
    store = part.store
    n, indptr, indices = part.num_global_nodes, store.graph.indptr, store.graph.indices
    owned = np.asarray(part.owned, dtype=np.int64)
    levels = None if plan is None or plan.scope != "scored" else plan.levels
    if levels is not None:
        owned_sorted = np.sort(owned)
        at = [_owned_of(v, owned_sorted) for v in levels[1:]]  # where they go in the tables
        dsts = [np.asarray(v[p], dtype=np.int64) for v, p in zip(levels[1:], at)]
        del owned_sorted
    else:
        dsts, at = [owned] * model.num_layers, [None] * model.num_layers
    convs = model.convs
    # A last layer that shrinks the width (hidden -> classes) is computed from per-vertex
    # projections (SAGEConv/GCNConv.project), written by the layer before it: the table it
    # reads is N x (2 C) for SAGE (C for GCN) instead of N x hidden.
    fuse_last = model.num_layers > 1 and convs[-1].in_dim > convs[-1].out_dim and \
        hasattr(convs[-1], "project")
    widths = [c.in_dim for c in convs]
    if fuse_last:
        widths[-1] = sum(_projection_widths(convs[-1]))
    # Rows a range reads are at most its edges + its own rows: bound both by the widest table
    # it reads, so a range's working memory stays about EVAL_CHUNK_BYTES.
    row_bytes = 4 * max(widths)
    edges = max(1, min(batch_edges, EVAL_CHUNK_BYTES // row_bytes))
    if shared is None:
        shared = same_host()
    if shared:
        tables = SharedTables(n, scratch_dir)
    else:
        log.info("exact evaluation: the ranks run on several machines; each hidden layer's "
                 "N x width table is all-reduced")
        tables = ReducedTables(n, device)
    table, dtype = store.feat, feat_dtype
    below = None  # the ids of the table's rows (None: row = global id)
    preds, scores = [], []
    try:
        for i in range(model.num_layers):
            last = i == model.num_layers - 1
            project = fuse_last and i == model.num_layers - 2
            mine = dsts[i]
            out = None if last else tables.new(
                i, widths[i + 1], None if levels is None else levels[i + 1].shape[0])
            cum = np.zeros(mine.shape[0] + 1, dtype=np.int64)
            np.cumsum(indptr[mine + 1] - indptr[mine], out=cum[1:])
            bounds = edge_balanced_ranges(cum, edges) if mine.shape[0] else [0]
            for a, b in zip(bounds[:-1], bounds[1:]):
                rows = mine[a:b]
                ptr, ind = _gather_rows(indptr, indices, rows)
                src, inv = np.unique(ind, return_inverse=True)
                block = Block(int(src.shape[0]), b - a, torch.from_numpy(ptr),
                              torch.from_numpy(inv.reshape(-1).astype(np.int64, copy=False)),
                              _degrees(indptr, src), _degrees(indptr, rows)).to(device)
                # the table's rows of src and of the range's own vertices
                t_src, t_dst = (src, rows) if below is None else \
                    (np.searchsorted(below, src.astype(below.dtype, copy=False)),
                     np.searchsorted(below, rows.astype(below.dtype, copy=False)))
                if last and fuse_last:
                    y = _from_projection(convs[i], block, table, t_src, t_dst, device)
                else:
                    y = model.layer(i, block, _rows(table, t_src, device, dtype),
                                    _rows(table, t_dst, device, dtype))
                where = rows if at[i] is None else at[i][a:b]
                if last:
                    preds.append(y.argmax(1).cpu())
                    if keep_scores:
                        scores.append(positive_scores(y))
                elif project:
                    out[where] = torch.cat(convs[i + 1].project(y), dim=1).cpu().numpy()
                else:
                    out[where] = y.cpu().numpy()
            if not last:
                table, dtype = tables.publish(out, i), None
                below = None if levels is None else levels[i + 1]
        tables.finish()
    finally:
        del table
        tables.close()
    model.train(was_training)
    pred = torch.cat(preds) if preds else torch.zeros(0, dtype=torch.int64)
    if not keep_scores:
        return pred, None, dsts[-1]
    return pred, (np.concatenate(scores) if scores else np.zeros(0, dtype=np.float64)), \
        dsts[-1]
