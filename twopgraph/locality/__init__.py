"""Locality: METIS clusters of the graph (cached on disk, keyed by :func:`cluster_key`;
:mod:`.cluster`, :mod:`.coarsen`, :mod:`.labelprop`, :mod:`.contract`), the graph renumbered so
each cluster is contiguous (:mod:`.renumber`), and the seed schedulers that decide which seeds
share a batch (:mod:`.schedule`; ``--schedule auto`` decides by a probe: :mod:`.auto`)."""

from twopgraph.locality.cluster import (
                                        Clustering,
                                        cluster_graph,
                                        cluster_key,
                                        default_num_clusters,
                                        edge_cut,
)
from twopgraph.locality.renumber import (
                                        LocalityPrep,
                                        cluster_permutation,
                                        prepare_locality,
                                        renumber,
                                        to_original_order,
)
from twopgraph.locality.schedule import LocalityScheduler, RandomScheduler, make_scheduler

__all__ = ["Clustering", "cluster_graph", "cluster_key", "default_num_clusters", "edge_cut",
           "LocalityPrep", "cluster_permutation", "prepare_locality", "renumber",
           "to_original_order", "LocalityScheduler", "RandomScheduler", "make_scheduler"]
