#!/usr/bin/env python
"""Recipes: ``twopgraph train`` with its defaults on every real dataset, next to DGL 1.1.3 with
the same hyperparameters (issue 13 item 5, the README's recipes table).

    bash scripts/setup_dgl_baseline.sh
    .venv/bin/python scripts/recipes.py                      # all of ../shared/datasets
    .venv/bin/python scripts/recipes.py --datasets amazon_photo,coauthor_cs,tolokers \\
        --models sage --schedules auto,random                # default schedule vs random

For every dataset, model (``--models``: sage, gcn, gat; default sage,gcn) and seed (``--seeds``,
default 0,1,2):

1. twopgraph: ``twopgraph train --dataset PATH --model M --seed S --out DIR --no-progress
   --threads T``, every other option at its default (the recipe a user types; the size-based
   defaults pick fanouts, lr and epochs), once per ``--schedules`` entry (``auto`` = the
   default, no flag; any other adds ``--schedule X``). Its ``metrics.json`` gives the resolved
   hyperparameters (``config``), the metric (``metric``) and the scores of the selected model.
2. DGL: ``scripts/dgl_baseline.py`` in the DGL venv with exactly those hyperparameters (model,
   fanouts, batch size, epochs, hidden, dropout, lr, weight decay, evaluation every
   ``eval_every`` epochs), the same metric and best-validation selection, taken from the
   twopgraph run of the first ``--schedules`` entry.

Both sides run one after the other on ``--threads`` threads, on the CPU for DGL (twopgraph's
``--device`` is its default: ``auto``).

Written under ``--out`` (default runs/recipes):

- ``recipes.csv``: one row per run (:data:`COLUMNS`); scores are fractions (accuracy or ROC-AUC),
  ``wall_s`` the seconds of the whole process. Runs whose row is already there are skipped, so
  an interrupted benchmark continues where it stopped; delete a row (or the file) to redo it.
- ``recipes.md``: the tables (:func:`markdown`), made again from the whole CSV after every run
  (``--table-only``: only that).
- ``runs/NAME/`` (twopgraph's ``--out``), ``dgl/NAME.json`` (DGL's result), ``logs/NAME.log``
  (each run's stderr).

Progress lines go to stderr. Exit status 1 when a run failed (the others still ran).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT.parent / "shared" / "datasets"

COLUMNS = ["dataset", "side", "model", "schedule", "seed", "metric", "val_score", "test_score",
           "val_acc", "test_acc", "selected_epoch", "epochs", "fanouts", "lr", "batch_size",
           "wall_s", "schedule_used", "hidden", "dropout", "weight_decay", "eval_every", "heads"]
MODELS = ("sage", "gcn", "gat")
KEY = ("dataset", "side", "model", "schedule", "seed")
DGL_SCHEDULE = "random"  # DGL's DataLoader(shuffle=True): a uniform shuffle per epoch
TOLERANCE_POINTS = 0.3  # issue 13: default schedule >= random - 0.3 points


# ----------------------------------------------------------------------------------------------
# CSV rows
# ----------------------------------------------------------------------------------------------


def row_key(row: dict) -> tuple:
    """The identity of a run: (dataset, side, model, schedule, seed), as strings."""
    return tuple(str(row[k]) for k in KEY)


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    return str(v)


def read_rows(path: Path) -> list[dict]:
    """The complete rows of ``path`` (none when it does not exist); a row cut short by an
    interrupted write (no ``wall_s``) is left out, so its run is done again."""
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f) if r.get("wall_s")]


def _upgrade_header(path: Path) -> None:
    """Rewrite a CSV written with fewer :data:`COLUMNS` (an older version of this script)
    with today's header, its rows kept (new columns empty)."""
    with open(path, newline="") as f:
        header = next(csv.reader(f), [])
    if header == COLUMNS or not header:
        return
    rows = read_rows(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") or "" for k in COLUMNS})
    os.replace(tmp, path)


def append_row(path: Path, row: dict) -> None:
    """Append ``row`` (:data:`COLUMNS`) to the CSV, with the header when the file is new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists() or path.stat().st_size == 0
    if not new:
        _upgrade_header(path)
    if not new:  # a line cut short by an interrupted write must not swallow this one
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                with open(path, "a") as g:
                    g.write("\n")
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerow({k: _cell(row.get(k)) for k in COLUMNS})
        f.flush()


def twopgraph_row(dataset: str, model: str, schedule: str, seed: int, metrics: dict,
                  wall_s: float) -> dict:
    """The CSV row of a ``twopgraph train`` run from its ``metrics.json``."""
    cfg = metrics.get("config", {})
    return {"dataset": dataset, "side": "twopgraph", "model": model, "schedule": schedule,
            "seed": seed, "metric": metrics.get("metric", "acc"),
            "val_score": metrics.get("val_score", metrics.get("val_acc")),
            "test_score": metrics.get("test_score", metrics.get("test_acc")),
            "val_acc": metrics.get("val_acc"), "test_acc": metrics.get("test_acc"),
            "selected_epoch": metrics.get("selected_epoch"), "epochs": cfg.get("epochs"),
            "fanouts": cfg.get("fanouts"), "lr": cfg.get("lr"),
            "batch_size": cfg.get("batch_size"), "wall_s": round(wall_s, 2),
            "schedule_used": metrics.get("schedule", cfg.get("schedule")),
            "hidden": cfg.get("hidden"), "dropout": cfg.get("dropout"),
            "weight_decay": cfg.get("weight_decay", 0.0), "eval_every": cfg.get("eval_every", 1),
            "heads": cfg.get("heads") if model == "gat" else None}


def dgl_row(dataset: str, model: str, seed: int, result: dict, wall_s: float) -> dict:
    """The CSV row of a ``dgl_baseline.py --json`` result."""
    return {"dataset": dataset, "side": "dgl", "model": model, "schedule": DGL_SCHEDULE,
            "seed": seed, "schedule_used": DGL_SCHEDULE, "wall_s": round(wall_s, 2),
            **{k: result.get(k) for k in ("metric", "val_score", "test_score", "val_acc",
                                          "test_acc", "selected_epoch", "epochs", "fanouts",
                                          "lr", "batch_size", "hidden", "dropout",
                                          "weight_decay", "eval_every")},
            "heads": result.get("heads") if model == "gat" else None}


def dgl_hyperparameters(tp: dict) -> list[str]:
    """``dgl_baseline.py`` flags reproducing the hyperparameters and metric of twopgraph row
    ``tp``: same model, fanouts, batch size, epochs, hidden, dropout, lr, weight decay and
    evaluation schedule (and gat's heads), best-validation selection, whole-graph exact
    inference."""
    return ["--model", tp["model"], "--fanouts", _cell(tp["fanouts"]),
            "--batch-size", _cell(tp["batch_size"]), "--epochs", _cell(tp["epochs"]),
            "--hidden", _cell(tp["hidden"]), "--dropout", _cell(tp["dropout"]),
            "--lr", _cell(tp["lr"]), "--weight-decay", _cell(tp["weight_decay"] or 0),
            "--metric", _cell(tp["metric"]), "--eval-every", _cell(tp["eval_every"]),
            "--select", "best-val", "--eval-batch-size", "0", "--seed", _cell(tp["seed"]),
            *(["--heads", _cell(tp["heads"])] if tp.get("heads") else [])]


# ----------------------------------------------------------------------------------------------
# aggregation and tables
# ----------------------------------------------------------------------------------------------


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1; 0 for one value)."""
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def _scores(rows: list[dict]) -> list[float]:
    return [float(r["test_score"]) for r in rows if r.get("test_score") not in (None, "")]


def _pts(v: float) -> str:
    return "-" if math.isnan(v) else f"{100 * v:.2f}"


def _pm(values: list[float]) -> str:
    m, s = mean_std(values)
    return "-" if math.isnan(m) else f"{100 * m:.2f} ± {100 * s:.2f}"


def _diff(a: float, b: float) -> str:
    return "-" if math.isnan(a) or math.isnan(b) else f"{100 * (a - b):+.2f}"


def _order(rows: list[dict], field: str) -> list[str]:
    seen: list[str] = []
    for r in rows:
        if r[field] not in seen:
            seen.append(r[field])
    return seen


def summarise(rows: list[dict], schedule: str = "auto") -> list[dict]:
    """Per (dataset, model), in first-seen order: twopgraph's ``schedule`` runs against DGL's.
    Each entry: dataset, model, metric, the recipe (epochs, fanouts, lr, batch_size of the
    twopgraph runs), ``tp``/``dgl`` test scores (lists over seeds), their means, ``diff``
    (twopgraph mean - DGL mean, a fraction), ``schedule_used`` and mean ``wall_s`` per side."""
    out = []
    for ds in _order(rows, "dataset"):
        for model in _order([r for r in rows if r["dataset"] == ds], "model"):
            mine = [r for r in rows if r["dataset"] == ds and r["model"] == model]
            tp = [r for r in mine if r["side"] == "twopgraph" and r["schedule"] == schedule]
            dg = [r for r in mine if r["side"] == "dgl"]
            if not tp and not dg:
                continue
            ref = (tp or dg)[0]
            tp_s, dg_s = _scores(tp), _scores(dg)
            tp_m, dg_m = mean_std(tp_s)[0], mean_std(dg_s)[0]
            out.append({
                "dataset": ds, "model": model, "metric": ref["metric"],
                "epochs": ref["epochs"], "fanouts": ref["fanouts"], "lr": ref["lr"],
                "batch_size": ref["batch_size"], "seeds": sorted({int(r["seed"]) for r in tp}),
                "tp": tp_s, "dgl": dg_s, "tp_mean": tp_m, "dgl_mean": dg_m,
                "diff": tp_m - dg_m if tp_s and dg_s else math.nan,
                "schedule_used": _choices(tp),
                "tp_wall_s": mean_std([float(r["wall_s"]) for r in tp])[0],
                "dgl_wall_s": mean_std([float(r["wall_s"]) for r in dg])[0]})
    return out


def _choices(rows: list[dict]) -> str:
    """The schedules the runs used: ``locality``, or ``locality 2/3, random 1/3`` when mixed."""
    used = [r.get("schedule_used") or "?" for r in rows]
    kinds = sorted(set(used))
    if len(kinds) <= 1:
        return kinds[0] if kinds else "-"
    return ", ".join(f"{k} {used.count(k)}/{len(used)}" for k in kinds)


def compare_schedules(rows: list[dict], default: str = "auto",
                      other: str = "random") -> list[dict]:
    """Per (dataset, model) with twopgraph runs of both schedules: their test-score means,
    ``diff`` (default - other, a fraction), what ``default`` resolved to, and ``ok``: the
    default is at most :data:`TOLERANCE_POINTS` points below the other."""
    out = []
    tp = [r for r in rows if r["side"] == "twopgraph"]
    for ds in _order(tp, "dataset"):
        for model in _order([r for r in tp if r["dataset"] == ds], "model"):
            a = [r for r in tp if r["dataset"] == ds and r["model"] == model
                 and r["schedule"] == default]
            b = [r for r in tp if r["dataset"] == ds and r["model"] == model
                 and r["schedule"] == other]
            if not a or not b:
                continue
            am, bm = mean_std(_scores(a))[0], mean_std(_scores(b))[0]
            out.append({"dataset": ds, "model": model, "metric": a[0]["metric"],
                        "default": _scores(a), "other": _scores(b), "default_mean": am,
                        "other_mean": bm, "diff": am - bm, "chose": _choices(a),
                        "ok": 100 * (am - bm) >= -TOLERANCE_POINTS - 1e-9})
    return out


def recipe_command(dataset_arg: str, model: str, seeds) -> str:
    """The command a user types for this recipe (every other option at its default)."""
    seeds = list(seeds)
    seed = str(seeds[0]) if len(seeds) == 1 else "{" + ",".join(map(str, seeds)) + "}"
    return f"twopgraph train --dataset {dataset_arg} --model {model} --seed {seed}"


def markdown(rows: list[dict], dataset_args: dict | None = None, schedule: str = "auto",
             other: str = "random") -> str:
    """The recipes table (twopgraph's ``schedule`` runs against DGL, per dataset x model) and,
    when ``other`` runs exist, the schedule comparison. ``dataset_args``: dataset name ->
    what the commands show as ``--dataset`` (default ``NAME``). Scores in percent (accuracy
    or ROC-AUC x 100), mean ± sample std over seeds; differences in points."""
    dataset_args = dataset_args or {}
    lines = [("| dataset | model | metric | command | defaults chosen | twopgraph | DGL 1.1.3 "
              "| twopgraph − DGL | seconds / run (twopgraph, DGL) |"),
             "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for s in summarise(rows, schedule):
        cmd = recipe_command(dataset_args.get(s["dataset"], s["dataset"]), s["model"],
                             s["seeds"] or [0])
        hp = (f"fanouts {s['fanouts']}, lr {s['lr']}, {s['epochs']} epochs, batch "
              f"{s['batch_size']}, schedule {s['schedule_used']}")
        secs = ", ".join("-" if math.isnan(v) else f"{v:.0f}"
                         for v in (s["tp_wall_s"], s["dgl_wall_s"]))
        lines.append(f"| {s['dataset']} | {s['model']} | {s['metric']} | `{cmd}` | {hp} | "
                     f"{_pm(s['tp'])} | {_pm(s['dgl'])} | {_diff(s['tp_mean'], s['dgl_mean'])} "
                     f"| {secs} |")
    cmp = compare_schedules(rows, schedule, other)
    if cmp:
        lines += ["", (f"Schedule `{schedule}` (the default) against `--schedule {other}` "
                       f"(test score, mean ± std over seeds; ok = at most {TOLERANCE_POINTS} "
                       "points below):"), "",
                  (f"| dataset | model | metric | {schedule} | {other} | {schedule} − {other} "
                   f"| {schedule} chose | ok |"),
                  "| --- | --- | --- | ---: | ---: | ---: | --- | --- |"]
        for c in cmp:
            lines.append(f"| {c['dataset']} | {c['model']} | {c['metric']} | "
                         f"{_pm(c['default'])} | {_pm(c['other'])} | "
                         f"{_diff(c['default_mean'], c['other_mean'])} | {c['chose']} | "
                         f"{'yes' if c['ok'] else 'NO'} |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
# running
# ----------------------------------------------------------------------------------------------


def log(msg: str) -> None:
    print(f"[recipes] {msg}", file=sys.stderr, flush=True)


def run_logged(cmd: list[str], log_path: Path, env: dict) -> tuple[int, str, float]:
    """Run ``cmd`` from the repository root, its stderr into ``log_path``: (exit status,
    stdout, wall seconds)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    with open(log_path, "w") as err:
        err.write("+ " + shlex.join(cmd) + "\n")
        err.flush()
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=ROOT,
                           check=False)
    return r.returncode, r.stdout, time.perf_counter() - t


def _tail(path: Path, n: int = 5) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def _list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=str(DATA_DIR), help="folder of the datasets' .npz files")
    p.add_argument("--datasets", default="all",
                   help="comma-separated names (files NAME.npz of --data-dir); all = every one")
    p.add_argument("--models", default="sage,gcn")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--schedules", default="auto",
                   help="twopgraph schedules, comma-separated; auto = the default (no flag). "
                        "DGL takes the hyperparameters of the first one's runs")
    p.add_argument("--sides", default="twopgraph,dgl", help="twopgraph, dgl or both")
    p.add_argument("--threads", type=int, default=2, help="threads of every run")
    p.add_argument("--out", default="runs/recipes")
    p.add_argument("--dgl-venv", default=os.environ.get("DGL_VENV", str(ROOT / ".venv-dgl")))
    p.add_argument("--table-only", action="store_true",
                   help="only write recipes.md from the CSV")
    p.add_argument("--dry-run", action="store_true", help="print the runs still to do, run none")
    a = p.parse_args(argv)
    data_dir = Path(a.data_dir)
    found = sorted(q.stem for q in data_dir.glob("*.npz"))
    a.datasets = found if a.datasets == "all" else _list(a.datasets)
    missing = [d for d in a.datasets if not (data_dir / f"{d}.npz").is_file()]
    if missing or not a.datasets:
        p.error(f"no {', '.join(missing) or 'datasets'} in {data_dir}"
                f" (found: {', '.join(found) or 'none'})")
    a.models = _list(a.models)
    if not a.models or any(m not in MODELS for m in a.models):
        p.error(f"--models: some of {', '.join(MODELS)}")
    try:
        a.seeds = [int(s) for s in _list(a.seeds)]
    except ValueError:
        p.error(f"--seeds must be integers, got {a.seeds!r}")
    a.schedules = _list(a.schedules)
    if not a.schedules or any(s not in ("auto", "random", "locality") for s in a.schedules):
        p.error("--schedules: auto, random and/or locality")
    a.sides = _list(a.sides)
    if not a.sides or any(s not in ("twopgraph", "dgl") for s in a.sides):
        p.error("--sides: twopgraph and/or dgl")
    if a.threads < 1:
        p.error("--threads must be >= 1")
    return a


def display_path(path: Path) -> str:
    """``path`` as the commands show it: relative to the repository root where it can be."""
    try:
        return os.path.relpath(path, ROOT)
    except ValueError:
        return str(path)


def main(argv=None) -> int:
    a = parse_args(argv)
    out = Path(a.out)
    csv_path, md_path = out / "recipes.csv", out / "recipes.md"
    data_dir = Path(a.data_dir).resolve()
    # every dataset of the folder: the tables cover every row of the CSV, not only --datasets
    shown = {q.stem: display_path(q) for q in data_dir.glob("*.npz")}

    def write_table() -> None:
        rows = read_rows(csv_path)
        md_path.parent.mkdir(parents=True, exist_ok=True)
        md_path.write_text(markdown(rows, shown, a.schedules[0],
                                    next((s for s in a.schedules[1:]), "random")))

    if a.table_only:
        write_table()
        print(md_path.read_text(), end="")
        return 0

    dgl_py = Path(a.dgl_venv) / "bin" / "python"
    if "dgl" in a.sides and not dgl_py.exists() and not a.dry_run:
        raise SystemExit(f"recipes: no DGL venv at {a.dgl_venv}; run "
                         "scripts/setup_dgl_baseline.sh first, or pass --sides twopgraph")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads),
               NUMBA_NUM_THREADS=str(a.threads), DGLBACKEND="pytorch")
    done = {row_key(r): r for r in read_rows(csv_path)}
    todo = [(ds, m, s, side, sched)
            for ds in a.datasets for m in a.models for s in a.seeds
            for side, sched in ([("twopgraph", x) for x in a.schedules if "twopgraph" in a.sides]
                                + ([("dgl", DGL_SCHEDULE)] if "dgl" in a.sides else []))
            if (ds, side, m, sched, str(s)) not in done]
    log(f"{len(todo)} runs to do, {len(done)} already in {csv_path}")
    failed, t_start = 0, time.perf_counter()
    for i, (ds, model, seed, side, sched) in enumerate(todo, 1):
        npz = str(data_dir / f"{ds}.npz")
        name = f"{ds}-{model}-{side if side == 'dgl' else sched}-s{seed}"
        head = f"({i}/{len(todo)}) {ds} {model} seed {seed} {side}" + \
            (f" schedule {sched}" if side == "twopgraph" else "")
        if side == "twopgraph":
            run_dir = out / "runs" / name
            cmd = [sys.executable, "-m", "twopgraph", "train", "--dataset", npz, "--model",
                   model, "--seed", str(seed), "--out", str(run_dir), "--no-progress",
                   "--threads", str(a.threads)]
            if sched != "auto":
                cmd += ["--schedule", sched]
            if run_dir.exists():  # an interrupted earlier try of this run
                cmd.append("--overwrite")
        else:
            tp = done.get((ds, "twopgraph", model, a.schedules[0], str(seed)))
            if tp is None:
                log(f"{head}: skipped, no twopgraph {a.schedules[0]} run to take the "
                    "hyperparameters from")
                failed += not a.dry_run
                continue
            cmd = [str(dgl_py), "scripts/dgl_baseline.py", "--npz", npz, "--mode", "train",
                   "--json", "--threads", str(a.threads), *dgl_hyperparameters(tp)]
        if a.dry_run:
            log(f"{head}: {shlex.join(cmd)}")
            continue
        log(f"{head} ...")
        rc, stdout, wall = run_logged(cmd, out / "logs" / f"{name}.log", env)
        if rc != 0:
            failed += 1
            log(f"{head}: FAILED (exit {rc}, {wall:.0f} s); end of {out / 'logs' / (name + '.log')}"
                f":\n{_tail(out / 'logs' / f'{name}.log')}")
            continue
        if side == "twopgraph":
            metrics = json.loads((run_dir / "metrics.json").read_text())
            row = twopgraph_row(ds, model, sched, seed, metrics, wall)
        else:
            result = json.loads(stdout.strip().splitlines()[-1])
            (out / "dgl").mkdir(parents=True, exist_ok=True)
            (out / "dgl" / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
            row = dgl_row(ds, model, seed, result, wall)
        append_row(csv_path, row)
        done[row_key(row)] = {k: _cell(v) for k, v in row.items()}
        write_table()
        elapsed = time.perf_counter() - t_start
        log(f"{head}: test {row['metric']} {_pts(float(row['test_score']))} (epoch "
            f"{row['selected_epoch']}, schedule {row['schedule_used']}) in {wall:.0f} s; "
            f"{elapsed / 60:.0f} min so far, about {elapsed / i * (len(todo) - i) / 60:.0f} "
            "min left")
    if not a.dry_run:
        write_table()
        log(f"wrote {csv_path} and {md_path}")
    if failed:
        log(f"{failed} runs failed or were skipped; run the same command again to retry them")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
