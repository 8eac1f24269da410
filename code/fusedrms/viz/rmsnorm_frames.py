"""Chapter 1's animation: RMSNorm on one short row, square -> reduce -> broadcast, step by step.

Every number drawn or printed comes from :func:`trace`, which runs the algorithm (the tree sum a
block of threads performs) in float64; tests check it against :func:`fusedrms.reference.rmsnorm`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .stepper import Frame
from .svg import LINE_GAP, Canvas, decimals, fmt
from .traces import check_output, check_row, row_scale, row_values, tree_reduce_levels

MAX_COLS = 8  # the picture stays readable up to 8 columns


@dataclass(frozen=True)
class RMSNormTrace:
    x: list[float]
    w: list[float]
    eps: float
    squares: list[float]
    levels: list[list[float]]  # tree levels, first = squares padded to a power of two
    total: float
    mean: float
    r: float
    y: list[float]


def trace(x, w, eps: float = 1e-5) -> RMSNormTrace:
    """``x`` and ``w``: sequences of numbers or text such as "3, 4, -3, -4"."""
    x = row_values(x, "x")
    w = row_values(w, "w")
    check_row(x, w, MAX_COLS)
    squares = [v * v for v in x]
    levels = tree_reduce_levels(squares)
    total = levels[-1][0]
    mean, r = row_scale(total, len(x), eps)
    y = [xi * r * wi for xi, wi in zip(x, w)]
    check_output(y)
    return RMSNormTrace(x, w, eps, squares, levels, total, mean, r, y)


def _vec(values, rounded: bool = False) -> str:
    return "[" + ", ".join(decimals(v) if rounded else fmt(v) for v in values) + "]"


def frames(x=(3, 4, -3, -4), w=(1, 0.5, 2, 1), eps: float = 1e-5) -> list[Frame]:
    """The seven steps: read, square, tree halves, mean, broadcast r, multiply, write y only."""
    t = trace(x, w, eps)
    n = len(t.x)
    pairs = []
    for lvl_in, lvl_out in zip(t.levels[:-1], t.levels[1:]):
        half = len(lvl_out)
        pairs.append(", ".join(f"{fmt(lvl_in[i])}+{fmt(lvl_in[i + half])}={fmt(lvl_out[i])}"
                               for i in range(half)))
    padded = f" (padded to {len(t.levels[0])} with zeros)" if len(t.levels[0]) > n else ""
    tree = (f"Tree order{padded}: " + "; then ".join(pairs) + "." if pairs else
            f"One column: its square, {fmt(t.total)}, is already the sum; the tree has no level "
            f"to add.")
    k = next((i for i in range(n) if t.w[i] != 1), 0)  # show a column whose weight matters
    steps = [
        ("read the row and the weights",
         f"x = {_vec(t.x)}, w = {_vec(t.w)}, eps = {t.eps:g}. "
         f"The reduction needs only x; w waits until the end."),
        ("square every element: the signs vanish",
         f"x² = {_vec(t.squares)}. Each square needs only its own element."),
        ("add the upper half onto the lower half, level by level", tree),
        ("divide by the real column count",
         f"mean(x²) = {fmt(t.total)} / {n} = {fmt(t.mean)}: divide by the "
         f"{'one real column' if n == 1 else f'{n} real columns'}, never by a padded width."),
        ("one scale for the whole row, broadcast to every position",
         f"r = 1/sqrt({fmt(t.mean)} + {t.eps:g}) ≈ {decimals(t.r)}; eps is added before the "
         f"square root. Every column uses the same r."),
        ("multiply by x and by each column's weight",
         f"y = {_vec(t.y, rounded=True)}; e.g. column {k}: {fmt(t.x[k])} × {decimals(t.r)} "
         f"× {fmt(t.w[k])} ≈ {decimals(t.y[k])}."),
        ("write y; nothing in between touches memory",
         f"Only the {'output is' if n == 1 else f'{n} outputs are'} stored. The "
         f"{'square' if n == 1 else 'squares'}, the sum {fmt(t.total)}, the "
         f"mean {fmt(t.mean)} and r ≈ {decimals(t.r)} never leave the chip."),
    ]
    desktop, phone = _drawings(t, phone=False), _drawings(t, phone=True)
    return [Frame(title, caption, svg, small)
            for (title, caption), svg, small in zip(steps, desktop, phone)]


PHONE_PER_LINE = 4  # a phone shows a row of up to 8 values as two lines of 4


def _drawings(t: RMSNormTrace, phone: bool) -> list[str]:
    """The seven pictures, for the desktop column or a phone's (rows wrapped at 4 values)."""
    n = len(t.x)
    if phone:
        cell, left, per_line = 70, 60, PHONE_PER_LINE
        width = left + cell * per_line
    else:  # room for the padded tree level and for the notes drawn inside the frame
        cell, left, per_line = 64, 110, None
        width = max(left + cell * len(t.levels[0]) + 40, 480)
    note_x = 8 if phone else left

    def extra(count):  # the height a wrapped row of ``count`` values adds
        return (math.ceil(count / per_line) - 1) * (30 + LINE_GAP) if per_line else 0

    ex = extra(n)

    def canvas(height):
        return Canvas(width, height, phone=phone)

    def row(c, y, values, **kw):
        return c.row(left, y, values, cell=cell, per_line=per_line, **kw)

    def note(c, y, s, **kw):
        c.text(note_x, y, s, anchor="start", fit=width - note_x - 8, **kw)

    def base(c, x_fill="input", w_fill="weight"):
        row(c, 14, t.x, fill=x_fill, name="x")
        row(c, 52 + ex, t.w, fill=w_fill, name="w")

    out = []
    c = canvas(120 + 2 * ex)  # 1. read
    base(c)
    note(c, 108 + 2 * ex, f"eps = {t.eps:g}   (n = {n} column{'' if n == 1 else 's'})")
    out.append(c.render())
    c = canvas(140 + 3 * ex)  # 2. square
    base(c)
    row(c, 96 + 2 * ex, t.squares, fill="register", name="x²")
    out.append(c.render())
    # 3. tree halves (every level of the tree); the lines that show which two values add lie
    # under the boxes, so a wrapped level's line passes behind the value below it
    step = 56
    tops = [14]
    for level in t.levels[:-1]:
        tops.append(tops[-1] + step + extra(len(level)))
    c = canvas(tops[-1] + 44)
    above, lines = None, []
    for k, level in enumerate(t.levels):
        fills = ["reduced" if k else "register"] * len(level)
        if k == 0 and len(level) > n:
            fills[n:] = ["masked"] * (len(level) - n)
        here = row(c, tops[k], level, fills=fills, name=f"level {k}")
        if above:  # s[i] += s[i + half]: value i and value i + half of the level above
            for i, (x, top, _) in enumerate(here):
                for j in (i, i + len(level)):
                    lines.append((above[j][0], above[j][2], x, top))
        above = here
    under = len(c.parts)
    for line in lines:
        c.line(*line)
    c.parts[:] = c.parts[under:] + c.parts[:under]
    out.append(c.render())
    c = canvas(110)  # 4. mean over the real column count
    row(c, 14, [t.total], fill="reduced", name="sum")
    note(c, 82, f"mean = {fmt(t.total)} / {n} = {fmt(t.mean)}", size=14)
    out.append(c.render())
    c = canvas(120 + ex)  # 5. broadcast r
    note(c, 28, f"r = 1/sqrt({fmt(t.mean)} + {t.eps:g}) = {decimals(t.r)}", size=14)
    row(c, 50, [t.r] * n, fill="reduced", name="r", labels=[f"{decimals(t.r)}"] * n)
    out.append(c.render())
    c = canvas(170 + 3 * ex)  # 6. multiply
    base(c, x_fill="active", w_fill="active")
    row(c, 120 + 2 * ex, t.y, fill="register", name="y", labels=[decimals(v) for v in t.y])
    note(c, 108 + 2 * ex, "y_i = x_i · r · w_i")
    out.append(c.render())
    c = canvas(120 + ex)  # 7. only y is written
    row(c, 14, t.y, fill="output", name="y", labels=[decimals(v) for v in t.y])
    note(c, 80 + ex, "written to memory: y only", weight="bold")
    note(c, 100 + ex, "x², the sum, the mean and r lived in registers")
    out.append(c.render())
    return out


def explorer(x="3, 4, -3, -4", w="1, 0.5, 2, 1", eps=1e-5):
    """The animation with editable x, w and eps (recomputes in a live kernel)."""
    import ipywidgets as widgets

    from .stepper import explorer as _explorer, row_input

    controls = {"x": row_input(x, "x"), "w": row_input(w, "w"),
                "eps": widgets.FloatText(value=eps, description="eps")}
    return _explorer(frames, controls)
