#!/usr/bin/env bash
# The unit test suite on the GPU (GPU-marked tests included), browser tests excluded.
# budget: 150
set -uo pipefail
source code/scripts/gpu/jupyter_env.source
python3 -m pytest -q -p no:cacheprovider -m "not browser" -x --timeout=300 tests \
  --junitxml="$RESULTS/gpu_tests_junit.xml" 2>&1 | tail -40
exit ${PIPESTATUS[0]}
