"""Issue 41 item 3: DGL 2.1 GraphBolt as a sampling peer. Each twopgraph row is compared with
GraphBolt's row of its sampler (every labor variant with LABOR-0, the only LABOR of DGL 2.1);
a real GraphBolt run where its venv exists (scripts/setup_graphbolt_baseline.sh)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from twopgraph.bench.harness import Row
from twopgraph.bench.peers import PEERS
from twopgraph.bench.sampling import add_ratios, graphbolt_samplers

ROOT = Path(__file__).resolve().parents[2]
GB_PY = PEERS["graphbolt"].venv() / "bin" / "python"


def _row(system, sampler, epoch_s, inputs, schedule="random"):
    return Row({"system": system, "schedule": schedule, "sampler": sampler, "renumber": True,
                "num_clusters": 0},
               {"sample_epoch_s": epoch_s, "input_nodes_per_batch": inputs})


def test_each_sampler_asks_graphbolt_once_in_order():
    assert graphbolt_samplers(["labor+layer", "neighbor", "labor", "device"]) == \
        ["labor", "neighbor"]
    assert graphbolt_samplers(["device"]) == []


def test_ratios_against_graphbolt_use_the_row_of_the_same_sampler():
    rows = [_row("twopgraph", "neighbor", 1.0, 100.0),
            _row("twopgraph", "labor", 2.0, 60.0),
            _row("twopgraph", "labor+layer", 2.0, 50.0, schedule="locality"),
            _row("graphbolt", "neighbor", 5.0, 100.0),
            _row("graphbolt", "labor", 8.0, 64.0)]
    add_ratios(rows)
    n, lab, lay = (r.figures for r in rows[:3])
    assert n["speedup_vs_graphbolt"] == pytest.approx(5.0)
    assert n["inputs_vs_graphbolt"] == pytest.approx(1.0)
    assert lab["speedup_vs_graphbolt"] == pytest.approx(4.0)
    assert lab["epoch_vs_graphbolt"] == pytest.approx(0.25)
    assert lab["inputs_vs_graphbolt"] == pytest.approx(60 / 64)
    assert lay["inputs_vs_graphbolt"] == pytest.approx(50 / 64)
    assert "speedup_vs_graphbolt" not in rows[3].figures  # peers get no ratios
    assert n["inputs_vs_base"] == 1.0 and lab["inputs_vs_base"] == pytest.approx(0.6)


def test_no_graphbolt_row_no_graphbolt_ratio():
    rows = [_row("twopgraph", "labor", 2.0, 60.0), _row("graphbolt", "neighbor", 5.0, 100.0)]
    add_ratios(rows)
    assert "speedup_vs_graphbolt" not in rows[0].figures


@pytest.mark.skipif(not GB_PY.exists(), reason="no GraphBolt venv "
                    "(scripts/setup_graphbolt_baseline.sh)")
@pytest.mark.parametrize("sampler", ["neighbor", "labor"])
def test_graphbolt_script_samples_a_real_graph(sampler, tmp_path):
    """The peer script on cora: one JSON line, every training vertex in an epoch's batches,
    LABOR-0 reaching no more input vertices than the whole graph."""
    npz = ROOT.parent / "shared" / "datasets" / "cora.npz"
    if not npz.exists():
        pytest.skip("no shared cora.npz")
    p = subprocess.run([str(GB_PY), str(ROOT / PEERS["graphbolt"].script), "--npz", str(npz),
                        "--sampler", sampler, "--fanouts", "5,5", "--batch-size", "64",
                        "--sample-epochs", "1", "--threads", "1", "--json"],
                       capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1
    rec = json.loads(lines[0])
    import numpy as np
    d = np.load(npz)
    assert rec["num_batches"] == -(-len(d["train_idx"]) // 64)
    assert 64 <= rec["input_nodes_per_batch"] <= d["indptr"].shape[0] - 1
    assert rec["sampled_edges_per_batch"] > 0 and rec["sample_epoch_s"] > 0
    assert rec["graphbolt_version"].startswith("2.1") and rec["sampler"] == sampler
    assert sys.executable != str(GB_PY)
