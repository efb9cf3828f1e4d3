"""Into the store: :func:`ingest` writes a :class:`~twopgraph.ingest.raw.RawDataset` as a
dataset store, streaming (stages: edges, CSR, features, labels, splits, validate; their wall
times in seconds go into ``store.json``), and :func:`source_record` is what identifies the raw
files for staleness checks (path, size, mtime in ns, inode, ctime in ns).

The CSR builder's scatter window is at least :data:`SCATTER_MIN_BYTES` and at most
1/:data:`SCATTER_SHARE` of the memory the process can still fill.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
from numpy.typing import DTypeLike

from twopgraph.errors import GraphFormatError, OutputError
from twopgraph.graph.csrbuild import build_csr
from twopgraph.ingest.raw import RawDataset
from twopgraph.runtime.memory import available_host_bytes
from twopgraph.store.writer import StoreWriter, half_checked, progress_bar

log = logging.getLogger("twopgraph")

#: The smallest scatter window of the CSR builder (bytes of scratch file written per pass).
SCATTER_MIN_BYTES = 256 << 20


#: ... and at most this fraction (1/N) of the memory the process can still fill: the window
#: is anonymous memory (written to the scratch file in one sequential copy per pass), the rest
#: stays for the page cache of the edges it reads (1/4-scale papers inside 12 GiB: one pass of
#: 3.2 GB instead of three file-backed passes of 1.5 GB at 1/8).
SCATTER_SHARE = 3


class _Stages:
    """Progress of ingestion: one tqdm line over the stages, and their wall times."""

    STAGES = ("edges", "csr", "features", "labels", "splits", "validate")

    def __init__(self, name: str, enabled: bool) -> None:
        self.seconds: dict[str, float] = {}
        self.bar = None
        if enabled:
            from tqdm import tqdm
            self.bar = tqdm(total=len(self.STAGES), desc=f"ingest {name}", unit="stage",
                            file=sys.stderr, leave=False)

    @contextlib.contextmanager
    def stage(self, what: str) -> Iterator[None]:
        if self.bar is not None:
            self.bar.set_postfix_str(what, refresh=True)
        t = time.perf_counter()
        yield
        self.seconds[what] = round(time.perf_counter() - t, 3)
        if self.bar is not None:
            self.bar.update()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def ingest(raw: RawDataset, folder: str | os.PathLike, *, source: dict | None,
           progress: bool = False, feat_dtype: DTypeLike | None = None) -> Path:
    """Write the dataset of ``raw`` as a store at ``folder``, streaming (module docstring).

    ``feat_dtype`` (``float32`` default, or ``float16``: half the disk and page cache) is the
    stored feature type; ``source`` is recorded in ``store.json`` for staleness checks, with
    ``ingest``: the wall time of every stage and what symmetrising changed. Returns the
    folder. A failure leaves no store there (one-line error; a full disk is an
    :class:`OutputError`)."""
    n = raw.num_nodes
    target = np.dtype(feat_dtype or (raw.feat_dtype if raw.feat_dtype == np.float16
                                     else np.float32))
    if target not in (np.float32, np.float16):
        raise GraphFormatError(f"feature type {target} is not stored; float32 or float16")
    stages = _Stages(raw.name, progress)
    t0 = time.perf_counter()
    try:
        with StoreWriter(folder) as w:
            with stages.stage("edges"):
                src, dst = raw.edges(w.scratch)
            with stages.stage("csr"):
                # a third of the memory this process can still fill, as an anonymous window
                # beside the page cache of the edges it reads (a file-backed window of 2.6 GB
                # at 1/4-scale papers inside 12 GiB was written back again and again: 79 GB)
                avail = available_host_bytes()
                budget = None if avail is None else max(SCATTER_MIN_BYTES,
                                                        avail // SCATTER_SHARE)
                csr = build_csr(src, dst, n, w.tmp, what=raw.edges_where,
                                scatter_bytes=budget)
                del src, dst
                w.scratch("edge_index.npy").unlink(missing_ok=True)
                w.adopt("indptr", csr.indptr_path)
                w.adopt("indices", csr.indices_path)
                changes = csr.changes
                csr_phases = csr.phases
                del csr
            log.info("%s: %s", raw.name, _describe(changes))
            with stages.stage("features"):
                total = n * raw.feat_shape[1] * np.dtype(raw.feat_dtype).itemsize
                with progress_bar(total, f"{raw.name} features", progress) as bar:
                    def chunks():
                        for c in raw.feat_chunks():
                            bar.update(c.nbytes)
                            yield c
                    feats = chunks()
                    if target == np.float16:
                        feats = half_checked(feats, f"{raw.name} features")
                    w.put("feat", (n, raw.feat_shape[1]), target, feats)
            with stages.stage("labels"):
                label = raw.labels()
                w.put_array("label", label)
                top = int(label.max()) if label.shape[0] else -1
                if 0 <= raw.num_classes <= top:  # declared (-1: not): never raised silently
                    raise GraphFormatError(f"{raw.where}: label has class {top} but "
                                           f"num_classes is {raw.num_classes} (class ids "
                                           f"are 0..num_classes-1)")
                num_classes = max(int(raw.num_classes), top + 1)
                del label
            with stages.stage("splits"):
                for key, ids in raw.splits().items():
                    w.put_array(key, ids)
            meta = {"name": raw.name, "num_classes": num_classes, "source": source,
                    "derived": None,
                    "ingest": {"changes": changes, "seconds": stages.seconds,
                               "csr_phases": csr_phases}}
            with stages.stage("validate"):
                try:
                    out = w.commit(meta, validate=True, undirected=True)
                except GraphFormatError as e:
                    raise GraphFormatError(f"{raw.where}: {e}") from None
    except OutputError:
        raise
    except OSError as e:  # a read error of a raw file that got past the readers
        raise GraphFormatError(f"{raw.where}: cannot read the raw files ({type(e).__name__}: "
                               f"{e}){'; ' + raw.fix if raw.fix else ''}") from e
    finally:
        stages.close()
    log.info("ingested %s into %s in %.1f s (%s)", raw.name, out, time.perf_counter() - t0,
             ", ".join(f"{k} {v:.1f} s" for k, v in stages.seconds.items()))
    return out


def _describe(changes: dict) -> str:
    c = changes
    return (f"{c['edges']:,} directed edges symmetrised: {c['added']:,} reverse entries added, "
            f"{c['self_loops']:,} self loops and {c['duplicates']:,} repeated edges dropped "
            f"-> {c['entries']:,} CSR entries ({c['entries'] // 2:,} undirected edges)")


def source_record(files: Iterable[str | os.PathLike], key: str | None) -> dict:
    """What identifies the raw files for staleness checks: the first file's path, size,
    mtime, inode and ctime (every file's size and mtime in ``files``)."""
    files = [Path(f) for f in files]
    st = files[0].stat()
    return {"path": str(files[0].resolve()), "key": key, "size": st.st_size,
            "mtime_ns": st.st_mtime_ns, "inode": st.st_ino, "ctime_ns": st.st_ctime_ns,
            "files": {f.name: [f.stat().st_size, f.stat().st_mtime_ns] for f in files}}
