"""The training pipeline: :class:`Loader` (:mod:`.loader`) owns every stage and thread of a
batch's way (seeds, sampling, feature gathering, transfer), :mod:`.assemble` builds one from a
config, :func:`train_epoch` (:mod:`.epoch`) runs one epoch of it, and :class:`NodeLoader`
(:mod:`.nodeloader`) is the pipeline as a loader for a hand-written loop.
"""

from twopgraph.imports import lazy_exports

_EXPORTS = {
    "Loader": "loader", "ThreadPlan": "loader", "EpochStats": "loader",
    "make_loader": "assemble", "govern_memory": "assemble",
    "train_epoch": "epoch",
    "NodeLoader": "nodeloader",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
