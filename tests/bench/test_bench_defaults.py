"""``twopgraph bench defaults``: the leave-one-out on made-up records -- a held-out dataset's
recipe is chosen on the other datasets' validation scores only, by mean regret, ties to the
earlier recipe, seeds averaged, incomplete datasets left out; the benchmarks page shows the
table; one tiny end-to-end run writes one record per dataset x recipe x seed."""

from __future__ import annotations

import json

import pytest
from test_harness import run_main

from twopgraph.bench import defaults as bd
from twopgraph.bench.report import render_page


def rec(dataset: str, recipe: str, val: float, test: float, seed: int = 0,
        metric: str = "acc") -> dict:
    """A ``bench defaults`` record as the harness writes it (the fields the LOO reads)."""
    return {"benchmark": "defaults", "params": {"dataset": dataset, "recipe": recipe,
                                                "seed": seed, "seeds": "0"},
            "figures": {"val_score": val, "test_score": test, "metric": metric,
                        "selected_epoch": 3, "wall_s": 1.0},
            "spread": {}, "repeat": 1, "time": "2031-02-03T04:05:06Z", "machine": {},
            "versions": {}, "commit": None, "dirty": False}


#: (dataset, small val, small test, standard val, standard test). On d1 small wins by far
#: (regret of standard 0.10); on the three others standard wins a little (small's regret
#: 0.02). Without d1 the mean regret picks standard; with d1 it would pick small.
TABLE = [("d1", 0.90, 0.90, 0.80, 0.80),
         ("d2", 0.70, 0.70, 0.72, 0.72),
         ("d3", 0.60, 0.60, 0.62, 0.62),
         ("d4", 0.50, 0.55, 0.52, 0.52)]  # d4: test disagrees with val


def records() -> list[dict]:
    out = []
    for d, sv, st, tv, tt in TABLE:
        out += [rec(d, "small", sv, st), rec(d, "standard", tv, tt)]
    return out


def test_the_held_out_dataset_is_not_seen_by_its_choice():
    rows = {r["dataset"]: r for r in bd.leave_one_out(bd.mean_scores(records()))}
    assert list(rows) == ["d1", "d2", "d3", "d4"]
    # d1 held out: d2..d4 favour standard (mean regret 0 vs 0.02) -- d1's own scores, which
    # favour small, must not count
    assert rows["d1"]["chosen"] == "standard" and rows["d1"]["best"] == "small"
    assert rows["d1"]["test"] == pytest.approx(0.80) and rows["d1"]["best_test"] == 0.90
    assert rows["d1"]["gap_pt"] == pytest.approx(10.0)
    # d2 held out: d1's 0.10 regret of standard outweighs d3, d4 (mean 0.033 vs 0.013)
    assert rows["d2"]["chosen"] == "small" and rows["d2"]["gap_pt"] == pytest.approx(2.0)
    # d4: chosen on val elsewhere (small), scored by test here, where small is best
    assert rows["d4"]["chosen"] == "small" and rows["d4"]["gap_pt"] == pytest.approx(0.0)
    # over every dataset small's mean regret is 0.015, standard's 0.025
    assert bd.choose(bd.mean_scores(records()), ["d1", "d2", "d3", "d4"]) == "small"


def test_choice_reads_validation_scores_only():
    recs = records()
    for r in recs:  # test scores that would pick the other recipe everywhere
        r["figures"]["test_score"] = 1.0 if r["params"]["recipe"] == "small" else 0.0
    rows = {r["dataset"]: r for r in bd.leave_one_out(bd.mean_scores(recs))}
    assert rows["d1"]["chosen"] == "standard" and rows["d1"]["gap_pt"] == pytest.approx(100)


def test_regret_weighs_score_scales_alike():
    # a dataset whose scores are all high (ROC-AUC near 1) counts by its differences only
    scores = bd.mean_scores([rec("a", "small", 0.99, 0.99, metric="rocauc"),
                             rec("a", "standard", 0.98, 0.98, metric="rocauc"),
                             rec("b", "small", 0.30, 0.30), rec("b", "standard", 0.33, 0.33)])
    assert bd.regrets(scores, "a") == pytest.approx({"small": 0.0, "standard": 0.01})
    assert bd.choose(scores, ["a", "b"]) == "standard"  # mean regret 0.005 < 0.015


def test_seeds_are_averaged_reruns_replace_and_ties_go_to_the_earlier_recipe():
    # scores exact in binary, so that the tie is exact
    recs = [rec("a", "standard", 0.5, 0.5, seed=0), rec("a", "standard", 0.75, 0.75, seed=1),
            rec("a", "small", 0.625, 0.625, seed=0), rec("a", "small", 0.125, 0.125, seed=1),
            rec("a", "small", 0.625, 0.625, seed=1),  # seed 1 measured again: the later counts
            rec("b", "small", 0.5, 0.5), rec("b", "standard", 0.5, 0.5)]
    s = bd.mean_scores(recs)
    assert s["a"]["standard"] == {"val": 0.625, "test": 0.625, "metric": "acc", "seeds": 2}
    assert s["a"]["small"]["val"] == 0.625 and s["a"]["small"]["seeds"] == 2
    assert bd.choose(s, ["a", "b"]) == "small"  # every regret 0: RECIPES order


def test_a_recipe_not_measured_everywhere_drops_out_not_a_dataset():
    recs = records() + [rec(d, "two-layer", 0.99, 0.99) for d in ("d1", "d2")]
    recipes, partial = bd.common(bd.mean_scores(recs))
    assert recipes == ["small", "standard"] and partial == ["two-layer"]
    rows = bd.leave_one_out(bd.mean_scores(recs))
    assert [r["dataset"] for r in rows] == ["d1", "d2", "d3", "d4"]
    assert rows == bd.leave_one_out(bd.mean_scores(records()))  # two-layer unseen
    text = "\n".join(bd.loo_lines(recs))
    assert "Left out above: two-layer on 2 of the 4 datasets." in text
    # and a second table over the two datasets that have it: it wins on both
    assert "Leave-one-out (the datasets with two-layer too) over 2 datasets" in text
    assert "| d1 | acc | two-layer | 0.9900 | two-layer | 0.9900 | 0.00 |" in text
    # one recipe measured on every dataset, or one dataset: no table
    assert bd.leave_one_out(bd.mean_scores(records() + [rec("d5", "small", 0.4, 0.4)])) == []
    assert bd.leave_one_out(bd.mean_scores(records()[:2])) == []
    assert "needs two datasets" in bd.loo_lines(records()[:2])[0]


def test_lines_say_whether_every_gap_is_within_half_a_point():
    text = "\n".join(bd.loo_lines(records()))
    assert "| d1 | acc | standard | 0.8000 | small | 0.9000 | 10.00 |" in text
    assert "within 0.5 point: **no** (largest 10.00 on d1)" in text
    assert "on all 4 datasets: **small**" in text
    assert "Not measured" not in text  # made-up datasets: none of the shared ones
    real = [rec("cora", "small", 0.8, 0.8), rec("cora", "standard", 0.7, 0.7),
            rec("actor", "small", 0.3, 0.3), rec("actor", "standard", 0.4, 0.4)]
    assert ("Not measured: citeseer, amazon_photo, coauthor_cs, coauthor_physics, "
            "facebook_pagepage, squirrel_filtered, tolokers, twitch_de (of the 10 shared "
            "datasets)."
            in bd.loo_lines(real))
    close = [rec("x", "small", 0.8, 0.800), rec("x", "standard", 0.7, 0.797),
             rec("y", "small", 0.6, 0.600), rec("y", "standard", 0.5, 0.599)]
    assert "within 0.5 point: **yes**" in "\n".join(bd.loo_lines(close))


def test_the_benchmarks_page_shows_the_leave_one_out():
    page = render_page({"defaults.jsonl": records()})
    assert "## defaults" in page
    assert "| dataset | metric | chosen without it |" in page
    assert "| d1 | acc | standard | 0.8000 | small | 0.9000 | 10.00 |" in page


def test_bad_recipe_is_one_line(tmp_path, capsys):
    rc, _ = run_main(["bench", "defaults", "--recipes", "small,nope"])
    assert rc == 2
    assert "--recipes: unknown nope" in capsys.readouterr().err


def test_one_record_per_dataset_recipe_and_seed(tmp_path, monkeypatch):
    for name in ("small", "standard"):  # tiny recipes, same shape as the real ones
        monkeypatch.setitem(bd.RECIPES, name, {"fanouts": [3, 3], "lr": 0.02, "epochs": 2})
    out = tmp_path / "d.jsonl"
    rc, text = run_main(["bench", "defaults", "--datasets", "synthetic-tiny", "--recipes",
                         "small,standard", "--seeds", "0,1", "--threads", "1", "--data-root",
                         tmp_path / "data", "--json", out])
    assert rc == 0
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["params"]["dataset"], r["params"]["recipe"], r["params"]["seed"])
            for r in recs] == [("synthetic-tiny", "small", 0), ("synthetic-tiny", "small", 1),
                               ("synthetic-tiny", "standard", 0),
                               ("synthetic-tiny", "standard", 1)]
    for r in recs:
        f = r["figures"]
        assert f["metric"] in ("acc", "rocauc") and 0 <= f["test_score"] <= 1
        assert 0 <= f["val_score"] <= 1 and f["wall_s"] > 0 and f["selected_epoch"] in (0, 1)
        assert "datasets" not in r["params"] and r["params"]["epochs"] == 2
    assert "needs two datasets" in text  # one dataset: no leave-one-out


def test_the_defaults_table_compares_race_with_the_best_other_candidate():
    recs = [rec("a", "standard-es", 0.8, 0.80), rec("a", "two-layer", 0.7, 0.79),
            rec("a", "race", 0.8, 0.80), rec("b", "standard-es", 0.6, 0.60),
            rec("b", "two-layer", 0.7, 0.70), rec("b", "race", 0.6, 0.60)]
    text = "\n".join(bd.loo_lines(recs))
    assert "| a | acc | 0.8000 | standard-es | 0.8000 | 0.00 |" in text
    assert "| b | acc | 0.6000 | two-layer | 0.7000 | 10.00 |" in text
    assert "every dataset: **no** (largest 10.00 on b)" in text
    assert not any("defaults" in line for line in bd.loo_lines(recs[:2] + recs[3:5]))
