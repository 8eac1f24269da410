import xml.etree.ElementTree as ET

import pytest
import torch

from fusedrms import reference
from fusedrms.viz import rmsnorm_frames


def test_trace_matches_the_reference():
    t = rmsnorm_frames.trace([3, 4, -3, -4], [1, 0.5, 2, 1], 1e-5)
    ref = reference.rmsnorm(torch.tensor([3., 4., -3., -4.], dtype=torch.float64),
                            torch.tensor([1, 0.5, 2, 1], dtype=torch.float64), 1e-5,
                            accum=torch.float64)
    assert t.y == pytest.approx(ref.tolist(), rel=1e-12)
    assert t.levels == [[9, 16, 9, 16], [18, 32], [50]]
    assert t.mean == 12.5


def test_seven_frames_state_the_issue_numbers():
    frames = rmsnorm_frames.frames()
    assert len(frames) == 7
    text = " ".join(f.caption for f in frames)
    for expected in ["9+9=18", "16+16=32", "18+32=50", "50 / 4 = 12.5", "0.2828",
                     "4 × 0.2828 × 0.5 ≈ 0.5657", "[9, 16, 9, 16]"]:
        assert expected in text, expected
    for f in frames:
        ET.fromstring(f.svg)  # well-formed SVG


def test_padding_is_drawn_but_the_mean_uses_real_columns():
    t = rmsnorm_frames.trace([1, 2, 3], [1, 1, 1], 0.0)
    assert t.levels[0] == [1, 4, 9, 0]
    assert t.mean == pytest.approx(14 / 3)
    assert "padded to 4" in rmsnorm_frames.frames("1,2,3", "1,1,1")[2].caption


@pytest.mark.parametrize("x,w,eps,msg", [
    ([], [], 1e-5, "1 to 8"),
    ([1, 2], [1], 1e-5, "one weight per column"),
    ([0, 0], [1, 1], 0.0, "divides by zero"),
    ([1, float("nan")], [1, 1], 1e-5, "finite"),
    ("1, two", "1, 1", 1e-5, "separated by commas"),
    ("1e200, 1", "1, 1", 1e-5, "overflow"),
    ("1, 0", "1.7e308, 1", 1e-5, "y overflows"),
    ([1, 2], [1, 1], -1e-5, "eps must be"),
    ([1, 2], [1, 1], float("inf"), "eps must be"),
    ([1, 2], [1, 1], float("nan"), "eps must be"),
])
def test_bad_inputs_raise_readable_errors(x, w, eps, msg):
    with pytest.raises(ValueError, match=msg):
        rmsnorm_frames.frames(x, w, eps)


def test_explorer_recomputes_on_edit_and_reports_errors():
    box = rmsnorm_frames.explorer()
    text_x = box.children[1].children[0]
    status, holder = box.children[2], box.children[3]
    text_x.value = "1, 2"
    assert "one weight per column" in status.value  # w still has 4 weights
    text_x.value = "1, 2, 3, 4"
    assert status.value == ""
    stack = holder.children[0].children[1]
    assert "0.3651" in stack.children[-1].value  # r = 1/sqrt(30/4), recomputed


def test_explorer_recomputes_for_w_and_eps_and_applies_text_on_enter():
    box = rmsnorm_frames.explorer()
    text_x, text_w, eps = box.children[1].children
    status, holder = box.children[2], box.children[3]
    assert not text_x.continuous_update and not text_w.continuous_update
    text_w.value = "2, 2, 2, 2"
    multiply = holder.children[0].children[1].children[5].value
    assert "2.2627" in multiply  # y[1] = 4 × 0.2828 × 2, recomputed with the new w
    eps.value = 12.5
    assert "0.2000" in holder.children[0].children[1].children[4].value  # r = 1/sqrt(12.5 + 12.5)
    eps.value = -1.0
    assert "eps must be" in status.value and holder.children == ()


def test_one_column_reads_as_english():
    text = " ".join(f.caption for f in rmsnorm_frames.frames("5", "2"))
    assert "1 columns" not in text and "1 outputs" not in text and "Tree order: ." not in text
    assert "the one real column" in text and "Only the output is stored" in text


def test_the_tree_frame_draws_every_padded_lane_inside_the_picture_with_its_pairs():
    svg = rmsnorm_frames.frames("1, 2, 3, 4, 5", "1, 1, 1, 1, 1")[2].svg
    root = ET.fromstring(svg)
    width = float(root.get("width"))
    ns = "{http://www.w3.org/2000/svg}"
    rects = root.findall(f"{ns}rect")
    assert len(rects) == 8 + 4 + 2 + 1  # the padded level 0, then the halves
    assert all(float(r.get("x")) + float(r.get("width")) <= width for r in rects)
    assert len(root.findall(f"{ns}line")) == 2 * (4 + 2 + 1)  # two inputs per sum


def test_tiny_scales_are_not_printed_as_zero():
    frames = rmsnorm_frames.frames("1e5, 2e5", "1, 1")
    assert "6.325e-06" in frames[4].caption and "0.0000" not in frames[4].caption
