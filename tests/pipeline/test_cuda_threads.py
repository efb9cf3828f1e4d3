"""Every thread the pipeline starts makes the loader's CUDA device its current device before
its first CUDA call (issue 42, defect 1: a fresh thread's current device is GPU 0, and leaving a
``torch.cuda.stream`` block there creates a context on GPU 0 for a rank on GPU k).

On CPU, ``torch.cuda.set_device`` alone is replaced by a recorder: the threads, the loader and
the sampling stage are the real ones. The CUDA cases run a loader on ``cuda:1`` in a fresh
process and check that GPU 0 got no context."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

from twopgraph.cache import HostFeatures
from twopgraph.graph.data import CSRGraph
from twopgraph.locality import RandomScheduler
from twopgraph.pipeline.loader import Loader, _prefetch, with_index
from twopgraph.sampler import NeighborSampler
from twopgraph.sampler.stream import sampled_batches, use_device

CUDA1 = torch.device("cuda", 1)


def _graph(n=400, deg=5, seed=0):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, n * deg), rng.integers(0, n, n * deg)
    keep = src != dst
    return CSRGraph.from_edges(src[keep], dst[keep], num_nodes=n)


@pytest.fixture
def set_device_calls(monkeypatch):
    """``torch.cuda.set_device`` replaced by a recorder of ``(device, thread name)``."""
    calls, lock = [], threading.Lock()

    def record(device):
        with lock:
            calls.append((torch.device(device), threading.current_thread().name))

    monkeypatch.setattr(torch.cuda, "set_device", record)
    return calls


def test_prefetch_thread_sets_the_device_first(set_device_calls):
    order = []

    def items():
        order.append(("first item", list(set_device_calls)))
        yield from range(5)

    assert list(_prefetch(items(), 2, device=CUDA1)) == list(range(5))
    assert set_device_calls == [(CUDA1, "twopgraph-prefetch")]
    # set before the producer ran any of the pipeline's code
    assert order == [("first item", [(CUDA1, "twopgraph-prefetch")])]


@pytest.mark.parametrize("device", [None, torch.device("cpu")])
def test_prefetch_thread_sets_nothing_for_the_host(set_device_calls, device):
    assert list(_prefetch(iter(range(4)), 2, device=device)) == list(range(4))
    assert set_device_calls == []
    assert use_device(device) is False


def test_inline_pipeline_runs_each_step_under_a_device_guard(set_device_calls, monkeypatch):
    """prefetch 0: the stages run in the caller's thread, whose current device is not the
    loader's to change; each step runs under a guard of the loader's device instead, and
    closing the consumer closes the stages."""
    guard = []

    class Guard:
        def __init__(self, device):
            self.device = torch.device(device)

        def __enter__(self):
            guard.append(self.device)

        def __exit__(self, *exc):
            guard.append(None)

    monkeypatch.setattr(torch.cuda, "device", Guard)
    inside, closed = [], []

    def items():
        try:
            for i in range(3):
                inside.append(guard[-1] if guard else None)
                yield i
        finally:
            closed.append(guard[-1] if guard else None)

    out = _prefetch(items(), 0, device=CUDA1)
    assert next(out) == 0 and guard[-1] is None  # the guard is left between the items
    assert next(out) == 1
    out.close()
    assert inside == [CUDA1, CUDA1] and closed == [CUDA1]
    assert set_device_calls == []  # the caller's thread keeps its own device


def test_sampling_workers_set_the_device(set_device_calls):
    g = _graph()
    sched = RandomScheduler(np.arange(400), 20, seed=0)
    got = list(sampled_batches(sched, NeighborSampler(g, [3, 3], seed=1), 0, workers=3,
                               device=CUDA1))
    assert len(got) == 20
    names = {name for _, name in set_device_calls}
    assert names and all(n.startswith("twopgraph-sampler") for n in names)
    assert len(set_device_calls) == len(names) <= 3  # once per worker thread
    assert {d for d, _ in set_device_calls} == {CUDA1}


class OnDevice:
    """A sampler that says it lives on ``device`` (as the torch samplers do); samples on the
    host with ``inner``."""

    def __init__(self, inner, device):
        self.inner, self.device, self.graph = inner, device, inner.graph

    def sample(self, seeds, key=None, parallel=True):
        return self.inner.sample(seeds, key, parallel)


def test_sampling_workers_take_the_samplers_device(set_device_calls):
    g = _graph()
    sched = RandomScheduler(np.arange(400), 50, seed=0)
    list(sampled_batches(sched, OnDevice(NeighborSampler(g, [3], seed=1), "cuda:1"), 0,
                         workers=2))
    assert set_device_calls and {d for d, _ in set_device_calls} == {CUDA1}
    set_device_calls.clear()
    list(sampled_batches(sched, NeighborSampler(g, [3], seed=1), 0, workers=2))
    assert set_device_calls == []  # a host sampler: nothing


def test_loader_threads_set_its_device(set_device_calls):
    """The real pipeline (prefetch thread + 2 sampling workers) of a loader whose threads
    work on cuda:1: each thread sets it, the consumer's thread is left alone."""
    g = _graph()
    loader = Loader(RandomScheduler(np.arange(400), 25, seed=0), NeighborSampler(g, [3, 3]),
                    HostFeatures(torch.randn(g.num_nodes, 4)), torch.arange(g.num_nodes),
                    prefetch=2, threads=8)
    assert loader.thread_device is None  # a host loader: no CUDA in its threads
    assert loader.plan.workers == 2 and loader.prefetch == 2
    loader.thread_device = CUDA1  # what a loader on cuda:1 computes
    assert sum(1 for _ in loader.epoch(0)) == 16
    names = [name for _, name in set_device_calls]
    assert "twopgraph-prefetch" in names
    assert any(n.startswith("twopgraph-sampler") for n in names)
    assert threading.current_thread().name not in names
    assert {d for d, _ in set_device_calls} == {CUDA1}


def test_loader_on_the_host_sets_no_device(set_device_calls):
    g = _graph()
    loader = Loader(RandomScheduler(np.arange(400), 25, seed=0), NeighborSampler(g, [3, 3]),
                    HostFeatures(torch.randn(g.num_nodes, 4)), prefetch=2, threads=8)
    assert sum(1 for _ in loader.epoch(0)) == 16
    assert set_device_calls == []


def test_cuda_without_index_is_pinned_in_the_callers_thread(monkeypatch):
    """"cuda" means the current device of the thread that reads it: the loader reads it once,
    in the caller's thread, so its own threads (current device 0 until set) use that GPU."""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert with_index(torch.device("cuda")) == torch.device("cuda", 3)
    assert with_index(torch.device("cuda", 1)) == CUDA1
    assert with_index(torch.device("cpu")) == torch.device("cpu")


_NO_CONTEXT_ON_GPU0 = """
import numpy as np, torch
from twopgraph.cache import HostFeatures
from twopgraph.graph.data import CSRGraph
from twopgraph.locality import RandomScheduler
from twopgraph.pipeline.loader import Loader
from twopgraph.sampler import NeighborSampler
rng = np.random.default_rng(0)
n = 2000
g = CSRGraph.from_edges(rng.integers(0, n, 8 * n), rng.integers(0, n, 8 * n), num_nodes=n)
dev = torch.device("cuda", 1)
for prefetch, threads in ((2, 8), (0, 1)):
    loader = Loader(RandomScheduler(np.arange(n), 128, seed=0), NeighborSampler(g, [5, 5]),
                    HostFeatures(torch.randn(n, 16), dev), torch.arange(n), dev,
                    prefetch=prefetch, threads=threads)
    for mb in loader.epoch(0):
        assert mb.features.device == dev
torch.cuda.synchronize(dev)
print("context on GPU 0:", torch._C._cuda_hasPrimaryContext(0))
"""


@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_a_loader_on_cuda1_leaves_gpu0_alone():
    proc = subprocess.run([sys.executable, "-c", _NO_CONTEXT_ON_GPU0], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "context on GPU 0: False" in proc.stdout, proc.stdout + proc.stderr[-2000:]


@pytest.mark.cuda
def test_loader_threads_on_cuda_take_its_device():
    """On a GPU: the prefetch thread's current device is the loader's (the last GPU)."""
    dev = torch.device("cuda", torch.cuda.device_count() - 1)
    seen = []

    def items():
        seen.append(torch.cuda.current_device())
        yield 1

    assert list(_prefetch(items(), 1, device=dev)) == [1]
    assert seen == [dev.index]
