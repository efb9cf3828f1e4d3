"""A griffe extension for the documentation site (``mkdocs.yml``: mkdocstrings loads it):
twopgraph's docstrings are written with Sphinx's inline roles, which Markdown does not know.

- ``:class:`~twopgraph.x.Y``` (any role: ``class``, ``func``, ``mod``, ``data``, ...) becomes
  the code span ```Y``` (with ``~``: the last component; without: the target as written);
- a paragraph ending in ``::`` (reStructuredText's literal-block marker) ends in ``:``; the
  indented block after it is a Markdown code block already.

Only the rendered text changes; the source's docstrings stay as they are.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

#: ``:role:`target``` and ``:py:role:`target``` (a ``~`` before the target: show its last part)
_ROLE = re.compile(r":(?:py:)?[a-z]+:`(~?)([^`]+)`")
#: a line that ends in ``::`` (not a bare ``::`` line), before a literal block
_LITERAL = re.compile(r"(?<=\S)::[ \t]*$", re.MULTILINE)


def _role(match: re.Match) -> str:
    tilde, target = match.groups()
    target = target.strip()
    if tilde:
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def markdown_of(text: str) -> str:
    """``text`` (a docstring) with Sphinx roles as code spans and ``::`` markers as ``:``."""
    return _LITERAL.sub(":", _ROLE.sub(_role, text))


class SphinxRoles(griffe.Extension):
    """Rewrites every loaded object's docstring with :func:`markdown_of`."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_of(obj.docstring.value)
