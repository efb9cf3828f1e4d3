"""The public interface of ``twopgraph.config``: flags generated from a section's fields,
``TrainConfig`` parsed, validated, flattened and rebuilt, the size-based defaults resolved,
and the package importable without torch or numba (``--help`` stays fast)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass

import pytest

import twopgraph.config as pkg
from twopgraph.config import (
    SIZE_DEFAULTS,
    Section,
    TrainConfig,
    add_section_arguments,
    csv_list,
    describe_defaults,
    option,
    resolve_device,
    size_profile,
)
from twopgraph.errors import ConfigError


@dataclass
class Depth(Section):
    level: int = option(3, "how deep to go", result=True)
    fast: bool = option(False, "go fast")


def test_every_public_name_imports():
    for n in pkg.__all__:
        getattr(pkg, n)


def test_flags_from_fields():
    p = argparse.ArgumentParser()
    add_section_arguments(p, Depth)
    assert vars(p.parse_args(["--level", "5", "--fast"])) == {"level": 5, "fast": True}
    assert vars(p.parse_args([])) == {"level": 3, "fast": False}
    assert "how deep to go" in p.format_help()


def test_train_config_parsed_validated_and_resolved():
    p = argparse.ArgumentParser()
    TrainConfig.add_arguments(p)
    ns = p.parse_args(["--dataset", "cora", "--fanouts", "5,4", "--epochs", "3",
                       "--cache-policy", "layer", "--lr", "0.1"])
    cfg = TrainConfig.from_args(ns).validate()
    assert (cfg.data.dataset, cfg.sampling.fanouts, cfg.run.epochs) == ("cora", [5, 4], 3)
    assert cfg.cache.cache_policy == "layer" and cfg.model.lr == 0.1
    assert TrainConfig.from_dict(cfg.flat()) == cfg and cfg.result_params()["lr"] == 0.1
    unset, rec = TrainConfig.of(epochs=2).validate().resolved(1_000)
    assert size_profile(1_000) == "small" and unset.model.lr == SIZE_DEFAULTS["small"]["lr"]
    small = SIZE_DEFAULTS["small"]
    assert rec["chosen"] == {"fanouts": small["fanouts"], "lr": small["lr"],
                             "patience": small["patience"]}
    assert rec["explicit"] == {"epochs": 2}
    assert f"--fanouts {','.join(map(str, small['fanouts']))}" in describe_defaults(rec)
    for bad, flag in [({"epochs": 0}, "epochs"), ({"fanouts": "0"}, "fanouts"),
                      ({"cache_policy": "lru"}, "lru"), ({"nope": 1}, "nope")]:
        with pytest.raises(ConfigError, match=flag):
            TrainConfig.of(**bad).validate()
    assert csv_list("a, b", "x") == ["a", "b"] and str(resolve_device("cpu")) == "cpu"
    with pytest.raises(ConfigError):
        resolve_device("tpu")


def test_importing_the_package_loads_neither_torch_nor_numba():
    code = ("import sys, twopgraph.config; "
            "print(sorted(m for m in ('torch', 'numba') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
