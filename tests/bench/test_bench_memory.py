"""``scripts/bench_memory.py``'s pure helpers: the ``smaps_rollup`` parser, the process-tree
walk and the streaming ``.npz`` writer (no cgroups, no runs of the CLI)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_memory.py"


@pytest.fixture(scope="module")
def bm():
    spec = importlib.util.spec_from_file_location("bench_memory", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_memory"] = mod  # dataclasses look their module up there
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop("bench_memory", None)


ROLLUP = """\
5610ca9c7000-7ffc0fba6000 ---p 00000000 00:00 0                          [rollup]
Rss:                1696 kB
Pss:                 474 kB
Pss_Anon:            116 kB
Pss_File:            358 kB
Shared_Clean:       1504 kB
"""


def test_parse_smaps_rollup(bm):
    m = bm.parse_smaps_rollup(ROLLUP)
    assert m == {"Rss": 1696, "Pss": 474, "Pss_Anon": 116, "Pss_File": 358,
                 "Shared_Clean": 1504}


def test_descendants_and_monitor(bm):
    ppids = {1: 0, 10: 1, 11: 10, 12: 10, 13: 12, 20: 1}
    assert sorted(bm.descendants(10, ppids)) == [10, 11, 12, 13]
    mon = bm.TreeMonitor(os.getpid())
    mon.sample()  # this process: a real smaps_rollup
    r = mon.result()
    assert r["samples"] == 1 and r["max_procs"] >= 1
    assert 0 < r["peak_pss_mib"] and 0 < r["peak_rss_sampled_mib"]


def test_streaming_npz_round_trip(bm, tmp_path):
    rng = np.random.default_rng(0)
    base = rng.standard_normal((50, 3)).astype(np.float32)
    feat = bm.wide_features(base, 8, 0.0, seed=1, chunk_rows=7)  # 8 chunks, last one short
    path = bm.write_npz_streaming(tmp_path / "w.npz", {
        "indptr": np.arange(51, dtype=np.int64), "feat": feat,
        "num_classes": np.asarray(np.int64(4))})
    with np.load(path) as z:
        assert z["indptr"].tolist() == list(range(51))
        assert int(z["num_classes"]) == 4 and z["num_classes"].shape == ()
        got = z["feat"]
    assert got.shape == (50, 8) and got.dtype == np.float32
    # the projection has orthonormal rows: distances between vertices are kept
    d_base = np.linalg.norm(base[:, None] - base[None], axis=-1)
    d_wide = np.linalg.norm(got[:, None] - got[None], axis=-1)
    np.testing.assert_allclose(d_wide, d_base, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(got, np.concatenate(list(feat.chunks())))  # deterministic
    assert [p.name for p in tmp_path.iterdir()] == ["w.npz"]  # no temp file left

    bad = bm.Chunked((51, 8), np.dtype(np.float32), feat.chunks)  # one row short
    with pytest.raises(ValueError, match="50 rows, expected 51"):
        bm.write_npz_streaming(tmp_path / "bad.npz", {"feat": bad})
    assert not (tmp_path / "bad.npz").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["w.npz"]
