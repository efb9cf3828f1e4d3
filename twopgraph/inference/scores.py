"""Scores of the logits on a split: accuracy, ROC-AUC, and the metric of a run (``--metric``).

:func:`score`: ``acc`` (:func:`accuracy`) or ``rocauc`` (:func:`rocauc` of class 1's
probability, two classes only); :func:`resolve_metric` turns ``--metric`` (``auto`` =
``rocauc`` for two classes) into one of them.

Example::

    >>> accuracy(logits, labels, data.test_idx)  # doctest: +SKIP
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from twopgraph.core.names import SCORES
from twopgraph.errors import ConfigError
from twopgraph.pipeline.loader import as_long_tensor

log = logging.getLogger("twopgraph")


def accuracy(logits: torch.Tensor, labels: torch.Tensor, idx: np.ndarray) -> float | None:
    """Fraction of ``idx`` whose argmax matches its label; None for an empty split."""
    if idx.shape[0] == 0:
        return None
    idx_t = as_long_tensor(idx)
    return float((logits[idx_t].argmax(1) == labels[idx_t]).float().mean())


# SCORES (twopgraph.core.names, imported above): the metrics a run can score with (``--metric``
# resolved by :func:`resolve_metric`).


def resolve_metric(metric: str, num_classes: int) -> str:
    """The metric of ``--metric`` for data of ``num_classes`` classes: ``auto`` = ``rocauc``
    for exactly two classes, else ``acc``; ``acc`` and ``rocauc`` as given, where ``rocauc``
    needs two classes (:class:`~twopgraph.errors.ConfigError` otherwise)."""
    if metric == "auto":
        return "rocauc" if int(num_classes) == 2 else "acc"
    if metric not in SCORES:
        raise ConfigError(f"unknown --metric {metric!r}; known: auto, {', '.join(SCORES)}")
    if metric == "rocauc" and int(num_classes) != 2:
        raise ConfigError(f"--metric rocauc scores two classes; this dataset has {num_classes} "
                          f"(use --metric acc or auto)")
    return metric


def rocauc(scores: np.ndarray, positive: np.ndarray) -> float | None:
    """Area under the ROC curve of ``scores`` (higher = more likely positive) for the boolean
    labels ``positive``: the probability that a random positive scores above a random
    negative, a tie counting one half (Mann-Whitney U over average ranks). None when one
    class is absent (the area is undefined). O(n log n)."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    pos = np.asarray(positive, dtype=bool).reshape(-1)
    n1 = int(pos.sum())
    n0 = pos.shape[0] - n1
    if n1 == 0 or n0 == 0:
        return None
    order = np.argsort(s, kind="stable")
    v = s[order]
    # tie groups of the sorted scores: each gets the average of its 1-based ranks
    start = np.flatnonzero(np.concatenate([[True], v[1:] != v[:-1]]))
    end = np.append(start[1:], v.shape[0])
    avg = (start + end + 1) / 2.0
    ranks = np.empty(v.shape[0], dtype=np.float64)
    ranks[order] = np.repeat(avg, end - start)
    u = float(ranks[pos].sum()) - n1 * (n1 + 1) / 2.0
    return u / (n1 * float(n0))


def positive_scores(logits: torch.Tensor) -> np.ndarray:
    """What ROC-AUC ranks for two-class ``logits`` (N x 2): class 1's probability
    ``softmax(logits)[:, 1]``, as ``logits[:, 1] - logits[:, 0]`` in float64 (the same order:
    the probability is ``sigmoid`` of it, which float32 would round to 1.0 for confident
    predictions, turning them into ties)."""
    lg = torch.as_tensor(logits).detach().to("cpu", torch.float64)
    return (lg[:, 1] - lg[:, 0]).numpy()


#: What :func:`score` notes in a ``warned`` set once it has logged its one-class warning.
ONE_CLASS_KEY = "rocauc-one-class"


def score(metric: str, logits: torch.Tensor, labels: torch.Tensor, idx: np.ndarray, *,
          warned: set | None = None) -> float | None:
    """``metric`` (``acc`` | ``rocauc``, see :func:`resolve_metric`) of ``logits`` (N x C)
    against ``labels`` (N) on the vertices ``idx``; None for an empty split, and for ROC-AUC
    on a split with one class only (undefined: a warning is logged, once per ``warned`` set,
    which the caller keeps for the run)."""
    if metric == "acc":
        return accuracy(logits, labels, idx)
    if metric != "rocauc":
        raise ValueError(f"unknown metric {metric!r}; known: {', '.join(SCORES)}")
    if idx.shape[0] == 0:
        return None
    idx_t = as_long_tensor(idx)
    lab = labels[idx_t].to("cpu").numpy()
    auc = rocauc(positive_scores(logits[idx_t]), lab == 1)
    if auc is None and (warned is None or ONE_CLASS_KEY not in warned):
        if warned is not None:
            warned.add(ONE_CLASS_KEY)
        log.warning("ROC-AUC is undefined on a split whose %d vertices all have class %d: "
                    "its score is null", idx.shape[0], int(lab[0]))
    return auc
