"""One version: pyproject.toml's, ``twopgraph.__version__``, ``twopgraph --version`` and the
newest release section of CHANGELOG.md."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import run_cli

import twopgraph

ROOT = Path(__file__).resolve().parents[1]


def test_one_version_everywhere(capsys):
    project = (ROOT / "pyproject.toml").read_text().split("[project]", 1)[1]
    version = re.search(r'^version = "([^"]+)"$', project, flags=re.MULTILINE).group(1)
    assert version == twopgraph.__version__ == "0.2.0"
    rc, out, _ = run_cli(["--version"], capsys)
    assert rc == 0 and out.strip() == f"twopgraph {version}"
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", (ROOT / "CHANGELOG.md").read_text(),
                          flags=re.MULTILINE)
    assert releases[:1] == [version] and "0.1.0" in releases
