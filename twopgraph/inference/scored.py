"""Restricted exact inference: only the scored vertices and their L-hop in-neighbourhood.

:func:`scored_inference` computes the last layer for the scored vertices and each layer
below for the full in-neighbourhood of the one above (the levels of
:func:`~twopgraph.inference.scope.plan_scope`): tables sized by those levels, not by N, the
same logits as :func:`~twopgraph.inference.layerwise.layerwise_inference` up to float
rounding. :func:`evaluate_scored` returns the scored rows (:class:`ScoredLogits`) of either
scope.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import torch
from numpy.typing import ArrayLike

from twopgraph.core.minibatch import Block
from twopgraph.core.protocols import FeatureSource, Sampler
from twopgraph.errors import ConfigError
from twopgraph.inference.convs import _projects, _widths
from twopgraph.inference.layerwise import layerwise_inference
from twopgraph.inference.passes import CHUNK_SHARE, _input_passes, _push_inputs
from twopgraph.inference.push import _plan_push, _Push
from twopgraph.inference.relabel import DENSE_LEVEL, LevelIndex
from twopgraph.inference.rows import _degree_of, _prefix_degrees, _rows_of, edge_balanced_ranges
from twopgraph.inference.scope import ScopePlan, plan_scope, scored_ids
from twopgraph.inference.tables import EVAL_CHUNK_BYTES, EvalTable, _row_source, table_place
from twopgraph.models import BlockGNN
from twopgraph.runtime.memory import fillable_host_bytes


class ScoredLogits:
    """Logits of some vertices: ``values`` (R x C float32 host tensor) and ``ids`` (sorted
    distinct int64 (R,): the vertex of each row), or ``ids`` None: every vertex, row i =
    vertex i (whole-graph inference's N x C table). Memory: R x C x 4 bytes + 8 R."""

    def __init__(self, values: torch.Tensor, ids: np.ndarray | None = None) -> None:
        self.values = values
        self.ids = None if ids is None else np.asarray(ids, dtype=np.int64)

    @property
    def num_rows(self) -> int:
        return int(self.values.shape[0])

    @property
    def nbytes(self) -> int:
        return self.values.numel() * self.values.element_size() + \
            (0 if self.ids is None else self.ids.nbytes)

    def positions(self, idx: ArrayLike) -> np.ndarray:
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

    def take(self, idx: ArrayLike) -> torch.Tensor:
        """The logits of ``idx`` (one row per entry, in its order)."""
        return self.values[torch.from_numpy(self.positions(idx))]

    def restrict(self, ids: np.ndarray) -> ScoredLogits:
        """The rows of ``ids`` (sorted distinct) only, copied."""
        ids = np.asarray(ids, dtype=np.int64)
        return ScoredLogits(self.take(ids).clone(), ids)


@torch.no_grad()
def scored_inference(model: BlockGNN, sampler: Sampler,
                     feat: FeatureSource | np.ndarray | torch.Tensor,
                     device: torch.device | str, scored: ArrayLike,
                     batch_edges: int = 4_000_000, *, plan: ScopePlan | None = None,
                     scratch_dir: str | os.PathLike | None = None, place: str | None = None,
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
    dst rows of the CSR, maps the src ids onto positions in the layer below's table
    (:class:`LevelIndex`), reads those distinct rows -- through ``feat`` (as
    :func:`layerwise_inference` takes it) for layer 0 -- and runs the conv on the block relabelled
    onto them; degrees are the sampler's (the full graph's: GCN's normalisation is exact). A layer
    that shrinks the width is computed from projections as in :func:`layerwise_inference` (layer 0's
    of the input rows ``levels[0]``).

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


def evaluate_scored(model: BlockGNN, sampler: Sampler,
                    feat: FeatureSource | np.ndarray | torch.Tensor,
                    device: torch.device | str, scored: ArrayLike,
                    batch_edges: int = 4_000_000, *, scope: str = "auto",
                    plan: ScopePlan | None = None,
                    scratch_dir: str | os.PathLike | None = None,
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
