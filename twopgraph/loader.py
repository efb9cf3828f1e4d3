"""The mini-batch pipeline as plain generator stages, with a prefetch thread around it.

    schedule -> sample -> gather features + labels -> (prefetch queue) -> to device

Sampling (numba, GIL released) and gathering (torch index_select, GIL released) of the next
batches run in a background thread while the main thread trains on the current one. Times and
row/byte counts of each stage are accumulated in :class:`EpochStats` (DESIGN.md metrics).
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import asdict, dataclass
from typing import Iterator

import numpy as np
import torch

from . import kernels
from .sampler.minibatch import MiniBatch


@dataclass
class EpochStats:
    """Per-epoch counters; times in seconds, bytes in bytes, rows in feature rows."""

    num_batches: int = 0
    num_seeds: int = 0
    feature_rows: int = 0
    h2d_bytes: int = 0
    row_bytes: int = 0
    sample_s: float = 0.0
    load_s: float = 0.0

    @property
    def input_nodes_per_batch(self) -> float:
        return self.feature_rows / self.num_batches if self.num_batches else 0.0

    @property
    def transfer_ratio(self) -> float:
        full = self.feature_rows * self.row_bytes
        return self.h2d_bytes / full if full else 0.0

    def as_dict(self) -> dict:
        d = asdict(self)
        d["input_nodes_per_batch"] = self.input_nodes_per_batch
        d["transfer_ratio"] = self.transfer_ratio
        return d


class HostFeatureGather:
    """No-cache feature loading: every input row is copied from the host table each batch.

    ``feat`` is the host table (torch, N x F); rows go to ``device`` (for CPU the "device" is
    host memory and the same accounting applies: h2d_bytes = rows x bytes per row).
    """

    def __init__(self, feat: torch.Tensor, device: torch.device):
        self.feat = feat
        self.device = torch.device(device)
        self.row_bytes = feat.shape[1] * feat.element_size()

    def gather(self, input_nodes: torch.Tensor, stats: EpochStats) -> torch.Tensor:
        rows = torch.index_select(self.feat, 0, input_nodes)
        if self.device.type == "cuda":
            rows = rows.pin_memory().to(self.device, non_blocking=True)
        stats.feature_rows += int(input_nodes.shape[0])
        stats.h2d_bytes += int(input_nodes.shape[0]) * self.row_bytes
        stats.row_bytes = self.row_bytes
        return rows


def sampled_batches(scheduler, sampler, epoch: int, stats: EpochStats) -> Iterator[MiniBatch]:
    """Stage 1+2: seeds from the scheduler, expanded by the sampler (timed into sample_s)."""
    for b, seeds in enumerate(scheduler.batches(epoch)):
        t = time.perf_counter()
        mb = sampler.sample(seeds, key=kernels.mix_key(epoch, b))
        mb.batch_id = b
        stats.sample_s += time.perf_counter() - t
        stats.num_batches += 1
        stats.num_seeds += mb.num_seeds
        yield mb


def with_features(batches: Iterator[MiniBatch], gather, labels: torch.Tensor | None,
                  stats: EpochStats) -> Iterator[MiniBatch]:
    """Stage 3: input features (timed into load_s) and seed labels."""
    for mb in batches:
        t = time.perf_counter()
        mb.features = gather.gather(mb.input_nodes, stats)
        stats.load_s += time.perf_counter() - t
        if labels is not None:
            mb.labels = labels[mb.seeds]
        yield mb


_DONE = object()


def prefetch(it: Iterator, depth: int = 2) -> Iterator:
    """Run ``it`` in a background thread, ``depth`` items ahead. Exceptions are re-raised in
    the consumer; closing the consumer stops the producer."""
    if depth <= 0:
        yield from it
        return
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce():
        try:
            for item in it:
                while not stop.is_set():
                    try:
                        q.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(_DONE)
        except BaseException as e:  # handed to the consumer
            q.put(e)

    th = threading.Thread(target=produce, name="twopgraph-prefetch", daemon=True)
    th.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while th.is_alive():
            try:
                q.get_nowait()
            except queue.Empty:
                th.join(timeout=0.05)


def epoch_batches(scheduler, sampler, gather, labels, epoch: int, stats: EpochStats,
                  device, prefetch_depth: int = 2) -> Iterator[MiniBatch]:
    """The whole pipeline for one epoch; yields mini-batches ready on ``device``."""
    it = with_features(sampled_batches(scheduler, sampler, epoch, stats), gather, labels, stats)
    for mb in prefetch(it, prefetch_depth):
        yield mb.to(device, non_blocking=True)


def sample_epoch(scheduler, sampler, epoch: int = 0) -> EpochStats:
    """Sampling only (no features, no model): the figure ``bench sampler`` reports."""
    stats = EpochStats()
    for mb in sampled_batches(scheduler, sampler, epoch, stats):
        stats.feature_rows += int(mb.input_nodes.shape[0])
    return stats


def as_long_tensor(a) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))
