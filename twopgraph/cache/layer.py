"""``layer``: the 2PGraph cache -- GNN-layer-aware and schedule-aware.

Two parts:

* **static rank** (layer-aware): each vertex's probability of being an input vertex of a
  mini-batch, from the training set and the per-layer fanouts by L sparse propagation steps,
  without any pre-sampling. A seed is in a batch with probability ``q = batch/|train|``; at a
  hop with fanout ``f`` a present vertex ``v`` takes each neighbour with probability
  ``min(1, f/deg v)``, so ``P(u present after the hop) = 1 - (1 - x_u) * exp(-sum_v x_v
  min(1, f/deg v))`` over the neighbours ``v`` of ``u`` (independent arrivals). Hops run from
  the seeds outwards with the fanouts in reverse (the seeds' neighbours use the last one).
* **window** (schedule-aware): the loader samples ``lookahead`` batches ahead and announces
  them; the policy then knows, for every row, the batch in which it is next used. After each
  batch the device keeps the rows whose next use comes soonest (Belady's rule inside the
  window); rows not needed inside the window are ranked by the static part. Rows of the
  current batch that would be evicted first are not admitted at all (bypass).

Within a window whose rows all fit in the budget every lookup after the first hits; only the
rows a window adds are copied, and they are counted in ``h2d_bytes``.
"""

from __future__ import annotations

import numpy as np

from twopgraph.cache.base import (
    DROP_KEY,
    PolicyContext,
    WindowPolicy,
    next_use_keys,
    rank_of,
    top_rows,
)
from twopgraph.cache.window import NO_USE
from twopgraph.core.protocols import CACHE_POLICIES
from twopgraph.errors import ConfigError
from twopgraph.graph.data import CSRGraph

DEFAULT_LOOKAHEAD = 32


def input_probability(graph: CSRGraph, train_idx: np.ndarray, fanouts: list[int],
                      batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-batch probability of each vertex to be an input vertex (float64, N), and the exact
    mask of the vertices an L-hop sampling from the training set can reach at all."""
    n = graph.num_nodes
    deg = graph.degrees().astype(np.float64)
    q = min(1.0, batch_size / max(1, train_idx.shape[0]))
    x = np.zeros(n, dtype=np.float64)
    x[train_idx] = q
    reach = np.zeros(n, dtype=np.float32)
    reach[train_idx] = 1.0
    adj = graph.to_scipy()
    for f in reversed(fanouts):
        take = np.ones(n) if f < 0 else np.minimum(1.0, f / np.maximum(deg, 1.0))
        arrivals = adj @ (x * take)
        x = 1.0 - (1.0 - x) * np.exp(-arrivals)
        reach = np.minimum(reach + adj @ reach, 1.0).astype(np.float32)
    return x, reach > 0


class LayerCache(WindowPolicy):
    """Static layer-aware rank + Belady inside a lookahead window (see the module doc).

    ``score`` is the static rank's input probability (N), ``reachable`` the rows that can
    ever be an input (default ``score > 0``); ``lookahead`` the batches the
    loader announces ahead; ``prefill`` is ``"window"`` (the initial fill holds only rows the
    first window needs, so no byte is spent on a row that is not used) or ``"full"`` (fill
    the whole budget, the rest by static rank). When every reachable row fits in the budget,
    all of them are loaded once and every later lookup hits.

    Example::

        >>> p = LayerCache(np.array([.1, .9, 0., .5]), lookahead=2)
        >>> p.announce(np.array([3])); p.announce(np.array([0]))
        >>> p.initial_rows(2).tolist()
        [3, 0]
    """

    name = "layer"

    def __init__(self, score: np.ndarray, lookahead: int = DEFAULT_LOOKAHEAD,
                 prefill: str = "window", reachable: np.ndarray | None = None) -> None:
        if prefill not in ("window", "full"):
            raise ConfigError(f"layer prefill must be 'window' or 'full', got {prefill!r}")
        self.score = np.asarray(score, dtype=np.float64)
        self.lookahead = int(lookahead)
        self.prefill = prefill
        self.rank = rank_of(top_rows(self.score, self.score.shape[0]))
        self.reachable = (self.score > 0) if reachable is None else np.asarray(reachable, bool)
        self.num_reachable = int(self.reachable.sum())
        super().__init__(self.score.shape[0])

    @property
    def cold_rank(self) -> np.ndarray:
        """The static rank (0 = best) that alone orders the rows outside the window (their
        key is ``(NO_USE, rank)``, larger than any row's inside it; ``DROP_KEY`` for rows
        that are not ``reachable``): what lets the directory evict without ranking every
        cached row (:class:`~twopgraph.cache.coldset.ColdSet`)."""
        return self.rank

    def initial_rows(self, budget: int) -> np.ndarray:
        if budget <= 0:
            return np.empty(0, dtype=np.int64)
        nu = self.window.next_use
        if self.num_reachable <= budget:   # everything that can ever be needed fits: load it all
            rows = np.flatnonzero(self.reachable | (nu < NO_USE))
        elif self.prefill == "window":
            rows = np.flatnonzero(nu < NO_USE)
        else:
            rows = np.arange(self.score.shape[0])
        keys = next_use_keys(nu[rows], self.rank[rows])
        if rows.shape[0] > budget:
            part = np.argpartition(keys, budget - 1)[:budget]
            rows, keys = rows[part], keys[part]
        return rows[np.argsort(keys, kind="stable")].astype(np.int64)

    def keys(self, rows: np.ndarray) -> np.ndarray:
        nu = self.window.next_use[rows]
        key = next_use_keys(nu, self.rank[rows])
        key[(nu == NO_USE) & ~self.reachable[rows]] = DROP_KEY  # can never be needed
        return key

    def info(self) -> dict:
        return {"lookahead": self.lookahead, "prefill": self.prefill,
                "reachable_rows": self.num_reachable}


@CACHE_POLICIES.register("layer")
def make(ctx: PolicyContext, lookahead: int = DEFAULT_LOOKAHEAD,
         prefill: str = "window") -> LayerCache:
    """A layer-aware static rank plus Belady over the schedule's lookahead window
    (2PGraph)."""
    if not isinstance(lookahead, int) or lookahead < 0:
        raise ConfigError(f"layer lookahead must be an integer >= 0, got {lookahead!r}")
    score, reachable = input_probability(ctx.graph, ctx.train_idx, ctx.fanouts, ctx.batch_size)
    return LayerCache(score, lookahead, prefill, reachable)
