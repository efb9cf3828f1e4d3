"""``twopgraph bench pyg-accuracy``: an unmodified PyG model trained through
:class:`twopgraph.pyg.NeighborLoader` with PyG's documented loop, beside the same model
trained by ``twopgraph train`` -- the same fanouts, batch size, hidden width, dropout,
learning rate, epochs and seeds; both evaluate the final model exactly (every neighbour).

The PyG side (row ``system: pyg``) runs in this process: ``torch_geometric.nn.models.<MODEL>``
(``GraphSAGE``, ``GCN`` or ``GAT``; ``num_layers`` = the number of fanouts, dropout as
given, ``heads`` 4 for GAT as ``twopgraph train``'s default) on ``twopgraph.pyg.to_pyg_data``
of the graph, Adam, ``model(batch.x, batch.edge_index)[:batch.batch_size]`` with
cross-entropy, ``shuffle=True`` (``--loader-args`` adds the loader's keywords, e.g.
``schedule=locality``), then one full-graph forward pass in eval mode. The ``twopgraph
train`` side (``system: twopgraph``) is one ``twopgraph train`` process per seed with the
corresponding model (``sage``, ``gcn``, ``gat``) and ``--eval-every 0`` (the final model).
Needs the ``pyg`` extra (``torch-geometric``).

Rows: ``system`` (``pyg``, ``twopgraph``). Figures (means over ``--seeds``): ``test_acc``,
``val_acc``, ``test_acc_sd`` (standard deviation over the seeds), ``test_acc_all`` (per
seed), ``train_epoch_s`` (median of the epochs after the first), ``wall_s``; on the pyg row
``acc_vs_twopgraph_pt`` (its test accuracy minus ``twopgraph train``'s, in points).

Example::

    twopgraph bench pyg-accuracy --graph amazon_photo --seeds 0,1,2 --epochs 10
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from twopgraph.bench.harness import BENCHMARKS, Benchmark, Context, Row
from twopgraph.errors import ConfigError

#: PyG model class -> ``twopgraph train --model``
MODELS = {"GraphSAGE": "sage", "GCN": "gcn", "GAT": "gat"}


def _loader_kwargs(text: str) -> dict:
    """``"schedule=locality,num_workers=2"`` as keywords (ints where they parse)."""
    out: dict = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, value = part.partition("=")
        if not sep or not key.strip().isidentifier():
            raise ConfigError(f"--loader-args: expected KEY=VALUE, got {part!r}")
        try:
            out[key.strip()] = int(value)
        except ValueError:
            out[key.strip()] = value.strip()
    return out


@BENCHMARKS.register("pyg-accuracy")
class PygAccuracyBenchmark(Benchmark):
    """An unmodified PyG model trained through twopgraph.pyg.NeighborLoader beside the same
    model trained by `twopgraph train` (same hyper-parameters and seeds).

    Rows: system (pyg, twopgraph). Figures: test_acc, val_acc, test_acc_sd, test_acc_all,
    train_epoch_s, wall_s, acc_vs_twopgraph_pt (pyg minus twopgraph, points)."""

    help = "PyG's model on twopgraph.pyg.NeighborLoader beside `twopgraph train`: accuracy"
    default_graph = "cora"
    columns = ("test_acc", "test_acc_sd", "val_acc", "train_epoch_s", "wall_s",
               "acc_vs_twopgraph_pt")

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--model", default="GraphSAGE", choices=sorted(MODELS),
                       help="the torch_geometric.nn.models class (default: GraphSAGE)")
        p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds; the figures "
                       "are their means (default: 0,1,2)")
        p.add_argument("--epochs", type=int, default=10, help="(default: 10)")
        p.add_argument("--fanouts", default="15,10,5",
                       help="neighbours per layer, input layer first (default: 15,10,5)")
        p.add_argument("--batch-size", type=int, default=1024, help="(default: 1024)")
        p.add_argument("--hidden", type=int, default=256, help="(default: 256)")
        p.add_argument("--lr", type=float, default=3e-3, help="Adam (default: 0.003)")
        p.add_argument("--dropout", type=float, default=0.5, help="(default: 0.5)")
        p.add_argument("--threads", type=int, default=0,
                       help="CPU threads of both sides (0 = all cores) (default: 0)")
        p.add_argument("--loader-args", default="",
                       help="more NeighborLoader keywords, KEY=VALUE,... (e.g. "
                            "schedule=locality,sampler=labor) (default: none)")

    def check(self, a: argparse.Namespace) -> None:
        from twopgraph.bench.train import check_training_flags
        from twopgraph.core.fanouts import parse_fanouts
        check_training_flags(a)
        a._fanouts = parse_fanouts(a.fanouts)
        a._loader = _loader_kwargs(a.loader_args)

    def measure(self, a: argparse.Namespace, ctx: Context) -> list[Row]:
        from twopgraph.bench.procmem import Runner
        from twopgraph.bench.train import over_seeds, train_run
        pyg = over_seeds([pyg_run(a, ctx, seed) for seed in a._seeds])
        ta = argparse.Namespace(**{**vars(a), "model": MODELS[a.model], "device": "cpu",
                                   "train_args": ""})
        with tempfile.TemporaryDirectory(prefix="twopgraph-bench-pyg-") as tmp:
            runner = Runner(Path(tmp) / "logs")
            runs = [train_run(ta, ctx, runner, Path(tmp) / f"train-{s}", [], {}, s)
                    for s in a._seeds]
        for r in runs:
            r.pop("_resolved", None)
        ours = over_seeds(runs)
        ours = {k: ours.get(k) for k in ("test_acc", "val_acc", "test_acc_sd",
                                          "test_acc_all", "train_epoch_s", "wall_s", "seeds")}
        if pyg.get("test_acc") is not None and ours.get("test_acc") is not None:
            pyg["acc_vs_twopgraph_pt"] = 100.0 * (pyg["test_acc"] - ours["test_acc"])
        return [Row({"system": "pyg"}, pyg), Row({"system": "twopgraph"}, ours)]


def pyg_run(a: argparse.Namespace, ctx: Context, seed: int) -> dict:
    """One seed of the PyG side: build the model, train ``a.epochs`` epochs with the loader,
    evaluate the final model on the full graph; its figures."""
    import os

    import torch
    import torch.nn.functional as F

    from twopgraph.pyg import NeighborLoader, to_pyg_data
    try:
        from torch_geometric.nn import models
    except ImportError:
        raise ConfigError("bench pyg-accuracy needs torch-geometric: pip install "
                          "'twopgraph[pyg]'") from None
    t0 = time.perf_counter()
    torch.set_num_threads(a.threads or os.cpu_count() or 1)
    data = to_pyg_data(ctx.data())
    torch.manual_seed(seed)
    classes = int(data.y.max()) + 1
    kw = {"heads": 4} if a.model == "GAT" else {}
    model = getattr(models, a.model)(data.num_features, a.hidden, num_layers=len(a._fanouts),
                                     out_channels=classes, dropout=a.dropout, **kw)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    loader = NeighborLoader(data, a._fanouts, input_nodes=data.train_mask,
                            batch_size=a.batch_size, shuffle=True, seed=seed, **a._loader)
    epochs = []
    for _ in range(a.epochs):
        t = time.perf_counter()
        model.train()
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            opt.step()
        epochs.append(time.perf_counter() - t)
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(1)

    def acc(mask: torch.Tensor) -> float:
        return float((pred[mask] == data.y[mask]).float().mean())
    return {"test_acc": acc(data.test_mask), "val_acc": acc(data.val_mask),
            "train_epoch_s": statistics.median(epochs[1:] or epochs),
            "wall_s": time.perf_counter() - t0}
