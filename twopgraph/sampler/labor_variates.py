"""LABOR's variates: ``r_t`` of every vertex ``t`` of a layer, in ``[0, 1)``, with twins
(the method: :mod:`twopgraph.sampler.labor_kernels`).

``smooth = False``: the uniform of ``draw(key0, t, 0)``; ``smooth = True`` (batch dependency):
two standard normals ``z0, z1`` of ``t`` in streams ``key0`` and ``key1`` (Box-Muller of two
draws each) mixed as ``z = ca z0 + cb z1`` with ``ca^2 + cb^2 = 1``, and ``r = Phi(z)``: uniform
on [0, 1) whatever the mix, and moving continuously from stream ``key0``'s value (``cb = 0``)
to ``key1``'s (``ca = 0``). ``r_t`` depends on ``t`` and the stream keys only, never on a dst.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from twopgraph.core.rng import draw, draw_ref
from twopgraph.runtime.jit import register

#: 2**-53: a 53-bit integer times this is a float64 in [0, 1).
_UNIT = 1.0 / 9007199254740992.0
#: The largest float64 below 1 (variates are clipped to it: r in [0, 1)).
_BELOW_ONE = 1.0 - _UNIT
_TWO_PI = 2.0 * math.pi
_SQRT_HALF = math.sqrt(0.5)


@njit(inline="always", cache=True)
def _normal(key, t):
    """A standard normal of vertex ``t`` in stream ``key`` (Box-Muller of draws 0 and 1)."""
    u1 = (np.float64(draw(key, t, 0) >> np.uint64(11)) + 1.0) * _UNIT  # (0, 1]
    u2 = np.float64(draw(key, t, 1) >> np.uint64(11)) * _UNIT  # [0, 1)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(_TWO_PI * u2)


@njit(inline="always", cache=True)
def variate(key0, key1, ca, cb, smooth, t):
    """The variate ``r_t`` in [0, 1) of vertex ``t`` (float64; see the module docstring)."""
    if not smooth:
        return np.float64(draw(key0, t, 0) >> np.uint64(11)) * _UNIT
    z = ca * _normal(key0, t) + cb * _normal(key1, t)
    r = 0.5 * math.erfc(-z * _SQRT_HALF)
    return r if r < _BELOW_ONE else _BELOW_ONE


def variate_ref(key0: int, key1: int, ca: float, cb: float, smooth: bool, t: int) -> float:
    """Python twin of :func:`variate`."""
    key0, key1, t = int(key0), int(key1), int(t)
    if not smooth:
        return float(draw_ref(key0, t, 0) >> 11) * _UNIT

    def normal(key):
        u1 = (float(draw_ref(key, t, 0) >> 11) + 1.0) * _UNIT
        u2 = float(draw_ref(key, t, 1) >> 11) * _UNIT
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(_TWO_PI * u2)

    z = ca * normal(key0) + cb * normal(key1)
    r = 0.5 * math.erfc(-z * _SQRT_HALF)
    return r if r < _BELOW_ONE else _BELOW_ONE


@njit(parallel=True, nogil=True, cache=True)
def labor_variates(key0, key1, ca, cb, smooth, vertices):
    """:func:`variate` of every vertex of ``vertices`` (float64), parallel over them;
    :func:`labor_variates_serial` is the same on one thread."""
    n = vertices.shape[0]
    out = np.empty(n, dtype=np.float64)
    for i in prange(n):
        out[i] = variate(key0, key1, ca, cb, smooth, vertices[i])
    return out


#: :func:`labor_variates` compiled without ``parallel`` (same output).
labor_variates_serial = njit(nogil=True, cache=True)(getattr(labor_variates, "py_func",
                                                            labor_variates))


def labor_variates_ref(key0: int, key1: int, ca: float, cb: float, smooth: bool,
                       vertices: np.ndarray) -> np.ndarray:
    """Python twin of :func:`labor_variates`."""
    return np.array([variate_ref(key0, key1, ca, cb, smooth, int(t)) for t in vertices],
                    dtype=np.float64)


register(variate, variate_ref)
register(labor_variates, labor_variates_ref)
register(labor_variates_serial, labor_variates_ref, name="labor_variates_serial")
