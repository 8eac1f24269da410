"""What the predict-then-check exercises share."""
import pytest

from fusedrms.exercises import predictions
from fusedrms.exercises.core import Malformed


def test_the_gpu_is_named_without_its_vendor():
    assert predictions.recorded_gpu({"provenance": {"gpu": "NVIDIA H200"}}) == "H200"
    assert predictions.recorded_gpu({"provenance": {}}) == "GPU"
    assert predictions.recorded_gpu(None) == "GPU"


def test_a_missing_recording_is_a_verdict_with_a_way_out():
    fb = predictions.recording_missing()
    assert not fb.ok and "missing" in fb.message and fb.hint


@pytest.mark.parametrize("answer,value", [(1.2, 1.2), ("1.2x", 1.2), ("1.2 ×", 1.2), ("6/5", 1.2)])
def test_a_ratio_is_read_with_or_without_its_unit(answer, value):
    assert predictions.read_ratio(answer, "a ratio") == pytest.approx(value)


@pytest.mark.parametrize("answer", [0, -1.5, "\u22121.5", "2 µs"])
def test_a_ratio_that_cannot_be_one_is_refused(answer):
    with pytest.raises(Malformed):
        predictions.read_ratio(answer, "a ratio")


def test_ratios_come_from_a_list_or_text():
    assert predictions.read_ratios("[1.2x, 1]", 2, "ratios") == pytest.approx([1.2, 1.0])
    with pytest.raises(Malformed):
        predictions.read_ratios([1.2, 0], 2, "ratios")
