"""``fp8.fused``'s lean block steps (:func:`divide_per_block`) and their proof: every per-block
division :func:`fusedrms.kernels.rmsnorm_fp8.quantize_tile` makes with ``LEAN`` (the scale
``absmax / 448``, the served multiplier ``448 / absmax``, the exact contract's reciprocal
``1 / scale``), computed by :func:`divide_per_block`'s fast path exactly as the kernel calls it,
against the correctly rounded quotient (fp32 operands divided in float64, then rounded: exact for
division, as 53 >= 2 x 24 + 2), for **every fp32 mantissa** at exponents that span the range the
wrapper allows (an absmax floor of at least 2^-60, up to bf16's largest absmax).

Every operand, quotient and intermediate there is a normal fp32 number, so a check of every
mantissa at one exponent covers every exponent whose intermediates stay normal; the exponents
below add the ends of the range and both sides of the 2^64 rescaling. On a GPU the seed is the
hardware's approximate reciprocal and the check is the proof (~10^8 divisions, well under a
second); the interpreter divides exactly, so there it only exercises the plumbing on a sample.
"""
from __future__ import annotations

from .. import env  # first: decides GPU or interpreter before any @triton.jit

import torch
import triton
import triton.language as tl

from .rmsnorm_fp8_config import LEAN_MIN_FLOOR
from .rmsnorm_fp8_spec import FP8_MAX


@triton.jit
def divide_per_block(a, b, FAST: tl.constexpr):
    """``RN(a / b)`` for per-block values. ``div_rn`` carries a range check
    and a call to a slow path; FAST computes a seed reciprocal (``1.0 / b``,
    approximate on a GPU), one Newton step and one Markstein correction
    instead. That is exact where a, b, 1/b and the quotient are normal fp32
    numbers and the seed is close enough, which
    ``rmsnorm_fp8_lean.lean_division_errors`` checks exhaustively on the
    GPU for every division the quantizer makes. The wrapper allows FAST
    only with an absmax floor of at least 2^-60 (every operand normal) and
    only on a device where that check found no difference.
    """
    if FAST:
        # divisors past 2^64: both operands scaled by 2^-64 (exact, the same
        # quotient), as the seed underflows past 2^126
        big = b > 18446744073709551616.0
        a = tl.where(big, a * 5.421010862427522e-20, a)
        b = tl.where(big, b * 5.421010862427522e-20, b)
        y = 1.0 / b
        y = tl.fma(tl.fma(-b, y, 1.0), y, y)
        q = a * y
        return tl.fma(tl.fma(-q, b, a), y, q)
    else:
        return tl.div_rn(a, b)


# (what is divided, the exponents of the operand that varies): absmax from the floor to bf16's
# largest; the scale RN(absmax / 448) over the same range, 448 = 1.75 x 2^8 lower
DIVISIONS = {"absmax / 448": (-60, -1, 0, 63, 64, 65, 127),
             "448 / absmax": (-60, -1, 0, 63, 64, 65, 127),
             "1 / scale": (-69, -9, 0, 55, 63, 64, 65, 119)}
SAMPLE = 4096  # mantissas per exponent under the interpreter (every one, 2^23, on a GPU)


@triton.jit
def lean_division_kernel(v_ptr, q_ptr, n, FP8_MAX: tl.constexpr, KIND: tl.constexpr,
                         BLOCK: tl.constexpr):
    """q = the division ``KIND`` names of each v, with its constant as quantize_tile passes it:
    0 v / FP8_MAX, 1 FP8_MAX / v, 2 1.0 / v."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    v = tl.load(v_ptr + i, mask=m, other=1.0)
    if KIND == 0:
        q = divide_per_block(v, FP8_MAX, True)
    elif KIND == 1:
        q = divide_per_block(FP8_MAX, v, True)
    else:
        q = divide_per_block(1.0, v, True)
    tl.store(q_ptr + i, q, mask=m)


def mantissas(exponent: int, count: int | None = None, device=None) -> torch.Tensor:
    """fp32 values 2^exponent x (1 + k / 2^23) for every k (or ``count`` of them, evenly spaced,
    both ends included)."""
    k = (torch.arange(1 << 23, dtype=torch.int64) if count is None
         else torch.linspace(0, (1 << 23) - 1, count).round().to(torch.int64))
    bits = ((exponent + 127) << 23) | k
    return bits.to(torch.int32).view(torch.float32).to(device or env.current().device)


def exact_quotient(kind: str, v: torch.Tensor) -> torch.Tensor:
    v64 = v.double()
    q = {"absmax / 448": v64 / FP8_MAX, "448 / absmax": FP8_MAX / v64,
         "1 / scale": 1.0 / v64}[kind]
    return q.float()


def differing_quotients(kind: str, v: torch.Tensor, q: torch.Tensor) -> int:
    """How many of ``q`` differ, bit for bit, from the correctly rounded ``kind`` of ``v``."""
    return int((q.view(torch.int32) != exact_quotient(kind, v).view(torch.int32)).sum())


def lean_division_errors(count: int | None = None, log=None) -> dict:
    """``{division: quotients that differ from the correctly rounded one}`` over every mantissa
    (``count`` per exponent where given; :data:`SAMPLE` under the interpreter) at each of
    :data:`DIVISIONS`' exponents, plus ``"checked"``: how many divisions ran. All zeros: the lean
    block steps compute the same bits as ``div_rn`` wherever the wrapper uses them."""
    e = env.current()
    count = count if count is not None else (None if e.on_gpu else SAMPLE)
    out, checked = {}, 0
    for kind_index, (kind, exponents) in enumerate(DIVISIONS.items()):
        wrong = 0
        for exponent in exponents:
            v = mantissas(exponent, count, e.device)
            if kind != "1 / scale":
                v = v[v >= LEAN_MIN_FLOOR]
            q = torch.empty_like(v)
            block = 1024
            lean_division_kernel[(triton.cdiv(v.numel(), block),)](
                v, q, v.numel(), FP8_MAX=FP8_MAX, KIND=kind_index, BLOCK=block)
            differ = differing_quotients(kind, v, q)
            wrong += differ
            checked += v.numel()
            if log and differ:
                log(f"  lean {kind} at 2^{exponent}: {differ} quotients differ")
        out[kind] = wrong
    out["checked"] = checked
    return out
