"""The public interface of ``twopgraph.datasets``: a synthetic preset generated into its store
once, a ``.npz`` found by plain name (in the data root and on ``$TWOPGRAPH_DATASET_PATH``) and
converted into a store (float32 and float16), the catalogue, "did you mean"."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import community_data

import twopgraph.datasets as pkg
from twopgraph.datasets import (
    DATA_ROOT_ENV,
    DATASET_PATH_ENV,
    STORES_DIR,
    dataset_identity,
    dataset_path,
    dataset_search_path,
    list_datasets,
    load_dataset,
    named_dataset,
    resolve_data_root,
    store_dtype_of,
    store_folder,
)
from twopgraph.errors import ConfigError


def test_every_public_name_imports():
    for n in pkg.__all__:
        getattr(pkg, n)


def test_preset_generated_once_into_its_store(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_ROOT_ENV, str(tmp_path))
    assert resolve_data_root() == tmp_path and resolve_data_root("elsewhere").name == "elsewhere"
    data = load_dataset("synthetic-tiny", progress=False)
    assert (data.num_nodes, data.num_features, data.num_classes) == (2000, 16, 5)
    assert data.store == dataset_path("synthetic-tiny").resolve()
    assert data.store.parent == (tmp_path / STORES_DIR).resolve()
    assert dataset_identity("synthetic-tiny")["fingerprint"] == data.fingerprint()
    entry = {d["name"]: d for d in list_datasets()}["synthetic-tiny"]
    assert entry["kind"] == "synthetic" and entry["cached"] is True
    inode = (data.store / "feat.npy").stat().st_ino
    again = load_dataset("synthetic-tiny", progress=False)  # the store as it is: no generation
    assert again.fingerprint() == data.fingerprint() and again.store == data.store
    assert (again.store / "feat.npy").stat().st_ino == inode


def test_npz_by_plain_name_and_search_path(tmp_path, monkeypatch):
    root, shelf = tmp_path / "root", tmp_path / "shelf"
    shelf.mkdir()
    d = community_data(n=100, seed=4)
    path = d.save_npz(root / "mygraph.npz")
    d.save_npz(shelf / "other.npz")
    monkeypatch.setenv(DATASET_PATH_ENV, str(shelf))
    assert dataset_search_path() == [shelf]
    assert named_dataset("mygraph", root) == ("npz", path)
    data = load_dataset("mygraph", data_root=root, progress=False)
    assert data.fingerprint() == d.fingerprint() and data.store == store_folder(path, root)
    assert np.array_equal(data.feat, d.feat)
    assert load_dataset("other", data_root=root, progress=False).fingerprint() == d.fingerprint()
    kinds = {e["name"]: e["kind"] for e in list_datasets(root)}
    assert kinds["mygraph"] == kinds["other"] == "npz"

    half = load_dataset("mygraph", data_root=root, progress=False, store_dtype="float16")
    assert half.feat.dtype == np.float16 and half.store.name.endswith("-float16")
    assert store_dtype_of(half) == "float16" and store_dtype_of(data) == "float32"
    np.testing.assert_allclose(half.feat, d.feat, rtol=1e-3, atol=1e-3)
    with pytest.raises(ConfigError, match="did you mean mygraph"):
        load_dataset("mygrap", data_root=root)
