"""Predictions of a trained model: rebuild it from ``OUT/checkpoint.pt`` and run exact inference.

:func:`load_model` rebuilds the model of a checkpoint written by ``twopgraph train`` (single
process) or ``twopgraph train --partitions`` (distributed): the checkpoint records the model
kind and sizes (``model_spec``) and the data it was trained on (``dataset``: name or store,
data root, content fingerprint). A checkpoint of an older twopgraph, without them, is refused
in one line (retrain), as is a missing, unreadable or foreign file. The model is the one the
run reports (``--select``): the checkpoint's ``selected`` weights (e.g. the best validation
epoch's), or, in a checkpoint without them (an older twopgraph), the weights of its last
epoch.

:func:`predict` runs exact layer-wise inference
(:func:`~twopgraph.inference.layerwise_inference`) the way the training's evaluation did --
on the same renumbering (``--renumber``: :func:`~twopgraph.pipeline.assemble.locality_for`), reading
the features in the training's ``--feat-dtype``, in ranges of its ``--eval-batch-edges`` -- and
returns one row per vertex in the dataset's original order: class ids (int64, N) or logits
(float32, N x C). So the accuracy of the predictions on the test split is the ``test_acc``
the run reported for those weights, to the last digit (on the same machine and device).
``twopgraph predict`` (:func:`run_predict`) streams the rows into its ``.npy`` file chunk by
chunk (:func:`write_rows`, into a temp file renamed when complete): class ids are the argmax
taken before the permutation into original order, logits are gathered from inference's
table a chunk at a time -- besides that table, the output costs one chunk and the N-entry
inverse permutation, not another N x C copy.

The data defaults to the checkpoint's (loaded from its data root; a distributed run's is the
dataset store its partition was made from). Data whose content fingerprint differs from the
checkpoint's is refused (:class:`~twopgraph.errors.ConfigError`, one line), unless the caller
names it explicitly (``dataset=`` or ``data=``) and it has the model's numbers of features and
classes: then a warning is logged and the model predicts on it.

Example::

    >>> model, cfg = load_model("runs/train/checkpoint.pt")          # doctest: +SKIP
    >>> pred = predict("runs/train/checkpoint.pt")                    # doctest: +SKIP
    >>> pred.shape, pred.dtype                                        # doctest: +SKIP
    ((2000,), dtype('int64'))
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

from twopgraph.cache.feature_cache import feat_dtype
from twopgraph.cache.host import HostFeatures
from twopgraph.config import TrainConfig, resolve_device
from twopgraph.core.files import atomic_write_bytes
from twopgraph.errors import ConfigError
from twopgraph.graph.data import GraphData
from twopgraph.inference import accuracy, layerwise_inference
from twopgraph.locality import to_original_order
from twopgraph.models import BlockGNN, ModelImportError
from twopgraph.pipeline.assemble import locality_for, resolve_sampler_device
from twopgraph.pipeline.loader import ThreadPlan
from twopgraph.run.checkpoint import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_READ_ERRORS,
    SPEC_KEYS,
    damaged_checkpoint,
    model_from_spec,
)
from twopgraph.run.predictconfig import PredictConfig
from twopgraph.sampler import make_sampler
from twopgraph.sampler.stream import use_device

log = logging.getLogger("twopgraph")

DATASET_KEYS = ("dataset", "data_root", "symmetrize", "name", "fingerprint", "num_nodes")


@dataclass
class ModelCheckpoint:
    """A checkpoint read by :func:`read_model_checkpoint`: the rebuilt ``model`` (on the
    host, in eval mode), the run's ``config``, its ``kind`` ("single" | "distributed"), the
    ``spec`` the model was built from, the ``dataset`` record, the file and its epochs, and
    the epoch (0-based) whose weights the model holds (``selected_epoch``: the run's
    selected model; None for a checkpoint without a selection, which holds its last
    epoch's)."""

    model: BlockGNN
    config: TrainConfig
    kind: str
    spec: dict
    dataset: dict
    path: Path
    epochs_done: int
    selected_epoch: int | None = None


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0][:200]


def read_model_checkpoint(checkpoint: str | os.PathLike) -> ModelCheckpoint:
    """Read ``checkpoint`` (a path) and rebuild its model; one-line
    :class:`~twopgraph.errors.ConfigError` for a missing, unreadable or foreign file, and for
    a checkpoint of an older twopgraph that lacks what rebuilding needs. Loaded with
    ``weights_only=True``: a checkpoint holds tensors and plain values only, so a foreign
    pickle cannot run code."""
    path = Path(checkpoint)
    if not path.is_file():
        raise ConfigError(f"no checkpoint at {path}" + (" (a folder: give its checkpoint.pt)"
                                                        if path.is_dir() else ""))
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except CHECKPOINT_READ_ERRORS as e:  # a corrupt, truncated or foreign file
        raise ConfigError(damaged_checkpoint(path, e)) from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ConfigError(f"{path} is not a twopgraph checkpoint of format {CHECKPOINT_FORMAT} "
                          f"(written by another program or version?)")
    spec, ds = ckpt.get("model_spec"), ckpt.get("dataset")
    if not (isinstance(spec, dict) and isinstance(ds, dict) and all(k in spec for k in SPEC_KEYS)
            and all(k in ds for k in DATASET_KEYS)):
        raise ConfigError(f"{path} was written by an older twopgraph: it does not record the "
                          f"model's sizes and its dataset, so the model cannot be rebuilt; "
                          f"retrain with this version")
    kind = ckpt.get("kind", "single")
    selected = ckpt.get("selected")
    try:
        model = model_from_spec(spec)
        # the model the run reports (--select); the last epoch's in an older checkpoint
        model.load_state_dict(ckpt["model"] if selected is None else selected["model"])
        selected_epoch = None if selected is None else int(selected["epoch"])
        cfg = TrainConfig.from_dict(dict(ckpt["config"]))
    except ModelImportError as e:  # a user's model class (--model MODULE:CLASS) not found here
        raise ConfigError(f"{path}: {e}") from None
    except (KeyError, TypeError, ValueError, RuntimeError) as e:  # ConfigError included
        raise ConfigError(f"{path}: the model cannot be rebuilt from it ({type(e).__name__}: "
                          f"{_first_line(e)}); retrain with this version") from None
    if kind == "distributed":  # the run took its data from the partition: its source store
        cfg.data = replace(cfg.data, dataset=ds["dataset"], symmetrize=False)
    model.eval()
    return ModelCheckpoint(model, cfg, kind, dict(spec), dict(ds), path,
                           int(ckpt.get("epochs_done", 0)), selected_epoch)


def load_model(checkpoint: str | os.PathLike) -> tuple[BlockGNN, TrainConfig]:
    """``(model, config)`` of a checkpoint of ``twopgraph train`` (single-process or
    ``--partitions``): the model rebuilt on the host with the weights of the model the run
    reports (``--select``: e.g. its best validation epoch's; see the module doc), in eval
    mode, and the run's :class:`~twopgraph.config.TrainConfig` (a distributed run's
    ``dataset`` is the store its partition was made from). Bad files: see
    :func:`read_model_checkpoint`.

    Example::

        >>> model, cfg = load_model("runs/train/checkpoint.pt")  # doctest: +SKIP
        >>> cfg.model.model, model.num_layers                    # doctest: +SKIP
        ('sage', 3)
    """
    mc = read_model_checkpoint(checkpoint)
    return mc.model, mc.config


@dataclass
class Prediction:
    """What :func:`prediction` computed: ``values`` (class ids int64 (N,) or logits float32
    (N, C), original vertex order), ``val_acc`` / ``test_acc`` of the predictions (None for
    an empty split; computed as the run computed its own), the dataset's name, whether
    it is the one the checkpoint was trained on (``same_data``), and the epoch whose model
    predicted (``selected_epoch``; None for a checkpoint without a selection)."""

    values: np.ndarray
    val_acc: float | None
    test_acc: float | None
    dataset: str
    same_data: bool
    selected_epoch: int | None = None


def _load_data(mc: ModelCheckpoint, data: GraphData | None, dataset: str | None, data_root,
               symmetrize: bool | None) -> tuple[GraphData, str, bool]:
    """The data to predict on, checked against the checkpoint's record (see module doc):
    ``(data, data root, same data)``."""
    rec, spec = mc.dataset, mc.spec
    explicit = data is not None or dataset is not None
    root = data_root if data_root is not None else rec["data_root"]
    if data is None:
        name = dataset if dataset is not None else rec["dataset"]
        if name is None:
            raise ConfigError(f"{mc.path} was trained on data passed from Python "
                              f"({rec['name']!r}); give it: predict(..., data=...), or "
                              f"--dataset")
        sym = (rec["symmetrize"] if dataset is None else False) if symmetrize is None \
            else symmetrize
        from twopgraph.datasets import load_dataset
        data = load_dataset(name, root, progress=False, symmetrize=sym,
                            store_dtype=rec.get("store_dtype", "float32"))
    else:
        if not isinstance(data, GraphData):
            raise ConfigError(f"data must be a GraphData, got {type(data).__name__}")
        data.validate()
    if data.fingerprint() == rec["fingerprint"]:
        return data, root, True
    what = f"dataset {data.name!r}"
    trained = f"{mc.path} was trained on {rec['name']!r} (fingerprint {rec['fingerprint'][:12]})"
    if not explicit:
        raise ConfigError(f"{what} has changed since {trained}; its fingerprint is now "
                          f"{data.fingerprint()[:12]}: retrain, or name the data explicitly "
                          f"(--dataset) to predict on it anyway")
    if (data.num_features, int(data.num_classes)) != (spec["num_features"], spec["num_classes"]):
        raise ConfigError(f"{what} has {data.num_features} features and {data.num_classes} "
                          f"classes; the model of {mc.path} takes {spec['num_features']} "
                          f"features and predicts {spec['num_classes']} classes")
    log.warning("%s is not the data %s; predicting on it (same numbers of features and "
                "classes)", what, trained)
    return data, root, False


def _eval_sampler(cfg: TrainConfig, graph, device: torch.device, kind: str):
    """The sampler whose full blocks the training's evaluation read: the device sampler
    where ``--sampler-device`` put it on this CUDA device, else the host one."""
    s = cfg.sampling
    choice = s.sampler_device if device.type == "cuda" and kind == "single" else "cpu"
    where, _ = resolve_sampler_device(choice, device, graph, s.sampler_memory_share)
    if where.type == "cpu":
        return make_sampler("neighbor", graph, s.fanouts, seed=cfg.run.seed)
    return make_sampler("device", graph, s.fanouts, seed=cfg.run.seed, device=where)


def _count_accuracy(logits: torch.Tensor, labels: torch.Tensor, idx: np.ndarray):
    """Accuracy as a distributed run computes it: correct / total in float64."""
    if idx.shape[0] == 0:
        return None
    i = torch.from_numpy(np.asarray(idx, dtype=np.int64))
    return float((logits[i].argmax(1) == labels[i]).sum()) / float(idx.shape[0])


@dataclass
class _Inferred:
    """Exact inference of every vertex before it is put in original order: ``logits``
    (N x C float32 host tensor in the run's numbering, memory-mapped where inference kept
    its table on disk), ``perm`` (new id -> original id, None: no renumbering) and the
    prediction's figures."""

    logits: torch.Tensor
    perm: np.ndarray | None
    val_acc: float | None
    test_acc: float | None
    dataset: str
    same_data: bool
    selected_epoch: int | None

    def class_ids(self) -> np.ndarray:
        """The argmax of every row (int64, N), in the run's numbering."""
        return self.logits.argmax(1).numpy().astype(np.int64, copy=False)

    def inverse(self) -> np.ndarray | None:
        """Original id -> the run's id (int64, N), None without renumbering."""
        if self.perm is None:
            return None
        inv = np.empty(self.perm.shape[0], dtype=np.int64)
        inv[np.asarray(self.perm, dtype=np.int64)] = np.arange(self.perm.shape[0])
        return inv


def _infer(checkpoint, data: GraphData | None, dataset: str | None, data_root, device,
           symmetrize: bool | None, scratch_dir) -> _Inferred:
    """Exact inference of every vertex by the checkpoint's model (see :func:`predict`)."""
    mc = read_model_checkpoint(checkpoint)
    device = resolve_device(str(device))
    if device.index is not None:  # --device cuda:N: this thread's work (and contexts) there
        use_device(device)
    data, root, same = _load_data(mc, data, dataset, data_root, symmetrize)
    cfg = mc.config
    perm = None
    if mc.kind == "single":  # the training's numbering (clusters cached under the data root)
        cfg = replace(cfg, data=replace(cfg.data, data_root=str(root)))
        prep = locality_for(data, [], cfg)
        data, perm = prep.data, prep.perm
    # a distributed run evaluates on its source store, in original ids: no renumbering
    perm = _original_order(data, perm)
    sampler = _eval_sampler(cfg, data.graph, device, mc.kind)
    feat = HostFeatures(data.feat, device, dtype=feat_dtype(cfg.cache.feat_dtype),
                        readahead=False)
    model = mc.model.to(device)
    with ThreadPlan.for_threads(cfg.run.threads, cfg.run.prefetch).applied():
        out = layerwise_inference(model, sampler, feat, device, cfg.run.eval_batch_edges,
                                  scratch_dir=scratch_dir)
    labels = torch.from_numpy(np.asarray(data.label, dtype=np.int64))
    score = accuracy if mc.kind == "single" else _count_accuracy
    val_acc, test_acc = (score(out, labels, data.val_idx), score(out, labels, data.test_idx))
    return _Inferred(out, perm, val_acc, test_acc, data.name, same, mc.selected_epoch)


def _original_order(data: GraphData, perm: np.ndarray | None) -> np.ndarray | None:
    """Vertex ``i`` of ``data`` (as inference numbers it) -> its row in the output: the
    original id its ``node_ids`` record when they are a permutation of ``0..N-1`` (a
    renumbered store, given by path or made by the run's ``--renumber``), else ``perm`` (the
    run's renumbering, None: none). Other ``node_ids`` (ids of a larger graph) cannot order
    N rows: the store's order is kept, and one line says so."""
    ids = data.node_ids
    if ids is None:
        return perm
    ids = np.asarray(ids, dtype=np.int64)
    n = ids.shape[0]
    if n and ids.min() >= 0 and ids.max() < n and \
            np.count_nonzero(np.bincount(ids, minlength=n)) == n:
        return ids
    log.info("predictions in the vertex order of %s: its node_ids are not a permutation of "
             "0..N-1, so they cannot order the rows", data.store or data.name)
    return perm


def prediction(checkpoint: str | os.PathLike, data: GraphData | None = None,
               dataset: str | None = None, data_root: str | os.PathLike | None = None,
               device: torch.device | str = "cpu", logits: bool = False, *,
               symmetrize: bool | None = None,
               scratch_dir: str | os.PathLike | None = None) -> Prediction:
    """:func:`predict` with the accuracies of the predictions (:class:`Prediction`)."""
    res = _infer(checkpoint, data, dataset, data_root, device, symmetrize, scratch_dir)
    # class ids: the argmax before the permutation (N int64 permuted, not N x C)
    values = res.logits.numpy() if logits else res.class_ids()
    if res.perm is not None:
        values = to_original_order(values, res.perm)
    elif logits:
        values = np.array(values, dtype=np.float32, copy=True)  # not the scratch map
    return Prediction(values, res.val_acc, res.test_acc, res.dataset, res.same_data,
                      res.selected_epoch)


#: Bytes of output rows :func:`write_rows` gathers and writes at a time.
WRITE_CHUNK_BYTES = 64 << 20


def write_rows(f: BinaryIO, values: np.ndarray | torch.Tensor, order: np.ndarray | None = None,
               chunk_bytes: int = WRITE_CHUNK_BYTES) -> None:
    """Write ``values`` (a NumPy array or host tensor, N rows) as a ``.npy`` file to the
    binary file ``f``, row ``j`` of the file being ``values[order[j]]`` (``order`` None: in
    order), streamed ``chunk_bytes`` of rows at a time: one copy of a chunk besides the
    values (a memory-mapped table is read chunk by chunk, never copied whole)."""
    arr = values.numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
    n = arr.shape[0]
    header = {"descr": np.lib.format.dtype_to_descr(arr.dtype), "fortran_order": False,
              "shape": tuple(arr.shape)}
    np.lib.format.write_array_header_1_0(f, header)  # (a header this small fits 1.0)
    row_bytes = max(1, arr.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64)))
    step = max(1, chunk_bytes // row_bytes)
    for a in range(0, n, step):
        b = min(n, a + step)
        chunk = arr[a:b] if order is None else arr[order[a:b]]
        f.write(np.ascontiguousarray(chunk).data)


def predict(checkpoint: str | os.PathLike, data: GraphData | None = None,
            dataset: str | None = None, data_root: str | os.PathLike | None = None,
            device: torch.device | str = "cpu", logits: bool = False, *,
            symmetrize: bool | None = None,
            scratch_dir: str | os.PathLike | None = None) -> np.ndarray:
    """Predictions of the model in ``checkpoint`` for every vertex, in the data's original
    vertex order: class ids (int64, shape (N,)) or, with ``logits``, the logits (float32,
    N x C).

    The data: ``data`` (a :class:`~twopgraph.graph.data.GraphData`), else ``dataset`` (a name or
    path, as ``--dataset``), else the checkpoint's own; ``data_root`` defaults to the
    checkpoint's data root (where its data and METIS clusters are cached). ``symmetrize``:
    ``--symmetrize`` (default: the training's for its own dataset, off for another).
    Inference runs on ``device`` ("cpu", "cuda", "cuda:N", "auto"); its intermediate tables go
    to ``scratch_dir`` when memory is short (default: the system's temporary folder). See
    the module doc for what is refused.

    Example::

        >>> pred = predict("runs/train/checkpoint.pt")                 # doctest: +SKIP
        >>> lg = predict("runs/train/checkpoint.pt", logits=True)      # doctest: +SKIP
        >>> bool((lg.argmax(1) == pred).all())                         # doctest: +SKIP
        True
    """
    return prediction(checkpoint, data, dataset, data_root, device, logits,
                      symmetrize=symmetrize, scratch_dir=scratch_dir).values


def run_predict(cfg: PredictConfig) -> dict:
    """``twopgraph predict``: predict per ``cfg`` and write ``--out`` (a ``.npy`` file,
    atomically: no file when anything fails; default ``predictions.npy`` or ``logits.npy`` in
    the checkpoint's folder: :meth:`~twopgraph.run.predictconfig.PredictOptions.output`);
    returns the record the CLI prints (``out``, ``rows``, ``columns`` (logits only),
    ``kind``, ``dataset``, ``same_data``, ``val_acc``, ``test_acc``, ``selected_epoch``: the
    epoch whose model predicted)."""
    cfg.validate()
    p, d = cfg.predict, cfg.data
    out = p.output()
    if p.out is None:
        log.info("predict: writing %s (beside the checkpoint; --out FILE to choose)", out)
    res = _infer(p.checkpoint, None, d.dataset, d.data_root, p.device,
                 d.symmetrize or None,
                 out.absolute().parent if out.absolute().parent.is_dir() else None)
    # Streamed into the temp file chunk by chunk in original order (renamed when complete):
    # class ids are the argmax before the permutation; logits are gathered a chunk of rows
    # at a time from inference's table, never copied whole.
    values = res.logits if p.logits else res.class_ids()
    order = res.inverse()
    atomic_write_bytes(out, lambda f: write_rows(f, values, order))
    rec = {"out": str(out), "rows": int(values.shape[0])}
    if p.logits:
        rec["columns"] = int(values.shape[1])
    rec.update(kind="logits" if p.logits else "class_ids", dataset=res.dataset,
               same_data=res.same_data, val_acc=res.val_acc, test_acc=res.test_acc,
               selected_epoch=res.selected_epoch)
    return rec
