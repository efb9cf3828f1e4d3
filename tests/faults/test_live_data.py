"""Data that changes under a run or between runs (issue 22, items 3-5): a store file truncated
while mapped is one line and exit 2, never SIGBUS; store files rewritten in place are noticed
when the store is opened (identity in store.json, fingerprint again); a source .npz swapped
for other content with the same size and mtime is converted again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import community_data

from twopgraph.datasets import load_dataset
from twopgraph.graph.data import GraphData
from twopgraph.store import mapped as livemap
from twopgraph.store import reader as store
from twopgraph.store import writer as storewriter

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def data():
    return community_data(n=3000, f=64, seed=5)


def _script(tmp_path, body: str) -> subprocess.CompletedProcess:
    code = textwrap.dedent(body)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, text=True,
                          capture_output=True, timeout=240)


# -- item 3: truncated while mapped --------------------------------------------------------
def test_truncated_store_file_is_one_line_exit_2_not_sigbus(tmp_path, data):
    folder = storewriter.write_store(data, tmp_path / "s")
    r = _script(tmp_path, f"""
        import os, numpy as np
        from twopgraph.store.reader import open_store
        d = open_store({str(folder)!r})
        print(float(np.asarray(d.feat[-1]).sum()), flush=True)
        os.truncate({str(folder / 'feat.npy')!r}, 4096)
        print(float(np.asarray(d.feat[-1]).sum()), flush=True)  # page beyond the end
        print("not reached", flush=True)
    """)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("twopgraph: error: ")
    assert str(folder / "feat.npy") in lines[0] and "shrank" in lines[0]
    assert "not reached" not in r.stdout


def test_parallel_numba_threads_that_fault_give_one_line(tmp_path, data):
    folder = storewriter.write_store(data, tmp_path / "s")
    r = _script(tmp_path, f"""
        import os, numba, numpy as np
        from twopgraph.runtime.jit import configure_threading
        from twopgraph.store.reader import open_store
        configure_threading()
        numba.set_num_threads(2)

        @numba.njit(parallel=True)
        def total(x):
            out = np.zeros(x.shape[0])
            for i in numba.prange(x.shape[0]):
                out[i] = x[i].sum()
            return out.sum()

        d = open_store({str(folder)!r})
        print(total(d.feat), flush=True)
        os.truncate({str(folder / 'feat.npy')!r}, 4096)
        for _ in range(3):
            print(total(d.feat), flush=True)
    """)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "feat.npy shrank" in lines[0], r.stderr


def test_a_map_not_registered_gets_the_generic_line(tmp_path):
    np.save(tmp_path / "x.npy", np.ones(1 << 16, dtype=np.float64))
    r = _script(tmp_path, """
        import os, numpy as np
        from twopgraph.store import mapped as livemap
        livemap.install()
        x = np.load("x.npy", mmap_mode="r")
        os.truncate("x.npy", 4096)
        print(x[-1])
    """)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "bus error (SIGBUS)" in r.stderr


def test_safe_point_check_names_a_shrunk_or_rewritten_file(tmp_path, data):
    folder = storewriter.write_store(data, tmp_path / "s")
    d = store.open_store(folder)
    assert str(folder.resolve() / "feat.npy") in livemap.watched()
    livemap.check()  # unchanged: nothing
    st = os.stat(folder / "label.npy")
    os.utime(folder / "label.npy", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(livemap.StoreChanged, match=r"label\.npy was modified while this run"):
        livemap.check()
    os.utime(folder / "label.npy", ns=(st.st_atime_ns, st.st_mtime_ns))
    os.truncate(folder / "indices.npy", 128)
    with pytest.raises(livemap.StoreChanged, match=r"indices\.npy shrank to 128 bytes"):
        livemap.check()
    del d
    import gc
    gc.collect()
    assert not any(str(folder.resolve()) in p for p in livemap.watched())
    livemap.check()  # unregistered with the arrays


def test_loader_checks_before_every_batch(tmp_path, data, monkeypatch):
    from twopgraph import NodeLoader
    folder = storewriter.write_store(data, tmp_path / "s")
    d = store.open_store(folder)
    loader = NodeLoader(d, [5, 5], batch_size=64, schedule="random", prefetch=0, threads=1)
    calls = []
    monkeypatch.setattr(livemap, "check", lambda: calls.append(1))
    n = sum(1 for _ in loader)
    assert n > 1 and len(calls) == n


def test_cli_run_whose_store_is_truncated_mid_epoch(tmp_path):
    """The issue's repro: exit 2 and one line (not 135), checkpoint intact, and the next run
    says the store changed and rebuilds it."""
    root, out = tmp_path / "R", tmp_path / "O"
    cmd = [sys.executable, "-m", "twopgraph", "train", "--dataset", "synthetic-tiny",
           "--batch-size", "16", "--epochs", "40", "--out", str(out), "--data-root",
           str(root), "--no-progress", "--threads", "1", "--no-renumber",
           "--schedule", "random", "--eval-every", "0"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    seen = []
    try:
        for line in p.stderr:
            seen.append(line)
            if " epoch 1 " in line:
                break
        feats = list((root / "stores").glob("synthetic-tiny-*/feat.npy"))
        assert len(feats) == 1, seen
        os.truncate(feats[0], 4096)
        rest = p.stderr.read()
        rc = p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    tail = rest.strip().splitlines()
    assert rc == 2, (rc, rest)
    assert len(tail) == 1 and tail[0].startswith("twopgraph: error: ") and \
        str(feats[0]) in tail[0], rest
    ck = torch.load(out / "checkpoint.pt", weights_only=False)  # intact, atomic
    assert ck["epochs_done"] >= 2
    r = subprocess.run(cmd[:cmd.index("--epochs") + 1] + ["3"] + cmd[cmd.index("--epochs") + 2:]
                       + ["--resume"], cwd=tmp_path, env=env, text=True,
                       capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "rebuilding it" in r.stderr and "feat.npy" in r.stderr


def test_run_stopped_by_a_changed_store_says_failed(tmp_path, data, monkeypatch):
    """A store that changes under a run stops it with its one line; metrics.json then says
    "failed" with that line (it stayed "running" for ever), the lock is released and the
    checkpoint of the last completed epoch is kept."""
    from twopgraph.config import TrainConfig
    from twopgraph.run.train import train
    folder = storewriter.write_store(data, tmp_path / "s")
    out = tmp_path / "run"
    cfg = TrainConfig.of(dataset=str(folder), fanouts=[5, 5], batch_size=256, epochs=6,
                         hidden=8, out=str(out), progress=False, prefetch=0, threads=1,
                         device="cpu", schedule="random", renumber=False, eval_every=0)
    calls = []
    boom = livemap.StoreChanged(f"{folder / 'feat.npy'} was modified while this run read it")

    def check():
        calls.append(1)
        if len(calls) == 30:  # a few epochs in
            raise boom
    monkeypatch.setattr(livemap, "check", check)
    with pytest.raises(livemap.StoreChanged):
        train(cfg)
    m = json.loads((out / "metrics.json").read_text())
    done = len(m["epochs"])
    assert m["status"] == "failed" and 1 <= done < 6
    assert m["error"] == {"epoch": done, "message": str(boom)}
    assert not (out / ".twopgraph.lock").exists()
    assert torch.load(out / "checkpoint.pt", weights_only=False)["epochs_done"] == done


# -- item 4: store files rewritten in place -------------------------------------------------
def test_store_json_records_each_files_identity(tmp_path, data):
    folder = storewriter.write_store(data, tmp_path / "s")
    meta = store.read_store_meta(folder)
    assert set(meta["files"]) == {k for k in meta["arrays"]}
    for k, rec in meta["files"].items():
        assert rec == store.file_identity(folder / f"{k}.npy")


def _rewrite_in_place(path: Path) -> None:
    arr = np.load(path, mmap_mode="r+")
    arr[: max(1, arr.shape[0] // 2)] = 0
    arr.flush()
    del arr


def test_store_rewritten_in_place_is_refused_when_opened_by_path(tmp_path, data):
    folder = storewriter.write_store(data, tmp_path / "s")
    _rewrite_in_place(folder / "feat.npy")
    with pytest.raises(livemap.StoreChanged, match=r"feat\.npy changed since the store was "
                                                   r"written.*delete the folder to rebuild"):
        store.open_store(folder)


def test_touched_or_copied_store_is_fingerprinted_again_and_kept(tmp_path, data, caplog):
    import shutil
    folder = storewriter.write_store(data, tmp_path / "s")
    fp = store.read_store_meta(folder)["fingerprint"]
    shutil.copytree(folder, tmp_path / "copy")  # new inodes and change times, same bytes
    with caplog.at_level("INFO", logger="twopgraph"):
        d = store.open_store(tmp_path / "copy")
    assert d.fingerprint() == fp and "content unchanged" in caplog.text
    meta = store.read_store_meta(tmp_path / "copy")
    assert meta["files"]["feat"] == store.file_identity(tmp_path / "copy" / "feat.npy")


def test_store_without_identity_still_loads(tmp_path, data):
    folder = storewriter.write_store(data, tmp_path / "s")
    meta = store.read_store_meta(folder)
    del meta["files"]
    (folder / "store.json").write_text(json.dumps(meta))
    d = store.open_store(folder)
    assert d.fingerprint() == meta["fingerprint"]


def test_converted_store_rewritten_in_place_is_rebuilt_from_its_source(tmp_path, data,
                                                                       caplog):
    root = tmp_path / "root"
    data.save_npz(root / "d.npz")
    first = load_dataset("d", data_root=root)
    folder = first.store
    del first
    _rewrite_in_place(folder / "feat.npy")
    with caplog.at_level("WARNING", logger="twopgraph"):
        again = load_dataset("d", data_root=root)
    assert "feat.npy changed since the store was written" in caplog.text
    assert "rebuilding it from its source" in caplog.text and "delete" not in caplog.text
    assert np.array_equal(np.asarray(again.feat), data.feat)
    assert again.fingerprint() == data.fingerprint()


def test_renumbered_store_rewritten_in_place_is_rebuilt_with_what_changed(tmp_path, data,
                                                                         caplog):
    """The warning names what changed (StoreChanged.what), not "damaged ... delete the store
    folder": the renumbered store is a cache, rebuilt at once."""
    from twopgraph.locality.cluster import cluster_graph
    from twopgraph.locality.renumber import renumber
    d = store.open_store(storewriter.write_store(data, tmp_path / "s"))
    clustering = cluster_graph(d.graph, 8, train_idx=d.train_idx)
    first, _, perm = renumber(d, clustering, cache_dir=tmp_path / "clusters")
    folder = first.store
    want = np.asarray(first.feat).copy()
    del first
    _rewrite_in_place(folder / "feat.npy")
    with caplog.at_level("WARNING", logger="twopgraph"):
        again, _, _ = renumber(d, clustering, cache_dir=tmp_path / "clusters")
    assert f"renumbered store {folder}: feat.npy changed since the store was written" \
        in caplog.text
    assert "rebuilding it" in caplog.text
    assert "damaged" not in caplog.text and "delete" not in caplog.text
    assert np.array_equal(np.asarray(again.feat), want)


def test_predict_does_not_call_changed_content_the_same_data(tmp_path):
    """A run on a store folder given by path; the folder's features rewritten in place
    afterwards: predict refuses in one line instead of reporting same_data true."""
    root = tmp_path / "R"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    d = community_data(n=400, f=8, seed=1)
    folder = storewriter.write_store(d, tmp_path / "s")
    base = [sys.executable, "-m", "twopgraph"]
    r = subprocess.run(base + ["train", "--dataset", str(folder), "--data-root", str(root),
                               "--epochs", "1", "--out", str(tmp_path / "o"), "--no-progress",
                               "--no-renumber", "--schedule", "random"],
                       cwd=tmp_path, env=env, text=True, capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr
    _rewrite_in_place(folder / "feat.npy")
    r = subprocess.run(base + ["predict", "--checkpoint", str(tmp_path / "o" / "checkpoint.pt"),
                               "--out", str(tmp_path / "p.npy")],
                       cwd=tmp_path, env=env, text=True, capture_output=True, timeout=300)
    assert r.returncode == 2 and '"same_data": true' not in r.stdout, (r.stdout, r.stderr)
    assert r.stderr.strip().splitlines()[-1].startswith("twopgraph: error: ")
    assert "feat.npy changed since the store was written" in r.stderr
    assert not (tmp_path / "p.npy").exists()


# -- item 5: a source swapped for other content of the same size and mtime -----------------
def test_same_size_same_mtime_source_swap_is_converted_again(tmp_path, data):
    root = tmp_path / "root"
    npz = data.save_npz(root / "d.npz")
    first = load_dataset("d", data_root=root)
    assert np.array_equal(np.asarray(first.feat), data.feat)
    st = npz.stat()
    other = GraphData(data.graph, data.feat + 1, data.label, data.train_idx, data.val_idx,
                      data.test_idx, num_classes=data.num_classes)
    tmp = other.save_npz(root / "other.npz")
    assert tmp.stat().st_size == st.st_size
    os.replace(tmp, npz)  # another inode, another change time
    os.utime(npz, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (npz.stat().st_size, npz.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    again = load_dataset("d", data_root=root)
    assert np.array_equal(np.asarray(again.feat), data.feat + 1)
    assert again.fingerprint() != first.fingerprint()


def test_copied_source_with_the_same_bytes_keeps_its_store(tmp_path, data):
    import shutil
    root = tmp_path / "root"
    npz = data.save_npz(root / "d.npz")
    first = load_dataset("d", data_root=root)
    shutil.copy2(npz, tmp_path / "x.npz")
    os.replace(tmp_path / "x.npz", npz)  # same bytes, size and mtime; new inode and ctime
    mtime = (first.store / "feat.npy").stat().st_mtime_ns
    again = load_dataset("d", data_root=root)
    assert (again.store / "feat.npy").stat().st_mtime_ns == mtime  # not converted again
    src = store.read_store_meta(again.store)["source"]
    assert src["inode"] == npz.stat().st_ino  # recorded: cheap next time


# -- item 9: predictions on a renumbered store folder, in the order its node_ids record -------
def test_predict_on_a_renumbered_store_folder_writes_original_order(tmp_path, capsys):
    from conftest import run_cli
    d = community_data(n=400, f=8, seed=4)
    a = storewriter.write_store(d, tmp_path / "a")
    perm = np.random.default_rng(0).permutation(d.num_nodes)
    b = storewriter.permuted_store(store.open_store(a), perm, tmp_path / "b").store
    assert np.array_equal(np.asarray(store.open_store(b).node_ids), perm)
    rc, out, err = run_cli(["train", "--dataset", b, "--data-root", tmp_path / "R", "--epochs",
                            "1", "--out", tmp_path / "o", "--no-progress", "--no-renumber",
                            "--schedule", "random"], capsys)
    assert rc == 0, err
    ck = tmp_path / "o" / "checkpoint.pt"
    got = {}
    for name, folder in (("a", a), ("b", b)):
        rc, out, err = run_cli(["predict", "--checkpoint", ck, "--dataset", folder, "--out",
                                tmp_path / f"{name}.npy", "--logits"], capsys)
        assert rc == 0, err
        got[name] = np.load(tmp_path / f"{name}.npy")
    # b's vertex i is a's vertex perm[i]: in original order both files agree row by row
    np.testing.assert_allclose(got["b"], got["a"], rtol=1e-5, atol=1e-5)


def test_dataset_identity_does_not_vouch_for_a_changed_store(tmp_path, data):
    from twopgraph.datasets import dataset_identity
    folder = storewriter.write_store(data, tmp_path / "s")
    assert dataset_identity(str(folder))["fingerprint"] == data.fingerprint()
    _rewrite_in_place(folder / "feat.npy")
    assert dataset_identity(str(folder))["fingerprint"] is None  # unknown until fingerprinted
