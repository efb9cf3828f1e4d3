"""Errors that carry a one-line message meant for the user.

The CLI turns any :class:`TwopgraphError` into ``error: <message>`` on stderr and exit code 2;
everything else is a bug and keeps its traceback.
"""


class TwopgraphError(ValueError):
    """Bad input from the user (arguments, files, configuration). Message is one line."""


class GraphFormatError(TwopgraphError):
    """A graph or dataset file is malformed or inconsistent (missing keys, bad ranges, sizes)."""


class ConfigError(TwopgraphError):
    """An invalid option value or a combination of options that cannot work."""
