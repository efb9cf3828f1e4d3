""":class:`TrainConfig`: every option of ``twopgraph train``, one of each section, and the
checks of the options that depend on each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from twopgraph.config.base import Config
from twopgraph.config.checks import resolve_device
from twopgraph.config.sections import (
    CacheConfig,
    DataConfig,
    DistConfig,
    ModelConfig,
    RunConfig,
    SamplingConfig,
)
from twopgraph.errors import ConfigError

if TYPE_CHECKING:
    from typing import Self


@dataclass
class TrainConfig(Config):
    """Every option of ``twopgraph train``."""

    data: DataConfig = field(default_factory=DataConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    run: RunConfig = field(default_factory=RunConfig)
    dist: DistConfig = field(default_factory=DistConfig)

    def validate(self) -> Self:
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
