#!/usr/bin/env bash
# Build the host program with whatever compiler this machine has and run the boundary shapes
# (3x13: width not a power of two; 33x257: one column past 256, odd row count), then 1024x4096.
#
#   bash run_all.sh                       # hipcc (AMD), else nvcc (NVIDIA), else g++ (CPU runtime)
#   COMPILER=g++ SHAPES="3x13 33x257" bash run_all.sh
#   HIP_ARCH=gfx1100 bash run_all.sh      # AMD target (default: rocminfo's first gfx, else gfx90a)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${BUILD_DIR:-$(mktemp -d)}
compiler=${COMPILER:-}
if [ -z "$compiler" ]; then
  if command -v hipcc >/dev/null && { [ -n "${HIP_ARCH:-}" ] || rocminfo 2>/dev/null | grep -q 'gfx[0-9]'; }; then compiler=hipcc
  elif command -v nvcc >/dev/null && command -v nvidia-smi >/dev/null; then compiler=nvcc
  else compiler=g++; fi
fi
case "$compiler" in
  hipcc)
    arch=${HIP_ARCH:-$(rocminfo 2>/dev/null | grep -o -m1 'gfx[0-9a-f]*' || echo gfx90a)}
    HIP_PLATFORM=amd hipcc -x hip --offload-arch="$arch" -O3 "$here/rmsnorm_host.cpp" -o "$out/rmsnorm_host" ;;
  nvcc)
    arch=${CUDA_ARCH:-sm_$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)}
    nvcc -x cu -arch="$arch" -O3 -std=c++17 "$here/rmsnorm_host.cpp" -o "$out/rmsnorm_host" ;;
  *)
    "$compiler" -x c++ -std=c++17 -O2 -pthread "$here/rmsnorm_host.cpp" -o "$out/rmsnorm_host" ;;
esac
echo "built with $compiler: $out/rmsnorm_host"
status=0
for shape in ${SHAPES:-3x13 33x257 1024x4096}; do
  rows=${shape%x*}; cols=${shape#*x}
  echo "== ${rows}x${cols}"
  "$out/rmsnorm_host" --rows "$rows" --cols "$cols" --block "${BLOCK:-256}" --variant "${VARIANT:-all}" \
      --warmup "${WARMUP:-10}" --repeats "${REPEATS:-50}" || status=1
done
exit $status
