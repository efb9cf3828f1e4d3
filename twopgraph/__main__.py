"""``python -m twopgraph`` = the ``twopgraph`` command (torchrun uses this form)."""

from twopgraph.cli import main

raise SystemExit(main())
