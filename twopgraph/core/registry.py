"""Named registries: ``name -> factory``, one lookup and one error message per kind.

Each pluggable kind of component (schedulers, samplers, cache policies) has one
:class:`Registry`. A registry *discovers* its entries: on first use it imports every module of
its package, and each module registers its factory with ``@REGISTRY.register("name")``. Adding
a scheduler, a sampler or a cache policy is therefore one new module in that package and
nothing else (docs/architecture.md has a worked example).

:meth:`Registry.declared` gives the names without importing anything: it reads the sources of
the registry's package for ``@SYMBOL.register("name")`` (what ``--help`` lists as a flag's
choices, so that ``twopgraph VERB --help`` does not import torch and numba).

Example::

    >>> COLORS = Registry("colour")
    >>> @COLORS.register("red")
    ... def red():
    ...     return (255, 0, 0)
    >>> COLORS.get("red")()
    (255, 0, 0)
    >>> COLORS.get("rde")
    Traceback (most recent call last):
    ...
    twopgraph.errors.ConfigError: unknown colour 'rde' (did you mean 'red'?); known: red
"""

from __future__ import annotations

import ast
import difflib
import importlib
import importlib.util
import pkgutil
import threading
from pathlib import Path
from typing import Callable, Iterator

from twopgraph.errors import ConfigError


class Registry:
    """Factories of one ``kind`` (used in messages, e.g. ``"cache policy"``), registered by
    name; ``package`` (dotted name of a package, or of a single module) is imported module by
    module on first lookup. ``symbol``: the name the registry's modules decorate with
    (``@SYMBOL.register("name")``), for :meth:`declared`."""

    def __init__(self, kind: str, package: str | None = None,
                 symbol: str | None = None) -> None:
        self.kind = kind
        self.package = package
        self.symbol = symbol
        self._entries: dict[str, Callable] = {}
        self._discovered = package is None
        self._declared: list[str] | None = None  # declared(): read from the sources once
        self._summaries: dict[str, str] | None = None  # described(): likewise
        self._lock = threading.Lock()
        self._importer: Callable[[str], Callable] | None = None

    def import_specs(self, importer: Callable[[str], Callable]) -> None:
        """Let :meth:`get` resolve a name of the form ``module.path:Name`` that is not
        registered through ``importer(name)`` (a user's own factory, imported; the importer
        raises a one-line :class:`ConfigError` for a bad spec). Called by the registry's
        package when it is imported (``twopgraph.models``: ``--model pkg.mod:Class``)."""
        self._importer = importer

    def register(self, name: str) -> Callable[[Callable], Callable]:
        """Decorator: register the decorated factory (a class or a function) as ``name``."""
        def add(factory: Callable) -> Callable:
            have = self._entries.get(name)
            if have is not None and have is not factory:
                raise RuntimeError(f"{self.kind} {name!r} registered twice "
                                   f"({have.__module__} and {factory.__module__})")
            self._entries[name] = factory
            return factory
        return add

    def _discover(self) -> None:
        if self._discovered:
            return
        with self._lock:
            if self._discovered:
                return
            pkg = importlib.import_module(self.package)
            for mod in pkgutil.iter_modules(getattr(pkg, "__path__", [])):
                # with a symbol, only the modules that register something are imported (a
                # package may hold other layers' helpers that need not load for a lookup)
                origin = Path(getattr(mod.module_finder, "path", "")) / f"{mod.name}.py"
                if (self.symbol is None or mod.ispkg or not origin.is_file()
                        or f"{self.symbol}.register(" in origin.read_text(encoding="utf-8")):
                    importlib.import_module(f"{self.package}.{mod.name}")
            self._discovered = True

    def declared(self) -> list[str]:
        """The registered names, without importing the package's modules when they are not
        imported yet: the string arguments of ``@SYMBOL.register(...)`` in its sources (in
        file order), followed by names registered at run time. Once discovered (or without a
        package or ``symbol``), :meth:`names`."""
        if self._discovered or self.symbol is None:
            return self.names()
        if self._declared is None:
            spec = importlib.util.find_spec(self.package)  # imports the parent package only
            if spec is None or spec.origin is None:
                return self.names()
            if spec.submodule_search_locations:
                files = sorted(f for d in spec.submodule_search_locations
                               for f in Path(d).glob("*.py"))
            else:
                files = [Path(spec.origin)]
            self._declared = [n for f in files for n, _ in _registered_in(f, self.symbol)]
            self._summaries = {n: d for f in files for n, d in _registered_in(f, self.symbol)}
        out = list(dict.fromkeys(self._declared))
        return out + [n for n in self._entries if n not in out]

    def described(self) -> dict[str, str]:
        """``{name: summary}`` of every :meth:`declared` name: the first sentence of its
        factory's docstring (read from the sources when the package is not imported yet;
        empty when the factory has none). What ``--help`` lists after a flag's text."""
        names = self.declared()
        if self._discovered or self.symbol is None or self._summaries is None:
            return {n: summary(self._entries[n].__doc__) if n in self._entries else ""
                    for n in names}
        return {n: self._summaries.get(n, "") for n in names}

    def names(self) -> list[str]:
        """Registered names, in registration order."""
        self._discover()
        return list(self._entries)

    def get(self, name: str) -> Callable:
        """The factory registered as ``name`` (or, with :meth:`import_specs`, the one a
        ``module.path:Name`` spec imports); :class:`ConfigError` (one line, with the known
        names and the closest match) otherwise."""
        self._discover()
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            pass
        if self._importer is not None and isinstance(name, str) and ":" in name:
            return self._importer(name)
        close = difflib.get_close_matches(str(name), self._entries, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        own = ", or MODULE:CLASS (your own, imported)" if self._importer is not None else ""
        raise ConfigError(f"unknown {self.kind} {name!r}{hint}; known: "
                          f"{', '.join(self._entries)}{own}") from None

    def check(self, name: str) -> str:
        """``name`` if registered (else the :meth:`get` error)."""
        self.get(name)
        return name

    def __contains__(self, name: object) -> bool:
        self._discover()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __getitem__(self, name: str) -> Callable:
        return self.get(name)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, package={self.package!r})"


def summary(doc: str | None) -> str:
    """The first sentence of a docstring (up to the first ". " or blank line), on one line,
    without reST markup; "" for None."""
    text = " ".join((doc or "").strip().split("\n\n")[0].split())
    cut = text.find(". ")
    text = text if cut < 0 else text[:cut + 1]
    return text.replace("``", "").replace(":class:", "").replace(":func:", "")


def _registered_in(path: Path, symbol: str) -> list[tuple[str, str]]:
    """``(name, summary)`` of what the module at ``path`` registers with a top-level class or
    function decorated ``@symbol.register("name")`` (:func:`summary` of its docstring)."""
    text = path.read_text(encoding="utf-8")
    if f"{symbol}.register(" not in text:
        return []
    out = []
    for node in ast.parse(text).body:
        for dec in getattr(node, "decorator_list", ()):
            if (isinstance(dec, ast.Call) and isinstance(dec.func, ast.Attribute)
                    and dec.func.attr == "register" and isinstance(dec.func.value, ast.Name)
                    and dec.func.value.id == symbol and dec.args
                    and isinstance(dec.args[0], ast.Constant)
                    and isinstance(dec.args[0].value, str)):
                out.append((dec.args[0].value, summary(ast.get_docstring(node))))
    return out
