"""The public interface of ``twopgraph.distributed`` without a process group: torchrun's
environment detected, the launch command, and a 2-part self-dependence partition written and
loaded back (each part holds what its training vertices' sampling reaches), sampled by the
rank's sampler with no remote request, its steps fixed.

The partition itself is the interface of ``twopgraph.distributed.partition`` (a package of
its own: ``twopgraph.distributed`` does not re-export ``partition_selfdep`` / ``load_part``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import community_data

import twopgraph.distributed as pkg
import twopgraph.distributed.partition as partition_pkg
from twopgraph.distributed import (
    DistEnv,
    FixedSteps,
    PartSampler,
    detect,
    rank_device,
    torchrun_command,
)
from twopgraph.distributed.partition import load_part, partition_selfdep, read_meta
from twopgraph.errors import ConfigError
from twopgraph.locality import RandomScheduler


def test_every_public_name_imports():
    for mod in (pkg, partition_pkg):
        for n in mod.__all__:
            getattr(mod, n)


def test_environment_and_launch_command():
    assert detect({}) == DistEnv(0, 1, 0, 1) and detect({}).is_main
    env = detect({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"})
    assert env == DistEnv(1, 2, 1, 2) and not env.is_main
    for bad in ({"RANK": "2", "WORLD_SIZE": "2"}, {"RANK": "x", "WORLD_SIZE": "2"}):
        with pytest.raises(ConfigError):
            detect(bad)
    assert rank_device("cpu", env) == torch.device("cpu")
    cmd = torchrun_command(2, ["train", "--nproc", "2", "--epochs", "1"])
    assert "--nproc-per-node=2" in cmd and cmd[-4:] == ["twopgraph", "train", "--epochs", "1"]


def test_two_part_partition_round_trip(tmp_path):
    data = community_data(n=400, k=4, seed=5)
    g = data.graph
    meta = partition_selfdep(data, 2, 2, tmp_path / "p", num_clusters=8, representation="local")
    assert meta == read_meta(tmp_path / "p") and len(meta["parts"]) == 2
    owned = []
    for i in range(2):
        part = load_part(tmp_path / "p", i)
        l2g = np.asarray(part.data.node_ids)  # owned vertices first
        owned.append(l2g[:part.num_owned])
        assert np.array_equal(part.data.feat[part.rows], data.feat[l2g])
        assert np.array_equal(part.data.label, data.label[l2g])
        reach = l2g[part.data.train_idx]
        for _ in range(2):  # everything 2 hops from the part's training vertices is in it
            reach = np.unique(np.concatenate([reach, *[g.neighbors(v) for v in reach]]))
        assert np.isin(reach, l2g).all()
        sampler = PartSampler(part, [3, 3], seed=0)
        mb = sampler.sample(np.array(part.data.train_idx[:30]), key=0)
        assert int(mb.input_nodes.max()) < part.data.num_nodes
        requests, rows, _ = sampler.counters()
        assert requests == 0 and rows == 0  # 2 hops = 2 layers: nothing from other ranks
    assert np.array_equal(np.sort(np.concatenate(owned)), np.arange(400))
    assert sum(p["num_train"] for p in meta["parts"]) == len(data.train_idx)
    steps = FixedSteps(RandomScheduler(np.arange(10), 4, seed=0), 5)  # wraps into a new epoch
    assert [len(b) for b in steps.batches(0)] == [4, 4, 2, 4, 4] and steps.batch_size == 4
