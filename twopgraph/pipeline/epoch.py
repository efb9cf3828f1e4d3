"""One training epoch (:func:`train_epoch`): the steps of a loader's batches, the loss and
accuracy kept on the device between reads (:class:`StepTally`), ``--amp`` (:func:`autocast`),
TF32 matmuls on CUDA (:func:`tf32`), and divergence (:func:`diverged`: a non-finite
loss; :func:`check_finite_weights`: non-finite weights after an epoch). Used alike by the
single-process loop (:mod:`twopgraph.run.train`) and the ranks of a distributed run
(:mod:`twopgraph.distributed.trainer`).

GPU stage times: on CUDA the epoch owns a :class:`~twopgraph.runtime.gputime.StageTimer`;
the training step is timed here (``compute``, on the step's stream), and the loader times its
gathers (``load``, on the feature source's stream) and device sampling (``sample``, on its
sampling stream) through the same timer, handed to it as ``loader.gpu_timer`` for the epoch.
The record gets ``load_gpu_s``, ``sample_gpu_s``, ``compute_gpu_s`` (seconds on the device;
null on the CPU, and for a stage nothing timed) read once at the end of the epoch.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F

from twopgraph.errors import TrainingDiverged
from twopgraph.pipeline.loader import Loader
from twopgraph.runtime.gputime import gpu_span, gpu_times, stage_timer
from twopgraph.runtime.heap import BatchHeap

log = logging.getLogger("twopgraph")


def diverged(epoch: int, step: int, loss: float, opt: torch.optim.Optimizer,
             what: str = "") -> TrainingDiverged:
    """The :class:`TrainingDiverged` of a non-finite loss (or, ``what``, weights) at
    ``epoch``/``step`` (0-based) of a run optimised by ``opt``."""
    lr = opt.param_groups[0]["lr"] if opt.param_groups else float("nan")
    return TrainingDiverged(f"training diverged at epoch {epoch} step {step} ({what}loss "
                            f"{loss:g}); lower --lr (now {lr:g}) or check the features for "
                            f"non-finite values", epoch=epoch, step=step, loss=loss)


def check_finite_weights(model: torch.nn.Module, opt: torch.optim.Optimizer,
                         rec: dict) -> None:
    """Raise :func:`diverged` if a parameter of ``model`` is no longer finite after the epoch
    of ``rec`` (one reduction per parameter tensor, once an epoch)."""
    if all(bool(torch.isfinite(p).all()) for p in model.parameters()):
        return
    raise diverged(rec["epoch"], max(rec.get("num_batches", 1) - 1, 0), rec["loss"], opt,
                   what="non-finite weights, ")


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

    def __init__(self, device: torch.device | str, rows: int = READ_EVERY) -> None:
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


def autocast(device: torch.device | str, amp: str = "off") -> torch.autocast:
    """The autocast context of ``--amp``: ``bf16`` = ``torch.autocast`` to bfloat16 on
    ``device``'s type (CUDA or CPU), ``off`` = a disabled one."""
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16,
                          enabled=amp == "bf16")


@contextlib.contextmanager
def tf32(device: torch.device | str) -> Iterator[bool]:
    """Inside the block, float32 matmuls on CUDA may use TensorFloat-32 (10-bit mantissa
    products, float32 accumulation: ``torch.set_float32_matmul_precision("high")``), set once
    at the start of a CUDA run with one log line and restored after it; yields True when TF32
    is on. On the CPU (or any other device) nothing is changed: False. A precision the caller
    lowered already (``high``/``medium``) is kept as it is."""
    if torch.device(device).type != "cuda":
        yield False
        return
    before = torch.get_float32_matmul_precision()
    if before == "highest":
        torch.set_float32_matmul_precision("high")
        log.info("TF32 on for float32 matmuls on %s (torch.set_float32_matmul_precision"
                 "('high'))", device)
    try:
        yield True
    finally:
        torch.set_float32_matmul_precision(before)


def train_epoch(model: torch.nn.Module, opt: torch.optim.Optimizer, loader: Loader,
                epoch: int, progress: bool = True, stop_on_nonfinite: bool = True,
                amp: str = "off", profiler=None) -> dict:
    """One epoch of ``loader``'s batches through ``model`` (cross-entropy, ``opt`` step per
    batch; forward and loss under :func:`autocast` ``amp``); returns the epoch's record
    (the metrics of docs/formats.md, seconds, ``sampler_device``, ``amp``).

    No host synchronisation inside a step: loss and accuracy are accumulated on the device
    (:class:`StepTally`) and read every ``READ_EVERY`` steps, at the end of the epoch and, with
    a progress bar, after ``READ_SECONDS``. On CUDA ``compute_s`` is therefore the host's time
    queueing the steps plus its waits at those reads (where the device's backlog drains), and
    ``epoch_s`` ends with the last read. A non-finite loss is found at the next read, with its
    exact step: it raises :class:`TrainingDiverged` (:func:`diverged`), or, without
    ``stop_on_nonfinite`` (ranks of a distributed run, which must stop together), is recorded
    as ``rec["nonfinite"] = {"step", "loss"}`` while the epoch runs to its end.

    GPU times (CUDA): ``load_gpu_s``, ``sample_gpu_s``, ``compute_gpu_s`` from CUDA events
    (see the module doc; no synchronisation per step: the events are read once, after the
    last read); None on the CPU. ``profiler`` (``--profile``: a
    :class:`~twopgraph.run.profile.StepProfiler`, started by the caller) is stepped after
    every training step."""
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

    timer = stage_timer(loader.device)
    loader.gpu_timer = timer  # the loader's gathers and device sampling time through it
    step_stream = None if timer is None else torch.cuda.current_stream(loader.device)
    batches = loader.epoch(epoch)
    last_read = t0
    gov = getattr(loader, "governor", None)
    plan = None if gov is None else gov.memory_plan
    keep = None if plan is None else plan.heap_keep_bytes
    # batches reuse the pages the last one freed; with no room to keep any (the memory
    # governor's plan), blocks are mapped and unmapped as glibc does by default
    heap = BatchHeap(keep=keep) if keep != 0 else None
    if heap is not None:
        heap.__enter__()
    if gov is not None:  # memory short during the epoch: heap first, then the queue
        gov.clear_steps()
        if heap is not None:
            gov.on_short("epoch heap returned to the system (blocks no longer kept)",
                         lambda: _heap_off(heap))
        gov.on_short("one batch fewer gathered ahead", loader.shrink_prefetch)
    try:
        for mb in batches:
            tc = time.perf_counter()
            with gpu_span(timer, "compute", step_stream):
                opt.zero_grad(set_to_none=True)
                with autocast(loader.device, amp):
                    logits = model(mb)
                    loss = F.cross_entropy(logits, mb.labels)
                loss.backward()
                opt.step()
                tally.add(loss.detach(), (logits.detach().argmax(1) == mb.labels).sum(),
                          mb.num_seeds)
            if profiler is not None:
                profiler.step()
            now = time.perf_counter()
            if tally.full or (bar is not None and now - last_read >= READ_SECONDS):
                read()
                last_read = now = time.perf_counter()
            if heap is not None:
                heap.step()
            if gov is not None:
                gov.watch()
            compute_s += time.perf_counter() - tc
        tc = time.perf_counter()
        read()  # the epoch's last steps
        compute_s += time.perf_counter() - tc
    finally:
        batches.close()
        loader.gpu_timer = None
        if heap is not None:
            heap.__exit__(None, None, None)  # after the loader's threads stopped
        if gov is not None:
            gov.clear_steps()
        if bar is not None:
            bar.close()
    epoch_s = time.perf_counter() - t0
    cpu_s = time.process_time() - cpu0  # every thread of the process
    seen = tally.seen
    rec = {"epoch": epoch, "loss": tally.loss_sum / max(seen, 1),
           "train_acc": tally.correct / max(seen, 1), "epoch_s": epoch_s,
           "compute_s": compute_s, "seeds_per_s": seen / epoch_s, "cpu_s": cpu_s,
           "cpu_per_wall": cpu_s / epoch_s, "sampler_device": loader.sampler_device.type,
           "amp": amp, "heap_trims": 0 if heap is None else heap.trims,
           "prefetch": loader.prefetch}
    rec.update(loader.stats.as_dict())
    rec.update(gpu_times(timer))  # after the last read: the device has drained
    if tally.nonfinite is not None:
        rec["nonfinite"] = tally.nonfinite
    return rec


def _heap_off(heap: BatchHeap) -> bool:
    """Return the heap's kept blocks and glibc's mapping of large blocks (for the rest of
    the epoch); False when it was off already."""
    if not heap.active:
        return False
    heap.__exit__(None, None, None)
    return True
