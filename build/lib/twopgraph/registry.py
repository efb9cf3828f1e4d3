"""Named registries: ``name -> factory``, one lookup and one error message per kind.

Each pluggable kind of component (schedulers, samplers, cache policies) has one
:class:`Registry`. A registry *discovers* its entries: on first use it imports every module of
its package, and each module registers its factory with ``@REGISTRY.register("name")``. Adding
a scheduler, a sampler or a cache policy is therefore one new module in that package and
nothing else (docs/architecture.md has a worked example).

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

import difflib
import importlib
import pkgutil
import threading
from typing import Callable, Iterator

from .errors import ConfigError


class Registry:
    """Factories of one ``kind`` (used in messages, e.g. ``"cache policy"``), registered by
    name; ``package`` (dotted name) is imported module by module on first lookup."""

    def __init__(self, kind: str, package: str | None = None):
        self.kind = kind
        self.package = package
        self._entries: dict[str, Callable] = {}
        self._discovered = package is None
        self._lock = threading.Lock()

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
            for mod in pkgutil.iter_modules(pkg.__path__):
                importlib.import_module(f"{self.package}.{mod.name}")
            self._discovered = True

    def names(self) -> list[str]:
        """Registered names, in registration order."""
        self._discover()
        return list(self._entries)

    def get(self, name: str) -> Callable:
        """The factory registered as ``name``; :class:`ConfigError` (one line, with the known
        names and the closest match) otherwise."""
        self._discover()
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            pass
        close = difflib.get_close_matches(str(name), self._entries, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"unknown {self.kind} {name!r}{hint}; known: "
                          f"{', '.join(self._entries)}") from None

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
