"""A tiny SVG canvas for the book's animation frames: boxed values, labels, arrows.

Frames are plain SVG strings, so they render in live Jupyter, in the static book and in tests
(which parse them) without any JavaScript.
"""
from __future__ import annotations

import contextlib
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
LINE_GAP = 6     # between the lines of a wrapped row
MIN_LABEL = 11   # smallest label, in px as displayed in the column; longer ones are squeezed
# A phone (a 390-px screen) gives the column about 358 CSS px; each frame also draws a narrow
# layout for it, shown below this breakpoint (the same as book.page's phone figures).
PHONE_COLUMN_PX = 358
PHONE_MEDIA = "(max-width: 575.98px)"
MIN_PHONE_LABEL = 10  # 9 px is the floor; 10 leaves room for a column a few px narrower


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
    def __init__(self, width: int, height: int, title: str = "", phone: bool = False):
        """``phone``: drawn for a phone's column (PHONE_COLUMN_PX) instead of the desktop's."""
        self.width, self.height, self.phone = width, height, phone
        # a canvas wider than the column is shown scaled down: its labels are drawn larger
        # (the column is a few px narrower than COLUMN_PX on some pages: keep a 2% margin)
        column, least = (PHONE_COLUMN_PX, MIN_PHONE_LABEL) if phone else (COLUMN_PX, MIN_LABEL)
        self.min_label = least * max(1.0, width / (0.98 * column))
        self.parts: list[str] = []
        if title:
            self.text(8, 18, title, size=14, weight="bold", anchor="start", fit=width - 16)

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

    def row(self, x, y, values, fill="input", cell=54, h=30, name=None, fills=None, labels=None,
            per_line=None):
        """A row of boxed values; ``fills`` overrides colours per cell, ``labels`` the text.
        ``per_line`` wraps it: cell i goes to line i // per_line, lines LINE_GAP apart.
        Returns each cell's (centre x, top, bottom)."""
        if name:
            self.text(x - 8, y + h / 2 + 4, name, anchor="end", weight="bold")
        per_line = per_line or max(1, len(values))
        spots = [(x + (i % per_line) * cell, y + (i // per_line) * (h + LINE_GAP))
                 for i in range(len(values))]
        for i, (v, (cx, cy)) in enumerate(zip(values, spots)):
            label = labels[i] if labels is not None else fmt(v)
            self.box(cx, cy, cell - 4, h, label, fills[i] if fills else fill)
        return [(cx + (cell - 4) / 2, cy, cy + h) for cx, cy in spots]

    @contextlib.contextmanager
    def shifted(self, dx: float, dy: float):
        """Everything drawn inside is moved by (dx, dy): one drawing placed twice differently."""
        if dx or dy:
            self.parts.append(f'<g transform="translate({dx:g} {dy:g})">')
        yield self
        if dx or dy:
            self.parts.append("</g>")

    def line(self, x1, y1, x2, y2, color=STROKE, width=1.2):
        self.parts.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="{color}" '
                          f'stroke-width="{width}"/>')

    def arrow(self, x1, y1, x2, y2, color=STROKE):
        self.parts.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="{color}" '
                          f'stroke-width="1.5" marker-end="url(#{self._marker})"/>')

    @property
    def _marker(self) -> str:
        # its own id: a page holds both layouts, and the hidden one's marker would not draw
        return "arrowhead-phone" if self.phone else "arrowhead"

    def render(self) -> str:
        defs = (f'<defs><marker id="{self._marker}" markerWidth="8" markerHeight="6" '
                'refX="7" refY="3" '
                f'orient="auto"><polygon points="0 0, 8 3, 0 6" fill="{STROKE}"/></marker></defs>')
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" '
                f'height="{self.height}" viewBox="0 0 {self.width} {self.height}" role="img" '
                'style="max-width:100%;height:auto">'
                + defs + "".join(self.parts) + "</svg>")
