#!/usr/bin/env bash
# budget: 90
# Chapter 5 (verification) on the GPU, budget about 90 s. Writes into $RESULTS:
#   verify_gpu.json         every registered kernel x dtype x boundary case (records.write; the
#                           text table and the case-by-kernel matrix are in its provenance)
#   verify_broken_gpu.json  the same suite on fusedrms.book.broken's kernels (they must fail)
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
echo "--- 05_verify: negative tests, broken.* (limit 30 s; failures expected)"
timeout 30 python3 -m fusedrms.verify --kernel 'broken.*' --device gpu \
    --json "$RESULTS/verify_broken_gpu.json" > "$RESULTS/verify_broken_gpu.txt" 2>&1
echo "    verify exit $? (1 = failures found, as it should)"; tail -8 "$RESULTS/verify_broken_gpu.txt"
if timeout 15 python3 - "$RESULTS/verify_broken_gpu.json" <<'PY'
import json, sys
from fusedrms.book import broken
doc = json.load(open(sys.argv[1]))
failed = {r["kernel"] for r in doc["records"] if r["status"] == "FAIL"}
missed = [name for name in broken.CAUGHT if name not in failed]
print("caught:", ", ".join(sorted(failed)), "| complete:", doc["provenance"].get("complete"))
sys.exit(1 if missed else 0)
PY
then
  echo "--- 05_verify: every broken kernel caught ($(( $(date +%s) - t1 )) s)"
else
  echo "--- 05_verify: negative tests FAILED: a broken kernel passed, or no file ($(( $(date +%s) - t1 )) s)"; status=1
fi
t1=$(date +%s)
echo "--- 05_verify: pytest -m gpu (limit 22 s)"
if timeout 22 python3 -m pytest -p no:cacheprovider -q -m gpu tests/test_checks.py \
    tests/test_verify.py tests/test_reference.py; then
  echo "--- 05_verify: GPU tests passed ($(( $(date +%s) - t1 )) s)"
else
  echo "--- 05_verify: GPU tests FAILED, exit $? ($(( $(date +%s) - t1 )) s)"; status=1
fi
exit $status
