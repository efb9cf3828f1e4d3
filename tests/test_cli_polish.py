"""CLI polish of issue 13: an ``--out`` that already holds a run, ``--partitions`` with a
``--dataset`` of its own, "did you mean" for dataset names, and the smaller CLI items
(``--fanouts -1,-1``, ``--version``, a zero cache budget warns, README links, multi-node
interface variables). Each through ``twopgraph.cli.main``: exit code, the one-line message,
and which files are left in ``--out``."""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

import pytest
from conftest import community_data, run_cli

from twopgraph.errors import ConfigError
from twopgraph.run.outdir import LOCK_NAME, RUN_FILES, RUN_LOGS

REPO = Path(__file__).resolve().parents[1]
FAST = ["--epochs", "1", "--hidden", "16", "--fanouts", "5,5", "--batch-size", "256",
        "--no-progress", "--device", "cpu", "--schedule", "random", "--threads", "1"]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """A data root shared by the module (synthetic-tiny is generated into it once)."""
    return tmp_path_factory.mktemp("data")


def train_argv(root, out, *extra) -> list[str]:
    return ["train", "--dataset", "synthetic-tiny", "--data-root", str(root), *FAST,
            "--out", str(out), *extra]


def one_error_line(rc, out, err) -> str:
    """The single ``twopgraph: error:`` line of a user error (exit 2, nothing on stdout)."""
    assert rc == 2, (rc, out, err)
    assert "Traceback" not in err and out.strip() == "", (out, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("twopgraph: error: "), err
    return lines[0].removeprefix("twopgraph: error: ")


def snapshot(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def finished(root, tmp_path_factory) -> Path:
    """The --out of one finished ``twopgraph train`` (copied by the tests that reuse it)."""
    from twopgraph.cli import main
    out = tmp_path_factory.mktemp("run") / "out"
    assert main(train_argv(root, out)) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted([*RUN_FILES, *RUN_LOGS])
    return out


@pytest.fixture
def old_run(finished, tmp_path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    return out


# -- 1. an --out that already holds a run ---------------------------------------------------------
def test_run_files_are_what_train_writes():
    from twopgraph.run.checkpoint import CHECKPOINT
    from twopgraph.run.records import METRICS
    assert set(RUN_FILES) == {CHECKPOINT, METRICS}


def test_out_holding_a_run_is_refused_and_left_untouched(old_run, root, capsys):
    before = snapshot(old_run)
    line = one_error_line(*run_cli(train_argv(root, old_run), capsys))
    assert line == (f"--out {old_run} already holds a run (metrics.json, checkpoint.pt); give "
                    "--overwrite to replace it, --resume to continue it, or another --out")
    assert snapshot(old_run) == before  # the old run's files, byte for byte; no lock file


@pytest.mark.parametrize("keep", RUN_FILES)
def test_one_run_file_is_enough_to_refuse(old_run, root, capsys, keep):
    for name in (*RUN_FILES, *RUN_LOGS):
        if name != keep:
            (old_run / name).unlink()
    line = one_error_line(*run_cli(train_argv(root, old_run), capsys))
    assert f"already holds a run ({keep})" in line
    assert [p.name for p in old_run.iterdir()] == [keep]


def test_empty_folder_or_other_files_are_fine(root, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, _, err = run_cli(train_argv(root, empty), capsys)
    assert rc == 0, err
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    rc, _, err = run_cli(train_argv(root, other), capsys)
    assert rc == 0, err
    assert sorted(p.name for p in other.iterdir()) == sorted([*RUN_FILES, *RUN_LOGS,
                                                             "notes.txt"])
    assert (other / "notes.txt").read_text() == "mine"


def test_overwrite_replaces_the_old_run(old_run, root, capsys):
    before = snapshot(old_run)
    (old_run / "notes.txt").write_text("mine")
    rc, _, err = run_cli(train_argv(root, old_run, "--overwrite", "--epochs", "2"), capsys)
    assert rc == 0, err
    m = json.loads((old_run / "metrics.json").read_text())
    assert m["status"] == "ok" and len(m["epochs"]) == 2  # the new run's, not the old one's
    assert (old_run / "checkpoint.pt").read_bytes() != before["checkpoint.pt"]
    assert sorted(p.name for p in old_run.iterdir()) == sorted([*RUN_FILES, *RUN_LOGS,
                                                               "notes.txt"])


def test_overwrite_removes_the_old_files_before_a_failing_run(old_run, root, capsys):
    """The old files go once the run owns the folder: a new run that fails (here: its dataset
    does not exist) leaves no metrics.json or checkpoint.pt that look like its own."""
    argv = train_argv(root, old_run, "--overwrite")
    argv[argv.index("synthetic-tiny")] = "no-such-dataset"
    line = one_error_line(*run_cli(argv, capsys))
    assert line.startswith("unknown dataset 'no-such-dataset'")
    assert list(old_run.iterdir()) == []


def test_resume_with_overwrite_is_one_line(old_run, root, capsys):
    before = snapshot(old_run)
    line = one_error_line(*run_cli(train_argv(root, old_run, "--resume", "--overwrite"), capsys))
    assert line.startswith("--resume and --overwrite exclude each other")
    assert snapshot(old_run) == before
    # not even a folder is created for a fresh --out
    fresh = old_run.parent / "fresh"
    one_error_line(*run_cli(train_argv(root, fresh, "--resume", "--overwrite"), capsys))
    assert not fresh.exists()


def test_resume_continues_without_overwrite(old_run, root, capsys):
    rc, _, err = run_cli(train_argv(root, old_run, "--resume", "--epochs", "2"), capsys)
    assert rc == 0, err
    assert len(json.loads((old_run / "metrics.json").read_text())["epochs"]) == 2


def test_python_api_refuses_too(old_run, tmp_path):
    from twopgraph.config import TrainConfig
    from twopgraph.run.train import train
    data = community_data(300, k=3)
    kw = {"epochs": 1, "hidden": 8, "fanouts": [3], "batch_size": 64, "out": str(old_run),
          "device": "cpu", "progress": False, "schedule": "random", "threads": 1}
    before = snapshot(old_run)
    with pytest.raises(ConfigError, match="already holds a run"):
        train(TrainConfig.of(**kw), data=data)
    assert snapshot(old_run) == before
    res = train(TrainConfig.of(**kw, overwrite=True), data=data)
    assert json.loads((old_run / "metrics.json").read_text())["test_acc"] == \
        pytest.approx(res.test_acc)
    assert not (old_run / LOCK_NAME).exists()


# -- 1 and 2 with --partitions ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def part1(root, tmp_path_factory) -> Path:
    """A one-part partition of synthetic-tiny (trains in this process: world size 1)."""
    from twopgraph.cli import main
    folder = tmp_path_factory.mktemp("parts") / "p1"
    assert main(["partition", "--dataset", "synthetic-tiny", "--data-root", str(root),
                 "--num-parts", "1", "--hops", "2", "--out", str(folder)]) == 0
    return folder


def dist_argv(part1, out, *extra) -> list[str]:
    fast = [a if a != "random" else "locality" for a in FAST]
    return ["train", "--partitions", str(part1), *fast, "--out", str(out), *extra]


@pytest.fixture
def no_torchrun(monkeypatch):
    """The ``--nproc`` launcher must refuse before it starts torchrun."""
    from twopgraph.distributed import launch

    def boom(*a, **k):
        raise AssertionError("torchrun was started")
    monkeypatch.setattr(launch, "launch", boom)


def test_partitions_out_holding_a_run_refused_before_torchrun(part1, old_run, capsys,
                                                              no_torchrun):
    before = snapshot(old_run)
    line = one_error_line(*run_cli(dist_argv(part1, old_run, "--nproc", "1"), capsys))
    assert line.startswith(f"--out {old_run} already holds a run (metrics.json, checkpoint.pt)")
    line = one_error_line(*run_cli(dist_argv(part1, old_run, "--nproc", "1", "--resume",
                                             "--overwrite"), capsys))
    assert line.startswith("--resume and --overwrite exclude each other")
    assert snapshot(old_run) == before


def test_partitions_rank_refuses_and_overwrites(part1, old_run, capsys):
    """Under torchrun (here: one process) rank 0 refuses the folder, or replaces its run."""
    before = snapshot(old_run)
    line = one_error_line(*run_cli(dist_argv(part1, old_run), capsys))
    assert "already holds a run (metrics.json, checkpoint.pt)" in line
    assert snapshot(old_run) == before
    rc, _, err = run_cli(dist_argv(part1, old_run, "--overwrite"), capsys)
    assert rc == 0, err
    m = json.loads((old_run / "metrics.json").read_text())
    assert m["distributed"]["world_size"] == 1
    assert sorted(p.name for p in old_run.iterdir()) == sorted([*RUN_FILES, *RUN_LOGS])


def test_partitions_records_the_partitions_dataset(part1, tmp_path, capsys):
    """Without --dataset the partition's dataset is recorded, not the default."""
    out = tmp_path / "out"
    rc, _, err = run_cli(dist_argv(part1, out), capsys)
    assert rc == 0, err
    assert json.loads((out / "metrics.json").read_text())["config"]["dataset"] == \
        "synthetic-tiny"


def test_partitions_with_its_own_dataset_trains(part1, root, tmp_path, capsys):
    out = tmp_path / "out"
    rc, _, err = run_cli(dist_argv(part1, out, "--dataset", "synthetic-tiny", "--data-root",
                                   str(root)), capsys)
    assert rc == 0, err
    assert json.loads((out / "metrics.json").read_text())["config"]["dataset"] == \
        "synthetic-tiny"


@pytest.mark.parametrize("nproc", [["--nproc", "1"], []])
def test_partitions_with_another_dataset_refused(part1, root, tmp_path, capsys, no_torchrun,
                                                 nproc):
    out = tmp_path / "out"
    # the explicit default (synthetic-small) counts as given, in any spelling argparse takes
    for flag in (["--dataset", "synthetic-small"], ["--dataset=synthetic-small"],
                 ["--datas", "synthetic-small"]):
        line = one_error_line(*run_cli(dist_argv(part1, out, *flag, "--data-root", str(root),
                                                 *nproc), capsys))
        assert line.startswith(f"--dataset synthetic-small is not the dataset the partition "
                               f"{part1} was made from (synthetic-tiny: ")
        assert not out.exists()


def test_same_dataset_by_fingerprint_file_or_name(root, part1, tmp_path):
    from twopgraph.datasets import dataset_identity, same_dataset
    from twopgraph.distributed.partition.load import read_meta
    src = read_meta(part1)["source"]
    assert same_dataset(dataset_identity("synthetic-tiny", root), src)
    assert src["path"] is None  # a preset has no file: its store is its one copy
    assert same_dataset(dataset_identity(src["store"], root), src)  # the store folder
    from twopgraph.datasets import load_dataset
    from twopgraph.store.npz import export_npz
    copy = tmp_path / "copy.npz"  # same content in a file: its store has the fingerprint
    export_npz(load_dataset("synthetic-tiny", root, progress=False), copy)
    load_dataset(str(copy), root, progress=False)
    assert same_dataset(dataset_identity(str(copy), root), src)
    # the file by its path (a partition made from a .npz records it)
    assert same_dataset(dataset_identity(str(copy), root), dict(src, fingerprint=None,
                                                                path=str(copy), store=None))
    # not loadable here (another data root): the name decides
    assert same_dataset(dataset_identity("synthetic-tiny", tmp_path / "elsewhere"), src)
    assert not same_dataset(dataset_identity("cora", tmp_path / "elsewhere"), src)
    # a file that is known, with another content than the partition's
    other = tmp_path / "synthetic-tiny.npz"
    community_data(100).save_npz(other)
    assert not same_dataset(dataset_identity(str(other), root), src)


# -- 3. did you mean -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def named_root(tmp_path_factory) -> Path:
    """A data root holding amazon_photo.npz and a store converted from a file outside it."""
    from twopgraph.datasets import load_dataset
    r = tmp_path_factory.mktemp("named")
    community_data(100).save_npz(r / "amazon_photo.npz")
    community_data(100).save_npz(r / "tolokers.npz")
    outside = tmp_path_factory.mktemp("outside") / "tolokers_small.npz"
    community_data(100).save_npz(outside)
    load_dataset(str(outside), r, progress=False)  # -> r/stores/tolokers_small-XXXXXXXX
    return r


def info(capsys, name, root):
    return one_error_line(*run_cli(["info", "--dataset", name, "--data-root", str(root)],
                                   capsys))


def test_did_you_mean_a_npz_in_the_data_root(named_root, capsys):
    line = info(capsys, "amazon_foto", named_root)
    assert line.startswith(f"unknown dataset 'amazon_foto'; did you mean amazon_photo "
                           f"({named_root / 'amazon_photo.npz'})? Known: synthetic-tiny, ")
    assert line.endswith(f"amazon_photo, tolokers, tolokers_small, a path to a .npz file or a "
                         f"store folder (data root: {named_root})")


def test_did_you_mean_presets_ogb_stores_and_files(named_root, capsys):
    assert "; did you mean synthetic-tiny? Known:" in info(capsys, "synthetic-tiyn", named_root)
    assert "; did you mean ogbn-arxiv? Known:" in info(capsys, "ogbn_arxiv", named_root)
    assert "; did you mean amazon_photo (" in info(capsys, "Amazon_Photo", named_root)
    store = next((named_root / "stores").iterdir())
    # a store is named by its file's stem (without the -XXXXXXXX of its source path)
    assert f"; did you mean tolokers_small ({store})? Known:" in \
        info(capsys, "tolokers-small", named_root)
    line = info(capsys, "amazon_fotos.npz", named_root)
    assert line == (f"dataset file not found: amazon_fotos.npz (also looked in {named_root}); "
                    f"did you mean amazon_photo ({named_root / 'amazon_photo.npz'})?")


def test_no_suggestion_when_nothing_is_close(named_root, capsys):
    line = info(capsys, "zzqxw", named_root)
    assert line.startswith("unknown dataset 'zzqxw'; known: synthetic-tiny, ")
    assert "did you mean" not in line


# -- 4. the other CLI items ----------------------------------------------------------------------
def test_negative_fanouts_train_and_version(root, tmp_path, capsys):
    out = tmp_path / "out"
    argv = train_argv(root, out)
    argv[argv.index("5,5")] = "-1,-1"  # `--fanouts -1,-1`, not only `--fanouts=-1,-1`
    rc, stdout, err = run_cli(argv, capsys)
    assert rc == 0, err
    assert json.loads((out / "metrics.json").read_text())["config"]["fanouts"] == [-1, -1]
    rc, stdout, _ = run_cli(["--version"], capsys)
    from twopgraph import __version__
    assert rc == 0 and stdout.strip() == f"twopgraph {__version__}"


def test_cache_policy_without_budget_on_cpu_warns(root, tmp_path, capsys, caplog):
    with caplog.at_level(logging.WARNING, logger="twopgraph"):
        rc, _, err = run_cli(train_argv(root, tmp_path / "out", "--cache-policy", "degree"),
                             capsys)
    assert rc == 0, err
    warned = [r.getMessage() for r in caplog.records if "budget of 0 rows" in r.getMessage()]
    assert warned == [("cache policy degree has a budget of 0 rows on cpu: every row is "
                       "copied; give --cache-ratio or --cache-gb to build a cache")]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="twopgraph"):  # a ratio: a cache, no warning
        assert run_cli(train_argv(root, tmp_path / "o2", "--cache-policy", "degree",
                                  "--cache-ratio", "0.2"), capsys)[0] == 0
    assert not [r for r in caplog.records if "budget of 0 rows" in r.getMessage()]


def _links(path: Path) -> list[str]:
    """The relative link targets of a markdown file, outside code."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text)
            if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def test_readme_and_docs_link_only_files_in_the_repository():
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    seen = 0
    for doc in docs:
        for target in _links(doc):
            file = (doc.parent / target.split("#")[0]).resolve()
            assert file.is_file() and REPO in file.parents, f"{doc.name}: {target}"
            seen += 1
    assert seen >= 3
    assert "DESIGN.md" not in (REPO / "README.md").read_text()


def test_multi_node_interface_variables_documented():
    text = (REPO / "README.md").read_text()
    assert "GLOO_SOCKET_IFNAME" in text and "NCCL_SOCKET_IFNAME" in text


def test_bench_sampler_prints_a_formatted_record(root, capsys):
    """No raw floats or Python dicts (the formatting itself: tests/bench/test_bench_output.py)."""
    rc, out, err = run_cli(["bench", "sampler", "--dataset", "synthetic-tiny", "--data-root",
                            str(root), "--fanouts", "5,5", "--batch-size", "256", "--epochs",
                            "1", "--warmup", "0", "--schedule", "locality"], capsys)
    assert rc == 0, err
    assert "{" not in out and "[" not in out and "locality.num_clusters" in out, out
