"""Chapter 3's animation: one row, the serial kernel's chain beside the block kernel's tree.

:func:`trace` runs both algorithms of rmsnorm.hip step by step in float64 (the serial running sum;
the block's strided per-thread partials, shared-memory tree levels and barriers); :func:`frames`
draws eight steps from it; :func:`check_against_kernels` runs the real HIP kernels (CPU runtime or
GPU) on the same row with the same thread count and compares their output with the trace.
"""
from __future__ import annotations

from dataclasses import dataclass

from .stepper import Frame
from .svg import Canvas, decimals, fmt
from .traces import check_output, check_row, row_scale, row_values, tree_reduce_levels

MAX_COLS = 8
MAX_THREADS = 8


@dataclass(frozen=True)
class BlockTrace:
    x: list[float]
    w: list[float]
    eps: float
    threads: int
    serial_running: list[float]       # the serial thread's sum after each column
    columns_of: list[list[int]]       # thread t's strided columns: t, t + threads, ...
    partials: list[float]             # what each thread writes to shared[t]
    levels: list[list[float]]         # shared memory after each tree step (first: the partials)
    strides: list[int]                # the stride of each tree step
    barriers: int                     # __syncthreads() each thread passes
    total: float
    mean: float
    r: float
    y: list[float]


def trace(x, w, eps: float = 1e-5, threads: int = 4) -> BlockTrace:
    x = row_values(x, "x")
    w = row_values(w, "w")
    threads = int(threads)
    check_row(x, w, MAX_COLS)
    if threads not in (1, 2, 4, 8):
        raise ValueError(f"threads must be a power of two from 1 to {MAX_THREADS}; got {threads}")
    running, s = [], 0.0
    for v in x:
        s += v * v
        running.append(s)
    columns_of = [list(range(t, len(x), threads)) for t in range(threads)]
    partials = [sum(x[c] * x[c] for c in cols) for cols in columns_of]  # no columns -> 0
    levels = tree_reduce_levels(partials)
    strides = [len(level) for level in levels[1:]]  # stride = the size of the level it produces
    total = levels[-1][0]
    mean, r = row_scale(total, len(x), eps)  # divide by cols, not by the thread count
    y = [xi * r * wi for xi, wi in zip(x, w)]
    check_output(y)
    return BlockTrace(x, w, eps, threads, running, columns_of, partials, levels, strides,
                      1 + len(strides), total, mean, r, y)


def _y_row(c: Canvas, x0: int, y0: int, values) -> None:
    wide = len(values) <= 5
    c.row(x0, y0, values, "output", cell=48 if wide else 36, name="y",
          labels=[f"{v:.2f}" if wide else f"{v:.1f}" for v in values])


def _vec(values) -> str:
    return "[" + ", ".join(fmt(v) for v in values) + "]"


def _canvas(t: BlockTrace, title: str) -> Canvas:
    c = Canvas(780, 250, title)
    c.text(190, 44, "serial: one thread, one chain", weight="bold")
    c.text(620, 44, f"block: {t.threads} threads, one tree", weight="bold")
    c.parts.append('<line x1="390" y1="34" x2="390" y2="242" stroke="#9ca3af" stroke-dasharray="4 4"/>')
    cell = 40 if len(t.x) <= 5 else 36
    c.row(60, 56, t.x, "input", cell=cell, name="x")
    c.row(480, 56, t.x, "input", cell=cell, name="x")
    return c


def _threads(n: int) -> str:
    return "1 thread" if n == 1 else f"{n} threads"


def frames(x=(3, 4, -3, -4), w=(1, 0.5, 2, 1), eps: float = 1e-5, threads: int = 4) -> list[Frame]:
    t = trace(x, w, eps, threads)
    n = len(t.x)
    out = []

    c = _canvas(t, "the same row, two ways of working")
    cell = 40 if n <= 5 else 36
    c.row(60, 96, t.w, "weight", cell=cell, name="w")
    c.row(480, 96, t.w, "weight", cell=cell, name="w")
    c.text(190, 160, "thread 0 walks every column", size=12)
    c.text(620, 160, f"thread t takes columns t, t+{t.threads}, ...", size=12)
    out.append(Frame("two kernels, one row",
                     f"x = {_vec(t.x)}, w = {_vec(t.w)}, eps = {t.eps:g}. Left: rmsnorm_serial, one "
                     f"thread per row. Right: rmsnorm_block with {_threads(t.threads)} for this row "
                     f"(the real kernel uses 256).", c.render()))

    c = _canvas(t, "serial: the sum of squares is a chain")
    cell = 40 if n <= 5 else 36
    c.row(60, 110, t.serial_running, "active", cell=cell, name="sum")
    for i in range(1, n):
        c.arrow(60 + cell * i - 6, 125, 60 + cell * i + 2, 125)
    out.append(Frame("serial: a chain of additions",
                     f"One thread adds the squares in order: running sum {_vec(t.serial_running)}. "
                     + (f"{n} dependent additions: each waits for the one before." if n > 1 else
                        "With one column the chain is a single addition."), c.render()))

    c = _canvas(t, "serial: r, then a second pass over x")
    c.row(60, 110, t.serial_running[-1:], "reduced", cell=60, name="sum")
    c.text(200, 170, f"r = rsqrt({fmt(t.total)}/{n} + eps) = {decimals(t.r)}", size=12)
    _y_row(c, 60, 200, t.y)
    out.append(Frame("serial: scale and write",
                     f"r = 1/sqrt({fmt(t.total)}/{n} + {t.eps:g}) = {decimals(t.r)}; a second loop over the "
                     f"row writes y = x*r*w = {_vec([round(v, 4) for v in t.y])}.", c.render()))

    c = _canvas(t, "block: each thread squares its own columns")
    c.row(480, 110, t.partials, "register", cell=40, name="sum_sq",
          labels=[fmt(v) for v in t.partials])
    for k in range(t.threads):
        c.text(500 + 40 * k, 158, f"t{k}", size=11)
    idle = [k for k, cols in enumerate(t.columns_of) if not cols]
    out.append(Frame("block: partial sums in registers",
                     f"Thread t adds the squares of columns t, t+{t.threads}, ...: partials "
                     f"{_vec(t.partials)}."
                     + (f" Threads {idle} have no column and keep 0: they still join the tree."
                        if idle else " A thread with no column would keep 0 and still join the tree."),
                     c.render()))

    c = _canvas(t, "block: partials to shared memory, then a barrier")
    c.row(480, 110, t.levels[0], "active", cell=40, name="shared")
    c.text(620, 175, "__syncthreads()  #1", size=12, weight="bold")
    out.append(Frame("shared memory and the first barrier",
                     f"shared = {_vec(t.levels[0])}. The barrier makes every write visible before any "
                     f"thread reads a neighbour's slot.", c.render()))

    steps = list(zip(t.strides, t.levels[1:]))
    first_steps, last = steps[:-1], steps[-1] if steps else None
    c = _canvas(t, "block: tree steps, a barrier after each")
    y0 = 110
    sums = []
    for stride, level in first_steps:
        c.row(480, y0, level, "active", cell=40, name=f"stride {stride}")
        y0 += 40
        prev = t.levels[t.strides.index(stride)]
        sums.append(", ".join(f"{fmt(prev[i])}+{fmt(prev[i + stride])}={fmt(level[i])}"
                              for i in range(stride)))
    c.text(620, min(y0 + 20, 236), "__syncthreads() after every step", size=11)
    out.append(Frame("tree steps",
                     ("; ".join(f"stride {s}: {txt}" for (s, _), txt in zip(first_steps, sums))
                      + ". Threads with tid >= stride add nothing this round but still reach the "
                        "barrier." if sums else
                      "With one thread there is nothing to pair up: its partial is the total."
                      if last is None else
                      "With two threads the tree is a single step, stride 1, shown next."),
                     c.render()))

    c = _canvas(t, "block: the last step, then divide by cols")
    if last is not None:
        prev = t.levels[-2]
        c.row(480, 110, last[1], "reduced", cell=60, name="shared[0]")
        detail = f"{fmt(prev[0])}+{fmt(prev[1])} = {fmt(t.total)}"
    else:
        c.row(480, 110, [t.total], "reduced", cell=60, name="shared[0]")
        detail = f"{fmt(t.total)}"
    c.text(620, 180, f"mean = {fmt(t.total)} / cols = {fmt(t.total)}/{n} = {fmt(t.mean)}", size=12)
    out.append(Frame("total and mean",
                     f"shared[0] = {detail}, the same {fmt(t.serial_running[-1])} as the serial chain. "
                     f"Mean = {fmt(t.total)}/{n} = {fmt(t.mean)}: divided by cols ({n}), not by the "
                     f"{_threads(t.threads)}.", c.render()))

    c = _canvas(t, "block: r for everyone, each thread writes its columns")
    c.text(620, 110, f"r = rsqrt({fmt(t.mean)} + eps) = {decimals(t.r)}", size=12)
    _y_row(c, 480, 130, t.y)
    _y_row(c, 60, 130, t.y)
    out.append(Frame("broadcast and write",
                     f"Every thread reads shared[0] and computes r = {decimals(t.r)}; thread t writes columns "
                     f"t, t+{t.threads}, ...: y = {_vec([round(v, 4) for v in t.y])}, the serial result. "
                     f"No barrier after the last read of shared[0]: nothing writes shared memory again.",
                     c.render()))
    return out


def check_against_kernels(x=(3, 4, -3, -4), w=(1, 0.5, 2, 1), eps: float = 1e-5,
                          threads: int = 4, device: str = "cpu"):
    """Run hip.serial and hip.block (with ``threads`` threads) on the row; compare with the trace.

    Returns ``{variant: checks.Report}``.
    """
    import torch

    from .. import checks
    from ..kernels.hip import kernels

    t = trace(x, w, eps, threads)
    xt = torch.tensor([t.x], dtype=torch.float32, device=device)
    wt = torch.tensor(t.w, dtype=torch.float32, device=device)
    expected = torch.tensor([t.y], dtype=torch.float64)
    out = {}
    for variant, block in (("serial", 1), ("block", threads)):
        y = kernels.rmsnorm(xt, wt, eps, variant=variant, block_size=block).cpu()
        out[variant] = checks.allclose(y, expected)
    return out


def explorer(x="3, 4, -3, -4", w="1, 0.5, 2, 1", eps: float = 1e-5, threads: int = 4):
    """The animation with editable x, w, eps and thread count (recomputes in a live kernel)."""
    import ipywidgets as widgets

    from .stepper import explorer as _explorer, row_input

    controls = {"x": row_input(x, "x"), "w": row_input(w, "w"),
                "eps": widgets.FloatText(value=eps, description="eps"),
                "threads": widgets.Dropdown(options=[1, 2, 4, 8], value=threads, description="threads")}
    return _explorer(frames, controls)
