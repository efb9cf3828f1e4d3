"""``twopgraph predict`` and :func:`twopgraph.run.predict.load_model`: predictions of a trained
model reproduce the run's accuracy exactly, come in the data's original vertex order, and bad
input is one line (exit 2) with no output file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import community_data, run_cli

from twopgraph.config import TrainConfig
from twopgraph.datasets import load_dataset
from twopgraph.errors import ConfigError
from twopgraph.models import BlockGNN
from twopgraph.run.predict import load_model, predict
from twopgraph.run.train import train

FAST = ["--epochs", "2", "--hidden", "16", "--fanouts", "5,5", "--batch-size", "256",
        "--no-progress", "--device", "cpu", "--threads", "1"]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """A data root shared by the module (synthetic-tiny is generated into it once)."""
    return tmp_path_factory.mktemp("data")


def _train_cli(root: Path, out: Path, *extra) -> dict:
    """``twopgraph train`` on synthetic-tiny in-process; returns its metrics.json."""
    from twopgraph.cli import main
    assert main(["train", "--dataset", "synthetic-tiny", "--data-root", str(root), *FAST,
                 *extra, "--out", str(out)]) == 0
    return json.loads((out / "metrics.json").read_text())


@pytest.fixture(scope="module", params=["renumber", "no-renumber"])
def trained(request, root, tmp_path_factory):
    """A `twopgraph train` run (default: renumbered, locality; or --no-renumber):
    (run folder, its metrics.json)."""
    out = tmp_path_factory.mktemp("train") / "run"
    extra = [] if request.param == "renumber" else ["--no-renumber"]
    return out, _train_cli(root, out, *extra)


def _float32_acc(pred: np.ndarray, label: np.ndarray, idx: np.ndarray) -> float:
    """Accuracy as single-process training computes it (a float32 mean)."""
    return float(torch.from_numpy(pred[idx] == label[idx]).float().mean())


def assert_user_error(rc, out, err):
    assert rc == 2, (rc, out, err)
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("twopgraph: error:"), err
    assert out.strip() == "", out


def _json(text: str) -> dict:
    lines = [json.loads(ln) for ln in text.splitlines() if ln.startswith("{")]
    assert len(lines) == 1, text
    return lines[0]


# -- reproduction ----------------------------------------------------------------------------
def _predict_scores_the_run(out, metrics, root, tmp_path, capsys) -> tuple[dict, np.ndarray]:
    """`twopgraph predict` on the run in ``out``: its record and class ids reproduce the
    run's val/test accuracy to the last digit (the file in the dataset's original order)."""
    preds = tmp_path / "preds.npy"
    rc, o, err = run_cli(["predict", "--checkpoint", out / "checkpoint.pt", "--out", preds],
                         capsys)
    assert rc == 0, err
    rec = _json(o)
    assert rec["test_acc"] == metrics["test_acc"] and rec["val_acc"] == metrics["val_acc"]
    pred = np.load(preds)
    data = load_dataset("synthetic-tiny", root, progress=False)
    label = np.asarray(data.label)
    assert _float32_acc(pred, label, data.test_idx) == metrics["test_acc"]
    assert _float32_acc(pred, label, data.val_idx) == metrics["val_acc"]
    return rec, pred


def test_predict_reproduces_the_runs_accuracy(trained, root, tmp_path, capsys):
    out, metrics = trained
    rec, pred = _predict_scores_the_run(out, metrics, root, tmp_path, capsys)
    assert rec["rows"] == 2000 and rec["kind"] == "class_ids" and rec["same_data"]
    assert pred.dtype == np.int64 and pred.shape == (2000,)


def test_predict_uses_the_selected_model_of_a_best_val_run(root, tmp_path, capsys):
    """--select best-val (the default) whose best epoch is not the last (a high learning
    rate): the predictions are the selected model's and reproduce the reported figures."""
    out = tmp_path / "run"
    metrics = _train_cli(root, out, "--epochs", "5", "--lr", "0.3", "--schedule", "random")
    last = len(metrics["epochs"]) - 1
    assert metrics["select"] == "best-val" and metrics["selected_epoch"] < last  # the setup
    assert metrics["test_acc"] != metrics["epochs"][last]["test_acc"]
    rec, _ = _predict_scores_the_run(out, metrics, root, tmp_path, capsys)
    assert rec["selected_epoch"] == metrics["selected_epoch"]


def test_logits_are_float32_n_by_c_and_argmax_the_class_ids(trained, tmp_path, capsys):
    out, _ = trained
    ids, lg = tmp_path / "ids.npy", tmp_path / "logits.npy"
    for path, extra in ((ids, []), (lg, ["--logits"])):
        rc, o, err = run_cli(["predict", "--checkpoint", out / "checkpoint.pt", "--out", path,
                              *extra], capsys)
        assert rc == 0, err
    logits = np.load(lg)
    assert logits.dtype == np.float32 and logits.shape == (2000, 5)
    assert _json(o)["columns"] == 5 and _json(o)["kind"] == "logits"
    assert np.isfinite(logits).all()
    np.testing.assert_array_equal(logits.argmax(1), np.load(ids))


def test_original_order_matches_train_results_logits(tmp_path):
    """train() reports its logits in the caller's ids; predict() on the same data and
    checkpoint gives the same numbers in the same order (features read in the training's
    --feat-dtype, here bfloat16)."""
    data = community_data(400, k=4, f=8)
    cfg = TrainConfig.of(fanouts=[4, 4], batch_size=64, epochs=2, hidden=16, lr=0.01,
                         out=str(tmp_path / "run"), data_root=str(tmp_path / "data"),
                         device="cpu", progress=False, threads=1, feat_dtype="bfloat16")
    res = train(cfg, data)
    ckpt = tmp_path / "run" / "checkpoint.pt"
    lg = predict(ckpt, data=data, logits=True)
    np.testing.assert_array_equal(lg, res.logits.numpy())
    np.testing.assert_array_equal(predict(ckpt, data=data), res.logits.numpy().argmax(1))
    # trained on data passed from Python: predict needs it again
    with pytest.raises(ConfigError, match="data passed from Python"):
        predict(ckpt)


def test_load_model_rebuilds_the_trained_model(trained):
    out, _ = trained
    model, cfg = load_model(out / "checkpoint.pt")
    assert isinstance(model, BlockGNN) and not model.training
    assert model.num_layers == 2 and cfg.model.hidden == 16 and cfg.sampling.fanouts == [5, 5]
    state = torch.load(out / "checkpoint.pt", weights_only=True)["model"]
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())


# -- data checks -----------------------------------------------------------------------------
def test_other_data_with_the_same_shape_is_used_when_named(trained, tmp_path, capsys,
                                                          caplog):
    out, _ = trained
    other = community_data(300, k=5, f=16, seed=3)  # synthetic-tiny: 16 features, 5 classes
    path = other.save_npz(tmp_path / "other.npz")
    preds = tmp_path / "p.npy"
    rc, o, err = run_cli(["predict", "--checkpoint", out / "checkpoint.pt", "--dataset", path,
                          "--data-root", tmp_path / "data", "--out", preds], capsys)
    assert rc == 0, err
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "is not the data" in warned[0]
    rec = _json(o)
    assert rec["rows"] == 300 and not rec["same_data"]
    assert np.load(preds).shape == (300,)


def _user_error(argv, capsys, preds: Path):
    rc, o, err = run_cli(argv, capsys)
    assert_user_error(rc, o, err)
    assert not preds.exists() and not list(preds.parent.glob(f".{preds.name}*"))
    return err


def test_other_data_of_another_shape_is_refused(trained, tmp_path, capsys):
    out, _ = trained
    path = community_data(300, k=4, f=8).save_npz(tmp_path / "small.npz")
    preds = tmp_path / "p.npy"
    err = _user_error(["predict", "--checkpoint", out / "checkpoint.pt", "--dataset", path,
                       "--data-root", tmp_path / "data", "--out", preds], capsys, preds)
    assert "8 features" in err and "takes 16" in err


def _rewrite(src: Path, dst: Path, edit) -> Path:
    ckpt = torch.load(src, weights_only=True)
    edit(ckpt)
    torch.save(ckpt, dst)
    return dst


def test_changed_data_is_refused_by_default(trained, tmp_path, capsys):
    out, _ = trained
    ckpt = _rewrite(out / "checkpoint.pt", tmp_path / "c.pt",
                    lambda c: c["dataset"].update(fingerprint="0" * 64))
    preds = tmp_path / "p.npy"
    err = _user_error(["predict", "--checkpoint", ckpt, "--out", preds], capsys, preds)
    assert "has changed since" in err


@pytest.mark.parametrize("case", ["missing", "folder", "garbage", "foreign", "older"])
def test_bad_checkpoint_is_one_line_and_no_file(case, trained, tmp_path, capsys):
    out, _ = trained
    ckpt = {"missing": tmp_path / "nope.pt", "folder": out}.get(case, tmp_path / "c.pt")
    if case == "garbage":
        ckpt.write_bytes(b"not a checkpoint at all")
    elif case == "foreign":
        torch.save({"weights": torch.zeros(3)}, ckpt)
    elif case == "older":  # a checkpoint of a twopgraph before model_spec/dataset
        _rewrite(out / "checkpoint.pt", ckpt,
                 lambda c: (c.pop("model_spec"), c.pop("dataset")))
    preds = tmp_path / "p.npy"
    err = _user_error(["predict", "--checkpoint", ckpt, "--out", preds], capsys, preds)
    want = {"missing": "no checkpoint", "folder": "no checkpoint", "garbage": "cannot read",
            "foreign": "not a twopgraph checkpoint", "older": "retrain"}[case]
    assert want in err


def test_out_folder_and_missing_flags_refused(trained, tmp_path, capsys):
    out, _ = trained
    rc, o, err = run_cli(["predict", "--checkpoint", out / "checkpoint.pt", "--out", tmp_path],
                         capsys)
    assert_user_error(rc, o, err)
    assert "is a folder" in err
    rc, o, err = run_cli(["predict", "--out", tmp_path / "p.npy"], capsys)
    assert rc == 2 and "--checkpoint" in err


# -- distributed -----------------------------------------------------------------------------
@pytest.mark.slow
def test_predict_reproduces_a_distributed_run(root, tmp_path, capsys):
    from twopgraph.cli import main
    parts = tmp_path / "parts"
    assert main(["partition", "--dataset", "synthetic-tiny", "--data-root", str(root),
                 "--num-parts", "2", "--hops", "2", "--out", str(parts)]) == 0
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "twopgraph", "train", "--partitions", str(parts), "--nproc", "2",
         *FAST, "--out", str(out)], capture_output=True, text=True, timeout=300,
        check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    metrics = json.loads((out / "metrics.json").read_text())
    model, cfg = load_model(out / "checkpoint.pt")  # rebuildable from a distributed checkpoint
    assert model.num_layers == 2 and Path(cfg.data.dataset).is_dir()  # the source store
    preds = tmp_path / "preds.npy"
    rc, o, err = run_cli(["predict", "--checkpoint", out / "checkpoint.pt", "--out", preds],
                         capsys)
    assert rc == 0, err
    rec = _json(o)
    assert rec["test_acc"] == metrics["test_acc"] and rec["val_acc"] == metrics["val_acc"]
    pred, data = np.load(preds), load_dataset("synthetic-tiny", root, progress=False)
    label, test = np.asarray(data.label), data.test_idx
    assert float((pred[test] == label[test]).sum()) / test.shape[0] == metrics["test_acc"]
