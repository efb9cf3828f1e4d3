"""How twopgraph's public names are imported: lazily from its packages, and from the module
paths of earlier releases.

- :func:`lazy_exports`: a package's ``__init__`` names its public names and the module of each;
  a name is imported on first use, so ``import twopgraph`` (and the command line) stays light
  while ``from twopgraph.run import train`` works as users expect.
- :data:`MOVED`: every module that moved when the flat modules became layer packages, old path
  -> new path. :func:`install_moved_modules` lets ``import twopgraph.protocols`` (and any other
  old path) keep working: the old name is the new module itself, not a copy.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any, Callable

#: Old module path -> new module path (the layout of docs/architecture.md).
MOVED: dict[str, str] = {f"twopgraph.{old}": f"twopgraph.{new}" for old, new in {
    "jit": "runtime.jit", "heap": "runtime.heap", "memhint": "runtime.prefetch",
    "metrics": "runtime.memory",
    "registry": "core.registry", "protocols": "core.protocols", "rng": "core.rng",
    "minibatch": "core.minibatch", "fanouts": "core.fanouts", "choices": "core.names",
    "fingerprint": "core.fingerprint", "files": "core.files",
    "graphio": "graph.io", "graphkernels": "graph.kernels", "csrbuild": "graph.csrbuild",
    "spmm": "graph.spmm",
    "storewriter": "store.writer", "npzstore": "store.npz", "livemap": "store.mapped",
    "synthetic": "datasets.synthetic", "papers": "datasets.papers",
    "dropout": "models.dropout",
    "partition": "locality",
    "partition.cluster": "locality.cluster", "partition.coarsen": "locality.coarsen",
    "partition.labelprop": "locality.labelprop", "partition.contract": "locality.contract",
    "partition.renumber": "locality.renumber", "partition.kernels": "locality.kernels",
    "sampler.schedule": "locality.schedule", "sampler.autoschedule": "locality.auto",
    "partition.selfdep": "distributed.partition.selfdep",
    "partition.partload": "distributed.partition.load",
    "partition.partsplit": "distributed.partition.split",
    "partition.partcheck": "distributed.partition.check",
    "partition.partformat": "distributed.partition.format",
    "partition.orphans": "distributed.partition.orphans",
    "distributed.partitionconfig": "distributed.partition.config",
    "loader": "pipeline.loader", "epoch": "pipeline.epoch", "nodeloader": "pipeline.nodeloader",
    "train": "run.train", "predict": "run.predict", "predictconfig": "run.predictconfig",
    "checkpoint": "run.checkpoint", "rundir": "run.outdir", "runrecord": "run.records",
    "selection": "run.selection",
}.items()}


def lazy_exports(package: str, exports: dict[str, str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the package ``package`` whose public names are
    ``exports`` (name -> module, relative to the package, where it is defined). A name is
    imported from its module on first use and then cached in the package."""
    pkg = sys.modules[package]

    def __getattr__(name: str) -> Any:
        mod = exports.get(name)
        if mod is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{mod}"), name)
        setattr(pkg, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(pkg)) | set(exports))

    return __getattr__, __dir__


class _Alias(importlib.abc.Loader):
    """Loads an old module path as the module now at ``target``."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        pass


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(new))


def install_moved_modules() -> None:
    """Make every path of :data:`MOVED` importable (once per interpreter)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())  # before the path finder: an old package
        # path (twopgraph.partition) would else load its new folder's modules a second time
