"""The closed sets of names that flags take, and the bounds of a few, defined once.

Both sides read them from here: the configs (:mod:`twopgraph.config`, from which every parser
and its ``--help`` is built, without importing torch or numba) and the implementations that
act on the names (:mod:`twopgraph.inference.scope`, :mod:`twopgraph.locality.cluster`,
:mod:`twopgraph.distributed.partition.selfdep`, :mod:`twopgraph.datasets.dtype`,
:mod:`twopgraph.cache.feature_cache`, :mod:`twopgraph.inference.scores`). This module imports
nothing, so it sits in the bottom layer. Registries' names (models, samplers, schedulers,
cache policies) are not here: :meth:`~twopgraph.core.registry.Registry.declared` reads them from
their sources.
"""

from __future__ import annotations

#: ``--eval-scope``: ``all`` = every layer over all N vertices, ``scored`` = the L-hop
#: in-neighbourhood of the scored vertices only, ``auto`` = the cheaper by the estimate of
#: :func:`twopgraph.inference.plan_scope`.
EVAL_SCOPES = ("auto", "all", "scored")

#: ``--cluster-method`` (:mod:`twopgraph.locality.cluster`): ``metis``, ``coarsen``
#: (multilevel label propagation + METIS on the coarse graph), ``lp`` (the coarsening with a
#: greedy packing), ``auto`` (by the number of edges).
CLUSTER_METHODS = ("auto", "metis", "coarsen", "lp")

#: ``--store-dtype``: the types a store may keep its features in.
STORE_DTYPES = ("float32", "float16")
#: ``--store-dtype``'s values: a store type, or ``auto`` (chosen by
#: :func:`twopgraph.datasets.resolve_store_dtype`).
STORE_DTYPE_CHOICES = ("auto",) + STORE_DTYPES

#: ``--feat-dtype``: how features are kept in the feature source and copied (the keys of
#: :data:`twopgraph.cache.feature_cache.FEAT_DTYPES`, which maps them to torch dtypes).
FEAT_DTYPE_NAMES = ("float32", "float16", "bfloat16")

#: ``partition --representation``: how a part holds its graph (``local`` CSR, ``global``:
#: the store's CSR, ``auto``: by size).
REPRESENTATIONS = ("auto", "local", "global")

#: The metrics a run can score with (:func:`twopgraph.inference.resolve_metric`).
SCORES = ("acc", "rocauc")
#: ``--metric``: a score of :data:`SCORES`, or ``auto`` (rocauc for two classes, else acc).
METRICS = ("auto",) + SCORES

#: ``--sampler-device``: where mini-batches are sampled.
SAMPLER_DEVICES = ("auto", "cpu", "cuda")
#: ``--amp``: mixed precision of the training forward pass.
AMP_MODES = ("off", "bf16")
#: ``--select``: which epoch's model a run reports and keeps.
SELECT_MODES = ("best-val", "last")
#: ``--readahead``: read-ahead of a memory-mapped feature table.
READAHEAD_MODES = ("auto", "on", "off")

#: ``--labor-iterations``' largest value (fixed-point rounds of LABOR's importances per layer
#: and batch: the estimate settles in a few; each round costs a pass over the layer's
#: candidate edges, and a sampling thread stops only between batches).
MAX_LABOR_ITERATIONS = 100
