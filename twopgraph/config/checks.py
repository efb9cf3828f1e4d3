"""Validation helpers of the config sections: each check raises a one-line
:class:`~twopgraph.errors.ConfigError` naming the flag and the bad value. torch is imported
only by the checks that need it (devices), never when a parser is built."""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twopgraph.errors import ConfigError

if TYPE_CHECKING:
    import torch


def cuda_available() -> bool:
    """Whether torch sees a CUDA GPU (imports torch)."""
    import torch
    return torch.cuda.is_available()


def resolve_device(name: str) -> "torch.device":
    """``auto`` -> cuda when available else cpu; ``cuda`` without a GPU is an error, and so
    is ``cuda:N`` for a GPU torch does not see (N >= the device count)."""
    import torch
    if not isinstance(name, str):
        raise ConfigError(f"device must be a string, got {name!r}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name not in ("cpu", "cuda") and not (name.startswith("cuda:") and name[5:].isdigit()):
        raise ConfigError(f"unknown device {name!r}; use cpu, cuda, cuda:N or auto")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("device cuda requested but torch sees no CUDA GPU")
    device = torch.device(name)
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise ConfigError(f"device {name} requested but torch sees "
                          f"{torch.cuda.device_count()} CUDA GPU(s) (cuda:0 to "
                          f"cuda:{torch.cuda.device_count() - 1}; CUDA_VISIBLE_DEVICES "
                          f"renumbers them)")
    return device


def tensorboard_ok(flag: str = "--tensorboard") -> None:
    """``torch.utils.tensorboard`` imports (the optional ``tensorboard`` package is
    installed); else one line naming the package to install."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError:
        raise ConfigError(f"{flag} needs the tensorboard package, which is not installed: "
                          f"pip install tensorboard") from None


def csv_list(value: object, what: str, conv: Callable[[Any], Any] = str) -> list:
    """``"a,b"`` (or a list) -> ``[conv("a"), conv("b")]``; at least one entry."""
    items = value if isinstance(value, (list, tuple)) else \
        [t.strip() for t in str(value).split(",") if t.strip()]
    if not items:
        raise ConfigError(f"--{what} needs at least one value")
    try:
        return [conv(t) for t in items]
    except (TypeError, ValueError):
        raise ConfigError(f"malformed --{what} {value!r}") from None


def flag_name(name: str) -> str:
    """A field's name as its flag spells it (``batch_size`` -> ``batch-size``)."""
    return name.replace("_", "-")


def is_number(v: object) -> bool:
    """An int or a float, not a bool."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_int(v: object) -> bool:
    """An int, not a bool."""
    return isinstance(v, int) and not isinstance(v, bool)


def positive_int(obj: object, name: str) -> None:
    """``obj.name`` is an integer >= 1."""
    int_at_least(obj, name, 1)


def int_at_least(obj: object, name: str, low: int, note: str = "") -> None:
    """``obj.name`` is an integer >= ``low``; ``note`` is added to the message."""
    v = getattr(obj, name)
    if not is_int(v) or v < low:
        what = "a positive integer" if low == 1 else f"an integer >= {low}"
        raise ConfigError(f"{flag_name(name)} must be {what}{' ' + note if note else ''}, "
                          f"got {v!r}")


def one_of(obj: object, name: str, allowed: Collection[str]) -> None:
    """``obj.name`` is one of ``allowed``."""
    v = getattr(obj, name)
    if v not in allowed:
        raise ConfigError(f"unknown {flag_name(name).replace('-', ' ')} {v!r}; known: "
                          f"{', '.join(allowed)}")


def seed_ok(seed: object) -> None:
    """``seed`` is an integer in [0, 2**63)."""
    if not is_int(seed) or not 0 <= seed < 2 ** 63:
        raise ConfigError(f"seed must be an integer in [0, 2**63), got {seed!r}")


def not_dangling(out: Path, flag: str = "--out") -> None:
    """:func:`twopgraph.core.files.refuse_dangling`: a symbolic link to nothing in ``out``'s
    path is refused in one line naming it."""
    from twopgraph.core.files import refuse_dangling
    refuse_dangling(out, flag)
