"""The public interface of ``twopgraph.core``: registries, ``--fanouts``, the mini-batch types,
the transfer metrics, fingerprints, atomic files and locks."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import twopgraph.core as pkg
from twopgraph.core import (
    CACHE_POLICIES,
    MODELS,
    SAMPLERS,
    SCHEDULERS,
    Block,
    CacheCounters,
    FileLock,
    MiniBatch,
    Registry,
    atomic_write_bytes,
    human_bytes,
    parse_fanouts,
    ratio,
    refuse_dangling,
    remove_stale_lock,
    run_fingerprint,
    sibling_lock,
    transfer_metrics,
    write_json,
)
from twopgraph.errors import ConfigError


def test_every_public_name_imports():
    for n in pkg.__all__:
        getattr(pkg, n)


def test_registries():
    colours = Registry("colour")
    colours.register("red")(lambda: (255, 0, 0))
    assert colours.get("red")() == (255, 0, 0) and "red" in colours
    with pytest.raises(ConfigError, match="did you mean 'red'"):
        colours.get("rde")
    with pytest.raises(RuntimeError, match="registered twice"):
        colours.register("red")(lambda: None)
    assert {"sage", "gcn"} <= set(MODELS.declared()) and "neighbor" in SAMPLERS.declared()
    assert {"none", "degree", "presample", "layer"} <= set(CACHE_POLICIES.declared())
    assert {"random", "locality"} <= set(SCHEDULERS.declared())


def test_fanouts_minibatch_and_metrics():
    assert parse_fanouts("15,10,-1") == [15, 10, -1] and parse_fanouts([3]) == [3]
    for bad in ("0", "a,b", ""):
        with pytest.raises(ConfigError):
            parse_fanouts(bad)
    b = Block(3, 2, torch.tensor([0, 2, 3]), torch.tensor([1, 2, 0]), torch.ones(3),
              torch.ones(2))
    assert b.edge_index.tolist() == [[1, 2, 0], [0, 0, 1]] and b.sampled_deg().tolist() == [2, 1]
    assert MiniBatch(torch.arange(2), torch.arange(3), [b]).num_seeds == 2
    m = transfer_metrics(feature_rows=100, cache_hits=25, h2d_bytes=600, row_bytes=8,
                         num_batches=4)
    assert m == {"input_nodes_per_batch": 25.0, "hit_rate": 0.25, "transfer_ratio": 0.75}
    c = CacheCounters(feature_rows=10, cache_hits=4) - CacheCounters(feature_rows=2)
    assert (c.feature_rows, c.hit_rate) == (8, 0.5)
    assert ratio(0, 0) == 1.0 and ratio(1, 0) == math.inf and human_bytes(1536) == "1.5 KiB"


def test_fingerprints_files_and_locks(tmp_path):
    assert run_fingerprint({"lr": 0.1}, "d") == run_fingerprint({"lr": 0.1}, "d")
    assert run_fingerprint({"lr": 0.1}, "d") != run_fingerprint({"lr": 0.2}, "d")
    path = tmp_path / "m.json"
    write_json(path, {"a": float("nan"), "b": np.int64(2)})  # strict JSON, plain numbers
    assert json.loads(path.read_text()) == {"a": None, "b": 2}

    def broken(f):
        f.write(b"half")
        raise ValueError("bug")
    with pytest.raises(ValueError):
        atomic_write_bytes(path, broken)
    assert json.loads(path.read_text())["b"] == 2  # the old file, and no temporary left
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="dangling"):
        refuse_dangling(tmp_path / "gone" / "out")
    lock = sibling_lock(tmp_path / "part")
    assert lock == tmp_path / ".part.lock"
    with FileLock(lock, "the partition", run=True), \
            pytest.raises(ConfigError, match="in use by another twopgraph run"):
        FileLock(lock, "the partition", run=True).acquire()
    assert not lock.exists()
    lock.write_text("{}")  # left by a process that died
    assert remove_stale_lock(lock) and not lock.exists()
