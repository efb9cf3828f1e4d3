"""Issue 13 item 5: the recipes benchmark (scripts/recipes.py) -- its CSV, resume and tables --
and the pieces of the DGL baseline (scripts/dgl_baseline.py) that need no DGL: ROC-AUC,
best-validation selection and the flags recipes.py hands it."""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_script_{name}", ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


recipes = _load("recipes")
dgl_baseline = _load("dgl_baseline")  # imports neither dgl nor torch at module level


# -- dgl_baseline: ROC-AUC and selection -----------------------------------------------------------
def _pairwise_auc(s, y) -> float:
    """Reference: P(score of a positive > score of a negative), ties counting one half."""
    pos, neg = s[y == 1], s[y == 0]
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0) + 0.5 * (diff == 0)).mean())


def test_roc_auc_matches_the_pairwise_definition_with_ties():
    rng = np.random.default_rng(0)
    for n in (2, 7, 50, 301):
        y = rng.integers(0, 2, n)
        y[0], y[1] = 0, 1
        s = rng.integers(0, 5, n) / 4.0  # few distinct values: many ties
        assert dgl_baseline.roc_auc(s, y) == pytest.approx(_pairwise_auc(s, y), abs=1e-12)
        s = rng.random(n)
        assert dgl_baseline.roc_auc(s, y) == pytest.approx(_pairwise_auc(s, y), abs=1e-12)


def test_roc_auc_edge_cases():
    y = np.array([0, 0, 1, 1])
    assert dgl_baseline.roc_auc([0.1, 0.2, 0.3, 0.4], y) == 1.0
    assert dgl_baseline.roc_auc([0.4, 0.3, 0.2, 0.1], y) == 0.0
    assert dgl_baseline.roc_auc([0.5] * 4, y) == 0.5
    assert dgl_baseline.roc_auc([0.1, 0.4, 0.35, 0.8], y) == 0.75
    assert dgl_baseline.roc_auc([0.1, 0.2], [1, 1]) is None  # one class: undefined
    assert dgl_baseline.roc_auc([0.1, 0.2], [0, 0]) is None


def test_select_epoch_is_best_val_earliest_on_ties():
    recs = [{"val_score": 0.5}, {"val_score": 0.7}, {"val_score": 0.6}, {"val_score": 0.7}]
    assert dgl_baseline.select_epoch(recs) == 1
    assert dgl_baseline.select_epoch(recs, "last") == 3
    assert dgl_baseline.select_epoch([{"val_score": None}, {"val_score": 0.1}]) == 1
    assert dgl_baseline.select_epoch([{"val_score": None}, {"val_score": None}]) == 1
    with pytest.raises(ValueError):
        dgl_baseline.select_epoch([])


def test_resolve_metric():
    assert dgl_baseline.resolve_metric("auto", 2) == "rocauc"
    assert dgl_baseline.resolve_metric("auto", 7) == "acc"
    assert dgl_baseline.resolve_metric("acc", 2) == "acc"
    with pytest.raises(SystemExit, match="two classes"):
        dgl_baseline.resolve_metric("rocauc", 3)


# -- recipes: rows, CSV, resume --------------------------------------------------------------------
METRICS = {"metric": "acc", "val_score": 0.8, "test_score": 0.79, "val_acc": 0.8,
           "test_acc": 0.79, "selected_epoch": 12, "schedule": "random",
           "config": {"epochs": 50, "fanouts": [10, 10], "lr": 0.01, "batch_size": 1024,
                      "hidden": 256, "dropout": 0.5, "weight_decay": 0.0, "eval_every": 1,
                      "schedule": "auto"}}


def test_twopgraph_row_and_the_dgl_flags_it_gives():
    row = recipes.twopgraph_row("cora", "gcn", "auto", 2, METRICS, 12.345)
    assert row["schedule_used"] == "random" and row["wall_s"] == 12.35
    assert (row["epochs"], row["lr"], row["selected_epoch"]) == (50, 0.01, 12)
    # the flags are what dgl_baseline parses, with the same values (also from CSV strings)
    for r in (row, {k: recipes._cell(v) for k, v in row.items()}):
        a = dgl_baseline.parse_args(["--npz", "x.npz", *recipes.dgl_hyperparameters(r)])
        assert (a.model, a.fanouts, a.batch_size, a.epochs, a.hidden, a.dropout, a.lr,
                a.weight_decay, a.metric, a.eval_every, a.select, a.eval_batch_size, a.seed) == \
            ("gcn", [10, 10], 1024, 50, 256, 0.5, 0.01, 0.0, "acc", 1, "best-val", 0, 2)


def test_csv_round_trip_and_a_line_cut_short(tmp_path):
    path = tmp_path / "r.csv"
    row = recipes.twopgraph_row("cora", "sage", "auto", 0, METRICS, 3.0)
    recipes.append_row(path, row)
    with open(path, "a") as f:  # an interrupted write: part of a row, no newline
        f.write("cora,dgl,sage,random,0,acc,0.7")
    assert len(recipes.read_rows(path)) == 1
    recipes.append_row(path, {**row, "seed": 1})
    rows = recipes.read_rows(path)
    assert [r["seed"] for r in rows] == ["0", "1"]
    assert list(rows[0]) == recipes.COLUMNS
    assert rows[0]["fanouts"] == "10,10" and recipes.row_key(rows[0]) == \
        ("cora", "twopgraph", "sage", "auto", "0")


def test_main_runs_each_run_once_and_resumes(tmp_path, monkeypatch):
    """Two datasets x one model x two seeds x (twopgraph auto, random, dgl); a failure of one
    run leaves the others; the second invocation runs only what is missing, and DGL gets the
    hyperparameters and metric of twopgraph's auto run."""
    data = tmp_path / "data"
    data.mkdir()
    for name in ("aa", "bb"):
        (data / f"{name}.npz").write_bytes(b"")
    calls = []
    fail = {"bb-sage-random-s1"}

    def fake_run(cmd, log_path, env):
        name = log_path.stem
        calls.append(name)
        assert env["OMP_NUM_THREADS"] == "2"
        if name in fail:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.write_text("boom\n")
            return 2, "", 0.1
        if "twopgraph" in cmd:
            out = Path(cmd[cmd.index("--out") + 1])
            assert ("--schedule" in cmd) == name.split("-")[2].startswith("random")
            out.mkdir(parents=True, exist_ok=True)
            (out / "metrics.json").write_text(json.dumps(
                {**METRICS, "metric": "rocauc" if name.startswith("bb") else "acc",
                 "test_score": 0.5 + 0.01 * len(calls)}))
            return 0, "", 1.0
        flags = dict(itertools.pairwise(cmd))
        assert flags["--epochs"] == "50" and flags["--fanouts"] == "10,10"
        assert flags["--metric"] == ("rocauc" if name.startswith("bb") else "acc")
        return 0, json.dumps({"metric": flags["--metric"], "test_score": 0.6, "val_score": 0.6,
                              "epochs": 50, "fanouts": [10, 10], "lr": 0.01,
                              "batch_size": 1024}) + "\n", 2.0

    monkeypatch.setattr(recipes, "run_logged", fake_run)
    dgl = tmp_path / "venv" / "bin"
    dgl.mkdir(parents=True)
    (dgl / "python").write_text("")
    args = ["--data-dir", str(data), "--models", "sage", "--seeds", "0,1", "--schedules",
            "auto,random", "--out", str(tmp_path / "out"), "--dgl-venv", str(tmp_path / "venv")]
    assert recipes.main(args) == 1  # one run failed
    assert len(calls) == 12 and len(recipes.read_rows(tmp_path / "out" / "recipes.csv")) == 11
    calls.clear()
    fail.clear()
    assert recipes.main(args) == 0
    assert calls == ["bb-sage-random-s1"]
    rows = recipes.read_rows(tmp_path / "out" / "recipes.csv")
    assert len(rows) == 12 and len({recipes.row_key(r) for r in rows}) == 12
    md = (tmp_path / "out" / "recipes.md").read_text()
    assert "| aa | sage | acc |" in md and "| bb | sage | rocauc |" in md
    assert "twopgraph train --dataset" in md and "--model sage --seed {0,1}" in md


# -- recipes: tables -------------------------------------------------------------------------------
def _rows(dataset, model, side, schedule, scores, metric="acc", used="random"):
    return [{"dataset": dataset, "side": side, "model": model, "schedule": schedule,
             "seed": str(i), "metric": metric, "test_score": str(s), "val_score": str(s),
             "epochs": "50", "fanouts": "10,10", "lr": "0.01", "batch_size": "1024",
             "wall_s": "10", "schedule_used": used if side == "twopgraph" else "random"}
            for i, s in enumerate(scores)]


def test_summary_means_std_and_difference():
    rows = (_rows("cora", "sage", "twopgraph", "auto", [0.80, 0.81, 0.82])
            + _rows("cora", "sage", "dgl", "random", [0.79, 0.79, 0.79])
            + _rows("cora", "gcn", "twopgraph", "auto", [0.70]))
    s = recipes.summarise(rows)
    assert [(x["dataset"], x["model"]) for x in s] == [("cora", "sage"), ("cora", "gcn")]
    assert s[0]["tp_mean"] == pytest.approx(0.81) and s[0]["diff"] == pytest.approx(0.02)
    assert s[0]["seeds"] == [0, 1, 2]
    assert math.isnan(s[1]["diff"])  # no DGL rows yet
    md = recipes.markdown(rows, {"cora": "../shared/datasets/cora.npz"})
    assert ("| cora | sage | acc | `twopgraph train --dataset ../shared/datasets/cora.npz "
            "--model sage --seed {0,1,2}` |") in md
    assert "| 81.00 ± 1.00 | 79.00 ± 0.00 | +2.00 |" in md
    assert "| 70.00 ± 0.00 | - | - |" in md
    assert "Schedule" not in md  # no random runs: no comparison


def test_schedule_comparison_tolerance_and_choice():
    rows = (_rows("photo", "sage", "twopgraph", "auto", [0.90, 0.9], used="locality")
            + _rows("photo", "sage", "twopgraph", "random", [0.9029, 0.9029])
            + _rows("cs", "sage", "twopgraph", "auto", [0.90, 0.90])
            + _rows("cs", "sage", "twopgraph", "random", [0.9031, 0.9031]))
    rows[1]["schedule_used"] = "random"
    c = recipes.compare_schedules(rows)
    assert [(x["dataset"], x["ok"]) for x in c] == [("photo", True), ("cs", False)]
    assert c[0]["chose"] == "locality 1/2, random 1/2" and c[1]["chose"] == "random"
    md = recipes.markdown(rows)
    assert "| photo | sage | acc | 90.00 ± 0.00 | 90.29 ± 0.00 | -0.29 | locality 1/2, " \
           "random 1/2 | yes |" in md
    assert "| cs | sage | acc | 90.00 ± 0.00 | 90.31 ± 0.00 | -0.31 | random | NO |" in md


# -- dgl_baseline itself (only where the DGL venv of scripts/setup_dgl_baseline.sh exists) ---------
DGL_PY = Path(__import__("os").environ.get("DGL_VENV", ROOT / ".venv-dgl")) / "bin" / "python"
SHARED = ROOT.parent / "shared" / "datasets"


def _dgl_run(npz: Path, *flags: str) -> dict:
    import subprocess
    r = subprocess.run([str(DGL_PY), str(ROOT / "scripts" / "dgl_baseline.py"), "--npz", str(npz),
                        "--mode", "train", "--json", "--threads", "1", "--fanouts", "5,5",
                        "--hidden", "16", "--eval-every", "1", *flags],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


@pytest.mark.slow
@pytest.mark.skipif(not DGL_PY.exists() or not (SHARED / "cora.npz").exists(),
                    reason="needs the DGL venv and the shared datasets")
def test_dgl_gcn_whole_graph_and_chunked_inference_agree():
    """The GCN's two exact-inference paths (the whole graph at once; DGL blocks of 500 vertices,
    whose degrees come through dgl.NID) score the first epoch's model alike, and the result
    carries the selection keys."""
    a = _dgl_run(SHARED / "cora.npz", "--model", "gcn", "--epochs", "1", "--eval-batch-size", "0")
    b = _dgl_run(SHARED / "cora.npz", "--model", "gcn", "--epochs", "1",
                 "--eval-batch-size", "500")
    assert a["epoch_scores"][0]["val_acc"] == pytest.approx(b["epoch_scores"][0]["val_acc"],
                                                             abs=1e-6)
    assert a["metric"] == "acc" and a["selected_epoch"] == 0 and a["model"] == "gcn"


@pytest.mark.slow
@pytest.mark.skipif(not DGL_PY.exists() or not (SHARED / "tolokers.npz").exists(),
                    reason="needs the DGL venv and the shared datasets")
def test_dgl_two_classes_score_rocauc_and_select_the_best_val_epoch():
    r = _dgl_run(SHARED / "tolokers.npz", "--model", "sage", "--epochs", "3",
                 "--eval-batch-size", "0")
    assert r["metric"] == "rocauc"
    best = max(r["epoch_scores"], key=lambda e: e["val_score"])
    assert r["selected_epoch"] == best["epoch"] and r["test_score"] == best["test_score"]
    assert r["test_score"] != r["test_acc"]
