"""Distributed data-parallel training over self-dependence partitions (torch.distributed).

``env`` detects torchrun and owns the process group, ``trainer`` is the DDP training loop,
``evaluate`` the exact layer-wise evaluation spread over the ranks, ``launch`` starts torchrun
for ``twopgraph train --nproc``, ``commands`` is the command-line glue. Names are imported
lazily (the CLI builds its parser without importing torch).
"""

_LAZY = {"DistEnv": "env", "detect": "env", "process_group": "env", "rank_device": "env",
         "launch": "launch", "torchrun_command": "launch", "DistResult": "trainer",
         "FixedSteps": "trainer", "PartSampler": "trainer", "train_distributed": "trainer",
         "evaluate_distributed": "evaluate"}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
