"""Chapter 7's predict-then-check: PyTorch's two kernels over the capstone, small and large."""
import math

import pytest

from fusedrms import records
from fusedrms.book import ch07_results as CR
from fusedrms.exercises import ch07, ch07_predict
from tests.exercises.prediction_contract import (assert_asked_before_shown,
                                                  assert_prediction_contract)

E = ch07_predict.predict_torch_ratio


def test_it_is_one_of_the_chapters_exercises():
    assert E in ch07.ALL


def test_the_ratios_are_the_ones_the_chapters_figure_draws():
    doc, _ = CR.peers_doc(machine=records.COMMITTED)
    rows = CR.peer_rows(CR.peer_points(doc), "add_rmsnorm")
    found = ch07_predict.recorded_ratios()
    for label, (r, c) in (("small", ch07_predict.SMALL), ("large", ch07_predict.LARGE)):
        row = next(x for x in rows if (x["rows"], x["cols"], x["dtype"]) == (r, c, "bf16"))
        assert found[label]["ratio"] == row["peers"][ch07_predict.PEER] / row["capstone_us"]
    small, large = found["small"]["ratio"], found["large"]["ratio"]
    # what the hints explain: far above the byte ratio when small, near it (above) when large
    assert small * (1 - ch07_predict.SMALL_CLOSE) > 2  # "more than twice"; 2 is refused
    assert found["small"]["floor_us"] < 0.1 * found["small"]["fused_us"]
    assert not math.isclose(large, ch07_predict.BYTE_RATIO, rel_tol=ch07_predict.LARGE_CLOSE)
    assert large > ch07_predict.BYTE_RATIO and found["large"]["fused_pct"] > found["large"]["torch_pct"]


def test_the_recorded_ratios_pass_and_every_typical_prediction_fails_quoting_them():
    small, large = (ch07_predict.recorded_ratios()[k]["ratio"] for k in ("small", "large"))
    assert_prediction_contract(E, f"[{small:.1f}x, {large:.2f}×]", f"({large:.2f})")


def test_each_wrong_prediction_says_what_its_gap_teaches():
    small = ch07_predict.recorded_ratios()["small"]["ratio"]
    assert "fixed cost" in E.check([5 / 3, 5 / 3]).hint
    assert "more than twice" in E.check([2, 1.8]).hint
    assert "not a ratio of bytes" in E.check([small * 2, 1.8]).hint
    assert "same rate" in E.check([small, "5/3"]).hint
    assert "not the launches" in E.check([small, small]).hint
    assert "Start from the bytes" in E.check([small, 1.2]).hint
    assert "PyTorch's time over the capstone's" in E.check([0.3, 0.5]).hint


def test_a_missing_recording_is_said_not_graded(monkeypatch):
    monkeypatch.setattr(ch07_predict, "recorded_ratios", lambda: None)
    fb = E.check([3, 1.8])
    assert not fb.ok and "missing" in fb.message


@pytest.mark.parametrize("bad", ["abc", [3.0], [3, 1.8, 1], [-3, 1.8], [0, 1.8], "3 µs, 1.8 µs",
                                 {"small": 3}, [math.nan, 1.8], "\u22123, 1.8"])
def test_a_malformed_prediction_gets_a_message(bad):
    fb = E.check(bad)
    assert not fb.ok and fb.message and not fb.error


def test_an_unanswered_cell_awaits():
    assert E.check(None).awaiting


def test_the_page_asks_before_the_figure_and_checks_after_it():
    assert_asked_before_shown("07_capstone.ipynb", "prediction = None", "peer time / capstone time",
                              "ch07.predict_torch_ratio.check(prediction)")
