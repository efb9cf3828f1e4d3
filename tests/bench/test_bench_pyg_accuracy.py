"""``twopgraph bench pyg-accuracy``: PyG's model on ``twopgraph.pyg.NeighborLoader`` beside
``twopgraph train``: one record per side with the accuracies, and the difference in points is
the difference of the two test accuracies."""

from __future__ import annotations

import json

import pytest
from test_harness import run_main

pytest.importorskip("torch_geometric.nn")


def test_two_rows_and_their_difference(tmp_path):
    out = tmp_path / "r.jsonl"
    rc, _ = run_main(["bench", "pyg-accuracy", "--graph", "synthetic-tiny", "--data-root",
                      tmp_path / "data", "--seeds", "0", "--epochs", "3", "--fanouts", "4,4",
                      "--batch-size", "256", "--hidden", "32", "--lr", "0.02", "--json", out])
    assert rc == 0
    recs = {r["params"]["system"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(recs) == {"pyg", "twopgraph"}
    pyg, ours = recs["pyg"]["figures"], recs["twopgraph"]["figures"]
    for f in (pyg, ours):
        assert 0.0 <= f["test_acc"] <= 1.0 and f["train_epoch_s"] > 0
    assert pyg["test_acc"] > 0.5 and ours["test_acc"] > 0.5  # tiny graph: both learn
    assert pyg["acc_vs_twopgraph_pt"] == pytest.approx(
        100 * (pyg["test_acc"] - ours["test_acc"]))


def test_bad_loader_args_are_one_line(tmp_path, capsys):
    rc, _ = run_main(["bench", "pyg-accuracy", "--graph", "synthetic-tiny", "--data-root",
                      tmp_path, "--loader-args", "schedule"])
    assert rc == 2
    assert "--loader-args: expected KEY=VALUE" in capsys.readouterr().err
