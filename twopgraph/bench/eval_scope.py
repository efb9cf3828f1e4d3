"""``twopgraph bench eval-scope``: whole-graph against restricted exact evaluation
(``--eval-scope all`` vs ``scored``) on one graph -- the auto decision's figures, the rows and
bytes of every table each scope makes, the seconds, and how far the scored vertices' logits
differ.

``--stream`` times the restricted scope with and without streamed layers
(``scored_inference(stream=)``), ``--inputs`` with and without layer 0's inputs streamed in
passes over the feature table (``stream_inputs=``, ``--pass-rows``). The model is untrained
(seeded initialisation): inference's cost and memory do not depend on the weights.

Rows: ``scope`` (scored | all), ``stream``, ``inputs``. Figures: ``seconds``, ``tables``
(rows x columns of every evaluation table made), ``table_bytes``, ``streamed``,
``input_passes``; the ``scored`` rows: ``scored``, ``scored_rows``, ``scored_edges``,
``auto_scope`` (what ``auto`` chose), ``plan_s``, ``max_abs_diff`` (against the whole graph's
logits), ``argmax_agree``, ``stream_max_abs_diff`` (between the streaming modes).

Example::

    twopgraph bench eval-scope --graph synthetic-papers:0.01 --hidden 256 --layers 3
"""

from __future__ import annotations

import argparse
import time

from twopgraph.bench.harness import BENCHMARKS, Benchmark, Context, Row
from twopgraph.errors import ConfigError

STREAM = {"auto": None, "on": True, "off": False}


@BENCHMARKS.register("eval-scope")
class EvalScopeBenchmark(Benchmark):
    """Exact evaluation over the whole graph against the scored vertices only (with and
    without streamed layers and inputs): seconds, table rows and bytes, logit agreement.

    Rows: scope, stream, inputs. Figures: seconds, table_bytes, max_abs_diff,
    argmax_agree."""

    help = "exact evaluation: whole graph vs the scored vertices only"
    columns = ("seconds", "table_bytes", "streamed", "input_passes", "max_abs_diff",
               "argmax_agree")

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--model", default="sage", help="(default: sage)")
        p.add_argument("--hidden", type=int, default=256, help="(default: 256)")
        p.add_argument("--layers", type=int, default=3, help="(default: 3)")
        p.add_argument("--batch-edges", type=int, default=4_000_000,
                       help="edges per evaluation batch (default: 4000000)")
        p.add_argument("--skip-all", action="store_true",
                       help="time the restricted scope only")
        p.add_argument("--stream", default="auto",
                       help="comma-separated streaming modes of the restricted scope, of "
                            "auto, on, off (default: auto)")
        p.add_argument("--inputs", default="auto",
                       help="comma-separated modes of layer 0's inputs, of auto, on, off "
                            "(default: auto)")
        p.add_argument("--pass-rows", type=int, default=None,
                       help="vertices per pass of streamed inputs (default: by memory left)")

    def check(self, a: argparse.Namespace) -> None:
        a._stream = [m.strip() for m in a.stream.split(",") if m.strip()]
        a._inputs = [m.strip() for m in a.inputs.split(",") if m.strip()]
        for flag, modes in (("--stream", a._stream), ("--inputs", a._inputs)):
            if not modes or set(modes) - set(STREAM):
                raise ConfigError(f"{flag}: of {', '.join(STREAM)}")
        if a.hidden < 1 or a.layers < 1 or a.batch_edges < 1:
            raise ConfigError("need --hidden, --layers, --batch-edges >= 1")

    def measure(self, a: argparse.Namespace, ctx: Context) -> list[Row]:
        import torch

        from twopgraph.cache.host import HostFeatures
        from twopgraph.inference import (
            EvalTable,
            layerwise_inference,
            plan_scope,
            scored_ids,
            scored_inference,
        )
        from twopgraph.models import build_model
        from twopgraph.sampler.neighbor import NeighborSampler
        data = ctx.data()
        torch.manual_seed(0)
        model = build_model(a.model, data.num_features, a.hidden, data.num_classes,
                            a.layers).eval()
        sampler = NeighborSampler(data.graph, [-1] * a.layers)
        feat = HostFeatures(data.feat, torch.device("cpu"), readahead=False)
        scored = scored_ids(data.num_nodes, data.val_idx, data.test_idx)
        tables: list[tuple[int, int]] = []
        init = EvalTable.__init__

        def spy(self, n, d, *args, **kw):  # every table an evaluation makes
            tables.append((int(n), int(d)))
            init(self, n, d, *args, **kw)

        EvalTable.__init__ = spy
        try:
            t = time.perf_counter()
            plan = plan_scope(model, data.graph, scored, "auto", a.batch_edges)
            plan_s = time.perf_counter() - t
            forced = plan if plan.scope == "scored" else plan_scope(
                model, data.graph, scored, "scored", a.batch_edges)
            common = {"scored": int(scored.shape[0]), "scored_rows": forced.rows,
                      "scored_edges": forced.edges, "auto_scope": plan.scope,
                      "auto_choice": plan.choice, "plan_s": plan_s}
            rows, results, got = [], [], None
            for mode in a._stream:
                for im in a._inputs:
                    tables.clear()
                    t = time.perf_counter()
                    got = scored_inference(model, sampler, feat, "cpu", scored, a.batch_edges,
                                           plan=forced, stream=STREAM[mode],
                                           stream_inputs=STREAM[im], pass_rows=a.pass_rows)
                    rows.append(Row({"scope": "scored", "stream": mode, "inputs": im}, {
                        **common, "seconds": time.perf_counter() - t,
                        "streamed": forced.streamed, "input_passes": forced.input_passes,
                        "tables": tables[:], "table_bytes": sum(4 * n * d for n, d in tables)}))
                    results.append(got.values)
            if len(results) > 1:
                diff = max(float((v - results[0]).abs().max()) if v.numel() else 0.0
                           for v in results)
                for r in rows:
                    r.figures["stream_max_abs_diff"] = diff
            if not a.skip_all:
                tables.clear()
                t = time.perf_counter()
                whole = layerwise_inference(model, sampler, feat, "cpu", a.batch_edges)
                rows.append(Row({"scope": "all", "stream": None, "inputs": None}, {
                    "seconds": time.perf_counter() - t, "tables": tables[:],
                    "table_bytes": sum(4 * n * d for n, d in tables)}))
                want = whole[torch.from_numpy(got.ids)]
                for r, v in zip(rows[:-1], results):
                    r.figures["max_abs_diff"] = (float((v - want).abs().max())
                                                 if got.num_rows else 0.0)
                    r.figures["argmax_agree"] = float(
                        (v.argmax(1) == want.argmax(1)).float().mean())
        finally:
            EvalTable.__init__ = init
        return rows
