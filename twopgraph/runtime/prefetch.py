"""Memory hints for numba kernels: a software prefetch of one array element.

Sampling is bound by memory latency, not bandwidth: on this project's 2-core machine a chain
of dependent loads into a 0.5 GB CSR costs ~330 ns per load, independent loads ~13 ns each
(``twopgraph bench csr``).
A kernel that knows the addresses of the next iterations (the rows of the dsts ``dist``
positions ahead, the map entries of the neighbours ``dist`` edges ahead) asks for them with
:func:`prefetch` so that their misses overlap (``twopgraph bench sampling --peers dgl``
measures the effect against DGL).

``prefetch(a, i)`` emits LLVM's ``llvm.prefetch`` (read, high locality, data cache) for the
address of ``a[i]`` of a 1-D array. It never faults (a hint, not a load), so ``i`` may be any
index the kernel would read; it changes no result. Under ``NUMBA_DISABLE_JIT=1`` it is a
Python function that does nothing.

Example::

    >>> import numpy as np
    >>> from numba import njit
    >>> @njit
    ... def total(a):
    ...     s = 0
    ...     for i in range(a.shape[0]):
    ...         prefetch(a, min(i + 8, a.shape[0] - 1))
    ...         s += a[i]
    ...     return s
    >>> int(total(np.arange(10)))
    45
"""

from __future__ import annotations

import os

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

#: Prefetch distance of the sampling kernels, in loop iterations (dsts or edges): long enough
#: to cover a ~330 ns miss at ~10 ns per iteration, short enough to stay in L1.
PREFETCH_DIST = 16

#: Prefetch distance of the loops that do one cheap step per random access (relabelling a
#: neighbour, reading or resetting one map entry): ~2 ns of work per iteration hides a DRAM
#: miss only when ~128 iterations ahead (on a 2M-vertex graph, whose 8 MB map the hop's CSR
#: reads have evicted from the cache, relabelling the last hop took 4.9 ms at 16, 2.4 at 64,
#: 1.8 at 128, 1.7 at 256; unchanged from 16 to 256 on a 200k-vertex graph, whose map stays
#: in L2). The lines in flight are 4-8 byte entries, so 128 of them stay well within L1.
MAP_PREFETCH_DIST = 128


def _intrinsic_name() -> str:
    # llvm.prefetch is overloaded on its pointer type: "p0" with opaque pointers (LLVM >= 15
    # as llvmlite builds it), "p0i8" with typed ones (numba 0.58-0.60, LLVM 14).
    return ("llvm.prefetch.p0" if str(ir.IntType(8).as_pointer()) == "ptr"
            else "llvm.prefetch.p0i8")


if numba.config.DISABLE_JIT:
    def prefetch(a: np.ndarray, i: int) -> None:
        """No-op twin of the intrinsic (kernels run as Python under NUMBA_DISABLE_JIT=1)."""
        return None
else:
    @intrinsic
    def prefetch(typingctx, a, i):
        """Prefetch ``a[i]`` (1-D array, integer index) into the data cache; no result."""
        if not (isinstance(a, types.Array) and a.ndim == 1 and isinstance(i, types.Integer)):
            return None
        sig = types.void(a, i)

        def codegen(context, builder, signature, args):
            aryty, idxty = signature.args
            ary = context.make_array(aryty)(context, builder, args[0])
            idx = context.cast(builder, args[1], idxty, types.intp)
            ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [idx],
                                           wraparound=False)
            i8p = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
            fn = cgutils.get_or_insert_function(builder.module, fnty, _intrinsic_name())
            # rw = 0 (read), locality = 3 (keep in all levels), cache type = 1 (data)
            builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
            return context.get_dummy_value()

        return sig, codegen


#: Last-level cache assumed where the system does not say (sysfs absent: not Linux, a
#: sandbox): 8 MiB, a small server's L3.
DEFAULT_LLC_BYTES = 8 << 20

_SIZE_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def last_level_cache_bytes(root: str = "/sys/devices/system/cpu/cpu0/cache") -> int:
    """Bytes of the largest data (or unified) cache of CPU 0, read from sysfs (``index*/size``
    of the highest ``level``); :data:`DEFAULT_LLC_BYTES` when it cannot be read."""
    best = (0, 0)
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return DEFAULT_LLC_BYTES
    for name in entries:
        if not name.startswith("index"):
            continue
        try:
            with open(os.path.join(root, name, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(root, name, "level")) as f:
                level = int(f.read())
            with open(os.path.join(root, name, "size")) as f:
                text = f.read().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or not text:
            continue
        scale = _SIZE_UNITS.get(text[-1].upper(), 1)
        try:
            size = int(text.rstrip("KMGkmg")) * scale
        except ValueError:
            continue
        best = max(best, (level, size))
    return best[1] or DEFAULT_LLC_BYTES


#: Share of the last-level cache a structure read at random may take and still count as
#: cache-resident: the cache also holds the other threads' data, the node map and the batch's
#: arrays. Chosen on synthetic-products graphs (one thread, 32 MiB L3, ms per 3-hop batch of
#: ``sample_hops_mapped``, in order / draw-ahead): 25k vertices (5.3 MB of CSR) 2.2 / 2.6,
#: 50k (10.5 MB) 3.3-3.8 / 3.8, 100k (21 MB) 6.5 / 5.0, 200k (42 MB) 9.5 / 6.5 -- the
#: crossover near 10 MB, a third of the cache; a quarter keeps the in-order reading to where
#: it wins. On the real graphs (not used for the choice): coauthor_cs (0.8 MB) 0.74 / 1.09,
#: coauthor_physics (2.3 MB) 1.42 / 1.89.
CACHE_SHARE = 0.25


def fits_in_cache(nbytes: int, cache_bytes: int | None = None) -> bool:
    """Whether a structure of ``nbytes`` that a kernel reads at random is cache-resident:
    at most :data:`CACHE_SHARE` of the last-level cache (``cache_bytes``, default
    :func:`last_level_cache_bytes`). Its misses are then cheap, and reading it in order beats
    pipelines that draw ahead to prefetch (see :data:`CACHE_SHARE` for the measurements)."""
    cache = last_level_cache_bytes() if cache_bytes is None else cache_bytes
    return nbytes <= CACHE_SHARE * cache
