"""The memory governor (twopgraph.runtime.governor): limits read from cgroup v1/v2 files, the
one rule that splits the budget, the one-line error when a step cannot fit, and the steps it
takes when the headroom runs short."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from twopgraph.errors import ConfigError, MemoryBudgetError
from twopgraph.runtime.governor import (
    MemoryGovernor,
    MemoryLimit,
    StepEstimate,
    measure_step,
    read_memory_limit,
    step_estimate,
)

MiB, GiB = 1 << 20, 1 << 30


def _fake_proc(tmp_path, cgroup_line: str, total_kb: int = 16 * 1024 * 1024):
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text(f"MemTotal: {total_kb} kB\nMemAvailable: {total_kb} kB\n")
    (proc / "self" / "cgroup").write_text(cgroup_line + "\n")
    return proc


def test_limit_of_a_v1_cgroup(tmp_path):
    proc = _fake_proc(tmp_path, "4:memory:/job7")
    d = tmp_path / "cg" / "memory" / "job7"
    d.mkdir(parents=True)
    (d / "memory.limit_in_bytes").write_text(str(1536 * MiB))
    lim = read_memory_limit(str(proc), str(tmp_path / "cg"))
    assert lim == MemoryLimit(1536 * MiB, "cgroup v1")


def test_limit_of_a_v2_cgroup(tmp_path):
    proc = _fake_proc(tmp_path, "0::/user/job")
    d = tmp_path / "cg" / "user" / "job"
    d.mkdir(parents=True)
    (d / "memory.max").write_text(f"{700 * MiB}\n")
    assert read_memory_limit(str(proc), str(tmp_path / "cg")) == MemoryLimit(700 * MiB,
                                                                             "cgroup v2")


@pytest.mark.parametrize("line,file,text", [
    ("4:memory:/j", "memory/j/memory.limit_in_bytes", str(2**63 - 4096)),  # v1: no limit
    ("0::/j", "j/memory.max", "max"),                                      # v2: no limit
])
def test_no_cgroup_limit_means_the_host_total(tmp_path, line, file, text):
    proc = _fake_proc(tmp_path, line, total_kb=8 * 1024 * 1024)
    f = tmp_path / "cg" / file
    f.parent.mkdir(parents=True)
    f.write_text(text)
    assert read_memory_limit(str(proc), str(tmp_path / "cg")) == MemoryLimit(8 * GiB, "host")


def test_a_limit_above_the_host_total_is_not_the_limit(tmp_path):
    proc = _fake_proc(tmp_path, "0::/j", total_kb=1024 * 1024)  # 1 GiB host
    f = tmp_path / "cg" / "j" / "memory.max"
    f.parent.mkdir(parents=True)
    f.write_text(str(4 * GiB))
    assert read_memory_limit(str(proc), str(tmp_path / "cg")) == MemoryLimit(1 * GiB, "host")


def _gov(limit: int, fillable: int, ranks: int = 1) -> MemoryGovernor:
    return MemoryGovernor(MemoryLimit(limit, "cgroup v1"), fillable=lambda: fillable,
                          ranks=ranks)


def test_plenty_of_memory_keeps_what_was_asked():
    plan = _gov(64 * GiB, 60 * GiB).plan(StepEstimate(500 * MiB, 100 * MiB), prefetch=2,
                                         heap_keep=256 * MiB, mapped_bytes=2 * GiB)
    assert (plan.prefetch, plan.heap_keep_bytes, plan.page_cache_bytes) == (2, 256 * MiB,
                                                                            2 * GiB)


def test_the_rule_splits_a_tight_budget_in_order():
    # budget = 1 GiB - safety; step 600 MiB; the page cache takes half of what is left,
    # then whole batches of 100 MiB, then the heap the rest
    lim = 1536 * MiB
    gov = _gov(lim, 1 * GiB)
    plan = gov.plan(StepEstimate(600 * MiB, 100 * MiB), prefetch=4, heap_keep=256 * MiB,
                    mapped_bytes=10 * GiB)
    budget = GiB  # the readings leave the reserve out already (for_run)
    assert plan.budget_bytes == budget
    left = budget - 600 * MiB
    assert plan.page_cache_bytes == left // 2
    left -= plan.page_cache_bytes
    assert plan.prefetch == min(4, left // (100 * MiB))
    assert plan.heap_keep_bytes == min(256 * MiB, left - plan.prefetch * 100 * MiB)
    assert plan.requested_prefetch == 4 and plan.as_dict()["source"] == "cgroup v1"


def test_ranks_of_a_machine_share_the_budget():
    one = _gov(64 * GiB, 8 * GiB).plan(StepEstimate(MiB, MiB), prefetch=0, heap_keep=0)
    four = _gov(64 * GiB, 8 * GiB, ranks=4).plan(StepEstimate(MiB, MiB), prefetch=0,
                                                  heap_keep=0)
    assert four.budget_bytes == one.budget_bytes // 4


def test_a_step_that_cannot_fit_is_one_line_with_the_fix():
    gov = _gov(1536 * MiB, 400 * MiB)
    with pytest.raises(MemoryBudgetError) as e:
        gov.plan(StepEstimate(900 * MiB, 200 * MiB, input_rows=469_040), prefetch=2,
                 heap_keep=0, fix="use a smaller --batch-size")
    msg = str(e.value)
    assert "\n" not in msg and isinstance(e.value, ConfigError)  # CLI exit 2
    assert "900 MiB" in msg and "469,040" in msg and "1.50 GiB (cgroup v1)" in msg
    assert "--batch-size" in msg


def test_a_run_keeps_its_library_pages_and_a_margin_out_of_every_reading():
    from twopgraph.runtime import memory
    before = memory.available_host_bytes()
    if before is None:
        pytest.skip("no /proc/meminfo here")
    gov = MemoryGovernor.for_run()
    try:
        libs = memory.file_resident_bytes() or 0
        assert gov.reserve_bytes >= gov.safety_bytes + libs // 2 > 0
        assert memory.reserved_host_bytes() == gov.reserve_bytes
        after = memory.available_host_bytes()
        # other processes move the reading a little; the reserve is hundreds of MiB
        assert abs((before - after) - gov.reserve_bytes) < gov.reserve_bytes // 2
        plan = gov.plan(StepEstimate(MiB, MiB), prefetch=0, heap_keep=0)
        assert plan.reserve_bytes == gov.reserve_bytes
    finally:
        memory.reserve_host_bytes(0)
    assert memory.reserved_host_bytes() == 0


def test_watch_degrades_in_order_and_logs_each_step_once(caplog):
    free = [GiB]
    gov = MemoryGovernor(MemoryLimit(2 * GiB, "cgroup v2"), fillable=lambda: free[0])
    gov.plan(StepEstimate(100 * MiB, 100 * MiB), prefetch=2, heap_keep=64 * MiB)
    taken = []
    heap_left = [1]
    depth = [2]

    def heap() -> bool:
        if heap_left[0]:
            heap_left[0] = 0
            taken.append("heap")
            return True
        return False

    def queue() -> bool:
        if depth[0]:
            depth[0] -= 1
            taken.append("queue")
            return True
        return False

    gov.on_short("heap off", heap)
    gov.on_short("queue shorter", queue)
    assert gov.watch(now=10.0) is None  # plenty of headroom
    free[0] = gov.low_water_bytes() - 1
    with caplog.at_level(logging.WARNING, logger="twopgraph"):
        steps = [gov.watch(now=10.0 + k) for k in range(1, 6)]
    assert steps == ["heap off", "queue shorter", "queue shorter", None, None]
    assert taken == ["heap", "queue", "queue"]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "heap off" in lines[0] and "queue shorter" in lines[1]
    assert gov.record()["degraded"] == ["heap off", "queue shorter"]
    # at most every WATCH_SECONDS: a second read in the same instant does nothing
    depth[0] = 1
    assert gov.watch(now=15.0) is None


def test_step_estimate_grows_with_the_batch():
    small = step_estimate([[1000, 300, 50]], [2000], 128, [256, 10])
    big = step_estimate([[2000, 600, 100]], [4000], 128, [256, 10])
    assert 1.9 < big.step_bytes / small.step_bytes < 2.1
    assert small.batch_bytes == 1000 * 128 * 4 + 24 * 2000 + 8 * 1350
    assert small.input_rows == 1000


def test_measure_step_samples_real_batches():
    from twopgraph.datasets import load_dataset
    from twopgraph.sampler import make_sampler
    data = load_dataset("synthetic-tiny")
    sampler = make_sampler("neighbor", data.graph, [5, 5])
    est = measure_step(sampler, data.train_idx, 64, data.num_features, [32, data.num_classes])
    assert 64 <= est.input_rows <= data.num_nodes
    assert est.step_bytes > est.batch_bytes > est.input_rows * data.num_features * 4
    again = measure_step(sampler, data.train_idx, 64, data.num_features,
                         [32, data.num_classes])
    assert again == est  # seeded
    assert isinstance(np.int64(est.step_bytes), np.int64)
