"""The Loader owns the pipeline's threads: how many, numba's count inside each, the same
batches whatever the plan, and the announce-before-gather contract of feature sources."""

from __future__ import annotations

import sys
import threading

import numba
import numpy as np
import pytest
import torch

from twopgraph.cache import FeatureCache, HostFeatures, PolicyContext, make_policy
from twopgraph.graph.data import CSRGraph
from twopgraph.locality import RandomScheduler
from twopgraph.pipeline.loader import Loader, ThreadPlan
from twopgraph.runtime.priority import BACKGROUND_NICE, thread_nice
from twopgraph.sampler import NeighborSampler


def _graph(n=600, deg=6, seed=0):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, n * deg)
    dst = rng.integers(0, n, n * deg)
    keep = src != dst
    return CSRGraph.from_edges(src[keep], dst[keep], num_nodes=n)


class Spy:
    """A sampler that records, per call, the calling thread and numba's count there."""

    def __init__(self, inner):
        self.inner, self.graph, self.fanouts = inner, inner.graph, inner.fanouts
        self.calls = []
        self.lock = threading.Lock()

    def sample(self, seeds, key=None, parallel=True):
        with self.lock:
            self.calls.append((threading.current_thread().name, numba.get_num_threads(),
                               parallel))
        return self.inner.sample(seeds, key, parallel)

    def full_block(self, a, b):
        return self.inner.full_block(a, b)


@pytest.mark.parametrize("threads, prefetch, want", [
    (1, 2, ThreadPlan(1, 1, 1, False)),
    (2, 2, ThreadPlan(2, 2, 1, True)),
    (8, 2, ThreadPlan(8, 8, 2, True)),
    (4, 0, ThreadPlan(4, 4, 4, False)),
])
def test_thread_plan(threads, prefetch, want):
    assert ThreadPlan.for_threads(threads, prefetch) == want


def test_one_thread_runs_everything_in_the_callers_thread():
    g = _graph()
    spy = Spy(NeighborSampler(g, [4, 4], seed=1))
    loader = Loader(RandomScheduler(np.arange(300), 50, seed=0), spy,
                    HostFeatures(torch.randn(g.num_nodes, 3)), threads=1)
    before = threading.active_count()
    seen = []
    with loader.plan.applied():
        assert torch.get_num_threads() == 1 and numba.get_num_threads() == 1
        for mb in loader.epoch(0):
            seen.append(threading.active_count())
    assert max(seen) == before  # no thread started
    assert {name for name, _, _ in spy.calls} == {threading.current_thread().name}
    assert all(n == 1 and not par for _, n, par in spy.calls)


def test_sampling_workers_run_serial_with_one_numba_thread():
    g = _graph()
    spy = Spy(NeighborSampler(g, [4, 4], seed=1))
    loader = Loader(RandomScheduler(np.arange(600), 40, seed=0), spy, threads=8)
    assert loader.plan.workers == 2
    loader.sample_epoch(0)  # sampling only: every thread samples
    names = {name for name, _, _ in spy.calls}
    assert len(names) > 1 and threading.current_thread().name not in names
    assert all(n == 1 and not par for _, n, par in spy.calls)


class NiceRecording(NeighborSampler):
    """A sampler that records the nice value of the thread of every call."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.nices = []

    def sample(self, seeds, key=None, parallel=True):
        self.nices.append(thread_nice())
        return super().sample(seeds, key, parallel)


@pytest.mark.skipif(sys.platform != "linux", reason="per-thread nice values: Linux")
@pytest.mark.parametrize("threads", [2, 8])
def test_a_cpu_epochs_background_threads_give_way_to_the_step(threads):
    """CPU training: the threads that sample ahead (the prefetch thread with 2 threads, the
    workers with 8) run at BACKGROUND_NICE; the caller's thread (the step's) keeps its own."""
    main = thread_nice()
    if main >= BACKGROUND_NICE:
        pytest.skip("this process already runs at the background nice value")
    g = _graph()
    spy = NiceRecording(g, [4, 4])
    loader = Loader(RandomScheduler(np.arange(600), 40, seed=0), spy,
                    HostFeatures(torch.randn(g.num_nodes, 3)), threads=threads)
    assert loader.background_nice == BACKGROUND_NICE
    assert sum(1 for _ in loader.epoch(0)) == 15
    loader.close()
    assert len(spy.nices) == 15 and set(spy.nices) == {BACKGROUND_NICE}
    assert thread_nice() == main


@pytest.mark.skipif(sys.platform != "linux", reason="per-thread nice values: Linux")
def test_sampling_workers_take_the_nice_value_they_are_given():
    """Workers started from the caller's thread (which keeps its own value) take ``nice``."""
    from twopgraph.sampler.stream import sampled_batches
    if thread_nice() >= 7:
        pytest.skip("this process already runs at nice 7")
    g = _graph()
    main = thread_nice()
    spy = NiceRecording(g, [4])
    got = list(sampled_batches(RandomScheduler(np.arange(600), 40, seed=0), spy, 0,
                               workers=2, nice=7))
    assert len(got) == len(spy.nices) == 15 and set(spy.nices) == {7}
    assert thread_nice() == main


@pytest.mark.parametrize("threads, prefetch", [(1, 0), (2, 2), (3, 1), (8, 4)])
def test_batches_do_not_depend_on_the_thread_plan(threads, prefetch):
    g = _graph()
    feat = torch.randn(g.num_nodes, 5)
    labels = torch.arange(g.num_nodes)

    def run(t, p):
        loader = Loader(RandomScheduler(np.arange(500), 64, seed=3),
                        NeighborSampler(g, [5, 3], seed=7), HostFeatures(feat), labels,
                        prefetch=p, threads=t)
        return [(mb.input_nodes.clone(), mb.features.clone(), mb.labels.clone(),
                 [b.indices.clone() for b in mb.blocks]) for mb in loader.epoch(2)]

    ref, got = run(1, 0), run(threads, prefetch)
    assert len(ref) == len(got) == 8
    for (a_in, a_f, a_l, a_b), (b_in, b_f, b_l, b_b) in zip(ref, got):
        assert torch.equal(a_in, b_in) and torch.equal(a_f, b_f) and torch.equal(a_l, b_l)
        assert all(torch.equal(x, y) for x, y in zip(a_b, b_b))
        assert torch.equal(a_f, feat[a_in]) and torch.equal(a_l, labels[a_in[:a_l.shape[0]]])


def test_stats_count_every_row_once():
    g = _graph()
    loader = Loader(RandomScheduler(np.arange(600), 100, seed=0),
                    NeighborSampler(g, [3], seed=0), HostFeatures(torch.randn(g.num_nodes, 4)),
                    threads=2)
    rows = sum(int(mb.input_nodes.shape[0]) for mb in loader.epoch(0))
    s = loader.stats.as_dict()
    assert s["num_batches"] == 6 and s["num_seeds"] == 600
    assert s["feature_rows"] == rows and s["h2d_bytes"] == rows * 16
    assert s["transfer_ratio"] == 1.0 and s["hit_rate"] == 0.0


def test_a_window_source_refuses_an_unannounced_gather():
    """The announce-before-gather contract is real for a source with a window: the loader
    keeps it, a hand-written gather that skips it is refused."""
    g = _graph()
    ctx = PolicyContext(g, np.arange(300), [3], 50)
    cache = FeatureCache(torch.randn(g.num_nodes, 2), make_policy("layer", ctx), budget=100)
    loader = Loader(RandomScheduler(np.arange(300), 50, seed=0), NeighborSampler(g, [3]), cache,
                    threads=2)
    assert sum(1 for _ in loader.epoch(0)) == 6  # the loader announces: fine
    with pytest.raises(RuntimeError, match="without a pending announced batch"):
        cache.gather(np.array([0, 1, 2]))


def test_closing_an_epoch_early_stops_its_threads():
    """An epoch closed early stops its pipeline threads; only the loader's sampling workers
    stay (idle, kept for the next epoch), and :meth:`Loader.close` stops them."""
    g = _graph()
    before = threading.active_count()
    loader = Loader(RandomScheduler(np.arange(600), 20, seed=0), NeighborSampler(g, [4, 4]),
                    HostFeatures(torch.randn(g.num_nodes, 2)), threads=8)
    it = loader.epoch(0)
    next(it)
    it.close()
    kept = {t for t in threading.enumerate() if t.name.startswith("twopgraph-sampler")}
    assert threading.active_count() == before + len(kept)
    assert len(kept) <= loader.plan.workers
    loader.close()
    assert threading.active_count() == before


def test_sampling_workers_are_kept_across_epochs():
    """The second epoch samples on the threads of the first (their relabelling state and
    heap are warm), and its batches are the same as a fresh loader's."""
    g = _graph()
    seen = []

    class Recording(NeighborSampler):
        def sample(self, seeds, key=None, parallel=True):
            seen.append(threading.current_thread())
            return super().sample(seeds, key, parallel)

    def fresh():
        return Loader(RandomScheduler(np.arange(600), 20, seed=0), Recording(g, [4, 4]),
                      None, threads=4, prefetch=0)
    loader = fresh()
    loader.sample_epoch(0)
    first = set(seen)
    seen.clear()
    again = loader.input_stream(1)
    # the kept pool's threads sample again (a new pool has new Thread objects); the pool may
    # also start a thread epoch 0 did not need, so no subset check
    assert set(seen) & first and len(first) > 1
    loader.close()
    other = fresh()
    assert all(np.array_equal(a, b) for a, b in zip(again, other.input_stream(1), strict=True))
    other.close()
