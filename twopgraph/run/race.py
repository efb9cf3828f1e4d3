"""The recipe race of small graphs: ``train`` picks between candidate recipes on the
validation split, within a bounded share of the run (issue 41, item 4).

On a graph of fewer than :data:`~twopgraph.config.SMALL_GRAPH_NODES` vertices whose
``--fanouts``, ``--epochs`` and ``--patience`` are all left to the defaults, each recipe of
:data:`~twopgraph.config.RACE_RECIPES` is trained in ``OUT/race/NAME`` until its validation
score has not improved for :data:`~twopgraph.config.RACE_PATIENCE` evaluated epochs (at most
its own ``epochs``: the probe is the recipe's run with that patience); the one with the best
validation score wins -- the first listed, the default, unless another beats it by more
than one standard error of its score (:func:`margin`) --, its files move to ``OUT`` and the run
continues it to its own end from its checkpoint with its own patience -- exactly the run
that recipe alone would have been (a resumed run equals an uninterrupted one, and the
patience only decides where a run stops). The loser's probe is the race's whole cost, and it
is recorded.

What a race leaves: ``metrics.json``'s ``defaults`` names the ``recipe`` and holds the
``race`` record (``chosen``, ``patience``, per candidate ``val_score``,
``epochs_trained``, ``wall_s``); the checkpoint keeps the same record (key ``race``), so a
``--resume`` of the run continues the winner instead of racing again. A race stopped during
its probes is resumed probe by probe (``OUT/race/NAME`` holds each probe's checkpoint).

No race when any of the three options is given (the remaining ones take ``standard-es``'s
values, :data:`~twopgraph.config.SIZE_DEFAULTS`), on graphs of 50,000 vertices or more, for
a dataset without validation vertices, and in distributed runs (``--partitions``), which take
``standard-es``. ``--profile`` and ``--tensorboard`` are off during the probes.

Example::

    >>> race = RecipeRace(cfg, Path("runs/x"), probe=lambda c: train_one(c))  # doctest: +SKIP
    >>> name, record = race.run()                                              # doctest: +SKIP
"""

from __future__ import annotations

import copy
import logging
import math
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch

from twopgraph.config import (
    RACE_OPTIONS,
    RACE_PATIENCE,
    RACE_RECIPES,
    TrainConfig,
    size_profile,
)
from twopgraph.core.files import writing
from twopgraph.run.checkpoint import CHECKPOINT, CHECKPOINT_READ_ERRORS, write_checkpoint
from twopgraph.run.outdir import RUN_FILES, RUN_LOGS

if TYPE_CHECKING:
    from twopgraph.graph.data import GraphData

log = logging.getLogger("twopgraph")

#: the folder of ``OUT`` that holds the probes, one subfolder per recipe
RACE_DIR = "race"
#: the checkpoint key of the race record
RACE_KEY = "race"


def race_applies(cfg: TrainConfig, data: "GraphData") -> bool:
    """Whether ``train`` races recipes for ``cfg`` on ``data``: a small graph, the race's
    options (:data:`~twopgraph.config.RACE_OPTIONS`) all left to the defaults, and
    validation vertices to score the probes on."""
    if size_profile(data.num_nodes) != "small":
        return False
    flat = cfg.flat()
    if any(flat[name] is not None for name in RACE_OPTIONS):
        return False
    val = getattr(data, "val_idx", None)
    return val is not None and len(val) > 0


def recorded_race(out: Path) -> dict | None:
    """The race record of ``OUT``'s checkpoint (None when there is no readable checkpoint or
    it holds no race): what a ``--resume`` continues."""
    path = Path(out) / CHECKPOINT
    if not path.is_file():
        return None
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except CHECKPOINT_READ_ERRORS:
        return None  # read_checkpoint says what is wrong with it
    rec = ckpt.get(RACE_KEY) if isinstance(ckpt, dict) else None
    return rec if isinstance(rec, dict) and rec.get("chosen") in RACE_RECIPES else None


def race_pending(out: Path, resume: bool) -> bool:
    """Whether a run into ``out`` races now: a new run, or a ``--resume`` of a race that
    stopped during its probes (``OUT/race`` there, no checkpoint in ``OUT`` yet). A resumed
    run with a checkpoint continues it (:func:`recorded_race`); one with neither is left to
    say that there is nothing to resume."""
    out = Path(out)
    if not resume:
        return True
    return not (out / CHECKPOINT).is_file() and (out / RACE_DIR).is_dir()


class RecipeRace:
    """The race of :data:`~twopgraph.config.RACE_RECIPES` for a run into ``out``.

    ``probe(cfg) -> TrainResult`` trains one probe: a :class:`~twopgraph.config.TrainConfig`
    with the recipe's options given, ``patience`` the race's and ``out`` in ``OUT/race/NAME``
    (resumed where the probe's checkpoint is there and the run is a ``--resume``). :meth:`run`
    trains them, picks the winner and moves its files to ``out``."""

    def __init__(self, cfg: TrainConfig, out: Path,
                 probe: Callable[[TrainConfig], object],
                 patience: int | None = None, val_vertices: int = 0) -> None:
        self.cfg, self.out, self.probe = cfg, Path(out), probe
        #: the validation vertices the scores are over (:func:`margin`)
        self.val_vertices = int(val_vertices)
        #: the probes' ``--patience`` (default :data:`~twopgraph.config.RACE_PATIENCE`)
        self.patience = RACE_PATIENCE if patience is None else int(patience)

    def probe_config(self, name: str) -> TrainConfig:
        """The probe of recipe ``name``: its options given (``--lr`` kept when the run gives
        it), stopped after :attr:`patience` evaluated epochs without a better validation
        score, in ``OUT/race/NAME``."""
        recipe = RACE_RECIPES[name]
        cfg = copy.deepcopy(self.cfg)
        cfg.sampling.fanouts = list(recipe["fanouts"])
        if cfg.model.lr is None:
            cfg.model.lr = recipe["lr"]
        cfg.run.epochs = recipe["epochs"]
        cfg.run.patience = self.patience
        folder = self.out / RACE_DIR / name
        cfg.run.out = str(folder)
        cfg.run.resume = bool(self.cfg.run.resume) and (folder / CHECKPOINT).is_file()
        cfg.run.overwrite = not cfg.run.resume
        cfg.run.profile = None
        cfg.run.tensorboard = None
        return cfg

    def run(self) -> tuple[str, dict]:
        """Train every probe, keep the best validation score (ties: the first recipe);
        ``(winner, record)`` with the winner's files in ``out``."""
        names = list(RACE_RECIPES)
        log.info("recipe race on a small graph: %s, each until %d evaluated epochs bring no "
                 "better validation score; the best goes on to its end", " and ".join(
                     f"{n} ({_recipe_text(RACE_RECIPES[n])})" for n in names),
                 self.patience)
        candidates: dict[str, dict] = {}
        for name in names:
            cfg = self.probe_config(name)
            start = time.perf_counter()
            res = self.probe(cfg)
            scores = [e["val_score"] for e in res.epochs if e.get("val_score") is not None]
            candidates[name] = {"val_score": max(scores) if scores else None,
                                "epochs_trained": len(res.epochs),
                                "wall_s": round(time.perf_counter() - start, 3)}
            log.info("recipe race: %s reached validation %s in %d epochs (%.1f s)", name,
                     _score(candidates[name]["val_score"]), len(res.epochs),
                     candidates[name]["wall_s"])
        winner = pick(candidates, self.val_vertices)
        first = candidates[names[0]]["val_score"]
        record = {"chosen": winner, "patience": self.patience,
                  "val_vertices": self.val_vertices,
                  "margin": margin(first, self.val_vertices), "candidates": candidates}
        others = ", ".join(f"{n} {_score(c['val_score'])}" for n, c in candidates.items()
                           if n != winner)
        log.info("recipe race -> %s: validation %s (%s); continuing it", winner,
                 _score(candidates[winner]["val_score"]), others)
        self.install(winner, record)
        return winner, record

    def install(self, winner: str, record: dict) -> None:
        """Move the winner's run files to ``out`` (its checkpoint with the race record added),
        then remove ``OUT/race``."""
        src = self.out / RACE_DIR / winner
        ckpt = torch.load(src / CHECKPOINT, map_location="cpu", weights_only=False)
        ckpt[RACE_KEY] = record
        write_checkpoint(self.out / CHECKPOINT, ckpt)
        for name in (*RUN_FILES, *RUN_LOGS):
            if name != CHECKPOINT and (src / name).is_file():
                with writing(self.out / name):
                    os.replace(src / name, self.out / name)
        shutil.rmtree(self.out / RACE_DIR, ignore_errors=True)


def margin(score: float | None, val_vertices: int) -> float:
    """One binomial standard error of a validation score ``score`` (a fraction) over
    ``val_vertices`` vertices, ``sqrt(s (1 - s) / n)``: how far another recipe's score must
    be above the default's before the race trusts the difference (0 when unknown)."""
    if score is None or val_vertices <= 0:
        return 0.0
    s = min(max(float(score), 0.0), 1.0)
    return math.sqrt(s * (1.0 - s) / val_vertices)


def pick(candidates: dict[str, dict], val_vertices: int = 0) -> str:
    """The race's winner: the first candidate (the default recipe) unless another one's
    ``val_score`` beats its own by more than :func:`margin` (then the best of the others;
    None ranks last, ties: the earlier). A validation split of a few hundred vertices moves
    by a point or two between recipes that test alike; the margin keeps such noise from
    trading the default away."""
    names = list(candidates)
    first = names[0]
    base = candidates[first]["val_score"]
    best, best_score = None, None
    for name in names[1:]:
        sc = candidates[name]["val_score"]
        if sc is not None and (best_score is None or sc > best_score):
            best, best_score = name, sc
    if best is None:
        return first
    if base is None or best_score - base > margin(base, val_vertices):
        return best
    return first


def _recipe_text(r: dict) -> str:
    es = f", stop after {r['patience']} without a better one" if r["patience"] else ""
    return f"{','.join(map(str, r['fanouts']))} / lr {r['lr']:g} / {r['epochs']} epochs{es}"


def _score(s) -> str:
    return "n/a" if s is None else f"{s:.4f}"
