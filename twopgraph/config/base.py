""":class:`Config`: a verb's configuration, a dataclass of sections, with its flat view (from
keyword arguments, a dict, parsed flags), its flags, its size-based defaults resolved, and the
parameters a checkpoint's fingerprint covers."""

from __future__ import annotations

import argparse
import copy
import logging
import typing
from collections.abc import Container, Iterable
from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any

from twopgraph.config.arguments import add_section_arguments
from twopgraph.config.defaults import (
    RACE_RECIPES,
    SIZE_DEFAULTS,
    SIZE_SECTIONS,
    SMALL_GRAPH_NODES,
    describe_defaults,
    size_profile,
)
from twopgraph.errors import ConfigError

if TYPE_CHECKING:
    from typing import Self


class Config:
    """A verb's configuration: a dataclass whose fields are
    :class:`~twopgraph.config.Section` instances.

    Field names are unique across the sections of one config, so a flat view exists:
    :meth:`of` builds one from flat keyword arguments, :meth:`flat` gives them back."""

    @classmethod
    def sections(cls) -> dict[str, type]:
        """``{field name: section class}`` of this config."""
        hints = typing.get_type_hints(cls)
        return {f.name: hints[f.name] for f in fields(cls)}

    @classmethod
    def of(cls, **flat: Any) -> Self:
        """Build from flat field names, e.g. ``TrainConfig.of(dataset="cora", epochs=3)``;
        an unknown name is a :class:`ConfigError`."""
        parts = {}
        rest = dict(flat)
        for name, sec in cls.sections().items():
            mine = {f.name: rest.pop(f.name) for f in fields(sec) if f.name in rest}
            parts[name] = sec(**mine)
        if rest:
            raise ConfigError(f"unknown config keys: {', '.join(sorted(rest))}")
        return cls(**parts)

    @classmethod
    def from_dict(cls, d: dict) -> Self:
        """From :meth:`flat` output or from ``asdict`` (nested) output."""
        if any(k in d for k in cls.sections()) and all(isinstance(v, dict) for v in d.values()):
            flat = {k: v for sec in d.values() for k, v in sec.items()}
        else:
            flat = d
        return cls.of(**flat)

    @classmethod
    def from_args(cls, ns: argparse.Namespace) -> Self:
        """From a namespace parsed by a parser made with :meth:`add_arguments`."""
        flat = {}
        for sec in cls.sections().values():
            for f in fields(sec):
                if hasattr(ns, f.name):
                    flat[f.name] = getattr(ns, f.name)
        return cls.of(**flat)

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser, exclude: Iterable[str] = (),
                      required: Container[str] = ()) -> None:
        """One flag per field of every section (``exclude``: field names left out, besides
        the config's own ``EXCLUDE``; ``required``: field names made required)."""
        exclude = tuple(exclude) + tuple(getattr(cls, "EXCLUDE", ()))
        for sec in cls.sections().values():
            add_section_arguments(parser, sec, exclude=exclude, required=required)

    def resolved_logged(self, num_nodes: int, recipe: str | None = None) -> tuple[Self, dict]:
        """:meth:`resolved`, with the line saying what the size-based defaults became
        (:func:`describe_defaults`) logged at INFO when any was left to them."""
        out, rec = self.resolved(num_nodes, recipe)
        if (line := describe_defaults(rec)) is not None:
            logging.getLogger("twopgraph").info("%s", line)
        return out, rec

    def resolved(self, num_nodes: int, recipe: str | None = None) -> tuple[Self, dict]:
        """This config with the size-based options left at None (``fanouts``, ``lr``,
        ``epochs``, ``patience``, those of them it has) set from :data:`SIZE_DEFAULTS` for a
        graph of ``num_nodes`` vertices (:func:`size_profile`), and the record of what was chosen
        (``metrics.json``: ``defaults``): ``{"profile", "num_nodes", "small_below"
        (:data:`SMALL_GRAPH_NODES`), "chosen": {name: value} (the options that were None),
        "explicit": {name: value} (the ones given)}``. Given values always win; ``self`` is
        not changed. ``recipe`` (a name of :data:`RACE_RECIPES`: the recipe race's winner,
        :mod:`twopgraph.run.race`) takes the options left at None from that recipe instead,
        recorded as ``recipe`` in the record.

        Example::

            >>> from twopgraph.config import TrainConfig
            >>> cfg, rec = TrainConfig.of(lr=0.05).resolved(num_nodes=2_708)
            >>> cfg.sampling.fanouts, cfg.model.lr, cfg.run.epochs, cfg.run.patience
            ([15, 10, 5], 0.05, 100, 10)
            >>> rec["profile"], rec["chosen"], rec["explicit"]
            ('small', {'fanouts': [15, 10, 5], 'epochs': 100, 'patience': 10}, {'lr': 0.05})
        """
        out = copy.deepcopy(self)
        profile = size_profile(num_nodes)
        rec = {"profile": profile, "num_nodes": int(num_nodes),
               "small_below": SMALL_GRAPH_NODES, "chosen": {}, "explicit": {}}
        if recipe is not None:
            if recipe not in RACE_RECIPES:
                raise ConfigError(f"unknown recipe {recipe!r}: one of {', '.join(RACE_RECIPES)}")
            rec["recipe"] = recipe
        values = SIZE_DEFAULTS[profile] if recipe is None else RACE_RECIPES[recipe]
        have = self.sections()
        for name, section in SIZE_SECTIONS.items():
            if section not in have:
                continue
            sec = getattr(out, section)
            if getattr(sec, name) is None:
                value = copy.copy(values[name])
                setattr(sec, name, value)
                rec["chosen"][name] = copy.copy(value)
            else:
                rec["explicit"][name] = copy.copy(getattr(sec, name))
        return out, rec

    def flat(self) -> dict:
        """Every field as ``{name: value}`` (what ``metrics.json`` records as ``config``)."""
        return {k: v for sec in asdict(self).values() for k, v in sec.items()}

    def result_params(self) -> dict:
        """The fields that change a trained model (``result=True``), by name."""
        out = {}
        for name in self.sections():
            sec = getattr(self, name)
            for f in fields(sec):
                if f.metadata.get("result"):
                    value = getattr(sec, f.name)
                    if f.metadata.get("fingerprint_default", True) or value != f.default:
                        out[f.name] = value
        return out

    def validate(self) -> Self:
        """Validate every section (one pass; the first bad value raises)."""
        for name in self.sections():
            getattr(self, name).validate()
        return self
