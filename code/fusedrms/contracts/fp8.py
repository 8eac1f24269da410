"""FP8 scale conventions of RMSNorm + block quantization, restated in PyTorch.

Every convention here quantizes the same bf16 row ``y`` (chapter 8's normalization step,
:func:`fusedrms.kernels.rmsnorm_fp8_spec.row_rscale`, then ``x * r`` rounded to bf16 and multiplied
by ``w`` in bf16) in blocks of 128 columns, one fp32 scale per block (``value ~= code * scale``).
They differ in three places:

- **Division or reciprocal.** ``q = y / scale`` (one correctly rounded division), ``q = y * (1 /
  scale)`` (a reciprocal, then a product: two roundings), or TransformerEngine's order, which
  computes the multiplier ``max / absmax`` first and stores its reciprocal as the scale.
- **The absmax floor**: what an all-zero block gets. 1e-4 (this book, from DeepSeek-V3's
  reference), 1e-10 (vLLM's and SGLang's group quantization), or none (TransformerEngine: a zero
  absmax gives the multiplier 1).
- **The code format**: e4m3fn (largest finite 448: NVIDIA, and AMD's MI350) or e4m3fnuz (240:
  AMD's MI300); vLLM's ROCm build quantizes to 224, below the largest fnuz value, on purpose.

Codes saturate at the format's largest value before the cast (torch's cast does not).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..kernels import rmsnorm_fp8_spec as spec

FP32 = torch.float32
BF16 = torch.bfloat16
BLOCK_COLS = spec.BLOCK_COLS
E4M3FN = torch.float8_e4m3fn
E4M3FNUZ = torch.float8_e4m3fnuz
FORMAT_MAX = {E4M3FN: 448.0, E4M3FNUZ: 240.0}
QUANTIZERS = ("divide", "reciprocal", "transformer_engine", "multiply")


def normalized(x: torch.Tensor, w: torch.Tensor, eps: float,
               sum_order: str = "float64") -> torch.Tensor:
    """Chapter 8's step 3: ``x * r`` rounded to bf16, times ``w`` in bf16, as (rows, cols);
    ``sum_order`` as :func:`rmsnorm_fp8_spec.row_rscale`'s."""
    x2 = x.reshape(-1, x.shape[-1])
    return (x2.to(FP32) * spec.row_rscale(x2, eps, sum_order)).to(BF16) * w.to(BF16)


def _fp32(value: float, like: torch.Tensor) -> torch.Tensor:
    # a 0-d tensor, not a Python number: on a GPU torch divides by a number as a reciprocal product
    return torch.tensor(value, dtype=FP32, device=like.device)


def quantize(y: torch.Tensor, quantizer: str = "divide", absmax_floor: float = 1e-4,
             fmt: torch.dtype = E4M3FN, fmt_max: float | None = None
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Block codes and scales of the (rows, cols) values ``y``, by ``quantizer``:

    - ``"divide"``: ``scale = absmax / max``, ``q = y / scale``;
    - ``"reciprocal"``: the same scale, ``q = y * (1 / scale)``;
    - ``"transformer_engine"``: ``m = max / absmax`` (1 when absmax is 0), ``q = y * m``,
      ``scale = 1 / m``;
    - ``"multiply"``: ``scale = absmax / max``, ``q = y * (max / absmax)`` (the multiplier
      rounded once: chapter 8's served contract).

    ``absmax`` is floored at ``absmax_floor`` first (0: no floor); ``fmt_max`` defaults to the
    format's largest finite value.
    """
    if quantizer not in QUANTIZERS:
        raise ValueError(f"quantizer must be one of {QUANTIZERS}, got {quantizer!r}")
    top = _fp32(FORMAT_MAX[fmt] if fmt_max is None else fmt_max, y)
    rows, cols = y.shape
    nb = spec.n_blocks(cols)
    blocks = F.pad(y.to(FP32), (0, nb * BLOCK_COLS - cols)).reshape(rows, nb, BLOCK_COLS)
    absmax = blocks.abs().amax(dim=-1)
    if absmax_floor > 0:
        absmax = torch.maximum(absmax, _fp32(absmax_floor, absmax))
    if quantizer == "transformer_engine":
        usable = torch.isfinite(absmax) & (absmax > 0)
        multiplier = torch.where(usable, top / absmax, _fp32(1.0, absmax))
        q = blocks * multiplier[..., None]
        scales = torch.reciprocal(multiplier)
    else:
        scales = absmax / top
        if quantizer == "divide":
            q = blocks / scales[..., None]
        elif quantizer == "multiply":
            q = blocks * (top / absmax)[..., None]
        else:
            q = blocks * torch.reciprocal(scales)[..., None]
    codes = q.clamp(-top, top).to(fmt).reshape(rows, nb * BLOCK_COLS)[:, :cols]
    return codes.contiguous(), scales


def convention(quantizer: str, absmax_floor: float, fmt: torch.dtype = E4M3FN,
               fmt_max: float | None = None, sum_order: str = "float64"):
    """``fn(x, w, eps) -> (codes, scales)`` for one FP8 convention, shaped as the registry's
    ``rmsnorm_fp8`` op returns them."""
    def fn(x: torch.Tensor, w: torch.Tensor, eps: float):
        codes, scales = quantize(normalized(x, w, eps, sum_order), quantizer, absmax_floor, fmt,
                                 fmt_max)
        return (codes.reshape(x.shape),
                scales.reshape(tuple(x.shape[:-1]) + (scales.shape[-1],)))

    fn.__name__ = f"fp8_{quantizer}"
    return fn


# The book's chapter 8 (kernels/rmsnorm_fp8_spec.py), its exact contract: division, floor 1e-4,
# e4m3fn; and its served contract, fp8.fused's default: the pairwise fp32 sum, a multiplier.
divide = convention("divide", spec.ABSMAX_FLOOR)
served = convention("multiply", spec.ABSMAX_FLOOR, sum_order="pairwise")
# vllm-project/vllm csrc/quantization/fp8/per_token_group_quant.cu: local_absmax starts at eps
# (1e-10 from the Python side), y_s = absmax / max_8bit, q = src / y_s.
divide_floor_1e10 = convention("divide", 1e-10)
# flashinfer-ai/flashinfer include/flashinfer/norm.cuh (RMSNormQuantKernel): scale_inv = 1 / scale,
# then a product, here per block with the book's floor.
reciprocal = convention("reciprocal", spec.ABSMAX_FLOOR)
# NVIDIA/TransformerEngine transformer_engine/common/recipe/recipe_common.cuh
# (compute_scale_from_amax: scale = __fdiv_rn(max_fp8, amax), 1 when amax is 0; the stored
# scale_inv is its reciprocal), with its default epsilon 0.
transformer_engine = convention("transformer_engine", 0.0)
# The book's convention on AMD's MI300: e4m3fnuz codes, largest finite value 240.
divide_fnuz = convention("divide", spec.ABSMAX_FLOOR, E4M3FNUZ)
