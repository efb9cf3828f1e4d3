"""The harness's measuring and data helpers without cgroups or long runs: the
``smaps_rollup`` parser, the process-tree walk, a measured subprocess, the streaming ``.npz``
writer of ``bench memory``, the generated families of ``--graph`` and ``bench train``'s
variants."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from twopgraph.bench import families, memory, procmem
from twopgraph.bench.train import parse_variants
from twopgraph.errors import ConfigError

ROLLUP = """\
5610ca9c7000-7ffc0fba6000 ---p 00000000 00:00 0                          [rollup]
Rss:                1696 kB
Pss:                 474 kB
Pss_Anon:            116 kB
Pss_File:            358 kB
Shared_Clean:       1504 kB
"""


def test_parse_smaps_rollup():
    m = procmem.parse_smaps_rollup(ROLLUP)
    assert m == {"Rss": 1696, "Pss": 474, "Pss_Anon": 116, "Pss_File": 358,
                 "Shared_Clean": 1504}


def test_descendants_and_monitor():
    ppids = {1: 0, 10: 1, 11: 10, 12: 10, 13: 12, 20: 1}
    assert sorted(procmem.descendants(10, ppids)) == [10, 11, 12, 13]
    mon = procmem.TreeMonitor(os.getpid())
    mon.sample()  # this process: a real smaps_rollup
    r = mon.result()
    assert r["samples"] == 1 and r["max_procs"] >= 1
    assert 0 < r["peak_pss_mib"] and 0 < r["peak_rss_sampled_mib"]


def test_runner_measures_a_child_and_reports_a_failure(tmp_path):
    r = procmem.Runner(tmp_path / "logs", interval=0.05)
    code = ("import time; b = bytearray(80 << 20); b[::4096] = b'x' * len(b[::4096]); "
            "time.sleep(0.3); print('done')")
    rec = r.run("big", [sys.executable, "-c", code])
    assert rec["rc"] == 0 and "error" not in rec and rec["stdout"].strip() == "done"
    assert rec["ru_maxrss_mib"] > 80 and rec["minflt"] > 80 * 256 // 2  # the touched pages
    assert rec["wall_s"] > 0.3 and rec["samples"] >= 1
    bad = r.run("bad", [sys.executable, "-c", "import sys; sys.exit(3)"])
    assert bad["rc"] == 3 and bad["error"] == "exit code 3"
    assert "stdout" not in procmem.strip(bad)


def test_streaming_npz_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.standard_normal((50, 3)).astype(np.float32)
    feat = memory.wide_features(base, 8, 0.0, seed=1, chunk_rows=7)  # 8 chunks, last short
    path = memory.write_npz_streaming(tmp_path / "w.npz", {
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

    bad = memory.Chunked((51, 8), np.dtype(np.float32), feat.chunks)  # one row short
    with pytest.raises(ValueError, match="50 rows, expected 51"):
        memory.write_npz_streaming(tmp_path / "bad.npz", {"feat": bad})
    assert not (tmp_path / "bad.npz").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["w.npz"]


def test_voronoi_labels_follow_the_structure():
    # two cliques joined by one edge: each clique takes its nearest seed's class
    a = [(u, v) for u in range(5) for v in range(5) if u != v]
    b = [(u + 5, v + 5) for u, v in a]
    src, dst = zip(*(a + b + [(4, 5), (5, 4)]))
    indptr, indices = families.csr_from_pairs(np.array(src), np.array(dst), 10)
    label = memory.voronoi_labels(indptr, indices, seed=0, classes=3, region=5)
    assert label.shape == (10,) and set(label.tolist()) <= {0, 1, 2}


def test_counts_and_family_specs():
    assert families.parse_count("100k") == 100_000
    assert families.parse_count("2.5m") == 2_500_000
    assert families.size_name(2_500_000) == "2.5m" and families.size_name(30_000) == "30k"
    assert families.is_family("rmat:16:8") and families.is_family("scaled:10k")
    assert not families.is_family("cora") and not families.is_family("synthetic-papers:0.01")
    with pytest.raises(ConfigError, match="count"):
        families.parse_count("ten")
    with pytest.raises(ConfigError, match="rmat:SCALE"):
        families.family_dataset("rmat:1:2:3")


@pytest.mark.parametrize("gen, args", [(families.gen_rmat, (7, 4)), (families.gen_rgg, (300,)),
                                       (families.gen_ba, (300, 3))])
def test_generated_graphs_are_symmetric_without_loops(gen, args):
    indptr, indices = gen(*args)
    n = indptr.shape[0] - 1
    rows = np.repeat(np.arange(n), np.diff(indptr))
    assert indices.shape[0] > n  # not empty
    assert not np.any(rows == indices)
    fwd = set(zip(rows.tolist(), indices.tolist()))
    assert fwd == {(v, u) for u, v in fwd}
    assert len(fwd) == indices.shape[0]  # no duplicates


def test_family_dataset_loads_as_a_dataset(tmp_path):
    from twopgraph.config import DataConfig
    path = families.family_dataset("rmat:8:4", str(tmp_path))
    assert path.parent == tmp_path / "bench" / "graphs"
    assert families.family_dataset("rmat:8:4", str(tmp_path)) == path  # written once
    data = DataConfig(str(path), str(tmp_path)).validate().load(progress=False)
    assert data.num_nodes == 256 and data.train_idx.shape[0] == 256 // 12


def test_train_variants():
    got = parse_variants("on: --schedule random; MALLOC_MMAP_MAX_=65536 --schedule random")
    assert got[0] == ("on", ["--schedule", "random"], {})
    assert got[1] == ("MALLOC_MMAP_MAX_=65536 --schedule random", ["--schedule", "random"],
                      {"MALLOC_MMAP_MAX_": "65536"})
    with pytest.raises(ConfigError, match="differ"):
        parse_variants("a: --x; a: --y")
    with pytest.raises(ConfigError, match="at least one"):
        parse_variants(" ; ")
