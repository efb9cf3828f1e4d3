"""The vocabulary every layer shares: the contracts between pipeline stages and their registries
(:mod:`.protocols`, :mod:`.registry`), the mini-batch types (:mod:`.minibatch`), counter-based
random numbers (:mod:`.rng`), the closed sets of flag values (:mod:`.names`), ``--fanouts``
(:mod:`.fanouts`), provenance fingerprints (:mod:`.fingerprint`), durable files and locks
(:mod:`.files`, :mod:`.locks`) and the transfer metrics (:mod:`.metrics`).
"""

from twopgraph.imports import lazy_exports

_EXPORTS = {
    "CACHE_POLICIES": "protocols", "MODELS": "protocols", "SAMPLERS": "protocols",
    "SCHEDULERS": "protocols", "FeatureSource": "protocols", "Sampler": "protocols",
    "Scheduler": "protocols", "Graph": "protocols", "Conv": "protocols",
    "Registry": "registry",
    "Block": "minibatch", "MiniBatch": "minibatch",
    "parse_fanouts": "fanouts",
    "run_fingerprint": "fingerprint",
    "atomic_write_bytes": "files", "write_json": "files", "writing": "files",
    "refuse_dangling": "files", "human_bytes": "files",
    "FileLock": "locks", "sibling_lock": "locks", "remove_stale_lock": "locks",
    "CacheCounters": "metrics", "ratio": "metrics", "transfer_metrics": "metrics",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
