"""The public interface of ``twopgraph.store``: a store written, opened memory-mapped and equal
to its data; converted from and exported to ``.npz``; renumbered; a file changed in place
refused."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import community_data

import twopgraph.store as pkg
from twopgraph.graph import GraphData
from twopgraph.store import (
    STORE_VERSION,
    StoreChanged,
    convert_npz,
    disk_bytes,
    export_npz,
    files_changed,
    is_store,
    open_store,
    permuted_store,
    read_store_meta,
    write_store,
)

KEYS = ("feat", "label", "train_idx", "val_idx", "test_idx")


def same(a: GraphData, b: GraphData) -> None:
    assert np.array_equal(a.graph.indptr, b.graph.indptr)
    assert np.array_equal(a.graph.indices, b.graph.indices)
    for k in KEYS:
        assert np.array_equal(getattr(a, k), getattr(b, k)), k


def test_every_public_name_imports():
    for n in pkg.__all__:
        getattr(pkg, n)


def test_write_open_convert_export_and_renumber(tmp_path):
    data = community_data(n=120, f=6, seed=2)
    folder = write_store(data, tmp_path / "s")
    meta = read_store_meta(folder)
    assert is_store(folder) and not is_store(tmp_path) and meta["version"] == STORE_VERSION
    opened = open_store(folder)
    assert isinstance(opened.feat, np.memmap) and not opened.feat.flags.writeable
    same(opened, data)
    assert opened.fingerprint() == data.fingerprint() and opened.store == folder.resolve()
    assert disk_bytes(folder) == sum(r["bytes"] for r in meta["arrays"].values()) > \
        data.feat.nbytes
    assert files_changed(folder, meta) == []

    converted = open_store(convert_npz(data.save_npz(tmp_path / "d.npz"), tmp_path / "c"))
    assert converted.fingerprint() == data.fingerprint()
    back = GraphData.load_npz(export_npz(converted, tmp_path / "e.npz"))
    same(back, data)

    perm = np.random.default_rng(0).permutation(data.num_nodes)
    renumbered = permuted_store(data, perm, tmp_path / "p")
    want = data.permute(perm)
    same(renumbered, want)
    assert np.array_equal(renumbered.node_ids, perm)


def test_a_file_changed_in_place_is_refused(tmp_path):
    folder = write_store(community_data(n=80, seed=1), tmp_path / "s")
    feat = np.load(folder / "feat.npy", mmap_mode="r+")
    feat[3, 0] += 1.0
    feat.flush()
    del feat
    assert files_changed(folder, read_store_meta(folder)) == ["feat"]
    with pytest.raises(StoreChanged, match="feat.npy changed"):
        open_store(folder)
