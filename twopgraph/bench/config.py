"""The configs of the ``twopgraph bench`` verbs: :class:`BenchSamplerConfig` (``bench
sampler``: sampling-only epochs) and :class:`BenchCacheConfig` (``bench cache``: cache policies
x schedules x budgets against the offline optimum), built from the shared sections of
:mod:`twopgraph.config` and an options section of their own. Importing it imports neither
torch nor numba (the CLI builds its parsers from it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from twopgraph.config import (
    TRAIN_ONLY_SAMPLING,
    Config,
    DataConfig,
    SamplingConfig,
    Section,
    csv_list,
    option,
    resolve_device,
)
from twopgraph.config.checks import int_at_least, not_dangling, one_of, positive_int, seed_ok
from twopgraph.config.options import feat_dtype_option, seed_option, threads_option
from twopgraph.core.names import FEAT_DTYPE_NAMES
from twopgraph.core.protocols import CACHE_POLICIES, SCHEDULERS
from twopgraph.errors import ConfigError

if TYPE_CHECKING:
    from typing import Self


@dataclass
class SamplerBenchOptions(Section):
    """``bench sampler``'s own flags: timed and warm-up epochs, seed, threads, output."""

    epochs: int = option(3, "timed epochs; the median is reported")
    warmup: int = option(1, "untimed epochs first (JIT compilation, caches)")
    seed: int = seed_option()
    threads: int = threads_option()
    json: bool = option(False, "print one JSON line")

    def validate(self) -> Self:
        if self.epochs is not None:  # None: by graph size (TrainConfig.resolved)
            positive_int(self, "epochs")
        int_at_least(self, "warmup", 0)
        seed_ok(self.seed)
        int_at_least(self, "threads", 0)
        return self


@dataclass
class BenchSamplerConfig(Config):
    """``twopgraph bench sampler``: sampling-only epochs."""

    data: DataConfig = field(default_factory=DataConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    bench: SamplerBenchOptions = field(default_factory=SamplerBenchOptions)

    EXCLUDE = TRAIN_ONLY_SAMPLING


@dataclass
class CacheBenchOptions(Section):
    """``bench cache``'s own flags: the policies, budgets (fractions of the feature rows) and
    schedulers compared, the measured epoch, the output folder, the optional real copy."""

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
    feat_dtype: str = feat_dtype_option()
    seed: int = seed_option()
    threads: int = threads_option()
    json: bool = option(False, "print the rows as JSON lines")

    def validate(self) -> Self:
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
        int_at_least(self, "epoch", 0)
        positive_int(self, "presample_epochs")
        if self.lookahead is not None:
            int_at_least(self, "lookahead", 0)
        resolve_device(self.device)
        one_of(self, "feat_dtype", FEAT_DTYPE_NAMES)
        seed_ok(self.seed)
        int_at_least(self, "threads", 0)
        out = Path(self.out)
        not_dangling(out)
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--out {self.out} exists and is not a folder")
        return self


@dataclass
class BenchCacheConfig(Config):
    """``twopgraph bench cache``: policies x schedules x budgets against the optimum
    (``--schedules`` replaces ``--schedule``)."""

    data: DataConfig = field(default_factory=DataConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    bench: CacheBenchOptions = field(default_factory=CacheBenchOptions)

    EXCLUDE = ("schedule",) + TRAIN_ONLY_SAMPLING
