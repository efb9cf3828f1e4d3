"""argparse generation: one flag per field of a section (:func:`add_section_arguments`), its
help text with the default and a registry's names, its ``{a,b}`` metavar."""

from __future__ import annotations

import argparse
import types
import typing
from collections.abc import Container
from dataclasses import MISSING, fields

if typing.TYPE_CHECKING:
    from twopgraph.core.registry import Registry


def add_section_arguments(parser: argparse.ArgumentParser, section: type,
                          exclude: Container[str] = (), required: Container[str] = ()) -> None:
    """Add one flag per field of the dataclass ``section`` (see
    :func:`~twopgraph.config.option`); ``exclude``: field names left out; ``required``:
    field names made required."""
    hints = typing.get_type_hints(section)
    for f in fields(section):
        if f.name in exclude:
            continue
        meta = f.metadata
        flag = meta.get("flag") or "--" + f.name.replace("_", "-")
        default = f.default_factory() if f.default is MISSING else f.default
        kind = hints[f.name]
        base = _base_type(kind)
        req = meta.get("required") or f.name in required
        kw: dict = {"dest": f.name, "help": _help(meta, default, req, base)}
        if base is bool:
            if meta.get("negatable"):
                kw.update(action=argparse.BooleanOptionalAction, default=default)
            else:
                kw.update(action="store_false" if flag.startswith("--no-") else "store_true",
                          default=default)
        else:
            kw.update(type=base if base in (int, float) else str, default=default)
            if req:
                kw.update(required=True, default=None)
            if meta.get("metavar"):
                kw["metavar"] = meta["metavar"]
            elif meta.get("choices") is not None:
                kw["metavar"] = _choices_metavar(meta["choices"], meta.get("listed", False))
        parser.add_argument(flag, **kw)


def _choices_metavar(choices, listed: bool = False) -> str:
    """``{a,b,c}`` (``{a,b,c}[,...]`` for a comma-separated list) of a field's ``choices``:
    a tuple, or a function returning the names (a registry's, read without importing it)."""
    names = choices() if callable(choices) else choices
    text = "{" + ",".join(names) + "}"
    return text + "[,...]" if listed else text


def _base_type(kind) -> type:
    """The type argparse converts a field's value to: ``int | None`` -> int, ``list[int]``
    -> list."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return _base_type(args[0])
    if typing.get_origin(kind) is list:
        return list
    return kind


def registry_help(registry: Registry) -> str:
    """``name: summary | ...`` of a registry's names (read from the sources, not imported)."""
    def lower(d: str) -> str:  # "A layer-aware ..." -> "a layer-aware ...", not "GCN"
        return d[0].lower() + d[1:] if d[:2] != d[:2].upper() else d
    return " | ".join(f"{n}: {lower(d.rstrip('.'))}" if d else n
                      for n, d in registry.described().items())


def _help(meta, default, required: bool, base) -> str:
    """A flag's ``--help`` text: the field's help, its registry's names, its default."""
    text = meta.get("help", "")
    if meta.get("registry") is not None:
        text = f"{text}: {registry_help(meta['registry'])}"
    if required or base is bool and not meta.get("negatable"):
        return text
    shown = meta.get("show_default")
    if shown is None:
        if isinstance(default, list):
            shown = ",".join(str(v) for v in default)
        elif default is None:
            shown = "none"
        elif isinstance(default, bool):
            shown = "on" if default else "off"
        else:
            shown = str(default)
    return f"{text} (default: {shown})"
