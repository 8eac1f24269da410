"""The named contracts: which restatement, for which op, restating which implementation.

A contract is a function with a registry op's signature (:mod:`fusedrms.registry`) that rounds
where a production implementation rounds. ``add_rmsnorm`` (y only) has no contracts of its own:
it is compared with the ``add_rmsnorm_residual`` contracts' y.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from . import conventions as C
from . import fp8


@dataclass(frozen=True)
class Contract:
    name: str
    op: str  # a registry op: rmsnorm, add_rmsnorm_residual, rmsnorm_fp8
    fn: Callable
    rounds: str  # where it rounds, in one line
    source: str  # the implementation it restates: repository and path
    also: tuple = field(default=())  # other implementations that round the same way
    origin: str = ""  # the implementation it restates, in a few words (for a page)


CONTRACTS: dict[str, Contract] = {c.name: c for c in (
    Contract("fp32_once", "rmsnorm", C.fp32_once,
             "x * r * w in fp32, one rounding",
             "NVIDIA/TransformerEngine transformer_engine/common/normalization/rmsnorm/"
             "rmsnorm_fwd_kernels.cuh",
             ("FlashInfer RMSNorm", "F.rms_norm", "Liger casting mode gemma, offset 0",
              "this book's kernels"),
             origin="TransformerEngine's RMSNorm"),
    Contract("llama", "rmsnorm", C.llama,
             "x * r rounded, then times w in the input dtype: two roundings",
             "huggingface/transformers src/transformers/models/llama/modeling_llama.py",
             ("Qwen2 and Qwen3 RMSNorm", "vLLM rms_norm", "Liger casting mode llama"),
             origin="Hugging Face's LlamaRMSNorm"),
    Contract("gemma", "rmsnorm", C.gemma,
             "x * r * (1 + w) in fp32, one rounding",
             "huggingface/transformers src/transformers/models/gemma/modeling_gemma.py",
             ("FlashInfer GemmaRMSNorm", "Liger casting mode gemma, offset 1",
              "TransformerEngine zero_centered_gamma"),
             origin="Hugging Face's GemmaRMSNorm"),
    Contract("torch_eps_none", "rmsnorm", C.torch_eps_none,
             "as fp32_once, with eps = fp32's machine epsilon whatever the caller passes",
             "pytorch/pytorch aten/src/ATen/native/layer_norm.cpp (F.rms_norm without eps)",
             origin="F.rms_norm without eps"),
    Contract("liger_none", "rmsnorm", lambda x, w, eps: C.liger(x, w, eps, casting_mode="none"),
             "every step in the input dtype, the sum of squares too",
             "linkedin/Liger-Kernel src/liger_kernel/ops/rms_norm.py (casting mode none)",
             origin="Liger-Kernel, casting mode none"),
    Contract("vllm_fused_add", "add_rmsnorm_residual", C.vllm_fused_add,
             "s = x + r rounded and stored; the rounded s normalized; y rounded twice",
             "vllm-project/vllm csrc/layernorm_kernels.cu (fused_add_rms_norm)",
             ("Liger fused_add_rms_norm, casting mode llama", "eager add, then LlamaRMSNorm"),
             origin="vLLM's fused_add_rms_norm"),
    Contract("flashinfer_fused_add", "add_rmsnorm_residual", C.flashinfer_fused_add,
             "the fp32 sum normalized, y rounded once; only the stored s is rounded",
             "flashinfer-ai/flashinfer include/flashinfer/norm.cuh (FusedAddRMSNorm)",
             ("this book's add_rmsnorm reference (y)",),
             origin="FlashInfer's FusedAddRMSNorm"),
    Contract("stored_sum_once", "add_rmsnorm_residual", C.stored_sum_once,
             "s = x + r rounded and stored; the rounded s normalized; y rounded once",
             "this book's reference.add_rmsnorm_residual (chapter 7)",
             ("F.rms_norm(x + r, w)", "Liger fused_add_rms_norm, casting mode gemma, offset 0"),
             origin="this book's chapter 7"),
    Contract("fp8_divide", "rmsnorm_fp8", fp8.divide,
             "scale = max(absmax, 1e-4) / 448; q = y / scale; e4m3fn",
             "this book's kernels/rmsnorm_fp8_spec.py, contract='exact' (chapter 8)",
             origin="chapter 8's exact contract"),
    Contract("fp8_served", "rmsnorm_fp8", fp8.served,
             "fp32 pairwise sum; scale = max(absmax, 1e-4) / 448; q = y * (448 / absmax); e4m3fn",
             "this book's kernels/rmsnorm_fp8_spec.py, contract='served' (chapter 8)",
             origin="chapter 8's served contract"),
    Contract("fp8_divide_floor_1e-10", "rmsnorm_fp8", fp8.divide_floor_1e10,
             "scale = max(absmax, 1e-10) / 448; q = y / scale; e4m3fn",
             "vllm-project/vllm csrc/quantization/fp8/per_token_group_quant.cu",
             ("SGLang per_token_group_quant_fp8",),
             origin="vLLM's per-token-group quantization"),
    Contract("fp8_reciprocal", "rmsnorm_fp8", fp8.reciprocal,
             "scale = max(absmax, 1e-4) / 448; q = y * (1 / scale); e4m3fn",
             "flashinfer-ai/flashinfer include/flashinfer/norm.cuh (RMSNormQuant, per tensor)",
             origin="FlashInfer's RMSNormQuant"),
    Contract("fp8_transformer_engine", "rmsnorm_fp8", fp8.transformer_engine,
             "m = 448 / absmax (1 if absmax is 0); q = y * m; scale = 1 / m; e4m3fn",
             "NVIDIA/TransformerEngine transformer_engine/common/recipe/recipe_common.cuh",
             origin="TransformerEngine's scale from amax"),
    Contract("fp8_divide_fnuz", "rmsnorm_fp8", fp8.divide_fnuz,
             "as fp8_divide, in e4m3fnuz (largest finite 240, AMD MI300)",
             "this book's convention in AMD's MI300 format (torch.float8_e4m3fnuz)",
             origin="chapter 8 in MI300's format"),
)}

# the ops identify compares, and whose contracts each is compared with
CONTRACT_OP = {"rmsnorm": "rmsnorm", "add_rmsnorm": "add_rmsnorm_residual",
               "add_rmsnorm_residual": "add_rmsnorm_residual", "rmsnorm_fp8": "rmsnorm_fp8"}


def names(op: str | None = None) -> list[str]:
    """The contracts' names, all or those a kernel of ``op`` is compared with."""
    want = CONTRACT_OP.get(op, op)
    return [n for n, c in CONTRACTS.items() if op is None or c.op == want]


def get(name) -> Contract:
    """A contract by name (a :class:`Contract` is returned as is)."""
    from ..validation import InputError

    if isinstance(name, Contract):
        return name
    if name not in CONTRACTS:
        raise InputError(f"no contract named {name!r}; known: {', '.join(CONTRACTS)}")
    return CONTRACTS[name]
