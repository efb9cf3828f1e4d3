#!/usr/bin/env bash
# Build a separate virtualenv with DGL (CPU) for the DGL baseline (scripts/dgl_baseline.py).
#
#   scripts/setup_dgl_baseline.sh            # -> <repo>/.venv-dgl
#   DGL_VENV=/some/path scripts/setup_dgl_baseline.sh
#
# Idempotent: does nothing if "$DGL_VENV/bin/python -c 'import dgl'" already works.
# Recipe: DGL on PyPI is old and CPU-only; dgl==1.1.3 is the release that imports with
# torch 2.13. torch is pinned to the local CPU wheel (never a CUDA build). dgl 1.1.3 needs
# pkg_resources, hence "setuptools<70"; pip warns that this conflicts with torch's declared
# setuptools requirement -- expected and harmless.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DGL_VENV="${DGL_VENV:-$REPO_ROOT/.venv-dgl}"
PYTHON="${PYTHON:-python3}"
TORCH_VERSION="${DGL_TORCH_VERSION:-2.13.0}"
DGL_VERSION="${DGL_VERSION:-1.1.3}"

# With DGLBACKEND set, "import dgl" neither prints a backend notice nor writes ~/.dgl/config.json.
export DGLBACKEND=pytorch

check() {
    "$DGL_VENV/bin/python" -c "import dgl, torch; print('dgl', dgl.__version__, 'torch', torch.__version__)" 2>/dev/null
}

if [ -x "$DGL_VENV/bin/python" ] && check; then
    echo "DGL venv already usable at $DGL_VENV"
    exit 0
fi

echo "Creating DGL venv at $DGL_VENV"
"$PYTHON" -m venv "$DGL_VENV"
PIP=("$DGL_VENV/bin/pip" install --disable-pip-version-check)

# CPU wheel only: refuse anything that would bring CUDA runtime packages with it.
"${PIP[@]}" "torch==${TORCH_VERSION}"
if "$DGL_VENV/bin/pip" list 2>/dev/null | grep -qi '^nvidia-'; then
    echo "error: a CUDA build of torch was installed into $DGL_VENV; expected the CPU wheel" >&2
    exit 1
fi

# pip may report a dependency conflict (setuptools<70 vs torch's pin): expected.
"${PIP[@]}" "dgl==${DGL_VERSION}" "setuptools<70" packaging psutil requests tqdm scipy numpy \
    || { echo "pip reported a problem; checking whether dgl imports anyway" >&2; }

if ! check; then
    echo "error: 'import dgl' still fails in $DGL_VENV:" >&2
    "$DGL_VENV/bin/python" -c "import dgl" >&2 || true
    exit 1
fi
echo "DGL venv ready: $DGL_VENV/bin/python"
