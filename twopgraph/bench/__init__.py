"""The benchmarks: ``twopgraph bench NAME`` (or ``python -m twopgraph.bench NAME``), one module
of this package per benchmark, run by one harness.

- :mod:`.harness`: the shared options (``--graph``, ``--repeat``, ``--json``), the registry
  :data:`BENCHMARKS` every benchmark module registers its :class:`Benchmark` in, the run
  (repeats, records, table);
- :mod:`.record`: the JSON record of a result (benchmark, params, figures with their spread,
  machine, versions, commit);
- :mod:`.report`: ``twopgraph bench report``, docs/benchmarks.md and the README's headline
  table generated from the result files (:func:`write_report`);
- :mod:`.peers`: the peer baselines (DGL), run in their own venvs;
- :mod:`.families`: generated graph families for ``--graph`` (``rmat:``, ``rgg:``, ``ba:``,
  ``scaled:``);
- :mod:`.config`: the configs of the two oldest benchmarks, ``sampler`` and ``cache``, built
  from the shared config sections (their flags are ``train``'s);
- one module per benchmark (``twopgraph bench --help`` lists them).

Importing a benchmark module imports neither torch nor numba (the CLI builds every
benchmark's parser); they are imported when a benchmark measures.
"""

from twopgraph.imports import lazy_exports

_EXPORTS = {"BenchSamplerConfig": "config", "BenchCacheConfig": "config",
            "BENCHMARKS": "harness", "Benchmark": "harness", "Row": "harness",
            "run": "harness", "main": "harness", "make_record": "record",
            "write_report": "report"}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
