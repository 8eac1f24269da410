"""Step-through animations that work in live Jupyter *and* in the static book.

Every frame is computed in Python (an SVG plus a caption with the step's numbers) and stacked in an
``ipywidgets.Stack``. A ``Play`` button and an ``IntSlider`` drive the stack through ``jslink``,
which runs in the browser, so the static page steps without a kernel. Python callbacks
(recomputing frames for new inputs) need a live kernel; :func:`explorer` adds them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from html import escape
from typing import Callable

import ipywidgets as widgets

from .static import live_only, static_note
from .svg import PHONE_MEDIA


# Inside each frame's HTML (a widget's content in JupyterLab and in the static book alike): the
# desktop drawing on wide screens, the phone drawing below book.page's phone breakpoint.
LAYOUT_STYLE = ("<style>.fusedrms-phone-svg{display:none}"
                f"@media {PHONE_MEDIA}{{.fusedrms-desktop-svg{{display:none}}"
                ".fusedrms-phone-svg{display:block}}</style>")


@dataclass(frozen=True)
class Frame:
    title: str
    caption: str  # states the step's numbers, computed, never typed
    svg: str
    phone_svg: str = ""  # the same step drawn for a phone's column (svg.PHONE_COLUMN_PX)

    def drawing(self) -> str:
        """The SVG, or both layouts with the style that shows one of them."""
        if not self.phone_svg:
            return self.svg
        return (f'{LAYOUT_STYLE}<div class="fusedrms-desktop-svg">{self.svg}</div>'
                f'<div class="fusedrms-phone-svg">{self.phone_svg}</div>')

    def html(self, index: int, total: int, others: "list[Frame] | None" = None) -> str:
        """The frame; ``others`` (every frame of the animation) reserve room for the tallest title
        and caption, so the animation keeps one height while it plays."""
        title = f"Step {index + 1}/{total}: {escape(self.title)}"
        caption = escape(self.caption)
        if others:
            title = _overlay(title, [f"Step {i + 1}/{total}: {escape(f.title)}"
                                     for i, f in enumerate(others) if i != index])
            caption = _overlay(caption, [escape(f.caption) for i, f in enumerate(others)
                                         if i != index])
        return (f'<div class="fusedrms-frame" data-step="{index}" style="max-width:100%">'
                f'<div style="font-weight:600">{title}</div>'
                f"{self.drawing()}"
                f'<div class="fusedrms-caption" style="max-width:100%;white-space:normal">'
                f"{caption}</div>"
                f"</div>")


def _overlay(shown: str, hidden: list[str]) -> str:
    """``shown`` in a grid cell shared with invisible copies of ``hidden``: as tall as the tallest."""
    ghosts = "".join(f'<div aria-hidden="true" style="grid-area:1/1;visibility:hidden">{h}</div>'
                     for h in hidden if h != shown)
    return (f'<div style="display:grid"><div style="grid-area:1/1">{shown}</div>{ghosts}</div>'
            if ghosts else shown)


_SVG_SIZE = re.compile(r'<svg\b([^>]*?)\bwidth="([\d.]+)"([^>]*?)\bheight="([\d.]+)"'
                       r'([^>]*?)\bviewBox="0 0 ([\d.]+) ([\d.]+)"')


def _same_size(svgs: list[str]) -> list[str]:
    """Pad every frame's drawing to the largest one (blank space right and below), so all frames
    scale alike at any column width and the picture does not jump between steps."""
    sizes = [_SVG_SIZE.search(s) for s in svgs]
    if not all(sizes):
        return svgs
    w = max(float(m.group(6)) for m in sizes)
    h = max(float(m.group(7)) for m in sizes)
    out = []
    for s, m in zip(svgs, sizes):
        head = (f'<svg{m.group(1)}width="{w:g}"{m.group(3)}height="{h:g}"{m.group(5)}'
                f'viewBox="0 0 {w:g} {h:g}"')
        out.append(s[:m.start()] + head + s[m.end():])
    return out


def frame_stack(frames: list[Frame]) -> widgets.Stack:
    svgs = _same_size([f.svg for f in frames])
    phone_svgs = _same_size([f.phone_svg for f in frames])
    even = [Frame(f.title, f.caption, svg, phone)
            for f, svg, phone in zip(frames, svgs, phone_svgs)]
    return widgets.Stack([widgets.HTML(f.html(i, len(even), even)) for i, f in enumerate(even)],
                         selected_index=0)


def stepper(frames: list[Frame], interval_ms: int = 1600, description: str = "step") -> widgets.VBox:
    """Play + slider + frames, linked in the browser. Returns the widget to display."""
    if not frames:
        raise ValueError("an animation needs at least one frame")
    stack = frame_stack(frames)
    last = len(frames) - 1
    play = widgets.Play(value=0, min=0, max=last, step=1, interval=interval_ms,
                        description="play", tooltip="play the steps")
    slider = widgets.IntSlider(value=0, min=0, max=last, step=1, description=description,
                               readout=False, continuous_update=True)  # the frame title says "Step k/n"
    links = (widgets.jslink((play, "value"), (slider, "value")),
             widgets.jslink((slider, "value"), (stack, "selected_index")))
    box = widgets.VBox([widgets.HBox([play, slider]), stack])
    box.add_class("fusedrms-stepper")
    box.links = links  # kept for tests; the browser holds its own copy
    return box


def _close_all(widget: widgets.Widget) -> None:
    """Close a widget tree's comms (frames replaced by a recompute must not pile up in the kernel)."""
    for link in getattr(widget, "links", ()):
        link.close()
    for child in getattr(widget, "children", ()):
        _close_all(child)
    widget.close()


def row_input(value: str, description: str) -> widgets.Text:
    """A text box for a row of numbers. It applies on Enter or when it loses focus, not at every
    keystroke ("3, 4, -" on the way to "3, 4, -3" is not an error to flash at the reader)."""
    return widgets.Text(value=value, description=description, continuous_update=False,
                        tooltip="numbers separated by commas; press Enter to apply")


def explorer(make_frames: Callable[..., list[Frame]], controls: dict[str, widgets.Widget],
             interval_ms: int = 1600) -> widgets.VBox:
    """An animation whose inputs the reader can edit (live kernel only).

    ``make_frames(**values)`` recomputes the frames from the controls' values. A bad input (it
    raises ``ValueError``, ``TypeError`` or ``ArithmeticError``) shows its message in the widget in
    place of the frames, never a traceback; the next good input brings the frames back. In the
    static book the controls are greyed out under one line saying to run the notebook
    (:mod:`.static`), and the frames for the initial values show.
    """
    status = widgets.HTML()
    status.add_class("fusedrms-explorer-status")
    holder = widgets.VBox()

    def rebuild(_change=None):
        values = {k: w.value for k, w in controls.items()}
        try:
            shown = [stepper(make_frames(**values), interval_ms)]
            message = ""
        except (ValueError, TypeError, ArithmeticError) as e:
            shown = []  # no frames of the previous input next to an error about this one
            message = (f'<span class="fusedrms-input-error" style="color:#b35900">'
                       f"{escape(str(e))}</span>")
        old, holder.children = holder.children, shown
        status.value = message
        for w in old:
            _close_all(w)

    for w in controls.values():
        w.observe(rebuild, names="value")
    rebuild()
    return widgets.VBox([static_note(), live_only(widgets.HBox(list(controls.values()))), status,
                         holder])
