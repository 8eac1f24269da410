#!/usr/bin/env bash
# budget: 90
# Chapter 4 (Triton route) on the GPU, about 75 s. Writes into $RESULTS:
#   triton_row_ptx.txt + triton_row_asm.json   the row kernel's PTX (AMDGCN on ROCm) and a summary
#   triton_bf16_rounding.json  GPU bf16 outputs vs round-to-nearest-even and vs truncation
#   triton_warps.json          num_warps 4/8/16: 1024x4096 fp32, and widths 1024..16384 (bf16, fp32)
#   triton_versions.json       row / looped / multirow where each one matters
# Kernel times: fusedrms.kernels.rmsnorm.time_rotating_us (back-to-back calls over rotating input
# copies, replayed from a CUDA graph; no flush kernel whose dirty L2 lines land in the timed call).
# Two processes: the command line as a user runs it, then one process for the records (each record
# in its own try block, written as soon as it is complete, under a deadline: Python + CUDA start-up
# costs ~5 s per process, and compiling the 40-odd kernel configurations is most of the budget).
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONPATH="$PWD/code${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
RESULTS=${RESULTS:?set RESULTS to the folder that collects the results}
status=0
t0=$(date +%s)

echo "--- 04_triton: CLI, 1024x4096 fp32 (python -m fusedrms.kernels.rmsnorm)"
if timeout 20 python3 -m fusedrms.kernels.rmsnorm --version all --rows 1024 --cols 4096; then
  echo "--- 04_triton: CLI ok ($(( $(date +%s) - t0 )) s)"
else
  echo "--- 04_triton: CLI FAILED ($(( $(date +%s) - t0 )) s)"; status=1
fi

echo "--- 04_triton: records"
timeout 68 python3 - <<'EOF'
import os, sys, time, traceback
import torch
from fusedrms import checks, env, records, reference
from fusedrms.kernels import rmsnorm as T

START = time.time()
DEADLINE = 62  # seconds for this process; each step checks what is left
R = os.environ["RESULTS"]
E = env.current()
failed = []


def left():
    return DEADLINE - (time.time() - START)


def step(name, fn):
    t = time.time()
    print(f"[{time.time() - START:5.1f} s] {name}", flush=True)
    try:
        fn()
        print(f"[{time.time() - START:5.1f} s] {name}: ok ({time.time() - t:.1f} s)", flush=True)
    except Exception:  # keep going: one failure must not hide the other records
        traceback.print_exc()
        failed.append(name)
        print(f"[{time.time() - START:5.1f} s] {name}: FAILED", flush=True)


def tag(dtype):
    return str(dtype).replace("torch.", "")


def ptx():
    kind = "amdgcn" if E.backend == "rocm" else "ptx"
    out = []
    for dtype in (torch.float32, torch.bfloat16):
        k = T.row_kernel_compiled(cols=4096, dtype=dtype)
        asm = k.asm[kind]
        if dtype == torch.float32:
            with open(os.path.join(R, "triton_row_ptx.txt"), "w") as f:
                f.write(asm)
        s = T.assembly_summary(asm, kind)
        s.update(cols=4096, dtype=tag(dtype), block_size=4096, num_warps=T.num_warps_for(4096),
                 registers_per_thread=getattr(k, "n_regs", None),
                 spills=getattr(k, "n_spills", None),
                 file="triton_row_ptx.txt" if dtype == torch.float32 else None)
        out.append(s)
        print({k2: v for k2, v in s.items() if not k2.endswith("_forms")})
    records.write(os.path.join(R, "triton_row_asm.json"), out)


def bf16_rounding():
    out = []
    for rows, cols in [(3, 13), (33, 257), (1024, 4096)]:
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16, generator=g)
        w = torch.randn(cols, device="cuda", dtype=torch.bfloat16, generator=g)
        exact = reference.rmsnorm(x, w, accum=torch.float32, out_dtype=torch.float32)
        c = T.bf16_rounding_census(T.rmsnorm_row(x, w), exact)
        c.update(rows=rows, cols=cols, kernel="triton.row")
        out.append(c)
        print(c)
    records.write(os.path.join(R, "triton_bf16_rounding.json"), out,
                  extra={"exact": "reference.rmsnorm in fp32 (torch), before the bf16 cast"})


def warps_sweep():
    shapes = [(1024, 4096, torch.float32, "seed shape")]
    # width by width, both dtypes, so a deadline cuts the widest widths rather than a whole dtype
    shapes += [(4096, c, d, "width sweep") for c in (1024, 2048, 4096, 8192, 16384)
               for d in (torch.bfloat16, torch.float32)]
    out = []
    for rows, cols, dtype, group in shapes:
        if left() < 14:
            print(f"deadline: sweep stops before {rows}x{cols} {tag(dtype)}")
            break
        x = torch.randn(rows, cols, device="cuda", dtype=dtype)
        w = torch.randn(cols, device="cuda", dtype=dtype)
        expected = reference.rmsnorm(x, w, accum=torch.float64)
        nbytes = T.bytes_moved(rows, cols, dtype)
        line = []
        for nw in (4, 8, 16):
            try:
                ok = checks.allclose(T.rmsnorm_row(x, w, num_warps=nw), expected).ok
                us, how = T.time_rotating_us(lambda xi, wi: T.rmsnorm_row(xi, wi, num_warps=nw), x, w)
            except Exception as err:
                print(f"{rows}x{cols} {tag(dtype)} {nw} warps: {type(err).__name__}: {err}")
                continue
            out.append(dict(group=group, rows=rows, cols=cols, dtype=tag(dtype), num_warps=nw,
                            rule_num_warps=T.num_warps_for(T.triton.next_power_of_2(cols)),
                            correct=ok, median_us=round(us, 3), gbps=round(nbytes / us / 1e3, 1),
                            bytes=nbytes, timer=how))
            line.append(f"{nw} warps {us:.2f} us{'' if ok else ' WRONG'}")
        print(f"{rows}x{cols} {tag(dtype)}: " + ", ".join(line), flush=True)
        records.write(os.path.join(R, "triton_warps.json"), out)  # complete so far
    if not out:
        raise RuntimeError("no num_warps measurement succeeded")


def versions():
    cases = [(1024, 4096, torch.float32), (65536, 128, torch.bfloat16),
             (16384, 256, torch.bfloat16), (1024, 32768, torch.float32)]
    out = []
    for rows, cols, dtype in cases:
        if left() < 5:
            print(f"deadline: variants stop before {rows}x{cols} {tag(dtype)}")
            break
        x = torch.randn(rows, cols, device="cuda", dtype=dtype)
        w = torch.randn(cols, device="cuda", dtype=dtype)
        expected = reference.rmsnorm(x, w, accum=torch.float64)
        nbytes = T.bytes_moved(rows, cols, dtype)
        for key, (name, fn) in T.VERSIONS.items():
            if T.MAX_COLS[name] is not None and cols > T.MAX_COLS[name]:
                continue
            try:
                ok = checks.allclose(fn(x, w), expected).ok
                us, how = T.time_rotating_us(fn, x, w)
            except Exception as err:
                print(f"{name} {rows}x{cols}: {type(err).__name__}: {err}")
                continue
            out.append(dict(variant=name, rows=rows, cols=cols, dtype=tag(dtype), correct=ok,
                            median_us=round(us, 3), gbps=round(nbytes / us / 1e3, 1), timer=how))
            print({k: v for k, v in out[-1].items() if k != "timer"}, flush=True)
        records.write(os.path.join(R, "triton_versions.json"), out)
    if not out:
        raise RuntimeError("no variant measurement succeeded")


step("PTX of the row kernel", ptx)
step("bf16 rounding: GPU vs interpreter-style truncation", bf16_rounding)
step("num_warps sweep", warps_sweep)
step("row vs looped vs multirow", versions)
print(f"records done in {time.time() - START:.1f} s; failed: {failed or 'none'}")
sys.exit(1 if failed else 0)
EOF
rc=$?
[ $rc -ne 0 ] && status=1
echo "--- 04_triton: records exit $rc; total $(( $(date +%s) - t0 )) s"
exit $status
