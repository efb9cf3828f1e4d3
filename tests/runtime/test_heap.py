"""glibc heap settings (``twopgraph/runtime/heap.py``): freed blocks of a MiB or more go back to the
system instead of staying in the arenas, which is what kept a long epoch's anonymous memory
from growing into the page cache of the mapped features."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from twopgraph import cli
from twopgraph.runtime import heap
from twopgraph.runtime.heap import configure_heap

PROBE = textwrap.dedent("""
    import sys, numpy as np
    from twopgraph.runtime.heap import configure_heap
    if sys.argv[1] == "1":
        assert configure_heap()
    def anon():
        for line in open("/proc/self/status"):
            if line.startswith("RssAnon"):
                return int(line.split()[1]) >> 10
    a = np.ones(16 << 20, np.uint8)  # freed: glibc raises its mmap threshold to 16 MiB
    del a
    base = anon()
    blocks = []
    for i in range(8):  # 6 MiB blocks from the arena, each pinned by a small one after it
        blocks.append(np.ones(6 << 20, np.uint8))
        blocks.append(np.ones(100, np.uint8))
    keep = blocks[1::2]
    del blocks
    print(anon() - base)
""")


def _retained(configured: bool) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", PROBE, "1" if configured else "0"], env=env,
                         capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc heap, /proc")
def test_freed_blocks_go_back_to_the_system():
    """48 MiB freed in 6 MiB blocks between small live ones: glibc's default keeps most of
    it (its threshold rose after the first large free); configured, nothing stays."""
    if _retained(False) < 12:
        pytest.skip("this libc returns the blocks anyway")
    assert _retained(True) < 4


def test_the_environment_wins(monkeypatch):
    """A setting given in the environment is not overridden; the other one still is."""
    import ctypes
    asked = []

    class FakeLibc:
        def mallopt(self, param, value):
            asked.append((param, value))
            return 1

    monkeypatch.setattr(ctypes, "CDLL", lambda *a, **k: FakeLibc())
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert configure_heap() is True and asked == []
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    assert configure_heap() is True and asked == [(heap.M_ARENA_MAX, heap.default_arenas())]


def test_one_arena_per_core_plus_two_within_bounds(monkeypatch):
    for cores, want in ((1, 3), (2, 4), (4, 6), (6, 8), (64, 8)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cores: set(range(n)))
        assert heap.default_arenas() == want


def test_the_cli_configures_the_heap_first(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr("twopgraph.runtime.heap.configure_heap", lambda *a, **k: calls.append(1))
    assert cli.main(["datasets"]) == 0
    assert calls == [1]


BATCHES = textwrap.dedent("""
    import ctypes, resource, sys
    from twopgraph.runtime.heap import BatchHeap, configure_heap
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    configure_heap()
    def anon():
        for line in open("/proc/self/status"):
            if line.startswith("RssAnon"):
                return int(line.split()[1]) >> 10
    mode = sys.argv[1]
    heap = BatchHeap(keep=1 << 20 if mode == "tight" else 1 << 30)
    if mode != "off":
        heap.__enter__()
    base = anon()
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for b in range(10):  # ten "batches" of 64 MiB, written and freed (4 KiB pages: plain
        p = libc.malloc(64 << 20)  # malloc, no huge-page advice as numpy gives)
        ctypes.memset(p, 1, 64 << 20)
        libc.free(p)
        heap.step()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    held = anon() - base
    heap.__exit__(None, None, None)
    print(faults, held, anon() - base, heap.trims)
""")


def _batches(mode: str) -> tuple[int, int, int, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", BATCHES, mode], env=env,
                         capture_output=True, text=True, check=True)
    return tuple(int(x) for x in out.stdout.split()[-4:])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc heap, /proc")
def test_batches_reuse_freed_pages_inside_an_epoch():
    """Ten 64 MiB blocks written and freed: mapped afresh, each faults its 16k pages in
    again; inside a BatchHeap the later ones reuse the first one's pages; leaving it keeps
    them (under keep) for the next epoch."""
    if heap._libc() is None:
        pytest.skip("not glibc 2.33+")
    off_faults, _, _, _ = _batches("off")
    on_faults, held, after, trims = _batches("on")
    assert off_faults > 8 * 16384  # every block faulted in again
    assert on_faults < 3 * 16384  # one block's pages, reused
    assert held >= 60 and trims == 0  # kept between batches: under keep (1 GiB)
    assert after >= held - 8  # kept when the epoch ends: under keep


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc heap, /proc")
def test_free_bytes_over_keep_are_returned_at_each_step():
    if heap._libc() is None:
        pytest.skip("not glibc 2.33+")
    _, held, _, trims = _batches("tight")  # keep 1 MiB: every step trims
    assert trims == 10 and held < 32


def test_the_environment_turns_the_batch_heap_off(monkeypatch):
    monkeypatch.setenv("MALLOC_MMAP_MAX_", "65536")
    with heap.BatchHeap() as h:
        h.step()
        assert not h.active and h.trims == 0


def test_small_epochs_skip_the_costly_calls(monkeypatch):
    """Under KEEP_MIN free bytes no step reads the memory available (the default keep) and
    no trim runs; past it the keep is computed once; an epoch ending with under EXIT_KEEP
    free bytes, or under its keep, is not trimmed, one ending with more is; glibc's trim
    threshold between epochs is the keep."""
    calls = {"trim": 0, "keep": 0}
    free = [0]

    class Info:
        @property
        def fordblks(self):
            return free[0]

    trim_threshold = []

    class FakeLibc:
        def mallopt(self, param, value):
            if param == heap.M_TRIM_THRESHOLD:
                trim_threshold.append(value)
            return 1

        def mallinfo2(self):
            return Info()

        def malloc_trim(self, pad):
            calls["trim"] += 1

    def keep():
        calls["keep"] += 1
        return heap.KEEP_MIN * 2

    monkeypatch.setattr(heap, "_libc", lambda: FakeLibc())
    monkeypatch.setattr(heap, "default_keep", keep)
    for var in ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_"):
        monkeypatch.delenv(var, raising=False)
    with heap.BatchHeap() as h:
        free[0] = heap.EXIT_KEEP // 2
        h.step()
        h.step()
    assert h.keep is None and calls == {"trim": 0, "keep": 0}
    with heap.BatchHeap() as h:
        free[0] = heap.KEEP_MIN + 1  # past the floor, under the keep
        h.step()
        free[0] = heap.KEEP_MIN * 2 + 1  # past the keep
        h.step()
        h.step()
    assert calls == {"trim": 3, "keep": 1}  # two steps, and the epoch's end
    assert trim_threshold[-1] == heap.KEEP_MIN * 2  # between epochs: the epoch's keep
    with heap.BatchHeap(keep=1 << 30) as h:
        free[0] = 64 << 20  # past EXIT_KEEP, under the keep: kept for the next epoch
        h.step()
    assert calls == {"trim": 3, "keep": 1} and trim_threshold[-1] == 1 << 30


BETWEEN = textwrap.dedent("""
    import ctypes, resource
    from twopgraph.runtime.heap import BatchHeap, configure_heap
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    configure_heap()
    faults = []
    for epoch in range(3):  # eight 512 KiB blocks (under the mmap threshold) per epoch,
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        with BatchHeap(keep=1 << 30):
            blocks = [libc.malloc(512 << 10) for _ in range(8)]
            for p in blocks:
                ctypes.memset(p, 1, 512 << 10)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
        for p in blocks:  # the epoch's last batches are freed after it ends
            libc.free(p)
    print(*faults)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc heap")
def test_blocks_freed_after_an_epoch_stay_for_the_next_one():
    """The last batches of an epoch are freed after it ends: under EXIT_KEEP their pages stay
    in the arena (glibc's default trim threshold gave them back and the next epoch faulted
    its first batches in again: 1,024 pages here)."""
    if heap._libc() is None:
        pytest.skip("not glibc 2.33+")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", BETWEEN], env=env, capture_output=True,
                         text=True, check=True)
    first, *later = (int(x) for x in out.stdout.split())
    assert first >= 1000  # 4 MiB written: 1,024 pages faulted in
    assert max(later) < 100  # the same pages again
