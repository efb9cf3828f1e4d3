"""Partitioning: METIS clusters (cached on disk, keyed by :func:`cluster_key`),
cluster-contiguous renumbering, and self-dependence partitions (:mod:`.selfdep`)."""

from .cluster import Clustering, cluster_graph, cluster_key, default_num_clusters, edge_cut
from .renumber import (LocalityPrep, cluster_permutation, prepare_locality, renumber,
                       to_original_order)
