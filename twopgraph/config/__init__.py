"""The options of the verbs: a tree of dataclass sections from which the command-line parsers
are generated, validated in one pass.

Each field carries its help text (and, where it differs from ``--field-name``, its flag) in
its metadata, so defaults and help live in one place; ``twopgraph train --help`` shows them as
they are. The package:

- :mod:`.options`: :func:`option` (a field with its command-line form), :class:`Section`, the
  fields several sections share;
- :mod:`.arguments`: the argparse generation (:func:`add_section_arguments`, help texts);
- :mod:`.checks`: the validation helpers (:func:`resolve_device`, :func:`csv_list`, ...);
- :mod:`.defaults`: the defaults chosen by graph size (:data:`SIZE_DEFAULTS`);
- :mod:`.base`: :class:`Config`, a verb's configuration built from sections;
- :mod:`.sections`: :class:`DataConfig`, :class:`SamplingConfig`, :class:`CacheConfig`,
  :class:`ModelConfig`, :class:`RunConfig`, :class:`DistConfig`;
- :mod:`.train`: :class:`TrainConfig`, one of each.

The other verbs' configs sit beside their verbs, built from the same sections and fields:
:mod:`twopgraph.run.predictconfig` (``predict``), :mod:`twopgraph.bench.config` (``bench
sampler``, ``bench cache``), :mod:`twopgraph.distributed.partition.config` (``partition``).
The closed sets of names a flag takes come from :mod:`twopgraph.core.names`, the registries'
names from their sources (:meth:`~twopgraph.core.registry.Registry.declared`): this package imports
neither torch nor numba, nor any implementation, so that ``twopgraph VERB --help`` is fast.
Flags and metric keys are a contract: they keep their names.

Example::

    >>> cfg = TrainConfig.of(dataset="synthetic-tiny", epochs=2, fanouts="5,5")
    >>> cfg.validate().sampling.fanouts, cfg.run.epochs
    ([5, 5], 2)
"""

from twopgraph.config.arguments import add_section_arguments, registry_help
from twopgraph.config.base import Config
from twopgraph.config.checks import csv_list, resolve_device, tensorboard_ok
from twopgraph.config.defaults import (
                                  RACE_OPTIONS,
                                  RACE_PATIENCE,
                                  RACE_RECIPES,
                                  SIZE_DEFAULTS,
                                  SMALL_GRAPH_NODES,
                                  describe_defaults,
                                  size_profile,
)
from twopgraph.config.options import Section, option
from twopgraph.config.sections import (
                                  TRAIN_ONLY_SAMPLING,
                                  CacheConfig,
                                  DataConfig,
                                  DistConfig,
                                  ModelConfig,
                                  RunConfig,
                                  SamplingConfig,
)
from twopgraph.config.train import TrainConfig
from twopgraph.core.names import (
                                  AMP_MODES,
                                  CLUSTER_METHODS,
                                  EVAL_SCOPES,
                                  FEAT_DTYPE_NAMES,
                                  METRICS,
                                  READAHEAD_MODES,
                                  REPRESENTATIONS,
                                  SAMPLER_DEVICES,
                                  SELECT_MODES,
                                  STORE_DTYPE_CHOICES,
                                  STORE_DTYPES,
)

__all__ = ["AMP_MODES", "CLUSTER_METHODS", "EVAL_SCOPES", "FEAT_DTYPE_NAMES", "METRICS",
           "RACE_OPTIONS", "RACE_PATIENCE", "RACE_RECIPES",
           "READAHEAD_MODES", "REPRESENTATIONS", "SAMPLER_DEVICES", "SELECT_MODES",
           "SIZE_DEFAULTS", "SMALL_GRAPH_NODES", "STORE_DTYPES", "STORE_DTYPE_CHOICES",
           "TRAIN_ONLY_SAMPLING", "CacheConfig", "Config", "DataConfig", "DistConfig",
           "ModelConfig", "RunConfig", "SamplingConfig", "Section", "TrainConfig",
           "add_section_arguments", "csv_list", "describe_defaults", "option", "registry_help",
           "resolve_device", "size_profile", "tensorboard_ok"]
