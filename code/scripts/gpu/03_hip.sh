#!/usr/bin/env bash
# budget: 120
# Chapter 3 (HIP route) on the GPU, budget about 90 s. Writes into $RESULTS:
#   hip_ladder.json      serial -> block -> shuffle -> vectorized, unfused and triton.row at
#                        1024x4096 fp32 and 16384x8192 fp32/bf16, plus hip.block's block-size sweep
#   hip_host_run.txt     the standalone host program (built with nvcc/hipcc) on 3x13, 33x257, 1024x4096
# Every step is its own process with its own timeout, so one failure hides nothing else.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONPATH="$PWD/code${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
RESULTS=${RESULTS:?set RESULTS to the folder that collects the results}
status=0
run() {  # run NAME SECONDS COMMAND...
  local name=$1 limit=$2 t0=$(date +%s); shift 2
  echo "--- 03_hip: $name"
  if timeout "$limit" "$@"; then
    echo "--- 03_hip: $name ok ($(( $(date +%s) - t0 )) s)"
  else
    echo "--- 03_hip: $name FAILED ($(( $(date +%s) - t0 )) s)"; status=1
  fi
}

run "build the GPU library (nvcc or hipcc)" 60 python3 -c "
import time, torch
from fusedrms.kernels.hip import kernels, build
t = time.time(); tc = kernels.toolchain_for(torch.device('cuda'))
path = build.compile(toolchain=tc)
print(f'{tc}: {path.name} in {time.time() - t:.1f} s; platform: {kernels.platform(\"cuda\")}')
"
run "GPU tests (tests/kernels/hip -m gpu)" 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/hip -x
run "ladder -> hip_ladder.json" 75 python3 -m fusedrms.book.ch03 --out "$RESULTS/hip_ladder.json"
run "host program: 3x13, 33x257, 1024x4096" 40 bash -c \
  'bash code/fusedrms/kernels/hip/host/run_all.sh 2>&1 | tee "$RESULTS/hip_host_run.txt"; exit ${PIPESTATUS[0]}'
exit $status
