"""RMSNorm as production implementations compute it, restated in PyTorch.

Each function rounds to the input's dtype exactly where the implementation it restates rounds, and
nowhere else; everything between two roundings is fp32, as in the originals. The originals are
cited by repository and path. Two PyTorch facts the restatements rely on: a bf16 or fp16 product
of two tensors of that dtype is computed in fp32 and rounded once (as ``__hmul2`` and a Triton
product of that dtype do), and ``Tensor.to`` rounds to nearest, ties to even (as a GPU's cast does).

Plain RMSNorm, ``fn(x, w, eps) -> y``:

- :func:`fp32_once`: ``x * r * w`` in fp32, one rounding.
- :func:`llama`: round ``x * r``, multiply by ``w`` in the input dtype (two roundings).
- :func:`gemma`: ``x * r * (1 + w)`` in fp32, one rounding.
- :func:`torch_eps_none`: ``F.rms_norm`` called without ``eps``.
- :func:`liger`: Liger-Kernel's kernel with its three casting modes.

Fused residual add, ``fn(x, residual, w, eps) -> (y, s)`` where ``s`` is the next residual in x's
dtype: :func:`vllm_fused_add`, :func:`flashinfer_fused_add`, :func:`stored_sum_once`.
"""
from __future__ import annotations

import torch

FP32 = torch.float32


def row_scale(v32: torch.Tensor, eps: float) -> torch.Tensor:
    """``r = 1 / sqrt(mean(v^2) + eps)`` per row, in fp32 (every convention's scale)."""
    return torch.rsqrt((v32 * v32).mean(dim=-1, keepdim=True) + eps)


# ---------------------------------------------------------------- plain RMSNorm

def fp32_once(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """``x * r * w`` in fp32, rounded once to x's dtype.

    Restates NVIDIA/TransformerEngine
    ``transformer_engine/common/normalization/rmsnorm/rmsnorm_fwd_kernels.cuh``
    (``rmsnorm_fwd_tuned_kernel``: ``y_ij = rs * x``, ``g_ij * y_ij`` in ``compute_t``, one cast to
    ``output_t``). Also flashinfer-ai/flashinfer ``include/flashinfer/norm.cuh``
    (``RMSNormKernel``), pytorch/pytorch ``aten/src/ATen/native/layer_norm.cpp``
    (``rms_norm_composite``: the weight multiplied in the opmath type, ``type_as`` at the end)
    and this book's :func:`fusedrms.reference.rmsnorm`.
    """
    x32 = x.to(FP32)
    return (x32 * row_scale(x32, eps) * w.to(FP32)).to(x.dtype)


def llama(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """``x * r`` rounded to x's dtype, then multiplied by ``w`` in that dtype: two roundings.

    Restates huggingface/transformers ``src/transformers/models/llama/modeling_llama.py``
    (``LlamaRMSNorm.forward``: ``self.weight * hidden_states.to(input_dtype)``; Qwen2's and
    Qwen3's RMSNorm are the same code). Also vllm-project/vllm ``csrc/layernorm_kernels.cu``
    (``rms_norm_kernel``: ``((scalar_t)(x * s_variance)) * weight[idx]``) and Liger-Kernel's
    casting mode ``"llama"``.
    """
    x32 = x.to(FP32)
    normed = (x32 * row_scale(x32, eps)).to(x.dtype)  # first rounding
    return (normed * w.to(x.dtype)).to(x.dtype)  # second: the product in x's dtype


def gemma(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """``x * r * (1 + w)`` in fp32, rounded once: the weight is stored as an offset from 1.

    Restates huggingface/transformers ``src/transformers/models/gemma/modeling_gemma.py``
    (``GemmaRMSNorm.forward``: ``output * (1.0 + self.weight.float())``, then ``type_as(x)``).
    Also FlashInfer's ``GemmaRMSNorm`` (``weight_bias = 1.f`` in ``norm.cuh``), Liger-Kernel's
    casting mode ``"gemma"`` with ``offset=1.0`` and TransformerEngine's ``zero_centered_gamma``.
    """
    x32 = x.to(FP32)
    return (x32 * row_scale(x32, eps) * (1.0 + w.to(FP32))).to(x.dtype)


def default_eps(dtype: torch.dtype) -> float:
    """The eps ``F.rms_norm`` uses when none is given: the machine epsilon of the type it computes
    in, fp32's (1.19e-7) for bf16, fp16 and fp32 inputs, fp64's for fp64."""
    return torch.finfo(torch.float64 if dtype == torch.float64 else FP32).eps


def torch_eps_none(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """``F.rms_norm(x, shape, w)`` with no eps: the ``eps`` argument is ignored.

    Restates pytorch/pytorch ``aten/src/ATen/native/layer_norm.cpp`` (``rms_norm_composite``:
    ``eps.value_or(std::numeric_limits<float>::epsilon())`` for fp32 opmath), as the
    ``F.rms_norm`` docstring of PyTorch 2.13 states: not the input dtype's epsilon (bf16's is
    0.0078), fp32's. Rounding as :func:`fp32_once`.
    """
    return fp32_once(x, w, default_eps(x.dtype))


LIGER_MODES = ("llama", "gemma", "none")


def _tree_sum(v: torch.Tensor) -> torch.Tensor:
    """Sum of the last dimension in v's own dtype, halving pairwise (a reduction tree over a
    power-of-two block, every partial sum rounded)."""
    width = 1 << max(v.shape[-1] - 1, 0).bit_length()
    v = torch.nn.functional.pad(v, (0, width - v.shape[-1]))
    while v.shape[-1] > 1:
        half = v.shape[-1] // 2
        v = v[..., :half] + v[..., half:]
    return v


def liger(x: torch.Tensor, w: torch.Tensor, eps: float, offset: float = 0.0,
          casting_mode: str = "llama") -> torch.Tensor:
    """Liger-Kernel's RMSNorm forward, ``y = x * rstd * (offset + w)``, in one of its casting
    modes.

    Restates linkedin/Liger-Kernel ``src/liger_kernel/ops/rms_norm.py``
    (``_rms_norm_forward_kernel``):

    - ``"llama"``: x in fp32 for the scale, ``x * rstd`` cast back to x's dtype, then multiplied by
      ``offset + w`` (fp32: ``offset`` is pinned to fp32) and stored, a second rounding;
    - ``"gemma"``: x and w in fp32 throughout, one rounding at the end;
    - ``"none"``: every operation in x's dtype, eps and offset too. The order of the bf16 sum is
      the compiler's; this restatement adds pairwise and takes rsqrt in fp32, rounded.
    """
    if casting_mode not in LIGER_MODES:
        raise ValueError(f"casting_mode must be one of {LIGER_MODES}, got {casting_mode!r}")
    dtype, cols = x.dtype, x.shape[-1]
    if casting_mode == "none":
        xd, wd = x, w.to(dtype)
        eps_d = torch.tensor(eps, dtype=FP32).to(dtype)
        offset_d = torch.tensor(offset, dtype=FP32).to(dtype)
        mean_square = _tree_sum(xd * xd) / cols
        rstd = torch.rsqrt((mean_square + eps_d.to(x.device)).to(FP32)).to(dtype)
        return (xd * rstd) * (offset_d.to(x.device) + wd)
    x32 = x.to(FP32)
    rstd = row_scale(x32, eps)
    if casting_mode == "llama":
        normed = (x32 * rstd).to(dtype)
        return (normed.to(FP32) * (offset + w.to(FP32))).to(dtype)
    return (x32 * rstd * (offset + w.to(FP32))).to(dtype)


# ---------------------------------------------------------------- fused residual add

def _rounded_sum(x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """``x + residual`` added in fp32 (exact for two bf16 or fp16 values of similar size) and
    rounded once to x's dtype."""
    return (x.to(FP32) + residual.to(FP32)).to(x.dtype)


def vllm_fused_add(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """The sum rounded and stored, the rounded sum normalized, y rounded twice.

    Restates vllm-project/vllm ``csrc/layernorm_kernels.cu`` (``fused_add_rms_norm_kernel``:
    ``z += residual`` in ``scalar_t``, ``residual = z``, then ``(scalar_t)(x * s_variance)`` times
    the weight; the vectorized variant's ``_f16Vec`` operators in ``csrc/type_convert.cuh`` round
    the same three times). Also Liger-Kernel's ``fused_add_rms_norm`` in casting mode ``"llama"``
    and the eager chain ``h = x + residual; LlamaRMSNorm(h)`` in a bf16 model.
    """
    s = _rounded_sum(x, residual)
    return llama(s, w, eps), s


def flashinfer_fused_add(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """The fp32 sum normalized and rounded once; only the stored copy of the sum is rounded.

    Restates flashinfer-ai/flashinfer ``include/flashinfer/norm.cuh``
    (``FusedAddRMSNormKernel``: ``x += float(residual)``, ``residual = (T)x`` stored, the fp32 x
    kept in shared memory, then ``x * rms_rcp * (weight_bias + w)`` with one cast). Also this
    book's :func:`fusedrms.reference.add_rmsnorm` for y.
    """
    s32 = x.to(FP32) + residual.to(FP32)
    y = (s32 * row_scale(s32, eps) * w.to(FP32)).to(x.dtype)
    return y, s32.to(x.dtype)


def stored_sum_once(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """The sum rounded and stored, the rounded sum normalized, y rounded once.

    Restates this book's :func:`fusedrms.reference.add_rmsnorm_residual` (chapter 7's choice:
    vLLM's sum, one rounding of y). Also ``F.rms_norm(x + residual, shape, w)`` and Liger-Kernel's
    ``fused_add_rms_norm`` in casting mode ``"gemma"`` with ``offset=0``.
    """
    s = _rounded_sum(x, residual)
    return fp32_once(s, w, eps), s
