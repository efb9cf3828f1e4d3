"""Sampling: schedulers pick seeds, samplers expand them into blocks.

Schedulers and samplers register in :data:`~twopgraph.core.protocols.SCHEDULERS` and
:data:`~twopgraph.core.protocols.SAMPLERS`; a new one is a new module of this package.
"""

from twopgraph.core.minibatch import Block, MiniBatch
from twopgraph.core.protocols import SAMPLERS
from twopgraph.sampler.auto import SamplerChoice, choose_sampler
from twopgraph.sampler.build import make_sampler, sampler_options
from twopgraph.sampler.neighbor import NeighborSampler, parse_fanouts
from twopgraph.sampler.stream import SamplerThreads, sampled_batches

__all__ = ["Block", "MiniBatch", "SAMPLERS", "make_sampler", "sampler_options",
           "NeighborSampler", "parse_fanouts", "sampled_batches", "SamplerThreads", "SamplerChoice",
           "choose_sampler"]
