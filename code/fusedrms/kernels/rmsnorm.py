"""The Triton route (chapter 4): RMSNorm with a row expressed as a block of offsets.

Three kernels share one idea: a program loads a row (or a piece of one) as a vector of
``BLOCK_SIZE`` lanes, masks the lanes past the last column, sums the squares in fp32, divides by the
*real* column count and broadcasts the row's scale back over the lanes.

- :func:`rmsnorm_row_kernel` — one program per row, the whole row in one block
  (``BLOCK_SIZE = next_power_of_2(cols)``), so ``x`` is read from memory once.
- :func:`rmsnorm_looped_kernel` — rows wider than one block: walk the row in chunks twice, once to
  sum the squares and once to write ``y``. The price is a second read of ``x``.
- :func:`rmsnorm_multirow_kernel` — several short rows per program, so a narrow row does not leave
  most of a program idle.

The wrappers (:func:`rmsnorm_row`, :func:`rmsnorm_looped`, :func:`rmsnorm_multirow`) validate their
inputs with :mod:`fusedrms.validation` and are registered as ``triton.row``, ``triton.looped`` and
``triton.multirow``. Casting convention (as :func:`fusedrms.reference.rmsnorm`): ``x * r * w`` in
fp32, one cast to x's dtype at the store.

Command line::

    python -m fusedrms.kernels.rmsnorm --version all --rows 1024 --cols 4096
"""
from __future__ import annotations

from .. import env  # first: decides GPU or interpreter before any @triton.jit below

import argparse
import sys

import torch
import triton
import triton.language as tl

from .. import checks, cli, dtypes, reference, registry, validation
from ..measure import timer

# A row must fit in one block for the row kernel. Triton allows far bigger blocks, but a block lives
# in registers, and a 16-warp (512-thread) program may use at most 65536 / 512 = 128 registers per
# thread. Recorded on the H200 (data/h200/traffic_row_registers.json): 32768 fp32 columns, 64 values
# of x per thread, 128 registers, no spills; 65536 columns, 128 values per thread, 90 spilled to
# local memory. So the row kernel stops at the widest row that does not spill; wider rows go to the
# looped kernel (tests/kernels/test_rmsnorm.py ties this number to the recorded file).
ROW_MAX_COLS = 32768
# The looped kernel walks the row in chunks of at most this many columns.
LOOP_CHUNK = 4096
# The multirow kernel is for narrow rows; wider ones fill a program on their own.
MULTIROW_MAX_COLS = 4096
# Elements one multirow program aims to cover (rows x padded width).
MULTIROW_ELEMENTS = 2048
# Triton refuses a block (tl.arange, a 2-D tile) of more elements than this, deep in compilation.
MAX_BLOCK_ELEMENTS = getattr(tl, "TRITON_MAX_TENSOR_NUMEL", 1 << 20)


def num_warps_for(block_size: int) -> int:
    """The book's rule: about 16 row elements per thread, never fewer than 4 warps nor more than 16.

    ``BLOCK_SIZE / (32 threads x 16 elements)``, clamped to 4..16: 2048 -> 4, 4096 -> 8,
    8192 and wider -> 16. Four warps keep enough loads in flight on short rows; past 16 warps
    (512 threads) the block-wide reduction's synchronization grows and gains stop. A rule of thumb,
    not a law: chapter 4 measures it, and the measurement does not generalize across shapes.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    return max(4, min(16, block_size // 512))


# [book:loud-scale]
@triton.jit
def loud_scale(r, denominator):
    """The row scale ``r = 1/sqrt(denominator)``, or NaN where ``denominator = mean(x^2) + eps``
    left fp32's normal range: the fp32 sum of squares overflowed (rms(x) above about
    1.8e19 / sqrt(cols)), the row holds a NaN or an Inf, or eps = 0 and mean(x^2) < 1.2e-38.
    Without it an overflowed row would come back as zeros, finite and wrong; one compare per row."""
    in_range = (denominator >= 1.1754943508222875e-38) & (denominator <= 3.4028234663852886e38)
    return tl.where(in_range, r, float("nan"))
# [/book:loud-scale]


# [book:row-kernel]
@triton.jit
def rmsnorm_row_kernel(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                       BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride may pass 2**31 elements
    offsets = tl.arange(0, BLOCK_SIZE)  # one lane per column, padded to a power of two
    mask = offsets < cols  # lanes past the last column do nothing
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    mean_square = tl.sum(x * x, axis=0) / cols  # masked lanes added 0; divide by the real width
    r = loud_scale(tl.rsqrt(mean_square + eps), mean_square + eps)  # NaN, not 0, on overflow
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)  # one weight per column
    y = x * r * w
    tl.store(y_ptr + row * y_row_stride + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)
# [/book:row-kernel]


# [book:looped-kernel]
@triton.jit
def rmsnorm_looped_kernel(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                          BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    y_row = y_ptr + row * y_row_stride
    offsets = tl.arange(0, BLOCK_SIZE)
    partial = tl.zeros([BLOCK_SIZE], dtype=tl.float32)  # pass 1: per-lane sums of squares
    for start in range(0, cols, BLOCK_SIZE):
        cols_here = start + offsets
        x = tl.load(x_row + cols_here, mask=cols_here < cols, other=0.0).to(tl.float32)
        partial += x * x
    denominator = tl.sum(partial, axis=0) / cols + eps
    r = loud_scale(tl.rsqrt(denominator), denominator)
    for start in range(0, cols, BLOCK_SIZE):  # pass 2: read x again (not kept on chip), write y
        cols_here = start + offsets
        mask = cols_here < cols
        x = tl.load(x_row + cols_here, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols_here, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols_here, (x * r * w).to(y_ptr.dtype.element_ty), mask=mask)
# [/book:looped-kernel]


# [book:multirow-kernel]
@triton.jit
def rmsnorm_multirow_kernel(x_ptr, w_ptr, y_ptr, rows, cols, x_row_stride, y_row_stride, eps,
                            BLOCK_SIZE: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr):
    first = tl.program_id(0) * ROWS_PER_PROGRAM
    row_ids = (first + tl.arange(0, ROWS_PER_PROGRAM)).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    col_mask = offsets < cols
    mask = (row_ids[:, None] < rows) & col_mask[None, :]  # the last program may run out of rows
    x = tl.load(x_ptr + row_ids[:, None] * x_row_stride + offsets[None, :],
                mask=mask, other=0.0).to(tl.float32)
    denominator = tl.sum(x * x, axis=1) / cols + eps
    r = loud_scale(tl.rsqrt(denominator), denominator)  # one scale per row
    w = tl.load(w_ptr + offsets, mask=col_mask, other=0.0).to(tl.float32)  # shared by the rows
    y = x * r[:, None] * w[None, :]
    tl.store(y_ptr + row_ids[:, None] * y_row_stride + offsets[None, :],
             y.to(y_ptr.dtype.element_ty), mask=mask)
# [/book:multirow-kernel]


# ---------------------------------------------------------------- wrappers

def _prepare(x, w, eps, kernel: str, max_cols: int | None, alternative: str | None):
    """Validate, flatten to (rows, cols) and allocate the output. Returns (x2, w, eps, y2, shape)."""
    validation.check_tensor(x, "x")
    validation.check_device(x, env.current().device, "x")
    validation.check_forward_only({"x": x, "w": w}, kernel)
    shape = tuple(x.shape)
    x2 = validation.as_rows(x, "x")
    cols = x2.shape[1]
    if max_cols is not None:
        validation.check_width(cols, max_cols, kernel, alternative)
    w = validation.check_weight(w, cols, x2.device, "w")
    eps = validation.check_eps(eps)
    y2 = torch.empty((x2.shape[0], cols), dtype=x2.dtype, device=x2.device)
    return x2, w, eps, y2, shape


def _check_num_warps(num_warps):
    if num_warps is None:
        return None
    if isinstance(num_warps, bool) or not isinstance(num_warps, int) or num_warps not in (
            1, 2, 4, 8, 16, 32):
        raise validation.InputError(f"num_warps must be a power of two from 1 to 32 (e.g. 4, 8 or "
                                    f"16), got {num_warps!r}. Leave it None for the book's rule.")
    return num_warps


def rmsnorm_row(x, w, eps: float = 1e-5, num_warps: int | None = None) -> torch.Tensor:
    """RMSNorm of every row of ``x`` (last dimension), one Triton program per row.

    ``num_warps`` defaults to :func:`num_warps_for` of the block; pass 4, 8 or 16 to measure others.
    """
    num_warps = _check_num_warps(num_warps)
    x2, w, eps, y2, shape = _prepare(x, w, eps, "triton.row", ROW_MAX_COLS,
                                     "triton.looped (fusedrms.kernels.rmsnorm.rmsnorm_looped)")
    rows, cols = x2.shape
    if rows == 0:
        return y2.reshape(shape)
    block = triton.next_power_of_2(cols)
    rmsnorm_row_kernel[(rows,)](x2, w, y2, cols, x2.stride(0), y2.stride(0), eps,
                                BLOCK_SIZE=block, num_warps=num_warps or num_warps_for(block))
    return y2.reshape(shape)


def rmsnorm_looped(x, w, eps: float = 1e-5, num_warps: int | None = None,
                   chunk: int | None = None) -> torch.Tensor:
    """RMSNorm for rows of any width: the row is walked in chunks, twice (x is read twice)."""
    num_warps = _check_num_warps(num_warps)
    x2, w, eps, y2, shape = _prepare(x, w, eps, "triton.looped", None, None)
    rows, cols = x2.shape
    if chunk is None:
        chunk = min(triton.next_power_of_2(cols), LOOP_CHUNK)
    elif isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1 or chunk & (chunk - 1):
        raise validation.InputError(f"chunk must be a power of two >= 1, got {chunk!r}.")
    elif chunk > MAX_BLOCK_ELEMENTS:
        raise validation.InputError(f"chunk={chunk} is more than the {MAX_BLOCK_ELEMENTS:,} "
                                    f"elements Triton allows in one block; pass a chunk of at "
                                    f"most {MAX_BLOCK_ELEMENTS} (or None: {LOOP_CHUNK}).")
    if rows == 0:
        return y2.reshape(shape)
    rmsnorm_looped_kernel[(rows,)](x2, w, y2, cols, x2.stride(0), y2.stride(0), eps,
                                   BLOCK_SIZE=chunk, num_warps=num_warps or num_warps_for(chunk))
    return y2.reshape(shape)


def rows_per_program_for(block_size: int) -> int:
    """Narrow rows share a program until it covers about ``MULTIROW_ELEMENTS`` lanes (1 to 64 rows)."""
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise validation.InputError(f"block_size must be a positive whole number, got {block_size!r}.")
    return max(1, min(64, MULTIROW_ELEMENTS // block_size))


def rmsnorm_multirow(x, w, eps: float = 1e-5, num_warps: int | None = None,
                     rows_per_program: int | None = None) -> torch.Tensor:
    """RMSNorm of narrow rows, several rows per program (one 2-D block of rows x columns)."""
    num_warps = _check_num_warps(num_warps)
    x2, w, eps, y2, shape = _prepare(x, w, eps, "triton.multirow", MULTIROW_MAX_COLS,
                                     "triton.row (fusedrms.kernels.rmsnorm.rmsnorm_row)")
    rows, cols = x2.shape
    block = triton.next_power_of_2(cols)
    if rows_per_program is None:
        rows_per_program = rows_per_program_for(block)
    elif (isinstance(rows_per_program, bool) or not isinstance(rows_per_program, int)
          or rows_per_program < 1 or rows_per_program & (rows_per_program - 1)):
        raise validation.InputError(f"rows_per_program must be a power of two >= 1, got "
                                    f"{rows_per_program!r}.")
    elif rows_per_program * block > MAX_BLOCK_ELEMENTS:
        raise validation.InputError(
            f"rows_per_program={rows_per_program} at {cols} columns (a block of {block} lanes) "
            f"makes a tile of {rows_per_program * block:,} elements, more than the "
            f"{MAX_BLOCK_ELEMENTS:,} Triton allows in one block; pass rows_per_program of at "
            f"most {MAX_BLOCK_ELEMENTS // block} (or None for the book's rule).")
    if rows == 0:
        return y2.reshape(shape)
    grid = (triton.cdiv(rows, rows_per_program),)
    rmsnorm_multirow_kernel[grid](x2, w, y2, rows, cols, x2.stride(0), y2.stride(0), eps,
                                  BLOCK_SIZE=block, ROWS_PER_PROGRAM=rows_per_program,
                                  num_warps=num_warps or num_warps_for(block * rows_per_program))
    return y2.reshape(shape)


VERSIONS = {  # CLI name -> (registry name, wrapper)
    "row": ("triton.row", rmsnorm_row),
    "looped": ("triton.looped", rmsnorm_looped),
    "multirow": ("triton.multirow", rmsnorm_multirow),
}

MAX_COLS = {"triton.row": ROW_MAX_COLS, "triton.looped": None, "triton.multirow": MULTIROW_MAX_COLS}

registry.register(registry.Impl(
    "triton.row", "rmsnorm", rmsnorm_row, "triton", max_cols=ROW_MAX_COLS,
    description="one program per row, the whole row in one masked block, x read once"))
registry.register(registry.Impl(
    "triton.looped", "rmsnorm", rmsnorm_looped, "triton",
    description=f"one program per row, walked in chunks of up to {LOOP_CHUNK} columns; x read twice"))
registry.register(registry.Impl(
    "triton.multirow", "rmsnorm", rmsnorm_multirow, "triton", max_cols=MULTIROW_MAX_COLS,
    description="several narrow rows per program (2-D block of rows x columns)"))


# ---------------------------------------------------------------- bytes

def bytes_moved(rows: int, cols: int, dtype: torch.dtype, w_dtype: torch.dtype | None = None) -> int:
    """x read once, y written once, w read once: chapter 2's traffic model, step "rmsnorm".

    The model prices w in x's dtype; a weight of another dtype changes only its one read."""
    from .. import traffic

    total = traffic.price("rmsnorm", rows, cols, dtype).bytes_total
    if w_dtype is not None and w_dtype != dtype:
        total += cols * (torch.empty((), dtype=w_dtype).element_size()
                         - torch.empty((), dtype=dtype).element_size())
    return total


# ---------------------------------------------------------------- command line

# Under the interpreter a program runs each block of up to LOOP_CHUNK columns as a few NumPy
# operations; their fixed cost (about 10 ms per row and per chunk, for each version) dominates,
# whatever the width. The command line stops at 1024 such row-chunks: the default 1024 x 4096
# takes about a minute for the three versions.
INTERPRETER_MAX_ROW_CHUNKS = 1024
# Bytes per element a check holds at once (measured on 2**24 fp32 elements): the float64
# reference's temporaries (32) where x lives, and checks.allclose's float64 copies (72) on the host.
REFERENCE_BYTES_PER_ELEMENT = 32
COMPARE_BYTES_PER_ELEMENT = 72


def cli_size_problem(rows: int, cols: int, dtype: torch.dtype, on_gpu: bool,
                     device_free: int | None = None, host_free: int | None = None) -> str:
    """Why the command line refuses ``rows x cols`` here (empty when it fits): under the
    interpreter, the time its row-chunks take; on a GPU, the memory a check holds at once on the
    device (x, y, the previous y, the timer's copies, the float64 reference) and on the host
    (the comparison). ``device_free``/``host_free`` default to what is free now."""
    shape = f"--rows {rows} x --cols {cols}"
    if not on_gpu:
        per_row = -(-cols // LOOP_CHUNK)
        if rows * per_row > INTERPRETER_MAX_ROW_CHUNKS:
            fits = INTERPRETER_MAX_ROW_CHUNKS // per_row
            hint = (f"--rows {fits} or fewer at this width" if fits else
                    f"at most {INTERPRETER_MAX_ROW_CHUNKS * LOOP_CHUNK:,} columns")
            return (f"{shape} is {rows * per_row:,} rows of up to {LOOP_CHUNK} columns; with no "
                    f"GPU the Triton interpreter takes about 10 ms for each, per version, so this "
                    f"check stops at {INTERPRETER_MAX_ROW_CHUNKS:,} (1024 x 4096 takes about a "
                    f"minute). Use {hint}.")
        return ""
    elements = rows * cols
    size = torch.empty((), dtype=dtype).element_size()
    gib = 1 << 30
    if device_free is None:
        device_free = torch.cuda.mem_get_info()[0]
    device_need = elements * (REFERENCE_BYTES_PER_ELEMENT + 6 * size)
    if device_need > device_free:
        return (f"{shape} needs about {device_need / gib:.1f} GiB on the GPU (x, outputs, the "
                f"timer's copies and a float64 reference: {REFERENCE_BYTES_PER_ELEMENT + 6 * size} "
                f"bytes per element); {device_free / gib:.1f} GiB is free. Use fewer rows.")
    if host_free is None:
        host_free = cli.host_available_bytes()
    host_need = elements * (COMPARE_BYTES_PER_ELEMENT + 2 * size)
    if host_free is not None and host_need > host_free:
        return (f"{shape} needs about {host_need / gib:.1f} GiB of host memory to compare the "
                f"outputs in float64 ({COMPARE_BYTES_PER_ELEMENT + 2 * size} bytes per element); "
                f"{host_free / gib:.1f} GiB is available. Use fewer rows.")
    return ""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m fusedrms.kernels.rmsnorm",
        description="Check the Triton RMSNorm kernels against a float64 reference and, on a GPU, "
                    "time them. Without a GPU they run in Triton's interpreter and are only checked.")
    p.add_argument("--version", default="all", help="row, looped, multirow or all (default: all)")
    p.add_argument("--rows", type=cli.whole(1), default=1024, help="number of rows (default 1024)")
    p.add_argument("--cols", type=cli.whole(1), default=4096, help="row width (default 4096)")
    p.add_argument("--dtype", type=cli.dtype, default="fp32", help="fp32, bf16 or fp16 (default fp32)")
    p.add_argument("--eps", type=cli.eps, default=1e-5)
    p.add_argument("--num-warps", type=int, choices=(1, 2, 4, 8, 16, 32), default=None,
                   help="override the book's num_warps rule (1, 2, 4, 8, 16 or 32)")
    p.add_argument("--seed", type=cli.seed, default=0)
    return p


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    name = args.version.strip().lower().removeprefix("triton.")
    if name == "all":
        names = list(VERSIONS)
    elif name in VERSIONS:
        names = [name]
    else:
        parser.error(f"--version must be one of: {', '.join(VERSIONS)}, all (got {args.version!r})")
    cli.check_elements(parser, args.rows, args.cols)
    dtype = args.dtype
    e = env.current()
    too_big = cli_size_problem(args.rows, args.cols, dtype, e.on_gpu)
    if too_big:
        parser.error(too_big)

    print(e.describe())
    if not e.on_gpu:
        print("no GPU: checking correctness only (the interpreter's speed says nothing about a GPU)")
        if args.rows * -(-args.cols // LOOP_CHUNK) > 64:
            print(f"note: {args.rows}x{args.cols} takes up to a minute in the interpreter; try "
                  f"--rows 64 for a quick check")
    torch.manual_seed(args.seed)
    x = torch.randn(args.rows, args.cols, device=e.device, dtype=dtype)
    w = torch.randn(args.cols, device=e.device, dtype=dtype)
    expected = reference.rmsnorm(x, w, args.eps, accum=torch.float64)
    nbytes = bytes_moved(args.rows, args.cols, dtype)

    header = f"{'version':<16} {'check':<6} {'max err':>9} {'max ulp':>7}"
    if e.on_gpu:
        header += f" {'median us':>10} {'GB/s':>8}"
    print(f"\n{args.rows} x {args.cols} {str(dtype).replace('torch.', '')}, eps {args.eps:g}")
    print(header)
    print("-" * len(header))
    failed = False
    for key in names:
        reg_name, fn = VERSIONS[key]
        max_cols = MAX_COLS[reg_name]  # not registry.get: that imports every other route too
        if max_cols is not None and args.cols > max_cols:
            print(f"{reg_name:<16} skipped: rows wider than {max_cols} columns "
                  f"({'use looped' if key == 'row' else 'use row or looped'})")
            continue
        try:
            y = fn(x, w, args.eps, num_warps=args.num_warps)
        except validation.InputError as err:
            print(f"{reg_name:<16} error: {err}")
            failed = True
            continue
        report = checks.allclose(y, expected)
        failed |= not report.ok
        line = (f"{reg_name:<16} {'PASS' if report.ok else 'FAIL':<6} "
                f"{report.max_abs_err:>9.2e} {report.max_ulp:>7}")
        if e.on_gpu and args.rows > 0:
            us, _how = timer.time_rotating_us(
                lambda xi, wi: fn(xi, wi, args.eps, num_warps=args.num_warps), x, w, nbytes)
            line += f" {us:>10.2f} {nbytes / us / 1e3:>8.0f}"
        print(line)
        if not report.ok:
            print(f"    {report}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
