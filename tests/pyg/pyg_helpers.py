"""Builders shared by the tests of ``twopgraph.pyg``: PyG ``Data`` of random directed graphs
and of twopgraph's ``GraphData``, and a plain-Python model of PyG's directional sampling with
full neighbourhoods (what pyg-lib's ``neighbor_sample`` returns for ``num_neighbors=-1``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pyg_data = pytest.importorskip("torch_geometric.data")


def directed_data(n: int = 120, m: int = 700, seed: int = 0, feat: int = 6) -> "pyg_data.Data":
    """A random directed graph with duplicate edges, self loops, isolated nodes and a hub (node
    0 has in-edges from a third of the nodes), node features ``x``, labels ``y``, a node-level
    ``node_w`` (N x 2), and edge-level ``edge_attr`` (E x 3) and ``edge_weight`` (E)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, n - 5, (m,), generator=g)  # the last 5 nodes: no edges
    dst = torch.randint(0, n - 5, (m,), generator=g)
    hub = torch.arange(1, n - 5, 3)
    src = torch.cat([src, hub, src[:40], torch.tensor([7, 7, 7])])
    dst = torch.cat([dst, torch.zeros_like(hub), dst[:40], torch.tensor([7, 7, 9])])
    e = src.numel()
    return pyg_data.Data(x=torch.randn(n, feat, generator=g), edge_index=torch.stack([src, dst]),
                         y=torch.randint(0, 4, (n,), generator=g),
                         node_w=torch.randn(n, 2, generator=g),
                         edge_attr=torch.randn(e, 3, generator=g),
                         edge_weight=torch.rand(e, generator=g))


def from_graphdata(gd) -> "pyg_data.Data":
    """A twopgraph ``GraphData`` as a PyG ``Data``: ``edge_index`` from its CSR (neighbour ->
    vertex), ``x``, ``y`` and boolean ``train_mask`` / ``val_mask`` / ``test_mask``."""
    g = gd.graph
    dst = np.repeat(np.arange(g.num_nodes, dtype=np.int64), np.diff(g.indptr))
    ei = torch.stack([torch.from_numpy(g.indices.astype(np.int64)), torch.from_numpy(dst)])
    masks = {}
    for name, idx in (("train", gd.train_idx), ("val", gd.val_idx), ("test", gd.test_idx)):
        mask = torch.zeros(g.num_nodes, dtype=torch.bool)
        mask[torch.from_numpy(np.asarray(idx, dtype=np.int64))] = True
        masks[f"{name}_mask"] = mask
    return pyg_data.Data(x=torch.from_numpy(np.asarray(gd.feat, dtype=np.float32)),
                         y=torch.from_numpy(np.asarray(gd.label, dtype=np.int64)),
                         edge_index=ei, **masks)


def reference_full(edge_index: torch.Tensor, seeds: list[int], hops: int):
    """PyG's directional sampling of ``seeds`` with every in-edge in every hop, the obvious
    way: ``(n_id, row, col, e_id, num_sampled_nodes, num_sampled_edges)`` as lists. In-edges
    of a node in ``edge_index`` order; a neighbour equal to a repeated seed maps to its first
    copy."""
    src, dst = edge_index.tolist()
    in_edges: dict[int, list[int]] = {}
    for e, v in enumerate(dst):
        in_edges.setdefault(v, []).append(e)
    nodes = list(seeds)
    local: dict[int, int] = {}
    for i, s in enumerate(seeds):
        local.setdefault(s, i)
    rows, cols, eids = [], [], []
    sizes, edge_sizes = [len(seeds)], []
    begin, end = 0, len(seeds)
    for _ in range(hops):
        count = 0
        for i in range(begin, end):
            for e in in_edges.get(nodes[i], []):
                u = src[e]
                if u not in local:
                    local[u] = len(nodes)
                    nodes.append(u)
                rows.append(local[u])
                cols.append(i)
                eids.append(e)
                count += 1
        sizes.append(len(nodes) - end)
        edge_sizes.append(count)
        begin, end = end, len(nodes)
    return nodes, rows, cols, eids, sizes, edge_sizes
