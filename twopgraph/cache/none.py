"""``none``: no cache; every input row is copied host->device for every batch (DGL, PyG)."""

from __future__ import annotations

from twopgraph.cache.base import CachePolicy, PolicyContext
from twopgraph.core.protocols import CACHE_POLICIES


class NoCache(CachePolicy):
    """Caches nothing (the directory then gets a zero budget)."""

    name = "none"
    caches = False


@CACHE_POLICIES.register("none")
def make(ctx: PolicyContext) -> NoCache:
    """No cache: every input row is copied to the device every batch."""
    return NoCache()
