"""The process's machinery, below everything else: numba's threading layer and kernel registry
(:mod:`.jit`), the glibc heap policy (:mod:`.heap`), memory probes of the process and its cgroup
(:mod:`.memory`), the run's memory budget under its cgroup limit (:mod:`.governor`) and the
software prefetch hint for kernels (:mod:`.prefetch`), the background threads' priority
(:mod:`.priority`), and stage times on the GPU from CUDA events (:mod:`.gputime`).
"""

from twopgraph.imports import lazy_exports

_EXPORTS = {
    "configure_threading": "jit", "register": "jit", "thread_count": "jit",
    "BatchHeap": "heap", "configure_heap": "heap",
    "PssMonitor": "memory", "available_host_bytes": "memory", "current_pss_mib": "memory",
    "fillable_host_bytes": "memory", "peak_rss_mib": "memory", "process_pss_monitor": "memory",
    "PREFETCH_DIST": "prefetch",
    "BACKGROUND_NICE": "priority", "lower_priority": "priority", "thread_nice": "priority",
    "background_nice": "priority",
    "MemoryGovernor": "governor", "MemoryLimit": "governor", "MemoryPlan": "governor",
    "StepEstimate": "governor", "read_memory_limit": "governor",
    "StageTimer": "gputime", "gpu_span": "gputime", "gpu_times": "gputime",
    "stage_timer": "gputime",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
