"""Distributed data-parallel training over self-dependence partitions (torch.distributed).

``env`` detects torchrun and owns the process group, ``trainer`` is the DDP training loop,
``evaluate`` the exact layer-wise evaluation spread over the ranks, ``launch`` starts torchrun
for ``twopgraph train --nproc``.
"""

from .env import DEFAULT_TIMEOUT_S, DistEnv, detect, process_group, rank_device
from .launch import launch, torchrun_command
from .trainer import DistResult, FixedSteps, PartSampler, train_distributed

