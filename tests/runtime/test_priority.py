"""The background threads' priority (twopgraph.runtime.priority)."""

from __future__ import annotations

import sys
import threading

import pytest
import torch

from twopgraph.runtime.priority import (
    BACKGROUND_NICE,
    background_nice,
    lower_priority,
    thread_nice,
)

linux = pytest.mark.skipif(sys.platform != "linux", reason="per-thread nice values: Linux")


def _in_thread(fn):
    out = []
    th = threading.Thread(target=lambda: out.append(fn()))
    th.start()
    th.join()
    return out[0]


@linux
def test_lower_priority_changes_the_calling_thread_only():
    main = thread_nice()
    if main >= BACKGROUND_NICE:
        pytest.skip("this process already runs at the background nice value")
    changed, nice = _in_thread(lambda: (lower_priority(BACKGROUND_NICE), thread_nice()))
    assert changed and nice == BACKGROUND_NICE
    assert thread_nice() == main  # the caller and the process keep theirs


@linux
def test_lower_priority_never_raises_a_threads_priority():
    def twice():
        lower_priority(15)
        return lower_priority(5), thread_nice()
    if thread_nice() >= 15:
        pytest.skip("this process already runs at nice 15")
    assert _in_thread(twice) == (False, 15)
    assert _in_thread(lambda: (lower_priority(0), thread_nice())) == (False, thread_nice())


def test_only_a_host_model_with_a_host_sampler_gets_nicer_background_threads():
    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    assert background_nice(cpu, cpu) == BACKGROUND_NICE > 0
    assert background_nice(gpu, cpu) == 0
    assert background_nice(cpu, gpu) == 0
