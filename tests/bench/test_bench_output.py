"""Issue 13 item 7: what the benchmarks print and write -- ``cache.csv`` (set-up columns, no
always-empty column), ``cache.png`` (colour per policy whatever the order of ``--policies``,
style per schedule, x ticks at the ratios asked for, one legend, the optimum per schedule) and
the human-readable ``bench sampler`` record."""

from __future__ import annotations

import csv
import json
import re

import pytest

from twopgraph.cli import main

RATIOS = [0.05, 0.2]


def bench_cache(root, out, capsys, *extra, policies="none,layer,degree"):
    """``bench cache --json`` on synthetic-tiny: (rows printed, rows of cache.csv)."""
    rc = main(["bench", "cache", "--dataset", "synthetic-tiny", "--data-root", str(root),
               "--ratios", ",".join(map(str, RATIOS)), "--policies", policies,
               "--schedules", "random,locality", "--fanouts", "5,5", "--batch-size", "128",
               "--seed", "3", "--json", "--out", str(out), *extra])
    assert rc == 0
    printed = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()
               if ln.startswith("{")]
    with open(out / "cache.csv", newline="") as f:
        return printed, list(csv.DictReader(f))


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def cache_run(root, tmp_path_factory):
    """One ``bench cache`` run shared by the tests below (module-scoped: capture by hand)."""
    import contextlib
    import io
    out = tmp_path_factory.mktemp("bench")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["bench", "cache", "--dataset", "synthetic-tiny", "--data-root", str(root),
                   "--ratios", ",".join(map(str, RATIOS)), "--policies", "none,layer,degree",
                   "--schedules", "random,locality", "--fanouts", "5,5", "--batch-size",
                   "128", "--seed", "3", "--json", "--out", str(out)])
    assert rc == 0
    printed = [json.loads(ln) for ln in buf.getvalue().splitlines() if ln.startswith("{")]
    with open(out / "cache.csv", newline="") as f:
        return printed, list(csv.DictReader(f)), out


# -- cache.csv -------------------------------------------------------------------------------------
def test_cache_csv_has_setup_columns_and_no_empty_column(cache_run):
    from twopgraph.bench.cache import COLUMNS
    _, rows, _ = cache_run
    assert rows
    header = list(rows[0])
    assert header[:4] == ["dataset", "fanouts", "batch_size", "seed"]
    for r in rows:
        assert (r["dataset"], r["fanouts"], r["batch_size"], r["seed"]) == \
            ("synthetic-tiny", "5,5", "128", "3")
    for k in header:  # every column written has a value somewhere
        assert any(r[k] != "" for r in rows), k
    # no presample policy, no --copy: their columns are left out, all others kept, in order
    assert "presample_s" not in header and "gather_s" not in header
    assert header == [k for k in COLUMNS if k not in ("presample_s", "gather_s")]


def test_cache_csv_keeps_presample_and_gather_columns_when_filled(root, tmp_path, capsys):
    _, rows = bench_cache(root, tmp_path / "o", capsys, "--copy", "--device", "cpu",
                          policies="none,presample")
    assert "presample_s" in rows[0] and "gather_s" in rows[0]
    for r in rows:
        if r["policy"] == "presample":
            assert float(r["presample_s"]) >= 0
        if r["policy"] != "optimal":  # scripts/gpu_check.py reads gather_s of these rows
            assert float(r["gather_s"]) >= 0


# -- cache.png -------------------------------------------------------------------------------------
def _lines(fig) -> dict:
    """{(panel, label): (colour, line style)} of every labelled line of the figure."""
    from matplotlib.colors import to_hex
    out = {}
    for i, ax in enumerate(fig.axes):
        for ln in ax.get_lines():
            if not ln.get_label().startswith("_"):
                out[(i, ln.get_label())] = (to_hex(ln.get_color()), ln.get_linestyle())
    return out


def test_cache_plot_colour_follows_the_policy_not_the_order(cache_run):
    pytest.importorskip("matplotlib")
    from twopgraph.bench.cache import figure
    printed, _, _ = cache_run
    order_a = ["none", "layer", "degree", "optimal"]
    order_b = ["degree", "optimal", "layer", "none"]
    rows_a = sorted(printed, key=lambda r: order_a.index(r["policy"]))
    rows_b = sorted(printed, key=lambda r: order_b.index(r["policy"]))
    a, b = _lines(figure(rows_a)), _lines(figure(rows_b))
    assert a == b and len(a) == 2 * 2 * 4  # 2 panels x 2 schedules x (3 policies + optimum)
    colour = {}
    for (_, label), (c, _) in a.items():
        policy, schedule = label.split(" / ")
        colour.setdefault(policy, set()).add(c)
    assert all(len(c) == 1 for c in colour.values()), colour  # one colour per policy
    assert len({next(iter(c)) for c in colour.values()}) == 4  # and different ones
    assert colour["optimal"] == {"#000000"}
    # the schedule decides the line style; the two optima differ by it
    assert a[(0, "optimal / random")][1] != a[(0, "optimal / locality")][1]
    for (_, label), (_, style) in a.items():
        schedule = label.split(" / ")[1]
        assert style == a[(0, f"optimal / {schedule}")][1]


def test_cache_plot_ticks_legend_and_file(cache_run):
    pytest.importorskip("matplotlib")
    from twopgraph.bench.cache import figure
    printed, _, out = cache_run
    fig = figure(printed, title="t")
    for ax in fig.axes:
        assert list(ax.get_xticks()) == pytest.approx(RATIOS)
        assert [t.get_text() for t in ax.get_xticklabels()] == ["0.05", "0.2"]
        assert len(ax.xaxis.get_minorticklocs()) == 0
    # one legend for both panels, with every line of one panel
    assert len(fig.legends) == 1
    texts = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {"optimal / random", "optimal / locality", "layer / locality"} <= texts
    assert len(texts) == 8
    assert (out / "cache.png").stat().st_size > 0


def test_cache_plot_colours_are_fixed_per_name():
    from twopgraph.bench.cache import policy_color, policy_marker, schedule_style
    assert policy_color("layer") == policy_color("layer")
    assert policy_color("my-lru") == policy_color("my-lru")  # registered extras: by name
    assert policy_marker("my-lru") == policy_marker("my-lru")
    assert len({policy_marker(p) for p in ("none", "degree", "presample", "layer")}) == 4
    assert schedule_style("random") != schedule_style("locality")


def test_cache_plot_linear_axes_and_nested_hollow_markers(cache_run):
    """Linear y axes (the bytes panel's log axis over 0.58-1.3 had ticks like 1.25x10^0);
    every policy line has its policy's hollow marker, smaller than those drawn before it, so
    lines that coincide stay visible."""
    pytest.importorskip("matplotlib")
    from twopgraph.bench.cache import figure, policy_marker
    printed, _, _ = cache_run
    fig = figure(printed)
    for ax in fig.axes:
        assert ax.get_yscale() == "linear"
        lines = [ln for ln in ax.get_lines() if not ln.get_label().startswith(("_", "optimal"))]
        assert len(lines) == 2 * 3
        for ln in lines:
            assert ln.get_marker() == policy_marker(ln.get_label().split(" / ")[0])
            assert ln.get_markerfacecolor() == "none"
        by_z = sorted(lines, key=lambda ln: ln.get_zorder())
        sizes = [ln.get_markersize() for ln in by_z]
        assert all(a > b for a, b in zip(sizes, sizes[1:])), sizes


def test_one_batch_per_epoch_is_flagged_in_table_log_and_plot(root, tmp_path, capsys, caplog):
    """synthetic-tiny in one batch: both schedules give the same batch; the table marks the
    rows with * and a note, the log warns, the plot says so."""
    pytest.importorskip("matplotlib")
    from twopgraph.bench.cache import ONE_BATCH_NOTE, figure
    out = tmp_path / "o"
    with caplog.at_level("WARNING", logger="twopgraph"):
        rc = main(["bench", "cache", "--dataset", "synthetic-tiny", "--data-root", str(root),
                   "--ratios", "0.2", "--policies", "none,degree", "--schedules",
                   "random,locality", "--fanouts", "5,5", "--batch-size", "4096",
                   "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    rows = [ln for ln in text.splitlines() if ln.startswith(("none", "degree", "optimal"))]
    assert rows and all(ln.split()[1] in ("random*", "locality*") for ln in rows), text
    assert f"* {ONE_BATCH_NOTE}" in text
    assert "one batch per epoch" in caplog.text
    with open(out / "cache.csv", newline="") as f:
        csv_rows = list(csv.DictReader(f))
    assert {r["num_batches"] for r in csv_rows} == {"1"}
    fig = figure(csv_rows_as_printed(csv_rows), title="t")
    assert ONE_BATCH_NOTE in fig._suptitle.get_text()


def csv_rows_as_printed(rows: list[dict]) -> list[dict]:
    """cache.csv's rows with the numbers the figure reads as numbers."""
    num = ("ratio", "hit_rate", "total_vs_baseline", "num_batches")
    return [{k: (float(v) if k in num else v) for k, v in r.items()} for r in rows]


def test_several_batches_are_not_flagged(cache_run):
    from twopgraph.bench.cache import ONE_BATCH_NOTE, format_table, one_batch_schedules
    printed, _, _ = cache_run
    assert one_batch_schedules(printed) == []
    assert ONE_BATCH_NOTE not in format_table(printed) and "*" not in format_table(printed)


# -- bench sampler ---------------------------------------------------------------------------------
_FLOAT = re.compile(r"\d[\d,]*\.\d+(?:e[+-]?\d+)?")


def _significant(num: str) -> int:
    digits = num.split("e")[0].replace(",", "").replace(".", "").lstrip("0")
    return len(digits)


def _assert_readable(text: str):
    assert "{" not in text and "}" not in text and "[" not in text, text
    for m in _FLOAT.findall(text):
        assert _significant(m) <= 4, (m, text)


def test_bench_sampler_format_record():
    from twopgraph.bench.sampler import format_record
    rec = {"dataset": "cora", "schedule": "locality", "fanouts": [15, 10, 5],
           "batch_size": 1024, "threads": 2, "num_batches": 4, "num_seeds": 140,
           "seeds_per_s": 51848.5444896356, "sample_epoch_s": 0.01928694450043622,
           "sample_epoch_s_all": [0.03076930200040806, 0.00780458700046438],
           "input_nodes_per_batch": 1442.75, "feature_rows": 5771,
           "locality": {"renumbered": True, "cluster_s": 0.00213, "num_clusters": 250,
                        "metis_s": 0.8153333}}
    text = format_record(rec)
    _assert_readable(text)
    lines = text.splitlines()
    assert len(lines) == len(rec) - 1 + len(rec["locality"])
    keys = [ln.split()[0] for ln in lines]
    assert "locality.metis_s" in keys and "locality" not in keys
    col = {ln.index(ln.split()[1], len(ln.split()[0])) for ln in lines}
    assert len(col) == 1  # values aligned in one column
    vals = dict(ln.split(None, 1) for ln in lines)
    assert vals["fanouts"] == "15,10,5"
    assert vals["sample_epoch_s"] == "0.01929"
    assert vals["seeds_per_s"] == "51,849"


def test_bench_sampler_record_formats(root, capsys):
    from twopgraph.bench.config import BenchSamplerConfig
    from twopgraph.bench.sampler import format_record, run
    from twopgraph.cli import build_parser
    argv = ["bench", "sampler", "--dataset", "synthetic-tiny", "--data-root", str(root),
            "--fanouts", "5,5", "--batch-size", "256", "--epochs", "1", "--warmup", "0",
            "--schedule", "locality"]
    rec = run(BenchSamplerConfig.from_args(build_parser().parse_args(argv)))
    _assert_readable(format_record(rec))
    assert "locality.num_clusters" in format_record(rec)
    # --json stays one JSON line with the record's keys
    assert main([*argv, "--json"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.strip()]
    assert len(lines) == 1 and set(json.loads(lines[0])) == set(rec)


def test_bench_sampler_cli_prints_the_formatted_record(root, capsys):
    """Needs cli.cmd_bench_sampler to print format_record(res) without --json."""
    assert main(["bench", "sampler", "--dataset", "synthetic-tiny", "--data-root", str(root),
                 "--fanouts", "5,5", "--batch-size", "256", "--epochs", "1", "--warmup",
                 "0", "--schedule", "locality"]) == 0
    out = capsys.readouterr().out
    _assert_readable(out)
    assert "locality.num_clusters" in out


@pytest.mark.parametrize("sampler", ["neighbor", "labor"])
def test_bench_sampler_counts_sampled_edges(root, capsys, sampler):
    """With every neighbour kept (fanout -1, one layer) a batch's edges are its seeds'
    in-degrees, so the epoch's mean is Σ in-degree(train seeds) / batches, exactly."""
    from twopgraph.datasets import load_dataset
    assert main(["bench", "sampler", "--dataset", "synthetic-tiny", "--data-root", str(root),
                 "--fanouts", "-1", "--batch-size", "256", "--epochs", "1", "--warmup", "0",
                 "--schedule", "random", "--sampler", sampler, "--json"]) == 0
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    d = load_dataset("synthetic-tiny", data_root=str(root), progress=False)
    deg = d.graph.indptr[1:] - d.graph.indptr[:-1]
    want = float(deg[d.train_idx].sum()) / rec["num_batches"]
    assert rec["sampled_edges_per_batch"] == pytest.approx(want, rel=1e-12)
    assert rec["sampler"] == sampler and rec["input_nodes_per_batch"] > 256
