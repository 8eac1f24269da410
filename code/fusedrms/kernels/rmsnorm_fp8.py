"""RMSNorm + FP8 block quantization (chapter 8): the Triton kernels of the step that feeds an FP8
GEMM, their launch rules and validated wrappers.

Each row is normalized, multiplied by the weight ``gamma`` and quantized in blocks of 128 columns to
fp8 e4m3 codes, with one fp32 scale per block. The codes must equal the specification's bit for bit:
:mod:`fusedrms.kernels.rmsnorm_fp8_spec` holds the constants, the operation order, the PyTorch
reference and the comparison rule, and the decisions on zero blocks, NaN and Inf, partial blocks
and input formats. ``contract`` picks which of its two contracts a call follows: ``"served"`` (the
default: the squares summed in fp32 by a stated tree, ``q = y * RN(448 / absmax)``) or ``"exact"``
(the chapter's teaching specification: a float64 sum, a correctly rounded ``y / scale``).

**Rounding paths.** ``rounding="cast"`` uses Triton's casts (``.to(tl.bfloat16)``,
``.to(tl.float8e4nv)``): hardware conversions on a GPU of compute capability >= 8.9 (Ada, Hopper
and later). ``rounding="software"`` rounds with integer arithmetic on the fp32 bits (nearest even,
bf16 and e4m3, subnormals included) and writes the e4m3 bit patterns itself: it is bit-exact
everywhere, on older GPUs (A100, T4) and in the Triton interpreter, whose casts are wrong
(fp32->bf16 truncates; fp32->fp8e4nv rounds ties up, loses the exponent carry, does not saturate and
flushes subnormals: triton issue 8322). ``"auto"`` picks ``"cast"`` on a CUDA GPU of capability
>= 8.9 and ``"software"`` everywhere else.

Registered as ``fp8.naive`` (two kernels: the norm writes bf16 rows to memory, the quantizer reads
them back) and ``fp8.fused`` (one kernel, the rows never leave the chip), op ``"rmsnorm_fp8"``.
``fp8.fused`` launches with :func:`choose_config`: the fastest bit-exact of :data:`CANDIDATES` as
recorded on this GPU (``tuning/h200/fp8.json``, installed with ``python -m fusedrms.tuning``),
else the baseline.

Command line (the GPU recording is chapter 8's: ``python -m fusedrms.record --chapters 8``)::

    python -m fusedrms.kernels.rmsnorm_fp8 check --rows 4 --cols 7168
"""
from __future__ import annotations

from .. import env  # first: decides GPU or interpreter before any @triton.jit below

import contextlib

import torch
import triton
import triton.language as tl

from .. import registry, tuning, validation
from . import add_rmsnorm  # its FAST_PATH switch (FUSEDRMS_FAST_PATH) covers both ops
from . import direct_launch
from . import rmsnorm_fp8_config as launch_rules
from .rmsnorm_fp8_config import (  # its launch rules, re-exported (chapter 8 and tests use them)
    CANDIDATES, DIVISIONS, REGISTER_CAP, TILES, FusedConfig, baseline_config, choose_config,
    config_from_record, launch_options, num_warps_for)
from .rmsnorm import loud_scale  # chapter 4's guard: NaN, never 0, for an overflowed row
from .rmsnorm_fp8_lean import divide_per_block, lean_division_errors  # the lean block steps
from .rmsnorm_fp8_spec import (  # the specification these kernels match bit for bit
    ABSMAX_FLOOR, BF16, BLOCK_COLS, DEFAULT_CONTRACT, FP8_DTYPE, FP8_MAX, FP32, HIDDEN_SIZE,
    RMS_NORM_EPS, check_inputs, contract_steps, make_inputs, n_blocks)
from .rounding import round_to_bf16  # chapter 7's bit-level rounding, shared

MAX_COLS = 16384  # the fused kernel keeps a whole row in registers
ROUNDINGS = ("auto", "cast", "software")


# ---------------------------------------------------------------- Triton: rounding helpers

# [book:software-rounding]
# fp32 -> bf16 to nearest even on the bit pattern is chapter 7's round_to_bf16
# (rounding.py): add 0x7FFF plus the lowest kept bit, clear the 16 dropped
# bits; a carry bumps the exponent.
@triton.jit
def e4m3_bits(q):
    """fp32 with |q| <= 448 (or NaN) -> the e4m3fn bit pattern (uint8),
    rounded to nearest even.

    Normal codes (|q| >= 2^-6): round the 23-bit fp32 mantissa to 3 bits as
    above (a carry bumps the exponent: 127.09 -> 128), then rebias the
    exponent from 127 to 7. Subnormal codes (|q| < 2^-6) count steps of 2^-9:
    the 24-bit significand shifted right, rounded to nearest even by its
    remainder; a result of 8 is the smallest normal code, which is what it
    should be.
    """
    bits = q.to(tl.uint32, bitcast=True)
    sign = (bits >> 31) << 7
    mag = bits & 0x7FFFFFFF
    biased_exp = (mag >> 23).to(tl.int32)
    rounded = mag + 0x7FFFF + ((mag >> 20) & 1)
    # (exponent - 127 + 7) << 3 | mantissa
    normal = (rounded >> 20) - (120 << 3)
    significand = (mag & 0x7FFFFF) | 0x800000
    # 141 = 127 + 9 + 5 (q * 2^9)
    shift = tl.minimum(141 - biased_exp, 31).to(tl.uint32)
    kept = significand >> shift
    rest = significand & ((1 << shift) - 1)
    half = 1 << (shift - 1)
    up = (rest > half) | ((rest == half) & ((kept & 1) == 1))
    subnormal = kept + up.to(tl.uint32)
    # 2^-6 has biased exponent 121
    code = tl.where(biased_exp >= 121, normal, subnormal)
    code = tl.where(mag > 0x7F800000, 0x7F, code)  # NaN stays NaN
    return (sign | code).to(tl.uint8)
# [/book:software-rounding]


# [book:shared-steps]
@triton.jit
def to_bf16_value(v, SOFTWARE_ROUNDING: tl.constexpr):
    if SOFTWARE_ROUNDING:
        # exact: a bf16 value widened back to fp32
        return round_to_bf16(v).to(tl.float32)
    else:
        # the hardware rounds to nearest even
        return v.to(tl.bfloat16).to(tl.float32)


@triton.jit
def row_rscale_tile(x, cols_f, eps, SUM_ORDER: tl.constexpr, N: tl.constexpr):
    """Steps 1-2 on a (N, 128) tile of fp32 x (masked lanes 0):
    r = 1 / sqrt(mean + eps), the squares summed as the contract says."""
    sum_sq = sum_of_squares(x, SUM_ORDER, N).to(tl.float32)
    denominator = tl.div_rn(sum_sq, cols_f) + eps
    # correctly rounded
    return loud_scale(tl.div_rn(1.0, tl.sqrt_rn(denominator)), denominator)


# [book:departures]
@triton.jit
def pairwise_sum(t, N: tl.constexpr):
    """The sum of a (N, 128) fp32 tile by a stated tree: columns (0, 1),
    (2, 3), ... of each block, then pairs of those sums, then the blocks
    pairwise the same way (N a power of two). Every addition adds two
    numbers, so any processor that follows the tree gets the same bits."""
    for k in tl.static_range(7):
        t = tl.sum(tl.reshape(t, (N, 64 >> k, 2)), axis=2)
    t = tl.reshape(t, (N,))
    for k in tl.static_range(16):
        if (N >> k) > 1:
            t = tl.sum(tl.reshape(t, (N >> (k + 1), 2)), axis=1)
    return tl.sum(t, axis=0)


@triton.jit
def sum_of_squares(x, SUM_ORDER: tl.constexpr, N: tl.constexpr):
    """Step 1 on a (N, 128) tile of fp32 x: 0, the exact contract's float64
    sum (squares of bf16 values are exact; any order gives the same fp32
    result); 1, the served contract's fp32 by the pairwise tree; 2, fp32 in
    whatever order the compiler picks (no reference can promise its bits)."""
    if SUM_ORDER == 0:
        return tl.sum(tl.sum((x * x).to(tl.float64), axis=1), axis=0)
    elif SUM_ORDER == 1:
        return pairwise_sum(x * x, N)
    else:
        return tl.sum(tl.sum(x * x, axis=1), axis=0)
# [/book:departures]


@triton.jit
def normalize_bf16(x, r, w, SOFTWARE_ROUNDING: tl.constexpr):
    """Step 3: returns the bf16 values of the normalized, weighted row (held
    in fp32)."""
    # cast the normalized row to bf16 ...
    normed = to_bf16_value(x * r, SOFTWARE_ROUNDING)
    # ... then gamma, rounded once more
    return to_bf16_value(normed * w, SOFTWARE_ROUNDING)


@triton.jit
def divide_by_block_scale(y, scale, FAST: tl.constexpr = False):
    """``y / scale`` correctly rounded, with one true division per block
    instead of per element.

    ``inv = 1 / scale`` (correctly rounded) once per block; per element
    ``q = y * inv`` is within about 2 ulps of the quotient; two fma
    corrections ``q += (y - q * scale) * inv`` make it the correctly rounded
    one (Markstein's theorem: the residual is exact, and a correction from a
    quotient within 1 ulp with a correctly rounded reciprocal rounds to
    ``RN(y / scale)``). The theorem needs the residual above fp32's
    underflow, so blocks with a scale below 2^-90 (only possible with a floor
    below ~4e-25) are scaled by 2^64 first: exact, same quotient. ``y == 0``
    and an infinite scale take ``y * inv``, which is then exactly
    ``y / scale`` (signed zeros, NaN for inf / inf and for 0 / 0).
    """
    tiny = scale < 8.077935669463161e-28  # 2^-90
    # 2^64, a power of two: exact
    lift = tl.where(tiny, 18446744073709551616.0, 1.0)
    s = (scale * lift)[:, None]
    inv = divide_per_block(1.0, s, FAST)
    y_s = y * lift[:, None]
    q = y_s * inv
    q = tl.fma(tl.fma(-q, s, y_s), inv, q)
    q = tl.fma(tl.fma(-q, s, y_s), inv, q)
    special = (y_s == 0) | (inv == 0)  # inv == 0: the scale is infinite
    return tl.where(special, y_s * inv, q)


@triton.jit
def max_keeping_nan(a, b):
    # tl.max would drop a NaN
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def quantize_tile(y, absmax_floor, FP8_MAX: tl.constexpr,
                  SOFTWARE_ROUNDING: tl.constexpr,
                  BLOCK_RECIPROCAL: tl.constexpr,
                  MULTIPLY: tl.constexpr = False,
                  LEAN: tl.constexpr = False):
    """Steps 4-5 on a (blocks, 128) tile: returns (codes, one scale per
    block). A block holding a NaN or an Inf gets a NaN scale, so all its
    codes are NaN too. ``MULTIPLY`` departs from step 5: q = y times
    RN(448 / absmax), one correctly rounded division per block. ``LEAN``
    (the same bits, fewer instructions): the per-block divisions by
    :func:`divide_per_block`'s fast path, and no clamp before the hardware
    cast, which saturates to +-448 by itself (cvt.rn.satfinite)."""
    absmax = tl.reduce(tl.abs(y), 1, max_keeping_nan)
    # False for NaN and Inf: one compare per block
    finite = absmax <= 3.4028234663852886e38
    absmax = tl.maximum(absmax, absmax_floor)  # floor 0: no floor
    scale = tl.where(finite, divide_per_block(absmax, FP8_MAX, LEAN),
                     float("nan"))
    if MULTIPLY:
        inv = tl.where(finite, divide_per_block(FP8_MAX, absmax, LEAN),
                       float("nan"))
        q = y * inv[:, None]
    elif BLOCK_RECIPROCAL:
        # the same quotient, bit for bit, cheaper
        q = divide_by_block_scale(y, scale, LEAN)
    else:
        # y * (1 / scale) alone would differ by a code now and then
        q = tl.div_rn(y, scale[:, None])
    if SOFTWARE_ROUNDING or not LEAN:
        q = tl.clamp(q, -FP8_MAX, FP8_MAX, propagate_nan=tl.PropagateNan.ALL)
    if SOFTWARE_ROUNDING:
        # uint8 bit patterns, stored through a uint8 view
        codes = e4m3_bits(q)
    else:
        codes = q.to(tl.float8e4nv, fp_downcast_rounding="rtne")
    return codes, scale
# [/book:shared-steps]


# ---------------------------------------------------------------- Triton: the two versions

# [book:fused-kernel]
@triton.jit
def rmsnorm_fp8_fused_kernel(x_ptr, w_ptr, codes_ptr, scales_ptr, cols, cols_f, x_row_stride,
                             eps, absmax_floor, FP8_MAX: tl.constexpr, BLOCK_COLS: tl.constexpr,
                             BLOCKS: tl.constexpr, SOFTWARE_ROUNDING: tl.constexpr,
                             BLOCK_RECIPROCAL: tl.constexpr, SUM_ORDER: tl.constexpr,
                             MULTIPLY: tl.constexpr, LEAN: tl.constexpr = False):
    row = tl.program_id(0).to(tl.int64)
    blocks = tl.arange(0, BLOCKS)  # the row as a (blocks, 128) tile, padded to a power of two
    offsets = blocks[:, None] * BLOCK_COLS + tl.arange(0, BLOCK_COLS)[None, :]
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    r = row_rscale_tile(x, cols_f, eps, SUM_ORDER, BLOCKS)
    # gamma is loaded only now: loaded earlier it would hold registers through the reduction,
    # and registers per thread decide how many rows an SM keeps in flight
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    y = normalize_bf16(x, r, w, SOFTWARE_ROUNDING)  # stays in registers
    codes, scale = quantize_tile(y, absmax_floor, FP8_MAX, SOFTWARE_ROUNDING, BLOCK_RECIPROCAL,
                                 MULTIPLY, LEAN)
    tl.store(codes_ptr + row * cols + offsets, codes, mask=mask)
    n_blocks = tl.cdiv(cols, BLOCK_COLS)
    tl.store(scales_ptr + row * n_blocks + blocks, scale, mask=blocks < n_blocks)
# [/book:fused-kernel]


@triton.jit
def rmsnorm_fp8_fused_rows_kernel(x_ptr, w_ptr, codes_ptr, scales_ptr, rows, cols, cols_f,
                                  x_row_stride, eps, absmax_floor, FP8_MAX: tl.constexpr,
                                  BLOCK_COLS: tl.constexpr, BLOCKS: tl.constexpr,
                                  ROWS: tl.constexpr, SOFTWARE_ROUNDING: tl.constexpr,
                                  BLOCK_RECIPROCAL: tl.constexpr):
    """The fused kernel with ``ROWS`` rows per program: a (rows, blocks, 128) tile, so the loads of
    several rows are in flight together and the per-row scalar work is shared by more lanes.
    The exact contract only (a launch candidate of its study)."""
    row_ids = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    blocks = tl.arange(0, BLOCKS)
    offsets = (blocks[:, None] * BLOCK_COLS + tl.arange(0, BLOCK_COLS)[None, :])[None, :, :]
    live = row_ids[:, None, None] < rows
    mask = (offsets < cols) & live
    x = tl.load(x_ptr + row_ids[:, None, None] * x_row_stride + offsets, mask=mask,
                other=0.0).to(tl.float32)
    squares = (x * x).to(tl.float64)  # as row_rscale_tile: float64, so the order is free
    sum_sq = tl.sum(tl.sum(squares, axis=2), axis=1).to(tl.float32)
    denominator = tl.div_rn(sum_sq, cols_f) + eps
    r = loud_scale(tl.div_rn(1.0, tl.sqrt_rn(denominator)), denominator)
    w = tl.load(w_ptr + offsets, mask=offsets < cols, other=0.0).to(tl.float32)
    y = normalize_bf16(x, r[:, None, None], w, SOFTWARE_ROUNDING)
    codes, scale = quantize_tile(tl.reshape(y, (ROWS * BLOCKS, BLOCK_COLS)), absmax_floor,
                                 FP8_MAX, SOFTWARE_ROUNDING, BLOCK_RECIPROCAL)
    codes = tl.reshape(codes, (ROWS, BLOCKS, BLOCK_COLS))
    tl.store(codes_ptr + row_ids[:, None, None] * cols + offsets, codes, mask=mask)
    n_blocks = tl.cdiv(cols, BLOCK_COLS)
    scale = tl.reshape(scale, (ROWS, BLOCKS))
    tl.store(scales_ptr + row_ids[:, None] * n_blocks + blocks[None, :], scale,
             mask=(blocks[None, :] < n_blocks) & (row_ids[:, None] < rows))


@triton.jit
def _piece_offsets(START_BLOCK: tl.constexpr, NB: tl.constexpr, BLOCK_COLS: tl.constexpr):
    blocks = START_BLOCK + tl.arange(0, NB)
    return blocks, blocks[:, None] * BLOCK_COLS + tl.arange(0, BLOCK_COLS)[None, :]


@triton.jit
def _quantize_piece(x, r, w_ptr, codes_ptr, scales_ptr, row, cols,
                    absmax_floor, blocks, offsets, FP8_MAX: tl.constexpr,
                    SOFTWARE_ROUNDING: tl.constexpr,
                    BLOCK_RECIPROCAL: tl.constexpr, BLOCK_COLS: tl.constexpr,
                    MULTIPLY: tl.constexpr = False, LEAN: tl.constexpr = False):
    mask = offsets < cols
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    y = normalize_bf16(x, r, w, SOFTWARE_ROUNDING)
    codes, scale = quantize_tile(y, absmax_floor, FP8_MAX, SOFTWARE_ROUNDING,
                                 BLOCK_RECIPROCAL, MULTIPLY, LEAN)
    tl.store(codes_ptr + row * cols + offsets, codes, mask=mask)
    n_blocks = tl.cdiv(cols, BLOCK_COLS)
    tl.store(scales_ptr + row * n_blocks + blocks, scale,
             mask=blocks < n_blocks)


@triton.jit
def rmsnorm_fp8_fused_split_kernel(x_ptr, w_ptr, codes_ptr, scales_ptr, cols,
                                   cols_f, x_row_stride, eps, absmax_floor,
                                   FP8_MAX: tl.constexpr,
                                   BLOCK_COLS: tl.constexpr,
                                   B0: tl.constexpr, B1: tl.constexpr,
                                   B2: tl.constexpr,
                                   SOFTWARE_ROUNDING: tl.constexpr,
                                   BLOCK_RECIPROCAL: tl.constexpr,
                                   SUM_ORDER: tl.constexpr = 0,
                                   EXACT_R: tl.constexpr = True,
                                   MULTIPLY: tl.constexpr = False,
                                   LEAN: tl.constexpr = False):
    """The fused kernel without padding: the row's blocks as three
    power-of-two pieces (56 blocks = 32 + 16 + 8), so no lane works on a
    padded block. SUM_ORDER, EXACT_R and MULTIPLY at their defaults are
    the specification; chapter 8 prices each departure."""
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    blocks0, offsets0 = _piece_offsets(0, B0, BLOCK_COLS)
    blocks1, offsets1 = _piece_offsets(B0, B1, BLOCK_COLS)
    blocks2, offsets2 = _piece_offsets(B0 + B1, B2, BLOCK_COLS)
    x0 = tl.load(x_row + offsets0, mask=offsets0 < cols,
                 other=0.0).to(tl.float32)
    x1 = tl.load(x_row + offsets1, mask=offsets1 < cols,
                 other=0.0).to(tl.float32)
    x2 = tl.load(x_row + offsets2, mask=offsets2 < cols,
                 other=0.0).to(tl.float32)
    # the padded tree's nodes: [0, 32) + ([32, 48) + [48, 64))
    sum_sq = (sum_of_squares(x0, SUM_ORDER, B0)
              + (sum_of_squares(x1, SUM_ORDER, B1)
                 + sum_of_squares(x2, SUM_ORDER, B2))).to(tl.float32)
    denominator = tl.div_rn(sum_sq, cols_f) + eps
    if EXACT_R:
        r = tl.div_rn(1.0, tl.sqrt_rn(denominator))
    else:
        r = tl.rsqrt(denominator)
    r = loud_scale(r, denominator)
    _quantize_piece(x0, r, w_ptr, codes_ptr, scales_ptr, row, cols,
                    absmax_floor, blocks0, offsets0, FP8_MAX,
                    SOFTWARE_ROUNDING, BLOCK_RECIPROCAL, BLOCK_COLS, MULTIPLY,
                    LEAN)
    _quantize_piece(x1, r, w_ptr, codes_ptr, scales_ptr, row, cols,
                    absmax_floor, blocks1, offsets1, FP8_MAX,
                    SOFTWARE_ROUNDING, BLOCK_RECIPROCAL, BLOCK_COLS, MULTIPLY,
                    LEAN)
    _quantize_piece(x2, r, w_ptr, codes_ptr, scales_ptr, row, cols,
                    absmax_floor, blocks2, offsets2, FP8_MAX,
                    SOFTWARE_ROUNDING, BLOCK_RECIPROCAL, BLOCK_COLS, MULTIPLY,
                    LEAN)


# [book:approx-kernel]
@triton.jit
def rmsnorm_fp8_approx_kernel(x_ptr, w_ptr, codes_ptr, scales_ptr, cols, x_row_stride, eps,
                              absmax_floor, FP8_MAX: tl.constexpr, BLOCK_COLS: tl.constexpr,
                              BLOCKS: tl.constexpr):
    """Diagnostic, not the specification: what the fused kernel costs without exactness.

    The sum of squares in fp32 in the compiler's order (not float64), ``rsqrt`` (not a correctly
    rounded 1/sqrt), and ``y * (448 / absmax)`` (not a correctly rounded division): codes can
    differ from the reference by one step now and then. Timed beside the exact kernel so the
    chapter can say what exactness costs."""
    row = tl.program_id(0).to(tl.int64)
    blocks = tl.arange(0, BLOCKS)
    offsets = blocks[:, None] * BLOCK_COLS + tl.arange(0, BLOCK_COLS)[None, :]
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    r = tl.rsqrt(tl.sum(tl.sum(x * x, axis=1), axis=0) / cols + eps)
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    y = (x * r).to(tl.bfloat16).to(tl.float32)
    y = (y * w).to(tl.bfloat16).to(tl.float32)
    absmax = tl.maximum(tl.max(tl.abs(y), axis=1), absmax_floor)
    q = y * (FP8_MAX / absmax)[:, None]
    q = tl.clamp(q, -FP8_MAX, FP8_MAX, propagate_nan=tl.PropagateNan.ALL)
    tl.store(codes_ptr + row * cols + offsets, q.to(tl.float8e4nv), mask=mask)
    n_blocks = tl.cdiv(cols, BLOCK_COLS)
    tl.store(scales_ptr + row * n_blocks + blocks, absmax / FP8_MAX, mask=blocks < n_blocks)
# [/book:approx-kernel]


def rmsnorm_fp8_approx(x, w, eps: float = RMS_NORM_EPS, absmax_floor: float = ABSMAX_FLOOR,
                       num_warps: int = 8):
    """The diagnostic kernel above (GPU with fp8 support only): ``(codes, scales)``, not bit-exact."""
    validation.check_forward_only({"x": x, "w": w}, "fp8.approx")
    x2, w, eps, floor, shape = check_inputs(x, w, eps, absmax_floor, env.current().device)
    cols = x2.shape[1]
    validation.check_width(cols, MAX_COLS, "fp8 approx (one row per program)")
    nb = n_blocks(cols)
    codes = torch.empty(x2.shape, dtype=FP8_DTYPE, device=x2.device)
    scales = torch.empty((x2.shape[0], nb), dtype=FP32, device=x2.device)
    if x2.shape[0]:
        rmsnorm_fp8_approx_kernel[(x2.shape[0],)](
            x2, w, codes, scales, cols, x2.stride(0), eps, floor, FP8_MAX=FP8_MAX,
            BLOCK_COLS=BLOCK_COLS, BLOCKS=triton.next_power_of_2(nb), num_warps=num_warps)
    return _shaped(codes, scales, shape)


def split_pieces(n_blocks_: int) -> tuple[int, int, int] | None:
    """``n_blocks`` as three distinct powers of two, largest first (56 -> 32, 16, 8), or None."""
    pieces = [1 << i for i in range(n_blocks_.bit_length() - 1, -1, -1) if n_blocks_ >> i & 1]
    return tuple(pieces) if len(pieces) == 3 else None


# [book:naive-kernels]
@triton.jit
def rmsnorm_bf16_kernel(x_ptr, w_ptr, y_ptr, cols, cols_f, x_row_stride, eps,
                        BLOCK_COLS: tl.constexpr, BLOCKS: tl.constexpr,
                        SOFTWARE_ROUNDING: tl.constexpr,
                        SUM_ORDER: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = (tl.arange(0, BLOCKS)[:, None] * BLOCK_COLS
               + tl.arange(0, BLOCK_COLS)[None, :])
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask,
                other=0.0).to(tl.float32)
    r = row_rscale_tile(x, cols_f, eps, SUM_ORDER, BLOCKS)
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    y = normalize_bf16(x, r, w, SOFTWARE_ROUNDING)
    # exact: y is bf16 already
    tl.store(y_ptr + row * cols + offsets, y.to(tl.bfloat16), mask=mask)


@triton.jit
def quantize_fp8_kernel(y_ptr, codes_ptr, scales_ptr, cols, absmax_floor,
                        FP8_MAX: tl.constexpr, BLOCK_COLS: tl.constexpr,
                        BLOCKS: tl.constexpr, SOFTWARE_ROUNDING: tl.constexpr,
                        BLOCK_RECIPROCAL: tl.constexpr, MULTIPLY: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    blocks = tl.arange(0, BLOCKS)
    offsets = blocks[:, None] * BLOCK_COLS + tl.arange(0, BLOCK_COLS)[None, :]
    mask = offsets < cols
    # read back
    y = tl.load(y_ptr + row * cols + offsets, mask=mask,
                other=0.0).to(tl.float32)
    codes, scale = quantize_tile(y, absmax_floor, FP8_MAX, SOFTWARE_ROUNDING,
                                 BLOCK_RECIPROCAL, MULTIPLY)
    tl.store(codes_ptr + row * cols + offsets, codes, mask=mask)
    n_blocks = tl.cdiv(cols, BLOCK_COLS)
    tl.store(scales_ptr + row * n_blocks + blocks, scale,
             mask=blocks < n_blocks)
# [/book:naive-kernels]


# ---------------------------------------------------------------- wrappers

def hardware_fp8_support(device=None) -> tuple[bool, str]:
    """(supported, why): Triton's fp8e4nv conversions need a CUDA GPU of capability >= 8.9."""
    e = env.current()
    if not e.on_gpu:
        return False, "no GPU: the Triton interpreter's fp8 cast is wrong for ~1-2% of values"
    if e.backend != "cuda":
        return False, "a ROCm GPU: tl.float8e4nv conversions are an NVIDIA format here"
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < (8, 9):
        return False, (f"{torch.cuda.get_device_name(device)} has compute capability "
                       f"{major}.{minor}; fp8 e4m3 conversions need 8.9 or newer (Ada, Hopper)")
    return True, f"compute capability {major}.{minor} converts to fp8 e4m3 in hardware"


def resolve_rounding(rounding: str, device=None) -> str:
    """``"auto"`` -> ``"cast"`` where the hardware converts to e4m3, else ``"software"``."""
    if rounding not in ROUNDINGS:
        raise validation.InputError(f"rounding must be one of {', '.join(map(repr, ROUNDINGS))}, "
                                    f"got {rounding!r}.")
    supported, why = hardware_fp8_support(device)
    if rounding == "auto":
        return "cast" if supported else "software"
    if rounding == "cast" and env.current().on_gpu and not supported:
        raise validation.InputError(f"rounding='cast' needs hardware fp8 e4m3 conversions: {why}. "
                                    f"Use rounding='software' (bit-exact integer rounding; what "
                                    f"'auto' picks on this GPU).")
    return rounding  # "cast" under the interpreter runs its (faulty) emulation: chapter 8 shows it


_LEAN_REPORTS: dict = {}  # {device name: lean_division_errors()}, one proof per GPU


def lean_division_report(device) -> dict:
    """:func:`~fusedrms.kernels.rmsnorm_fp8_lean.lean_division_errors` on ``device``, run once
    per GPU (well under a second) and shared by every launch and by chapter 8's tuner."""
    name = torch.cuda.get_device_name(device) if env.current().on_gpu else "interpreter"
    if name not in _LEAN_REPORTS:
        _LEAN_REPORTS[name] = lean_division_errors()
    return _LEAN_REPORTS[name]


def lean_is_exact_on(device) -> bool:
    """Whether the lean block steps give ``div_rn``'s bits on ``device``: on a GPU, a launch
    falls back to ``div_rn`` wherever :func:`lean_division_report` finds a difference. The
    interpreter divides exactly, so there the fast path is ``div_rn`` by construction."""
    if not env.current().on_gpu:
        return True
    errors = lean_division_report(device)
    return not any(v for k, v in errors.items() if k != "checked")


def _launch_setup(x, w, eps, absmax_floor, rounding, num_warps, cap_registers=True,
                  division=None, config=None, contract=DEFAULT_CONTRACT):
    validation.check_flag(cap_registers, "cap_registers")
    steps = contract_steps(contract)
    x2, w, eps, floor, shape = check_inputs(x, w, eps, absmax_floor, env.current().device)
    cols = x2.shape[1]
    validation.check_width(cols, MAX_COLS, "fp8_quant (one row per program)")
    rounding = resolve_rounding(rounding, x2.device)
    cfg = launch_rules.resolve_config(cols, num_warps, cap_registers, division, config)
    nb = n_blocks(cols)
    blocks = triton.next_power_of_2(nb)
    codes = torch.empty(x2.shape, dtype=FP8_DTYPE, device=x2.device)
    scales = torch.empty((x2.shape[0], nb), dtype=FP32, device=x2.device)
    software = rounding == "software"
    codes_out = codes.view(torch.uint8) if software else codes
    options = {"num_warps": cfg.num_warps}
    if cfg.maxnreg and env.current().backend == "cuda" and launch_rules.supports_maxnreg():
        options["maxnreg"] = cfg.maxnreg
    meta = dict(BLOCK_COLS=BLOCK_COLS, BLOCKS=blocks, SOFTWARE_ROUNDING=software,
                BLOCK_RECIPROCAL=cfg.division == "block_reciprocal",
                SUM_ORDER=0 if steps["sum_order"] == "float64" else 1,
                MULTIPLY=steps["division"] == "reciprocal",
                LEAN=(cfg.lean and floor >= launch_rules.LEAN_MIN_FLOOR
                      and lean_is_exact_on(x2.device)), **options)
    if not cfg.runs(contract):
        raise validation.InputError(f"rows_per_program {cfg.rows_per_program} runs the exact "
                                    f"contract only; pass contract='exact' or one row per "
                                    f"program.")
    if cfg.rows_per_program > 1:
        meta["ROWS"] = cfg.rows_per_program  # the fused wrapper then launches the rows kernel
    pieces = split_pieces(nb) if cfg.tile == "split" else None
    if pieces:  # a width that is not three powers of two of blocks keeps the padded tile
        meta["PIECES"] = pieces
    return x2, w, eps, floor, shape, codes, codes_out, scales, meta


def _fused_launch(x2, w, codes_out, scales, eps, floor, meta):
    """(kernel, grid, its arguments by name, launch options) of the fused kernel ``meta`` picks."""
    rows, cols = x2.shape
    args = dict(x_ptr=x2, w_ptr=w, codes_ptr=codes_out, scales_ptr=scales, cols=cols,
                cols_f=float(cols), x_row_stride=x2.stride(0), eps=eps, absmax_floor=floor,
                FP8_MAX=FP8_MAX)
    options = {k: v for k, v in meta.items() if k in direct_launch.LAUNCH_OPTIONS}
    consts = {k: v for k, v in meta.items() if k not in direct_launch.LAUNCH_OPTIONS}
    if "PIECES" in consts:
        b0, b1, b2 = consts.pop("PIECES")
        del consts["BLOCKS"]
        return (rmsnorm_fp8_fused_split_kernel, rows,
                {**args, **consts, "B0": b0, "B1": b1, "B2": b2}, options)
    if "ROWS" in consts:
        del consts["SUM_ORDER"], consts["MULTIPLY"], consts["LEAN"]  # exact, not lean (resolve_config)
        return (rmsnorm_fp8_fused_rows_kernel, triton.cdiv(rows, consts["ROWS"]),
                {**args, "rows": rows, **consts}, options)
    return rmsnorm_fp8_fused_kernel, rows, {**args, **consts}, options


def _launch_fused(x2, w, codes_out, scales, eps, floor, meta, keep: bool = False):
    """Launch the fused kernel ``meta`` picks. Returns what Triton returned (the compiled kernel
    on a GPU) and, with ``keep``, a :class:`~fusedrms.kernels.direct_launch.DirectLaunch` of this
    launch for the next calls of the same shapes (None under the interpreter, or without
    ``keep``). Every fused kernel takes x, w, the codes and the scales first."""
    kernel, grid, args, options = _fused_launch(x2, w, codes_out, scales, eps, floor, meta)
    with _interpreter_quiet():
        compiled = kernel[(grid,)](**args, **options)
    return compiled, (direct_launch.after_first_launch(compiled, grid, kernel, 4, **args)
                      if keep else None)


def _interpreter_quiet():
    """NumPy warns on 0/0 under the interpreter (padding blocks past the last column, or a zero
    block with no floor) and on bf16 products past the largest value (they are meant to be
    infinite); those lanes are masked or meant to be NaN or inf, so the warning is noise."""
    if env.current().on_gpu:
        return contextlib.nullcontext()
    import numpy

    return numpy.errstate(divide="ignore", invalid="ignore", over="ignore")


def _shaped(codes, scales, shape):
    return codes.reshape(shape), scales.reshape(shape[:-1] + (scales.shape[-1],))


def rmsnorm_fp8_fused(x, w, eps: float = RMS_NORM_EPS, absmax_floor: float = ABSMAX_FLOOR,
                      rounding: str = "auto", num_warps: int | None = None,
                      cap_registers: bool = True, division: str | None = None,
                      config: FusedConfig | None = None, contract: str = DEFAULT_CONTRACT):
    """One kernel: normalize and quantize each row on chip. Returns ``(codes, scales)``.

    ``contract``: ``"served"`` (default) or ``"exact"`` (module docstring); the codes equal
    ``rmsnorm_fp8_spec.reference(x, w, contract=contract)``'s bit for bit.
    ``rounding``: ``"auto"`` (default), ``"cast"`` or ``"software"`` (module docstring).
    With no launch arguments the configuration is :func:`choose_config`'s: the bit-exact winner of
    the recorded candidates on this GPU (``tuning/h200/fp8.json``), else the baseline.
    ``num_warps`` / ``cap_registers`` (:data:`REGISTER_CAP`) / ``division`` (:data:`DIVISIONS`)
    override the baseline piece by piece; ``config`` (a :class:`FusedConfig`) sets all three.
    """
    default = num_warps is None and division is None and config is None and cap_registers is True
    key, x_at, w_at = (_plan_key(x, w, eps, absmax_floor, rounding, contract) if default
                       else _NO_KEY)
    plan = _PLANS.get(key) if key is not None else None
    if plan is not None:
        return plan.run(x, w, x_at, w_at)
    validation.check_forward_only({"x": x, "w": w}, "fp8.fused")
    if default:
        contract_steps(contract)  # a clear message for an unknown contract, before the lookup
        config = choose_config(x.shape[-1] if isinstance(x, torch.Tensor) and x.dim() else 0,
                               contract)[0]
    x2, w2, eps, floor, shape, codes, codes_out, scales, meta = _launch_setup(
        x, w, eps, absmax_floor, rounding, num_warps, cap_registers, division, config, contract)
    if x2.shape[0] == 0:
        return _shaped(codes, scales, shape)
    keep = key is not None and x2.data_ptr() == x.data_ptr() and x.is_contiguous() and w2 is w
    _, direct = _launch_fused(x2, w2, codes_out, scales, eps, floor, meta, keep=keep)
    if keep:
        software = codes_out.dtype != codes.dtype
        plan = _Plan(x, scales.shape[1], software, eps, floor, meta, direct)
        direct_launch.remember(_PLANS, key, plan)
    return _shaped(codes, scales, shape)


# Repeated calls (a model calls with the same shapes every step): every check above depends only
# on the inputs' type, shape, strides, dtype, device, eps, floor, rounding and the tuning table,
# so a call whose key matches one that passed them skips to the launch (direct_launch).
_PLANS: dict = {}


_NO_KEY = (None, 0, 0)


def _plan_key(x, w, eps, absmax_floor, rounding, contract) -> tuple:
    """(key, x's address, w's address): the key holds everything the checks and the launch
    depend on (Triton specializes the compiled kernel on the addresses' 16-byte alignment), and
    the launch reuses the addresses. :data:`_NO_KEY` where the call takes the full path."""
    if not (add_rmsnorm.FAST_PATH and type(x) is torch.Tensor and type(w) is torch.Tensor  # noqa: E721
            and type(eps) is float and type(absmax_floor) is float and type(rounding) is str  # noqa: E721
            and type(contract) is str):  # noqa: E721
        return _NO_KEY
    try:
        x_at, w_at = x.data_ptr(), w.data_ptr()
    except RuntimeError:  # no storage (a sparse tensor): the full path says what to do
        return _NO_KEY
    recorded = torch.is_grad_enabled() and (x.requires_grad or w.requires_grad)
    return ((x.shape, x.stride(), x.dtype, x.device, w.shape, w.stride(), w.dtype, w.device, eps,
             absmax_floor, rounding, contract, x_at % 16 == 0, w_at % 16 == 0,
             tuning.generation(), recorded), x_at, w_at)


class _Plan:
    """What a validated call decided. The outputs are ``empty_like`` of two templates of their
    shape and dtype (one element each, expanded; x is contiguous here, so the outputs are too):
    on the H200 ``x.new_empty(shape, dtype=...)`` took 5.2 us where ``empty_like`` of a template
    took 3.9, and ``torch.empty`` with a device argument 6.1, of a call that costs about 20."""

    __slots__ = ("rows_cols", "codes_like", "scales_like", "software", "eps", "floor", "meta",
                 "direct")

    def __init__(self, x, blocks, software, eps, floor, meta, direct=None):
        shape = x.shape
        self.rows_cols = (shape[:-1].numel(), shape[-1])
        self.codes_like = x.new_empty((), dtype=FP8_DTYPE).expand(shape)
        self.scales_like = x.new_empty((), dtype=FP32).expand(*shape[:-1], blocks)
        self.software, self.eps, self.floor, self.meta, self.direct = (software, eps, floor,
                                                                        meta, direct)

    def run(self, x, w, x_at: int, w_at: int):
        """The launch on x and w (at the addresses ``x_at``, ``w_at``), into new outputs."""
        codes, scales = torch.empty_like(self.codes_like), torch.empty_like(self.scales_like)
        if self.direct is not None:  # the codes' bytes are the same whatever their dtype
            self.direct.at(x_at, w_at, codes.data_ptr(), scales.data_ptr())
        else:  # the interpreter: the same launch, without the checks already made
            codes_out = codes.view(torch.uint8) if self.software else codes
            _launch_fused(x.view(self.rows_cols), w, codes_out, scales, self.eps, self.floor,
                          self.meta)
        return codes, scales


def norm_meta(meta: dict) -> dict:
    """The launch keywords the naive norm kernel takes: it does not divide, so it has no
    BLOCK_RECIPROCAL, MULTIPLY or LEAN (Triton on a GPU rejects keywords a kernel does not
    declare; the interpreter ignores them, which is how this once slipped through CPU tests)."""
    return {k: v for k, v in meta.items() if k not in ("BLOCK_RECIPROCAL", "MULTIPLY", "LEAN")}


def quantize_meta(meta: dict) -> dict:
    """The launch keywords the naive quantizer takes: it does not sum, so no SUM_ORDER, and it
    keeps the chapter's first design, so no LEAN."""
    return {k: v for k, v in meta.items() if k not in ("SUM_ORDER", "LEAN")}


def rmsnorm_fp8_naive(x, w, eps: float = RMS_NORM_EPS, absmax_floor: float = ABSMAX_FLOOR,
                      rounding: str = "auto", num_warps: int | None = None,
                      cap_registers: bool = True, division: str | None = None,
                      contract: str = DEFAULT_CONTRACT):
    """Two kernels: the norm writes bf16 rows to memory, the quantizer reads them back.
    Always the baseline launch (never the tuned table): the comparison the chapter starts from.
    ``contract`` as :func:`rmsnorm_fp8_fused`'s."""
    validation.check_forward_only({"x": x, "w": w}, "fp8.naive")
    x2, w, eps, floor, shape, codes, codes_out, scales, meta = _launch_setup(
        x, w, eps, absmax_floor, rounding, num_warps, cap_registers, division,
        contract=contract)
    rows, cols = x2.shape
    if rows == 0:
        return _shaped(codes, scales, shape)
    meta.pop("ROWS", None)
    meta.pop("PIECES", None)
    y = torch.empty((rows, cols), dtype=BF16, device=x2.device)  # the round trip
    with _interpreter_quiet():
        rmsnorm_bf16_kernel[(rows,)](x2, w, y, cols, float(cols), x2.stride(0), eps,
                                     **norm_meta(meta))
        quantize_fp8_kernel[(rows,)](y, codes_out, scales, cols, floor, FP8_MAX=FP8_MAX,
                                     **quantize_meta(meta))
    return _shaped(codes, scales, shape)


def kernel_resources(rows: int = 4, cols: int = HIDDEN_SIZE, num_warps: int | None = None,
                     cap_registers: bool = True, config: FusedConfig | None = None,
                     contract: str = DEFAULT_CONTRACT) -> dict:
    """Registers and spills per thread of the compiled kernels (GPU; None in the interpreter)."""
    x, w = make_inputs(rows, cols, 0)
    x2, w, eps, floor, shape, codes, codes_out, scales, meta = _launch_setup(
        x, w, RMS_NORM_EPS, ABSMAX_FLOOR, "auto", num_warps, cap_registers, None, config,
        contract)
    y = torch.empty(x2.shape, dtype=BF16, device=x2.device)
    fused, _ = _launch_fused(x2, w, codes_out, scales, eps, floor, meta)
    meta.pop("ROWS", None)
    meta.pop("PIECES", None)
    with _interpreter_quiet():
        launched = {
            "fused": fused,
            "norm": rmsnorm_bf16_kernel[(rows,)](x2, w, y, cols, float(cols), x2.stride(0), eps,
                                                 **norm_meta(meta)),
            "quantize": quantize_fp8_kernel[(rows,)](y, codes_out, scales, cols, floor,
                                                     FP8_MAX=FP8_MAX, **quantize_meta(meta))}
    out = {"num_warps": meta["num_warps"], "maxnreg": meta.get("maxnreg")}
    for name, k in launched.items():
        out[f"{name}_registers"] = getattr(k, "n_regs", None)
        out[f"{name}_spills"] = getattr(k, "n_spills", None)
    return out


registry.register(registry.Impl(
    "fp8.naive", op="rmsnorm_fp8", fn=rmsnorm_fp8_naive, route="triton", dtypes=(BF16,),
    max_cols=MAX_COLS,
    description="RMSNorm kernel writes bf16 rows, a second kernel quantizes them to fp8 e4m3 "
                "in 128-column blocks, the served contract (chapter 8)"))
registry.register(registry.Impl(
    "fp8.fused", op="rmsnorm_fp8", fn=rmsnorm_fp8_fused, route="triton", dtypes=(BF16,),
    max_cols=MAX_COLS,
    description="RMSNorm + fp8 e4m3 block quantization in one kernel, one row per program, "
                "the served contract (chapter 8)"))


# ---------------------------------------------------------------- command line

if __name__ == "__main__":  # the check command lives in rmsnorm_fp8_cli.py (it imports this module)
    import runpy

    runpy.run_module("fusedrms.kernels.rmsnorm_fp8_cli", run_name="__main__")
