"""twopgraph: locality-aware mini-batch GNN training (the 2PGraph design).

Layers (imports go one way; docs/architecture.md): ``graph`` -> ``sampler`` / ``cache`` /
``partition`` -> ``loader`` -> ``train`` -> ``dist`` / ``bench`` -> ``cli``. Numba kernels
sit beside their subsystem, each with a NumPy reference twin (registry: ``twopgraph.jit``).

The Python API (README "Python API"): :class:`GraphData` (``from_scipy``, ``from_dgl``,
``from_pyg``, ``load_npz``), :func:`load_dataset`, :class:`NodeLoader` (mini-batches with
features and labels for a hand-written loop), :class:`TrainConfig` and :func:`train`,
:func:`load_model` and :func:`predict`, :func:`open_store`. They are imported on first use
(``import twopgraph`` stays light: the command line starts fast).
"""

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "CSRGraph": "graph", "GraphData": "graph", "load_dataset": "datasets",
    "NodeLoader": "nodeloader", "TrainConfig": "config", "train": "train",
    "load_model": "predict", "predict": "predict", "open_store": "store",
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'twopgraph' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
