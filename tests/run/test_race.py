"""Issue 41 item 4: the recipe race of small graphs -- each candidate recipe trained for the
probe's epochs, the best validation score continued to its end, equal to that recipe's run
alone; recorded, resumable, and off when an option it sets is given."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from conftest import community_data

import twopgraph.run.race as race_mod
import twopgraph.run.train as train_mod
from twopgraph.config import RACE_RECIPES, TrainConfig
from twopgraph.run.race import RACE_DIR, margin, pick, race_applies, race_pending
from twopgraph.run.train import train

# two recipes whose ranking is certain: a learning rate that learns nothing, listed first
# (a race that kept the first recipe, or the worse one, fails below)
SLOW = {"fanouts": [4, 4], "lr": 1e-7, "epochs": 5, "patience": 0}
GOOD = {"fanouts": [5, 3], "lr": 0.02, "epochs": 6, "patience": 3}


@pytest.fixture
def recipes(monkeypatch):
    monkeypatch.setattr(race_mod, "RACE_PATIENCE", 2)
    saved = dict(RACE_RECIPES)  # restored in its order (the first wins ties)
    RACE_RECIPES.clear()
    RACE_RECIPES.update(slow=SLOW, good=GOOD)
    yield
    RACE_RECIPES.clear()
    RACE_RECIPES.update(saved)


def _cfg(tmp_path, name, **kw) -> TrainConfig:
    base = dict(batch_size=64, hidden=16, dropout=0.1, device="cpu", out=str(tmp_path / name),
                progress=False, threads=1, prefetch=0, schedule="random", renumber=False,
                data_root=str(tmp_path / "data"), sampler="neighbor")
    base.update(kw)
    return TrainConfig.of(**base)


def _metrics(tmp_path, name) -> dict:
    return json.loads((tmp_path / name / "metrics.json").read_text())


def _losses(res) -> list[float]:
    return [e["loss"] for e in res.epochs]


def test_the_race_continues_the_better_recipe_as_its_run_alone(tmp_path, recipes, caplog):
    data = community_data(400)
    with caplog.at_level(logging.INFO, logger="twopgraph"):
        raced = train(_cfg(tmp_path, "race"), data)
    alone = train(_cfg(tmp_path, "alone", **GOOD), data)
    slow = train(_cfg(tmp_path, "slow", **SLOW), data)

    assert _losses(raced) == _losses(alone)  # the winner's run, epoch for epoch
    assert (raced.val_score, raced.test_score, raced.selected_epoch) == \
        (alone.val_score, alone.test_score, alone.selected_epoch)
    m = _metrics(tmp_path, "race")
    d = m["defaults"]
    assert d["recipe"] == "good" and d["chosen"] == GOOD and d["explicit"] == {}
    rec = d["race"]
    assert rec["chosen"] == "good" and rec["patience"] == 2 and rec["val_vertices"] == 100
    assert rec["margin"] == margin(rec["candidates"]["slow"]["val_score"], 100)
    cands = rec["candidates"]
    assert list(cands) == ["slow", "good"]
    # each probe: its recipe's run until 2 evaluated epochs bring no better val score
    for c, run in ((cands["slow"], slow), (cands["good"], alone)):
        vals = [e["val_score"] for e in run.epochs]
        n = c["epochs_trained"]
        assert c["val_score"] == max(vals[:n])
        assert n == len(vals) or max(vals[:n - 2]) >= max(vals[n - 2:n])
    assert cands["slow"]["epochs_trained"] < SLOW["epochs"]  # stopped by the race's patience
    assert cands["good"]["val_score"] > cands["slow"]["val_score"]
    assert m["config"]["fanouts"] == GOOD["fanouts"] and m["config"]["lr"] == GOOD["lr"]
    out = tmp_path / "race"
    assert not (out / RACE_DIR).exists()
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.pt", "epochs.csv",
                                                      "metrics.json"]
    ckpt = torch.load(out / "checkpoint.pt", weights_only=False)
    assert ckpt["race"] == rec and ckpt["dataset"]["name"] == data.name
    lines = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith("recipe race")]
    assert lines[0].startswith("recipe race on a small graph: slow (4,4 / lr 1e-07 / 5 "
                               "epochs) and good (5,3 / lr 0.02 / 6 epochs, stop after 3 "
                               "without a better one), each until 2 evaluated epochs")
    assert lines[-1].startswith("recipe race -> good: validation")

    # --resume continues the recorded winner: no second race, the same run
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="twopgraph"):
        again = train(_cfg(tmp_path, "race", resume=True), data)
    assert not any(r.getMessage().startswith("recipe race") for r in caplog.records)
    assert any("recipe good of the recipe race" in r.getMessage() for r in caplog.records)
    assert _losses(again) == _losses(alone) and again.test_score == alone.test_score


def test_a_race_stopped_in_its_probes_resumes_them(tmp_path, recipes, monkeypatch):
    data = community_data(400)
    whole = train(_cfg(tmp_path, "whole"), data)
    real = train_mod._probe

    def stopping(cfg, *a, **kw):
        if cfg.run.out.endswith("good"):
            raise KeyboardInterrupt
        return real(cfg, *a, **kw)
    monkeypatch.setattr(train_mod, "_probe", stopping)
    with pytest.raises(KeyboardInterrupt):
        train(_cfg(tmp_path, "part"), data)
    part = tmp_path / "part"
    assert race_pending(part, resume=True)
    assert (part / RACE_DIR / "slow" / "checkpoint.pt").is_file()
    assert not (part / "checkpoint.pt").exists()
    monkeypatch.setattr(train_mod, "_probe", real)
    resumed = train(_cfg(tmp_path, "part", resume=True), data)
    assert _losses(resumed) == _losses(whole)
    assert _metrics(tmp_path, "part")["defaults"]["race"]["chosen"] == "good"


@pytest.mark.parametrize("given", [{"fanouts": [5, 3]}, {"epochs": 4}, {"patience": 2}])
def test_no_race_when_an_option_it_sets_is_given(tmp_path, recipes, given):
    data = community_data(400)
    cfg = _cfg(tmp_path, "run", **given, **({} if "epochs" in given else {"epochs": 2}))
    assert not race_applies(cfg, data)
    assert race_applies(_cfg(tmp_path, "x"), data)
    train(cfg, data)
    d = _metrics(tmp_path, "run")["defaults"]
    assert "recipe" not in d and "race" not in d
    assert not (tmp_path / "run" / RACE_DIR).exists()


def test_no_race_on_large_graphs_or_without_validation_vertices():
    import numpy as np
    data = community_data(400)
    cfg = TrainConfig.of()
    assert race_applies(cfg, data)
    data.val_idx = np.empty(0, dtype=np.int64)
    assert not race_applies(cfg, data)

    class Large:
        num_nodes, val_idx = 50_000, np.arange(10)
    assert not race_applies(cfg, Large())


def _c(*scores):
    return {name: {"val_score": s} for name, s in zip("abc", scores)}


def test_pick_keeps_the_default_unless_beaten_by_more_than_a_standard_error():
    assert pick(_c(0.5, 0.6)) == "b"  # no validation size given: no margin
    assert pick(_c(0.6, 0.6)) == "a" and pick(_c(0.6, 0.5)) == "a"
    assert pick(_c(None, 0.1)) == "b" and pick(_c(None, None)) == "a"
    assert pick(_c(0.5, 0.6, 0.7)) == "c" and pick(_c(0.5, 0.7, 0.7)) == "b"
    # squirrel_filtered (718 val vertices): 0.3760 vs 0.3802 is noise (SE 1.8 points)
    assert margin(0.376, 718) == pytest.approx(0.01808, abs=1e-5)
    assert pick(_c(0.3760, 0.3802), 718) == "a"
    # coauthor_cs (3,666): 0.9471 vs 0.9523 is more than its SE (0.37 points)
    assert margin(0.9471, 3666) == pytest.approx(0.00370, abs=1e-5)
    assert pick(_c(0.9471, 0.9523), 3666) == "b"
    assert margin(None, 10) == margin(0.5, 0) == 0.0


def test_the_race_recipes_are_the_defaults_and_two_layer():
    from twopgraph.config import RACE_PATIENCE, SIZE_DEFAULTS
    assert RACE_RECIPES["standard-es"] == SIZE_DEFAULTS["small"]
    assert RACE_RECIPES["two-layer"] == {"fanouts": [15, 10], "lr": 0.003, "epochs": 30,
                                         "patience": 0}
    assert list(RACE_RECIPES)[0] == "standard-es"  # ties keep the defaults
    assert RACE_PATIENCE == SIZE_DEFAULTS["small"]["patience"]  # standard-es: its whole run
