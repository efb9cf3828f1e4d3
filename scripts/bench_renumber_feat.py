#!/usr/bin/env python
"""The renumbered store's feature copy, measured: one training epoch on a renumbered dataset
with its features read from a renumbered copy of the table (``copy``, what
:func:`twopgraph.store.writer.permuted_store` writes) or from the dataset's own table through the
renumbering's row map (``map``: id ``i`` reads row ``perm[i]``,
:class:`~twopgraph.cache.host.HostTable` ``rows``), or the feature gathers alone (``gather``).

    nice -n 19 .venv/bin/python scripts/bench_renumber_feat.py --dataset synthetic-products \
        --data-root datasets --mode copy      # then --mode map, alternately, several times
    nice -n 19 .venv/bin/python scripts/bench_renumber_feat.py --dataset synthetic-products \
        --data-root datasets --mode gather --repeats 5 [--cold]

Both modes train the same batches (the renumbered graph, the locality scheduler over its
clusters; the same loss) and differ only in where a batch's feature rows lie: contiguous
ranges of the renumbered table, or the original table's rows scattered by the permutation.
The clusters and the renumbered store are cached in ``DATA_ROOT/clusters`` (made by the first
run); the ``copy`` table is ``DATA_ROOT/clusters/featcopy-<store>/feat.npy``, written once by
this script. ``copy`` / ``map`` print one JSON line: ``mode``, ``epoch_s``, ``sample_s``,
``load_s``, ``compute_s``, ``input_nodes_per_batch``, ``loss``, ``setup_s``; run them
alternately, each in its own process. ``gather`` samples one epoch's batches once, then times
every batch's gather from both tables in turn on one thread (the same load on both), one JSON
line per pass (``--cold``: each table's file evicted from the page cache first; ``--cgroup``:
the passes under a memory cgroup's limit).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="synthetic-products")
    p.add_argument("--data-root", default=None)
    p.add_argument("--mode", choices=("copy", "map", "gather"), required=True,
                   help="copy | map: one training epoch; gather: the gathers of one epoch's "
                        "batches alone, from both tables in turn (--repeats times each)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batches", type=int, default=0, help="gather: the first N batches only")
    p.add_argument("--cgroup", default=None,
                   help="gather: a cgroup v1 memory group (folder) this process joins once the "
                        "batches are sampled (what it read before stays charged elsewhere), "
                        "the tables evicted first: the gathers alone under its limit")
    p.add_argument("--cold", action="store_true",
                   help="gather: evict the table's file from the page cache before each pass "
                        "(posix_fadvise DONTNEED on that file alone): first reads from disk, "
                        "as for a table larger than memory")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()

    from twopgraph.config import TrainConfig
    from twopgraph.datasets import load_dataset, resolve_data_root
    from twopgraph.pipeline.assemble import locality_for, make_loader
    from twopgraph.pipeline.epoch import train_epoch
    from twopgraph.run.checkpoint import build_training
    from twopgraph.store.writer import _row_chunks

    t0 = time.perf_counter()
    data = load_dataset(a.dataset, a.data_root, progress=False)
    cfg = TrainConfig.from_dict({"dataset": a.dataset, "data_root": a.data_root,
                                 "schedule": "locality", "batch_size": a.batch_size,
                                 "threads": a.threads, "seed": a.seed, "device": "cpu",
                                 "progress": False, "epochs": 1})
    cfg, _ = cfg.resolved(data.num_nodes)
    prep = locality_for(data, ["locality"], cfg)
    rdata, perm = prep.data, prep.perm
    src = data.feat  # the dataset's own table, original ids
    if a.mode in ("copy", "gather"):
        # the renumbered table as a file of its own (what a renumbered store with a feature
        # copy holds), written once
        folder = resolve_data_root(a.data_root) / "clusters" / f"featcopy-{Path(rdata.store).name}"
        path = folder / "feat.npy"
        if not path.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / ".feat.npy.tmp"
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=src.dtype, shape=src.shape)
            a_ = 0
            for chunk in _row_chunks(src, perm):
                out[a_:a_ + chunk.shape[0]] = chunk
                a_ += chunk.shape[0]
            out.flush()
            del out
            tmp.replace(path)
        table, rows = np.load(path, mmap_mode="r"), None
    else:
        table, rows = src, perm
    if a.mode == "gather":
        return gather_only(cfg, rdata, prep, table, src, perm, a.repeats, a.cold, a.batches,
                           a.cgroup)
    loader = make_loader(cfg, rdata, "cpu", parts=prep.clustering.parts, feat=table, rows=rows)
    model, opt, _, _ = build_training(cfg, rdata, "cpu")
    setup_s = time.perf_counter() - t0
    with loader.plan.applied():
        rec = train_epoch(model, opt, loader, 0, progress=False)
    keep = ("epoch_s", "sample_s", "load_s", "compute_s", "input_nodes_per_batch", "loss")
    print(json.dumps({"mode": a.mode, **{k: rec.get(k) for k in keep},
                      "setup_s": round(setup_s, 2)}), flush=True)
    return 0


def gather_only(cfg, rdata, prep, copy_table, src, perm, repeats: int,
                cold: bool = False, batches: int = 0, cgroup=None) -> int:
    """Time the feature gathers of one epoch's batches (sampled once) from the renumbered
    copy and from the source table through the row map, alternately in one process (the
    same load on both), on one thread; prints one JSON line per timing."""
    import torch

    from twopgraph.cache.host import HostTable
    from twopgraph.pipeline.assemble import make_loader
    loader = make_loader(cfg, rdata, "cpu", parts=prep.clustering.parts)
    stream = [np.ascontiguousarray(ids, dtype=np.int64) for ids in loader.input_stream(0)]
    if batches:
        stream = stream[:batches]
    tables = {"copy": HostTable(copy_table, readahead=False),
              "map": HostTable(src, rows=perm, readahead=False)}
    torch.set_num_threads(1)
    for ids in stream[:8]:  # both tables in the page cache, equal
        for t in tables.values():
            t.take(ids)
    first = stream[0]
    assert torch.equal(tables["copy"].take(first), tables["map"].take(first))
    if cgroup is not None:
        Path(cgroup, "cgroup.procs").write_text(str(__import__("os").getpid()))
        cold = True
    maps = {"copy": copy_table, "map": src}
    for r in range(repeats):
        for mode, t in tables.items():
            if cold:
                evict(maps[mode])
            t0 = time.perf_counter()
            rows = 0
            for ids in stream:
                rows += t.take(ids).shape[0]
            print(json.dumps({"mode": mode, "repeat": r, "gather_s": round(
                time.perf_counter() - t0, 3), "rows": rows, "batches": len(stream),
                "cold": cold}),
                flush=True)
    return 0


def evict(table: np.memmap) -> None:
    """Drop the file of the memory map ``table`` from this process's page tables and from
    the page cache (this file only; pages other processes map stay)."""
    import mmap
    import os
    table._mmap.madvise(mmap.MADV_DONTNEED)
    fd = os.open(table.filename, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


if __name__ == "__main__":
    sys.exit(main())
