"""``twopgraph bench tta``: time to accuracy -- how long each configuration (and DGL) trains
until its validation accuracy reaches a target shared by all of them, in seconds and epochs.

Each variant (``--variants``, as ``bench train``'s: ``NAME: FLAGS`` sets of ``twopgraph
train`` flags, :func:`~twopgraph.bench.train.parse_variants`) x ``--seeds`` seed is one
``twopgraph train`` process of up to ``--max-epochs`` epochs that evaluates the validation
split exactly after every epoch (``--eval-every 1``; :func:`~twopgraph.bench.train.train_run`
runs it); with ``--peers dgl`` DGL trains the same model, fanouts and learning rate
(the ones twopgraph resolved for the graph) with ``scripts/dgl_baseline.py --eval-every 1``.
The runs of one seed go one after the other (every variant, then DGL), then the next seed.

The target of a seed is ``--target-frac`` (default 0.98) of its *converged* validation
accuracy: the best validation accuracy any run of that graph and seed reached in this run,
DGL included -- one target for every variant (:func:`targets`). A run's time to accuracy
(:func:`time_to_target`) is the sum of its training epochs' seconds (``epoch_s``: sampling,
gathering, forward, backward, step; no evaluation, no start-up) up to and including the first
epoch whose validation accuracy reaches the target (ties count: :data:`TIE`), and the epochs
that took; a run that never reaches it has none (``reached`` false: the report says "not
reached").

Rows: one per variant x seed (``system``, ``variant``, ``seed``, ``flags``, ``env``; ``dgl``
for the peer). Figures: ``reached``, ``tta_s``, ``tta_epochs``, ``tta_with_eval_s`` (the
evaluations of those epochs added), ``target_val_acc``, ``converged_val_acc`` and
``converged_by`` (the run that set it), ``best_val_acc`` (this run's), ``test_acc`` (the model
the run selects, best validation accuracy, as ``twopgraph train`` and DGL's baseline both
report it), ``test_acc_at_target`` (the epoch that reached the target), ``train_epoch_s``
(median epoch after the first), ``input_nodes_per_batch``, ``hit_rate``, ``epochs_run``,
``wall_s`` (the whole process), ``val_acc_all``/``epoch_s_all``/``eval_s_all`` (the curve);
``tta_vs_dgl``, ``tta_with_eval_vs_dgl`` and ``tta_epochs_vs_dgl`` against DGL's run of the
same seed (when both reached the target). The report's table (:func:`summary_lines`) gives
per graph and variant the median and min–max over the seeds.

Example::

    twopgraph bench tta --graph cora --seeds 0,1 --max-epochs 30 --peers dgl \\
        --json benchmarks/results/tta.jsonl
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
from pathlib import Path

from twopgraph.bench.harness import BENCHMARKS, Benchmark, Context, Row, fmt
from twopgraph.errors import ConfigError

log = logging.getLogger("twopgraph")

#: the default variants: the three sampling set-ups, without and with the feature cache
DEFAULT_VARIANTS = (
    "random+neighbor: --schedule random --sampler neighbor --cache-policy none; "
    "locality: --schedule locality --sampler neighbor --cache-policy none; "
    "locality+labor: --schedule locality --sampler labor --cache-policy none; "
    "random+neighbor+cache: --schedule random --sampler neighbor --cache-policy layer "
    "--cache-ratio 0.25; "
    "locality+cache: --schedule locality --sampler neighbor --cache-policy layer "
    "--cache-ratio 0.25; "
    "locality+labor+cache: --schedule locality --sampler labor --cache-policy layer "
    "--cache-ratio 0.25")
#: a validation accuracy this far below the target still reaches it: accuracies are float32
#: fractions k/n, and ``frac x best`` of the same k/n can round either way (far below any
#: 1/n of a real validation split)
TIE = 1e-6
#: the figures of a per-run curve
CURVE = ("val_acc_all", "epoch_s_all", "eval_s_all")
#: what the report says about a run (or a graph's variant) that never reached its target
NOT_REACHED = "not reached"


# -- the computation -------------------------------------------------------------------------------
def time_to_target(curve: list[dict], target: float | None) -> dict:
    """Where ``curve`` (a run's epochs in order, each ``{"epoch_s", "eval_s", "val_acc",
    "test_acc"}``; ``eval_s``/``test_acc`` may be None) first reaches ``target``: the epoch
    whose ``val_acc >= target - TIE``. ``reached``, ``tta_s`` (the ``epoch_s`` of that epoch
    and every one before it), ``tta_epochs`` (how many epochs: 1 when the first did),
    ``tta_with_eval_s`` (their ``eval_s`` added), ``reached_epoch`` (0-based),
    ``test_acc_at_target``; every figure None and ``reached`` false when no epoch reaches it
    (or ``target`` is None).

    Example::

        >>> c = [{"epoch_s": 2.0, "eval_s": 0.5, "val_acc": 0.5},
        ...      {"epoch_s": 1.0, "eval_s": 0.5, "val_acc": 0.75}]
        >>> time_to_target(c, 0.7)["tta_s"], time_to_target(c, 0.8)["reached"]
        (3.0, False)
    """
    train = with_eval = 0.0
    for i, e in enumerate(curve):
        train += float(e["epoch_s"])
        with_eval += float(e["epoch_s"]) + float(e.get("eval_s") or 0.0)
        v = e.get("val_acc")
        if target is not None and v is not None and v >= target - TIE:
            return {"reached": True, "tta_s": train, "tta_epochs": i + 1,
                    "tta_with_eval_s": with_eval, "reached_epoch": i,
                    "test_acc_at_target": e.get("test_acc")}
    return {"reached": False, "tta_s": None, "tta_epochs": None, "tta_with_eval_s": None,
            "reached_epoch": None, "test_acc_at_target": None}


def best_val(curve: list[dict]) -> float | None:
    """The highest validation accuracy of a curve (None: no epoch has one)."""
    vals = [e["val_acc"] for e in curve if e.get("val_acc") is not None]
    return max(vals) if vals else None


def targets(curves: dict[str, list[dict]], frac: float) -> tuple[float | None, str | None,
                                                                 float | None]:
    """The target of one graph and seed from every run's curve (``{variant: curve}``, the
    peer's included): ``(target, converged, by)`` -- ``converged`` is the best validation
    accuracy of any run, ``by`` the first run (in order) that reached it, ``target`` is
    ``frac`` of it; all None when no run has a validation accuracy."""
    best, by = None, None
    for name, curve in curves.items():
        v = best_val(curve)
        if v is not None and (best is None or v > best):
            best, by = v, name
    return (None if best is None else frac * best), best, by


def tta_rows(curves: dict[str, list[dict]], frac: float) -> dict[str, dict]:
    """``{variant: figures}`` of one graph and seed: :func:`time_to_target` of each curve
    against the seed's :func:`targets`, with ``target_val_acc``, ``converged_val_acc``,
    ``converged_by``, ``best_val_acc`` (the run's own) and the curve
    (:data:`CURVE` lists)."""
    target, converged, by = targets(curves, frac)
    out = {}
    for name, curve in curves.items():
        out[name] = {**time_to_target(curve, target), "target_val_acc": target,
                     "converged_val_acc": converged, "converged_by": by,
                     "best_val_acc": best_val(curve), "epochs_run": len(curve),
                     "val_acc_all": [e.get("val_acc") for e in curve],
                     "epoch_s_all": [e["epoch_s"] for e in curve],
                     "eval_s_all": [e.get("eval_s") for e in curve]}
    return out


def add_tta_ratios(figs: dict[str, dict], peer: str = "dgl") -> None:
    """``tta_vs_dgl``, ``tta_with_eval_vs_dgl``, ``tta_epochs_vs_dgl`` of every run of one
    seed against the ``peer``'s run (in place): None where either did not reach the
    target."""
    ref = figs.get(peer)
    for name, f in figs.items():
        if name == peer or ref is None:
            continue
        for key, ratio in (("tta_s", "tta_vs_dgl"), ("tta_with_eval_s", "tta_with_eval_vs_dgl"),
                           ("tta_epochs", "tta_epochs_vs_dgl")):
            ok = f.get("reached") and ref.get("reached") and ref.get(key)
            f[ratio] = f[key] / ref[key] if ok else None


# -- the runs' curves ------------------------------------------------------------------------------
def curve_of_metrics(metrics: dict) -> list[dict]:
    """The curve of a ``twopgraph train`` run's ``metrics.json`` (its ``epochs``)."""
    return [{"epoch_s": e["epoch_s"], "eval_s": e.get("eval_s"), "val_acc": e.get("val_acc"),
             "test_acc": e.get("test_acc")} for e in metrics.get("epochs") or []]


def curve_of_dgl(rec: dict) -> list[dict]:
    """The curve of a ``scripts/dgl_baseline.py --eval-every 1`` record:
    ``train_epoch_s_all`` with ``epoch_scores`` (by their ``epoch``)."""
    scores = {s["epoch"]: s for s in rec.get("epoch_scores") or []}
    return [{"epoch_s": t, "eval_s": scores.get(i, {}).get("eval_s"),
             "val_acc": scores.get(i, {}).get("val_acc"),
             "test_acc": scores.get(i, {}).get("test_acc")}
            for i, t in enumerate(rec.get("train_epoch_s_all") or [])]


@BENCHMARKS.register("tta")
class TimeToAccuracyBenchmark(Benchmark):
    """Time to accuracy: the training seconds (the sum of the epochs' ``epoch_s``, evaluation
    excluded; ``tta_with_eval_s`` with it) and epochs each configuration (``--variants``; by
    default random+neighbour, locality and locality+LABOR, each without and with the feature
    cache) and DGL (``--peers dgl``) take to reach ``--target-frac`` (0.98) of the converged
    validation accuracy -- the best that any of them, DGL included, reached on that graph and
    seed in the run, so that the target is the same for all -- with exact evaluation of the
    validation split after every epoch, up to ``--max-epochs``; a run that never reaches it
    shows as not reached. Faster epochs that need more of them show here. "With cache" is
    ``--cache-policy layer --cache-ratio 0.25``: the layer policy's buffer of a quarter of the
    feature rows, filled and looked up every batch as on a GPU; on a CPU machine (the model
    reads the host table itself, nothing is transferred) it is a second copy of those rows,
    so there it measures the cache's cost, not a saving.

    Rows: variant x seed (and dgl). Figures: reached, tta_s, tta_epochs, tta_with_eval_s,
    target_val_acc, best_val_acc, test_acc, train_epoch_s, hit_rate, tta_vs_dgl,
    tta_epochs_vs_dgl."""

    help = "time to accuracy: seconds and epochs to a shared validation target (and DGL)"
    peers = ("dgl",)
    columns = ("reached", "tta_s", "tta_epochs", "tta_with_eval_s", "target_val_acc",
               "best_val_acc", "test_acc", "train_epoch_s", "hit_rate", "tta_vs_dgl",
               "tta_epochs_vs_dgl")

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--variants", default=DEFAULT_VARIANTS,
                       help="';'-separated `twopgraph train` flag sets, each optionally "
                            "`NAME: FLAGS` (as bench train's) (default: random+neighbor, "
                            "locality, locality+labor, each without and with --cache-policy "
                            "layer --cache-ratio 0.25)")
        p.add_argument("--seeds", default="0", help="comma-separated training seeds: a row "
                       "each, the report gives their median and min-max (default: 0)")
        p.add_argument("--max-epochs", type=int, default=30,
                       help="epochs each run trains at most (default: 30)")
        p.add_argument("--target-frac", type=float, default=0.98,
                       help="the target: this fraction of the best validation accuracy any "
                            "run of the graph and seed reached, in (0, 1] (default: 0.98)")
        from twopgraph.bench.train import add_training_options
        add_training_options(p)

    def check(self, a: argparse.Namespace) -> None:
        from twopgraph.bench.train import check_training_flags, parse_variants
        if a.max_epochs < 1:
            raise ConfigError("--max-epochs must be >= 1")
        if not 0.0 < a.target_frac <= 1.0:
            raise ConfigError(f"--target-frac must be in (0, 1], got {a.target_frac}")
        a._variants = parse_variants(a.variants)
        a._train = _as_train(a)
        check_training_flags(a._train)
        a._seeds = a._train._seeds
        if "dgl" in a.peers and a.model not in ("sage", "gcn", "gat"):
            raise ConfigError(f"--model {a.model}: DGL's baseline has sage, gcn, gat")

    def measure(self, a: argparse.Namespace, ctx: Context) -> list[Row]:
        from twopgraph.bench.procmem import Runner
        from twopgraph.bench.train import train_run
        ctx.data()  # a bad --graph is one line, before any process starts
        rows, resolved = [], {}
        params = {name: {"system": "twopgraph", "variant": name, "flags": flags, "env": env}
                  for name, flags, env in a._variants}
        params["dgl"] = {"system": "dgl", "variant": "dgl", "flags": [], "env": {}}
        with tempfile.TemporaryDirectory(prefix="twopgraph-bench-tta-") as tmp:
            runner = Runner(Path(tmp) / "logs")
            for seed in a._seeds:
                curves, extra = {}, {}
                for name, flags, env in a._variants:
                    out = Path(tmp) / f"{name}-{seed}"
                    fig = train_run(a._train, ctx, runner, out, [*flags, "--eval-every", "1"],
                                    env, seed)
                    resolved = resolved or fig.get("_resolved") or {}
                    curves[name] = curve_of_metrics(json.loads((out / "metrics.json")
                                                               .read_text()))
                    extra[name] = {**{k: fig.get(k) for k in ("test_acc", "train_epoch_s",
                                                              "input_nodes_per_batch",
                                                              "hit_rate", "wall_s")},
                                   **(fig.get("_resolved") or {})}
                if "dgl" in a.peers:
                    rec, extra["dgl"] = dgl_tta_run(a, ctx, resolved, seed)
                    curves["dgl"] = curve_of_dgl(rec)
                figs = tta_rows(curves, a.target_frac)
                add_tta_ratios(figs)
                first = next(iter(figs.values()))
                said = ", ".join(f"{n} {fmt(f['tta_s'])} s / {f['tta_epochs']} ep"
                                 if f["reached"] else f"{n} {NOT_REACHED}"
                                 for n, f in figs.items())
                log.info("bench tta: seed %d: converged val_acc %s (%s), target %s; %s", seed,
                         fmt(first["converged_val_acc"]), first["converged_by"],
                         fmt(first["target_val_acc"]), said)
                for name, f in figs.items():
                    rows.append(Row({**params[name], "seed": seed}, {**f, **extra[name]}))
        return rows


def _as_train(a: argparse.Namespace) -> argparse.Namespace:
    """The options as ``bench train``'s functions read them (``epochs`` = ``--max-epochs``)."""
    return argparse.Namespace(**{**vars(a), "epochs": a.max_epochs})


def dgl_tta_run(a: argparse.Namespace, ctx: Context, resolved: dict,
                seed: int) -> tuple[dict, dict]:
    """DGL's run of ``seed`` with the fanouts and learning rate twopgraph resolved
    (``resolved``), evaluated after every epoch: its record and its extra figures."""
    import time

    from twopgraph.bench.peers import run_peer
    from twopgraph.bench.sampling import peer_threads
    fanouts = resolved.get("fanouts") or [15, 10, 5]
    lr = a.lr if a.lr is not None else resolved.get("lr") or 0.003
    t = time.perf_counter()
    d = run_peer("dgl", ctx, "train", [
        "--fanouts", ",".join(map(str, fanouts)), "--batch-size", str(a.batch_size),
        "--epochs", str(a.max_epochs), "--eval-every", "1", "--model", a.model, "--hidden",
        str(a.hidden), "--lr", str(lr), "--dropout", str(a.dropout), "--seed", str(seed)],
        peer_threads(a.threads))
    return d, {"test_acc": d.get("test_acc"), "train_epoch_s": d.get("train_epoch_s"),
               "input_nodes_per_batch": d.get("input_nodes_per_batch"), "hit_rate": None,
               "wall_s": time.perf_counter() - t, "fanouts": fanouts, "lr": lr}


# -- the report's table ----------------------------------------------------------------------------
def _spread(values: list, one=fmt) -> str:
    """``median (min–max)`` of ``values`` (just the value when they agree or there is one)."""
    vals = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not vals:
        return "-"
    med, lo, hi = statistics.median(vals), min(vals), max(vals)
    return one(med) if lo == hi else f"{one(med)} ({one(lo)}–{one(hi)})"


def _seconds(v: float) -> str:
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _ratio(v: float) -> str:
    return f"{v:.2f}x"


def latest_by_seed(records: list[dict]) -> dict[tuple, dict[object, dict]]:
    """``{(graph, variant): {seed: figures}}`` of ``bench tta`` records, in first-seen order;
    a seed measured again counts its later record."""
    out: dict[tuple, dict[object, dict]] = {}
    for r in records:
        p = r["params"]
        out.setdefault((p.get("graph"), p.get("variant")), {})[p.get("seed")] = r["figures"]
    return out


def settings(records: list[dict]) -> str:
    """Per graph, the seeds, ``--max-epochs``, ``--target-frac`` and the fanouts and learning
    rate the runs trained with: ``cora: seeds 0, 1, 30 epochs at most, target 0.98, fanouts
    15,10,5, lr 0.003``, the graphs joined by ``; ``."""
    per: dict[object, dict] = {}
    for r in records:
        p, f = r["params"], r["figures"]
        g = per.setdefault(p.get("graph"), {"seeds": {}, "max_epochs": {}, "target_frac": {},
                                            "fanouts": {}, "lr": {}})
        g["seeds"][p.get("seed")] = None
        for key, src in (("max_epochs", p), ("target_frac", p), ("fanouts", f), ("lr", f)):
            if src.get(key) is not None:
                g[key][fmt(src[key])] = None
    return "; ".join(
        f"{graph}: seeds {', '.join(map(str, g['seeds']))}, "
        f"{'/'.join(g['max_epochs']) or '?'} epochs at most, target "
        f"{'/'.join(g['target_frac']) or '?'}"
        + (f", fanouts {'/'.join(g['fanouts'])}" if g["fanouts"] else "")
        + (f", lr {'/'.join(g['lr'])}" if g["lr"] else "")
        for graph, g in per.items())


def summary_lines(records: list[dict]) -> list[str]:
    """The report's table of ``bench tta`` records: per graph and variant, over the seeds,
    the median (min–max) of the time to the target (training seconds, with evaluation),
    the epochs, the ratio to DGL's time of the same seed, the epoch time, the target, the
    best validation and the test accuracy; the seeds that reached the target ("not reached"
    when none did: those seeds' times are not in the medians)."""
    groups = latest_by_seed(records)
    if not groups:
        return []
    head = ("| graph | variant | reached | time to target, s | epochs | with evaluation, s "
            "| time vs DGL | epoch s | target val acc | best val acc | test acc |")
    lines = [head, "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for (graph, variant), by_seed in groups.items():
        figs = list(by_seed.values())
        ok = [f for f in figs if f.get("reached")]
        n = len(figs)
        reached = f"{len(ok)}/{n}" if len(ok) == n else f"**{len(ok)}/{n}**"

        def cell(key, one=fmt, ok=ok):
            return _spread([f.get(key) for f in ok], one) if ok else f"**{NOT_REACHED}**"
        ratio = _spread([f.get("tta_vs_dgl") for f in ok], _ratio) if ok else "-"
        dgl = groups.get((graph, "dgl"), {})
        if (variant != "dgl" and ratio == "-" and ok
                and any(not f.get("reached") for f in dgl.values())):
            ratio = f"DGL {NOT_REACHED}"
        lines.append("| " + " | ".join([
            str(graph), str(variant), reached, cell("tta_s", _seconds),
            cell("tta_epochs", lambda v: f"{v:g}"), cell("tta_with_eval_s", _seconds), ratio,
            _spread([f.get("train_epoch_s") for f in figs], _seconds),
            _spread([f.get("target_val_acc") for f in figs], lambda v: f"{v:.4f}"),
            _spread([f.get("best_val_acc") for f in figs], lambda v: f"{v:.4f}"),
            _spread([f.get("test_acc") for f in figs], lambda v: f"{v:.4f}")]) + " |")
    note = ("Median (min–max) over the seeds (" + settings(records) + "); the times, "
            "epochs and ratios over the seeds whose run reached the target (\"reached\" "
            "counts them). The target of a seed is `target_val_acc` = `--target-frac` x the "
            "best validation accuracy any run of that graph and seed reached (DGL's "
            "included): the maximum over every run's epochs, so on a small validation split "
            "(a few hundred vertices) it sits above a typical plateau, and a run whose "
            "plateau is a point lower may not reach it. \"time to target\" sums the "
            "training epochs up to the one that reached it (evaluation, start-up and "
            "preprocessing excluded; \"with evaluation\" adds the evaluations of those "
            "epochs); \"time vs DGL\" is that time over DGL's of the same seed (below 1: "
            "sooner than DGL); \"epoch s\" the median epoch after the first; test acc that "
            "of the model each run selects (best validation accuracy).")
    lines += ["", note, ""]
    return lines
