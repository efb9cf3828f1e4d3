"""Planetoid raw files for tests: a small random graph written in exactly the layout of
https://github.com/kimiyoung/planetoid/tree/master/data (``ind.NAME.{x,tx,allx,y,ty,ally}``:
pickled scipy sparse matrices / one-hot arrays; ``ind.NAME.graph``: a pickled
``defaultdict(list)`` of adjacency lists; ``ind.NAME.test.index``: ids, one per line, in no
order), and the arrays twopgraph should load from them."""

from __future__ import annotations

import pickle
from collections import defaultdict
from pathlib import Path

import numpy as np
import scipy.sparse as sp


def write_planetoid_raw(folder: Path, name: str = "cora", *, num_train_per_class: int = 3,
                        num_classes: int = 4, num_other: int = 560, num_test: int = 40,
                        gaps: int = 0, num_features: int = 12, seed: int = 0) -> dict:
    """Write dataset ``name``'s eight raw files into ``folder`` (created) and return what
    loading them must give: ``feat`` (N x F float32), ``label`` (N), ``train_idx``,
    ``val_idx``, ``test_idx`` (sorted), ``edges`` (the set of undirected pairs ``(u, v)``, u <
    v), ``num_classes``. ``gaps`` test ids are left out of ``test.index`` (CiteSeer's isolated
    vertices): those vertices get zero features and label 0."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    n_train = num_train_per_class * num_classes
    n_allx = n_train + num_other  # x's rows are allx's first rows
    span = num_test + gaps
    n = n_allx + span
    label = rng.integers(0, num_classes, n)
    label[:n_train] = np.repeat(np.arange(num_classes), num_train_per_class)
    feat = (rng.random((n, num_features)) < 0.3).astype(np.float32) * rng.integers(
        1, 4, (n, num_features)).astype(np.float32)
    ids = np.arange(n_allx, n)
    missing = rng.choice(ids[1:-1], size=gaps, replace=False) if gaps else np.zeros(0, int)
    test_ids = np.setdiff1d(ids, missing)
    feat[missing] = 0.0
    label[missing] = 0
    test_order = rng.permutation(test_ids)  # test.index is in no particular order

    def onehot(rows):
        out = np.zeros((len(rows), num_classes), dtype=np.int32)
        out[np.arange(len(rows)), label[rows]] = 1
        return out

    # tx's row i is the vertex test.index names on line i (PyG: x = [allx; tx], padded at
    # the gaps, then x[test_index] = x[sorted(test_index)])
    tx_feat, ty = feat[test_order], onehot(test_order)
    arrays = {
        "x": sp.csr_matrix(feat[:n_train]),
        "tx": sp.csr_matrix(tx_feat),
        "allx": sp.csr_matrix(feat[:n_allx]),
        "y": onehot(np.arange(n_train)),
        "ty": ty,
        "ally": onehot(np.arange(n_allx)),
    }
    edges = set()
    graph = defaultdict(list)
    for v in range(n):
        graph[v]  # every vertex a key, isolated ones too (as in the real files)
    for _ in range(3 * n):
        u, v = (int(a) for a in rng.integers(0, n, 2))
        if u in missing or v in missing:
            continue
        graph[u].append(v)  # one direction only for some: the loader symmetrises
        if rng.random() < 0.8:
            graph[v].append(u)
        if u != v:
            edges.add((min(u, v), max(u, v)))
    graph[0].append(0)  # a self loop and a duplicate, as the real files have
    if graph[1]:
        graph[1].append(graph[1][0])
    for key, obj in (*arrays.items(), ("graph", graph)):
        with open(folder / f"ind.{name}.{key}", "wb") as f:
            pickle.dump(obj, f, protocol=2)
    (folder / f"ind.{name}.test.index").write_text("".join(f"{i}\n" for i in test_order))
    return {"feat": feat, "label": label.astype(np.int64),
            "train_idx": np.arange(n_train), "val_idx": np.arange(n_train, n_train + 500),
            "test_idx": np.sort(test_ids), "edges": edges, "num_classes": num_classes}
