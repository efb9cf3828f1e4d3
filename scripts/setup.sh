#!/usr/bin/env bash
# One-time set-up on a fresh machine: a virtualenv in .venv with torch and twopgraph (+ test
# extras). Idempotent: a second run only checks. Override the venv path with TWOPGRAPH_VENV.
# torch: if none is importable in the venv, installs torch==2.13.0 (on this CPU-only machine
# kind that is a local CPU build; on GPU machines install your CUDA build first).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${TWOPGRAPH_VENV:-.venv}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV" >&2
  "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  echo "[setup] installing torch==2.13.0" >&2
  "$VENV/bin/pip" install -q --disable-pip-version-check torch==2.13.0
fi
if ! "$VENV/bin/python" -c "import twopgraph, numba, pymetis, ogb, tqdm, pytest, matplotlib" 2>/dev/null \
   || [ pyproject.toml -nt "$VENV/.twopgraph-installed" ]; then
  echo "[setup] installing twopgraph and its dependencies" >&2
  "$VENV/bin/pip" install -q --disable-pip-version-check -e '.[test]'
  touch "$VENV/.twopgraph-installed"
fi
