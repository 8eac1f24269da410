"""Step-through animations that work in live Jupyter *and* in the static book.

Every frame is computed in Python (an SVG plus a caption with the step's numbers) and stacked in an
``ipywidgets.Stack``. A ``Play`` button and an ``IntSlider`` drive the stack through ``jslink``,
which runs in the browser, so the static page steps without a kernel. Python callbacks
(recomputing frames for new inputs) need a live kernel; :func:`explorer` adds them.
"""
from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Callable

import ipywidgets as widgets


@dataclass(frozen=True)
class Frame:
    title: str
    caption: str  # states the step's numbers, computed, never typed
    svg: str

    def html(self, index: int, total: int) -> str:
        return (f'<div class="fusedrms-frame" data-step="{index}" style="max-width:100%">'
                f'<div style="font-weight:600">Step {index + 1}/{total}: {escape(self.title)}</div>'
                f"{self.svg}"
                f'<div class="fusedrms-caption" style="max-width:100%;white-space:normal">'
                f"{escape(self.caption)}</div>"
                f"</div>")


def frame_stack(frames: list[Frame]) -> widgets.Stack:
    return widgets.Stack([widgets.HTML(f.html(i, len(frames))) for i, f in enumerate(frames)],
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


def explorer(make_frames: Callable[..., list[Frame]], controls: dict[str, widgets.Widget],
             interval_ms: int = 1600) -> widgets.VBox:
    """An animation whose inputs the reader can edit (live kernel only).

    ``make_frames(**values)`` recomputes the frames from the controls' values. A bad input (it
    raises ``ValueError``, ``TypeError`` or ``ArithmeticError``) shows its message in the widget in
    place of the frames, never a traceback; the next good input brings the frames back. In the
    static book the controls are inert and the frames for the initial values are shown.
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
    note = widgets.HTML("<i>Edit an input and press Enter to recompute the frames "
                        "(needs a running kernel).</i>")
    return widgets.VBox([note, widgets.HBox(list(controls.values())), status, holder])
