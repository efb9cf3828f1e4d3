"""``--resume`` on another partition (issue 40, item 6): the same data partitioned otherwise is
refused as another partition, naming both folders and partition ids; data whose content
changed is still refused as such. Before, both said "the data (its content changed)"."""

from __future__ import annotations

import os

import pytest
from conftest import community_data

from twopgraph.config import TrainConfig
from twopgraph.distributed import DistEnv, train_distributed
from twopgraph.distributed.partition.selfdep import partition_selfdep
from twopgraph.errors import ConfigError


def _train(parts, out, **kw) -> None:
    os.environ.pop("MASTER_ADDR", None)  # one process: a private store
    cfg = TrainConfig.of(**{"fanouts": [4, 4], "batch_size": 64, "epochs": 1, "hidden": 8,
                            "device": "cpu", "threads": 1, "progress": False, "prefetch": 1,
                            "out": str(out), **kw})
    train_distributed(cfg, parts, env=DistEnv(0, 1, 0, 1))


@pytest.fixture(scope="module")
def partitions(tmp_path_factory):
    """One part each: ``a`` and ``b`` of the same data (other clusterings), ``c`` of other data."""
    root = tmp_path_factory.mktemp("resume-parts")
    data, other = community_data(600, k=4, seed=1), community_data(600, k=4, seed=2)
    metas = {"a": partition_selfdep(data, 1, 2, root / "a", num_clusters=12),
             "b": partition_selfdep(data, 1, 2, root / "b", num_clusters=6),
             "c": partition_selfdep(other, 1, 2, root / "c", num_clusters=12)}
    assert len({m["partition_id"] for m in metas.values()}) == 3
    return {k: (root / k, m["partition_id"]) for k, m in metas.items()}


def test_resume_on_another_partition_of_the_same_data_says_so(partitions, tmp_path):
    (a, id_a), (b, id_b) = partitions["a"], partitions["b"]
    out = tmp_path / "run"
    _train(a, out)
    with pytest.raises(ConfigError) as e:
        _train(b, out, epochs=2, resume=True)
    msg = str(e.value)
    assert "content changed" not in msg, msg
    assert "the partition (another partition of the same data" in msg, msg
    assert f"{a} (partition_id {id_a[:16]})" in msg and f"{b} (partition_id {id_b[:16]})" in msg
    assert len(msg.splitlines()) == 1


def test_resume_on_a_partition_of_changed_data_says_the_content_changed(partitions, tmp_path):
    (a, _), (c, _) = partitions["a"], partitions["c"]
    out = tmp_path / "run"
    _train(a, out)
    with pytest.raises(ConfigError, match=r"the data \(its content changed; the checkpoint's "):
        _train(c, out, epochs=2, resume=True)
