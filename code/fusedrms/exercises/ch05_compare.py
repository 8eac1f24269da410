"""Chapter 5's comparison rule as an exercise: the reader writes it from its specification.

:data:`build_close` asks for ``my_close(got, want) -> bool``, the verdict of
``checks.allclose(got, want, nan="match")``: same shape; NaN exactly where the reference has NaN;
the same infinities (sign included) where it has them; every other element within
``atol + rtol * |want|``, with ``(rtol, atol) = checks.tolerance_for(got.dtype, n)`` and ``n`` the
last dimension. The grader runs the answer in a child process (:mod:`.grader`) on :data:`CASES`,
built so that each typical mistake disagrees with the library first on a case of its own, and
the verdict names that case and what it teaches.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from .. import checks
from . import grader
from .core import Exercise, Feedback, brief, correct, one_line, portable_error, wrong

SIGNATURE = "my_close(got, want)"
NAN = float("nan")
INF = float("inf")


@dataclass(frozen=True)
class Case:
    label: str  # what the case holds, as the verdict names it
    hint: str  # what an answer that disagrees with the library here has missed


def _tol(dtype, n):
    return checks.tolerance_for(dtype, n)


def _grid(dtype, seed, shape, low=0.5, high=2.0):
    """(got, want): want float64 in [low, high), got its rounding to ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    want = torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low
    return want.to(dtype), want


def _ulps_up(value: torch.Tensor, k: int) -> torch.Tensor:
    """``value`` moved ``k`` steps up its own format's grid."""
    out = value.clone()
    for _ in range(k):
        out = torch.nextafter(out, torch.full_like(out, INF))
    return out


def _just_outside(got: float, dtype, n: int, margin: float) -> float:
    """A float64 reference below ``got`` whose bound ``got`` misses by ``margin`` (relative)."""
    rtol, atol = _tol(dtype, n)
    return (got - atol * (1 + margin)) / (1 + rtol * (1 + margin))


def _rounded_reference_case(dtype, n: int) -> tuple:
    """(got, want) for one row of ``n``: ``got`` misses want's bound, but is within the bound of
    want rounded to ``dtype`` (rounding the reference first hides up to half an ulp)."""
    for k in range(1, 400):
        got = 1.0 + k * torch.finfo(dtype).eps
        want = _just_outside(got, dtype, n, 1e-2)
        rounded = torch.tensor(want, dtype=torch.float64).to(dtype).double().item()
        rtol, atol = _tol(dtype, n)
        if abs(got - rounded) <= atol + rtol * abs(rounded):
            g = torch.full((1, n), 1.0, dtype=dtype)
            w = g.double()
            g[0, -1], w[0, -1] = got, want
            return g, w
    raise AssertionError(f"no rounded-reference case in {dtype}")  # the grid always has one


def _one_off(dtype, shape, ulps32: float, seed: int) -> tuple:
    """fp32 (got, want) with the last element ``ulps32`` units u_32 (relative) above want."""
    got, want = _grid(dtype, seed, shape)
    u32 = checks.unit_roundoff(torch.float32)
    target = want[-1, -1].item() * (1 + ulps32 * u32)
    got[-1, -1] = target
    return got, want


def _build(index: int) -> tuple:
    """Case ``index``'s (got, want), built fresh (the answer may change what it is given)."""
    f16, bf16, f32 = torch.float16, torch.bfloat16, torch.float32
    if index == 0:
        return _grid(f32, 1, (4, 64))
    if index == 1:  # a truncating cast: one ulp below the nearest in some places
        got, want = _grid(f16, 2, (3, 100))
        return torch.where(got.double() > want, torch.nextafter(got, torch.zeros_like(got)),
                           got), want
    if index == 2:
        got, want = _grid(bf16, 3, (2, 40))
        return torch.where(got.double() > want, torch.nextafter(got, torch.zeros_like(got)),
                           got), want
    if index == 3:  # three ulps off in one element
        got, want = _grid(f16, 4, (2, 16))
        got[1, 5] = _ulps_up(want[1, 5:6].to(f16), 3)[0]
        return got, want
    if index == 4:  # negative values, correctly rounded
        got, want = _grid(f16, 5, (3, 32), low=-2.0, high=-0.5)
        return got, want
    if index == 5:  # the sign of one element flipped
        got, want = _grid(f32, 6, (2, 8))
        got[0, 3] = -got[0, 3]
        return got, want
    if index == 6:  # broadcasts without complaint
        return (torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=f32),
                torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=torch.float64))
    if index == 7:  # does not broadcast
        return torch.full((2, 3), 2.0, dtype=f32), torch.full((3, 2), 2.0, dtype=torch.float64)
    if index == 8:
        return torch.empty(0, 8, dtype=f32), torch.empty(0, 8, dtype=torch.float64)
    if index == 9:
        return (torch.tensor([[1.0, NAN, 3.0]], dtype=f32),
                torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64))
    if index == 10:
        return (torch.tensor([[1.0, NAN, 3.0], [NAN, NAN, NAN]], dtype=f16),
                torch.tensor([[1.0, NAN, 3.0], [NAN, NAN, NAN]], dtype=torch.float64))
    if index == 11:
        return (torch.tensor([[1.0, 2.0, 3.0]], dtype=bf16),
                torch.tensor([[1.0, NAN, 3.0]], dtype=torch.float64))
    if index == 12:
        return (torch.tensor([[1.0, INF, -INF]], dtype=f32),
                torch.tensor([[1.0, INF, -INF]], dtype=torch.float64))
    if index == 13:
        return (torch.tensor([[1.0, INF, 3.0]], dtype=f16),
                torch.tensor([[1.0, -INF, 3.0]], dtype=torch.float64))
    if index == 14:
        return (torch.tensor([[1.0, 65504.0, 3.0]], dtype=f16),
                torch.tensor([[1.0, INF, 3.0]], dtype=torch.float64))
    if index == 15:
        return (torch.tensor([[1.0, INF, 3.0]], dtype=f32),
                torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64))
    if index == 16:
        return (torch.tensor([[1.0, -0.0, 0.0]], dtype=f16),
                torch.tensor([[1.0, 0.0, -0.0]], dtype=torch.float64))
    if index == 17:  # the smallest fp16 subnormal where the reference is 0
        tiny_sub = torch.finfo(f16).smallest_normal * torch.finfo(f16).eps
        return (torch.tensor([[1.0, tiny_sub]], dtype=f16),
                torch.tensor([[1.0, 0.0]], dtype=torch.float64))
    if index == 18:  # an error of exactly atol
        return (torch.tensor([[1.0, torch.finfo(f16).tiny]], dtype=f16),
                torch.tensor([[1.0, 0.0]], dtype=torch.float64))
    if index == 19:  # rows of 4: rtol = 12 u_32; one element 20 u_32 off
        return _one_off(f32, (512, 4), 20, 7)
    if index == 20:  # rows of 1024: rtol = 42 u_32; one element 30 u_32 off
        return _one_off(f32, (2, 1024), 30, 8)
    if index == 21:  # one-dimensional: n is its length
        got, want = _grid(f16, 9, (300,))
        return got, want
    if index == 22:
        return _rounded_reference_case(f16, 8)
    if index == 23:
        return _rounded_reference_case(f32, _FP32_ROUNDED_WIDTH)
    if index == 24:  # err over rtol|want| by a quarter of rtol, within rtol|got|
        rtol, _ = _tol(f16, 2)
        got = 1.5
        want = _just_outside(got, f16, 2, rtol / 2)
        return torch.tensor([[1.0, got]], dtype=f16), torch.tensor([[1.0, want]],
                                                                   dtype=torch.float64)
    raise IndexError(index)


def _fp32_rounded_width() -> int:
    """A row width at which fp32 has a rounded-reference case (the bound's fraction of an ulp
    must let half an ulp of rounding cross it)."""
    for n in range(1, 200):
        try:
            _rounded_reference_case(torch.float32, n)
            return n
        except AssertionError:
            continue
    raise AssertionError("no width for the fp32 rounded-reference case")


_FP32_ROUNDED_WIDTH = _fp32_rounded_width()

_TOLERANCE = ("the tolerance is the output's: (rtol, atol) = checks.tolerance_for(got.dtype, "
              "got.shape[-1]); want is float64 and says nothing about the format")
_NAN_ORDER = ("Compare torch.isnan(got) with torch.isnan(want) first (they must be equal), then "
              "the infinities, then the finite elements.")
CASES = (
    Case("a correctly rounded fp32 output", "A correct output must pass: " + _TOLERANCE + "."),
    Case("an fp16 output within one ulp (a truncating cast)",
         "An fp16 output one ulp from the exact value is correct (the cast term is 2u_16): "
         + _TOLERANCE + "."),
    Case("a bf16 output within one ulp", "bf16 carries 8 significant bits, so one ulp is about "
         "0.8%: " + _TOLERANCE + "."),
    Case("an fp16 output three ulps off in one element",
         "Three ulps is more than the format's rounding can cost: your tolerance is too loose. "
         + _TOLERANCE[0].upper() + _TOLERANCE[1:] + "."),
    Case("a correctly rounded fp16 output of negative values",
         "A negative reference gets a negative bound unless you take its magnitude: "
         "atol + rtol * want.abs()."),
    Case("an fp32 output with one element's sign flipped",
         "got.abs() - want.abs() is 0 when only the sign is wrong: take the magnitude of the "
         "difference, (got - want).abs()."),
    Case("a (4,) output against a (1, 4) reference of the same values",
         "Compare got.shape with want.shape first and return False when they differ: torch "
         "broadcasts (4,) against (1, 4) without complaint."),
    Case("a (2, 3) output against a (3, 2) reference",
         "Compare got.shape with want.shape first and return False when they differ: (2, 3) "
         "and (3, 2) do not broadcast, and the subtraction raises."),
    Case("an empty (0, 8) output",
         "An empty output has no wrong element, so it passes: (ok).all() of nothing is True, "
         "while .max() of nothing raises."),
    Case("an fp32 output with a NaN where the reference is 2.0",
         "A NaN output never passes where the reference is a number. Every comparison with NaN "
         "is False, so 'no element is over the bound' lets it through: ask that every element "
         "be within it, and check NaN explicitly. " + _NAN_ORDER),
    Case("an fp16 output with NaN exactly where the reference has NaN",
         "Where the reference is NaN, a NaN output is right (nan=\"match\"), but NaN == NaN and "
         "NaN - NaN <= bound are both False: match torch.isnan(got) against torch.isnan(want). "
         + _NAN_ORDER),
    Case("a bf16 output with 2.0 where the reference is NaN",
         "NaN must sit in the same places both ways: a number where the reference has NaN "
         "fails. torch.equal(torch.isnan(got), torch.isnan(want))."),
    Case("an fp32 output with +inf and -inf where the reference has them",
         "Equal infinities pass, but inf - inf is NaN, which no bound accepts: compare the "
         "infinities as values (got == want where torch.isinf(want)), and the differences only "
         "where both are finite."),
    Case("an fp16 output with +inf where the reference is -inf",
         "An infinity of the wrong sign is wrong: where torch.isinf(want), got must equal want, "
         "sign included."),
    Case("an fp16 output of 65504 where the reference is +inf",
         "Where want is infinite, rtol * |want| is infinite and accepts any finite value: "
         "require got to be the same infinity there (torch.isinf(got) must equal "
         "torch.isinf(want))."),
    Case("an fp32 output with +inf where the reference is 2.0",
         "An infinity where the reference is finite fails: torch.isinf(got) must equal "
         "torch.isinf(want)."),
    Case("-0.0 and 0.0 in swapped places",
         "-0.0 == 0.0: the difference is 0, within any bound. Compare values, not bits or "
         "signs."),
    Case("the smallest fp16 subnormal (6e-8) where the reference is 0",
         "An output that underflowed is within atol of 0: the bound is atol + rtol * |want|, "
         "and rtol * 0 is 0, so without atol a zero reference accepts nothing but 0."),
    Case("an fp16 output whose error is exactly atol",
         "The bound is inclusive: |got - want| <= atol + rtol * |want|."),
    Case("a (512, 4) fp32 output, one element 20 u_32 off",
         "n is the row's length, got.shape[-1] (here 4, so rtol = 12 u_32): the reduction "
         "sums one row, not the rows of the batch or all of its elements."),
    Case("a (2, 1024) fp32 output, one element 30 u_32 off",
         "n is the row's length, got.shape[-1] (here 1024, so rtol = 42 u_32), not the number "
         "of rows."),
    Case("a one-dimensional fp16 output of 300 values",
         "A one-dimensional output is one row: n = got.shape[-1] = 300."),
    Case("an fp16 output 1.5 ulps from the exact value, 1 ulp from its rounding",
         "Rounding the reference to got's format first hides up to half an ulp of the error: "
         "compare in float64 (got.double() - want), want unrounded."),
    Case(f"an fp32 output just outside its bound (rows of {_FP32_ROUNDED_WIDTH})",
         "Compare in float64 (got.double() - want): want rounded to fp32 on the way (want.float(), "
         "or got - want.to(got.dtype)) moves it by up to half an ulp, enough to pass an output "
         "just outside its bound."),
    Case("an fp16 output whose error is within rtol * |got| but not rtol * |want|",
         "The bound scales with the reference: atol + rtol * |want|. want is the exact value; "
         "got is what is being judged, and a larger got would widen its own bound."),
)


def library_verdicts() -> list[bool]:
    """What checks.allclose(got, want, nan="match") says on each case."""
    return [bool(checks.allclose(*_build(i), nan="match")) for i in range(len(CASES))]


def _verdict_of(value):
    """True or False from what the answer returned, or a description of what it was."""
    if isinstance(value, bool):
        return value
    if isinstance(value, torch.Tensor):
        if value.numel() == 1 and value.dtype == torch.bool:
            return bool(value.item())
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    if type(value).__name__ == "bool_":  # numpy's
        return bool(value)
    return brief(value, 40)


def answer_verdicts(answer) -> list:
    """(In the grader's child) the answer on each case: True, False, a description of what it
    returned instead, or the exception it raised; and last a :class:`grader.LibraryCall` when
    it called checks.allclose (the answer itself)."""
    found, used = [], None
    for i, case in enumerate(CASES):
        grader.progress(f"On {case.label}")
        try:
            with grader.calls_to([checks.allclose]) as called:
                value = answer(*_build(i))
        except Exception as err:  # noqa: BLE001 - the reader's code, reported as a verdict
            found.append(portable_error(err))
            continue
        found.append(_verdict_of(value))
        used = used or (grader.LibraryCall(called[0]) if called else None)
    return found + ([used] if used else [])  # a last entry when it called the library


LIBRARY_HINT = ("Write the rule with torch (or math) operations: shape, NaN, infinities, then "
                "|got - want| <= atol + rtol * |want| (checks.tolerance_for gives rtol and atol).")


def _grade_close(answer) -> Feedback:
    if not callable(answer) or isinstance(answer, type):
        return wrong(f"Answer with your function itself: define {SIGNATURE} in a cell and pass "
                     f"my_close (no parentheses), not a {type(answer).__name__}.")
    if getattr(answer, "__module__", None) == checks.__name__ or answer in (torch.allclose,
                                                                           torch.isclose):
        return wrong("That is a library's comparison, not yours.", LIBRARY_HINT)
    try:
        inspect.signature(answer).bind(None, None)
    except TypeError:
        return wrong(f"Your function must take two arguments: {SIGNATURE}.")
    except ValueError:  # a builtin without a signature: let the child say what it does
        pass
    try:
        got = grader.run(answer, answer_verdicts, cache=True)
    except grader.Failed as failed:
        return grader.failure_feedback(failed, "python")
    used = got.pop() if len(got) > len(CASES) else None
    expected = library_verdicts()
    for case, mine, right in zip(CASES, got, expected):
        said = "pass" if right else "fail"
        if isinstance(mine, BaseException):
            return wrong(f"On {case.label} your function raised {one_line(mine)[:160]}; it "
                         f"should return {right} (the output should {said}).", case.hint)
        if isinstance(mine, str):
            return wrong(f"On {case.label} your function returned {mine}, not True or False.",
                         "Return one verdict for the whole output: bool(ok.all()).")
        if mine != right:
            return wrong(f"On {case.label} your function returned {mine}; the output should "
                         f"{said}.", case.hint)
    if used is not None:
        return wrong(f"Your function calls {used}, the library's comparison: that is the "
                     f"answer, not yours.", LIBRARY_HINT)
    return correct(f"Your function agrees with checks.allclose(got, want, nan=\"match\") on all "
                   f"{len(CASES)} cases: fp32, fp16 and bf16, NaN and infinities in both "
                   f"places, -0.0, a subnormal, an error of exactly atol, empty and mismatched "
                   f"shapes, and outputs just outside their bound.")


# ---------------------------------------------------------------- the solution and its mistakes

# [book:close-solution]
def solution_close(got, want):
    """checks.allclose(got, want, nan="match"), as True or False."""
    if got.shape != want.shape:
        return False
    rtol, atol = checks.tolerance_for(got.dtype, got.shape[-1])
    a, e = got.double(), want.double()  # want unrounded
    if not torch.equal(torch.isnan(a), torch.isnan(e)):
        return False
    if not torch.equal(torch.isinf(a), torch.isinf(e)):
        return False
    if not torch.equal(a[torch.isinf(a)], e[torch.isinf(e)]):  # same signs
        return False
    finite = torch.isfinite(e)
    err = (a[finite] - e[finite]).abs()
    return bool((err <= atol + rtol * e[finite].abs()).all())
# [/book:close-solution]


def close_nan_passes(got, want):
    if got.shape != want.shape:
        return False
    rtol, atol = checks.tolerance_for(got.dtype, got.shape[-1])
    err = (got.double() - want).abs()
    return not bool((err > atol + rtol * want.abs()).any())  # NaN > bound is False


def close_nan_never_equal(got, want):
    if got.shape != want.shape:
        return False
    rtol, atol = checks.tolerance_for(got.dtype, got.shape[-1])
    err = (got.double() - want).abs()
    return bool((err <= atol + rtol * want.abs()).all())


def close_nan_one_way(got, want):
    if got.shape != want.shape:
        return False
    rtol, atol = checks.tolerance_for(got.dtype, got.shape[-1])
    err = (got.double() - want).abs()
    ok = (err <= atol + rtol * want.abs()) | torch.isnan(want)  # got not asked
    return bool(ok.all())


def close_inf_as_numbers(got, want):
    if got.shape != want.shape:
        return False
    rtol, atol = checks.tolerance_for(got.dtype, got.shape[-1])
    a, e = got.double(), want.double()
    if not torch.equal(torch.isnan(a), torch.isnan(e)):
        return False
    known = ~torch.isnan(e)
    err = (a[known] - e[known]).abs()  # inf - inf is NaN
    return bool((err <= atol + rtol * e[known].abs()).all())


def close_inf_sign_ignored(got, want):
    if got.shape != want.shape:
        return False
    rtol, atol = checks.tolerance_for(got.dtype, got.shape[-1])
    a, e = got.double(), want.double()
    if not torch.equal(torch.isnan(a), torch.isnan(e)):
        return False
    if not torch.equal(torch.isinf(a), torch.isinf(e)):
        return False
    finite = torch.isfinite(e)
    err = (a[finite] - e[finite]).abs()
    return bool((err <= atol + rtol * e[finite].abs()).all())


def close_inf_only_where_got(got, want):
    if got.shape != want.shape:
        return False
    rtol, atol = checks.tolerance_for(got.dtype, got.shape[-1])
    a, e = got.double(), want.double()
    if not torch.equal(torch.isnan(a), torch.isnan(e)):
        return False
    if not torch.equal(a[torch.isinf(a)], e[torch.isinf(a)]):  # where got is infinite only
        return False
    rest = ~torch.isnan(e) & ~torch.isinf(a)
    err = (a[rest] - e[rest]).abs()
    return bool((err <= atol + rtol * e[rest].abs()).all())


def _special_ok(a, e) -> bool:
    """NaN and infinities placed as the reference has them (the mistakes below share it)."""
    return (torch.equal(torch.isnan(a), torch.isnan(e))
            and torch.equal(torch.isinf(a), torch.isinf(e))
            and torch.equal(a[torch.isinf(a)], e[torch.isinf(e)]))


def close_abs_of_each(got, want):
    if got.shape != want.shape:
        return False
    rtol, atol = checks.tolerance_for(got.dtype, got.shape[-1])
    a, e = got.double(), want.double()
    if not _special_ok(a, e):
        return False
    f = torch.isfinite(e)
    err = a[f].abs() - e[f].abs()  # |got| - |want|: the sign is lost
    return bool((err <= atol + rtol * e[f].abs()).all())


def close_signed_bound(got, want):
    if got.shape != want.shape:
        return False
    rtol, atol = checks.tolerance_for(got.dtype, got.shape[-1])
    a, e = got.double(), want.double()
    if not _special_ok(a, e):
        return False
    f = torch.isfinite(e)
    return bool(((a[f] - e[f]).abs() <= atol + rtol * e[f]).all())  # want, not |want|


def close_rtol_on_got(got, want):
    if got.shape != want.shape:
        return False
    rtol, atol = checks.tolerance_for(got.dtype, got.shape[-1])
    a, e = got.double(), want.double()
    if not _special_ok(a, e):
        return False
    f = torch.isfinite(e)
    return bool(((a[f] - e[f]).abs() <= atol + rtol * a[f].abs()).all())


def close_reference_rounded(got, want):
    if got.shape != want.shape:
        return False
    rtol, atol = checks.tolerance_for(got.dtype, got.shape[-1])
    a, e = got.double(), want.to(got.dtype).double()  # want rounded to got's format first
    if not _special_ok(a, want):
        return False
    f = torch.isfinite(want)
    return bool(((a[f] - e[f]).abs() <= atol + rtol * e[f].abs()).all())


def close_in_fp32(got, want):
    if got.shape != want.shape:
        return False
    rtol, atol = checks.tolerance_for(got.dtype, got.shape[-1])
    a, e = got.float(), want.float()  # want rounded to fp32 on the way
    if not _special_ok(a, e):
        return False
    f = torch.isfinite(e)
    return bool(((a[f] - e[f]).abs() <= atol + rtol * e[f].abs()).all())


def close_fp32_tolerance(got, want):
    if got.shape != want.shape:
        return False
    rtol, atol = checks.tolerance_for(torch.float32, got.shape[-1])  # whatever got's dtype
    a, e = got.double(), want.double()
    if not _special_ok(a, e):
        return False
    f = torch.isfinite(e)
    return bool(((a[f] - e[f]).abs() <= atol + rtol * e[f].abs()).all())


def close_bf16_tolerance(got, want):
    if got.shape != want.shape:
        return False
    rtol, atol = checks.tolerance_for(torch.bfloat16, got.shape[-1])  # the loosest, for all
    a, e = got.double(), want.double()
    if not _special_ok(a, e):
        return False
    f = torch.isfinite(e)
    return bool(((a[f] - e[f]).abs() <= atol + rtol * e[f].abs()).all())


def close_reference_dtype_tolerance(got, want):
    if got.shape != want.shape:
        return False
    rtol, atol = checks.tolerance_for(want.dtype, want.shape[-1])  # float64's
    a, e = got.double(), want.double()
    if not _special_ok(a, e):
        return False
    f = torch.isfinite(e)
    return bool(((a[f] - e[f]).abs() <= atol + rtol * e[f].abs()).all())


def close_n_rows(got, want):
    if got.shape != want.shape:
        return False
    rtol, atol = checks.tolerance_for(got.dtype, got.shape[0])  # the number of rows
    a, e = got.double(), want.double()
    if not _special_ok(a, e):
        return False
    f = torch.isfinite(e)
    return bool(((a[f] - e[f]).abs() <= atol + rtol * e[f].abs()).all())


def close_no_atol(got, want):
    if got.shape != want.shape:
        return False
    rtol, _ = checks.tolerance_for(got.dtype, got.shape[-1])
    a, e = got.double(), want.double()
    if not _special_ok(a, e):
        return False
    f = torch.isfinite(e)
    return bool(((a[f] - e[f]).abs() <= rtol * e[f].abs()).all())


def close_strict(got, want):
    if got.shape != want.shape:
        return False
    rtol, atol = checks.tolerance_for(got.dtype, got.shape[-1])
    a, e = got.double(), want.double()
    if not _special_ok(a, e):
        return False
    f = torch.isfinite(e)
    return bool(((a[f] - e[f]).abs() < atol + rtol * e[f].abs()).all())


def close_no_shape_check(got, want):
    rtol, atol = checks.tolerance_for(got.dtype, got.shape[-1])
    a, e = torch.broadcast_tensors(got.double(), want.double())
    if not _special_ok(a, e):
        return False
    f = torch.isfinite(e)
    return bool(((a[f] - e[f]).abs() <= atol + rtol * e[f].abs()).all())


def close_max_of_errors(got, want):
    if got.shape != want.shape:
        return False
    rtol, atol = checks.tolerance_for(got.dtype, got.shape[-1])
    a, e = got.double(), want.double()
    if not _special_ok(a, e):
        return False
    f = torch.isfinite(e)
    return bool(((a[f] - e[f]).abs() - (atol + rtol * e[f].abs())).max() <= 0)  # none: raises


build_close = Exercise(
    "build_close",
    f"Write {SIGNATURE} -> bool, the verdict of checks.allclose(got, want, nan=\"match\"): "
    f"False when the shapes differ; NaN exactly where want has NaN; got equal to want where "
    f"want is infinite (and nowhere else infinite); every other element within "
    f"atol + rtol * |want|, with (rtol, atol) = checks.tolerance_for(got.dtype, got.shape[-1]). "
    f"Answer with the function.",
    _grade_close,
    solution=solution_close,
    mistakes={"NaN passes 'none over the bound'": close_nan_passes,
              "NaN never equal to NaN": close_nan_never_equal,
              "NaN matched one way only": close_nan_one_way,
              "infinities subtracted": close_inf_as_numbers,
              "the infinities' signs ignored": close_inf_sign_ignored,
              "infinities checked only where got has them": close_inf_only_where_got,
              "|got| - |want|": close_abs_of_each,
              "rtol * want without abs": close_signed_bound,
              "rtol * |got|": close_rtol_on_got,
              "the reference rounded to got's dtype": close_reference_rounded,
              "compared in fp32": close_in_fp32,
              "fp32's tolerance for every dtype": close_fp32_tolerance,
              "bf16's tolerance for every dtype": close_bf16_tolerance,
              "the reference's dtype's tolerance": close_reference_dtype_tolerance,
              "n = the number of rows": close_n_rows,
              "atol forgotten": close_no_atol,
              "< instead of <=": close_strict,
              "no shape check": close_no_shape_check,
              ".max() of the excess": close_max_of_errors})
