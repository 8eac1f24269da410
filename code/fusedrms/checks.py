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

Unwritten outputs: :func:`poison` fills a buffer with a NaN whose bit pattern no arithmetic
produces (:data:`POISON_BITS`); :func:`allclose` and :func:`equal` report elements that still hold
it as *unwritten* before anything else. :func:`poisoned_allocations` poisons every buffer a wrapper
allocates with ``torch.empty*`` while it runs, so wrappers need no extra argument to be checked.
"""
from __future__ import annotations

import contextlib
import functools
import math
import numbers
from dataclasses import dataclass

import torch

from .validation import InputError, check_tolerance

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


def tolerance_terms(dtype: torch.dtype, n: int) -> dict:
    """The pieces of :func:`tolerance_for`, by name, for a page that explains them.

    ``cast``: one unit in the last place of ``dtype`` (``2 u_out``); ``reduction``: the fp32 sum of
    ``n`` squares plus rsqrt and two products (``(sqrt(n) + 8) u_32``); ``rtol`` their sum; ``atol``
    the smallest normal number of ``dtype``.
    """
    u32 = UNIT_ROUNDOFF[torch.float32]
    cast = 2 * unit_roundoff(dtype)
    reduction = (math.sqrt(max(int(n), 1)) + 8) * u32
    return {"cast": cast, "reduction": reduction, "rtol": cast + reduction,
            "atol": float(torch.finfo(dtype).tiny)}


def tolerance_for(dtype: torch.dtype, n: int) -> tuple[float, float]:
    """(rtol, atol) for an RMSNorm output of ``dtype`` whose rows have ``n`` columns.

    ``rtol = 2 u_out + (sqrt(n) + 8) u_32``: one ulp of the output format for the final cast plus
    the fp32 reduction's error, estimated for rounding errors of random sign (a sum added one term
    after another can exceed it; its worst case grows like n u_32). One ulp, not half, because the reference is rounded to the output
    format too (``reference.rmsnorm`` returns x's dtype): two values each rounded to the nearest can
    be neighbours, one ulp apart, and so can a truncated one (the Triton interpreter's bf16 cast)
    and a rounded one. ``atol`` is the output format's smallest normal number.
    fp16, n = 4096: 9.77e-4 + 4.3e-6; bf16: 7.81e-3 + 4.3e-6; fp32: 1.19e-7 + 4.3e-6.
    """
    terms = tolerance_terms(dtype, n)
    return terms["rtol"], terms["atol"]


@dataclass
class Report:
    """What a comparison found. ``ok`` is the verdict; ``message`` says why in one line.

    ``worst_share`` is the largest ``|a - e| / bound`` over the elements (1 is at the bound) and
    ``worst_index`` where it is; ``max_rel_err`` alone says little near ``atol`` or with a ``scale``.
    """

    ok: bool
    message: str
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    max_ulp: int = 0
    mismatches: int = 0
    worst_index: tuple | None = None
    rel_l2: float = 0.0
    unwritten: int = 0  # elements that still hold the poison value
    worst_share: float = 0.0

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return ("PASS " if self.ok else "FAIL ") + self.message


def _ordered_ints(t: torch.Tensor) -> torch.Tensor:
    """Map floats to integers whose order and spacing follow the float grid (for ULP distances)."""
    int_type = {torch.float32: torch.int32, torch.float16: torch.int16,
                torch.bfloat16: torch.int16, torch.float64: torch.int64,
                torch.float8_e4m3fn: torch.int8, torch.float8_e5m2: torch.int8}[t.dtype]
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


# ---- poison: find the outputs a kernel never wrote ----

# NaNs with a payload that arithmetic does not produce (computed NaNs are the canonical quiet NaN
# or carry an input's payload), so an element holding exactly these bits was never written.
# fp8 e4m3fn has only two NaN codes and x86 CPUs produce 0xFF: there, poison is only told apart
# from a computed NaN by the reference (unwritten = poison where the reference is not NaN).
POISON_BITS = {
    torch.float64: (torch.int64, 0x7FF4A5A5A5A5A5A5),
    torch.float32: (torch.int32, 0x7FA5A5A5),
    torch.float16: (torch.int16, 0x7E5A),
    torch.bfloat16: (torch.int16, 0x7FA5),
    torch.float8_e4m3fn: (torch.uint8, 0xFF),
    torch.float8_e5m2: (torch.uint8, 0xFE),
}


def poison(t: torch.Tensor) -> torch.Tensor:
    """Fill ``t`` in place with the poison NaN of its dtype (other dtypes are left alone)."""
    if t.dtype in POISON_BITS and t.numel() > 0:
        int_type, bits = POISON_BITS[t.dtype]
        t.view(int_type).fill_(bits)
    return t


def poisoned(shape, dtype: torch.dtype, device="cpu") -> torch.Tensor:
    """A new tensor full of poison."""
    return poison(torch.empty(shape, dtype=dtype, device=device))


def is_poison(t: torch.Tensor) -> torch.Tensor:
    """Boolean mask of the elements that still hold the poison value."""
    if t.dtype not in POISON_BITS:
        return torch.zeros(t.shape, dtype=torch.bool, device=t.device)
    int_type, bits = POISON_BITS[t.dtype]
    return t.view(int_type) == torch.tensor(bits, dtype=int_type).to(t.device)


@contextlib.contextmanager
def poisoned_allocations():
    """Inside the block, ``torch.empty``, ``empty_like``, ``empty_strided`` and ``Tensor.new_empty``
    return poisoned tensors (floating dtypes only).

    A wrapper that allocates its output with one of these needs no ``out=`` argument: whatever its
    kernel does not write stays poison, and :func:`allclose` reports it as unwritten. Buffers a
    kernel reads before writing are poisoned too, which turns a read of uninitialized memory into
    NaN instead of whatever the allocator left there.
    """
    saved = {name: getattr(torch, name) for name in ("empty", "empty_like", "empty_strided")}
    saved_new_empty = torch.Tensor.new_empty

    def wrap(allocate):
        @functools.wraps(allocate)
        def allocate_poisoned(*args, **kwargs):
            out = allocate(*args, **kwargs)
            return poison(out) if isinstance(out, torch.Tensor) else out
        return allocate_poisoned

    try:
        for name, fn in saved.items():
            setattr(torch, name, wrap(fn))
        torch.Tensor.new_empty = wrap(saved_new_empty)
        yield
    finally:
        for name, fn in saved.items():
            setattr(torch, name, fn)
        torch.Tensor.new_empty = saved_new_empty


def _unwritten_report(actual: torch.Tensor) -> Report | None:
    mask = is_poison(actual)
    if not mask.any():
        return None
    count = int(mask.sum())
    idx = tuple(torch.nonzero(mask)[0].tolist())
    rows = ""
    if actual.dim() == 2:
        bad_rows = torch.nonzero(mask.any(dim=1)).flatten().tolist()
        shown = ", ".join(str(r) for r in bad_rows[:6]) + (", ..." if len(bad_rows) > 6 else "")
        rows = f" in {len(bad_rows)} of {actual.shape[0]} rows ({shown})"
    return Report(False, f"{count} of {actual.numel()} elements never written{rows}; first at "
                         f"{idx} (still the poison value)", mismatches=count, worst_index=idx,
                  unwritten=count)


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


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _check_operands(actual, expected) -> None:
    """``actual`` in a format with a unit roundoff (tolerances and ulps are defined for it),
    ``expected`` any real tensor (it is compared in float64)."""
    for name, t in (("actual", actual), ("expected", expected)):
        if not isinstance(t, torch.Tensor):
            raise InputError(f"{name} must be a torch.Tensor, got {type(t).__name__}.")
    if actual.dtype not in UNIT_ROUNDOFF:
        formats = ", ".join(_dtype_name(d) for d in UNIT_ROUNDOFF)
        raise InputError(f"actual has dtype {_dtype_name(actual.dtype)}, but allclose compares "
                         f"{formats} outputs, whose format sets the tolerance. Compare integers "
                         f"or fp8 codes bit for bit with checks.equal, or convert with "
                         f"actual.double().")
    if expected.is_complex() or expected.dtype == torch.bool:
        raise InputError(f"expected must hold real numbers, got dtype "
                         f"{_dtype_name(expected.dtype)}.")


def _check_length(n) -> int:
    """0 is allowed: dw of a batch with no rows sums nothing (tolerance_for counts it as 1)."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
        raise InputError(f"n (the reduction length) must be a whole number >= 0, got {n!r}.")
    return int(n)


def _check_scale(scale, expected: torch.Tensor) -> torch.Tensor:
    """``scale`` as float64 where ``expected`` is; >= 0 and finite wherever ``expected`` is."""
    if not isinstance(scale, torch.Tensor):
        raise InputError(f"scale must be a torch.Tensor shaped like expected, got "
                         f"{type(scale).__name__}.")
    if scale.shape != expected.shape:
        raise InputError(f"scale has shape {tuple(scale.shape)} but expected has "
                         f"{tuple(expected.shape)}; they must match.")
    if scale.is_complex() or scale.dtype == torch.bool:
        raise InputError(f"scale must hold real magnitudes, got dtype "
                         f"{_dtype_name(scale.dtype)}.")
    s = scale.detach().to(expected.device).double()
    bad = torch.isfinite(expected) & ~(torch.isfinite(s) & (s >= 0))
    if bad.any():
        idx = tuple(torch.nonzero(bad)[0].tolist())
        raise InputError(f"scale must be a finite number >= 0 wherever expected is finite; "
                         f"{int(bad.sum())} element(s) are not, first at {idx}: {s[idx].item()}.")
    return s


def _where(idx: tuple, shape) -> str:
    if len(shape) == 2:
        return f" (row {idx[0]}, col {idx[1]})"
    if len(shape) == 1:
        return f" (element {idx[0]})"
    return f" (at {idx})" if idx else ""


def _percent(share: float) -> str:
    pct = 100 * share
    if pct >= 9.95:
        return f"{pct:.0f}%"
    return f"{pct:.1f}%" if pct >= 0.05 else "under 0.1%"


def allclose(actual: torch.Tensor, expected: torch.Tensor, rtol: float | None = None,
             atol: float | None = None, n: int | None = None, nan: str = "never",
             scale: torch.Tensor | None = None, on_device: bool = False) -> Report:
    """Elementwise ``|a - e| <= atol + rtol |e|``, with tolerances from :func:`tolerance_for`.

    ``expected`` may be float64; it is compared unrounded. ``n`` (the reduction length) defaults to
    the last dimension. ``nan`` is ``"never"`` (any NaN fails) or ``"match"`` (NaN and Inf must sit
    where the reference has them). ``scale`` (same shape, float64) replaces ``|e|`` in the bound
    where an element is a difference or a sum of terms that cancel (a gradient): rounding errors
    are proportional to the terms' magnitudes, not to what is left after they cancel.

    A pass reports the element closest to its bound, as a share of that bound. Tolerances must be
    finite and >= 0 (:class:`~fusedrms.validation.InputError` otherwise); ``actual`` must be
    float32, float16, bfloat16 or float64 (integers and fp8 codes: :func:`equal`).
    ``on_device`` compares where ``actual`` lives instead of on the host (the same float64
    operations, no copies: a recording checks gradients of 100M elements this way).
    """
    if nan not in ("never", "match"):
        raise InputError(f"nan must be 'never' or 'match', got {nan!r}.")
    rtol = None if rtol is None else check_tolerance(rtol, "rtol")
    atol = None if atol is None else check_tolerance(atol, "atol")
    n = None if n is None else _check_length(n)
    _check_operands(actual, expected)
    if actual.shape != expected.shape:
        return Report(False, f"shape {tuple(actual.shape)} != expected {tuple(expected.shape)}")
    device = actual.device if on_device else torch.device("cpu")
    a, e = actual.detach().to(device), expected.detach().to(device)
    scale = None if scale is None else _check_scale(scale, e)
    if actual.numel() == 0:
        return Report(True, "empty tensors")
    if rtol is None or atol is None:
        n = n if n is not None else (actual.shape[-1] if actual.dim() else 1)
        d_rtol, d_atol = tolerance_for(actual.dtype, n)
        rtol = d_rtol if rtol is None else rtol
        atol = d_atol if atol is None else atol
    unwritten = _unwritten_report(a)
    if unwritten is not None:
        return unwritten
    special = _nan_inf_report(a, e, nan)
    if special is not None:
        return special
    finite = torch.isfinite(e) & torch.isfinite(a)
    a64, e64 = a.double(), e.double()
    err = torch.where(finite, (a64 - e64).abs(), torch.zeros((), dtype=torch.float64))
    magnitude = e64.abs() if scale is None else torch.maximum(
        e64.abs(), scale.nan_to_num(0.0, posinf=0.0, neginf=0.0))  # non-finite only where e is
    bound = atol + rtol * magnitude
    over = finite & (err > bound)
    # each element's share of its bound; a zero bound leaves only a zero error in (share 0)
    share = torch.where(err == 0, torch.zeros((), dtype=torch.float64),
                        err / bound.clamp_min(torch.finfo(torch.float64).tiny))
    # relative error where it means something: below atol the absolute bound decides
    rel = torch.where(finite & (e64.abs() > atol), err / e64.abs(),
                      torch.zeros((), dtype=torch.float64))
    ulp = ulp_distance(torch.where(finite, a, torch.zeros((), dtype=a.dtype)),
                       torch.where(finite, e, torch.zeros((), dtype=e.dtype)))
    worst = tuple(torch.nonzero(share == share.max())[0].tolist())
    stats = dict(max_abs_err=err.max().item(), max_rel_err=rel.max().item(),
                 max_ulp=int(ulp.max().item()), mismatches=int(over.sum()), worst_index=worst,
                 rel_l2=relative_l2(torch.where(finite, a64, 0.0), torch.where(finite, e64, 0.0)),
                 worst_share=share.max().item())
    if over.any():
        idx = tuple(torch.nonzero(over)[0].tolist())
        return Report(False, f"{stats['mismatches']} of {a.numel()} elements outside "
                             f"rtol={rtol:.2e}, atol={atol:.1e}; first at {idx}: got "
                             f"{a[idx].item():.7g}, expected {e[idx].item():.7g}", **stats)
    if not finite.any():
        return Report(True, f"all {a.numel()} elements NaN or Inf where the reference has them",
                      **stats)
    if stats["worst_share"] == 0:
        return Report(True, "no element differs from the reference", **stats)
    return Report(True, f"worst element at {_percent(stats['worst_share'])} of its bound"
                        f"{_where(worst, a.shape)}, max {stats['max_ulp']} ulp", **stats)


def equal(actual: torch.Tensor, expected: torch.Tensor) -> Report:
    """Bit-for-bit equality, for discrete outputs such as fp8 codes (NaN codes compare as bits)."""
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return Report(False, f"got {tuple(actual.shape)} {actual.dtype}, expected "
                             f"{tuple(expected.shape)} {expected.dtype}")
    if actual.numel() == 0:
        return Report(True, "empty tensors")
    size = actual.element_size()
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size]
    unwritten = _unwritten_report(actual.detach().cpu())
    if unwritten is not None and not is_poison(expected.detach().cpu()).any():
        return unwritten
    a = actual.detach().cpu().contiguous().view(view)
    e = expected.detach().cpu().contiguous().view(view)
    diff = a != e
    if diff.any():
        idx = tuple(torch.nonzero(diff)[0].tolist())
        return Report(False, f"{int(diff.sum())} of {a.numel()} differ; first at {idx}: got bits "
                             f"{int(a[idx])}, expected {int(e[idx])}", mismatches=int(diff.sum()),
                      worst_index=idx)
    return Report(True, f"all {a.numel()} equal bit for bit")
