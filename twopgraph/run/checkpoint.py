"""A training run's checkpoint: its format, the run signature it must match to be resumed,
reading and durable saving, the model and dataset records ``twopgraph predict`` rebuilds from,
and the model and optimiser restored from it.

``OUT/checkpoint.pt`` (format :data:`CHECKPOINT_FORMAT`, written atomically after every
epoch by :func:`save_checkpoint`) holds ``format``, ``kind`` (``single`` | ``distributed``),
``signature`` (:func:`run_signature`), ``epochs_done``, ``model`` and ``optimizer`` state,
``epochs_log`` and what the caller adds (``torch_rng``, ``config``, ``selected``,
``model_spec``: :func:`model_record`, ``dataset``: :func:`dataset_record`, ``sampler``: the
sampler the batches were drawn with, ``--sampler auto`` resolved); with ``torch_rng``
also ``cuda_rng`` (:data:`CUDA_RNG`: every GPU's generator state, when this process has
initialised CUDA), restored by :func:`build_training` (:func:`restore_cuda_rng`); older
checkpoints without it still load. docs/formats.md lists every key.

Example::

    >>> sig = run_signature({"lr": 0.01}, "data-fp")
    >>> sorted(sig)
    ['data', 'fingerprint', 'params']
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import logging
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

from twopgraph.config import ModelConfig, TrainConfig
from twopgraph.core.files import atomic_write_bytes, writing
from twopgraph.core.fingerprint import run_fingerprint
from twopgraph.errors import ConfigError
from twopgraph.graph.data import GraphData
from twopgraph.models import BlockGNN, model_from_config

CHECKPOINT = "checkpoint.pt"

#: Checkpoint key of the CUDA generators' states (``torch.cuda.get_rng_state_all()``: one
#: uint8 tensor per GPU this process sees), saved beside ``torch_rng`` (the CPU generator).
CUDA_RNG = "cuda_rng"

log = logging.getLogger("twopgraph")


CHECKPOINT_FORMAT = 2


def run_signature(params: dict, data_fingerprint: str) -> dict:
    """What a checkpoint must match to be resumed: the parameters that change the weights
    (``params``), the content of the data they were trained on and the fingerprint of both
    (:func:`~twopgraph.core.fingerprint.run_fingerprint`)."""
    return {"params": params, "data": data_fingerprint,
            "fingerprint": run_fingerprint(params, data_fingerprint)}


#: What ``torch.load`` raises for a truncated, corrupt or foreign file.
CHECKPOINT_READ_ERRORS = (OSError, EOFError, RuntimeError, ValueError, pickle.UnpicklingError,
                          zipfile.BadZipFile)


def damaged_checkpoint(path: str | os.PathLike, e: BaseException) -> str:
    """``cannot read checkpoint PATH: truncated or corrupt ...``: what to say of a checkpoint that
    ``torch.load`` could not read (``e``), with its size and torch's reason in a few words
    (an ``OSError: [Errno 22] Invalid argument`` or a miniz error alone says nothing)."""
    try:
        size = f"{Path(path).stat().st_size:,} bytes"
    except OSError:
        size = "size unknown"
    reason = (str(e).strip().splitlines() or [""])[0].split(". This is an internal")[0]
    if isinstance(e, OSError) and e.strerror:
        reason = e.strerror
    reason = f"{type(e).__name__}: {reason[:160]}" if reason else type(e).__name__
    return (f"cannot read checkpoint {path}: truncated or corrupt, not a complete checkpoint "
            f"file ({size}; {reason})")


def read_checkpoint(path: Path, signature: dict, epochs: int, kind: str = "single", *,
                    partitions: str | None = None,
                    source_fingerprint: str | None = None) -> dict:
    """Read ``path``; refuse (ConfigError) a missing, foreign or unreadable file, a checkpoint
    of another ``kind`` ("single" | "distributed"), one whose ``signature`` (see
    :func:`run_signature`) differs, or one with more than ``epochs`` epochs done. A
    distributed run passes its partition folder ``partitions`` and the fingerprint of the
    data it was made from (``source_fingerprint``), so that another partition of the same
    data is refused as such, not as changed data (:func:`_data_change`)."""
    if not path.is_file():
        raise ConfigError(f"--resume: no checkpoint at {path}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except CHECKPOINT_READ_ERRORS as e:  # a corrupt, truncated or foreign file
        raise ConfigError(f"--resume: {damaged_checkpoint(path, e)}; rerun with --overwrite "
                          f"to start afresh") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ConfigError(f"--resume: {path} is not a twopgraph checkpoint of format "
                          f"{CHECKPOINT_FORMAT} (written by another version?)")
    if ckpt.get("kind", "single") != kind:
        raise ConfigError(f"--resume: {path} is a checkpoint of a {ckpt.get('kind', 'single')} "
                          f"run, this is a {kind} run")
    have = ckpt.get("signature", {})
    if have.get("fingerprint") != signature["fingerprint"]:
        old, new = have.get("params", {}), signature["params"]
        diff = [f"{k}={old.get(k)!r} (now {new.get(k)!r})" for k in sorted(set(old) | set(new))
                if old.get(k) != new.get(k)]
        if have.get("data") != signature["data"]:
            diff.append(_data_change(ckpt, signature, partitions, source_fingerprint))
        raise ConfigError(f"--resume: checkpoint {path} was written by another configuration: "
                          f"{', '.join(diff) or 'fingerprint differs'}")
    if ckpt["epochs_done"] > epochs:
        raise ConfigError(f"--resume: checkpoint already has {ckpt['epochs_done']} epochs, "
                          f"more than --epochs {epochs}")
    return ckpt


def resumed_sampler(ckpt: dict) -> str | None:
    """The sampler ``ckpt``'s batches were drawn with: its ``sampler`` (``--sampler auto``
    resolved), else, for a checkpoint written before that key, its config's ``sampler`` (the
    default then was ``neighbor``, recorded by name); None when unknown. A resumed ``--sampler
    auto`` run goes on with it rather than deciding again (``sampler`` is not in the
    signature while it is the default ``auto``)."""
    name = ckpt.get("sampler") or (ckpt.get("config") or {}).get("sampler")
    return None if name in (None, "auto") else str(name)


#: Sampler options whose default changed (``labor_iterations``: 0 until issue 41, then 1) and
#: that the signature leaves out at their default: a checkpoint's own value is kept on resume.
KEPT_SAMPLER_OPTIONS = ("labor_iterations",)


def resume_sampler(cfg: TrainConfig, ckpt: dict) -> TrainConfig:
    """``cfg`` to resume ``ckpt`` with: under ``--sampler auto``, the sampler the checkpoint
    was trained with (:func:`resumed_sampler`, logged), so that a resumed run draws its
    batches as the run it continues did; and the checkpoint's value of each of
    :data:`KEPT_SAMPLER_OPTIONS` where ``cfg`` has that option's default (a run from before
    the default changed goes on as it was trained; logged); otherwise ``cfg`` itself."""
    sampling = cfg.sampling
    old = ckpt.get("config") or {}
    defaults = {f.name: f.default for f in dataclasses.fields(sampling)}
    for key in KEPT_SAMPLER_OPTIONS:
        was = old.get(key)
        if was is not None and getattr(sampling, key) == defaults[key] and was != defaults[key]:
            log.info("resuming with the checkpoint's --%s %s", key.replace("_", "-"), was)
            sampling = dataclasses.replace(sampling, **{key: was})
    name = resumed_sampler(ckpt)
    if cfg.sampling.sampler == "auto" and name is not None:
        log.info("--sampler auto: resuming with the checkpoint's sampler, %s", name)
        sampling = dataclasses.replace(sampling, sampler=name)
    return cfg if sampling is cfg.sampling else dataclasses.replace(cfg, sampling=sampling)


#: Clusters per batch of ``--num-clusters 0`` before issue 41 changed the default to 8: a
#: checkpoint without a ``num_clusters`` record resumes with its clustering.
OLD_CLUSTERS_PER_BATCH = 4


def resume_schedule(cfg: TrainConfig, ckpt: dict, num_nodes: int, num_train: int) -> TrainConfig:
    """``cfg`` to resume ``ckpt`` with, so that its batches are drawn as before: under
    ``--num-clusters 0``, the cluster count the checkpoint recorded (``num_clusters``; a
    checkpoint from before that record: the default of then,
    :data:`OLD_CLUSTERS_PER_BATCH` per batch, for ``num_nodes`` vertices and ``num_train``
    training vertices). ``--schedule auto`` then decides again on those clusters (the
    decision is deterministic; a checkpoint from before the label-skew rule may be decided
    otherwise). The change is logged."""
    from twopgraph.locality.cluster import default_num_clusters
    s = cfg.sampling
    changes: dict = {}
    if s.num_clusters == 0:
        if "num_clusters" in ckpt:
            k = ckpt["num_clusters"]
        else:
            k = default_num_clusters(num_nodes, num_train, s.batch_size,
                                     clusters_per_batch=OLD_CLUSTERS_PER_BATCH)
        if k:
            changes["num_clusters"] = int(k)
            log.info("resuming with the checkpoint's clusters: --num-clusters %d", int(k))
    if not changes:
        return cfg
    return dataclasses.replace(cfg, sampling=dataclasses.replace(s, **changes))


def _data_change(ckpt: dict, signature: dict, partitions: str | None,
                 source_fingerprint: str | None) -> str:
    """How the data of ``ckpt`` differs from the run's (``signature["data"]``: the data's
    fingerprint, or for a distributed run its partition's ``partition_id``): another
    partition (folder and id of each) when the data it was made from is the same (the
    checkpoint's ``dataset`` fingerprint equals ``source_fingerprint``), else the content."""
    if partitions is None:
        return "the data (its content changed)"
    old_folder = (ckpt.get("config") or {}).get("partitions")
    old_id, new_id = str(ckpt["signature"].get("data")), str(signature["data"])
    old = f"{old_folder} (partition_id {old_id[:16]})" if old_folder else \
        f"partition_id {old_id[:16]}"
    both = f"the checkpoint's {old}, this run's {partitions} (partition_id {new_id[:16]})"
    old_source = (ckpt.get("dataset") or {}).get("fingerprint")
    if source_fingerprint is not None and old_source == source_fingerprint:
        return f"the partition (another partition of the same data: {both})"
    return f"the data (its content changed; {both})"


def cuda_rng_states() -> list[torch.Tensor] | None:
    """The state of every CUDA generator of this process (``torch.cuda.get_rng_state_all()``),
    or None when CUDA is not initialised here (a CPU run: nothing to save, and no CUDA context
    is created to read it)."""
    if not torch.cuda.is_initialized():
        return None
    return [t.cpu() for t in torch.cuda.get_rng_state_all()]


def restore_cuda_rng(ckpt: dict) -> int:
    """Set the CUDA generators from ``ckpt[CUDA_RNG]`` (:func:`cuda_rng_states`), so a resumed
    CUDA run draws what the uninterrupted one would have drawn (dropout masks, device
    sampling). A checkpoint without the key (older, or of a CPU run) changes nothing; one
    from a process that saw another number of GPUs sets the generators both have (GPU ``i``
    from state ``i``) and warns once. Returns the number of generators set."""
    states = ckpt.get(CUDA_RNG)
    if not states:
        return 0
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    n = min(len(states), have)
    for i in range(n):
        torch.cuda.set_rng_state(states[i], i)
    if n != len(states) or have != len(states):
        log.warning("resume: the checkpoint holds the CUDA generator states of %d GPU(s), this "
                    "process sees %d: %d restored, the others keep their seeded state (the "
                    "run may not resume identically)", len(states), have, n)
    return n


def save_checkpoint(out: Path, model: torch.nn.Module, opt: torch.optim.Optimizer,
                    signature: dict, epochs_log: list, **extra: Any) -> None:
    """``out/checkpoint.pt`` (atomically) after ``len(epochs_log)`` epochs; ``extra`` keys
    (e.g. ``torch_rng``, ``kind``, ``config``) are stored as they are; :func:`read_checkpoint`
    reads it. With ``torch_rng`` (a process that resumes its random draws) and CUDA initialised
    the CUDA generators' states are added as :data:`CUDA_RNG` unless ``extra`` gives them."""
    if "torch_rng" in extra and CUDA_RNG not in extra:
        states = cuda_rng_states()
        if states is not None:
            extra[CUDA_RNG] = states
    state = {"format": CHECKPOINT_FORMAT, "signature": signature,
             "epochs_done": len(epochs_log), "model": model.state_dict(),
             "optimizer": opt.state_dict(), "epochs_log": epochs_log, **extra}
    write_checkpoint(out / CHECKPOINT, state)


def write_checkpoint(path: Path, state: dict) -> None:
    """``state`` (a checkpoint's dict) to ``path``, atomically; a failed write is one
    :class:`~twopgraph.errors.TwopgraphError` line and the previous file stays."""
    # Serialised in memory first: torch.save reports a full disk as a RuntimeError from its
    # zip writer, a plain write reports it as the OSError it is (see rundir.writing).
    buf = io.BytesIO()
    torch.save(state, buf)
    with writing(path):
        atomic_write_bytes(path, lambda f: f.write(buf.getbuffer()))


def model_record(cfg: TrainConfig, num_features: int, num_classes: int) -> dict:
    """What rebuilding the trained model needs (checkpoint key ``model_spec``; read by
    :func:`twopgraph.run.predict.load_model`): the model section's fields the model is built from
    (:meth:`~twopgraph.config.ModelConfig.spec`: ``model``, ``hidden``, ``dropout``, ``heads``,
    ...) and its sizes ``num_features``, ``num_classes``, ``num_layers``."""
    return {**cfg.model.spec(), "num_features": int(num_features),
            "num_classes": int(num_classes), "num_layers": len(cfg.sampling.fanouts)}


#: Keys of a checkpoint's ``model_spec`` that :func:`model_from_spec` needs (written since
#: issue 13); a spec field added later takes its default when a checkpoint lacks it.
SPEC_KEYS = ("num_features", "num_classes", "num_layers", *ModelConfig.spec_fields(True))


def model_from_spec(spec: dict) -> BlockGNN:
    """The model a ``model_spec`` (:func:`model_record`) describes, freshly initialised."""
    section = ModelConfig(**{k: spec[k] for k in ModelConfig.spec_fields() if k in spec})
    section.validate()
    return model_from_config(section, int(spec["num_features"]), int(spec["num_classes"]),
                             int(spec["num_layers"]))


def dataset_record(dataset: str | None, data_root: str | os.PathLike | None,
                   symmetrize: bool, name: str, fingerprint: str, num_nodes: int,
                   store_dtype: str = "float32") -> dict:
    """Which data a model was trained on (checkpoint key ``dataset``; what ``twopgraph
    predict`` loads by default and compares with): ``dataset`` (the name or path to load,
    None for a caller's :class:`GraphData`), the data root resolved to an absolute path,
    ``symmetrize``, the data's ``name``, content ``fingerprint``, ``num_nodes`` and
    ``store_dtype`` (``--store-dtype``; absent in older checkpoints: float32)."""
    from twopgraph.datasets import resolve_data_root
    return {"dataset": dataset, "data_root": str(resolve_data_root(data_root).absolute()),
            "symmetrize": bool(symmetrize), "name": name, "fingerprint": fingerprint,
            "num_nodes": int(num_nodes), "store_dtype": store_dtype}


def adam_options(device: torch.device | str) -> dict:
    """Keywords of ``torch.optim.Adam`` for parameters on ``device`` (CPU or CUDA):
    ``fused=True`` where this torch's Adam has it (one kernel for every parameter's update
    instead of a few per tensor; on the CPU 0.08 ms instead of 0.27 ms per step for SAGE's
    207k parameters alone, and about 5% of a 2-epoch run's epoch on the 2M-vertex graph,
    where each small op of the unfused update also wakes the thread pool); its updates equal
    the unfused ones to float rounding.

    Example::

        >>> adam_options("cpu")
        {'fused': True}
    """
    if torch.device(device).type not in ("cpu", "cuda"):
        return {}
    if "fused" not in inspect.signature(torch.optim.Adam).parameters:
        return {}
    return {"fused": True}


def load_optimizer_state(opt: torch.optim.Optimizer, state: dict) -> None:
    """``opt.load_state_dict(state)`` keeping ``opt``'s own implementation choice (``fused``,
    ``foreach``: the device's, :func:`adam_options`) rather than the saved one, so a checkpoint
    written on another device resumes (a CUDA run's fused state on the CPU, a CPU run's on
    CUDA: the ``step`` counters are then placed as the implementation needs)."""
    keys = ("fused", "foreach")
    saved = state.get("param_groups", [])
    if len(saved) == len(opt.param_groups):  # else torch's own error
        state = {**state, "param_groups": [{**g, **{k: own[k] for k in keys if k in own}}
                                           for g, own in zip(saved, opt.param_groups)]}
    opt.load_state_dict(state)


def build_training(cfg: TrainConfig, data: GraphData, device: torch.device | str,
                   ckpt: dict | None = None,
                   ) -> tuple[BlockGNN, torch.optim.Optimizer, list[dict], int]:
    """The model (initialised from ``torch.manual_seed(seed)``, so every process builds the
    same weights) and its Adam optimizer (fused: :func:`adam_options`), restored from
    ``ckpt`` when resuming (the CUDA generators too: :func:`restore_cuda_rng`; the caller
    restores the CPU one, ``torch_rng``).
    Returns ``(model, optimizer, epochs_log, start_epoch)``."""
    m = cfg.model
    torch.manual_seed(cfg.run.seed)
    model = model_from_config(m, data.num_features, data.num_classes,
                              len(cfg.sampling.fanouts)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=m.lr, weight_decay=m.weight_decay,
                           **adam_options(device))
    if ckpt is None:
        return model, opt, [], 0
    model.load_state_dict(ckpt["model"])
    load_optimizer_state(opt, ckpt["optimizer"])
    restore_cuda_rng(ckpt)
    return model, opt, list(ckpt["epochs_log"]), ckpt["epochs_done"]
