"""Chapter 5 exercises: choose a tolerance and defend it; find a bug from the suite's output alone;
write the comparison rule from its specification; predict which cases a broken kernel fails.

1. :data:`fp16_tolerance` — the answer is ``(rtol, dominant)``: a relative tolerance for fp16
   outputs of rows 4096 wide (fp32 accumulation), and which term of the error dominates it
   (``"cast"`` or ``"reduction"``). Too tight fails correct kernels; too loose accepts a kernel
   with bf16's precision.
2. :data:`find_the_bug` — :func:`mystery_report` runs the suite on a broken kernel of
   :mod:`fusedrms.book.broken` that the chapter has not shown, its name hidden; the answer is the
   letter of its mistake (:data:`BUGS`).
3. :data:`~fusedrms.exercises.ch05_compare.build_close` — the comparison rule, written from its
   specification (:mod:`.ch05_compare`).
4. :data:`predict_padded` — before the drawer's matrix, which of the suite's cases the padded
   mean fails; graded against the suite run on the reader's machine (:func:`padded_failures`).
"""
from __future__ import annotations

import functools
import math

import torch
import triton

from .. import checks, verify
from ..book.page import listed
from . import answers
from .core import Exercise, Feedback, Malformed, as_choice, as_fields, correct, wrong

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


# words a reader may use for each term ("the final cast", "rounding", "the fp32 sum", ...)
_TERM_WORDS = {"cast": ("cast", "round"), "reduction": ("reduc", "sum", "accum")}


def _dominant(text):
    """"cast" or "reduction" from the reader's word for it; anything else is Malformed."""
    if isinstance(text, str):
        named = [term for term, words in _TERM_WORDS.items()
                 if any(w in text.strip().lower() for w in words)]
        if len(named) == 1:
            return named[0]
    return as_choice(text, DOMINANT)


def _is_number(value) -> bool:
    try:
        answers.number(value)
    except Malformed:
        return False
    return True


def _grade_tolerance(answer):
    if isinstance(answer, str) and answer.count(",") == 1:  # "1e-3, cast"
        answer = [part.strip(" ()'\"") for part in answer.split(",")]
    rtol, dominant = as_fields(answer, ("rtol", "dominant"), 'answer = (1e-3, "cast")')
    if _is_number(dominant) and not _is_number(rtol):  # ("cast", 1e-3): either order
        rtol, dominant = dominant, rtol
    rtol = answers.number(rtol, "rtol (a number)")  # 1e-3, "9.8e−4", "2^-10"
    dominant = _dominant(dominant)
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

# The mystery kernel is none of the drawer's kernels the chapter shows before the exercise.
MYSTERY = "broken.unbiased_mean"
BUGS = {
    "a": "it divides the sum of squares by the padded block width",
    "b": "it divides the sum of squares by cols - 1",
    "c": "it leaves eps out of the square root",
    "d": "it never multiplies by the weight",
    "e": "it sums the squares in fp16",
}
ANSWER = "b"
MYSTERY_DTYPES = (torch.float32, torch.float16)
_BUG_HINTS = {
    "a": "A padded width leaves widths 1 and 4096 exact (they need no padding) and makes the error "
         "grow with the padding: got/expected would be sqrt(13/16) = 0.901 at 13 columns. Here "
         "width 1 fails, and the 13-column ratio is closer to 1 than that.",
    "c": "Without eps, 'all zeros' is 0/0: NaN. Here 'all zeros' passes, and the error depends on "
         "the width, which eps does not.",
    "d": "A kernel that ignores w returns x*r where w = 0 asks for exact zeros; here 'w = 0' "
         "passes.",
    "e": "An fp16 sum costs fp32 inputs 13 bits at every width; here the error shrinks as the "
         "width grows, and fp16 outputs pass at 4096 columns.",
}


# the words that name each mistake when a reader describes it instead of giving its letter
_BUG_WORDS = {
    "a": ("padded", "block width", "block_size", "power of two"),
    "b": ("cols - 1", "n - 1", "unbiased", "bessel"),
    "c": ("eps", "epsilon"),
    "d": ("weight", "gamma"),
    "e": ("fp16", "float16", "half precision"),
}


def _grade_bug(answer):
    # "b", "(b)", "2", the option's words, a description ("the unbiased variance"), the name
    choice = answers.read_option(answer, BUGS, keywords=_BUG_WORDS,
                                 aliases={MYSTERY: ANSWER, MYSTERY.removeprefix("broken."): ANSWER})
    if choice == ANSWER:
        return correct("cols - 1: got/expected is sqrt((n-1)/n) whatever the data, 0.961 at 13 "
                       "columns, 0.998 at 257, 0.99988 at 4096 (so fp16, with a tolerance of "
                       "about 1e-3, passes there and fp32 does not), and at width 1 the division "
                       "by 1 - 1 = 0 makes the row NaN. It is the unbiased variance's n - 1, a "
                       "habit carried over from LayerNorm; RMSNorm's mean divides by n.")
    return wrong(f"({choice}) does not fit the evidence.", _BUG_HINTS[choice] + " Compare got/expected in the failing "
                 "lines at each width, and look at which cases pass.")


find_the_bug = Exercise(
    "find_the_bug",
    "From the suite's output for the mystery kernel alone, which mistake does it make? Answer "
    "with a letter: " + " ".join(f"({k}) {v}" for k, v in BUGS.items()),
    _grade_bug, solution=ANSWER,
    mistakes={f"choice {k}": k for k in BUGS if k != ANSWER})


def mystery_results(seed: int = 0) -> list:
    """The suite's checks of the mystery kernel (fp32 and fp16), named ``mystery``."""
    from ..book import broken
    from .. import verify

    results = verify.run([broken.IMPLS[MYSTERY]], dtypes=list(MYSTERY_DTYPES), seed=seed)
    for r in results:
        r.kernel = "mystery"
    return results


def mystery_report(seed: int = 0) -> str:
    """The suite's output for the mystery kernel: the matrix (cases across), then for each width
    the first failing line (fp32 first): at most a dozen lines."""
    from .. import verify

    results = mystery_results(seed)
    lines = [verify.matrix(results), ""]
    seen = set()
    for r in sorted(results, key=lambda r: r.dtype != "fp32"):
        width = r.shape[-1]
        if r.status == "FAIL" and width not in seen:
            seen.add(width)
            shape = "x".join(str(s) for s in r.shape)
            lines.append(f"FAIL {r.dtype} {r.case} ({shape}): {r.message}")
    lines += ["", verify.summary(results)]
    return "\n".join(lines)


# ---------------------------------------------------------------- (4) predict, then look

PADDED = "broken.padded_mean"


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _trivial(case) -> bool:
    """Cases whose every output is 0 whatever the row scale is (x = 0, or w = 0)."""
    return case.kind in ("zeros", "w0")


# What the reasoning predicts: a wrong mean shows where the block is wider than the row and the
# output depends on r. A test checks it against the suite run, here and on a GPU.
PADDED_REASONED = tuple(c.name for c in verify.CASES
                        if not _power_of_two(c.shape(False)[-1]) and not _trivial(c))


def padded_failures() -> tuple:
    """The names of the cases the suite fails the padded mean on, fp32, on this machine."""
    from ..book import broken

    results = verify.run([broken.IMPLS[PADDED]], dtypes=[torch.float32])
    return tuple(r.case for r in results if r.status == "FAIL")


_padded_measured = functools.lru_cache(maxsize=1)(padded_failures)


def _case_key(text: str) -> str:
    return "".join(text.lower().split()).replace("×", "x")


_CASE_NAMES = {_case_key(k): c.name for c in verify.CASES for k in (c.name, c.short)}


def _read_cases(answer) -> set:
    """Case names from a list, tuple or set of names, or from one text with commas."""
    if isinstance(answer, str):
        if answer.strip().lower() in ("", "none", "no case", "nothing"):
            return set()
        items = answer.split(",")
    elif isinstance(answer, (list, tuple, set, frozenset)):
        items = list(answer)
    else:
        raise Malformed(f"expected a list of case names, e.g. [\"3x13\", \"NaN input\"], got "
                        f"{type(answer).__name__}.")
    names = set()
    for item in items:
        if not isinstance(item, str) or _case_key(item.strip(" '\"[]")) not in _CASE_NAMES:
            listed = ", ".join(f'"{c.name}"' for c in verify.CASES)
            raise Malformed(f"{str(item)[:40]!r} is not one of the suite's cases: {listed}.")
        names.add(_CASE_NAMES[_case_key(item.strip(" '\"[]"))])
    return names


def _width(name: str) -> int:
    return next(c for c in verify.CASES if c.name == name).shape(False)[-1]


def _grade_padded(answer) -> Feedback:
    predicted = _read_cases(answer)
    failed = set(_padded_measured())
    order = [c.name for c in verify.CASES]
    said = (f"Here the suite failed it on {len(failed)} of {len(order)} cases: "
            f"{listed(n for n in order if n in failed)}.")
    extra = [n for n in order if n in predicted - failed]
    missed = [n for n in order if n in failed - predicted]
    if not extra and not missed:
        return correct(f"{said} Exactly those: every case whose width is not a power of two, "
                       f"except the ones whose outputs are 0 whatever r is.")
    head = f"You predicted {len(predicted)} case{'s' if len(predicted) != 1 else ''}. {said}"
    trivial = [n for n in extra if _trivial(next(c for c in verify.CASES if c.name == n))]
    if trivial:
        return wrong(head, f"{listed(trivial)} passed: x = 0 or w = 0 makes y = x·r·w = 0 "
                           f"whatever r is, so a wrong mean cannot show there.")
    if extra:
        widths = sorted({_width(n) for n in extra})
        return wrong(head, f"{listed(extra)} passed: at width{'s' if len(widths) > 1 else ''} "
                           f"{listed(widths)} BLOCK_SIZE (the next power of two) is the width "
                           f"itself, so the padded mean is the mean.")
    widths = sorted({_width(n) for n in missed})
    blocks = [triton.next_power_of_2(w) for w in widths]
    return wrong(head, f"{listed(missed)} failed too: each has rows of ordinary values at a "
                       f"width that is not a power of two ({listed(widths, 'or')}), and there "
                       f"the sum is divided by {listed(blocks, 'or')}. Special inputs in some "
                       f"rows do not protect the others.")


predict_padded = Exercise(
    "predict_padded",
    "Before the drawer's matrix: on which of the suite's cases will padded_mean fail (fp32)? "
    "Answer with a list of case names, as the table of boundary cases names them.",
    _grade_padded,
    solution=list(PADDED_REASONED),
    mistakes={"every case": [c.name for c in verify.CASES],
              "only the plain non-power-of-two cases": ["3x13", "33x257"],
              "zeros and w = 0 too": list(PADDED_REASONED) + ["all zeros", "w = 0"],
              "the power-of-two widths too": list(PADDED_REASONED) + ["1024x4096", "1x1"],
              "no case": []})

from .ch05_compare import build_close  # noqa: E402 - listed with this chapter's exercises

ALL = [fp16_tolerance, find_the_bug, build_close, predict_padded]
