"""Exact (full-neighbour, layer-wise) evaluation spread over the ranks of a partitioned run.

Each rank computes layer ``k`` for the vertices it owns, range by range (about
``batch_edges`` edges each): it reads their full rows from the dataset's store (the
memory-mapped CSR every rank opens), and the previous layer's rows of just the vertices those
rows name. Where the rows come from:

- layer 0's input is the store's feature table, read by row through its read-only memory map
  (rounded to the stored training dtype, ``feat_dtype``: the model is evaluated on the features
  it was trained on);
- the output of a hidden layer goes to a table the next layer reads. When all ranks run on
  one machine (:func:`same_host`: their host names agree) it is a float32 ``N x width`` file
  in a scratch folder (``.twopgraph-eval-*`` under ``scratch_dir``, e.g. the run's
  ``--out``), memory-mapped by every rank: each rank writes the rows it owns, a barrier, and
  the next layer reads the rows it needs -- the machine's page cache holds one copy, no
  collective moves the table, and the folder is removed when evaluation ends (also when it
  fails). Across machines (or with :data:`SEPARATE_HOSTS_ENV` set) each rank keeps a table of
  its own rows and its *halo* -- the rows its next layer reads and does not own. Layer 0's
  halo rows it computes itself by default, as it computes its own (their features and
  neighbours are in every machine's store: no bytes travel for that table;
  :data:`LAYER0_HALO`); the halo rows of the later hidden layers, whose inputs only their
  owner has, it receives from the ranks that own them (:class:`HaloTables`, a
  :class:`~twopgraph.distributed.partition.halo.HaloPlan` made at the first evaluation:
  counts, then ids, then at each evaluation the rows, with ``all_to_all_single`` in rounds
  of at most ``EXCHANGE_CHUNK_BYTES``); rank 0 logs once how many halo rows an evaluation
  receives (and their bytes) and how many it computes locally, and :func:`evaluate_scores`
  returns them as ``eval_exchanged_bytes`` (bytes of the rows sent, summed over ranks; 0 on
  one machine), ``eval_halo_rows_received`` and ``eval_halo_rows_computed``;
- the last layer is not exchanged: each rank counts the correct val/test predictions of its
  own vertices and the counts are summed; for ROC-AUC (:func:`evaluate_scores` with
  ``metric="rocauc"``) each rank's class-1 scores and labels of its val/test vertices are
  gathered (one value and one flag per vertex of the splits) and every rank ranks them all.

With ``scope="scored"`` (``--eval-scope``; ``auto`` decides as
:func:`~twopgraph.inference.plan_scope` does) only what the val/test predictions need is
computed: every rank derives the same levels from the store's CSR and splits (``V_{L-1}`` =
the val and test vertices, ``V_i`` = ``V_{i+1}`` and its in-neighbours), computes layer ``i``
for its owned vertices of ``V_i``, and the shared file of layer ``i`` has ``|V_i|`` rows
(indexed by position in the sorted level) instead of N; across machines only the halo of
``V_{i+1}``'s owned vertices is exchanged.

The result equals single-process :func:`~twopgraph.inference.layerwise_inference` on the whole
graph (up to float rounding). Like it, a last layer that shrinks the width (hidden -> classes)
is computed from per-vertex projections that the layer before writes (an N x 2C table for
SAGE instead of N x hidden). Working memory of a rank: one range of rows and the rows of
their neighbours (at most ``batch_edges`` edges and about ``EVAL_CHUNK_BYTES`` of rows), ids
and degrees of the owned vertices; nothing of size N besides the shared maps (across
machines: its own rows and halo rows of one hidden table and the next, float32, and the
halo plan's ids). Training never uses it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import tempfile
from itertools import pairwise
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from twopgraph.core.minibatch import Block
from twopgraph.distributed.partition.halo import ROW_VALUE_BYTES, HaloPlan, halo_plan
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


#: Environment variable: set to ``1`` on every rank, the ranks evaluate as if each ran on a
#: machine of its own (:func:`same_host` answers False, the hidden rows go through the halo
#: exchange): how the cross-machine path is tried on one machine (tests, ``--nproc``).
SEPARATE_HOSTS_ENV = "TWOPGRAPH_SEPARATE_HOSTS"


#: How ranks on several machines get the halo rows of layer 0's output (the table layer 1
#: reads), when :func:`evaluate_scores` is not told (``layer0_halo``): one of
#: :data:`LAYER0_HALO_CHOICES`.
#:
#: - ``"compute"`` (default): each rank computes layer 0 for its halo vertices as well, from
#:   its machine's store -- zero bytes on the network for that table, at the cost of reading
#:   the halo vertices' neighbours' feature rows (about ``halo x (degree + 1) x features``
#:   values, from the page cache or the disk) and running layer 0 for ``halo`` more rows. It
#:   is better when the network is the slower part: Ethernet between machines, a hidden
#:   width comparable to the feature width, the store in memory.
#: - ``"exchange"``: each rank computes only its own rows and receives the halo rows from
#:   their owners (``halo x hidden x 4`` bytes each evaluation) -- better on a fast
#:   interconnect (InfiniBand, NVLink) when the feature table is much wider than the hidden
#:   layer, the degrees high or the store on a slow disk, or when the ranks' compute is the
#:   bottleneck.
LAYER0_HALO = "compute"
#: The values :data:`LAYER0_HALO` and ``layer0_halo`` take.
LAYER0_HALO_CHOICES = ("compute", "exchange")


def same_host() -> bool:
    """Whether every rank of the process group runs on this machine: their host names
    (``socket.gethostname()``) agree and no rank has :data:`SEPARATE_HOSTS_ENV` set to ``1``
    (collective)."""
    names = [None] * dist.get_world_size()
    dist.all_gather_object(names, (socket.gethostname(),
                                   os.environ.get(SEPARATE_HOSTS_ENV, "") == "1"))
    return len({host for host, _ in names}) == 1 and not any(sep for _, sep in names)


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


class HaloTables:
    """The hidden layers' output tables of ranks on several machines, which share no file:
    each rank's table ``i`` holds only ``plan.ids[i]`` rows (the ones it computes and its
    halo, sorted by global id; :class:`~twopgraph.distributed.partition.halo.HaloPlan`), and
    :meth:`publish` fills the halo rows from the ranks that own them. ``n``: the vertices of
    the graph; ``exchanged_bytes``: the hidden-row bytes every rank sent so far (the same on
    every rank). Collective: every rank makes the same calls in the same order."""

    def __init__(self, n: int, plan: HaloPlan, device: torch.device | str) -> None:
        self.n, self.plan, self.device = int(n), plan, device
        self.exchanged_bytes = 0
        self.received_rows = self.computed_rows = 0

    def new(self, layer: int, width: int, rows: int | None = None) -> np.ndarray:
        """An empty (zero) table of layer ``layer``: ``plan.ids[layer]`` rows (``rows``, the
        level's size, is not needed: the plan knows them)."""
        return np.zeros((self.plan.ids[layer].shape[0], width), dtype=np.float32)

    def publish(self, table: np.ndarray, layer: int) -> np.ndarray:
        """Receive ``table``'s halo rows (this rank's own rows are written). Returns it."""
        self.plan.exchange(layer, table, self.device)
        self.exchanged_bytes += self.plan.rows(layer) * table.shape[1] * ROW_VALUE_BYTES
        self.received_rows += self.plan.rows(layer)
        self.computed_rows += self.plan.local_rows(layer)
        return table

    def finish(self) -> None:
        pass

    def close(self) -> None:
        pass


#: The former name of :class:`HaloTables` (which all-reduced N-row tables), kept for callers
#: that refer to it.
ReducedTables = HaloTables


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
                         shared: bool | None = None, scope: str = "all",
                         layer0_halo: str | None = None) -> tuple[float | None, float | None]:
    """``(val_acc, test_acc)`` of ``model`` over all ranks' owned val/test vertices (the same
    on every rank). Features, rows and labels are read from ``part.store``; ``feat_dtype``
    is the dtype the features were trained in (None: the store's); ``scratch_dir`` holds the
    scratch folder of the hidden layers (default: the system's temporary folder); ``shared``
    forces the shared scratch (True) or the halo exchange of ranks on several machines
    (False), None = shared when every rank runs on this machine (:func:`same_host`);
    ``scope``: ``--eval-scope``, ``layer0_halo``: how ranks on several machines get layer
    0's halo rows (see :func:`evaluate_scores`). Every rank must call it (collective)."""
    res = evaluate_scores(model, part, device, batch_edges, feat_dtype, scratch_dir, shared,
                          scope=scope, layer0_halo=layer0_halo)
    return res["val_acc"], res["test_acc"]


def evaluate_scores(model: BlockGNN, part: Part, device: torch.device | str,
                    batch_edges: int = 4_000_000, feat_dtype: torch.dtype | None = None,
                    scratch_dir: str | os.PathLike | None = None,
                    shared: bool | None = None, metric: str = "acc",
                    warned: set | None = None, scope: str = "all",
                    plans: dict | None = None, layer0_halo: str | None = None) -> dict:
    """:func:`evaluate_distributed` with the run's ``metric`` (``acc`` | ``rocauc``): the
    same on every rank, ``{"val_acc", "test_acc", "val_score", "test_score"}``, the
    scope's record (``eval_scope``, ``eval_rows``, ``eval_edges``, ``eval_choice``; see
    :func:`~twopgraph.inference.plan_scope`), ``eval_exchanged_bytes`` (the hidden-row
    bytes the ranks sent each other, summed over ranks: 0 with the shared scratch) and
    ``eval_halo_rows_received`` / ``eval_halo_rows_computed`` (halo rows of the hidden
    layers the ranks received from their owners / computed themselves, summed over ranks:
    0 with the shared scratch). A split
    with one class only has no ROC-AUC (None; rank 0 logs a warning, once per ``warned``
    set). ``scope``: ``--eval-scope``
    (``auto`` | ``all`` | ``scored``: each layer only for the vertices the val/test
    predictions need, tables sized by them); ``plans`` (a dict the caller keeps) holds the
    plan (and across machines the halo plan) between calls; ``layer0_halo`` (None:
    :data:`LAYER0_HALO`): ranks on several machines compute layer 0's halo rows themselves
    (``"compute"``) or receive them (``"exchange"``), see :data:`LAYER0_HALO` for which is
    better when; the same on every rank. Collective."""
    layer0_halo = LAYER0_HALO if layer0_halo is None else layer0_halo
    if layer0_halo not in LAYER0_HALO_CHOICES:
        raise ValueError(f"layer0_halo={layer0_halo!r}; allowed: "
                         f"{', '.join(LAYER0_HALO_CHOICES)}")
    plan = _plan(model, part, scope, batch_edges, plans)
    pred, pos, ids, traffic = _last_layer(model, part, device, batch_edges, feat_dtype,
                                          scratch_dir, shared, keep_scores=metric == "rocauc",
                                          plan=plan, plans=plans, layer0_halo=layer0_halo)
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
           **plan.record(), **traffic}
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


def _halo_plan(model: BlockGNN, part: Part, dsts: list[np.ndarray], batch_edges: int,
               device, levels: list | None, widths: list[int],
               plans: dict | None, layer0_halo: str) -> HaloPlan:
    """The :class:`~twopgraph.distributed.partition.halo.HaloPlan` of the hidden tables
    (table ``i`` written with ``dsts[i]``, read for ``dsts[i + 1]``; ``widths[i + 1]``
    wide; table 0's halo computed locally with ``layer0_halo="compute"``), kept in ``plans``
    when given; rank 0 logs what one evaluation will exchange and compute when it is made.
    Collective."""
    key = ("halo", "all" if levels is None else "scored", model.num_layers, layer0_halo)
    if plans is not None and key in plans:
        return plans[key]
    local = (0,) if layer0_halo == "compute" else ()
    halo = halo_plan(part.store.graph, part.owned, dsts[1:], dsts[:-1], batch_edges, device,
                     local=local)
    sent = halo.bytes(widths[1:])
    full = part.num_global_nodes * ROW_VALUE_BYTES * sum(widths[1:])
    log.info("exact evaluation: the ranks run on several machines; each evaluation exchanges "
             "%d halo rows of the hidden layers (%.1f MiB, %.1f%% of replicating N x width "
             "tables) and computes %d halo rows of layer 0 locally from the store "
             "(layer0_halo=%s)", halo.rows(), sent / 2**20, 100 * sent / full if full else 0.0,
             halo.local_rows(), layer0_halo)
    if plans is not None:
        plans[key] = halo
    return halo


@torch.no_grad()
def _last_layer(model: BlockGNN, part: Part, device, batch_edges: int,
                feat_dtype: torch.dtype | None, scratch_dir, shared: bool | None,
                keep_scores: bool = False, plan: ScopePlan | None = None,
                plans: dict | None = None, layer0_halo: str = LAYER0_HALO
                ) -> tuple[torch.Tensor, np.ndarray | None, np.ndarray, dict]:
    """The predicted class (int64) of the owned vertices the last layer computes -- every
    owned vertex (in ``part.owned`` order) for a whole-graph ``plan`` (None: whole graph),
    the owned scored ones (sorted) for a ``scored`` one -- and, with ``keep_scores``, their
    class-1 scores (:func:`~twopgraph.inference.positive_scores`, float64), and their global
    ids (int64); see :func:`evaluate_distributed`. With a ``scored`` plan layer ``i`` runs
    for the owned vertices of ``plan.levels[i + 1]`` only and its table has that level's
    rows (``|V_i| x width``, indexed by position in the level), not N. Also returns what
    travelled: ``{"eval_exchanged_bytes", "eval_halo_rows_received",
    "eval_halo_rows_computed"}`` (summed over ranks; 0 with the shared scratch); ``plans``
    keeps the halo plan of ranks on several machines between calls; with ``layer0_halo=
    "compute"`` ranks on several machines run layer 0 for their own rows and then for their
    halo rows of table 0, which are then not exchanged. Collective."""
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
        # the rows of table i: global ids (whole graph) or positions in levels[i + 1]
        keys = [None if levels is None else levels[i + 1] for i in range(model.num_layers - 1)]
    else:  # several machines: each rank holds its rows and its halo (sorted global ids)
        halo = _halo_plan(model, part, dsts, edges, device, levels, widths, plans,
                          layer0_halo)
        tables = HaloTables(n, halo, device)
        keys, at = halo.ids, [*halo.own_at, None]
    # the vertices layer i runs for: its own, and for a table computed locally (layer 0 from
    # the store) its halo too, after them
    runs = list(dsts)
    if not shared and model.num_layers > 1 and halo.local[0]:
        extra = halo.halo_at(0)
        runs[0] = np.concatenate([dsts[0], halo.ids[0][extra]])
        at[0] = np.concatenate([at[0], extra])
    table, dtype = store.feat, feat_dtype
    below = None  # the ids of the table's rows (None: row = global id)
    preds, scores = [], []
    try:
        for i in range(model.num_layers):
            last = i == model.num_layers - 1
            project = fuse_last and i == model.num_layers - 2
            mine = runs[i]
            out = None if last else tables.new(
                i, widths[i + 1], None if levels is None else levels[i + 1].shape[0])
            cum = np.zeros(mine.shape[0] + 1, dtype=np.int64)
            np.cumsum(indptr[mine + 1] - indptr[mine], out=cum[1:])
            bounds = edge_balanced_ranges(cum, edges) if mine.shape[0] else [0]
            for a, b in pairwise(bounds):
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
                below = keys[i]
        tables.finish()
    finally:
        del table
        tables.close()
    model.train(was_training)
    pred = torch.cat(preds) if preds else torch.zeros(0, dtype=torch.int64)
    traffic = {"eval_exchanged_bytes": 0 if shared else tables.exchanged_bytes,
               "eval_halo_rows_received": 0 if shared else tables.received_rows,
               "eval_halo_rows_computed": 0 if shared else tables.computed_rows}
    if not keep_scores:
        return pred, None, dsts[-1], traffic
    return pred, (np.concatenate(scores) if scores else np.zeros(0, dtype=np.float64)), \
        dsts[-1], traffic
