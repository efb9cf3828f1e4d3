"""Former home of every numba kernel; they now live beside their subsystem (see
:mod:`twopgraph.jit` for the list and the kernel <-> twin registry).

temporary: removed once no importer remains. Re-exports the moved names only.
"""

# ruff: noqa: F401
from .jit import num_threads
from .rng import MASK64 as _MASK64
from .rng import draw as _draw
from .rng import draw_ref, mix_key, splitmix64_ref
from .rng import splitmix64 as _splitmix64
from .graph import permute_csr, permute_csr_ref
from .sampler.kernels import (relabel, relabel_ref, reset_map, reset_map_ref, reset_map_serial,
                              sample_neighbors, sample_neighbors_ref, sample_neighbors_serial)
from .partition.kernels import (cluster_bfs_order, cluster_bfs_order_ref, cut_edges,
                                cut_edges_ref, sparsify_csr, sparsify_csr_ref)
from .cache.kernels import (NO_USE, window_announce, window_announce_ref, window_consume,
                            window_consume_ref)
from .dropout import (relu_dropout_bwd, relu_dropout_bwd_ref, relu_dropout_fwd,
                      relu_dropout_fwd_ref)
