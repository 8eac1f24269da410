
import pytest

from fusedrms.kernels import rmsnorm_fp8_spec
from fusedrms import traffic
from fusedrms.exercises import ch08
from tests.exercises.prediction_contract import (assert_asked_before_shown,
                                                  assert_prediction_contract)


def test_mistakes_are_distinct_from_the_solution_and_each_other():
    for e in ch08.ALL:
        values = [repr(e.solution), *(repr(v) for v in e.mistakes.values())]
        assert len(set(values)) == len(values), e.name


def test_solutions_follow_from_first_principles():
    rows, cols = ch08.ROWS, ch08.COLS
    x, w, codes, scales = rows * cols * 2, cols * 2, rows * cols, rows * (cols // 128) * 4
    assert ch08.fused_bytes.solution == [x + w, codes + scales]
    assert ch08.bytes_saved.solution == 2 * x
    assert ch08.zero_block_scale.solution == pytest.approx(1e-4 / 448, rel=1e-6)
    assert ch08.bytes_saved.solution == (traffic.price("rmsnorm_fp8_naive", rows, cols).bytes_total
                                         - traffic.price("rmsnorm_fp8_fused", rows, cols).bytes_total)


def test_the_reorder_question_has_one_right_letter_and_accepts_spellings():
    assert ch08.reorder_failure.check(" B ").ok
    assert set(ch08.REORDER_CHOICES) == {"b"} | {v for v in ch08.reorder_failure.mistakes.values()}
    assert not ch08.reorder_failure.check("f").ok  # not a listed choice


def test_other_spellings_and_near_misses():
    assert ch08.fused_bytes.check(tuple(ch08.fused_bytes.solution)).ok
    assert ch08.bytes_saved.check(str(ch08.bytes_saved.solution)).ok
    assert not ch08.bytes_saved.check(ch08.bytes_saved.solution + 1).ok  # bytes are exact
    read, written = ch08.fused_bytes.solution
    fb = ch08.fused_bytes.check([read, written + 4])
    assert not fb.ok and "bytes read are right" in fb.message
    assert ch08.zero_block_scale.check(1e-4 / 448).ok
    assert not ch08.bytes_saved.check(2.3).ok and "ratio" in ch08.bytes_saved.check(2.3).message


def test_the_exercise_shape_is_not_the_chapters():
    assert (ch08.ROWS, ch08.COLS) != (2, 7168) and ch08.COLS == rmsnorm_fp8_spec.HIDDEN_SIZE


def test_reorder_choices_are_of_similar_length():
    """The right option must not stand out by its length."""
    lengths = {k: len(v) for k, v in ch08.REORDER_CHOICES.items()}
    assert max(lengths.values()) <= 1.25 * min(lengths.values()), lengths


@pytest.mark.parametrize("written", [2.23e-7, "2.23e-7", 2.232e-7, 2.2e-7, 2.2321e-07,
                                     1e-4 / 448])
def test_zero_block_scale_accepts_the_value_as_written(written):
    assert ch08.zero_block_scale.check(written).ok


@pytest.mark.parametrize("written", [2.24e-7, 2e-7, 2.3e-7, 1e-4, 0.0])
def test_zero_block_scale_rejects_other_values(written):
    assert not ch08.zero_block_scale.check(written).ok


@pytest.mark.parametrize("written", [229376, 229376.0, 229376.00000000003, 229375.99999999997,
                                     "229,376", "229_376", 2 * 8 * 7168 * 2.0])
def test_bytes_saved_accepts_float_noise_forms(written):
    assert ch08.bytes_saved.check(written).ok


def test_bytes_saved_still_exact_to_a_byte():
    assert not ch08.bytes_saved.check(229377).ok
    assert not ch08.bytes_saved.check(229375.5).ok


def test_fused_bytes_accepts_float_noise():
    read, written = ch08.fused_bytes.solution
    assert ch08.fused_bytes.check([read + 1e-9, written * (1 + 1e-12)]).ok


@pytest.mark.parametrize("spelling", ["b", " B ", "(b)", "b)", "(b) each cast rounds"])
def test_reorder_accepts_the_option_letter_however_written(spelling):
    assert ch08.reorder_failure.check(spelling).ok


def test_fused_bytes_swapped_gets_its_own_hint():
    read, written = ch08.fused_bytes.solution
    feedback = ch08.fused_bytes.check([written, read])
    assert not feedback.ok and "swapped" in feedback.message and feedback.hint


@pytest.mark.parametrize("written", [["129,024", "59,136"], {"read": 129024, "written": 59136},
                                     {"bytes_read": 129024, "bytes_written": 59136},
                                     ["126 KiB", "57.75 KiB"], ("129024 B", 59136)])
def test_fused_bytes_accepts_other_reasonable_forms(written):
    assert ch08.fused_bytes.check(written).ok, ch08.fused_bytes.check(written)


@pytest.mark.parametrize("written", ["224 KiB", "229.376 kB", "229 376", "0.229376 MB"])
def test_bytes_saved_accepts_text_with_a_unit(written):
    assert ch08.bytes_saved.check(written).ok


def test_numbers_in_another_unit_are_named_not_called_ratios():
    saved = ch08.bytes_saved.check(0.229376)
    assert not saved.ok and "in MB" in saved.message and "ratio" not in saved.message
    assert "in KiB" in ch08.bytes_saved.check(224).message
    read, written = ch08.fused_bytes.solution
    fused = ch08.fused_bytes.check([read / 1024, written / 1024])
    assert not fused.ok and "in KiB" in fused.message
    keys = ch08.fused_bytes.check({"in": read, "out": written})
    assert not keys.ok and "'read' and 'written'" in keys.message


# ---- issue 25: forms a reader copies or types (the shared reader, exercises.answers)

@pytest.mark.parametrize("written", ["1e-4/448", "1e\u22124/448", "2.23\u00d710\u207b\u2077", "2.232e\u22127"])
def test_zero_block_scale_accepts_arithmetic_and_copied_notation(written):
    assert ch08.zero_block_scale.check(written).ok


def test_zero_block_scale_right_to_one_digit_is_asked_for_more():
    fb = ch08.zero_block_scale.check("2e-7")
    assert not fb.ok and "too rough" in fb.message and "more digits" in fb.hint


@pytest.mark.parametrize("written", ["229.4 kB", "0.229 MB", "2*8*7168*2", "229\u2009376 B"])
def test_bytes_saved_accepts_a_size_rounded_in_a_unit_and_arithmetic(written):
    assert ch08.bytes_saved.check(written).ok


def test_bytes_saved_rounded_to_where_a_slip_fits_is_asked_for_more_digits():
    fb = ch08.bytes_saved.check("0.23 MB")  # also 2 x 114,688 + the scales, rounded
    assert not fb.ok and "too rough" in fb.message and "scales counted as saved" in fb.message


@pytest.mark.parametrize("written", [["129 kB", "59.14 kB"], "129,024, 59,136",
                                     ["8*7168*2 + 7168*2", "8*7168 + 8*56*4"]])
def test_fused_bytes_accepts_rounded_sizes_text_and_arithmetic(written):
    assert ch08.fused_bytes.check(written).ok


def test_fused_bytes_too_rough_is_asked_for_more_digits():
    fb = ch08.fused_bytes.check(["0.13 MB", "0.06 MB"])
    assert not fb.ok and "too rough" in fb.message


@pytest.mark.parametrize("spelling", [2, "2", ch08.REORDER_CHOICES["b"], "each cast rounds"])
def test_reorder_accepts_the_option_number_and_text(spelling):
    assert ch08.reorder_failure.check(spelling).ok


# ---- predict, then look: the fused kernel's share of its copy floor

SHARE = ch08.predict_floor_share


def test_the_share_is_the_one_the_chapters_table_shows():
    from fusedrms import records
    from fusedrms.book import ch08 as book

    shown = book.timing_rows(records.load("fp8_quant", records.COMMITTED))[-1]
    found = ch08.recorded_timing()
    assert found["pct_floor"] == shown["pct_floor"] and found["rows"] == shown["rows"]
    # what the hints say: slower than the copy, under twice its floor, the speedup near the bytes'
    assert 50 < found["pct_floor"] < 90 * (1 - ch08.FLOOR_CLOSE)
    assert abs(found["speedup"] / found["bytes_ratio"] - 1) < 0.15


def test_the_recorded_share_passes_and_every_typical_prediction_fails_quoting_it():
    pct = ch08.recorded_timing()["pct_floor"]
    assert_prediction_contract(SHARE, f"{pct:.0f} %", f"{pct:.0f}% of its floor")


def test_each_wrong_share_says_what_its_gap_teaches():
    pct = ch08.recorded_timing()["pct_floor"]
    assert "float64" in SHARE.check("100%").hint
    assert "under twice its floor" in SHARE.check(20).hint
    assert "a fraction" in SHARE.check(round(pct / 100, 2)).hint
    assert "measured time over the floor" in SHARE.check(10000 / pct).hint


def test_a_missing_timing_is_said_not_graded(monkeypatch):
    monkeypatch.setattr(ch08, "recorded_timing", lambda: None)
    fb = SHARE.check(60)
    assert not fb.ok and "missing" in fb.message


@pytest.mark.parametrize("bad", ["abc", -60, 0, "60 µs", [60, 50], "\u221260%"])
def test_a_malformed_share_gets_a_message(bad):
    fb = SHARE.check(bad)
    assert not fb.ok and fb.message and not fb.error


def test_the_page_asks_for_the_share_before_the_times_and_checks_after_them():
    assert_asked_before_shown("08_fp8_quant.ipynb", "prediction = None",
                              '"% of floor": r["pct_floor"]',
                              "ch08.predict_floor_share.check(prediction)")
