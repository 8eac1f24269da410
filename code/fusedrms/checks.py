"""Comparison predicates used by every test, chapter and benchmark in the book.

Tolerances follow from the formats, not from trial and error. For RMSNorm, every output is
``y_i = x_i * r * w_i``: the inputs are exact, so each element's *relative* error is what the
computation adds, whatever the element's size:

- the final cast to the output dtype: at most one unit in the last place, ``2 u_out``
  (round-to-nearest gives half that; the Triton interpreter truncates bf16 casts, which costs a
  whole unit), where ``u = 2**-(mantissa bits + 1)``;
- the fp32 sum of ``n`` squares: about ``sqrt(n) u_32`` for a random-order sum (the worst case is
  ``n u_32``), halved by the square root, plus a few ``u_32`` for rsqrt and the two products.

So ``rtol = 2 u_out + (sqrt(n) + 8) u_32`` and ``atol`` is the output format's smallest normal
number (products that underflow). NaN never passes, except where the reference has NaN in the same
place and the caller asked for ``nan="match"``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# Unit roundoff u = 2^-(p) with p the significand precision including the hidden bit.
UNIT_ROUNDOFF = {
    torch.float64: 2.0 ** -53,
    torch.float32: 2.0 ** -24,
    torch.float16: 2.0 ** -11,
    torch.bfloat16: 2.0 ** -8,
}


def unit_roundoff(dtype: torch.dtype) -> float:
    try:
        return UNIT_ROUNDOFF[dtype]
    except KeyError:
        raise ValueError(f"no unit roundoff known for {dtype}") from None


def tolerance_for(dtype: torch.dtype, n: int) -> tuple[float, float]:
    """(rtol, atol) for an RMSNorm output of ``dtype`` whose rows have ``n`` columns."""
    u32 = UNIT_ROUNDOFF[torch.float32]
    rtol = 2 * unit_roundoff(dtype) + (math.sqrt(max(n, 1)) + 8) * u32
    atol = torch.finfo(dtype).tiny
    return rtol, atol


@dataclass
class Report:
    """What a comparison found. ``ok`` is the verdict; ``message`` says why in one line."""

    ok: bool
    message: str
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    max_ulp: int = 0
    mismatches: int = 0
    worst_index: tuple | None = None

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return ("PASS " if self.ok else "FAIL ") + self.message


def _ordered_ints(t: torch.Tensor) -> torch.Tensor:
    """Map floats to integers whose order and spacing follow the float grid (for ULP distances)."""
    int_type = {torch.float32: torch.int32, torch.float16: torch.int16,
                torch.bfloat16: torch.int16, torch.float64: torch.int64}[t.dtype]
    bits = t.contiguous().view(int_type).to(torch.int64)
    sign_bit = 1 << (torch.finfo(t.dtype).bits - 1)
    return torch.where(bits < 0, -(bits + sign_bit), bits)


def ulp_distance(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Units in the last place between ``actual`` and ``expected`` rounded to actual's dtype."""
    exp = expected.to(actual.dtype)
    return (_ordered_ints(actual) - _ordered_ints(exp)).abs()


def relative_l2(actual: torch.Tensor, expected: torch.Tensor) -> float:
    a, e = actual.double(), expected.double()
    denom = torch.linalg.vector_norm(e).item()
    num = torch.linalg.vector_norm(a - e).item()
    return num / denom if denom > 0 else (0.0 if num == 0 else math.inf)


def _nan_inf_report(actual, expected, nan: str) -> Report | None:
    a_nan, e_nan = torch.isnan(actual), torch.isnan(expected)
    if nan == "never" and a_nan.any():
        idx = tuple(torch.nonzero(a_nan)[0].tolist())
        return Report(False, f"{int(a_nan.sum())} NaN in the output (first at {idx})",
                      mismatches=int(a_nan.sum()), worst_index=idx)
    bad = a_nan != e_nan
    a_inf, e_inf = torch.isinf(actual), torch.isinf(expected)
    bad |= (a_inf != e_inf) | (a_inf & e_inf & (torch.sign(actual) != torch.sign(expected)))
    if bad.any():
        idx = tuple(torch.nonzero(bad)[0].tolist())
        return Report(False, f"{int(bad.sum())} NaN/Inf placed differently from the reference "
                             f"(first at {idx}: got {actual[idx].item()}, "
                             f"expected {expected[idx].item()})",
                      mismatches=int(bad.sum()), worst_index=idx)
    return None


def allclose(actual: torch.Tensor, expected: torch.Tensor, rtol: float | None = None,
             atol: float | None = None, n: int | None = None, nan: str = "never") -> Report:
    """Elementwise ``|a - e| <= atol + rtol |e|``, with tolerances from :func:`tolerance_for`.

    ``expected`` may be float64; it is compared unrounded. ``n`` (the reduction length) defaults to
    the last dimension. ``nan`` is ``"never"`` (any NaN fails) or ``"match"`` (NaN and Inf must sit
    where the reference has them).
    """
    if nan not in ("never", "match"):
        raise ValueError("nan must be 'never' or 'match'")
    if actual.shape != expected.shape:
        return Report(False, f"shape {tuple(actual.shape)} != expected {tuple(expected.shape)}")
    if actual.numel() == 0:
        return Report(True, "empty tensors")
    n = n if n is not None else actual.shape[-1]
    d_rtol, d_atol = tolerance_for(actual.dtype, n)
    rtol = d_rtol if rtol is None else rtol
    atol = d_atol if atol is None else atol
    a, e = actual.detach().cpu(), expected.detach().cpu()
    special = _nan_inf_report(a, e, nan)
    if special is not None:
        return special
    finite = torch.isfinite(e) & torch.isfinite(a)
    a64, e64 = a.double(), e.double()
    err = torch.where(finite, (a64 - e64).abs(), torch.zeros((), dtype=torch.float64))
    bound = atol + rtol * e64.abs()
    over = finite & (err > bound)
    rel = torch.where(finite & (e64 != 0), err / e64.abs(), torch.zeros((), dtype=torch.float64))
    ulp = ulp_distance(torch.where(finite, a, torch.zeros((), dtype=a.dtype)),
                       torch.where(finite, e, torch.zeros((), dtype=e.dtype)))
    worst = tuple(torch.nonzero(err == err.max())[0].tolist())
    stats = dict(max_abs_err=err.max().item(), max_rel_err=rel.max().item(),
                 max_ulp=int(ulp.max().item()), mismatches=int(over.sum()), worst_index=worst)
    if over.any():
        idx = tuple(torch.nonzero(over)[0].tolist())
        return Report(False, f"{stats['mismatches']} of {a.numel()} elements outside "
                             f"rtol={rtol:.2e}, atol={atol:.1e}; first at {idx}: got "
                             f"{a[idx].item():.7g}, expected {e[idx].item():.7g}", **stats)
    return Report(True, f"max rel err {stats['max_rel_err']:.2e} <= rtol {rtol:.2e}, "
                        f"max {stats['max_ulp']} ulp", **stats)


def equal(actual: torch.Tensor, expected: torch.Tensor) -> Report:
    """Bit-for-bit equality, for discrete outputs such as fp8 codes (NaN codes compare as bits)."""
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return Report(False, f"got {tuple(actual.shape)} {actual.dtype}, expected "
                             f"{tuple(expected.shape)} {expected.dtype}")
    if actual.numel() == 0:
        return Report(True, "empty tensors")
    size = actual.element_size()
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size]
    a = actual.detach().cpu().contiguous().view(view)
    e = expected.detach().cpu().contiguous().view(view)
    diff = a != e
    if diff.any():
        idx = tuple(torch.nonzero(diff)[0].tolist())
        return Report(False, f"{int(diff.sum())} of {a.numel()} differ; first at {idx}: got bits "
                             f"{int(a[idx])}, expected {int(e[idx])}", mismatches=int(diff.sum()),
                      worst_index=idx)
    return Report(True, f"all {a.numel()} equal bit for bit")
