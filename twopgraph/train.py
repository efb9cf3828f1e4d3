"""The training loop: config, sampled training, exact layer-wise evaluation, checkpoints, metrics.

Outputs in ``out`` (written by :func:`train`):

- ``checkpoint.pt`` -- after every epoch, atomically (temp file + rename): model, optimizer,
  torch RNG state, the epochs done and the config that matters for resuming;
- ``metrics.json`` -- top-level ``val_acc``, ``test_acc`` (final model), ``epochs`` (one object
  per epoch with the DESIGN.md metrics), the config and the dataset summary.

Example::

    >>> cfg = TrainConfig(dataset="synthetic-tiny", epochs=1, out="runs/doc")  # doctest: +SKIP
    >>> result = train(cfg)                                                      # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from . import kernels
from .errors import ConfigError
from .graph import GraphData, atomic_write_bytes
from .cache import FEAT_DTYPES, POLICIES, PolicyContext, build_feature_cache
from .loader import EpochStats, as_long_tensor, epoch_batches
from .models import MODELS, BlockGNN, build_model
from .partition import prepare_locality, to_original_order
from .sampler import SCHEDULERS, NeighborSampler, make_scheduler, parse_fanouts

log = logging.getLogger("twopgraph")

CHECKPOINT = "checkpoint.pt"
METRICS = "metrics.json"
CHECKPOINT_FORMAT = 1
# Config fields that must match for --resume to continue a run (epochs may grow).
RESUME_KEYS = ("dataset", "model", "fanouts", "batch_size", "hidden", "lr", "dropout", "seed",
               "schedule", "weight_decay", "num_clusters", "renumber", "balance", "feat_dtype")


@dataclass
class TrainConfig:
    """Every option of ``twopgraph train`` (CLI flags map 1:1 onto these fields).

    ``fanouts[i]`` is the fanout of GNN layer i (layer 0 reads the input features), ``-1`` = all
    neighbours; the number of layers is ``len(fanouts)``. ``lr`` is Adam's learning rate,
    ``eval_every`` evaluates every N epochs (0 = only after the last), ``prefetch`` is the
    number of batches sampled ahead in the background thread (0 = no background thread).
    ``schedule`` ``locality`` (default) builds batches from METIS clusters (``num_clusters``,
    0 = :func:`~twopgraph.partition.default_num_clusters`; ``balance``
    = label-balancing pool, 1 = plain cluster order, see
    :class:`~twopgraph.sampler.schedule.LocalityScheduler`); ``renumber``
    makes each cluster a contiguous id range (results are still reported in original ids).
    ``cache_policy`` (none | degree | presample | layer) picks the device feature cache, its
    budget is ``cache_ratio`` (fraction of feature rows) or ``cache_gb`` (GiB), by default what
    fits (CUDA: free memory after a training margin; CPU: none -- host memory is
    what the model reads); ``feat_dtype`` is how
    features are stored and copied (float16/bfloat16 halve the bytes; the model computes in
    float32 and is evaluated on the same rounded features).
    """

    dataset: str = "synthetic-small"
    data_root: str | None = None
    model: str = "sage"
    fanouts: list[int] = field(default_factory=lambda: [15, 10, 5])
    batch_size: int = 1024
    epochs: int = 5
    hidden: int = 256
    lr: float = 0.003
    weight_decay: float = 0.0
    dropout: float = 0.5
    seed: int = 0
    device: str = "auto"
    out: str = "runs/train"
    resume: bool = False
    schedule: str = "locality"
    num_clusters: int = 0
    renumber: bool = True
    balance: int = 16
    cache_policy: str = "none"
    cache_ratio: float | None = None
    cache_gb: float | None = None
    feat_dtype: str = "float32"
    eval_every: int = 1
    eval_batch_edges: int = 4_000_000
    prefetch: int = 2
    threads: int = 0
    progress: bool = True

    def validate(self) -> "TrainConfig":
        """One pass over every field; raises :class:`ConfigError` naming the bad value."""
        known = {f.name for f in fields(self)}
        self.fanouts = parse_fanouts(self.fanouts)
        if self.model not in MODELS:
            raise ConfigError(f"unknown model {self.model!r}; known: {', '.join(MODELS)}")
        if self.schedule not in SCHEDULERS:
            raise ConfigError(
                f"unknown schedule {self.schedule!r}; known: {', '.join(SCHEDULERS)}")
        for name in ("batch_size", "epochs", "hidden"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise ConfigError(f"{name.replace('_', '-')} must be a positive integer, got {v!r}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"lr must be a positive finite number, got {self.lr}")
        if not (0.0 <= self.dropout < 1.0):
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ConfigError(f"weight-decay must be a finite number >= 0, got {self.weight_decay}")
        out = Path(self.out)
        for parent in (out, *out.parents):
            if parent.exists():
                if not parent.is_dir():
                    raise ConfigError(f"--out {self.out}: {parent} exists and is not a folder")
                break
        if isinstance(self.num_clusters, bool) or not isinstance(self.num_clusters, int) \
                or self.num_clusters < 0:
            raise ConfigError(f"num-clusters must be an integer >= 0 (0 = automatic), "
                              f"got {self.num_clusters!r}")
        if isinstance(self.balance, bool) or not isinstance(self.balance, int) or self.balance < 1:
            raise ConfigError(f"balance must be an integer >= 1, got {self.balance!r}")
        if not isinstance(self.renumber, bool):
            raise ConfigError(f"renumber must be true or false, got {self.renumber!r}")
        if self.cache_policy not in POLICIES:
            raise ConfigError(f"unknown cache policy {self.cache_policy!r}; known: "
                              f"{', '.join(POLICIES)}")
        if self.feat_dtype not in FEAT_DTYPES:
            raise ConfigError(f"unknown feat dtype {self.feat_dtype!r}; known: "
                              f"{', '.join(FEAT_DTYPES)}")
        if self.cache_ratio is not None and self.cache_gb is not None:
            raise ConfigError("give cache-ratio or cache-gb, not both")
        if self.cache_ratio is not None and not (
                isinstance(self.cache_ratio, (int, float)) and 0.0 <= self.cache_ratio <= 1.0):
            raise ConfigError(f"cache-ratio must be in [0, 1], got {self.cache_ratio!r}")
        if self.cache_gb is not None and not (
                isinstance(self.cache_gb, (int, float)) and math.isfinite(self.cache_gb)
                and self.cache_gb >= 0):
            raise ConfigError(f"cache-gb must be a finite number >= 0, got {self.cache_gb!r}")
        for name in ("eval_every", "prefetch", "threads"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name.replace('_', '-')} must be >= 0")
        if self.eval_batch_edges <= 0:
            raise ConfigError("eval-batch-edges must be positive")
        resolve_device(self.device)
        assert known >= set(asdict(self))
        return self

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ConfigError(f"unknown config keys: {', '.join(sorted(unknown))}")
        return cls(**d)


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda when available else cpu; ``cuda`` without a GPU is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name not in ("cpu", "cuda") and not name.startswith("cuda:"):
        raise ConfigError(f"unknown device {name!r}; use cpu, cuda, cuda:N or auto")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("device cuda requested but torch sees no CUDA GPU")
    return torch.device(name)


# ----------------------------------------------------------------------------------------------
# evaluation
# ----------------------------------------------------------------------------------------------


@torch.no_grad()
def layerwise_inference(model: BlockGNN, sampler: NeighborSampler, feat: torch.Tensor,
                        device: torch.device, batch_edges: int = 4_000_000) -> torch.Tensor:
    """Exact full-neighbour inference, one layer at a time over all N vertices.

    Each layer runs over ranges of dst vertices holding about ``batch_edges`` edges, reading
    the previous layer's whole output (no sampling, no neighbourhood explosion). A layer that
    shrinks the width (``in_dim > out_dim``, e.g. hidden -> classes) is computed from per-vertex
    projections (:meth:`~twopgraph.models.SAGEConv.project`), made once per vertex -- and made
    straight from the previous layer's output ranges as they come, so that output (N x hidden)
    is never held in full. Peak memory: the input table plus one N x hidden table plus the
    projections (N x 2 x classes for SAGE). Returns the logits (N x C, float32, on CPU).
    """
    was_training = model.training
    model.eval()
    n = sampler.graph.num_nodes
    starts = edge_balanced_ranges(sampler.graph.indptr, batch_edges)
    convs = model.convs
    projects = [c.in_dim > c.out_dim and hasattr(c, "project") for c in convs]
    h = feat.to(device, torch.float32)
    proj = None
    if projects[0]:
        proj, h = _project_rows(convs[0], h, n, device, starts), None
    for i, conv in enumerate(convs):
        fuse = i + 1 < len(convs) and projects[i + 1]
        out, nxt = None, None
        for a, b in zip(starts[:-1], starts[1:]):
            block = sampler.full_block(a, b).to(device)
            if proj is not None:
                y = conv.from_projection(block, proj, a, b)
            else:
                y = conv(block, h, h[a:b])
            if i < len(convs) - 1:
                y = torch.relu(y)  # eval: dropout is the identity
            if fuse:
                parts = convs[i + 1].project(y)
                if nxt is None:
                    nxt = tuple(torch.empty((n, t.shape[1]), dtype=t.dtype, device=device)
                                for t in parts)
                for dst, t in zip(nxt, parts):
                    dst[a:b] = t
            else:
                if out is None:
                    out = torch.empty((n, y.shape[1]), dtype=y.dtype, device=device)
                out[a:b] = y
        h, proj = out, nxt
    model.train(was_training)
    return h.cpu()


def _project_rows(conv, h: torch.Tensor, n: int, device, starts: list[int]):
    """``conv.project`` of every row of ``h``, range by range (bounded temporaries)."""
    out = None
    for a, b in zip(starts[:-1], starts[1:]):
        parts = conv.project(h[a:b])
        if out is None:
            out = tuple(torch.empty((n, t.shape[1]), dtype=t.dtype, device=device) for t in parts)
        for dst, t in zip(out, parts):
            dst[a:b] = t
    return out


def edge_balanced_ranges(indptr: np.ndarray, batch_edges: int) -> list[int]:
    """Vertex range bounds ``[0, ..., N]`` cutting the CSR rows into pieces of about
    ``batch_edges`` edges each (a vertex's row is never split)."""
    n = indptr.shape[0] - 1
    cuts = np.searchsorted(indptr, np.arange(batch_edges, int(indptr[-1]), batch_edges))
    bounds = sorted(set([0, n] + [int(c) for c in cuts if 0 < c < n]))
    return bounds


def accuracy(logits: torch.Tensor, labels: torch.Tensor, idx: np.ndarray) -> float | None:
    """Fraction of ``idx`` whose argmax matches its label; None for an empty split."""
    if idx.shape[0] == 0:
        return None
    idx_t = as_long_tensor(idx)
    return float((logits[idx_t].argmax(1) == labels[idx_t]).float().mean())


# ----------------------------------------------------------------------------------------------
# checkpoints and files
# ----------------------------------------------------------------------------------------------


def write_json(path: Path, obj) -> None:
    atomic_write_bytes(path, lambda f: f.write(
        (json.dumps(obj, indent=2, default=_json_default) + "\n").encode()))


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _resume_signature(cfg: TrainConfig, data: GraphData) -> dict:
    sig = {k: getattr(cfg, k) for k in RESUME_KEYS}
    sig.update(num_nodes=data.num_nodes, num_features=data.num_features,
               num_classes=data.num_classes)
    return sig


def load_checkpoint(path: Path, cfg: TrainConfig, data: GraphData) -> dict:
    """Read a single-process ``checkpoint.pt`` and refuse one of another configuration."""
    return read_checkpoint(path, _resume_signature(cfg, data), cfg.epochs)


def read_checkpoint(path: Path, signature: dict, epochs: int, kind: str = "single") -> dict:
    """Read ``path``; refuse (ConfigError) a missing, foreign or unreadable file, a checkpoint
    of another ``kind`` ("single" | "distributed"), one whose ``signature`` differs, or one with
    more than ``epochs`` epochs done."""
    if not path.is_file():
        raise ConfigError(f"--resume: no checkpoint at {path}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # corrupt or foreign file
        raise ConfigError(f"--resume: cannot read checkpoint {path} ({type(e).__name__})") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ConfigError(f"--resume: {path} is not a twopgraph checkpoint")
    if ckpt.get("kind", "single") != kind:
        raise ConfigError(f"--resume: {path} is a checkpoint of a {ckpt.get('kind', 'single')} "
                          f"run, this is a {kind} run")
    have = ckpt.get("signature", {})
    diff = [k for k in signature if have.get(k) != signature[k]]
    if diff:
        what = ", ".join(f"{k}={have.get(k)!r} (now {signature[k]!r})" for k in diff)
        raise ConfigError(f"--resume: checkpoint {path} was written by another configuration: {what}")
    if ckpt["epochs_done"] > epochs:
        raise ConfigError(f"--resume: checkpoint already has {ckpt['epochs_done']} epochs, "
                          f"more than --epochs {epochs}")
    return ckpt


# ----------------------------------------------------------------------------------------------
# the loop
# ----------------------------------------------------------------------------------------------


@dataclass
class TrainResult:
    val_acc: float
    test_acc: float
    epochs: list[dict]
    out: Path
    logits: torch.Tensor | None = None


def train(cfg: TrainConfig, data: GraphData | None = None) -> TrainResult:
    """Train per ``cfg`` (loading ``cfg.dataset`` unless ``data`` is given); see module doc."""
    cfg.validate()
    device = resolve_device(cfg.device)
    if data is None:
        from .datasets import load_dataset  # datasets sits beside graph; imported lazily
        data = load_dataset(cfg.dataset, cfg.data_root, progress=cfg.progress)
    out = Path(cfg.out)
    ckpt = load_checkpoint(out / CHECKPOINT, cfg, data) if cfg.resume else None
    if cfg.batch_size > data.train_idx.shape[0]:
        log.warning("batch size %d exceeds the %d training vertices: one batch per epoch",
                    cfg.batch_size, data.train_idx.shape[0])
    apply_threads(cfg.threads)
    model, opt, epochs_log, start_epoch = build_training(cfg, data, device, ckpt)
    if ckpt is not None:
        torch.set_rng_state(ckpt["torch_rng"])
        log.info("resuming from %s after epoch %d", out / CHECKPOINT, start_epoch)

    prep = locality_for(data, [cfg.schedule], batch_size=cfg.batch_size,
                        num_clusters=cfg.num_clusters, renumber=cfg.renumber,
                        data_root=cfg.data_root)
    data = prep.data
    feat = torch.from_numpy(data.feat)
    labels = torch.from_numpy(data.label)
    sampler = NeighborSampler(data.graph, cfg.fanouts, seed=cfg.seed)
    scheduler = make_scheduler(
        cfg.schedule, data.train_idx, cfg.batch_size, seed=cfg.seed, balance=cfg.balance,
        parts=None if prep.clustering is None else prep.clustering.parts, labels=data.label)
    ctx = PolicyContext(data.graph, data.train_idx, cfg.fanouts, cfg.batch_size,
                        scheduler=scheduler, sampler=sampler, seed=cfg.seed)
    gather = build_feature_cache(cfg.cache_policy, torch.from_numpy(data.feat), ctx, device,
                                 ratio=cfg.cache_ratio, gb=cfg.cache_gb, dtype=cfg.feat_dtype)
    if cfg.feat_dtype != "float32":  # evaluate on the features the model was trained on
        feat = torch.from_numpy(data.feat).to(gather.dtype).to(torch.float32)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--out {out}: cannot create the folder ({e.strerror})") from None
    logits = None

    for epoch in range(start_epoch, cfg.epochs):
        rec = _train_epoch(model, opt, scheduler, sampler, gather, labels, epoch, device, cfg)
        if evaluates_after(cfg, epoch):
            t = time.perf_counter()
            logits = layerwise_inference(model, sampler, feat, device, cfg.eval_batch_edges)
            rec["val_acc"] = accuracy(logits, labels, data.val_idx)
            rec["test_acc"] = accuracy(logits, labels, data.test_idx)
            rec["eval_s"] = time.perf_counter() - t
        epochs_log.append(rec)
        log.info("epoch %d  loss %.4f  val_acc %s  epoch_s %.2f  sample_s %.2f  load_s %.2f  "
                 "compute_s %.2f  inputs/batch %.0f", epoch, rec["loss"],
                 _fmt(rec.get("val_acc")), rec["epoch_s"],
                 rec["sample_s"], rec["load_s"], rec["compute_s"], rec["input_nodes_per_batch"])
        save_checkpoint(out, model, opt, _resume_signature(cfg, data), epochs_log,
                        torch_rng=torch.get_rng_state())
        _write_metrics(out, cfg, data, device, epochs_log)

    if logits is None:  # resumed a finished run: evaluate the final model again
        logits = layerwise_inference(model, sampler, feat, device, cfg.eval_batch_edges)
    val_acc = accuracy(logits, labels, data.val_idx)
    test_acc = accuracy(logits, labels, data.test_idx)
    _write_metrics(out, cfg, data, device, epochs_log, (val_acc, test_acc))
    log.info("final  val_acc %s  test_acc %s  -> %s", _fmt(val_acc), _fmt(test_acc), out / METRICS)
    if prep.perm is not None:  # report per-vertex results in the caller's ids
        logits = to_original_order(logits, prep.perm)
    return TrainResult(val_acc, test_acc, epochs_log, out, logits)


def apply_threads(n: int) -> None:
    """torch and numba use ``n`` threads (numba: at most its pool size); 0 leaves both as
    they are."""
    if n:
        import numba
        torch.set_num_threads(n)
        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))


def evaluates_after(cfg: TrainConfig, epoch: int) -> bool:
    """Whether epoch ``epoch`` (0-based) ends with an exact evaluation: every ``eval_every``
    epochs, and always after the last."""
    return epoch == cfg.epochs - 1 or bool(cfg.eval_every and (epoch + 1) % cfg.eval_every == 0)


def save_checkpoint(out: Path, model, opt, signature: dict, epochs_log: list, **extra) -> None:
    """``out/checkpoint.pt`` (atomically) after ``len(epochs_log)`` epochs; ``extra`` keys
    (e.g. ``torch_rng``, ``kind``) are stored as they are; :func:`read_checkpoint` reads it."""
    state = {"format": CHECKPOINT_FORMAT, "signature": signature,
             "epochs_done": len(epochs_log), "model": model.state_dict(),
             "optimizer": opt.state_dict(), "epochs_log": epochs_log, **extra}
    atomic_write_bytes(out / CHECKPOINT, lambda f: torch.save(state, f))


def build_training(cfg: TrainConfig, data: GraphData, device, ckpt: dict | None = None):
    """The model (initialised from ``torch.manual_seed(cfg.seed)``, so every process builds
    the same weights) and its Adam optimizer, restored from ``ckpt`` when resuming.
    Returns ``(model, optimizer, epochs_log, start_epoch)``."""
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, data.num_features, cfg.hidden, data.num_classes,
                        len(cfg.fanouts), cfg.dropout).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    if ckpt is None:
        return model, opt, [], 0
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    return model, opt, list(ckpt["epochs_log"]), ckpt["epochs_done"]


def locality_for(data: GraphData, schedules, *, batch_size: int, num_clusters: int,
                 renumber: bool, data_root: str | None):
    """:func:`~twopgraph.partition.prepare_locality` for runs using ``schedules`` (scheduler
    names): METIS clusters when one of them needs them or ``renumber``, cached under
    DATA_ROOT/clusters."""
    from .datasets import resolve_data_root
    return prepare_locality(
        data, batch_size=batch_size, num_clusters=num_clusters,
        need_clusters=any(getattr(SCHEDULERS[s], "needs_clusters", False) for s in schedules),
        renumber_graph=renumber, cache_dir=resolve_data_root(data_root) / "clusters")


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.4f}"


def _train_epoch(model, opt, scheduler, sampler, gather, labels, epoch, device, cfg) -> dict:
    stats = EpochStats()
    model.train()
    t0 = time.perf_counter()
    compute_s = 0.0
    loss_sum, correct, seen = 0.0, 0, 0
    bar = None
    if cfg.progress:
        from tqdm import tqdm
        bar = tqdm(total=scheduler.num_batches, desc=f"epoch {epoch}", unit="batch",
                   leave=False, dynamic_ncols=True)
    batches = epoch_batches(scheduler, sampler, gather, labels, epoch, stats, device,
                            cfg.prefetch)
    try:
        for mb in batches:
            tc = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            logits = model(mb)
            loss = F.cross_entropy(logits, mb.labels)
            loss.backward()
            opt.step()
            n = mb.num_seeds
            loss_sum += float(loss.detach()) * n
            correct += int((logits.argmax(1) == mb.labels).sum())
            seen += n
            compute_s += time.perf_counter() - tc
            if bar is not None:
                el = time.perf_counter() - t0
                bar.set_postfix(loss=f"{loss_sum / seen:.4f}", seeds_s=f"{seen / el:.0f}")
                bar.update(1)
    finally:
        batches.close()
        if bar is not None:
            bar.close()
    epoch_s = time.perf_counter() - t0
    rec = {"epoch": epoch, "loss": loss_sum / max(seen, 1), "train_acc": correct / max(seen, 1),
           "epoch_s": epoch_s, "compute_s": compute_s, "seeds_per_s": seen / epoch_s}
    rec.update(stats.as_dict())
    return rec


def peak_rss_mib() -> float | None:
    """Peak resident memory of this process so far, MiB (None where unsupported)."""
    try:
        import resource
    except ImportError:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _write_metrics(out: Path, cfg: TrainConfig, data: GraphData, device, epochs_log,
                   final: tuple | None = None) -> None:
    """``final`` = (val_acc, test_acc) of the final model; before that, the last evaluated."""
    last = next((e for e in reversed(epochs_log) if "val_acc" in e), {})
    val_acc, test_acc = final if final is not None else (last.get("val_acc"), last.get("test_acc"))
    metrics = {
        "val_acc": val_acc,
        "test_acc": test_acc,
        "final": final is not None,
        "epochs": epochs_log,
        "config": asdict(cfg),
        "dataset": data.summary(),
        "device": str(device),
        "threads": {"torch": torch.get_num_threads(), "numba": kernels.num_threads()},
        "peak_rss_mib": peak_rss_mib(),
    }
    write_json(out / METRICS, metrics)
