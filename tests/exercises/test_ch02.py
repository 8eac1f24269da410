import math
from fractions import Fraction

import pytest

from fusedrms import traffic
from fusedrms.exercises import ch02


def test_mistakes_are_distinct_from_the_solution_and_each_other():
    for e in ch02.ALL:
        values = [e.solution, *e.mistakes.values()]
        rel = 0 if e is ch02.residual_bytes else 5e-3  # bytes are graded exactly, ratios at 2e-3
        for i, a in enumerate(values):
            for b in values[i + 1:]:
                assert a != b and not math.isclose(a, b, rel_tol=rel), (e.name, a, b)


def test_solutions_are_the_models_numbers():
    m = ch02.ROWS * ch02.COLS * 2
    assert ch02.residual_bytes.solution == 4 * m + ch02.COLS * 2
    assert ch02.speedup_bound.solution == 1.75
    assert ch02.intensity.solution == pytest.approx(
        (5 * ch02.ROWS * ch02.COLS + 3 * ch02.ROWS) / (3 * m + ch02.COLS * 2), rel=1e-4)
    assert traffic.speedup_bound("eager_add_rmsnorm", "fused_add_rmsnorm_residual") == Fraction(7, 4)


def test_other_spellings_of_a_right_answer_pass():
    assert ch02.speedup_bound.check("7/4").ok
    assert ch02.speedup_bound.check(Fraction(7, 4)).ok
    assert ch02.residual_bytes.check(str(ch02.RESIDUAL_BYTES)).ok
    assert ch02.intensity.check(5 / 6).ok  # the many-rows limit rounds to the same answer
    assert not ch02.residual_bytes.check(ch02.RESIDUAL_BYTES + 2).ok  # bytes are exact
