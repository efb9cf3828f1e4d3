"""Issue 38 item 4: one benchmark harness. The shared options parse on every benchmark; a tiny
run of benchmarks on synthetic-tiny appends JSON lines with the record's keys; ``--repeat 2``
gives a spread; a bad ``--graph`` is one line and exit 2; the old verbs keep their output."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from twopgraph.bench.harness import STDOUT, benchmark_names
from twopgraph.bench.record import commit, make_record, summarise
from twopgraph.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = ("benchmark", "params", "figures", "spread", "repeat", "machine", "versions",
            "commit")
MACHINE = ("host", "cpu_count", "cpu_model", "memory_gib", "gpu")
VERSIONS = ("python", "torch", "numpy", "numba", "twopgraph")
EXPECTED = {"sampler", "cache", "sampling", "train", "scaling", "memory", "dist", "scale",
            "cluster", "csr", "residency", "eval-scope", "renumber-feat"}
TINY = ["--fanouts", "5,5", "--batch-size", "256", "--epochs", "1", "--warmup", "0"]


def run_main(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main([str(x) for x in argv])
    return rc, out.getvalue()


def run_module(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "-m", "twopgraph.bench", *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def runs(root, tmp_path_factory):
    """Three benchmarks appending to one file: ``sampling`` (2 schedules x 2 samplers, twice),
    the old ``sampler`` verb and the old ``cache`` verb; (records, sampler's stdout)."""
    out = tmp_path_factory.mktemp("bench") / "results.jsonl"
    rc, _ = run_main(["bench", "sampling", "--graph", "synthetic-tiny", "--data-root", root,
                      *TINY, "--samplers", "neighbor,labor", "--schedules", "random,locality",
                      "--repeat", "2", "--json", out])
    assert rc == 0
    rc, printed = run_main(["bench", "sampler", "--graph", "synthetic-tiny", "--data-root",
                            root, *TINY, "--schedule", "random", "--json", out])
    assert rc == 0
    rc, _ = run_main(["bench", "cache", "--dataset", "synthetic-tiny", "--data-root", root,
                      "--fanouts", "5,5", "--batch-size", "256", "--policies", "none,layer",
                      "--ratios", "0.1", "--schedules", "random", "--out",
                      out.parent / "cache", "--json", out])
    assert rc == 0
    records = [json.loads(ln) for ln in out.read_text().splitlines()]
    return records, printed


# -- the shared options ----------------------------------------------------------------------------
def test_every_benchmark_is_registered_and_takes_the_shared_options():
    names = benchmark_names()
    assert EXPECTED <= set(names) and names[:2] == ["sampler", "cache"]
    p = build_parser()
    for name in names:
        a = p.parse_args(["bench", name, "--graph", "cora", "--repeat", "3", "--json",
                          "out.jsonl"])
        assert (a.bench, a.graph, a.repeat, a.json) == (name, "cora", 3, "out.jsonl")
        a = p.parse_args(["bench", name, "--json"])
        assert (a.graph, a.repeat, a.json) == (None, 1, STDOUT)
        a = p.parse_args(["bench", name])
        assert a.json is None


def test_graph_is_also_dataset_and_old_flags_parse_unchanged():
    p = build_parser()
    assert p.parse_args(["bench", "sampling", "--dataset", "cora"]).graph == "cora"
    a = p.parse_args(["bench", "sampler", "--graph", "cora", "--json", "--epochs", "2"])
    assert (a.graph, a.dataset, a.json, a.epochs) == ("cora", "synthetic-small", STDOUT, 2)
    a = p.parse_args(["bench", "cache", "--policies", "none", "--json", "--copy"])
    assert (a.json, a.copy, a.policies) == (STDOUT, True, "none")


def test_python_m_bench_has_the_same_benchmarks(tmp_path):
    from twopgraph.bench.harness import build_parser as bench_parser
    a = bench_parser().parse_args(["sampling", "--graph", "x", "--repeat", "2", "--fanouts",
                                   "5,5"])
    assert (a.bench, a.graph, a.repeat, a.fanouts) == ("sampling", "x", 2, "5,5")
    p = run_module(["--help"], tmp_path)
    assert p.returncode == 0
    for name in EXPECTED:
        assert name in p.stdout, name


def test_help_of_every_benchmark_imports_neither_torch_nor_numba():
    code = ("import contextlib, io, json, sys\n"
            "from twopgraph.bench.harness import benchmark_names\n"
            "from twopgraph.cli import main\n"
            "ok = {}\n"
            "for name in benchmark_names():\n"
            "    out = io.StringIO()\n"
            "    with contextlib.redirect_stdout(out):\n"
            "        try:\n"
            "            main(['bench', name, '--help'])\n"
            "        except SystemExit as e:\n"
            "            ok[name] = e.code == 0 and '--repeat' in out.getvalue()\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numba'))\n"
            "print(json.dumps({'heavy': heavy[:5], 'ok': ok}))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["heavy"] == []
    assert set(got["ok"]) >= EXPECTED and all(got["ok"].values()), got["ok"]


# -- the record ------------------------------------------------------------------------------------
def test_summarise_takes_medians_and_keeps_the_spread():
    figs, spread = summarise([{"t": 3.0, "n": 4, "l": [1], "s": "a", "ok": True},
                              {"t": 1.0, "n": 4, "l": [2], "s": "b", "ok": True},
                              {"t": 2.5, "n": 4, "l": [3], "s": "c", "ok": False}])
    assert figs == {"t": 2.5, "n": 4, "l": [3], "s": "c", "ok": False}
    assert spread == {"t": [1.0, 3.0], "n": [4, 4]}
    assert isinstance(figs["n"], int)
    figs, spread = summarise([{"t": 1.0}, {"t": 2.0}])
    assert figs == {"t": 1.5} and spread == {"t": [1.0, 2.0]}
    with pytest.raises(ValueError):
        summarise([])


def test_record_names_the_machine_the_versions_and_the_commit():
    rec = make_record("demo", {"k": 1}, [{"t_s": 1.0}], peers={"dgl": "1.1.3"})
    assert list(rec)[:len(REQUIRED)] == ["benchmark", "params", "figures", "spread", "repeat",
                                        "time", "machine", "versions"][:len(REQUIRED)]
    assert set(REQUIRED) <= set(rec)
    assert set(MACHINE) <= set(rec["machine"]) and rec["machine"]["cpu_count"] >= 1
    assert set(VERSIONS) <= set(rec["versions"]) and rec["versions"]["dgl"] == "1.1.3"
    assert rec["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=False).stdout.strip()
    if head:
        assert commit() == head and isinstance(rec["dirty"], bool)
    else:
        assert commit() is None and rec["dirty"] is None


# -- tiny runs -------------------------------------------------------------------------------------
def test_runs_append_json_lines_with_the_required_keys(runs):
    records, _ = runs
    assert [r["benchmark"] for r in records] == ["sampling"] * 4 + ["sampler"] + ["cache"] * 3
    for r in records:
        assert set(REQUIRED) <= set(r), r.keys()
        assert set(MACHINE) <= set(r["machine"]) and set(VERSIONS) <= set(r["versions"])
        assert "dgl" not in r["versions"]  # no peer ran
        assert r["params"]["graph"] == "synthetic-tiny"
    sampling = records[:4]
    assert {(r["params"]["schedule"], r["params"]["sampler"]) for r in sampling} == {
        ("random", "neighbor"), ("random", "labor"), ("locality", "neighbor"),
        ("locality", "labor")}
    for r in sampling:
        f = r["figures"]
        assert f["num_seeds"] == 1000 and f["num_batches"] == 4
        assert f["seeds_per_s"] > 0 and f["sample_epoch_s"] > 0
        assert f["feature_rows"] == pytest.approx(f["input_nodes_per_batch"] * 4)


def test_repeat_two_gives_a_spread(runs):
    records, _ = runs
    for r in records[:4]:
        assert r["repeat"] == 2
        lo, hi = r["spread"]["sample_epoch_s"]
        assert lo <= r["figures"]["sample_epoch_s"] <= hi
        assert r["figures"]["sample_epoch_s"] == pytest.approx((lo + hi) / 2)  # median of 2
        # sampling is deterministic per seed: the counts are the same in both repeats
        assert r["spread"]["input_nodes_per_batch"][0] == r["spread"]["input_nodes_per_batch"][1]
    sampler = records[4]
    assert sampler["repeat"] == 1
    assert sampler["spread"]["sample_epoch_s"] == [sampler["figures"]["sample_epoch_s"]] * 2


def test_sampling_ratios_against_the_first_row(runs):
    records, _ = runs
    rows = {(r["params"]["schedule"], r["params"]["sampler"]): r["figures"]
            for r in records[:4]}
    base = rows[("random", "neighbor")]
    assert base["epoch_vs_base"] == 1.0 and base["inputs_vs_base"] == 1.0
    for f in rows.values():
        assert f["inputs_vs_base"] == pytest.approx(
            f["input_nodes_per_batch"] / base["input_nodes_per_batch"])
    assert rows[("locality", "neighbor")]["inputs_vs_base"] < 1.0  # clusters: fewer inputs
    assert rows[("locality", "neighbor")]["locality"]["num_clusters"] > 0


def test_old_verbs_keep_their_output_beside_the_records(runs, tmp_path):
    records, printed = runs
    # bench sampler --json OUT: the aligned record on stdout, its record in the file
    assert "{" not in printed and "sample_epoch_s" in printed
    assert records[4]["figures"]["schedule"] == "random"
    assert records[4]["figures"]["num_seeds"] == 1000
    # bench cache --json OUT: cache.csv as before, one record per policy x ratio row
    cache = records[5:]
    assert {r["params"]["policy"] for r in cache} == {"none", "layer", "optimal"}
    assert all(r["params"]["ratio"] == 0.1 and r["params"]["schedule"] == "random"
               for r in cache)
    csv_file = Path(cache[0]["params"]["out"]) / "cache.csv"
    assert csv_file.is_file() and len(csv_file.read_text().splitlines()) == 1 + 3


# -- bad input -------------------------------------------------------------------------------------
def _one_line(rc: int, err: str, *words: str) -> None:
    assert rc == 2, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip() and "twopgraph: error" in ln]
    assert len(lines) == 1, err
    for w in words:
        assert w in lines[0], lines[0]


def test_bad_graph_is_one_line_and_exit_2(tmp_path):
    p = run_module(["sampling", "--graph", "no-such-graph", "--data-root", tmp_path / "d"],
                   tmp_path)
    _one_line(p.returncode, p.stderr, "no-such-graph")
    assert p.stdout.strip() == ""


@pytest.mark.parametrize("argv, word", [
    (["bench", "train", "--graph", "no-such-graph"], "no-such-graph"),
    (["bench", "sampling", "--graph", "rmat:x:y"], "rmat"),
    (["bench", "sampling", "--graph", "synthetic-tiny", "--repeat", "0"], "--repeat"),
    (["bench", "sampling", "--graph", "synthetic-tiny", "--samplers", "nope"], "nope"),
    (["bench", "train", "--graph", "synthetic-tiny", "--peers", "dgl", "--dgl-venv",
      "/nonexistent/venv"], "setup_dgl_baseline.sh"),
    (["bench", "sampling", "--graph", "synthetic-tiny", "--peers", "pyg"], "unknown peer"),
    (["bench", "sampling", "--graph", "synthetic-tiny", "--peers", "graphbolt",
      "--graphbolt-venv", "/nonexistent/venv"], "setup_graphbolt_baseline.sh"),
    (["bench", "residency", "--graph", "cora"], "no --graph"),
    (["bench", "sampler", "--dataset", "synthetic-tiny", "--graph", "cora"], "differ"),
])
def test_bad_shared_or_own_options_exit_2(argv, word, tmp_path, capsys):
    rc = main([*argv, "--data-root", str(tmp_path / "d"), "--json", str(tmp_path / "o.jsonl")])
    _one_line(rc, capsys.readouterr().err, word)
    assert not (tmp_path / "o.jsonl").exists()


def test_json_into_a_folder_is_refused(tmp_path, capsys):
    rc = main(["bench", "sampling", "--graph", "synthetic-tiny", "--json", str(tmp_path)])
    _one_line(rc, capsys.readouterr().err, "folder")


# -- a benchmark without a graph -------------------------------------------------------------------
def test_residency_runs_without_a_graph(tmp_path):
    rc, out = run_main(["bench", "residency", "--file", tmp_path / "t.bin", "--gib", "0.01",
                        "--ranges", "500", "--reps", "1", "--json"])
    assert rc == 0
    recs = [json.loads(ln) for ln in out.splitlines()]
    assert {r["params"]["setting"] for r in recs} == {"chunked", "whole span"}
    assert all("graph" not in r["params"] for r in recs)
    found = {r["figures"]["missing_ranges"] for r in recs}
    assert len(found) == 1  # both settings find the same ranges missing


def test_rewritten_result_files_do_not_make_the_tree_dirty(tmp_path):
    from twopgraph.bench.record import RESULTS_DIR, tree_dirty

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)
    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    results = tmp_path / RESULTS_DIR
    results.mkdir(parents=True)
    (results / "train.jsonl").write_text("{}\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c")
    assert tree_dirty(tmp_path) is False
    (results / "train.jsonl").unlink()  # a benchmark about to rewrite its file
    assert tree_dirty(tmp_path) is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert tree_dirty(tmp_path) is True
