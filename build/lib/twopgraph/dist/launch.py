"""``twopgraph train --partitions DIR --nproc P``: start ``torchrun`` on this machine.

The command line is passed on unchanged except ``--nproc``, so each worker runs
``python -m twopgraph train --partitions DIR ...`` under ``torchrun --standalone
--nproc-per-node P`` (one machine; for several machines call torchrun yourself, see the README).
"""

from __future__ import annotations

import subprocess
import sys

from ..errors import ConfigError


def strip_nproc(argv: list[str]) -> list[str]:
    """``argv`` without ``--nproc N`` / ``--nproc=N``."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            out.append(a)
    return out


def torchrun_command(nproc: int, argv: list[str]) -> list[str]:
    """The torchrun command line that runs ``twopgraph <argv>`` in ``nproc`` workers."""
    if nproc < 1:
        raise ConfigError(f"nproc must be >= 1, got {nproc}")
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={nproc}", "-m", "twopgraph", *strip_nproc(argv)]


def launch(nproc: int, argv: list[str]) -> int:
    """Run ``twopgraph <argv>`` in ``nproc`` torchrun workers; returns torchrun's exit code
    (non-zero when any worker failed: torchrun then stops the others)."""
    return subprocess.call(torchrun_command(nproc, argv))
