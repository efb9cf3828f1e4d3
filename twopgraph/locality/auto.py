"""``--schedule auto``: locality where it cuts the input vertices of a batch, else random.

The locality scheduler pays only where a batch's sampled neighbourhood covers a small part of
the graph: its batches of whole METIS clusters then share neighbours and need fewer input
vertices (fewer feature rows to gather and copy). Where a batch already reaches most of the
graph (a small graph, or many hops) it needs as many input vertices as a uniform one and only
costs batch diversity (accuracy). :func:`choose_schedule` measures this on the real sampler:
the mean number of distinct input vertices (layer-0 sources) of the first
:data:`AUTO_BATCHES` batches of epoch 0 under each scheduler, and picks ``locality`` when

    locality inputs per batch / random inputs per batch <= :data:`AUTO_THRESHOLD`,

else ``random`` -- unless the locality batches' labels are skewed (below). Those batches
are sampled with the keys training uses for them (the sampler's randomness depends only on
(seed, epoch, batch, layer, vertex)), and no global
random state (numpy's, torch's) is read or advanced, so training afterwards draws exactly the
batches of the explicit ``--schedule`` with the same seed. The decision is deterministic for
a seed.

**Labels.** A locality batch holds a few whole clusters, and on a homophilous graph a cluster
is nearly one class: such batches see a few classes each, and the gradient steps they make
cost accuracy per epoch that fewer input vertices do not buy back. With ``labels``, the
decision also measures the *label skew* of the locality scheduler's batches (every batch of
epoch 0, label-balanced as training draws them): the mean total-variation distance between
a batch's label mix and the training set's, less that of random batches (the noise floor of a
batch of that size), and keeps ``random`` when it exceeds :data:`LABEL_SKEW_THRESHOLD`.

Example::

    >>> from twopgraph.graph.data import CSRGraph
    >>> from twopgraph.sampler import NeighborSampler
    >>> src = np.arange(40); dst = (src // 10) * 10 + (src + 1) % 10   # 4 rings of 10
    >>> g = CSRGraph.from_edges(src, dst, num_nodes=40)
    >>> c = choose_schedule(NeighborSampler(g, [2, 2]), np.arange(40), batch_size=10,
    ...                     parts=np.arange(40) // 10)
    >>> c.schedule, c.locality_inputs_per_batch, c.batches
    ('locality', 10.0, 4)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

from twopgraph.core.protocols import Graph, Sampler
from twopgraph.locality.cluster import DEFAULT_CLUSTERS_PER_BATCH
from twopgraph.locality.schedule import make_scheduler
from twopgraph.sampler.auto import input_vertices  # noqa: F401  (also this module's name)

if TYPE_CHECKING:
    from twopgraph.graph.data import CSRGraph
    from twopgraph.locality.cluster import Clustering

#: locality is chosen when its input vertices per batch are at most this share of random's
#: (0.6: locality must cut them by at least 40%). Measured ratios (README "Recipes"): 0.40-0.42
#: on synthetic-products (where locality pays: issue 6), 0.75-1.00 on the ten real datasets
#: of ../shared/datasets with their defaults (a 2-hop batch of 1024 seeds reaches half the
#: graph or more: locality saves little there and its less diverse batches can cost accuracy)
AUTO_THRESHOLD = 0.6
#: locality needs a label skew of at most this (mean total-variation distance of a locality
#: batch's label mix from the training set's, less random batches'; 0 = as mixed as random
#: batches, 1 = disjoint classes). Chosen on two generated graphs (batches of 1024, LABOR, 2
#: epochs; skew: test points lost against random order): scaled:2000000 (47 classes) 4
#: clusters per batch 0.54: 3.1, 8 per batch 0.44: 0.2, 16 per batch 0.31: 0.1; a 1.2M-vertex
#: graph of 100 classes with weaker communities 8 per batch 0.60: 14.1, 16 per batch 0.49:
#: 1.6, 32 per batch 0.35: 0.2 -- the threshold sits between 0.44 (kept) and 0.49 (lost).
#: Checked on synthetic-products (not used to choose it): docs/architecture.md. It guards
#: against large losses; the finer trade (a tenth of a point against input vertices) is the
#: first candidate below.
LABEL_SKEW_THRESHOLD = 0.46
#: Clusters per batch ``--schedule auto`` tries on a large graph under ``--num-clusters 0``
#: (:func:`choose_clusters`), in order: the first whose batches' label skew is at most
#: :data:`LABEL_SKEW_THRESHOLD` is kept (more clusters per batch: more classes in a batch, more
#: input vertices). The first is the default count, so that auto and ``--schedule locality``
#: cluster alike where it passes (:data:`~twopgraph.locality.cluster.DEFAULT_CLUSTERS_PER_BATCH`,
#: 14: how it was chosen is in :func:`~twopgraph.locality.cluster.default_num_clusters`). On
#: the 100-class graph of :data:`LABEL_SKEW_THRESHOLD`'s table 14 (skew 0.52) and 16 per batch
#: (0.49) are too skewed and 32 per batch keep locality at 0.52x random's input vertices.
CLUSTERS_PER_BATCH_CANDIDATES = (DEFAULT_CLUSTERS_PER_BATCH, 16, 32)
#: batches of epoch 0 measured per scheduler (fewer when an epoch has fewer)
AUTO_BATCHES = 8
#: The probe before clustering (:func:`probe_locality`): batches of seeds that are close in
#: the graph (a BFS ball of ``batch_size`` training vertices each, no clustering needed)
#: against random batches. Where even balls need more than PROBE_THRESHOLD x random's input
#: vertices, ``--schedule auto`` takes random without clustering or renumbering. Measured
#: (fanouts and batch size of the defaults; ball ratio / the ratio of default clusters):
#: synthetic-products-like 0.66 / 0.36-0.39, amazon_photo 0.62 / 0.95, coauthor_physics
#: 0.66 / 0.75, the 40-community test graph 0.20 / 0.24 (all cluster, then measure, as
#: before); skipped: synthetic-small 0.86 / 0.85, tolokers 0.89 / 0.97, twitch_de 0.96 /
#: 0.98, cora 0.97 / 1.00, citeseer 0.93 / 1.00, actor 1.03 / 0.94, squirrel 1.40 / 0.96,
#: R-MAT 1.13 / 1.00. Balls can be up to ~1.8x worse than clusters (hubs: products), so the
#: threshold sits well above AUTO_THRESHOLD; a graph whose clusters would reach 0.6 has
#: balls below it in every family measured.
PROBE_THRESHOLD = 0.85
PROBE_BATCHES = 4
#: On small graphs (fewer than ``LOCALITY_NODES_PER_SEED x batch_size`` vertices, where the
#: default clusters are small: at least min(2048, N/8) of them) one ball per batch overstates
#: what locality gains: a locality batch there holds a hundred or more small clusters. The
#: probe then builds each batch from as many balls as a locality batch would hold clusters
#: (:func:`probe_balls`), which tracks the clusters' ratio (measured, balls / clusters:
#: amazon_photo 0.94 / 0.95, coauthor_cs 0.92 / 0.84, facebook 0.87 / 0.76, coauthor_physics
#: 0.87 / 0.75, tolokers 0.91 / 0.97, twitch_de 0.92 / 0.97, actor 0.97 / 0.94, cora 0.94 /
#: 1.00, synthetic-small 0.89 / 0.85; one ball: 0.62, 0.75, 0.74, 0.66, 0.89, 0.96, 1.03,
#: 0.97, 0.86): clustering is skipped where such balls need more than PROBE_BALLS_THRESHOLD
#: x random's input vertices (clusters were at most 0.12 below the balls, and locality needs
#: 0.6), so amazon_photo, the coauthor graphs and facebook are no longer clustered for
#: nothing, and synthetic-small (the quick start) is decided with a margin.
PROBE_BALLS_THRESHOLD = 0.8


@dataclass
class ScheduleChoice:
    """The decision of ``--schedule auto`` and the figures it rests on (``metrics.json``:
    ``schedule_choice``): the ``schedule`` chosen, the mean distinct input vertices per
    batch of each scheduler over ``batches`` batches, their ``ratio`` (locality / random),
    the ``threshold`` it was compared with and the wall ``seconds`` the measurement took."""

    schedule: str
    ratio: float
    locality_inputs_per_batch: float
    random_inputs_per_batch: float
    batches: int
    threshold: float
    seconds: float
    #: what the locality figures measure: ``clusters`` (batches of whole clusters) or
    #: ``probe`` (BFS balls of nearby seeds, :func:`probe_locality`: no clustering was done)
    basis: str = "clusters"
    #: ``probe``: BFS balls per batch (:func:`probe_balls`); None for ``clusters``
    balls: int | None = None
    #: the locality batches' label skew (see the module doc; None: not measured -- no labels,
    #: or the probe) and the threshold it was compared with
    label_skew: float | None = None
    label_threshold: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """The log line of the decision."""
        op = "<=" if self.ratio <= self.threshold else ">"
        skewed = (self.label_skew is not None and self.label_threshold is not None
                  and self.label_skew > self.label_threshold)
        if self.basis == "probe":
            what = "nearby seeds (BFS balls)" if (self.balls or 1) == 1 else \
                f"{self.balls} BFS balls of nearby seeds (as many as a locality batch has clusters)"
            return (f"schedule auto -> {self.schedule} without clustering: batches of "
                    f"{what} reach {self.locality_inputs_per_batch:,.0f} input "
                    f"vertices, random {self.random_inputs_per_batch:,.0f} (ratio "
                    f"{self.ratio:.2f} {op} {self.threshold:.2f}: clusters cannot pay), "
                    f"measured on {self.batches} batch{'' if self.batches == 1 else 'es'} in "
                    f"{self.seconds:.1f} s")
        labels = ""
        if self.label_skew is not None:
            lop = ">" if skewed else "<="
            labels = (f"; label skew {self.label_skew:.2f} {lop} {self.label_threshold:.2f}"
                      + (" (a locality batch sees too few classes: it would cost accuracy)"
                         if skewed and self.ratio <= self.threshold else ""))
        return (f"schedule auto -> {self.schedule}: locality batches reach "
                f"{self.locality_inputs_per_batch:,.0f} input vertices, random "
                f"{self.random_inputs_per_batch:,.0f} (ratio {self.ratio:.2f} {op} "
                f"{self.threshold:.2f}){labels}, measured on {self.batches} "
                f"batch{'' if self.batches == 1 else 'es'} in "
                f"{self.seconds:.1f} s")


def measure(sampler: Sampler, train_idx: np.ndarray, batch_size: int, seed: int = 0, *,
            parts: np.ndarray, labels: np.ndarray | None = None, balance: int = 16,
            batches: int = AUTO_BATCHES, workers: int = 1) -> dict:
    """The figures :func:`decide` reads, for one process: ``locality_inputs`` and
    ``random_inputs`` (input vertices summed over the measured batches), ``locality_batches``
    and ``random_batches`` (batches measured: ``batches``, or fewer when an epoch has fewer)
    and ``seconds``; with integer ``labels``, also ``NAME_label_tv`` and
    ``NAME_label_batches`` for NAME ``locality`` and ``random``: the total-variation distances
    of every batch of epoch 0 from the training set's label mix, summed, and the batches
    (:func:`label_tv`). Figures of several processes add up key by key (``seconds``: take
    the largest)."""
    t = time.perf_counter()
    out = {}
    for name in ("locality", "random"):
        sched = make_scheduler(name, train_idx, batch_size, seed=seed, parts=parts,
                               labels=labels, balance=balance)
        out[f"{name}_inputs"], out[f"{name}_batches"] = input_vertices(
            sched, sampler, min(batches, sched.num_batches), workers)
        tv = label_tv(sched, train_idx, labels)
        if tv is not None:
            out[f"{name}_label_tv"], out[f"{name}_label_batches"] = tv
    out["seconds"] = time.perf_counter() - t
    return out


def label_tv(scheduler, train_idx: np.ndarray,
             labels: np.ndarray | None) -> tuple[float, int] | None:
    """``(sum, batches)``: the total-variation distance between each batch of epoch 0 of
    ``scheduler`` and the label mix of ``train_idx`` (half the L1 distance of the class
    shares: 0 = the same mix, 1 = no class in common), summed over the epoch's batches, and
    their number. None where ``labels`` are not one integer class per vertex (no labels,
    multi-label targets) or a training vertex has none (a negative label). Reads only the
    labels of training vertices; O(training vertices + batches x classes)."""
    if labels is None:
        return None
    full = np.asarray(labels)
    if full.ndim != 1 or not np.issubdtype(full.dtype, np.integer):
        return None
    lab = full[np.asarray(train_idx, dtype=np.int64)]
    if lab.shape[0] == 0 or lab.min() < 0:
        return None
    k = int(lab.max()) + 1
    share = np.bincount(lab, minlength=k) / lab.shape[0]
    total, count = 0.0, 0
    for b in scheduler.batches(0):
        if len(b) == 0:
            continue
        h = np.bincount(full[b], minlength=k) / len(b)
        total += 0.5 * float(np.abs(h - share).sum())
        count += 1
    return total, count


def label_skew(train_idx: np.ndarray, batch_size: int, seed: int, *, parts: np.ndarray,
               labels: np.ndarray | None, balance: int = 16) -> float | None:
    """The label skew of the locality scheduler's batches over ``parts`` (see the module
    doc): mean :func:`label_tv` of its epoch-0 batches less the random scheduler's; None
    where the labels give none."""
    out = []
    for name in ("locality", "random"):
        sched = make_scheduler(name, train_idx, batch_size, seed=seed, parts=parts,
                               labels=labels, balance=balance)
        tv = label_tv(sched, train_idx, labels)
        if tv is None or tv[1] == 0:
            return None
        out.append(tv[0] / tv[1])
    return out[0] - out[1]


def choose_clusters(num_nodes: int, train_idx: np.ndarray, labels: np.ndarray | None,
                    batch_size: int, seed: int, cluster: Callable[[int], "Clustering"], *,
                    balance: int = 16,
                    candidates: Sequence[int] = CLUSTERS_PER_BATCH_CANDIDATES,
                    threshold: float = LABEL_SKEW_THRESHOLD) -> tuple[int, list[dict]]:
    """The cluster count of ``--num-clusters 0`` under ``--schedule auto`` on a large graph
    (``num_nodes`` >= ``LOCALITY_NODES_PER_SEED x batch_size``): for each of ``candidates``
    clusters per batch in order, ``cluster(k)`` (the METIS clustering into
    :func:`~twopgraph.locality.cluster.default_num_clusters` clusters, cached by the caller)
    and its :func:`label_skew`; the first at most ``threshold`` is kept. Returns ``(k,
    tried)``: ``tried`` holds ``clusters_per_batch``, ``num_clusters`` and ``label_skew`` of
    each candidate tried. Where none passes (or, with nothing tried, on a smaller graph or
    without labels) ``k`` is the first candidate's, and the decision then keeps
    random order on its skew."""
    from twopgraph.locality.cluster import LOCALITY_NODES_PER_SEED, default_num_clusters
    train_idx = np.asarray(train_idx, dtype=np.int64)
    ks = [default_num_clusters(num_nodes, train_idx.shape[0], batch_size,
                               clusters_per_batch=c) for c in candidates]
    if num_nodes < LOCALITY_NODES_PER_SEED * batch_size or labels is None:
        return ks[0], []
    tried = []
    for c, k in zip(candidates, ks):
        skew = label_skew(train_idx, batch_size, seed, parts=cluster(k).parts, labels=labels,
                          balance=balance)
        tried.append({"clusters_per_batch": int(c), "num_clusters": int(k),
                      "label_skew": skew})
        if skew is None or skew <= threshold:
            return k, tried
    return ks[0], tried


def describe_clusters(k: int, tried: list[dict]) -> str:
    """One log line of :func:`choose_clusters`' result: each count tried with its skew, and
    the count ``k`` kept."""
    return ", ".join(f"{t['clusters_per_batch']} per batch -> label skew "
                     + ("-" if t["label_skew"] is None else f"{t['label_skew']:.2f}")
                     for t in tried) + f"; kept {k} clusters"


def decide(figures: dict, threshold: float = AUTO_THRESHOLD,
           label_threshold: float = LABEL_SKEW_THRESHOLD) -> ScheduleChoice:
    """The :class:`ScheduleChoice` of ``figures`` (:func:`measure`'s, possibly summed over
    processes): ``locality`` when its mean input vertices per batch are at most ``threshold``
    x random's and (where the figures have labels' distances) its batches' label skew -- mean
    label distance of a locality batch less a random batch's -- is at most
    ``label_threshold``; else ``random``."""
    loc = figures["locality_inputs"] / max(figures["locality_batches"], 1)
    rnd = figures["random_inputs"] / max(figures["random_batches"], 1)
    ratio = loc / rnd if rnd > 0 else 1.0
    skew = None
    if figures.get("locality_label_batches") and figures.get("random_label_batches"):
        skew = (figures["locality_label_tv"] / figures["locality_label_batches"]
                - figures["random_label_tv"] / figures["random_label_batches"])
    local = ratio <= threshold and (skew is None or skew <= label_threshold)
    return ScheduleChoice(schedule="locality" if local else "random",
                          ratio=ratio, locality_inputs_per_batch=loc,
                          random_inputs_per_batch=rnd,
                          batches=int(min(figures["locality_batches"],
                                          figures["random_batches"])),
                          threshold=threshold, seconds=float(figures["seconds"]),
                          label_skew=skew,
                          label_threshold=None if skew is None else label_threshold)


def probe_balls(num_nodes: int, num_train: int, batch_size: int, num_clusters: int = 0) -> int:
    """BFS balls per probe batch: 1 on graphs of at least ``LOCALITY_NODES_PER_SEED x
    batch_size`` vertices (a locality batch there is a few large clusters); on smaller ones
    the clusters a locality batch would hold, ``num_clusters`` (0: the default,
    :func:`~twopgraph.locality.cluster.default_num_clusters`) x seeds per batch / training
    vertices (see :data:`PROBE_BALLS_THRESHOLD`)."""
    from twopgraph.locality.cluster import LOCALITY_NODES_PER_SEED, default_num_clusters
    if num_nodes >= LOCALITY_NODES_PER_SEED * batch_size or num_train <= 0:
        return 1
    k = num_clusters or default_num_clusters(num_nodes, num_train, batch_size)
    seeds = min(batch_size, num_train)
    return int(max(1, min(seeds, round(k * seeds / num_train))))


def probe_locality(sampler: Sampler, graph: Graph, train_idx: np.ndarray, batch_size: int,
                   seed: int = 0, *,
                   batches: int = PROBE_BATCHES, workers: int = 1, balls: int = 1) -> dict:
    """The figures of the probe before clustering: ``ball_inputs`` / ``random_inputs``
    (input vertices summed over ``ball_batches`` / ``random_batches`` batches), ``balls``
    and ``seconds``. Ball batch ``b`` is ``balls`` balls of
    :func:`~twopgraph.locality.kernels.ball_seeds`, each from a training vertex picked by a
    hash of (``seed``, ``b``, ball), of batch_size / ``balls`` training vertices each; random
    batches are the first of epoch 0 of the random scheduler (the keys training uses).
    Deterministic; touches no global random state; costs ``2 x batches`` sampled batches."""
    from twopgraph.core.rng import mix_key, splitmix64_ref
    from twopgraph.locality.kernels import ball_seeds
    t = time.perf_counter()
    train_idx = np.asarray(train_idx, dtype=np.int64)
    sched = make_scheduler("random", train_idx, batch_size, seed=seed)
    nb = min(batches, sched.num_batches)
    out = {}
    out["random_inputs"], out["random_batches"] = input_vertices(sched, sampler, nb, workers)
    n = graph.num_nodes
    is_train = np.zeros(n, dtype=np.uint8)
    is_train[train_idx] = 1
    visited = np.zeros(n, dtype=np.uint8)
    count = min(batch_size, train_idx.shape[0])
    # visit at most 16 x the vertices a ball of `count` seeds needs at the training density
    limit = int(min(n, max(count, 16 * count * max(1, n // max(train_idx.shape[0], 1)))))
    balls = max(1, min(int(balls), count))
    if sched.num_batches == 1:  # the batch holds every training vertex, whatever the order
        out["ball_inputs"], out["ball_batches"], out["balls"] = \
            out["random_inputs"], out["random_batches"], balls
        out["seconds"] = time.perf_counter() - t
        return out
    total = 0
    for b in range(nb):
        if balls == 1:
            h = [splitmix64_ref(mix_key(seed, 0xBA11, b, i)) for i in range(64)]
            starts = train_idx[np.asarray([x % train_idx.shape[0] for x in h], dtype=np.int64)]
            seeds = ball_seeds(graph.indptr, graph.indices, is_train, starts, count, limit,
                               visited)
        else:  # balls of the clusters' size (each may start again where another lies)
            per = -(-count // balls)
            limit_one = int(min(n, max(per, 16 * per * max(1, n // max(train_idx.shape[0], 1)))))
            parts, have, j = [], 0, 0
            while have < count and j < 4 * balls:  # balls may overlap: until count seeds
                h = [splitmix64_ref(mix_key(seed, 0xBA11, b, j, i)) for i in range(8)]
                starts = train_idx[np.asarray([x % train_idx.shape[0] for x in h],
                                              dtype=np.int64)]
                parts.append(ball_seeds(graph.indptr, graph.indices, is_train, starts, per,
                                        limit_one, visited))
                j += 1
                if j >= balls:  # all balls drawn: count the distinct seeds
                    parts = [np.unique(np.concatenate(parts))]
                    have = parts[0].shape[0]
            seeds = parts[0][:count]
        mb = sampler.sample(seeds, mix_key(0xBA11, b), parallel=workers > 1)
        total += int(mb.input_nodes.shape[0])
    out["ball_inputs"], out["ball_batches"], out["balls"] = total, nb, balls
    out["seconds"] = time.perf_counter() - t
    return out


def decide_probe(figures: dict, threshold: float | None = None) -> ScheduleChoice:
    """The probe's :class:`ScheduleChoice` (``basis`` ``probe``): ``random`` when balls need
    more than ``threshold`` x the input vertices of random batches (clustering cannot pay),
    else ``locality`` (meaning: worth clustering and measuring, :func:`choose_schedule`).
    ``threshold`` defaults to :data:`PROBE_THRESHOLD` for one ball per batch, else
    :data:`PROBE_BALLS_THRESHOLD`."""
    balls = int(figures.get("balls", 1))
    if threshold is None:
        threshold = PROBE_THRESHOLD if balls == 1 else PROBE_BALLS_THRESHOLD
    ball = figures["ball_inputs"] / max(figures["ball_batches"], 1)
    rnd = figures["random_inputs"] / max(figures["random_batches"], 1)
    ratio = ball / rnd if rnd > 0 else 1.0
    return ScheduleChoice(schedule="random" if ratio > threshold else "locality", ratio=ratio,
                          locality_inputs_per_batch=ball, random_inputs_per_batch=rnd,
                          batches=int(min(figures["ball_batches"], figures["random_batches"])),
                          threshold=threshold, seconds=float(figures["seconds"]),
                          basis="probe", balls=balls)


def probe_schedule(graph: CSRGraph, train_idx: np.ndarray, fanouts: Sequence[int],
                   batch_size: int, seed: int = 0, *,
                   batches: int = PROBE_BATCHES, threshold: float | None = None,
                   num_clusters: int = 0) -> ScheduleChoice:
    """:func:`probe_locality` with the host sampler of ``fanouts`` and ``seed``, as many balls
    per batch as :func:`probe_balls` gives for ``num_clusters`` (0: the default), then
    :func:`decide_probe`."""
    from twopgraph.sampler.neighbor import NeighborSampler
    balls = probe_balls(graph.num_nodes, len(train_idx), batch_size, num_clusters)
    figures = probe_locality(NeighborSampler(graph, fanouts, seed=seed), graph, train_idx,
                             batch_size, seed, batches=batches, balls=balls)
    choice = decide_probe(figures, threshold)
    return choice


def choose_schedule(sampler: Sampler, train_idx: np.ndarray, batch_size: int, seed: int = 0,
                    *, parts: np.ndarray, labels: np.ndarray | None = None,
                    balance: int = 16, batches: int = AUTO_BATCHES,
                    threshold: float = AUTO_THRESHOLD, workers: int = 1,
                    combine: Callable[[dict], dict] | None = None) -> ScheduleChoice:
    """Resolve ``--schedule auto`` (see the module doc): :func:`measure` with the scheduler
    options training uses (``parts`` = the METIS cluster of every vertex, ``labels`` and
    ``balance`` for the locality scheduler's label balancing; ``workers`` sampling threads),
    then :func:`decide`. ``combine`` maps this process's figures to the figures the decision
    is made on: e.g. their sums over the ranks of a distributed run, so that every rank makes
    the same decision."""
    figures = measure(sampler, np.asarray(train_idx), batch_size, seed, parts=parts,
                      labels=labels, balance=balance, batches=batches, workers=workers)
    if combine is not None:
        figures = combine(figures)
    return decide(figures, threshold)
