"""The transfer metrics of docs/formats.md, computed in one place: row counters and the
figures derived from them.

Definitions (rows; bytes = rows x ``row_bytes``, the bytes of one stored feature row):

- ``feature_rows`` = sum over batches of |input_nodes| (rows a no-cache loader would copy);
- ``cache_hits`` = rows found on the device; ``hit_rate`` = cache_hits / feature_rows;
- ``h2d_bytes`` = feature bytes copied host->device after the one-off initial fill (every
  refill included); the fill itself is ``cache_fill_bytes``;
- ``transfer_ratio`` = h2d_bytes / (feature_rows x row_bytes) (no cache: 1.0);
- ``input_nodes_per_batch`` = feature_rows / num_batches.

Memory figures (``peak_rss_mib``, ``peak_pss_mib``) are measured by
:mod:`twopgraph.runtime.memory`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields


@dataclass
class CacheCounters:
    """Row counts of an access stream (see the module doc); ``row_bytes`` turns them into
    bytes. ``h2d_rows`` excludes the initial fill, which is ``fill_rows``."""

    feature_rows: int = 0
    cache_hits: int = 0
    h2d_rows: int = 0
    fill_rows: int = 0
    num_batches: int = 0

    @property
    def hit_rate(self) -> float:
        return ratio(self.cache_hits, self.feature_rows, empty=0.0)

    def __sub__(self, other: "CacheCounters") -> "CacheCounters":
        return CacheCounters(**{f.name: getattr(self, f.name) - getattr(other, f.name)
                                for f in fields(self)})

    def copy(self) -> "CacheCounters":
        return CacheCounters(**{f.name: getattr(self, f.name) for f in fields(self)})


def ratio(a: float, b: float, empty: float = 1.0) -> float:
    """``a / b``; ``empty`` when both are 0, ``inf`` when only ``b`` is."""
    if b == 0:
        return empty if a == 0 else math.inf
    return a / b


def transfer_metrics(*, feature_rows: int, cache_hits: int, h2d_bytes: int, row_bytes: int,
                     num_batches: int) -> dict:
    """``input_nodes_per_batch``, ``hit_rate`` and ``transfer_ratio`` from the counts."""
    return {
        "input_nodes_per_batch": ratio(feature_rows, num_batches, empty=0.0),
        "hit_rate": ratio(cache_hits, feature_rows, empty=0.0),
        "transfer_ratio": ratio(h2d_bytes, feature_rows * row_bytes, empty=0.0),
    }
