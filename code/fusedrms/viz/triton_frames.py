"""Chapter 4's animation: one 13-column row in a 16-lane block, line by line of the row kernel.

:func:`trace` replays :func:`fusedrms.kernels.rmsnorm.rmsnorm_row_kernel` on one row, one line at a
time, in the kernel's own arithmetic (fp32, masked lanes loaded as 0, the mean divided by ``cols``),
and also launches the real kernel on the same row (GPU, or the interpreter) so the last frame shows
the kernel's own output next to the replay. Nothing drawn is typed by hand.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .stepper import Frame
from .svg import Canvas, fmt

DEFAULT_X = [3.0, 4.0, -3.0, -4.0, 1.0, 2.0, -1.0, -2.0, 0.5, 1.5, -0.5, 2.5, -1.5]
DEFAULT_W = [1.0, 0.5, 2.0, 1.0, 1.0, 1.0, 0.5, 2.0, 1.0, 1.0, 2.0, 0.5, 1.0]
MAX_BLOCK = 32  # the picture stays readable up to 32 lanes


@dataclass(frozen=True)
class RowTrace:
    cols: int
    block: int
    eps: float
    offsets: list[int]
    mask: list[bool]
    x: list[float]  # as loaded: 0 in masked lanes
    squares: list[float]
    total: float
    mean: float
    mean_if_block: float  # the bug: dividing by BLOCK_SIZE
    r: float
    r_if_block: float
    w: list[float]  # as loaded
    y: list[float]  # replay, masked lanes 0 (never stored)
    kernel_y: list[float] | None  # what the real kernel stored in the real columns
    kernel_mode: str


def trace(x=None, w=None, eps: float = 1e-5, run_kernel: bool = True) -> RowTrace:
    """Replay the row kernel on one row (fp32); with ``run_kernel`` also launch the real kernel."""
    from .. import env
    from ..kernels.rmsnorm import rmsnorm_row

    x = list(DEFAULT_X if x is None else x)
    w = list(DEFAULT_W if w is None else w)
    cols = len(x)
    if not 1 <= cols <= MAX_BLOCK:
        raise ValueError(f"the animation draws 1 to {MAX_BLOCK} columns; got {cols}")
    if len(w) != cols:
        raise ValueError(f"w needs one weight per column: {cols} values, got {len(w)}")
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    block = 1 << (cols - 1).bit_length()  # triton.next_power_of_2
    f32 = torch.float32
    xr, wr = torch.tensor(x, dtype=f32), torch.tensor(w, dtype=f32)
    if not (torch.isfinite(xr).all() and torch.isfinite(wr).all()):
        raise ValueError("x and w must be finite numbers for the animation")
    offsets = torch.arange(block)                                       # tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols                                               # offsets < cols
    xl = torch.zeros(block, dtype=f32)
    xl[mask] = xr                                                       # tl.load(..., other=0.0)
    squares = xl * xl
    total = squares.sum()                                               # tl.sum(x * x, axis=0)
    mean = total / cols                                                 # / cols
    mean_block = total / block
    r = torch.rsqrt(mean + eps)
    r_block = torch.rsqrt(mean_block + eps)
    wl = torch.zeros(block, dtype=f32)
    wl[mask] = wr                                                       # tl.load(w_ptr + offsets)
    y = xl * r * wl
    kernel_y, mode = None, "not run"
    if run_kernel:
        e = env.current()
        out = rmsnorm_row(xr.to(e.device).unsqueeze(0), wr.to(e.device), eps)
        kernel_y, mode = out.squeeze(0).cpu().tolist(), e.triton_mode
    return RowTrace(cols, block, eps, offsets.tolist(), mask.tolist(), xl.tolist(),
                    squares.tolist(), total.item(), mean.item(), mean_block.item(), r.item(),
                    r_block.item(), wl.tolist(), y.tolist(), kernel_y, mode)


CELL, LEFT, TOP, ROW_H = 44, 96, 34, 40


def _canvas(t: RowTrace, title: str) -> Canvas:
    return Canvas(LEFT + t.block * CELL + 16, TOP + 8 * ROW_H + 10, title)


def _lane_fills(t: RowTrace, live: str) -> list[str]:
    return [live if m else "masked" for m in t.mask]


def _rows(t: RowTrace, upto: int, active: int) -> list[tuple[str, list[float], list, list]]:
    """Rows 0..upto of the picture (name, values, labels, fills), row ``active`` highlighted."""
    rows = [
        ("offsets", [float(o) for o in t.offsets], None, ["idle"] * t.block),
        ("mask", None, ["T" if m else "F" for m in t.mask], _lane_fills(t, "idle")),
        ("x", t.x, [fmt(v, 3) if m else "0" for v, m in zip(t.x, t.mask)], _lane_fills(t, "input")),
        ("x*x", t.squares, [fmt(v, 3) if m else "0" for v, m in zip(t.squares, t.mask)],
         _lane_fills(t, "register")),
        ("w", t.w, [fmt(v, 3) if m else "-" for v, m in zip(t.w, t.mask)], _lane_fills(t, "weight")),
        ("y", t.y, [fmt(v, 3) if m else "-" for v, m in zip(t.y, t.mask)], _lane_fills(t, "output")),
    ]
    out = []
    for i, (name, values, labels, fills) in enumerate(rows[: upto + 1]):
        if i == active:
            fills = ["active" if f != "masked" else "masked" for f in fills]
        out.append((name, values if values is not None else [0.0] * t.block, labels, fills))
    return out


def _scalars(t: RowTrace, scalars: int) -> list[tuple[str, str]]:
    """The first ``scalars`` of (sum, mean, r) as box labels with their fill, the last active."""
    shown = [("sum", t.total), (f"sum / {t.cols}", t.mean), ("r", t.r)][:scalars]
    return [(f"{name} = {fmt(value, 5)}", "active" if i == len(shown) - 1 else "reduced")
            for i, (name, value) in enumerate(shown)]


def _draw(t: RowTrace, upto: int, active: int, title: str, scalars: int = 0) -> tuple[str, str]:
    """The desktop and phone pictures of rows 0..upto (row ``active`` highlighted) and the first
    ``scalars`` of (sum, mean, r) below."""
    return (_draw_desktop(t, upto, active, title, scalars),
            _draw_phone(t, upto, active, title, scalars))


def _draw_desktop(t: RowTrace, upto: int, active: int, title: str, scalars: int) -> str:
    c = _canvas(t, title)
    sy = TOP + 6 * ROW_H + 26
    for i, (label, fill) in enumerate(_scalars(t, scalars)):
        c.box(LEFT + i * 4 * CELL, sy, 4 * CELL - 8, ROW_H - 10, label, fill=fill, size=12)
    for i, (name, values, labels, fills) in enumerate(_rows(t, upto, active)):
        c.row(LEFT, TOP + i * ROW_H, values, cell=CELL, name=name, fills=fills, labels=labels)
    # the block boundary and the row's real end
    end_x = LEFT + t.cols * CELL - 2
    c.parts.append(f'<line x1="{end_x}" y1="{TOP - 6}" x2="{end_x}" y2="{TOP + 6 * ROW_H}" '
                   f'stroke="#b91c1c" stroke-width="2" stroke-dasharray="5 3"/>')
    c.text(end_x + 4, TOP + 6 * ROW_H + 14, f"cols = {t.cols}", size=12, anchor="start",
           color="#b91c1c")
    c.text(LEFT, TOP + 6 * ROW_H + 14, f"BLOCK_SIZE = {t.block}", size=12, anchor="start")
    return c.render()


# A phone shows the block as bands of 8 lanes, one under the other, each with all six rows.
BAND, PHONE_CELL, PHONE_LEFT, PHONE_ROW_H = 8, 36, 64, 28
PHONE_BAND_H = 6 * PHONE_ROW_H + 18  # the rows and the band's "lanes a-b" line


def _draw_phone(t: RowTrace, upto: int, active: int, title: str, scalars: int) -> str:
    band = min(BAND, t.block)
    bands = t.block // band
    width = PHONE_LEFT + band * PHONE_CELL + 8
    bottom = TOP + bands * PHONE_BAND_H
    c = Canvas(width, bottom + 60, title, phone=True)
    rows = _rows(t, upto, active)
    end_band, end_lane = divmod(t.cols - 1, band)
    for b in range(bands):
        top = TOP + b * PHONE_BAND_H
        lanes = slice(b * band, (b + 1) * band)
        c.text(8, top + 11, f"lanes {b * band}-{(b + 1) * band - 1}", size=10, anchor="start")
        for i, (name, values, labels, fills) in enumerate(rows):
            c.row(PHONE_LEFT, top + 16 + i * PHONE_ROW_H, values[lanes], cell=PHONE_CELL,
                  h=PHONE_ROW_H - 4, name=name, fills=fills[lanes],
                  labels=labels[lanes] if labels is not None else None)
        if b == end_band:  # the row's real end, in the band where it falls
            end_x = PHONE_LEFT + (end_lane + 1) * PHONE_CELL - 2
            c.parts.append(f'<line x1="{end_x}" y1="{top + 12}" x2="{end_x}" '
                           f'y2="{top + 16 + 6 * PHONE_ROW_H}" stroke="#b91c1c" stroke-width="2" '
                           f'stroke-dasharray="5 3"/>')
            room = end_x + 64 < width
            c.text(end_x + 4 if room else end_x - 4, top + 11, f"cols = {t.cols}", size=10,
                   anchor="start" if room else "end", color="#b91c1c")
    c.text(8, bottom + 12, f"BLOCK_SIZE = {t.block}", size=10, anchor="start")
    box = (width - 16) / 3
    for i, (label, fill) in enumerate(_scalars(t, scalars)):
        c.box(8 + i * box, bottom + 22, box - 6, 26, label, fill=fill, size=11)
    return c.render()


def frames(x=None, w=None, eps: float = 1e-5, run_kernel: bool = True) -> list[Frame]:
    """The step-through frames for one row (13 columns in a 16-lane block by default)."""
    t = trace(x, w, eps, run_kernel)
    masked = t.block - t.cols
    out = [
        Frame("offsets = tl.arange(0, BLOCK_SIZE)",
              f"The program holds one row as {t.block} lanes: next_power_of_2({t.cols}) = {t.block}"
              f". Lane i stands for column i.", *_draw(t, 0, 0, "one program, one row")),
        Frame("mask = offsets < cols",
              f"{t.cols} lanes are real columns; the last {masked} lane(s) lie past the row's end "
              f"and are masked off (grey).", *_draw(t, 1, 1, "which lanes are real")),
        Frame("x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0)",
              f"Real lanes read x from memory; the {masked} masked lane(s) read nothing and hold "
              f"other=0.0.", *_draw(t, 2, 2, "masked load")),
        Frame("tl.sum(x * x, axis=0)",
              f"Squares, then one sum across the block: {fmt(t.total, 6)}. The masked lanes "
              f"added 0, so the sum is the sum over the {t.cols} real columns.",
              *_draw(t, 3, 3, "sum of squares", 1)),
        Frame("mean_square = sum / cols",
              f"Divide by the real width: {fmt(t.total, 6)} / {t.cols} = {fmt(t.mean, 6)}. "
              f"Dividing by BLOCK_SIZE would give {fmt(t.total, 6)} / {t.block} = "
              f"{fmt(t.mean_if_block, 6)} and scale every output by "
              f"{fmt(t.r_if_block / t.r, 5)}.", *_draw(t, 3, -1, "the mean divides by cols", 2)),
        Frame("r = tl.rsqrt(mean_square + eps)",
              f"One scale for the whole row: r = 1/sqrt({fmt(t.mean, 6)} + {t.eps:g}) = "
              f"{fmt(t.r, 6)}.", *_draw(t, 3, -1, "one scale per row", 3)),
        Frame("w = tl.load(w_ptr + offsets, mask=mask, other=0.0)",
              "The weight uses the same offsets and no row term: every row shares w[0..cols-1].",
              *_draw(t, 4, 4, "weight load", 3)),
    ]
    if t.kernel_y is not None:
        diff = max(abs(a - b) for a, b in zip(t.kernel_y, t.y[: t.cols]))
        check = (f"The real kernel ({t.kernel_mode}) stored the same {t.cols} values "
                 f"(largest difference from this replay: {diff:.1e}).")
    else:
        check = "The real kernel was not run for this picture."
    out.append(Frame("tl.store(y_ptr + row * y_row_stride + offsets, x * r * w, mask=mask)",
                     f"y = x·r·w lane by lane in fp32, cast once at the store; the {masked} masked "
                     f"lane(s) store nothing. {check}", *_draw(t, 5, 5, "masked store", 3)))
    return out
