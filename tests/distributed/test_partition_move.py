"""A partition's ``meta.json`` records its store relative to the partition folder (when the two
share a parent folder): the partition and its store moved together -- to another folder, as to
another machine -- still train; older partitions' absolute store paths still read, and a
partition moved without its store falls back to the absolute path recorded beside."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import community_data

from twopgraph.config import TrainConfig
from twopgraph.distributed import DistEnv, train_distributed
from twopgraph.distributed.partition.load import load_part, read_meta


def _cfg(out: Path) -> TrainConfig:
    return TrainConfig.of(fanouts=[5, 5], batch_size=64, epochs=1, hidden=16, lr=0.01,
                          out=str(out), device="cpu", progress=False, prefetch=1, threads=1)


@pytest.fixture()
def made(tmp_path) -> Path:
    """``tmp/a/data`` (a data root holding tiny.npz and, after partitioning, its store) and
    ``tmp/a/parts`` (a one-part partition of it, made through the CLI)."""
    from twopgraph.cli import main
    a = tmp_path / "a"
    (a / "data").mkdir(parents=True)
    community_data(400, k=4).save_npz(a / "data" / "tiny.npz")
    assert main(["partition", "--dataset", str(a / "data" / "tiny.npz"), "--data-root",
                 str(a / "data"), "--num-parts", "1", "--hops", "2", "--num-clusters", "8",
                 "--out", str(a / "parts")]) == 0
    return a


def _recorded(parts: Path) -> dict:
    return json.loads((parts / "meta.json").read_text())["source"]


def _train(parts: Path, out: Path) -> dict:
    os.environ.pop("MASTER_ADDR", None)
    res = train_distributed(_cfg(out), parts, env=DistEnv(0, 1, 0, 1))
    assert res.test_acc is not None
    return json.loads((out / "metrics.json").read_text())


def test_store_recorded_relative_and_a_moved_pair_trains(made, tmp_path):
    src = _recorded(made / "parts")
    assert not Path(src["store"]).is_absolute()
    assert src["store"].startswith(f"..{os.sep}data{os.sep}stores{os.sep}tiny-"), src["store"]
    assert Path(src["store_absolute"]) == (made / "parts" / src["store"]).resolve()
    moved = tmp_path / "elsewhere" / "b"  # both folders, together, as to another machine
    moved.parent.mkdir()
    os.rename(made, moved)
    assert not Path(src["store_absolute"]).exists()
    meta = read_meta(moved / "parts")
    assert Path(meta["source"]["store"]) == (moved / "parts" / src["store"]).resolve()
    load_part(moved / "parts", 0)
    metrics = _train(moved / "parts", tmp_path / "run")
    assert Path(metrics["partition"]["store"]).is_relative_to(moved.resolve())
    assert len(metrics["epochs"]) == 1


def test_an_older_absolute_store_path_still_reads(made, tmp_path):
    meta_file = made / "parts" / "meta.json"
    meta = json.loads(meta_file.read_text())
    absolute = meta["source"].pop("store_absolute")
    meta["source"]["store"] = absolute  # as partitions before relative paths recorded it
    meta_file.write_text(json.dumps(meta, indent=2) + "\n")
    assert read_meta(made / "parts")["source"]["store"] == absolute
    load_part(made / "parts", 0)


def test_a_partition_moved_alone_finds_its_store_by_the_absolute_path(made, tmp_path):
    alone = tmp_path / "moved-alone" / "deeper" / "parts"
    alone.parent.mkdir(parents=True)
    shutil.move(str(made / "parts"), str(alone))
    src = _recorded(alone)
    assert not (alone / src["store"]).exists()  # the relative path finds nothing here
    assert read_meta(alone)["source"]["store"] == src["store_absolute"]
    load_part(alone, 0)


def test_a_partition_without_a_store_of_its_own_data_embeds_it(tmp_path):
    from twopgraph.distributed.partition.selfdep import partition_selfdep
    meta = partition_selfdep(community_data(400, k=4), 1, 2, tmp_path / "p", num_clusters=8)
    assert _recorded(tmp_path / "p")["store"] == "store"
    assert meta["source"]["store"] == str((tmp_path / "p" / "store").resolve())
    os.rename(tmp_path / "p", tmp_path / "q")
    load_part(tmp_path / "q", 0)
