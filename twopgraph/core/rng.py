"""Counter-based random numbers for the kernels (splitmix64), each with a Python twin.

A draw is ``splitmix64(key ^ counter)``, where the key mixes the user seed, the batch and the
layer (:func:`mix_key`), and the counter mixes the vertex id and the draw number
(:func:`draw`). A result therefore depends only on (seed, batch, layer, vertex), never on the
number of threads or the order in which they run. All values are 64-bit unsigned integers
(``np.uint64`` in kernels, Python ints mod 2**64 in the twins).

The njit functions here are inlined into kernels of other modules. numba's on-disk cache only
watches each kernel's own source file: after editing this file, delete the ``*.nbi``/``*.nbc``
files under ``twopgraph/**/__pycache__`` (the kernel tests compare against the twins here, so
a stale cache shows up as a failing test, not as a silent difference).

Example::

    >>> draw_ref(mix_key(0, 1), 5, 0) == int(draw(np.uint64(mix_key(0, 1)), 5, 0))
    True
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import njit

from twopgraph.runtime.jit import register

MASK64 = (1 << 64) - 1


@njit(inline="always", cache=True)
def splitmix64(x):
    """The splitmix64 finaliser of ``x`` (uint64): a well-mixed 64-bit value."""
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & np.uint64(0xFFFFFFFFFFFFFFFF)
    z = x
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def splitmix64_ref(x: int) -> int:
    """Reference twin of :func:`splitmix64` on Python ints (mod 2**64)."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def mix_key(*parts: int) -> int:
    """Fold integers (seed, epoch, batch, layer, ...) into one 64-bit stream key."""
    k = 0x2545F4914F6CDD1D
    for p in parts:
        k = splitmix64_ref(k ^ (int(p) & MASK64))
    return k


class BatchKey(int):
    """A batch's stream key that also knows its place: the int ``mix_key(epoch, batch)``
    (every sampler uses it as that plain int) with ``epoch`` and ``batch`` attributes, for a
    sampler whose randomness follows the batch order (LABOR's ``batch_dependency``: variates
    that drift over consecutive batches). Made by :func:`batch_key`.

    Example::

        >>> k = batch_key(2, 7)
        >>> int(k) == mix_key(2, 7), k.epoch, k.batch
        (True, 2, 7)
    """

    epoch: int
    batch: int

    def __reduce__(self) -> tuple[Callable[[int, int], BatchKey], tuple[int, int]]:
        return batch_key, (self.epoch, self.batch)


def batch_key(epoch: int, batch: int) -> BatchKey:
    """The key of batch ``batch`` of epoch ``epoch`` (what the loader samples it with):
    ``mix_key(epoch, batch)`` as a :class:`BatchKey`."""
    k = BatchKey(mix_key(epoch, batch))
    k.epoch, k.batch = int(epoch), int(batch)
    return k


@njit(inline="always", cache=True)
def draw(key, v, j):
    """Draw ``j`` of vertex ``v`` in stream ``key`` (uint64)."""
    # Two rounds so that nearby (v, j) pairs decorrelate.
    return draw_at(key, vertex_base(v), j)


@njit(inline="always", cache=True)
def vertex_base(v):
    """The per-vertex part of :func:`draw`'s counter (uint64), for a kernel that draws many
    times for one vertex: ``draw(key, v, j) == draw_at(key, vertex_base(v), j)``."""
    return np.uint64(v) * np.uint64(0x100000001B3)


@njit(inline="always", cache=True)
def draw_at(key, base, j):
    """:func:`draw` from ``base = vertex_base(v)`` (uint64)."""
    return splitmix64(key ^ splitmix64(base + np.uint64(j)))


def draw_at_ref(key: int, base: int, j: int) -> int:
    """Reference twin of :func:`draw_at` on Python ints."""
    return splitmix64_ref(key ^ splitmix64_ref((base + j) & MASK64))


def vertex_base_ref(v: int) -> int:
    """Reference twin of :func:`vertex_base` on Python ints."""
    return (v * 0x100000001B3) & MASK64


def draw_ref(key: int, v: int, j: int) -> int:
    """Reference twin of :func:`draw` on Python ints."""
    return splitmix64_ref(key ^ splitmix64_ref((v * 0x100000001B3 + j) & MASK64))


register(splitmix64, splitmix64_ref)
register(draw, draw_ref)
register(draw_at, draw_at_ref)
register(vertex_base, vertex_base_ref)
