"""Datasets by name (issue 22, frictions): ``--dataset NAME`` finds ``<root>/NAME.npz``, then
``NAME.npz`` in the folders of ``$TWOPGRAPH_DATASET_PATH``, then the store converted earlier
from a ``NAME.npz`` given by path (after ``--dataset ../shared/datasets/cora.npz``,
``--dataset cora`` said "did you mean datasets/stores/cora-24ba61a7?"); ``twopgraph datasets``
lists them; NodeLoader's docstring example runs on a fresh checkout."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import community_data, run_cli

from twopgraph.datasets import (
    DATASET_PATH_ENV,
    dataset_identity,
    list_datasets,
    load_dataset,
    named_dataset,
)
from twopgraph.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_dataset_path(monkeypatch):
    monkeypatch.delenv(DATASET_PATH_ENV, raising=False)


def _npz(folder: Path, name: str, seed: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    data = community_data(n=300, seed=seed)
    data.save_npz(folder / f"{name}.npz")
    return folder / f"{name}.npz"


def test_converted_file_is_named_by_its_stem(tmp_path):
    root = tmp_path / "root"
    src = _npz(tmp_path / "shared", "mygraph")
    first = load_dataset(str(src), data_root=root, progress=False)
    again = load_dataset("mygraph", data_root=root, progress=False)
    assert again.fingerprint() == first.fingerprint() and again.store == first.store
    assert again.name == "mygraph"
    assert named_dataset("mygraph", root) == ("npz", src)  # read through its file
    ident = dataset_identity("mygraph", root)
    assert ident["path"] == str(src.resolve()) and ident["fingerprint"] == first.fingerprint()
    # the file gone: the store is the dataset
    store = first.store
    del first, again
    src.unlink()
    kind, folder = named_dataset("mygraph", root)
    assert kind == "store" and Path(folder) == Path(store)
    gone = load_dataset("mygraph", data_root=root, progress=False)
    assert Path(gone.store) == Path(store)
    ident = dataset_identity("mygraph", root)
    assert ident["store"] == str(Path(store).resolve()) and ident["fingerprint"]
    row = [d for d in list_datasets(root) if d["name"] == "mygraph"]
    assert len(row) == 1 and row[0]["kind"] == "store" and "is gone" in row[0]["description"]


def test_dataset_path_env_folders_in_order(tmp_path, monkeypatch):
    root, a, b = tmp_path / "root", tmp_path / "a", tmp_path / "b"
    in_b = _npz(b, "g1", seed=1)
    _npz(a, "g2", seed=2)
    in_b2 = _npz(b, "g2", seed=3)  # shadowed by a's
    monkeypatch.setenv(DATASET_PATH_ENV, f"{a}{os.pathsep}{os.pathsep}{b}")
    assert named_dataset("g1", root) == ("npz", in_b)
    assert named_dataset("g2", root) == ("npz", a / "g2.npz")
    d = load_dataset("g1", data_root=root, progress=False)
    assert d.name == "g1" and d.num_nodes == 300
    assert (root / "stores").is_dir()  # the store goes to the data root, not to the folder
    assert not list(b.glob("stores"))
    # a file in the data root wins over the path; `NAME.npz` is searched there too
    in_root = _npz(root, "g1", seed=4)
    assert named_dataset("g1", root) == ("npz", in_root)
    assert load_dataset("g2.npz", data_root=root, progress=False).num_nodes == 300
    rows = {d["name"]: d for d in list_datasets(root)}
    assert rows["g1"]["path"] == str(in_root) and "data root" in rows["g1"]["description"]
    assert rows["g2"]["path"] == str(a / "g2.npz")
    assert DATASET_PATH_ENV in rows["g2"]["description"]
    assert str(in_b2) not in {d["path"] for d in list_datasets(root)}


def test_store_folders_by_name(tmp_path, monkeypatch):
    """A store folder in the data root or in a folder of the path is named by its folder."""
    from twopgraph.store.writer import write_store
    root, shared = tmp_path / "root", tmp_path / "shared"
    data = community_data(n=300, seed=7)
    write_store(data, root / "mystore")
    write_store(data, shared / "sharedstore")
    monkeypatch.setenv(DATASET_PATH_ENV, str(shared))
    assert named_dataset("mystore", root) == ("store", root / "mystore")
    assert named_dataset("sharedstore", root) == ("store", shared / "sharedstore")
    d = load_dataset("sharedstore", data_root=root, progress=False)
    assert d.fingerprint() == data.fingerprint() and d.name == "sharedstore"
    assert load_dataset("mystore", data_root=root).num_nodes == 300
    with pytest.raises(ConfigError, match="store-dtype applies to datasets twopgraph converts"):
        load_dataset("mystore", data_root=root, store_dtype="float16")
    ident = dataset_identity("sharedstore", root)
    assert ident["store"] == str((shared / "sharedstore").resolve())
    assert ident["fingerprint"] == data.fingerprint()
    rows = {d["name"]: d for d in list_datasets(root)}
    assert rows["mystore"]["kind"] == rows["sharedstore"]["kind"] == "store"
    assert "stores" not in rows and "clusters" not in rows


def test_two_files_of_one_name_are_ambiguous(tmp_path, capsys):
    root = tmp_path / "root"
    one, two = _npz(tmp_path / "x", "g", seed=1), _npz(tmp_path / "y", "g", seed=2)
    for src in (one, two):
        load_dataset(str(src), data_root=root, progress=False)
    with pytest.raises(ConfigError, match="dataset name 'g' is ambiguous") as err:
        load_dataset("g", data_root=root)
    assert str(one) in str(err.value) and str(two) in str(err.value)
    rc, out, errtext = run_cli(["info", "--dataset", "g", "--data-root", root], capsys)
    assert rc == 2 and len(errtext.strip().splitlines()) == 1 and "ambiguous" in errtext
    rows = [d for d in list_datasets(root) if d["name"] == "g"]
    assert len(rows) == 1 and rows[0]["description"].startswith("ambiguous")


def test_cli_lists_names_and_suggests_them(tmp_path, capsys, monkeypatch):
    root = tmp_path / "root"
    src = _npz(tmp_path / "elsewhere", "karate")
    rc, _, _ = run_cli(["info", "--dataset", src, "--data-root", root], capsys)
    assert rc == 0
    shared = tmp_path / "shared"
    _npz(shared, "citation")
    monkeypatch.setenv(DATASET_PATH_ENV, str(shared))
    rc, out, _ = run_cli(["datasets", "--data-root", root], capsys)
    assert rc == 0
    assert f"dataset path (${DATASET_PATH_ENV}): {shared}" in out
    assert re.search(r"^karate +store +yes +store converted from ", out, re.M), out
    assert re.search(r"^citation +npz +yes +\.npz file in ", out, re.M), out
    rc, out, _ = run_cli(["info", "--dataset", "karate", "--data-root", root, "--json"], capsys)
    assert rc == 0 and '"num_nodes": 300' in out
    rc, out, err = run_cli(["info", "--dataset", "karat", "--data-root", root], capsys)
    assert rc == 2 and "did you mean karate (" in err and "Known: " in err
    assert "karate" in err.split("Known: ")[1] and "citation" in err.split("Known: ")[1]


def test_nodeloader_docstring_example_runs_on_a_fresh_checkout(tmp_path):
    """The example's lines, run as written in an empty folder (a fresh checkout's data root is
    ./datasets with nothing in it)."""
    import twopgraph.pipeline.nodeloader as nl
    lines = [ln.split("#")[0].strip()[4:] for ln in nl.__doc__.splitlines()
             if ln.strip().startswith(">>> ")]
    assert any("load_dataset(" in ln for ln in lines)
    code = "\n".join(lines + ["    n = mb.labels.shape[0]", "    break",
                              "assert n > 0 and data.num_nodes > 0"])
    code = code.replace("loss = F.cross_entropy(model(mb.blocks, mb.features), mb.labels)",
                        "pass")
    env = {k: v for k, v in os.environ.items() if k not in ("TWOPGRAPH_DATA",
                                                            DATASET_PATH_ENV)}
    env["PYTHONPATH"] = str(REPO)
    res = subprocess.run([sys.executable, "-c", "from twopgraph import NodeLoader\n" + code],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]


def test_shared_cora_by_name(tmp_path, monkeypatch):
    """The issue's repro with the real file: converted once by path, then named."""
    from conftest import shared_datasets_dir
    src = shared_datasets_dir() / "cora.npz"
    if not src.is_file():
        pytest.skip(f"{src} not available")
    root = tmp_path / "root"
    load_dataset(str(src), data_root=root, progress=False)
    d = load_dataset("cora", data_root=root, progress=False)
    assert d.num_nodes == 2708 and d.name == "cora"
    monkeypatch.setenv(DATASET_PATH_ENV, str(src.parent))
    assert load_dataset("citeseer", data_root=root, progress=False).num_nodes == 3327
