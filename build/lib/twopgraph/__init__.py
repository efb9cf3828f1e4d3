"""twopgraph: locality-aware mini-batch GNN training (the 2PGraph design).

Layers (imports go one way; docs/architecture.md): ``graph`` -> ``sampler`` / ``cache`` /
``partition`` -> ``loader`` -> ``train`` -> ``dist`` / ``bench`` -> ``cli``. Numba kernels
sit beside their subsystem, each with a NumPy reference twin (registry: ``twopgraph.jit``).
"""

__version__ = "0.1.0"
