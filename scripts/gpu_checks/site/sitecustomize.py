"""Imported by every Python process ``scripts/gpu_check.py`` starts (this folder is put on
their ``PYTHONPATH``, after the caller's own entries), torchrun's ranks included; inert elsewhere.

Under ``TWOPGRAPH_GPU_CHECK=1``: ``SIGUSR1`` dumps every thread's stack to stderr (the check
sends it to a step's process group before it kills a step that ran past its limit, so the log
shows where it hung; no SIGABRT, no core). Under ``TWOPGRAPH_GPU_CHECK_PROBE=DIR`` as well: at
exit each rank of torchrun writes ``DIR/<pid>.json``: its rank, the most torch and numba threads
seen at its optimizer steps (a global step pre-hook) and its CUDA device (what the DDP check
reads: threads per rank, one process per GPU).
"""

import os

if os.environ.get("TWOPGRAPH_GPU_CHECK") == "1":
    import faulthandler
    import signal
    import sys

    try:
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True, chain=False)
    except (AttributeError, ValueError, RuntimeError, OSError):
        pass
    _probe_dir = os.environ.get("TWOPGRAPH_GPU_CHECK_PROBE")
    if _probe_dir and os.environ.get("RANK") is not None:  # torchrun's ranks only
        import atexit
        import json
        import threading

        _seen = {"steps": 0, "torch_threads": 0, "numba_threads": 0, "python_threads": 0}

        def _in_step(*_args, **_kw) -> None:
            """Every optimizer step (main thread, inside the rank's thread plan): the most
            torch and numba threads, and live Python threads, seen while training."""
            _seen["steps"] += 1
            torch = sys.modules["torch"]
            _seen["torch_threads"] = max(_seen["torch_threads"], torch.get_num_threads())
            numba = sys.modules.get("numba")
            if numba is not None:
                _seen["numba_threads"] = max(_seen["numba_threads"], numba.get_num_threads())
            _seen["python_threads"] = max(_seen["python_threads"], threading.active_count())

        try:
            import torch.optim.optimizer as _opt

            _opt.register_optimizer_step_pre_hook(_in_step)
        except (ImportError, AttributeError):
            pass

        def _write_probe() -> None:
            rec = {"pid": os.getpid(), "rank": os.environ.get("RANK"),
                   "local_rank": os.environ.get("LOCAL_RANK"), **_seen}
            torch = sys.modules.get("torch")
            if torch is not None:
                try:
                    if torch.cuda.is_initialized():
                        rec["cuda_device"] = torch.cuda.current_device()
                except Exception:  # noqa: BLE001 -- a probe must not fail the process
                    pass
            try:
                with open(os.path.join(_probe_dir, f"{os.getpid()}.json"), "w") as f:
                    json.dump(rec, f)
            except OSError:
                pass

        atexit.register(_write_probe)
