"""Compile chapter 9's kernels for an H100/H200 (sm_90) ahead of time, with no GPU: a compile error
that the interpreter cannot see (types, layouts, a constexpr branch) shows here. Prints JSON: the
global load forms of each compiled variant. Run in its own process by test_rmsnorm_backward_aot.py
(the interpreter must be off before the kernels are decorated)."""
import inspect
import json
import os
import re

import fusedrms.env  # noqa: F401  decides the device (and turns the interpreter on without a GPU)

os.environ.pop("TRITON_INTERPRET", None)  # ...which this compile must not use

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from fusedrms.book import broken_backward as BB  # noqa: E402
from fusedrms.kernels import rmsnorm_backward as B  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)


def compile_ptx(fn, types, constexprs, aligned, num_warps):
    names = list(inspect.signature(fn.fn).parameters)
    signature = dict(zip(names, types))
    signature.update({k: "constexpr" for k in constexprs})
    # what Triton's launcher specializes for 16-byte aligned pointers and multiples of 16
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=TARGET, options={"num_warps": num_warps}).asm["ptx"]


def loads(ptx):
    return sorted(set(re.findall(r"ld\.global\S*", ptx)))


# the rule's rows per step for 4096 columns of each dtype: 2 (bf16), 1 (fp32, fp64)
TILE = {dt: B.tile_rows_for(4096, getattr(torch, name))
        for dt, name in (("bf16", "bfloat16"), ("fp32", "float32"), ("fp64", "float64"))}


def main():
    out = {}
    for dt in ("bf16", "fp32", "fp64"):
        acc, accp = (tl.float64, "*fp64") if dt == "fp64" else (tl.float32, "*fp32")
        p = "*" + dt
        types = [p] * 5 + [accp, p, accp] + ["i32"] * 8 + ["fp32"]
        aligned = ["x_ptr", "res_ptr", "w_ptr", "dy_ptr", "dsum_ptr", "rstd_ptr", "dx_ptr",
                   "dw_ptr", "cols", "x_stride", "res_stride", "dy_stride", "dsum_stride",
                   "dx_stride"]
        for atomic, prefetch in ((False, True), (True, True), (False, False)):
            for residual in (False, True):
                c = {"BLOCK": 4096, "TILE_ROWS": TILE[dt], "HAS_RESIDUAL": residual, "HAS_DSUM": residual,
                     "SAVED_R": not atomic, "ATOMIC_DW": atomic, "ACC": acc,
                     "F64": dt == "fp64", "PREFETCH": prefetch, "W_RELOAD": False}
                ptx = compile_ptx(B.rmsnorm_backward_kernel, types, c, aligned, 8)
                out[f"backward {dt} atomic={atomic} residual={residual} "
                    f"prefetch={prefetch}"] = loads(ptx)
        if dt != "fp64":  # a wide row, as the rule launches it: w reloaded, no prefetch
            torch_dt = getattr(torch, {"bf16": "bfloat16", "fp32": "float32"}[dt])
            assert B.wide_row(1, 16384, torch_dt)
            c = {"BLOCK": 16384, "TILE_ROWS": 1, "HAS_RESIDUAL": False, "HAS_DSUM": True,
                 "SAVED_R": True, "ATOMIC_DW": False, "ACC": acc, "F64": False,
                 "PREFETCH": False, "W_RELOAD": True}
            ptx = compile_ptx(B.rmsnorm_backward_kernel, types, c, aligned,
                              B.warps_for(1, 16384, torch_dt))
            out[f"backward {dt} wide row"] = loads(ptx)
        ftypes = [p] * 5 + [accp] + ["i32"] * 5 + ["fp32"]
        faligned = ["x_ptr", "res_ptr", "w_ptr", "y_ptr", "s_ptr", "rstd_ptr", "cols",
                    "x_stride", "res_stride", "y_stride", "s_stride"]
        for residual in (False, True):
            c = {"BLOCK": 4096, "HAS_RESIDUAL": residual, "ACC": acc, "F64": dt == "fp64"}
            ptx = compile_ptx(B.rmsnorm_forward_kernel, ftypes, c, faligned, 8)
            out[f"forward {dt} residual={residual}"] = loads(ptx)
        ptx = compile_ptx(B.dw_reduce_kernel, [accp, p, "i32", "i32"],
                          {"BLOCK_P": B.REDUCE_BLOCK_P, "BLOCK_COLS": B.REDUCE_BLOCK_COLS},
                          ["partials_ptr", "dw_ptr", "cols"], B.REDUCE_WARPS)
        out[f"dw_reduce {dt}"] = loads(ptx)
    for bug in (1, 2, 3, 4):
        ptx = compile_ptx(BB.broken_backward_kernel, ["*fp32"] * 5 + ["i32"] * 6 + ["fp32"],
                          {"BLOCK": 1024, "BUG": bug}, [], 4)
        out[f"broken {bug}"] = loads(ptx)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
