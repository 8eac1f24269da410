import xml.etree.ElementTree as ET

import ipywidgets as widgets
import pytest

from fusedrms import viz


def _frames(n):
    return [viz.Frame(f"t{i}", f"caption {i}", viz.Canvas(10, 10).render()) for i in range(n)]


def test_stepper_links_play_slider_and_stack():
    box = viz.stepper(_frames(3))
    controls, stack = box.children
    play, slider = controls.children
    assert isinstance(stack, widgets.Stack) and len(stack.children) == 3
    assert play.max == slider.max == 2
    pairs = {(l.source[0].model_id, l.target[0].model_id) for l in box.links}
    assert (play.model_id, slider.model_id) in pairs
    assert (slider.model_id, stack.model_id) in pairs
    assert 'data-step="2"' in stack.children[2].value


def test_stepper_needs_frames():
    with pytest.raises(ValueError):
        viz.stepper([])


def test_canvas_renders_well_formed_svg_with_escaped_text():
    c = viz.Canvas(100, 50, title="a < b")
    c.row(10, 10, [1, 2.5], name="x")
    c.arrow(0, 0, 10, 10)
    root = ET.fromstring(c.render())
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "a < b" in texts and "2.5" in texts


def test_tree_levels_pad_to_a_power_of_two():
    assert viz.tree_reduce_levels([1, 2, 3]) == [[1, 2, 3, 0], [4, 2], [6]]
    assert viz.tree_reduce_levels([5]) == [[5]]


def test_file_section_extracts_marked_code(tmp_path):
    src = tmp_path / "k.hip"
    src.write_text("a\n// [book:k]\nint x;\n// [/book:k]\nb\n")
    assert viz.file_section(src, "k") == "int x;\n"
    with pytest.raises(KeyError):
        viz.file_section(src, "missing")


def _explorer_parts(box):
    note, controls, status, holder = box.children
    return controls.children, status, holder


def test_explorer_shows_bad_input_in_the_widget_and_recovers():
    def make_frames(n):
        if n < 1:
            raise ValueError("n must be at least 1")
        if n > 5:
            raise OverflowError("n is too large for this picture")
        return _frames(n)

    box = viz.explorer(make_frames, {"n": widgets.IntText(value=2)})
    (n,), status, holder = _explorer_parts(box)
    first = holder.children[0]
    assert status.value == "" and len(first.children[1].children) == 2
    for bad, message in ((0, "at least 1"), (9, "too large")):
        n.value = bad
        assert message in status.value and "fusedrms-input-error" in status.value
        assert holder.children == (), "no frames of an earlier input beside the error"
    assert first.comm is None, "replaced frames are closed, not left alive in the kernel"
    n.value = 3
    assert status.value == ""
    stepper_box = holder.children[0]
    play, slider = stepper_box.children[0].children
    assert len(stepper_box.children[1].children) == 3 and play.max == slider.max == 2


def test_explorer_lets_a_bug_surface():
    def broken(n):
        raise KeyError("a bug, not a reader's input")

    with pytest.raises(KeyError):
        viz.explorer(broken, {"n": widgets.IntText(value=1)})
