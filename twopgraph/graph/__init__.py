"""Graphs and node data: the data model (:class:`CSRGraph`, :class:`GraphData`), its arrays and
conversions (:mod:`.io`), its numba kernels (:mod:`.kernels`), bounded-memory CSR construction
(:mod:`.csrbuild`) and sparse x dense products (:mod:`.spmm`).
"""

from twopgraph.imports import lazy_exports

_EXPORTS = {
    "CSRGraph": "data", "GraphData": "data", "check_permutation": "data",
    "inverse_permutation": "data",
    "SPLITS": "io", "REQUIRED_KEYS": "io", "random_split": "io",
    "build_csr": "csrbuild",
    "permute_csr": "kernels",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
