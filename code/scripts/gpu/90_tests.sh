#!/usr/bin/env bash
# budget: 120
# The GPU-marked tests of the whole suite (the CPU path of every test runs in CI).
set -uo pipefail
source code/scripts/gpu/jupyter_env.source
python3 -m pytest -q -p no:cacheprovider -m "gpu and not browser" --timeout=100 tests \
  --junitxml="$RESULTS/gpu_tests_junit.xml" -rfE 2>&1
