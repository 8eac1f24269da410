import math
from fractions import Fraction

import pytest

from fusedrms import traffic
from fusedrms.exercises import ch02
from tests.exercises.prediction_contract import assert_prediction_contract


def test_mistakes_are_distinct_from_the_solution_and_each_other():
    for e in ch02.ALL:
        if callable(e.solution):  # a function: its mistakes are tested below
            continue
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
    assert ch02.speedup_bound.check(" 7 / 4 ").ok
    assert ch02.residual_bytes.check(str(ch02.RESIDUAL_BYTES)).ok
    assert ch02.intensity.check(5 / 6).ok  # the many-rows limit rounds to the same answer
    assert not ch02.residual_bytes.check(ch02.RESIDUAL_BYTES + 2).ok  # bytes are exact


@pytest.mark.parametrize("written", ["33,562,624", "33 562 624", "33_562_624", "33\u202f562\u202f624",
                                     33562624, 33562624.0, "33562624"])
def test_residual_bytes_accepts_thousands_separators(written):
    assert ch02.RESIDUAL_BYTES == 33562624
    assert ch02.residual_bytes.check(written).ok


@pytest.mark.parametrize("bad", ["33,56,2624", "33.562.624x", "33,562,625"])
def test_residual_bytes_rejects_badly_grouped_or_wrong_counts(bad):
    assert not ch02.residual_bytes.check(bad).ok


@pytest.mark.parametrize("written", [0.83, "0.83", 0.833, "5/6", Fraction(5, 6), 5 / 6, " 5 / 6 "])
def test_intensity_accepts_two_digits_and_fractions(written):
    assert ch02.intensity.check(written).ok


@pytest.mark.parametrize("bad,needle", [(0.8, "too rough"), (0.84, "not the intensity"),
                                        ("5/7", "not the intensity"), ("5/0", "fraction")])
def test_intensity_rejects_wrong_or_rough_values(bad, needle):
    fb = ch02.intensity.check(bad)
    assert not fb.ok and needle in fb.message


@pytest.mark.parametrize("bad,needle", [("5/4", "separate multiply adds 2"),
                                        (7 / 3, "4 row-trips"), (3, "Launches"),
                                        ("4/7", "slow time"), (1.6, "no row dimension"),
                                        ("5/3", "5/3"), (1.4, "not the bound")])
def test_speedup_bound_rejects_each_mistake_with_a_hint(bad, needle):
    fb = ch02.speedup_bound.check(bad)
    assert not fb.ok and needle in (fb.message + fb.hint)


def test_speedup_bound_is_the_models_chain_count():
    assert ch02.BOUND == Fraction(7, 4)
    assert traffic.speedup_bound("torch_add_rmsnorm", "fused_add_rmsnorm_residual") == Fraction(5, 4)


@pytest.mark.parametrize("malformed", ["5//4", "five quarters", "5/0"])
def test_speedup_bound_malformed_answers_get_a_message(malformed):
    fb = ch02.speedup_bound.check(malformed)
    assert not fb.ok and fb.message


@pytest.mark.parametrize("ex,answer", [
    (ch02.residual_bytes, "33562624 B"), (ch02.residual_bytes, "33,562,624 bytes"),
    (ch02.speedup_bound, "1.75x"), (ch02.speedup_bound, "7/4 ×"), (ch02.speedup_bound, "1.75 times"),
    (ch02.intensity, "0.8332 FLOP/B"), (ch02.intensity, "5/6 FLOP/B"),
    (ch02.intensity, "0.83 flop/byte")])
def test_answers_with_their_unit_pass(ex, answer):
    assert ex.check(answer).ok


@pytest.mark.parametrize("answer", ["33.56e6", 3.356e7, 33562625])
def test_residual_bytes_rounded_or_off_by_a_byte_is_told_to_count_exactly(answer):
    fb = ch02.residual_bytes.check(answer)
    assert not fb.ok and "not exact" in fb.message and fb.hint


def test_wrong_answers_with_a_unit_still_get_their_hint():
    assert "weight left out" in ch02.residual_bytes.check("33554432 B").message
    assert "PyTorch's two kernels" in ch02.speedup_bound.check("1.25x").message
    assert "weight counted per row" in ch02.intensity.check("0.6249 FLOP/B").message


@pytest.mark.parametrize("ex,answer", [(ch02.intensity, "FLOP/B"), (ch02.speedup_bound, "x"),
                                       (ch02.residual_bytes, "bytes"), (ch02.intensity, "1/0")])
def test_a_unit_alone_is_malformed(ex, answer):
    fb = ex.check(answer)
    assert not fb.ok and "could not be read" in fb.message and not fb.error


@pytest.mark.parametrize("written", ["33.56 MB", "33562.624 kB", "32.0078 MiB", "0.03356 GB"])
def test_residual_bytes_accepts_a_size_rounded_as_written(written):
    assert ch02.residual_bytes.check(written).ok


@pytest.mark.parametrize("written,needle", [
    ("34 MB", "too rough"), ("32 MiB", "too rough"), ("33.55 MB", "weight left out"),
    ("25.17 MB", "residual write forgotten"), (33.56, "looks like megabytes"),
])
def test_residual_bytes_rough_or_slipped_sizes_fail_with_a_reason(written, needle):
    fb = ch02.residual_bytes.check(written)
    assert not fb.ok and needle in fb.message and fb.hint


def test_intensity_names_a_rounded_mistake():
    assert "eager chain" in ch02.intensity.check(0.36).message


def test_speedup_bound_percentage_is_malformed_with_a_message():
    fb = ch02.speedup_bound.check("175%")
    assert not fb.ok and "percentage" in fb.message


# ---- issue 25: forms a reader copies or types (the shared reader, exercises.answers)

@pytest.mark.parametrize("answer", ["4*1024*4096*2 + 4096*2", "33\u2009562\u2009624 B", "33.56 MB",
                                    "33,562.624 kB", "32.008 MiB"])
def test_residual_bytes_accepts_arithmetic_and_sizes_rounded_in_a_unit(answer):
    assert ch02.residual_bytes.check(answer).ok


@pytest.mark.parametrize("answer,needle", [("33.6 MB", "too rough"), ("3.4e1 MB", "too rough"),
                                           ("3*1024*4096*2 + 4096*2", "residual write forgotten")])
def test_residual_bytes_rough_sizes_are_asked_for_more_digits(answer, needle):
    fb = ch02.residual_bytes.check(answer)
    assert not fb.ok and needle in fb.message and fb.hint and "List the tensors" not in fb.hint


@pytest.mark.parametrize("answer", ["1.75\u00d7", "7/4 times", "\u2248 1.75"])
def test_speedup_bound_accepts_a_ratio_sign(answer):
    assert ch02.speedup_bound.check(answer).ok


def test_speedup_bound_right_to_two_digits_is_asked_for_more():
    fb = ch02.speedup_bound.check("1.8")
    assert not fb.ok and "too rough" in fb.message and "more digits" in fb.hint


def test_residual_bytes_a_size_in_a_unit_that_does_not_round_from_the_count_says_so():
    fb = ch02.residual_bytes.check("33.57 MB")
    assert not fb.ok and "33.57 MB" in fb.message and "does not round" in fb.message


# ---- (d) the model as a function ----

def test_bytes_moved_solution_is_the_model_and_the_page_shows_it():
    from pathlib import Path

    import nbformat

    from fusedrms.viz import file_section

    for case in ch02.MODEL_CASES:
        assert ch02.solution_bytes_moved(*case) == ch02.model_bytes(*case), case
    nb = nbformat.read(Path(__file__).resolve().parents[2] / "chapters"
                       / "02_fusion_boundary.ipynb", 4)
    section = file_section(ch02.__file__, "bytes-moved")
    assert any(c.cell_type == "markdown" and section in c.source for c in nb.cells)


@pytest.mark.parametrize("mistake", sorted(ch02.BYTES_MOVED_HINTS))
def test_bytes_moved_names_each_broken_convention(mistake):
    fb = ch02.bytes_moved.check(ch02.bytes_moved.mistakes[mistake])
    assert not fb.ok and ch02.BYTES_MOVED_WORDS[mistake] in fb.message
    assert fb.hint == ch02.BYTES_MOVED_HINTS[mistake]


def test_each_broken_convention_changes_some_case():
    """No mistake model is the model itself, and no two agree everywhere."""
    priced = {m: [ch02._broken(*c, m) for c in ch02.MODEL_CASES] for m in ch02.BYTES_MOVED_HINTS}
    right = [ch02.model_bytes(*c) for c in ch02.MODEL_CASES]
    values = [right, *priced.values()]
    assert len({tuple(v) for v in values}) == len(values)


def _endless(step, rows, cols, dtype):
    while True:
        pass


def _raises(step, rows, cols, dtype):
    raise RuntimeError("no model here")


def test_bytes_moved_junk_gets_a_verdict(monkeypatch):
    from fusedrms.exercises import grader

    monkeypatch.setattr(grader, "LIMIT_S", 2.0)
    fb = ch02.bytes_moved.check(_endless)
    assert not fb.ok and "did not finish" in fb.message
    fb = ch02.bytes_moved.check(_raises)
    assert not fb.ok and "raised RuntimeError" in fb.message
    for junk in ("def f(): ...", 3, [1, 2], print):
        fb = ch02.bytes_moved.check(junk)
        assert not fb.ok and fb.message and not fb.error, junk
    fb = ch02.bytes_moved.check(lambda step, rows, cols, dtype: (1.5, 2.5, 3.5))
    assert not fb.ok and "pair" in fb.message


def test_bytes_moved_accepts_another_correct_function():
    def by_table(step, rows, cols, dtype):
        item = 4 if dtype == "fp32" else 2
        trips = {"eager_add_rmsnorm": (4, 3), "torch_add_rmsnorm": (3, 2),
                 "fused_add_rmsnorm": (2, 1), "fused_add_rmsnorm_residual": (2, 2)}[step]
        return [trips[0] * rows * cols * item + cols * item, trips[1] * rows * cols * item]

    assert ch02.bytes_moved.check(by_table).ok


# ---- predict, then look: the measured speedup over PyTorch's two kernels ----

FUSED = ch02.predict_fused_speedup


def test_the_speedup_prediction_is_graded_against_the_census_the_page_tells():
    found = ch02.recorded_speedup()
    # the folded solution: above the byte ratio, because the fused kernel's rate is higher (and
    # by less than a quarter: the rates differ, the bytes still set the time)
    assert float(ch02.BYTE_RATIO) < found["speedup"] < 1.25 * float(ch02.BYTE_RATIO)
    assert found["fused"]["pct_of_copy"] > found["torch"]["pct_of_copy"]
    assert_prediction_contract(FUSED, f"{found['speedup']:.2f}x", f"{found['speedup']:.2f}×.")


def test_each_wrong_speedup_prediction_says_what_its_gap_teaches():
    assert "same rate" in FUSED.check("5/3").hint
    assert "launches" in FUSED.check(2).hint
    assert "row-trips" in FUSED.check(1.2).hint
    assert "slow time over the fast" in FUSED.check(1 / ch02.recorded_speedup()["speedup"]).hint


@pytest.mark.parametrize("bad", ["abc", 0, -1.7, "1.7 µs", [1.7], "\u22121.7", float("nan")])
def test_a_malformed_speedup_prediction_gets_a_message(bad):
    fb = FUSED.check(bad)
    assert not fb.ok and fb.message and not fb.error


def _the_model_itself(step, rows, cols, dtype):
    p = traffic.price(step, rows, cols, dtype)
    return p.bytes_read, p.bytes_written


def test_bytes_moved_refuses_the_chapters_model_itself():
    fb = ch02.bytes_moved.check(_the_model_itself)
    assert not fb.ok and "traffic.price" in fb.message and fb.hint, str(fb)


def _returns_a_long_tensor(step, rows, cols, dtype):
    import torch

    return torch.zeros(2 ** 26)


def test_bytes_moved_names_a_long_return_value_at_once():
    fb = ch02.bytes_moved.check(_returns_a_long_tensor)
    assert not fb.ok and "Tensor" in fb.message and "did not finish" not in fb.message, str(fb)
