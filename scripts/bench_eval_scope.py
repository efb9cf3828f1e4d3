"""Whole-graph vs restricted exact evaluation (``--eval-scope all`` vs ``scored``) on one
dataset: the auto decision's figures, the rows and bytes of every table each scope makes, the
seconds, and the largest difference of the scored vertices' logits. ``--stream`` times the
restricted scope with and without streamed layers (``scored_inference(stream=)``), ``--inputs``
with and without layer 0's inputs streamed in passes (``stream_inputs=``, ``--pass-rows``).

The model is untrained (seeded initialisation): inference's cost and memory do not depend on
the weights. Prints one JSON line.

    .venv/bin/python scripts/bench_eval_scope.py --dataset synthetic-papers:0.01 \\
        --data-root /tmp/evalroot --model sage --hidden 256 --layers 3
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from twopgraph.cache.host import HostFeatures  # noqa: E402
from twopgraph.datasets import load_dataset  # noqa: E402
from twopgraph.inference import (  # noqa: E402
    EvalTable,
    layerwise_inference,
    plan_scope,
    scored_ids,
    scored_inference,
)
from twopgraph.models import build_model  # noqa: E402
from twopgraph.runtime.jit import configure_threading  # noqa: E402
from twopgraph.sampler.neighbor import NeighborSampler  # noqa: E402

STREAM = {"auto": None, "on": True, "off": False}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="synthetic-papers:0.01")
    p.add_argument("--data-root", default=None)
    p.add_argument("--model", default="sage")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--batch-edges", type=int, default=4_000_000)
    p.add_argument("--skip-all", action="store_true", help="time the restricted scope only")
    p.add_argument("--stream", default="auto",
                   help="comma-separated streaming modes of the restricted scope to time, in "
                        "order: auto (the default rule), on (every layer that can), off (none)")
    p.add_argument("--inputs", default="auto",
                   help="comma-separated modes of layer 0's inputs, in order: auto (the default "
                        "rule), on (streamed in passes over the feature table), off (gathered)")
    p.add_argument("--pass-rows", type=int, default=None,
                   help="vertices per pass of streamed inputs (default: by the memory left)")
    a = p.parse_args()
    configure_threading()
    data = load_dataset(a.dataset, a.data_root, progress=False)
    torch.manual_seed(0)
    model = build_model(a.model, data.num_features, a.hidden, data.num_classes, a.layers).eval()
    sampler = NeighborSampler(data.graph, [-1] * a.layers)
    feat = HostFeatures(data.feat, torch.device("cpu"), readahead=False)
    scored = scored_ids(data.num_nodes, data.val_idx, data.test_idx)

    tables: list[tuple[int, int]] = []
    init = EvalTable.__init__

    def spy(self, n, d, where, device, scratch_dir=None):
        tables.append((int(n), int(d)))
        init(self, n, d, where, device, scratch_dir)

    EvalTable.__init__ = spy
    t = time.perf_counter()
    plan = plan_scope(model, data.graph, scored, "auto", a.batch_edges)
    plan_s = time.perf_counter() - t
    forced = plan if plan.scope == "scored" else plan_scope(model, data.graph, scored, "scored",
                                                           a.batch_edges)
    rec = {"dataset": data.name, "num_nodes": data.num_nodes, "num_edges": data.graph.num_edges,
           "scored": int(scored.shape[0]), "model": a.model, "hidden": a.hidden,
           "layers": a.layers, "auto_scope": plan.scope, "auto_choice": plan.choice,
           "plan_s": round(plan_s, 3), "scored_rows": forced.rows, "scored_edges": forced.edges}
    results = {}
    for mode, im in [(m, i) for m in a.stream.split(",") for i in a.inputs.split(",")]:
        tables.clear()
        t = time.perf_counter()
        got = scored_inference(model, sampler, feat, "cpu", scored, a.batch_edges, plan=forced,
                               stream=STREAM[mode], stream_inputs=STREAM[im],
                               pass_rows=a.pass_rows)
        key = "scored" if mode == "auto" else f"scored_stream_{mode}"
        key += "" if im == "auto" else f"_inputs_{im}"
        rec[f"{key}_s"] = round(time.perf_counter() - t, 2)
        rec[f"{key}_streamed"] = forced.streamed
        rec[f"{key}_input_passes"] = forced.input_passes
        rec[f"{key}_tables"] = tables[:]
        rec[f"{key}_table_bytes"] = sum(4 * n * d for n, d in tables)
        results[(mode, im)] = got.values
    if len(results) > 1:
        first = next(iter(results.values()))
        rec["stream_max_abs_diff"] = max(float((v - first).abs().max()) if v.numel() else 0.0
                                         for v in results.values())
    if not a.skip_all:
        tables.clear()
        t = time.perf_counter()
        whole = layerwise_inference(model, sampler, feat, "cpu", a.batch_edges)
        rec["all_s"] = round(time.perf_counter() - t, 2)
        rec["all_tables"] = tables[:]
        rec["all_table_bytes"] = sum(4 * n * d for n, d in tables)
        want = whole[torch.from_numpy(got.ids)]
        rec["max_abs_diff"] = float((got.values - want).abs().max()) if got.num_rows else 0.0
        rec["argmax_agree"] = float((got.values.argmax(1) == want.argmax(1)).float().mean())
    print(json.dumps(rec))


if __name__ == "__main__":
    main()
