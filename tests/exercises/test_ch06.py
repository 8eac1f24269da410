"""Chapter 6 checkers beyond the shared contract in test_every_exercise.py."""
import math

import pytest

from fusedrms import traffic
from fusedrms.exercises import ch06


def test_mistakes_are_distinguishable_from_the_solution():
    for e in (ch06.predict_floor, ch06.percent_of_floor):
        for label, v in e.mistakes.items():
            assert not math.isclose(v, e.solution, rel_tol=0.02), label


def test_the_floor_follows_from_first_principles():
    rows, cols = ch06.ROWS, ch06.COLS
    nbytes = 3 * rows * cols * 2 + cols * 2  # x, r read; y written; w once; bf16
    assert traffic.price("fused_add_rmsnorm", rows, cols, "bf16").bytes_total == nbytes
    assert ch06.predict_floor.solution == pytest.approx(nbytes / (ch06.BANDWIDTH_GBPS * 1e9) * 1e6)
    assert ch06.predict_floor.check(f"{ch06.FLOOR_US:.3f}").ok  # text answers are read too
    assert ch06.percent_of_floor.solution == pytest.approx(100 * ch06.FLOOR_US / ch06.MEASURED_US)
    assert ch06.SUSPICIOUS_US < ch06.BIG_FLOOR_US / 10  # the suspicious number is absurd
