"""Every frame of the book's four animations draws a phone layout whose text stays readable on a
390-px screen, beside the desktop layout, and the frame's HTML picks one by the phone breakpoint."""
import re
import xml.etree.ElementTree as ET

import pytest

from fusedrms import viz
from fusedrms.book import page
from fusedrms.viz import backward_frames, hip_frames, rmsnorm_frames, triton_frames
from fusedrms.viz.svg import COLUMN_PX, PHONE_COLUMN_PX, PHONE_MEDIA

MIN_DESKTOP_PX = 11  # tests/browser/page_lint.py: MIN_SVG_LABEL_PX at 1280 px
MIN_PHONE_PX = 9     # tests/browser/page_lint.py: MIN_PHONE_TEXT_PX at 390 px
ROUNDING = 0.05      # the canvas writes font sizes to 0.1 px

ANIMATIONS = {
    "ch01 default": lambda: rmsnorm_frames.frames(),
    "ch01 eight columns": lambda: rmsnorm_frames.frames("-1.25, 2.5, 3, -4.75, 5, 6.5, -7, 8",
                                                        "1, 0.5, 2, 1, 1, 1, 1, 0.25"),
    "ch01 one column": lambda: rmsnorm_frames.frames("5", "2"),
    "ch03 default": lambda: hip_frames.frames(),
    "ch03 eight columns, eight threads": lambda: hip_frames.frames(
        "1, -2, 3.5, 4, -5, 6, 7, 8", "1, 1, 1, 1, 1, 1, 1, 1", threads=8),
    "ch03 one thread": lambda: hip_frames.frames(threads=1),
    "ch04 default": lambda: triton_frames.frames(run_kernel=False),
    "ch04 thirty-two lanes": lambda: triton_frames.frames(
        [0.5 * i - 7 for i in range(27)], [1.0] * 27, run_kernel=False),
    "ch04 five lanes": lambda: triton_frames.frames([1.0, 2, 3, 4, 5], [1.0] * 5,
                                                    run_kernel=False),
    "ch09": lambda: backward_frames.frames(),
}
SVG = "{http://www.w3.org/2000/svg}"


def _smallest_shown_px(svg: str, column: float) -> float:
    """The smallest text of ``svg`` in CSS px when the SVG is shown in a ``column`` px column
    (it is drawn with max-width:100%: scaled down when wider, never up)."""
    root = ET.fromstring(svg)
    width = float(root.get("viewBox").split()[2])
    sizes = [float(t.get("font-size")) for t in root.iter(f"{SVG}text") if (t.text or "").strip()]
    assert sizes, "a frame with no text"
    return min(sizes) * min(1.0, column / width)


@pytest.fixture(scope="module", params=sorted(ANIMATIONS))
def frames(request):
    return ANIMATIONS[request.param]()


def test_every_frame_has_a_phone_layout_readable_at_a_phones_width(frames):
    for f in frames:
        assert f.phone_svg, f.title
        assert _smallest_shown_px(f.phone_svg, PHONE_COLUMN_PX) >= MIN_PHONE_PX - ROUNDING, f.title


def test_the_desktop_layout_keeps_its_labels_at_the_desktop_width(frames):
    for f in frames:
        assert _smallest_shown_px(f.svg, 0.98 * COLUMN_PX) >= MIN_DESKTOP_PX - ROUNDING, f.title


def test_both_layouts_draw_every_number_the_other_draws(frames):
    """Reflowed, not cut: the phone shows the same boxed values (labels may be shortened)."""
    def boxed(svg):
        return sorted(t.text for t in ET.fromstring(svg).iter(f"{SVG}text")
                      if re.fullmatch(r"-?[\d.]+(e[-+]?\d+)?", t.text or ""))
    for f in frames:
        assert boxed(f.phone_svg) == boxed(f.svg), f.title


def test_the_frame_html_holds_both_layouts_switched_at_the_phone_breakpoint(frames):
    stack = viz.stepper(frames).children[1]
    heights = set()
    for child, f in zip(stack.children, frames):
        html = child.value
        assert f'@media {PHONE_MEDIA}' in html and PHONE_MEDIA == page.PHONE_MEDIA
        desktop = re.search(r'class="fusedrms-desktop-svg">(<svg.*?</svg>)</div>', html).group(1)
        phone = re.search(r'class="fusedrms-phone-svg">(<svg.*?</svg>)</div>', html).group(1)
        heights.add((ET.fromstring(desktop).get("height"), ET.fromstring(phone).get("height")))
        assert f.caption.split(".")[0].replace("'", "&#x27;") in html  # one caption for both
    assert len(heights) == 1, "every frame is as tall as the others, on each layout"
