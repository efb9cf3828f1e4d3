"""Bring your own model: a GNN layer class of the user's, named ``module.path:ClassName``
(``--model``, ``ModelConfig(model=...)``) or passed as a class, trains through the CLI and the
Python API with checkpoints, exact evaluation, ``predict`` and ``--resume``; a bad spec is one
line, exit 2."""

from __future__ import annotations

import itertools
import json
import os
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import community_data, run_cli

from twopgraph.config import ModelConfig, TrainConfig
from twopgraph.core.protocols import MODELS
from twopgraph.errors import ConfigError
from twopgraph.models import BlockGNN, Conv, ModelImportError, build_model, import_conv
from twopgraph.run.predict import load_model, predict
from twopgraph.run.train import train

FAST = ["--epochs", "2", "--hidden", "16", "--fanouts", "5,5", "--batch-size", "256",
        "--no-progress", "--device", "cpu", "--threads", "1"]

USER_MODULE = '''
import torch
from torch import nn

from twopgraph.models import Conv


class MeanConv(nn.Module):
    """A plain torch module: mean of the neighbours and the vertex's own row."""

    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.lin_self = nn.Linear(in_dim, out_dim)
        self.lin_neigh = nn.Linear(in_dim, out_dim, bias=False)

    def forward(self, block, h_src, h_dst):
        src, dst = block.edge_index
        agg = torch.zeros(block.num_dst, h_src.shape[1], dtype=h_src.dtype,
                          device=h_src.device)
        agg.index_add_(0, dst, h_src[src])
        cnt = torch.bincount(dst, minlength=block.num_dst).clamp(min=1).to(h_src.dtype)
        return self.lin_self(h_dst) + self.lin_neigh(agg / cnt[:, None])


class HeadsConv(Conv):
    """A twopgraph Conv subclass with an option of the model section (heads)."""

    options = ("heads",)

    def __init__(self, in_dim, out_dim, heads):
        super().__init__()
        self.in_dim, self.out_dim, self.heads = in_dim, out_dim, heads
        self.lin = nn.Linear(in_dim, out_dim * heads)

    @classmethod
    def build(cls, in_dim, out_dim, *, last, heads=1, **options):
        return cls(in_dim, out_dim, heads)

    def forward(self, block, h_src, h_dst):
        src, dst = block.edge_index
        h = self.lin(h_src).view(-1, self.heads, self.out_dim).mean(1)
        out = torch.zeros(block.num_dst, self.out_dim, dtype=h.dtype, device=h.device)
        return out.index_add_(0, dst, h[src]) + self.lin(h_dst).view(
            -1, self.heads, self.out_dim).mean(1)


class NotAModule:
    def __init__(self, in_dim, out_dim):
        pass


class ThreeArgs(nn.Module):
    def __init__(self, in_dim, out_dim, extra):
        super().__init__()

    def forward(self, block, h_src, h_dst):
        return h_dst


class OneInput(nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()

    def forward(self, x):
        return x


class ColourConv(MeanConv, Conv):
    """Reads an option the model section does not have."""

    options = ("colour",)


def make_layer(in_dim, out_dim):
    return MeanConv(in_dim, out_dim)
'''

_COUNTER = itertools.count()


@pytest.fixture
def user_module(tmp_path, monkeypatch) -> tuple[str, Path]:
    """A module of the user's, written to a folder on ``sys.path``: (its name, the folder)."""
    name = f"user_layers_{os.getpid()}_{next(_COUNTER)}"
    folder = tmp_path / "mods"
    folder.mkdir()
    (folder / f"{name}.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(folder))
    yield name, folder
    sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """A data root shared by the module (synthetic-tiny is generated into it once)."""
    return tmp_path_factory.mktemp("data")


def assert_one_line(rc, err, match: str | None = None):
    assert rc == 2, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("twopgraph: error: "), err
    if match is not None:
        assert match in lines[0], lines[0]


def test_cli_trains_predicts_and_resumes_a_user_model(user_module, root, tmp_path, capsys):
    mod, _ = user_module
    spec = f"{mod}:MeanConv"
    out = tmp_path / "run"
    rc, stdout, err = run_cli(["train", "--dataset", "synthetic-tiny", "--data-root", root,
                               "--model", spec, *FAST, "--out", out], capsys)
    assert rc == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert m["status"] == "ok" and len(m["epochs"]) == 2 and m["config"]["model"] == spec
    assert (out / "checkpoint.pt").is_file()
    ckpt = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=True)
    assert ckpt["model_spec"]["model"] == spec
    assert any(k.endswith("lin_neigh.weight") for k in ckpt["model"])

    rc, stdout, err = run_cli(["predict", "--checkpoint", out / "checkpoint.pt", "--out",
                               tmp_path / "pred.npy"], capsys)
    assert rc == 0, err
    rec = json.loads(stdout)
    assert rec["rows"] == 2000 and rec["same_data"] is True
    assert rec["val_acc"] == pytest.approx(m["val_acc"])  # exact evaluation = predict's
    assert np.load(tmp_path / "pred.npy").shape == (2000,)

    rc, _, err = run_cli(["train", "--dataset", "synthetic-tiny", "--data-root", root,
                          "--model", spec, *FAST[2:], "--epochs", "3", "--out", out,
                          "--resume"], capsys)
    assert rc == 0, err
    assert len(json.loads((out / "metrics.json").read_text())["epochs"]) == 3


def test_cli_imports_from_the_current_folder(user_module, root, tmp_path, monkeypatch,
                                             capsys):
    """The `twopgraph` script's sys.path holds its own folder, not the current one: a module
    in the folder the command runs in is found all the same."""
    mod, folder = user_module
    monkeypatch.chdir(folder)
    here = {"", ".", str(folder), os.path.realpath(folder)}
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in here])
    out = tmp_path / "run"
    rc, _, err = run_cli(["train", "--dataset", "synthetic-tiny", "--data-root", root,
                          "--model", f"{mod}:HeadsConv", "--heads", "2", *FAST, "--out", out],
                         capsys)
    assert rc == 0, err
    ckpt = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=True)
    assert ckpt["model_spec"]["heads"] == 2


def test_predict_where_the_module_is_not_importable_is_one_line(user_module, root, tmp_path,
                                                                monkeypatch, capsys):
    mod, folder = user_module
    out = tmp_path / "run"
    assert run_cli(["train", "--dataset", "synthetic-tiny", "--data-root", root, "--model",
                    f"{mod}:MeanConv", *FAST, "--out", out], capsys)[0] == 0
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(folder)])
    sys.modules.pop(mod, None)
    monkeypatch.chdir(tmp_path)
    rc, _, err = run_cli(["predict", "--checkpoint", out / "checkpoint.pt", "--out",
                          tmp_path / "pred.npy"], capsys)
    assert_one_line(rc, err, f"no module named '{mod}'")
    assert str(out / "checkpoint.pt") in err and not (tmp_path / "pred.npy").exists()


def test_python_api_trains_a_spec_and_a_class(user_module, tmp_path):
    mod, _ = user_module
    data = community_data()
    module = __import__(mod)
    for i, model in enumerate([f"{mod}:MeanConv", module.MeanConv]):
        out = tmp_path / f"run{i}"
        cfg = TrainConfig.of(model=model, epochs=2, hidden=16, fanouts=[5, 5], batch_size=128,
                             device="cpu", threads=1, progress=False, out=str(out), lr=0.01)
        assert cfg.model.model == f"{mod}:MeanConv"  # a class is recorded as its spec
        res = train(cfg, data)
        assert res.val_acc > 0.5  # 4 communities
        model_, _ = load_model(out / "checkpoint.pt")
        assert isinstance(model_, BlockGNN) and isinstance(model_.convs[0], module.MeanConv)
        assert isinstance(model_.convs[0], Conv) and model_.convs[0].in_dim == 8
        pred = predict(out / "checkpoint.pt", data)
        hit = (pred[data.val_idx] == data.label[data.val_idx]).mean()
        assert hit == pytest.approx(res.val_acc, abs=1e-6)


def test_build_model_takes_a_spec_or_a_class(user_module):
    mod, _ = user_module
    module = __import__(mod)
    for name in (f"{mod}:MeanConv", module.MeanConv, f"{mod}:HeadsConv"):
        m = build_model(name, in_dim=8, hidden=16, num_classes=3, num_layers=2, heads=3)
        assert [c.out_dim for c in m.convs] == [16, 3]
    assert MODELS.get(f"{mod}:MeanConv") is MODELS.get(f"{mod}:MeanConv")  # one class
    assert import_conv(f"{mod}:HeadsConv") is module.HeadsConv  # a Conv as it is
    assert build_model(f"{mod}:HeadsConv", 8, 16, 3, 2, heads=3).convs[0].heads == 3


def test_a_class_defined_in_a_function_is_refused():
    class Local(torch.nn.Module):
        pass

    with pytest.raises(ConfigError, match="inside a function"):
        ModelConfig(model=Local)


BAD = {
    "no colon": ("{mod}", "unknown model"),
    "no module": ("no_such_module_xyz:Conv", "no module named 'no_such_module_xyz'"),
    "no class": ("{mod}:Missing", "has no 'Missing'"),
    "not a class": ("{mod}:make_layer", "not a torch.nn.Module subclass"),
    "not a module": ("{mod}:NotAModule", "not a torch.nn.Module subclass"),
    "constructor": ("{mod}:ThreeArgs", "built as ThreeArgs(in_dim, out_dim)"),
    "forward": ("{mod}:OneInput", "layer(block, h_src, h_dst)"),
    "empty class": ("{mod}:", "expected MODULE:CLASS"),
    "import fails": ("{mod}_broken:X", "importing"),
    "unknown option": ("{mod}:ColourConv", "reads options colour"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_spec_is_one_line_exit_2(case, user_module, root, tmp_path, capsys):
    mod, folder = user_module
    (folder / f"{mod}_broken.py").write_text("raise RuntimeError('broken on import')\n")
    spec, match = BAD[case]
    spec = spec.format(mod=mod)
    rc, _, err = run_cli(["train", "--dataset", "synthetic-tiny", "--data-root", root,
                          "--model", spec, *FAST, "--out", tmp_path / "run"], capsys)
    assert_one_line(rc, err, match)
    assert not (tmp_path / "run" / "metrics.json").exists()
    with pytest.raises(ConfigError, match=match.replace("(", r"\(").replace(")", r"\)")):
        ModelConfig(model=spec).validate()
    sys.modules.pop(f"{mod}_broken", None)


def test_spec_errors_are_model_import_errors(user_module):
    mod, _ = user_module
    with pytest.raises(ModelImportError):
        import_conv(f"{mod}:Missing")
    with pytest.raises(ModelImportError, match="expected MODULE:CLASS"):
        import_conv("a:b:c")
