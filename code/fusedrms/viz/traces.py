"""Traces of the algorithms the animations draw, computed step by step (never typed numbers)."""
from __future__ import annotations

import math


def row_values(values, name: str) -> list[float]:
    """A row of numbers from a sequence or from what a reader types, e.g. "3, 4, -3, -4"."""
    if isinstance(values, str):
        try:
            return [float(t) for t in values.replace(",", " ").split()]
        except ValueError:
            raise ValueError(f"{name}: write numbers separated by commas, e.g. 3, 4, -3, -4") from None
    return [float(t) for t in values]


def row_scale(total: float, cols: int, eps: float) -> tuple[float, float]:
    """``(mean, r)`` of a row whose squares sum to ``total``: r = 1/sqrt(total/cols + eps).

    Refuses what would draw inf, NaN or a division by zero instead of numbers.
    """
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be a finite number >= 0, got {eps}")
    if not math.isfinite(total):
        raise ValueError("the squares of x overflow float64: keep |x| below 1e150")
    mean = total / cols  # the real column count, never a padded width
    if mean + eps == 0:
        raise ValueError("an all-zero row with eps = 0 divides by zero: use eps > 0")
    return mean, 1.0 / math.sqrt(mean + eps)


def check_output(y: list[float]) -> None:
    if not all(math.isfinite(v) for v in y):
        raise ValueError("y overflows float64: use smaller weights")


def check_row(x: list[float], w: list[float], max_cols: int) -> None:
    """The inputs an animation can draw: 1..max_cols finite values and one weight per column."""
    if not 1 <= len(x) <= max_cols:
        raise ValueError(f"the animation draws 1 to {max_cols} columns; got {len(x)}")
    if len(w) != len(x):
        raise ValueError(f"w needs one weight per column: {len(x)} values, got {len(w)}")
    if not all(math.isfinite(v) for v in x + w):
        raise ValueError("x and w must be finite numbers for the animation")


def tree_reduce_levels(values: list[float]) -> list[list[float]]:
    """Pairwise tree sum as a block of threads does it: each level adds the upper half onto the
    lower half (``s[i] += s[i + stride]`` for ``stride = n/2, n/4, ..., 1``).

    ``values`` is padded with zeros to a power of two (idle threads contribute 0). Returns every
    level, the first being the padded input and the last ``[total]``.
    """
    n = 1
    while n < len(values):
        n *= 2
    level = [float(v) for v in values] + [0.0] * (n - len(values))
    levels = [level]
    while len(level) > 1:
        half = len(level) // 2
        level = [level[i] + level[i + half] for i in range(half)]
        levels.append(level)
    return levels
