"""A synthetic graph of ogbn-papers100M's shape at any scale, generated in bounded memory.

``synthetic-papers:SCALE`` (e.g. ``synthetic-papers:0.25``) has ``SCALE`` x papers100M's
111,059,956 vertices and 1,615,685,872 *directed* edges (citations; symmetrised when
ingested: about 2x as many CSR entries), 128 float32 features, 172 classes, and papers100M's
label sparsity: 1.39% of the vertices are labelled, all of them in a split (train 1.087%,
valid 0.113%, test 0.193% of the vertices); every other label is NaN (unlabelled).

The model is the one of :mod:`twopgraph.datasets.synthetic` in streaming form: communities of
log-normal sizes, each with a dominant class (Zipf frequencies); Pareto degree weights; each
vertex cites ``Poisson(w)`` others, a share ``local_frac`` of them within a window of its
community's hidden order, the rest weight-proportionally in its community (``p_in``), its
class (``p_class``) or anywhere; features are class and community centroids plus Gaussian
noise; vertex ids are a random permutation of the hidden order (no id locality). Every chunk
has its own random stream (the seed, the stage and the chunk index), so the output does not
depend on how it is consumed.

Two sinks, both streaming (memory: about 20 bytes per vertex -- the permutation, the degree
weights and their prefix sums, the labels -- plus one chunk; never the edge list):

* :func:`papers_raw` is a :class:`~twopgraph.ingest.RawDataset`: :func:`twopgraph.ingest.ingest`
  writes it straight into a store (the ``synthetic-papers:SCALE`` preset of ``--dataset``);
* :func:`write_ogb_raw` writes OGB's own binary layout of ogbn-papers100M (``raw/data.npz``,
  ``raw/node-label.npz``, ``split/time/*.csv.gz``, ``RELEASE_v1.txt``), what the real
  download unzips to, to test and measure the OGB path at scale (``scripts/make_papers.py``).

Example::

    >>> spec = PapersSpec(scale=1e-4)
    >>> spec.num_nodes, spec.num_edges
    (11106, 161569)
"""

from __future__ import annotations

import gzip
import io
import os
import re
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from twopgraph.core.fingerprint import fingerprint
from twopgraph.errors import ConfigError
from twopgraph.ingest import RawDataset

#: ogbn-papers100M's sizes.
PAPERS_NODES = 111_059_956
PAPERS_EDGES = 1_615_685_872
#: Shares of the vertices in each split (ogbn-papers100M: 1,207,179 / 125,265 / 214,338).
SPLIT_SHARES = {"train_idx": 1_207_179 / PAPERS_NODES, "val_idx": 125_265 / PAPERS_NODES,
                "test_idx": 214_338 / PAPERS_NODES}
PRESET = "synthetic-papers"
#: Bump when the generated arrays change for a given spec (part of the fingerprint).
GENERATOR_VERSION = 1
_VERTEX_CHUNK = 1 << 18  # source vertices per edge chunk / rows per feature chunk
_MIN_COMMUNITY = 64  # vertices of the smallest community (fewer: cliques of repeated edges)


@dataclass(frozen=True)
class PapersSpec:
    """``scale`` (fraction of papers100M's size, > 0), ``seed``; structure knobs as in
    :class:`twopgraph.datasets.synthetic.SyntheticSpec`; ``community_size`` is the mean community
    size in vertices."""

    scale: float = 1.0
    seed: int = 0
    num_features: int = 128
    num_classes: int = 172
    community_size: int = 1000
    p_in: float = 0.75
    p_class: float = 0.1
    local_frac: float = 0.5
    degree_exponent: float = 2.3
    max_degree_ratio: float = 300.0
    class_skew: float = 0.8
    label_noise: float = 0.25
    class_signal: float = 1.0
    community_signal: float = 0.5
    feature_noise: float = 1.0

    def __post_init__(self) -> None:
        if not (isinstance(self.scale, (int, float)) and 0 < self.scale <= 64):
            raise ConfigError(f"synthetic-papers scale must be in (0, 64], got {self.scale!r}")
        if self.num_nodes < 100:
            raise ConfigError(f"synthetic-papers:{self.scale} has {self.num_nodes} vertices; "
                              f"the smallest scale is {100 / PAPERS_NODES:.1e}")

    @property
    def num_nodes(self) -> int:
        return int(round(PAPERS_NODES * self.scale))

    @property
    def num_edges(self) -> int:
        """Expected directed edges (the generated count is within a fraction of a percent)."""
        return int(round(PAPERS_EDGES * self.scale))

    @property
    def name(self) -> str:
        return f"{PRESET}:{self.scale:g}"

    def fingerprint(self) -> str:
        return fingerprint("synthetic-papers", {"spec": asdict(self),
                                                "generator_version": GENERATOR_VERSION})


def parse_preset(name: str) -> PapersSpec | None:
    """The spec of ``synthetic-papers:SCALE`` (``synthetic-papers`` alone: scale 1/64), None
    for any other name; a malformed scale is a one-line :class:`ConfigError`."""
    if name != PRESET and not name.startswith(PRESET + ":"):
        return None
    text = name[len(PRESET) + 1:] if ":" in name else "0.015625"
    m = re.fullmatch(r"(\d+(\.\d*)?|\.\d+)(e-?\d+)?|(\d+)/(\d+)", text)
    if m is None:
        raise ConfigError(f"{name}: the scale must be a number, e.g. synthetic-papers:0.25 or "
                          f"synthetic-papers:1/16")
    if m.group(5) and int(m.group(5)) == 0:
        raise ConfigError(f"{name}: the scale must be a number > 0")
    scale = int(m.group(4)) / int(m.group(5)) if m.group(5) else float(text)
    return PapersSpec(scale=scale)


class _Model:
    """The per-vertex state of the generator (about 20 bytes per vertex)."""

    def __init__(self, spec: PapersSpec) -> None:
        self.spec = spec
        n = spec.num_nodes
        rng = np.random.default_rng([spec.seed, 0])
        k = max(spec.num_classes, n // spec.community_size)
        share = rng.lognormal(0.0, 1.0, k)
        smallest = max(1, min(_MIN_COMMUNITY, n // k))
        sizes = smallest + rng.multinomial(n - k * smallest, share / share.sum())
        freq = 1.0 / np.arange(1, spec.num_classes + 1) ** spec.class_skew
        comm_class = np.concatenate([np.arange(spec.num_classes),
                                     rng.choice(spec.num_classes, k - spec.num_classes,
                                                p=freq / freq.sum())])
        comm_class = np.sort(comm_class)  # class ranges contiguous in the hidden order
        self.comm_class = comm_class.astype(np.int64)
        self.comm_start = np.zeros(k + 1, dtype=np.int64)
        np.cumsum(sizes, out=self.comm_start[1:])
        self.class_lo = self.comm_start[np.searchsorted(comm_class, np.arange(spec.num_classes))]
        self.class_hi = self.comm_start[np.searchsorted(comm_class, np.arange(spec.num_classes),
                                                        side="right")]
        tail = spec.degree_exponent - 1.0
        w = (1.0 - rng.random(n)) ** (-1.0 / tail)
        np.minimum(w, spec.max_degree_ratio * tail / (tail - 1.0), out=w)
        self.rate = w * (spec.num_edges / w.sum())  # expected citations per vertex
        self.cum = np.cumsum(w)
        self.cum_total = float(self.cum[-1])
        del w
        # new id of each hidden vertex, and hidden vertex of each new id
        self.hidden = rng.permutation(n).astype(np.int32 if n < 2**31 else np.int64)
        self.new_id = np.empty_like(self.hidden)
        self.new_id[self.hidden] = np.arange(n, dtype=self.hidden.dtype)
        # labels by new id (int16: 172 classes), dominant class of the community or noise
        comm = np.searchsorted(self.comm_start, self.hidden, side="right") - 1
        label = self.comm_class[comm].astype(np.int16)
        noisy = rng.random(n) < spec.label_noise
        label[noisy] = rng.integers(0, spec.num_classes, int(noisy.sum()))
        self.label = label
        del comm, noisy
        # splits: disjoint random vertex sets of papers100M's shares
        order = rng.permutation(n)
        counts = [max(1, int(round(SPLIT_SHARES[s] * n))) for s in SPLIT_SHARES]
        bounds = np.cumsum([0] + counts)
        self.splits = {s: np.sort(order[bounds[i]:bounds[i + 1]]).astype(np.int64)
                       for i, s in enumerate(SPLIT_SHARES)}
        del order

    def _pick(self, lo: np.ndarray, hi: np.ndarray, r: np.ndarray) -> np.ndarray:
        """A vertex in each hidden range ``[lo, hi)`` drawn proportionally to weight."""
        clo = np.where(lo > 0, self.cum[np.maximum(lo - 1, 0)], 0.0)
        chi = self.cum[hi - 1]
        pos = np.searchsorted(self.cum, clo + r * (chi - clo), side="right")
        return np.clip(pos, lo, hi - 1)

    def edge_chunks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(src, dst)`` new ids of the citations of each chunk of hidden source vertices."""
        s, n = self.spec, self.spec.num_nodes
        window = max(1, int(round(2 * s.num_edges / n)))
        for c, a in enumerate(range(0, n, _VERTEX_CHUNK)):
            b = min(n, a + _VERTEX_CHUNK)
            rng = np.random.default_rng([s.seed, 1, c])
            counts = rng.poisson(self.rate[a:b])
            src = np.repeat(np.arange(a, b, dtype=np.int64), counts)
            m = src.shape[0]
            comm = np.searchsorted(self.comm_start, src, side="right") - 1
            mode = rng.random(m)
            r = rng.random(m)
            lo = self.comm_start[comm]
            hi = self.comm_start[comm + 1]
            cls = self.comm_class[comm]
            dst = np.empty(m, dtype=np.int64)
            local = mode < s.p_in * s.local_frac
            in_comm = ~local & (mode < s.p_in)
            in_cls = (mode >= s.p_in) & (mode < s.p_in + s.p_class)
            anywhere = mode >= s.p_in + s.p_class
            off = np.rint((2.0 * r[local] - 1.0) * window).astype(np.int64)
            off[off == 0] = 1  # not itself
            size = hi[local] - lo[local]
            dst[local] = lo[local] + (src[local] - lo[local] + off) % size
            dst[in_comm] = self._pick(lo[in_comm], hi[in_comm], r[in_comm])
            dst[in_cls] = self._pick(self.class_lo[cls[in_cls]], self.class_hi[cls[in_cls]],
                                     r[in_cls])
            dst[anywhere] = np.searchsorted(self.cum, r[anywhere] * self.cum_total,
                                            side="right").clip(0, n - 1)
            yield self.new_id[src], self.new_id[dst]

    def feature_chunks(self) -> Iterator[np.ndarray]:
        """float32 feature rows in new-id order, ``_VERTEX_CHUNK`` rows at a time."""
        s, n, f = self.spec, self.spec.num_nodes, self.spec.num_features
        rng = np.random.default_rng([s.seed, 2])
        scale = np.float32(1.0 / np.sqrt(f))
        class_c = rng.standard_normal((s.num_classes, f), dtype=np.float32) * \
            (scale * np.float32(s.class_signal))
        comm_c = rng.standard_normal((self.comm_class.shape[0], f), dtype=np.float32) * \
            (scale * np.float32(s.community_signal))
        for c, a in enumerate(range(0, n, _VERTEX_CHUNK)):
            b = min(n, a + _VERTEX_CHUNK)
            rng = np.random.default_rng([s.seed, 3, c])
            block = rng.standard_normal((b - a, f), dtype=np.float32)
            block *= np.float32(s.feature_noise)
            block += class_c[self.label[a:b]]
            comm = np.searchsorted(self.comm_start, self.hidden[a:b], side="right") - 1
            block += comm_c[comm]
            yield block

    def labels(self) -> np.ndarray:
        """int64 labels by new id: the class of the labelled (split) vertices, -1 elsewhere."""
        out = np.full(self.spec.num_nodes, -1, dtype=np.int64)
        for ids in self.splits.values():
            out[ids] = self.label[ids]
        return out

    def years(self, a: int, b: int) -> np.ndarray:
        rng = np.random.default_rng([self.spec.seed, 4, a])
        return rng.integers(1950, 2021, (b - a, 1), dtype=np.int64)


def papers_raw(spec: PapersSpec) -> RawDataset:
    """``spec``'s graph as a raw dataset for :func:`twopgraph.ingest.ingest` (edges generated
    into a scratch file of the store being written, int32 ids)."""
    model = _Model(spec)
    n = spec.num_nodes

    def edges(scratch):
        tmp = [scratch("src.bin"), scratch("dst.bin")]
        total = 0
        dtype = np.int32 if n < 2**31 else np.int64
        with open(tmp[0], "wb") as fs, open(tmp[1], "wb") as fd:
            for src, dst in model.edge_chunks():
                fs.write(src.astype(dtype).tobytes())
                fd.write(dst.astype(dtype).tobytes())
                total += src.shape[0]
        return tuple(np.memmap(p, dtype=dtype, mode="r", shape=(total,)) if total else
                     np.empty(0, dtype) for p in tmp)

    return RawDataset(
        name=spec.name, where=spec.name, num_nodes=n, num_edges=spec.num_edges,
        feat_shape=(n, spec.num_features), feat_dtype=np.dtype(np.float32), edges=edges,
        feat_chunks=model.feature_chunks, labels=model.labels,
        splits=lambda: dict(model.splits), num_classes=spec.num_classes,
        edges_where=f"{spec.name} edges")


def write_ogb_raw(spec: PapersSpec, folder: str | os.PathLike, *, compress: bool = False,
                  progress: Callable[[str], object] | None = None) -> dict:
    """Write ``spec``'s graph in OGB's binary layout of ogbn-papers100M into ``folder`` (e.g.
    ``R/ogbn_papers100M``): ``raw/data.npz`` (``edge_index`` 2 x E int64, ``node_feat`` N x
    128 float32, ``node_year`` N x 1 int64, ``num_nodes_list``, ``num_edges_list``; deflated
    with ``compress``), ``raw/node-label.npz`` (``node_label`` N x 1 float32, NaN =
    unlabelled), ``split/time/{train,valid,test}.csv.gz`` and ``RELEASE_v1.txt``. The edge
    list goes through two scratch files in ``raw/`` (removed). Returns sizes and counts.
    ``progress(stage)`` is called at each stage."""
    from twopgraph.store.npz import write_npy_member
    folder = Path(folder)
    raw = folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda *_: None)
    model = _Model(spec)
    n, f = spec.num_nodes, spec.num_features
    say("edges")
    tmp = [raw / ".src.tmp", raw / ".dst.tmp"]
    e = 0
    try:
        with open(tmp[0], "wb") as fs, open(tmp[1], "wb") as fd:
            for src, dst in model.edge_chunks():
                fs.write(src.astype(np.int64).tobytes())
                fd.write(dst.astype(np.int64).tobytes())
                e += src.shape[0]
        say("data.npz")
        method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
        part = raw / ".data.npz.tmp"  # renamed when complete
        with zipfile.ZipFile(part, "w", compression=method, allowZip64=True) as zf:
            def edge_rows():
                for p in tmp:
                    m = np.memmap(p, dtype=np.int64, mode="r", shape=(e,)) if e else \
                        np.empty(0, np.int64)
                    for a in range(0, e, 1 << 22):
                        yield np.asarray(m[a:a + (1 << 22)])
                    del m
            # (2, E) in C order: every src, then every dst (the bytes of the two files)
            write_npy_member(zf, "edge_index", (2, e), np.int64, edge_rows())
            write_npy_member(zf, "node_feat", (n, f), np.float32, model.feature_chunks())
            write_npy_member(zf, "node_year", (n, 1), np.int64,
                             (model.years(a, min(n, a + _VERTEX_CHUNK))
                              for a in range(0, n, _VERTEX_CHUNK)))
            write_npy_member(zf, "num_nodes_list", (1,), np.int64, [np.array([n])])
            write_npy_member(zf, "num_edges_list", (1,), np.int64, [np.array([e])])
        part.replace(raw / "data.npz")
    finally:
        for p in (*tmp, raw / ".data.npz.tmp"):  # nothing half-written stays behind
            p.unlink(missing_ok=True)
    say("labels")
    label = model.labels().astype(np.float32)
    label[label < 0] = np.nan
    with zipfile.ZipFile(raw / "node-label.npz", "w", compression=zipfile.ZIP_STORED) as zf:
        write_npy_member(zf, "node_label", (n, 1), np.float32, [label.reshape(n, 1)])
    del label
    say("splits")
    split = folder / "split" / "time"
    split.mkdir(parents=True, exist_ok=True)
    for key, stem in (("train_idx", "train"), ("val_idx", "valid"), ("test_idx", "test")):
        buf = io.StringIO()
        np.savetxt(buf, model.splits[key], fmt="%d")
        with gzip.open(split / f"{stem}.csv.gz", "wt") as fh:
            fh.write(buf.getvalue())
    (folder / "RELEASE_v1.txt").write_text("")
    return {"num_nodes": n, "num_edges": e, "data_npz_bytes": (raw / "data.npz").stat().st_size,
            "compressed": compress, "spec": asdict(spec)}

