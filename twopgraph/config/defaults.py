"""Defaults chosen by graph size: what ``--fanouts``, ``--lr`` and ``--epochs`` left at None
become once the number of vertices is known (:meth:`~twopgraph.config.Config.resolved`), the
rule ``--help`` shows, and the log line of what was chosen."""

from __future__ import annotations

#: graphs with fewer vertices than this get the ``small`` defaults, the others the ``large``
SMALL_GRAPH_NODES = 50_000
#: what ``--fanouts``, ``--lr`` and ``--epochs`` left at their default (None) become, per
#: graph size. Small graphs (cora, amazon_photo, tolokers: a few batches per epoch) reach their
#: accuracy with 2 layers, a larger learning rate and many epochs (the 3-layer products
#: settings left cora and amazon_photo 3 to 20 points lower); ``large`` is tuned at
#: ogbn-products scale.
SIZE_DEFAULTS = {
    "small": {"fanouts": [10, 10], "lr": 0.01, "epochs": 50},
    "large": {"fanouts": [15, 10, 5], "lr": 0.003, "epochs": 5},
}
#: the section of a config that holds each size-based option
SIZE_SECTIONS = {"fanouts": "sampling", "lr": "model", "epochs": "run"}


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
    return (f"by graph size: {_shown(small)} on graphs of < {SMALL_GRAPH_NODES:,} vertices, "
            f"else {_shown(large)}; logged and recorded in metrics.json")


def describe_defaults(record: dict) -> str | None:
    """The log line of a :meth:`~twopgraph.config.Config.resolved` record; None when every
    size-based option was given."""
    if not record["chosen"]:
        return None
    side = "<" if record["profile"] == "small" else ">="
    flags = " ".join(f"--{k} {_shown(v)}" for k, v in record["chosen"].items())
    return (f"defaults for {record['num_nodes']:,} vertices ({record['profile']} graph, "
            f"{side} {record['small_below']:,}): {flags}")
