#!/usr/bin/env bash
# Chapter 8: RMSNorm + FP8 block quantization on the GPU -> $RESULTS/fp8_quant.json
# budget: 90
# python -m fusedrms.fp8_quant record runs two independent steps and prints a line per check:
#   1. bit-exactness of fused / naive / software-rounded fused / reordered reference against the
#      reference, 9 shapes x 3 seeds, plus the zero block without a floor        (~30-50 s, compiles)
#   2. median times (cold L2) of naive and fused at 2x7168 .. 32768x7168, priced by
#      fusedrms.traffic and the measured copy bandwidth                          (~10-20 s)
# The GPU-marked tests of tests/test_fp8_quant.py run with the suite (90_tests.sh).
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONPATH="$PWD/code${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
RESULTS=${RESULTS:-$(mktemp -d)}
echo "[08_fp8] record -> $RESULTS/fp8_quant.json"
timeout 88 python3 -m fusedrms.fp8_quant record --out "$RESULTS/fp8_quant.json"
rc=$?
[ $rc -eq 124 ] && echo "[08_fp8] record TIMED OUT after 88 s (nothing written)"
echo "[08_fp8] done (exit $rc)"
exit $rc
