"""Compile chapter 9's kernels for an H100/H200 (sm_90) ahead of time, with no GPU: a compile error
that the interpreter cannot see (types, layouts, a constexpr branch) shows here. Prints JSON: the
global load forms of each compiled variant; with ``spills``, the local-memory stores (register
spills) in the machine code of each launch the backward's rule makes. Run in its own process by
test_rmsnorm_backward_aot.py (the interpreter must be off before the kernels are decorated)."""
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile

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
TORCH = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64}
# the backward's arguments Triton's launcher sees as 16-byte aligned (or multiples of 16)
BACKWARD_ALIGNED = ["x_ptr", "res_ptr", "w_ptr", "dy_ptr", "dsum_ptr", "rstd_ptr", "dx_ptr",
                    "dw_ptr", "cols", "x_stride", "res_stride", "dy_stride", "dsum_stride",
                    "dx_stride"]


def compile_ptx(fn, types, constexprs, aligned, num_warps, form="ptx"):
    names = list(inspect.signature(fn.fn).parameters)
    signature = dict(zip(names, types))
    signature.update({k: "constexpr" for k in constexprs})
    # what Triton's launcher specializes for 16-byte aligned pointers and multiples of 16
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=TARGET, options={"num_warps": num_warps}).asm[form]


def local_stores(cubin: bytes) -> int:
    """STL instructions in the machine code: each is a register spilled to local memory."""
    nvdisasm = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin",
                            "nvdisasm")
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        sass = subprocess.run([nvdisasm, f.name], capture_output=True, text=True,
                              check=True).stdout
    finally:
        os.unlink(f.name)
    return len(re.findall(r"\bSTL\b", sass))


def spills():
    """{launch: local stores} for the rule's launch of each (dtype, columns, op), r saved, and for
    the launch a 16384-column bf16 row had before the wide-row rule (prefetched, w held, 16 warps)."""
    out = {}
    for dt in ("bf16", "fp32"):
        types = ["*" + dt] * 5 + ["*fp32", "*" + dt, "*fp32"] + ["i32"] * 8 + ["fp32"]
        for cols in (2048, 4096, 8192, 16384):
            tile = B.tile_rows_for(cols, TORCH[dt])
            launches = {"rule": B.launch_options(tile, cols, TORCH[dt])}
            if dt == "bf16" and cols == 16384:
                launches["before the wide-row rule"] = dict(PREFETCH=True, W_RELOAD=False,
                                                            DW_FIRST=False,
                                                            num_warps=16)
            for name, options in launches.items():
                options = dict(options)
                warps = options.pop("num_warps")
                for op, dsum in (("rmsnorm", False), ("add_rmsnorm", True)):
                    c = {"BLOCK": cols, "TILE_ROWS": tile, "HAS_RESIDUAL": False,
                         "HAS_DSUM": dsum, "SAVED_R": True, "ATOMIC_DW": False,
                         "ACC": tl.float32, "F64": False, **options}
                    cubin = compile_ptx(B.rmsnorm_backward_kernel, types, c, BACKWARD_ALIGNED,
                                        warps, form="cubin")
                    out[f"{name} {op} {dt} {cols}"] = local_stores(cubin)
    return out


def loads(ptx):
    return sorted(set(re.findall(r"ld\.global\S*", ptx)))


# the rule's rows per step for 4096 columns of each dtype: 2 (bf16), 1 (fp32, fp64)
TILE = {dt: B.tile_rows_for(4096, torch_dt) for dt, torch_dt in TORCH.items()}


def main():
    out = {}
    for dt in ("bf16", "fp32", "fp64"):
        acc, accp = (tl.float64, "*fp64") if dt == "fp64" else (tl.float32, "*fp32")
        p = "*" + dt
        types = [p] * 5 + [accp, p, accp] + ["i32"] * 8 + ["fp32"]
        for atomic, prefetch in ((False, True), (True, True), (False, False)):
            for residual in (False, True):
                options = B.launch_options(TILE[dt], 4096, TORCH[dt], prefetch)
                options.pop("num_warps")  # every variant here compiles on 8 warps
                c = {"BLOCK": 4096, "TILE_ROWS": TILE[dt], "HAS_RESIDUAL": residual, "HAS_DSUM": residual,
                     "SAVED_R": not atomic, "ATOMIC_DW": atomic, "ACC": acc,
                     "F64": dt == "fp64", **options}
                ptx = compile_ptx(B.rmsnorm_backward_kernel, types, c, BACKWARD_ALIGNED, 8)
                out[f"backward {dt} atomic={atomic} residual={residual} "
                    f"prefetch={prefetch}"] = loads(ptx)
        if dt != "fp64":  # a wide row, as the rule launches it: w reloaded, no prefetch
            assert B.wide_row(1, 16384, TORCH[dt])
            options = B.launch_options(1, 16384, TORCH[dt])
            warps = options.pop("num_warps")
            c = {"BLOCK": 16384, "TILE_ROWS": 1, "HAS_RESIDUAL": False, "HAS_DSUM": True,
                 "SAVED_R": True, "ATOMIC_DW": False, "ACC": acc, "F64": False, **options}
            ptx = compile_ptx(B.rmsnorm_backward_kernel, types, c, BACKWARD_ALIGNED, warps)
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
    if sys.argv[1:] == ["spills"]:
        print(json.dumps(spills()))
    else:
        main()
