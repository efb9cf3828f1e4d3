"""The public interface of ``twopgraph.runtime``: numba's thread-safe layer and per-thread
counts, the memory probes read from (here: fake) /proc and cgroup files, the PSS peak, the
glibc batch heap."""

from __future__ import annotations

import numba
import numpy as np

import twopgraph.runtime as pkg
from twopgraph.runtime import (
    PREFETCH_DIST,
    BatchHeap,
    PssMonitor,
    available_host_bytes,
    configure_threading,
    current_pss_mib,
    fillable_host_bytes,
    peak_rss_mib,
    thread_count,
)


def test_every_public_name_imports():
    for n in pkg.__all__:
        getattr(pkg, n)


def test_threading_layer_and_thread_count_is_restored():
    assert configure_threading() in ("tbb", "omp")
    before = numba.get_num_threads()
    with thread_count(1) as n:
        assert n == 1 == numba.get_num_threads()
    assert numba.get_num_threads() == before
    assert isinstance(PREFETCH_DIST, int) and PREFETCH_DIST > 0


def test_host_bytes_are_capped_by_the_cgroup(tmp_path):
    proc, cg = tmp_path / "proc", tmp_path / "cg"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text("MemTotal: 9999 kB\nMemAvailable: 1000 kB\n")
    (proc / "self" / "cgroup").write_text("0::/job\n")  # cgroup v2
    (cg / "job").mkdir(parents=True)
    (cg / "job" / "memory.max").write_text("2000000\n")
    (cg / "job" / "memory.current").write_text("1500000\n")
    (cg / "job" / "memory.stat").write_text("inactive_file 100000\nactive_file 50000\n")
    # min(MemAvailable 1,024,000, limit - usage + inactive 600,000); + active for fillable
    assert available_host_bytes(str(proc), str(cg)) == 600_000
    assert fillable_host_bytes(str(proc), str(cg)) == 650_000
    (cg / "job" / "memory.max").write_text("max\n")  # no limit: MemAvailable alone
    assert available_host_bytes(str(proc), str(cg)) == 1_024_000


def test_pss_monitor_keeps_the_peak(tmp_path):
    smaps = tmp_path / "smaps_rollup"
    mon = PssMonitor(path=str(smaps))
    for kb, want in [(2048, 2.0), (4096, 4.0), (1024, 4.0)]:
        smaps.write_text(f"Rss: 9 kB\nPss: {kb} kB\n")
        assert current_pss_mib(str(smaps)) == kb / 1024
        assert mon.peak_mib == want
    assert peak_rss_mib() > 0


def test_batch_heap_trims_above_its_keep():
    with BatchHeap(keep=0) as heap:
        blocks = [np.ones(1000) for _ in range(1000)]
        del blocks
        heap.step()
        active = heap.active  # glibc 2.33+ without MALLOC_ settings in the environment
    assert heap.active is False and heap.trims == (1 if active else 0)
