"""The specification of chapter 8's RMSNorm + FP8 block quantization, in PyTorch: the constants,
the bit-exact reference that the kernels of :mod:`fusedrms.kernels.rmsnorm_fp8` must match, its
comparison rule (:func:`compare`) and the inputs the checks draw (:func:`make_inputs`).

Each row is normalized, multiplied by the weight ``gamma`` and quantized in blocks of 128 columns to
fp8 e4m3 codes, with one fp32 scale per block (``value ~= code * scale``). Where the numbers come
from (DeepSeek-V3's ``config.json``, excerpt in :data:`DEEPSEEK_V3_CONFIG`): ``hidden_size`` 7168
is the row width, ``quantization_config.weight_block_size`` ``[128, 128]`` the block, ``fmt``
``"e4m3"`` the code format (largest finite value 448), ``rms_norm_eps`` 1e-6 the epsilon.

The operation order is part of the specification, because the codes are checked bit for bit
(:func:`reference`):

1. upcast x (bf16) to fp32; square (exact for bf16 inputs) and sum the squares in **float64**, so
   the sum does not depend on the order of additions (torch and Triton add in different orders;
   an fp32 sum would move about one normalized value in 10^5 by a bf16 step); round the sum to
   fp32 and divide by the column count in fp32;
2. ``r = 1 / sqrt(mean + eps)`` with a correctly rounded square root and division (the hardware
   ``rsqrt`` of torch and Triton on a GPU is approximate and the two differ);
3. cast ``x * r`` to bf16 (round to nearest even), multiply by gamma in bf16 (one rounding);
4. upcast; per 128-column block ``absmax``, floored at ``absmax_floor``; ``scale = absmax / 448``;
5. ``q = y / scale`` (correctly rounded division, never ``y * (1/scale)`` alone; the kernels may get
   the same quotient from one reciprocal per block and two fma corrections,
   :func:`fusedrms.kernels.rmsnorm_fp8.divide_by_block_scale`), clamp to +-448 (torch's
   ``.to(float8_e4m3fn)`` does not saturate: 464 and above become NaN), cast to e4m3, nearest even.

These five steps are the ``"exact"`` contract, the chapter's teaching reference. The library's
kernels default to the ``"served"`` contract (:data:`CONTRACTS`), which changes two steps and is
checked bit for bit just the same: step 1 sums the squares in fp32 by a stated pairwise tree
(:func:`pairwise_sum_of_squares`), and step 5 computes ``q = y * RN(448 / absmax)``, the form
of DeepGEMM's reference cast ``x * (448 / amax)``, with the scale still ``RN(absmax / 448)``.

Decisions (documented in the chapter):

- **Zero blocks.** With no floor an all-zero block has scale 0 and ``0 / 0`` gives NaN codes. The
  default floors absmax at ``1e-4`` (DeepSeek-V3's reference code; SGLang uses 1e-10), so scales
  are never 0. Pass ``absmax_floor=0.0`` for the unprotected behaviour.
- **NaN and Inf.** NaN in, NaN out: a block whose values hold a NaN or an Inf gets a NaN scale and
  NaN codes throughout (absmax keeps a NaN, where ``tl.max`` would drop it; a non-finite absmax
  makes the scale NaN, one compare per block). A NaN or Inf in x, or a row whose fp32 sum of
  squares overflows (rms above about 1.8e19 / sqrt(cols)), makes ``r`` NaN and so every block of
  the row; a NaN or Inf in gamma (or a product past bf16's range) poisons only its own block.
- **Widths that are not a multiple of 128** are accepted: the last block is partial (its missing
  columns count as zeros for the absmax and are not stored), and there are ``ceil(cols / 128)``
  scales per row. The kernels take rows of up to ``rmsnorm_fp8.MAX_COLS`` columns (the fused
  kernel keeps a row on chip).
- **Inputs** are bf16 x and bf16 gamma, the format of the models this step serves.
"""
from __future__ import annotations

import numbers

import torch
import torch.nn.functional as F

from .. import checks, env, validation
from .. import reference as reference_module  # `reference` below is this module's specification

# Excerpt of DeepSeek-V3's config.json: the fields this step's constants come from.
DEEPSEEK_V3_CONFIG = {
    "hidden_size": 7168,
    "rms_norm_eps": 1e-06,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                            "quant_method": "fp8", "weight_block_size": [128, 128]},
}
HIDDEN_SIZE = DEEPSEEK_V3_CONFIG["hidden_size"]
BLOCK_COLS = DEEPSEEK_V3_CONFIG["quantization_config"]["weight_block_size"][1]
RMS_NORM_EPS = DEEPSEEK_V3_CONFIG["rms_norm_eps"]
FP8_DTYPE = torch.float8_e4m3fn  # "e4m3": 4 exponent bits, 3 mantissa bits, no infinities
FP8_MAX = float(torch.finfo(FP8_DTYPE).max)  # 448.0
ABSMAX_FLOOR = 1e-4  # DeepSeek-V3's floor; SGLang uses 1e-10; 0.0 means none

FP32 = torch.float32
BF16 = torch.bfloat16


# ---------------------------------------------------------------- the reference

def n_blocks(cols: int, block_cols: int = BLOCK_COLS) -> int:
    """Scales per row: ``ceil(cols / block_cols)``."""
    for name, value, least in (("cols", cols, 0), ("block_cols", block_cols, 1)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
            raise validation.InputError(f"{name} must be a whole number >= {least}, got {value!r}.")
    return -(-cols // block_cols)


def _full(like: torch.Tensor, value: float) -> torch.Tensor:
    # A 0-d tensor on the same device, not a Python number: torch on CUDA divides by a Python
    # number as "multiply by its reciprocal", which is not a correctly rounded division.
    return torch.tensor(value, dtype=FP32, device=like.device)


SUM_ORDERS = ("float64", "pairwise")  # step 1 as specified, and the stated fp32 departure
DIVISIONS = ("exact", "reciprocal")  # step 5 as specified, and the stated departure
# Two contracts, each bit for bit: "exact", the chapter's teaching specification, and "served",
# the library's (an fp32 sum by a stated tree, and q = y * RN(448 / absmax), the form of
# DeepGEMM's reference cast), which chapter 8's price list chose: it moves 0.02% of the codes.
CONTRACTS = {"exact": {"sum_order": "float64", "division": "exact"},
             "served": {"sum_order": "pairwise", "division": "reciprocal"}}
DEFAULT_CONTRACT = "served"


def contract_steps(contract: str) -> dict:
    """``{"sum_order": ..., "division": ...}`` of a contract; a clear error for an unknown one."""
    _check_choice("contract", contract, tuple(CONTRACTS))
    return CONTRACTS[contract]


def pairwise_sum_of_squares(xf: torch.Tensor) -> torch.Tensor:
    """The fp32 sum of each row's squares by the stated tree: zeros appended up to a power of two,
    then neighbours added, (0, 1), (2, 3), ..., level by level (``rows x 1``). Adding zeros and
    adding two numbers are exact-order operations, so every processor gets these bits."""
    t = xf * xf
    width = 1 << max(0, t.shape[-1] - 1).bit_length()
    t = F.pad(t, (0, width - t.shape[-1]))
    while t.shape[-1] > 1:
        t = t[..., 0::2] + t[..., 1::2]
    return t


def row_rscale(x2: torch.Tensor, eps: float,
               sum_order: str = "float64") -> torch.Tensor:
    """r = 1 / sqrt(mean(x^2) + eps) per row, fp32, in the specified order
    (steps 1-2); ``sum_order="pairwise"``: step 1 in fp32 by the stated
    tree."""
    xf = x2.to(FP32)
    if sum_order == "pairwise":
        sum_sq = pairwise_sum_of_squares(xf)
    else:
        # order-free up to 2^-53
        sum_sq = (xf * xf).to(torch.float64).sum(dim=-1, keepdim=True)
        sum_sq = sum_sq.to(FP32)
    denominator = sum_sq / _full(xf, x2.shape[-1]) + _full(xf, eps)
    return reference_module.loud(torch.reciprocal(torch.sqrt(denominator)),
                                 sum_sq, denominator)


def quantize_blocks(y: torch.Tensor, absmax_floor: float = ABSMAX_FLOOR,
                    block_cols: int = BLOCK_COLS, division: str = "exact"
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-block scales and e4m3 codes of the (rows, cols) values ``y``
    (steps 4-5); ``division="reciprocal"``: q = y * RN(448 / absmax)."""
    rows, cols = y.shape
    nb = n_blocks(cols, block_cols)
    # a partial last block: zeros
    held = F.pad(y.to(FP32), (0, nb * block_cols - cols))
    blocks = held.reshape(rows, nb, block_cols)
    absmax = blocks.abs().amax(dim=-1)  # NaN if the block holds one
    finite = torch.isfinite(absmax)
    if absmax_floor > 0:
        absmax = torch.maximum(absmax, _full(absmax, absmax_floor))
    scales = torch.where(finite, absmax / _full(absmax, FP8_MAX),
                         _full(absmax, float("nan")))
    if division == "reciprocal":
        inv = torch.where(finite, _full(absmax, FP8_MAX) / absmax,
                          _full(absmax, float("nan")))
        q = blocks * inv[..., None]
    else:
        q = blocks / scales[..., None]
    # clamp first: the cast does not saturate
    q = q.clamp(-FP8_MAX, FP8_MAX)
    codes = q.to(FP8_DTYPE).reshape(rows, nb * block_cols)[:, :cols]
    return codes.contiguous(), scales


def _check_choice(name: str, value, allowed: tuple) -> None:
    if value not in allowed:
        raise validation.InputError(f"{name} must be one of {', '.join(map(repr, allowed))}, "
                                    f"got {value!r}.")


def check_inputs(x, w, eps, absmax_floor, device=None):
    """Validate; returns (x2 rows x cols, w, eps, floor, out_shape)."""
    validation.check_tensor(x, "x", dtypes=(BF16,))
    if device is not None:
        validation.check_device(x, device, "x")
    shape = tuple(x.shape)
    x2 = validation.as_rows(x, "x")
    cols = x2.shape[1]
    validation.check_tensor(w, "w", dtypes=(BF16,))
    w = validation.check_weight(w, cols, x2.device, "w")
    eps = validation.check_eps(eps)
    return x2, w, eps, validation.check_absmax_floor(absmax_floor), shape


def reference(x, w, eps: float = RMS_NORM_EPS,
              absmax_floor: float = ABSMAX_FLOOR, *,
              contract: str = DEFAULT_CONTRACT, sum_order: str | None = None,
              division: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A contract in PyTorch: ``(codes e4m3 of x's shape, scales fp32
    (..., blocks))``. ``contract`` (:data:`CONTRACTS`) sets step 1's
    ``sum_order`` and step 5's ``division``; either can be set on its own
    (chapter 8 prices each: :func:`pairwise_sum_of_squares`; q = y *
    RN(448 / absmax)), and every combination is checked bit for bit."""
    steps = contract_steps(contract)
    sum_order = steps["sum_order"] if sum_order is None else sum_order
    division = steps["division"] if division is None else division
    _check_choice("sum_order", sum_order, SUM_ORDERS)
    _check_choice("division", division, DIVISIONS)
    x2, w, eps, floor, shape = check_inputs(x, w, eps, absmax_floor)
    # step 3: one rounding to bf16 ...
    normed = (x2.to(FP32) * row_rscale(x2, eps, sum_order)).to(BF16)
    y = normed * w  # ... then gamma in bf16 (exact product, rounded once)
    codes, scales = quantize_blocks(y, floor, division=division)
    return (codes.reshape(shape),
            scales.reshape(shape[:-1] + (scales.shape[-1],)))


def reference_reordered(x, w, eps: float = RMS_NORM_EPS, absmax_floor: float = ABSMAX_FLOOR
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """The same formula in another order: ``x * r * gamma`` in fp32, one cast to bf16 at the end
    (the book's RMSNorm convention of chapter 1). Mathematically equal; not bit-equal."""
    x2, w, eps, floor, shape = check_inputs(x, w, eps, absmax_floor)
    y = (x2.to(FP32) * row_rscale(x2, eps) * w.to(FP32)).to(BF16)
    codes, scales = quantize_blocks(y, floor)
    return codes.reshape(shape), scales.reshape(shape[:-1] + (scales.shape[-1],))


# ---------------------------------------------------------------- comparison rule

def code_bits(codes: torch.Tensor) -> torch.Tensor:
    return codes.detach().cpu().contiguous().view(torch.uint8)


def differing_codes(codes: torch.Tensor, ref_codes: torch.Tensor) -> int:
    """How many codes differ bit for bit, except that a NaN code matches any NaN code.

    NaN codes appear only without an absmax floor (an all-zero block: 0 / 0); the sign of that NaN
    is the platform's (x86 CPUs give a negative NaN, CUDA a positive one), so it is not compared.
    """
    a, e = code_bits(codes).to(torch.int16), code_bits(ref_codes).to(torch.int16)
    a_nan, e_nan = (a & 0x7F) == 0x7F, (e & 0x7F) == 0x7F
    return int(((a != e) & ~(a_nan & e_nan)).sum())


def compare(codes, scales, ref_codes, ref_scales, scale_rtol: float = 1e-6) -> checks.Report:
    """The chapter's rule: codes equal bit for bit (NaN codes by position), scales allclose.

    Scales use ``rtol=1e-6`` and no absolute tolerance (a floored scale is 2.2e-7, so an absolute
    1e-6 would accept anything); NaN scales must sit where the reference has them.
    """
    scale_rtol = validation.check_tolerance(scale_rtol, "scale_rtol")
    if codes.shape != ref_codes.shape or codes.dtype != ref_codes.dtype:
        return checks.Report(False, f"codes: got {tuple(codes.shape)} {codes.dtype}, expected "
                                    f"{tuple(ref_codes.shape)} {ref_codes.dtype}")
    if scales.shape != ref_scales.shape or scales.dtype != ref_scales.dtype:
        return checks.Report(False, f"scales: got {tuple(scales.shape)} {scales.dtype}, expected "
                                    f"{tuple(ref_scales.shape)} {ref_scales.dtype}")
    n_diff = differing_codes(codes, ref_codes)
    if scales.numel():
        scale_report = checks.allclose(scales.float().cpu(), ref_scales.float().cpu(),
                                       rtol=scale_rtol, atol=0.0, nan="match")
    else:
        scale_report = checks.Report(True, "no scales")
    codes_msg = (f"all {codes.numel()} codes equal bit for bit" if n_diff == 0 else
                 f"{n_diff} of {codes.numel()} codes differ")
    ok = n_diff == 0 and scale_report.ok
    if n_diff:
        diff = code_bits(codes) != code_bits(ref_codes)
        where = tuple(torch.nonzero(diff)[0].tolist())
        codes_msg += (f" (first at {where}: got {float(codes.float().cpu()[where])}, expected "
                      f"{float(ref_codes.float().cpu()[where])})")
    return checks.Report(ok, f"{codes_msg}; scales: {scale_report}", mismatches=n_diff,
                         max_abs_err=scale_report.max_abs_err,
                         max_rel_err=scale_report.max_rel_err)


# ---------------------------------------------------------------- inputs for checks

def make_inputs(rows: int, cols: int, seed: int = 0, device=None, zero_block: bool = False):
    """Random bf16 x (N(0,1) with a few large outliers per row, as activations have) and gamma
    (around 1). Drawn on the CPU so every machine gets the same numbers. ``zero_block`` zeroes
    columns 0..127 of row 0 (an all-zero block, the 0/0 case)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g)
    if cols >= 8:
        spikes = torch.randint(0, cols, (rows, max(1, cols // 512)), generator=g)
        x.scatter_(1, spikes, 20.0 * torch.randn(spikes.shape, generator=g))
    if zero_block and rows:
        x[0, :BLOCK_COLS] = 0.0
    w = 1.0 + 0.1 * torch.randn(cols, generator=g)
    device = device or env.current().device
    return x.to(BF16).to(device), w.to(BF16).to(device)

