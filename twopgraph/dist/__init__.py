"""Distributed data-parallel training over self-dependence partitions (torch.distributed).

``env`` detects torchrun and owns the process group, ``trainer`` is the DDP training loop,
``evaluate`` the exact layer-wise evaluation spread over the ranks, ``launch`` starts torchrun
for ``twopgraph train --nproc``, ``commands`` is the command-line glue. Names are imported
lazily (the CLI builds its parser without importing torch).
"""

# Seconds a collective may wait for the other ranks before it fails (evaluation of a large
# graph on CPU is the longest stretch between two collectives).
DEFAULT_TIMEOUT_S = 600.0

_LAZY = {"DistEnv": "env", "detect": "env", "process_group": "env", "rank_device": "env",
         "launch": "launch", "torchrun_command": "launch", "DistResult": "trainer",
         "FixedSteps": "trainer", "PartSampler": "trainer", "train_distributed": "trainer",
         "evaluate_distributed": "evaluate"}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
