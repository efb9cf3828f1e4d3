"""Test-only: breaks twopgraph's resume in every Python process that
``tests/bench/test_gpu_check.py`` starts through ``scripts/gpu_check.sh`` with this folder on
``PYTHONPATH`` and ``TWOPGRAPH_GPU_CHECK_BREAK=optimizer``: ``Optimizer.load_state_dict`` does
nothing, so ``--resume`` continues with a fresh Adam (no moments, step 0) instead of the
checkpoint's -- a real defect that the check's ``resume_equal`` must catch.

Python imports the first ``sitecustomize`` on the path, so this one then runs the check's own
(``scripts/gpu_checks/site/sitecustomize.py``: stack dumps, rank probes)."""

import os
import runpy
from pathlib import Path

if os.environ.get("TWOPGRAPH_GPU_CHECK_BREAK") == "optimizer":
    import torch

    def _load_nothing(self, state_dict) -> None:
        """The broken resume: the optimizer state in the checkpoint is ignored."""

    torch.optim.Optimizer.load_state_dict = _load_nothing

_site = Path(__file__).resolve().parents[3] / "scripts" / "gpu_checks" / "site" / "sitecustomize.py"
if _site.is_file():
    runpy.run_path(str(_site))
