"""Defaults chosen by graph size: ``--fanouts``, ``--lr`` and ``--epochs`` left unset become
the ``small`` profile's values on graphs of fewer than 50,000 vertices, the ``large`` (the
products-scale settings) otherwise; given values win; the choice is logged, recorded in
metrics.json, and a run with them resumes."""

from __future__ import annotations

import contextlib
import json
import logging

import pytest
import torch
from conftest import community_data, run_cli

from twopgraph.bench.config import BenchSamplerConfig
from twopgraph.config import (
    RACE_RECIPES,
    SIZE_DEFAULTS,
    SMALL_GRAPH_NODES,
    TrainConfig,
    describe_defaults,
    size_profile,
)
from twopgraph.datasets.synthetic import SYNTHETIC_PRESETS
from twopgraph.errors import ConfigError
from twopgraph.run.train import train

SMALL = {"fanouts": [15, 10, 5], "lr": 0.003, "epochs": 100, "patience": 10}  # issue 41
LARGE = {"fanouts": [15, 10, 5], "lr": 0.003, "epochs": 5, "patience": 0}


# -- the rule -----------------------------------------------------------------------------------
def test_profiles_by_size():
    assert SIZE_DEFAULTS == {"small": SMALL, "large": LARGE}
    assert SMALL_GRAPH_NODES == 50_000
    assert size_profile(2_708) == size_profile(49_999) == "small"
    assert size_profile(50_000) == size_profile(2_449_029) == "large"


@pytest.mark.parametrize("preset", ["synthetic-small", "synthetic-products"])
def test_large_presets_keep_the_products_settings(preset):
    """synthetic-small (the README's default dataset) and synthetic-products train exactly
    as before the size-based defaults."""
    n = SYNTHETIC_PRESETS[preset].num_nodes
    cfg, rec = TrainConfig.of(dataset=preset).validate().resolved(n)
    assert (cfg.sampling.fanouts, cfg.model.lr, cfg.run.epochs) == ([15, 10, 5], 0.003, 5)
    assert rec == {"profile": "large", "num_nodes": n, "small_below": 50_000,
                   "chosen": LARGE, "explicit": {}}


def test_explicit_values_win_and_the_config_is_not_changed():
    given = TrainConfig.of(fanouts="4,4,4", epochs=7).validate()
    cfg, rec = given.resolved(1_000)
    assert (cfg.sampling.fanouts, cfg.model.lr, cfg.run.epochs) == ([4, 4, 4], SMALL["lr"], 7)
    assert rec["chosen"] == {"lr": SMALL["lr"], "patience": SMALL["patience"]}
    assert rec["explicit"] == {"fanouts": [4, 4, 4], "epochs": 7}
    assert cfg.run.patience == 10 and given.run.patience is None
    assert given.sampling.fanouts == [4, 4, 4] and given.model.lr is None  # a copy
    cfg.sampling.fanouts.append(1)  # the profile's lists are not shared
    assert TrainConfig.of().resolved(1_000)[0].sampling.fanouts == SMALL["fanouts"]
    # every option given: nothing chosen, nothing to log
    full, rec = TrainConfig.of(fanouts="3", lr=0.1, epochs=1,
                               patience=0).validate().resolved(10**7)
    assert rec["chosen"] == {} and describe_defaults(rec) is None
    assert (full.sampling.fanouts, full.model.lr, full.run.epochs) == ([3], 0.1, 1)


def test_validate_accepts_unset_and_still_refuses_bad_values():
    cfg = TrainConfig.of().validate()
    assert (cfg.sampling.fanouts, cfg.model.lr, cfg.run.epochs, cfg.run.patience) == \
        (None, None, None, None)
    for bad in (dict(epochs=0), dict(lr=-1.0), dict(lr=float("nan")), dict(fanouts="0"),
                dict(fanouts="a,b"), dict(patience=-1)):
        with pytest.raises(ConfigError):
            TrainConfig.of(**bad).validate()


def test_the_log_line():
    _, rec = TrainConfig.of(lr=0.02).resolved(7_650)
    assert describe_defaults(rec) == ("defaults for 7,650 vertices (small graph, < 50,000): "
                                      "--fanouts 15,10,5 --epochs 100 --patience 10")
    _, rec = TrainConfig.of().resolved(100_000)
    assert describe_defaults(rec) == ("defaults for 100,000 vertices (large graph, >= "
                                      "50,000): --fanouts 15,10,5 --lr 0.003 --epochs 5 "
                                      "--patience 0")


def test_bench_configs_resolve_their_fanouts_only():
    cfg, rec = BenchSamplerConfig.of().validate().resolved(1_000)
    assert cfg.sampling.fanouts == SMALL["fanouts"] and cfg.bench.epochs == 3  # timed epochs
    assert rec["chosen"] == {"fanouts": SMALL["fanouts"]}


# -- training -----------------------------------------------------------------------------------
def _cfg(tmp_path, name, **kw) -> TrainConfig:
    """A fast run on ``community_data(300)``: one batch per epoch, evaluated at the end only;
    fanouts, lr and epochs left to the defaults unless given."""
    base = dict(batch_size=1024, hidden=8, device="cpu", out=str(tmp_path / name),
                progress=False, threads=1, prefetch=0, eval_every=0, schedule="random",
                renumber=False, data_root=str(tmp_path / "data"))
    base.update(kw)
    return TrainConfig.of(**base)


def _metrics(tmp_path, name) -> dict:
    return json.loads((tmp_path / name / "metrics.json").read_text())


def test_small_graph_trains_with_the_small_profile_logged_and_recorded(tmp_path, caplog):
    """Every race option left to the defaults: the recipe race (twopgraph.run.race) picks one
    of RACE_RECIPES; the run is that recipe's, logged and recorded as chosen by size."""
    data = community_data(300)
    with caplog.at_level(logging.INFO, logger="twopgraph"):
        res = train(_cfg(tmp_path, "run"), data)
    m = _metrics(tmp_path, "run")
    name = m["defaults"]["recipe"]
    recipe = RACE_RECIPES[name]
    assert len(res.epochs) == recipe["epochs"]  # evaluated at the end only: no early stop
    assert {k: m["config"][k] for k in recipe} == recipe
    race = m["defaults"].pop("race")
    assert race["chosen"] == name and set(race["candidates"]) == set(RACE_RECIPES)
    assert m["defaults"] == {"profile": "small", "num_nodes": 300, "small_below": 50_000,
                             "chosen": recipe, "explicit": {}, "recipe": name}
    ckpt = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)
    assert ckpt["model_spec"]["num_layers"] == len(recipe["fanouts"])
    assert ckpt["config"]["fanouts"] == recipe["fanouts"]
    assert ckpt["config"]["lr"] == recipe["lr"]
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("defaults")]
    shown = ",".join(map(str, recipe["fanouts"]))
    assert lines == [(f"defaults for 300 vertices (small graph, < 50,000, recipe {name} of the "
                      f"recipe race): --fanouts {shown} --lr {recipe['lr']:g} --epochs "
                      f"{recipe['epochs']} --patience {recipe['patience']}")]
    # the same run resumed with the same (default) options: accepted, nothing left to train
    again = train(_cfg(tmp_path, "run", resume=True), data)
    assert [e["loss"] for e in again.epochs] == [e["loss"] for e in res.epochs]
    assert again.test_acc == res.test_acc


def test_resume_of_an_auto_defaults_run(tmp_path):
    data = community_data(300)
    train(_cfg(tmp_path, "r", epochs=2), data)
    # fanouts and lr by size both times: the fingerprint matches, the run continues
    res = train(_cfg(tmp_path, "r", epochs=4, resume=True), data)
    assert [e["epoch"] for e in res.epochs] == [0, 1, 2, 3]
    straight = train(_cfg(tmp_path, "s", epochs=4), data)
    assert [e["loss"] for e in res.epochs] == [e["loss"] for e in straight.epochs]
    m = _metrics(tmp_path, "r")
    assert m["defaults"]["chosen"] == {"fanouts": SMALL["fanouts"], "lr": SMALL["lr"],
                                       "patience": SMALL["patience"]}
    assert m["defaults"]["explicit"] == {"epochs": 4}
    # the defaults' values given explicitly are the same configuration
    train(_cfg(tmp_path, "r", epochs=5, fanouts="15,10,5", lr=0.003, resume=True), data)
    # another value is refused, naming it
    with pytest.raises(ConfigError, match=r"lr=0\.003 \(now 0\.05\)"):
        train(_cfg(tmp_path, "r", epochs=6, lr=0.05, resume=True), data)


def test_cli_logs_and_records_the_defaults(tmp_path, capsys, caplog):
    path = community_data(300).save_npz(tmp_path / "g.npz")
    out = tmp_path / "out"
    with caplog.at_level(logging.INFO, logger="twopgraph"):
        rc, _, err = run_cli(["train", "--dataset", str(path), "--data-root",
                              str(tmp_path / "d"), "--out", str(out), "--epochs", "1",
                              "--fanouts", "4", "--batch-size", "1024", "--hidden", "8",
                              "--device", "cpu", "--no-progress", "--threads", "1",
                              "--schedule", "random"], capsys)
    assert rc == 0, err
    assert ("defaults for 300 vertices (small graph, < 50,000): --lr 0.003 --patience 10"
            in caplog.messages)
    m = json.loads((out / "metrics.json").read_text())
    assert m["config"]["lr"] == SMALL["lr"] and m["config"]["fanouts"] == [4]
    assert m["config"]["patience"] == SMALL["patience"]
    assert m["defaults"]["chosen"] == {"lr": SMALL["lr"], "patience": SMALL["patience"]}
    assert m["defaults"]["explicit"] == {"fanouts": [4], "epochs": 1}


def test_distributed_defaults_use_the_whole_graph(tmp_path, monkeypatch):
    """A rank resolves the defaults from the dataset's vertex count in meta.json (the whole
    graph's, not its part's) before its run signature."""
    import twopgraph.distributed.trainer as tr
    from twopgraph.distributed import DistEnv
    from twopgraph.distributed.partition.selfdep import partition_selfdep
    data = community_data(1200, k=4)
    meta = partition_selfdep(data, 2, 2, tmp_path / "p2", num_clusters=12,
                             representation="local")
    assert all(p["num_nodes"] < 1200 for p in meta["parts"])
    seen = {}

    def fake_run(cfg, folder, meta, env, device, backend, pss, defaults=None):
        seen.update(cfg=cfg, defaults=defaults, sig=tr._signature(cfg, meta, env.world_size))
        return "ran"

    monkeypatch.setattr(tr, "_run", fake_run)
    monkeypatch.setattr(tr, "process_group", lambda *a: contextlib.nullcontext("gloo"))
    monkeypatch.setattr(tr, "_own_out", lambda *a: contextlib.nullcontext())
    cfg = TrainConfig.of(device="cpu", out=str(tmp_path / "run"), epochs=1, progress=False)
    assert tr.train_distributed(cfg, tmp_path / "p2", env=DistEnv(0, 2, 0, 2)) == "ran"
    assert seen["defaults"]["num_nodes"] == 1200
    assert seen["defaults"]["chosen"] == {"fanouts": SMALL["fanouts"], "lr": SMALL["lr"],
                                          "patience": SMALL["patience"]}
    assert seen["cfg"].run.patience == SMALL["patience"]
    assert seen["sig"]["params"]["fanouts"] == SMALL["fanouts"]
    assert seen["sig"]["params"]["lr"] == SMALL["lr"]
    assert cfg.sampling.fanouts is None  # the caller's config stays as given
