"""What a new user met (issue 39, item 7): GAT named in the help, a data root outside the
working directory (``$TWOPGRAPH_DATA``, else ``$XDG_CACHE_HOME/twopgraph``), ``predict``
writing into the run folder by default, one log line per epoch in a distributed run, and a
set-up script that says what it does and what comes next."""

from __future__ import annotations

import json
import logging
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import run_cli

from twopgraph.datasets import paths, resolve_data_root

REPO = Path(__file__).resolve().parents[1]
FAST = ["--epochs", "1", "--hidden", "16", "--fanouts", "5,5", "--batch-size", "256",
        "--no-progress", "--device", "cpu", "--schedule", "random", "--threads", "1"]


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"]])
def test_help_names_gat(argv, capsys):
    rc, out, _ = run_cli(argv, capsys)
    assert rc == 0
    assert "GraphSAGE/GCN/GAT" in " ".join(out.split())


# -- the data root ----------------------------------------------------------------------------
@pytest.fixture()
def no_root_env(monkeypatch, tmp_path):
    """No ``$TWOPGRAPH_DATA``; the working directory an empty folder; the legacy-root line
    not yet said in this process."""
    monkeypatch.delenv("TWOPGRAPH_DATA", raising=False)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(paths, "_said", [])
    return cwd


def test_default_data_root_is_the_user_cache(no_root_env, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert resolve_data_root() == tmp_path / "xdg" / "twopgraph"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolve_data_root() == tmp_path / "home" / ".cache" / "twopgraph"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # not absolute: ignored (XDG spec)
    assert resolve_data_root() == tmp_path / "home" / ".cache" / "twopgraph"
    monkeypatch.setenv("TWOPGRAPH_DATA", str(tmp_path / "env"))  # the variable still wins
    assert resolve_data_root() == tmp_path / "env"
    assert resolve_data_root(tmp_path / "flag") == tmp_path / "flag"


def test_an_old_datasets_folder_is_named_once(no_root_env, monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with caplog.at_level(logging.INFO, logger="twopgraph"):
        resolve_data_root()
        assert not caplog.records  # no ./datasets: nothing to say
        (no_root_env / "datasets" / "stores").mkdir(parents=True)
        resolve_data_root()
        resolve_data_root()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "--data-root datasets" in lines[0] and str(tmp_path / "xdg" / "twopgraph") in lines[0]
    assert resolve_data_root() == tmp_path / "xdg" / "twopgraph"  # the default all the same


def test_train_and_predict_leave_the_working_directory_alone(no_root_env, monkeypatch,
                                                             tmp_path, capsys, caplog):
    """Data go to the cache root; ``predict`` without ``--out`` writes beside the checkpoint
    (``predictions.npy``, ``logits.npy`` with ``--logits``) and logs where."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    run = tmp_path / "run"
    rc, _, err = run_cli(["train", "--dataset", "synthetic-tiny", *FAST, "--out", run], capsys)
    assert rc == 0, err
    assert (tmp_path / "xdg" / "twopgraph" / "stores").is_dir()
    with caplog.at_level(logging.INFO, logger="twopgraph"):
        rc, out, err = run_cli(["predict", "--checkpoint", run / "checkpoint.pt"], capsys)
    assert rc == 0, err
    assert any(str(run / "predictions.npy") in r.getMessage() for r in caplog.records)
    rec = json.loads(out.strip().splitlines()[-1])
    assert Path(rec["out"]) == run / "predictions.npy"
    pred = np.load(run / "predictions.npy")
    assert pred.dtype == np.int64 and pred.shape[0] == rec["rows"]
    rc, out, err = run_cli(["predict", "--checkpoint", run / "checkpoint.pt", "--logits"],
                           capsys)
    assert rc == 0, err
    assert np.load(run / "logits.npy").shape == (rec["rows"], json.loads(out)["columns"])
    assert list(no_root_env.iterdir()) == []  # nothing in the working directory


def test_predict_default_output_is_beside_the_checkpoint(tmp_path):
    from twopgraph.run.predictconfig import PredictConfig
    cfg = PredictConfig.of(checkpoint=str(tmp_path / "r" / "checkpoint.pt"))
    assert cfg.validate().predict.output() == tmp_path / "r" / "predictions.npy"
    cfg = PredictConfig.of(checkpoint=str(tmp_path / "r" / "checkpoint.pt"), logits=True)
    assert cfg.validate().predict.output() == tmp_path / "r" / "logits.npy"
    given = PredictConfig.of(checkpoint="c.pt", out=str(tmp_path / "p.npy"))
    assert given.validate().predict.output() == tmp_path / "p.npy"


# -- a distributed run's log: one line per epoch ----------------------------------------------
def test_distributed_epoch_is_one_log_line(caplog):
    from twopgraph.distributed.trainer import DistributedRank
    rec = {"epoch": 3, "loss": 0.5, "val_acc": 0.75, "epoch_s": 1.0, "sample_s": 0.1,
           "load_s": 0.2, "compute_s": 0.3, "input_nodes_per_batch": 100.0,
           "remote_graph_requests": 0, "halo_input_rows": 42}
    with caplog.at_level(logging.INFO, logger="twopgraph"):
        DistributedRank.log_epoch(SimpleNamespace(), SimpleNamespace(metric="acc"), rec)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert lines[0].startswith("epoch 3  loss 0.5000") and "val_acc 0.7500" in lines[0]
    assert lines[0].endswith("remote_graph_requests 0  halo_input_rows 42")


# -- scripts/setup.sh ---------------------------------------------------------------------------
def test_setup_script_is_strict_and_says_what_comes_next():
    text = (REPO / "scripts" / "setup.sh").read_text()
    assert "set -euo pipefail" in text
    assert subprocess.run(["bash", "-n", str(REPO / "scripts" / "setup.sh")],
                          check=False).returncode == 0
    venv = REPO / ".venv"
    marker = venv / ".twopgraph-installed"
    if not marker.is_file() or marker.stat().st_mtime < (REPO / "pyproject.toml").stat().st_mtime:
        pytest.skip("the venv is not set up by scripts/setup.sh (or pyproject.toml is newer): "
                    "running it would install")
    env = dict(os.environ, TWOPGRAPH_VENV=str(venv))
    p = subprocess.run(["bash", str(REPO / "scripts" / "setup.sh")], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr
    steps = [ln for ln in p.stderr.splitlines() if ln.startswith("[setup +")]
    assert len(steps) >= 3 and steps[-1].endswith("done"), p.stderr
    assert "twopgraph train" in p.stderr and "pytest" in p.stderr
    assert "minutes" in p.stderr and '-m "not slow"' in p.stderr
