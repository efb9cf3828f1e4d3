"""The ``twopgraph bench`` verbs: ``sampler`` (sampling-only epochs) and ``cache`` (cache
policies x schedules x budgets against the offline optimum). Each module has its config in
:mod:`twopgraph.bench.config` and a ``run(cfg)`` entry point that the CLI calls."""
