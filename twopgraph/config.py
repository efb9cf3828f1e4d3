"""Every option of every verb, in one place: a tree of dataclass sections from which the
command-line parsers are generated, validated in one pass.

Each field carries its help text (and, where it differs from ``--field-name``, its flag) in
its metadata, so defaults and help live here only; ``twopgraph train --help`` shows them as
they are. Sections:

- :class:`DataConfig` (``--dataset``, ``--data-root``);
- :class:`SamplingConfig` (fanouts, batch size, schedule, clusters, renumbering, sampler
  device);
- :class:`CacheConfig` (feature cache policy, budget, stored dtype);
- :class:`ModelConfig` (model, optimiser, mixed precision);
- :class:`RunConfig` (epochs, seed, device, output, evaluation, threads, ...);
- :class:`DistConfig` (partitioned data-parallel training);

:class:`TrainConfig` holds one of each; the ``bench`` verbs, ``partition`` and ``predict``
have configs of their own built from the same sections and fields. Flags and metric keys
are a contract: they keep their names.

Example::

    >>> cfg = TrainConfig.of(dataset="synthetic-tiny", epochs=2, fanouts="5,5")
    >>> cfg.validate().sampling.fanouts, cfg.run.epochs
    ([5, 5], 2)
"""

from __future__ import annotations

import argparse
import copy
import math
import types
import typing
from dataclasses import MISSING, Field, asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import ConfigError
from .protocols import CACHE_POLICIES, MODELS, SAMPLERS, SCHEDULERS

SAMPLER_DEVICES = ("auto", "cpu", "cuda")
AMP_MODES = ("off", "bf16")
SELECT_MODES = ("best-val", "last")
METRICS = ("auto", "acc", "rocauc")
EVAL_SCOPES = ("auto", "all", "scored")  # twopgraph.inference.EVAL_SCOPES
CLUSTER_METHODS = ("auto", "metis", "coarsen", "lp")  # twopgraph.partition.cluster
STORE_DTYPES = ("float32", "float16")  # twopgraph.datasets.STORE_DTYPES
STORE_DTYPE_CHOICES = ("auto",) + STORE_DTYPES  # twopgraph.datasets.STORE_DTYPE_CHOICES
FEAT_DTYPE_NAMES = ("float32", "float16", "bfloat16")  # cache.feature_cache.FEAT_DTYPES
READAHEAD_MODES = ("auto", "on", "off")
REPRESENTATIONS = ("auto", "local", "global")  # twopgraph.partition.selfdep

# This module is what every verb's parser is built from: it imports neither torch nor numba
# (nor the modules that do), so that `twopgraph VERB --help` is fast. The registries' names
# are read from their sources (Registry.declared); validation imports what it needs.

if TYPE_CHECKING:
    import torch

    from .graph import GraphData


# ----------------------------------------------------------------------------------------------
# fields
# ----------------------------------------------------------------------------------------------


def option(default=MISSING, help: str = "", *, flag: str | None = None, factory=None,
           required: bool = False, negatable: bool = False, metavar: str | None = None,
           show_default: str | None = None, result: bool = False, choices=None,
           listed: bool = False, fingerprint_default: bool = True, registry=None,
           spec: bool = False) -> Field:
    """A config field with its command-line form.

    ``flag`` defaults to ``--field-name``; a bool field is a switch (``store_true``; a flag
    ``--no-x`` stores False; ``negatable`` gives ``--x/--no-x``); ``required`` fields have no
    default on the command line; ``show_default`` replaces the default shown in ``--help``;
    ``result`` marks a parameter that changes the trained model (the checkpoint fingerprint
    covers exactly these); ``choices`` (a tuple of names, or a function returning them: a
    registry's :meth:`~twopgraph.registry.Registry.declared`) are shown in ``--help`` as the
    flag's value, ``{a,b}`` (``{a,b}[,...]`` for a comma-separated ``listed`` option); the
    section's ``validate`` checks the value (with its own message). ``fingerprint_default``
    False: a result parameter added after checkpoints existed, left out of the fingerprint at
    its default value (so those checkpoints still resume). ``registry``: ``--help`` lists its
    names with their summaries (:meth:`~twopgraph.registry.Registry.described`) after the
    text. ``spec``: a field the model is built from, recorded in the checkpoint's model spec
    (:meth:`ModelConfig.spec`)."""
    meta = {"help": help, "flag": flag, "required": required, "negatable": negatable,
            "metavar": metavar, "show_default": show_default, "result": result,
            "choices": choices, "listed": listed, "fingerprint_default": fingerprint_default,
            "registry": registry, "spec": spec}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def _seed() -> Field:
    return option(0, "random seed of shuffling, sampling and model initialisation; the same "
                     "seed gives the same result on CPU", result=True)


def _threads() -> Field:
    return option(0, "CPU threads the whole process uses (model, sampling workers, prefetch); "
                     "0 = all cores")


def _feat_dtype() -> Field:
    return option("float32", "how features are stored and copied: float32 | float16 | "
                             "bfloat16 (half the bytes; the model computes in float32 and is "
                             "evaluated on the same rounded features)", result=True,
                  choices=FEAT_DTYPE_NAMES)


def _num_clusters(help_extra: str = "") -> Field:
    return option(0, "METIS clusters of the locality scheduler and of --renumber, cached under "
                     "DATA_ROOT/clusters; fewer = more locality, less batch diversity; 0 = "
                     "automatic (4 clusters per batch on graphs of >= 512 x batch-size "
                     "vertices, else at least min(2048, N/8) clusters)" + help_extra,
                  result=True)


# ----------------------------------------------------------------------------------------------
# defaults chosen by graph size
# ----------------------------------------------------------------------------------------------

#: graphs with fewer vertices than this get the ``small`` defaults, the others the ``large``
SMALL_GRAPH_NODES = 50_000
#: what ``--fanouts``, ``--lr`` and ``--epochs`` left at their default (None) become, per
#: graph size. Small graphs (cora, amazon_photo, tolokers: a few batches per epoch) reach their
#: accuracy with 2 layers, a larger learning rate and many epochs (the 3-layer products
#: settings left cora and amazon_photo 3 to 20 points lower); ``large`` is tuned at
#: ogbn-products scale.
SIZE_DEFAULTS = {
    "small": {"fanouts": [10, 10], "lr": 0.01, "epochs": 50},
    "large": {"fanouts": [15, 10, 5], "lr": 0.003, "epochs": 5},
}
# the section of a config that holds each size-based option
_SIZE_SECTIONS = {"fanouts": "sampling", "lr": "model", "epochs": "run"}


def size_profile(num_nodes: int) -> str:
    """``"small"`` for a graph of fewer than :data:`SMALL_GRAPH_NODES` vertices, else
    ``"large"``: the key of :data:`SIZE_DEFAULTS`."""
    return "small" if int(num_nodes) < SMALL_GRAPH_NODES else "large"


def _shown(v) -> str:
    return ",".join(map(str, v)) if isinstance(v, list) else f"{v:g}"


def _auto_shown(name: str) -> str:
    """``--help``'s default of a size-based option: the rule."""
    small, large = SIZE_DEFAULTS["small"][name], SIZE_DEFAULTS["large"][name]
    return (f"by graph size: {_shown(small)} on graphs of < {SMALL_GRAPH_NODES:,} vertices, "
            f"else {_shown(large)}; logged and recorded in metrics.json")


def describe_defaults(record: dict) -> str | None:
    """The log line of a :meth:`Config.resolved` record; None when every size-based option
    was given."""
    if not record["chosen"]:
        return None
    side = "<" if record["profile"] == "small" else ">="
    flags = " ".join(f"--{k} {_shown(v)}" for k, v in record["chosen"].items())
    return (f"defaults for {record['num_nodes']:,} vertices ({record['profile']} graph, "
            f"{side} {record['small_below']:,}): {flags}")


# ----------------------------------------------------------------------------------------------
# sections
# ----------------------------------------------------------------------------------------------


class Section:
    """Base of the config sections: :meth:`validate` checks every field in one pass and
    raises :class:`ConfigError` naming the flag and the bad value."""

    def validate(self):
        return self


@dataclass
class DataConfig(Section):
    dataset: str = option("synthetic-small", "synthetic-tiny | synthetic-small | "
                          "synthetic-products | ogbn-arxiv | ogbn-products | ogbn-papers100M | "
                          "a .npz path | a store folder | NAME: DATA_ROOT/NAME.npz or the "
                          "store DATA_ROOT/NAME, else the same in a folder of "
                          "$TWOPGRAPH_DATASET_PATH (':'-separated), else the store converted "
                          "earlier from a NAME.npz (`twopgraph datasets` lists them)",
                          result=True)
    data_root: str | None = option(None, "where datasets are generated, cached and looked up; "
                                   "ogb's root", show_default="$TWOPGRAPH_DATA, else ./datasets")
    symmetrize: bool = option(False, "make a directed graph undirected while loading (every "
                              "edge u->v also as v->u; self loops and duplicate edges dropped; "
                              "one log line says what changed; the file is not rewritten); "
                              "without it such a dataset is refused")
    store_dtype: str = option("auto", "type of the features kept in the dataset's store: "
                              "float32 | float16 (half the disk and page cache, so a table "
                              "twice the memory can stay in it; a store of its own, "
                              "converted once; features beyond +-65504 are refused; the "
                              "model computes in float32 on the rounded values) | auto "
                              "(float16 when the float32 features would take more than half "
                              "the memory this process can fill, cgroup included, and fit "
                              "float16; else float32; logged)",
                              result=True, choices=STORE_DTYPE_CHOICES)

    def validate(self):
        if not isinstance(self.dataset, str) or not self.dataset.strip():
            raise ConfigError("--dataset must name a dataset or a file")
        _choice(self, "store_dtype", STORE_DTYPE_CHOICES)
        if not isinstance(self.symmetrize, bool):
            raise ConfigError(f"symmetrize must be true or false, got {self.symmetrize!r}")
        return self

    def load(self, progress: bool = True) -> "GraphData":
        """The dataset of these options, validated (``--symmetrize`` applied):
        :func:`twopgraph.datasets.load_dataset`."""
        from .datasets import load_dataset
        return load_dataset(self.dataset, self.data_root, progress=progress,
                            symmetrize=self.symmetrize, store_dtype=self.store_dtype)


@dataclass
class SamplingConfig(Section):
    fanouts: list[int] | None = option(
        None, "neighbours sampled per GNN layer, input layer first (DGL's order); -1 = all; "
              "the number of entries is the number of layers", result=True,
        show_default=_auto_shown("fanouts"))
    batch_size: int = option(1024, "seed vertices per mini-batch", result=True)
    schedule: str = option("auto", "seed scheduler: auto (locality where it cuts the input "
                           "vertices of sampled batches by a meaningful share, measured on a few "
                           "batches at start-up, else random; the decision and its figures are "
                           "logged and recorded in metrics.json) or a registered one",
                           result=True, choices=lambda: ("auto", *SCHEDULERS.declared()),
                           registry=SCHEDULERS)
    num_clusters: int = _num_clusters()
    cluster_method: str = option(
        "auto", "how the clusters are computed: metis (METIS on the degree-capped graph) | "
                "coarsen (multilevel label propagation down to a small weighted graph, METIS "
                "on that, refined on the way back: time about linear in the edges, parallel, "
                "memory a few arrays of N beyond the CSR) | lp (the coarsening with a greedy "
                "packing, no METIS) | auto (metis below 64M directed edges, else coarsen)",
        result=True, choices=CLUSTER_METHODS)
    renumber: bool = option(True, "renumber the graph so that each cluster is one contiguous id "
                            "range (results stay in original ids)", negatable=True, result=True)
    balance: int = option(16, "locality: the next cluster of a batch is the best of this many "
                          "for the batch's label mix; 1 = plain shuffled cluster order",
                          result=True)
    sampler: str = option("neighbor", "the sampler, a registered name (a sampler module "
                          "added to twopgraph/sampler is one more)",
                          result=True, fingerprint_default=False,
                          choices=lambda: SAMPLERS.declared(), registry=SAMPLERS)
    # Not result parameters: both samplers draw bit-identical batches (same seed, same key).
    sampler_device: str = option("auto", "where mini-batches are sampled: cpu (numba, host "
                                 "memory) | cuda (torch ops on the training GPU, the graph in "
                                 "device memory; the same batches) | auto (= cuda when training "
                                 "on CUDA and the graph's CSR, degrees and relabelling map fit "
                                 "in --sampler-memory-share of the device's memory, else cpu)",
                                 choices=SAMPLER_DEVICES)
    sampler_memory_share: float = option(0.25, "--sampler-device auto: the largest share of the "
                                         "device's total memory the device sampler's graph may "
                                         "take, in (0, 1]")

    def validate(self):
        if self.fanouts is not None:  # None: by graph size (TrainConfig.resolved)
            from .sampler.neighbor import parse_fanouts
            self.fanouts = parse_fanouts(self.fanouts)
        _positive_int(self, "batch_size")
        if self.schedule != "auto":
            SCHEDULERS.check(self.schedule)
        _int_at_least(self, "num_clusters", 0, "(0 = automatic)")
        _choice(self, "cluster_method", CLUSTER_METHODS)
        _int_at_least(self, "balance", 1)
        if not isinstance(self.renumber, bool):
            raise ConfigError(f"renumber must be true or false, got {self.renumber!r}")
        SAMPLERS.check(self.sampler)
        _choice(self, "sampler_device", SAMPLER_DEVICES)
        if self.sampler_device == "cuda" and not _cuda_available():
            raise ConfigError("--sampler-device cuda requested but torch sees no CUDA GPU")
        if not (_is_number(self.sampler_memory_share) and 0.0 < self.sampler_memory_share <= 1.0):
            raise ConfigError(f"sampler-memory-share must be in (0, 1], "
                              f"got {self.sampler_memory_share!r}")
        return self


@dataclass
class CacheConfig(Section):
    cache_policy: str = option("none", "device feature cache, a registered policy",
                               choices=CACHE_POLICIES.declared, registry=CACHE_POLICIES)
    cache_ratio: float | None = option(None, "cache budget as a fraction of the feature rows, "
                                       "in [0, 1]", show_default="what fits: CUDA = free device "
                                       "memory after a 25%% margin and the estimated activations "
                                       "of training and evaluation (activation_reserve_bytes in "
                                       "metrics.json); CPU = 0, the host table is what the model "
                                       "reads")
    cache_gb: float | None = option(None, "cache budget in GiB (instead of --cache-ratio)")
    feat_dtype: str = _feat_dtype()
    host_cache: str = option("none", "host row cache of a memory-mapped feature table larger "
                             "than memory: the best-ranked rows packed in anonymous memory, the "
                             "others read from the store. none | auto (degree rank, when the "
                             "table does not fit in half the memory left) | a cache policy's "
                             "name (degree, presample, layer: its static rank picks the rows). "
                             "Off by default: it took memory from the page cache and did not "
                             "pay on any graph measured (scripts/bench_outofcore.py, "
                             "scripts/bench_gather.py)",
                             choices=lambda: ("auto", *CACHE_POLICIES.declared()))
    readahead: str = option("auto", "read-ahead of a memory-mapped feature table: on (the "
                            "sampling workers advise each batch's rows, MADV_WILLNEED, and "
                            "the map is MADV_RANDOM) | off (page faults read as the kernel "
                            "decides) | auto (on when the table exceeds half the memory left)",
                            choices=READAHEAD_MODES)
    host_cache_gb: float | None = option(None, "host row cache size in GiB",
                                         show_default="half the memory left after the "
                                         "memory-mapped graph structure (memory cgroup limit "
                                         "included); the other half stays for batches and "
                                         "page cache")

    def validate(self):
        CACHE_POLICIES.check(self.cache_policy)
        if self.host_cache != "auto" and self.host_cache not in CACHE_POLICIES:
            raise ConfigError(f"host-cache must be auto or a cache policy "
                              f"({', '.join(CACHE_POLICIES.names())}), got {self.host_cache!r}")
        _choice(self, "readahead", READAHEAD_MODES)
        if self.host_cache == "none" and self.host_cache_gb is not None:
            raise ConfigError("--host-cache-gb sizes a host row cache: give --host-cache auto "
                              "or a policy (degree, presample, ...) with it")
        if self.host_cache_gb is not None and not (
                _is_number(self.host_cache_gb) and math.isfinite(self.host_cache_gb)
                and self.host_cache_gb >= 0):
            raise ConfigError(f"host-cache-gb must be a finite number >= 0, "
                              f"got {self.host_cache_gb!r}")
        _choice(self, "feat_dtype", FEAT_DTYPE_NAMES)
        if self.cache_ratio is not None and self.cache_gb is not None:
            raise ConfigError("give --cache-ratio or --cache-gb, not both")
        if self.cache_ratio is not None and not (
                _is_number(self.cache_ratio) and 0.0 <= self.cache_ratio <= 1.0):
            raise ConfigError(f"cache-ratio must be in [0, 1], got {self.cache_ratio!r}")
        if self.cache_gb is not None and not (
                _is_number(self.cache_gb) and math.isfinite(self.cache_gb) and self.cache_gb >= 0):
            raise ConfigError(f"cache-gb must be a finite number >= 0, got {self.cache_gb!r}")
        return self


@dataclass
class ModelConfig(Section):
    model: str = option("sage", "the GNN, a registered model", result=True,
                        choices=MODELS.declared, registry=MODELS, spec=True)
    hidden: int = option(256, "hidden width", result=True, spec=True)
    dropout: float = option(0.5, "dropout between layers", result=True, spec=True)
    heads: int = option(4, "attention heads of a model with attention (gat): a hidden layer "
                        "concatenates its heads' hidden/heads columns, the output layer "
                        "averages its heads; other models ignore it", result=True,
                        fingerprint_default=False, spec=True)
    lr: float | None = option(None, "Adam learning rate", result=True,
                              show_default=_auto_shown("lr"))
    weight_decay: float = option(0.0, "Adam weight decay", result=True)
    amp: str = option("off", "mixed precision of the training forward pass and loss: off "
                      "(float32) | bf16 (torch.autocast to bfloat16, on CUDA and on CPU); exact "
                      "evaluation stays float32", result=True, choices=AMP_MODES)

    def spec(self) -> dict:
        """The fields the model is built from (``spec=True``), by name: the checkpoint's
        model spec (``model_spec``) records them."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.metadata.get("spec")}

    @classmethod
    def spec_fields(cls, required: bool = False) -> list[str]:
        """Names of the ``spec=True`` fields; ``required``: only those every checkpoint
        records (added before checkpoints existed: ``fingerprint_default`` True), the others
        take their default when a checkpoint lacks them."""
        return [f.name for f in fields(cls) if f.metadata.get("spec") and
                (not required or f.metadata.get("fingerprint_default", True))]

    def conv_options(self) -> dict:
        """The fields the chosen model's conv reads besides the sizes (its ``options``)."""
        return {k: getattr(self, k) for k in MODELS.get(self.model).options}

    def validate(self):
        conv = MODELS.get(self.model)
        _choice(self, "amp", AMP_MODES)
        _positive_int(self, "hidden")
        _positive_int(self, "heads")
        conv.check_options(self.hidden, **self.conv_options())
        if self.lr is not None and not (_is_number(self.lr) and math.isfinite(self.lr)
                                        and self.lr > 0):
            raise ConfigError(f"lr must be a positive finite number, got {self.lr!r}")
        if not (_is_number(self.dropout) and 0.0 <= self.dropout < 1.0):
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if not (_is_number(self.weight_decay) and math.isfinite(self.weight_decay)
                and self.weight_decay >= 0):
            raise ConfigError(f"weight-decay must be a finite number >= 0, "
                              f"got {self.weight_decay!r}")
        return self


@dataclass
class RunConfig(Section):
    epochs: int | None = option(None, "training epochs", show_default=_auto_shown("epochs"))
    seed: int = _seed()
    device: str = option("auto", "cpu | cuda | cuda:N | auto (= cuda if available)")
    out: str = option("runs/train", "output folder: metrics.json, checkpoint.pt; one run at a "
                      "time (a second run into a folder in use is refused)")
    resume: bool = option(False, "continue from OUT/checkpoint.pt (the same configuration; "
                          "--epochs may grow)")
    overwrite: bool = option(False, "write into an --out that already holds a run (its "
                             "metrics.json and checkpoint.pt are replaced); without it or "
                             "--resume such a folder is refused")
    select: str = option("best-val", "which model the run reports and keeps: best-val (the "
                         "evaluated epoch with the best validation score: val/test scores and "
                         "the checkpoint's model weights come from it, recorded as "
                         "selected_epoch) | last (the final epoch's model)", choices=SELECT_MODES)
    metric: str = option("auto", "the validation/test score that --select compares and "
                         "metrics.json reports as val_score/test_score: acc | rocauc (area "
                         "under the ROC curve of class 1's probability; two classes only) | "
                         "auto (rocauc for two classes, else acc); val_acc/test_acc are always "
                         "accuracies", choices=METRICS)
    eval_every: int = option(1, "exact evaluation every N epochs; 0 = after the last only")
    patience: int = option(0, "stop after N evaluated epochs in a row without a better "
                           "validation score (early stopping; recorded in metrics.json as "
                           "early_stop; never stops a run without any validation score); 0 = "
                           "off", metavar="N")
    eval_batch_edges: int = option(4_000_000, "edges per chunk of layer-wise inference")
    eval_scope: str = option("auto", "which vertices exact evaluation computes: all (every "
                             "layer for all N vertices) | scored (the validation and test "
                             "vertices and their L-hop in-neighbourhood only: tables sized by "
                             "it, not by N; the same scores) | auto (scored where its "
                             "estimated work, rows + edges over the layers, is at most half "
                             "of all's)", choices=EVAL_SCOPES)
    prefetch: int = option(2, "batches prepared ahead (sampled, gathered) in a background "
                           "thread; 0 = none")
    threads: int = _threads()
    progress: bool = option(True, "no progress bars", flag="--no-progress")

    def validate(self):
        if self.epochs is not None:  # None: by graph size (TrainConfig.resolved)
            _positive_int(self, "epochs")
        _seed_ok(self.seed)
        resolve_device(self.device)
        for name in ("eval_every", "patience", "prefetch", "threads"):
            _int_at_least(self, name, 0)
        _positive_int(self, "eval_batch_edges")
        _choice(self, "eval_scope", EVAL_SCOPES)
        _choice(self, "select", SELECT_MODES)
        _choice(self, "metric", METRICS)
        for name in ("resume", "overwrite"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if not isinstance(self.out, str) or not self.out.strip():
            raise ConfigError("--out must name a folder")
        out = Path(self.out)
        _not_dangling(out)
        for parent in (out, *out.parents):
            if parent.exists():
                if not parent.is_dir():
                    raise ConfigError(f"--out {self.out}: {parent} exists and is not a folder")
                break
        return self


@dataclass
class DistConfig(Section):
    partitions: str | None = option(None, "train data-parallel on the parts of DIR (written by "
                                    "`twopgraph partition`; one process per part; --dataset is "
                                    "taken from DIR); run under torchrun or give --nproc",
                                    metavar="DIR")
    nproc: int | None = option(None, "with --partitions: start torchrun with this many "
                               "processes on this machine (= the number of parts)")
    dist_timeout: float = option(600.0, "seconds a rank waits for the others in a collective "
                                 "before it stops with an error")

    def validate(self):
        if self.nproc is not None:
            _positive_int(self, "nproc")
            if self.partitions is None:
                raise ConfigError("--nproc needs --partitions DIR (see `twopgraph partition`)")
        if not (_is_number(self.dist_timeout) and math.isfinite(self.dist_timeout)
                and 0 < self.dist_timeout <= 7 * 24 * 3600):
            raise ConfigError(f"dist-timeout must be a positive number of seconds (at most a "
                              f"week), got {self.dist_timeout!r}")
        return self


# ----------------------------------------------------------------------------------------------
# configs of the verbs
# ----------------------------------------------------------------------------------------------


class Config:
    """A verb's configuration: a dataclass whose fields are :class:`Section` instances.

    Field names are unique across the sections of one config, so a flat view exists:
    :meth:`of` builds one from flat keyword arguments, :meth:`flat` gives them back."""

    @classmethod
    def sections(cls) -> dict[str, type]:
        hints = typing.get_type_hints(cls)
        return {f.name: hints[f.name] for f in fields(cls)}

    @classmethod
    def of(cls, **flat):
        """Build from flat field names, e.g. ``TrainConfig.of(dataset="cora", epochs=3)``;
        an unknown name is a :class:`ConfigError`."""
        parts = {}
        rest = dict(flat)
        for name, sec in cls.sections().items():
            mine = {f.name: rest.pop(f.name) for f in fields(sec) if f.name in rest}
            parts[name] = sec(**mine)
        if rest:
            raise ConfigError(f"unknown config keys: {', '.join(sorted(rest))}")
        return cls(**parts)

    @classmethod
    def from_dict(cls, d: dict):
        """From :meth:`flat` output or from ``asdict`` (nested) output."""
        if any(k in d for k in cls.sections()) and all(isinstance(v, dict) for v in d.values()):
            flat = {k: v for sec in d.values() for k, v in sec.items()}
        else:
            flat = d
        return cls.of(**flat)

    @classmethod
    def from_args(cls, ns: argparse.Namespace):
        """From a namespace parsed by a parser made with :meth:`add_arguments`."""
        flat = {}
        for sec in cls.sections().values():
            for f in fields(sec):
                if hasattr(ns, f.name):
                    flat[f.name] = getattr(ns, f.name)
        return cls.of(**flat)

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser, exclude=(), required=()) -> None:
        """One flag per field of every section (``exclude``: field names left out, besides
        the config's own ``EXCLUDE``; ``required``: field names made required)."""
        exclude = tuple(exclude) + tuple(getattr(cls, "EXCLUDE", ()))
        for sec in cls.sections().values():
            add_section_arguments(parser, sec, exclude=exclude, required=required)

    def resolved(self, num_nodes: int):
        """This config with the size-based options left at None (``fanouts``, ``lr``,
        ``epochs``, those of them it has) set from :data:`SIZE_DEFAULTS` for a graph of
        ``num_nodes`` vertices (:func:`size_profile`), and the record of what was chosen
        (``metrics.json``: ``defaults``): ``{"profile", "num_nodes", "small_below"
        (:data:`SMALL_GRAPH_NODES`), "chosen": {name: value} (the options that were None),
        "explicit": {name: value} (the ones given)}``. Given values always win; ``self`` is
        not changed.

        Example::

            >>> cfg, rec = TrainConfig.of(lr=0.05).resolved(num_nodes=2_708)
            >>> cfg.sampling.fanouts, cfg.model.lr, cfg.run.epochs
            ([10, 10], 0.05, 50)
            >>> rec["profile"], rec["chosen"], rec["explicit"]
            ('small', {'fanouts': [10, 10], 'epochs': 50}, {'lr': 0.05})
        """
        out = copy.deepcopy(self)
        profile = size_profile(num_nodes)
        rec = {"profile": profile, "num_nodes": int(num_nodes),
               "small_below": SMALL_GRAPH_NODES, "chosen": {}, "explicit": {}}
        have = self.sections()
        for name, section in _SIZE_SECTIONS.items():
            if section not in have:
                continue
            sec = getattr(out, section)
            if getattr(sec, name) is None:
                value = copy.copy(SIZE_DEFAULTS[profile][name])
                setattr(sec, name, value)
                rec["chosen"][name] = copy.copy(value)
            else:
                rec["explicit"][name] = copy.copy(getattr(sec, name))
        return out, rec

    def flat(self) -> dict:
        """Every field as ``{name: value}`` (what ``metrics.json`` records as ``config``)."""
        return {k: v for sec in asdict(self).values() for k, v in sec.items()}

    def result_params(self) -> dict:
        """The fields that change a trained model (``result=True``), by name."""
        out = {}
        for name in self.sections():
            sec = getattr(self, name)
            for f in fields(sec):
                if f.metadata.get("result"):
                    value = getattr(sec, f.name)
                    if f.metadata.get("fingerprint_default", True) or value != f.default:
                        out[f.name] = value
        return out

    def validate(self):
        """Validate every section (one pass; the first bad value raises)."""
        for name in self.sections():
            getattr(self, name).validate()
        return self


@dataclass
class TrainConfig(Config):
    """Every option of ``twopgraph train``."""

    data: DataConfig = field(default_factory=DataConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    run: RunConfig = field(default_factory=RunConfig)
    dist: DistConfig = field(default_factory=DistConfig)

    def validate(self):
        """Every section, then the options that depend on each other: ``--sampler-device
        cuda`` samples on the training device, so it needs ``--device`` cuda, and the
        partition sampler of ``--partitions`` (it counts remote requests) runs on the host."""
        super().validate()
        if self.sampling.sampler_device == "cuda":
            if resolve_device(self.run.device).type != "cuda":
                raise ConfigError(f"--sampler-device cuda samples on the training device; it "
                                  f"needs --device cuda (got --device {self.run.device})")
            if self.dist.partitions is not None:
                raise ConfigError("--sampler-device cuda is not available with --partitions "
                                  "(the partition sampler runs on the host); use cpu or auto")
        if self.dist.partitions is not None and self.data.store_dtype == "float16":
            raise ConfigError("--store-dtype float16 is not available with --partitions yet "
                              "(a partition reads the float32 store it was made from)")
        return self


# Sampling flags that only `train` reads: the bench verbs leave them out.
_TRAIN_ONLY_SAMPLING = ("sampler_device", "sampler_memory_share")


@dataclass
class SamplerBenchOptions(Section):
    epochs: int = option(3, "timed epochs; the median is reported")
    warmup: int = option(1, "untimed epochs first (JIT compilation, caches)")
    seed: int = _seed()
    threads: int = _threads()
    json: bool = option(False, "print one JSON line")

    def validate(self):
        if self.epochs is not None:  # None: by graph size (TrainConfig.resolved)
            _positive_int(self, "epochs")
        _int_at_least(self, "warmup", 0)
        _seed_ok(self.seed)
        _int_at_least(self, "threads", 0)
        return self


@dataclass
class BenchSamplerConfig(Config):
    """``twopgraph bench sampler``: sampling-only epochs."""

    data: DataConfig = field(default_factory=DataConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    bench: SamplerBenchOptions = field(default_factory=SamplerBenchOptions)

    EXCLUDE = _TRAIN_ONLY_SAMPLING


@dataclass
class CacheBenchOptions(Section):
    policies: str = option("none,degree,presample,layer", "comma-separated cache policies",
                           choices=CACHE_POLICIES.declared, listed=True)
    ratios: str = option("0.01,0.05,0.1,0.2,0.4",
                         "cache budgets as fractions of the feature rows")
    schedules: str = option("random,locality", "comma-separated seed schedulers",
                            choices=SCHEDULERS.declared, listed=True)
    out: str = option("runs/bench_cache", "output folder: cache.csv, cache.png")
    epoch: int = option(0, "which epoch's access stream is measured")
    presample_epochs: int = option(1, "presample: pre-sampling epochs K")
    lookahead: int | None = option(None, "layer: batches sampled ahead",
                                   show_default="the policy's, 32")
    copy: bool = option(False, "really move the features through a FeatureCache on --device "
                        "and time the gathers (the counts are the same)")
    device: str = option("cpu", "device for --copy")
    feat_dtype: str = _feat_dtype()
    seed: int = _seed()
    threads: int = _threads()
    json: bool = option(False, "print the rows as JSON lines")

    def validate(self):
        for name in ("policies", "schedules"):
            setattr(self, name, csv_list(getattr(self, name), name))
        for p in self.policies:
            CACHE_POLICIES.check(p)
        for s in self.schedules:
            SCHEDULERS.check(s)
        self.ratios = csv_list(self.ratios, "ratios", float)
        for r in self.ratios:
            if not 0.0 <= r <= 1.0:
                raise ConfigError(f"cache ratios must be in [0, 1], got {r}")
        _int_at_least(self, "epoch", 0)
        _positive_int(self, "presample_epochs")
        if self.lookahead is not None:
            _int_at_least(self, "lookahead", 0)
        resolve_device(self.device)
        _choice(self, "feat_dtype", FEAT_DTYPE_NAMES)
        _seed_ok(self.seed)
        _int_at_least(self, "threads", 0)
        out = Path(self.out)
        _not_dangling(out)
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--out {self.out} exists and is not a folder")
        return self


def _not_dangling(out: Path, flag: str = "--out") -> None:
    """:func:`twopgraph.rundir.refuse_dangling`: a symbolic link to nothing in ``out``'s
    path is refused in one line naming it."""
    from .rundir import refuse_dangling
    refuse_dangling(out, flag)


@dataclass
class BenchCacheConfig(Config):
    """``twopgraph bench cache``: policies x schedules x budgets against the optimum
    (``--schedules`` replaces ``--schedule``)."""

    data: DataConfig = field(default_factory=DataConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    bench: CacheBenchOptions = field(default_factory=CacheBenchOptions)

    EXCLUDE = ("schedule",) + _TRAIN_ONLY_SAMPLING


@dataclass
class PartitionOptions(Section):
    num_parts: int | None = option(None, "parts = training processes (GPUs or CPU workers)",
                                   required=True)
    hops: int = option(3, "halo depth H; H >= the model's layers (entries of --fanouts) makes "
                          "sampling in a part exact, a smaller H replicates less but truncates "
                          "sampling at part boundaries")
    out: str | None = option(None, "partition folder to write", required=True, metavar="DIR")
    num_clusters: int = _num_clusters(" for batch size 1024, as `twopgraph train`")
    seed: int = option(0, "METIS seed")
    representation: str = option(
        "auto", "how a part holds its graph: local (its own CSR over owned + halo vertices, "
                "local ids), global (no CSR of its own: the rank samples on the dataset "
                "store's CSR, shared by every rank on the machine), auto (global when the "
                "local CSR would exceed half the store's)", choices=REPRESENTATIONS)
    force: bool = option(False, "rewrite DIR even if it already holds this partition")
    json: bool = option(False, "print meta.json as one JSON line")

    def validate(self):
        _positive_int(self, "num_parts")
        _int_at_least(self, "hops", 0)
        _int_at_least(self, "num_clusters", 0, "(0 = automatic)")
        _seed_ok(self.seed)
        _choice(self, "representation", REPRESENTATIONS)
        return self


@dataclass
class PartitionConfig(Config):
    """``twopgraph partition``: self-dependence partitions."""

    data: DataConfig = field(default_factory=DataConfig)
    partition: PartitionOptions = field(default_factory=PartitionOptions)

    def validate(self):
        super().validate()
        if self.data.store_dtype == "float16":
            raise ConfigError("--store-dtype float16 is not available for partitions yet")
        return self


@dataclass
class PredictOptions(Section):
    checkpoint: str | None = option(None, "checkpoint.pt of a `twopgraph train` run (single "
                                    "process or --partitions)", required=True, metavar="FILE")
    out: str | None = option(None, "the .npy file to write (atomically): one row per vertex "
                             "in the dataset's original order", required=True, metavar="FILE")
    logits: bool = option(False, "write the N x C float32 logits instead of the class ids "
                          "(int64, N)")
    device: str = option("cpu", "where inference runs: cpu | cuda | cuda:N | auto")

    def validate(self):
        for name in ("checkpoint", "out"):
            v = getattr(self, name)
            if not isinstance(v, str) or not v.strip():
                raise ConfigError(f"--{name} must name a file")
        if Path(self.out).is_dir():
            raise ConfigError(f"--out {self.out} is a folder; give the .npy file to write")
        if not isinstance(self.logits, bool):
            raise ConfigError(f"logits must be true or false, got {self.logits!r}")
        resolve_device(self.device)
        return self


@dataclass
class PredictConfig(Config):
    """``twopgraph predict``: predictions of a trained model. ``--dataset`` defaults to
    None: the checkpoint's own dataset; ``--data-root`` to the checkpoint's data root."""

    data: DataConfig = field(default_factory=lambda: DataConfig(dataset=None))
    predict: PredictOptions = field(default_factory=PredictOptions)

    @classmethod
    def of(cls, **flat):
        flat.setdefault("dataset", None)
        return super().of(**flat)

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser, exclude=(), required=()) -> None:
        """:meth:`Config.add_arguments`, with the checkpoint's dataset and data root as the
        defaults of ``--dataset`` and ``--data-root``."""
        parser.add_argument("--dataset", dest="dataset", default=None,
                            help="the data to predict on, as for `train` (default: the "
                                 "checkpoint's; other data is used only with the model's "
                                 "numbers of features and classes)")
        parser.add_argument("--data-root", dest="data_root", default=None,
                            help="where datasets and METIS clusters are looked up (default: "
                                 "the checkpoint's data root)")
        super().add_arguments(parser, exclude=("dataset", "data_root") + tuple(exclude),
                              required=required)

    def validate(self):
        if self.data.dataset is not None:
            self.data.validate()
        elif not isinstance(self.data.symmetrize, bool):
            raise ConfigError(f"symmetrize must be true or false, got {self.data.symmetrize!r}")
        self.predict.validate()
        return self


# ----------------------------------------------------------------------------------------------
# argparse generation
# ----------------------------------------------------------------------------------------------


def add_section_arguments(parser: argparse.ArgumentParser, section: type, exclude=(),
                          required=()) -> None:
    """Add one flag per field of the dataclass ``section`` (see :func:`option`)."""
    hints = typing.get_type_hints(section)
    for f in fields(section):
        if f.name in exclude:
            continue
        meta = f.metadata
        flag = meta.get("flag") or "--" + f.name.replace("_", "-")
        default = f.default_factory() if f.default is MISSING else f.default
        kind = hints[f.name]
        base = _base_type(kind)
        req = meta.get("required") or f.name in required
        kw: dict = {"dest": f.name, "help": _help(meta, default, req, base)}
        if base is bool:
            if meta.get("negatable"):
                kw.update(action=argparse.BooleanOptionalAction, default=default)
            else:
                kw.update(action="store_false" if flag.startswith("--no-") else "store_true",
                          default=default)
        else:
            kw.update(type=base if base in (int, float) else str, default=default)
            if req:
                kw.update(required=True, default=None)
            if meta.get("metavar"):
                kw["metavar"] = meta["metavar"]
            elif meta.get("choices") is not None:
                kw["metavar"] = _choices_metavar(meta["choices"], meta.get("listed", False))
        parser.add_argument(flag, **kw)


def _choices_metavar(choices, listed: bool = False) -> str:
    """``{a,b,c}`` (``{a,b,c}[,...]`` for a comma-separated list) of a field's ``choices``:
    a tuple, or a function returning the names (a registry's, read without importing it)."""
    names = choices() if callable(choices) else choices
    text = "{" + ",".join(names) + "}"
    return text + "[,...]" if listed else text


def _base_type(kind) -> type:
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return _base_type(args[0])
    if typing.get_origin(kind) is list:
        return list
    return kind


def registry_help(registry) -> str:
    """``name: summary | ...`` of a registry's names (read from the sources, not imported)."""
    def lower(d: str) -> str:  # "A layer-aware ..." -> "a layer-aware ...", not "GCN"
        return d[0].lower() + d[1:] if d[:2] != d[:2].upper() else d
    return " | ".join(f"{n}: {lower(d.rstrip('.'))}" if d else n
                      for n, d in registry.described().items())


def _help(meta, default, required: bool, base) -> str:
    text = meta.get("help", "")
    if meta.get("registry") is not None:
        text = f"{text}: {registry_help(meta['registry'])}"
    if required or base is bool and not meta.get("negatable"):
        return text
    shown = meta.get("show_default")
    if shown is None:
        if isinstance(default, list):
            shown = ",".join(str(v) for v in default)
        elif default is None:
            shown = "none"
        elif isinstance(default, bool):
            shown = "on" if default else "off"
        else:
            shown = str(default)
    return f"{text} (default: {shown})"


# ----------------------------------------------------------------------------------------------
# validation helpers
# ----------------------------------------------------------------------------------------------


def _cuda_available() -> bool:
    import torch
    return torch.cuda.is_available()


def resolve_device(name: str) -> "torch.device":
    """``auto`` -> cuda when available else cpu; ``cuda`` without a GPU is an error."""
    import torch
    if not isinstance(name, str):
        raise ConfigError(f"device must be a string, got {name!r}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name not in ("cpu", "cuda") and not (name.startswith("cuda:") and name[5:].isdigit()):
        raise ConfigError(f"unknown device {name!r}; use cpu, cuda, cuda:N or auto")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("device cuda requested but torch sees no CUDA GPU")
    return torch.device(name)


def csv_list(value, what: str, conv=str) -> list:
    """``"a,b"`` (or a list) -> ``[conv("a"), conv("b")]``; at least one entry."""
    items = value if isinstance(value, (list, tuple)) else \
        [t.strip() for t in str(value).split(",") if t.strip()]
    if not items:
        raise ConfigError(f"--{what} needs at least one value")
    try:
        return [conv(t) for t in items]
    except (TypeError, ValueError):
        raise ConfigError(f"malformed --{what} {value!r}") from None


def _flag(name: str) -> str:
    return name.replace("_", "-")


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _positive_int(obj, name: str) -> None:
    _int_at_least(obj, name, 1)


def _int_at_least(obj, name: str, low: int, note: str = "") -> None:
    v = getattr(obj, name)
    if not _is_int(v) or v < low:
        what = "a positive integer" if low == 1 else f"an integer >= {low}"
        raise ConfigError(f"{_flag(name)} must be {what}{' ' + note if note else ''}, got {v!r}")


def _choice(obj, name: str, allowed) -> None:
    v = getattr(obj, name)
    if v not in allowed:
        raise ConfigError(f"unknown {_flag(name).replace('-', ' ')} {v!r}; known: "
                          f"{', '.join(allowed)}")


def _seed_ok(seed) -> None:
    if not _is_int(seed) or not 0 <= seed < 2 ** 63:
        raise ConfigError(f"seed must be an integer in [0, 2**63), got {seed!r}")


