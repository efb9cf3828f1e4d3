"""Generated graph families for ``--graph``: graphs of a known shape and any size, written once
as dataset ``.npz`` files under ``DATA_ROOT/bench/graphs/`` and read back as any dataset.

Specs (``N`` takes ``k``/``m`` suffixes: ``100k``, ``2.5m``):

- ``rmat:SCALE[:EDGEFACTOR]``: R-MAT / Kronecker (a=0.57, b=c=0.19; 2^SCALE vertices,
  EDGEFACTOR x 2^SCALE generated edges, default 16; ids permuted): power-law degrees;
- ``rgg:N[:DEGREE]``: random geometric graph in the unit square (mean degree ~DEGREE,
  default 12): spatial, uniform degrees, a small edge cut;
- ``ba:N[:M]``: Barabasi-Albert-like preferential attachment (M edges per new vertex, default
  6): hubs, no communities;
- ``scaled:N``: ``synthetic-products`` scaled to N vertices at the preset's mean degree,
  community size, features and classes, its training share raised so an epoch has at least 8
  batches of 1024 (the scaling curve's graphs; cached with the generator's spec sidecar).

``rmat``/``rgg``/``ba`` graphs are symmetric, without loops or duplicates, with one zero
feature column and one class; training vertices are 1/12 of them (seed 1), 1% each for
validation and test: graphs for sampling, clustering and memory, not for accuracy.

Example::

    >>> parse_count("2.5m"), is_family("rmat:16:8"), is_family("cora")
    (2500000, True, False)
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from twopgraph.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

    from twopgraph.datasets.synthetic import SyntheticSpec

log = logging.getLogger("twopgraph")

FAMILIES = ("rmat", "rgg", "ba", "scaled")
#: the preset ``scaled:N`` scales
SCALED_BASE = "synthetic-products"


def is_family(spec: str) -> bool:
    """Whether ``spec`` names a generated family (``NAME:ARGS`` with NAME in
    :data:`FAMILIES`) rather than a dataset."""
    return isinstance(spec, str) and spec.split(":", 1)[0] in FAMILIES and ":" in spec


def parse_count(text: str) -> int:
    """``"100k"`` -> 100000, ``"2.5m"`` -> 2500000, ``"300"`` -> 300; ConfigError otherwise."""
    s = str(text).strip().lower()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([km]?)", s)
    if not m:
        raise ConfigError(f"cannot read {text!r} as a count (e.g. 300, 100k, 2.5m)")
    return round(float(m.group(1)) * {"": 1, "k": 1_000, "m": 1_000_000}[m.group(2)])


def size_name(n: int) -> str:
    """``100000`` -> ``"100k"``, ``2500000`` -> ``"2.5m"`` (as :func:`parse_count` reads)."""
    if n >= 1_000_000 and n % 100_000 == 0:
        return f"{n / 1e6:g}m"
    if n >= 1_000 and n % 100 == 0:
        return f"{n / 1e3:g}k"
    return str(n)


def _args(spec: str) -> tuple[str, list[str]]:
    name, *args = spec.split(":")
    limits = {"rmat": (1, 2), "rgg": (1, 2), "ba": (1, 2), "scaled": (1, 1)}[name]
    if not limits[0] <= len(args) <= limits[1] or not all(args):
        raise ConfigError(f"--graph {spec}: expected rmat:SCALE[:EDGEFACTOR], rgg:N[:DEGREE], "
                          "ba:N[:M] or scaled:N")
    return name, args


def family_dataset(spec: str, data_root: str | None = None) -> Path:
    """The dataset file of family ``spec`` (generated on first use, atomically): what
    ``--dataset`` takes."""
    from twopgraph.datasets import resolve_data_root
    name, args = _args(spec)
    folder = resolve_data_root(data_root) / "bench" / "graphs"
    folder.mkdir(parents=True, exist_ok=True)
    if name == "scaled":
        return scaled_dataset(parse_count(args[0]), folder)
    out = folder / (spec.replace(":", "_").replace("/", "_") + ".npz")
    if out.is_file():
        return out
    import numpy as np
    t = time.perf_counter()
    log.info("families: generating %s", spec)
    try:
        if name == "rmat":
            indptr, indices = gen_rmat(int(args[0]), *(int(x) for x in args[1:]))
        elif name == "rgg":
            indptr, indices = gen_rgg(parse_count(args[0]), *(float(x) for x in args[1:]))
        else:
            indptr, indices = gen_ba(parse_count(args[0]), *(int(x) for x in args[1:]))
    except ValueError as e:
        raise ConfigError(f"--graph {spec}: {e}") from None
    n = indptr.shape[0] - 1
    rng = np.random.default_rng(1)
    order = rng.permutation(n)
    train = np.sort(order[: max(1, n // 12)])
    k = max(1, n // 100)
    tmp = out.with_name(out.stem + f".tmp{os.getpid()}.npz")
    np.savez(tmp, indptr=indptr, indices=indices.astype(np.int64),
             feat=np.zeros((n, 1), dtype=np.float32), label=np.zeros(n, dtype=np.int64),
             train_idx=train, val_idx=np.sort(order[n // 12: n // 12 + k]),
             test_idx=np.sort(order[n // 12 + k: n // 12 + 2 * k]))
    os.replace(tmp, out)
    log.info("families: %s (%d vertices, %d CSR entries) in %.1f s: %s", spec, n,
             indices.shape[0], time.perf_counter() - t, out)
    return out


def scaled_spec(n: int, batch_size: int = 1024, min_batches: int = 8) -> SyntheticSpec:
    """The :class:`~twopgraph.datasets.synthetic.SyntheticSpec` of ``scaled:N``."""
    from twopgraph.datasets.synthetic import SYNTHETIC_PRESETS
    if n < 1000:
        raise ConfigError(f"scaled:{n}: needs at least 1000 vertices")
    base = SYNTHETIC_PRESETS[SCALED_BASE]
    ratio = n / base.num_nodes
    comm = max(2 * base.num_classes, round(base.num_communities * ratio))
    comm = min(comm, n // max(base.min_community_size, 1))
    train = min(0.5, max(base.train_frac, min_batches * batch_size / n))
    return replace(base, num_nodes=n, num_edges=round(base.num_edges * ratio),
                   num_communities=comm, train_frac=train, name=f"scaled-{size_name(n)}",
                   description=f"{SCALED_BASE} scaled to {n} vertices")


def scaled_dataset(n: int, folder: Path) -> Path:
    """The ``.npz`` of ``scaled:N`` in ``folder`` (regenerated when the spec or the generator
    changed: :func:`~twopgraph.datasets.presets.load_synthetic`)."""
    from twopgraph.datasets.presets import load_synthetic
    spec = scaled_spec(n)
    path = folder / f"{spec.name}.npz"
    t = time.perf_counter()
    load_synthetic(spec, path)
    log.info("families: %s ready in %.1f s: %s", spec.name, time.perf_counter() - t, path)
    return path


# -- generators ----------------------------------------------------------------------------------
def csr_from_pairs(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric, deduplicated, loop-free CSR (``indptr`` int64, ``indices`` int32, sorted
    rows) of the vertex pairs ``src``/``dst`` (arrays of ids < ``n``)."""
    import numpy as np
    keep = src != dst
    src, dst = src[keep], dst[keep]
    lo = np.minimum(src, dst).astype(np.int64)
    hi = np.maximum(src, dst).astype(np.int64)
    key = np.unique(lo * n + hi)
    lo, hi = key // n, key % n
    u, v = np.concatenate([lo, hi]), np.concatenate([hi, lo])
    order = np.lexsort((v, u))
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(u, minlength=n), out=indptr[1:])
    return indptr, v[order].astype(np.int32)


def gen_rmat(scale: int, edge_factor: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """R-MAT graph of ``2**scale`` vertices and ``edge_factor * 2**scale`` generated edges
    (before deduplication): ``(indptr, indices)``."""
    import numpy as np
    if not 1 <= scale <= 32 or edge_factor < 1:
        raise ValueError("rmat needs 1 <= SCALE <= 32 and EDGEFACTOR >= 1")
    rng = np.random.default_rng(seed)
    n = 1 << scale
    m = n * edge_factor
    a, b, c = 0.57, 0.19, 0.19
    src = np.zeros(m, dtype=np.int64)
    dst = np.zeros(m, dtype=np.int64)
    for bit in range(scale):
        r = rng.random(m)
        src |= (r >= a + b).astype(np.int64) << bit  # quadrants c, d
        dst |= (((r >= a) & (r < a + b)) | (r >= a + b + c)).astype(np.int64) << bit  # b, d
    perm = rng.permutation(n)
    return csr_from_pairs(perm[src], perm[dst], n)


def gen_rgg(n: int, degree: float = 12.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random geometric graph: ``n`` points in the unit square, an edge between points closer
    than the radius giving mean degree ~``degree``: ``(indptr, indices)``."""
    import numpy as np
    from scipy.spatial import cKDTree
    if n < 2 or degree <= 0:
        raise ValueError("rgg needs N >= 2 and DEGREE > 0")
    rng = np.random.default_rng(seed)
    pts = rng.random((n, 2))
    pairs = cKDTree(pts).query_pairs(np.sqrt(degree / (np.pi * n)), output_type="ndarray")
    return csr_from_pairs(pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64), n)


def gen_ba(n: int, m: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Preferential attachment: each new vertex links to ``m`` endpoints of random earlier
    edges, vectorised over blocks of vertices: ``(indptr, indices)``."""
    import numpy as np
    if m < 1 or n <= m + 1:
        raise ValueError("ba needs M >= 1 and N > M + 1")
    rng = np.random.default_rng(seed)
    m0 = m + 1
    e_src = np.repeat(np.arange(m0), m0)
    e_dst = np.tile(np.arange(m0), m0)
    lo = m0
    while lo < n:
        hi = min(n, max(lo + 1, int(lo * 1.25)))
        cnt = (hi - lo) * m
        pick = rng.integers(0, e_src.shape[0], cnt)
        tgt = np.where(rng.random(cnt) < 0.5, e_src[pick], e_dst[pick])
        e_src = np.concatenate([e_src, np.repeat(np.arange(lo, hi), m)])
        e_dst = np.concatenate([e_dst, tgt])
        lo = hi
    perm = rng.permutation(n)
    return csr_from_pairs(perm[e_src], perm[e_dst], n)
