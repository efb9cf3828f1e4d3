#!/usr/bin/env bash
# Download the wheels a GPU machine without internet needs on top of its image (Python 3.12
# with CUDA torch, numba, scipy, tqdm, numpy, scikit-learn, pandas, requests: see the README's
# "GPU" section): pymetis (METIS clustering) and ogb (OGB datasets) with ogb's two small
# pure-Python needs, for CPython 3.12 on manylinux x86-64. Run it here, where pip reaches PyPI,
# then carry the folder and install it there without an index:
#
#   bash scripts/fetch_gpu_wheels.sh                 # -> .whl/ (about 0.4 MB)
#   bash scripts/gpu_check.sh --wheels .whl --device cuda --out "$OUT"      # on the GPU machine
#
# Usage: fetch_gpu_wheels.sh [DIR] (default .whl, relative to the repository root). The folder
# must be ignored by git, since it must not be committed: when .whl is not ignored yet, the
# script adds /.whl/ to .git/info/exclude (local to this checkout). PYTHON picks the python
# whose pip downloads (default python3; any version: pip downloads for 3.12 whatever runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-.whl}"
PY="${PYTHON:-python3}"
# pinned to what scripts/setup.sh installs here (pyproject: pymetis>=2023.1, ogb>=1.3.6);
# ogb needs outdated (-> littleutils); the rest of ogb's and pymetis' needs are in the image
WHEELS=(pymetis==2025.2.2 ogb==1.3.6 outdated==0.2.2 littleutils==0.2.4)
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64
           manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64)

if [ "$DIR" = ".whl" ] && git rev-parse --git-dir >/dev/null 2>&1 \
   && ! git check-ignore -q .whl/x.whl; then
  EXCLUDE="$(git rev-parse --git-path info/exclude)"
  mkdir -p "$(dirname "$EXCLUDE")"
  echo "/.whl/" >> "$EXCLUDE"
  echo "[fetch_gpu_wheels] added /.whl/ to $EXCLUDE" >&2
fi
mkdir -p "$DIR"
args=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312
      --disable-pip-version-check -d "$DIR")
for p in "${PLATFORMS[@]}"; do args+=(--platform "$p"); done
"$PY" -m pip download "${args[@]}" "${WHEELS[@]}"
# one version of each package (two would stop the install there)
dups=$(ls "$DIR"/*.whl | xargs -n1 basename | cut -d- -f1 | sort | uniq -d)
if [ -n "$dups" ]; then
  echo "[fetch_gpu_wheels] error: several versions of: $dups in $DIR; remove the extra ones" >&2
  exit 1
fi
ls -l "$DIR"/*.whl >&2
du -sh "$DIR" >&2
