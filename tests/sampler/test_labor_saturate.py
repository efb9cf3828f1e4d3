"""LABOR's scale solve with its shortcut (``_saturate_from``: rounds that would not change the
saturated set are skipped) against the twin that runs every round, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from twopgraph.sampler.labor_pi import _saturate_from, _solve_row_ref


@njit(cache=False)
def _solve(buf, d, k):
    rest = 0.0
    pmax = 0.0
    for j in range(d):
        rest += buf[j]
        pmax = max(pmax, buf[j])
    return _saturate_from(buf, d, k, rest, pmax)


def _rows(rng):
    """Rows whose scales saturate none, some or most entries over several rounds."""
    for _ in range(400):
        d = int(rng.integers(2, 200))
        kind = rng.integers(0, 5)
        if kind == 0:  # LABOR-1-like: min(1, k / dmin)
            row = np.minimum(1.0, 10.0 / rng.integers(1, 300, d))
        elif kind == 1:  # heavy tail: a few entries dominate, several rounds
            row = rng.pareto(0.7, d) + 1e-3
            row /= row.max()
        elif kind == 2:  # all equal
            row = np.full(d, rng.uniform(0.01, 1.0))
        elif kind == 3:  # ones and tiny values
            row = np.where(rng.random(d) < 0.3, 1.0, rng.uniform(1e-4, 1e-2, d))
        else:
            row = rng.random(d) ** 4 + 1e-12
        yield row.astype(np.float64), int(rng.integers(0, d))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shortcut_equals_every_round(seed):
    rng = np.random.default_rng(seed)
    for row, k in _rows(rng):
        d = row.shape[0]
        want = _solve_row_ref(row, np.arange(d), 0, d, k)
        got = _solve(row, d, k)
        assert got == want or (np.isnan(got) and np.isnan(want)), (row.tolist(), k, got, want)


def test_saturating_rows_take_several_rounds():
    """A row where the first scale saturates some entries and a later one more: the shortcut
    must still run those rounds."""
    row = np.array([1.0, 0.9, 0.5, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05])
    for k in range(0, 10):
        assert _solve(row, 10, k) == _solve_row_ref(row, np.arange(10), 0, 10, k)
