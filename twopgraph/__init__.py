"""twopgraph: locality-aware mini-batch GNN training (the 2PGraph design).

Layers (imports go one way): ``graph`` -> ``sampler`` / ``cache`` / ``partition`` -> ``train``
-> ``cli``. ``kernels`` holds every numba kernel with its NumPy reference twin.
"""

__version__ = "0.1.0"
