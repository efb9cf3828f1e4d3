#!/usr/bin/env python
"""Features larger than memory on several graph families: the epoch inside a memory cap
against the same epoch uncapped, for each host row cache setting.

    .venv/bin/python scripts/bench_outofcore.py                 # the default families
    .venv/bin/python scripts/bench_outofcore.py --families rmat:19:8,rgg:600000:12 \\
        --variants "--host-cache none;--readahead off --host-cache none" \\
        --json runs/bench_outofcore/outofcore.json
    .venv/bin/python scripts/bench_outofcore.py --families rgg:20000:12 --features 256 \\
        --cap-gib 1 --out /tmp/ooc           # smoke size

For each family a dataset with ``--features`` float32 features is written streaming as an
uncompressed ``.npz`` (reused while its parameters are unchanged), then trained, one
``twopgraph train`` subprocess after another (``--epochs`` epochs, default 2, + exact
evaluation, same seed, the page cache dropped before each run):

1. uncapped (its own unlimited memory cgroup, for the counters), ``--host-cache none``: the
   in-memory reference (24 GiB hold every table here);
2. inside a cgroup v1 memory cap (``--cap-gib``, default: half the feature bytes, i.e. the
   features are twice the cap; page cache included), once per ``--variants`` entry (a set of
   ``train`` flags, e.g. ``--host-cache auto`` or ``--readahead off``).

Columns: the last epoch's seconds (``metrics.json`` ``epochs[-1].epoch_s``: with the default 2
epochs the uncapped run holds the table in memory by then, and a capped run's page cache is
as full as the cap lets it be) and its ratio to the uncapped run's, the first epoch's seconds
(it also reads the table from disk: the page cache was dropped), the last epoch's sampling and
gather seconds, evaluation seconds, the host row cache's rows and hit rate (``host_cache`` of
``metrics.json``), peaks, test accuracy and its difference to the uncapped run.

Families (``NAME:ARGS``): ``papers:SCALE`` (``synthetic-papers:SCALE``, ogbn-papers100M's shape
with its own 128 float32 features: 512-byte rows, 8 to a page; ``--features`` does not apply),
``synthetic:PRESET`` (the project's generator, ``twopgraph.datasets.synthetic``,
scaled to ``--nodes`` vertices: communities with the preset's mean degree),
``rmat:SCALE[:EDGEFACTOR]`` (R-MAT / Kronecker, power-law), ``rgg:N[:DEGREE]`` (random
geometric graph in the unit square: spatial, uniform degrees), ``ba:N[:M]``
(Barabasi-Albert-like preferential attachment); the last three from
``scripts/bench_cluster.py``'s generators. Their labels: ``--classes`` classes over graph
Voronoi regions of ~``--region`` vertices (every vertex takes the class of its nearest of
N / region random seeds, by hop distance), so labels follow the structure; their features: a
class centroid plus Gaussian noise (std ``--noise-base``, 64 dimensions) through a random
orthonormal map to ``--features`` dimensions, plus noise ``--noise``. Splits: 8% train,
2% validation, 10% test, random (seed 1).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_cluster import gen_ba, gen_rgg, gen_rmat  # noqa: E402
from bench_memory import (  # noqa: E402
    MIB,
    MemCgroup,
    Runner,
    drop_caches,
    machine,
    print_table,
    read_metrics,
    twopgraph_cmd,
    wide_features,
    wide_spec,
    write_npz_streaming,
)

log = logging.getLogger("bench_outofcore")

DEFAULT_FAMILIES = "rmat:19:8,rgg:600000:12,ba:600000:6,synthetic:synthetic-products"
BASE_DIM = 64
VERSION = 1


def family_graph(spec: str, nodes: int, seed: int):
    """``(indptr, indices, label, train, val, test, num_classes, what)`` of family ``spec``."""
    name, *args = spec.split(":")
    if name == "synthetic":
        from twopgraph.datasets.synthetic import SYNTHETIC_PRESETS, generate
        preset = args[0] if args else "synthetic-products"
        if preset not in SYNTHETIC_PRESETS:
            raise SystemExit(f"unknown preset {preset!r}; known: {', '.join(SYNTHETIC_PRESETS)}")
        s = wide_spec(preset, nodes, min(BASE_DIM, SYNTHETIC_PRESETS[preset].num_features))
        d = generate(replace(s, seed=seed))
        return (d.graph.indptr, d.graph.indices, d.label, d.train_idx, d.val_idx, d.test_idx,
                d.num_classes, d.feat)
    gens = {"rmat": (gen_rmat, int), "rgg": (gen_rgg, float), "ba": (gen_ba, int)}
    if name not in gens or not args:
        raise SystemExit(f"unknown family {spec!r}: synthetic:PRESET, rmat:SCALE[:EF], "
                         "rgg:N[:DEGREE], ba:N[:M]")
    gen, cast = gens[name]
    indptr, indices = gen(int(args[0]), *(cast(a) for a in args[1:]), seed=seed)
    return (indptr, indices, *_labels_splits(indptr, indices, seed), None)


def _labels_splits(indptr, indices, seed, classes: int = 8, region: int = 2000):
    """Graph Voronoi labels (module doc) and random 8/2/10% splits."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import dijkstra
    n = indptr.shape[0] - 1
    rng = np.random.default_rng([seed, 7])
    seeds = rng.choice(n, size=max(classes, n // region), replace=False)
    a = sp.csr_matrix((np.ones(indices.shape[0], np.float32), indices, indptr), shape=(n, n))
    _, _, src = dijkstra(a, directed=False, indices=seeds, unweighted=True, min_only=True,
                         return_predecessors=True)
    cls = rng.integers(0, classes, seeds.shape[0])
    where = np.full(n, -1, np.int64)
    where[seeds] = cls
    label = np.where(src >= 0, where[np.maximum(src, 0)], rng.integers(0, classes, n))
    perm = np.random.default_rng(1).permutation(n)
    a, b = int(0.08 * n), int(0.10 * n)
    return (label.astype(np.int64), np.sort(perm[:a]), np.sort(perm[a:b]),
            np.sort(perm[b:b + n // 10]), classes)


def make_dataset(path: Path, spec: str, a) -> dict:
    """Write (or reuse) the family's ``.npz`` with wide features (module doc)."""
    params = {"family": spec, "nodes": a.nodes, "features": a.features, "noise": a.noise,
              "noise_base": a.noise_base, "seed": a.seed, "version": VERSION}
    side = path.with_suffix(".ooc.json")
    if path.is_file() and side.is_file():
        try:
            info = json.loads(side.read_text())
            if info.get("params") == params:
                log.info("%s: reusing %s", spec, path)
                return info | {"reused": True}
        except ValueError:
            pass
    t = time.perf_counter()
    indptr, indices, label, train, val, test, c, base = family_graph(spec, a.nodes, a.seed)
    n = indptr.shape[0] - 1
    if base is None:
        rng = np.random.default_rng([a.seed, 3])
        centroids = rng.standard_normal((c, BASE_DIM)).astype(np.float32)
        base = centroids[label] + a.noise_base * rng.standard_normal(
            (n, BASE_DIM), dtype=np.float32)
    gen_s = time.perf_counter() - t
    rows = max(1, (64 * MIB) // (4 * a.features))
    arrays = {"indptr": np.asarray(indptr, np.int64), "indices": np.asarray(indices, np.int32),
              "feat": wide_features(base, a.features, a.noise, a.seed, rows),
              "label": label, "train_idx": train, "val_idx": val, "test_idx": test,
              "num_classes": np.asarray(np.int64(c))}
    log.info("%s: writing %s (%d vertices, %d CSR entries, %.2f GiB of features)", spec, path,
             n, indices.shape[0], n * a.features * 4 / 2**30)
    t = time.perf_counter()
    write_npz_streaming(path, arrays)
    info = {"params": params, "num_nodes": int(n), "csr_entries": int(indices.shape[0]),
            "num_classes": int(c), "train": int(train.shape[0]), "generate_s": gen_s,
            "write_s": time.perf_counter() - t, "feat_bytes": int(n) * a.features * 4}
    side.write_text(json.dumps(info, indent=2) + "\n")
    return info | {"reused": False}


def host_cache_record(run_dir: Path) -> dict:
    try:
        m = json.loads((run_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        return {}
    hc = m.get("host_cache") or {}
    eps = m.get("epochs") or [{}]
    e = eps[-1]  # the last epoch: the steady state (see the module doc)
    look = e.get("host_cache_lookups") or 0
    return {"host_cache_rows": hc.get("rows"), "host_cache_fill_s": hc.get("fill_s"),
            "host_cache_hit_rate": e.get("host_cache_hits", 0) / look if look else None,
            "sample_s": e.get("sample_s"), "readahead_ranges": e.get("readahead_ranges"),
            "epoch_s": e.get("epoch_s"), "load_s": e.get("load_s"),
            "first_epoch_s": eps[0].get("epoch_s"), "epochs_run": len(eps)}


def papers_dataset(spec: str) -> tuple[str, dict]:
    """``papers:SCALE``: the ``synthetic-papers:SCALE`` preset (its own 128 float32
    features, 512-byte rows; generated into the data root's stores by ``prepare``)."""
    from twopgraph.datasets.papers import parse_preset
    name = "synthetic-papers:" + spec.split(":", 1)[1]
    ps = parse_preset(name)
    return name, {"params": {"family": spec}, "num_nodes": ps.num_nodes,
                  "csr_entries": None, "feat_bytes": ps.num_nodes * ps.num_features * 4}


def run_family(spec: str, a, r: Runner, root: Path, out: Path, flags: list[str]) -> dict:
    tag = spec.replace(":", "_").replace("/", "_")
    if spec.startswith("papers:"):
        dataset, info = papers_dataset(spec)
    else:
        npz = root / f"ooc-{tag}-{a.features}.npz"
        info = make_dataset(npz, spec, a)
        dataset = str(npz)
    cap = int(a.cap_gib * 2**30) if a.cap_gib else info["feat_bytes"] // 2
    res = {"family": spec, "dataset": info, "cap_bytes": cap,
           "feat_over_cap": info["feat_bytes"] / cap, "runs": []}
    data = ["--dataset", dataset, "--data-root", str(root)]
    # the store (and any clusters / renumbered store) made first, outside the timings
    prep = r.run(f"{tag}-prepare", twopgraph_cmd("info", *data, "--json"))
    if prep["rc"] != 0:
        res["error"] = prep.get("error")
        return res
    runs = [("--host-cache none", False)] + [(v, True) for v in a.variants]
    for i, (variant, capped) in enumerate(runs):
        slug = "_".join(x.lstrip("-") for x in shlex.split(variant)) or "default"
        name = f"{tag}-{'capped' if capped else 'uncapped'}-{slug}"
        run = out / name
        shutil.rmtree(run, ignore_errors=True)
        if not a.no_drop_caches:
            err = drop_caches()
            if err:
                log.warning("%s", err)
        with MemCgroup(f"twopgraph-ooc-{os.getpid()}-{i}", cap if capped else None) as cg:
            rec = r.run(name, twopgraph_cmd("train", *data, "--out", str(run), *flags,
                                            *shlex.split(variant)), cg)
        row = {"variant": variant, "capped": capped, "cap_gib": cap / 2**30 if capped else None,
               **{k: v for k, v in rec.items() if k != "stdout"}, **read_metrics(run),
               **host_cache_record(run)}
        res["runs"].append(row)
    base = res["runs"][0]
    for row in res["runs"][1:]:
        if base.get("epoch_s") and row.get("epoch_s"):
            row["epoch_ratio"] = row["epoch_s"] / base["epoch_s"]
        if base.get("test_acc") is not None and row.get("test_acc") is not None:
            row["test_acc_diff"] = row["test_acc"] - base["test_acc"]
    return res


def report(res: dict) -> None:
    for fam in res["families"]:
        d = fam["dataset"]
        print_table(
            f"{fam['family']}: {d.get('num_nodes')} vertices, {d.get('csr_entries')} CSR "
            f"entries, {d['feat_bytes'] / 2**30:.2f} GiB of features = "
            f"{fam['feat_over_cap']:.2f}x the cap of {fam['cap_bytes'] / 2**30:.2f} GiB",
            [("variant", "flags"), ("cap_gib", "cap GiB"), ("epoch_s", "last epoch s"),
             ("epoch_ratio", "epoch / uncapped"), ("first_epoch_s", "first epoch s"),
             ("eval_s", "eval s"),
             ("host_cache_rows", "cached rows"), ("host_cache_hit_rate", "hit rate"),
             ("host_cache_fill_s", "fill s"), ("sample_s", "sample s"), ("load_s", "load s"),
             ("ru_maxrss_mib", "peak RSS MiB"),
             ("cgroup_peak_mib", "cgroup peak MiB"), ("test_acc", "test_acc"),
             ("test_acc_diff", "acc diff"), ("error", "error")], fam["runs"])
    m = res["machine"]
    print(f"machine: {m['cpus']} cpus, {m['mem_total_mib']:.0f} MiB, {m['kernel']}")


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="[bench_outofcore %(asctime)s] %(message)s",
                        datefmt="%H:%M:%S", stream=sys.stderr)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--families", default=DEFAULT_FAMILIES, help="comma list (module doc)")
    p.add_argument("--nodes", type=int, default=600_000,
                   help="vertices of synthetic:PRESET families (the others take theirs from "
                        "their arguments)")
    p.add_argument("--features", type=int, default=2048, help="feature width (float32)")
    p.add_argument("--noise", type=float, default=0.05, help="noise std after the wide map")
    p.add_argument("--noise-base", type=float, default=8.0,
                   help="noise std around the class centroids (generated families)")
    p.add_argument("--cap-gib", type=float, default=0.0,
                   help="memory cap in GiB (default 0: half the feature bytes)")
    p.add_argument("--variants", default="--host-cache none;--host-cache auto",
                   help="semicolon-separated `train` flag sets, each run once capped (the "
                        "uncapped reference runs with --host-cache none)")
    p.add_argument("--train-args", default="--fanouts 10,5 --batch-size 512",
                   help="extra `twopgraph train` flags of every run")
    p.add_argument("--threads", type=int, default=0, help="twopgraph --threads (0: default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=2,
                   help="training epochs per run; the table reports the last (default 2: the "
                        "first reads the table from disk in every run)")
    p.add_argument("--data-root", default=str(ROOT / "runs" / "bench_outofcore" / "data"))
    p.add_argument("--out", default=str(ROOT / "runs" / "bench_outofcore"))
    p.add_argument("--json", default=None, help="also write everything as JSON here")
    p.add_argument("--sample-interval", type=float, default=1.0,
                   help="seconds between memory samples")
    p.add_argument("--no-drop-caches", action="store_true",
                   help="do not drop the page cache before each run")
    a = p.parse_args(argv)
    a.variants = [v.strip() for v in a.variants.split(";") if v.strip()]
    if a.features < 1 or a.nodes < 100 or a.cap_gib < 0 or a.epochs < 1:
        p.error("need --features >= 1, --nodes >= 100, --cap-gib >= 0, --epochs >= 1")
    why = MemCgroup.probe()
    if why:
        p.error(f"{why}: this benchmark needs memory cgroups (root, cgroup v1)")
    out, root = Path(a.out), Path(a.data_root)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, TWOPGRAPH_DATA=str(root))
    flags = ["--epochs", str(a.epochs), "--eval-every", "0", "--seed", str(a.seed),
             "--no-progress",
             *(["--threads", str(a.threads)] if a.threads else []), *shlex.split(a.train_args)]
    r = Runner(out / "logs", env, a.sample_interval, commands=[])
    res = {"args": vars(a), "machine": machine(), "commands": r.commands, "families": []}
    for spec in [f.strip() for f in a.families.split(",") if f.strip()]:
        res["families"].append(run_family(spec, a, r, root, out, flags))
        if a.json:  # after every family: a long run keeps what it measured
            Path(a.json).parent.mkdir(parents=True, exist_ok=True)
            Path(a.json).write_text(json.dumps(res, indent=2, default=str) + "\n")
    report(res)
    if a.json:
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
