"""``twopgraph bench relabel``: the neighbour sampler's relabelling state -- a batch-sized hash
table against an N-sized map, and the policy the sampler keeps between them -- timed on the
same batches in one run.

Every sampled neighbour is turned into a batch-local id by a per-thread state
(:mod:`twopgraph.sampler.neighbor`): a :class:`~twopgraph.sampler.neighbor.RelabelTable` (an
open-addressing hash table sized to the batch, about 40 bytes per batch vertex) or a
:class:`~twopgraph.sampler.neighbor.NodeMap` (an N-sized int32 map, 4 N bytes). The sampler
starts with the table and keeps the map instead once the table would be larger
(:func:`~twopgraph.sampler.neighbor.settled`): the state is min(4 N, ~40 B per batch vertex).
So on graphs whose batches reach a large part of the graph the sampler runs on the map, and
comparing the sampler against a map baseline compares the map with itself; the rows here
hold each state fixed instead:

* ``table``: the hash table throughout (never settled): what O(batch) memory costs in time;
* ``map``: the N-sized map throughout;
* ``settled``: the table, settled after every batch as the sampler does;
* ``sampler``: :meth:`NeighborSampler.sample <twopgraph.sampler.NeighborSampler.sample>`
  itself (``parallel=False``), blocks and degrees included: the reference the first three
  are checked against (the same ``input_nodes`` and block indices on the first three
  batches) and the whole call's time.

The first three expand the batches by the sampler's steps
(:func:`~twopgraph.sampler.kernels.sample_neighbors_serial` per hop with the sampler's
per-hop keys, the state's ``relabel``/``clear``) without building the blocks. Each repeat:
the check (which also compiles and warms every state), then one epoch of the random schedule
(``--max-batches``: its first batches) per row on one thread (the serial kernels the loader's
sampling workers use), the rows' order rotated by one from repeat to repeat.

Rows: ``state``. Figures: ``epoch_s``, ``vs_map`` (epoch over the map's; below 1 = faster
than the map), ``state_bytes`` (the row's relabelling state after the epoch; the sampler's
is the ``settled`` row's), ``state_vs_map`` (over the map's bytes), ``batches``,
``inputs_per_batch``, ``largest_batch`` (input vertices of the largest batch),
``inputs_share`` (``largest_batch`` over N: the table, 40-80 bytes per batch vertex,
outgrows the map's 4 bytes per vertex somewhere between a twentieth and a tenth of N).

Example::

    twopgraph bench relabel --graph synthetic-products --repeat 5
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import TYPE_CHECKING

from twopgraph.bench.harness import BENCHMARKS, Benchmark, Context, Row
from twopgraph.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

    from twopgraph.graph.data import CSRGraph
    from twopgraph.sampler.neighbor import NodeMap, RelabelTable

log = logging.getLogger("twopgraph")

STATES = ("table", "map", "settled", "sampler")
#: batches checked against the sampler (and warm-up) in every repeat
CHECKED = 3


@BENCHMARKS.register("relabel")
class RelabelBenchmark(Benchmark):
    """The sampler's relabelling state: batch-sized hash table vs N-sized map vs the policy
    the sampler keeps (table until it would outgrow the map), one-thread sampling epochs on
    the same batches, and each state's bytes.

    Rows: state. Figures: epoch_s, vs_map, state_bytes, state_vs_map, inputs_per_batch,
    largest_batch, inputs_share."""

    help = "the sampler's relabelling state: batch-sized hash table vs N-sized map"
    columns = ("epoch_s", "vs_map", "state_bytes", "state_vs_map", "batches",
               "inputs_per_batch", "inputs_share")

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--fanouts", default="15,10,5", help="(default: 15,10,5)")
        p.add_argument("--batch-size", type=int, default=1024, help="(default: 1024)")
        p.add_argument("--max-batches", type=int, default=0,
                       help="batches per timed epoch, the schedule's first (default: 0 = "
                            "the whole epoch)")

    def check(self, a: argparse.Namespace) -> None:
        from twopgraph.core.fanouts import parse_fanouts
        a._fanouts = parse_fanouts(a.fanouts)
        if a.batch_size < 1 or a.max_batches < 0:
            raise ConfigError("need --batch-size >= 1 and --max-batches >= 0")

    def measure(self, a: argparse.Namespace, ctx: Context) -> list[Row]:
        import numpy as np

        from twopgraph.locality import RandomScheduler
        from twopgraph.sampler import NeighborSampler
        from twopgraph.sampler.neighbor import NodeMap, RelabelTable, settled
        data = ctx.data()
        g, n = data.graph, data.num_nodes
        batches = list(RandomScheduler(data.train_idx, a.batch_size, seed=0).batches(0))
        if a.max_batches:
            batches = batches[:a.max_batches]
        if not batches:
            raise ConfigError(f"{ctx.graph_name} has no training vertices to sample from")
        seeds = [np.ascontiguousarray(b, dtype=np.int64) for b in batches]
        sampler = NeighborSampler(g, a._fanouts, seed=0)
        states = {"table": RelabelTable(), "map": NodeMap(n), "settled": RelabelTable()}

        def own(state: str, i: int, s: np.ndarray) -> tuple[np.ndarray, list]:
            """Batch ``i`` expanded through the row ``state``'s relabelling state."""
            out = expand(g, sampler.fanouts, 0, s, i, states[state])
            if state == "settled":  # what the sampler does after every batch
                states[state] = settled(states[state], n)
            return out

        def run(state: str, i: int, s: np.ndarray) -> np.ndarray:
            """Batch ``i``'s input vertices, sampled by the row ``state``."""
            if state == "sampler":
                return sampler.sample(s, key=i, parallel=False).input_nodes.numpy()
            return own(state, i, s)[0]

        for i, s in enumerate(seeds[:CHECKED]):  # the same batches; warm-up of every state
            mb = sampler.sample(s, key=i, parallel=False)
            for state in ("table", "map", "settled"):
                nodes, raw = own(state, i, s)
                same = np.array_equal(nodes, mb.input_nodes.numpy()) and all(
                    np.array_equal(offsets, b.indptr.numpy())
                    and np.array_equal(local, b.indices.numpy())
                    for (offsets, local), b in zip(reversed(raw), mb.blocks))
                if not same:
                    raise AssertionError(f"bench relabel: the {state} state sampled other "
                                         f"batches than NeighborSampler (batch {i})")
        order = STATES[ctx.repeat % len(STATES):] + STATES[:ctx.repeat % len(STATES)]
        epoch: dict[str, float] = {}
        sizes: list[int] = []
        for state in order:
            log.info("bench relabel: %s, %d batches", state, len(seeds))
            t = time.perf_counter()
            out = [run(state, i, s).shape[0] for i, s in enumerate(seeds)]
            epoch[state] = time.perf_counter() - t
            if state == "map":
                sizes = out
        map_bytes = NodeMap.nbytes_for(n)
        state_bytes = {k: int(v.nbytes) for k, v in states.items()}
        state_bytes["sampler"] = state_bytes["settled"]
        rows = []
        for state in STATES:
            rows.append(Row({"state": state}, {
                "epoch_s": epoch[state], "vs_map": epoch[state] / max(epoch["map"], 1e-12),
                "state_bytes": state_bytes[state],
                "state_vs_map": state_bytes[state] / max(map_bytes, 1),
                "batches": len(seeds), "inputs_per_batch": float(np.mean(sizes)),
                "largest_batch": int(max(sizes)), "inputs_share": max(sizes) / n,
                "num_nodes": int(n), "num_edges": int(g.num_edges)}))
        return rows


def expand(g: CSRGraph, fanouts: list[int], seed: int, seeds: np.ndarray, key: int,
           state: RelabelTable | NodeMap) -> tuple[np.ndarray, list[tuple[np.ndarray,
                                                                         np.ndarray]]]:
    """The sampler's expansion of ``seeds`` (unique global ids, int64) relabelled through
    ``state``, without building blocks: ``(input vertices (global ids, int64; the seeds
    first), per hop from the seeds outward (offsets, local src ids))``. The same batches as
    :meth:`NeighborSampler.sample <twopgraph.sampler.NeighborSampler.sample>` with ``seed``
    and ``key`` and ``parallel=False``: per hop,
    :func:`~twopgraph.sampler.kernels.sample_neighbors_serial` with the key
    ``mix_key(seed, key, hop)``, then ``state.relabel``; ``state.clear`` at the end."""
    import numpy as np

    from twopgraph.core.rng import mix_key
    from twopgraph.sampler import kernels
    nodes = seeds
    raw = []
    count = 0
    done = False
    try:
        _, count, _ = state.relabel(seeds, 0, 0)  # unique seeds: local ids 0..k-1
        for hop, fanout in enumerate(reversed(fanouts)):
            offsets, nbrs = kernels.sample_neighbors_serial(
                g.indptr, g.indices, nodes, fanout, np.uint64(mix_key(seed, key, hop)))
            num_dst = nodes.shape[0]
            local, count, frontier = state.relabel(nbrs, num_dst, count)
            if count > num_dst:
                nodes = np.concatenate([nodes, frontier[:count - num_dst]])
            raw.append((offsets, local))
        done = True
    finally:
        state.clear(count, nodes if done else None)
    return nodes, raw
