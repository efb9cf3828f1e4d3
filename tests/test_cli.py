"""The ``twopgraph`` command: train / bench sampler / datasets / info, and its error contract
(bad input -> exit 2, one ``twopgraph: error:`` line on stderr, no traceback, no output)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import random_graph, run_cli

from twopgraph.cli import main

TRAIN_FAST = ["--epochs", "1", "--hidden", "16", "--fanouts", "5,5", "--batch-size", "256",
              "--no-progress", "--device", "cpu"]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """A data root shared by the module (synthetic-tiny is generated into it once)."""
    return tmp_path_factory.mktemp("data")




def assert_user_error(rc, out, err):
    assert rc == 2, (rc, out, err)
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("twopgraph: error:"), err
    assert out.strip() == "", out


def json_lines(text: str) -> list[dict]:
    return [json.loads(ln) for ln in text.splitlines() if ln.strip().startswith("{")]


# -- train -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained(root, tmp_path_factory):
    """One successful ``twopgraph train`` on synthetic-tiny: (rc, stdout, stderr, out)."""
    import contextlib
    import io
    out = tmp_path_factory.mktemp("train") / "out"
    so, se = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(so), contextlib.redirect_stderr(se):
        rc = main(["train", "--dataset", "synthetic-tiny", *TRAIN_FAST, "--out", str(out),
                   "--data-root", str(root)])
    return rc, so.getvalue(), se.getvalue(), out


def test_train_ok(trained):
    rc, out_text, err, out = trained
    assert rc == 0, err
    lines = json_lines(out_text)
    assert len(lines) == 1, out_text
    res = lines[0]
    assert 0.0 <= res["val_acc"] <= 1.0 and 0.0 <= res["test_acc"] <= 1.0
    assert Path(res["metrics"]) == out / "metrics.json"
    m = json.loads((out / "metrics.json").read_text())
    assert m["val_acc"] == pytest.approx(res["val_acc"])
    assert m["test_acc"] == pytest.approx(res["test_acc"])
    assert len(m["epochs"]) == 1
    assert m["config"]["hidden"] == 16 and m["config"]["fanouts"] == [5, 5]
    assert (out / "checkpoint.pt").is_file()
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]
    assert "Traceback" not in err


def test_resume_other_config_exit_2_files_unchanged(trained, root, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(trained[3], out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    for extra in (["--hidden", "32"], ["--model", "gcn"]):
        argv = ["train", "--dataset", "synthetic-tiny", *TRAIN_FAST, *extra, "--epochs", "2",
                "--resume", "--out", out, "--data-root", root]
        assert_user_error(*run_cli(argv, capsys))
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_resume_same_config_continues(trained, root, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(trained[3], out)
    argv = ["train", "--dataset", "synthetic-tiny", *TRAIN_FAST, "--epochs", "2", "--resume",
            "--out", out, "--data-root", root]
    rc, o, err = run_cli(argv, capsys)
    assert rc == 0, err
    assert len(json_lines(o)) == 1
    m = json.loads((out / "metrics.json").read_text())
    assert [e["epoch"] for e in m["epochs"]] == [0, 1]


def test_resume_without_checkpoint_exit_2(root, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["train", "--dataset", "synthetic-tiny", *TRAIN_FAST, "--resume", "--out", out,
            "--data-root", root]
    assert_user_error(*run_cli(argv, capsys))
    assert not out.exists()


# -- bad input: exit 2, one line, no output folder ---------------------------------------------------
def _npz_arrays(n: int = 50) -> dict:
    g = random_graph(n=n, m=200, seed=1)
    rng = np.random.default_rng(0)
    perm = rng.permutation(n)
    return dict(indptr=g.indptr, indices=g.indices,
                feat=rng.normal(size=(n, 4)).astype(np.float32),
                label=rng.integers(0, 3, n).astype(np.int64),
                train_idx=np.sort(perm[:25]), val_idx=np.sort(perm[25:40]),
                test_idx=np.sort(perm[40:]))


def _bad_npz(kind: str, path: Path) -> Path:
    arr = _npz_arrays()
    if kind == "garbage":
        path.write_bytes(b"\x00\x01garbage, not a zip file at all" * 10)
        return path
    if kind == "missing_key":
        del arr["label"]
    elif kind == "index_out_of_range":
        arr["indices"] = arr["indices"].copy()
        arr["indices"][3] = 50 + 7
    elif kind == "label_length":
        arr["label"] = arr["label"][:-1]
    elif kind == "split_out_of_range":
        arr["test_idx"] = np.append(arr["test_idx"], 1000)
    np.savez(path, **arr)
    return path


def test_good_npz_trains(tmp_path, capsys):
    path = tmp_path / "good.npz"
    np.savez(path, **_npz_arrays())
    out = tmp_path / "out"
    rc, o, err = run_cli(["train", "--dataset", path, *TRAIN_FAST, "--fanouts", "3",
                          "--batch-size", "8", "--out", out, "--data-root", tmp_path], capsys)
    assert rc == 0, err
    assert len(json_lines(o)) == 1
    assert (out / "metrics.json").is_file()


@pytest.mark.parametrize("kind", ["missing_key", "index_out_of_range", "label_length",
                                  "split_out_of_range", "garbage"])
def test_bad_npz_exit_2(kind, tmp_path, capsys):
    path = _bad_npz(kind, tmp_path / f"{kind}.npz")
    out = tmp_path / "out"
    argv = ["train", "--dataset", path, *TRAIN_FAST, "--out", out, "--data-root", tmp_path]
    assert_user_error(*run_cli(argv, capsys))
    assert not out.exists()
    # info reads the same file and fails the same way
    assert_user_error(*run_cli(["info", "--dataset", path, "--data-root", tmp_path], capsys))


BAD_TRAIN_ARGS = {
    "unknown_dataset": ["--dataset", "no-such-dataset"],
    "missing_npz": ["--dataset", "nowhere/absent.npz"],
    "batch_size_0": ["--batch-size", "0"],
    "batch_size_neg": ["--batch-size", "-5"],
    "fanouts_x": ["--fanouts", "1,x"],
    "fanouts_0": ["--fanouts", "0"],
    "fanouts_empty": ["--fanouts", ""],
    "fanouts_neg": ["--fanouts", "5,-2"],
    "epochs_0": ["--epochs", "0"],
    "hidden_0": ["--hidden", "0"],
    "unknown_model": ["--model", "gin"],
    "unknown_schedule": ["--schedule", "nope"],
    "unknown_device": ["--device", "tpu"],
    "prefetch_neg": ["--prefetch", "-1"],
}


@pytest.mark.parametrize("name", list(BAD_TRAIN_ARGS))
def test_bad_train_args_exit_2(name, root, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["train", "--dataset", "synthetic-tiny", *TRAIN_FAST, "--out", out,
            "--data-root", root, *BAD_TRAIN_ARGS[name]]
    assert_user_error(*run_cli(argv, capsys))
    assert not out.exists()


@pytest.mark.parametrize("extra", [["--batch-size", "ten"], ["--epochs", "1.5"],
                                   ["--no-such-flag"]])
def test_argparse_errors_exit_2_one_line(extra, root, tmp_path, capsys):
    """Usage errors caught by argparse itself: exit 2, one line, no traceback, no output.

    (argparse names the sub-command: ``twopgraph train: error: ...``.)"""
    out = tmp_path / "out"
    rc, o, err = run_cli(["train", "--dataset", "synthetic-tiny", *TRAIN_FAST, "--out", out,
                          "--data-root", root, *extra], capsys)
    assert rc == 2 and "Traceback" not in err and o == ""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("twopgraph") and "error:" in lines[0], err
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_device_cuda_without_cuda_exit_2(root, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["train", "--dataset", "synthetic-tiny", *TRAIN_FAST, "--device", "cuda",
            "--out", out, "--data-root", root]
    rc, o, err = run_cli(argv, capsys)
    assert_user_error(rc, o, err)
    assert "cuda" in err.lower()
    assert not out.exists()


@pytest.mark.parametrize("num_classes", [np.int64(2), np.array([3, 4])])
def test_npz_bad_num_classes_exit_2(num_classes, tmp_path, capsys):
    arr = _npz_arrays()  # labels 0..2
    arr["num_classes"] = num_classes
    path = tmp_path / "nc.npz"
    np.savez(path, **arr)
    out = tmp_path / "out"
    argv = ["train", "--dataset", path, *TRAIN_FAST, "--fanouts", "3", "--batch-size", "8",
            "--out", out, "--data-root", tmp_path]
    assert_user_error(*run_cli(argv, capsys))
    assert not out.exists()


@pytest.mark.parametrize("extra", [["--out", "FILE"], ["--weight-decay", "nan"]])
def test_bad_out_or_weight_decay_exit_2(extra, root, tmp_path, capsys):
    (tmp_path / "FILE").write_text("x")
    extra = [str(tmp_path / e) if e == "FILE" else e for e in extra]
    argv = ["train", "--dataset", "synthetic-tiny", *TRAIN_FAST, "--out", tmp_path / "out",
            "--data-root", root, *extra]
    assert_user_error(*run_cli(argv, capsys))


# -- bench sampler ---------------------------------------------------------------------------------
def test_bench_sampler_json(root, capsys):
    rc, o, err = run_cli(["bench", "sampler", "--dataset", "synthetic-tiny", "--fanouts", "5,5",
                          "--batch-size", "256", "--json", "--epochs", "1", "--warmup", "0",
                          "--data-root", root], capsys)
    assert rc == 0, err
    lines = [ln for ln in o.splitlines() if ln.strip()]
    assert len(lines) == 1, o
    res = json.loads(lines[0])
    for k in ("seeds_per_s", "sample_epoch_s", "input_nodes_per_batch", "feature_rows"):
        assert isinstance(res[k], (int, float)) and res[k] > 0, k
    # synthetic-tiny: 2000 vertices, half of them training seeds -> 4 batches of <= 256
    assert res["num_seeds"] == 1000
    assert res["num_batches"] == 4
    assert res["feature_rows"] == pytest.approx(res["input_nodes_per_batch"] * res["num_batches"])
    # every batch's inputs hold its seeds and at most all vertices
    assert res["num_seeds"] <= res["feature_rows"] <= 2000 * res["num_batches"]
    assert res["fanouts"] == [5, 5]


@pytest.mark.parametrize("extra", [["--fanouts", "1,x"], ["--epochs", "0"],
                                   ["--batch-size", "0"], ["--dataset", "no-such-dataset"]])
def test_bench_sampler_bad_input_exit_2(extra, root, capsys):
    argv = ["bench", "sampler", "--dataset", "synthetic-tiny", "--fanouts", "5,5", "--json",
            "--epochs", "1", "--warmup", "0", "--data-root", root, *extra]
    assert_user_error(*run_cli(argv, capsys))


# -- datasets / info -------------------------------------------------------------------------------
def test_datasets_lists_presets_and_ogb(tmp_path, capsys):
    rc, o, err = run_cli(["datasets", "--data-root", tmp_path / "empty"], capsys)
    assert rc == 0, err
    names = {ln.split()[0] for ln in o.splitlines() if ln.strip()}
    assert {"synthetic-tiny", "synthetic-small", "ogbn-products", "ogbn-arxiv"} <= names
    assert not (tmp_path / "empty").exists()  # listing creates nothing


def test_info_json(root, capsys):
    rc, o, err = run_cli(["info", "--dataset", "synthetic-tiny", "--json", "--data-root", root],
                         capsys)
    assert rc == 0, err
    lines = [ln for ln in o.splitlines() if ln.strip()]
    assert len(lines) == 1, o
    info = json.loads(lines[0])
    assert info["num_nodes"] == 2000
    assert info["num_edges_undirected"] > 0 and info["num_features"] == 16
    assert info["train"] + info["val"] + info["test"] <= 2000
    # the preset's store, its one copy (no .npz)
    assert Path(info["path"]).resolve() == Path(info["store"])
    assert Path(info["store"]).parent == Path(root).resolve() / "stores"
    assert (Path(info["path"]) / "feat.npy").is_file()
    assert not list(Path(root).glob("synthetic-tiny*.npz"))
    # after generation, `datasets` reports it as cached
    rc, o, _ = run_cli(["datasets", "--data-root", root], capsys)
    row = next(ln for ln in o.splitlines() if ln.split()[:1] == ["synthetic-tiny"])
    assert row.split()[2] == "yes"


def test_info_requires_dataset(capsys):
    rc, o, err = run_cli(["info"], capsys)
    assert rc == 2 and "Traceback" not in err


# -- real processes ---------------------------------------------------------------------------------
def _run_module(args, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONWARNINGS="ignore", TWOPGRAPH_DATA=str(cwd / "envroot"))
    return subprocess.run([sys.executable, "-m", "twopgraph", *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120)


def test_subprocess_missing_npz_exit_2(tmp_path):
    p = _run_module(["train", "--dataset", "/nonexistent.npz", "--out", tmp_path / "out",
                     "--no-progress"], tmp_path)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("twopgraph: error:")
    assert "/nonexistent.npz" in lines[0]
    assert p.stdout.strip() == ""
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "runs").exists()


def test_subprocess_train_ok_stdout_is_one_json_line(root, tmp_path):
    p = _run_module(["train", "--dataset", "synthetic-tiny", *TRAIN_FAST, "--out",
                     tmp_path / "out", "--data-root", root], tmp_path)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stdout  # logs go to stderr, stdout is machine-readable
    res = json.loads(lines[0])
    assert {"val_acc", "test_acc"} <= set(res)
    assert (tmp_path / "out" / "metrics.json").is_file()


# -- generated parsers ---------------------------------------------------------------------------
def test_help_shows_the_defaults_the_code_uses(capsys):
    from twopgraph.config import TrainConfig
    rc, out, _ = run_cli(["train", "--help"], capsys)
    assert rc == 0
    text = " ".join(out[out.index("options:"):].split())  # the options' help, not the usage
    assert "CPU = 0" in text and "CPU all" not in text  # the cache budget default on CPU
    defaults = TrainConfig().flat()
    for flag, key in (("--batch-size", "batch_size"), ("--eval-batch-edges", "eval_batch_edges")):
        i = text.index(flag + " ")
        assert f"(default: {defaults[key]})" in text[i:i + 400], flag
    # the size-based defaults show their rule (twopgraph.config.SIZE_DEFAULTS)
    from twopgraph.config import SIZE_DEFAULTS
    small, large = SIZE_DEFAULTS["small"], SIZE_DEFAULTS["large"]
    for key in ("epochs", "lr", "fanouts"):
        assert defaults[key] is None
        shown = [",".join(map(str, v)) if isinstance(v, list) else f"{v:g}"
                 for v in (small[key], large[key])]
        i = text.index(f"--{key} ")
        assert (f"(default: by graph size: {shown[0]} on graphs of < 50,000 vertices, else "
                f"{shown[1]};") in text[i:i + 400], key


HELP_VERBS = (["train"], ["predict"], ["partition"], ["bench", "sampler"], ["bench", "cache"],
              ["datasets"], ["info"])


def test_help_imports_neither_torch_nor_numba_and_lists_choices():
    """``--help`` is fast: building every verb's parser and printing its help imports no
    torch and no numba (they took 2-3 s of every ``--help``); the choices of a flag are shown
    in its usage, those of a registry read from the registry."""
    code = ("import contextlib, io, json, sys\n"
            "from twopgraph.cli import main\n"
            f"helps = {{}}\n"
            f"for verb in {[v for v in HELP_VERBS]!r}:\n"
            "    out = io.StringIO()\n"
            "    with contextlib.redirect_stdout(out):\n"
            "        try:\n"
            "            main(verb + ['--help'])\n"
            "        except SystemExit as e:\n"
            "            assert e.code == 0, e.code\n"
            "    helps[' '.join(verb)] = out.getvalue()\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numba'))\n"
            "print(json.dumps({'heavy': heavy[:5], 'helps': helps}))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["heavy"] == []
    from twopgraph.core.protocols import CACHE_POLICIES, MODELS, SCHEDULERS
    usage = " ".join(got["helps"]["train"].split())
    def choices(text: str, flag: str) -> list[str]:  # registration order depends on imports
        found = re.search(re.escape(flag) + r" \{([^}]*)\}", text)
        assert found, flag
        return found.group(1).split(",")

    assert sorted(choices(usage, "--model")) == sorted(MODELS.names())
    assert {"sage", "gcn"} <= set(MODELS.names())
    assert choices(usage, "--schedule")[0] == "auto"
    assert sorted(choices(usage, "--schedule")[1:]) == sorted(SCHEDULERS.names())
    assert choices(usage, "--cache-policy")[0] == "auto"  # layer on CUDA, none on the CPU
    assert sorted(choices(usage, "--cache-policy")[1:]) == sorted(CACHE_POLICIES.names())
    for flag in ("--store-dtype {auto,float32,float16}", "--amp {off,bf16}",
                 "--feat-dtype {float32,float16,bfloat16}", "--select {best-val,last}",
                 "--eval-scope {auto,all,scored}", "--cluster-method {auto,metis,coarsen,lp}"):
        assert flag in usage, flag
    bench = " ".join(got["helps"]["bench cache"].split())
    assert sorted(choices(bench, "--policies")) == sorted(CACHE_POLICIES.names())
    assert "}[,...]" in bench
    assert "--representation {auto,local,global}" in " ".join(got["helps"]["partition"].split())


def test_feat_dtype_names_are_the_cache_types():
    from twopgraph.cache.feature_cache import FEAT_DTYPES
    from twopgraph.config import FEAT_DTYPE_NAMES
    assert tuple(FEAT_DTYPES) == FEAT_DTYPE_NAMES


def test_negative_fanouts_parse_and_version(root, capsys):
    from twopgraph.bench.harness import join_values
    from twopgraph.cli import build_parser
    ns = build_parser().parse_args(join_values(["train", "--fanouts", "-1,-1"]))
    assert ns.fanouts == "-1,-1"
    rc, out, _ = run_cli(["--version"], capsys)
    assert rc == 0 and out.startswith("twopgraph ")


def test_bench_cache_without_matplotlib_writes_the_csv(root, tmp_path):
    """matplotlib is an optional extra: without it, the CSV and one line, no traceback."""
    out = tmp_path / "bc"
    code = ("import sys; sys.modules['matplotlib'] = None\n"  # import matplotlib -> ImportError
            "from twopgraph.cli import main\n"
            f"sys.exit(main(['bench', 'cache', '--dataset', 'synthetic-tiny', '--data-root', "
            f"{str(root)!r}, '--fanouts', '5,5', '--ratios', '0.1', '--policies', 'none,layer', "
            f"'--out', {str(out)!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert (out / "cache.csv").is_file() and not (out / "cache.png").exists()
    notes = [ln for ln in r.stderr.splitlines() if "matplotlib" in ln]
    assert len(notes) == 1 and "cache.png" in notes[0]


@pytest.mark.parametrize("extra", [["--epoch", "-1"], ["--out", "FILE"], ["--ratios", "0.1,2"],
                                   ["--policies", "none,lru"], ["--schedules", "random,x"]])
def test_bench_cache_bad_input_exit_2(extra, root, tmp_path, capsys):
    """Issue 14 item 7: `bench cache --out <existing file>` / `--epoch -1` were tracebacks."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    extra = [str(afile) if e == "FILE" else e for e in extra]
    rc, out, err = run_cli(["bench", "cache", "--dataset", "synthetic-tiny", "--data-root", root,
                            "--fanouts", "5,5", "--ratios", "0.1", *extra], capsys)
    assert_user_error(rc, out, err)
    assert afile.read_text() == "x"
