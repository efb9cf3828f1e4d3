"""``twopgraph bench defaults``: the candidate recipes for the size-based defaults
(:data:`twopgraph.config.SIZE_DEFAULTS`) trained on every shared real dataset, and the
leave-one-out that says whether defaults chosen on the other datasets hold on an unseen one
(issue 41 item 4).

Each recipe of :data:`RECIPES` (``--recipes``) is fanouts, learning rate and epochs (with
``patience``: at most that many, stopped early as ``train --patience`` stops); every
other option of ``twopgraph train`` is at its default (best-validation model selection, exact
evaluation every epoch, ``--metric auto``: ROC-AUC on a 2-class graph, else accuracy). Each
dataset (``--datasets``) x recipe x seed (``--seeds``) is one in-process
:func:`twopgraph.run.train.train` on the dataset loaded once, one after the other.

Rows: ``dataset``, ``recipe``, ``seed`` (and the recipe's ``fanouts``, ``lr``, ``epochs``).
Figures: ``val_score``, ``test_score`` (fractions, in ``metric``), ``metric`` (``acc`` or
``rocauc``), ``selected_epoch`` (0-based), ``epochs_trained`` (fewer than ``epochs`` when
``patience`` stopped the run), ``wall_s`` (seconds of the run, data loading excluded).

The leave-one-out (:func:`leave_one_out`, shown after the rows and on the benchmarks page):
with ``val(r, d)`` / ``test(r, d)`` the mean over the seeds of recipe ``r``'s validation / test
score on dataset ``d``, the *regret* of ``r`` on ``d`` is ``max_r' val(r', d) - val(r, d)``
(>= 0; 0 for the recipe best on ``d``'s validation split), so datasets with different score
scales weigh alike. For each dataset ``d`` the chosen recipe is the one with the least mean
regret over the *other* datasets (ties: the earlier recipe of :data:`RECIPES`), and it is
scored by ``test(chosen, d)`` against the best candidate's test score on ``d``,
``max_r test(r, d)``; ``gap_pt`` is their difference in points (x 100). The defaults hold when
every gap is at most :data:`TOLERANCE_PT`. Only the recipes measured on every dataset take
part (a recipe too costly to run everywhere drops out, not a dataset). :func:`choose` over
all the datasets is what the defaults should be.

Example::

    twopgraph bench defaults --datasets cora,citeseer,actor --seeds 0,1 \\
        --json benchmarks/results/defaults.jsonl
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from twopgraph.bench.harness import BENCHMARKS, STDOUT, Benchmark, Context, Row
from twopgraph.errors import ConfigError

if TYPE_CHECKING:
    from twopgraph.graph.data import GraphData

log = logging.getLogger("twopgraph")

#: the candidate recipes, in tie-breaking order: fanouts (input layer first), Adam's learning
#: rate, epochs (``patience``: early stopping, at most ``epochs``). ``small`` is the ``small``
#: size defaults before this benchmark (issue 41) made them ``standard`` (the 3-layer recipe
#: of the ogbn-products scale with 30 epochs), and then ``standard-es``.
RECIPES: dict[str, dict] = {
    "small": {"fanouts": [10, 10], "lr": 0.01, "epochs": 50},
    "standard": {"fanouts": [15, 10, 5], "lr": 0.003, "epochs": 30},
    "two-layer": {"fanouts": [15, 10], "lr": 0.003, "epochs": 30},
    # standard until the validation score stops improving: at most 100 epochs, stopped after
    # 10 evaluated epochs without a better one (--patience)
    "standard-es": {"fanouts": [15, 10, 5], "lr": 0.003, "epochs": 100, "patience": 10},
    # train's own defaults, nothing given: on a small graph the recipe race of standard-es
    # and two-layer (twopgraph.run.race)
    "race": {"fanouts": None, "lr": None, "epochs": None, "patience": None},
}
#: the shared real datasets (NAME.npz in ``--dataset-dir``)
DATASETS = ("cora", "citeseer", "amazon_photo", "coauthor_cs", "coauthor_physics",
            "facebook_pagepage", "actor", "squirrel_filtered", "tolokers", "twitch_de")
#: the most a dataset's leave-one-out recipe may score below its best candidate, in points
TOLERANCE_PT = 0.5


def _csv(text: str) -> list[str]:
    return list(dict.fromkeys(p.strip() for p in str(text).split(",") if p.strip()))


def default_dataset_dir() -> Path:
    """``../shared/datasets`` beside the repository the source tree is in."""
    return Path(__file__).resolve().parents[3] / "shared" / "datasets"


def dataset_path(name: str, folder: Path) -> str:
    """What ``--dataset`` takes for ``name``: ``folder/NAME.npz`` when that file exists, else
    ``name`` itself (a path, or a name the data root or ``$TWOPGRAPH_DATASET_PATH`` has)."""
    path = folder / f"{name}.npz"
    return str(path) if path.is_file() else name


def dataset_name(entry: str) -> str:
    """The name a ``--datasets`` entry is recorded under: a file's stem, else the entry."""
    return Path(entry).stem if entry.endswith(".npz") else entry


@BENCHMARKS.register("defaults")
class DefaultsBenchmark(Benchmark):
    """Candidate recipes for the size-based defaults (fanouts, lr, epochs; every other option
    at its default: best-validation selection, exact evaluation) trained on each dataset of
    --datasets, and the leave-one-out: for each dataset, the recipe with the least mean
    validation regret (best recipe's val score minus its own) over the other datasets,
    scored on it against the best candidate's test score (the gap in points; the defaults
    hold when every gap is at most 0.5).

    Rows: dataset, recipe, seed. Figures: val_score, test_score (in metric: acc or rocauc),
    selected_epoch, epochs_trained, wall_s (the whole run, a race's probes included); for the
    ``race`` recipe on a small graph also race_chosen (the recipe the race continued) and
    race_other_s (the seconds of the other probes: the race's cost)."""

    help = "candidate recipes for the size-based defaults on real datasets, leave-one-out"
    default_graph = None
    columns = ("metric", "val_score", "test_score", "selected_epoch", "epochs_trained",
               "wall_s", "race_chosen", "race_other_s")

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--datasets", default=",".join(DATASETS),
                       help="comma-separated dataset names (NAME.npz in --dataset-dir, else as "
                            "`train --dataset` takes it) or .npz paths (default: the ten "
                            f"shared real datasets, {','.join(DATASETS)})")
        p.add_argument("--dataset-dir", default=None, metavar="DIR",
                       help="the folder of NAME.npz files (default: ../shared/datasets beside "
                            "the repository)")
        p.add_argument("--recipes", default=",".join(RECIPES),
                       help="comma-separated candidates: "
                            + "; ".join(_recipe_help(k, v) for k, v in RECIPES.items())
                            + f" (default: {','.join(RECIPES)})")
        p.add_argument("--seeds", default="0", help="comma-separated training seeds; the "
                       "leave-one-out uses their means (default: 0)")
        p.add_argument("--threads", type=int, default=0,
                       help="CPU threads of every run (0 = all cores) (default: 0)")
        p.add_argument("--device", default="cpu", help="training device (default: cpu)")

    def check(self, a: argparse.Namespace) -> None:
        a._datasets = _csv(a.datasets)
        if not a._datasets:
            raise ConfigError("--datasets: give at least one")
        a._recipes = _csv(a.recipes)
        bad = [r for r in a._recipes if r not in RECIPES]
        if bad or not a._recipes:
            raise ConfigError(f"--recipes: unknown {', '.join(bad) or '(none given)'}; "
                              f"known: {', '.join(RECIPES)}")
        try:
            a._seeds = [int(s) for s in _csv(a.seeds)]
        except ValueError:
            raise ConfigError(f"--seeds: expected integers, got {a.seeds!r}") from None
        if not a._seeds:
            raise ConfigError("--seeds: give at least one")
        if a.threads < 0:
            raise ConfigError("--threads must be >= 0")
        folder = Path(a.dataset_dir) if a.dataset_dir else default_dataset_dir()
        if a.dataset_dir and not folder.is_dir():
            raise ConfigError(f"--dataset-dir {folder} is not a folder")
        a._paths = {dataset_name(d): dataset_path(d, folder) for d in a._datasets}

    def params(self, a: argparse.Namespace, ctx: Context) -> dict:
        """The parsed options without ``datasets`` and ``dataset_dir`` (each row names its
        dataset; runs of different datasets appended to one file differ only there)."""
        out = super().params(a, ctx)
        out.pop("datasets", None)
        out.pop("dataset_dir", None)
        return out

    def measure(self, a: argparse.Namespace, ctx: Context) -> list[Row]:
        rows = []
        with tempfile.TemporaryDirectory(prefix="twopgraph-bench-defaults-") as tmp:
            for name, path in a._paths.items():
                data = ctx.sub(path).data()
                for recipe in a._recipes:
                    for seed in a._seeds:
                        out = Path(tmp) / f"{name}-{recipe}-{seed}"
                        fig = train_recipe(a, ctx, data, path, recipe, seed, out)
                        log.info("bench defaults: %s %s seed %d: val %.4f test %.4f (%s), "
                                 "%.0f s", name, recipe, seed, fig["val_score"],
                                 fig["test_score"], fig["metric"], fig["wall_s"])
                        rows.append(Row({"dataset": name, "recipe": recipe, "seed": seed,
                                         **RECIPES[recipe]}, fig))
                del data
        return rows

    def show(self, records: list[dict], a: argparse.Namespace) -> None:
        super().show(records, a)
        if a.json != STDOUT:
            print()
            print("\n".join(loo_lines(records)))


def _recipe_help(name: str, r: dict) -> str:
    if r["fanouts"] is None:
        return f"{name} = train's defaults (the recipe race on a small graph)"
    es = f" (stop after {r['patience']} without a better one)" if r.get("patience") else ""
    return (f"{name} = fanouts {','.join(map(str, r['fanouts']))}, lr {r['lr']:g}, "
            f"{r['epochs']} epochs{es}")


def train_recipe(a: argparse.Namespace, ctx: Context, data: GraphData, path: str,
                 recipe: str, seed: int, out: Path) -> dict:
    """One run of ``recipe`` on ``data`` (loaded from ``path``) with ``seed`` into ``out``,
    every other option at ``twopgraph train``'s default; its figures."""
    from twopgraph.config import TrainConfig
    from twopgraph.run.train import train
    r = RECIPES[recipe]
    given = {k: (list(v) if isinstance(v, list) else v) for k, v in r.items()}
    if given["fanouts"] is not None:
        given["patience"] = r.get("patience") or 0
    cfg = TrainConfig.of(dataset=path, data_root=ctx.data_root, **given, seed=seed,
                         out=str(out), progress=False, threads=a.threads, device=a.device)
    t = time.perf_counter()
    res = train(cfg, data)
    fig = {"val_score": res.val_score, "test_score": res.test_score, "metric": res.metric,
           "selected_epoch": res.selected_epoch, "epochs_trained": len(res.epochs),
           "wall_s": time.perf_counter() - t}
    race = _race_record(out)
    if race is not None:  # the race's winner and what its other probes cost
        fig["race_chosen"] = race["chosen"]
        fig["race_other_s"] = sum(c["wall_s"] for n, c in race["candidates"].items()
                                  if n != race["chosen"])
    return fig


def _race_record(out: Path) -> dict | None:
    """The race record of the run in ``out`` (its metrics.json), None when it did not race."""
    try:
        return json.loads((out / "metrics.json").read_text())["defaults"].get("race")
    except (OSError, ValueError, KeyError, AttributeError):
        return None


# -- the leave-one-out -----------------------------------------------------------------------------
def mean_scores(records: list[dict]) -> dict[str, dict[str, dict]]:
    """``{dataset: {recipe: {"val", "test", "metric", "seeds"}}}`` from ``bench defaults``
    records (others ignored): the means over the seeds of ``val_score`` and ``test_score``;
    a (dataset, recipe, seed) measured twice counts once, the later record."""
    last: dict[tuple, dict] = {}
    for r in records:
        p, f = r.get("params") or {}, r.get("figures") or {}
        if r.get("benchmark", "defaults") != "defaults" or f.get("val_score") is None \
                or f.get("test_score") is None:
            continue
        last[(p["dataset"], p["recipe"], p.get("seed"))] = f
    runs: dict[str, dict[str, list[dict]]] = {}
    for (d, rec, _), f in last.items():
        runs.setdefault(d, {}).setdefault(rec, []).append(f)
    return {d: {rec: {"val": statistics.mean(float(f["val_score"]) for f in fs),
                      "test": statistics.mean(float(f["test_score"]) for f in fs),
                      "metric": fs[-1].get("metric"), "seeds": len(fs)}
                for rec, fs in by.items()}
            for d, by in runs.items()}


def _order(recipe: str) -> int:
    names = list(RECIPES)
    return names.index(recipe) if recipe in names else len(names)


def common(scores: dict[str, dict[str, dict]]) -> tuple[list[str], list[str]]:
    """``(recipes, partial)``: the recipes measured on every dataset of ``scores`` and those
    measured on only some (each in :data:`RECIPES` order, then by name). The leave-one-out
    compares the first only: a recipe too costly to run everywhere drops out, not a
    dataset."""
    seen = sorted({r for by in scores.values() for r in by}, key=lambda r: (_order(r), r))
    every = [r for r in seen if all(r in by for by in scores.values())]
    return every, [r for r in seen if r not in every]


def regrets(scores: dict[str, dict[str, dict]], dataset: str,
            recipes: list[str] | None = None) -> dict[str, float]:
    """``{recipe: best recipe's mean val score on dataset - this recipe's}`` over ``recipes``
    (default: every recipe measured on it)."""
    by = scores[dataset]
    recipes = list(by) if recipes is None else recipes
    best = max(by[r]["val"] for r in recipes)
    return {r: best - by[r]["val"] for r in recipes}


def choose(scores: dict[str, dict[str, dict]], datasets: list[str]) -> str:
    """The recipe with the least mean validation regret (:func:`regrets`) over ``datasets``
    among those measured on all of them (ties: the earlier of :data:`RECIPES`); only their
    validation scores are read."""
    if not datasets:
        raise ValueError("choose: no dataset to choose on")
    recipes, _ = common({d: scores[d] for d in datasets})
    if not recipes:
        raise ValueError(f"choose: no recipe measured on every one of {datasets}")
    mean = {r: statistics.mean(regrets(scores, d, recipes)[r] for d in datasets)
            for r in recipes}
    return min(recipes, key=lambda r: (mean[r], _order(r), r))


def leave_one_out(scores: dict[str, dict[str, dict]]) -> list[dict]:
    """One row per dataset, over the recipes measured on every dataset (:func:`common`; at
    least two datasets and two such recipes, else ``[]``): ``dataset``, ``metric``,
    ``chosen`` (:func:`choose` over the *other* datasets), ``test`` (its mean test score on
    the dataset), ``best`` and ``best_test`` (the one of those recipes with the highest test
    score there), ``gap_pt`` (``100 * (best_test - test)``, >= 0)."""
    recipes, _ = common(scores)
    if len(scores) < 2 or len(recipes) < 2:
        return []
    scores = {d: {r: by[r] for r in recipes} for d, by in scores.items()}
    rows = []
    for d, by in scores.items():
        chosen = choose(scores, [x for x in scores if x != d])
        best = max(by, key=lambda r: (by[r]["test"], -_order(r)))
        rows.append({"dataset": d, "metric": by[chosen]["metric"], "chosen": chosen,
                     "test": by[chosen]["test"], "best": best, "best_test": by[best]["test"],
                     "gap_pt": 100.0 * (by[best]["test"] - by[chosen]["test"])})
    return rows


def loo_lines(records: list[dict]) -> list[str]:
    """The leave-one-out of ``records`` in Markdown: over every dataset with the recipes
    measured on all of them, the table, whether every gap is within :data:`TOLERANCE_PT` and
    the recipe chosen on all the datasets; the shared datasets (:data:`DATASETS`) not
    measured; when some recipe was measured on some datasets only, the same over the
    datasets that have every recipe."""
    scores = mean_scores(records)
    _, partial = common(scores)
    out = _defaults_block(scores)
    out += _loo_block(scores, "")
    missing = [d for d in DATASETS if d not in scores]
    if missing and any(d in scores for d in DATASETS):
        out += ["", (f"Not measured: {', '.join(missing)} (of the {len(DATASETS)} shared "
                     "datasets).")]
    if partial:
        full = {d: by for d, by in scores.items() if all(r in by for r in partial)}
        have = ", ".join(f"{r} on {sum(r in by for by in scores.values())}" for r in partial)
        out += ["", f"Left out above: {have} of the {len(scores)} datasets."]
        if len(full) >= 2:
            out += [""] + _loo_block(full, f" (the datasets with {', '.join(partial)} too)")
    return out


def _defaults_block(scores: dict[str, dict[str, dict]]) -> list[str]:
    """``train``'s own defaults (the recipe ``race``) against the best other candidate on
    each dataset where both are measured: the table and whether every gap is within
    :data:`TOLERANCE_PT`; no lines without a ``race`` record. The defaults choose by each
    run's validation split, so nothing is learned from the other datasets: the leave-one-out
    below compares fixed recipes."""
    rows = []
    for d, by in scores.items():
        others = [r for r in by if r != "race"]
        if "race" not in by or not others:
            continue
        best = max(others, key=lambda r: (by[r]["test"], -_order(r)))
        gap = max(0.0, 100.0 * (by[best]["test"] - by["race"]["test"]))
        rows.append((d, by["race"]["metric"], by["race"]["test"], best, by[best]["test"], gap))
    if not rows:
        return []
    out = ["`train`'s defaults (recipe `race`: the recipe race on a small graph) against the "
           "best other candidate measured on each dataset:", "",
           "| dataset | metric | defaults' test score | best other candidate | its test score "
           "| gap (points) |", "| --- | --- | ---: | --- | ---: | ---: |"]
    out += [f"| {d} | {m} | {t:.4f} | {b} | {bt:.4f} | {g:.2f} |" for d, m, t, b, bt, g in rows]
    worst = max(rows, key=lambda r: r[5])
    held = "yes" if all(r[5] <= TOLERANCE_PT for r in rows) else "no"
    return out + ["", f"Defaults within {TOLERANCE_PT} point on every dataset: **{held}** "
                      f"(largest {worst[5]:.2f} on {worst[0]}).", ""]


def _loo_block(scores: dict[str, dict[str, dict]], what: str) -> list[str]:
    """The lines of one leave-one-out (:func:`leave_one_out` of ``scores``)."""
    recipes, _ = common(scores)
    rows = leave_one_out(scores)
    if not rows:
        return [(f"Leave-one-out{what}: needs two datasets and two recipes measured on each; "
                 f"have {len(scores)} dataset(s), recipes on all of them: "
                 f"{', '.join(recipes) or 'none'}.")]
    seeds = "/".join(map(str, sorted({scores[d][r]["seeds"] for d in scores for r in recipes})))
    intro = (f"Leave-one-out{what} over {len(rows)} datasets, recipes {', '.join(recipes)} "
             f"(scores: means over {seeds} seed(s); the chosen recipe has the least mean "
             "validation regret on the other datasets):")
    head = ("| dataset | metric | chosen without it | its test score | best candidate | best "
            "test score | gap (points) |")
    out = [intro, "", head, "| --- | --- | --- | ---: | --- | ---: | ---: |"]
    out += [f"| {r['dataset']} | {r['metric']} | {r['chosen']} | {r['test']:.4f} | {r['best']} "
            f"| {r['best_test']:.4f} | {r['gap_pt']:.2f} |" for r in rows]
    worst = max(rows, key=lambda r: r["gap_pt"])
    held = "yes" if all(r["gap_pt"] <= TOLERANCE_PT for r in rows) else "no"
    chosen = [r["chosen"] for r in rows]
    counts = ", ".join(f"{c} for {chosen.count(c)}" for c in dict.fromkeys(chosen))
    overall = choose({d: {r: by[r] for r in recipes} for d, by in scores.items()}, list(scores))
    verdict = (f"Every gap within {TOLERANCE_PT} point: **{held}** (largest "
               f"{worst['gap_pt']:.2f} on {worst['dataset']}). Chosen: {counts} of {len(rows)}; "
               f"on all {len(rows)} datasets: **{overall}**.")
    return out + ["", verdict]
