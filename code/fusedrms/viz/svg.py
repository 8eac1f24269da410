"""A tiny SVG canvas for the book's animation frames: boxed values, labels, arrows.

Frames are plain SVG strings, so they render in live Jupyter, in the static book and in tests
(which parse them) without any JavaScript.
"""
from __future__ import annotations

from html import escape


# Colour roles shared by every animation in the book.
PALETTE = {
    "input": "#dbeafe",     # values read from global memory
    "weight": "#fef3c7",
    "register": "#e0e7ff",  # values that live only in registers
    "active": "#fde68a",    # what this step works on
    "reduced": "#bbf7d0",   # results of a reduction
    "output": "#fecaca",    # values written to global memory
    "masked": "#e5e7eb",    # masked-off lanes
    "idle": "#ffffff",
}
STROKE = "#374151"
MONO_EM = 0.6    # a monospace glyph is about 0.6 em wide
# The book's text column at a 1280-px window (sphinx-book-theme), in CSS pixels.
COLUMN_PX = 690
MIN_LABEL = 11   # smallest label, in px as displayed in the column; longer ones are squeezed


def fmt(v: float, digits: int = 4) -> str:
    """Numbers as the captions print them: integers plainly, others to ``digits`` significant."""
    if v == int(v) and abs(v) < 1e6:
        return str(int(v))
    return f"{v:.{digits}g}"


def decimals(v: float) -> str:
    """r and y as the captions print them: four decimals, or four significant digits where
    decimals would hide the value (r = 0.00001 is not "0.0000")."""
    return f"{v:.4f}" if v == 0 or 1e-3 <= abs(v) < 1e4 else f"{v:.4g}"


class Canvas:
    def __init__(self, width: int, height: int, title: str = ""):
        self.width, self.height = width, height
        # a canvas wider than the column is shown scaled down: its labels are drawn larger
        # (the column is a few px narrower than COLUMN_PX on some pages: keep a 2% margin)
        self.min_label = MIN_LABEL * max(1.0, width / (0.98 * COLUMN_PX))
        self.parts: list[str] = []
        if title:
            self.text(8, 18, title, size=14, weight="bold", anchor="start")

    def text(self, x, y, s, size=12, anchor="middle", weight="normal", color=STROKE, fit=None):
        """A label; with ``fit`` (a width) it shrinks, then squeezes, to stay inside that width."""
        s = str(s)
        squeeze = ""
        size = max(size, self.min_label)
        if fit is not None and len(s) * MONO_EM * size > fit:
            size = max(self.min_label, fit / (len(s) * MONO_EM))
            if len(s) * MONO_EM * size > fit:
                squeeze = f' textLength="{fit:g}" lengthAdjust="spacingAndGlyphs"'
        size = round(size, 1)
        self.parts.append(f'<text x="{x}" y="{y}" font-size="{size}" text-anchor="{anchor}" '
                          f'font-weight="{weight}" fill="{color}"{squeeze} '
                          f'font-family="ui-monospace,monospace">{escape(s)}</text>')

    def box(self, x, y, w, h, label="", fill="idle", size=13, dashed=False):
        colour = PALETTE.get(fill, fill)
        dash = ' stroke-dasharray="4 3"' if dashed else ""
        self.parts.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="4" fill="{colour}" '
                          f'stroke="{STROKE}"{dash}/>')
        if label != "":
            self.text(x + w / 2, y + h / 2 + size * 0.35, label, size=size, fit=w - 4)

    def row(self, x, y, values, fill="input", cell=54, h=30, name=None, fills=None, labels=None):
        """A row of boxed values; ``fills`` overrides colours per cell, ``labels`` the text."""
        if name:
            self.text(x - 8, y + h / 2 + 4, name, anchor="end", weight="bold")
        for i, v in enumerate(values):
            label = labels[i] if labels is not None else fmt(v)
            self.box(x + i * cell, y, cell - 4, h, label, fills[i] if fills else fill)
        return [(x + i * cell + (cell - 4) / 2, y, y + h) for i in range(len(values))]

    def line(self, x1, y1, x2, y2, color=STROKE, width=1.2):
        self.parts.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="{color}" '
                          f'stroke-width="{width}"/>')

    def arrow(self, x1, y1, x2, y2, color=STROKE):
        self.parts.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="{color}" '
                          f'stroke-width="1.5" marker-end="url(#arrowhead)"/>')

    def render(self) -> str:
        defs = ('<defs><marker id="arrowhead" markerWidth="8" markerHeight="6" refX="7" refY="3" '
                f'orient="auto"><polygon points="0 0, 8 3, 0 6" fill="{STROKE}"/></marker></defs>')
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" '
                f'height="{self.height}" viewBox="0 0 {self.width} {self.height}" role="img" '
                'style="max-width:100%;height:auto">'
                + defs + "".join(self.parts) + "</svg>")
