"""Inputs that tell the contracts apart, and on which every correct implementation of one contract
gives the same bits.

Two implementations of one contract may still differ in fp32's last bits: they add the squares in
another order, or take an approximate rsqrt (a GPU's is good to about 2^-23). Such a difference
flips a rounding to bf16 or fp16 only where the value being rounded lies that close to a boundary
between two neighbours. So every row is drawn at random and kept only if, in every contract, each
value rounded after the scale lies at least :data:`MARGIN_EXACT_SUM` (relative) from such a
boundary: the contracts are about where a value is rounded, not about fp32's last bit.

- Rows of ``rmsnorm`` hold multiples of 1/64 (or of a smaller power of two), so the fp32 sum of
  their squares is exact in any order. The weight holds a block of columns of +-0.75 and +-1.5,
  where ``llama``'s second rounding falls on exact ties half the time. The ``small`` rows have a
  mean square close to eps, where the value of eps shows.
- Rows of the fused add have sums ``x + r`` that the input dtype cannot hold: ``random`` ones,
  ``ties`` (every sum exactly halfway between two neighbours: round to nearest even decides) and
  ``scale`` rows, whose large sums all round away from zero while their small ones are exact, so
  rounding the sum moves the row's scale and with it the small outputs.
  Their sums of squares are not exact; the margin is :data:`MARGIN_INEXACT_SUM`.
- ``rmsnorm_fp8`` gets ``crafted`` rows whose mean square is exactly 1 (so r is 1 and y is x), with
  bf16 values where dividing by the scale and multiplying by a reciprocal give different codes,
  and an all-zero block; and ``random`` rows with a random weight.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from . import conventions as C
from . import fp8

FP32, F64 = torch.float32, torch.float64
MARGIN_EXACT_SUM = 2.0 ** -20  # noise: rsqrt 2^-22.9, two fp32 products
MARGIN_INEXACT_SUM = 2.0 ** -17  # noise: the sum of 32 squares in any order, 2^-19
RMS_COLS, FUSED_COLS, FP8_COLS = 64, 32, 256
TIE_COLUMNS = 16  # weight columns of +-0.75 or +-1.5
PRECISION = {torch.bfloat16: 8, torch.float16: 11}  # significand bits, the hidden one included
MIN_EXPONENT = {torch.bfloat16: -126, torch.float16: -14}  # smallest normal 2^e


@dataclass
class Cases:
    """One call's inputs (CPU tensors) and the names of its row families."""

    op: str
    dtype: torch.dtype
    eps: float
    x: torch.Tensor
    w: torch.Tensor
    residual: torch.Tensor | None = None
    families: tuple = ()  # (name, first row, stop row)

    def args(self, device) -> tuple:
        """Fresh copies on ``device``, in the op's order (a kernel may write into its inputs)."""
        tensors = (self.x,) if self.residual is None else (self.x, self.residual)
        return tuple(t.clone().to(device) for t in tensors) + (self.w.clone().to(device), self.eps)

    def where(self, row: int) -> tuple[str, int]:
        """(family, row within it) of a row."""
        for name, start, stop in self.families:
            if start <= row < stop:
                return name, row - start
        return "?", row


def distance_to_tie(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """How far each value (float64) lies from the nearest rounding boundary of ``dtype`` (the
    midpoint between two neighbours), relative to the value; infinite for 0."""
    a = v.to(F64).abs()
    _, e = torch.frexp(a)
    exponent = (e - 1).clamp(min=MIN_EXPONENT[dtype])
    spacing = torch.ldexp(torch.ones_like(a), exponent - (PRECISION[dtype] - 1))
    frac = a / spacing
    dist = (frac - frac.floor() - 0.5).abs() * spacing
    return torch.where(a > 0, dist / a.clamp_min(1e-300), torch.full_like(a, math.inf))


def safe_rows(values, dtype: torch.dtype, margin: float) -> torch.Tensor:
    """Rows (dim 0) in which every value of every tensor in ``values`` is ``margin`` from a tie."""
    ok = None
    for v in values:
        row_ok = (distance_to_tie(v, dtype) >= margin).reshape(v.shape[0], -1).all(dim=1)
        ok = row_ok if ok is None else ok & row_ok
    return ok


def _grid(shape, g, unit: float, spread: float = 64.0, top: int = 255) -> torch.Tensor:
    """Whole multiples of ``unit`` (a power of two), about ``spread`` units apart, at most ``top``
    units from 0: exact in bf16 and fp16."""
    m = (torch.randn(shape, generator=g, dtype=F64) * spread).round().clamp(-top, top)
    return m * unit


def _keep(make, count: int, keep_if, g, batch: int = 512) -> torch.Tensor:
    """``count`` rows of ``make(batch, g)`` that pass ``keep_if`` (rows of several tensors are
    stacked along dim 1 of the result: ``make`` returns a tuple)."""
    kept, have = [], 0
    for _ in range(200):
        cand = make(batch, g)
        ok = keep_if(*cand)
        kept.append(tuple(t[ok] for t in cand))
        have += int(ok.sum())
        if have >= count:
            break
    else:
        raise RuntimeError("could not draw inputs that keep their margin; report this")
    return tuple(torch.cat([k[i] for k in kept])[:count] for i in range(len(kept[0])))


def _spacing(a: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The distance from ``a`` (exact in ``dtype``) to its neighbour away from zero."""
    _, e = torch.frexp(a.abs())
    return torch.ldexp(torch.ones_like(a), (e - 1).clamp(min=MIN_EXPONENT[dtype])
                       - (PRECISION[dtype] - 1))


# ---------------------------------------------------------------- rmsnorm

def exact_scale(v: torch.Tensor, eps: float) -> torch.Tensor:
    """``1 / sqrt(mean(v^2) + eps)`` in float64: exact squares and sums for these inputs, a
    correctly rounded root, so every machine keeps the same rows (an fp32 rsqrt need not agree
    across CPUs in its last bit)."""
    v = v.to(F64)
    return 1.0 / torch.sqrt((v * v).mean(dim=-1, keepdim=True) + eps)


def _rms_weight(g) -> torch.Tensor:
    ties = (torch.tensor([0.75, 1.5], dtype=F64)[torch.randint(0, 2, (TIE_COLUMNS,), generator=g)]
            * (torch.randint(0, 2, (TIE_COLUMNS,), generator=g) * 2 - 1))
    rest = 1.0 + _grid((RMS_COLS - TIE_COLUMNS,), g, 1 / 64, spread=24, top=120)
    return torch.cat([ties, rest])


def _rms_safe(dtype, w, eps):
    wd = w.to(F64)

    def keep(x):
        xd = x.to(F64)
        r, r_default = exact_scale(xd, eps), exact_scale(xd, C.default_eps(dtype))
        events = (xd * r, xd * r * wd, xd * r * (1 + wd), xd * r_default * wd)
        return safe_rows(events, dtype, MARGIN_EXACT_SUM) & (x != 0).any(dim=1)
    return keep


def rmsnorm_cases(dtype: torch.dtype, eps: float) -> Cases:
    g = torch.Generator().manual_seed(27)
    w = _rms_weight(g)
    keep = _rms_safe(dtype, w, eps)
    # small rows: mean square near eps (or near F.rms_norm's default when eps is smaller)
    small_unit = 2.0 ** min(0, max(-24, round(math.log2(
        math.sqrt(max(eps, C.default_eps(dtype))) / 64))))
    random, = _keep(lambda n, g: (_grid((n, RMS_COLS), g, 1 / 64),), 12, keep, g)
    small, = _keep(lambda n, g: (_grid((n, RMS_COLS), g, small_unit),), 6, keep, g)
    x = torch.cat([random, small]).to(dtype)
    return Cases("rmsnorm", dtype, eps, x, w.to(dtype),
                 families=(("random", 0, 12), ("small", 12, 18)))


# ---------------------------------------------------------------- fused add

def _fused_safe(dtype, w, eps):
    wd = w.to(F64)

    def keep(x, residual):
        s_exact = x.to(F64) + residual.to(F64)  # the fp32 sum, exactly
        s = s_exact.to(dtype).to(F64)
        r_stored, r_exact = exact_scale(s, eps), exact_scale(s_exact, eps)
        events = (s * r_stored, s * r_stored * wd, s_exact * r_exact * wd)
        return safe_rows(events, dtype, MARGIN_INEXACT_SUM)
    return keep


def _on_top(a: torch.Tensor, dtype, part: float):
    """``(a, b)`` with ``b`` exact in dtype and ``a + b`` that far past ``a`` (``part`` of a's
    spacing, away from zero), in random order."""
    b = torch.sign(a) * part * _spacing(a, dtype)
    return a, b


def fused_cases(dtype: torch.dtype, eps: float) -> Cases:
    g = torch.Generator().manual_seed(7)
    w = 1.0 + _grid((FUSED_COLS,), g, 1 / 64, spread=24, top=120)
    keep = _fused_safe(dtype, w, eps)
    fine = 2.0 ** -(PRECISION[dtype] + 2)

    def random(n, g):
        return _grid((n, FUSED_COLS), g, 1 / 64, top=127), _grid((n, FUSED_COLS), g, fine)

    def big(n, g):  # |a| in [1, 4): a multiple of 1/64
        a = _grid((n, FUSED_COLS), g, 1 / 64, top=255)
        sign = torch.where(a < 0, -1.0, 1.0)
        return torch.where(a.abs() >= 1, a, sign * (1 + a.abs()))

    def shuffled(pair, n, g):
        a, b = pair
        swap = torch.rand(a.shape, generator=g) < 0.5
        return torch.where(swap, b, a), torch.where(swap, a, b)

    def scale(n, g):  # half the columns large and rounding away from 0, half exact and small
        x, residual = shuffled(_on_top(2 * big(n, g), dtype, 0.75), n, g)
        half = FUSED_COLS // 2
        x[:, half:] = _grid((n, half), g, 1 / 64, spread=12, top=31)
        residual[:, half:] = _grid((n, half), g, 1 / 64, spread=12, top=31)
        return x, residual

    rows = [_keep(random, 8, keep, g),
            _keep(lambda n, g: shuffled(_on_top(big(n, g), dtype, 0.5), n, g), 6, keep, g),
            _keep(scale, 6, keep, g)]
    x = torch.cat([r[0] for r in rows]).to(dtype)
    residual = torch.cat([r[1] for r in rows]).to(dtype)
    return Cases("add_rmsnorm_residual", dtype, eps, x, w.to(dtype), residual,
                 families=(("random", 0, 8), ("ties", 8, 14), ("scale", 14, 20)))


# ---------------------------------------------------------------- rmsnorm_fp8

@functools.lru_cache(maxsize=1)
def separating_blocks() -> dict:
    """For bf16 absmax values A in [1, 2): the bf16 values y <= A (multiples of 2^-8) whose e4m3
    code under one quantizer differs from that under another (:func:`fp8.quantize`), for the A
    with the most of them: ``{"reciprocal": (A, ys), "transformer_engine": (A, ys),
    "multiply": (A, ys)}``, the first two against ``divide``, the last against ``reciprocal``.
    TransformerEngine's A is chosen among those whose stored scale differs too."""
    a = (1 + torch.arange(128, dtype=FP32) / 128)[:, None]
    y = torch.arange(1, 512, dtype=FP32) / 256
    y = y[y.to(torch.bfloat16).to(FP32) == y][None, :]
    top = torch.tensor(448.0)
    scale = a / top
    multiplier = top / a
    quotients = {"divide": y / scale, "reciprocal": y * torch.reciprocal(scale),
                 "multiply": y * multiplier}
    codes = {q: v.to(fp8.E4M3FN).view(torch.uint8) for q, v in quotients.items()}
    # TransformerEngine multiplies by the 448 / absmax it stores: the same codes as "multiply";
    # what sets it apart is its stored scale, 1 / multiplier (scale_differs below)
    codes["transformer_engine"] = codes["multiply"]
    inside = y <= a
    scale_differs = (torch.reciprocal(multiplier) != scale)[:, 0]
    out = {}
    for base, other, allowed in (("divide", "reciprocal", torch.ones_like(scale_differs)),
                                 ("divide", "transformer_engine", scale_differs),
                                 ("reciprocal", "multiply", torch.ones_like(scale_differs))):
        count = ((codes[base] != codes[other]) & inside).sum(dim=1)
        best = int(torch.where(allowed, count, -1).argmax())
        differs = (codes[base][best] != codes[other][best]) & inside[best]
        out[other] = (float(a[best, 0]), y[0][differs].tolist())
    return out


@functools.lru_cache(maxsize=1)
def _two_squares() -> dict:
    """Sums of two squares of whole numbers <= 255, each with one way to write it."""
    pairs = {}
    for c in range(256):
        for d in range(c + 1):
            pairs.setdefault(c * c + d * d, (c, d))
    return pairs


def _four_squares(total: int) -> list[int]:
    """Four whole numbers <= 255 whose squares sum to ``total`` (0 <= total <= 4 * 255^2)."""
    pairs = _two_squares()
    for a in range(255, -1, -1):
        for b in range(a, -1, -1):
            rest = total - a * a - b * b
            if rest < 0:
                continue
            if rest in pairs:
                return [a, b, *pairs[rest]]
            if rest > 2 * 255 ** 2:
                break
    raise ValueError(f"{total} is no sum of four squares <= 255^2")


def _unit_mean_square_row(specials: list[float], g) -> torch.Tensor:
    """A 256-column row: ``specials`` first, then block 0 filled with +-1 (never above the first
    special, the block's absmax), block 1 with +-2, +-1 and four smaller values, so that the sum of
    squares is exactly 256 (mean square 1) and exact in fp32 in any order (multiples of 2^-16)."""
    units = 1 << 16  # squares counted in 2^-16: value v is m = v * 256, square m^2 units
    m = [round(v * 256) for v in specials]
    block0 = m + [256] * (128 - len(m))
    rest = (1 << 24) - sum(v * v for v in block0)
    for whole in (rest // units - k for k in (2, 1, 3)):  # some totals are no such sum (2^17)
        try:
            fix = _four_squares(rest - whole * units)
            break
        except ValueError:
            continue
    fours, ones = divmod(whole, 4)
    block1 = [512] * fours + [256] * ones + fix
    block1 += [0] * (128 - len(block1))
    values = torch.tensor(block0 + block1, dtype=F64) / 256
    signs = torch.randint(0, 2, values.shape, generator=g) * 2 - 1
    signs[0] = 1
    return values * signs


def fp8_cases(eps: float) -> list[Cases]:
    g = torch.Generator().manual_seed(8)
    bf16 = torch.bfloat16
    blocks = separating_blocks()
    crafted = [_unit_mean_square_row([a, *ys], g) for a, ys in blocks.values()]
    zero = torch.zeros(FP8_COLS, dtype=F64)
    zero[128:192] = 2.0 * (torch.randint(0, 2, (64,), generator=g) * 2 - 1)
    crafted = torch.stack(crafted + [zero])
    first = Cases("rmsnorm_fp8", bf16, 0.0, crafted.to(bf16), torch.ones(FP8_COLS, dtype=bf16),
                  families=(("crafted", 0, len(crafted)),))
    w = 1.0 + _grid((FP8_COLS,), g, 1 / 64, spread=24, top=120)

    def keep(x):
        return safe_rows((x.to(F64) * exact_scale(x, eps),), bf16, MARGIN_EXACT_SUM)

    random, = _keep(lambda n, g: (_grid((n, FP8_COLS), g, 1 / 64, top=127),), 4, keep, g)
    second = Cases("rmsnorm_fp8", bf16, eps, random.to(bf16), w.to(bf16),
                   families=(("random", 0, 4),))
    return [first, second]


def cases(op: str, dtype: torch.dtype, eps: float) -> list[Cases]:
    """The calls ``identify`` makes for one op and dtype."""
    if op == "rmsnorm":
        return [rmsnorm_cases(dtype, eps)]
    if op in ("add_rmsnorm", "add_rmsnorm_residual"):
        return [fused_cases(dtype, eps)]
    if op == "rmsnorm_fp8":
        return fp8_cases(eps)
    raise ValueError(f"no inputs for op {op!r}")
