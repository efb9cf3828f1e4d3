"""A run's logs beside ``metrics.json``: ``OUT/epochs.csv`` (one row per epoch, the values of
``metrics.json``'s epoch records; each epoch once after ``--resume``) and ``--tensorboard DIR``
(event files read back with TensorBoard's own reader; without the package one line, exit 2,
before any work)."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import pytest
from conftest import run_cli

from twopgraph.run.logs import (
    EPOCHS_CSV,
    LEADING_COLUMNS,
    csv_cell,
    epoch_columns,
    epochs_csv_text,
)

FAST = ["--epochs", "3", "--hidden", "16", "--fanouts", "5,5", "--batch-size", "256",
        "--no-progress", "--device", "cpu", "--threads", "1", "--eval-every", "2"]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """A data root shared by the module (synthetic-tiny is generated into it once)."""
    return tmp_path_factory.mktemp("data")


def _train(root: Path, out: Path, *extra: str) -> dict:
    from twopgraph.cli import main
    args = ["train", "--dataset", "synthetic-tiny", "--data-root", str(root), *FAST, *extra,
            "--out", str(out)]
    assert main(args) == 0
    return json.loads((out / "metrics.json").read_text())


def _rows(out: Path) -> tuple[list[str], list[dict]]:
    with open(out / EPOCHS_CSV, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames), list(reader)


def _same(cell: str, value) -> bool:
    """A cell of epochs.csv holds ``value`` (metrics.json's) exactly."""
    if value is None:
        return cell == ""
    if isinstance(value, str):
        return cell == value
    return json.loads(cell) == value


def assert_csv_is_metrics(out: Path, metrics: dict) -> None:
    header, rows = _rows(out)
    epochs = metrics["epochs"]
    assert len(rows) == len(epochs)
    assert header[:len(LEADING_COLUMNS)] == list(LEADING_COLUMNS)
    for row, rec in zip(rows, epochs, strict=True):
        for key in header:
            assert _same(row[key], rec.get(key)), (key, row[key], rec.get(key))
        assert set(rec) - set(header) <= {"ranks"}


def test_epochs_csv_has_one_row_per_epoch_with_the_metrics_values(root, tmp_path):
    out = tmp_path / "run"
    metrics = _train(root, out)
    assert len(metrics["epochs"]) == 3
    assert_csv_is_metrics(out, metrics)
    _, rows = _rows(out)
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2]
    # --eval-every 2: epoch 0 is not evaluated (an empty cell), epoch 1 is; the header is
    # the same either way
    assert rows[0]["val_acc"] == "" and rows[1]["val_acc"] != ""
    assert float(rows[1]["val_acc"]) == metrics["epochs"][1]["val_acc"]


def test_resume_lists_each_epoch_once(root, tmp_path):
    out = tmp_path / "run"
    first = _train(root, out, "--epochs", "2")
    _, rows = _rows(out)
    assert [int(r["epoch"]) for r in rows] == [0, 1]
    metrics = _train(root, out, "--epochs", "4", "--resume")
    assert [e["epoch"] for e in metrics["epochs"]] == [0, 1, 2, 3]
    assert metrics["epochs"][:2] == first["epochs"]
    assert_csv_is_metrics(out, metrics)
    _, rows = _rows(out)
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2, 3]
    # a resume with no epoch left rewrites the same file
    before = (out / EPOCHS_CSV).read_bytes()
    _train(root, out, "--epochs", "4", "--resume")
    assert (out / EPOCHS_CSV).read_bytes() == before


def test_overwrite_removes_the_old_runs_csv(root, tmp_path, capsys):
    out = tmp_path / "run"
    _train(root, out, "--epochs", "2")
    (out / EPOCHS_CSV).write_text("stale\n")
    rc, _, err = run_cli(["train", "--dataset", "synthetic-tiny", "--data-root", root, *FAST,
                          "--epochs", "1", "--overwrite", "--out", out], capsys)
    assert rc == 0, err
    _, rows = _rows(out)
    assert [int(r["epoch"]) for r in rows] == [0]


def test_csv_cells_and_a_stable_header():
    assert csv_cell(None) == "" and csv_cell(float("nan")) == "" and csv_cell(math.inf) == ""
    assert csv_cell(True) == "true" and csv_cell(3) == "3" and csv_cell("cpu") == "cpu"
    assert float(csv_cell(0.1 + 0.2)) == 0.1 + 0.2  # the exact value, not rounded
    assert json.loads(csv_cell([1, 2])) == [1, 2]
    assert json.loads(csv_cell({"a": None})) == {"a": None}
    recs = [{"epoch": 0, "loss": 1.0, "feature_rows": 5},
            {"epoch": 1, "loss": 0.5, "val_acc": 0.75, "feature_rows": 6, "eval_rows": [3, 2],
             "ranks": [{"rank": 0}]}]
    cols = epoch_columns(recs)
    assert cols == [*LEADING_COLUMNS, "feature_rows", "eval_rows"]  # no "ranks"
    text = epochs_csv_text(recs)
    assert text.splitlines()[0] == ",".join(cols)
    assert len(text.splitlines()) == 3


def test_tensorboard_without_the_package_is_one_line_before_any_work(root, tmp_path,
                                                                     monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    out, tb = tmp_path / "run", tmp_path / "tb"
    rc, stdout, err = run_cli(["train", "--dataset", "synthetic-tiny", "--data-root",
                               tmp_path / "empty-root", *FAST, "--tensorboard", tb, "--out",
                               out], capsys)
    assert rc == 2 and stdout == ""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("twopgraph: error: --tensorboard") and \
        "pip install tensorboard" in lines[0]
    # nothing done: no run folder, no event folder, no dataset generated
    assert not out.exists() and not tb.exists() and not (tmp_path / "empty-root").exists()


def test_tensorboard_event_files_hold_each_epoch(root, tmp_path):
    pytest.importorskip("tensorboard", reason="the optional tensorboard package is not "
                                              "installed (pip install tensorboard)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    out, tb = tmp_path / "run", tmp_path / "tb"
    metrics = _train(root, out, "--tensorboard", str(tb))
    acc = EventAccumulator(str(tb))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"loss/train", "accuracy/train", "accuracy/val", "accuracy/test", "time/epoch_s",
            "sampling/input_nodes", "cache/hit_rate"} <= tags
    loss = acc.Scalars("loss/train")
    assert [e.step for e in loss] == [0, 1, 2]
    for e, rec in zip(loss, metrics["epochs"], strict=True):
        assert e.value == pytest.approx(rec["loss"], rel=1e-6)
    val = acc.Scalars("accuracy/val")  # evaluated epochs only (--eval-every 2: 1 and 2)
    assert [e.step for e in val] == [1, 2]
    assert val[0].value == pytest.approx(metrics["epochs"][1]["val_acc"], rel=1e-6)
    rows = acc.Scalars("sampling/input_nodes")
    assert [e.value for e in rows] == [float(r["feature_rows"]) for r in metrics["epochs"]]
    assert metrics["config"]["tensorboard"] == str(tb)
