"""``twopgraph bench train``: training epochs end to end, configuration against configuration,
and against DGL 1.1.3 (``--peers dgl``) with the same fanouts, batch size, model,
hyper-parameters, epochs, seeds and threads.

Each variant (``--variants``) is a set of ``twopgraph train`` flags, optionally named
(``NAME: FLAGS``) and optionally with environment variables among them (``VAR=VALUE``
tokens, e.g. ``MALLOC_MMAP_MAX_=65536``: glibc's default, which makes the batch heap step
aside). Each variant x ``--seeds`` seed is one ``twopgraph train`` process (``--eval-every 0``:
the final model is evaluated exactly), run one after the other, measured from outside
(:class:`~twopgraph.bench.procmem.Runner`); DGL runs ``scripts/dgl_baseline.py --mode train``
per seed in its venv, with the fanouts and learning rate twopgraph resolved for the graph.

Rows: ``variant`` (``dgl`` for the peer). Figures (means over the seeds; times are the median
of the epochs after the first): ``train_epoch_s``, ``train_epoch_s_all`` (the last seed's),
``sample_s``, ``load_s``, ``compute_s`` (twopgraph: sampling sums the worker threads and
overlaps compute; DGL: time in the loader, in the feature gather, in the model),
``input_nodes_per_batch``, ``hit_rate``, ``transfer_ratio``, ``test_acc``, ``val_acc``,
``test_acc_sd`` (over seeds), ``peak_rss_mib`` (the run's own), ``wall_s`` (the whole process:
load, clustering, training, evaluation), ``minflt``, ``user_s``, ``sys_s`` (page faults, CPU
seconds; twopgraph only); ``epoch_vs_first`` (this variant's epoch over the first variant's),
``epoch_vs_dgl`` (below 1: faster than DGL) and ``acc_vs_dgl_pt`` (points).

Examples::

    twopgraph bench train --graph synthetic-small --epochs 3 --peers dgl
    twopgraph bench train --graph cora --seeds 0,1,2 \\
        --variants "neighbor: --sampler neighbor; labor: --sampler labor"
    twopgraph bench train --variants "on: --schedule random; off: MALLOC_MMAP_MAX_=65536 \\
        --schedule random"
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shlex
import statistics
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from twopgraph.bench.harness import BENCHMARKS, Benchmark, Context, Row
from twopgraph.errors import ConfigError

if TYPE_CHECKING:
    from twopgraph.bench.procmem import Runner

log = logging.getLogger("twopgraph")

DEFAULT_VARIANTS = ("locality: --schedule locality --cache-policy layer; "
                    "random: --schedule random --cache-policy none")
_ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")
#: per-epoch figures of metrics.json summarised as the median of the epochs after the first
EPOCH_KEYS = ("sample_s", "load_s", "compute_s", "input_nodes_per_batch", "hit_rate",
              "transfer_ratio")


def parse_variants(text: str) -> list[tuple[str, list[str], dict]]:
    """``"NAME: FLAGS; FLAGS"`` as ``[(name, flags, env)]``: ``VAR=VALUE`` tokens go to
    ``env``; an unnamed variant is named by its tokens."""
    out = []
    for part in str(text).split(";"):
        if not part.strip():
            continue
        name, sep, rest = part.partition(":")
        if not sep or name.strip().startswith("-") or " " in name.strip():
            name, rest = "", part
        try:
            tokens = shlex.split(rest)
        except ValueError as e:
            raise ConfigError(f"--variants: cannot read {part.strip()!r} ({e})") from None
        env = dict(t.split("=", 1) for t in tokens if _ENV.match(t))
        flags = [t for t in tokens if not _ENV.match(t)]
        out.append((name.strip() or " ".join(tokens) or "default", flags, env))
    if not out:
        raise ConfigError("--variants: give at least one")
    names = [n for n, _, _ in out]
    if len(set(names)) != len(names) or "dgl" in names:
        raise ConfigError(f"--variants: names must differ (and not be dgl): {names}")
    return out


@BENCHMARKS.register("train")
class TrainBenchmark(Benchmark):
    """Training epochs end to end: twopgraph configurations (``--variants``) side by side,
    and DGL's training with ``--peers dgl``, over ``--seeds``.

    Rows: variant (and dgl). Figures: train_epoch_s (median after the first epoch),
    sample_s/load_s/compute_s, input_nodes_per_batch, hit_rate, test_acc (mean over seeds,
    test_acc_sd), peak_rss_mib, wall_s, minflt/user_s/sys_s, epoch_vs_first, epoch_vs_dgl,
    acc_vs_dgl_pt."""

    help = "training epochs end to end: configurations side by side (and DGL)"
    peers = ("dgl",)
    columns = ("train_epoch_s", "sample_s", "load_s", "compute_s", "input_nodes_per_batch",
               "test_acc", "peak_rss_mib", "wall_s", "epoch_vs_first", "epoch_vs_dgl",
               "acc_vs_dgl_pt")

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--variants", default=DEFAULT_VARIANTS,
                       help="';'-separated `twopgraph train` flag sets, each optionally "
                            "`NAME: FLAGS`, VAR=VALUE tokens set the environment "
                            f"(default: {DEFAULT_VARIANTS!r})")
        p.add_argument("--seeds", default="0", help="comma-separated training seeds; the "
                       "figures are their means (default: 0)")
        p.add_argument("--epochs", type=int, default=3, help="training epochs (default: 3)")
        add_training_options(p)

    def check(self, a: argparse.Namespace) -> None:
        a._variants = parse_variants(a.variants)
        check_training_flags(a)
        try:
            shlex.split(a.train_args)
        except ValueError as e:
            raise ConfigError(f"--train-args: {e}") from None
        if "dgl" in a.peers and a.model not in ("sage", "gcn", "gat"):
            raise ConfigError(f"--model {a.model}: DGL's baseline has sage, gcn, gat")

    def measure(self, a: argparse.Namespace, ctx: Context) -> list[Row]:
        from twopgraph.bench.procmem import Runner
        ctx.data()  # a bad --graph is one line, before any process starts
        rows, resolved = [], {}
        with tempfile.TemporaryDirectory(prefix="twopgraph-bench-train-") as tmp:
            runner = Runner(Path(tmp) / "logs")
            for name, flags, env in a._variants:
                runs = [train_run(a, ctx, runner, Path(tmp) / f"{name}-{seed}", flags, env,
                                  seed) for seed in a._seeds]
                resolved = resolved or runs[0].pop("_resolved", {})
                for r in runs:
                    r.pop("_resolved", None)
                rows.append(Row({"system": "twopgraph", "variant": name, "flags": flags,
                                 "env": env}, over_seeds(runs)))
        if "dgl" in a.peers:
            rows.append(Row({"system": "dgl", "variant": "dgl", "flags": [], "env": {}},
                            over_seeds([dgl_run(a, ctx, resolved, seed)
                                        for seed in a._seeds])))
        add_ratios(rows)
        return rows


def add_training_options(p: argparse.ArgumentParser) -> None:
    """The training options every run of a training benchmark shares (``bench train``,
    ``bench tta``): fanouts, batch size, model, hidden width, lr, dropout, threads, device and
    extra ``twopgraph train`` flags."""
    p.add_argument("--fanouts", default=None, help="default: by graph size, as train")
    p.add_argument("--batch-size", type=int, default=1024, help="(default: 1024)")
    p.add_argument("--model", default="sage", help="sage | gcn | gat (default: sage)")
    p.add_argument("--hidden", type=int, default=256, help="(default: 256)")
    p.add_argument("--lr", type=float, default=None, help="default: by graph size")
    p.add_argument("--dropout", type=float, default=0.5, help="(default: 0.5)")
    p.add_argument("--threads", type=int, default=0,
                   help="CPU threads of every run (0 = all cores) (default: 0)")
    p.add_argument("--device", default="cpu", help="twopgraph's device (DGL runs on the "
                   "CPU) (default: cpu)")
    p.add_argument("--train-args", default="",
                   help="more `twopgraph train` flags for every variant (default: none)")


def check_training_flags(a: argparse.Namespace) -> None:
    """The flags a training benchmark shares (``train``, ``pyg-accuracy``): ``--seeds`` as
    ``a._seeds`` (at least one integer), ``--epochs``/``--batch-size``/``--hidden`` >= 1,
    ``--threads`` >= 0; a one-line ConfigError otherwise."""
    try:
        a._seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(f"--seeds: expected integers, got {a.seeds!r}") from None
    if not a._seeds:
        raise ConfigError("--seeds: give at least one")
    for flag in ("epochs", "batch_size", "hidden"):
        if getattr(a, flag) < 1:
            raise ConfigError(f"--{flag.replace('_', '-')} must be >= 1")
    if a.threads < 0:
        raise ConfigError("--threads must be >= 0")


def _median_after_first(xs: list) -> float | None:
    xs = [x for x in xs if isinstance(x, (int, float))]
    return statistics.median(xs[1:] or xs) if xs else None


def train_run(a: argparse.Namespace, ctx: Context, runner: Runner, out: Path, flags: list[str],
              env: dict, seed: int) -> dict:
    """One ``twopgraph train`` process; its figures (``_resolved``: the fanouts and lr the
    run chose, for the peer)."""
    from twopgraph.bench.procmem import strip, twopgraph_cmd
    cmd = twopgraph_cmd("train", "--dataset", ctx.dataset(), "--out", str(out),
                        "--no-progress", "--eval-every", "0", "--seed", str(seed),
                        "--epochs", str(a.epochs), "--batch-size", str(a.batch_size),
                        "--model", a.model, "--hidden", str(a.hidden), "--dropout",
                        str(a.dropout), "--threads", str(a.threads), "--device", a.device)
    if ctx.data_root:
        cmd += ["--data-root", ctx.data_root]
    if a.fanouts:
        cmd += ["--fanouts", a.fanouts]
    if a.lr is not None:
        cmd += ["--lr", str(a.lr)]
    cmd += [*shlex.split(a.train_args), *flags]
    rec = runner.run(out.name, cmd, env=env)
    if rec["rc"] != 0:
        from twopgraph.errors import TwopgraphError
        raise TwopgraphError(f"bench train: {out.name} failed ({rec['error']}): "
                             f"{_last_line(rec['log'])}")
    m = json.loads((out / "metrics.json").read_text())
    eps = m["epochs"]
    fig = {"train_epoch_s": _median_after_first([e["epoch_s"] for e in eps]),
           "train_epoch_s_all": [e["epoch_s"] for e in eps],
           **{k: _median_after_first([e.get(k) for e in eps]) for k in EPOCH_KEYS},
           "feature_rows": eps[-1].get("feature_rows"), "test_acc": m.get("test_acc"),
           "val_acc": m.get("val_acc"), "peak_rss_mib": m.get("peak_rss_mib"),
           "schedule": m.get("schedule"), "threads": (m.get("threads") or {}).get("total"),
           **{k: v for k, v in strip(rec).items()
              if k in ("wall_s", "ru_maxrss_mib", "minflt", "majflt", "user_s", "sys_s")}}
    cfg = m.get("config") or {}
    fig["_resolved"] = {"fanouts": cfg.get("fanouts"), "lr": cfg.get("lr")}
    return fig


def dgl_run(a: argparse.Namespace, ctx: Context, resolved: dict, seed: int) -> dict:
    """DGL's training of the same model and hyper-parameters (``resolved``: the fanouts and
    learning rate twopgraph chose for the graph) on ``seed``; its figures."""
    import time

    from twopgraph.bench.peers import run_peer
    from twopgraph.bench.sampling import peer_threads
    fanouts = resolved.get("fanouts") or [15, 10, 5]
    lr = a.lr if a.lr is not None else resolved.get("lr") or 0.003
    t = time.perf_counter()
    d = run_peer("dgl", ctx, "train", [
        "--fanouts", ",".join(map(str, fanouts)), "--batch-size", str(a.batch_size),
        "--epochs", str(a.epochs), "--model", a.model, "--hidden", str(a.hidden), "--lr",
        str(lr), "--dropout", str(a.dropout), "--seed", str(seed)], peer_threads(a.threads))
    split = d.get("time_split") or {}
    return {"train_epoch_s": d.get("train_epoch_s"),
            "train_epoch_s_all": d.get("train_epoch_s_all"),
            **{k: split.get(k) for k in ("sample_s", "load_s", "compute_s")},
            "input_nodes_per_batch": d.get("input_nodes_per_batch"),
            "feature_rows": d.get("feature_rows"), "test_acc": d.get("test_acc"),
            "val_acc": d.get("val_acc"), "peak_rss_mib": d.get("peak_rss_mib"),
            "wall_s": time.perf_counter() - t, "threads": d.get("threads"),
            "fanouts": fanouts, "lr": lr}


def over_seeds(runs: list[dict]) -> dict:
    """The figures of one variant over its seeds: means of the numbers (``test_acc_sd``:
    the standard deviation of ``test_acc``, ``test_acc_all``), the last run's others."""
    out = {}
    for k in dict.fromkeys(k for r in runs for k in r):
        vals = [r.get(k) for r in runs]
        nums = [v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
        out[k] = statistics.mean(nums) if nums and len(nums) == len(vals) else vals[-1]
    accs = [r["test_acc"] for r in runs if isinstance(r.get("test_acc"), (int, float))]
    out["test_acc_all"] = accs
    out["test_acc_sd"] = statistics.stdev(accs) if len(accs) > 1 else 0.0
    out["seeds"] = len(runs)
    return out


def add_ratios(rows: list[Row]) -> None:
    """``epoch_vs_first`` (over the first variant), ``epoch_vs_dgl`` and ``acc_vs_dgl_pt``
    (against the DGL row), in place."""
    ours = [r for r in rows if r.params["system"] == "twopgraph"]
    dgl = next((r.figures for r in rows if r.params["system"] == "dgl"), None)
    first = ours[0].figures if ours else {}
    for r in ours:
        f = r.figures
        if f.get("train_epoch_s") and first.get("train_epoch_s"):
            f["epoch_vs_first"] = f["train_epoch_s"] / first["train_epoch_s"]
        if dgl and f.get("train_epoch_s") and dgl.get("train_epoch_s"):
            f["epoch_vs_dgl"] = f["train_epoch_s"] / dgl["train_epoch_s"]
        if dgl and f.get("test_acc") is not None and dgl.get("test_acc") is not None:
            f["acc_vs_dgl_pt"] = 100.0 * (f["test_acc"] - dgl["test_acc"])


def _last_line(log_path: str) -> str:
    try:
        lines = [ln for ln in Path(log_path).read_text(errors="replace").splitlines()
                 if ln.strip()]
    except OSError:
        return "no log"
    errors = [ln for ln in lines if ln.startswith("twopgraph: error")]
    return (errors or lines or ["no output"])[-1]
