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


PANE = 390          # each kernel's half of the desktop picture
PHONE_SHIFT = 214   # a phone shows the block's half below the serial's, this much lower


def _pictures(t: BlockTrace, title: str, serial, block) -> tuple[str, str]:
    """The desktop picture (serial left, block right) and the phone's (the block's half moved
    under the serial's): ``serial(c)`` and ``block(c)`` draw each half's own step."""
    cell = 40 if len(t.x) <= 5 else 36
    out = []
    for phone in (False, True):
        c = Canvas(PANE if phone else 2 * PANE, 250 + PHONE_SHIFT * phone, title, phone=phone)
        c.text(190, 44, "serial: one thread, one chain", weight="bold")
        c.row(60, 56, t.x, "input", cell=cell, name="x")
        serial(c)
        divider = ((8, 246, PANE - 8, 246) if phone else (PANE, 34, PANE, 242))
        c.parts.append('<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#9ca3af" '
                       'stroke-dasharray="4 4"/>'.format(*divider))
        with c.shifted(-PANE * phone, PHONE_SHIFT * phone):
            c.text(620, 44, f"block: {t.threads} threads, one tree", weight="bold")
            c.row(480, 56, t.x, "input", cell=cell, name="x")
            block(c)
        out.append(c.render())
    return out[0], out[1]


def _threads(n: int) -> str:
    return "1 thread" if n == 1 else f"{n} threads"


def frames(x=(3, 4, -3, -4), w=(1, 0.5, 2, 1), eps: float = 1e-5, threads: int = 4) -> list[Frame]:
    t = trace(x, w, eps, threads)
    n = len(t.x)
    cell = 40 if n <= 5 else 36
    lane = 40 if t.threads <= 4 else 36  # one box per thread, eight inside the block's half
    out = []

    def step(title, caption, picture_title, serial=lambda c: None, block=lambda c: None):
        out.append(Frame(title, caption, *_pictures(t, picture_title, serial, block)))

    def serial_w(c):
        c.row(60, 96, t.w, "weight", cell=cell, name="w")
        c.text(190, 160, "thread 0 walks every column", size=12)

    def block_w(c):
        c.row(480, 96, t.w, "weight", cell=cell, name="w")
        c.text(620, 160, f"thread t takes columns t, t+{t.threads}, ...", size=12)

    step("two kernels, one row",
         f"x = {_vec(t.x)}, w = {_vec(t.w)}, eps = {t.eps:g}. Left: rmsnorm_serial, one "
         f"thread per row. Right: rmsnorm_block with {_threads(t.threads)} for this row "
         f"(the real kernel uses 256).", "the same row, two ways of working", serial_w, block_w)

    def chain(c):
        c.row(60, 110, t.serial_running, "active", cell=cell, name="sum")
        for i in range(1, n):
            c.arrow(60 + cell * i - 6, 125, 60 + cell * i + 2, 125)

    step("serial: a chain of additions",
         f"One thread adds the squares in order: running sum {_vec(t.serial_running)}. "
         + (f"{n} dependent additions: each waits for the one before." if n > 1 else
            "With one column the chain is a single addition."),
         "serial: the sum of squares is a chain", chain)

    def serial_write(c):
        c.row(60, 110, t.serial_running[-1:], "reduced", cell=60, name="sum")
        c.text(200, 170, f"r = rsqrt({fmt(t.total)}/{n} + eps) = {decimals(t.r)}", size=12)
        _y_row(c, 60, 200, t.y)

    step("serial: scale and write",
         f"r = 1/sqrt({fmt(t.total)}/{n} + {t.eps:g}) = {decimals(t.r)}; a second loop over the "
         f"row writes y = x*r*w = {_vec([round(v, 4) for v in t.y])}.",
         "serial: r, then a second pass over x", serial_write)

    def partials(c):
        c.row(480, 110, t.partials, "register", cell=lane, name="sum_sq",
              labels=[fmt(v) for v in t.partials])
        for k in range(t.threads):
            c.text(480 + lane * k + (lane - 4) / 2, 158, f"t{k}", size=11)

    idle = [k for k, cols in enumerate(t.columns_of) if not cols]
    step("block: partial sums in registers",
         f"Thread t adds the squares of columns t, t+{t.threads}, ...: partials "
         f"{_vec(t.partials)}."
         + (f" Threads {idle} have no column and keep 0: they still join the tree."
            if idle else " A thread with no column would keep 0 and still join the tree."),
         "block: each thread squares its own columns", block=partials)

    def shared(c):
        c.row(480, 110, t.levels[0], "active", cell=lane, name="shared")
        c.text(620, 175, "__syncthreads()  #1", size=12, weight="bold")

    step("shared memory and the first barrier",
         f"shared = {_vec(t.levels[0])}. The barrier makes every write visible before any "
         f"thread reads a neighbour's slot.", "block: partials to shared memory, then a barrier",
         block=shared)

    steps = list(zip(t.strides, t.levels[1:]))
    first_steps, last = steps[:-1], steps[-1] if steps else None
    sums = []
    for stride, level in first_steps:
        prev = t.levels[t.strides.index(stride)]
        sums.append(", ".join(f"{fmt(prev[i])}+{fmt(prev[i + stride])}={fmt(level[i])}"
                              for i in range(stride)))

    def tree(c):
        y0 = 110
        for stride, level in first_steps:
            c.row(480, y0, level, "active", cell=40, name=f"stride {stride}")
            y0 += 40
        c.text(620, min(y0 + 20, 236), "__syncthreads() after every step", size=11)

    step("tree steps",
         ("; ".join(f"stride {s}: {txt}" for (s, _), txt in zip(first_steps, sums))
          + ". Threads with tid >= stride add nothing this round but still reach the "
            "barrier." if sums else
          "With one thread there is nothing to pair up: its partial is the total."
          if last is None else
          "With two threads the tree is a single step, stride 1, shown next."),
         "block: tree steps, a barrier after each", block=tree)

    if last is not None:
        prev = t.levels[-2]
        detail = f"{fmt(prev[0])}+{fmt(prev[1])} = {fmt(t.total)}"
    else:
        detail = f"{fmt(t.total)}"

    def total(c):
        c.row(480, 110, [t.total], "reduced", cell=60, name="shared[0]")
        c.text(620, 180, f"mean = {fmt(t.total)} / cols = {fmt(t.total)}/{n} = {fmt(t.mean)}",
               size=12)

    step("total and mean",
         f"shared[0] = {detail}, the same {fmt(t.serial_running[-1])} as the serial chain. "
         f"Mean = {fmt(t.total)}/{n} = {fmt(t.mean)}: divided by cols ({n}), not by the "
         f"{_threads(t.threads)}.", "block: the last step, then divide by cols", block=total)

    def block_write(c):
        c.text(620, 110, f"r = rsqrt({fmt(t.mean)} + eps) = {decimals(t.r)}", size=12)
        _y_row(c, 480, 130, t.y)

    step("broadcast and write",
         f"Every thread reads shared[0] and computes r = {decimals(t.r)}; thread t writes columns "
         f"t, t+{t.threads}, ...: y = {_vec([round(v, 4) for v in t.y])}, the serial result. "
         f"No barrier after the last read of shared[0]: nothing writes shared memory again.",
         "block: r for everyone, each thread writes its columns",
         lambda c: _y_row(c, 60, 130, t.y), block_write)
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
