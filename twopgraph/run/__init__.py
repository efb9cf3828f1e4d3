"""A run, from its flags to its files: :func:`train` (:mod:`.train`), :func:`predict` and
:func:`load_model` (:mod:`.predict`), checkpoints (:mod:`.checkpoint`), the output folder
(:mod:`.outdir`), model selection (:mod:`.selection`), the recipe race of small graphs
(:mod:`.race`), the records a run writes (:mod:`.records`) and ``--profile``'s trace of a
few training steps (:mod:`.profile`).
"""

from twopgraph.imports import lazy_exports

_EXPORTS = {
    "load_model": "predict", "run_predict": "predict",
    "PredictConfig": "predictconfig",
    "save_checkpoint": "checkpoint", "read_checkpoint": "checkpoint",
    "RunDir": "outdir", "check_out": "outdir",
    "Selection": "selection",
    "RecipeRace": "race",
    "StepProfiler": "profile", "profile_steps": "profile",
    "write_metrics": "records", "result_record": "records",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
