"""``twopgraph bench tta`` (issue 41 item 5): the time to a shared validation target on made-up
curves -- reached at a later epoch, at the first, never, on a float32 tie; the target from the
best run of the seed, the peer's included; the ratios against DGL only where both reached it;
the report's table, first on the page, with its spread over seeds and "not reached"; one tiny
end-to-end run on synthetic-tiny writing a record per variant."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_harness import run_main

from twopgraph.bench import tta
from twopgraph.bench.report import render_page


def curve(vals, epoch_s=1.0, eval_s=0.5):
    """A run's curve: one epoch per validation accuracy, each ``epoch_s`` (a number or a list)
    long; test accuracy = validation accuracy - 0.01."""
    times = epoch_s if isinstance(epoch_s, list) else [epoch_s] * len(vals)
    return [{"epoch_s": t, "eval_s": eval_s, "val_acc": v,
             "test_acc": None if v is None else v - 0.01} for t, v in zip(times, vals)]


# -- the computation -------------------------------------------------------------------------------
def test_time_and_epochs_up_to_and_including_the_first_epoch_at_the_target():
    c = curve([0.5, 0.7, 0.8, 0.6, 0.9], epoch_s=[4.0, 2.0, 1.0, 8.0, 16.0], eval_s=0.25)
    r = tta.time_to_target(c, 0.75)
    assert r["reached"] is True and r["reached_epoch"] == 2 and r["tta_epochs"] == 3
    assert r["tta_s"] == 7.0  # 4 + 2 + 1: later epochs (8, 16) do not count
    assert r["tta_with_eval_s"] == 7.75  # + 3 evaluations of 0.25
    assert r["test_acc_at_target"] == pytest.approx(0.79)
    # the first epoch that reaches it, not the best one
    assert tta.time_to_target(c, 0.6)["tta_epochs"] == 2


def test_reached_at_the_first_epoch():
    r = tta.time_to_target(curve([0.9, 0.95], epoch_s=[3.0, 1.0]), 0.85)
    assert (r["reached"], r["reached_epoch"], r["tta_epochs"], r["tta_s"]) == (True, 0, 1, 3.0)
    assert r["tta_with_eval_s"] == 3.5


def test_never_reached_is_none_not_the_whole_run():
    r = tta.time_to_target(curve([0.5, 0.6, 0.7]), 0.71)
    assert r["reached"] is False
    assert all(r[k] is None for k in ("tta_s", "tta_epochs", "tta_with_eval_s",
                                      "reached_epoch", "test_acc_at_target"))
    # an epoch without a validation accuracy never reaches it; no target: nothing does
    assert tta.time_to_target(curve([None, 0.8]), 0.7)["tta_epochs"] == 2
    assert tta.time_to_target(curve([0.8]), None)["reached"] is False


def test_a_float32_tie_with_the_target_reaches_it():
    # validation split of 500: best 400/500, target 0.98 x that = 392/500; both float32
    best, tie = float(np.float32(400 / 500)), float(np.float32(392 / 500))
    target = 0.98 * best
    assert tie < target  # float32 rounding puts the tie just below the exact product
    assert tta.time_to_target(curve([0.5, tie]), target)["tta_epochs"] == 2
    below = float(np.float32(391 / 500))  # one vertex fewer: not reached
    assert tta.time_to_target(curve([0.5, below]), target)["reached"] is False


def test_the_target_is_the_best_of_every_run_the_peer_included():
    curves = {"a": curve([0.5, 0.7]), "b": curve([0.6, 0.65]), "dgl": curve([0.4, 0.8])}
    target, converged, by = tta.targets(curves, 0.9)
    assert (converged, by) == (0.8, "dgl") and target == pytest.approx(0.72)
    figs = tta.tta_rows(curves, 0.9)
    # the same target for every run; a has 0.7 < 0.72, b 0.65: neither reaches DGL's level
    assert [f["target_val_acc"] for f in figs.values()] == [target] * 3
    assert [figs[n]["reached"] for n in ("a", "b", "dgl")] == [False, False, True]
    assert figs["a"]["best_val_acc"] == 0.7 and figs["a"]["converged_val_acc"] == 0.8
    assert figs["dgl"]["val_acc_all"] == [0.4, 0.8] and figs["a"]["epochs_run"] == 2
    # without the peer the target falls to 0.9 x 0.7 = 0.63 and both variants reach it
    figs = tta.tta_rows({"a": curves["a"], "b": curves["b"]}, 0.9)
    assert [figs[n]["tta_epochs"] for n in ("a", "b")] == [2, 2]


def test_tied_best_runs_both_reach_a_full_target_and_the_first_sets_it():
    curves = {"a": curve([0.5, 0.75]), "b": curve([0.75, 0.6]), "c": curve([0.7, 0.74])}
    target, converged, by = tta.targets(curves, 1.0)
    assert (target, converged, by) == (0.75, 0.75, "a")
    figs = tta.tta_rows(curves, 1.0)
    assert [figs[n]["tta_epochs"] for n in "abc"] == [2, 1, None]
    assert tta.targets({"a": curve([None])}, 0.98) == (None, None, None)


def test_ratios_against_dgl_only_where_both_reached():
    curves = {"fast": curve([0.5, 0.8], epoch_s=1.0), "slow": curve([0.8, 0.8], epoch_s=6.0),
              "never": curve([0.5, 0.5]), "dgl": curve([0.6, 0.8], epoch_s=4.0)}
    figs = tta.tta_rows(curves, 1.0)
    tta.add_tta_ratios(figs)
    assert figs["fast"]["tta_vs_dgl"] == pytest.approx(2.0 / 8.0)
    assert figs["fast"]["tta_epochs_vs_dgl"] == 1.0
    assert figs["fast"]["tta_with_eval_vs_dgl"] == pytest.approx(3.0 / 9.0)
    assert figs["slow"]["tta_vs_dgl"] == pytest.approx(6.0 / 8.0)
    assert figs["slow"]["tta_epochs_vs_dgl"] == 0.5
    assert figs["never"]["tta_vs_dgl"] is None and "tta_vs_dgl" not in figs["dgl"]
    figs = tta.tta_rows({"a": curve([0.8]), "dgl": curve([0.5])}, 1.0)
    tta.add_tta_ratios(figs)
    assert figs["a"]["reached"] and figs["a"]["tta_vs_dgl"] is None  # DGL never got there


def test_curves_of_both_systems():
    m = {"epochs": [{"epoch": 0, "epoch_s": 2.0, "eval_s": 0.5, "val_acc": 0.4,
                     "test_acc": 0.3, "loss": 1.0},
                    {"epoch": 1, "epoch_s": 1.0, "eval_s": 0.5, "val_acc": 0.6,
                     "test_acc": 0.5}]}
    assert tta.curve_of_metrics(m)[1] == {"epoch_s": 1.0, "eval_s": 0.5, "val_acc": 0.6,
                                          "test_acc": 0.5}
    d = {"train_epoch_s_all": [3.0, 2.0],
         "epoch_scores": [{"epoch": 1, "val_acc": 0.7, "test_acc": 0.6, "eval_s": 0.25},
                          {"epoch": 0, "val_acc": 0.5, "test_acc": 0.4, "eval_s": 0.5}]}
    assert tta.curve_of_dgl(d) == [
        {"epoch_s": 3.0, "eval_s": 0.5, "val_acc": 0.5, "test_acc": 0.4},
        {"epoch_s": 2.0, "eval_s": 0.25, "val_acc": 0.7, "test_acc": 0.6}]


# -- the report ------------------------------------------------------------------------------------
def rec(graph, variant, seed, figures, system="twopgraph"):
    return {"benchmark": "tta", "params": {"graph": graph, "system": system,
                                           "variant": variant, "seed": seed, "seeds": "0,1,2",
                                           "max_epochs": 20, "target_frac": 0.98},
            "figures": figures, "spread": {}, "repeat": 1, "time": "2031-02-03T04:05:06Z",
            "machine": {}, "versions": {}, "commit": None, "dirty": False}


def figs(tta_s, epochs, vs=None, reached=True, best=0.9):
    return {"reached": reached, "tta_s": tta_s if reached else None,
            "tta_epochs": epochs if reached else None,
            "tta_with_eval_s": None if not reached else tta_s + 1.0,
            "target_val_acc": 0.98 * 0.9, "best_val_acc": best, "test_acc": best - 0.01,
            "train_epoch_s": 2.0, "tta_vs_dgl": vs}


def report_records():
    return [rec("g", "locality", 0, figs(10.0, 5, 0.5)),
            rec("g", "locality", 1, figs(14.0, 7, 0.7)),
            rec("g", "locality", 2, figs(12.0, 6, 0.4)),
            rec("g", "labor", 0, figs(8.0, 4, 0.4)),
            rec("g", "labor", 1, figs(0, 0, reached=False, best=0.8)),
            rec("g", "labor", 2, figs(9.0, 5, 0.3)),
            rec("g", "never", 0, figs(0, 0, reached=False, best=0.5)),
            rec("g", "dgl", 0, figs(20.0, 8), system="dgl"),
            rec("g", "dgl", 1, figs(20.0, 8), system="dgl"),
            rec("g", "dgl", 2, figs(30.0, 9), system="dgl")]


def row(lines, variant):
    return next(ln for ln in lines if ln.startswith(f"| g | {variant} |"))


def test_the_table_gives_median_and_spread_over_seeds_and_says_not_reached():
    lines = tta.summary_lines(report_records())
    assert lines[0].startswith("| graph | variant | reached | time to target, s | epochs |")
    cells = [c.strip() for c in row(lines, "locality").split("|")[1:-1]]
    assert cells[2:7] == ["3/3", "12.0 (10.0–14.0)", "6 (5–7)", "13.0 (11.0–15.0)",
                          "0.50x (0.40x–0.70x)"]
    # labor: one seed of three not reached -- counted and bold, the medians over the two
    cells = [c.strip() for c in row(lines, "labor").split("|")[1:-1]]
    assert cells[2:7] == ["**2/3**", "8.50 (8.00–9.00)", "4.5 (4–5)", "9.50 (9.00–10.0)",
                          "0.35x (0.30x–0.40x)"]
    assert cells[9] == "0.9000 (0.8000–0.9000)"  # best val acc: every seed (0.9, 0.8, 0.9)
    cells = [c.strip() for c in row(lines, "never").split("|")[1:-1]]
    assert cells[2:6] == ["**0/1**", "**not reached**", "**not reached**", "**not reached**"]
    assert row(lines, "dgl").split("|")[7].strip() == "-"  # no ratio against itself
    assert "over the seeds (g: seeds 0, 1, 2, 20 epochs at most, target 0.98)" in lines[-2]


def test_a_variant_that_reached_the_target_when_dgl_did_not_says_so():
    recs = [rec("g", "a", 0, figs(5.0, 3)), rec("g", "dgl", 0, figs(0, 0, reached=False),
                                                system="dgl")]
    assert row(tta.summary_lines(recs), "a").split("|")[7].strip() == "DGL not reached"


def test_the_page_leads_with_time_to_accuracy():
    other = {"benchmark": "train", "params": {"variant": "x"}, "figures": {"test_acc": 0.5},
             "spread": {}, "repeat": 1, "time": "2031-02-03T04:05:06Z", "machine": {},
             "versions": {}, "commit": None, "dirty": False}
    page = render_page({"a-train.jsonl": [other], "tta.jsonl": report_records()})
    sections = [ln for ln in page.splitlines() if ln.startswith("## ")]
    assert sections == ["## tta", "## train"]
    contents = page.split("Contents:")[1].split("## ")[0]
    assert contents.index("[tta]") < contents.index("[train]")
    body = page.split("## tta")[1].split("## train")[0]
    assert "Time to accuracy" in body and "| g | locality | 3/3 | 12.0 (10.0–14.0) |" in body
    # the summary comes before the per-seed table, and not-reached rows show in both
    assert body.index("| graph | variant | reached |") < body.index("Per seed:")
    per_seed = body.split("Per seed:")[1]
    assert "| never | 0 | no |" in per_seed


# -- the command -----------------------------------------------------------------------------------
def test_bad_flags_are_one_line(capsys):
    for argv, msg in ((["--target-frac", "0"], "--target-frac must be in (0, 1]"),
                      (["--target-frac", "1.5"], "--target-frac must be in (0, 1]"),
                      (["--max-epochs", "0"], "--max-epochs must be >= 1"),
                      (["--seeds", "x"], "--seeds: expected integers")):
        rc, _ = run_main(["bench", "tta", *argv])
        assert rc == 2
        assert msg in capsys.readouterr().err


def test_a_tiny_run_writes_a_record_per_variant(tmp_path):
    out = tmp_path / "tta.jsonl"
    rc, text = run_main(["bench", "tta", "--graph", "synthetic-tiny", "--data-root",
                         tmp_path / "data", "--variants",
                         "r: --schedule random --sampler neighbor --cache-policy none; "
                         "l: --schedule locality --sampler labor --cache-policy layer "
                         "--cache-ratio 0.25", "--max-epochs", "2", "--fanouts", "5,5",
                         "--batch-size", "256", "--hidden", "16", "--threads", "1",
                         "--json", out])
    assert rc == 0
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["benchmark"], r["params"]["variant"], r["params"]["seed"]) for r in recs] == [
        ("tta", "r", 0), ("tta", "l", 0)]
    targets = {r["figures"]["target_val_acc"] for r in recs}
    assert len(targets) == 1  # one target for both
    best = max(r["figures"]["best_val_acc"] for r in recs)
    assert targets.pop() == pytest.approx(0.98 * best)
    for r in recs:
        f, p = r["figures"], r["params"]
        assert p["max_epochs"] == 2 and p["target_frac"] == 0.98 and p["graph"] == "synthetic-tiny"
        assert "epochs" not in p and f["epochs_run"] == 2 and len(f["val_acc_all"]) == 2
        assert all(0 <= v <= 1 for v in f["val_acc_all"]) and 0 <= f["test_acc"] <= 1
        if f["reached"]:
            assert f["tta_epochs"] in (1, 2)
            assert f["tta_s"] == pytest.approx(sum(f["epoch_s_all"][:f["tta_epochs"]]))
            assert f["tta_with_eval_s"] > f["tta_s"]
        else:
            assert f["tta_s"] is None and f["best_val_acc"] < 0.98 * best
    assert any(r["figures"]["reached"] for r in recs)  # the best run reaches its own level
    assert "l" in text and "tta_s" in text
