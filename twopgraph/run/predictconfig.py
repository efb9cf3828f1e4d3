"""The config of ``twopgraph predict`` (:class:`PredictConfig`: the dataset, by default the
checkpoint's, and :class:`PredictOptions`), beside the verb (:mod:`twopgraph.run.predict`).
Importing it imports neither torch nor numba (the CLI builds its parser from it)."""

from __future__ import annotations

import argparse
from collections.abc import Container, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twopgraph.config import Config, DataConfig, Section, option, resolve_device
from twopgraph.errors import ConfigError

if TYPE_CHECKING:
    from typing import Self


@dataclass
class PredictOptions(Section):
    """``predict``'s own flags: the checkpoint, the output file, logits or class ids, the
    device."""

    checkpoint: str | None = option(None, "checkpoint.pt of a `twopgraph train` run (single "
                                    "process or --partitions)", required=True, metavar="FILE")
    out: str | None = option(None, "the .npy file to write (atomically): one row per vertex "
                             "in the dataset's original order", metavar="FILE",
                             show_default="predictions.npy (logits.npy with --logits) in the "
                                          "checkpoint's run folder")
    logits: bool = option(False, "write the N x C float32 logits instead of the class ids "
                          "(int64, N)")
    device: str = option("cpu", "where inference runs: cpu | cuda | cuda:N | auto")

    def validate(self) -> Self:
        for name in ("checkpoint", "out"):
            v = getattr(self, name)
            if (v is not None or name == "checkpoint") and (not isinstance(v, str)
                                                              or not v.strip()):
                raise ConfigError(f"--{name} must name a file")
        if Path(self.output()).is_dir():
            raise ConfigError(f"--out {self.out} is a folder; give the .npy file to write")
        if not isinstance(self.logits, bool):
            raise ConfigError(f"logits must be true or false, got {self.logits!r}")
        resolve_device(self.device)
        return self

    def output(self) -> Path:
        """The file to write: ``--out``, else ``predictions.npy`` (``logits.npy`` with
        ``--logits``) in the checkpoint's folder (the run's ``--out``)."""
        if self.out is not None:
            return Path(self.out)
        return Path(self.checkpoint).parent / ("logits.npy" if self.logits else
                                               "predictions.npy")


@dataclass
class PredictConfig(Config):
    """``twopgraph predict``: predictions of a trained model. ``--dataset`` defaults to
    None: the checkpoint's own dataset; ``--data-root`` to the checkpoint's data root."""

    data: DataConfig = field(default_factory=lambda: DataConfig(dataset=None))
    predict: PredictOptions = field(default_factory=PredictOptions)

    @classmethod
    def of(cls, **flat: Any) -> Self:
        flat.setdefault("dataset", None)
        return super().of(**flat)

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser, exclude: Iterable[str] = (),
                      required: Container[str] = ()) -> None:
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

    def validate(self) -> Self:
        if self.data.dataset is not None:
            self.data.validate()
        elif not isinstance(self.data.symmetrize, bool):
            raise ConfigError(f"symmetrize must be true or false, got {self.data.symmetrize!r}")
        self.predict.validate()
        return self
