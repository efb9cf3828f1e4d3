"""``--dataset cora | citeseer | pubmed``: the Planetoid raw files (written here by
:func:`planetoid_files.write_planetoid_raw`, in exactly their published layout) in
``DATA_ROOT/planetoid/<name>/raw`` load as PyG's ``Planetoid`` reads them, once into a store;
a user's own file of that name still wins; missing files are downloaded (a stand-in server
here), and a failed download is one line naming the URL and the folder (exit 2)."""

from __future__ import annotations

import io
import json
import pickle
import socket
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from conftest import community_data, run_cli
from planetoid_files import write_planetoid_raw

from twopgraph.datasets import (
    DATASET_PATH_ENV,
    PLANETOID_NET_TIMEOUT_S,
    dataset_identity,
    list_datasets,
    load_dataset,
    planetoid_raw_folder,
)
from twopgraph.errors import GraphFormatError, TwopgraphError
from twopgraph.ingest import PLANETOID_FILES, read_planetoid

FAST = ["--epochs", "2", "--hidden", "16", "--fanouts", "5,5", "--batch-size", "64",
        "--no-progress", "--device", "cpu", "--threads", "1"]


@pytest.fixture(autouse=True)
def _no_dataset_path(monkeypatch):
    """Only the data root of each test (the shared folder has a cora.npz of its own)."""
    monkeypatch.delenv(DATASET_PATH_ENV, raising=False)
    monkeypatch.delenv("TWOPGRAPH_DATA", raising=False)


def _edge_set(data) -> set:
    g = data.graph
    src = np.repeat(np.arange(data.num_nodes), np.diff(g.indptr))
    return {(min(a, b), max(a, b)) for a, b in zip(src.tolist(), g.indices.tolist())}


def _check_loaded(data, want: dict) -> None:
    n = want["feat"].shape[0]
    assert data.num_nodes == n and data.feat.shape == want["feat"].shape
    assert data.feat.dtype == np.float32 and data.num_classes == want["num_classes"]
    assert np.array_equal(np.asarray(data.feat), want["feat"])
    assert np.array_equal(np.asarray(data.label), want["label"])
    for key in ("train_idx", "val_idx", "test_idx"):
        assert np.array_equal(np.asarray(getattr(data, key)), want[key]), key
    assert data.val_idx.shape[0] == 500 and data.train_idx.shape[0] == 3 * 4
    g = data.graph
    src = np.repeat(np.arange(n), np.diff(g.indptr))
    pairs = set(zip(src.tolist(), np.asarray(g.indices).tolist()))
    assert all((v, u) in pairs for u, v in pairs)  # undirected
    assert not any(u == v for u, v in pairs)  # no self loop
    assert len(pairs) == g.num_edges  # no duplicate
    assert _edge_set(data) == want["edges"]


def test_cora_loads_from_the_raw_files_once(tmp_path, monkeypatch):
    want = write_planetoid_raw(planetoid_raw_folder("cora", tmp_path), "cora")
    data = load_dataset("cora", tmp_path, progress=False)
    _check_loaded(data, want)
    assert data.name == "cora" and data.store is not None
    assert data.store.parent == tmp_path / "stores" and data.store.name.startswith("cora-")

    from twopgraph.datasets import planetoid

    def no_read(*a, **k):
        raise AssertionError("the raw files were read again")

    monkeypatch.setattr(planetoid, "read_planetoid", no_read)
    again = load_dataset("cora", tmp_path, progress=False)  # the store, as it was
    assert again.store == data.store
    _check_loaded(again, want)
    assert dataset_identity("cora", tmp_path)["store"] == str(data.store.resolve())


def test_changed_raw_files_are_read_again(tmp_path):
    raw = planetoid_raw_folder("cora", tmp_path)
    write_planetoid_raw(raw, "cora", seed=0)
    load_dataset("cora", tmp_path, progress=False)
    want = write_planetoid_raw(raw, "cora", seed=1, num_features=7)
    data = load_dataset("cora", tmp_path, progress=False)
    _check_loaded(data, want)


def test_citeseer_test_ids_with_gaps_are_padded_as_pyg_does(tmp_path):
    want = write_planetoid_raw(planetoid_raw_folder("citeseer", tmp_path), "citeseer", gaps=5)
    data = load_dataset("citeseer", tmp_path, progress=False)
    _check_loaded(data, want)
    n_allx = 12 + 560
    gaps = np.setdiff1d(np.arange(n_allx, data.num_nodes), data.test_idx)
    assert gaps.shape == (5,) and data.test_idx.shape == (40,)
    assert not np.asarray(data.feat)[gaps].any() and not np.asarray(data.label)[gaps].any()
    assert data.graph.degrees()[gaps].sum() == 0  # isolated, as CiteSeer's are


@pytest.mark.parametrize("gaps", [0, 5])
def test_the_same_arrays_as_pygs_reader(tmp_path, gaps):
    pyg = pytest.importorskip("torch_geometric.io.planetoid")
    name = "citeseer" if gaps else "cora"
    write_planetoid_raw(tmp_path, name, gaps=gaps, seed=3)
    ref = pyg.read_planetoid_data(str(tmp_path), name)
    data = read_planetoid(tmp_path, name)
    assert np.array_equal(ref.x.numpy(), data.feat)
    assert np.array_equal(ref.y.numpy(), data.label)
    for mask, ids in (("train_mask", data.train_idx), ("val_mask", data.val_idx),
                      ("test_mask", data.test_idx)):
        assert np.array_equal(np.flatnonzero(getattr(ref, mask).numpy()), ids), mask
    ei = ref.edge_index.numpy()  # PyG keeps one-way edges: ours is its undirected closure
    assert {(min(a, b), max(a, b)) for a, b in ei.T.tolist()} == _edge_set(data)


def test_a_users_own_file_of_that_name_wins(tmp_path, monkeypatch):
    write_planetoid_raw(planetoid_raw_folder("cora", tmp_path), "cora")
    mine = community_data(n=300)
    shared = tmp_path / "shared"
    shared.mkdir()
    mine.save_npz(shared / "cora.npz")
    monkeypatch.setenv(DATASET_PATH_ENV, str(shared))  # $TWOPGRAPH_DATASET_PATH before it
    assert load_dataset("cora", tmp_path, progress=False).num_nodes == 300
    rows = {r["name"]: r for r in list_datasets(tmp_path)}
    assert rows["cora"]["kind"] == "npz" and rows["citeseer"]["kind"] == "planetoid"
    monkeypatch.delenv(DATASET_PATH_ENV)  # the store converted from it is the user's too
    assert load_dataset("cora", tmp_path, progress=False).num_nodes == 300
    root = tmp_path / "other"
    write_planetoid_raw(planetoid_raw_folder("cora", root), "cora")
    assert load_dataset("cora", root, progress=False).num_nodes == 612
    community_data(n=200).save_npz(root / "cora.npz")  # the data root's first of all
    assert load_dataset("cora", root, progress=False).num_nodes == 200
    assert {r["name"]: r["kind"] for r in list_datasets(root)}["cora"] == "npz"


def test_cli_trains_predicts_and_lists_cora(tmp_path, capsys):
    write_planetoid_raw(planetoid_raw_folder("cora", tmp_path / "data"), "cora")
    root, out = tmp_path / "data", tmp_path / "run"
    rc, stdout, err = run_cli(["datasets", "--data-root", root], capsys)
    assert rc == 0, err
    lines = {ln.split()[0]: ln for ln in stdout.splitlines()[3:]}
    assert lines["cora"].split()[1:3] == ["planetoid", "no"]
    assert "not read yet" in lines["cora"]
    assert "downloaded from https://github.com/kimiyoung/planetoid" in lines["pubmed"]
    rc, stdout, err = run_cli(["train", "--dataset", "cora", "--data-root", root, *FAST,
                               "--out", out], capsys)
    assert rc == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert m["status"] == "ok" and len(m["epochs"]) == 2 and m["config"]["dataset"] == "cora"
    rc, stdout, err = run_cli(["predict", "--checkpoint", out / "checkpoint.pt", "--out",
                               tmp_path / "pred.npy"], capsys)
    assert rc == 0, err
    assert json.loads(stdout)["rows"] == 612 and json.loads(stdout)["same_data"] is True
    rc, stdout, err = run_cli(["datasets", "--data-root", root], capsys)
    lines = {ln.split()[0]: ln for ln in stdout.splitlines()[3:]}
    assert lines["cora"].split()[1:3] == ["planetoid", "yes"]
    rc, stdout, err = run_cli(["info", "--dataset", "cora", "--data-root", root, "--json"],
                              capsys)
    assert rc == 0, err
    info = json.loads(stdout)
    assert info["num_nodes"] == 612 and info["path"].endswith("ind.cora.graph")


class _Served:
    """A stand-in for ``urllib.request.urlopen``: serves the files of ``folder`` by name,
    records the URLs and timeouts it was called with."""

    def __init__(self, folder: Path):
        self.folder, self.calls = folder, []

    def __call__(self, url, timeout=None):
        self.calls.append((url, timeout))
        path = self.folder / url.rsplit("/", 1)[1]
        if not path.is_file():
            raise urllib.error.HTTPError(url, 404, "Not Found", {}, None)
        return io.BytesIO(path.read_bytes())


def test_missing_files_are_downloaded(tmp_path, monkeypatch):
    want = write_planetoid_raw(tmp_path / "server", "pubmed")
    served = _Served(tmp_path / "server")
    monkeypatch.setattr(urllib.request, "urlopen", served)
    raw = planetoid_raw_folder("pubmed", tmp_path / "data")
    raw.mkdir(parents=True)
    (raw / "ind.pubmed.x").write_bytes((tmp_path / "server" / "ind.pubmed.x").read_bytes())
    data = load_dataset("pubmed", tmp_path / "data", progress=False)
    _check_loaded(data, want)
    assert len(served.calls) == len(PLANETOID_FILES) - 1  # the one in place is kept
    assert all(url.startswith("https://github.com/kimiyoung/planetoid/raw/master/data/ind."
                              "pubmed.") and t == PLANETOID_NET_TIMEOUT_S
               for url, t in served.calls)
    assert sorted(p.name for p in raw.iterdir()) == sorted(f"ind.pubmed.{s}"
                                                           for s in PLANETOID_FILES)


@pytest.mark.parametrize("failure", ["no network", "timeout", "not found"])
def test_a_failed_download_is_one_line_exit_2(failure, tmp_path, monkeypatch, capsys):
    def fail(url, timeout=None):
        if failure == "no network":
            raise urllib.error.URLError(socket.gaierror(-2, "Name or service not known"))
        if failure == "timeout":
            raise TimeoutError("timed out")
        raise urllib.error.HTTPError(url, 404, "Not Found", {}, None)

    monkeypatch.setattr(urllib.request, "urlopen", fail)
    root = tmp_path / "data"
    rc, _, err = run_cli(["train", "--dataset", "citeseer", "--data-root", root, *FAST,
                          "--out", tmp_path / "run"], capsys)
    assert rc == 2 and "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    raw = planetoid_raw_folder("citeseer", root)
    url = "https://github.com/kimiyoung/planetoid/raw/master/data/ind.citeseer.x"
    assert url in lines[0] and str(raw) in lines[0], lines[0]
    assert not list(raw.glob(".*.part"))  # no half-written file left


def test_a_foreign_pickle_is_refused_without_running_it(tmp_path):
    write_planetoid_raw(tmp_path, "cora")

    class Evil:
        def __reduce__(self):
            return (Path.touch, (tmp_path / "pwned",))

    with open(tmp_path / "ind.cora.graph", "wb") as f:
        pickle.dump(Evil(), f, protocol=2)
    with pytest.raises(GraphFormatError, match="ind.cora.graph: not a Planetoid file"):
        read_planetoid(tmp_path, "cora")
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("damage", ["missing", "truncated", "test ids"])
def test_damaged_raw_files_are_one_line(damage, tmp_path):
    raw = planetoid_raw_folder("cora", tmp_path)
    write_planetoid_raw(raw, "cora")
    if damage == "missing":
        (raw / "ind.cora.ty").unlink()
    elif damage == "truncated":
        (raw / "ind.cora.allx").write_bytes((raw / "ind.cora.allx").read_bytes()[:50])
    else:
        (raw / "ind.cora.test.index").write_text("3\n4\n")
    with pytest.raises(TwopgraphError) as e:
        load_dataset("cora", tmp_path, progress=False) if damage != "missing" else \
            read_planetoid(raw, "cora")
    assert "\n" not in str(e.value) and "ind.cora" in str(e.value)
