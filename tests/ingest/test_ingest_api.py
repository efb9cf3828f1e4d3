"""The public interface of ``twopgraph.ingest``: one tiny graph in the COO exchange format and
in OGB's binary raw layout (compressed: inflated chunk by chunk), each ingested into a store
holding the same symmetrised graph, labels and splits."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

import twopgraph.ingest as pkg
from twopgraph.errors import GraphFormatError
from twopgraph.ingest import (
    OGB_SPLIT_FILES,
    NpzMember,
    coo_npz,
    ingest,
    is_coo_npz,
    labels_from,
    members,
    ogb_raw,
    source_record,
)
from twopgraph.store import open_store

# 0-1 (twice, and reversed), a self loop on 2, 2-3 and 3-4 in one direction only
EDGES = np.array([[0, 0, 1, 2, 2, 3], [1, 1, 0, 2, 3, 4]])
FEAT = np.arange(10, dtype=np.float32).reshape(5, 2)
LABEL = np.array([0.0, 1.0, np.nan, 1.0, 0.0])  # NaN: unlabelled
SPLIT = {"train_idx": np.array([1, 0]), "val_idx": np.array([3]), "test_idx": np.array([4])}


def test_every_public_name_imports():
    for n in pkg.__all__:
        getattr(pkg, n)


def test_coo_and_ogb_binary_ingest_to_the_same_store(tmp_path):
    coo = tmp_path / "g.npz"
    np.savez(coo, edge_index=EDGES, feat=FEAT, label=LABEL, **SPLIT)
    assert is_coo_npz(coo) and members(coo) == {"edge_index", "feat", "label", *SPLIT}
    assert NpzMember(coo, "edge_index").shape == (2, 6) and NpzMember(coo, "feat").stored

    ogb = tmp_path / "ogbn_tiny"
    (ogb / "raw").mkdir(parents=True)
    np.savez_compressed(ogb / "raw" / "data.npz", edge_index=EDGES, node_feat=FEAT,
                        num_nodes_list=np.array([5]), num_edges_list=np.array([6]))
    np.savez_compressed(ogb / "raw" / "node-label.npz", node_label=LABEL[:, None])
    (ogb / "split" / "kind").mkdir(parents=True)
    for key, stem in OGB_SPLIT_FILES.items():
        with gzip.open(ogb / "split" / "kind" / f"{stem}.csv.gz", "wt") as f:
            f.write("".join(f"{v}\n" for v in SPLIT[key]))

    stores = []
    for raw, files in [(coo_npz(coo), [coo]), (ogb_raw("tiny", ogb, split="kind"), None)]:
        assert (raw.num_nodes, raw.num_edges) == (5, 6)
        src = source_record(files or raw.files, "k")
        d = open_store(ingest(raw, tmp_path / f"store{len(stores)}", source=src))
        assert [d.graph.neighbors(v).tolist() for v in range(5)] == [[1], [0], [3], [2, 4], [3]]
        assert np.array_equal(d.feat, FEAT) and d.label.tolist() == [0, 1, -1, 1, 0]
        assert d.train_idx.tolist() == [0, 1] and d.num_classes == 2
        stores.append(d)
    assert stores[0].fingerprint() == stores[1].fingerprint()


def test_bad_raw_files_are_one_line(tmp_path):
    assert labels_from(np.array([[2.0], [np.nan]]), "x").tolist() == [2, -1]
    with pytest.raises(GraphFormatError, match="vertex 1 is 0.5"):
        labels_from(np.array([1.0, 0.5]), "x")
    bad = tmp_path / "bad.npz"
    np.savez(bad, edge_index=EDGES, feat=FEAT[:4], label=LABEL, **SPLIT)  # 4 rows: 4 vertices
    with pytest.raises(GraphFormatError, match=r"edge 5 \(3 -> 4\) has an id outside") as e:
        ingest(coo_npz(bad), tmp_path / "s", source=None)
    assert "\n" not in str(e.value) and not (tmp_path / "s").exists()
    bad.write_bytes(b"PK not a zip")
    with pytest.raises(GraphFormatError, match="not a readable .npz"):
        members(bad)
