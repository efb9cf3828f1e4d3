"""Two machines, as far as twopgraph can tell: two torchrun nodes, each in a UTS namespace of
its own (``unshare --uts``, host names node0 and node1), one rank each, meeting at a static
rendezvous on 127.0.0.1. They train a 2-part partition and must end exactly where
``twopgraph train --nproc 2`` on one host ends (same figures, same weights), exact
evaluation having exchanged only halo rows (``eval_exchanged_bytes`` > 0 and at most a
quarter of what replicating the hidden tables would move) instead of sharing a scratch file
-- and of those only the later layers': layer 0's halo rows each rank computes from its store.

Needs root (a UTS namespace) and ``unshare(1)``; skipped with the reason otherwise."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from twopgraph.datasets.synthetic import SYNTHETIC_PRESETS, generate
from twopgraph.distributed.evaluate import SEPARATE_HOSTS_ENV
from twopgraph.distributed.partition.selfdep import partition_selfdep
from twopgraph.store.reader import open_store
from twopgraph.store.writer import write_store

HIDDEN, FANOUTS = 32, "5,5,5"
LAYERS = len(FANOUTS.split(","))
TRAIN = ["--fanouts", FANOUTS, "--batch-size", "128", "--epochs", "2", "--hidden",
         str(HIDDEN), "--device", "cpu", "--threads", "1", "--no-progress"]
TIMEOUT_S = 150


def _uts_problem() -> str | None:
    """Why this machine cannot give a process a host name of its own (None: it can)."""
    if os.geteuid() != 0:
        return "needs root for unshare --uts (a host name per node)"
    if shutil.which("unshare") is None:
        return "needs unshare(1) (util-linux) for a host name per node"
    probe = subprocess.run(["unshare", "--uts", "sh", "-c", "hostname node0"],
                           capture_output=True, text=True, timeout=30, check=False)
    if probe.returncode != 0:
        return f"unshare --uts is not permitted here: {probe.stderr.strip()[:200]}"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict:
    """This environment without torchrun's variables nor the one-machine override."""
    drop = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
            "MASTER_PORT", SEPARATE_HOSTS_ENV}
    return {k: v for k, v in os.environ.items() if k not in drop}


def _wait(procs: list[subprocess.Popen]) -> list[int]:
    """Exit codes of ``procs`` (each the leader of its own session); a node still running
    after TIMEOUT_S is killed with everything it started."""
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=TIMEOUT_S))
        except subprocess.TimeoutExpired:
            for q in procs:
                if q.poll() is None:
                    os.killpg(q.pid, signal.SIGKILL)
            codes.append(p.wait())
    return codes


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """A 2-part partition of a small community graph (few edges between communities, so a
    rank's halo is a small share of the graph), trained by two "hosts" and by ``--nproc 2``
    on this one: ``{"two": folder, "one": folder, "logs": [node0, node1], "n": N}``."""
    if (why := _uts_problem()) is not None:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("two_hosts")
    spec = replace(SYNTHETIC_PRESETS["synthetic-tiny"], p_in=0.99, p_class=0.005,
                   name="two-hosts")
    data = generate(spec)
    store = write_store(data, root / "data" / "store")
    parts = root / "parts"
    partition_selfdep(open_store(store), 2, 2, parts, num_clusters=20)
    port, procs, logs = _free_port(), [], []
    for r in (0, 1):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank",
               str(r), "--nproc-per-node", "1", "--master-addr", "127.0.0.1",
               "--master-port", str(port), "-m", "twopgraph", "train", "--partitions",
               str(parts), *TRAIN, "--out", str(root / "two")]
        log = root / f"node{r}.log"
        logs.append(log)
        with open(log, "w") as f:
            procs.append(subprocess.Popen(
                ["unshare", "--uts", "sh", "-c", f'hostname node{r} && exec "$@"', "sh", *cmd],
                stdout=f, stderr=subprocess.STDOUT, env=_env(), start_new_session=True))
    codes = _wait(procs)
    text = [p.read_text() for p in logs]
    assert codes == [0, 0], "\n".join(t[-3000:] for t in text)
    one = subprocess.run([sys.executable, "-m", "twopgraph", "train", "--partitions",
                          str(parts), "--nproc", "2", *TRAIN, "--out", str(root / "one")],
                         capture_output=True, text=True, timeout=TIMEOUT_S, env=_env(),
                         check=False)
    assert one.returncode == 0, one.stderr[-3000:]
    return {"two": root / "two", "one": root / "one", "logs": text, "n": data.num_nodes}


def _metrics(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


def test_two_hosts_end_where_one_host_ends(runs):
    """The same selected figures, epoch records and final weights as on one host."""
    two, one = _metrics(runs["two"]), _metrics(runs["one"])
    assert two["status"] == one["status"] == "ok"
    for key in ("val_acc", "test_acc", "val_score", "test_score", "selected_epoch"):
        assert two[key] == one[key], key
    assert two["test_acc"] is not None
    assert len(two["epochs"]) == len(one["epochs"]) == 2
    for a, b in zip(two["epochs"], one["epochs"]):
        for key in ("loss", "train_acc", "val_acc", "test_acc", "num_batches", "num_seeds",
                    "feature_rows", "eval_scope", "eval_rows"):
            assert a[key] == b[key], (a["epoch"], key)
    wa = torch.load(runs["two"] / "checkpoint.pt", weights_only=False)["model"]
    wb = torch.load(runs["one"] / "checkpoint.pt", weights_only=False)["model"]
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_two_hosts_exchange_halo_rows_only(runs):
    """Across hosts the hidden rows travel, a small share of the replicated tables' bytes:
    those of layer 1's output only (at most ``HIDDEN`` wide), layer 0's halo rows being
    computed by each rank from its store; the log says how many of each once, as the epochs
    record them. On one host nothing travels (the scratch file)."""
    two, one = _metrics(runs["two"]), _metrics(runs["one"])
    replicated = runs["n"] * 4 * HIDDEN * (LAYERS - 1)
    assert 0 < two["eval_exchanged_bytes"] <= 0.25 * replicated
    assert all(e["eval_exchanged_bytes"] == two["eval_exchanged_bytes"] for e in two["epochs"])
    received, computed = (two["epochs"][-1][f"eval_halo_rows_{k}"]
                          for k in ("received", "computed"))
    assert received > 0 and computed > 0
    assert two["eval_exchanged_bytes"] <= received * 4 * HIDDEN  # no layer-0 rows among them
    assert one["eval_exchanged_bytes"] == 0
    assert all(e["eval_halo_rows_received"] == e["eval_halo_rows_computed"] == 0
               for e in one["epochs"])
    node0, node1 = runs["logs"]
    assert "all-reduced" not in node0 + node1
    assert node0.count("halo rows of the hidden layers") == 1, node0[-3000:]
    said = re.search(r"exchanges (\d+) halo rows of the hidden layers .*and computes (\d+) "
                     r"halo rows of layer 0 locally", node0)
    assert said and [int(said[1]), int(said[2])] == [received, computed], node0[-3000:]
