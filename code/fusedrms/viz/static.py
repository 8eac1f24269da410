"""What a widget shows on the static page, where no kernel runs.

Controls whose effect needs Python (an ``observe`` callback) are marked live-only: in JupyterLab
they work as usual; the built book greys them out, disables their inputs (book/_web/book.css and
widgets-setup.js) and shows one line saying how to change them. The note is hidden by an inline
style that only the book's stylesheet overrides, so a live notebook never shows it.
"""
from __future__ import annotations

import ipywidgets as widgets

LIVE_ONLY_CLASS = "fusedrms-live-only"
STATIC_NOTE_CLASS = "fusedrms-static-note"
STATIC_NOTE = "Run the notebook to change the inputs."


def live_only(widget: widgets.Widget) -> widgets.Widget:
    """Mark ``widget`` (a control or a box of controls) as needing a live kernel; returns it."""
    widget.add_class(LIVE_ONLY_CLASS)
    return widget


def static_note(text: str = STATIC_NOTE) -> widgets.HTML:
    """The one line the static page shows above live-only controls (hidden in a live notebook)."""
    from html import escape

    return widgets.HTML(f'<div class="{STATIC_NOTE_CLASS}" style="display:none">'
                        f"{escape(text)}</div>")


def live_controls(*rows: widgets.Widget) -> widgets.VBox:
    """Rows of live-only controls under the static note: ``live_controls(HBox([...]), ...)``."""
    return widgets.VBox([static_note(), *(live_only(r) for r in rows)])
