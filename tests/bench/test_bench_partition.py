"""``twopgraph bench partition-steps``: each step of ``twopgraph partition`` timed alone on
synthetic-tiny, int64 vs narrow labels; the records carry the harness's keys; the cut summed
from the cluster graph agrees with the pass over the CSR."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from twopgraph.cli import main

REQUIRED = ("benchmark", "params", "figures", "spread", "repeat", "machine", "versions",
            "commit")
ROWS = {("split", "int64"), ("cut", "wide"), ("cut", "narrow"), ("cluster_graph", "wide"),
        ("cluster_graph", "narrow"), ("cluster_order", "wide"), ("cluster_order", "narrow"),
        ("halos", "mask"), ("local_edges", "mask")}


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    out = tmp_path_factory.mktemp("bench") / "partition.jsonl"
    with contextlib.redirect_stdout(io.StringIO()):
        rc = main(["bench", "partition-steps", "--graph", "synthetic-tiny", "--data-root",
                   str(root), "--num-parts", "3", "--hops", "2", "--reps", "1", "--repeat",
                   "2", "--json", str(out)])
    assert rc == 0
    return [json.loads(ln) for ln in out.read_text().splitlines()]


def test_every_step_is_a_record_with_the_harness_keys(records):
    assert {(r["params"]["step"], r["params"]["labels"]) for r in records} == ROWS
    for r in records:
        assert set(REQUIRED) <= set(r), r.keys()
        assert r["benchmark"] == "partition-steps" and r["repeat"] == 2
        assert r["params"]["graph"] == "synthetic-tiny"
        assert (r["params"]["num_parts"], r["params"]["hops"]) == (3, 2)
        assert r["figures"]["step_s"] >= 0
        lo, hi = r["spread"]["step_s"]
        assert lo <= r["figures"]["step_s"] <= hi


def test_labels_narrow_and_the_cut_agrees(records):
    rows = {(r["params"]["step"], r["params"]["labels"]): r["figures"] for r in records}
    for step in ("cut", "cluster_graph", "cluster_order"):
        assert rows[(step, "wide")]["label_bytes"] == 8
        assert rows[(step, "narrow")]["label_bytes"] < 8
        assert rows[(step, "narrow")]["narrow_over_wide"] > 0
    assert rows[("cut", "narrow")]["label_bytes"] == 1  # 3 parts: int8
    split = rows[("split", "int64")]
    assert split["cut_agrees"] is True
    assert split["cut_edges"] == split["cut_from_cluster_graph"] > 0
    assert rows[("cut", "wide")]["cut_edges"] == rows[("cut", "narrow")]["cut_edges"]
    assert split["num_nodes"] == 2000 and split["num_clusters"] > 3
    assert 0 < rows[("halos", "mask")]["reached_share"] <= 1
    assert rows[("local_edges", "mask")]["local_entries"] > 0


def test_bad_parts_is_one_line(tmp_path, capsys):
    rc = main(["bench", "partition-steps", "--graph", "synthetic-tiny", "--num-parts", "0",
               "--data-root", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "--num-parts" in err and "Traceback" not in err
