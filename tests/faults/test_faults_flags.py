"""Flags out of range or without effect (issue 40, item 6): a fanout beyond int32 and a
``--labor-iterations`` beyond its maximum are one line and exit 2 in every verb that takes
them; options the chosen sampler or model does not read are one warning line each."""

from __future__ import annotations

import logging

import pytest
from conftest import community_data, run_cli

from twopgraph.config import TrainConfig
from twopgraph.core.fanouts import MAX_FANOUT, parse_fanouts
from twopgraph.core.names import MAX_LABOR_ITERATIONS
from twopgraph.errors import ConfigError
from twopgraph.graph.data import CSRGraph
from twopgraph.pipeline.assemble import make_loader
from twopgraph.sampler.labor import LaborSampler

HUGE = "99999999999999999999"


def test_fanout_beyond_int32_is_refused():
    assert parse_fanouts(f"{MAX_FANOUT},-1") == [MAX_FANOUT, -1]
    for bad in (f"{HUGE},5", [MAX_FANOUT + 1]):
        with pytest.raises(ConfigError, match="too large: at most 2147483647"):
            parse_fanouts(bad)


@pytest.mark.parametrize("verb", [["train", "--epochs", "1", "--out", "out"],
                                  ["bench", "sampler"], ["bench", "cache"], ["bench", "dist"],
                                  ["bench", "memory"]])
def test_huge_fanout_is_one_line_exit_2_in_every_verb(verb, tmp_path, capsys, monkeypatch):
    """Once an OverflowError traceback (train) and a numba error (bench sampler); the
    benchmarks that start runs check the flag before the first."""
    monkeypatch.chdir(tmp_path)
    rc, out, err = run_cli([*verb, "--dataset", "synthetic-small", "--data-root",
                            tmp_path / "data", f"--fanouts={HUGE},5"], capsys)
    assert rc == 2, err
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and f"fanout {HUGE} is too large" in lines[0], err


def test_labor_iterations_have_a_maximum(tmp_path, capsys):
    """A 10**6-round LABOR batch once ran on for 40 s after SIGTERM: the rounds are bounded
    where the flag is read (config) and where the sampler is built."""
    g = CSRGraph.from_edges([0, 1, 2], [1, 2, 3], num_nodes=4)
    assert LaborSampler(g, [2], iterations=MAX_LABOR_ITERATIONS).iterations == 100
    with pytest.raises(ConfigError, match=r"in \[0, 100\]"):
        LaborSampler(g, [2], iterations=MAX_LABOR_ITERATIONS + 1)
    with pytest.raises(ConfigError, match="at most 100"):
        TrainConfig.of(sampler="labor", labor_iterations=10 ** 6).validate()
    for verb in (["train", "--epochs", "1", "--out", tmp_path / "out"], ["bench", "sampler"]):
        rc, _, err = run_cli([*verb, "--dataset", "synthetic-small", "--data-root",
                              tmp_path / "data", "--sampler", "labor",
                              "--labor-iterations", "1000000"], capsys)
        lines = [x for x in err.strip().splitlines() if x.strip()]
        assert rc == 2 and len(lines) == 1 and "--labor-iterations" in lines[0], err


def _warnings(caplog, **flags) -> list[str]:
    data = community_data(200)
    cfg = TrainConfig.of(device="cpu", fanouts=[3, 3], batch_size=64, threads=1, schedule="random",
                         progress=False, **flags).validate()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="twopgraph"):
        loader = make_loader(cfg, data, "cpu")
    del loader
    return [r.getMessage() for r in caplog.records if "does nothing" in r.getMessage()]


def test_flags_that_do_nothing_are_one_warning_each(caplog):
    """``--labor-*`` with the neighbour sampler and ``--heads`` with SAGE/GCN: one warning
    line per flag; none when the sampler/model reads them or they keep their defaults."""
    got = _warnings(caplog, sampler="neighbor", labor_iterations=3,
                    labor_layer_dependency=True, labor_batch_dependency=4, model="sage",
                    heads=2)
    assert sorted(got) == [
        "--heads 2 does nothing with --model sage (its layers do not read it)",
        "--labor-batch-dependency 4 does nothing with --sampler neighbor (an option of "
        "--sampler labor)",
        "--labor-iterations 3 does nothing with --sampler neighbor (an option of --sampler "
        "labor)",
        "--labor-layer-dependency does nothing with --sampler neighbor (an option of "
        "--sampler labor)"]
    assert _warnings(caplog, model="gcn", heads=8) == [
        "--heads 8 does nothing with --model gcn (its layers do not read it)"]
    assert _warnings(caplog, sampler="labor", labor_iterations=2, model="gat", heads=2,
                     hidden=16) == []
    assert _warnings(caplog) == []
