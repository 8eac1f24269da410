"""Chapter 1 exercises: the formula by hand.

The exercises' row is x = [1, 2, -2, 4], w = [2, 1, 0.5, 1], eps = 1e-5: not the animation's
row, whose frames show every intermediate value.
"""
from __future__ import annotations

import math
import re

from . import answers
from .core import Exercise, Malformed, as_choice, as_fields, close, correct, wrong

X = [1.0, 2.0, -2.0, 4.0]
W = [2.0, 1.0, 0.5, 1.0]
EPS = 1e-5


def _row(values) -> str:
    return "[" + ", ".join(f"{v:g}" for v in values) + "]"


def _row_scale(x, eps=EPS, divide_by=None) -> float:
    n = divide_by if divide_by is not None else len(x)
    return 1.0 / math.sqrt(sum(v * v for v in x) / n + eps)


# (a) sum of squares
SUM_OF_SQUARES = sum(v * v for v in X)


def _grade_sum(answer) -> object:
    value = answers.number(answer, "the sum of squares (a number)")  # 25, "1+4+4+16", "4²+..."
    if close(value, SUM_OF_SQUARES, rel=0, abs_=1e-9):
        return correct(f"{value:g}: {' + '.join(f'{v * v:g}' for v in X)}, the signs gone after "
                       f"squaring.")
    if close(value, sum(X), abs_=1e-9):
        return wrong(f"{value:g} is the plain sum of x.",
                     "Square each element before adding: (-2)² = 4.")
    if close(value, sum(abs(v) for v in X), abs_=1e-9):
        return wrong(f"{value:g} is the sum of |x|.", "Square the elements, don't just drop the signs.")
    if close(value, SUM_OF_SQUARES / len(X), abs_=1e-9):
        return wrong(f"{value:g} is the mean of the squares, one step further.",
                     "The question asks for the sum before dividing by the column count.")
    if close(value, sum(v * abs(v) for v in X), abs_=1e-9):
        return wrong(f"{value:g} keeps the sign of -2 on its square.",
                     "A square is never negative: (-2)² = (-2)·(-2) = +4.")
    return wrong(f"{value:g} is not the sum of squares of {_row(X)}.",
                 "Square each of the four elements, then add the four squares.")


sum_of_squares = Exercise(
    "sum_of_squares", f"What is the sum of squares of x = {_row(X)}?", _grade_sum,
    solution=SUM_OF_SQUARES, mistakes={"plain sum": sum(X), "sum of |x|": sum(map(abs, X)),
                                       "mean": SUM_OF_SQUARES / len(X)})


# (a') the third output y[2]
OUTPUTS = [xi * _row_scale(X) * wi for xi, wi in zip(X, W)]
THIRD_OUTPUT = OUTPUTS[2]


def _grade_third(answer) -> object:
    value = answers.number(answer, "the third output y[2] (a number)")  # "−0.4" as copied, "-2/5"
    if close(value, THIRD_OUTPUT, rel=2e-4):
        return correct(f"y[2] = {X[2]:g} × {_row_scale(X):.4f} × {W[2]:g} ≈ {THIRD_OUTPUT:.4f}.")
    if close(value, -THIRD_OUTPUT, rel=2e-4):
        return wrong(f"{value:.4f} has the wrong sign.",
                     f"Only the squares lose the sign; y multiplies the original x = {X[2]:g}.")
    if close(value, X[2] * _row_scale(X), rel=2e-4):
        return wrong(f"{value:.4f} is x·r without the weight.",
                     f"Multiply by w[2] = {W[2]:g} as well.")
    if close(value, X[2] * _row_scale(X, divide_by=1) * W[2], rel=2e-4):
        return wrong(f"{value:.4f} uses the sum of squares instead of the mean.",
                     f"Divide the sum {SUM_OF_SQUARES:g} by the {len(X)} columns before the "
                     f"square root.")
    if close(value, X[2] * W[2] / (SUM_OF_SQUARES / len(X) + EPS), rel=2e-4):
        return wrong(f"{value:.4f} divides by the mean square, not by its square root.",
                     "r = 1/sqrt(mean + eps).")
    other = [j for j, y in enumerate(OUTPUTS) if j != 2 and close(value, y, rel=2e-4)]
    if other:
        return wrong(f"{value:.4f} is y[{other[-1]}], another column's output.",
                     f"The outputs count from 0: the third is y[2], with x[2] = {X[2]:g} and "
                     f"w[2] = {W[2]:g}.")
    return wrong(f"{value:.4f} is not y[2].",
                 f"Compute r = 1/sqrt({SUM_OF_SQUARES:g}/{len(X)} + 1e-5), then y[2] = x[2]·r·w[2] "
                 f"with x[2] = {X[2]:g}, w[2] = {W[2]:g}.")


third_output = Exercise(
    "third_output", f"What is the third output y[2] of x = {_row(X)}, w = {_row(W)} "
                    f"(4 decimals)?",
    _grade_third, solution=round(THIRD_OUTPUT, 4),
    mistakes={"sign lost": round(-THIRD_OUTPUT, 4),
              "weight forgotten": round(X[2] * _row_scale(X), 4),
              "sum instead of mean": round(X[2] * _row_scale(X, divide_by=1) * W[2], 4),
              "no square root": round(X[2] * W[2] / (SUM_OF_SQUARES / len(X) + EPS), 4)})


# (b) does w[2] change the row scale?
def _yes_or_no(answer) -> str:
    """'no', 'No.', 'no, r depends on x only', False -> 'no' (and the same for yes)."""
    if isinstance(answer, bool):
        return "yes" if answer else "no"
    if isinstance(answer, str):
        first = re.match(r"\s*(yes|no)\b[\s.,;:!-]*", answer, flags=re.I)
        if first:
            return first.group(1).lower()
    return as_choice(answer, ["yes", "no"])


def _grade_weight(answer) -> object:
    choice = _yes_or_no(answer)
    if choice == "no":
        return correct("no: r depends only on x (and eps); the weight multiplies afterwards, "
                       "one column at a time.")
    return wrong("the row scale is computed from x alone.",
                 "Look at the formula: r = 1/sqrt(mean(x²) + eps) contains no w. Only y[2] changes.")


weight_and_scale = Exercise(
    "weight_and_scale",
    f"Does changing w[2] from {W[2]:g} to 1 change the row scale r? ('yes' or 'no')",
    _grade_weight, solution="no", mistakes={"weights feed the reduction": "yes"})


# (c) dividing 13 columns by 16
PADDED_FACTOR = math.sqrt(16 / 13)
_DIRECTIONS = {"larger": "larger", "bigger": "larger", "greater": "larger", "higher": "larger",
               "smaller": "smaller", "lower": "smaller", "less": "smaller"}


def _direction(word) -> str:
    if isinstance(word, str) and word.strip().lower() in _DIRECTIONS:
        return _DIRECTIONS[word.strip().lower()]
    return as_choice(word, ["larger", "smaller"])


def _factor(value) -> answers.Reading:
    """A number, or text: '1.1094', '16/13', 'sqrt(16/13)', 'sqrt(16)/sqrt(13)', '(16/13)**0.5'."""
    if isinstance(value, str) and value.strip().endswith("%"):
        raise Malformed(f"{value.strip()!r} is a percentage; the question asks for the factor "
                        f"r_wrong / r_right, e.g. 1.05 for an r 5% larger.")
    return answers.read(value, "the factor (a number)")


def _grade_padding(answer) -> object:
    example = "answer = ('smaller', 0.9)"
    if isinstance(answer, (str, bytes)):
        raise Malformed(f"expected a pair (direction, factor), e.g. {example}.")
    first, second = as_fields(answer, ["direction", "factor"], example)
    if not isinstance(first, str) and isinstance(second, str):  # (1.1, 'larger'): either order
        first, second = second, first
    direction = _direction(first)
    reading = _factor(second)
    factor = reading.value
    if factor <= 0:
        return wrong(f"a factor of {factor:g} cannot scale a positive r.",
                     "The factor compares r computed both ways: r_wrong / r_right > 0.")
    as_written = answers.match(reading, PADDED_FACTOR, rel=2e-3)  # 1.1 fits, 1.10 does not
    if direction == "larger" and as_written.right:
        return correct(f"larger by sqrt(16/13) ≈ {PADDED_FACTOR:.4f} (when eps is negligible): the "
                       f"mean shrinks by 13/16, and r = 1/sqrt(mean) grows by the square root of "
                       f"the inverse.")
    if close(factor, 16 / 13, rel=2e-3) or close(factor, 13 / 16, rel=2e-3):
        return wrong(f"{factor:.4f} is the change of the mean, not of r.",
                     "r is 1/sqrt(mean): take the square root of the mean's factor.")
    if direction == "smaller":
        return wrong("dividing by 16 instead of 13 makes the mean smaller, so r = 1/sqrt(mean) "
                     "gets larger.", "A smaller denominator under the square root gives a larger r.")
    if close(factor, PADDED_FACTOR - 1, rel=2e-3) or close(factor, 100 * (PADDED_FACTOR - 1),
                                                            rel=2e-3):
        return wrong(f"{factor:g} is how much r grows, not the factor it grows by.",
                     "The factor is r_wrong / r_right: an r 10% larger has the factor 1.1.")
    if close(factor, 1 / PADDED_FACTOR, rel=2e-3):
        return wrong(f"{factor:.4f} is r_right / r_wrong: a larger r needs a factor above 1.",
                     "The factor is r_wrong / r_right: how many times the wrong r is the right one.")
    if as_written.rough:
        return wrong(f"the direction is right, but {reading.shown()} is too rough to tell the "
                     f"factor from 1 (no change).",
                     "Give the factor with at least two significant digits.")
    return wrong(f"the direction is right but {factor:.4f} is not the factor.",
                 "Compare 1/sqrt(S/16) with 1/sqrt(S/13) for the same sum S.")


padded_mean = Exercise(
    "padded_mean",
    "A 13-column row is divided by 16 (the padded width) instead of 13. Is r larger or smaller, "
    "and by what factor? Answer (direction, factor).",
    _grade_padding, solution=("larger", round(PADDED_FACTOR, 4)),
    mistakes={"inverse direction": ("smaller", round(1 / PADDED_FACTOR, 4)),
              "no square root": ("larger", round(16 / 13, 4)),
              "mean factor": ("smaller", round(13 / 16, 4))})

ALL = [sum_of_squares, third_output, weight_and_scale, padded_mean]
