#!/usr/bin/env bash
# The acceptance check of twopgraph's GPU path: a list of checks (environment, pytest -m cuda,
# samplers host vs device, a CUDA sync audit, the layer cache at the default budget, predict,
# profiler trace, resume, bf16, 2-rank DDP), each {"check", "ok", "value", "limit"}, written to
# OUT/gpu_check.json and printed; exit 1 when any check fails. All the logic is in
# scripts/gpu_check.py (its docstring) and scripts/gpu_checks/; docs/gpu.md lists every check.
#
#   bash scripts/gpu_check.sh --device cuda --out runs/gpu_check     # a GPU machine (<= 9 min)
#   bash scripts/gpu_check.sh --device cpu  --out /tmp/gpu_check     # small data, ~1-2 min (CI)
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
