"""The peer baselines, in one place: other systems run on the same graph, fanouts, batch size,
hyper-parameters and thread count, each in its own virtualenv and process.

A peer is a standalone script run by the peer's own interpreter (its venv cannot import
twopgraph): it reads the dataset's arrays (an ``.npz`` or a complete store folder), measures,
and prints one JSON object on stdout. :data:`PEERS` lists them:

- ``dgl``: DGL 1.1.3 (``scripts/dgl_baseline.py`` in ``.venv-dgl``, made by
  ``scripts/setup_dgl_baseline.sh``; ``--dgl-venv`` or ``$DGL_VENV`` elsewhere):
  ``NeighborSampler`` + shuffled ``DataLoader`` + ``SAGEConv``/``GraphConv``/``GATConv``,
  exact layer-wise inference. Modes: ``sample`` (sampling-only epochs: ``sample_epoch_s``,
  ``seeds_per_s``, ``input_nodes_per_batch``), ``train`` (``train_epoch_s``, ``time_split``,
  accuracies, ``peak_rss_mib``), ``both``. Its version goes into the records' ``versions``.
- ``graphbolt``: DGL 2.1's GraphBolt CPU samplers (``scripts/graphbolt_baseline.py`` in
  ``.venv-gb`` on torch 2.1.2, made by ``scripts/setup_graphbolt_baseline.sh``;
  ``--graphbolt-venv`` or ``$GRAPHBOLT_VENV``): ``NeighborSampler`` and
  ``LayerNeighborSampler`` (LABOR-0), mode ``sample`` only (``--sampler neighbor|labor``):
  ``sample_epoch_s``, ``input_nodes_per_batch``, ``sampled_edges_per_batch``.

A benchmark that can run peers declares them (``Benchmark.peers``); ``--peers dgl`` asks for
them. A missing venv is one line (and exit 2) before anything is measured.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from twopgraph.errors import ConfigError, TwopgraphError

if TYPE_CHECKING:
    from twopgraph.bench.harness import Context

log = logging.getLogger("twopgraph")

#: the repository (the peer scripts live in its ``scripts/``)
ROOT = Path(__file__).resolve().parents[2]
#: what a peer reads: the dataset format's arrays
ARRAYS = ("indptr", "indices", "feat", "label", "train_idx", "val_idx", "test_idx")


class PeerError(TwopgraphError):
    """A peer run failed (its exit code and last line of output)."""


@dataclass(frozen=True)
class Peer:
    """One peer: ``label`` (in tables), ``script`` (relative to the repository), the venv
    (``venv_env`` environment variable, else ``venv_default`` in the repository), its setup
    script, and the key of its record holding its version."""

    name: str
    label: str
    script: str
    venv_env: str
    venv_default: str
    setup: str
    version_key: str

    def venv(self, given: str | None = None) -> Path:
        """The venv: ``given``, else ``$venv_env``, else the default in the repository."""
        return Path(given or os.environ.get(self.venv_env) or ROOT / self.venv_default)


PEERS = {"dgl": Peer("dgl", "DGL 1.1.3", "scripts/dgl_baseline.py", "DGL_VENV", ".venv-dgl",
                     "scripts/setup_dgl_baseline.sh", "dgl_version"),
         "graphbolt": Peer("graphbolt", "DGL 2.1 GraphBolt", "scripts/graphbolt_baseline.py",
                           "GRAPHBOLT_VENV", ".venv-gb", "scripts/setup_graphbolt_baseline.sh",
                           "graphbolt_version")}


def add_peer_arguments(group: argparse._ArgumentGroup, peers: tuple[str, ...]) -> None:
    """``--peers`` (the ``peers`` a benchmark can run) and each peer's ``--NAME-venv``."""
    group.add_argument("--peers", default="", metavar="{" + ",".join(peers) + "}[,...]",
                       help="peer systems also measured, comma-separated: "
                            + " | ".join(f"{p}: {PEERS[p].label}" for p in peers)
                            + " (default: none)")
    for p in peers:
        group.add_argument(f"--{p}-venv", default=None,
                           help=f"{PEERS[p].label}'s virtualenv (default: ${PEERS[p].venv_env}"
                                f", else {PEERS[p].venv_default}; {PEERS[p].setup} makes it)")


def check_peers(a: argparse.Namespace) -> None:
    """``a.peers`` as a list of known peers whose venv and script exist (one-line
    :class:`ConfigError` otherwise)."""
    names = [x.strip() for x in str(a.peers or "").split(",") if x.strip()]
    for name in names:
        if name not in PEERS:
            raise ConfigError(f"unknown peer {name!r}; known: {', '.join(PEERS)}")
        peer = PEERS[name]
        python(peer, getattr(a, f"{name}_venv", None))
    a.peers = names


def python(peer: Peer, venv: str | None = None) -> Path:
    """The interpreter of ``peer``'s venv; one-line ConfigError when it (or the peer's
    script) is missing."""
    py = peer.venv(venv) / "bin" / "python"
    if not py.exists():
        raise ConfigError(f"no {peer.label} venv at {peer.venv(venv)}; run {peer.setup} first "
                          f"(or set ${peer.venv_env}, or leave {peer.name} out of --peers)")
    if not (ROOT / peer.script).is_file():
        raise ConfigError(f"the {peer.name} peer needs {peer.script} of the source tree "
                          f"({ROOT / peer.script} is missing)")
    return py


def peer_input(ctx: Context) -> str:
    """What a peer reads for the context's graph: its store folder when that holds every
    array of :data:`ARRAYS`, its ``.npz`` file, else an ``.npz`` exported once into
    ``DATA_ROOT/bench/peers/``."""
    from twopgraph.datasets import resolve_data_root
    from twopgraph.store.npz import export_npz
    data = ctx.data()
    store = getattr(data, "store", None)
    if store is not None and all((Path(store) / f"{k}.npy").is_file() for k in ARRAYS):
        return str(store)
    given = Path(ctx.dataset())
    if given.suffix == ".npz" and given.is_file():
        return str(given)
    out = (resolve_data_root(ctx.data_root) / "bench" / "peers"
           / f"{data.name}-{data.num_nodes}-{data.graph.indices.shape[0]}.npz")
    if not out.is_file():
        log.info("peers: exporting %s to %s (once)", data.name, out)
        out.parent.mkdir(parents=True, exist_ok=True)
        export_npz(data, out)
    return str(out)


def run_peer(name: str, ctx: Context, mode: str, flags: list[str], threads: int) -> dict:
    """Run peer ``name`` on the context's graph in ``mode`` with ``flags`` (the peer script's
    own: ``--fanouts``, ``--batch-size``, ``--epochs``, ...) on ``threads`` threads; its JSON
    record. Its version goes into ``ctx.peer_versions``. A failure raises
    :class:`PeerError` with the peer's last line."""
    peer = PEERS[name]
    py = python(peer, getattr(ctx.args, f"{name}_venv", None))
    cmd = [str(py), str(ROOT / peer.script), "--npz", peer_input(ctx), "--mode", mode,
           "--threads", str(threads), "--json", *flags]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               NUMBA_NUM_THREADS=str(threads))
    log.info("peers: %s", " ".join(cmd))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env,
                       cwd=ROOT, check=False)
    sys.stderr.write(r.stderr)
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    if r.returncode != 0 or not lines:
        last = ([ln for ln in r.stderr.splitlines() if ln.strip()] or ["no output"])[-1]
        raise PeerError(f"{peer.label} ({mode}) failed with exit code {r.returncode}: {last}")
    rec = json.loads(lines[-1])
    if rec.get(peer.version_key):
        ctx.peer_versions[name] = rec[peer.version_key]
    return rec
