"""Every known dataset (:func:`list_datasets`, ``twopgraph datasets``): the presets, the OGB
names, the ``.npz`` files and store folders of the data root and of
``$TWOPGRAPH_DATASET_PATH``, the stores converted from ``.npz`` files, the Planetoid names no
file or store of the user's takes; and the closest known names for an error message ("did
you mean").
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from twopgraph.datasets.builtin import (
    OGB_DATASETS,
    PLANETOID_DATASETS,
    _describe_preset,
    _synthetic_presets,
)
from twopgraph.datasets.identity import dataset_identity, dataset_path
from twopgraph.datasets.names import _converted_stores, _plain_name, dataset_search_path
from twopgraph.datasets.paths import DATASET_PATH_ENV, _ogb_folder, _source_path, resolve_data_root
from twopgraph.datasets.planetoid import PLANETOID_URL, planetoid_raw_folder
from twopgraph.datasets.presets import _preset_meta, preset_store
from twopgraph.errors import TwopgraphError
from twopgraph.store.reader import is_store


def list_datasets(data_root: str | os.PathLike | None = None) -> list[dict]:
    """Every known dataset: presets, OGB names, then each ``*.npz`` in the data root.

    Each entry is ``{"name", "kind" ("synthetic"|"ogb"|"npz"|"store"|"planetoid"), "cached"
    (bool), "path" (str), "description"}``; ``cached`` says whether loading needs no
    generation/download/conversion. Beyond the presets and OGB names: every name
    :func:`named_dataset` resolves, once (the ``.npz`` files and store folders of the data
    root, then those of each folder of ``$TWOPGRAPH_DATASET_PATH``, then the stores converted
    from ``.npz`` files; a store is of kind ``store``), then the Planetoid names
    (``cora``, ``citeseer``, ``pubmed``; ``path``: their raw files' folder) that none of those
    took, as when loading.
    """
    root = resolve_data_root(data_root)
    out = []
    presets = _synthetic_presets()
    for name, preset in presets.items():
        path, cached = preset_store(preset, root), False
        with contextlib.suppress(TwopgraphError, OSError):  # damaged: rebuilt when loaded
            cached = _preset_meta(preset, path) is not None
        out.append(dict(name=name, kind="synthetic", cached=cached, path=str(path),
                        description=_describe_preset(preset)))
    out.append(dict(name="synthetic-papers:SCALE", kind="synthetic", cached=False, path="",
                    description="ogbn-papers100M's shape at SCALE (e.g. 0.25: 27.8M vertices, "
                                "404M directed edges, 128 features, 172 classes, 1.4% "
                                "labelled), generated straight into a store"))
    for name, desc in OGB_DATASETS.items():
        folder = _ogb_folder(name, root)
        path = dataset_path(name, root)
        cached = dataset_identity(name, root)["store"] is not None
        if not cached and path.is_file():
            desc += f" (raw files in {folder}, not ingested yet)"
        out.append(dict(name=name, kind="ogb", cached=cached, path=str(path),
                        description=desc))
    listed = set(presets) | set(OGB_DATASETS)
    for folder in [root, *dataset_search_path()]:
        where = "the data root" if folder == root else f"{folder} (${DATASET_PATH_ENV})"
        with contextlib.suppress(OSError):  # a folder that is not there: nothing from it
            entries = sorted(folder.glob("*.npz")) + sorted(
                p for p in folder.iterdir() if is_store(p)) if folder.is_dir() else []
            for path in entries:
                stem = path.stem if path.suffix == ".npz" else path.name
                if stem in listed or not _plain_name(stem):
                    continue  # a name found earlier wins, as when loading
                listed.add(stem)
                if path.suffix == ".npz":
                    size = path.stat().st_size / 2**20
                    out.append(dict(name=stem, kind="npz", cached=True, path=str(path),
                                    description=f".npz file in {where} ({size:.1f} MiB)"))
                else:
                    out.append(dict(name=stem, kind="store", cached=True, path=str(path),
                                    description=f"store folder in {where}"))
    for stem, by_source in _converted_stores(root).items():
        if stem in listed:
            continue
        folders = [f for fs in by_source.values() for f in fs]
        if len(by_source) > 1:
            desc = (f"ambiguous: stores of {len(by_source)} different {stem}.npz files; load "
                    f"one by its store folder")
        else:
            source = _source_path(next(iter(by_source)), root)
            desc = (f"store converted from {source}" if source.is_file() else
                    f"store converted from {source} (that file is gone: the store is the "
                    f"dataset now)")
        out.append(dict(name=stem, kind="store", cached=True, path=str(folders[0]),
                        description=desc))
        listed.add(stem)
    for name, desc in PLANETOID_DATASETS.items():
        if name in listed:
            continue  # the user's own file or store of that name is what loads
        raw = planetoid_raw_folder(name, root)
        cached = dataset_identity(name, root)["store"] is not None
        if not cached:
            desc += (f" (raw files in {raw}, not read yet)"
                     if (raw / f"ind.{name}.graph").is_file()
                     else f" (downloaded from {PLANETOID_URL} when first loaded)")
        out.append({"name": name, "kind": "planetoid", "cached": cached, "path": str(raw),
                    "description": desc})
    return out


def _known_names(root: Path) -> list[str]:
    """Names for error messages: presets, OGB and Planetoid names, and the names of files and
    stores (:func:`list_datasets`)."""
    names = list(_synthetic_presets()) + list(OGB_DATASETS) + list(PLANETOID_DATASETS)
    with contextlib.suppress(OSError):
        names += [d["name"] for d in list_datasets(root)
                  if d["kind"] in ("npz", "store") and d["name"] not in names]
    return names


def _did_you_mean(name: str, root: Path) -> str:
    """``"; did you mean cora (datasets/cora.npz)?"`` for the known names closest to
    ``name`` (presets, OGB names, the files and stores :func:`list_datasets` names; letter
    case ignored), or ``""`` when none is close."""
    import difflib
    shown: dict[str, str] = {}  # name -> what to show
    for n in list(_synthetic_presets()) + list(OGB_DATASETS) + list(PLANETOID_DATASETS):
        shown.setdefault(n, n)
    with contextlib.suppress(OSError):  # an unreadable data root: no names from it
        for d in list_datasets(root):  # files and stores, each under the name it loads by
            if d["kind"] in ("npz", "store"):
                shown.setdefault(d["name"], f"{d['name']} ({d['path']})")
    typed = Path(name).name.removesuffix(".npz").lower()
    keys = {k.lower(): k for k in shown}
    score = {k: difflib.SequenceMatcher(None, typed, k).ratio() for k in keys}
    best = max(score.values(), default=0.0)
    if best < 0.6:
        return ""
    # the best and any about as close (at most three), best first
    close = sorted((k for k in keys if score[k] >= best - 0.05), key=lambda k: -score[k])[:3]
    return f"; did you mean {' or '.join(shown[keys[c]] for c in close)}?"
