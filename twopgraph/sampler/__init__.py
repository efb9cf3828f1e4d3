"""Sampling: schedulers pick seeds, :class:`NeighborSampler` expands them into blocks."""

from .minibatch import Block, MiniBatch
from .neighbor import NeighborSampler, parse_fanouts
from .schedule import SCHEDULERS, LocalityScheduler, RandomScheduler, make_scheduler

__all__ = ["Block", "MiniBatch", "NeighborSampler", "parse_fanouts", "SCHEDULERS",
           "RandomScheduler", "LocalityScheduler", "make_scheduler"]
