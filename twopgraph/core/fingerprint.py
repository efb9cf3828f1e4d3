"""One provenance fingerprint: the content of the data and every parameter that changes a result.

Every cached or resumable artefact of twopgraph is keyed by :func:`fingerprint`: the METIS
cluster cache (``partition.cluster``), self-dependence partitions (``partition_id`` in
``meta.json``), the synthetic dataset caches (``<name>.spec.json``) and training checkpoints
(:func:`run_fingerprint`). Two results share a fingerprint only if they were computed from
byte-identical arrays with equal parameters by the same format version, so a stale artefact
is recomputed or refused, never silently reused.

Canonical encoding (version :data:`FINGERPRINT_VERSION`; changing it changes every key):
one BLAKE2b hash (16-byte digest, personalised ``twopgraph-fp-v<N>``) over, in order,

* the ``kind`` (UTF-8), naming what is fingerprinted (``"metis-clusters"``, ``"run"``, ...);
* ``params`` as JSON with sorted keys and no spaces, after :func:`canonical` turned NumPy
  scalars into Python numbers, tuples into lists and dataclasses into dicts (so ``1``,
  ``1.0`` and ``True`` stay distinct);
* for each array, in order: ``None`` as a marker, otherwise its dtype (``dtype.str``, e.g.
  ``<i8``), its shape, then the 32-byte BLAKE2b digests of its C-order bytes cut into leaves of
  :data:`LEAF_BYTES` (16 MiB).

Each field is length-prefixed, so no two different inputs encode alike. Leaves are hashed in
parallel threads (``hashlib`` releases the GIL), and the result does not depend on the number
of threads, on the memory layout of an array, or on whether it is memory-mapped: an array is
read leaf by leaf (a non-contiguous one is copied one leaf at a time), never copied whole.
Cost: one read of every byte; BLAKE2b hashes about 0.5-1 GB/s per core, i.e. 1-2 s/GB per
thread (measured 2.0 s/GB with one thread and 1.4 s/GB with two on a loaded 2-core
development machine); arrays of memory-mapped files are read from disk once.

Example::

    >>> import numpy as np
    >>> a = fingerprint("demo", {"k": 4}, np.arange(3))
    >>> a == fingerprint("demo", {"k": 4}, np.arange(3))
    True
    >>> a == fingerprint("demo", {"k": 5}, np.arange(3))
    False
    >>> len(a)
    32
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import struct
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

import numpy as np
from numpy.typing import ArrayLike

if TYPE_CHECKING:
    class _Fingerprinted(Protocol):
        def fingerprint(self) -> str: ...

FINGERPRINT_VERSION = 1
DIGEST_SIZE = 16
# Bytes per leaf of an array's hash tree: a fixed part of the encoding (changing it changes
# every fingerprint); 16 MiB keeps the per-leaf overhead negligible and the copy of one leaf
# of a non-contiguous array small.
LEAF_BYTES = 1 << 24
# Threads that hash leaves at most (fingerprints are taken at start-up, before any pipeline
# thread runs).
MAX_THREADS = 8


def fingerprint(kind: str, params: Mapping | None = None, *arrays: ArrayLike | None,
                threads: int | None = None) -> str:
    """Hex digest (32 characters) of ``kind``, ``params`` and the content of ``arrays``.

    ``params`` holds every setting that changes the result, as plain values (see
    :func:`canonical`; put the fingerprint string of a sub-object, e.g.
    ``graph.fingerprint()``, rather than the object). ``arrays`` are NumPy arrays (or array
    likes, or ``None`` for an absent optional array), hashed by dtype, shape and bytes.
    ``threads`` (default: the usable cores, at most :data:`MAX_THREADS`) hash leaves in
    parallel; the digest does not depend on it. Raises ``TypeError`` for a parameter that has
    no canonical form or an object array.
    """
    if not isinstance(kind, str) or not kind:
        raise TypeError(f"fingerprint kind must be a non-empty string, got {kind!r}")
    h = hashlib.blake2b(digest_size=DIGEST_SIZE,
                        person=f"twopgraph-fp-v{FINGERPRINT_VERSION}".encode())
    _field(h, kind.encode())
    _field(h, json.dumps(canonical(params if params is not None else {}), sort_keys=True,
                         separators=(",", ":")).encode())
    arrays = [None if a is None else np.asarray(a) for a in arrays]
    leaves = sum(_num_leaves(a) for a in arrays if a is not None)
    workers = min(leaves, _default_threads() if threads is None else max(1, int(threads)))
    pool = ThreadPoolExecutor(workers, thread_name_prefix="fingerprint") if workers > 1 else None
    try:
        for a in arrays:
            _hash_array(h, a, pool)
    finally:
        if pool is not None:
            pool.shutdown()
    return h.hexdigest()


def run_fingerprint(config: object, data: _Fingerprinted | str | None = None) -> str:
    """Fingerprint of a training run: ``config`` (a mapping or dataclass of the settings that
    change the weights it produces) and ``data`` (an object with a ``fingerprint()`` method,
    such as :class:`~twopgraph.graph.data.GraphData`, or a fingerprint string, such as a
    partition's ``partition_id``; None = no data). A checkpoint stores it; a resume with
    another configuration or other data content computes another one.
    """
    if data is not None and not isinstance(data, str):
        data = data.fingerprint()
    return fingerprint("run", {"config": config, "data": data})


def canonical(value: object) -> object:
    """``value`` as plain JSON types: NumPy scalars become Python numbers, tuples lists,
    dataclasses and mappings dicts (string keys only), paths strings. Anything else, arrays
    included (pass those to :func:`fingerprint` as arrays), raises ``TypeError``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic) and not isinstance(value, (np.void, np.object_)):
        return canonical(value.item())
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"fingerprint parameter keys must be strings, got {k!r}")
            out[k] = canonical(v)
        return out
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"fingerprint parameter of type {type(value).__name__} has no canonical "
                    "form (pass arrays as arrays, objects by their fingerprint)")


# -- implementation -----------------------------------------------------------------------------
def _field(h, data: bytes) -> None:
    h.update(struct.pack("<Q", len(data)))
    h.update(data)


def _default_threads() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(MAX_THREADS, cores))


def _leaf_items(a: np.ndarray) -> int:
    return max(1, LEAF_BYTES // max(a.dtype.itemsize, 1))


def _num_leaves(a: np.ndarray) -> int:
    return -(-a.size // _leaf_items(a))


def _hash_array(h, a: np.ndarray | None, pool) -> None:
    if a is None:
        _field(h, b"none")
        return
    if a.dtype.hasobject:
        raise TypeError("cannot fingerprint an object array (its bytes are pointers)")
    _field(h, json.dumps({"dtype": a.dtype.str, "shape": list(a.shape)},
                         separators=(",", ":")).encode())
    step = _leaf_items(a)
    starts = range(0, a.size, step)
    if a.flags.c_contiguous:
        flat = a.reshape(-1)

        def leaf(s):
            return hashlib.blake2b(flat[s:s + step].view(np.uint8)).digest()
    else:  # C-order elements of one leaf, copied (a flat-iterator slice copies only them)
        def leaf(s):
            return hashlib.blake2b(np.ascontiguousarray(a.flat[s:s + step]).view(np.uint8)).digest()
    digests = pool.map(leaf, starts) if pool is not None and len(starts) > 1 else map(leaf, starts)
    for d in digests:
        h.update(d)
