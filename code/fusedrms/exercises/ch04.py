"""Chapter 4 exercises: fix two Triton kernels, then choose num_warps by measurement.

The two kernel exercises take the reader's ``@triton.jit`` kernel itself as the answer. It must have
the signature of :func:`fusedrms.kernels.rmsnorm.rmsnorm_row_kernel`::

    (x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps, BLOCK_SIZE: tl.constexpr)

:func:`run_reader_kernel` launches it on 3x13, 33x257, 5x1 (with a block wider than the row) and
2x1100 rows (wider than a block a kernel might hard-code in place of its BLOCK_SIZE), all fp32,
and 2x300 fp16 rows whose sum of squares overflows fp16 (a kernel must sum in fp32), whose
buffers are laid out adversarially: rows ``cols + 3`` elements apart in x and ``cols + 1`` apart
in y, x's padding NaN, a weight buffer followed by garbage, and a sentinel around every output
row to catch stores outside the mask. A kernel that raises gets its error in
one readable line.

The grader (:mod:`.grader`) runs every case in a child process, in Triton's interpreter on CPU
tensors, on every machine: a kernel that crashes the process or never ends gets a verdict, and a
GPU gets the verdict a machine without one gives. There the loads and stores are audited
(:mod:`.interpreter_audit`): every address a load reads without a mask must lie inside x's rows or
w's ``cols`` values (an unmasked weight load reads past ``w``, out of bounds on a GPU, even though
no wrong value reaches a stored lane); lanes a masked load skips without ``other=`` read NaN, as
undefined values would, so they fail the check exactly where they reach the output (the sum of
squares) and nowhere else; and no program may store what another stores or load what another
stores (a race on a GPU, hidden by the interpreter's in-order programs). On a GPU the kernel then
also runs compiled for it, in another child.
"""
from __future__ import annotations

from .. import env  # first: the kernels below must be decorated in the right mode

import contextlib
import dataclasses
import inspect
import math
from dataclasses import dataclass, field
from html import escape

import torch
import triton
import triton.language as tl

from .. import checks, dtypes as dtype_names, reference, records
from ..book import ch04_story
from ..book.ch04 import measure_num_warps, tie_band as chapter_tie_band
from ..book.page import listed
from ..kernels.rmsnorm import num_warps_for, rmsnorm_row_kernel
from . import grader, interpreter_audit, predictions
from .core import (Exercise, Feedback, Malformed, as_number, changed_output, correct, one_line,
                   portable_error, wrong)

# the fourth is wider than a block a kernel could hard-code instead of its BLOCK_SIZE argument
# (tl.arange(0, 512), or 1024), and not a power of two; two rows keep the interpreter fast
# the fifth is fp16 rows of large values, where a sum of squares in fp16 overflows (see loud_rows)
CASES = ((3, 13), (33, 257), (5, 1), (2, 1100), (2, 300))
EPS = 1e-5
# the second case passes a large eps, so a kernel that ignores its eps argument shows
CASE_EPS = {(33, 257): 0.25}
# launched with a block wider than the row needs (the others get the next power of two)
CASE_BLOCK = {(5, 1): 16}
CASE_DTYPE = {(2, 300): torch.float16}  # the others are fp32
X_PAD, Y_PAD = 3, 1  # row strides are cols + X_PAD (x) and cols + Y_PAD (y)
X_FILL = math.nan  # what an unmasked x load past the row reads: poison
W_FILL = 7.0  # what a weight load past the weight vector reads
SENTINEL = -12288.0  # output cells no store may touch (exact in fp32, bf16 and fp16)
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


@triton.jit
def kernel_weight_without_mask(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                               BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    r = tl.rsqrt(tl.sum(x * x, axis=0) / cols + eps)
    w = tl.load(w_ptr + offsets).to(tl.float32)  # lanes past cols read past the weight vector
    tl.store(y_ptr + row * y_row_stride + offsets, (x * r * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def kernel_x_without_other(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                           BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask).to(tl.float32)  # skipped lanes undefined
    r = tl.rsqrt(tl.sum(x * x, axis=0) / cols + eps)
    w = tl.load(w_ptr + offsets, mask=mask).to(tl.float32)  # here other= does not matter
    tl.store(y_ptr + row * y_row_stride + offsets, (x * r * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def kernel_sums_in_input_dtype(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                               BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0)  # no .to(tl.float32)
    r = tl.rsqrt(tl.sum(x * x, axis=0) / cols + eps)  # the squares summed in x's dtype
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0)
    tl.store(y_ptr + row * y_row_stride + offsets, (x * r * w).to(y_ptr.dtype.element_ty), mask=mask)


# ---- running a reader's kernel ----

@dataclass
class KernelRun:
    rows: int
    cols: int
    y: torch.Tensor  # (rows, cols) as the kernel wrote it
    stray_stores: int  # output cells outside the rows that changed, or stores outside every buffer
    x: torch.Tensor
    w: torch.Tensor
    w_buffer: torch.Tensor
    loads: list = field(default_factory=list)  # [interpreter_audit.Access], when audited
    audited: bool = False
    outside_x: int = 0  # unmasked x reads outside the rows' columns
    past_w: int = 0  # unmasked reads of w past its cols values
    eps: float = EPS
    block: int = 0
    races: list = field(default_factory=list)  # programs storing or loading each other's elements


def _interpreted(kernel):
    """The reader's kernel as the interpreter runs it (it already is one in a process that runs
    the interpreter, unless it was built as a JITFunction by hand)."""
    from triton.runtime import interpreter as interp

    if isinstance(kernel, interp.InterpretedFunction):
        return kernel
    return interp.InterpretedFunction(kernel.fn)


def kernel_cases(kernel, cases, device: str, launch) -> list:
    """(In the grader's child) ``launch(kernel, case, torch_device, audit)`` for each case: in
    Triton's interpreter with loads and stores audited (``device="cpu"``) or compiled for the GPU
    (``"gpu"``). What the reader's kernel raises ends the list (no more cases run)."""
    out = []
    for case in cases:
        grader.progress(case.where() + (" on the GPU" if device == "gpu" else ""))
        try:
            if device == "gpu":
                out.append(launch(kernel, case, torch.device("cuda"), False))
                torch.cuda.synchronize()
            else:
                out.append(launch(_interpreted(kernel), case, torch.device("cpu"), True))
        except Exception as err:  # noqa: BLE001 - the reader's kernel: anything can happen
            out.append(portable_error(err))
            break
    return out


def _block_parameter(kernel) -> str:
    """The name of the kernel's last parameter (the block width), which must be a constexpr."""
    params = list(inspect.signature(kernel.fn).parameters.values())
    last = params[-1]
    if "constexpr" not in str(last.annotation):
        raise Malformed(f"the last parameter, {last.name}, is the block width and must be declared "
                        f"{last.name}: tl.constexpr (tl.arange needs a compile-time size).")
    return last.name


def run_reader_kernel(kernel, rows: int, cols: int, seed: int = 0, audit: bool = False,
                      device=None, eps: float = EPS) -> KernelRun:
    """Launch ``kernel`` on one adversarial ``rows x cols`` fp32 case. Exceptions propagate.

    With ``audit`` the kernel runs in Triton's interpreter on CPU tensors, in a child process
    (:func:`grader.run`), and its loads and stores are audited; without, in this process.
    """
    if audit:
        return grader.run(kernel, _audited_run, rows, cols, seed, eps, cache=True)
    return _launch(kernel, rows, cols, seed, False, env.current().device if device is None else device,
                   eps, **_case_data(rows, cols))


def loud_rows(rows: int, cols: int, block: int, generator) -> torch.Tensor:
    """x with a root mean square of 24: every square fits fp16 (the largest is a few thousand),
    but a row's sum of squares, about 24² x cols = 170,000 at 300 columns, is past fp16's largest
    value, 65504. A kernel that sums the squares in fp16 gets inf, then r = 0; in fp32 they add
    up exactly enough. (Activations this large are common in fp16 models.)"""
    return torch.randn(rows, cols, generator=generator) * 24


CASE_X = {(2, 300): loud_rows}  # the others: randn


def _case_data(rows: int, cols: int) -> dict:
    """The dtype and x values of the case ``rows x cols`` (fp32 randn unless listed above)."""
    return {"dtype": CASE_DTYPE.get((rows, cols), torch.float32),
            "x_values": CASE_X.get((rows, cols))}


def case_name(rows: int, cols: int) -> str:
    """"3x13", or "2x300 fp16" for a case that is not fp32."""
    dtype = CASE_DTYPE.get((rows, cols), torch.float32)
    return f"{rows}x{cols}" + ("" if dtype == torch.float32 else f" {dtype_names.short(dtype)}")


def _audited_run(kernel, rows: int, cols: int, seed: int, eps: float) -> KernelRun:
    return _launch(_interpreted(kernel), rows, cols, seed, True, torch.device("cpu"), eps,
                   **_case_data(rows, cols))


def _audited_runs(kernel, cases) -> list:
    """(In the grader's child) each case audited in the interpreter: its KernelRun, or what the
    kernel raised there (and then no further case)."""
    runs = []
    for rows, cols in cases:
        grader.progress(f"On {case_name(rows, cols)}")
        try:
            runs.append(_audited_run(kernel, rows, cols, 0, CASE_EPS.get((rows, cols), EPS)))
        except Exception as err:  # noqa: BLE001 - the reader's kernel: anything can happen
            runs.append(portable_error(err))
            break
    return runs


def _compiled_runs(kernel, cases) -> list:
    """(In the grader's GPU child) each case compiled for the GPU, as :func:`_audited_runs`."""
    runs = []
    for rows, cols in cases:
        grader.progress(f"On {case_name(rows, cols)} on the GPU")
        try:
            runs.append(_launch(kernel, rows, cols, 0, False, torch.device("cuda"),
                                CASE_EPS.get((rows, cols), EPS), **_case_data(rows, cols)))
            torch.cuda.synchronize()
        except Exception as err:  # noqa: BLE001
            runs.append(portable_error(err))
            break
    return runs


def case_block(rows: int, cols: int, block: int | None = None) -> int:
    """The BLOCK a case launches with: ``block``, else :data:`CASE_BLOCK`'s, else the next power
    of two."""
    return block or CASE_BLOCK.get((rows, cols), triton.next_power_of_2(cols))


def _launch(kernel, rows: int, cols: int, seed: int, audit: bool, device, eps: float,
            block: int | None = None, num_warps: int | None = None,
            dtype: torch.dtype = torch.float32, x_values=None) -> KernelRun:
    """One launch on adversarial buffers; ``block`` (the constexpr), ``num_warps`` and ``dtype``
    default to chapter 4's fix exercises' (the next power of two, the compiler's, fp32);
    ``x_values(rows, cols, block, generator)`` may replace x's random values."""
    block = case_block(rows, cols, block)
    xs, ys = cols + X_PAD, cols + Y_PAD
    # every buffer has a block of slack at the end, so even an unmasked or mis-indexed load of a
    # reader's kernel reads padding, never memory it does not own
    x_buf = torch.full((rows * xs + block,), X_FILL, dtype=dtype)
    x, w = case_inputs(rows, cols, seed, block, dtype, x_values)
    x_buf[: rows * xs].view(rows, xs)[:, :cols] = x
    w_buf = torch.full((rows * xs + rows * cols + block,), W_FILL, dtype=dtype)
    w_buf[:cols] = w
    y_buf = torch.full((rows * ys + block,), SENTINEL, dtype=dtype)
    x_buf, w_buf, y_buf = x_buf.to(device), w_buf.to(device), y_buf.to(device)
    launch = {_block_parameter(kernel): block, **({"num_warps": num_warps} if num_warps else {})}
    with interpreter_audit.audited() if audit else contextlib.nullcontext() as log:
        kernel[(rows,)](x_buf, w_buf, y_buf, cols, xs, ys, eps, **launch)
    y_buf = y_buf.cpu()
    y = y_buf[: rows * ys].view(rows, ys)[:, :cols].clone()
    outside = torch.ones_like(y_buf, dtype=torch.bool)
    outside[: rows * ys].view(rows, ys)[:, :cols] = False
    stray = int((outside & (y_buf != SENTINEL)).sum())
    run = KernelRun(rows, cols, y, stray, x, w, w_buf.cpu(), eps=eps, block=block)
    if log is not None and log.usable and log.launches:
        launch = log.launches[-1]
        run.loads, run.audited = launch.loads(), True
        run.outside_x, run.past_w = _stray_reads(run.loads, x_buf, w_buf, rows, cols, xs)
        run.outside_x += launch.outside_loads  # reads outside every buffer (skipped)
        run.stray_stores += launch.outside_stores
        run.races = launch.races()
    return run


def case_inputs(rows: int, cols: int, seed: int, block: int, dtype: torch.dtype = torch.float32,
                x_values=None) -> tuple[torch.Tensor, torch.Tensor]:
    """x and w of one case, the same in every process: the child launches on them, the parent
    judges against its own (:func:`own_inputs`)."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, cols, generator=g) if x_values is None
         else x_values(rows, cols, block, g)).to(dtype)
    return x, torch.randn(cols, generator=g).to(dtype)


def own_inputs(run, rows: int, cols: int, seed: int, eps: float, block: int | None = None,
               dtype: torch.dtype = torch.float32, x_values=None):
    """``run`` (a :class:`KernelRun` from the grader's child, or what the kernel raised) judged
    against the case as the parent knows it: the inputs, eps and sizes are made here. Whatever
    else the child sends back is within the reach of the reader's kernel (under the interpreter
    it is Python, and may rewrite the grader's own x)."""
    if not isinstance(run, KernelRun):
        return run
    changed = changed_output(rows, cols, run.y.shape)
    if changed is not None:
        return changed
    block = case_block(rows, cols, block)
    x, w = case_inputs(rows, cols, seed, block, dtype, x_values)
    return dataclasses.replace(run, rows=rows, cols=cols, x=x, w=w, eps=eps, block=block)


def _stray_reads(log, x_buf, w_buf, rows, cols, xs) -> tuple[int, int]:
    """(x reads outside the rows' columns, w reads past its cols values) among the unmasked lanes."""
    outside_x = past_w = 0
    for load in log:
        for buf, is_x in ((x_buf, True), (w_buf, False)):
            start = buf.data_ptr()
            inside = (load.addresses >= start) & (load.addresses < start + buf.numel() * buf.element_size())
            index = (load.addresses[inside] - start) // buf.element_size()
            if is_x:
                outside_x += int(((index >= rows * xs) | (index % xs >= cols)).sum())
            else:
                past_w += int((index >= cols).sum())
    return outside_x, past_w


def _models(run: KernelRun) -> dict[str, torch.Tensor]:
    """What the typical mistakes produce on this case, to name the reader's one."""
    x64, w64 = run.x.double(), run.w.double()
    block = run.block or triton.next_power_of_2(run.cols)
    eps = run.eps
    r_block = torch.rsqrt((x64 * x64).sum(-1, keepdim=True) / block + eps)
    xs = run.cols + X_PAD
    idx = torch.arange(run.rows)[:, None] * xs + torch.arange(run.cols)[None, :]
    w_matrix = run.w_buffer.double()[idx]
    r = reference.row_scale(x64, eps, torch.float64)
    mean_square = (x64 * x64).sum(-1, keepdim=True) / run.cols
    models = {"block": x64 * r_block * w64, "matrix": x64 * r * w_matrix,
              "no_eps": x64 * torch.rsqrt(mean_square) * w64,
              "eps_outside": x64 * (torch.rsqrt(mean_square) + eps) * w64,
              "sqrt": x64 * torch.sqrt(mean_square + eps) * w64,
              "no_weight": x64 * r}
    if run.cols > 1:
        sum_squares = (x64 * x64).sum(-1, keepdim=True)
        models["cols_minus_1"] = x64 * torch.rsqrt(sum_squares / (run.cols - 1) + eps) * w64
    if eps != EPS:
        models["fixed_eps"] = x64 * torch.rsqrt(mean_square + EPS) * w64
    if run.x.dtype != torch.float32:  # the sum of squares in x's dtype: at least rounded to it
        # once, and where it overflows (fp16 past 65504) inf, whatever the order of the adds
        in_dtype = (x64 * x64).sum(-1, keepdim=True).to(run.x.dtype).double()
        models["input_dtype_sum"] = x64 * torch.rsqrt(in_dtype / run.cols + eps) * w64
    return models


FIXED_WIDTH_HINT = ("Take the lanes from the block the launch passes: offsets = tl.arange(0, "
                    "BLOCK_SIZE), mask = offsets < cols. The launch makes BLOCK_SIZE at least as "
                    "wide as the row; a width written into the kernel covers only part of a "
                    "wider row.")


def fixed_width(run: KernelRun) -> int | None:
    """W when every row of ``run`` was written in its first W columns and nowhere after, W a
    power of two narrower than the row and not the block the launch passed: what a kernel whose
    lanes are a fixed tl.arange(0, W) leaves behind. Else None."""
    written = run.y != SENTINEL
    holes = (~written).any(0).nonzero().flatten()
    if holes.numel() == 0:
        return None
    width = int(holes[0])
    if width in (0, run.block) or width & (width - 1) or not bool(written[:, :width].all()) \
            or bool(written[:, width:].any()):
        return None
    return width


# (what the reader's kernel computed, the hint) for the arithmetic mistakes :func:`_models` knows
ARITHMETIC_MISTAKES = {
    "fixed_eps": (f"a fixed eps of {EPS:g} instead of the eps argument",
                  "Use the kernel's eps argument: the caller chooses it (this case passes a "
                  "different one)."),
    "no_eps": ("leaving eps out of the square root",
               "Add eps to the mean square before the square root: tl.rsqrt(mean_square + eps). "
               "Without it an all-zero row divides by zero."),
    "eps_outside": ("adding eps after the square root",
                    "eps goes inside the square root, added to the mean square: "
                    "tl.rsqrt(mean_square + eps), not tl.rsqrt(mean_square) + eps."),
    "sqrt": ("multiplying by sqrt(mean_square + eps)",
             "RMSNorm divides by the root mean square: multiply by tl.rsqrt(mean_square + eps) "
             "(or divide by tl.sqrt(...)), not by tl.sqrt."),
    "no_weight": ("leaving out the weight",
                  "Multiply by the weight: y = x * r * w, with w = tl.load(w_ptr + offsets, "
                  "mask=mask, other=0.0)."),
    "input_dtype_sum": ("summing the squares in x's own dtype instead of fp32",
                        "Convert x to fp32 right after its load (x = tl.load(...).to(tl.float32)) "
                        "so that the squares are summed in fp32. In fp16 a row's sum of squares "
                        "overflows past 65504 (as here: inf, then r = 0), and in bf16 it loses "
                        "the small squares."),
    "cols_minus_1": ("dividing the sum of squares by cols - 1",
                     "The mean square divides by cols, the real width; cols - 1 is the unbiased "
                     "variance's correction, which RMSNorm does not use."),
}


def _diagnose(run: KernelRun, audit: KernelRun, focus: str, where: str) -> Feedback | None:
    """What is wrong with ``run`` (its loads audited in ``audit``), or None. ``where`` starts each
    message ("On 3x13")."""
    rows, cols, eps = run.rows, run.cols, run.eps
    expected = reference.rmsnorm(run.x, run.w, eps, accum=torch.float64)
    if run.stray_stores:
        return wrong(f"{where} your kernel wrote {run.stray_stores} values outside the rows' "
                     f"columns.",
                     "Store with mask=mask, and place row i at y_ptr + i * y_row_stride.")
    unwritten = [i for i in range(rows) if bool((run.y[i] == SENTINEL).all())]
    if unwritten:
        return wrong(f"{where} your kernel never wrote {'row' if len(unwritten) == 1 else 'rows'} "
                     f"{listed(unwritten)} of {rows}.",
                     "Each program handles one row: row = tl.program_id(0), its x at "
                     "x_ptr + row * x_row_stride and its output at y_ptr + row * y_row_stride.")
    if audit.races:
        return wrong(f"{where} {audit.races[0]}. On a GPU the programs run at the same time, in "
                     f"any order, so which value stays is a race; the interpreter runs them one "
                     f"by one, in order, which hides it.",
                     "Each program stores only its own row (y_ptr + row * y_row_stride) and "
                     "loads only x and w, never what another program stores.")
    width = fixed_width(run)
    if width is not None:
        return wrong(f"{where} your kernel wrote only the first {width} of each row's {cols} "
                     f"columns, as lanes of a fixed tl.arange(0, {width}) would, not the "
                     f"BLOCK_SIZE = {run.block} the launch passes: its sum of squares and its "
                     f"store cover part of the row.", FIXED_WIDTH_HINT)
    holes = (run.y == SENTINEL).any(0).nonzero().flatten().tolist()
    if holes:
        return wrong(f"{where} your kernel never wrote columns {holes[0]} to {holes[-1]} of "
                     f"some rows.",
                     "Store every column of the row: offsets = tl.arange(0, BLOCK_SIZE), "
                     "mask = offsets < cols, the same mask on the store.")
    report = checks.allclose(run.y, expected)
    audited = checks.allclose(audit.y, expected)
    if report and audited:
        if audit.past_w:
            return wrong(f"{where} the output is right, but your kernel loads the weight past "
                         f"its {cols} values ({audit.past_w} reads without a mask): on a GPU "
                         f"those lanes read memory w does not own.",
                         "Load w with the same mask as x: tl.load(w_ptr + offsets, mask=mask, "
                         "other=0.0).")
        return None
    failed = report if not report else audited
    models = _models(run)
    if checks.allclose(run.y, models["block"]):
        return wrong(f"{where} the output is what dividing the sum of squares by "
                     f"BLOCK_SIZE = {run.block} gives ({failed.message}).",
                     f"The masked lanes add 0 to the sum but are not columns: divide by the "
                     f"real column count cols = {cols}.")
    if checks.allclose(run.y, models["matrix"]):
        return wrong(f"{where} row 0 is right but row i reads its weights further "
                     f"along w_ptr, as if w were a (rows, cols) matrix ({failed.message}).",
                     "w has one value per column, shared by every row: load w_ptr + offsets.")
    for key, (what, hint) in ARITHMETIC_MISTAKES.items():
        if key in models and checks.allclose(run.y, models[key]):
            return wrong(f"{where} the output is what {what} gives ({failed.message}).", hint)
    if audit.outside_x:
        return wrong(f"{where} your kernel reads x outside its rows ({audit.outside_x} "
                     f"loads of the padding after a row's {cols} columns), and those values "
                     f"reach the sum of squares ({failed.message}).",
                     "Load x with mask=offsets < cols and other=0.0, so lanes past the last "
                     "column read nothing and add 0.")
    if any(load.undefined_lanes for load in audit.loads) and not torch.isfinite(audit.y).all():
        return wrong(f"{where} a masked load without other= leaves the lanes it skips "
                     f"undefined (the checker fills them with NaN), and they reach the output "
                     f"({failed.message}).",
                     "Give the x load other=0.0: the skipped lanes must add 0 to the sum of "
                     "squares. (For w it does not matter: those lanes are never stored.)")
    row0_right = bool(checks.allclose(run.y[:1], expected[:1]))
    if focus == "weight" and row0_right:
        hint = ("Every row must use the same weights w[0..cols-1]: the weight pointer never "
                "moves with the row.")
    elif focus == "weight":
        hint = ("Row 0 is wrong too, so the weight load is not the only problem: only that "
                "line needed a change. Compare every other line with the kernel you started "
                "from (the mean's denominator, eps, rsqrt, the masks).")
    elif row0_right:
        hint = ("Row 0 is right and the others are not: look at what changes with the row, "
                "the row strides (x_row_stride for x, y_row_stride for y) and the weight "
                "pointer, which must not move.")
    else:
        hint = ("Check the mean's denominator, the masks on the loads (other=0.0), and that "
                "rows are x_row_stride (x) and y_row_stride (y) elements apart, not cols.")
    return wrong(f"{where} the output differs from the reference: {failed.message}", hint)


def check_kernel_form(answer, arg_names=ARG_NAMES,
                      like: str = "like the kernel you started from") -> None:
    """Malformed unless ``answer`` is a @triton.jit kernel taking ``len(arg_names)`` arguments
    whose last (the block width, any name) is a constexpr."""
    jit_types = tuple(t for t in (getattr(triton.runtime.jit, "JITFunction", None),
                                  getattr(triton.runtime.jit, "KernelInterface", None)) if t)
    if not isinstance(answer, jit_types) or not callable(getattr(answer, "fn", None)):
        raise Malformed(f"expected a kernel defined with @triton.jit, got {type(answer).__name__}. "
                        f"Define it in a cell (def my_kernel(...) under @triton.jit) and set "
                        f"answer = my_kernel.")
    names = tuple(inspect.signature(answer.fn).parameters)
    if len(names) != len(arg_names):
        raise Malformed(f"the kernel takes {len(names)} arguments ({', '.join(names)}); it must "
                        f"take {len(arg_names)}: ({', '.join(arg_names)}), {like}.")
    _block_parameter(answer)  # any name works (BLOCK_SIZE, BLOCK, ...), if it is a constexpr


def _grade_kernel(answer, focus: str) -> Feedback:
    check_kernel_form(answer)
    try:  # the interpreter's verdict, in a child process: the same on every machine
        audits = grader.run(answer, _audited_runs, CASES, cache=True)
    except grader.Failed as failed:
        return grader.failure_feedback(failed, "triton")
    audits = [own_inputs(a, *c, 0, CASE_EPS.get(c, EPS), **_case_data(*c))
              for a, c in zip(audits, CASES)]
    for i, (rows, cols) in enumerate(CASES):
        if isinstance(audits[i], BaseException):
            return _raised(audits[i], f"On {case_name(rows, cols)}")
        verdict = _diagnose(audits[i], audits[i], focus, f"On {case_name(rows, cols)}")
        if verdict is not None:
            return verdict
    on_gpu = env.current().on_gpu
    if on_gpu:  # the compiled kernel, too
        try:
            runs = grader.run(answer, _compiled_runs, CASES, device="gpu")
        except grader.Failed as failed:
            return grader.failure_feedback(failed, "triton")
        runs = [own_inputs(r, *c, 0, CASE_EPS.get(c, EPS), **_case_data(*c))
                for r, c in zip(runs, CASES)]
        for i, (rows, cols) in enumerate(CASES):
            where = f"On {case_name(rows, cols)} on the GPU"
            if isinstance(runs[i], BaseException):
                return _raised(runs[i], where)
            verdict = _diagnose(runs[i], audits[i], focus, where)
            if verdict is not None:
                return verdict
    shapes = ", ".join(case_name(r, c) for r, c in CASES)
    layout = f"row strides cols+{X_PAD} and cols+{Y_PAD}, a block wider than the row"
    audited = ("every load inside x's rows and w's values, padding never read, no stray stores, "
               "no program touching another's row" if all(a.audited for a in audits) else
               "no stray stores; this Triton's interpreter could not audit the loads")
    return correct(f"Your kernel matches the float64 reference on {shapes} ({layout}; {audited}), "
                   f"run in Triton's interpreter{' and compiled for the GPU' if on_gpu else ''}.")


def _raised(err: BaseException, where: str) -> Feedback:
    return wrong(f"{where} your kernel raised {one_line(err)}",
                 "Run it once by hand to see the whole error; compare each line with the kernel "
                 "you started from.")


fix_block_denominator = Exercise(
    "fix_block_denominator",
    "Fix the kernel that divides the sum of squares by BLOCK_SIZE; answer with your @triton.jit "
    "kernel (same arguments).",
    lambda a: _grade_kernel(a, "denominator"),
    solution=rmsnorm_row_kernel,
    mistakes={"divides by BLOCK_SIZE": kernel_divides_by_block,
              "no mask on the x load": kernel_without_mask,
              "masked x load without other=": kernel_x_without_other,
              "no mask on the weight load": kernel_weight_without_mask,
              "rows cols apart, stride ignored": kernel_rows_cols_apart,
              "sums the squares in x's dtype": kernel_sums_in_input_dtype})

fix_weight_load = Exercise(
    "fix_weight_load",
    "Fix the kernel that loads the weight as if it were a (rows, cols) matrix; answer with your "
    "@triton.jit kernel (same arguments).",
    lambda a: _grade_kernel(a, "weight"),
    solution=rmsnorm_row_kernel,
    mistakes={"weight indexed by row stride": kernel_weight_as_matrix,
              "weight indexed by row * cols": kernel_weight_rows_cols_apart,
              "no mask on the weight load": kernel_weight_without_mask,
              "masked x load without other=": kernel_x_without_other,
              "sums the squares in x's dtype": kernel_sums_in_input_dtype})


# ---- choose num_warps by measurement ----

# The seed's shape: there the book's rule (num_warps_for) picks 8 warps and the recorded H200 sweep
# has another setting faster by more than the tie band, so the rule is a real mistake here
# (tests/exercises/test_ch04.py checks that against the recorded file).
WARPS_ROWS, WARPS_COLS, WARPS_DTYPE = 1024, 4096, torch.float32
ALLOWED_WARPS = (1, 2, 4, 8, 16, 32)
SWEPT_WARPS = (4, 8, 16)  # what measure_num_warps and the recorded sweep time


def tie_band() -> float | None:
    """The difference the exercise counts as a tie: chapter 4's band, derived from the run-to-run
    spread of the recording the page reads (the reader's own where it exists, else the committed
    one; :func:`fusedrms.book.ch04.tie_band`). None when that recording has no repeated
    measurements. The same band judges the reader's medians and a fresh measurement."""
    try:
        docs = ch04_story.load(None)
        return chapter_tie_band(docs["warps"], docs["versions"])["band"]
    except (KeyError, TypeError, ValueError):  # a damaged file: no band, as with none recorded
        return None


class NotCheckedHere(Feedback):
    """Feedback for an exercise this machine cannot check (no GPU, no recorded results)."""

    def __str__(self) -> str:
        return "Not checked here. " + self.message + (f"\nHint: {self.hint}" if self.hint else "")

    __repr__ = __str__

    def _repr_html_(self) -> str:
        hint = f"<br><i>Hint:</i> {escape(self.hint)}" if self.hint else ""
        return ('<div style="border-left:4px solid #6b7280;padding:4px 10px"><b>Not checked '
                f"here.</b> {escape(self.message)}{hint}</div>")


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
    try:
        nw = as_number(answer["num_warps"], "num_warps (a whole number)")
    except Malformed:
        raise Malformed(f"num_warps must be a whole number of warps, one of {ALLOWED_WARPS}, got "
                        f"{answer['num_warps']!r}: e.g. answer = {{'num_warps': 8, 'timings_us': "
                        f"{{4: ..., 8: ..., 16: ...}}}}.") from None
    if (nw == int(nw) and int(nw) not in ALLOWED_WARPS and int(nw) % 32 == 0
            and int(nw) // 32 in ALLOWED_WARPS):
        raise Malformed(f"num_warps = {int(nw)} looks like threads: num_warps counts warps of 32 "
                        f"threads ({int(nw)} threads = {int(nw) // 32} warps).")
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
        return wrong(f"You chose {chosen} warps but timed only {sorted(timings)}.",
                     "Include the median of your choice in timings_us.")
    shape = f"{WARPS_ROWS}x{WARPS_COLS} {str(WARPS_DTYPE).replace('torch.', '')}"
    on_gpu = env.current().on_gpu
    found = None if on_gpu else recorded_warps()
    if not on_gpu and found is None:
        return NotCheckedHere(
            False, f"choosing num_warps needs a GPU to measure {shape}, or the recorded "
                   f"sweep (code/fusedrms/data/h200/triton_warps.json), and this machine has "
                   f"neither.")
    band = tie_band()
    if band is None:
        return NotCheckedHere(
            False, "a tie between settings is judged with the tie band chapter 4 derives from "
                   "repeated measurements, and the recording this page reads has none.",
            "Record chapter 4 on a GPU (python -m fusedrms.record --chapters 4); its sweep "
            "repeats every measurement.")
    best = min(timings, key=timings.get)
    if timings[chosen] > (1 + band) * timings[best]:
        return wrong(f"The medians you gave say {best} warps ({timings[best]:.2f} µs) beat "
                     f"{chosen} ({timings[chosen]:.2f} µs) by "
                     f"{timings[chosen] / timings[best] - 1:.1%}, more than the tie band of "
                     f"{band:.1%}.",
                     "Choose the fastest setting of your medians, or one within the tie band of "
                     "it, not what a rule or intuition says.")
    if on_gpu:
        measured = measure_num_warps(WARPS_ROWS, WARPS_COLS, WARPS_DTYPE,
                                     warps=tuple(sorted(set(timings) | set(SWEPT_WARPS))))
        source = "re-measured on this GPU"
    else:
        measured, doc = found
        missing = [k for k in timings if k not in measured]
        if missing:
            return wrong(f"The recorded sweep has no {listed(missing, 'or')} warps for {shape}.",
                         f"Use the recorded settings: {sorted(measured)}.")
        wrong_values = {k: t for k, t in timings.items()
                        if not math.isclose(t, measured[k], rel_tol=0.01)}
        if wrong_values:
            k, t = next(iter(wrong_values.items()))
            ratio = t / measured[k]
            if all(any(math.isclose(t, v, rel_tol=0.01) for v in measured.values())
                   for t in timings.values()):
                hint = ("Those are recorded medians, but under the wrong settings: each key is a "
                        "num_warps value and its value that setting's median.")
            elif 5e-4 < ratio < 2e-3:
                hint = ("That looks like milliseconds: timings_us takes microseconds "
                        "(multiply by 1000).")
            elif 500 < ratio < 2000:
                hint = "That looks like nanoseconds: timings_us takes microseconds (divide by 1000)."
            else:
                hint = "Copy the recorded medians printed above, in microseconds."
            return wrong(f"Your {k}-warp median {t:g} is not the recorded {measured[k]:g} µs.", hint)
        gpu = predictions.recorded_gpu(doc)
        source = f"the recorded {gpu.removeprefix('AMD ')} sweep"
    # the fastest of every setting measured, not only of those the answer lists: leaving out the
    # setting that wins is not a way to win
    other = min(measured, key=measured.get)
    fastest = measured[other]
    if measured[chosen] > (1 + band) * fastest:
        if other not in timings:
            return wrong(f"In {source}, {other} warps, which your timings leave out, took "
                         f"{fastest:.2f} µs and {chosen} took {measured[chosen]:.2f} µs.",
                         f"Time every setting ({', '.join(map(str, sorted(measured)))} warps) "
                         f"before choosing: the one you leave out may be the fastest.")
        return wrong(f"In {source}, {other} warps took {fastest:.2f} µs and {chosen} took "
                     f"{measured[chosen]:.2f} µs, {measured[chosen] / fastest - 1:.1%} more: "
                     f"beyond the tie band of {band:.1%}.",
                     "Measure again on an idle GPU; the ranking must hold in a fresh measurement.")
    return correct(f"{chosen} warps is as fast as the fastest setting for {shape} in {source}, "
                   f"within the tie band of {band:.1%} ({measured[chosen]:.2f} µs vs "
                   f"{fastest:.2f} µs).")


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


RULE_WARPS = num_warps_for(triton.next_power_of_2(WARPS_COLS))


def _warps_mistakes() -> dict:
    """Typical wrong answers, built from the recorded sweep (no medians typed here)."""
    mistakes = {"the rule, no measurement": {"num_warps": RULE_WARPS}}
    found = recorded_warps()
    if found is None:
        return mistakes
    times = found[0]
    best = min(times, key=times.get)
    slow = [k for k in times if times[k] > (1 + (tie_band() or 0.0)) * times[best]]
    if RULE_WARPS in slow:
        mistakes["the rule's choice against the medians"] = {"num_warps": RULE_WARPS, "timings_us": times}
    if max(times) in slow:
        mistakes["the biggest is best"] = {"num_warps": max(times), "timings_us": times}
    mistakes["one timing"] = {"num_warps": best, "timings_us": {best: times[best]}}
    mistakes["chosen one not timed"] = {"num_warps": best,
                                        "timings_us": {k: v for k, v in times.items() if k != best}}
    return mistakes


choose_num_warps = Exercise(
    "choose_num_warps",
    f"Choose num_warps for {WARPS_ROWS}x{WARPS_COLS} {str(WARPS_DTYPE).replace('torch.', '')} rows "
    f"and justify it with medians: answer = {{'num_warps': N, 'timings_us': {{4: ..., 8: ..., 16: ...}}}}.",
    _grade_warps,
    solution=None,  # depends on the machine: see warps_solution()
    mistakes=_warps_mistakes(),
    needs_gpu=True)

KERNEL_EXERCISES = [fix_block_denominator, fix_weight_load]
ALL = KERNEL_EXERCISES + [choose_num_warps]
