"""The scope of exact evaluation (``--eval-scope``): which vertices each layer computes.

:func:`scored_ids` (the scored vertices, sorted distinct), :func:`expand_frontier` (a level
and its in-neighbours, merged in bounded memory), :func:`plan_scope` (``all`` or ``scored``
by estimated rows + edges, :data:`SCOPE_RATIO`) and its result :class:`ScopePlan` (the
levels, rows and edges per layer, and the keys an evaluated epoch's record gets).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from twopgraph.core.names import EVAL_SCOPES
from twopgraph.core.protocols import Graph
from twopgraph.errors import ConfigError
from twopgraph.inference.convs import _projects
from twopgraph.inference.relabel import id_dtype, sorted_unique
from twopgraph.inference.rows import _prefix_degrees, _rows_of, edge_balanced_ranges
from twopgraph.models import BlockGNN

# EVAL_SCOPES (twopgraph.core.names, imported above): ``--eval-scope``: ``all`` =
# :func:`layerwise_inference` over every vertex, ``scored`` = :func:`scored_inference` over the
# L-hop in-neighbourhood of the scored vertices, ``auto`` = the cheaper by :func:`plan_scope`'s
# estimate.
#: ``--eval-scope auto`` takes ``scored`` when its estimated work (rows computed + edges
#: aggregated over the layers) is at most this share of whole-graph inference's: a restricted
#: layer also sorts and searches its ids, about as much again per edge.
SCOPE_RATIO = 0.5


def scored_ids(n: int, *splits: ArrayLike | None) -> np.ndarray:
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


def expand_frontier(graph: Graph, ids: np.ndarray, batch_edges: int = 4_000_000) -> np.ndarray:
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


def plan_scope(model: BlockGNN, graph: Graph, scored: np.ndarray, scope: str = "auto",
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
