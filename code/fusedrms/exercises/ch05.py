"""Chapter 5 exercises: choose a tolerance and defend it; find a bug from the suite's output alone.

1. :data:`fp16_tolerance` — the answer is ``(rtol, dominant)``: a relative tolerance for fp16
   outputs of rows 4096 wide (fp32 accumulation), and which term of the error budget dominates it
   (``"cast"`` or ``"reduction"``). Too tight fails correct kernels; too loose accepts a kernel
   with bf16's precision.
2. :data:`find_the_bug` — :func:`mystery_report` runs the suite on one of the broken kernels of
   :mod:`fusedrms.book.broken` with its name hidden; the answer is which one (``"padded_mean"``,
   ``"unmasked_row"``, ``"fp16_accum"``, ``"rows_floor"``, ``"unmasked_weight"``).
"""
from __future__ import annotations

import math

import torch

from .. import checks
from .core import Exercise, Malformed, as_choice, as_fields, as_number, correct, wrong

# ---------------------------------------------------------------- (1) a tolerance for fp16

COLS = 4096
U16 = checks.unit_roundoff(torch.float16)  # 2^-11
TERMS = checks.tolerance_terms(torch.float16, COLS)
# A correctly rounded fp16 result is up to u away from the exact value, plus the fp32 reduction.
TOO_TIGHT_BELOW = U16 + TERMS["reduction"]
# Two ulps of fp16 (4u): beyond it a tolerance starts to accept results with fewer bits than fp16
# carries; bf16 precision (u_bf16 = 2^-8 = 8 u16) is far past it.
TOO_LOOSE_ABOVE = 4 * U16
DOMINANT = ("cast", "reduction")

_TOLERANCE_MISTAKES = {
    "fp32's tolerance": ((1e-5, "cast"),
                         "1e-5 is a tolerance for fp32 outputs. An fp16 output is rounded to 11 "
                         "significant bits: a correctly rounded result is already up to "
                         f"u = 2^-11 = {U16:.2e} away from the exact value."),
    "half an ulp, no reduction term": ((U16, "cast"),
                                       "u = 2^-11 covers the final rounding only, and only with "
                                       "round-to-nearest. Add the fp32 reduction's error "
                                       "(sqrt(n) + 8) u_32, and allow a whole ulp (2u) for a "
                                       "cast that truncates."),
    "bf16's tolerance": ((1e-2, "cast"),
                         "1e-2 is more than 2^-8, the precision of bf16: it would pass an fp16 "
                         "kernel that lost three of its bits (say, one that rounded through "
                         "bf16). Stay within a couple of fp16 ulps."),
    "reduction counted in fp16 units": ((math.sqrt(COLS) * U16, "reduction"),
                                        "sqrt(n) u_16 would be the error of summing in fp16. The "
                                        "book's kernels sum in fp32, whose error is sqrt(n) u_32: "
                                        "tiny next to the final cast."),
    "right number, wrong reason": ((TERMS["rtol"], "reduction"),
                                   f"the number is right, the reason is not: at n = {COLS} the "
                                   f"fp32 reduction term is (sqrt(n) + 8) 2^-24 = "
                                   f"{TERMS['reduction']:.1e}, the cast term 2u_16 = "
                                   f"{TERMS['cast']:.1e}."),
}


def _grade_tolerance(answer):
    rtol, dominant = as_fields(answer, ("rtol", "dominant"), 'answer = (1e-3, "cast")')
    rtol = as_number(rtol, "rtol (a number)")
    dominant = as_choice(dominant, DOMINANT)
    if rtol <= 0:
        return wrong(f"rtol = {rtol:g} must be positive.", "A tolerance of zero asks for bit-exact "
                     "results, which a different summation order already breaks.")
    for label, ((value, reason), hint) in _TOLERANCE_MISTAKES.items():
        if math.isclose(rtol, value, rel_tol=1e-3) and dominant == reason:
            return wrong(f"rtol = {rtol:.3g} with '{dominant}' dominating is the mistake "
                         f"'{label}'.", hint)
    if rtol < TOO_TIGHT_BELOW:
        return wrong(f"rtol = {rtol:.3g} is too tight: correct kernels fail it.",
                     f"A correctly rounded fp16 output can be u = 2^-11 = {U16:.2e} (relative) "
                     f"from the exact value, and the fp32 reduction adds {TERMS['reduction']:.1e}: "
                     f"anything below {TOO_TIGHT_BELOW:.3e} rejects correct results.")
    if rtol > TOO_LOOSE_ABOVE:
        return wrong(f"rtol = {rtol:.3g} is too loose.",
                     f"Above 2 fp16 ulps ({TOO_LOOSE_ABOVE:.2e}) the check accepts results that "
                     f"have lost bits an fp16 output carries; bf16 precision (2^-8 = 3.9e-3) is "
                     f"not enough for an fp16 kernel.")
    if dominant != "cast":
        return wrong(f"rtol = {rtol:.3g} is in the right range, but the reason is not.",
                     f"At n = {COLS} the fp32 reduction contributes {TERMS['reduction']:.1e}, the "
                     f"final cast to fp16 {TERMS['cast']:.1e}: the cast dominates.")
    return correct(f"rtol = {rtol:.3g} sits between {TOO_TIGHT_BELOW:.2e} (a correctly rounded "
                   f"result plus the fp32 sum) and {TOO_LOOSE_ABOVE:.2e} (two fp16 ulps), and the "
                   f"final cast dominates. The book's checks.tolerance_for gives "
                   f"{TERMS['rtol']:.3e}: 2u_16 = {TERMS['cast']:.2e} for the cast (a whole ulp, "
                   f"so a truncating cast passes too) + (sqrt(n)+8)u_32 = "
                   f"{TERMS['reduction']:.1e}.")


fp16_tolerance = Exercise(
    "fp16_tolerance",
    f"Choose rtol for fp16 RMSNorm outputs of rows {COLS} wide (fp32 accumulation) and say which "
    f"term dominates it: answer = (rtol, \"cast\" or \"reduction\").",
    _grade_tolerance, solution=(TERMS["rtol"], "cast"),
    mistakes={label: pair for label, (pair, _) in _TOLERANCE_MISTAKES.items()})


# ---------------------------------------------------------------- (2) find the bug

MYSTERY = "broken.padded_mean"
CHOICES = ("padded_mean", "unmasked_row", "fp16_accum", "rows_floor", "unmasked_weight")
_BUG_HINTS = {
    "unmasked_row": "A row loaded without its mask reads past its end: in 'strided rows' it picks "
                    "up the NaN between rows, and with w = 0 the garbage it reads can make r NaN. "
                    "Here the failing outputs are finite, and w = 0 passes.",
    "fp16_accum": "An fp16 accumulator fails 'huge values' in every dtype and nearly every fp32 "
                  "case (fp32 inputs lose 13 bits in fp16), whatever the width. Here the "
                  "1024x4096 and mixed-sign cases pass in fp32.",
    "rows_floor": "A missing write shows as 'never written' (the poison is still there) and "
                  "depends on the row count, not the width. Here every element was written.",
    "unmasked_weight": "That kernel's outputs are right: it passes every case (its bug is a read "
                       "that no output shows). This one fails cases.",
}


def _grade_bug(answer):
    choice = as_choice(str(answer).strip().removeprefix("broken.") if isinstance(answer, str)
                       else answer, CHOICES)
    if "broken." + choice == MYSTERY:
        return correct("padded_mean: every case whose width is a power of two (1, 4096) passes, "
                       "every other width fails, and where the mean square dominates eps a failing "
                       "row is off by one factor, sqrt(padded width / width): sqrt(16/13) = 1.109 "
                       "at 13 columns, sqrt(512/257) = 1.411 at 257.")
    return wrong(f"not {choice}.", _BUG_HINTS[choice] + " Compare got/expected in the failing "
                 "lines, and look at which widths pass.")


find_the_bug = Exercise(
    "find_the_bug",
    "From the suite's output for the mystery kernel alone, which broken kernel is it? "
    "(\"padded_mean\", \"unmasked_row\", \"fp16_accum\", \"rows_floor\" or \"unmasked_weight\")",
    _grade_bug, solution="padded_mean",
    mistakes={c: c for c in CHOICES if "broken." + c != MYSTERY})


def mystery_report(seed: int = 0) -> str:
    """The suite's output for the mystery kernel, its name replaced by ``mystery``.

    The matrix (cases across), then the first failing line of each failing case.
    """
    from ..book import broken
    from .. import verify

    results = verify.run([broken.IMPLS[MYSTERY]], seed=seed)
    for r in results:
        r.kernel = "mystery"
    lines = [verify.matrix(results), ""]
    seen = set()
    for r in results:
        if r.status == "FAIL" and r.case not in seen:
            seen.add(r.case)
            shape = "x".join(str(s) for s in r.shape)
            lines.append(f"FAIL {r.dtype} {r.case} ({shape}): {r.message}")
    lines.append("")
    lines.append(verify.summary(results))
    return "\n".join(lines)


ALL = [fp16_tolerance, find_the_bug]
