"""A static traffic model: what a design costs in global-memory bytes before any kernel exists.

A *step* is a sequence of kernels. Each kernel reads and writes named tensors whose shapes are
written with symbols (``rows``, ``cols``, ``blocks``, ``chunks``, ``programs``) and whose dtype is either fixed
(``fp32`` statistics, ``fp8`` codes) or ``act``, the dtype of the step's activations. Pricing a
step at a shape resolves the symbols and adds up bytes. Four conventions, and nothing else:

1. A tensor access moves ``prod(shape) * itemsize`` bytes of global memory. Values a kernel keeps
   in registers (or shared memory) between two of its own statements cost nothing.
2. A tensor with no ``rows`` dimension (the weight) is therefore read once *per kernel that reads
   it*, not once per row: every row's program reads the same bytes, and the model assumes the
   cache serves the repeats. A kernel that names a tensor twice in ``reads`` reads it twice (the
   two-pass designs): the model prices the instructions a kernel issues, not what a cache may save.
3. Kernels run one after another: the step's ideal time is the sum of its kernels' times, each the
   larger of bytes/bandwidth and FLOPs/peak, rounded *once*, up to a whole nanosecond.
4. FLOPs count every fp32 add, multiply, divide, comparison and square root as one; loads, stores
   and casts are free.

``row_trips`` counts the traffic of tensors that have a ``rows`` dimension in units of one
activation matrix (``rows x cols`` in the activation dtype): the eager add -> RMSNorm -> scale chain
moves 7, the fused kernel 3. The weight is left out of it because its share vanishes as rows grow.

Command line::

    python -m fusedrms.traffic --list
    python -m fusedrms.traffic fused_add_rmsnorm --rows 4096 --cols 4096 --dtype bf16
    python -m fusedrms.traffic rmsnorm_fp8_naive rmsnorm_fp8_fused --bandwidth 4800
"""
from __future__ import annotations

import argparse
import math
import numbers
import sys
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Iterable

from . import cli, dtypes

# ---------------------------------------------------------------- dtypes

DTYPE_BYTES = dtypes.BYTES
ACTIVATION_DTYPES = dtypes.ACTIVATIONS  # fp8 is an output format here, never an input


class TrafficError(ValueError):
    """A caller-side mistake (unknown step or dtype, impossible shape), explained."""


def dtype_name(dtype: Any) -> str:
    """Canonical short name (``"bf16"``...) of a string or a ``torch.dtype``."""
    try:
        return dtypes.short(dtype)
    except dtypes.DtypeError as e:
        raise TrafficError(str(e)) from None


def _activation_dtype(dtype: Any) -> str:
    name = dtype_name(dtype)
    if name not in ACTIVATION_DTYPES:
        raise TrafficError(f"{name} is not an activation dtype in this model (it is what the FP8 "
                           f"steps write); price the step with dtype one of "
                           f"{', '.join(ACTIVATION_DTYPES)}")
    return name


# ---------------------------------------------------------------- describing a step

@dataclass(frozen=True)
class Tensor:
    """A named tensor: ``shape`` uses ints or the symbols rows, cols, blocks, chunks."""

    shape: tuple
    dtype: str = "act"  # "act" = the step's activation dtype
    role: str = "activation"  # activation | weight | intermediate | output | statistic


@dataclass(frozen=True)
class Kernel:
    """One launch: which tensors it reads and writes in global memory, and its arithmetic."""

    name: str
    reads: tuple
    writes: tuple
    flops_per_element: int = 0  # per element of the rows x cols activation
    flops_per_row: int = 0
    flops_per_block: int = 0  # per (row, quantization block)
    note: str = ""


@dataclass(frozen=True)
class Step:
    """A design: tensors and the kernels that move them. ``str(step)`` is its description."""

    name: str
    description: str
    tensors: dict
    kernels: tuple
    label: str = ""  # short name for plots

    def __str__(self) -> str:
        return self.description

    def __post_init__(self):
        for k in self.kernels:
            for t in (*k.reads, *k.writes):
                if t not in self.tensors:
                    raise TrafficError(f"step {self.name}: kernel {k.name} uses tensor {t!r} "
                                       f"that the step does not declare")


ROW = ("rows", "cols")
_X = Tensor(ROW)
_W = Tensor(("cols",), role="weight")
_RES = Tensor(ROW)
_Y = Tensor(ROW, role="output")
_Q = Tensor(ROW, "fp8", "output")
_S = Tensor(("rows", "blocks"), "fp32", "output")
_ROW_SUMS = Tensor(("rows",), "fp32", "intermediate")

# FLOP counts per element, shared by the steps so that fusion never changes the arithmetic:
ADD = 1  # t = x + r
SUMSQ = 2  # square, accumulate
NORMALIZE = 1  # * rstd
SCALE = 1  # * w
ROW_STAT = 3  # / cols, + eps, rsqrt (per row)
QUANT = 5  # |v|, running max, v / scale, clamp low, clamp high
QUANT_BLOCK = 1  # scale = absmax / 448 (per block)
RMSNORM = SUMSQ + NORMALIZE + SCALE


def _step(name, description, tensors, kernels, label=""):
    return Step(name, description, tensors, tuple(kernels), label or name)


STEPS: dict[str, Step] = {s.name: s for s in [
    _step("rmsnorm", "RMSNorm, one kernel: read x and w, keep the row on chip, write y",
          {"x": _X, "w": _W, "y": _Y},
          [Kernel("rmsnorm", ("x", "w"), ("y",), RMSNORM, ROW_STAT)], "RMSNorm fused"),
    _step("rmsnorm_unfused", "RMSNorm as three kernels: square -> reduce -> scale, with the "
          "squares (fp32) and the per-row sums (fp32) materialized in global memory",
          {"x": _X, "w": _W, "y": _Y, "squares": Tensor(ROW, "fp32", "intermediate"),
           "row_sums": _ROW_SUMS},
          [Kernel("square", ("x",), ("squares",), 1),
           Kernel("row_sum", ("squares",), ("row_sums",), 1),
           Kernel("scale", ("x", "row_sums", "w"), ("y",), NORMALIZE + SCALE, ROW_STAT)],
          "RMSNorm unfused"),
    _step("rmsnorm_two_pass", "RMSNorm in one kernel that reads x twice: once for the sum of "
          "squares, once to write y (the HIP block kernel; a looped kernel for rows too wide to "
          "keep on chip). Priced as if the second read missed the cache",
          {"x": _X, "w": _W, "y": _Y},
          [Kernel("rmsnorm_two_pass", ("x", "x", "w"), ("y",), RMSNORM, ROW_STAT)],
          "RMSNorm two-pass"),
    _step("rmsnorm_split_row", "RMSNorm for very wide rows split across programs: kernel 1 writes "
          "fp32 partial sums per chunk of columns, kernel 2 reads them with x and w and writes y",
          {"x": _X, "w": _W, "y": _Y, "partials": Tensor(("rows", "chunks"), "fp32", "statistic")},
          [Kernel("partial_sums", ("x",), ("partials",), SUMSQ),
           Kernel("normalize", ("partials", "x", "w"), ("y",), NORMALIZE + SCALE, ROW_STAT)],
          "RMSNorm split-row"),
    # [book:eager-and-fused]
    _step("torch_add_rmsnorm", "PyTorch as a reader writes it: t = x + r; "
          "y = F.rms_norm(t, (cols,), w) -- two kernels, t materialized",
          {"x": _X, "residual": _RES, "w": _W, "y": _Y, "t": Tensor(ROW, role="intermediate")},
          [Kernel("add", ("x", "residual"), ("t",), ADD),
           Kernel("rmsnorm", ("t", "w"), ("y",), RMSNORM, ROW_STAT)], "PyTorch add, rms_norm"),
    _step("fused_add_rmsnorm", "fused add + RMSNorm: read x and r, t = x + r stays in registers, "
          "write y",
          {"x": _X, "residual": _RES, "w": _W, "y": _Y},
          [Kernel("fused_add_rmsnorm", ("x", "residual", "w"), ("y",), ADD + RMSNORM, ROW_STAT)],
          "fused add+RMSNorm"),
    _step("fused_add_rmsnorm_residual", "fused add + RMSNorm that also writes t = x + r for the "
          "next layer's residual (the vLLM / FlashInfer layout)",
          {"x": _X, "residual": _RES, "w": _W, "y": _Y, "t": Tensor(ROW, role="output")},
          [Kernel("fused_add_rmsnorm_residual", ("x", "residual", "w"), ("t", "y"),
                  ADD + RMSNORM, ROW_STAT)], "fused add+RMSNorm, writes residual"),
    # [/book:eager-and-fused]
    # the three-kernel chain, an illustration (its multiply runs a slow broadcast kernel)
    _step("eager_add_rmsnorm", "eager PyTorch: t = x + r; n = rmsnorm(t); y = n * w -- three "
          "kernels, t and n materialized",
          {"x": _X, "residual": _RES, "w": _W, "y": _Y, "t": Tensor(ROW, role="intermediate"),
           "n": Tensor(ROW, role="intermediate")},
          [Kernel("add", ("x", "residual"), ("t",), ADD),
           Kernel("rmsnorm", ("t",), ("n",), SUMSQ + NORMALIZE, ROW_STAT),
           Kernel("scale", ("n", "w"), ("y",), SCALE)], "eager add->norm->scale"),
    _step("add_rmsnorm_two_pass", "fused add + RMSNorm for rows too wide to keep on chip: pass 1 "
          "reads x and r for the sum of squares, pass 2 reads both again to write y",
          {"x": _X, "residual": _RES, "w": _W, "y": _Y},
          [Kernel("add_rmsnorm_two_pass", ("x", "residual", "x", "residual", "w"), ("y",),
                  2 * ADD + RMSNORM, ROW_STAT)], "add+RMSNorm two-pass"),
    _step("add_rmsnorm_residual_two_pass", "the residual-writing layout, looped: pass 1 reads x "
          "and r and writes t (needed anyway), pass 2 reads t back to write y",
          {"x": _X, "residual": _RES, "w": _W, "y": _Y, "t": Tensor(ROW, role="output")},
          [Kernel("add_rmsnorm_residual_two_pass", ("x", "residual", "t", "w"), ("t", "y"),
                  ADD + RMSNORM, ROW_STAT)], "add+RMSNorm residual two-pass"),
    # [book:fp8]
    _step("rmsnorm_fp8_naive", "RMSNorm then FP8 block quantization as two kernels: the "
          "normalized rows are written in the activation dtype and read back",
          {"x": _X, "w": _W, "normed": Tensor(ROW, role="intermediate"), "codes": _Q,
           "scales": _S},
          [Kernel("rmsnorm", ("x", "w"), ("normed",), RMSNORM, ROW_STAT),
           Kernel("quantize", ("normed",), ("codes", "scales"), QUANT, 0, QUANT_BLOCK)],
          "RMSNorm+FP8 naive"),
    _step("rmsnorm_fp8_fused", "RMSNorm and FP8 block quantization in one kernel: the normalized "
          "rows never leave registers; writes 1-byte codes and one fp32 scale per block",
          {"x": _X, "w": _W, "codes": _Q, "scales": _S},
          [Kernel("rmsnorm_fp8", ("x", "w"), ("codes", "scales"), RMSNORM + QUANT, ROW_STAT,
                  QUANT_BLOCK)], "RMSNorm+FP8 fused"),
    # [/book:fp8]
]}

# ---------------------------------------------------------------- the backward (chapter 9)

# An example backward grid: 2 programs on each of the H200's 132 SMs (the kernels choose theirs by
# width and rows, kernels/rmsnorm_backward.programs_for). Each program writes one fp32 row of dw
# partials, so the partials cost programs x cols x 4 bytes, written once and read once, whatever
# the number of rows.
BACKWARD_PROGRAMS = 264
_DY = Tensor(ROW)
_DX = Tensor(ROW, role="output")
_RSTD = Tensor(("rows",), "fp32", "statistic")
_DW = Tensor(("cols",), role="output")
_PARTIALS = Tensor(("programs", "cols"), "fp32", "intermediate")
# FLOPs per element of the fused backward: xhat = x r, g = dy w, the dot product g xhat (2),
# dx = r (g - xhat dot) (3), dw += dy xhat (2). Per row: dot / cols.
BACKWARD = 9
BACKWARD_ROW = 1
_REDUCE = Kernel("dw_reduce", ("partials",), ("dw",), 0, 0, 0,
                 "stage 2: sums the partials column by column (programs x cols adds, not counted)")


def _unfused_backward_kernels(x: str = "x"):
    """Eager autograd's backward, one elementwise or reduction kernel per formula step."""
    return [Kernel("xhat", (x, "rstd"), ("xhat",), 1),
            Kernel("g", ("dy", "w"), ("g",), 1),
            Kernel("row_dot", ("g", "xhat"), ("dot",), 2),
            Kernel("dx", ("g", "xhat", "rstd", "dot"), ("dx",), 3, BACKWARD_ROW),
            Kernel("dy_xhat", ("dy", "xhat"), ("dy_xhat",), 1),
            Kernel("dw_colsum", ("dy_xhat",), ("dw",), 1)]


_UNFUSED_TENSORS = {"dy": _DY, "w": _W, "rstd": _RSTD, "dx": _DX, "dw": _DW,
                    "xhat": Tensor(ROW, role="intermediate"), "g": Tensor(ROW, role="intermediate"),
                    "dot": _ROW_SUMS, "dy_xhat": Tensor(ROW, role="intermediate")}

# [book:backward]
BACKWARD_STEPS = [
    _step("rmsnorm_train_forward", "RMSNorm forward for training: as the fused kernel, and it also "
          "writes the row scale r (fp32, one per row) for the backward",
          {"x": _X, "w": _W, "y": _Y, "rstd": _RSTD},
          [Kernel("rmsnorm_forward", ("x", "w"), ("y", "rstd"), RMSNORM, ROW_STAT)],
          "forward, saves r"),
    _step("rmsnorm_backward", "fused backward: read x, dy, w and the saved r; write dx and one fp32 "
          "row of dw partials per program; a second kernel sums the partials into dw",
          {"x": _X, "dy": _DY, "w": _W, "rstd": _RSTD, "dx": _DX, "partials": _PARTIALS, "dw": _DW},
          [Kernel("backward", ("x", "dy", "w", "rstd"), ("dx", "partials"), BACKWARD, BACKWARD_ROW),
           _REDUCE], "backward, two-stage dw"),
    _step("rmsnorm_backward_recompute", "fused backward that recomputes r from x (x is read anyway): "
          "4 bytes per row fewer, a sum of squares more",
          {"x": _X, "dy": _DY, "w": _W, "dx": _DX, "partials": _PARTIALS, "dw": _DW},
          [Kernel("backward", ("x", "dy", "w"), ("dx", "partials"), BACKWARD + SUMSQ,
                  BACKWARD_ROW + ROW_STAT), _REDUCE], "backward, recomputes r"),
    _step("rmsnorm_backward_atomic", "fused backward whose programs add their dw share into one fp32 "
          "vector with atomics (priced as writes: the adds resolve in L2), then a cast to dw",
          {"x": _X, "dy": _DY, "w": _W, "rstd": _RSTD, "dx": _DX, "partials": _PARTIALS, "dw": _DW,
           "dw_fp32": Tensor(("cols",), "fp32", "intermediate")},
          [Kernel("zero", (), ("dw_fp32",)),
           Kernel("backward", ("x", "dy", "w", "rstd"), ("dx", "partials"), BACKWARD, BACKWARD_ROW,
                  note="'partials' here are the atomic adds into dw_fp32"),
           Kernel("cast", ("dw_fp32",), ("dw",))], "backward, atomic dw"),
    _step("rmsnorm_backward_unfused", "the backward as eager autograd runs the formula: xhat, g, the "
          "row dot product, dx, dy*xhat and its column sum, each a kernel with its result in memory",
          {"x": _X, **_UNFUSED_TENSORS}, _unfused_backward_kernels(), "backward, unfused"),
    _step("add_rmsnorm_train_forward", "fused add + RMSNorm forward for training: read x and the "
          "residual, write y, s = x + residual (the next layer's residual, saved) and r",
          {"x": _X, "residual": _RES, "w": _W, "y": _Y, "s": Tensor(ROW, role="output"),
           "rstd": _RSTD},
          [Kernel("add_rmsnorm_forward", ("x", "residual", "w"), ("s", "y", "rstd"),
                  ADD + RMSNORM, ROW_STAT)], "add forward, saves s and r"),
    _step("add_rmsnorm_backward", "fused add + RMSNorm backward: read the saved s, dy, the gradient "
          "ds_out arriving at s from the next layer, w and r; write one ds (the gradient of x and of "
          "the residual) and the dw partials",
          {"s": Tensor(ROW, role="intermediate"), "dy": _DY, "ds_out": Tensor(ROW), "w": _W,
           "rstd": _RSTD, "ds": _DX, "partials": _PARTIALS, "dw": _DW},
          [Kernel("add_backward", ("s", "dy", "ds_out", "w", "rstd"), ("ds", "partials"),
                  BACKWARD + ADD, BACKWARD_ROW), _REDUCE], "add backward, two-stage dw"),
    _step("add_rmsnorm_backward_unfused", "eager autograd of add + RMSNorm: the unfused backward on s, "
          "then ds = dx + ds_out as one more kernel",
          {"s": Tensor(ROW, role="intermediate"), "ds_out": Tensor(ROW),
           "ds": Tensor(ROW, role="output"), **_UNFUSED_TENSORS,
           "dx": Tensor(ROW, role="intermediate")},
          [*_unfused_backward_kernels("s"), Kernel("add_ds_out", ("dx", "ds_out"), ("ds",), ADD)],
          "add backward, unfused"),
]
# [/book:backward]
STEPS.update({s.name: s for s in BACKWARD_STEPS})
# One training step of each op: the forward that saves what the backward reads, then the backward.
TRAINING_STEPS = {"rmsnorm": ("rmsnorm_train_forward", "rmsnorm_backward"),
                  "add_rmsnorm": ("add_rmsnorm_train_forward", "add_rmsnorm_backward")}


def training_bytes(op: str, rows: int, cols: int, dtype: Any = "bf16",
                   programs: int = BACKWARD_PROGRAMS) -> dict:
    """Bytes of one forward + backward of ``op`` (``rmsnorm`` or ``add_rmsnorm``) with the fused
    kernels: ``{"forward": B, "backward": B, "total": B}``."""
    if op not in TRAINING_STEPS:
        raise TrafficError(f"unknown op {op!r} for a training step; use one of "
                           f"{', '.join(TRAINING_STEPS)}")
    fwd, bwd = (price(s, rows, cols, dtype, programs=programs).bytes_total
                for s in TRAINING_STEPS[op])
    return {"forward": fwd, "backward": bwd, "total": fwd + bwd}


# The best design of each op in the registry (what bench reports "% of floor" against).
OP_STEP = {"rmsnorm": "rmsnorm", "add_rmsnorm": "fused_add_rmsnorm",
           "add_rmsnorm_residual": "fused_add_rmsnorm_residual", "rmsnorm_fp8": "rmsnorm_fp8_fused"}


def get_step(step: str | Step) -> Step:
    if isinstance(step, Step):
        return step
    if step not in STEPS:
        import difflib

        close = difflib.get_close_matches(str(step), list(STEPS), n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise TrafficError(f"unknown step {step!r}.{hint} Known steps: {', '.join(STEPS)} "
                           f"(python -m fusedrms.traffic --list describes them)")
    return STEPS[step]


# ---------------------------------------------------------------- pricing

@dataclass(frozen=True)
class KernelCost:
    name: str
    reads: tuple  # (tensor, bytes) per access
    writes: tuple
    flops: int
    memory_ns: Fraction | None
    compute_ns: Fraction | None

    @property
    def bytes_read(self) -> int:
        return sum(b for _, b in self.reads)

    @property
    def bytes_written(self) -> int:
        return sum(b for _, b in self.writes)

    @property
    def bytes_total(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes_total

    @property
    def time_ns(self) -> Fraction | None:
        if self.memory_ns is None:
            return None
        return max(self.memory_ns, self.compute_ns) if self.compute_ns is not None else self.memory_ns

    @property
    def bound(self) -> str | None:
        if self.memory_ns is None or self.compute_ns is None:
            return None
        return "memory" if self.memory_ns >= self.compute_ns else "compute"


@dataclass(frozen=True)
class Estimate:
    step: str
    description: str
    rows: int
    cols: int
    dtype: str
    block: int
    kernels: tuple
    row_trips: Fraction
    bandwidth_GBps: float | None = None
    peak_tflops: float | None = None
    label: str = ""

    @property
    def bytes_read(self) -> int:
        return sum(k.bytes_read for k in self.kernels)

    @property
    def bytes_written(self) -> int:
        return sum(k.bytes_written for k in self.kernels)

    @property
    def bytes_total(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def launches(self) -> int:
        return len(self.kernels)

    @property
    def flops(self) -> int:
        return sum(k.flops for k in self.kernels)

    @property
    def intensity(self) -> float:
        """FLOPs per byte of global-memory traffic."""
        return self.flops / self.bytes_total

    @property
    def exact_ns(self) -> Fraction | None:
        """Ideal time before rounding (sum over kernels, each at its own bound)."""
        if self.bandwidth_GBps is None:
            return None
        return sum((k.time_ns for k in self.kernels), Fraction(0))

    @property
    def ideal_ns(self) -> int | None:
        """Ideal time rounded up to a whole nanosecond (once, for the whole step)."""
        exact = self.exact_ns
        return None if exact is None else math.ceil(exact)

    @property
    def ideal_us(self) -> float | None:
        """Ideal time in microseconds, unrounded."""
        exact = self.exact_ns
        return None if exact is None else float(exact) / 1000

    @property
    def ridge(self) -> float | None:
        """Intensity (flop/byte) where the memory and compute ceilings meet."""
        if self.bandwidth_GBps is None or self.peak_tflops is None:
            return None
        return self.peak_tflops * 1000 / self.bandwidth_GBps

    @property
    def bound(self) -> str | None:
        if self.bandwidth_GBps is None or self.peak_tflops is None:
            return None
        memory = sum(k.memory_ns for k in self.kernels)
        compute = sum(k.compute_ns for k in self.kernels)
        return "memory" if memory >= compute else "compute"

    def as_dict(self) -> dict:
        return {"step": self.step, "rows": self.rows, "cols": self.cols, "dtype": self.dtype,
                "block": self.block, "bytes_read": self.bytes_read,
                "bytes_written": self.bytes_written, "bytes_total": self.bytes_total,
                "launches": self.launches, "flops": self.flops,
                "intensity": round(self.intensity, 6), "row_trips": float(self.row_trips),
                "bandwidth_GBps": self.bandwidth_GBps, "peak_tflops": self.peak_tflops,
                "ideal_ns": self.ideal_ns, "bound": self.bound}

    def __str__(self) -> str:
        head = (f"{self.step}: {self.description}\n"
                f"  shape {self.rows} x {self.cols} {self.dtype}"
                + (f", {self.block}-column FP8 blocks" if "fp8" in self.step else "")
                + (f", bandwidth {self.bandwidth_GBps:g} GB/s" if self.bandwidth_GBps else "")
                + (f", peak {self.peak_tflops:g} TFLOP/s" if self.peak_tflops else ""))
        rows = [("kernel", "read B", "written B", "FLOPs", "flop/B", "ns")]
        for k in self.kernels:
            rows.append((k.name, f"{k.bytes_read:,}", f"{k.bytes_written:,}", f"{k.flops:,}",
                         f"{k.intensity:.3f}",
                         "-" if k.time_ns is None else f"{float(k.time_ns):.1f}"))
        rows.append(("total", f"{self.bytes_read:,}", f"{self.bytes_written:,}",
                     f"{self.flops:,}", f"{self.intensity:.3f}",
                     "-" if self.exact_ns is None else f"{float(self.exact_ns):.1f}"))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                  for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
        lines.insert(1 + len(self.kernels), "  " + "-" * (sum(widths) + 2 * len(widths) - 2))
        tail = (f"  launches {self.launches}, row-trips {_fmt_trips(self.row_trips)}, "
                f"intensity {self.intensity:.3f} flop/B")
        if self.ideal_ns is not None:
            tail += f", ideal {self.ideal_ns:,} ns ({self.ideal_us:.3f} us)"
        if self.bound:
            tail += f", {self.bound}-bound"
        return "\n".join([head, *lines, tail])

    __repr__ = __str__


def _fmt_trips(trips: Fraction) -> str:
    return str(trips.numerator) if trips.denominator == 1 else f"{float(trips):.3f}"


# A tensor holds at most 2**63 - 1 elements (torch counts them in int64); rates outside
# RATE_RANGE (GB/s, TFLOP/s) are no machine's, and past them the ideal times leave float's range.
MAX_ELEMENTS = 2 ** 63 - 1
RATE_RANGE = (1e-6, 1e12)


def _positive_int(value, what: str) -> int:
    """A whole number from 1 to ``most``: an int (or a float with no fraction), never a string or
    a bool (True would count as 1)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TrafficError(f"{what} must be a whole number such as 4096, got {value!r} "
                           f"({type(value).__name__})")
    if not isinstance(value, numbers.Integral):
        if not (math.isfinite(value) and float(value) == int(value)):
            raise TrafficError(f"{what} must be a whole number, got {value!r}")
    value = int(value)
    if value < 1:
        raise TrafficError(f"{what} must be at least 1, got {value}")
    if value > MAX_ELEMENTS:
        raise TrafficError(f"{what} must be at most {MAX_ELEMENTS:,} (2**63 - 1, a tensor's "
                           f"largest element count), got a number of {len(str(value))} digits")
    return value


def _rate(value, what: str) -> Fraction | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TrafficError(f"{what} must be a number, got {value!r} ({type(value).__name__})")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if math.isnan(number):
        raise TrafficError(f"{what} must be a number, got {value!r}")
    if number <= 0:
        raise TrafficError(f"{what} must be positive, got {value}")
    low, high = RATE_RANGE
    if not low <= number <= high:
        shown = (f"{number:g}" if math.isfinite(number) or not isinstance(value, numbers.Integral)
                 else f"a number of {len(str(value))} digits")
        raise TrafficError(f"{what} must be from {low:g} to {high:g}, got {shown}")
    return Fraction(str(number))


def price(step: str | Step, rows: int, cols: int, dtype: Any = "bf16",
          bandwidth_GBps: float | None = None, peak_tflops: float | None = None,
          block: int = 128, chunk_cols: int = 4096,
          programs: int = BACKWARD_PROGRAMS) -> Estimate:
    """Bytes, launches, FLOPs and ideal time of ``step`` at ``rows x cols`` activations.

    ``bandwidth_GBps`` in GB/s (= bytes per ns); ``peak_tflops`` in TFLOP/s. ``block`` is the FP8
    quantization block (columns per scale); ``chunk_cols`` the column chunk of split-row designs;
    ``programs`` the backward's grid (one fp32 row of dw partials per program, at most ``rows``).
    """
    s = get_step(step)
    rows = _positive_int(rows, "rows")
    cols = _positive_int(cols, "cols")
    if rows * cols > MAX_ELEMENTS:
        raise TrafficError(f"rows x cols = {rows * cols:.3e} elements; a tensor holds at most "
                           f"{MAX_ELEMENTS:,} (2**63 - 1)")
    block = _positive_int(block, "block")
    chunk_cols = _positive_int(chunk_cols, "chunk_cols")
    programs = min(_positive_int(programs, "programs"), rows)  # a program never has no rows
    act = _activation_dtype(dtype)
    bw = _rate(bandwidth_GBps, "bandwidth_GBps")
    peak = _rate(peak_tflops, "peak_tflops")
    sizes = {"rows": rows, "cols": cols, "blocks": -(-cols // block), "chunks": -(-cols // chunk_cols),
             "programs": programs}

    def nbytes(name: str) -> int:
        t = s.tensors[name]
        elements = math.prod(sizes[d] if isinstance(d, str) else d for d in t.shape)
        return elements * DTYPE_BYTES[act if t.dtype == "act" else t.dtype]

    act_matrix = rows * cols * DTYPE_BYTES[act]
    trips = Fraction(0)
    kernels = []
    for k in s.kernels:
        reads = tuple((t, nbytes(t)) for t in k.reads)
        writes = tuple((t, nbytes(t)) for t in k.writes)
        trips += sum(Fraction(b, act_matrix) for t, b in reads + writes
                     if "rows" in s.tensors[t].shape)
        flops = (k.flops_per_element * rows * cols + k.flops_per_row * rows
                 + k.flops_per_block * rows * sizes["blocks"])
        moved = sum(b for _, b in reads + writes)
        kernels.append(KernelCost(k.name, reads, writes, flops,
                                  None if bw is None else Fraction(moved) / bw,
                                  None if (bw is None or peak is None) else Fraction(flops) / (peak * 1000)))
    return Estimate(s.name, s.description, rows, cols, act, block, tuple(kernels), trips,
                    None if bandwidth_GBps is None else float(bandwidth_GBps),
                    None if peak_tflops is None else float(peak_tflops), s.label)


def floor_us(op: str, rows: int, cols: int, dtype: Any, bandwidth_GBps: float) -> float:
    """Ideal microseconds (unrounded) of the best design of registry op ``op``."""
    if op not in OP_STEP:
        raise TrafficError(f"unknown op {op!r}; known ops: {', '.join(OP_STEP)}")
    if bandwidth_GBps is None:
        raise TrafficError("floor_us needs a bandwidth in GB/s (see reader_bandwidth_GBps())")
    return price(OP_STEP[op], rows, cols, dtype, bandwidth_GBps).ideal_us


def speedup_bound(slow: str | Step, fast: str | Step, rows: int | None = None, cols: int = 4096,
                  dtype: Any = "bf16", block: int = 128) -> Fraction:
    """The most a memory-bound ``fast`` design can gain over ``slow``: their traffic ratio.

    With ``rows=None`` it is the many-rows limit (the ratio of row-trips, weight excluded);
    with ``rows`` given it is the exact byte ratio at that shape, weight included.
    """
    if rows is None:
        a = price(slow, 1, cols, dtype, block=block).row_trips
        b = price(fast, 1, cols, dtype, block=block).row_trips
    else:
        a = Fraction(price(slow, rows, cols, dtype, block=block).bytes_total)
        b = Fraction(price(fast, rows, cols, dtype, block=block).bytes_total)
    return a / b


# ---------------------------------------------------------------- bandwidths

# name -> (memory bandwidth GB/s, peak fp32 non-tensor TFLOP/s, key in book/references.bib).
# The fp32 vector rate is the right compute ceiling: these kernels do their math in fp32 on the
# ordinary ALUs, never on tensor/matrix cores.
PUBLISHED = {
    "H200 SXM": (4800.0, 67.0, "nvidia_h200"),
    "H100 SXM": (3350.0, 67.0, "nvidia_h100"),
    "A100 SXM 80GB": (2039.0, 19.5, "nvidia_a100"),
    "MI300X": (5300.0, 163.4, "amd_mi300x"),
    "RX 9070 XT": (640.0, 48.7, "amd_rx9070xt"),
    "T4": (320.0, 8.1, "nvidia_t4"),
}
H200 = "H200 SXM"
_MATCH = {"H200": "H200 SXM", "H100": "H100 SXM", "A100": "A100 SXM 80GB", "MI300X": "MI300X",
          "9070 XT": "RX 9070 XT", "T4": "T4"}


def published_for(gpu_name: str | None) -> str | None:
    """The PUBLISHED key for a device name like ``"NVIDIA H200"``, or None if not in the table."""
    if not gpu_name:
        return None
    upper = gpu_name.upper()
    for token, key in _MATCH.items():
        if token.upper() in upper:
            return key
    return None


_MEASURED: tuple | None = None


def reader_bandwidth_GBps() -> tuple[float, str]:
    """(GB/s, source): a device-to-device copy measured on this GPU, else the published H200 figure.

    ``source`` is ``"measured"`` or ``"published H200 figure"`` (on a GPU whose measurement failed:
    that GPU's published figure when the table has it).
    """
    global _MEASURED
    from . import env

    if env.current().on_gpu:
        if _MEASURED is None:
            try:
                from .measure import timer  # written by the measurement chapter; imported lazily

                _MEASURED = (float(timer.copy_bandwidth_GBps()), "measured")
            except Exception as e:  # a missing module or a failed measurement must not stop a page
                key = published_for(env.current().gpu_name) or H200
                label = f"published {key.split()[0] if key == H200 else key} figure"
                print(f"(could not measure the copy bandwidth: {type(e).__name__}: {e}; "
                      f"using the {label})", file=sys.stderr)
                _MEASURED = (PUBLISHED[key][0], label)
        return _MEASURED
    return PUBLISHED[H200][0], "published H200 figure"


def reader_ceilings() -> dict:
    """What the roofline of the reader's machine uses: name, bandwidth, peak and where they came from."""
    from . import env

    e = env.current()
    bandwidth, source = reader_bandwidth_GBps()
    key = published_for(e.gpu_name) if e.on_gpu else H200
    peak = PUBLISHED[key][1] if key else None
    name = e.gpu_name if e.on_gpu else f"{H200} (published; no GPU here)"
    return {"gpu": name, "bandwidth_GBps": bandwidth, "bandwidth_source": source,
            "peak_tflops": peak, "peak_source": PUBLISHED[key][2] if key else None}


# ---------------------------------------------------------------- tables

def compare(estimates: Iterable[Estimate]) -> str:
    """A text table of several estimates, one line each."""
    ests = list(estimates)
    rows = [("step", "read B", "written B", "total B", "launches", "row-trips", "flop/B",
             "ideal ns")]
    for e in ests:
        rows.append((e.step, f"{e.bytes_read:,}", f"{e.bytes_written:,}", f"{e.bytes_total:,}",
                     str(e.launches), _fmt_trips(e.row_trips), f"{e.intensity:.3f}",
                     "-" if e.ideal_ns is None else f"{e.ideal_ns:,}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))) for r in rows)


def list_steps() -> str:
    width = max(map(len, STEPS))
    lines = []
    for name, s in STEPS.items():
        lines.append(f"{name.ljust(width)}  {len(s.kernels)} kernel{'s' if len(s.kernels) > 1 else ''}: "
                     f"{s.description}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fusedrms.traffic",
        description="Price a design's global-memory traffic before writing it. Defaults: the "
                    "2 x 7168 bf16 example and the published H200 bandwidth.")
    parser.add_argument("steps", nargs="*", metavar="STEP", help="one or more steps (see --list)")
    parser.add_argument("--list", action="store_true", help="list the steps and exit")
    parser.add_argument("--rows", type=cli.whole(1, MAX_ELEMENTS), default=2,
                        help="rows (tokens); default 2")
    parser.add_argument("--cols", type=cli.whole(1, MAX_ELEMENTS), default=7168,
                        help="row width (hidden size); default 7168")
    parser.add_argument("--dtype", type=cli.dtype_name, default="bf16", help="bf16, fp16 or fp32")
    parser.add_argument("--bandwidth", type=cli.number(*RATE_RANGE), default=None,
                        help="GB/s (default: the --gpu's published figure)")
    parser.add_argument("--gpu", default=H200,
                        help=f"published figures to use: {', '.join(PUBLISHED)}")
    parser.add_argument("--peak", type=cli.number(*RATE_RANGE), default=None,
                        help="TFLOP/s (default: the --gpu's)")
    parser.add_argument("--block", type=cli.whole(1, MAX_ELEMENTS), default=128,
                        help="FP8 block width in columns")
    args = parser.parse_args(argv)
    if args.list:
        print(list_steps())
        return 0
    if not args.steps:
        parser.print_usage(sys.stderr)
        print("name at least one STEP; python -m fusedrms.traffic --list shows them",
              file=sys.stderr)
        return 2
    gpu = next((k for k in PUBLISHED if k.lower() == args.gpu.lower()), None) or published_for(args.gpu)
    if gpu is None:
        print(f"error: unknown --gpu {args.gpu!r}; known: {', '.join(PUBLISHED)} "
              f"(or give --bandwidth and --peak)", file=sys.stderr)
        return 2
    bandwidth = args.bandwidth if args.bandwidth is not None else PUBLISHED[gpu][0]
    peak = args.peak if args.peak is not None else PUBLISHED[gpu][1]
    try:
        estimates = [price(s, args.rows, args.cols, args.dtype, bandwidth, peak, args.block)
                     for s in args.steps]
    except TrafficError as e:
        parser.error(str(e))
    source = "given" if args.bandwidth is not None else f"published {gpu}"
    print(f"# bandwidth {bandwidth:g} GB/s ({source}), peak {peak:g} TFLOP/s")
    for e in estimates:
        print(e)
        print()
    if len(estimates) > 1:
        print(compare(estimates))
        base = estimates[0]
        for e in estimates[1:]:
            print(f"speedup bound {base.step} -> {e.step}: "
                  f"{base.bytes_total / e.bytes_total:.3f}x at this shape, "
                  f"{float(base.row_trips / e.row_trips):.3f}x for many rows")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # output piped into head & co.: stop quietly
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
