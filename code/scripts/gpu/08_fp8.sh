#!/usr/bin/env bash
# Chapter 8: RMSNorm + FP8 block quantization on the GPU -> $RESULTS/fp8_quant.json
# budget: 90
# python -m fusedrms.kernels.rmsnorm_fp8 record runs independent steps and prints a line per check:
#   1. bit-exactness of fused / fused_baseline / naive / software-rounded fused / reordered
#      reference against the reference, 9 shapes x 3 seeds, plus the zero block  (~10 s, compiles)
#   2. median times (cold L2) of naive, fused and fused_baseline at 2x7168 .. 32768x7168, priced by
#      fusedrms.traffic and the measured copy bandwidth; the num_warps sweep      (~10 s)
#   3. launch candidates of the fused kernel (fp8_quant.CANDIDATES: warps, register cap, division
#      per element or one reciprocal per block): bit-exactness on the GPU, registers, times at
#      16384x7168 and 32768x7168 (graph and cold); stops starting candidates 62 s in  (~20-50 s)
#      -> also $RESULTS/fp8_tuning.json: the fastest bit-exact candidate. Commit it as
#         code/fusedrms/data/h200/fp8_tuning.json and fp8.fused uses it on the H200.
# The GPU-marked tests of tests/kernels/test_rmsnorm_fp8.py run with the suite (90_tests.sh).
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONPATH="$PWD/code${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
RESULTS=${RESULTS:-$(mktemp -d)}
echo "[08_fp8] record -> $RESULTS/fp8_quant.json"
timeout 88 python3 -m fusedrms.kernels.rmsnorm_fp8 record --out "$RESULTS/fp8_quant.json"
rc=$?
if [ -f "$RESULTS/fp8_tuning.json" ]; then  # later pieces of this session use the new table
  cp "$RESULTS/fp8_tuning.json" code/fusedrms/data/h200/fp8_tuning.json
  echo "[08_fp8] tuning table -> $RESULTS/fp8_tuning.json (installed for this session)"
fi
[ $rc -eq 124 ] && echo "[08_fp8] record TIMED OUT after 88 s (nothing written)"
echo "[08_fp8] done (exit $rc)"
exit $rc
