"""The sections the verbs' configs are built from, one dataclass each:

- :class:`DataConfig` (``--dataset``, ``--data-root``, ``--symmetrize``, ``--store-dtype``);
- :class:`SamplingConfig` (fanouts, batch size, schedule, clusters, renumbering, sampler
  device);
- :class:`CacheConfig` (feature cache policy, budget, feature dtype, host row cache);
- :class:`ModelConfig` (model, optimiser, mixed precision);
- :class:`RunConfig` (epochs, seed, device, output, evaluation, threads, ...);
- :class:`DistConfig` (partitioned data-parallel training).

Names are checked against the registries (read from their sources, nothing imported) and the
closed sets of :mod:`twopgraph.core.names`; validation imports what it needs (torch for devices,
the fanout parser) only when it runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from twopgraph.config.checks import (
    cuda_available,
    int_at_least,
    is_number,
    not_dangling,
    one_of,
    positive_int,
    resolve_device,
    seed_ok,
    tensorboard_ok,
)
from twopgraph.config.defaults import auto_shown
from twopgraph.config.options import (
    Section,
    feat_dtype_option,
    num_clusters_option,
    option,
    seed_option,
    threads_option,
)
from twopgraph.core.fanouts import parse_fanouts
from twopgraph.core.names import (
    AMP_MODES,
    CLUSTER_METHODS,
    EVAL_SCOPES,
    FEAT_DTYPE_NAMES,
    MAX_LABOR_ITERATIONS,
    METRICS,
    READAHEAD_MODES,
    SAMPLER_DEVICES,
    SELECT_MODES,
    STORE_DTYPE_CHOICES,
)
from twopgraph.core.protocols import CACHE_POLICIES, MODELS, SAMPLERS, SCHEDULERS
from twopgraph.errors import ConfigError

if TYPE_CHECKING:
    from twopgraph.graph.data import GraphData


@dataclass
class DataConfig(Section):
    """The dataset: its name or path, the data root, ``--symmetrize``, the store's feature type."""

    dataset: str = option("synthetic-small", "synthetic-tiny | synthetic-small | "
                          "synthetic-products | ogbn-arxiv | ogbn-products | ogbn-papers100M | "
                          "a .npz path | a store folder | NAME: DATA_ROOT/NAME.npz or the "
                          "store DATA_ROOT/NAME, else the same in a folder of "
                          "$TWOPGRAPH_DATASET_PATH (':'-separated), else the store converted "
                          "earlier from a NAME.npz, else for cora | citeseer | pubmed the "
                          "Planetoid citation graph (public split, as PyG's Planetoid), its "
                          "raw files in DATA_ROOT/planetoid/NAME/raw, downloaded there when "
                          "missing (`twopgraph datasets` lists them)",
                          result=True)
    data_root: str | None = option(None, "where datasets are generated, cached and looked up; "
                                   "ogb's root", show_default="$TWOPGRAPH_DATA, else "
                                   "$XDG_CACHE_HOME/twopgraph, i.e. ~/.cache/twopgraph")
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
        one_of(self, "store_dtype", STORE_DTYPE_CHOICES)
        if not isinstance(self.symmetrize, bool):
            raise ConfigError(f"symmetrize must be true or false, got {self.symmetrize!r}")
        return self

    def load(self, progress: bool = True) -> "GraphData":
        """The dataset of these options, validated (``--symmetrize`` applied):
        :func:`twopgraph.datasets.load_dataset`."""
        from twopgraph.datasets import load_dataset
        return load_dataset(self.dataset, self.data_root, progress=progress,
                            symmetrize=self.symmetrize, store_dtype=self.store_dtype)


@dataclass
class SamplingConfig(Section):
    """Mini-batch sampling: fanouts, batch size, seed scheduler, clusters and renumbering,
    the sampler and where it runs."""

    fanouts: list[int] | None = option(
        None, "neighbours sampled per GNN layer, input layer first (DGL's order); -1 = all; "
              "the number of entries is the number of layers", result=True,
        show_default=auto_shown("fanouts"))
    batch_size: int = option(1024, "seed vertices per mini-batch", result=True)
    schedule: str = option("auto", "seed scheduler: auto (locality where it cuts the input "
                           "vertices of sampled batches by a meaningful share, measured on a few "
                           "batches at start-up, else random; the decision and its figures are "
                           "logged and recorded in metrics.json) or a registered one",
                           result=True, choices=lambda: ("auto", *SCHEDULERS.declared()),
                           registry=SCHEDULERS)
    num_clusters: int = num_clusters_option()
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
    sampler: str = option("auto", "the sampler: auto (labor where it cuts the input "
                          "vertices of sampled batches by at least a tenth, measured on a few "
                          "batches of the run's schedule at start-up, else neighbor; the "
                          "decision and its figures are logged and recorded in metrics.json) "
                          "or a registered one (a sampler module added to twopgraph/sampler "
                          "is one more)",
                          result=True, fingerprint_default=False,
                          choices=lambda: ("auto", *SAMPLERS.declared()), registry=SAMPLERS)
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
    # --sampler labor's options (twopgraph/sampler/labor.py reads them as its keywords).
    labor_iterations: int = option(
        1, "--sampler labor (and auto): fixed-point rounds of the vertex importances pi "
           "(LABOR-*: shared neighbours get kept more, fewer vertices per batch); 0 = LABOR-0 "
           "(uniform pi), 1 = LABOR-1 (the default since issue 41: about 0.4-0.5x neighbour "
           "sampling's input vertices where LABOR-0 keeps 0.6-0.7x); at most "
           f"{MAX_LABOR_ITERATIONS}",
        result=True, fingerprint_default=False)
    labor_layer_dependency: bool = option(
        False, "--sampler labor: the same random variates in every layer (a vertex kept in "
               "one layer tends to be kept in the others: fewer input vertices)",
        result=True, fingerprint_default=False)
    labor_batch_dependency: int = option(
        1, "--sampler labor: variates drift smoothly over this many consecutive batches, "
           "so they share more input vertices (a feature cache hits more); 1 = independent "
           "batches", result=True, fingerprint_default=False)

    def validate(self):
        if self.fanouts is not None:  # None: by graph size (TrainConfig.resolved)
            self.fanouts = parse_fanouts(self.fanouts)
        positive_int(self, "batch_size")
        if self.schedule != "auto":
            SCHEDULERS.check(self.schedule)
        int_at_least(self, "num_clusters", 0, "(0 = automatic)")
        one_of(self, "cluster_method", CLUSTER_METHODS)
        int_at_least(self, "balance", 1)
        if not isinstance(self.renumber, bool):
            raise ConfigError(f"renumber must be true or false, got {self.renumber!r}")
        if self.sampler != "auto":
            SAMPLERS.check(self.sampler)
        one_of(self, "sampler_device", SAMPLER_DEVICES)
        if self.sampler_device == "cuda" and not cuda_available():
            raise ConfigError("--sampler-device cuda requested but torch sees no CUDA GPU")
        if not (is_number(self.sampler_memory_share) and 0.0 < self.sampler_memory_share <= 1.0):
            raise ConfigError(f"sampler-memory-share must be in (0, 1], "
                              f"got {self.sampler_memory_share!r}")
        int_at_least(self, "labor_iterations", 0, "(0 = LABOR-0)")
        if self.labor_iterations > MAX_LABOR_ITERATIONS:
            raise ConfigError(f"--labor-iterations must be at most {MAX_LABOR_ITERATIONS} "
                              f"(the importances settle in a few rounds), "
                              f"got {self.labor_iterations}")
        if not isinstance(self.labor_layer_dependency, bool):
            raise ConfigError(f"labor-layer-dependency must be true or false, "
                              f"got {self.labor_layer_dependency!r}")
        int_at_least(self, "labor_batch_dependency", 1, "(1 = independent batches)")
        return self


@dataclass
class CacheConfig(Section):
    """Feature reads: the device cache's policy and budget, the feature type, the host row
    cache and read-ahead of a memory-mapped table."""

    cache_policy: str = option("auto", "device feature cache: auto (layer on a CUDA device, "
                               "none on the CPU) or a registered policy",
                               choices=lambda: ("auto", *CACHE_POLICIES.declared()),
                               registry=CACHE_POLICIES)
    cache_ratio: float | None = option(None, "cache budget as a fraction of the feature rows, "
                                       "in [0, 1]", show_default="what fits: CUDA = free device "
                                       "memory after a 25%% margin and the estimated activations "
                                       "of training and evaluation (activation_reserve_bytes in "
                                       "metrics.json); CPU = 0, the host table is what the model "
                                       "reads")
    cache_gb: float | None = option(None, "cache budget in GiB (instead of --cache-ratio)")
    feat_dtype: str = feat_dtype_option()
    host_cache: str = option("none", "host row cache of a memory-mapped feature table larger "
                             "than memory: the best-ranked rows packed in anonymous memory, the "
                             "others read from the store. none | auto (degree rank, when the "
                             "table does not fit in half the memory left) | a cache policy's "
                             "name (degree, presample, layer: its static rank picks the rows). "
                             "Off by default: it took memory from the page cache and did not "
                             "pay on any graph measured (twopgraph bench memory "
                             "--wide-features 2048, --workload gather)",
                             choices=lambda: ("auto", *CACHE_POLICIES.declared()))
    readahead: str = option("auto", "read-ahead of a memory-mapped feature table: on (the "
                            "sampling workers advise each batch's rows, MADV_WILLNEED, and "
                            "the map is MADV_RANDOM) | off (page faults read as the kernel "
                            "decides) | auto (on when the table exceeds half the memory "
                            "left, and then only for pages not in the page cache already, "
                            "asked with mincore)",
                            choices=READAHEAD_MODES)
    host_cache_gb: float | None = option(None, "host row cache size in GiB",
                                         show_default="half the memory left after the "
                                         "memory-mapped graph structure (memory cgroup limit "
                                         "included); the other half stays for batches and "
                                         "page cache")

    def validate(self):
        if self.cache_policy != "auto":
            CACHE_POLICIES.check(self.cache_policy)
        if self.host_cache != "auto" and self.host_cache not in CACHE_POLICIES:
            raise ConfigError(f"host-cache must be auto or a cache policy "
                              f"({', '.join(CACHE_POLICIES.names())}), got {self.host_cache!r}")
        one_of(self, "readahead", READAHEAD_MODES)
        if self.host_cache == "none" and self.host_cache_gb is not None:
            raise ConfigError("--host-cache-gb sizes a host row cache: give --host-cache auto "
                              "or a policy (degree, presample, ...) with it")
        if self.host_cache_gb is not None and not (
                is_number(self.host_cache_gb) and math.isfinite(self.host_cache_gb)
                and self.host_cache_gb >= 0):
            raise ConfigError(f"host-cache-gb must be a finite number >= 0, "
                              f"got {self.host_cache_gb!r}")
        one_of(self, "feat_dtype", FEAT_DTYPE_NAMES)
        if self.cache_ratio is not None and self.cache_gb is not None:
            raise ConfigError("give --cache-ratio or --cache-gb, not both")
        if self.cache_ratio is not None and not (
                is_number(self.cache_ratio) and 0.0 <= self.cache_ratio <= 1.0):
            raise ConfigError(f"cache-ratio must be in [0, 1], got {self.cache_ratio!r}")
        if self.cache_gb is not None and not (
                is_number(self.cache_gb) and math.isfinite(self.cache_gb) and self.cache_gb >= 0):
            raise ConfigError(f"cache-gb must be a finite number >= 0, got {self.cache_gb!r}")
        return self


@dataclass
class ModelConfig(Section):
    """The model (a registered name, its sizes, dropout, heads) and its optimiser (Adam) and
    mixed precision."""

    model: str = option("sage", "the GNN: a registered model, or MODULE:CLASS, a GNN layer "
                        "class of your own imported from sys.path (the current folder "
                        "included) and built as the registered ones are, CLASS.build(in_dim, "
                        "out_dim, last=..., **options) for a twopgraph.models.Conv subclass, "
                        "else CLASS(in_dim, out_dim), called as layer(block, h_src, h_dst) "
                        "(docs/architecture.md, 'Adding a model'); the checkpoint records the "
                        "spec, so predict and --resume import it again. Registered",
                        result=True, choices=MODELS.declared, registry=MODELS, spec=True)
    hidden: int = option(256, "hidden width", result=True, spec=True)
    dropout: float = option(0.5, "dropout between layers", result=True, spec=True)
    heads: int = option(4, "attention heads of a model with attention (gat): a hidden layer "
                        "concatenates its heads' hidden/heads columns, the output layer "
                        "averages its heads; other models ignore it", result=True,
                        fingerprint_default=False, spec=True)
    lr: float | None = option(None, "Adam learning rate", result=True,
                              show_default=auto_shown("lr"))
    weight_decay: float = option(0.0, "Adam weight decay", result=True)
    amp: str = option("off", "mixed precision of the training forward pass and loss: off "
                      "(float32) | bf16 (torch.autocast to bfloat16, on CUDA and on CPU); exact "
                      "evaluation stays float32", result=True, choices=AMP_MODES)

    def __post_init__(self) -> None:
        if isinstance(self.model, type):  # a class: its spec, what the checkpoint records
            self.model = model_class_spec(self.model)

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
        conv = MODELS.get(self.model)
        unknown = [k for k in conv.options if k not in self.spec_fields()]
        if unknown:
            raise ConfigError(f"model {self.model!r} reads options {', '.join(unknown)} that "
                              f"the model section does not have (it has "
                              f"{', '.join(self.spec_fields())})")
        return {k: getattr(self, k) for k in conv.options}

    def validate(self):
        conv = MODELS.get(self.model)
        one_of(self, "amp", AMP_MODES)
        positive_int(self, "hidden")
        positive_int(self, "heads")
        conv.check_options(self.hidden, **self.conv_options())
        if self.lr is not None and not (is_number(self.lr) and math.isfinite(self.lr)
                                        and self.lr > 0):
            raise ConfigError(f"lr must be a positive finite number, got {self.lr!r}")
        if not (is_number(self.dropout) and 0.0 <= self.dropout < 1.0):
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if not (is_number(self.weight_decay) and math.isfinite(self.weight_decay)
                and self.weight_decay >= 0):
            raise ConfigError(f"weight-decay must be a finite number >= 0, "
                              f"got {self.weight_decay!r}")
        return self


def model_class_spec(cls: type) -> str:
    """``module.path:ClassName`` of a model class (``ModelConfig(model=cls)``): the spec that
    imports it again (:mod:`twopgraph.models.imported`); a class defined inside a function
    has none (one-line :class:`ConfigError`)."""
    if "<locals>" in cls.__qualname__:
        raise ConfigError(f"model class {cls.__qualname__} is defined inside a function: define "
                          f"it at the top level of a module, so that predict and --resume can "
                          f"import it again")
    return f"{cls.__module__}:{cls.__qualname__}"


@dataclass
class RunConfig(Section):
    """A run: epochs, seed, device, output folder (resume, overwrite), model selection and
    metric, exact evaluation, prefetch, threads, progress bars."""

    epochs: int | None = option(None, "training epochs", show_default=auto_shown("epochs"))
    seed: int = seed_option()
    device: str = option("auto", "cpu | cuda | cuda:N | auto (= cuda if available)")
    out: str = option("runs/train", "output folder: metrics.json, checkpoint.pt, epochs.csv "
                      "(the per-epoch records of metrics.json, one CSV row per epoch); one run "
                      "at a time (a second run into a folder in use is refused)")
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
    patience: int | None = option(None, "stop after N evaluated epochs in a row without a "
                                  "better validation score (early stopping; recorded in "
                                  "metrics.json as early_stop; never stops a run without any "
                                  "validation score); 0 = off", metavar="N",
                                  show_default=auto_shown("patience"))
    eval_batch_edges: int = option(4_000_000, "edges per chunk of layer-wise inference")
    eval_scope: str = option("auto", "which vertices exact evaluation computes: all (every "
                             "layer for all N vertices) | scored (the validation and test "
                             "vertices and their L-hop in-neighbourhood only: tables sized by "
                             "it, not by N; the same scores) | auto (scored where its "
                             "estimated work, rows + edges over the layers, is at most half "
                             "of all's)", choices=EVAL_SCOPES)
    prefetch: int = option(2, "batches prepared ahead (sampled, gathered) in a background "
                           "thread; 0 = none")
    threads: int = threads_option()
    progress: bool = option(True, "no progress bars", flag="--no-progress")
    tensorboard: str | None = option(None, "also log each epoch to TensorBoard event files in "
                                     "DIR: loss, accuracy (train; val/test when evaluated), "
                                     "epoch time, sampled vertices, cache hit rate (needs the "
                                     "tensorboard package: pip install tensorboard)",
                                     metavar="DIR")
    profile: str | None = option(None, "write a torch.profiler trace (Chrome trace JSON, "
                                 "DIR/trace-epoch<E>.json) of a few steps of the first epoch "
                                 "trained: 2 warm-up steps skipped, 5 recorded; CPU activity, "
                                 "plus CUDA kernels and copies on a GPU", metavar="DIR")

    def validate(self):
        if self.epochs is not None:  # None: by graph size (TrainConfig.resolved)
            positive_int(self, "epochs")
        seed_ok(self.seed)
        resolve_device(self.device)
        for name in ("eval_every", "prefetch", "threads"):
            int_at_least(self, name, 0)
        if self.patience is not None:  # None: by graph size (TrainConfig.resolved)
            int_at_least(self, "patience", 0)
        positive_int(self, "eval_batch_edges")
        one_of(self, "eval_scope", EVAL_SCOPES)
        one_of(self, "select", SELECT_MODES)
        one_of(self, "metric", METRICS)
        for name in ("resume", "overwrite"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.tensorboard is not None:
            if not isinstance(self.tensorboard, str) or not self.tensorboard.strip():
                raise ConfigError("--tensorboard must name a folder")
            tensorboard_ok()
        if self.profile is not None:
            if not isinstance(self.profile, str) or not self.profile.strip():
                raise ConfigError("--profile must name a folder")
            not_dangling(Path(self.profile), "--profile")
        if not isinstance(self.out, str) or not self.out.strip():
            raise ConfigError("--out must name a folder")
        out = Path(self.out)
        not_dangling(out)
        for parent in (out, *out.parents):
            if parent.exists():
                if not parent.is_dir():
                    raise ConfigError(f"--out {self.out}: {parent} exists and is not a folder")
                break
        return self


#: Largest ``--max-restarts`` accepted (each restart repeats the job's start-up).
MAX_RESTARTS = 100


@dataclass
class DistConfig(Section):
    """Partitioned data-parallel training: the partition folder, processes to start, the
    collective timeout (seconds), restarts of a failed job (torchrun's elastic restarts)."""

    partitions: str | None = option(None, "train data-parallel on the parts of DIR (written by "
                                    "`twopgraph partition`; one process per part; --dataset is "
                                    "taken from DIR); run under torchrun or give --nproc",
                                    metavar="DIR")
    nproc: int | None = option(None, "with --partitions: start torchrun with this many "
                               "processes on this machine (= the number of parts)")
    dist_timeout: float = option(600.0, "seconds a rank waits for the others in a collective "
                                 "before it stops with an error")
    max_restarts: int = option(0, "with --nproc: restart every rank up to N times when one "
                               "fails (torchrun --max-restarts); a restarted job resumes from "
                               "the last checkpoint in --out (from the start when there is none "
                               "yet) and ends as an uninterrupted run; 0 = a failure ends the "
                               "run. Under torchrun of your own, give torchrun --max-restarts",
                               metavar="N")

    def validate(self):
        if self.nproc is not None:
            positive_int(self, "nproc")
            if self.partitions is None:
                raise ConfigError("--nproc needs --partitions DIR (see `twopgraph partition`)")
        int_at_least(self, "max_restarts", 0)
        if self.max_restarts > MAX_RESTARTS:
            raise ConfigError(f"max-restarts must be at most {MAX_RESTARTS}, got "
                              f"{self.max_restarts}")
        if self.max_restarts and self.partitions is None:
            raise ConfigError("--max-restarts needs --partitions DIR and --nproc (restarts are "
                              "those of torchrun's ranks)")
        if not (is_number(self.dist_timeout) and math.isfinite(self.dist_timeout)
                and 0 < self.dist_timeout <= 7 * 24 * 3600):
            raise ConfigError(f"dist-timeout must be a positive number of seconds (at most a "
                              f"week), got {self.dist_timeout!r}")
        return self


#: Sampling flags that only ``train`` reads: the bench verbs leave them out (their ``EXCLUDE``).
TRAIN_ONLY_SAMPLING = ("sampler_device", "sampler_memory_share")
