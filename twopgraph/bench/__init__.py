"""The ``twopgraph bench`` verbs: ``sampler`` (sampling-only epochs) and ``cache`` (cache
policies x schedules x budgets against the offline optimum). Each module has its config in
:mod:`twopgraph.bench.config` and a ``run(cfg)`` entry point that the CLI calls."""

from twopgraph.imports import lazy_exports

_EXPORTS = {"BenchSamplerConfig": "config", "BenchCacheConfig": "config"}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
