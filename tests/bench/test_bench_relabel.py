"""``twopgraph bench relabel``: the sampler's relabelling states (batch-sized table, N-sized
map, the sampler's settle policy, the sampler itself) on the same batches of synthetic-tiny;
the records carry the harness's keys and the states' bytes."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest

from twopgraph.bench.relabel import expand
from twopgraph.cli import main
from twopgraph.graph.data import CSRGraph
from twopgraph.sampler import NeighborSampler
from twopgraph.sampler.neighbor import NodeMap, RelabelTable

REQUIRED = ("benchmark", "params", "figures", "spread", "repeat", "machine", "versions",
            "commit")


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["bench", "relabel", "--graph", "synthetic-tiny", "--data-root", str(root),
                   "--fanouts", "5,5", "--batch-size", "256", "--repeat", "2", "--json"])
    assert rc == 0
    return {r["params"]["state"]: r for r in map(json.loads, out.getvalue().splitlines())}


def test_every_state_is_a_record_with_the_harness_keys(records):
    assert set(records) == {"table", "map", "settled", "sampler"}
    for r in records.values():
        assert set(REQUIRED) <= set(r), r.keys()
        assert r["benchmark"] == "relabel" and r["repeat"] == 2
        assert r["params"]["graph"] == "synthetic-tiny" and r["params"]["fanouts"] == "5,5"
        f = r["figures"]
        assert f["epoch_s"] > 0 and f["batches"] == 4  # 1000 training vertices / 256
        assert 0 < f["inputs_share"] <= 1 and f["largest_batch"] >= 256


def test_state_bytes_follow_the_settle_policy(records):
    f = {k: r["figures"] for k, r in records.items()}
    n = f["map"]["num_nodes"]
    assert f["map"]["vs_map"] == 1.0 and f["map"]["state_bytes"] == 4 * n  # int32 map
    assert f["settled"]["state_bytes"] == min(f["table"]["state_bytes"], 4 * n)
    assert f["sampler"]["state_bytes"] == f["settled"]["state_bytes"]
    assert f["table"]["state_vs_map"] == pytest.approx(f["table"]["state_bytes"] / (4 * n))


def test_expand_draws_the_samplers_batches_through_either_state():
    rng = np.random.default_rng(0)
    g = CSRGraph.from_edges(rng.integers(0, 500, 4000), rng.integers(0, 500, 4000), 500)
    sampler = NeighborSampler(g, [4, 3], seed=7)
    seeds = np.array([3, 1, 4, 15, 9, 26], dtype=np.int64)
    mb = sampler.sample(seeds, key=5, parallel=False)
    for state in (RelabelTable(), NodeMap(500)):
        nodes, raw = expand(g, sampler.fanouts, 7, seeds, 5, state)
        np.testing.assert_array_equal(nodes, mb.input_nodes.numpy())
        for (offsets, local), b in zip(reversed(raw), mb.blocks):
            np.testing.assert_array_equal(offsets, b.indptr.numpy())
            np.testing.assert_array_equal(local, b.indices.numpy())
        again, _ = expand(g, sampler.fanouts, 7, seeds, 5, state)  # the state was cleared
        np.testing.assert_array_equal(again, nodes)
