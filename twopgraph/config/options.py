"""The fields of a config: :func:`option` (a dataclass field with its command-line form),
:class:`Section` (the base of a group of fields), and the fields several sections and verbs
share (seed, threads, feature dtype, number of clusters)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import MISSING, Field, field
from typing import TYPE_CHECKING, Any

from twopgraph.core.names import FEAT_DTYPE_NAMES

if TYPE_CHECKING:
    from typing import Self

    from twopgraph.core.registry import Registry


def option(default: Any = MISSING, help: str = "", *, flag: str | None = None,
           factory: Callable[[], Any] | None = None, required: bool = False,
           negatable: bool = False, metavar: str | None = None,
           show_default: str | None = None, result: bool = False,
           choices: Sequence[str] | Callable[[], Sequence[str]] | None = None,
           listed: bool = False, fingerprint_default: bool = True,
           registry: Registry | None = None, spec: bool = False) -> Field:
    """A config field with its command-line form.

    ``flag`` defaults to ``--field-name``; a bool field is a switch (``store_true``; a flag
    ``--no-x`` stores False; ``negatable`` gives ``--x/--no-x``); ``required`` fields have no
    default on the command line; ``show_default`` replaces the default shown in ``--help``;
    ``result`` marks a parameter that changes the trained model (the checkpoint fingerprint
    covers exactly these); ``choices`` (a tuple of names, or a function returning them: a
    registry's :meth:`~twopgraph.core.registry.Registry.declared`) are shown in ``--help`` as the
    flag's value, ``{a,b}`` (``{a,b}[,...]`` for a comma-separated ``listed`` option); the
    section's ``validate`` checks the value (with its own message). ``fingerprint_default``
    False: a result parameter added after checkpoints existed, left out of the fingerprint at
    its default value (so those checkpoints still resume). ``registry``: ``--help`` lists its
    names with their summaries (:meth:`~twopgraph.core.registry.Registry.described`) after the
    text. ``spec``: a field the model is built from, recorded in the checkpoint's model spec
    (:meth:`~twopgraph.config.ModelConfig.spec`)."""
    meta = {"help": help, "flag": flag, "required": required, "negatable": negatable,
            "metavar": metavar, "show_default": show_default, "result": result,
            "choices": choices, "listed": listed, "fingerprint_default": fingerprint_default,
            "registry": registry, "spec": spec}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


class Section:
    """Base of the config sections: :meth:`validate` checks every field in one pass and
    raises :class:`~twopgraph.errors.ConfigError` naming the flag and the bad value."""

    def validate(self) -> Self:
        """Check every field; ``self`` (the base section has none)."""
        return self


# ----------------------------------------------------------------------------------------------
# fields several sections and verbs share
# ----------------------------------------------------------------------------------------------


def seed_option() -> Field:
    """``--seed``: the random seed of a run (a result parameter)."""
    return option(0, "random seed of shuffling, sampling and model initialisation; the same "
                     "seed gives the same result on CPU", result=True)


def threads_option() -> Field:
    """``--threads``: CPU threads of the whole process (0 = all cores)."""
    return option(0, "CPU threads the whole process uses (model, sampling workers, prefetch); "
                     "0 = all cores")


def feat_dtype_option() -> Field:
    """``--feat-dtype``: how features are kept and copied (:data:`FEAT_DTYPE_NAMES`)."""
    return option("float32", "how features are stored and copied: float32 | float16 | "
                             "bfloat16 (half the bytes; the model computes in float32 and is "
                             "evaluated on the same rounded features)", result=True,
                  choices=FEAT_DTYPE_NAMES)


def num_clusters_option(help_extra: str = "") -> Field:
    """``--num-clusters``: METIS clusters of the locality scheduler and of renumbering (0 =
    automatic); ``help_extra`` is appended to the help text."""
    return option(0, "METIS clusters of the locality scheduler and of --renumber, cached under "
                     "DATA_ROOT/clusters; fewer = more locality, less batch diversity; 0 = "
                     "automatic (14 clusters per batch on graphs of >= 512 x batch-size "
                     "vertices, else at least min(2048, N/8) clusters)" + help_extra,
                  result=True)
