"""Distributed data-parallel training over self-dependence partitions (torch.distributed).

``env`` detects torchrun and owns the process group, ``trainer`` is the DDP training loop,
``evaluate`` the exact layer-wise evaluation spread over the ranks, ``launch`` starts torchrun
for ``twopgraph train --nproc``, ``commands`` is the command-line glue. Names are imported
lazily (the CLI builds its parser without importing torch).
"""

from twopgraph.imports import lazy_exports

_EXPORTS = {"DistEnv": "env", "detect": "env", "process_group": "env", "rank_device": "env",
            "torchrun_command": "launch", "DistResult": "trainer", "FixedSteps": "trainer",
            "PartSampler": "trainer", "train_distributed": "trainer",
            "evaluate_distributed": "evaluate"}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
