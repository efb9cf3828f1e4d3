#!/usr/bin/env python
"""Write a papers-shaped graph (twopgraph.datasets.papers) in OGB's ogbn-papers100M binary raw
layout.

    .venv/bin/python scripts/make_papers.py --scale 0.25 --root R   # R/ogbn_papers100M/...
    .venv/bin/twopgraph train --dataset ogbn-papers100M --data-root R --epochs 1

The folder is what the real download unzips to (``raw/data.npz``, ``raw/node-label.npz``,
``split/time/*.csv.gz``, ``RELEASE_v1.txt``), so the OGB ingestion path runs on it unchanged.
Disk: about 16 bytes per directed edge plus 4 x 128 bytes per vertex (1/4 scale: ~21 GB),
and as much again for the edge list's scratch files while writing. Prints a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from twopgraph.datasets.papers import PapersSpec, parse_preset, write_ogb_raw  # noqa: E402
from twopgraph.errors import TwopgraphError  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", default="1/64", help="fraction of papers100M, e.g. 0.25 or 1/16")
    p.add_argument("--root", type=Path, required=True, help="data root to write into")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compress", action="store_true", help="deflate data.npz's members")
    a = p.parse_args(argv)
    try:
        spec = PapersSpec(scale=parse_preset(f"synthetic-papers:{a.scale}").scale, seed=a.seed)
    except TwopgraphError as e:
        print(f"make_papers: error: {e}", file=sys.stderr)
        return 2
    t = time.perf_counter()
    info = write_ogb_raw(spec, a.root / "ogbn_papers100M", compress=a.compress,
                         progress=lambda s: print(f"[make_papers] {s}", file=sys.stderr))
    info["seconds"] = round(time.perf_counter() - t, 1)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
