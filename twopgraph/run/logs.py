"""A run's logs beside ``metrics.json``: ``OUT/epochs.csv`` (:func:`write_epochs_csv`, one row
per epoch) and, with ``--tensorboard DIR``, TensorBoard event files (:class:`EpochLogs`).

``epochs.csv`` holds the records of ``metrics.json``'s ``epochs`` list, one row each, in epoch
order: a header line, then one line per epoch. Columns: :data:`LEADING_COLUMNS` first (always
present, so the header is the same whether an epoch evaluates or not), then the other keys in
the order the records first have them; a distributed run's ``ranks`` (every rank's own
record) stays in ``metrics.json`` only. Cells: numbers as Python writes them (a float's
shortest exact form, so a cell reads back as the very value ``metrics.json`` holds), ``true`` /
``false``, text as it is, lists and objects as compact JSON, an absent key, None, NaN or an
infinity as an empty cell (``metrics.json``: null). The whole file is rewritten atomically
after every epoch from the run's epoch records, so a resumed run (whose records come back from
its checkpoint) lists each epoch once.

TensorBoard (:class:`EpochLogs`; the optional ``tensorboard`` package,
``pip install tensorboard``): per epoch, at step = the 0-based epoch, ``loss/train``,
``accuracy/train``, ``accuracy/val``, ``accuracy/test`` (exact accuracies, evaluated epochs
only), ``score/val``, ``score/test`` (the run's metric when it is not ``acc``),
``time/epoch_s`` (seconds), ``sampling/input_nodes`` (the epoch's sampled vertices: the input
rows of every batch, summed), ``sampling/sampled_edges`` and ``cache/hit_rate`` (share of
feature rows found in the device cache, 0..1). A resumed run purges the events of the epochs
after its checkpoint's from the folder's earlier files (``purge_step``).
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

from twopgraph.config import tensorboard_ok
from twopgraph.core.files import atomic_write_bytes, writing

EPOCHS_CSV = "epochs.csv"

#: The first columns of ``epochs.csv``, in this order, in every run.
LEADING_COLUMNS = ("epoch", "loss", "train_acc", "val_acc", "test_acc", "val_score",
                   "test_score", "epoch_s", "sample_s", "load_s", "compute_s", "eval_s")

#: Keys of the epoch records that ``epochs.csv`` leaves out (a distributed run's per-rank
#: records).
SKIPPED_KEYS = ("ranks",)

#: ``(tag, epoch record key)`` of the scalars written to TensorBoard each epoch.
TENSORBOARD_SCALARS = (("loss/train", "loss"), ("accuracy/train", "train_acc"),
                       ("accuracy/val", "val_acc"), ("accuracy/test", "test_acc"),
                       ("score/val", "val_score"), ("score/test", "test_score"),
                       ("time/epoch_s", "epoch_s"), ("sampling/input_nodes", "feature_rows"),
                       ("sampling/sampled_edges", "sampled_edges"),
                       ("cache/hit_rate", "hit_rate"))


def epoch_columns(epochs: list[dict]) -> list[str]:
    """The header of ``epochs.csv`` for the records ``epochs``: :data:`LEADING_COLUMNS`, then
    every other key (but :data:`SKIPPED_KEYS`) in first-seen order."""
    cols = list(LEADING_COLUMNS)
    seen = set(cols) | set(SKIPPED_KEYS)
    for rec in epochs:
        for k in rec:
            if k not in seen:
                seen.add(k)
                cols.append(k)
    return cols


def csv_cell(value: Any) -> str:
    """One cell of ``epochs.csv`` (see the module doc)."""
    item = getattr(value, "item", None)  # numpy / torch scalars
    if callable(item) and getattr(value, "ndim", 1) == 0:
        value = item()
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    if isinstance(value, (int, str)):
        return str(value)
    return json.dumps(value, separators=(",", ":"), default=_plain)


def _plain(o: Any) -> Any:
    item = getattr(o, "item", None)
    if callable(item):
        return item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def epochs_csv_text(epochs: list[dict]) -> str:
    """The text of ``epochs.csv`` for the records ``epochs`` (header line first)."""
    cols = epoch_columns(epochs)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for rec in epochs:
        w.writerow([csv_cell(rec.get(c)) for c in cols])
    return buf.getvalue()


def write_epochs_csv(out: Path, epochs: list[dict]) -> None:
    """``out/epochs.csv`` from the records ``epochs``, atomically (a failed write: one
    :class:`~twopgraph.errors.TwopgraphError` line; the previous file stays)."""
    path = Path(out) / EPOCHS_CSV
    text = epochs_csv_text(epochs).encode()
    with writing(path):
        atomic_write_bytes(path, lambda f: f.write(text))


class EpochLogs:
    """What a run logs after each epoch besides ``metrics.json``: ``out/epochs.csv`` and,
    with ``tensorboard`` (a folder), TensorBoard scalars (module doc). ``start_epoch``: the
    first epoch this process trains (a resumed run's: events of it and later are purged)."""

    def __init__(self, out: str | Path, tensorboard: str | None = None,
                 start_epoch: int = 0) -> None:
        self.out = Path(out)
        self.writer = None
        if tensorboard is not None:
            tensorboard_ok()
            from torch.utils.tensorboard import SummaryWriter
            self.writer = SummaryWriter(str(tensorboard),
                                        purge_step=start_epoch if start_epoch > 0 else None)

    def epoch(self, epochs: list[dict]) -> None:
        """After an epoch: rewrite ``epochs.csv`` and add the last record's scalars."""
        write_epochs_csv(self.out, epochs)
        if self.writer is not None and epochs:
            rec = epochs[-1]
            step = int(rec["epoch"])
            for tag, key in TENSORBOARD_SCALARS:
                v = rec.get(key)
                if isinstance(v, (int, float)) and not isinstance(v, bool) \
                        and math.isfinite(v):
                    self.writer.add_scalar(tag, float(v), step)
            self.writer.flush()

    def close(self) -> None:
        """Flush and close the TensorBoard files."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None
