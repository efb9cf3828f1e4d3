"""The config of ``twopgraph partition`` (:class:`PartitionConfig`: the dataset and
:class:`PartitionOptions`), beside the verb's command (:mod:`.commands`). Importing it imports
neither torch nor numba (the CLI builds its parser from it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from twopgraph.config import Config, DataConfig, Section, option
from twopgraph.config.checks import int_at_least, one_of, positive_int, seed_ok
from twopgraph.config.options import num_clusters_option
from twopgraph.core.names import REPRESENTATIONS
from twopgraph.errors import ConfigError

if TYPE_CHECKING:
    from typing import Self


@dataclass
class PartitionOptions(Section):
    """``partition``'s own flags: parts, halo depth, output folder, clusters, seed, how a
    part holds its graph."""

    num_parts: int | None = option(None, "parts = training processes (GPUs or CPU workers)",
                                   required=True)
    hops: int = option(3, "halo depth H; H >= the model's layers (entries of --fanouts) makes "
                          "sampling in a part exact, a smaller H replicates less but truncates "
                          "sampling at part boundaries")
    out: str | None = option(None, "partition folder to write", required=True, metavar="DIR")
    num_clusters: int = num_clusters_option(" for batch size 1024, as `twopgraph train`")
    seed: int = option(0, "METIS seed")
    representation: str = option(
        "auto", "how a part holds its graph: local (its own CSR over owned + halo vertices, "
                "local ids), global (no CSR of its own: the rank samples on the dataset "
                "store's CSR, shared by every rank on the machine), auto (global when the "
                "local CSR would exceed half the store's)", choices=REPRESENTATIONS)
    force: bool = option(False, "rewrite DIR even if it already holds this partition")
    json: bool = option(False, "print meta.json as one JSON line")

    def validate(self) -> Self:
        positive_int(self, "num_parts")
        int_at_least(self, "hops", 0)
        int_at_least(self, "num_clusters", 0, "(0 = automatic)")
        seed_ok(self.seed)
        one_of(self, "representation", REPRESENTATIONS)
        return self


@dataclass
class PartitionConfig(Config):
    """``twopgraph partition``: self-dependence partitions."""

    data: DataConfig = field(default_factory=DataConfig)
    partition: PartitionOptions = field(default_factory=PartitionOptions)

    def validate(self) -> Self:
        super().validate()
        if self.data.store_dtype == "float16":
            raise ConfigError("--store-dtype float16 is not available for partitions yet")
        return self
