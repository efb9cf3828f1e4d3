"""Sampling: schedulers pick seeds, samplers expand them into blocks.

Schedulers and samplers register in :data:`~twopgraph.protocols.SCHEDULERS` and
:data:`~twopgraph.protocols.SAMPLERS`; a new one is a new module of this package.
"""

from ..protocols import SAMPLERS, SCHEDULERS
from ..minibatch import Block, MiniBatch
from .neighbor import NeighborSampler, parse_fanouts
from .schedule import LocalityScheduler, RandomScheduler, make_scheduler
from .stream import sampled_batches


def make_sampler(name: str, graph, fanouts, seed: int = 0, degrees=None, **options):
    """Build the sampler registered as ``name`` (``"neighbor"``: numba, host memory;
    ``"device"``: torch ops on ``device=``) over ``graph``; ``degrees`` overrides the degrees
    blocks carry (GCN's normalisation); ``options`` go to the sampler's factory."""
    return SAMPLERS.get(name)(graph, fanouts, seed=seed, degrees=degrees, **options)

