"""Damaged or inconsistent raw files of OGB's CSV layout and of the COO exchange format, each
refused with one line before anything of a declared size is made (issue 40, item 6): an
empty split file, a vertex count or an edge count the files do not hold, blank label lines
(NaN: unlabelled, as papers100M's), a folder where ``raw/data.npz`` should be, a declared
``num_classes`` below the labels."""

from __future__ import annotations

import gzip
import io
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from conftest import community_data

from twopgraph.datasets import load_dataset
from twopgraph.errors import GraphFormatError, TwopgraphError


def _csv_gz(path: Path, rows, fmt: str = "%d") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    np.savetxt(buf, np.asarray(rows).reshape(len(rows), -1), fmt=fmt, delimiter=",")
    with gzip.open(path, "wt") as f:
        f.write(buf.getvalue())


def write_arxiv(root: Path, n: int = 40, c: int = 3, seed: int = 0) -> Path:
    """A tiny ogbn-arxiv in OGB's CSV layout (a ring, so that every vertex has edges);
    returns its folder."""
    rng = np.random.default_rng(seed)
    folder = root / "ogbn_arxiv"
    raw = folder / "raw"
    src = np.arange(n)
    _csv_gz(raw / "edge.csv.gz", np.stack([src, (src + 1) % n], 1))
    _csv_gz(raw / "num-node-list.csv.gz", [n])
    _csv_gz(raw / "num-edge-list.csv.gz", [n])
    _csv_gz(raw / "node-feat.csv.gz", rng.standard_normal((n, 4)), "%.6g")
    _csv_gz(raw / "node-label.csv.gz", rng.integers(0, c, n))
    order = rng.permutation(n)
    for key, idx in {"train": order[:20], "valid": order[20:30], "test": order[30:]}.items():
        _csv_gz(folder / "split" / "time" / f"{key}.csv.gz", idx)
    (folder / "RELEASE_v1.txt").write_text("")
    return folder


@pytest.fixture
def offline(monkeypatch):
    """No network: a download attempt fails at once (and says so)."""
    def fail(*args, **kwargs):
        raise urllib.error.URLError("network disabled in tests")
    monkeypatch.setattr(urllib.request, "urlopen", fail)


def _load_error(root: Path) -> str:
    with pytest.raises(TwopgraphError) as err:
        load_dataset("ogbn-arxiv", data_root=root, progress=False)
    msg = str(err.value)
    assert "\n" not in msg, msg
    assert not list((root / "stores").glob("ogbn-arxiv-*"))  # no store, not even half
    return msg


def test_empty_split_file_is_refused_by_name(tmp_path, offline):
    """A 0-byte ``split/time/test.csv.gz`` is no empty test split."""
    folder = write_arxiv(tmp_path)
    test = folder / "split" / "time" / "test.csv.gz"
    test.write_bytes(b"")
    msg = _load_error(tmp_path)
    assert f"split file {test} holds no vertex ids (0 bytes" in msg


@pytest.mark.parametrize("count", [5 * 10 ** 10, 10 ** 8, 39])
def test_vertex_count_is_checked_against_the_feature_rows_first(tmp_path, offline, count):
    """``num-node-list.csv.gz`` disagreeing with the feature file's 40 rows: refused before
    the CSR or the table of that size is made (5e10 once asked for 373 GiB)."""
    folder = write_arxiv(tmp_path)
    _csv_gz(folder / "raw" / "num-node-list.csv.gz", [count])
    t = time.perf_counter()
    msg = _load_error(tmp_path)
    assert time.perf_counter() - t < 20
    assert f"num-node-list.csv.gz: says {count:,} vertices but node-feat.csv.gz has 40 rows" \
        in msg


def test_edge_count_larger_than_the_file_reserves_nothing(tmp_path, offline, monkeypatch):
    """A huge ``num-edge-list.csv.gz``: the edges are read as they come and the count found
    wrong, no scratch of the declared size is reserved (it once ended in "No space left on
    device")."""
    import twopgraph.core.files as files
    reserved = []
    real = files.reserve
    monkeypatch.setattr(files, "reserve", lambda fd, nbytes: (reserved.append(nbytes),
                                                              real(fd, nbytes)))
    folder = write_arxiv(tmp_path)
    _csv_gz(folder / "raw" / "num-edge-list.csv.gz", [10 ** 15])
    msg = _load_error(tmp_path)
    assert "40 edges, num-edge-list.csv.gz says 1,000,000,000,000,000 (truncated?)" in msg
    assert all(b < 1 << 30 for b in reserved), reserved


def test_blank_label_lines_are_unlabelled_vertices(tmp_path, offline):
    """A blank line of ``node-label.csv.gz`` (what pandas writes for NaN) is an unlabelled
    vertex (-1, as papers100M's NaN labels), not a shorter label column; in a split it is
    refused by its split."""
    folder = write_arxiv(tmp_path)
    label = np.random.default_rng(0).integers(0, 3, 40)
    test = np.sort(np.loadtxt(folder / "split" / "time" / "test.csv.gz", dtype=np.int64))
    keep = test[:5]
    _csv_gz(folder / "split" / "time" / "test.csv.gz", keep)
    blank = test[5:]  # in no split now
    lines = ["" if v in set(blank.tolist()) else str(label[v]) for v in range(40)]
    with gzip.open(folder / "raw" / "node-label.csv.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")
    data = load_dataset("ogbn-arxiv", data_root=tmp_path, progress=False)
    assert data.num_nodes == 40 and (data.label[blank] == -1).all()
    assert (data.label[keep] >= 0).all()
    # a blank label in a split: one line
    other = tmp_path / "other"
    folder = write_arxiv(other)
    _csv_gz(folder / "split" / "time" / "test.csv.gz", keep)
    lines[int(keep[0])] = ""
    with gzip.open(folder / "raw" / "node-label.csv.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")
    msg = _load_error(other)
    assert f"test_idx holds 1 unlabelled vertex (label -1; first: vertex {keep[0]})" in msg


def test_data_npz_that_is_a_folder_is_not_downloaded_again(tmp_path, offline):
    """``raw/data.npz`` a folder: one line naming it, no download attempt blamed on the
    network."""
    folder = tmp_path / "ogbn_papers100M"
    (folder / "raw" / "data.npz").mkdir(parents=True)
    (folder / "RELEASE_v1.txt").write_text("")
    with pytest.raises(TwopgraphError) as err:
        load_dataset("ogbn-papers100M", data_root=tmp_path, progress=False)
    msg = str(err.value)
    assert "\n" not in msg and f"{folder / 'raw' / 'data.npz'} is a folder" in msg
    assert "network" not in msg and "download" not in msg.split(";")[0]


def test_coo_num_classes_below_its_labels_is_refused(tmp_path):
    """A COO file declaring fewer classes than its labels use: one line, as the CSR format
    (never raised silently); a count above them stays (classes no vertex has)."""
    d = community_data(120, k=4)
    src = np.repeat(np.arange(d.num_nodes), d.graph.degrees())
    arrays = dict(edge_index=np.stack([src, d.graph.indices]), feat=d.feat, label=d.label,
                  train_idx=d.train_idx, val_idx=d.val_idx, test_idx=d.test_idx)
    np.savez(tmp_path / "low.npz", **arrays, num_classes=np.int64(2))
    with pytest.raises(GraphFormatError) as err:
        load_dataset(str(tmp_path / "low.npz"), data_root=tmp_path / "root", progress=False)
    msg = str(err.value)
    assert "\n" not in msg and "label has class 3 but num_classes is 2" in msg
    np.savez(tmp_path / "high.npz", **arrays, num_classes=np.int64(6))
    data = load_dataset(str(tmp_path / "high.npz"), data_root=tmp_path / "root",
                        progress=False)
    assert data.num_classes == 6
