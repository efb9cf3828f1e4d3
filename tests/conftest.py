"""Small shared builders: random CSR graphs, a tiny community graph with node data, graphs of
other degree laws, and the small real datasets of the shared folder (skipped when absent)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from twopgraph.graph.data import CSRGraph, GraphData

# The tests mirror the package (tests/cache/, tests/faults/, ...) and import helpers from one
# another (``from test_cache import sampled_stream``): every folder of tests is on the path,
# whichever file runs first or alone.
for _folder in sorted(p for p in Path(__file__).resolve().parent.iterdir()
                      if p.is_dir() and not p.name.startswith(("_", "."))):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))


# The default data root ($XDG_CACHE_HOME/twopgraph) of the tests that leave it to the default:
# inside the clone (git-ignored), never the user's own cache; subprocesses inherit it.
os.environ["XDG_CACHE_HOME"] = str(Path(__file__).resolve().parents[1] / ".pytest_cache"
                                   / "xdg-cache")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``cuda`` (``@pytest.mark.cuda`` or a ``pytest.param(..., marks=CUDA_MARK)``)
    is skipped with the reason where torch sees no CUDA GPU; ``pytest -m cuda`` selects them
    all (what ``scripts/gpu_check.sh`` runs on a GPU machine)."""
    if item.get_closest_marker("cuda") is not None:
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA GPU (torch sees none)")


#: the mark of a CUDA test or parametrisation: selected by ``-m cuda``, skipped without a GPU
CUDA_MARK = pytest.mark.cuda


def random_graph(n: int = 200, m: int = 1000, seed: int = 0, hub: bool = True) -> CSRGraph:
    """Symmetric random graph; with ``hub`` vertex 0 is joined to half the vertices."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    if hub:
        others = np.arange(1, n, 2)
        src = np.concatenate([src, np.zeros_like(others)])
        dst = np.concatenate([dst, others])
    return CSRGraph.from_edges(src, dst, n)


def community_data(n: int = 600, k: int = 4, f: int = 8, seed: int = 0) -> GraphData:
    """k communities, labels = community, features = noisy label centroids."""
    rng = np.random.default_rng(seed)
    comm = rng.integers(0, k, n)
    src, dst = [], []
    for _ in range(n * 4):
        u = rng.integers(n)
        same = np.flatnonzero(comm == comm[u])
        v = rng.choice(same) if rng.random() < 0.85 else rng.integers(n)
        src.append(u)
        dst.append(v)
    g = CSRGraph.from_edges(np.array(src), np.array(dst), n)
    centroids = rng.normal(size=(k, f)).astype(np.float32)
    feat = (centroids[comm] + 1.5 * rng.normal(size=(n, f))).astype(np.float32)
    perm = rng.permutation(n)
    tr, va, te = np.sort(perm[: n // 2]), np.sort(perm[n // 2: 3 * n // 4]), np.sort(perm[3 * n // 4:])
    return GraphData(g, feat, comm.astype(np.int64), tr, va, te, name="community")


def power_law_data(n: int = 800, avg_deg: float = 6.0, gamma: float = 2.2, k: int = 5,
                   f: int = 8, seed: int = 0) -> GraphData:
    """Chung-Lu graph with power-law expected degrees (exponent ``gamma``: a few hubs, many
    leaves), random labels and features, half the vertices for training."""
    rng = np.random.default_rng(seed)
    w = (1.0 - rng.random(n)) ** (-1.0 / (gamma - 1.0))
    m = int(n * avg_deg / 2)
    p = w / w.sum()
    g = CSRGraph.from_edges(rng.choice(n, m, p=p), rng.choice(n, m, p=p), n)
    label = rng.integers(0, k, n).astype(np.int64)
    feat = rng.normal(size=(n, f)).astype(np.float32)
    perm = rng.permutation(n)
    return GraphData(g, feat, label, np.sort(perm[:n // 2]), np.sort(perm[n // 2:3 * n // 4]),
                     np.sort(perm[3 * n // 4:]), name="power-law")


def shared_datasets_dir() -> Path:
    """The shared real datasets (``TWOPGRAPH_SHARED_DATASETS`` or ../../shared/datasets)."""
    env = os.environ.get("TWOPGRAPH_SHARED_DATASETS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "datasets"


def shared_dataset(name: str) -> GraphData:
    """A small real dataset (e.g. ``cora``) of the shared folder; skips the test without it."""
    path = shared_datasets_dir() / f"{name}.npz"
    if not path.is_file():
        pytest.skip(f"shared dataset {path} not available")
    return GraphData.load_npz(path, name=name)


@pytest.fixture
def graph():
    return random_graph()


@pytest.fixture
def data():
    return community_data()


def run_cli(argv, capsys) -> tuple[int, str, str]:
    """``twopgraph.cli.main(argv)`` in-process -> (exit code, stdout, stderr); argparse exits
    are caught."""
    from twopgraph.cli import main
    capsys.readouterr()
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as e:
        rc = e.code
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def join_all(processes, timeout: float = 120) -> None:
    """Wait up to ``timeout`` s for each process; kill any that hangs (a hung rank fails the
    test through its exit code, it is never left behind)."""
    for p in processes:
        p.join(timeout=timeout)
    for p in processes:
        if p.is_alive():
            p.kill()
            p.join()

