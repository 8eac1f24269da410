import pytest

from fusedrms import traffic
from fusedrms.exercises import ch09


@pytest.mark.parametrize("exercise", ch09.ALL, ids=lambda e: e.name)
def test_solution_passes_and_every_mistake_fails_with_a_hint(exercise):
    assert exercise.check(exercise.solution).ok
    for label, answer in exercise.mistakes.items():
        feedback = exercise.check(answer)
        assert not feedback.ok and feedback.hint, (exercise.name, label)


def test_mistakes_are_distinct_from_the_solution():
    for e in ch09.ALL:
        values = [repr(e.solution), *(repr(v) for v in e.mistakes.values())]
        assert len(set(values)) == len(values), e.name


def test_hand_dx_is_the_formula_and_other_spellings_pass():
    import torch

    from fusedrms import reference

    t = torch.tensor
    ref = reference.rmsnorm_backward(t([ch09.BF.HAND_X], dtype=torch.float64),
                                     t(ch09.BF.HAND_W, dtype=torch.float64),
                                     t([ch09.EXERCISE_DY], dtype=torch.float64), 1e-5,
                                     accum=torch.float64)["dx"][0]
    assert ch09.DX == pytest.approx(ref.tolist(), rel=1e-12)
    assert ch09.dx_hand.check(ref).ok  # a tensor
    assert ch09.dx_hand.check(tuple(round(v, 4) for v in ch09.DX)).ok  # 4 decimals
    assert not ch09.dx_hand.check([round(v, 1) for v in ch09.DX]).ok  # too coarse


def test_missing_term_accepts_spellings_of_the_letter():
    for spelling in ("a", "A", " (a) ", "a)"):
        assert ch09.missing_term.check(spelling).ok, spelling
    assert "could not be read" in ch09.missing_term.check("e").message


def test_backward_bytes_is_the_models_number_and_exact():
    assert ch09.backward_bytes.solution == traffic.price(
        "rmsnorm_backward", ch09.ROWS, ch09.COLS, "bf16").bytes_total
    assert ch09.backward_bytes.check(str(ch09.BACKWARD_BYTES)).ok
    assert not ch09.backward_bytes.check(ch09.BACKWARD_BYTES + 4).ok
    assert "whole numbers" in ch09.backward_bytes.check(1.5).message


@pytest.mark.parametrize("decimals", [3, 4])
def test_hand_dx_rounded_to_the_digits_written_passes_in_every_container(decimals):
    import numpy as np
    import torch

    rounded = [round(v, decimals) for v in ch09.DX]
    for answer in (rounded, np.array(rounded), np.array(rounded, dtype=np.float32),
                   torch.tensor(rounded), [f"{v:.{decimals}f}" for v in ch09.DX]):
        assert ch09.dx_hand.check(answer).ok, (decimals, answer)


@pytest.mark.parametrize("label", list(ch09.dx_hand.mistakes))
def test_hand_dx_mistakes_rounded_still_fail(label):
    for decimals in (3, 4):
        rounded = [round(v, decimals) for v in ch09.dx_hand.mistakes[label]]
        feedback = ch09.dx_hand.check(rounded)
        assert not feedback.ok and feedback.hint, (label, decimals)


def test_backward_bytes_reads_thousands_separators_and_says_what_a_fraction_means():
    assert ch09.backward_bytes.check(f"{ch09.BACKWARD_BYTES:,}").ok
    feedback = ch09.backward_bytes.check(ch09.BACKWARD_BYTES / 1e6)
    assert not feedback.ok and "megabytes" in feedback.message
    assert not ch09.backward_bytes.check(f"{ch09.BACKWARD_BYTES + 2:,}").ok


@pytest.mark.parametrize("answer", [-ch09.BACKWARD_BYTES, 0])
def test_backward_bytes_calls_a_non_positive_count_malformed(answer):
    fb = ch09.backward_bytes.check(answer)
    assert not fb.ok and "could not be read" in fb.message and "positive" in fb.message


def test_backward_bytes_partials_counted_once_says_how_often_they_cross():
    fb = ch09.backward_bytes.check(3 * ch09.MATRIX + ch09._SMALL + ch09.PARTIALS)
    assert not fb.ok and "once more" in fb.hint and str(ch09.PROGRAMS) in fb.hint


def test_backward_bytes_is_not_the_chapters_priced_shape_and_a_rounded_total_is_close():
    # the chapter's pricing table shows 4096 x 4096: the exercise asks for another shape
    assert ch09.BACKWARD_BYTES != traffic.price("rmsnorm_backward", 4096, 4096,
                                                "bf16").bytes_total
    rounded = round(ch09.BACKWARD_BYTES, -4)
    fb = ch09.backward_bytes.check(rounded)
    assert not fb.ok and "close but not exact" in fb.message and fb.hint


# ---- issue 25: forms a reader copies or types (the shared reader, exercises.answers)

def test_hand_dx_right_to_two_decimals_is_asked_for_more_digits_not_called_wrong():
    fb = ch09.dx_hand.check([round(v, 2) for v in ch09.DX])
    assert not fb.ok and "too few digits" in fb.message and "3 decimals" in fb.hint
    assert "not dx" not in fb.message


@pytest.mark.parametrize("answer", [
    [f"{v:.4f}".replace("-", "\u2212") for v in ch09.DX],
    "[" + ", ".join(f"{v:.4f}".replace("-", "\u2212") for v in ch09.DX) + "]",
])
def test_hand_dx_accepts_entries_copied_with_a_unicode_minus(answer):
    assert ch09.dx_hand.check(answer).ok


@pytest.mark.parametrize("answer", [1, "1", ch09.MISSING_CHOICES["a"], "the term through r"])
def test_missing_term_accepts_the_option_number_and_text(answer):
    assert ch09.missing_term.check(answer).ok


def test_missing_term_wrong_option_by_number_gets_its_hint():
    fb = ch09.missing_term.check(2)
    assert not fb.ok and "(b)" in fb.message and fb.hint


@pytest.mark.parametrize("answer", ["105.03 MB", "100.16 MiB", "105029632 B", "105,029,632 bytes"])
def test_backward_bytes_accepts_a_size_rounded_in_a_unit(answer):
    assert ch09.backward_bytes.check(answer).ok


def test_backward_bytes_too_rough_is_asked_for_more_digits():
    fb = ch09.backward_bytes.check("105 MB")
    assert not fb.ok and "too rough" in fb.message and "saved r forgotten" in fb.message
