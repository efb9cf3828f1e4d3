"""``degree``: PaGraph's static cache of the highest-degree vertices."""

from __future__ import annotations

import numpy as np

from twopgraph.cache.base import CachePolicy, PolicyContext, top_rows
from twopgraph.core.protocols import CACHE_POLICIES


class DegreeCache(CachePolicy):
    """Fills the budget once with the highest-degree rows (ties by id) and never changes.

    Example::

        >>> from twopgraph.graph.data import CSRGraph
        >>> g = CSRGraph.from_edges([0, 0, 0, 1], [1, 2, 3, 2], num_nodes=4)
        >>> DegreeCache(g.degrees()).initial_rows(2).tolist()
        [0, 1]
    """

    name = "degree"

    def __init__(self, degrees: np.ndarray) -> None:
        self.degrees = np.asarray(degrees)

    def initial_rows(self, budget: int) -> np.ndarray:
        return top_rows(self.degrees, budget)


@CACHE_POLICIES.register("degree")
def make(ctx: PolicyContext) -> DegreeCache:
    """The rows of the highest-degree vertices, fixed for the run (PaGraph)."""
    return DegreeCache(ctx.graph.degrees())
