"""Chapter 4 exercises: fix two Triton kernels, then choose num_warps by measurement.

The two kernel exercises take the reader's ``@triton.jit`` kernel itself as the answer. It must have
the signature of :func:`fusedrms.kernels.rmsnorm.rmsnorm_row_kernel`::

    (x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps, BLOCK_SIZE: tl.constexpr)

:func:`run_reader_kernel` launches it (GPU, or the interpreter on a CPU) on 3x13 and 33x257 rows
whose buffers are laid out adversarially: rows ``cols + 3`` elements apart in x and ``cols + 1``
apart in y, padding filled with values that spoil any unmasked load, a weight buffer followed by
garbage, and a sentinel around every output row to catch stores outside the mask. A kernel that
raises gets its error in one readable line.
"""
from __future__ import annotations

from .. import env  # first: the kernels below must be decorated in the right mode

import math
from dataclasses import dataclass
from html import escape

import torch
import triton
import triton.language as tl

from .. import checks, reference, records
from ..book.ch04 import measure_num_warps
from ..kernels.rmsnorm import rmsnorm_row_kernel
from .core import Exercise, Feedback, Malformed, as_number, correct, wrong

CASES = ((3, 13), (33, 257))
EPS = 1e-5
X_PAD, Y_PAD = 3, 1  # row strides are cols + X_PAD (x) and cols + Y_PAD (y)
X_FILL = 100.0  # what an unmasked x load past the row reads
W_FILL = 7.0  # what a weight load past the weight vector reads
SENTINEL = -12345.0  # output cells no store may touch
ARG_NAMES = ("x_ptr", "w_ptr", "y_ptr", "cols", "x_row_stride", "y_row_stride", "eps", "BLOCK_SIZE")


# ---- the kernels the reader starts from (each one typical mistake) ----

@triton.jit
def kernel_divides_by_block(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                            BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    mean_square = tl.sum(x * x, axis=0) / BLOCK_SIZE  # <- the bug to fix
    r = tl.rsqrt(mean_square + eps)
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + offsets, (x * r * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def kernel_weight_as_matrix(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                            BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    mean_square = tl.sum(x * x, axis=0) / cols
    r = tl.rsqrt(mean_square + eps)
    w = tl.load(w_ptr + row * x_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)  # <- bug
    tl.store(y_ptr + row * y_row_stride + offsets, (x * r * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def kernel_without_mask(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                        BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets).to(tl.float32)  # reads past the row
    r = tl.rsqrt(tl.sum(x * x, axis=0) / cols + eps)
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + offsets, (x * r * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def kernel_rows_cols_apart(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                           BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    x = tl.load(x_ptr + row * cols + offsets, mask=mask, other=0.0).to(tl.float32)  # stride ignored
    r = tl.rsqrt(tl.sum(x * x, axis=0) / cols + eps)
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * cols + offsets, (x * r * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def kernel_weight_rows_cols_apart(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                                  BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    r = tl.rsqrt(tl.sum(x * x, axis=0) / cols + eps)
    w = tl.load(w_ptr + row * cols + offsets, mask=mask, other=0.0).to(tl.float32)  # a matrix again
    tl.store(y_ptr + row * y_row_stride + offsets, (x * r * w).to(y_ptr.dtype.element_ty), mask=mask)


# ---- running a reader's kernel ----

@dataclass
class KernelRun:
    rows: int
    cols: int
    y: torch.Tensor  # (rows, cols) as the kernel wrote it
    stray_stores: int  # output cells outside the rows that changed
    x: torch.Tensor
    w: torch.Tensor
    w_buffer: torch.Tensor


def _one_line(err: BaseException, limit: int = 300) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:limit]}{'...' if len(text) > limit else ''}"


def run_reader_kernel(kernel, rows: int, cols: int, seed: int = 0) -> KernelRun:
    """Launch ``kernel`` on one adversarial ``rows x cols`` fp32 case. Exceptions propagate."""
    device = env.current().device
    block = triton.next_power_of_2(cols)
    g = torch.Generator().manual_seed(seed)
    xs, ys = cols + X_PAD, cols + Y_PAD
    # every buffer has a block of slack at the end, so even an unmasked or mis-indexed load of a
    # reader's kernel reads padding, never memory it does not own
    x_buf = torch.full((rows * xs + block,), X_FILL)
    x = torch.randn(rows, cols, generator=g)
    x_buf[: rows * xs].view(rows, xs)[:, :cols] = x
    w = torch.randn(cols, generator=g)
    w_buf = torch.full((rows * xs + rows * cols + block,), W_FILL)
    w_buf[:cols] = w
    y_buf = torch.full((rows * ys + block,), SENTINEL)
    x_buf, w_buf, y_buf = x_buf.to(device), w_buf.to(device), y_buf.to(device)
    kernel[(rows,)](x_buf, w_buf, y_buf, cols, xs, ys, EPS, BLOCK_SIZE=block)
    y_buf = y_buf.cpu()
    y = y_buf[: rows * ys].view(rows, ys)[:, :cols].clone()
    outside = torch.ones_like(y_buf, dtype=torch.bool)
    outside[: rows * ys].view(rows, ys)[:, :cols] = False
    stray = int((outside & (y_buf != SENTINEL)).sum())
    return KernelRun(rows, cols, y, stray, x, w, w_buf.cpu())


def _models(run: KernelRun) -> dict[str, torch.Tensor]:
    """What the typical mistakes produce on this case, to name the reader's one."""
    x64, w64 = run.x.double(), run.w.double()
    block = triton.next_power_of_2(run.cols)
    r_block = torch.rsqrt((x64 * x64).sum(-1, keepdim=True) / block + EPS)
    xs = run.cols + X_PAD
    idx = torch.arange(run.rows)[:, None] * xs + torch.arange(run.cols)[None, :]
    w_matrix = run.w_buffer.double()[idx]
    r = reference.row_scale(x64, EPS, torch.float64)
    return {"block": x64 * r_block * w64, "matrix": x64 * r * w_matrix}


def _grade_kernel(answer, focus: str) -> Feedback:
    jit_types = tuple(t for t in (getattr(triton.runtime.jit, "JITFunction", None),
                                  getattr(triton.runtime.jit, "KernelInterface", None)) if t)
    if not isinstance(answer, jit_types):
        raise Malformed(f"expected a kernel defined with @triton.jit, got {type(answer).__name__}. "
                        f"Define it in a cell (def my_kernel(...) under @triton.jit) and set "
                        f"answer = my_kernel.")
    names = tuple(getattr(answer, "arg_names", ()))
    if len(names) != len(ARG_NAMES):
        raise Malformed(f"the kernel takes {len(names)} arguments ({', '.join(names)}); it must "
                        f"take {len(ARG_NAMES)}: ({', '.join(ARG_NAMES)}), like the kernel you "
                        f"started from.")
    for rows, cols in CASES:
        try:
            run = run_reader_kernel(answer, rows, cols)
        except Exception as err:  # the reader's kernel: anything can happen
            return wrong(f"on {rows}x{cols} your kernel raised {_one_line(err)}",
                         "Run it once by hand to see the whole error; compare each line with the "
                         "kernel you started from.")
        expected = reference.rmsnorm(run.x, run.w, EPS, accum=torch.float64)
        if run.stray_stores:
            return wrong(f"on {rows}x{cols} your kernel wrote {run.stray_stores} values outside "
                         f"the rows' columns.",
                         "Store with mask=mask, and place row i at y_ptr + i * y_row_stride.")
        report = checks.allclose(run.y, expected)
        if report:
            continue
        models = _models(run)
        if checks.allclose(run.y, models["block"]):
            return wrong(f"on {rows}x{cols} the output is what dividing the sum of squares by "
                         f"BLOCK_SIZE = {triton.next_power_of_2(cols)} gives ({report.message}).",
                         f"The masked lanes add 0 to the sum but are not columns: divide by the "
                         f"real column count cols = {cols}.")
        if checks.allclose(run.y, models["matrix"]):
            return wrong(f"on {rows}x{cols} row 0 is right but row i reads its weights further "
                         f"along w_ptr, as if w were a (rows, cols) matrix ({report.message}).",
                         "w has one value per column, shared by every row: load w_ptr + offsets.")
        if focus == "weight":
            hint = ("Every row must use the same weights w[0..cols-1]: the weight pointer never "
                    "moves with the row.")
        else:
            hint = ("Check the mean's denominator, the masks on the loads (other=0.0), and that "
                    "rows are x_row_stride (x) and y_row_stride (y) elements apart, not cols.")
        return wrong(f"on {rows}x{cols} the output differs from the reference: {report.message}",
                     hint)
    return correct(f"matches the float64 reference on {' and '.join(f'{r}x{c}' for r, c in CASES)}"
                   f" (row strides cols+{X_PAD} and cols+{Y_PAD}, padding never read into the "
                   f"sum, no stray stores), run {env.current().triton_mode}.")


fix_block_denominator = Exercise(
    "fix_block_denominator",
    "Fix the kernel that divides the sum of squares by BLOCK_SIZE; answer with your @triton.jit "
    "kernel (same arguments).",
    lambda a: _grade_kernel(a, "denominator"),
    solution=rmsnorm_row_kernel,
    mistakes={"divides by BLOCK_SIZE": kernel_divides_by_block,
              "no mask on the x load": kernel_without_mask,
              "rows cols apart, stride ignored": kernel_rows_cols_apart})

fix_weight_load = Exercise(
    "fix_weight_load",
    "Fix the kernel that loads the weight as if it were a (rows, cols) matrix; answer with your "
    "@triton.jit kernel (same arguments).",
    lambda a: _grade_kernel(a, "weight"),
    solution=rmsnorm_row_kernel,
    mistakes={"weight indexed by row stride": kernel_weight_as_matrix,
              "weight indexed by row * cols": kernel_weight_rows_cols_apart})


# ---- choose num_warps by measurement ----

WARPS_ROWS, WARPS_COLS, WARPS_DTYPE = 4096, 8192, torch.bfloat16
ALLOWED_WARPS = (1, 2, 4, 8, 16, 32)
NOISE = 0.05  # two medians of one measurement within 5% are a tie
RENOISE = 0.08  # a fresh measurement may reorder settings that close; allow a little more


class NotCheckedHere(Feedback):
    """Feedback for an exercise this machine cannot check (no GPU, no recorded results)."""

    def __str__(self) -> str:
        return "Not checked here. " + self.message + (f"\nHint: {self.hint}" if self.hint else "")

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return ('<div style="border-left:4px solid #6b7280;padding:4px 10px"><b>Not checked '
                f"here.</b> {escape(self.message)}</div>")


def recorded_warps(cols: int = WARPS_COLS, dtype: torch.dtype = WARPS_DTYPE,
                   rows: int = WARPS_ROWS) -> tuple[dict[int, float], dict] | None:
    """{num_warps: median µs} from the recorded H200 sweep for one shape, with the file's document."""
    try:
        doc = records.load("triton_warps")
    except (FileNotFoundError, ValueError):
        return None
    tag = str(dtype).replace("torch.", "")
    times = {}
    for rec in doc.get("records", []):
        try:
            if int(rec["rows"]) == rows and int(rec["cols"]) == cols and rec["dtype"] == tag:
                times[int(rec["num_warps"])] = float(rec["median_us"])
        except (KeyError, TypeError, ValueError):
            continue
    return (times, doc) if len(times) >= 2 else None


def _read_warps_answer(answer) -> tuple[int, dict[int, float] | None]:
    if not isinstance(answer, dict) or "num_warps" not in answer:
        raise Malformed("write a dict: answer = {'num_warps': 8, 'timings_us': {4: ..., 8: ..., "
                        "16: ...}} with the medians you measured.")
    nw = as_number(answer["num_warps"], "num_warps (a whole number)")
    if nw != int(nw) or int(nw) not in ALLOWED_WARPS:
        raise Malformed(f"num_warps must be one of {ALLOWED_WARPS}, got {answer['num_warps']!r}.")
    timings = answer.get("timings_us")
    if timings is None:
        return int(nw), None
    if not isinstance(timings, dict):
        raise Malformed("timings_us must be a dict {num_warps: median microseconds}.")
    clean = {}
    for k, v in timings.items():
        kk = as_number(k, "a num_warps key")
        if kk != int(kk) or int(kk) not in ALLOWED_WARPS:
            raise Malformed(f"timings_us has the key {k!r}; keys are num_warps values {ALLOWED_WARPS}.")
        t = as_number(v, f"the median for {int(kk)} warps (microseconds)")
        if t <= 0:
            raise Malformed(f"the median for {int(kk)} warps is {t}; times are positive.")
        clean[int(kk)] = t
    return int(nw), clean


def _grade_warps(answer) -> Feedback:
    chosen, timings = _read_warps_answer(answer)
    if not timings or len(timings) < 2:
        return wrong(f"num_warps = {chosen} with {'no measurement' if not timings else 'one timing'}"
                     f" is a guess, not a choice.",
                     "Measure at least two settings (measure_num_warps does 4, 8 and 16) and put "
                     "the medians in timings_us.")
    if chosen not in timings:
        return wrong(f"you chose {chosen} warps but timed only {sorted(timings)}.",
                     "Include the median of your choice in timings_us.")
    best = min(timings, key=timings.get)
    if timings[chosen] > (1 + NOISE) * timings[best]:
        return wrong(f"your own medians say {best} warps ({timings[best]:.2f} us) beat {chosen} "
                     f"({timings[chosen]:.2f} us) by more than {NOISE:.0%}.",
                     "Choose what the measurement says, not what a rule or intuition says.")
    shape = f"{WARPS_ROWS}x{WARPS_COLS} {str(WARPS_DTYPE).replace('torch.', '')}"
    if env.current().on_gpu:
        measured = measure_num_warps(WARPS_ROWS, WARPS_COLS, WARPS_DTYPE, warps=tuple(timings))
        source = "re-measured on this GPU"
    else:
        found = recorded_warps()
        if found is None:
            return NotCheckedHere(
                False, f"choosing num_warps needs a GPU to measure {shape}, or the recorded H200 "
                       f"sweep (code/fusedrms/data/h200/triton_warps.json), and this machine has "
                       f"neither. Your answer is consistent with your own timings.")
        measured, _doc = found
        missing = [k for k in timings if k not in measured]
        if missing:
            return wrong(f"the recorded sweep has no {missing} warps for {shape}.",
                         f"Use the recorded settings: {sorted(measured)}.")
        for k, t in timings.items():
            if not math.isclose(t, measured[k], rel_tol=0.01):
                return wrong(f"your {k}-warp median {t} is not the recorded {measured[k]}.",
                             "Copy the recorded medians of the table for this width.")
        source = "the recorded H200 sweep"
    fastest = min((measured[k] for k in timings), default=math.inf)
    if measured[chosen] > (1 + (RENOISE if env.current().on_gpu else NOISE)) * fastest:
        other = min(timings, key=lambda k: measured[k])
        return wrong(f"in {source}, {other} warps took {measured[other]:.2f} us and {chosen} took "
                     f"{measured[chosen]:.2f} us.",
                     "Measure again on an idle GPU; the ranking must hold in a fresh measurement.")
    return correct(f"{chosen} warps is as fast as the fastest setting for {shape} in {source}, "
                   f"within measurement noise ({measured[chosen]:.2f} us vs {fastest:.2f} us).")


def warps_solution() -> dict | None:
    """The answer the checker accepts here: measured on a GPU, else read from the recorded sweep."""
    if env.current().on_gpu:
        timings = measure_num_warps(WARPS_ROWS, WARPS_COLS, WARPS_DTYPE)
    else:
        found = recorded_warps()
        if found is None:
            return None
        timings = found[0]
    return {"num_warps": min(timings, key=timings.get), "timings_us": timings}


choose_num_warps = Exercise(
    "choose_num_warps",
    f"Choose num_warps for {WARPS_ROWS}x{WARPS_COLS} bfloat16 rows and justify it with medians: "
    f"answer = {{'num_warps': N, 'timings_us': {{4: ..., 8: ..., 16: ...}}}}.",
    _grade_warps,
    solution=None,  # depends on the machine: see warps_solution()
    mistakes={"the biggest is best": {"num_warps": 16, "timings_us": {4: 30.0, 8: 28.0, 16: 33.0}},
              "the rule, no measurement": {"num_warps": 16},
              "one timing": {"num_warps": 8, "timings_us": {8: 28.0}},
              "chosen one not timed": {"num_warps": 4, "timings_us": {8: 28.0, 16: 29.0}}},
    needs_gpu=True)

KERNEL_EXERCISES = [fix_block_denominator, fix_weight_load]
ALL = KERNEL_EXERCISES + [choose_num_warps]
