"""The command line of chapter 8's kernels (``python -m fusedrms.kernels.rmsnorm_fp8 check``):
compare the naive pair and the fused kernel with the specification at one shape."""
from __future__ import annotations

from .. import env  # first: decides GPU or interpreter before any @triton.jit below

import argparse
import sys

import torch

from .. import cli
from . import rmsnorm_fp8 as _fp8
from .rmsnorm_fp8 import (MAX_COLS, ROUNDINGS, rmsnorm_fp8_fused, rmsnorm_fp8_naive)
from .rmsnorm_fp8_spec import BLOCK_COLS, HIDDEN_SIZE, compare, make_inputs, n_blocks, reference

# Under the interpreter each program runs its row's 128-column blocks as NumPy operations, so the
# time grows with rows x blocks: the command line stops at 1024 row-blocks (the default 4 x 7168 is
# 224). On a GPU a check holds about 24 bytes per element at once on the device (x, the
# reference's fp32 temporaries, both kernels' outputs) and on the host (inputs drawn there, the
# comparison's copies): measured 16 B for the reference, 6 B for the inputs, 13 B to compare.
INTERPRETER_MAX_ROW_BLOCKS = 1024
CHECK_BYTES_PER_ELEMENT = 24


def cli_size_problem(rows: int, cols: int, on_gpu: bool, device_free: int | None = None,
                     host_free: int | None = None) -> str:
    """Why ``check`` refuses ``rows x cols`` here (empty when it fits): under the interpreter the
    row-blocks it would run, on a GPU the memory it would hold (``device_free``/``host_free``
    default to what is free now)."""
    shape = f"--rows {rows} x --cols {cols}"
    if not on_gpu:
        per_row = n_blocks(cols)
        if rows * per_row > INTERPRETER_MAX_ROW_BLOCKS:
            fits = INTERPRETER_MAX_ROW_BLOCKS // per_row
            return (f"{shape} is {rows * per_row:,} blocks of {BLOCK_COLS} columns; with no GPU "
                    f"the Triton interpreter runs each as NumPy operations, so this check stops "
                    f"at {INTERPRETER_MAX_ROW_BLOCKS:,} (the default, 4 x {HIDDEN_SIZE}, is "
                    f"{4 * n_blocks(HIDDEN_SIZE)}). Use --rows {fits} or fewer at this width.")
        return ""
    need, gib = rows * cols * CHECK_BYTES_PER_ELEMENT, 1 << 30
    if device_free is None:
        device_free = torch.cuda.mem_get_info()[0]
    if host_free is None:
        host_free = cli.host_available_bytes()
    for where, free in (("on the GPU", device_free), ("of host memory", host_free)):
        if free is not None and need > free:
            return (f"{shape} needs about {need / gib:.1f} GiB {where} "
                    f"({CHECK_BYTES_PER_ELEMENT} bytes per element); {free / gib:.1f} GiB is "
                    f"free. Use fewer rows.")
    return ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fusedrms.kernels.rmsnorm_fp8", description=_fp8.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    chk = sub.add_parser("check", help="compare naive and fused with the reference")
    chk.add_argument("--rows", type=cli.whole(1, 1 << 16), default=4)
    chk.add_argument("--cols", type=cli.whole(1, MAX_COLS), default=HIDDEN_SIZE,
                     help=f"row width, at most {MAX_COLS} (the fused kernel keeps a row on chip)")
    chk.add_argument("--seed", type=cli.seed, default=0)
    chk.add_argument("--rounding", choices=ROUNDINGS, default="auto")
    args = parser.parse_args(argv)
    if args.cmd == "check":
        cli.check_elements(chk, args.rows, args.cols)
        too_big = cli_size_problem(args.rows, args.cols, env.current().on_gpu)
        if too_big:
            chk.error(too_big)
        x, w = make_inputs(args.rows, args.cols, args.seed)
        ref = reference(x, w)
        ok = True
        for name, fn in (("naive", rmsnorm_fp8_naive), ("fused", rmsnorm_fp8_fused)):
            report = compare(*fn(x, w, rounding=args.rounding), *ref)
            ok &= report.ok
            print(f"{name}: {report}")
        return 0 if ok else 1
    return 2  # unreachable: the parser requires a command


if __name__ == "__main__":
    sys.exit(main())
