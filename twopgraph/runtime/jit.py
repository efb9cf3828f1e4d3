"""numba set-up in one place: the kernel registry, the threading layer and thread counts.

**Kernels and twins.** Every numba kernel lives beside its subsystem (``twopgraph.core.rng``,
``twopgraph.graph.kernels``, ``twopgraph.sampler.kernels``, ``twopgraph.cache.kernels``,
``twopgraph.locality.kernels``, ``twopgraph.models.dropout``) together with a plain NumPy/Python
*twin* that computes the same result the obvious way. Each module registers its pairs with
:func:`register`; :func:`all_kernels` imports every module of :data:`KERNEL_MODULES` and returns
the registry, which the tests enumerate (each kernel against its twin, also under
``NUMBA_DISABLE_JIT=1``). Kernels compile lazily on first call and are cached on disk
(``cache=True``); a kernel that cannot compile raises at that first call, never falls back.

**Threading layer.** numba's default layer on a machine without TBB or OpenMP is
``workqueue``, which aborts the process ("Concurrent access has been detected") when parallel
kernels run from two threads at once, as they do in twopgraph (sampling workers, prefetch
thread, main thread). :func:`configure_threading` selects a thread-safe layer (tbb or omp)
before the first parallel kernel runs, and refuses with one line when none can be loaded.

**Thread counts.** ``numba.set_num_threads`` acts on the *calling* thread only, so a thread
that runs kernels sets its own count: ``with thread_count(n): ...``.

Importing this module changes nothing; configuration happens on the first call.

Example::

    >>> configure_threading() in SAFE_LAYERS
    True
    >>> with thread_count(1):
    ...     num_threads()
    1
"""

from __future__ import annotations

import importlib
import logging
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

import numba

from twopgraph.errors import ConfigError

log = logging.getLogger("twopgraph")

#: Every module that defines kernels; :func:`all_kernels` imports each of them.
KERNEL_MODULES = (
    "twopgraph.core.rng",
    "twopgraph.graph.kernels",
    "twopgraph.graph.csrbuild",
    "twopgraph.sampler.kernels",
    "twopgraph.sampler.labor_variates",
    "twopgraph.sampler.labor_pi",
    "twopgraph.sampler.labor_kernels",
    "twopgraph.sampler.labor_dense",
    "twopgraph.cache.kernels",
    "twopgraph.locality.kernels",
    "twopgraph.locality.labelprop",
    "twopgraph.locality.contract",
    "twopgraph.locality.coarsen",
    "twopgraph.models.dropout",
    "twopgraph.graph.spmm",
)

#: The thread-safe threading layers (numba's "threadsafe" selection picks one of them).
SAFE_LAYERS = ("tbb", "omp")

# qualified name -> (kernel, twin); filled by register() as the kernel modules are imported.
KERNELS: dict[str, tuple[Callable, Callable]] = {}


def kernel_name(fn: Callable) -> str:
    """``module.name`` of a kernel (a numba dispatcher, or the plain function when
    ``NUMBA_DISABLE_JIT=1``)."""
    py = getattr(fn, "py_func", fn)
    return f"{py.__module__}.{py.__qualname__}"


def register(kernel: Callable, twin: Callable, name: str | None = None) -> Callable:
    """Record ``twin`` as the NumPy/Python reference of ``kernel``; returns ``kernel``.

    A serial variant of a parallel kernel registers under its own name with the same twin
    (``name``: the module-level name it is bound to, when it is compiled from the parallel
    kernel's Python function and so shares its qualified name).
    """
    key = kernel_name(kernel)
    if name is not None:
        key = f"{key.rsplit('.', 1)[0]}.{name}"
    KERNELS[key] = (kernel, twin)
    return kernel


def all_kernels() -> dict[str, tuple[Callable, Callable]]:
    """Every registered ``{qualified name: (kernel, twin)}`` after importing every module of
    :data:`KERNEL_MODULES` (a copy)."""
    for mod in KERNEL_MODULES:
        importlib.import_module(mod)
    return dict(KERNELS)


# -- threading ------------------------------------------------------------------------------------
_config_lock = threading.Lock()
_configured = False


def configure_threading() -> str:
    """Make numba use a thread-safe threading layer (tbb or omp); returns its name.

    Call it before the first parallel kernel runs (the layer is chosen once per process, at
    that first launch). When ``NUMBA_THREADING_LAYER=workqueue`` was asked for, logs one
    warning and uses a thread-safe layer instead; other thread-safe requests (``tbb``,
    ``omp``, ``safe``, ``threadsafe``, ``forksafe``) are kept as they are. Raises
    :class:`~twopgraph.errors.ConfigError` when no thread-safe layer can be loaded, or when a
    non-thread-safe layer was already launched. Idempotent; later calls cost one flag check.
    """
    global _configured
    if _configured:
        return numba.threading_layer()
    with _config_lock:
        if _configured:
            return numba.threading_layer()
        try:
            layer = numba.threading_layer()  # already launched: too late to choose
        except ValueError:
            layer = None
        if layer is None:
            _select_safe_layer()
            try:
                numba.get_num_threads()  # launches the layer now, while we know the choice
            except ValueError as e:  # numba: "No threading layer could be loaded. HINT ..."
                raise ConfigError(
                    "numba cannot load a thread-safe threading layer (tbb or omp): install "
                    "one, e.g. `pip install tbb` or the OpenMP runtime (libgomp) "
                    f"[numba: {str(e).splitlines()[0]}]") from None
            layer = numba.threading_layer()
        if layer not in SAFE_LAYERS:
            raise ConfigError(
                f"numba's threading layer is {layer!r}, which aborts when parallel kernels "
                "run from two threads; unset NUMBA_THREADING_LAYER or set it to tbb or omp")
        _configured = True
        return layer


def _select_safe_layer() -> None:
    asked = str(numba.config.THREADING_LAYER).lower()
    if asked in SAFE_LAYERS or asked in ("safe", "threadsafe", "forksafe"):
        # forksafe may still pick workqueue when omp is GNU's (Linux): the check after launch
        # in configure_threading catches that.
        return
    if asked == "workqueue":
        log.warning("NUMBA_THREADING_LAYER=workqueue is not thread-safe; twopgraph uses "
                    "a thread-safe layer (tbb or omp) instead")
    numba.config.THREADING_LAYER = "threadsafe"


def num_threads() -> int:
    """Threads numba's parallel kernels use on the calling thread (``NUMBA_NUM_THREADS`` or
    :func:`thread_count`). Configures the threading layer first (see
    :func:`configure_threading`): asking numba for its thread count launches the layer."""
    configure_threading()
    return numba.get_num_threads()


def max_threads() -> int:
    """Threads numba launched (``NUMBA_NUM_THREADS``); :func:`thread_count` clips to it."""
    return int(numba.config.NUMBA_NUM_THREADS)


@contextmanager
def thread_count(n: int) -> Iterator[int]:
    """Run the block with numba's parallel kernels using ``n`` threads *on the calling thread*
    (``numba.set_num_threads`` is thread-local); the previous count is restored on exit.

    ``n`` is clipped to ``NUMBA_NUM_THREADS``; ``n = 0`` leaves the count as it is. Yields the
    count in effect. Configures the threading layer first.
    """
    n = int(n)
    if n < 0:
        raise ValueError(f"thread count must be >= 0 (0 = unchanged), got {n}")
    prev = num_threads()
    if n:
        numba.set_num_threads(min(n, max_threads()))
    try:
        yield numba.get_num_threads()
    finally:
        numba.set_num_threads(prev)
