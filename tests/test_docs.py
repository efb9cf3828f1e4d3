"""The documentation site (mkdocs.yml, docs/): the generated CLI reference covers every option
of every verb and is up to date, the Python API page covers every package's public names, the
site builds with ``mkdocs build --strict`` (no warning), and no relative link is broken."""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import twopgraph
from twopgraph.cli import build_parser

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
CLI_MD = DOCS / "cli.md"
API_MD = DOCS / "api.md"

#: ``[text](target)`` and ``![alt](target)`` (target without spaces; an optional "title")
_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]*`")


def _verbs(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """``(path, parser)`` of the parser and every sub-parser below it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _verbs(child, (*path, name))


def _sections(text: str) -> dict[str, list[str]]:
    """docs/cli.md split by its verb headings (``## `twopgraph train` ``): the heading's
    command -> its lines."""
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"^#{2,4} `(twopgraph(?: [\w-]+)*)`\s*$", line)
        if m:
            current = m.group(1)
            out[current] = []
        elif current is not None:
            out[current].append(line)
    return out


def _option_cells(lines: list[str]) -> list[str]:
    """The first cell of every option-table row of a section."""
    return [line.split(" | ", 1)[0] for line in lines if line.startswith("| `-")]


def missing_options(text: str) -> list[str]:
    """``"twopgraph VERB --flag"`` for every option string of every verb and sub-verb of the
    parser that its section of ``text`` (docs/cli.md) does not list in an option row."""
    sections = _sections(text)
    missing = []
    for path, parser in _verbs(build_parser()):
        name = " ".join(("twopgraph", *path))
        cells = " ".join(_option_cells(sections.get(name, [])))
        for action in parser._actions:
            for opt in action.option_strings:
                if not re.search(r"`" + re.escape(opt) + r"[ `]", cells):
                    missing.append(f"{name} {opt}")
    return missing


def test_every_option_of_every_verb_is_in_the_cli_reference():
    missing = missing_options(CLI_MD.read_text())
    assert not missing, (f"docs/cli.md lacks {missing[:10]} ({len(missing)} in all): run "
                         "`python scripts/make_cli_docs.py`")


def test_the_coverage_check_fails_on_a_removed_option_row():
    """The check above is not vacuous: without the row of ``--sampler-memory-share`` (a flag
    other rows' help texts mention) or of a benchmark's own flag, it fails, naming them."""
    text = CLI_MD.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `--sampler-memory-share")]
    assert rows
    cut = "\n".join(line for line in text.splitlines() if line not in rows)
    assert "twopgraph train --sampler-memory-share" in missing_options(cut)
    sections = _sections(text)
    row = next(line for line in sections["twopgraph bench cache"]
               if line.startswith("| `--policies"))
    assert "twopgraph bench cache --policies" in missing_options(text.replace(row + "\n", ""))


@pytest.mark.parametrize("script", ["make_cli_docs.py", "make_api_docs.py"])
def test_generated_pages_are_what_the_generators_write_now(script):
    """docs/cli.md and docs/api.md are up to date (else: run the script it names)."""
    r = subprocess.run([sys.executable, str(REPO / "scripts" / script), "--check"],
                       cwd=REPO, capture_output=True, text=True, check=False, timeout=300)
    assert r.returncode == 0, r.stderr + r.stdout


def test_generator_check_fails_on_a_stale_file(tmp_path):
    stale = tmp_path / "cli.md"
    stale.write_text(CLI_MD.read_text().replace("`--fanouts FANOUTS`", "`--fanout FANOUTS`"))
    script = str(REPO / "scripts" / "make_cli_docs.py")
    r = subprocess.run([sys.executable, script, "--check", "--out", str(stale)], cwd=REPO,
                       capture_output=True, text=True, check=False, timeout=300)
    assert r.returncode == 1 and "stale" in r.stderr
    r = subprocess.run([sys.executable, script, "--out", str(stale)], cwd=REPO,
                       capture_output=True, text=True, check=False, timeout=300)
    assert r.returncode == 0 and stale.read_text() == CLI_MD.read_text()


def test_cli_reference_does_not_depend_on_the_terminal_width():
    spec = importlib.util.spec_from_file_location("make_cli_docs",
                                                  REPO / "scripts" / "make_cli_docs.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass looks its module up
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.modules.pop(spec.name, None)
    old = os.environ.get("COLUMNS")
    try:
        os.environ["COLUMNS"] = "40"
        narrow = mod.render()
        os.environ["COLUMNS"] = "300"
        wide = mod.render()
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    assert narrow == wide


def test_getting_started_example_trains(tmp_path, monkeypatch, capsys):
    """The Python block of docs/index.md, as a reader runs it: it trains past chance."""
    m = re.search(r"<!-- docs-example -->\n```python\n(.*?)```", (DOCS / "index.md").read_text(),
                  re.DOTALL)
    assert m, "docs/index.md has no python block after <!-- docs-example -->"
    monkeypatch.chdir(tmp_path)
    exec(compile(m.group(1), str(DOCS / "index.md"), "exec"), {"__name__": "__main__"})  # noqa: S102
    acc = float(re.search(r"test accuracy ([0-9.]+)", capsys.readouterr().out).group(1))
    assert acc > 0.5  # 4 classes: chance is 0.25
    assert not any(tmp_path.iterdir())  # nothing written into the working directory


def _api_sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## (twopgraph(?:\.\w+)?)\s*$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def test_api_reference_covers_every_public_name():
    """docs/api.md has a section per package with a ``__all__`` and renders (``:::``) or
    links (``[`name`][path]``) every one of its names; the top level links each of its own."""
    sections = _api_sections(API_MD.read_text())
    packages = sorted(p.name for p in Path(twopgraph.__file__).parent.iterdir()
                      if (p / "__init__.py").exists())
    problems = []
    for pkg in ["", *packages]:
        modname = f"twopgraph.{pkg}" if pkg else "twopgraph"
        names = getattr(importlib.import_module(modname), "__all__", None)
        if names is None:
            continue
        body = sections.get(modname)
        if body is None:
            problems.append(f"no section '## {modname}'")
            continue
        for name in names:
            if name == "__version__":
                continue
            if not re.search(rf"^::: [\w.]+\.{re.escape(name)}\s*$|\[`{re.escape(name)}`\]\[",
                             body, re.MULTILINE):
                problems.append(f"{modname}.{name}")
    assert not problems, f"{problems}: run `python scripts/make_api_docs.py`"


def error_classes() -> set[str]:
    """Every exception class of ``twopgraph/`` the CLI reports as one line: the subclasses of
    ``TwopgraphError`` and ``Stopped``, found in the source (no module is imported)."""
    bases: dict[str, set[str]] = {}
    for path in Path(twopgraph.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")
                         for b in node.bases}
                bases.setdefault(node.name, set()).update(names)
    found = {"TwopgraphError", "Stopped"}
    while True:
        more = {c for c, b in bases.items() if b & found} - found
        if not more:
            return found
        found |= more


def test_troubleshooting_covers_every_error_class():
    """docs/troubleshooting.md has a heading for every error class (its name as code)."""
    headings = {m.group(1) for m in re.finditer(r"^#{2,4} `(\w+)`", (DOCS / "troubleshooting.md")
                                                .read_text(), re.MULTILINE)}
    classes = error_classes()
    assert {"ConfigError", "OutputError", "PartitionError", "StoreChanged"} <= classes
    assert not classes - headings, sorted(classes - headings)


def _mkdocs_missing() -> str | None:
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        try:
            importlib.import_module(module)
        except ImportError:
            return module
    return None


def test_site_builds_strict(tmp_path):
    """``mkdocs build --strict`` on a copy of the tree (docs/benchmarks.md, which its own
    command generates, is a placeholder where it has not been generated yet)."""
    missing = _mkdocs_missing()
    if missing:
        pytest.skip(f"{missing} is not installed (pip install -e '.[docs]')")
    root = tmp_path / "tree"
    shutil.copytree(DOCS, root / "docs")
    shutil.copy(REPO / "mkdocs.yml", root / "mkdocs.yml")
    for name in ("twopgraph", "scripts"):
        (root / name).symlink_to(REPO / name, target_is_directory=True)
    bench = root / "docs" / "benchmarks.md"
    if not bench.exists():
        bench.write_text("# Benchmarks\n\n(generated from the benchmark result files)\n")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    start = time.perf_counter()
    # not -q: it silences the warnings, and --strict counts only the warnings logged
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                        "-d", str(tmp_path / "site")], cwd=root, env=env,
                       capture_output=True, text=True, check=False, timeout=600)
    took = time.perf_counter() - start
    assert r.returncode == 0, r.stderr[-4000:] + r.stdout[-2000:]
    assert "WARNING" not in r.stderr, r.stderr[-4000:]
    site = tmp_path / "site"
    for page in ("index.html", "cli/index.html", "api/index.html", "troubleshooting/index.html"):
        assert (site / page).exists(), page
    assert 'id="twopgraph.pipeline.nodeloader.NodeLoader"' in (
        site / "api" / "index.html").read_text()
    print(f"mkdocs build --strict: {took:.1f} s")


def _links(text: str) -> list[str]:
    """Link targets of Markdown ``text``, outside fenced blocks and code spans."""
    text = _CODE_SPAN.sub("", _FENCE.sub("", text))
    return _LINK.findall(text)


def test_every_relative_link_points_to_a_file():
    files = sorted(DOCS.glob("*.md")) + [REPO / "README.md"]
    broken = []
    for f in files:
        if not f.exists():
            continue
        for target in _links(f.read_text()):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) or target.startswith("#"):
                continue  # http(s):, mailto:, an anchor of the same page
            path = target.split("#", 1)[0].split("?", 1)[0]
            if path and not (f.parent / path).exists():
                broken.append(f"{f.relative_to(REPO)}: {target}")
    assert not broken, broken


def test_link_extraction_sees_links_and_skips_code():
    text = ("See [a](x.md#y) and ![img](pic.png).\n`[no](code.md)`\n```\n[no](fence.md)\n```\n"
            "[ext](https://example.org) [ref][twopgraph.x]\n")
    assert _links(text) == ["x.md#y", "pic.png", "https://example.org"]
