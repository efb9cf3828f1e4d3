#!/usr/bin/env python
"""Sampling with the batch-sized relabelling table vs the N-sized map it replaced, same run.

    .venv/bin/python scripts/bench_relabel.py --datasets synthetic-small,../shared/datasets/cora.npz

``NeighborSampler`` relabels each batch's vertices through :class:`RelabelTable` (a hash table
sized to the batch, O(batch) memory per sampling thread), switching to an N-sized map once
the table would be larger than 8 N bytes (so on graphs whose batches reach a large part of
the graph both columns end up using the map). The baseline, ``MapSampler`` below,
is the same sampler with the former N-sized int64 map (``kernels.relabel`` /
``kernels.reset_map``: 8 N bytes per sampling thread). Both sample the same batches (checked:
identical ``input_nodes`` and blocks); each timed pass is one epoch of the random schedule on
one thread (the serial kernels the loader's sampling workers use), alternating A B A B.
Reported per dataset: median seconds per epoch of each, the ratio table/map (below 1 = the
table is faster), and the relabelling state's bytes (table after the epoch vs 8 N).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from twopgraph.core.minibatch import Block, MiniBatch  # noqa: E402
from twopgraph.core.rng import mix_key  # noqa: E402
from twopgraph.datasets import load_dataset  # noqa: E402
from twopgraph.locality import RandomScheduler
from twopgraph.runtime.jit import configure_threading  # noqa: E402
from twopgraph.sampler import (
    NeighborSampler,  # noqa: E402
    kernels,  # noqa: E402
)


class MapSampler(NeighborSampler):
    """The baseline: relabelling through an N-sized map (the implementation before)."""

    def _sample(self, seeds, key, parallel=True):
        g = self.graph
        node_map = getattr(self._tls, "node_map", None)
        if node_map is None:
            node_map = self._tls.node_map = np.full(g.num_nodes, -1, dtype=np.int64)
        nodes = seeds
        node_map[seeds] = np.arange(seeds.shape[0], dtype=np.int64)
        raw = []
        try:
            for hop, fanout in enumerate(reversed(self.fanouts)):
                hop_key = np.uint64(mix_key(self.seed, key, hop))
                offsets, nbrs = kernels.sample_neighbors_serial(g.indptr, g.indices, nodes,
                                                                fanout, hop_key)
                frontier = np.empty(nbrs.shape[0], dtype=np.int64)
                local, num_new = kernels.relabel(nbrs, node_map, nodes.shape[0], frontier)
                num_dst = nodes.shape[0]
                if num_new:
                    nodes = np.concatenate([nodes, frontier[:num_new]])
                raw.append((nodes.shape[0], num_dst, offsets, local))
        finally:
            kernels.reset_map_serial(node_map, nodes)
        deg = torch.from_numpy(self._deg[nodes])
        blocks = [Block(s, d, torch.from_numpy(o), torch.from_numpy(loc), deg[:s], deg[:d])
                  for s, d, o, loc in reversed(raw)]
        return MiniBatch(seeds=torch.from_numpy(seeds), input_nodes=torch.from_numpy(nodes),
                         blocks=blocks)


def epoch(sampler, batches) -> float:
    t = time.perf_counter()
    for i, seeds in enumerate(batches):
        sampler.sample(seeds, key=i, parallel=False)
    return time.perf_counter() - t


def run(name: str, a) -> dict:
    data = load_dataset(name, data_root=a.data_root, progress=False)
    fanouts = [int(x) for x in a.fanouts.split(",")]
    batches = list(RandomScheduler(data.train_idx, a.batch_size, seed=0).batches(0))
    table, nmap = (cls(data.graph, fanouts, seed=0) for cls in (NeighborSampler, MapSampler))
    for i, seeds in enumerate(batches[:3]):  # same batches, and JIT warm-up
        x, y = table.sample(seeds, key=i, parallel=False), nmap.sample(seeds, key=i,
                                                                        parallel=False)
        assert torch.equal(x.input_nodes, y.input_nodes)
        assert all(torch.equal(p.indices, q.indices) for p, q in zip(x.blocks, y.blocks))
    ta, tb = [], []
    for _ in range(a.repeats):
        ta.append(epoch(table, batches))
        tb.append(epoch(nmap, batches))
    ratios = [x / y for x, y in zip(ta, tb)]
    return {"dataset": data.name, "num_nodes": data.num_nodes,
            "num_edges": data.graph.num_edges, "batches": len(batches),
            "table_s": statistics.median(ta), "map_s": statistics.median(tb),
            "ratio": statistics.median(ratios), "ratio_min": min(ratios),
            "ratio_max": max(ratios), "table_bytes": table._table().nbytes,
            "map_bytes": 8 * data.num_nodes}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default="synthetic-small")
    p.add_argument("--data-root", default=None)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=5, help="timed epochs of each (A B A B)")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    configure_threading()
    rows = [run(d, a) for d in a.datasets.split(",")]
    print(f"{'dataset':<22} {'N':>9} {'batches':>7} {'table s':>8} {'map s':>8} "
          f"{'table/map':>9} {'(min-max)':>13} {'table MiB':>9} {'map MiB':>8}")
    for r in rows:
        print(f"{r['dataset']:<22} {r['num_nodes']:>9,} {r['batches']:>7} {r['table_s']:>8.3f} "
              f"{r['map_s']:>8.3f} {r['ratio']:>9.3f} "
              f"{r['ratio_min']:>6.3f}-{r['ratio_max']:<6.3f} "
              f"{r['table_bytes'] / 2**20:>9.2f} {r['map_bytes'] / 2**20:>8.2f}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
