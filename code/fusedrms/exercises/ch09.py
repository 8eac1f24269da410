"""Chapter 9 exercises: the backward by hand, a broken backward, and the backward's bytes.

Solutions come from :mod:`fusedrms.viz.backward_frames` (the hand example, float64) and
:mod:`fusedrms.traffic`; every typical mistake is the same computation with one step wrong.
"""
from __future__ import annotations

import math

from .. import traffic
from ..viz import backward_frames as BF
from . import answers
from .core import Exercise, Malformed, correct, wrong

EPS = 1e-5


# (1) dx for the hand example -------------------------------------------------------------------
# The chapter's row and weights with a gradient on output 1 only: the answer is row 1 of the
# Jacobian dy/dx (the chapter works the example with another dy).
EXERCISE_DY = (0.0, 1.0, 0.0, 0.0)
HAND = BF.trace_row(BF.HAND_X, BF.HAND_W, EXERCISE_DY, EPS)
DX = HAND.dx


def _variant(g, xhat, r, n, how: str) -> list[float]:
    dot = sum(a * b for a, b in zip(g, xhat))
    if how == "no_r_term":
        return [r * gi for gi in g]
    if how == "sum_not_mean":
        return [r * (gi - xi * dot) for gi, xi in zip(g, xhat)]
    if how == "plus":
        return [r * (gi + xi * dot / n) for gi, xi in zip(g, xhat)]
    if how == "r_once":  # r (g - x mean(g x)): the r^3 written as r
        x = [xi / r for xi in xhat]
        dot_x = sum(a * b for a, b in zip(g, x))
        return [r * (gi - xi * dot_x / n) for gi, xi in zip(g, x)]
    raise ValueError(how)


_NO_W = BF.trace_row(BF.HAND_X, [1.0] * 4, EXERCISE_DY, EPS).dx
_DX_MISTAKES = {
    "the gradient through r dropped": (_variant(HAND.g, HAND.xhat, HAND.r, 4, "no_r_term"),
                                       "That is r·g: it treats r as a constant. r depends on every "
                                       "x of the row, so dx has a second term, −r·xhat·mean(g·xhat)."),
    "w forgotten": (_NO_W, "The output gradient reaches xhat through w: use g = dy·w, not dy."),
    "sum instead of mean": (_variant(HAND.g, HAND.xhat, HAND.r, 4, "sum_not_mean"),
                            "The second term uses the mean of g·xhat over the row: divide the dot "
                            "product by the number of columns (4)."),
    "sign of the second term": (_variant(HAND.g, HAND.xhat, HAND.r, 4, "plus"),
                                "Increasing x_j increases mean(x²), which decreases r: the term "
                                "through r enters with a minus sign."),
    "r instead of r cubed": (_variant(HAND.g, HAND.xhat, HAND.r, 4, "r_once"),
                             "With x instead of xhat the second term needs r³/n: r·(g − x·mean(g·x)) "
                             "is off by r² (use xhat = x·r in both places)."),
    "the forward's y": ([xi * HAND.r * wi for xi, wi in zip(HAND.x, BF.HAND_W)],
                        "That is y, the forward's output. The backward maps dy to dx."),
}


def _fits(readings, vector, digits: int = 0) -> bool:
    """Each entry within 1e-3 (relative) or 1e-4 of the vector's, or the vector's rounded to the
    digits written (with at least ``digits`` significant digits)."""
    return all(math.isclose(r.value, d, rel_tol=1e-3, abs_tol=1e-4)
               or (r.fits(d) and r.significant >= digits) for r, d in zip(readings, vector))


def _grade_dx(answer):
    # a list, tuple, array or tensor; entries as numbers or text ("−0.0339" copied from the page)
    readings = answers.read_list(answer, 4, "gradients (one per column)")
    slips = [label for label, (vec, _) in _DX_MISTAKES.items() if _fits(readings, vec)]
    if _fits(readings, DX, digits=2) and not slips:
        return correct(f"dx = [{', '.join(f'{v:.4f}' for v in DX)}]: r·(g − xhat·mean(g·xhat)) "
                       f"with r = {HAND.r:.5f}, mean(g·xhat) = {HAND.mean:.4f}.")
    if _fits(readings, DX):  # right as far as the digits go: -0.03 for -0.0339
        return wrong("each entry is dx rounded to the digits written, but too few digits to "
                     "tell it from " + (f"a typical slip ({slips[0]})" if slips else
                                        "its neighbours") + ".",
                     "Give each entry to at least 3 decimals (or 2 significant digits).")
    for label in slips:
        return wrong(f"that is the answer with {label}.", _DX_MISTAKES[label][1])
    return wrong("that is not dx for this row.",
                 "Compute r = 1/sqrt(mean(x²) + eps), xhat = x·r, g = dy·w, m = mean(g·xhat), "
                 "then dx = r·(g − xhat·m), column by column.")


dx_hand = Exercise(
    "dx_hand",
    f"For x = {list(BF.HAND_X)}, w = {list(BF.HAND_W)}, dy = {list(EXERCISE_DY)} and eps = 1e-5, "
    f"what is dx (four numbers)?",
    _grade_dx, solution=[round(v, 6) for v in DX],
    mistakes={label: [round(v, 6) for v in vec] for label, (vec, _) in _DX_MISTAKES.items()})


# (2) the missing term of a broken backward ----------------------------------------------------
MISSING_CHOICES = {
    "a": "the term through r: − xhat · mean(g · xhat)",
    "b": "the weight w in g = dy · w",
    "c": "eps inside the square root",
    "d": "the row scale r in dw += dy · xhat",
}
_MISSING_HINTS = {
    "b": "Look at how g is formed: g = dy * w is there. What does dx lose compared with "
         "r·(g − xhat·mean(g·xhat))?",
    "c": "eps is in r = 1/sqrt(mean(x²)/cols + eps), which the kernel computes correctly.",
    "d": "dw uses xhat = x·r, so r is there. Compare the line that computes dx with the formula.",
}


def _grade_missing(answer):
    choice = answers.read_option(answer, MISSING_CHOICES)  # "a", "(A)", 1, the option's text
    if choice == "a":
        return correct("The kernel computes dx = r·g, as if r were a constant. The suite catches "
                       "it wherever the missing term is larger than the tolerance; it passes on "
                       "all-zero rows and with w = 0, where the term is 0.")
    return wrong(f"({choice}) {MISSING_CHOICES[choice]} is in the kernel.", _MISSING_HINTS[choice])


missing_term = Exercise(
    "missing_term",
    "The listing above is broken_bwd.no_r3_term. Which term is missing? Answer with a letter:\n"
    + "\n".join(f"  ({k}) {v}" for k, v in MISSING_CHOICES.items()),
    _grade_missing, solution="a", mistakes={f"answer {k}": k for k in ("b", "c", "d")})


# (3) the backward's bytes ------------------------------------------------------------------------
# not the chapter's priced 4096 x 4096 (its table shows that total): the count is the reader's
ROWS, COLS, DTYPE, PROGRAMS = 8192, 2048, "bf16", traffic.BACKWARD_PROGRAMS
ITEM = traffic.DTYPE_BYTES[DTYPE]
MATRIX = ROWS * COLS * ITEM
BACKWARD = traffic.price("rmsnorm_backward", ROWS, COLS, DTYPE, programs=PROGRAMS)
BACKWARD_BYTES = BACKWARD.bytes_total
PARTIALS = PROGRAMS * COLS * 4
_SMALL = COLS * ITEM * 2 + ROWS * 4  # w read, dw written, r read
_BYTES_MISTAKES = {
    "partials forgotten": (3 * MATRIX + _SMALL,
                           f"Each of the {PROGRAMS} programs writes one fp32 row of dw partials "
                           f"({COLS} x 4 B) and the second stage reads them back."),
    "the partials counted once": (3 * MATRIX + _SMALL + PARTIALS,
                                  f"Each of the {PROGRAMS} programs writes its row of partials "
                                  f"and the second kernel reads every partial once more: twice "
                                  f"{PROGRAMS} x {COLS} x 4 B."),
    "saved r forgotten": (BACKWARD_BYTES - ROWS * 4,
                          "The backward reads the row scale the forward saved: 4 bytes per row."),
    "dx forgotten": (BACKWARD_BYTES - MATRIX, "dx is written: rows x cols in bf16."),
    "fp32 activations": (BACKWARD_BYTES + 3 * MATRIX + COLS * ITEM * 2,
                         "The activations, dy, dx, w and dw are bf16, 2 bytes each; only r and "
                         "the partials are fp32."),
    "weight per row": (BACKWARD_BYTES + (ROWS - 1) * COLS * ITEM,
                       "w has no row dimension: every program reads the same bytes (the cache "
                       "serves them); count it once."),
    "eager autograd's traffic": (traffic.price("rmsnorm_backward_unfused", ROWS, COLS, DTYPE).bytes_total,
                                 "That is the unfused backward, with xhat, g, dy·xhat materialized."),
}


def _grade_bytes(answer):
    # "105,029,632", "105029632 B", arithmetic; a size in MB is read as rounded ("105.03 MB")
    reading = answers.read(answer, "a number of bytes", answers.BYTES)
    value, rounded = reading.value, reading.scaled
    if value != int(value) and not rounded:
        raise Malformed(f"bytes are whole numbers, got {value} (for megabytes, multiply by "
                        f"1,000,000).")
    if value <= 0:
        raise Malformed(f"a number of bytes moved is positive, got {value:,.0f}.")
    found = answers.match_count(reading, BACKWARD_BYTES,
                                {k: b for k, (b, _) in _BYTES_MISTAKES.items()})
    if found.rough:
        return wrong(*answers.more_digits(reading.shown(), found.also_fits,
                                          "the exact number of bytes"))
    if found.right:
        return correct(f"{BACKWARD_BYTES:,} B: x and dy read and dx written ({3 * MATRIX:,}), the "
                       f"partials written and read ({2 * PARTIALS:,}), w, r and dw "
                       f"({_SMALL:,}).")
    if found.mistake:
        return wrong(f"{value:,.0f} B ({found.mistake}).", _BYTES_MISTAKES[found.mistake][1])
    if math.isclose(value, BACKWARD_BYTES, rel_tol=1e-3):
        return wrong(f"{value:,.0f} B is close but not exact.",
                     "The count is exact: add the tensors' bytes one by one (or ask "
                     "traffic.price); a total rounded to MB is not it.")
    return wrong(f"{value:,.0f} B is not the fused backward's traffic.",
                 "List the tensors: reads x, dy, w, r; writes dx and the partials; the second "
                 "kernel reads the partials and writes dw.")


backward_bytes = Exercise(
    "backward_bytes",
    f"How many bytes (read + written, both kernels) does the fused backward with the two-stage dw "
    f"move at {ROWS} x {COLS} {DTYPE}, with {PROGRAMS} programs and a saved r?",
    _grade_bytes, solution=BACKWARD_BYTES,
    mistakes={label: b for label, (b, _) in _BYTES_MISTAKES.items()})

ALL = [dx_hand, missing_term, backward_bytes]
