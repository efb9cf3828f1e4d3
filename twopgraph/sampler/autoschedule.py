"""``--schedule auto``: locality where it cuts the input vertices of a batch, else random.

The locality scheduler pays only where a batch's sampled neighbourhood covers a small part of
the graph: its batches of whole METIS clusters then share neighbours and need fewer input
vertices (fewer feature rows to gather and copy). Where a batch already reaches most of the
graph (a small graph, or many hops) it needs as many input vertices as a uniform one and only
costs batch diversity (accuracy). :func:`choose_schedule` measures this on the real sampler:
the mean number of distinct input vertices (layer-0 sources) of the first
:data:`AUTO_BATCHES` batches of epoch 0 under each scheduler, and picks ``locality`` when

    locality inputs per batch / random inputs per batch <= :data:`AUTO_THRESHOLD`,

else ``random``. Those batches are sampled with the keys training uses for them (the
sampler's randomness depends only on (seed, epoch, batch, layer, vertex)), and no global
random state (numpy's, torch's) is read or advanced, so training afterwards draws exactly the
batches of the explicit ``--schedule`` with the same seed. The decision is deterministic for
a seed.

Example::

    >>> from twopgraph.graph import CSRGraph
    >>> from twopgraph.sampler import NeighborSampler
    >>> src = np.arange(40); dst = (src // 10) * 10 + (src + 1) % 10   # 4 rings of 10
    >>> g = CSRGraph.from_edges(src, dst, num_nodes=40)
    >>> c = choose_schedule(NeighborSampler(g, [2, 2]), np.arange(40), batch_size=10,
    ...                     parts=np.arange(40) // 10)
    >>> c.schedule, c.locality_inputs_per_batch, c.batches
    ('locality', 10.0, 4)
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from .schedule import make_scheduler
from .stream import sampled_batches

#: locality is chosen when its input vertices per batch are at most this share of random's
#: (0.6: locality must cut them by at least 40%). Measured ratios (README "Recipes"): 0.40-0.42
#: on synthetic-products (where locality pays: issue 6), 0.75-1.00 on the ten real datasets
#: of ../shared/datasets with their defaults (a 2-hop batch of 1024 seeds reaches half the
#: graph or more: locality saves little there and its less diverse batches can cost accuracy)
AUTO_THRESHOLD = 0.6
#: batches of epoch 0 measured per scheduler (fewer when an epoch has fewer)
AUTO_BATCHES = 8


@dataclass
class ScheduleChoice:
    """The decision of ``--schedule auto`` and the figures it rests on (``metrics.json``:
    ``schedule_choice``): the ``schedule`` chosen, the mean distinct input vertices per
    batch of each scheduler over ``batches`` batches, their ``ratio`` (locality / random),
    the ``threshold`` it was compared with and the wall ``seconds`` the measurement took."""

    schedule: str
    ratio: float
    locality_inputs_per_batch: float
    random_inputs_per_batch: float
    batches: int
    threshold: float
    seconds: float

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """The log line of the decision."""
        op = "<=" if self.ratio <= self.threshold else ">"
        return (f"schedule auto -> {self.schedule}: locality batches reach "
                f"{self.locality_inputs_per_batch:,.0f} input vertices, random "
                f"{self.random_inputs_per_batch:,.0f} (ratio {self.ratio:.2f} {op} "
                f"{self.threshold:.2f}), measured on {self.batches} "
                f"batch{'' if self.batches == 1 else 'es'} in "
                f"{self.seconds:.1f} s")


def input_vertices(scheduler, sampler, batches: int = AUTO_BATCHES,
                   workers: int = 1) -> tuple[int, int]:
    """``(input vertices summed, batches)`` over the first ``batches`` batches of epoch 0 of
    ``scheduler`` expanded by ``sampler`` (with the keys training uses: the same batches)."""
    stream = sampled_batches(scheduler, sampler, 0, workers)
    total, n = 0, 0
    try:
        for mb, _ in itertools.islice(stream, batches):
            total += int(mb.input_nodes.shape[0])
            n += 1
    finally:
        stream.close()
    return total, n


def measure(sampler, train_idx, batch_size: int, seed: int = 0, *, parts, labels=None,
            balance: int = 16, batches: int = AUTO_BATCHES, workers: int = 1) -> dict:
    """The figures :func:`decide` reads, for one process: ``locality_inputs`` and
    ``random_inputs`` (input vertices summed over the measured batches), ``locality_batches``
    and ``random_batches`` (batches measured: ``batches``, or fewer when an epoch has fewer)
    and ``seconds``. Figures of several processes add up key by key (``seconds``: take the
    largest)."""
    t = time.perf_counter()
    out = {}
    for name in ("locality", "random"):
        sched = make_scheduler(name, train_idx, batch_size, seed=seed, parts=parts,
                               labels=labels, balance=balance)
        out[f"{name}_inputs"], out[f"{name}_batches"] = input_vertices(
            sched, sampler, min(batches, sched.num_batches), workers)
    out["seconds"] = time.perf_counter() - t
    return out


def decide(figures: dict, threshold: float = AUTO_THRESHOLD) -> ScheduleChoice:
    """The :class:`ScheduleChoice` of ``figures`` (:func:`measure`'s, possibly summed over
    processes): ``locality`` when its mean input vertices per batch are at most ``threshold``
    x random's, else ``random``."""
    loc = figures["locality_inputs"] / max(figures["locality_batches"], 1)
    rnd = figures["random_inputs"] / max(figures["random_batches"], 1)
    ratio = loc / rnd if rnd > 0 else 1.0
    return ScheduleChoice(schedule="locality" if ratio <= threshold else "random",
                          ratio=ratio, locality_inputs_per_batch=loc,
                          random_inputs_per_batch=rnd,
                          batches=int(min(figures["locality_batches"],
                                          figures["random_batches"])),
                          threshold=threshold, seconds=float(figures["seconds"]))


def choose_schedule(sampler, train_idx, batch_size: int, seed: int = 0, *, parts, labels=None,
                    balance: int = 16, batches: int = AUTO_BATCHES,
                    threshold: float = AUTO_THRESHOLD, workers: int = 1,
                    combine: Callable[[dict], dict] | None = None) -> ScheduleChoice:
    """Resolve ``--schedule auto`` (see the module doc): :func:`measure` with the scheduler
    options training uses (``parts`` = the METIS cluster of every vertex, ``labels`` and
    ``balance`` for the locality scheduler's label balancing; ``workers`` sampling threads),
    then :func:`decide`. ``combine`` maps this process's figures to the figures the decision
    is made on: e.g. their sums over the ranks of a distributed run, so that every rank makes
    the same decision."""
    figures = measure(sampler, np.asarray(train_idx), batch_size, seed, parts=parts,
                      labels=labels, balance=balance, batches=batches, workers=workers)
    if combine is not None:
        figures = combine(figures)
    return decide(figures, threshold)
