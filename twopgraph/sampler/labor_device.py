"""``labor-device``: the torch twin of ``labor`` (layer-neighbour sampling) on a torch device.

:class:`TorchLaborSampler` draws *the same mini-batches* as the numba
:class:`~twopgraph.sampler.labor.LaborSampler` with the same ``seed``, ``key`` and options
(identical ``input_nodes``, block CSRs and ``edge_weight``) with vectorised torch ops, on the
CPU (how CI tests it) or on a GPU. It evaluates the same arithmetic as
:mod:`.labor_kernels`, edge by edge, over all in-edges of a layer's dsts:

1. **Scales** (:func:`_scales`). LABOR-0: ``c_s = fanout / d_s`` for ``d_s > fanout``, else
   ``inf`` (keep all). LABOR-* (``iterations >= 1``): the candidates (distinct neighbours of
   the layer) are numbered by ``torch.unique``; from ``pi = 1`` each round solves every row's
   ``c_s`` with ``sum_e min(1, c_s pi_t) = fanout`` by the kernel's saturation loop, run for all
   rows at once until none changes (one host sync per loop round), then raises
   ``pi_t = max_s min(1, c_s pi_t)`` (a ``scatter_reduce`` ``amax``: exact, in any order). The
   float row sums (:class:`RowSums`) go through ``index_add_`` on the CPU, which adds in edge
   order as the kernel does: the same floats. On CUDA ``index_add_`` adds floats with atomics
   in no fixed order, so the sums -- and through the solve every kept edge and weight -- could
   change from run to run; there they take the fixed pairwise order of :func:`tree_row_sum`
   instead (no atomics: the same bits on every run). Integer sums (saturated-edge counts,
   kept-edge counts) stay on ``index_add_``: exact in any order.
2. **Keep** edge ``(s, t)`` iff ``r_t <= min(1, c_s pi_t)`` with the counter-based variate
   ``r_t`` of :func:`variates_torch` (the uniform of one draw, or for batch dependency two
   Box-Muller normals mixed and mapped through ``Phi``), weight ``1 / min(1, c_s pi_t)``
   normalised over the row's kept edges (float64, then float32 as the numba sampler).
3. **Relabel** the kept neighbours as the neighbour twin does (first appearance, no sort).

Determinism and equality with ``labor``: the batches depend only on ``(seed, key, options)``
and the device -- the same on every run, whatever the thread count or the GPU's scheduling
(every reduction is exact or in a fixed order; ``torch.unique``, the ``amax``/``amin``
scatters, ``nonzero`` and the cumulative sums of integers are exact). On the CPU they equal
``labor``'s bit for bit. On CUDA they can differ from ``labor`` in two places, both at the
level of rounding:

- the float row sums of rows longer than 3 entries are added pairwise, not sequentially: a
  relative difference of a few ``2^-53`` in ``c_s``, so a kept edge differs only where the
  variate ``r_t`` lies within that of ``min(1, c_s pi_t)`` (probability ~1e-15 per edge), and
  an ``edge_weight`` (normalised in float64, stored as float32) differs by one float32 ulp
  where the float64 value lies that close to a float32 rounding boundary (~1 edge in 10^9);
- the uniform variates are bit-identical to the kernel's; the batch-dependent ones
  (``--labor-batch-dependency > 1``) go through the device's ``log``/``cos``/``erfc``
  (CUDA documents at most 1, 2 and 5 ulp of error for them in double precision; glibc's are
  within about 1 ulp), so ``r_t`` may differ by several ``2^-53`` relative, which again moves
  a kept edge only where ``r_t`` lies that close to ``min(1, c_s pi_t)`` (~1e-14 per edge).

The CPU tests run the CUDA order (``row_sums = "tree"``) against ``labor``: the same batches,
every weight equal, on their graphs.

Host synchronisations per hop: the number of in-edges of the dsts (sizes the edge tensors;
read together with the longest row, which bounds the pairwise rounds), the number of kept
edges, the number of vertices after the hop, plus one per round of the
saturation loop (LABOR-*). Memory on ``device`` as :class:`~.device.TorchNeighborSampler`
(CSR, degrees, an ``8 N``-byte relabelling map per thread) plus ``O(in-edges of the dsts)``
float64/int64 temporaries per hop -- LABOR reads every in-edge of a dst, not ``fanout`` draws.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import torch

from twopgraph.core.minibatch import MiniBatch
from twopgraph.core.protocols import SAMPLERS
from twopgraph.graph.data import CSRGraph
from twopgraph.sampler.device import TorchNeighborSampler, _rows, _shr, draw_torch
from twopgraph.sampler.labor import _FRESH_STREAM, LaborSampler, _check_options
from twopgraph.sampler.labor_variates import _BELOW_ONE, _SQRT_HALF, _TWO_PI, _UNIT


def variates_torch(key0: int, key1: int, ca: float, cb: float, smooth: bool,
                   t: torch.Tensor) -> torch.Tensor:
    """:func:`~twopgraph.sampler.labor_variates.variate` of every vertex of ``t`` (int64):
    float64 in [0, 1), on ``t``'s device."""
    if not smooth:
        return _shr(draw_torch(key0, t, 0), 11).to(torch.float64) * _UNIT

    def normal(key: int) -> torch.Tensor:
        u1 = (_shr(draw_torch(key, t, 0), 11).to(torch.float64) + 1.0) * _UNIT
        u2 = _shr(draw_torch(key, t, 1), 11).to(torch.float64) * _UNIT
        return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(_TWO_PI * u2)

    z = ca * normal(key0) + cb * normal(key1)
    r = 0.5 * torch.special.erfc(-z * _SQRT_HALF)
    return r.clamp_(max=_BELOW_ONE)


def _row_sum(values: torch.Tensor, row: torch.Tensor, n: int) -> torch.Tensor:
    """Per-row sums of per-edge ``values`` (``row[e]`` = the row of edge ``e``, in order) by
    ``index_add_``: exact for integers anywhere; for floats the kernel's sequential order on
    the CPU only (CUDA adds floats with atomics, in no fixed order: :class:`RowSums`)."""
    return torch.zeros(n, dtype=values.dtype, device=values.device).index_add_(0, row, values)


def tree_row_sum(values: torch.Tensor, offsets: torch.Tensor, row: torch.Tensor,
                 max_len: int) -> torch.Tensor:
    """Per-row sums of ``values`` (the entries of a CSR with ``offsets``, n + 1 int64; ``row``
    = each entry's row; ``max_len`` >= the longest row) in a fixed pairwise order, with no
    atomics: the same bits on every run and on every device (each step is one correctly
    rounded IEEE addition of the same two operands).

    The order is the pairwise tree of :func:`tree_row_sum_ref`: round ``r`` (``r = 0, 1,
    ..``) adds into each entry at row position ``p`` with ``p mod 2^(r+1) = 0`` the entry at
    ``p + 2^r`` (when it is in the row), so after ``ceil(log2 max_len)`` rounds a row's first
    entry holds its sum. ``O(E)`` elementwise work per round, no host synchronisation.
    Rows of 3 entries or fewer get the sequential (kernel) sum exactly; longer rows may
    differ from it in the last bits."""
    n = offsets.shape[0] - 1
    total = values.shape[0]
    if total == 0:
        return torch.zeros(n, dtype=values.dtype, device=values.device)
    start = offsets.index_select(0, row)
    pos = torch.arange(total, device=values.device) - start
    rest = offsets.index_select(0, row + 1) - start - pos  # entries from here to the row end
    acc = values.clone()
    step = 1
    while step < max_len:
        nxt = torch.zeros_like(acc)
        nxt[:-step] = acc[step:]
        take = ((pos & (2 * step - 1)) == 0) & (rest > step)
        acc = torch.where(take, acc + nxt, acc)
        step *= 2
    first = offsets[:-1].clamp(max=total - 1)
    return torch.where(offsets[1:] > offsets[:-1], acc.index_select(0, first),
                       torch.zeros((), dtype=values.dtype, device=values.device))


def tree_row_sum_ref(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """NumPy twin of :func:`tree_row_sum`: each row summed recursively, a row of ``m > 1``
    entries as (its first ``h``) + (the rest), ``h`` the largest power of two below ``m``."""
    def pairwise(v: np.ndarray):
        m = v.shape[0]
        if m == 1:
            return v[0]
        h = 1 << ((m - 1).bit_length() - 1)
        return pairwise(v[:h]) + pairwise(v[h:])

    out = np.zeros(offsets.shape[0] - 1, dtype=values.dtype)
    for i in range(out.shape[0]):
        if offsets[i + 1] > offsets[i]:
            out[i] = pairwise(values[offsets[i]:offsets[i + 1]])
    return out


class RowSums:
    """The float row sums of one hop's in-edges (grouped by row: ``offsets``, ``row``): on
    the CPU by ``index_add_`` in edge order -- the kernel's sequential sums, bit for bit --
    or, with ``tree`` (every non-CPU device: CUDA's ``index_add_`` adds floats with atomics
    in no fixed order, the run-to-run differences that made ``labor-device`` on CUDA
    non-deterministic), by :func:`tree_row_sum` (a fixed order; ``max_len`` >= the longest
    row). ``sums(values)`` sums per-edge values; ``sums.sub(offsets, row)`` the same for a
    subset of the edges (the kept ones), still grouped by row."""

    def __init__(self, offsets: torch.Tensor, row: torch.Tensor, max_len: int,
                 tree: bool) -> None:
        self.offsets, self.row, self.max_len, self.tree = offsets, row, max_len, tree

    def __call__(self, values: torch.Tensor) -> torch.Tensor:
        if self.tree:
            return tree_row_sum(values, self.offsets, self.row, self.max_len)
        return _row_sum(values, self.row, self.offsets.shape[0] - 1)

    def sub(self, offsets: torch.Tensor, row: torch.Tensor) -> RowSums:
        """The sums over a subset of the entries (at most as many per row)."""
        return RowSums(offsets, row, self.max_len, self.tree)


def _solve(pi_e: torch.Tensor, row: torch.Tensor, deg: torch.Tensor, k: int,
           sums: RowSums | None = None) -> torch.Tensor:
    """Every row's ``c`` with ``sum_e min(1, c pi_e) = k`` (``inf`` when ``d <= k``): the
    saturation loop of :func:`~twopgraph.sampler.labor_pi._solve_row`, all rows in step;
    a row stops where the kernel's does and keeps its ``c``. ``sums`` adds the float row
    sums (default: ``index_add_`` in edge order, the kernel's order on the CPU)."""
    n = deg.shape[0]
    if sums is None:
        sums = RowSums(torch.nn.functional.pad(torch.cumsum(deg, 0), (1, 0)), row, 0, False)
    active = deg > k
    c = torch.where(active, 0.0, math.inf).to(torch.float64)
    prev = torch.full((n,), -1, dtype=torch.int64, device=deg.device)
    rnd = 0
    while True:
        sat_e = c.index_select(0, row) * pi_e >= 1.0
        sat = _row_sum(sat_e.to(torch.int64), row, n)  # integers: exact in any order
        rest = sums(torch.where(sat_e, 0.0, pi_e))
        # the kernel's row loop runs at most d + 2 rounds
        step = active & ~((sat == prev) | (sat >= k) | (rest <= 0.0)) & (rnd < deg + 2)
        if not bool(step.any()):  # host sync: one per round
            return c
        c = torch.where(step, (k - sat) / rest, c)
        prev = torch.where(step, sat, prev)
        active = step
        rnd += 1


def _scales(nbr: torch.Tensor, row: torch.Tensor, deg: torch.Tensor, k: int,
            iterations: int, sums: RowSums | None = None
            ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(c, pi_e)``: the dsts' scales and each edge's neighbour importance (None: all 1) --
    :meth:`LaborSampler.layer_scales` over the layer's in-edges ``nbr`` (``row`` = their dst;
    ``sums``: the float row sums of :func:`_solve`)."""
    if iterations == 0 or k < 0:
        d = deg.to(torch.float64)
        c = torch.full_like(d, math.inf) if k < 0 else \
            torch.where(deg > k, k / d.clamp(min=1.0), math.inf)
        return c, None
    _, cand = torch.unique(nbr, return_inverse=True)
    num_cand = int(cand.max()) + 1 if cand.numel() else 0
    pi = torch.ones(num_cand, dtype=torch.float64, device=nbr.device)
    for it in range(iterations + 1):
        c = _solve(pi.index_select(0, cand), row, deg, k, sums)
        if it == iterations:
            return c, pi.index_select(0, cand)
        p = (c.index_select(0, row) * pi.index_select(0, cand)).clamp_(max=1.0)
        pi = torch.zeros_like(pi).scatter_reduce_(0, cand, p, "amax")


@SAMPLERS.register("labor-device")
class TorchLaborSampler(TorchNeighborSampler):
    """The torch twin of ``labor`` on the training device (the same batches).

    ``sample(seeds, key) -> MiniBatch`` with every tensor on ``device``: the blocks of
    :class:`~twopgraph.sampler.labor.LaborSampler` for the same ``(seed, key, options)``,
    ``edge_weight`` included. Options as ``labor`` (``--labor-iterations``,
    ``--labor-layer-dependency``, ``--labor-batch-dependency``); ``device`` as ``device``.
    ``--sampler labor`` switches to it where ``--sampler-device`` puts sampling on a GPU.

    Example::

        >>> from twopgraph.graph.data import CSRGraph
        >>> g = CSRGraph.from_edges([0, 0, 0, 1], [1, 2, 3, 2], num_nodes=4)
        >>> a = TorchLaborSampler(g, [2], seed=0).sample(np.array([0]), key=1)
        >>> b = LaborSampler(g, [2], seed=0).sample(np.array([0]), key=1)
        >>> torch.equal(a.blocks[0].edge_weight, b.blocks[0].edge_weight)
        True
    """

    options = LaborSampler.options
    variate_keys = LaborSampler.variate_keys
    #: How float row sums are added: ``auto`` (``index_add_`` in edge order on the CPU -- the
    #: kernel's sums --, the fixed pairwise order of :func:`tree_row_sum` elsewhere), ``tree``
    #: or ``sequential`` (``index_add_``) everywhere. An instance attribute may override it
    #: (tests run the CUDA order on the CPU with ``tree``).
    row_sums = "auto"
    _stream_index = staticmethod(LaborSampler._stream_index)

    def __init__(self, graph: CSRGraph, fanouts: Sequence[int], seed: int = 0,
                 degrees: np.ndarray | None = None, device: torch.device | str = "cpu",
                 iterations: int = 0, layer_dependency: bool = False,
                 batch_dependency: int = 1) -> None:
        super().__init__(graph, fanouts, seed=seed, degrees=degrees, device=device)
        self.iterations, self.layer_dependency, self.batch_dependency = _check_options(
            iterations, layer_dependency, batch_dependency)
        self._fresh = itertools.count()

    def sample(self, seeds: np.ndarray | torch.Tensor, key: int | None = None,
               parallel: bool = True) -> MiniBatch:
        """The blocks of ``seeds`` (unique global ids: a host array/tensor or an int64 tensor
        on ``device``); ``key`` as :meth:`LaborSampler.sample`. ``parallel`` is accepted for
        the protocol (torch picks the threads; the result never depends on it)."""
        seeds = self._check_seeds(seeds)
        if key is None:
            stream, index = _FRESH_STREAM, next(self._fresh)
        else:
            stream, index = self._stream_index(key)
        return self._sample_labor(seeds, stream, int(index))

    def _layer(self, nodes: torch.Tensor, hop: int, fanout: int, stream: int, index: int):
        """One hop: ``(offsets, nbrs, weights)`` as :func:`labor_kernels.labor_sample`."""
        dev = nodes.device
        n = nodes.shape[0]
        start = self.indptr.index_select(0, nodes)
        deg = self.indptr.index_select(0, nodes + 1) - start
        offsets = torch.zeros(n + 1, dtype=torch.int64, device=dev)
        torch.cumsum(deg, 0, out=offsets[1:])
        tree = self._tree_sums()
        if tree:  # host sync: the in-edge count sizes the edge tensors; + the longest row
            total, max_len = torch.stack([offsets[-1], deg.max()]).tolist()
        else:
            total, max_len = int(offsets[-1]), 0  # host sync: the in-edge count
        row = _rows(offsets, total)
        pos = torch.arange(total, device=dev) - offsets.index_select(0, row)
        nbr = self.indices.index_select(0, start.index_select(0, row) + pos).to(torch.int64)
        sums = RowSums(offsets, row, max_len, tree)
        c, pi_e = _scales(nbr, row, deg, fanout, self.iterations, sums)
        c_e = c.index_select(0, row)
        every = torch.isinf(c_e)
        p = (c_e if pi_e is None else c_e * pi_e).clamp_(max=1.0)
        key0, key1, ca, cb = self.variate_keys(stream, index, hop)
        r = variates_torch(key0, key1, ca, cb, self.batch_dependency > 1, nbr)
        keep = every | (r <= p)
        kept = keep.nonzero().squeeze(1)  # host sync: the kept-edge count
        krow = row.index_select(0, kept)
        counts = _row_sum(torch.ones_like(krow), krow, n)
        out = torch.zeros(n + 1, dtype=torch.int64, device=dev)
        torch.cumsum(counts, 0, out=out[1:])
        w = 1.0 / p.index_select(0, kept)
        w = w / sums.sub(out, krow)(w).index_select(0, krow)
        return out, nbr.index_select(0, kept), w.to(torch.float32)

    def _tree_sums(self) -> bool:
        """Whether float row sums take :func:`tree_row_sum`'s fixed order (:attr:`row_sums`
        ``tree``, or ``auto`` on any device but the CPU) rather than ``index_add_``."""
        if self.row_sums == "auto":
            return self.device.type != "cpu"
        return self.row_sums == "tree"

    def _sample_labor(self, seeds: torch.Tensor, stream: int, index: int) -> MiniBatch:
        return self._expand(seeds, lambda hop, fanout, nodes:
                            self._layer(nodes, hop, fanout, stream, index))
