"""Chapter 9's animation: the backward's two reductions, step by step.

``dx`` needs a reduction *along a row* (the dot product of ``g = dy w`` with ``xhat = x r``), which
one program does in registers like the forward's sum of squares. ``dw`` needs a reduction *across
rows*: each column of ``dw`` sums one value from every row, and the rows live in different
programs. Every number drawn or printed comes from :func:`trace` (float64, the tree sum a block
performs); tests check it against :func:`fusedrms.reference.rmsnorm_backward`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .stepper import Frame
from .svg import Canvas, fmt
from .traces import check_row, tree_reduce_levels

MAX_COLS = 8
# The chapter's hand example: chapter 1's row and weights, and a chosen output gradient.
HAND_X = (3.0, 4.0, -3.0, -4.0)
HAND_W = (1.0, 0.5, 2.0, 1.0)
HAND_DY = (1.0, -2.0, 0.5, 1.0)
# Two more rows (and their gradients) for the dw frames: three rows shared by two programs.
MORE_X = ((1.0, -1.0, 2.0, 0.5), (-2.0, 1.0, 1.0, 3.0))
MORE_DY = ((0.5, 1.0, -1.0, 2.0), (-1.0, 0.5, 1.0, -0.5))
PROGRAM_ROWS = ((0, 1), (2,))  # rows of each program


@dataclass(frozen=True)
class RowTrace:
    x: list[float]
    dy: list[float]
    r: float
    xhat: list[float]
    g: list[float]
    products: list[float]  # g * xhat, the terms of the row's dot product
    levels: list[list[float]]
    dot: float
    mean: float  # dot / n
    dx: list[float]
    dw_terms: list[float]  # dy * xhat: this row's contribution to each column of dw


def trace_row(x, w, dy, eps: float = 1e-5) -> RowTrace:
    x, w, dy = ([float(v) for v in t] for t in (x, w, dy))
    check_row(x, w, MAX_COLS)
    if len(dy) != len(x) or not all(math.isfinite(v) for v in dy):
        raise ValueError(f"dy needs one finite value per column ({len(x)})")
    mean_square = sum(v * v for v in x) / len(x)
    if mean_square + eps <= 0:
        raise ValueError("an all-zero row with eps = 0 divides by zero: use eps > 0")
    r = 1.0 / math.sqrt(mean_square + eps)
    xhat = [v * r for v in x]
    g = [d * wi for d, wi in zip(dy, w)]
    products = [a * b for a, b in zip(g, xhat)]
    levels = tree_reduce_levels(products)
    dot = levels[-1][0]
    mean = dot / len(x)
    dx = [r * (gi - xi * mean) for gi, xi in zip(g, xhat)]
    return RowTrace(x, dy, r, xhat, g, products, levels, dot, mean, dx,
                    [d * xi for d, xi in zip(dy, xhat)])


@dataclass(frozen=True)
class Trace:
    w: list[float]
    rows: list[RowTrace]
    programs: tuple  # rows of each program
    partials: list[list[float]]  # one per program: the sum of its rows' dw terms
    dw: list[float]


def trace(x_rows=(HAND_X, *MORE_X), w=HAND_W, dy_rows=(HAND_DY, *MORE_DY), eps: float = 1e-5,
          programs=PROGRAM_ROWS) -> Trace:
    rows = [trace_row(x, w, dy, eps) for x, dy in zip(x_rows, dy_rows)]
    if sorted(i for p in programs for i in p) != list(range(len(rows))):
        raise ValueError("every row must belong to exactly one program")
    n = len(rows[0].x)
    partials = [[sum(rows[i].dw_terms[c] for i in p) for c in range(n)] for p in programs]
    dw = [sum(part[c] for part in partials) for c in range(n)]
    return Trace([float(v) for v in w], rows, tuple(tuple(p) for p in programs), partials, dw)


def _vec(values, digits: int = 4) -> str:
    return "[" + ", ".join(fmt(v, digits) for v in values) + "]"


def frames(eps: float = 1e-5) -> list[Frame]:
    """Four frames for dx on the hand row, four for dw across three rows and two programs."""
    t = trace(eps=eps)
    h = t.rows[0]
    n = len(h.x)
    k = 1  # the column the dx caption works through
    owners = "; ".join(f"program {p} rows {', '.join(map(str, rows))}"
                       for p, rows in enumerate(t.programs))
    steps = [
        ("read x, dy and w; r was saved by the forward",
         f"x = {_vec(h.x)}, dy = {_vec(h.dy)}, w = {_vec(t.w)}. The forward stored "
         f"r = 1/sqrt(mean(x²) + eps) = {h.r:.5f} for this row (4 bytes)."),
        ("two elementwise products, in registers",
         f"xhat = x·r = {_vec(h.xhat)}; g = dy·w = {_vec(h.g)}. Each needs only its own column."),
        ("reduction 1: the dot product along the row",
         f"sum(g·xhat) = {h.dot:.4f} by the same tree as the forward's sum of squares; "
         f"mean = {h.dot:.4f} / {n} = {h.mean:.4f}. One program, one row, registers only."),
        ("dx: the row's gradient, written once",
         f"dx = r·(g − xhat·mean) = {_vec(h.dx)}; e.g. column {k}: {h.r:.4f} × "
         f"({fmt(h.g[k])} − {h.xhat[k]:.4f} × {h.mean:.4f}) ≈ {h.dx[k]:.4f}. The second "
         f"term is the gradient through r, which depends on every x."),
        ("dw needs one term from every row: dy·xhat",
         "Row by row, dy·xhat = " + "; ".join(_vec(r.dw_terms, 3) for r in t.rows)
         + ". Column c of dw is the sum of column c over all rows: a reduction across "
           "rows, which live in different programs."),
        ("stage 1: each program sums its own rows, then stores one partial row",
         f"{owners}. Partials: " + "; ".join(_vec(p, 3) for p in t.partials)
         + ". Each program writes its own row of partials: no two programs write the "
           "same address."),
        ("stage 2: a small kernel adds the partials column by column",
         f"dw = {_vec(t.dw, 4)}. The order of the additions is fixed, so the same "
         f"inputs give the same bits on every run."),
        ("why dw is the hard reduction on a GPU",
         f"Every program contributes to all {n} columns. Adding straight into dw "
         f"(atomics) makes the programs meet at the same addresses in whatever order "
         f"they finish: fp32 addition is not associative, so the last bits can change "
         f"from run to run. The partials avoid both, at the price of programs × cols × "
         f"4 bytes written and read back."),
    ]
    desktop, phone = _drawings(t, phone=False), _drawings(t, phone=True)
    return [Frame(title, caption, svg, small)
            for (title, caption), svg, small in zip(steps, desktop, phone)]


def _drawings(t: Trace, phone: bool) -> list[str]:
    """The eight pictures, for the desktop column or (narrower cells, wrapped text) a phone's."""
    h = t.rows[0]
    n = len(h.x)
    cell, left = (64, 76) if phone else (70, 120)
    width = left + cell * n + 8 if phone else max(left + cell * n + 40, 520)

    def canvas(height):
        return Canvas(width, height, phone=phone)

    def lines(c, y, texts):  # a phone gets a long note as two lines
        for i, s in enumerate(texts if phone else [" ".join(texts)]):
            c.text(8 if phone else left, y + 16 * i, s, anchor="start")

    out = []
    c = canvas(170)
    c.row(left, 14, h.x, fill="input", cell=cell, name="x")
    c.row(left, 52, h.dy, fill="input", cell=cell, name="dy")
    c.row(left, 90, t.w, fill="weight", cell=cell, name="w")
    lines(c, 150, [f"saved by the forward: r = {h.r:.5f}"])
    out.append(c.render())
    c = canvas(100)
    c.row(left, 14, h.xhat, fill="register", cell=cell, name="xhat",
          labels=[f"{v:.4f}" for v in h.xhat])
    c.row(left, 56, h.g, fill="register", cell=cell, name="g = dy·w")
    out.append(c.render())
    c = canvas(40 + 38 * len(h.levels))
    for k, level in enumerate(h.levels):
        c.row(left, 10 + 38 * k, level, fill="reduced" if k else "register", cell=cell,
              name="g·xhat" if k == 0 else f"level {k}", labels=[f"{v:.4f}" for v in level])
    out.append(c.render())
    c = canvas(100)
    c.row(left, 14, h.dx, fill="output", cell=cell, name="dx", labels=[f"{v:.4f}" for v in h.dx])
    lines(c, 80, ["dx = r·(g − xhat·mean)"])
    out.append(c.render())
    c = canvas(40 + 38 * len(t.rows))
    for i, row in enumerate(t.rows):
        c.row(left, 10 + 38 * i, row.dw_terms, fill="register", cell=cell, name=f"row {i}",
              labels=[f"{v:.3f}" for v in row.dw_terms])
    out.append(c.render())
    c = canvas(40 + 38 * len(t.partials))
    for p, part in enumerate(t.partials):
        c.row(left, 10 + 38 * p, part, fill="reduced", cell=cell, name=f"program {p}",
              labels=[f"{v:.3f}" for v in part])
    out.append(c.render())
    c = canvas(100 + 16 * phone)
    c.row(left, 14, t.dw, fill="output", cell=cell, name="dw", labels=[f"{v:.3f}" for v in t.dw])
    lines(c, 80, ["dw[c] = partial[0][c] + partial[1][c],", "always in this order"])
    out.append(c.render())
    c = canvas(150)
    c.row(left, 10, t.dw, fill="output", cell=cell, name="dw", labels=[f"{v:.3f}" for v in t.dw])
    for p in range(len(t.partials)):
        y = 100 + 22 * p
        c.text(left - 8, y + 4, f"program {p}", anchor="end")
        for col in range(n):
            c.arrow(left + 20 + 30 * p, y, left + col * cell + 30, 42)
    out.append(c.render())
    return out
