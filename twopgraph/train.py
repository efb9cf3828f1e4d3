"""The training loop: config, sampled training, exact layer-wise evaluation, checkpoints, metrics.

Outputs in ``out`` (written by :func:`train`):

- ``checkpoint.pt`` -- after every epoch, atomically (temp file + rename): model, optimizer,
  torch RNG state, the epochs done and the config that matters for resuming;
- ``metrics.json`` -- ``status`` (``running`` after an epoch, ``ok`` at the end,
  ``diverged``), top-level ``val_acc``, ``test_acc`` (final model; null for a diverged one),
  ``epochs`` (one object per epoch with the DESIGN.md metrics), the config, the dataset
  summary and the process's ``peak_rss_mib`` / ``peak_pss_mib``; strict JSON (a NaN or
  infinity is written as null).

Exact evaluation (:func:`layerwise_inference`) may keep its intermediate N x hidden tables in
scratch files in ``out`` when host memory is short: anonymous files (no name in the folder,
their space freed when evaluation ends, also when the process dies).

The run owns ``out`` while it runs (:class:`~twopgraph.rundir.RunDir`: a second run into it is
refused; a run that fails before writing anything leaves no empty folder behind). A
non-finite loss (or non-finite weights after an epoch) stops training with
:class:`~twopgraph.errors.TrainingDiverged` (CLI exit code 3) after writing ``metrics.json``
with ``"status": "diverged"``; the last checkpoint, of the last finite epoch, is kept. A file
that cannot be written (full disk, read-only) ends the run with one
:class:`~twopgraph.errors.TwopgraphError` line; the files written before stay intact.

Example::

    >>> cfg = TrainConfig.of(dataset="synthetic-tiny", epochs=1, out="runs/doc")  # doctest: +SKIP
    >>> result = train(cfg)                                                      # doctest: +SKIP
"""

from __future__ import annotations

import io
import itertools
import logging
import pickle
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .cache import PolicyContext, build_feature_source
from .cache.feature_cache import activation_reserve_bytes, feat_dtype, resolve_budget
from .cache.host import HostFeatures, host_tensor
from .config import TrainConfig, resolve_device
from .errors import ConfigError, TrainingDiverged, TwopgraphError
from .fingerprint import run_fingerprint
from .graph import GraphData, atomic_write_bytes
from .jit import configure_threading, thread_count
from .loader import HostIdSampler, Loader, ThreadPlan, as_long_tensor
from .metrics import peak_rss_mib, process_pss_monitor, write_json
from .models import BlockGNN, build_model
from .partition import prepare_locality, to_original_order
from .protocols import SCHEDULERS
from .rundir import RunDir, check_data_root, human_bytes, writing
from .sampler import NeighborSampler, make_sampler, make_scheduler
from .sampler.minibatch import Block

log = logging.getLogger("twopgraph")

CHECKPOINT = "checkpoint.pt"
METRICS = "metrics.json"
CHECKPOINT_FORMAT = 2
# ----------------------------------------------------------------------------------------------
# evaluation
# ----------------------------------------------------------------------------------------------

#: Bytes (float32) of the input rows one chunk of exact inference gathers at most: a dst range
#: whose distinct src rows would take more is halved (down to one vertex).
EVAL_CHUNK_BYTES = 128 << 20
#: Share of the memory available where an intermediate N x d table of exact inference may
#: go (:func:`table_place`): the rest is left to the chunks, the caches and other processes.
TABLE_SHARE = 0.5


def available_host_bytes(proc: str = "/proc", cgroup: str = "/sys/fs/cgroup") -> int | None:
    """Bytes of host memory this process can still fill: ``MemAvailable`` of
    ``/proc/meminfo`` (the kernel's estimate, reclaimable page cache included), capped by the
    limit of this process's memory cgroup when it has one -- v1 (``memory:`` line of
    ``/proc/self/cgroup``): ``memory.limit_in_bytes - memory.usage_in_bytes +
    total_inactive_file`` (usage counts the page cache, whose inactive file pages are
    reclaimed first); v2: ``memory.max - memory.current + inactive_file``. ``None`` when none
    of them can be read (not Linux)."""
    found: list[int] = []
    try:
        with open(f"{proc}/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)  # kB
                    break
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"{proc}/self/cgroup") as f:
            lines = [ln.strip().split(":", 2) for ln in f if ln.count(":") >= 2]
    except OSError:
        lines = []
    for _, ctrls, path in lines:
        if "memory" in ctrls.split(","):
            d = Path(f"{cgroup}/memory{path}")
            names = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        elif ctrls == "":
            d = Path(f"{cgroup}{path}")
            names = ("memory.max", "memory.current", "inactive_file")
        else:
            continue
        try:
            limit_s = (d / names[0]).read_text().strip()
            if limit_s == "max":
                continue
            limit, usage = int(limit_s), int((d / names[1]).read_text())
            inactive = 0
            for line in (d / "memory.stat").read_text().splitlines():
                key, _, val = line.partition(" ")
                if key == names[2]:
                    inactive = int(val)
        except (OSError, ValueError):
            continue
        if limit < 1 << 60:  # v1 writes "no limit" as ~2**63
            found.append(max(0, limit - usage + inactive))
    return min(found) if found else None


def table_place(nbytes: int, device, *, host_bytes: int | None = None,
                device_bytes: int | None = None, share: float = TABLE_SHARE) -> str:
    """Where exact inference keeps ``nbytes`` bytes of intermediate N x d tables:
    ``"device"`` (CUDA only) when they take at most ``share`` of the device's free memory
    (``device_bytes``, default ``torch.cuda.mem_get_info``), else ``"host"`` when they take at
    most ``share`` of :func:`available_host_bytes` (``host_bytes``; unknown: host), else
    ``"disk"`` (a memory-mapped scratch file). On CPU the host is the device."""
    device = torch.device(device)
    if device.type == "cuda":
        if device_bytes is None:
            device_bytes = torch.cuda.mem_get_info(device)[0]
        if nbytes <= share * device_bytes:
            return "device"
    if host_bytes is None:
        host_bytes = available_host_bytes()
    if host_bytes is None or nbytes <= share * host_bytes:
        return "host"
    return "disk"


class EvalTable:
    """An N x d float32 table of exact inference's intermediate outputs, kept at ``where``:
    ``"device"`` (a tensor on ``device``), ``"host"`` (a host tensor) or ``"disk"`` (an
    ``np.memmap`` of an anonymous scratch file in ``scratch_dir``, default the system's temp
    folder: the file has no name from the start and its disk space is freed when the table is
    dropped, also after a crash).

    :attr:`resident` is the table as a tensor on ``device`` when the conv can index it with
    global ids directly (on the device; on the host when ``device`` is the CPU), else None:
    then rows are read with :meth:`read` (sorted ids: near-sequential reads of the scratch).
    """

    def __init__(self, n: int, d: int, where: str, device, scratch_dir=None):
        self.device = torch.device(device)
        self.where = where
        if where == "disk" and n * d > 0:
            with tempfile.TemporaryFile(dir=scratch_dir, prefix="twopgraph-eval-") as f:
                self.array = np.memmap(f, dtype=np.float32, mode="w+", shape=(n, d))
            self.table = torch.from_numpy(self.array)
        else:
            on = self.device if where == "device" else torch.device("cpu")
            self.table = torch.empty((n, d), dtype=torch.float32, device=on)
        self.resident = self.table if self.table.device == self.device and where != "disk" \
            else None

    @classmethod
    def of(cls, t: torch.Tensor) -> EvalTable:
        """A table over an existing tensor (resident on its device)."""
        self = cls.__new__(cls)
        self.device, self.where = t.device, "device"
        self.table = self.resident = t.to(torch.float32)
        return self

    def write(self, a: int, b: int, y: torch.Tensor) -> None:
        """Rows ``[a, b)`` = ``y``."""
        if self.table.device == y.device:
            self.table[a:b] = y
        else:
            self.table[a:b] = y.to(self.table.device)

    def read(self, ids: np.ndarray) -> torch.Tensor:
        """Rows of ``ids`` (sorted int64) on the device."""
        return self.table[torch.from_numpy(ids)].to(self.device)

    def read_range(self, a: int, b: int) -> torch.Tensor:
        return self.table[a:b].to(self.device)

    def result(self) -> torch.Tensor:
        """The table as a host tensor (a scratch table stays memory-mapped)."""
        return self.table.cpu()


class Relabel:
    """The sorted distinct src ids ``u`` of a dst range's whole-graph block (the range's own
    vertices included) and the block's src ids relabelled onto positions in ``u``. Large
    blocks use an N-byte mark array and an N-entry position map (int32 while N < 2**31)
    kept across chunks; small ones sort."""

    def __init__(self, n: int):
        self.n = n
        self.mark: np.ndarray | None = None
        self.pos: np.ndarray | None = None

    def __call__(self, idx: np.ndarray, a: int, b: int) -> tuple[np.ndarray, np.ndarray, int]:
        if 16 * (idx.shape[0] + b - a) < self.n:  # sorting beats a scan of all N
            s = np.sort(np.concatenate([idx, np.arange(a, b, dtype=np.int64)]))
            u = s[np.concatenate([[True], s[1:] != s[:-1]])]  # (np.unique: ~10x slower)
            return u, np.searchsorted(u, idx), int(np.searchsorted(u, a))
        if self.mark is None:
            self.mark = np.zeros(self.n, dtype=bool)
            self.pos = np.empty(self.n, dtype=np.int32 if self.n < 2 ** 31 else np.int64)
        mark, pos = self.mark, self.pos
        mark[idx] = True
        mark[a:b] = True
        u = np.flatnonzero(mark)
        mark[u] = False
        pos[u] = np.arange(u.shape[0], dtype=pos.dtype)
        return u, pos[idx].astype(np.int64), int(pos[a])


def relabel_on_device(indices: torch.Tensor, a: int, b: int):
    """:class:`Relabel` with torch ops where ``indices`` live (a device sampler's block):
    ``(sorted distinct ids (same device), indices relabelled, position of vertex a)``."""
    ids = torch.cat([torch.arange(a, b, device=indices.device), indices])
    u, inv = torch.unique(ids, sorted=True, return_inverse=True)
    return u, inv[b - a:], int(inv[0]) if b > a else 0


def _local_block(block: Block, a: int, b: int, relabel: Relabel):
    """``block`` (a dst range ``[a, b)`` over global src ids) relabelled onto its distinct src
    ids: ``(local block, ids (host int64, sorted), position of vertex a in them)``; the
    range's vertices are ``ids[k:k + b - a]``."""
    if block.indices.device.type == "cpu":
        u, local, k = relabel(block.indices.numpy(), a, b)
        ut, local_t = torch.from_numpy(u), torch.from_numpy(local)
    else:  # a device sampler's block: relabelled where it lives
        ut, local_t, k = relabel_on_device(block.indices, a, b)
        u = ut.cpu().numpy()
    lb = Block(int(u.shape[0]), b - a, block.indptr, local_t, block.src_deg[ut], block.dst_deg)
    return lb, u, k


def _row_source(feat, device):
    """What layer 0 reads: a feature source (its ``read``/``read_range``), or a table given
    as a host array/tensor (read like a :class:`~twopgraph.cache.host.HostFeatures` of it) or
    as a device tensor (resident)."""
    if hasattr(feat, "read") and hasattr(feat, "read_range"):
        return feat
    if isinstance(feat, torch.Tensor) and feat.device.type != "cpu":
        return EvalTable.of(feat)
    return HostFeatures(feat, device, readahead=False)


@torch.no_grad()
def layerwise_inference(model: BlockGNN, sampler: NeighborSampler, feat, device,
                        batch_edges: int = 4_000_000, *, scratch_dir=None,
                        place: str | None = None,
                        chunk_bytes: int = EVAL_CHUNK_BYTES) -> torch.Tensor:
    """Exact full-neighbour inference, one layer at a time over all N vertices.

    ``feat`` is what the input features are read through: a feature source (training's:
    :func:`eval_features`; rows read in its dtype, float32 per chunk, through the device
    cache where there is one) or an N x F host array/tensor. The whole table is never copied
    to the device, nor converted as a whole.

    Each layer runs over ranges of dst vertices holding about ``batch_edges`` edges. A layer
    whose input is not on the device reads, per range, the distinct src rows of the range's
    block (sorted: near-sequential reads of a memory map) and runs on the block relabelled
    onto them; a range whose rows would exceed ``chunk_bytes`` (float32) is halved. A layer
    that shrinks the width (``in_dim > out_dim``, e.g. hidden -> classes) is computed from
    per-vertex projections (:meth:`~twopgraph.models.SAGEConv.project`) made once per vertex
    -- from contiguous row ranges of the input for layer 0, straight from the previous
    layer's output ranges as they come otherwise (so that output is never held in full).

    Intermediate N x d outputs are kept where :func:`table_place` says (``place`` forces
    ``"device"``/``"host"``/``"disk"``): on the device if they fit comfortably, else in host
    memory, else in a memory-mapped scratch file in ``scratch_dir`` (:class:`EvalTable`).
    Peak memory: one N x hidden table plus the next layer's projections, a chunk's rows and
    block. Returns the logits (N x C, float32, on the host; memory-mapped when on disk).
    """
    was_training = model.training
    model.eval()
    device = torch.device(device)
    n = sampler.graph.num_nodes
    indptr = sampler.graph.indptr
    starts = edge_balanced_ranges(indptr, batch_edges)
    convs = model.convs
    projects = [c.in_dim > c.out_dim and hasattr(c, "project") for c in convs]
    relabel = Relabel(n)

    def new_tables(widths) -> list[EvalTable]:
        where = place or table_place(4 * n * sum(widths), device)
        return [EvalTable(n, w, where, device, scratch_dir) for w in widths]

    def chunks(a: int, b: int, width: int, resident: bool):
        """``(a, b, block on the device, u, k)`` of the dst range ``[a, b)``, split while
        its distinct src rows ``u`` (sorted host ids; vertex ``a`` at ``u[k]``) exceed
        ``chunk_bytes``; a resident input keeps the global block (``u``, ``k`` None)."""
        block = sampler.full_block(a, b)
        if resident:
            yield a, b, block.to(device), None, None
            return
        lb, u, k = _local_block(block, a, b, relabel)
        if b - a > 1 and 4 * width * u.shape[0] > chunk_bytes:
            lo, hi = int(indptr[a]), int(indptr[b])
            mid = int(np.searchsorted(indptr, (lo + hi) // 2, side="right")) - 1
            mid = min(max(mid, a + 1), b - 1)
            yield from chunks(a, mid, width, False)
            yield from chunks(mid, b, width, False)
            return
        yield a, b, lb.to(device), u, k

    src = _row_source(feat, device)
    proj = None
    if projects[0]:  # every input row projected once, range by range (contiguous reads)
        step = max(1, chunk_bytes // (4 * max(1, convs[0].in_dim)))
        for a in range(0, n, step):
            b = min(n, a + step)
            parts = convs[0].project(src.read_range(a, b).to(device))
            if proj is None:
                proj = new_tables([t.shape[1] for t in parts])
            for dst, t in zip(proj, parts):
                dst.write(a, b, t)
        src = None
    for i, conv in enumerate(convs):
        fuse = i + 1 < len(convs) and projects[i + 1]
        inputs = proj if proj is not None else [src]
        resident = all(getattr(t, "resident", None) is not None for t in inputs)
        width = sum(t.table.shape[1] if isinstance(t, EvalTable) else conv.in_dim
                    for t in inputs)  # float32 values per gathered row
        out, nxt = None, None
        for a0, b0 in itertools.pairwise(starts):
            for a, b, block, u, k in chunks(a0, b0, width, resident):
                if resident:
                    rows, lo = [t.resident for t in inputs], a
                else:
                    rows, lo = [t.read(u).to(device) for t in inputs], k
                if proj is not None:
                    y = conv.from_projection(block, tuple(rows), lo, lo + b - a)
                else:
                    y = conv(block, rows[0], rows[0][lo:lo + b - a])
                if i < len(convs) - 1:
                    y = torch.relu(y)  # eval: dropout is the identity
                if fuse:
                    parts = convs[i + 1].project(y)
                    if nxt is None:
                        nxt = new_tables([t.shape[1] for t in parts])
                    for dst, t in zip(nxt, parts):
                        dst.write(a, b, t)
                else:
                    if out is None:
                        out = new_tables([y.shape[1]])[0]
                    out.write(a, b, y)
        src, proj = out, nxt
    model.train(was_training)
    return src.result()


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


def run_signature(params: dict, data_fingerprint: str) -> dict:
    """What a checkpoint must match to be resumed: the parameters that change the weights
    (``params``), the content of the data they were trained on and the fingerprint of both
    (:func:`~twopgraph.fingerprint.run_fingerprint`)."""
    return {"params": params, "data": data_fingerprint,
            "fingerprint": run_fingerprint(params, data_fingerprint)}


def read_checkpoint(path: Path, signature: dict, epochs: int, kind: str = "single") -> dict:
    """Read ``path``; refuse (ConfigError) a missing, foreign or unreadable file, a checkpoint
    of another ``kind`` ("single" | "distributed"), one whose ``signature`` (see
    :func:`run_signature`) differs, or one with more than ``epochs`` epochs done."""
    if not path.is_file():
        raise ConfigError(f"--resume: no checkpoint at {path}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except (OSError, EOFError, RuntimeError, ValueError, pickle.UnpicklingError,
            zipfile.BadZipFile) as e:  # a corrupt, truncated or foreign file
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise ConfigError(f"--resume: cannot read checkpoint {path} "
                          f"({type(e).__name__}: {first})") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ConfigError(f"--resume: {path} is not a twopgraph checkpoint of format "
                          f"{CHECKPOINT_FORMAT} (written by another version?)")
    if ckpt.get("kind", "single") != kind:
        raise ConfigError(f"--resume: {path} is a checkpoint of a {ckpt.get('kind', 'single')} "
                          f"run, this is a {kind} run")
    have = ckpt.get("signature", {})
    if have.get("fingerprint") != signature["fingerprint"]:
        old, new = have.get("params", {}), signature["params"]
        diff = [f"{k}={old.get(k)!r} (now {new.get(k)!r})" for k in sorted(set(old) | set(new))
                if old.get(k) != new.get(k)]
        if have.get("data") != signature["data"]:
            diff.append("the data (its content changed)")
        raise ConfigError(f"--resume: checkpoint {path} was written by another configuration: "
                          f"{', '.join(diff) or 'fingerprint differs'}")
    if ckpt["epochs_done"] > epochs:
        raise ConfigError(f"--resume: checkpoint already has {ckpt['epochs_done']} epochs, "
                          f"more than --epochs {epochs}")
    return ckpt


def save_checkpoint(out: Path, model, opt, signature: dict, epochs_log: list, **extra) -> None:
    """``out/checkpoint.pt`` (atomically) after ``len(epochs_log)`` epochs; ``extra`` keys
    (e.g. ``torch_rng``, ``kind``, ``config``) are stored as they are; :func:`read_checkpoint`
    reads it."""
    state = {"format": CHECKPOINT_FORMAT, "signature": signature,
             "epochs_done": len(epochs_log), "model": model.state_dict(),
             "optimizer": opt.state_dict(), "epochs_log": epochs_log, **extra}
    # Serialised in memory first: torch.save reports a full disk as a RuntimeError from its
    # zip writer, a plain write reports it as the OSError it is (see rundir.writing).
    buf = io.BytesIO()
    torch.save(state, buf)
    with writing(out / CHECKPOINT):
        atomic_write_bytes(out / CHECKPOINT, lambda f: f.write(buf.getbuffer()))


def write_metrics(out: Path, cfg: TrainConfig, device, plan: ThreadPlan, epochs_log: list,
                  final: tuple | None = None, *, status: str | None = None, **extra) -> None:
    """``out/metrics.json``: ``final`` = (val_acc, test_acc) of the final model; before that,
    the last evaluated epoch's. ``status``: ``running`` (default before ``final``), ``ok``
    (default with it) or ``diverged`` (no accuracies: the model's weights are not finite).
    ``extra`` adds (or replaces) top-level keys. Memory: ``peak_rss_mib`` and ``peak_pss_mib``
    of this process (:mod:`twopgraph.metrics`; PSS counts the pages of a memory-mapped store
    shared with other processes in part; null where it cannot be read)."""
    last = next((e for e in reversed(epochs_log) if "val_acc" in e), {})
    val_acc, test_acc = final if final is not None else (last.get("val_acc"), last.get("test_acc"))
    if status is None:
        status = "running" if final is None else "ok"
    if status == "diverged":
        val_acc = test_acc = None
    metrics = {
        "status": status,
        "val_acc": val_acc,
        "test_acc": test_acc,
        "final": final is not None,
        "epochs": epochs_log,
        "config": cfg.flat(),
        "device": str(device),
        "threads": {"total": plan.total, "torch": plan.compute, "numba": plan.compute,
                    "sample_workers": plan.workers, "background": plan.background},
        "peak_rss_mib": peak_rss_mib(),
        "peak_pss_mib": process_pss_monitor().peak_mib,
        **extra,
    }
    with writing(out / METRICS):
        write_json(out / METRICS, metrics)


# ----------------------------------------------------------------------------------------------
# the pipeline and the loop
# ----------------------------------------------------------------------------------------------


def device_sampler_bytes(graph) -> int:
    """Device bytes the ``device`` sampler needs for ``graph`` (what
    :meth:`~twopgraph.sampler.device.TorchNeighborSampler.nbytes` reports, plus the one
    relabelling map of its one sampling worker): ``indptr`` int64 ``8 (N + 1)``, ``indices``
    in the graph's dtype, degrees float32 ``4 N``, the map int64 ``8 N``. Per-batch
    temporaries (``O(sampled edges)``) are not counted."""
    n = graph.num_nodes
    return (8 * (n + 1) + graph.indices.dtype.itemsize * graph.num_edges + 4 * n + 8 * n)


def resolve_sampler_device(choice: str, device, graph, share: float = 0.25,
                           total_bytes: int | None = None) -> tuple[torch.device, str]:
    """Where to sample (``--sampler-device``) and why, as ``(device, reason)``: ``cpu`` -> the
    host (numba); ``cuda`` -> the training device (``device`` must be a CUDA one); ``auto`` ->
    the training device when it is a CUDA one and :func:`device_sampler_bytes` of ``graph``
    is at most ``share`` of its total memory (``total_bytes``, default: what
    ``torch.cuda.mem_get_info`` says), else the host."""
    device = torch.device(device)
    host = torch.device("cpu")
    if choice == "cpu":
        return host, "--sampler-device cpu"
    if choice == "cuda":
        if device.type != "cuda":
            raise ConfigError(f"--sampler-device cuda samples on the training device; it needs "
                              f"--device cuda (training on {device})")
        return device, "--sampler-device cuda"
    if choice != "auto":
        raise ConfigError(f"unknown sampler device {choice!r}; known: auto, cpu, cuda")
    if device.type != "cuda":
        return host, f"--sampler-device auto, training on {device.type}"
    need = device_sampler_bytes(graph)
    if total_bytes is None:
        total_bytes = torch.cuda.mem_get_info(device)[1]
    fits = need <= share * total_bytes
    why = (f"--sampler-device auto: the graph's CSR, degrees and relabelling map "
           f"({human_bytes(need)}) {'fit in' if fits else 'exceed'} --sampler-memory-share "
           f"{share:g} of the device's {human_bytes(total_bytes)}")
    return (device if fits else host), why


def make_loader(cfg: TrainConfig, data: GraphData, device, *, parts=None,
                batch_size: int | None = None, sampler=None, wrap_scheduler=None,
                threads: int | None = None, rows=None, feat=None) -> Loader:
    """The training :class:`~twopgraph.loader.Loader` of ``cfg`` over ``data``: the sampler of
    ``--sampler-device`` (:func:`resolve_sampler_device`: ``neighbor`` on the host or
    ``device`` on the training GPU; unless ``sampler`` is given), the scheduler of ``cfg``
    (``parts`` = the METIS cluster of every vertex; ``wrap_scheduler`` may wrap it), and the
    feature source of the cache options, whose default CUDA budget leaves the model's
    activations free (:func:`~twopgraph.cache.feature_cache.activation_reserve_bytes`,
    reported as ``activation_reserve_bytes`` per epoch). ``batch_size`` and ``threads``
    override ``cfg``'s. The source reads ``feat`` (default ``data.feat``, used as it is: no
    copy; a memory map is read ahead as batches are sampled), id ``i`` of ``data`` reading
    row ``rows[i]`` of it when ``rows`` (int64) is given (a part over the machine's shared
    table)."""
    s = cfg.sampling
    device = torch.device(device)
    batch_size = s.batch_size if batch_size is None else batch_size
    threads = cfg.run.threads if threads is None else threads
    if sampler is None:
        where, why = resolve_sampler_device(s.sampler_device, device, data.graph,
                                            s.sampler_memory_share)
        log.info("sampling on %s (%s sampler): %s", where,
                 "neighbor" if where.type == "cpu" else "device", why)
        if where.type == "cpu":
            sampler = make_sampler("neighbor", data.graph, s.fanouts, seed=cfg.run.seed)
        else:
            sampler = make_sampler("device", data.graph, s.fanouts, seed=cfg.run.seed,
                                   device=where)
    scheduler = make_scheduler(s.schedule, data.train_idx, batch_size, seed=cfg.run.seed,
                               balance=s.balance, parts=parts, labels=data.label)
    if wrap_scheduler is not None:
        scheduler = wrap_scheduler(scheduler)
    plan = ThreadPlan.for_threads(threads, cfg.run.prefetch)
    torch_sampler = getattr(sampler, "device", None) is not None
    # Pre-sampling policies (presample) read host ids: a device sampler's are copied back
    # (HostIdSampler), and it samples in one thread (its ops use torch's threads or the GPU).
    ctx = PolicyContext(data.graph, data.train_idx, s.fanouts, batch_size, scheduler=scheduler,
                        sampler=HostIdSampler(sampler) if torch_sampler else sampler,
                        seed=cfg.run.seed, workers=1 if torch_sampler else plan.total)
    c = cfg.cache
    # The device sampler's relabelling map is made on its first batch: not yet in the free
    # memory the budget reads (its CSR is: the sampler was built above).
    on_device = torch_sampler and torch.device(sampler.device).type == "cuda"
    reserve = activation_reserve_bytes(
        num_nodes=data.num_nodes, num_edges=data.graph.num_edges,
        num_features=data.num_features, hidden=cfg.model.hidden,
        num_classes=data.num_classes, fanouts=s.fanouts, batch_size=batch_size,
        prefetch=cfg.run.prefetch, eval_batch_edges=cfg.run.eval_batch_edges,
        extra=8 * data.num_nodes if on_device else 0)
    ratio, gb = c.cache_ratio, c.cache_gb
    if ratio is None and gb is None and device.type == "cuda":
        # The default budget, less the reserve, handed on as an exact byte count (rows x
        # row_bytes / 2**30 is exact in a float: an integer below 2**53 over a power of two).
        item = torch.empty(0, dtype=feat_dtype(c.feat_dtype)).element_size()
        row_bytes = data.num_features * item
        budget = resolve_budget(data.num_nodes, row_bytes, device, reserve=reserve)
        gb = budget * row_bytes / 2 ** 30
        if c.cache_policy != "none":
            log.info("cache budget %d rows (%s): free device memory less a 25%% margin and "
                     "an activation reserve of %s", budget, human_bytes(budget * row_bytes),
                     human_bytes(reserve))
    source_kw = {} if rows is None else {"rows": rows}
    with thread_count(plan.total):  # pre-sampling (presample policy) may use every thread
        features = build_feature_source(c.cache_policy, data.feat if feat is None else feat,
                                        ctx, device, ratio=ratio, gb=gb, dtype=c.feat_dtype,
                                        **source_kw)
    if c.cache_policy != "none" and features.budget == 0:
        log.warning("cache policy %s has a budget of 0 rows on %s: every row is copied; give "
                    "--cache-ratio or --cache-gb to build a cache", c.cache_policy, device)
    loader = Loader(scheduler, sampler, features, host_tensor(data.label), device,
                    prefetch=cfg.run.prefetch, threads=threads)
    loader.activation_reserve_bytes = reserve
    return loader


def eval_features(data: GraphData, loader: Loader):
    """What exact evaluation reads the input features through: the loader's feature source
    (rows in the dtype it copies -- the model is evaluated on the features it was trained on
    -- read per chunk from the host table, and from the device cache where there is one), or,
    for a loader without one, a :class:`~twopgraph.cache.host.HostFeatures` over
    ``data.feat``. Never a copy of the whole table."""
    src = loader.features
    if src is not None and hasattr(src, "read"):
        return src
    return HostFeatures(data.feat, loader.device, readahead=False)


@dataclass
class TrainResult:
    val_acc: float | None
    test_acc: float | None
    epochs: list[dict]
    out: Path
    logits: torch.Tensor | None = None


def train(cfg: TrainConfig, data: GraphData | None = None) -> TrainResult:
    """Train per ``cfg`` (loading ``cfg.data.dataset`` unless ``data`` is given); see the
    module doc. Every flag, the data root and ``--out`` (free, writable) are checked before
    any data is loaded."""
    cfg.validate()
    process_pss_monitor()  # peak PSS sampled from here on (metrics.json: peak_pss_mib)
    configure_threading()  # before the first parallel kernel (clustering, renumbering)
    device = resolve_device(cfg.run.device)
    if data is None:
        check_data_root(cfg.data.data_root, cfg.data.dataset)
    with RunDir(cfg.run.out):  # held until the run ends: a second run into it is refused
        return _train(cfg, data, device)


def _train(cfg: TrainConfig, data: GraphData | None, device) -> TrainResult:
    run = cfg.run
    if data is None:
        data = cfg.data.load(progress=run.progress)  # validated, --symmetrize applied
    else:  # a caller's GraphData: checked like a file (dtypes, labels, undirected graph)
        data.validate()
    out = Path(run.out)
    signature = run_signature(cfg.result_params(), data.fingerprint())
    ckpt = read_checkpoint(out / CHECKPOINT, signature, run.epochs) if run.resume else None
    if cfg.sampling.batch_size > data.train_idx.shape[0]:
        log.warning("batch size %d exceeds the %d training vertices: one batch per epoch",
                    cfg.sampling.batch_size, data.train_idx.shape[0])
    model, opt, epochs_log, start_epoch = build_training(cfg, data, device, ckpt)
    if ckpt is not None:
        torch.set_rng_state(ckpt["torch_rng"])
        log.info("resuming from %s after epoch %d", out / CHECKPOINT, start_epoch)

    prep = locality_for(data, [cfg.sampling.schedule], cfg)
    data = prep.data
    loader = make_loader(cfg, data, device,
                         parts=None if prep.clustering is None else prep.clustering.parts)
    feat = eval_features(data, loader)
    labels = loader.labels
    logits = None

    with loader.plan.applied():
        for epoch in range(start_epoch, run.epochs):
            try:
                rec = train_epoch(model, opt, loader, epoch, run.progress, amp=cfg.model.amp)
                check_finite_weights(model, opt, rec)
            except TrainingDiverged as e:
                write_diverged(out, cfg, device, loader.plan, epochs_log, e,
                               dataset=data.summary())
                raise
            if evaluates_after(cfg, epoch):
                t = time.perf_counter()
                logits = layerwise_inference(model, loader.sampler, feat, device,
                                             run.eval_batch_edges, scratch_dir=out)
                rec["val_acc"] = accuracy(logits, labels, data.val_idx)
                rec["test_acc"] = accuracy(logits, labels, data.test_idx)
                rec["eval_s"] = time.perf_counter() - t
            epochs_log.append(rec)
            log_epoch(rec)
            save_checkpoint(out, model, opt, signature, epochs_log,
                            torch_rng=torch.get_rng_state(), config=cfg.flat())
            write_metrics(out, cfg, device, loader.plan, epochs_log, dataset=data.summary())

        if logits is None:  # resumed a finished run: evaluate the final model again
            logits = layerwise_inference(model, loader.sampler, feat, device,
                                         run.eval_batch_edges, scratch_dir=out)
    val_acc = accuracy(logits, labels, data.val_idx)
    test_acc = accuracy(logits, labels, data.test_idx)
    write_metrics(out, cfg, device, loader.plan, epochs_log, (val_acc, test_acc), status="ok",
                  dataset=data.summary())
    log.info("final  val_acc %s  test_acc %s  -> %s", _fmt(val_acc), _fmt(test_acc), out / METRICS)
    if prep.perm is not None:  # report per-vertex results in the caller's ids
        logits = to_original_order(logits, prep.perm)
    return TrainResult(val_acc, test_acc, epochs_log, out, logits)


def diverged(epoch: int, step: int, loss: float, opt, what: str = "") -> TrainingDiverged:
    """The :class:`TrainingDiverged` of a non-finite loss (or, ``what``, weights) at
    ``epoch``/``step`` (0-based) of a run optimised by ``opt``."""
    lr = opt.param_groups[0]["lr"] if opt.param_groups else float("nan")
    return TrainingDiverged(f"training diverged at epoch {epoch} step {step} ({what}loss "
                            f"{loss:g}); lower --lr (now {lr:g}) or check the features for "
                            f"non-finite values", epoch=epoch, step=step, loss=loss)


def check_finite_weights(model, opt, rec: dict) -> None:
    """Raise :func:`diverged` if a parameter of ``model`` is no longer finite after the epoch
    of ``rec`` (one reduction per parameter tensor, once an epoch)."""
    if all(bool(torch.isfinite(p).all()) for p in model.parameters()):
        return
    raise diverged(rec["epoch"], max(rec.get("num_batches", 1) - 1, 0), rec["loss"], opt,
                   what="non-finite weights, ")


def write_diverged(out: Path, cfg: TrainConfig, device, plan: ThreadPlan, epochs_log: list,
                   err: TrainingDiverged, **extra) -> None:
    """``metrics.json`` of a run stopped by ``err``: ``"status": "diverged"``, where
    (``diverged``: epoch, step, loss as text), no accuracies. A failure to write it is logged:
    the divergence stays the error reported."""
    record = {"epoch": err.epoch, "step": err.step, "loss": f"{err.loss:g}",
              "message": str(err)}
    try:
        write_metrics(out, cfg, device, plan, epochs_log, status="diverged", diverged=record,
                      **extra)
    except TwopgraphError as w:
        log.warning("%s", w)


def evaluates_after(cfg: TrainConfig, epoch: int) -> bool:
    """Whether epoch ``epoch`` (0-based) ends with an exact evaluation: every ``eval_every``
    epochs, and always after the last."""
    run = cfg.run
    return epoch == run.epochs - 1 or bool(run.eval_every and (epoch + 1) % run.eval_every == 0)


def build_training(cfg: TrainConfig, data: GraphData, device, ckpt: dict | None = None):
    """The model (initialised from ``torch.manual_seed(seed)``, so every process builds the
    same weights) and its Adam optimizer, restored from ``ckpt`` when resuming.
    Returns ``(model, optimizer, epochs_log, start_epoch)``."""
    m = cfg.model
    torch.manual_seed(cfg.run.seed)
    model = build_model(m.model, data.num_features, m.hidden, data.num_classes,
                        len(cfg.sampling.fanouts), m.dropout).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=m.lr, weight_decay=m.weight_decay)
    if ckpt is None:
        return model, opt, [], 0
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    return model, opt, list(ckpt["epochs_log"]), ckpt["epochs_done"]


def locality_for(data: GraphData, schedules, cfg):
    """:func:`~twopgraph.partition.prepare_locality` for runs using ``schedules`` (scheduler
    names) with the sampling options of ``cfg``: METIS clusters when one of them needs them
    or ``renumber``, cached under DATA_ROOT/clusters."""
    from .datasets import resolve_data_root
    s = cfg.sampling
    return prepare_locality(
        data, batch_size=s.batch_size, num_clusters=s.num_clusters,
        need_clusters=any(getattr(SCHEDULERS.get(n), "needs_clusters", False) for n in schedules),
        renumber_graph=s.renumber, cache_dir=resolve_data_root(cfg.data.data_root) / "clusters")


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.4f}"


def log_epoch(rec: dict) -> None:
    log.info("epoch %d  loss %.4f  val_acc %s  epoch_s %.2f  sample_s %.2f  load_s %.2f  "
             "compute_s %.2f  inputs/batch %.0f", rec["epoch"], rec["loss"],
             _fmt(rec.get("val_acc")), rec["epoch_s"], rec["sample_s"], rec["load_s"],
             rec["compute_s"], rec["input_nodes_per_batch"])


# The step's loss and accuracy stay on the device; the host reads them (one synchronisation)
# every READ_EVERY steps, at the end of the epoch and, with a progress bar, READ_SECONDS after
# the last read (so a slow epoch's bar still moves).
READ_EVERY = 20
READ_SECONDS = 0.5


class StepTally:
    """Loss x seeds, correct predictions and the first non-finite loss of an epoch's steps,
    kept on the device without a host synchronisation per step.

    :meth:`add` writes step ``k``'s loss and correct count into row ``k`` of a small device
    buffer (two device copies, no sync); :meth:`read` copies the rows written since the last
    read to the host -- the one synchronisation -- and folds them into host sums, noting the
    first non-finite loss with its exact step and value. ``rows`` steps fit between reads.
    """

    def __init__(self, device, rows: int = READ_EVERY):
        self.buf = torch.zeros((rows, 2), dtype=torch.float64, device=device)
        self.pending: list[int] = []  # seeds of each step written since the last read
        self.steps = 0  # steps read so far
        self.loss_sum, self.correct, self.seen = 0.0, 0, 0
        self.nonfinite: dict | None = None  # {"step", "loss"} of the first non-finite loss
        self.reads = 0

    @property
    def full(self) -> bool:
        return len(self.pending) == self.buf.shape[0]

    def add(self, loss: torch.Tensor, correct: torch.Tensor, n: int) -> None:
        """Step ``loss`` (0-d, detached) with ``correct`` (0-d count) of ``n`` seeds. The
        caller reads before the buffer overflows (:attr:`full`)."""
        row = self.buf[len(self.pending)]
        row[0] = loss
        row[1] = correct
        self.pending.append(n)

    def read(self) -> int:
        """Fold the steps since the last read into the host sums; returns how many."""
        k = len(self.pending)
        if k == 0:
            return 0
        vals = self.buf[:k].cpu().numpy()  # the one host synchronisation
        n = np.asarray(self.pending, dtype=np.float64)
        bad = ~np.isfinite(vals[:, 0])
        if self.nonfinite is None and bad.any():
            i = int(np.argmax(bad))
            self.nonfinite = {"step": self.steps + i, "loss": float(vals[i, 0])}
        self.loss_sum += float((vals[:, 0] * n).sum())
        self.correct += round(float(vals[:, 1].sum()))
        self.seen += int(n.sum())
        self.steps += k
        self.pending.clear()
        self.reads += 1
        return k


def autocast(device, amp: str = "off"):
    """The autocast context of ``--amp``: ``bf16`` = ``torch.autocast`` to bfloat16 on
    ``device``'s type (CUDA or CPU), ``off`` = a disabled one."""
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16,
                          enabled=amp == "bf16")


def train_epoch(model, opt, loader: Loader, epoch: int, progress: bool = True,
                stop_on_nonfinite: bool = True, amp: str = "off") -> dict:
    """One epoch of ``loader``'s batches through ``model`` (cross-entropy, ``opt`` step per
    batch; forward and loss under :func:`autocast` ``amp``); returns the epoch's record
    (DESIGN.md metrics, seconds, ``sampler_device``, ``amp``).

    No host synchronisation inside a step: loss and accuracy are accumulated on the device
    (:class:`StepTally`) and read every ``READ_EVERY`` steps, at the end of the epoch and, with
    a progress bar, after ``READ_SECONDS``. On CUDA ``compute_s`` is therefore the host's time
    queueing the steps plus its waits at those reads (where the device's backlog drains), and
    ``epoch_s`` ends with the last read. A non-finite loss is found at the next read, with its
    exact step: it raises :class:`TrainingDiverged` (:func:`diverged`), or, without
    ``stop_on_nonfinite`` (ranks of a distributed run, which must stop together), is recorded
    as ``rec["nonfinite"] = {"step", "loss"}`` while the epoch runs to its end."""
    model.train()
    t0, cpu0 = time.perf_counter(), time.process_time()
    compute_s = 0.0
    tally = StepTally(loader.device)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(loader), desc=f"epoch {epoch}", unit="batch",
                   leave=False, dynamic_ncols=True)

    def read() -> None:
        k = tally.read()
        if tally.nonfinite is not None and stop_on_nonfinite:
            bad = tally.nonfinite
            raise diverged(epoch, bad["step"], bad["loss"], opt)
        if bar is not None and k:
            el = time.perf_counter() - t0
            bar.set_postfix(loss=f"{tally.loss_sum / max(tally.seen, 1):.4f}",
                            seeds_s=f"{tally.seen / el:.0f}")
            bar.update(k)

    batches = loader.epoch(epoch)
    last_read = t0
    try:
        for mb in batches:
            tc = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with autocast(loader.device, amp):
                logits = model(mb)
                loss = F.cross_entropy(logits, mb.labels)
            loss.backward()
            opt.step()
            tally.add(loss.detach(), (logits.detach().argmax(1) == mb.labels).sum(),
                      mb.num_seeds)
            now = time.perf_counter()
            if tally.full or (bar is not None and now - last_read >= READ_SECONDS):
                read()
                last_read = now = time.perf_counter()
            compute_s += now - tc
        tc = time.perf_counter()
        read()  # the epoch's last steps
        compute_s += time.perf_counter() - tc
    finally:
        batches.close()
        if bar is not None:
            bar.close()
    epoch_s = time.perf_counter() - t0
    cpu_s = time.process_time() - cpu0  # every thread of the process
    seen = tally.seen
    rec = {"epoch": epoch, "loss": tally.loss_sum / max(seen, 1),
           "train_acc": tally.correct / max(seen, 1), "epoch_s": epoch_s,
           "compute_s": compute_s, "seeds_per_s": seen / epoch_s, "cpu_s": cpu_s,
           "cpu_per_wall": cpu_s / epoch_s, "sampler_device": loader.sampler_device.type,
           "amp": amp}
    rec.update(loader.stats.as_dict())
    if tally.nonfinite is not None:
        rec["nonfinite"] = tally.nonfinite
    return rec
