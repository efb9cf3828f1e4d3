"""``python -m twopgraph`` = the ``twopgraph`` command (torchrun uses this form)."""

from .cli import main

raise SystemExit(main())
