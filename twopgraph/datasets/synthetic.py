"""Deterministic synthetic graphs with the structure of real ones, as :class:`GraphData`.

The model is a hierarchical, degree-corrected stochastic block model:

* **Communities** of skewed (log-normal) sizes; each community has a dominant class, and every
  class owns several communities. Class frequencies are skewed too (Zipf).
* **Power-law degrees**: each vertex has a Pareto weight ``w`` (tail exponent
  ``degree_exponent``, capped at ``max_degree_ratio`` times the mean). A vertex starts
  ``Poisson(w)``-many edges (at least one); the other end is drawn proportionally to weight,
  inside the source's community with probability ``p_in``, among the communities of the same
  class with probability ``p_class``, anywhere otherwise. A share ``local_frac`` of the
  in-community edges stays within a window of about the mean degree around the source in the
  community's (hidden) order, which gives the nested, multi-scale locality of real graphs (and their
  clustering): METIS finds good cuts at any number of parts, not only at community borders.
  Self loops and duplicates are dropped, and sampling is topped up until exactly
  ``num_edges`` undirected edges remain.
* **Labels** follow the community's class, except that with probability ``label_noise`` a
  vertex takes a uniformly random class.
* **Features** are ``class_signal`` x (centroid of the vertex's label) + ``community_signal``
  x (centroid of its community) + Gaussian noise of standard deviation ``feature_noise`` per
  dimension (centroids have unit norm). Raw features are a weak predictor; averaging over
  neighbours (what a GNN does) is a much better one.
* **No id locality**: vertices are generated community by community, then renumbered by a
  random permutation, so neither communities nor classes are contiguous id ranges. Locality
  has to be found (e.g. by METIS), as in real datasets.

The same spec and seed give byte-identical arrays (one NumPy generator per stage, fixed chunk
sizes, no threads). Splits are uniformly random, sorted int64 ids.

Example::

    >>> data = generate("synthetic-tiny")
    >>> data.name, data.num_nodes, data.graph.num_edges // 2, data.num_features
    ('synthetic-tiny', 2000, 10000, 16)
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np
from numpy.typing import DTypeLike

from twopgraph.core.fingerprint import fingerprint
from twopgraph.errors import ConfigError
from twopgraph.graph.data import CSRGraph, GraphData

# Bump whenever the generator's output changes for a given spec: it is part of
# spec_fingerprint, so cached datasets made by an older version are then regenerated instead
# of silently reused.
GENERATOR_VERSION = 2
# SyntheticSpec fields that do not change the generated arrays (left out of spec_fingerprint).
_LABEL_FIELDS = ("name", "description")
_CHUNK = 1 << 22  # samples / rows per vectorised step: bounds temporaries, fixes the RNG order
_MAX_ROUNDS = 12  # top-up rounds before giving up on hitting num_edges exactly


@dataclass(frozen=True)
class SyntheticSpec:
    """Parameters of one synthetic dataset (see the module docstring for the model).

    Sizes: ``num_nodes``; ``num_edges`` undirected edges after removing self loops and
    duplicates (the CSR holds twice as many entries); ``num_features``; ``num_classes``;
    ``num_communities`` (mean size ``num_nodes / num_communities``, at least
    ``min_community_size`` each). Splits: ``train_frac``, ``val_frac``, and ``test_frac``
    (``None``: all remaining vertices).

    Structure knobs (defaults in brackets): ``p_in`` [0.9] probability that an edge stays in
    its source's community, ``p_class`` [0.05] that it goes to another community of the same
    class; ``local_frac`` [0.7] share of the in-community edges that go to a vertex at most
    ``local_window`` [1.0] x (mean degree) positions away from the source in the community's
    hidden order (narrower windows saturate into cliques); ``degree_exponent`` [2.3]
    exponent gamma of the degree tail ``P(d) ~ d^-gamma``;
    ``max_degree_ratio`` [300] cap on a vertex's expected degree relative to the mean;
    ``community_size_sigma`` [1.0] log-normal spread of community sizes; ``class_skew`` [0.8]
    Zipf exponent of class frequencies; ``label_noise`` [0.15] probability of a uniformly random
    label; ``class_signal`` [1.0], ``community_signal`` [0.5], ``feature_noise`` [0.5]
    (per-dimension standard deviation) of the features. ``seed`` [0]; ``name`` becomes
    ``GraphData.name``.

    Example::

        >>> spec = replace(SYNTHETIC_PRESETS["synthetic-tiny"], num_nodes=500, num_edges=2000)
        >>> generate(spec).num_nodes
        500
    """

    num_nodes: int
    num_edges: int
    num_features: int
    num_classes: int
    num_communities: int
    train_frac: float
    val_frac: float
    test_frac: float | None = None
    p_in: float = 0.9
    p_class: float = 0.05
    local_frac: float = 0.7
    local_window: float = 1.0
    degree_exponent: float = 2.3
    max_degree_ratio: float = 300.0
    community_size_sigma: float = 1.0
    min_community_size: int = 8
    class_skew: float = 0.8
    label_noise: float = 0.15
    class_signal: float = 1.0
    community_signal: float = 0.5
    feature_noise: float = 0.5
    seed: int = 0
    name: str = "synthetic"
    description: str = ""

    def __post_init__(self) -> None:
        for f in ("num_nodes", "num_edges", "num_features", "num_classes", "num_communities",
                  "min_community_size", "seed"):
            v = getattr(self, f)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
                raise ConfigError(f"SyntheticSpec.{f} must be an int, got {v!r}")
        n = self.num_nodes
        if not 2 <= n < 2**31:
            raise ConfigError(f"SyntheticSpec.num_nodes must be in [2, 2**31), got {n}")
        if not 0 < self.num_edges <= n * (n - 1) // 4:
            raise ConfigError(f"SyntheticSpec.num_edges must be in [1, N(N-1)/4 = "
                              f"{n * (n - 1) // 4}] for N = {n}, got {self.num_edges}")
        if self.num_features < 1 or self.num_classes < 2:
            raise ConfigError("SyntheticSpec needs num_features >= 1 and num_classes >= 2, got "
                              f"{self.num_features} and {self.num_classes}")
        if not self.num_classes <= self.num_communities:
            raise ConfigError(f"SyntheticSpec.num_communities ({self.num_communities}) must be "
                              f">= num_classes ({self.num_classes})")
        if self.num_communities * max(self.min_community_size, 1) > n:
            raise ConfigError(f"SyntheticSpec: {self.num_communities} communities of at least "
                              f"{self.min_community_size} vertices do not fit in {n} vertices")
        test = 0.0 if self.test_frac is None else self.test_frac
        for f, v in (("train_frac", self.train_frac), ("val_frac", self.val_frac),
                     ("test_frac", test), ("p_in", self.p_in), ("p_class", self.p_class),
                     ("local_frac", self.local_frac),
                     ("label_noise", self.label_noise)):
            if not 0.0 <= v <= 1.0:
                raise ConfigError(f"SyntheticSpec.{f} must be in [0, 1], got {v}")
        if self.train_frac <= 0 or self.train_frac + self.val_frac + test > 1.0 + 1e-9:
            raise ConfigError("SyntheticSpec: need train_frac > 0 and train+val+test <= 1, got "
                              f"{self.train_frac} + {self.val_frac} + {test}")
        if not self.local_window > 0:
            raise ConfigError(f"SyntheticSpec.local_window must be > 0, got {self.local_window}")
        if self.p_in + self.p_class > 1.0 + 1e-9:
            raise ConfigError(f"SyntheticSpec: p_in + p_class must be <= 1, got "
                              f"{self.p_in} + {self.p_class}")
        if self.degree_exponent <= 2.0 or self.max_degree_ratio < 1.0:
            raise ConfigError("SyntheticSpec needs degree_exponent > 2 and max_degree_ratio >= 1, "
                              f"got {self.degree_exponent} and {self.max_degree_ratio}")
        for f in ("community_size_sigma", "class_skew", "class_signal", "community_signal",
                  "feature_noise"):
            if getattr(self, f) < 0:
                raise ConfigError(f"SyntheticSpec.{f} must be >= 0, got {getattr(self, f)}")


def _preset(name: str, **kw) -> SyntheticSpec:
    return SyntheticSpec(name=name, **kw)


SYNTHETIC_PRESETS: dict[str, SyntheticSpec] = {
    "synthetic-tiny": _preset(
        "synthetic-tiny", num_nodes=2_000, num_edges=10_000, num_features=16, num_classes=5,
        num_communities=20, train_frac=0.5, val_frac=0.25, max_degree_ratio=25.0,
        feature_noise=0.8,
        description="2k vertices, 10k edges, 5 classes: unit tests (generates in ~10 ms)"),
    "synthetic-small": _preset(
        "synthetic-small", num_nodes=100_000, num_edges=1_200_000, num_features=100,
        num_classes=47, num_communities=400, train_frac=0.2, val_frac=0.1,
        max_degree_ratio=100.0,
        description="100k vertices, 1.2M edges, 47 classes: the default for `twopgraph train`"),
    "synthetic-products": _preset(
        "synthetic-products", num_nodes=2_449_029, num_edges=61_859_140, num_features=100,
        num_classes=47, num_communities=2_450, train_frac=0.08, val_frac=0.02,
        max_degree_ratio=350.0,
        description="ogbn-products scale: 2.45M vertices, 61.9M edges, 47 classes "
                    "(~1 min to generate, ~4 GiB peak)"),
}


def generate(spec_or_name: SyntheticSpec | str, seed: int | None = None,
             progress: bool = False) -> GraphData:
    """Generate a synthetic dataset from a preset name or a :class:`SyntheticSpec`.

    ``seed`` (default: the spec's) overrides ``spec.seed``; ``progress`` shows a tqdm bar on
    stderr. Unknown preset names raise :class:`ConfigError`. The result is a symmetric CSR
    (sorted rows, int32 indices, no self loops or duplicates) with float32 features, int64
    labels and sorted, disjoint int64 splits; ``GraphData.name`` is the spec's name.
    """
    if isinstance(spec_or_name, str):
        if spec_or_name not in SYNTHETIC_PRESETS:
            raise ConfigError(f"unknown synthetic dataset '{spec_or_name}'; known: "
                              f"{', '.join(SYNTHETIC_PRESETS)}")
        spec = SYNTHETIC_PRESETS[spec_or_name]
    elif isinstance(spec_or_name, SyntheticSpec):
        spec = spec_or_name
    else:
        raise TypeError(f"generate() takes a preset name or a SyntheticSpec, "
                        f"got {type(spec_or_name).__name__}")
    if seed is not None:
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
            raise ConfigError(f"seed must be a non-negative int, got {seed!r}")
        spec = replace(spec, seed=int(seed))
    return _generate(spec, progress)


def spec_summary(spec: SyntheticSpec) -> dict:
    """The spec as a plain dict (for logs and ``metrics.json``)."""
    return {f.name: getattr(spec, f.name) for f in fields(spec)}


def spec_fingerprint(spec: SyntheticSpec) -> str:
    """Provenance fingerprint (:mod:`twopgraph.core.fingerprint`) of what ``generate(spec)``
    returns: every field of ``spec`` that changes the arrays (all but ``name`` and
    ``description``) and :data:`GENERATOR_VERSION`. Costs microseconds (no generation)."""
    params = {k: v for k, v in spec_summary(spec).items() if k not in _LABEL_FIELDS}
    return fingerprint("synthetic", {"spec": params, "generator_version": GENERATOR_VERSION})


def edge_homophily(graph: CSRGraph, label: np.ndarray) -> float:
    """Fraction of (directed) CSR entries whose two endpoints share a label."""
    if graph.num_edges == 0:
        return 0.0
    src_label = np.repeat(label, graph.degrees())
    return float(np.mean(src_label == label[graph.indices]))


# -- implementation ------------------------------------------------------------------------------
class _Stages:
    """A tqdm bar over named stages (a no-op without ``progress``)."""

    def __init__(self, name: str, total: int, enabled: bool) -> None:
        self.bar = None
        if enabled:
            from tqdm import tqdm
            self.bar = tqdm(total=total, desc=name, file=sys.stderr, unit="step", leave=True)

    def start(self, what: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(what, refresh=True)

    def done(self, steps: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(steps)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@dataclass
class _Layout:
    """Vertices in generation order: classes, then communities, are contiguous id ranges."""

    comm_start: np.ndarray   # int64 (K+1): community k is [comm_start[k], comm_start[k+1])
    comm_class: np.ndarray   # int64 (K): dominant class of each community, non-decreasing
    class_start: np.ndarray  # int64 (C+1): class j owns communities [class_start[j], [j+1])
    vertex_comm: np.ndarray  # int32 (N)
    weight: np.ndarray       # float64 (N): Pareto degree weights


def _generate(spec: SyntheticSpec, progress: bool) -> GraphData:
    arrays = {}

    def put(name, shape, dtype, chunks):  # filled chunk by chunk (one copy of each array)
        out = np.empty(shape, dtype=dtype)
        a = 0
        for c in chunks:
            out[a:a + c.shape[0]] = c
            a += c.shape[0]
        arrays[name] = out

    _stream(spec, progress, put)
    return GraphData(graph=CSRGraph(arrays["indptr"], arrays["indices"]), feat=arrays["feat"],
                     label=arrays["label"], train_idx=arrays["train_idx"],
                     val_idx=arrays["val_idx"], test_idx=arrays["test_idx"], name=spec.name,
                     num_classes=spec.num_classes)


def write_store(spec: SyntheticSpec, folder: str | os.PathLike, *, source: dict | None = None,
                progress: bool = False, feat_dtype: DTypeLike | None = None) -> Path:
    """Generate ``spec`` straight into a dataset store at ``folder``
    (:mod:`twopgraph.store.reader`): each array is written as the generator makes it, the features
    and the CSR's ``indices`` chunk by chunk, so memory holds the generator's own arrays (the
    edge keys, the layout) and one chunk, never a copy of the dataset. The arrays are those of
    :func:`generate` (byte for byte: the same fingerprint); ``feat_dtype`` ``float16`` stores
    the features rounded to float16 (refused beyond its range). ``source`` is recorded in
    ``store.json``. Written under a temporary name and renamed when complete; returns the
    folder."""
    from twopgraph.store.writer import StoreWriter, half_checked
    half = feat_dtype is not None and np.dtype(feat_dtype) == np.float16
    with StoreWriter(folder) as w:
        def put(name, shape, dtype, chunks):
            if name == "feat" and half:
                chunks, dtype = half_checked(chunks, f"{spec.name} features"), np.float16
            w.put(name, shape, dtype, chunks)

        _stream(spec, progress, put)
        meta = {"name": spec.name, "num_classes": int(spec.num_classes), "source": source,
                "derived": None}
        # validated once (features finite, labels, splits); undirected by construction
        return w.commit(meta, validate=True, undirected=True)


def _stream(spec: SyntheticSpec, progress: bool, put) -> None:
    """Generate ``spec``, handing each array to ``put(name, shape, dtype, chunks)`` as soon as
    it is made (``chunks``: arrays whose concatenation along axis 0 is the array, consumed
    before ``put`` returns); what :func:`generate` and :func:`write_store` share."""
    rng_layout, rng_edges, rng_label, rng_feat, rng_split = (
        np.random.default_rng(s) for s in np.random.SeedSequence(spec.seed).spawn(5))
    n = spec.num_nodes
    stages = _Stages(spec.name, total=6, enabled=progress)
    try:
        stages.start("communities")
        layout = _make_layout(spec, rng_layout)
        # perm[new] = old: the random renumbering that removes id locality.
        perm = rng_layout.permutation(n).astype(np.int32)
        inv = np.empty(n, dtype=np.int32)
        inv[perm] = np.arange(n, dtype=np.int32)
        stages.done()

        stages.start("edges")
        keys = _sample_edge_keys(spec, layout, inv, rng_edges, stages)
        stages.done()
        del inv

        stages.start("csr")
        e = keys.shape[0]
        keys.resize((2 * e,), refcheck=False)  # in place where it can grow (no second copy)
        directed, keys = keys, None
        indptr = _symmetric_keys(directed, e, n)
        put("indptr", indptr.shape, np.int64, [indptr])
        del indptr
        put("indices", (2 * e,), np.int32 if n < 2**31 else np.int64,
            _index_chunks(directed, n))
        del directed
        stages.done()

        stages.start("labels")
        comm = layout.vertex_comm[perm]  # community of each new id
        del perm
        label = layout.comm_class[comm]
        noisy = rng_label.random(n) < spec.label_noise
        label[noisy] = rng_label.integers(0, spec.num_classes, int(noisy.sum()))
        del noisy
        put("label", label.shape, np.int64, [label])
        stages.done()

        stages.start("features")
        put("feat", (n, spec.num_features), np.float32,
            _feature_chunks(spec, label, comm, rng_feat))
        del comm, label
        stages.done()

        stages.start("splits")
        for key, idx in zip(("train_idx", "val_idx", "test_idx"), _splits(spec, rng_split)):
            put(key, idx.shape, np.int64, [idx])
        stages.done()
    finally:
        stages.close()


def _make_layout(spec: SyntheticSpec, rng: np.random.Generator) -> _Layout:
    n, k, c = spec.num_nodes, spec.num_communities, spec.num_classes
    # Community sizes: log-normal shares of what is left after the minimum sizes.
    share = rng.lognormal(0.0, spec.community_size_sigma, k)
    sizes = spec.min_community_size + rng.multinomial(n - k * spec.min_community_size,
                                                      share / share.sum())
    # Dominant classes: every class gets one community, the rest follow Zipf frequencies.
    freq = 1.0 / np.arange(1, c + 1, dtype=np.float64) ** spec.class_skew
    comm_class = np.concatenate([np.arange(c), rng.choice(c, k - c, p=freq / freq.sum())])
    comm_class = comm_class[rng.permutation(k)]
    # Lay communities out class by class so that "same class" is a contiguous range too.
    order = np.argsort(comm_class, kind="stable")
    comm_class, sizes = comm_class[order].astype(np.int64), sizes[order]
    comm_start = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(sizes, out=comm_start[1:])
    class_bounds = np.searchsorted(comm_class, np.arange(c + 1))  # communities of class j
    vertex_comm = np.repeat(np.arange(k, dtype=np.int32), sizes)
    # Pareto weights, P(w > x) = x^-(gamma-1) for x >= 1, capped relative to the mean.
    tail = spec.degree_exponent - 1.0
    weight = (1.0 - rng.random(n)) ** (-1.0 / tail)
    np.minimum(weight, spec.max_degree_ratio * tail / (tail - 1.0), out=weight)
    return _Layout(comm_start=comm_start, comm_class=comm_class, class_start=class_bounds,
                   vertex_comm=vertex_comm, weight=weight)


def _sample_edge_keys(spec: SyntheticSpec, layout: _Layout, inv: np.ndarray,
                      rng: np.random.Generator, stages: _Stages) -> np.ndarray:
    """Sorted unique undirected keys ``min*N + max`` (new ids), exactly ``num_edges`` of them.

    Samples in rounds: the first aims a little above the target; each later round tops up the
    deficit, scaled by the fraction of fresh (non-duplicate) edges the previous round gave.
    A final overshoot is trimmed by dropping uniformly random edges. A spec too dense to reach
    its target in ``_MAX_ROUNDS`` rounds keeps the edges found so far.
    """
    target = spec.num_edges
    keys = np.empty(0, dtype=np.int64)
    want = target * 1.25  # in-community duplicates (hubs) cost a good share of the samples
    for rnd in range(_MAX_ROUNDS):
        stages.start(f"edges {keys.shape[0] / target:.0%}, round {rnd + 1}")
        new, drawn = _sample_round(spec, layout, inv, rng, want, floor_one=(rnd == 0))
        before = keys.shape[0]
        keys = _sorted_unique(np.concatenate([keys, new]) if before else new)
        del new
        gained = keys.shape[0] - before
        if keys.shape[0] >= target:
            break
        fresh = max(gained / max(drawn, 1), 0.05)
        want = (target - keys.shape[0]) / fresh * 1.3 + 100  # later rounds dedup worse
    excess = keys.shape[0] - target
    if excess > 0:
        drop = rng.choice(keys.shape[0], excess, replace=False)
        keys = np.delete(keys, drop)
    return keys


def _sample_round(spec: SyntheticSpec, layout: _Layout, inv: np.ndarray,
                  rng: np.random.Generator, want: float, floor_one: bool):
    """One round of about ``want`` edge samples; returns (keys, number drawn).

    Each vertex gets ``Poisson(w * want / W)`` stubs (``floor_one``: at least one); ``src``
    lists the stubs in vertex order, so a community's (class's) stubs are a contiguous slice
    and drawing a random stub of the slice picks a vertex proportionally to its weight.
    """
    n, w = spec.num_nodes, layout.weight
    counts = rng.poisson(w * (want / w.sum()))
    if floor_one:
        np.maximum(counts, 1, out=counts)
    stub_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=stub_ptr[1:])
    total = int(stub_ptr[-1])
    src = np.repeat(np.arange(n, dtype=np.int32), counts)
    del counts
    # Stub ranges of each community and of each community's class.
    comm_lo = stub_ptr[layout.comm_start[:-1]]
    comm_hi = stub_ptr[layout.comm_start[1:]]
    cls_of = layout.comm_class
    cls_lo = stub_ptr[layout.comm_start[layout.class_start[cls_of]]]
    cls_hi = stub_ptr[layout.comm_start[layout.class_start[cls_of + 1]]]
    del stub_ptr
    p_local, p_in, p_cls = spec.p_in * spec.local_frac, spec.p_in, spec.p_in + spec.p_class
    # Window half-width in stubs: local_window x mean degree vertices x stubs per vertex.
    half = max(1, int(round(spec.local_window * (2 * spec.num_edges / n) * total / n)))
    out = []
    for a in range(0, total, _CHUNK):
        s = src[a:a + _CHUNK]
        c = layout.vertex_comm[s]
        mode = rng.random(s.shape[0])
        r = rng.random(s.shape[0])
        lo = np.where(mode < p_in, comm_lo[c], np.where(mode < p_cls, cls_lo[c], 0))
        hi = np.where(mode < p_in, comm_hi[c], np.where(mode < p_cls, cls_hi[c], total))
        del c
        pos = lo + (r * (hi - lo)).astype(np.int64)
        np.minimum(pos, hi - 1, out=pos)
        # Local edges: a stub at most `half` stubs away, wrapping around the community.
        li = np.flatnonzero(mode < p_local)
        del mode
        if li.shape[0]:
            off = np.rint((2.0 * r[li] - 1.0) * half).astype(np.int64)
            lo_l = lo[li]
            pos[li] = lo_l + (li + (a + off) - lo_l) % (hi[li] - lo_l)
            del off, lo_l
        del lo, hi, r, li
        u = inv[s]
        v = inv[src[pos]]
        del pos
        keep = u != v
        u, v = u[keep], v[keep]
        small = np.minimum(u, v).astype(np.int64)
        small *= n
        small += np.maximum(u, v)
        out.append(small)
        del u, v, keep
    del src
    keys = np.concatenate(out) if out else np.empty(0, dtype=np.int64)
    return keys, total


def _sorted_unique(keys: np.ndarray) -> np.ndarray:
    """Sort in place and drop repeats (cheaper than ``np.unique`` at 10^8 keys)."""
    keys.sort()
    if keys.shape[0] < 2:
        return keys
    keep = np.empty(keys.shape[0], dtype=bool)
    keep[0] = True
    np.not_equal(keys[1:], keys[:-1], out=keep[1:])
    return keys[keep]


def _symmetric_keys(directed: np.ndarray, e: int, n: int) -> np.ndarray:
    """``directed`` (int64, 2E) holds the sorted unique undirected keys ``u*N + v`` (u < v) in
    its first half: fill the second half with the reversed keys ``v*N + u``, sort the whole
    in place (row-major CSR order) and return ``indptr`` (int64, N+1)."""
    deg = np.zeros(n, dtype=np.int64)
    for a in range(0, e, _CHUNK):
        k = directed[a:min(a + _CHUNK, e)]
        u = k // n
        v = k - u * n
        directed[e + a:e + a + k.shape[0]] = v * n + u
        deg += np.bincount(u, minlength=n)
        deg += np.bincount(v, minlength=n)
    directed.sort()
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(deg, out=indptr[1:])
    return indptr


def _index_chunks(directed: np.ndarray, n: int):
    """The CSR's ``indices`` (int32 when N < 2^31) of the sorted directed keys, chunk by
    chunk."""
    dtype = np.int32 if n < 2**31 else np.int64
    for a in range(0, directed.shape[0], _CHUNK):
        chunk = np.empty(min(_CHUNK, directed.shape[0] - a), dtype=dtype)
        np.remainder(directed[a:a + _CHUNK], n, out=chunk, casting="unsafe")
        yield chunk


def _feature_chunks(spec: SyntheticSpec, label: np.ndarray, comm: np.ndarray,
                    rng: np.random.Generator):
    """The rows of :func:`_features`, a block of ``_CHUNK // F`` rows at a time (the same
    random stream, whatever consumes them)."""
    f = spec.num_features
    scale = np.float32(1.0 / np.sqrt(f))  # unit-norm centroids (in expectation)
    class_c = (rng.standard_normal((spec.num_classes, f), dtype=np.float32)
               * (scale * np.float32(spec.class_signal)))
    comm_c = (rng.standard_normal((spec.num_communities, f), dtype=np.float32)
              * (scale * np.float32(spec.community_signal)))
    rows = max(1, _CHUNK // f)
    noise = np.float32(spec.feature_noise)
    for a in range(0, spec.num_nodes, rows):
        block = rng.standard_normal((min(rows, spec.num_nodes - a), f), dtype=np.float32)
        block *= noise
        block += class_c[label[a:a + rows]]
        block += comm_c[comm[a:a + rows]]
        yield block


def _splits(spec: SyntheticSpec, rng: np.random.Generator):
    n = spec.num_nodes
    order = rng.permutation(n)
    n_train = max(1, int(round(spec.train_frac * n)))
    n_val = int(round(spec.val_frac * n))
    n_train, n_val = min(n_train, n), min(n_val, n - min(n_train, n))
    rest = n - n_train - n_val
    n_test = rest if spec.test_frac is None else min(int(round(spec.test_frac * n)), rest)
    parts = np.split(order[:n_train + n_val + n_test], [n_train, n_train + n_val])
    return tuple(np.sort(p).astype(np.int64) for p in parts)
