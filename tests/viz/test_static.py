"""What widgets show on the static page: live-only controls, one stepper height, labels in boxes."""
import re
import xml.etree.ElementTree as ET

import ipywidgets as widgets

from fusedrms import viz
from fusedrms.viz import static
from fusedrms.viz.rmsnorm_frames import explorer
from fusedrms.viz.roofline import calculator

SVG_NS = "{http://www.w3.org/2000/svg}"


def test_live_only_controls_carry_the_class_and_the_note_is_hidden_unless_the_book_shows_it():
    box = viz.live_controls(widgets.HBox([widgets.IntText(1)]))
    note, row = box.children
    assert static.LIVE_ONLY_CLASS in row._dom_classes
    assert 'class="fusedrms-static-note" style="display:none"' in note.value
    assert static.STATIC_NOTE in note.value


def test_explorer_and_calculator_mark_their_inputs_live_only():
    ex = explorer()
    assert static.STATIC_NOTE_CLASS in ex.children[0].value
    assert static.LIVE_ONLY_CLASS in ex.children[1]._dom_classes
    calc = calculator(4000.0)
    rows, bandwidth = calc.children[:2], calc.children[2].children[0]
    assert all(static.LIVE_ONLY_CLASS in w._dom_classes for w in (*rows, bandwidth))
    assert static.STATIC_NOTE_CLASS in calc.children[3].value
    assert static.LIVE_ONLY_CLASS not in calc.children[-1]._dom_classes  # the result stays plain


def test_stepper_frames_keep_one_size_and_reserve_the_longest_caption():
    frames = [viz.Frame("short", "one line", viz.Canvas(100, 40).render()),
              viz.Frame("a much longer title", "a caption " * 20, viz.Canvas(200, 90).render())]
    stack = viz.stepper(frames).children[1]
    sizes = {re.search(r'<svg[^>]*width="([\d.]+)"[^>]*height="([\d.]+)"[^>]*viewBox="0 0 ([\d.]+) '
                       r'([\d.]+)"', child.value).groups() for child in stack.children}
    assert sizes == {("200", "90", "200", "90")}
    first = stack.children[0].value
    assert first.count('data-step="0"') == 1 and "a caption a caption" in first  # ghost copy
    assert 'aria-hidden="true" style="grid-area:1/1;visibility:hidden"' in first


def test_box_labels_fit_their_box_and_stay_readable_on_wide_canvases():
    c = viz.Canvas(400, 60)
    c.box(10, 10, 30, 30, label="-1.2345")
    text = ET.fromstring(c.render()).find(f"{SVG_NS}text")
    assert float(text.get("font-size")) >= viz.svg.MIN_LABEL
    assert text.get("textLength") == "26"  # squeezed into the box rather than spilling over it
    wide = viz.Canvas(2 * viz.svg.COLUMN_PX, 60)
    wide.text(5, 20, "label", size=10)
    size = float(ET.fromstring(wide.render()).find(f"{SVG_NS}text").get("font-size"))
    assert size * 0.5 >= viz.svg.MIN_LABEL  # shown at half size in the column
