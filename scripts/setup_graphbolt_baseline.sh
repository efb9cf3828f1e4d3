#!/usr/bin/env bash
# Build a separate virtualenv with DGL 2.1 GraphBolt for the GraphBolt sampling baseline
# (scripts/graphbolt_baseline.py, `twopgraph bench sampling --peers graphbolt`).
#
#   scripts/setup_graphbolt_baseline.sh            # -> <repo>/.venv-gb
#   GRAPHBOLT_VENV=/some/path scripts/setup_graphbolt_baseline.sh
#
# Idempotent: does nothing if "$GRAPHBOLT_VENV/bin/python -c 'import dgl.graphbolt'" works.
# Recipe: GraphBolt 2.1 (dgl==2.1.0 on PyPI) needs torch 2.1.2 and torchdata 0.7.1, and
# numpy < 2 (torch 2.1 was built against numpy 1). PyPI's torch 2.1.2 wheel is a CUDA build
# that pulls the nvidia-* runtime packages (about 3 GB on disk); the baseline only samples on
# the CPU. "setuptools<70": dgl needs pkg_resources.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GRAPHBOLT_VENV="${GRAPHBOLT_VENV:-$REPO_ROOT/.venv-gb}"
PYTHON="${PYTHON:-python3}"
export DGLBACKEND=pytorch

check() {
    "$GRAPHBOLT_VENV/bin/python" -c "import dgl, dgl.graphbolt, torch; print('dgl', dgl.__version__, 'torch', torch.__version__)" 2>/dev/null
}

if [ -x "$GRAPHBOLT_VENV/bin/python" ] && check; then
    echo "GraphBolt venv already usable at $GRAPHBOLT_VENV"
    exit 0
fi

echo "Creating GraphBolt venv at $GRAPHBOLT_VENV (torch 2.1.2 with its CUDA libraries: ~3 GB)"
"$PYTHON" -m venv "$GRAPHBOLT_VENV"
"$GRAPHBOLT_VENV/bin/pip" install --disable-pip-version-check "torch==2.1.2" "torchdata==0.7.1" \
    "dgl==2.1.0" "numpy<2" "setuptools<70" packaging psutil requests tqdm scipy pydantic \
    pandas pyyaml

if ! check; then
    echo "error: 'import dgl.graphbolt' fails in $GRAPHBOLT_VENV:" >&2
    "$GRAPHBOLT_VENV/bin/python" -c "import dgl.graphbolt" >&2 || true
    exit 1
fi
echo "GraphBolt venv ready: $GRAPHBOLT_VENV/bin/python"
