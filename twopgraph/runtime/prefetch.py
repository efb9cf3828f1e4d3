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
