"""``--fanouts``: the neighbours sampled per GNN layer, parsed and checked in one place (the
config validates the flag with it, the samplers their argument).

Example::

    >>> parse_fanouts("15,10,5")
    [15, 10, 5]
"""

from __future__ import annotations

from typing import Sequence

from twopgraph.errors import ConfigError

#: The largest fanout (the samplers' kernels count a dst's neighbours in int32); ``-1`` takes
#: all of them whatever their number.
MAX_FANOUT = 2 ** 31 - 1


def parse_fanouts(text: str | Sequence[int]) -> list[int]:
    """``"15,10,5"`` -> ``[15, 10, 5]``; each entry a positive int up to :data:`MAX_FANOUT`
    (neighbours per dst) or ``-1`` (all neighbours); anything else is a one-line
    :class:`ConfigError`.

    ``fanouts[i]`` is the fanout of GNN layer ``i`` (layer 0 reads the input features), as in
    DGL: the seeds' own neighbours are sampled with the *last* fanout.
    """
    if isinstance(text, str):
        parts = [p.strip() for p in text.split(",")]
        try:
            values = [int(p) for p in parts]
        except ValueError:
            raise ConfigError(
                f"malformed fanouts {text!r}: expected comma-separated integers like 15,10,5"
            ) from None
    else:
        values = [int(v) for v in text]
    if not values:
        raise ConfigError("fanouts must name at least one layer, e.g. 15,10,5")
    bad = [v for v in values if v == 0 or v < -1]
    if bad:
        raise ConfigError(f"malformed fanouts {values}: each must be >= 1 or -1 (all neighbours)")
    big = [v for v in values if v > MAX_FANOUT]
    if big:
        raise ConfigError(f"fanout {big[0]} is too large: at most {MAX_FANOUT} neighbours per "
                          f"vertex, or -1 for all of them")
    return values
