#!/usr/bin/env bash
# budget: 90
# Chapter 5 (verification) on the GPU, budget about 90 s. Writes into $RESULTS:
#   verify_gpu.json   every registered kernel x dtype x boundary case (records.write; the text
#                     table and the case-by-kernel matrix are in its provenance: table, matrix)
# then runs this chapter's GPU tests (checks, verify, reference; the broken kernels must fail).
# Each step has its own timeout; verify saves after every kernel, so a timeout keeps what ran.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONPATH="$PWD/code${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
RESULTS=${RESULTS:?set RESULTS to the folder that collects the results}
status=0
t0=$(date +%s)
echo "--- 05_verify: boundary suite, every registered kernel (limit 60 s)"
if timeout 60 python3 -m fusedrms.verify --kernel all --device gpu --json "$RESULTS/verify_gpu.json"; then
  echo "--- 05_verify: suite passed ($(( $(date +%s) - t0 )) s)"
else
  echo "--- 05_verify: suite FAILED or timed out, exit $? ($(( $(date +%s) - t0 )) s)"; status=1
fi
t1=$(date +%s)
echo "--- 05_verify: pytest -m gpu (limit 24 s)"
if timeout 24 python3 -m pytest -p no:cacheprovider -q -m gpu tests/test_checks.py \
    tests/test_verify.py tests/test_reference.py; then
  echo "--- 05_verify: GPU tests passed ($(( $(date +%s) - t1 )) s)"
else
  echo "--- 05_verify: GPU tests FAILED, exit $? ($(( $(date +%s) - t1 )) s)"; status=1
fi
exit $status
