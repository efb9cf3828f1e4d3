"""A user's own model, named ``module.path:ClassName`` (``--model``, ``ModelConfig(model=...)``,
``build_model``): the class is imported from ``sys.path`` (the current folder included) and
used as a registered conv is (:data:`~twopgraph.core.protocols.MODELS` resolves such a spec
through :func:`import_conv`).

The class is one GNN layer of the conv contract (:class:`~twopgraph.core.protocols.Conv`,
docs/architecture.md "Adding a model"): ``layer(block, h_src, h_dst)`` returns the rows of the
block's dst vertices. It is built as the built-in models are:

- a subclass of :class:`~twopgraph.models.base.Conv`: ``Class.build(in_dim, out_dim, *,
  last, **options)`` (by default ``Class(in_dim, out_dim)``), with its ``options``,
  ``check_options``, ``activation_width`` and ``edge_values``;
- any other ``torch.nn.Module`` subclass: ``Class(in_dim, out_dim)``, with the defaults of
  :class:`~twopgraph.models.base.Conv` for the rest (``in_dim``/``out_dim`` set on the layer
  when it has none).

The spec string is the model's name: the checkpoint records it, so ``twopgraph predict`` and
``--resume`` import the class again. A bad spec (no ``:``, a module that does not import, no
such class, not an ``nn.Module`` subclass, a constructor that does not take ``(in_dim,
out_dim)`` or whose ``forward`` does not take ``(block, h_src, h_dst)``) is a one-line
:class:`ModelImportError`.

Example::

    >>> conv = import_conv("twopgraph.models.sage:SAGEConv")
    >>> conv.__name__
    'SAGEConv'
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from typing import Any

from torch import nn

from twopgraph.errors import ConfigError
from twopgraph.models.base import Conv, as_conv

#: The form of a spec, for messages.
SPEC_FORM = "MODULE:CLASS (e.g. mypkg.layers:MyConv)"


class ModelImportError(ConfigError):
    """A model spec ``module.path:ClassName`` that names no usable model class (one line)."""


def import_conv(spec: str) -> type[Conv]:
    """The conv class ``spec`` (``module.path:ClassName``; ``ClassName`` may be dotted, a class
    inside a class) names, imported: a :class:`Conv` subclass as it is, any other
    ``nn.Module`` subclass wrapped in one (:func:`as_conv`). One-line
    :class:`ModelImportError` for a bad spec."""
    module_name, _, attr = str(spec).partition(":")
    module_name, attr = module_name.strip(), attr.strip()
    if not module_name or not attr or ":" in attr:
        raise ModelImportError(f"model {spec!r}: expected {SPEC_FORM}")
    module = _import(spec, module_name)
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ModelImportError(f"model {spec!r}: {module_name} ({_where(module)}) has no "
                                   f"{attr!r}") from None
    if not (isinstance(obj, type) and issubclass(obj, nn.Module)):
        raise ModelImportError(f"model {spec!r}: {attr} is a {type(obj).__name__}, not a "
                               f"torch.nn.Module subclass (a GNN layer of the conv contract: "
                               f"docs/architecture.md, 'Adding a model')")
    conv = obj if issubclass(obj, Conv) else as_conv(obj)
    _check_constructor(spec, obj, conv)
    return conv


def _import(spec: str, module_name: str):
    """``module_name`` imported, the current folder on ``sys.path`` (appended, as the
    interpreter does for ``python -m``; the ``twopgraph`` script's own folder is there
    instead)."""
    cwd = os.getcwd()
    if "" not in sys.path and not any(_same_dir(p, cwd) for p in sys.path):
        sys.path.append(cwd)
    importlib.invalidate_caches()  # a module file written since the interpreter started
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name) and \
                module_name[len(e.name):len(e.name) + 1] in ("", "."):
            raise ModelImportError(f"model {spec!r}: no module named {e.name!r} on sys.path "
                                   f"(the current folder {cwd} included)") from None
        raise ModelImportError(f"model {spec!r}: importing {module_name} failed "
                               f"({_first_line(e)})") from None
    except Exception as e:  # noqa: BLE001 -- the user's module raised while imported
        raise ModelImportError(f"model {spec!r}: importing {module_name} failed "
                               f"({_first_line(e)})") from None


def _check_constructor(spec: str, cls: type, conv: type[Conv]) -> None:
    """Refuse a class whose constructor (or ``build``) cannot take what the built-in models
    get, or whose ``forward`` cannot take ``(block, h_src, h_dst)``, by their signatures
    (nothing is called)."""
    if getattr(conv.build, "__func__", None) is getattr(Conv.build, "__func__", None) or \
            conv is not cls:
        target, call, args, kwargs = cls, f"{cls.__name__}(in_dim, out_dim)", (1, 1), {}
    else:
        target = conv.build
        call = f"{cls.__name__}.build(in_dim, out_dim, *, last, **options)"
        args, kwargs = (1, 1), {"last": True, **{k: None for k in conv.options}}
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):  # no signature to read (a C type): found when built
        return
    try:
        sig.bind(*args, **kwargs)
    except TypeError as e:
        raise ModelImportError(f"model {spec!r}: the built-in models are built as {call}, but "
                               f"{cls.__name__}{sig} cannot be called so ({e})") from None
    try:
        fwd = inspect.signature(cls.forward)
    except (TypeError, ValueError):
        return
    try:
        fwd.bind(None, None, None, None)
    except TypeError:
        raise ModelImportError(f"model {spec!r}: a layer is called as layer(block, h_src, "
                               f"h_dst), but {cls.__name__}.forward{fwd} cannot be called "
                               f"so") from None


def _where(module) -> str:
    return str(getattr(module, "__file__", None) or "a namespace package")


def _same_dir(entry: str, cwd: str) -> bool:
    try:
        return os.path.realpath(entry or ".") == os.path.realpath(cwd)
    except (OSError, ValueError):
        return False


def _first_line(e: BaseException) -> str:
    text = (str(e).strip().splitlines() or [""])[0][:200]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
