"""Chapter 6 checkers beyond the shared contract in test_every_exercise.py."""
import math

import pytest

from fusedrms import traffic
from fusedrms.exercises import ch06
from tests.exercises.prediction_contract import assert_prediction_contract


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


def test_the_data_sheet_peak_is_diagnosed_as_such_not_as_the_forgotten_write():
    nbytes = traffic.price("fused_add_rmsnorm", ch06.ROWS, ch06.COLS, "bf16").bytes_total
    fb = ch06.predict_floor.check(nbytes / (ch06.DATASHEET_GBPS * 1e9) * 1e6)
    assert not fb.ok and "data sheet" in str(fb) and "write" not in str(fb).split("Hint")[0]
    forgot = ch06.predict_floor.check((nbytes - ch06.MATRIX) / (ch06.BANDWIDTH_GBPS * 1e9) * 1e6)
    assert not forgot.ok and "write forgotten" in str(forgot)
    both = ch06.predict_floor.check((nbytes - ch06.MATRIX) / (ch06.DATASHEET_GBPS * 1e9) * 1e6)
    assert not both.ok and "data sheet" in str(both)
    # every mistake is its own number: no two diagnoses collide
    values = sorted(ch06.predict_floor.mistakes.values()) + [ch06.FLOOR_US]
    assert all(not math.isclose(a, b, rel_tol=0.02) for a, b in zip(values, values[1:]))


# the exercise prices the recorded copy: its answers move with the recording
P1, P0 = f"{ch06.PCT:.1f}", f"{ch06.PCT:.0f}"
F1, F2 = f"{ch06.FLOOR_US:.1f}", f"{ch06.FLOOR_US:.2f}"


@pytest.mark.parametrize("answer", [f"{P1}%", f"{P1} %", f" {P1} percent", float(P1),
                                    f"{ch06.PCT:.2f}"])
def test_percent_of_floor_accepts_a_percent_sign(answer):
    assert 0 < ch06.PCT < 100
    assert ch06.percent_of_floor.check(answer).ok


def test_percent_of_floor_rejects_the_data_sheet_floor_and_reads_malformed_text():
    sheet = 100 * (ch06.FUSED.bytes_total / (ch06.DATASHEET_GBPS * 1e9) * 1e6) / ch06.MEASURED_US
    fb = ch06.percent_of_floor.check(f"{sheet:.1f}%")
    assert not fb.ok and "data sheet" in str(fb)
    assert not ch06.percent_of_floor.check(f"{P1} GB").ok  # a message, not a traceback


@pytest.mark.parametrize("answer", ["a", "A", "(a)", " (A) ", "a)", "a.", "A:",
                                    "(a) The CPU clock was read right after the call",
                                    "a. The CPU clock was read right after the call"])
def test_broken_rule_accepts_the_letter_in_any_form(answer):
    assert ch06.broken_rule.check(answer).ok


def test_broken_rule_answer_text_agrees_with_the_chapter():
    # the recording's clock without a synchronize grows with the size (less than the work) and
    # never reads over 100 µs: the feedback claims neither "flat" nor "over 100 µs"
    text = str(ch06.broken_rule.check("a"))
    assert "typical for a launch" not in text and "100 µs" not in text and "flat" not in text
    assert "(d)" in str(ch06.broken_rule.check("d")) and "larger than the median" in str(
        ch06.broken_rule.check("d"))
    for wrong in ("b", "(c)", "e)"):
        assert not ch06.broken_rule.check(wrong).ok
    assert not ch06.broken_rule.check("(z)").ok


def test_predict_floor_reads_units():
    assert ch06.predict_floor.check(f"{ch06.FLOOR_US:.2f} µs").ok
    assert ch06.predict_floor.check(f"{ch06.FLOOR_US:.2f}us").ok
    assert not ch06.predict_floor.check(f"{ch06.FLOOR_US / 1e3:.5f}").ok


@pytest.mark.parametrize("answer", [f"{F1} μs", f"{F1} microseconds",
                                    f"{ch06.FLOOR_US / 1e3:.4f} ms",
                                    f"{ch06.FLOOR_US / 1e6:.3e} s", f"{ch06.FLOOR_US * 1e3:.0f} ns",
                                    f"{ch06.FLOOR_US:.0f}", f"{F2}us"])
def test_predict_floor_accepts_the_floor_in_any_time_unit(answer):
    # the Greek mu (U+03BC) as well as the micro sign; other units converted, not refused
    assert ch06.predict_floor.check(answer).ok


@pytest.mark.parametrize("answer", [f"{ch06.FLOOR_US / 1e3:.4f}", f"{F1} s",
                                    f"{round(ch06.FLOOR_US) + 1}",
                                    f"{ch06.FLOOR_US / 1e3:.4f} s"])
def test_predict_floor_rejects_a_time_in_the_wrong_unit_or_rounded_wrong(answer):
    fb = ch06.predict_floor.check(answer)
    assert not fb.ok and "Hint" in str(fb)


def test_predict_floor_reads_an_unknown_unit_as_malformed():
    fb = ch06.predict_floor.check(f"{F1} kg")
    assert not fb.ok and "could not be read" in str(fb)


@pytest.mark.parametrize("answer", [P0, f"{P0}%", int(P0), f"{P0} percent"])
def test_percent_of_floor_accepts_the_share_rounded_as_written(answer):
    assert ch06.percent_of_floor.check(answer).ok


@pytest.mark.parametrize("answer, label", [(str(int(P0) - 1), "is not it"),
                                           (str(int(P0) + 1), "is not it"),
                                           (f"{ch06.PCT / 100:.2f}", "fraction"),
                                           (f"{100 - ch06.PCT:.0f}%", "gap")])
def test_percent_of_floor_rejects_wrong_roundings_with_a_hint(answer, label):
    fb = ch06.percent_of_floor.check(answer)
    assert not fb.ok and label in str(fb) and "Hint" in str(fb)


def test_unit_slips_by_a_thousand_get_a_unit_hint_in_plain_digits():
    for answer in (ch06.FLOOR_US * 1e3, f"{ch06.FLOOR_US:.2f} ms"):
        fb = ch06.predict_floor.check(answer)
        assert not fb.ok and "1,000 times the floor" in fb.hint
        assert "e+" not in fb.message  # 47,273 µs, not 4.727e+04 µs


def test_twice_the_floor_hint_names_both_ways_to_get_there():
    fb = ch06.predict_floor.check(2 * ch06.FLOOR_US)
    assert not fb.ok and "2 bytes" in fb.hint and "halve" in fb.hint


def test_the_solution_does_not_claim_what_the_data_contradicts():
    # recorded kernels reach slightly above 100% of the copy floor (chapter 6, section 6)
    fb = ch06.predict_floor.check(ch06.FLOOR_US)
    assert fb.ok and "can be faster" not in fb.message


def test_the_achieved_bandwidth_is_not_a_percentage():
    achieved = ch06.FUSED.bytes_total / (ch06.MEASURED_US * 1e3)
    fb = ch06.percent_of_floor.check(round(achieved))
    assert not fb.ok and "achieved bandwidth" in str(fb)


def test_the_exercise_bandwidths_are_the_recorded_h200s():
    from fusedrms import records

    h200 = records.copy_floor(records.COMMITTED)
    assert ch06.BANDWIDTH_GBPS == round(h200.GBps)  # the book's one floor, as the pages print it
    assert ch06.DATASHEET_GBPS == h200.published_GBps  # the data sheet: the wrong floor
    assert f"{ch06.BANDWIDTH_GBPS:,.0f} GB/s" in ch06.predict_floor.question


# ---- issue 25: forms a reader copies or types (the shared reader, exercises.answers)

def test_predict_floor_accepts_the_arithmetic_of_the_floor():
    typed = f"{ch06.FUSED.bytes_total}/{ch06.BANDWIDTH_GBPS:g}e9*1e6"
    assert ch06.predict_floor.check(typed).ok
    assert ch06.predict_floor.check(f"{ch06.FUSED.bytes_total:,}/{ch06.BANDWIDTH_GBPS:,.0f}e9*1e6").ok
    peak = ch06.predict_floor.check(f"{ch06.FUSED.bytes_total}/{ch06.DATASHEET_GBPS:g}e9*1e6")
    assert not peak.ok and "data sheet" in peak.message


def test_predict_floor_right_to_one_digit_is_asked_for_more_digits():
    fb = ch06.predict_floor.check("0.05 ms")
    assert not fb.ok and "too rough" in fb.message and "more digits" in fb.hint


def test_predict_floor_given_bytes_says_a_time_is_asked():
    fb = ch06.predict_floor.check(f"{ch06.FUSED.bytes_total} B")
    assert not fb.ok and "a size in bytes" in fb.message and "µs" in fb.message


@pytest.mark.parametrize("answer", [1, "1", "option a", ch06.RULE_CHOICES["a"],
                                    ch06.RULE_CHOICES["a"].upper(), "it timed the launch"])
def test_broken_rule_accepts_the_option_number_and_text(answer):
    assert ch06.broken_rule.check(answer).ok


@pytest.mark.parametrize("answer,letter", [(2, "(b)"), ("the l2 was warm", "(b)"),
                                           (ch06.RULE_CHOICES["e"], "(e)")])
def test_broken_rule_wrong_option_by_text_or_number_gets_its_hint(answer, letter):
    fb = ch06.broken_rule.check(answer)
    assert not fb.ok and letter in fb.message and fb.hint


@pytest.mark.parametrize("answer", [f"{F2}/{ch06.MEASURED_US}*100", f"{P1} %", f"\u2248 {P0}%"])
def test_percent_of_floor_accepts_arithmetic(answer):
    assert ch06.percent_of_floor.check(answer).ok


def test_percent_of_floor_names_a_bandwidth_given_with_its_unit():
    achieved = ch06.FUSED.bytes_total / (ch06.MEASURED_US * 1e3)
    fb = ch06.percent_of_floor.check(f"{achieved / 1e3:.2f} TB/s")
    assert not fb.ok and "achieved bandwidth" in fb.message and fb.hint
    other = ch06.percent_of_floor.check("1 TB/s")
    assert not other.ok and "bandwidth, not a share" in other.message


# ---- predict, then look: flushed over warm, inside and beyond the L2 ----

L2 = ch06.predict_l2


def test_the_l2_prediction_is_graded_against_the_recording_the_page_tells():
    from fusedrms.book import ch06_story

    told = ch06_story.story_facts(ch06_story.load())["l2"]
    found = ch06.recorded_l2()
    assert found["inside"] == told["head"] and found["beyond"] == told["big"]
    assert found["inside"]["bytes"] < found["l2_bytes"] < found["beyond"]["bytes"]
    inside, beyond = found["inside"]["cold_over_warm"], found["beyond"]["cold_over_warm"]
    assert 1.05 < inside < 1.5 and abs(beyond - 1) < 0.05  # what the hints explain
    # units, as written on the page
    assert_prediction_contract(L2, f"[{inside:.2f}x, {beyond:.2f}×]", f"{inside:.2f} inside the L2")


def test_each_wrong_l2_prediction_says_what_its_gap_teaches():
    inside = ch06.recorded_l2()["inside"]["cold_over_warm"]
    assert "from DRAM" in L2.check([1.0, 1.0]).hint
    assert "not a bandwidth ratio" in L2.check([3, 1]).hint
    assert "nothing left to find" in L2.check([inside, inside]).hint
    assert "nothing left to find" in L2.check([inside, 0.7]).hint
    assert "warm over flushed" in L2.check([1 / inside, 1.0]).hint


@pytest.mark.parametrize("bad", ["abc", [1.2], [1.2, 1, 1], [-1, 1], [0, 1], "1.2 µs, 1 µs",
                                 {"inside": 1.2}, [math.nan, 1], "\u22121.2, 1"])
def test_a_malformed_l2_prediction_gets_a_message(bad):
    fb = L2.check(bad)
    assert not fb.ok and fb.message and not fb.error
