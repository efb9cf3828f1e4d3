"""Partitioning: METIS clusters (cached on disk) and cluster-contiguous renumbering."""

from .cluster import (Clustering, cluster_graph, default_num_clusters, edge_cut,
                      graph_hash)
from .renumber import (LocalityPrep, cluster_permutation, prepare_locality, renumber,
                       to_original_order)

__all__ = ["Clustering", "cluster_graph", "default_num_clusters", "edge_cut", "graph_hash",
           "cluster_permutation", "renumber", "to_original_order", "LocalityPrep",
           "prepare_locality"]
