"""Chapter 1's animation: RMSNorm on one short row, square -> reduce -> broadcast, step by step.

Every number drawn or printed comes from :func:`trace`, which runs the algorithm (the tree sum a
block of threads performs) in float64; tests check it against :func:`fusedrms.reference.rmsnorm`.
"""
from __future__ import annotations

from dataclasses import dataclass

from .stepper import Frame
from .svg import Canvas, decimals, fmt
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
    columns = f"{n} column" + ("" if n == 1 else "s")
    cell, left = 64, 110
    # room for the padded tree level and for the captions drawn inside the frame
    width = max(left + cell * len(t.levels[0]) + 40, 480)

    def canvas(height=250):
        c = Canvas(width, height)
        return c

    def base(c, x_fill="input", w_fill="weight"):
        c.row(left, 14, t.x, fill=x_fill, cell=cell, name="x")
        c.row(left, 52, t.w, fill=w_fill, cell=cell, name="w")

    out = []
    # 1. read
    c = canvas(120)
    base(c)
    c.text(left, 108, f"eps = {t.eps:g}   (n = {columns})", anchor="start")
    out.append(Frame("read the row and the weights",
                     f"x = {_vec(t.x)}, w = {_vec(t.w)}, eps = {t.eps:g}. "
                     f"The reduction needs only x; w waits until the end.", c.render()))
    # 2. square
    c = canvas(140)
    base(c)
    c.row(left, 96, t.squares, fill="register", cell=cell, name="x²")
    out.append(Frame("square every element: the signs vanish",
                     f"x² = {_vec(t.squares)}. Each square needs only its own element.",
                     c.render()))
    # 3. tree halves (every level of the tree)
    pairs = []
    for lvl_in, lvl_out in zip(t.levels[:-1], t.levels[1:]):
        half = len(lvl_out)
        pairs.append(", ".join(f"{fmt(lvl_in[i])}+{fmt(lvl_in[i + half])}={fmt(lvl_out[i])}"
                               for i in range(half)))
    step = 56  # room between levels for the lines that show which two values add
    c = canvas(58 + step * (len(t.levels) - 1))
    above = None
    for k, level in enumerate(t.levels):
        fills = ["reduced" if k else "register"] * len(level)
        if k == 0 and len(level) > n:
            fills[n:] = ["masked"] * (len(level) - n)
        here = c.row(left, 14 + step * k, level, fills=fills, cell=cell, name=f"level {k}")
        if above:  # s[i] += s[i + half]: value i and value i + half of the level above
            for i, (x, top, _) in enumerate(here):
                for j in (i, i + len(level)):
                    c.line(above[j][0], above[j][2], x, top)
        above = here
    padded = f" (padded to {len(t.levels[0])} with zeros)" if len(t.levels[0]) > n else ""
    tree = (f"Tree order{padded}: " + "; then ".join(pairs) + "." if pairs else
            f"One column: its square, {fmt(t.total)}, is already the sum; the tree has no level "
            f"to add.")
    out.append(Frame("add the upper half onto the lower half, level by level", tree, c.render()))
    # 4. mean over the real column count
    c = canvas(110)
    c.row(left, 14, [t.total], fill="reduced", cell=cell, name="sum")
    c.text(left, 82, f"mean = {fmt(t.total)} / {n} = {fmt(t.mean)}", anchor="start", size=14)
    out.append(Frame("divide by the real column count",
                     f"mean(x²) = {fmt(t.total)} / {n} = {fmt(t.mean)}: divide by the "
                     f"{'one real column' if n == 1 else f'{n} real columns'}, never by a padded "
                     f"width.", c.render()))
    # 5. broadcast r
    c = canvas(120)
    c.text(left, 28, f"r = 1/sqrt({fmt(t.mean)} + {t.eps:g}) = {decimals(t.r)}", anchor="start", size=14)
    c.row(left, 50, [t.r] * n, fill="reduced", cell=cell, name="r",
          labels=[f"{decimals(t.r)}"] * n)
    out.append(Frame("one scale for the whole row, broadcast to every position",
                     f"r = 1/sqrt({fmt(t.mean)} + {t.eps:g}) ≈ {decimals(t.r)}; eps is added before the "
                     f"square root. Every column uses the same r.", c.render()))
    # 6. multiply
    c = canvas(170)
    base(c, x_fill="active", w_fill="active")
    c.row(left, 120, t.y, fill="register", cell=cell, name="y", labels=[decimals(v) for v in t.y])
    k = next((i for i in range(n) if t.w[i] != 1), 0)  # show a column whose weight matters
    c.text(left, 108, "y_i = x_i · r · w_i", anchor="start")
    out.append(Frame("multiply by x and by each column's weight",
                     f"y = {_vec(t.y, rounded=True)}; e.g. column {k}: {fmt(t.x[k])} × {decimals(t.r)} "
                     f"× {fmt(t.w[k])} ≈ {decimals(t.y[k])}.", c.render()))
    # 7. only y is written
    c = canvas(120)
    c.row(left, 14, t.y, fill="output", cell=cell, name="y", labels=[decimals(v) for v in t.y])
    c.text(left, 80, "written to memory: y only", anchor="start", weight="bold")
    c.text(left, 100, "x², the sum, the mean and r lived in registers", anchor="start")
    out.append(Frame("write y; nothing in between touches memory",
                     f"Only the {'output is' if n == 1 else f'{n} outputs are'} stored. The "
                     f"{'square' if n == 1 else 'squares'}, the sum {fmt(t.total)}, the "
                     f"mean {fmt(t.mean)} and r ≈ {decimals(t.r)} never leave the chip.", c.render()))
    return out


def explorer(x="3, 4, -3, -4", w="1, 0.5, 2, 1", eps=1e-5):
    """The animation with editable x, w and eps (recomputes in a live kernel)."""
    import ipywidgets as widgets

    from .stepper import explorer as _explorer, row_input

    controls = {"x": row_input(x, "x"), "w": row_input(w, "w"),
                "eps": widgets.FloatText(value=eps, description="eps")}
    return _explorer(frames, controls)
