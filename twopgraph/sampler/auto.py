"""``--sampler auto``: LABOR where it cuts the input vertices of a batch, else neighbour sampling.

LABOR (:mod:`.labor`, with the ``--labor-*`` options: LABOR-1 by default) keeps as many
neighbours per vertex as neighbour sampling does, in expectation, but draws one variate per
candidate vertex for all the dsts of a layer, so dsts with overlapping neighbourhoods keep the
same vertices: a batch needs fewer input vertices
(fewer feature rows to gather, fewer vertices in the next hop, a smaller first layer). That
pays where the sampled neighbourhoods of a batch overlap without covering the graph. Where a
batch reaches nearly every vertex anyway (a small graph), LABOR saves nothing, while reading
whole rows (a variate per in-edge) makes its sampling 1.5-2x dearer.

:func:`choose_sampler` measures this on the run's own seed scheduler: the mean number of
distinct input vertices (layer-0 sources) of the first :data:`AUTO_BATCHES` batches of epoch 0
with each sampler, with the keys training uses for them, and picks ``labor`` when

    labor inputs per batch / neighbor inputs per batch <= :data:`AUTO_THRESHOLD`,

else ``neighbor``. Nothing global is read or advanced (both samplers are counter-based), so
training afterwards draws exactly the batches of the explicit ``--sampler`` with the same
seed; the decision is deterministic for a seed, and a distributed run decides on the figures
summed over its ranks (``combine``), so every rank samples alike.

Example::

    >>> import numpy as np
    >>> from twopgraph.graph.data import CSRGraph
    >>> from twopgraph.locality.schedule import make_scheduler
    >>> from twopgraph.sampler import make_sampler
    >>> src = np.repeat(np.arange(8), 8); dst = np.tile(np.arange(8, 16), 8)  # K(8,8)
    >>> g = CSRGraph.from_edges(np.r_[src, dst], np.r_[dst, src], num_nodes=16)
    >>> sched = make_scheduler("random", np.arange(8), 8, seed=0)
    >>> c = choose_sampler(lambda name: make_sampler(name, g, [2]), sched)
    >>> c.sampler, c.neighbor_inputs_per_batch >= c.labor_inputs_per_batch
    ('labor', True)
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from twopgraph.core.protocols import Sampler, Scheduler
from twopgraph.sampler.stream import sampled_batches

#: labor is chosen when its input vertices per batch are at most this share of neighbour
#: sampling's (it must cut them by at least 10%). Chosen on the time-to-accuracy benchmark's
#: synthetic-small (ratio 0.86 with its defaults; labor's epochs 0.83x neighbour's at the
#: same epochs to the target: 0.40x DGL's time against 0.48x) and amazon_photo (0.90; 0.60x
#: against 0.67x); checked on a graph not used to choose it, scaled:2000000 (0.67 with the
#: locality schedule; epochs 0.72x, time to 98% of the best validation accuracy 0.81x, same
#: epochs, test accuracy 0.8553 against 0.8551). Ratios with the defaults (15,10,5, batch
#: 1024) on the shared datasets: tolokers 0.72, squirrel_filtered 0.88, twitch_de 0.89,
#: amazon_photo 0.90 (labor); facebook_pagepage 0.93, coauthor_physics 0.96, cora 0.98,
#: coauthor_cs 0.99, actor 0.99, citeseer 1.00 (a batch reaches nearly the whole graph:
#: neighbor).
AUTO_THRESHOLD = 0.9
#: batches of epoch 0 measured per sampler (fewer when an epoch has fewer)
AUTO_BATCHES = 8
#: the samplers ``auto`` chooses between (registered names), the default first
CANDIDATES = ("neighbor", "labor")


@dataclass
class SamplerChoice:
    """The decision of ``--sampler auto`` and the figures it rests on (``metrics.json``:
    ``sampler_choice``): the ``sampler`` chosen, the mean distinct input vertices per batch
    with each candidate over ``batches`` batches, their ``ratio`` (labor / neighbor), the
    ``threshold`` it was compared with and the wall ``seconds`` the measurement took."""

    sampler: str
    ratio: float
    labor_inputs_per_batch: float
    neighbor_inputs_per_batch: float
    batches: int
    threshold: float
    seconds: float

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """The log line of the decision."""
        op = "<=" if self.ratio <= self.threshold else ">"
        return (f"sampler auto -> {self.sampler}: labor batches reach "
                f"{self.labor_inputs_per_batch:,.0f} input vertices, neighbor "
                f"{self.neighbor_inputs_per_batch:,.0f} (ratio {self.ratio:.2f} {op} "
                f"{self.threshold:.2f}), measured on {self.batches} "
                f"batch{'' if self.batches == 1 else 'es'} in {self.seconds:.1f} s")


def input_vertices(scheduler: Scheduler, sampler: Sampler, batches: int = AUTO_BATCHES,
                   workers: int = 1) -> tuple[int, int]:
    """``(input vertices summed, batches)`` over the first ``batches`` batches of epoch 0 of
    ``scheduler`` expanded by ``sampler`` (with the keys training uses: the same batches).
    ``--schedule auto`` measures with it too."""
    stream = sampled_batches(scheduler, sampler, 0, workers)
    total, n = 0, 0
    try:
        for mb, _ in itertools.islice(stream, batches):
            total += int(mb.input_nodes.shape[0])
            n += 1
    finally:
        stream.close()
    return total, n


def measure(make: Callable[[str], Sampler], scheduler: Scheduler,
            batches: int = AUTO_BATCHES, workers: int = 1) -> dict:
    """The figures :func:`decide` reads, for one process: ``NAME_inputs`` and
    ``NAME_batches`` of each of :data:`CANDIDATES` (``make(name)`` builds it) and
    ``seconds``. Figures of several processes add up key by key (``seconds``: the largest)."""
    t = time.perf_counter()
    out: dict = {}
    for name in CANDIDATES:
        out[f"{name}_inputs"], out[f"{name}_batches"] = input_vertices(
            scheduler, make(name), min(batches, scheduler.num_batches), workers)
    out["seconds"] = time.perf_counter() - t
    return out


def decide(figures: dict, threshold: float = AUTO_THRESHOLD) -> SamplerChoice:
    """The :class:`SamplerChoice` of ``figures`` (:func:`measure`'s, possibly summed over
    processes): ``labor`` when its mean input vertices per batch are at most ``threshold`` x
    neighbour sampling's, else ``neighbor``."""
    lab = figures["labor_inputs"] / max(figures["labor_batches"], 1)
    nbr = figures["neighbor_inputs"] / max(figures["neighbor_batches"], 1)
    ratio = lab / nbr if nbr > 0 else 1.0
    return SamplerChoice(sampler="labor" if ratio <= threshold else "neighbor", ratio=ratio,
                         labor_inputs_per_batch=lab, neighbor_inputs_per_batch=nbr,
                         batches=int(min(figures["labor_batches"],
                                         figures["neighbor_batches"])),
                         threshold=threshold, seconds=float(figures["seconds"]))


def choose_sampler(make: Callable[[str], Sampler], scheduler: Scheduler, *,
                   batches: int = AUTO_BATCHES, threshold: float = AUTO_THRESHOLD,
                   workers: int = 1,
                   combine: Callable[[dict], dict] | None = None) -> SamplerChoice:
    """Resolve ``--sampler auto`` (see the module doc): :func:`measure` on ``scheduler``'s
    batches (``make(name)`` builds each candidate as training would; ``workers`` sampling
    threads), then :func:`decide`. ``combine`` maps this process's figures to the ones the
    decision is made on (a distributed run: their sums over the ranks)."""
    figures = measure(make, scheduler, batches, workers)
    if combine is not None:
        figures = combine(figures)
    return decide(figures, threshold)
