#!/usr/bin/env bash
# The fault-injection suite of issue 14, slow cases included: malformed files, flags, full and
# read-only disks (tmpfs mounts: needs root; skipped otherwise), killed writers and ranks,
# concurrent runs, tampered partitions, damaged caches, diverging runs.
#   bash scripts/fault_probe.sh            # every fault case (about 4 minutes on 2 cores)
#   bash scripts/fault_probe.sh -m slow    # only the slow ones (kill -9, torchrun, tmpfs)
# Extra arguments go to pytest. The cheap cases also run in the normal test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m pytest -q -ra tests/faults/test_faults_run.py \
    tests/faults/test_faults_data.py tests/faults/test_faults_partition.py \
    tests/faults/test_faults_files.py "$@"
