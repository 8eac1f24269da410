#!/usr/bin/env bash
# budget: 90
# Chapter 4 (Triton route) on the GPU, budget about 90 s. Writes into $RESULTS:
#   triton_warps.json          num_warps 4/8/16: 1024x4096 fp32, and widths 1024..16384 (bf16, fp32)
#   triton_versions.json       row / looped / multirow where each one matters
#   triton_bf16_rounding.json  GPU bf16 outputs vs round-to-nearest-even and vs truncation
#   triton_row_ptx.txt         the row kernel's PTX (AMDGCN on ROCm) + triton_row_asm.json summary
# Every step is its own python process with its own timeout, so one failure hides nothing else.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONPATH="$PWD/code${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
RESULTS=${RESULTS:?set RESULTS to the folder that collects the results}
status=0
step() {  # step NAME SECONDS -- python source on stdin
  local name=$1 limit=$2 t0=$(date +%s)
  echo "--- 04_triton: $name"
  if timeout "$limit" python3 - ; then
    echo "--- 04_triton: $name ok ($(( $(date +%s) - t0 )) s)"
  else
    echo "--- 04_triton: $name FAILED ($(( $(date +%s) - t0 )) s)"; status=1
  fi
}

step "CLI check + timing, 1024x4096 fp32" 30 <<'EOF'
import sys
from fusedrms import triton_rmsnorm as T
sys.argv = ["python -m fusedrms.triton_rmsnorm", "--version", "all", "--rows", "1024", "--cols", "4096"]
sys.exit(T.main(sys.argv[1:]))
EOF

step "PTX of the row kernel" 30 <<'EOF'
import json, os
import torch
from fusedrms import env, records, triton_rmsnorm as T
R = os.environ["RESULTS"]
e = env.current()
kind = "amdgcn" if e.backend == "rocm" else "ptx"
summaries = []
for cols, dtype in [(4096, torch.float32), (4096, torch.bfloat16)]:
    k = T.row_kernel_compiled(cols=cols, dtype=dtype)
    asm = k.asm[kind]
    tag = str(dtype).replace("torch.", "")
    if dtype == torch.float32:
        with open(os.path.join(R, "triton_row_ptx.txt"), "w") as f:
            f.write(asm)
    s = T.assembly_summary(asm, kind)
    s.update(cols=cols, dtype=tag, block_size=4096, num_warps=T.num_warps_for(4096),
             registers_per_thread=getattr(k, "n_regs", None), spills=getattr(k, "n_spills", None),
             file="triton_row_ptx.txt" if dtype == torch.float32 else None)
    summaries.append(s)
    print(json.dumps({k2: v for k2, v in s.items() if k2 != "global_load_forms"}))
records.write(os.path.join(R, "triton_row_asm.json"), summaries)
EOF

step "num_warps sweep" 75 <<'EOF'
import os, time
import torch
from fusedrms import records, triton_rmsnorm as T
R = os.environ["RESULTS"]
shapes = [(1024, 4096, torch.float32, "seed shape")]
shapes += [(4096, c, d, "width sweep") for d in (torch.bfloat16, torch.float32)
           for c in (1024, 2048, 4096, 8192, 16384)]
out, t0 = [], time.time()
for rows, cols, dtype, group in shapes:
    if time.time() - t0 > 45:
        print("time budget reached, stopping the sweep"); break
    try:
        times = T.measure_num_warps(rows, cols, dtype, warps=(4, 8, 16))
    except Exception as err:  # keep the rest of the sweep
        print(f"{rows}x{cols} {dtype}: {type(err).__name__}: {err}"); continue
    nbytes = T.bytes_moved(rows, cols, dtype)
    for nw, us in times.items():
        out.append(dict(group=group, rows=rows, cols=cols, dtype=str(dtype).replace("torch.", ""),
                        num_warps=nw, rule_num_warps=T.num_warps_for(T.triton.next_power_of_2(cols)),
                        median_us=round(us, 3), gbps=round(nbytes / us / 1e3, 1), bytes=nbytes))
    print(f"{rows}x{cols} {dtype}: " + ", ".join(f"{nw} warps {us:.2f} us" for nw, us in times.items()))
    records.write(os.path.join(R, "triton_warps.json"), out,
                  extra={"timer": "fusedrms.triton_rmsnorm.time_us: median of fusedrms.timing.time_gpu samples (L2 flushed) or do_bench"})
if not out:
    raise SystemExit("no num_warps measurement succeeded")
EOF

step "bf16 rounding: GPU vs interpreter-style truncation" 30 <<'EOF'
import os
import torch
from fusedrms import records, reference, triton_rmsnorm as T
R = os.environ["RESULTS"]
out = []
for rows, cols in [(3, 13), (33, 257), (1024, 4096)]:
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16, generator=g)
    w = torch.randn(cols, device="cuda", dtype=torch.bfloat16, generator=g)
    y = T.rmsnorm_row(x, w)
    exact = reference.rmsnorm(x, w, accum=torch.float32, out_dtype=torch.float32)
    c = T.bf16_rounding_census(y, exact)
    c.update(rows=rows, cols=cols, kernel="triton.row")
    out.append(c)
    print(c)
records.write(os.path.join(R, "triton_bf16_rounding.json"), out,
              extra={"exact": "reference.rmsnorm in fp32 (torch), before the bf16 cast"})
EOF

step "row vs looped vs multirow" 40 <<'EOF'
import os, time
import torch
from fusedrms import checks, records, reference, triton_rmsnorm as T
R = os.environ["RESULTS"]
cases = [(1024, 4096, torch.float32), (16384, 256, torch.bfloat16), (65536, 128, torch.bfloat16),
         (1024, 32768, torch.float32), (1024, 65536, torch.bfloat16)]
out, t0 = [], time.time()
for rows, cols, dtype in cases:
    if time.time() - t0 > 20:
        print("time budget reached"); break
    x = torch.randn(rows, cols, device="cuda", dtype=dtype)
    w = torch.randn(cols, device="cuda", dtype=dtype)
    expected = reference.rmsnorm(x, w, accum=torch.float64)
    for key, (name, fn) in T.VERSIONS.items():
        if T.MAX_COLS[name] is not None and cols > T.MAX_COLS[name]:
            continue
        try:
            ok = checks.allclose(fn(x, w), expected).ok
            us = T.time_us(lambda: fn(x, w))
        except Exception as err:
            print(f"{name} {rows}x{cols}: {type(err).__name__}: {err}"); continue
        nbytes = T.bytes_moved(rows, cols, dtype)
        out.append(dict(variant=name, rows=rows, cols=cols, dtype=str(dtype).replace("torch.", ""),
                        correct=ok, median_us=round(us, 3), gbps=round(nbytes / us / 1e3, 1)))
        print(out[-1])
    records.write(os.path.join(R, "triton_versions.json"), out)
if not out:
    raise SystemExit("no variant measurement succeeded")
EOF

exit $status
