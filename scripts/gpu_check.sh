#!/usr/bin/env bash
# One prepared check of twopgraph's GPU path (unit tests, 2-epoch training runs with the layer
# cache and both samplers, cache gather timings, 1-rank DDP, peak device memory), written as
# one JSON summary OUT/gpu_check.json and printed. All the logic is in scripts/gpu_check.py;
# see its docstring and the README's "GPU" section.
#
#   bash scripts/gpu_check.sh --device cuda --out runs/gpu_check     # a GPU machine (<= 8 min on an H200)
#   bash scripts/gpu_check.sh --device cpu  --out /tmp/gpu_check     # small data, ~1 min (CI)
#
# Python: $PYTHON, else .venv/bin/python, else python3. The repository root is put on
# PYTHONPATH, so twopgraph need not be installed (e.g. an image that has torch but no .venv).
# --wheels DIR (first argument only) installs DIR/*.whl (pymetis, ogb, ... made by
# scripts/fetch_gpu_wheels.sh) into a private folder with no index, for machines without
# internet; every other argument goes to gpu_check.py.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"
elif [ -x .venv/bin/python ]; then PY=.venv/bin/python
else PY=python3
fi
if [ "${1:-}" = "--wheels" ]; then
  WHEELS="${2:?--wheels needs a folder}"
  shift 2
  SITE="${TMPDIR:-/tmp}/twopgraph-gpu-check-site"
  if ! "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
       --disable-pip-version-check --target "$SITE" "$WHEELS"/*.whl; then
    echo "gpu_check: error: could not install the wheels of $WHEELS" >&2
    exit 2
  fi
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" scripts/gpu_check.py "$@"
