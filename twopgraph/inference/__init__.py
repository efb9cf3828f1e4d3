"""Exact (full-neighbour) layer-wise inference within bounded memory, and the scores of its logits.

:func:`layerwise_inference` computes one layer at a time over all N vertices, dst range by dst
range (:func:`edge_balanced_ranges`): each range reads only the distinct src rows it needs,
through a feature source (:class:`~twopgraph.core.protocols.FeatureSource` ``read``: never the
whole table on the device, a memory-mapped table read row by row), and a range whose rows would
exceed :data:`~twopgraph.inference.tables.EVAL_CHUNK_BYTES` is halved. Each layer's N x d
output goes where there is room (:func:`table_place`: the device, host memory, or a nameless
scratch file), judged from the memory available to this process
(:func:`~twopgraph.runtime.memory.available_host_bytes`: ``MemAvailable`` and the process's own
cgroup limit).

When only some vertices are scored (a run's val + test), :func:`scored_inference` computes the
last layer for them and each layer below for the full in-neighbourhood of the one above
(:func:`plan_scope`'s levels): tables sized by those frontiers, not by N, the same logits up
to float rounding. :func:`plan_scope` picks the scope of ``--eval-scope`` (``auto``: the
cheaper by estimated rows + edges) and :func:`evaluate_scored` returns the scored rows
(:class:`ScoredLogits`) either way.

Scores of the logits on a split (:func:`score`): ``acc`` (:func:`accuracy`) or ``rocauc``
(:func:`rocauc` of class 1's probability, two classes only); :func:`resolve_metric` turns
``--metric`` (``auto`` = ``rocauc`` for two classes) into one of them.

The modules, one concept each:

* ``tables``: :class:`EvalTable` and :func:`table_place` (where intermediate tables go);
* ``relabel``: :class:`Relabel`, :class:`~twopgraph.inference.relabel.LevelIndex` (ids onto
  table rows);
* ``rows``: :func:`edge_balanced_ranges` and the full CSR rows of a vertex set;
* ``convs``: the widths exact inference probes a conv for;
* ``layerwise``: :func:`layerwise_inference` (scope ``all``);
* ``scope``: :func:`plan_scope`, :class:`ScopePlan`, :func:`scored_ids`,
  :func:`expand_frontier` (``--eval-scope``);
* ``scored``: :func:`scored_inference`, :func:`evaluate_scored`, :class:`ScoredLogits`;
* ``push``: streamed layers (``_Push``);
* ``passes``: layer 0's inputs streamed in passes;
* ``reads``: :func:`~twopgraph.inference.reads.read_ranges` (sequential reads by file);
* ``scores``: :func:`accuracy`, :func:`rocauc`, :func:`score`, :func:`resolve_metric`.

Tunable constants live in the module that reads them (patch them there).

Example::

    >>> logits = layerwise_inference(model, sampler, feat, torch.device("cpu"))  # doctest: +SKIP
    >>> accuracy(logits, labels, data.test_idx)                                  # doctest: +SKIP
"""

from twopgraph.inference.layerwise import layerwise_inference
from twopgraph.inference.relabel import Relabel, relabel_on_device
from twopgraph.inference.rows import edge_balanced_ranges
from twopgraph.inference.scope import (
           EVAL_SCOPES,
           ScopePlan,
           expand_frontier,
           plan_scope,
           scored_ids,
)
from twopgraph.inference.scored import ScoredLogits, evaluate_scored, scored_inference
from twopgraph.inference.scores import (
           SCORES,
           accuracy,
           positive_scores,
           resolve_metric,
           rocauc,
           score,
)
from twopgraph.inference.tables import EvalTable, table_place

__all__ = ["EVAL_SCOPES", "SCORES", "EvalTable", "Relabel", "ScopePlan", "ScoredLogits",
           "accuracy", "edge_balanced_ranges", "evaluate_scored", "expand_frontier",
           "layerwise_inference", "plan_scope", "positive_scores", "relabel_on_device",
           "resolve_metric", "rocauc", "score", "scored_ids", "scored_inference",
           "table_place"]
