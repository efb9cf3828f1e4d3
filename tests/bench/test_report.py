"""``twopgraph bench report``: docs/benchmarks.md and the README's headline table generated from
result files -- a section per benchmark with its figures, spread, machine, versions and date;
``--check`` on stale and fresh output; the README's block rewritten between its markers and
nothing else; a missing result file leaves its headline row out; the repository's committed
page is current."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from twopgraph.bench.harness import main as bench_main
from twopgraph.bench.report import END, HEADLINES, START, write_report
from twopgraph.cli import main as cli_main

REPO = Path(__file__).resolve().parents[2]
HASH = "0123456789abcdef0123456789abcdef01234567"
MACHINE = {"host": "bench-host", "cpu_count": 8, "cpu_model": "Test CPU 9000",
           "memory_gib": 62.5, "gpu": [{"name": "Test GPU", "memory_gib": 80.0}]}
VERSIONS = {"python": "3.11.7", "torch": "9.8.7", "numpy": "6.5.4", "numba": "0.321",
            "twopgraph": "0.2.0", "dgl": "1.1.3"}


def record(bench: str, params: dict, figures: dict, spread: dict | None = None, *,
           repeat: int = 3, time: str = "2031-02-03T04:05:06Z", dirty: bool = False,
           machine: dict | None = None) -> dict:
    """A result record as the harness writes it (the spread of a figure not given: none)."""
    spread = {**{k: [v, v] for k, v in figures.items() if isinstance(v, (int, float))},
              **(spread or {})}
    return {"benchmark": bench, "params": params, "figures": figures, "spread": spread,
            "repeat": repeat, "time": time, "machine": machine or MACHINE,
            "versions": VERSIONS, "commit": HASH, "dirty": dirty}


def sampling_records() -> list[dict]:
    base = {"graph": "synthetic-small", "batch_size": 1024, "peers": ["dgl"]}
    return [
        record("sampling", {**base, "system": "twopgraph", "schedule": "random",
                            "sampler": "neighbor"},
               {"sample_epoch_s": 0.5, "seeds_per_s": 40000.0, "speedup_vs_dgl": 3.25},
               {"sample_epoch_s": [0.4, 0.7], "speedup_vs_dgl": [2.5, 4.125]}),
        record("sampling", {**base, "system": "twopgraph", "schedule": "locality",
                            "sampler": "neighbor"},
               {"sample_epoch_s": 0.25, "seeds_per_s": 80000.0, "speedup_vs_dgl": 6.5}),
        record("sampling", {**base, "system": "dgl", "schedule": "random",
                            "sampler": "neighbor"},
               {"sample_epoch_s": 1.625, "seeds_per_s": 12307.0}),
    ]


def train_records(dirty: bool = True) -> list[dict]:
    base = {"graph": "synthetic-small", "epochs": 3, "peers": ["dgl"]}
    return [
        record("train", {**base, "system": "twopgraph", "variant": "locality"},
               {"train_epoch_s": 4.75, "test_acc": 0.8272, "epoch_vs_dgl": 0.2075,
                "acc_vs_dgl_pt": -0.6875},
               {"train_epoch_s": [4.5, 6.875], "epoch_vs_dgl": [0.1725, 0.3125]},
               dirty=dirty, time="2031-02-04T10:00:00Z"),
        record("train", {**base, "system": "dgl", "variant": "dgl"},
               {"train_epoch_s": 22.875, "test_acc": 0.834}, dirty=dirty,
               time="2031-02-04T10:05:00Z"),
    ]


def write_results(folder: Path, files: dict[str, list[dict]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, recs in files.items():
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in recs))
    return folder


README = ("# Project\n\nIntro line.\n\n## Results\n\n" + START + "\nold table\n| a | b |\n"
          + END + "\n\nAfter the block.\n")


@pytest.fixture
def tree(tmp_path):
    """A results folder with sampling and train, a README with the markers; paths."""
    res = write_results(tmp_path / "results", {"sampling.jsonl": sampling_records(),
                                               "train.jsonl": train_records()})
    readme = tmp_path / "README.md"
    readme.write_text(README)
    return {"results": res, "out": tmp_path / "docs" / "benchmarks.md", "readme": readme}


def report(tree: dict, *extra: str, cli=bench_main) -> int:
    argv = ["report", "--results", str(tree["results"]), "--out", str(tree["out"]),
            "--readme", str(tree["readme"]), *extra]
    return cli(argv) if cli is bench_main else cli(["bench", *argv])


# -- the page --------------------------------------------------------------------------------------
def test_page_has_a_section_per_benchmark_with_figures_spread_and_provenance(tree):
    assert report(tree) == 0
    page = tree["out"].read_text()
    lines = page.splitlines()
    assert "## sampling" in lines and "## train" in lines
    # what is measured: the benchmark's docstring
    assert "Sampling-only epochs of samplers x schedules" in page
    assert "Training epochs end to end" in page
    # the figures, their spread (min–max) and the ratio against the peer
    row = next(ln for ln in lines if ln.startswith("| twopgraph | random"))
    assert "0.5 (0.4–0.7)" in row and "3.25 (2.5–4.125)" in row and "40,000" in row
    row = next(ln for ln in lines if ln.startswith("| twopgraph | locality |"))
    assert "6.5" in row and "(" not in row.split("|")[-2]  # no spread when repeats agree
    assert "speedup_vs_dgl" in page and "epoch_vs_dgl" in page and "acc_vs_dgl_pt" in page
    assert "-0.6875" in page
    # machine, versions and date beside every table
    measured = [ln for ln in lines if ln.startswith("Measured ")]
    assert len(measured) == 2
    for ln in measured:
        for s in ("bench-host", "Test CPU 9000", "8 cores", "62.5 GiB", "Test GPU",
                  "torch 9.8.7", "numpy 6.5.4", "numba 0.321", "twopgraph 0.2.0",
                  "DGL 1.1.3"):
            assert s in ln, (s, ln)
    assert "2031-02-03" in measured[0] and "2031-02-04" in measured[1]
    # the dirty train run is marked, the clean sampling run is not; no commit hash
    assert "dirty" not in measured[0] and "dirty" in measured[1]
    assert HASH not in page and HASH[:7] not in page
    # the command that makes the file
    assert "twopgraph bench sampling --peers dgl --repeat 3 --json " \
           "benchmarks/results/sampling.jsonl" in page


def test_a_flag_whose_value_differs_names_its_values_with_a_plain_placeholder(tmp_path):
    """Records with and without a peer in one file: the command shows ``--peers PEERS`` (not
    the choice list's metavar) and the note names each value, none included."""
    recs = train_records()
    recs.append(record("train", {"graph": "synthetic-small", "epochs": 3, "peers": [],
                                 "system": "twopgraph", "variant": "alone"},
                       {"train_epoch_s": 5.0, "test_acc": 0.83}, time="2031-02-05T10:00:00Z"))
    tree = {"results": write_results(tmp_path / "results", {"train.jsonl": recs}),
            "out": tmp_path / "benchmarks.md", "readme": tmp_path / "README.md"}
    tree["readme"].write_text(README)
    assert report(tree) == 0
    page = tree["out"].read_text()
    assert "--peers PEERS" in page and "with `PEERS` each of: dgl, (none)" in page
    assert "{dgl}" not in page


def test_records_of_different_runs_are_labelled_and_unknown_benchmarks_kept(tree):
    other = dict(MACHINE, host="second-host", gpu=None)
    recs = train_records(dirty=False)
    recs[1] = record("train", recs[1]["params"], recs[1]["figures"], machine=other,
                     time="2031-03-01T00:00:00Z")
    write_results(tree["results"], {
        "train.jsonl": recs,
        "legacy.jsonl": [record("legacy-bench", {"n": 1}, {"t_s": 2.0}, repeat=1)]})
    assert report(tree) == 0
    page = tree["out"].read_text()
    head = next(ln for ln in page.splitlines() if ln.startswith("| system | variant"))
    assert head.endswith("| run |")
    runs = [ln for ln in page.splitlines() if ln.startswith("- Run ")]
    assert len(runs) == 2 and "bench-host" in runs[0] and "second-host" in runs[1]
    assert "no GPU" in runs[1] and "2031-03-01" in runs[1]
    assert "## legacy-bench" in page and "one measurement, no repeats." in page


# -- --check ---------------------------------------------------------------------------------------
def test_check_passes_on_a_fresh_page_and_fails_on_a_stale_one(tree, capsys):
    assert report(tree, "--check") == 1  # nothing written yet
    assert not tree["out"].exists()
    assert report(tree) == 0
    assert report(tree, "--check") == 0
    assert report(tree, "--check", cli=cli_main) == 0  # `twopgraph bench report` too
    # a result changes: the page is stale, and --check writes nothing
    page = tree["out"].read_text()
    recs = sampling_records()
    recs[0]["figures"]["sample_epoch_s"] = 0.55
    write_results(tree["results"], {"sampling.jsonl": recs})
    capsys.readouterr()
    assert report(tree, "--check") == 1
    assert "stale" in capsys.readouterr().err and tree["out"].read_text() == page
    assert report(tree) == 0 and report(tree, "--check") == 0
    # a hand edit of the page is stale as well
    tree["out"].write_text(tree["out"].read_text() + "\nhand edit\n")
    assert report(tree, "--check") == 1


def test_check_fails_on_a_stale_readme_table(tree):
    assert report(tree) == 0
    text = tree["readme"].read_text()
    tree["readme"].write_text(text.replace("**3.25x**", "**9.99x**"))
    assert report(tree, "--check") == 1
    assert report(tree) == 0 and tree["readme"].read_text() == text


# -- the README's headline table -------------------------------------------------------------------
def test_readme_block_is_rewritten_between_the_markers_and_nothing_else(tree):
    assert report(tree) == 0
    text = tree["readme"].read_text()
    before, rest = text.split(START + "\n")
    block, after = rest.split(END + "\n")
    assert before + START + "\n" == README.split("old table")[0]
    assert END + "\n" + after == README[README.index(END):]
    assert "old table" not in block
    rows = [ln for ln in block.splitlines() if ln.startswith("| [")]
    assert len(rows) == len(HEADLINES)
    assert rows[0].startswith("| [Sampling throughput vs DGL, random order]"
                              "(docs/benchmarks.md#sampling) | **3.25x**")
    assert "2.50x–4.12x over 3 repeats" in rows[0] and "2031-02-03" in rows[0]
    assert "(docs/benchmarks.md#train)" in rows[2] and "**0.21x**" in rows[2]
    assert "(dirty)" in rows[2] and "(dirty)" not in rows[0]
    assert "**-0.69** points" in rows[3] and "synthetic-small" in rows[3]
    assert HASH[:7] not in block
    assert report(tree) == 0 and tree["readme"].read_text() == text  # idempotent


def test_the_headline_follows_the_latest_record_of_the_default_dataset(tmp_path):
    """A later record of the same row replaces the earlier one in the README's table; a later
    record of another graph does not."""
    later = sampling_records()[0]
    later["figures"] = {**later["figures"], "speedup_vs_dgl": 4.5}
    later["spread"] = {"speedup_vs_dgl": [4.25, 4.75]}
    later["time"] = "2031-03-01T00:00:00Z"
    other = json.loads(json.dumps(later))
    other["params"]["graph"] = "scaled:2000000"
    other["figures"]["speedup_vs_dgl"] = 9.0
    res = write_results(tmp_path / "results", {
        "sampling.jsonl": sampling_records() + [later, other], "train.jsonl": train_records()})
    tree = {"results": res, "out": tmp_path / "docs" / "benchmarks.md",
            "readme": tmp_path / "README.md"}
    tree["readme"].write_text(README)
    assert report(tree) == 0
    block = tree["readme"].read_text().split(START)[1].split(END)[0]
    rows = [ln for ln in block.splitlines() if ln.startswith("| [")]
    assert "**4.50x**" in rows[0] and "4.25x–4.75x" in rows[0] and "2031-03-01" in rows[0]
    assert "synthetic-small" in rows[0] and "9.00x" not in block
    assert "**6.50x**" in rows[1]  # the locality row had no later record


def test_a_readme_without_markers_is_left_alone(tree, capsys):
    tree["readme"].write_text("# Project\n\nNo markers here.\n")
    assert report(tree) == 0
    assert tree["readme"].read_text() == "# Project\n\nNo markers here.\n"
    assert "no lines" in capsys.readouterr().err
    assert report(tree, "--check") == 0  # the page is current; the README has no table


def test_a_missing_result_file_skips_its_headline_rows(tree, capsys):
    (tree["results"] / "train.jsonl").unlink()
    assert report(tree) == 0
    block = tree["readme"].read_text().split(START)[1].split(END)[0]
    rows = [ln for ln in block.splitlines() if ln.startswith("| [")]
    assert [r.split("]")[0] for r in rows] == [
        "| [Sampling throughput vs DGL, random order",
        "| [Sampling throughput vs DGL, locality schedule"]
    assert "## train" not in tree["out"].read_text()
    assert "train.jsonl" in capsys.readouterr().err


def test_an_empty_or_missing_results_folder_is_one_line(tmp_path, capsys):
    tree = {"results": tmp_path / "none", "out": tmp_path / "p.md",
            "readme": tmp_path / "R.md"}
    assert report(tree) == 2
    assert capsys.readouterr().err.startswith("twopgraph: error: bench report: no results")
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "bad.jsonl").write_text("{not json\n")
    assert report(tree) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err


def test_python_m_bench_has_report(tmp_path):
    r = subprocess.run([sys.executable, "-m", "twopgraph.bench", "report", "--help"],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    for flag in ("--results", "--out", "--readme", "--check"):
        assert flag in r.stdout


# -- the repository's own page ---------------------------------------------------------------------
def test_committed_benchmarks_page_is_current():
    results = REPO / "benchmarks" / "results"
    if not results.is_dir():
        pytest.skip("no benchmarks/results in this checkout")
    assert write_report(results, REPO / "docs" / "benchmarks.md", REPO / "README.md",
                        check=True) == 0, "run `twopgraph bench report` and commit the result"


def test_fixture_records_are_not_changed_by_the_report(tree):
    recs = copy.deepcopy(sampling_records())
    assert report(tree) == 0
    got = [json.loads(ln) for ln in (tree["results"] / "sampling.jsonl").read_text()
           .splitlines()]
    assert got == recs
