"""PyG interoperability: :class:`NeighborLoader`, a drop-in for
``torch_geometric.loader.NeighborLoader`` on a homogeneous ``Data`` that samples with
twopgraph's numba kernels and adds twopgraph's locality schedules and a rank split for
distributed training (docs/pyg.md).

``torch_geometric`` is imported only when a loader is built or used (the optional extra
``pyg``). Modules: :mod:`.graph` (the CSC of ``edge_index`` by edge id), :mod:`.sampler`
(PyG's hop-by-hop sampling convention), :mod:`.schedule` (the batches of an epoch, the split
between ranks), :mod:`.loader` (the loader), :mod:`.convert` (a twopgraph dataset as a
``Data``: :func:`to_pyg_data`).
"""

from twopgraph.pyg.convert import to_pyg_data
from twopgraph.pyg.graph import EdgeCSC
from twopgraph.pyg.loader import NeighborLoader
from twopgraph.pyg.sampler import EdgeSampler, Sampled

__all__ = ["NeighborLoader", "EdgeCSC", "EdgeSampler", "Sampled", "to_pyg_data"]
