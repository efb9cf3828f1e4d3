"""What exact inference asks a conv about its tables' widths (probed, in columns).

:func:`_projects`: whether a layer is computed from per-vertex projections (it shrinks the
width); :func:`_widths`: the columns of each of ``conv.project``'s outputs;
:func:`_agg_width`: the columns of ``conv.aggregate``'s output.
"""

from __future__ import annotations

import torch

from twopgraph.core.minibatch import Block


def _projects(conv) -> bool:
    return conv.in_dim > conv.out_dim and hasattr(conv, "project")


def _widths(conv, device) -> list[int]:
    """Columns of each output of ``conv.project``."""
    probe = torch.zeros((1, conv.in_dim), device=device)
    return [int(t.shape[1]) for t in conv.project(probe)]


def _agg_width(conv, device) -> int:
    """Columns of ``conv.aggregate``'s output (probed on a one-edge block)."""
    one = torch.ones(1)
    block = Block(1, 1, torch.tensor([0, 1]), torch.tensor([0]), one, one).to(device)
    return int(conv.aggregate(block, torch.zeros((1, conv.in_dim), device=device)).shape[1])
