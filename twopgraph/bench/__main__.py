"""``python -m twopgraph.bench NAME ...``: the same as ``twopgraph bench NAME ...``
(:func:`twopgraph.bench.harness.main`)."""

import sys

from twopgraph.bench.harness import main

if __name__ == "__main__":
    sys.exit(main())
