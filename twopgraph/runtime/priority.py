"""Thread priority: the threads that sample and gather ahead of a model computing on the same
CPU cores give way to it.

In CPU training every core runs the model's step (torch's threads), and the background
threads that prepare the next batches run beside them. When such a thread takes a core, the
step's thread on that core falls behind and the step's other threads wait for it at the end of
every parallel operation. A background thread with a higher nice value still gets every
moment the step leaves a core idle (its single-threaded parts, the waits between operations)
and, when the batches run short, the compute thread waits for the queue and frees a core; so
the pipeline balances itself. On Linux the nice value is per thread (``setpriority`` on the
thread's id); a thread may raise its own nice value without privileges (lowering it back needs
them, so only threads that do nothing but background work are made nicer).

Measured (``twopgraph train`` on the 2M-vertex graph, 2 cores, the default pipeline, 2
epochs; runs of nice 0, 10 and 19 interleaved, 10 runs of each): median epoch 11.03 s at nice
0, 10.37 s at 10, 10.70 s at 19 (where the sampling thread falls behind the step).
"""

from __future__ import annotations

import os
import sys
import threading

import torch

#: The nice value of the threads that sample and gather ahead of a model computing on the
#: host's cores (see the module docstring for the measurement that chose it).
BACKGROUND_NICE = 10


def thread_nice() -> int:
    """The calling thread's nice value (0 where the platform has no per-thread value)."""
    if sys.platform != "linux":
        return 0
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def lower_priority(nice: int = BACKGROUND_NICE) -> bool:
    """Give the calling thread (only it: Linux's nice value is per thread) at least the nice
    value ``nice`` (-20..19; higher = yields more); returns whether it changed. Nothing on
    other platforms, for ``nice <= 0``, for a thread already as nice, or where the system
    refuses (the thread then runs on at its priority)."""
    if nice <= 0 or sys.platform != "linux":
        return False
    try:
        if thread_nice() >= nice:
            return False
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(int(nice), 19))
    except OSError:
        return False
    return True


def background_nice(device: torch.device, sampler_device: torch.device) -> int:
    """The nice value of the threads that prepare batches ahead of a model on ``device`` whose
    sampler runs on ``sampler_device``: :data:`BACKGROUND_NICE` when both are the CPU (the
    model's step and those threads share the cores, and the step is what the epoch waits
    for), 0 when a GPU computes or samples (the host's threads then feed it: they are its
    critical path)."""
    return 0 if "cuda" in (device.type, sampler_device.type) else BACKGROUND_NICE
