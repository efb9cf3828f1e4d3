"""A resumed run draws its batches as the run it continues: the checkpoint's clusters are
restored (``resume_schedule``), also for a checkpoint written before the default cluster
count changed."""

from __future__ import annotations

from twopgraph.config import TrainConfig
from twopgraph.locality.cluster import default_num_clusters
from twopgraph.run.checkpoint import OLD_CLUSTERS_PER_BATCH, resume_schedule


def _cfg(**kw) -> TrainConfig:
    return TrainConfig.of(**{"batch_size": 100, "out": "unused", **kw})


def test_old_checkpoint_keeps_the_old_default_clusters():
    cfg = resume_schedule(_cfg(), {}, 1_000_000, 5000)
    assert OLD_CLUSTERS_PER_BATCH == 4
    assert cfg.sampling.num_clusters == default_num_clusters(1_000_000, 5000, 100,
                                                             clusters_per_batch=4) == 200
    assert cfg.sampling.schedule == "auto"  # decided again, on those clusters


def test_recorded_clusters_are_restored():
    cfg = resume_schedule(_cfg(), {"num_clusters": 77}, 10**6, 5000)
    assert (cfg.sampling.num_clusters, cfg.sampling.schedule) == (77, "auto")
    base = _cfg()
    assert resume_schedule(base, {"num_clusters": None}, 10**6, 5000) is base  # none made


def test_explicit_options_win():
    ckpt = {"num_clusters": 77}
    cfg = resume_schedule(_cfg(num_clusters=5, schedule="random"), ckpt, 10**6, 5000)
    assert (cfg.sampling.num_clusters, cfg.sampling.schedule) == (5, "random")
    base = _cfg(num_clusters=5, schedule="random")
    assert resume_schedule(base, ckpt, 10**6, 5000) is base
