"""The public interface of ``twopgraph.run``: a run on synthetic-tiny writes metrics.json and a
checkpoint into its folder, which is then refused to a second run; the checkpoint's model
loads and predicts every vertex with the run's accuracy.

``train`` itself is taken from ``twopgraph`` (the top-level API): ``twopgraph.run`` does not
export it (``from twopgraph.run import train`` gives the module ``twopgraph.run.train``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import twopgraph
import twopgraph.run as pkg
from twopgraph.config import TrainConfig
from twopgraph.datasets import load_dataset
from twopgraph.errors import ConfigError
from twopgraph.models import BlockGNN
from twopgraph.run import PredictConfig, RunDir, check_out, load_model, result_record, run_predict


def test_every_public_name_imports():
    for n in pkg.__all__:
        getattr(pkg, n)


def test_train_writes_its_run_and_the_checkpoint_predicts(tmp_path):
    out = tmp_path / "run"
    cfg = TrainConfig.of(dataset="synthetic-tiny", data_root=str(tmp_path / "data"), epochs=2,
                         hidden=16, fanouts="5,5", lr=0.01, batch_size=256, schedule="locality",
                         device="cpu", threads=2, progress=False, out=str(out))  # renumbered
    res = twopgraph.train(cfg)
    m = json.loads((out / "metrics.json").read_text())
    assert m["status"] == "ok" and m["final"] is True and len(m["epochs"]) == 2
    assert m["val_acc"] == pytest.approx(res.val_acc) and res.val_acc > 0.3  # 5 classes
    assert m["config"]["dataset"] == "synthetic-tiny" and m["device"] == "cpu"
    rec = result_record(res)
    assert rec["metrics"] == str(out / "metrics.json") and rec["test_acc"] == res.test_acc

    assert check_out(out, overwrite=True) == ["metrics.json", "checkpoint.pt"]
    with pytest.raises(ConfigError, match="already holds a run"):
        check_out(out)
    with pytest.raises(ConfigError, match="already holds a run"):
        RunDir(out).claim()

    model, run_cfg = load_model(out / "checkpoint.pt")
    assert isinstance(model, BlockGNN) and model.num_layers == 2 and not model.training
    assert run_cfg.sampling.fanouts == [5, 5] and run_cfg.model.hidden == 16
    pred = run_predict(PredictConfig.of(checkpoint=str(out / "checkpoint.pt"),
                                        out=str(tmp_path / "pred.npy"), device="cpu"))
    assert pred["rows"] == 2000 and pred["same_data"] is True
    assert pred["val_acc"] == pytest.approx(res.val_acc)
    ids = np.load(tmp_path / "pred.npy")
    assert ids.shape == (2000,) and ids.dtype == np.int64
    data = load_dataset("synthetic-tiny", data_root=tmp_path / "data", progress=False)
    hit = ids[data.val_idx] == data.label[data.val_idx]  # the file, in the data's vertex order
    assert hit.mean() == pytest.approx(res.val_acc, abs=1e-6)
