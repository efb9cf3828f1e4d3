"""The ranks of one machine share it (issue 42, defects 2 and 4): each rank's threads (torch
compute + sampling workers) are its fair share of the cores, on CUDA as on CPU, favouring
sampling workers on CUDA; an explicit ``--device cuda:N`` with several local ranks is refused
(it would put them all on one GPU), ``cuda`` maps to ``cuda:LOCAL_RANK``.

CPU only: ``torch.cuda.is_available`` / ``device_count`` are faked where a GPU's presence is
what a check reads."""

from __future__ import annotations

import json
import logging
import os

import pytest
import torch
from conftest import community_data

import twopgraph.distributed.env as dist_env
from twopgraph.config import TrainConfig, resolve_device
from twopgraph.distributed import DistEnv, rank_device, train_distributed
from twopgraph.distributed.partition.selfdep import partition_selfdep
from twopgraph.errors import ConfigError
from twopgraph.pipeline.loader import ThreadPlan

CPU, CUDA = torch.device("cpu"), torch.device("cuda", 0)


def env(local_rank=0, local_world=8, rank=None):
    return DistEnv(local_rank if rank is None else rank, local_world, local_rank, local_world)


@pytest.mark.parametrize("cores, ranks, cuda, want", [
    # 16 cores, 8 GPUs: 2 threads a rank, one torch thread and one sampling (the prefetch
    # thread samples itself)
    (16, 8, True, ThreadPlan(2, 1, 1, True)),
    (16, 8, False, ThreadPlan(2, 1, 1, True)),
    # 64 cores: 8 a rank; CUDA favours sampling, CPU computing
    (64, 8, True, ThreadPlan(8, 2, 6, True)),
    (64, 8, False, ThreadPlan(8, 6, 2, True)),
    (128, 8, True, ThreadPlan(16, 4, 12, True)),
    # as many ranks as cores, or more: one thread a rank, nothing runs ahead
    (8, 8, True, ThreadPlan(1, 1, 1, False)),
    (2, 8, True, ThreadPlan(1, 1, 1, False)),
    (2, 8, False, ThreadPlan(1, 1, 1, False)),
    # one rank: the whole machine
    (16, 1, True, ThreadPlan(16, 4, 12, True)),
])
def test_thread_share_of_a_rank(cores, ranks, cuda, want):
    plan = ThreadPlan.for_rank(ranks, cuda, prefetch=2, cores=cores)
    assert plan == want
    assert plan.compute >= 1 and plan.workers >= 1
    assert plan.compute + plan.workers == plan.total or plan.total == 1
    busy = plan.compute + plan.workers if plan.background else plan.total
    if cores >= ranks:
        assert ranks * busy <= cores  # the ranks together: at most the machine
    if cuda and plan.total >= 4:
        assert plan.workers > plan.compute


def test_thread_share_without_prefetch_takes_turns():
    assert ThreadPlan.for_rank(4, True, prefetch=0, cores=16) == ThreadPlan(4, 4, 4, False)


@pytest.mark.parametrize("device", [CPU, CUDA])
def test_rank_plan_shares_the_cores_on_cuda_as_on_cpu(device, caplog):
    with caplog.at_level(logging.INFO, logger="twopgraph"):
        plan = dist_env.rank_plan(0, device, env(3, 8), prefetch=2, cores=16)
    assert plan.total == 2 and plan.compute + plan.workers == 2
    assert 8 * plan.total <= 16
    line = [r.getMessage() for r in caplog.records if "threads" in r.getMessage()]
    assert line == ["rank 3: 2 threads (16 cores / 8 local ranks): 1 torch compute, "
                    "1 sampling workers"]


@pytest.mark.parametrize("device", [CPU, CUDA])
def test_explicit_threads_stay_as_given(device):
    assert dist_env.rank_plan(6, device, env(0, 8), prefetch=2, cores=16) == \
        ThreadPlan.for_threads(6, 2) == ThreadPlan(6, 6, 1, True)


def test_a_rank_runs_on_its_share(tmp_path, monkeypatch):
    """The real run: a 1-part job of a machine said to hold 4 local ranks and 16 cores
    trains on 4 threads (3 torch, 1 sampling worker), as metrics.json records."""
    data = community_data(600, k=4)
    partition_selfdep(data, 1, 2, tmp_path / "p1", num_clusters=8)
    os.environ.pop("MASTER_ADDR", None)
    monkeypatch.setattr(dist_env, "available_cores", lambda: 16)
    cfg = TrainConfig.of(fanouts=[4, 4], batch_size=128, epochs=1, hidden=8, lr=0.01,
                         out=str(tmp_path / "run"), device="cpu", progress=False, prefetch=1,
                         threads=0, eval_every=1)
    train_distributed(cfg, tmp_path / "p1", env=DistEnv(0, 1, 0, 4))
    threads = json.loads((tmp_path / "run" / "metrics.json").read_text())["threads"]
    assert threads["total"] == 4 and threads["torch"] == 3
    assert threads["sample_workers"] == 1 and threads["background"]


@pytest.fixture
def gpus(monkeypatch):
    """torch says it sees 8 CUDA GPUs."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)


def test_cuda_maps_to_the_local_rank(gpus):
    for lr in range(8):
        assert rank_device("cuda", env(lr, 8, rank=8 + lr)) == torch.device("cuda", lr)
        assert rank_device("auto", env(lr, 8)) == torch.device("cuda", lr)
    assert rank_device("cpu", env(2, 8)) == CPU


@pytest.mark.parametrize("name", ["cuda:0", "cuda:3"])
def test_explicit_gpu_refused_with_several_local_ranks(gpus, name):
    with pytest.raises(ConfigError) as e:
        rank_device(name, env(1, 2))
    msg = str(e.value)
    assert "\n" not in msg and f"--device {name}" in msg and "one GPU" in msg
    assert "--device cuda (each rank takes cuda:LOCAL_RANK)" in msg
    assert "CUDA_VISIBLE_DEVICES" in msg


def test_explicit_gpu_kept_with_one_local_rank(gpus):
    assert rank_device("cuda:3", DistEnv(0, 1, 0, 1)) == torch.device("cuda", 3)
    # one rank per machine on several machines: its own GPU as given
    assert rank_device("cuda:5", DistEnv(1, 2, 0, 1)) == torch.device("cuda", 5)


def test_gpu_index_beyond_the_devices_refused(gpus):
    assert resolve_device("cuda:7") == torch.device("cuda", 7)
    with pytest.raises(ConfigError, match=r"device cuda:8 requested but torch sees 8 CUDA"):
        resolve_device("cuda:8")
