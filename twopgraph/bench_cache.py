"""``twopgraph bench cache``: hit rates and bytes of every cache policy x schedule x budget,
against the offline optimum of the same access stream.

For each schedule, one epoch (epoch ``--epoch``, default 0) is sampled with the real sampler
and scheduler and its access stream (the input vertices of every batch) is recorded. Each
policy x ratio is then replayed on that stream through the real
:class:`~twopgraph.cache.directory.CacheDirectory` (the bookkeeping ``FeatureCache`` runs);
with ``--copy`` the features are really moved through a ``FeatureCache`` on ``--device`` and
the gather time is reported as well. The counts are exact either way.

Outputs in ``--out``:

- ``cache.csv``: one row per policy x schedule x ratio, plus the offline optimum as rows with
  policy ``optimal``. Columns (bytes are feature bytes, ``row_bytes`` per row):

  ``feature_rows`` (sum of |input_nodes|), ``cache_hits``, ``hit_rate``, ``h2d_bytes`` (every
  copy after the one-off fill), ``cache_fill_bytes`` (the one-off fill), ``total_bytes`` (the
  two together), ``transfer_ratio`` = h2d_bytes / (feature_rows x row_bytes),
  ``bytes_vs_baseline`` = h2d_bytes / (feature bytes of ``none`` + ``random``: what DGL's
  loader copies), ``total_vs_baseline`` = total_bytes / the same, ``vs_optimal`` =
  h2d_bytes / ``optimal_h2d_bytes`` (the fewest bytes any cache of the budget could copy after
  a free, optimally chosen initial fill), ``total_vs_optimal`` = total_bytes /
  ``optimal_total_bytes`` (the fewest bytes any cache of the budget starting empty could copy,
  i.e. the floor of fill + h2d). For the ``optimal`` rows ``h2d_bytes``/``cache_fill_bytes``
  are those of the free-fill optimum and ``total_bytes`` is the empty-start optimum.
  Also ``budget_rows``, ``num_batches``, ``input_nodes_per_batch``, ``policy_s`` (building
  the policy, pre-sampling included), ``replay_s``, ``presample_s``, ``gather_s`` (--copy).
- ``cache.png``: hit rate and total bytes / baseline against the cache ratio, one line per
  policy x schedule, the optimum as the dashed floor.

Example::

    twopgraph bench cache --dataset synthetic-small --policies none,degree,presample,layer \\
        --ratios 0.01,0.05,0.1,0.2,0.4 --schedules random,locality --out runs/cache
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import time
from pathlib import Path

log = logging.getLogger("twopgraph")

COLUMNS = ["policy", "schedule", "ratio", "budget_rows", "feature_rows", "cache_hits",
           "hit_rate", "h2d_bytes", "cache_fill_bytes", "total_bytes", "transfer_ratio",
           "bytes_vs_baseline", "total_vs_baseline", "vs_optimal", "total_vs_optimal",
           "optimal_h2d_bytes", "optimal_total_bytes", "row_bytes", "num_batches",
           "input_nodes_per_batch", "policy_s", "replay_s", "presample_s", "gather_s"]


def _csv_list(text: str, what: str, conv=str) -> list:
    from .errors import ConfigError
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise ConfigError(f"--{what} needs at least one value")
    try:
        return [conv(t) for t in items]
    except ValueError:
        raise ConfigError(f"malformed --{what} {text!r}") from None


def record_stream(scheduler, sampler, epoch: int = 0) -> tuple[list, float]:
    """Input vertices of every batch of one epoch (list of int64 arrays) and the seconds."""
    from .loader import EpochStats, sampled_batches
    t = time.perf_counter()
    stream = [mb.input_nodes.numpy()
              for mb in sampled_batches(scheduler, sampler, epoch, EpochStats())]
    return stream, time.perf_counter() - t


def _ratio(a: float, b: float) -> float:
    if b == 0:
        return 1.0 if a == 0 else math.inf
    return a / b


def run_bench(data, policies: list[str], ratios: list[float], schedules: list[str],
              fanouts: list[int], batch_size: int, seed: int = 0, epoch: int = 0,
              parts=None, balance: int = 16, policy_options: dict | None = None,
              copy: bool = False, device: str = "cpu", dtype=None) -> list[dict]:
    """All rows of ``cache.csv`` (see the module doc) for ``data`` (already renumbered /
    clustered as the schedules need: ``parts`` = cluster of every vertex)."""
    import numpy as np
    import torch

    from .cache import (POLICIES, CacheDirectory, FeatureCache, PolicyContext, belady_min,
                        make_policy, replay)
    from .errors import ConfigError
    from .sampler import SCHEDULERS, NeighborSampler, make_scheduler

    for p in policies:
        if p not in POLICIES:
            raise ConfigError(f"unknown cache policy {p!r}; known: {', '.join(POLICIES)}")
    for s in schedules:
        if s not in SCHEDULERS:
            raise ConfigError(f"unknown schedule {s!r}; known: {', '.join(SCHEDULERS)}")
    for r in ratios:
        if not 0.0 <= r <= 1.0:
            raise ConfigError(f"cache ratios must be in [0, 1], got {r}")
    policy_options = policy_options or {}
    n = data.num_nodes
    row_dtype = dtype or torch.float32
    row_bytes = data.num_features * torch.empty(0, dtype=row_dtype).element_size()
    feat = None
    if copy:  # stored once (pinned for CUDA) and shared by every FeatureCache below
        feat = torch.from_numpy(data.feat).to(row_dtype)
        if torch.device(device).type == "cuda":
            feat = feat.pin_memory()
    sampler = NeighborSampler(data.graph, fanouts, seed=seed)

    streams, scheds = {}, {}
    for s in dict.fromkeys(["random", *schedules]):  # the baseline needs random
        if s not in SCHEDULERS:
            continue
        scheds[s] = make_scheduler(s, data.train_idx, batch_size, seed=seed, parts=parts,
                                   labels=data.label, balance=balance)
        streams[s], secs = record_stream(scheds[s], sampler, epoch)
        log.info("schedule %s: %d batches, %.0f input rows per batch, sampled in %.1f s", s,
                 len(streams[s]), np.mean([x.shape[0] for x in streams[s]]), secs)
    baseline = sum(x.shape[0] for x in streams["random"]) * row_bytes

    rows = []
    for s in schedules:
        stream = streams[s]
        ctx = PolicyContext(data.graph, data.train_idx, list(fanouts), batch_size,
                            scheduler=scheds[s], sampler=sampler, seed=seed)
        built = {}
        for p in policies:  # policies do not depend on the budget: build each once
            t = time.perf_counter()
            built[p] = (make_policy(p, ctx, **policy_options.get(p, {})),
                        time.perf_counter() - t)
        for r in ratios:
            budget = int(r * n)
            t = time.perf_counter()
            best = belady_min(stream, n, budget, start="best")
            empty = belady_min(stream, n, budget, start="empty")
            log.info("%s ratio %g: optimum in %.1f s", s, r, time.perf_counter() - t)
            opt_h2d, opt_total = best.h2d_rows * row_bytes, empty.h2d_rows * row_bytes
            rows.append(_row("optimal", s, r, budget, best, row_bytes, baseline, opt_h2d,
                             opt_total, total=opt_total, policy_s=0.0,
                             replay_s=time.perf_counter() - t))
            for p in policies:
                proto, policy_s = built[p]
                policy = proto.fresh()
                t = time.perf_counter()
                gather_s = None
                if copy:
                    cache = FeatureCache(feat, policy, budget, device=device, dtype=dtype)
                    counters, gather_s = _replay_copy(cache, stream)
                else:
                    counters = replay(stream, CacheDirectory(n, budget, policy))
                row = _row(p, s, r, budget, counters, row_bytes, baseline, opt_h2d, opt_total,
                           policy_s=policy_s, replay_s=time.perf_counter() - t)
                row["presample_s"] = policy.info().get("presample_s")
                row["gather_s"] = gather_s
                rows.append(row)
                log.info("%-9s %-8s ratio %-5g hit %.3f  total/base %.3f  x opt %.3f", p, s, r,
                         row["hit_rate"], row["total_vs_baseline"], row["total_vs_optimal"])
    return rows


def _replay_copy(cache, stream):
    """Replay with real feature movement; returns (counters, seconds spent gathering)."""
    import torch
    from .cache.directory import announced
    t_gather = 0.0
    for ids in announced(stream, cache.policy.lookahead, cache.announce):
        t0 = time.perf_counter()
        out, ev = cache.gather(ids)
        if ev is not None:
            ev.synchronize()
        t_gather += time.perf_counter() - t0
        del out
    if cache.cuda:
        torch.cuda.synchronize(cache.device)
    return cache.counters.copy(), t_gather


def _row(policy, schedule, ratio, budget, c, row_bytes, baseline, opt_h2d, opt_total,
         total=None, **extra) -> dict:
    h2d = c.h2d_rows * row_bytes
    fill = c.fill_rows * row_bytes
    total = h2d + fill if total is None else total
    row = {
        "policy": policy, "schedule": schedule, "ratio": ratio, "budget_rows": budget,
        "feature_rows": c.feature_rows, "cache_hits": c.cache_hits, "hit_rate": c.hit_rate,
        "h2d_bytes": h2d, "cache_fill_bytes": fill, "total_bytes": total,
        "transfer_ratio": _ratio(h2d, c.feature_rows * row_bytes),
        "bytes_vs_baseline": _ratio(h2d, baseline), "total_vs_baseline": _ratio(total, baseline),
        "vs_optimal": _ratio(h2d, opt_h2d), "total_vs_optimal": _ratio(total, opt_total),
        "optimal_h2d_bytes": opt_h2d, "optimal_total_bytes": opt_total, "row_bytes": row_bytes,
        "num_batches": c.num_batches,
        "input_nodes_per_batch": c.feature_rows / c.num_batches if c.num_batches else 0.0,
        "presample_s": None, "gather_s": None,
    }
    row.update(extra)
    return row


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in COLUMNS})


def plot(rows: list[dict], path: Path, title: str = "") -> None:
    """Hit rate and total bytes / baseline against the cache ratio (optimum dashed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    schedules = list(dict.fromkeys(r["schedule"] for r in rows))
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    markers = {"random": "o", "locality": "s"}
    styles = {"random": "-", "locality": "--"}
    colors = {p: f"C{i}" for i, p in enumerate(x for x in policies if x != "optimal")}
    for s in schedules:
        for p in policies:
            pts = sorted((r["ratio"], r["hit_rate"], r["total_vs_baseline"])
                         for r in rows if r["schedule"] == s and r["policy"] == p)
            if not pts:
                continue
            x = [a for a, _, _ in pts]
            if p == "optimal":  # wide and pale, drawn below: policies that reach it stay visible
                kw = dict(color="black", linestyle=styles.get(s, "-"), linewidth=6, alpha=0.25,
                          zorder=1, label=f"optimal (floor) / {s}")
            else:
                kw = dict(color=colors[p], linestyle=styles.get(s, "-"),
                          marker=markers.get(s, "^"), label=f"{p} / {s}")
            axes[0].plot(x, [b for _, b, _ in pts], **kw)
            axes[1].plot(x, [c for _, _, c in pts], **kw)
    axes[0].set_ylabel("hit rate")
    axes[1].set_ylabel("bytes copied (fill included) / none+random")
    axes[1].set_yscale("log")
    for ax in axes:
        ax.set_xlabel("cache ratio (fraction of feature rows)")
        ax.set_xscale("log")
        ax.grid(True, which="both", alpha=0.3)
    axes[1].legend(fontsize=7, ncol=2)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def format_table(rows: list[dict]) -> str:
    head = (f"{'policy':<10}{'schedule':<10}{'ratio':>6}{'hit_rate':>10}{'h2d_MiB':>11}"
            f"{'fill_MiB':>10}{'transfer':>10}{'vs_base':>9}{'tot/base':>9}{'vs_opt':>8}"
            f"{'tot/opt':>8}")
    lines = [head, "-" * len(head)]
    for r in sorted(rows, key=lambda r: (r["schedule"], r["ratio"], r["policy"] != "optimal",
                                         r["policy"])):
        lines.append(
            f"{r['policy']:<10}{r['schedule']:<10}{r['ratio']:>6g}{r['hit_rate']:>10.4f}"
            f"{r['h2d_bytes'] / 2**20:>11.1f}{r['cache_fill_bytes'] / 2**20:>10.1f}"
            f"{r['transfer_ratio']:>10.4f}{r['bytes_vs_baseline']:>9.4f}"
            f"{r['total_vs_baseline']:>9.4f}{r['vs_optimal']:>8.3f}{r['total_vs_optimal']:>8.3f}")
    return "\n".join(lines)


# -- the CLI verb ---------------------------------------------------------------------------------
def add_arguments(c: argparse.ArgumentParser) -> None:
    """The flags of ``bench cache`` beyond the data and sampling ones it shares with
    ``train`` (those are added by the CLI)."""
    c.add_argument("--policies", default="none,degree,presample,layer",
                   help="comma-separated cache policies (default: %(default)s)")
    c.add_argument("--ratios", default="0.01,0.05,0.1,0.2,0.4",
                   help="cache budgets as fractions of the feature rows (default: %(default)s)")
    c.add_argument("--schedules", default="random,locality",
                   help="comma-separated seed schedulers (default: %(default)s)")
    c.add_argument("--out", default="runs/bench_cache",
                   help="output folder: cache.csv, cache.png (default: %(default)s)")
    c.add_argument("--epoch", type=int, default=0,
                   help="which epoch's access stream is measured (default: %(default)s)")
    c.add_argument("--presample-epochs", type=int, default=1,
                   help="presample: pre-sampling epochs K (default: %(default)s)")
    c.add_argument("--lookahead", type=int, default=None,
                   help="layer: batches sampled ahead (default: the policy's, 32)")
    c.add_argument("--copy", action="store_true",
                   help="really move the features through a FeatureCache on --device and "
                        "time the gathers (the counts are the same)")
    c.add_argument("--device", default="cpu", help="device for --copy (default: %(default)s)")
    c.add_argument("--feat-dtype", default="float32",
                   help="float32 | float16 | bfloat16: bytes per stored feature "
                        "(default: %(default)s)")
    c.add_argument("--json", action="store_true", help="print the rows as JSON lines")


def cmd_bench_cache(a) -> int:
    """Entry point of ``twopgraph bench cache`` (parsed args ``a``)."""
    from .cache import feat_dtype
    from .datasets import load_dataset
    from .errors import ConfigError
    from .sampler import SCHEDULERS, parse_fanouts
    from .train import apply_threads, locality_for

    policies = _csv_list(a.policies, "policies")
    ratios = _csv_list(a.ratios, "ratios", float)
    schedules = _csv_list(a.schedules, "schedules")
    fanouts = parse_fanouts(a.fanouts)
    dtype = feat_dtype(a.feat_dtype)
    if a.batch_size <= 0:
        raise ConfigError(f"batch size must be positive, got {a.batch_size}")
    if a.threads < 0:
        raise ConfigError(f"threads must be >= 0, got {a.threads}")
    for s in schedules:
        if s not in SCHEDULERS:
            raise ConfigError(f"unknown schedule {s!r}; known: {', '.join(SCHEDULERS)}")
    apply_threads(a.threads)
    options = {"presample": {"epochs": a.presample_epochs}}
    if a.lookahead is not None:
        options["layer"] = {"lookahead": a.lookahead}
    data = load_dataset(a.dataset, a.data_root)
    prep = locality_for(data, schedules, batch_size=a.batch_size, num_clusters=a.num_clusters,
                        renumber=a.renumber, data_root=a.data_root)
    parts = None if prep.clustering is None else prep.clustering.parts
    rows = run_bench(prep.data, policies, ratios, schedules, fanouts, a.batch_size, seed=a.seed,
                     epoch=a.epoch, parts=parts, balance=a.balance, policy_options=options,
                     copy=a.copy, device=a.device, dtype=dtype)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, out / "cache.csv")
    plot(rows, out / "cache.png", title=f"{data.name}: fanouts {a.fanouts}, batch "
                                        f"{a.batch_size}, {a.feat_dtype}")
    if a.json:
        for r in rows:
            print(json.dumps(r))
    else:
        print(format_table(rows))
        print(f"wrote {out / 'cache.csv'} and {out / 'cache.png'}")
    return 0
