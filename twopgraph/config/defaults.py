"""Defaults chosen by graph size: what ``--fanouts``, ``--lr``, ``--epochs`` and ``--patience``
left at None become once the number of vertices is known
(:meth:`~twopgraph.config.Config.resolved`), the rule ``--help`` shows, and the log line of
what was chosen."""

from __future__ import annotations

#: graphs with fewer vertices than this get the ``small`` defaults, the others the ``large``
SMALL_GRAPH_NODES = 50_000
#: what ``--fanouts``, ``--lr``, ``--epochs`` and ``--patience`` left at their default (None)
#: become, per graph size. ``small`` is the recipe that ``twopgraph bench defaults`` (issue 41;
#: results in benchmarks/results/defaults.jsonl, tables in docs/benchmarks.md) chooses by
#: leave-one-out over the shared real datasets, seed 0, with ``--sampler auto``: 15,10,5 / lr
#: 0.003 trained until the validation score has not improved for 10 evaluated epochs, at most
#: 100 epochs (the bench's ``standard-es``). Candidates: that, the same for a fixed 30 epochs
#: (``standard``, the defaults before), 10,10 / lr 0.01 / 50 epochs (``small``, the first
#: defaults) and 15,10 / lr 0.003 / 30 epochs (``two-layer``). Held out in turn, each of
#: cora, citeseer, squirrel_filtered, actor, amazon_photo, tolokers, coauthor_cs and
#: facebook_pagepage gets ``standard-es`` from the other seven; its test score is the best
#: candidate's on seven of them (tolokers +1.6 ROC-AUC points and amazon_photo +0.3 over any
#: fixed recipe: they were still improving at the last fixed epoch) and 0.57 point below
#: ``two-layer``'s on coauthor_cs (coauthor_physics not measured). ``large`` is tuned at
#: ogbn-products scale (5 epochs; no early stop).
SIZE_DEFAULTS = {
    "small": {"fanouts": [15, 10, 5], "lr": 0.003, "epochs": 100, "patience": 10},
    "large": {"fanouts": [15, 10, 5], "lr": 0.003, "epochs": 5, "patience": 0},
}
#: The recipe race of small graphs: when ``--fanouts``, ``--epochs`` and ``--patience`` are all
#: left to the defaults on a graph of fewer than :data:`SMALL_GRAPH_NODES` vertices, ``train``
#: trains each of these recipes until its validation score has not improved for
#: :data:`RACE_PATIENCE` evaluated epochs (at most its own epochs), keeps the first unless
#: another's best validation score beats it by more than one standard error
#: (:func:`twopgraph.run.race.margin`) and continues the kept one to its own end; ``--lr``,
#: when given, applies to both. ``standard-es`` is ``SIZE_DEFAULTS["small"]`` (what a small
#: graph gets when the race does not run); ``two-layer`` is the bench's candidate of that
#: name (15,10 / lr 0.003 / 30 epochs), the one recipe that beat it by more than half a point
#: on a shared dataset (coauthor_cs, issue 41).
RACE_RECIPES = {
    "standard-es": SIZE_DEFAULTS["small"],
    "two-layer": {"fanouts": [15, 10], "lr": 0.003, "epochs": 30, "patience": 0},
}
#: evaluated epochs without a better validation score after which a recipe's probe stops
#: (``standard-es``'s own patience: its probe is its whole run); the loser's probe is the
#: race's cost
RACE_PATIENCE = 10
#: the options that must all be left to the defaults for the race to run
RACE_OPTIONS = ("fanouts", "epochs", "patience")
#: the section of a config that holds each size-based option
SIZE_SECTIONS = {"fanouts": "sampling", "lr": "model", "epochs": "run", "patience": "run"}


def size_profile(num_nodes: int) -> str:
    """``"small"`` for a graph of fewer than :data:`SMALL_GRAPH_NODES` vertices, else
    ``"large"``: the key of :data:`SIZE_DEFAULTS`."""
    return "small" if int(num_nodes) < SMALL_GRAPH_NODES else "large"


def _shown(v) -> str:
    """A default as a flag's value: ``10,10`` or ``0.003``."""
    return ",".join(map(str, v)) if isinstance(v, list) else f"{v:g}"


def auto_shown(name: str) -> str:
    """``--help``'s default of a size-based option: the rule."""
    small, large = SIZE_DEFAULTS["small"][name], SIZE_DEFAULTS["large"][name]
    race = ""
    if name in RACE_OPTIONS:
        other = " or ".join(f"{_shown(r[name])} ({n})" for n, r in RACE_RECIPES.items()
                            if n != "standard-es")
        race = (f"; or {other} when the recipe race on a small graph picks it (fanouts, "
                f"epochs and patience all left unset)")
    return (f"by graph size: {_shown(small)} on graphs of < {SMALL_GRAPH_NODES:,} vertices, "
            f"else {_shown(large)}{race}; logged and recorded in metrics.json")


def describe_defaults(record: dict) -> str | None:
    """The log line of a :meth:`~twopgraph.config.Config.resolved` record; None when every
    size-based option was given."""
    if not record["chosen"]:
        return None
    side = "<" if record["profile"] == "small" else ">="
    flags = " ".join(f"--{k} {_shown(v)}" for k, v in record["chosen"].items())
    recipe = f", recipe {record['recipe']} of the recipe race" if record.get("recipe") else ""
    return (f"defaults for {record['num_nodes']:,} vertices ({record['profile']} graph, "
            f"{side} {record['small_below']:,}{recipe}): {flags}")
