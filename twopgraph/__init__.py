"""twopgraph: locality-aware mini-batch GNN training (the 2PGraph design).

The package is a stack of layer packages; each imports only those below it
(docs/architecture.md draws them):

``errors`` · ``runtime`` (numba set-up, heap, memory probes) · ``core`` (protocols, registries,
mini-batch types, rng, files) · ``graph`` · ``store`` · ``ingest`` · ``datasets`` · ``models`` /
``sampler`` / ``cache`` · ``locality`` (METIS clusters, renumbering, seed schedulers) ·
``config`` · ``pipeline`` (loader, epoch, :class:`NodeLoader`) · ``inference`` · ``run``
(train, predict, checkpoints, the run folder) · ``distributed`` · ``bench`` · ``cli``.

The Python API: :class:`GraphData` (``from_scipy``, ``from_dgl``, ``from_pyg``, ``load_npz``),
:func:`load_dataset`, :class:`NodeLoader` (mini-batches with features and labels for a
hand-written loop), :class:`TrainConfig` and :func:`train`, :func:`load_model` and
:func:`predict`, :func:`open_store`. They are imported on first use (``import twopgraph`` stays
light: the command line starts fast). Module paths of earlier releases (``twopgraph.protocols``,
``twopgraph.nodeloader``, ...) still import: :data:`twopgraph.imports.MOVED`.
"""

from twopgraph.imports import install_moved_modules, lazy_exports

__version__ = "0.2.0"

_EXPORTS = {
    "CSRGraph": "graph.data", "GraphData": "graph.data", "load_dataset": "datasets",
    "NodeLoader": "pipeline.nodeloader", "TrainConfig": "config", "train": "run.train",
    "load_model": "run.predict", "predict": "run.predict", "open_store": "store.reader",
}
__all__ = ["__version__", *_EXPORTS]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
install_moved_modules()
