#!/usr/bin/env bash
# One-time set-up on a fresh machine: a virtualenv in .venv with torch and twopgraph (+ test
# extras). Idempotent: a second run only checks. Override the venv path with TWOPGRAPH_VENV.
# torch: if none is importable in the venv, installs torch==2.13.0 (on this CPU-only machine
# kind that is a local CPU build; on GPU machines install your CUDA build first).
# Says what it does: one line per step with the seconds since the start, pip's own progress
# (a line per package it collects and installs), and at the end the next two commands.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${TWOPGRAPH_VENV:-.venv}"
PY="${PYTHON:-python3}"
START=$SECONDS

step() { echo "[setup +$((SECONDS - START))s] $*" >&2; }

# pip's progress on stderr, line by line (no bars: they are one long line in a log)
pip_install() {
  "$VENV/bin/pip" install --disable-pip-version-check --progress-bar off "$@" >&2
}

step "checking $VENV"
if [ ! -x "$VENV/bin/python" ]; then
  step "creating the virtualenv $VENV ($("$PY" --version 2>&1))"
  "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  step "installing torch==2.13.0 (the largest download: about a minute)"
  pip_install torch==2.13.0
else
  step "torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)') found"
fi
if ! "$VENV/bin/python" -c "import twopgraph, numba, pymetis, ogb, tqdm, pytest, matplotlib" 2>/dev/null \
   || [ pyproject.toml -nt "$VENV/.twopgraph-installed" ]; then
  step "installing twopgraph (editable) and its dependencies, test extras included"
  pip_install -e '.[test]'
  touch "$VENV/.twopgraph-installed"
else
  step "twopgraph and its dependencies found (up to date with pyproject.toml)"
fi
step "done"
cat >&2 <<EOF

Next:
  $VENV/bin/twopgraph train
      (trains GraphSAGE on the built-in synthetic-small, about a minute on two cores;
       the run lands in runs/train/: metrics.json, epochs.csv, checkpoint.pt)
  $VENV/bin/python -m pytest -q
      (the whole suite: about 10 minutes on two cores; quick subset without the
       fault-injection cases: $VENV/bin/python -m pytest -q -m "not slow")
EOF
