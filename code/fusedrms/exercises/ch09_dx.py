"""Chapter 9's dx as exercises: write its kernel from the formula, predict the backward's time.

- :data:`build_dx`: the reader writes ``dx = r (g - xhat mean(g xhat))`` with ``g = dy w`` and
  ``xhat = x r``, one program per row, ``r`` the row scale the forward saved. The grader launches
  it in Triton's interpreter (then compiled, on a GPU) on rows narrower than the block, exactly
  one block and a block much wider than the row, two num_warps, fp32 and bf16, with x and dy rows
  farther apart than their width (NaN between them), garbage after w and r, and sentinels around
  every dx row; loads and stores are audited (:mod:`.interpreter_audit`).
- :data:`predict_backward_time`: the reader predicts the two-stage backward's time at one shape
  before the page shows the recorded one; the checker says what the gap teaches.
"""
from __future__ import annotations

from .. import env  # noqa: F401 - first: the kernels below must be decorated in the right mode

import contextlib
import dataclasses
from dataclasses import dataclass, field

import torch
import triton
import triton.language as tl

from .. import checks, records, reference
from ..book.page import listed
from . import answers, grader, interpreter_audit, predictions
from .ch04 import _block_parameter, check_kernel_form, kernel_cases
from .core import Exercise, Feedback, Malformed, changed_output, correct, one_line, wrong

EPS = 1e-5
ARG_NAMES = ("x_ptr", "w_ptr", "dy_ptr", "rstd_ptr", "dx_ptr", "cols", "x_row_stride",
             "dy_row_stride", "dx_row_stride", "BLOCK_SIZE")
SIGNATURE = f"({', '.join(ARG_NAMES[:-1])}, BLOCK_SIZE: tl.constexpr)"

# ---------------------------------------------------------------- (a) write the dx kernel


# [book:dx-kernel]
@triton.jit
def solution_dx_kernel(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, cols,
                       x_row_stride, dy_row_stride, dx_row_stride,
                       BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0)
    dy = tl.load(dy_ptr + row * dy_row_stride + offsets, mask=mask, other=0.0)
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0)
    x, dy, w = x.to(tl.float32), dy.to(tl.float32), w.to(tl.float32)
    r = tl.load(rstd_ptr + row)  # the forward's saved row scale
    xhat = x * r
    g = dy * w
    # masked lanes add 0 to the sum; the mean divides by the real width
    mean_gx = tl.sum(g * xhat, axis=0) / cols
    dx = r * (g - xhat * mean_gx)
    dx_row = dx_ptr + row * dx_row_stride
    tl.store(dx_row + offsets, dx.to(dx_ptr.dtype.element_ty), mask=mask)
# [/book:dx-kernel]


@dataclass(frozen=True)
class Case:
    rows: int
    cols: int
    block: int
    num_warps: int
    dtype: torch.dtype = torch.float32

    def where(self) -> str:
        dtype = "" if self.dtype == torch.float32 else f" {str(self.dtype).removeprefix('torch.')}"
        return f"On {self.rows}x{self.cols}{dtype} with BLOCK_SIZE = {self.block}"


CASES = (
    Case(3, 13, 16, 4),  # narrower than the block
    Case(2, 16, 16, 2),  # exactly one block
    Case(4, 100, 256, 1),  # a block 2.56 times the row: BLOCK is no stand-in for cols
    Case(2, 40, 64, 2, torch.bfloat16),  # fp32 inside, one cast at the store
)
PADS = {"x": 3, "dy": 2, "dx": 1}  # each row stride is cols + its pad
FILL = float("nan")  # between rows of x and dy: what a load past a row reads
W_FILL = 7.0  # after w's cols values and r's rows values
SENTINEL = -12288.0  # around every dx row (exact in fp32 and bf16)


@dataclass
class DxRun:
    case: Case
    x: torch.Tensor
    w: torch.Tensor
    dy: torch.Tensor
    r: torch.Tensor  # (rows, 1) fp32: the saved row scale
    dx: torch.Tensor  # (rows, cols) as the kernel wrote it
    stray_stores: int
    audited: bool = False
    outside_reads: int = 0  # unmasked reads past a row of x or dy, or past w's or r's values
    undefined_lanes: bool = False
    races: list = field(default_factory=list)


def case_inputs(case: Case) -> tuple:
    """x, dy, w and the saved r of ``case``, the same in every process."""
    g = torch.Generator().manual_seed(case.rows * 1000 + case.cols)
    x = torch.randn(case.rows, case.cols, generator=g).to(case.dtype)
    dy = torch.randn(case.rows, case.cols, generator=g).to(case.dtype)
    w = torch.randn(case.cols, generator=g).to(case.dtype)
    r = reference.row_scale(x, EPS, torch.float32).float()  # what the forward saved
    return x, dy, w, r


def _own_inputs(run, case: Case):
    """``run`` (from the grader's child) with the inputs made here: the child's copies are within
    the reach of the reader's kernel, so the reference is computed from these."""
    if not isinstance(run, DxRun):
        return run
    changed = changed_output(case.rows, case.cols, run.dx.shape)
    if changed is not None:
        return changed
    x, dy, w, r = case_inputs(case)
    return dataclasses.replace(run, case=case, x=x, dy=dy, w=w, r=r)


def _launch(kernel, case: Case, device, audit: bool) -> DxRun:
    rows, cols, block = case.rows, case.cols, case.block
    x, dy, w, r = case_inputs(case)
    strides = {k: cols + pad for k, pad in PADS.items()}
    slack = block + cols  # a mis-indexed load reads padding, never memory it does not own

    def rows_buffer(values, name, fill):
        buf = torch.full((rows * strides[name] + slack,), fill, dtype=case.dtype)
        if values is not None:
            buf[: rows * strides[name]].view(rows, strides[name])[:, :cols] = values
        return buf

    x_buf, dy_buf = rows_buffer(x, "x", FILL), rows_buffer(dy, "dy", FILL)
    dx_buf = rows_buffer(None, "dx", SENTINEL)
    w_buf = torch.full((cols + slack,), W_FILL, dtype=case.dtype)
    w_buf[:cols] = w
    r_buf = torch.full((rows + slack,), W_FILL)
    r_buf[:rows] = r.flatten()
    bufs = [b.to(device) for b in (x_buf, w_buf, dy_buf, r_buf, dx_buf)]
    block_name = _block_parameter(kernel)
    with interpreter_audit.audited() if audit else contextlib.nullcontext() as log:
        kernel[(rows,)](*bufs, cols, strides["x"], strides["dy"], strides["dx"],
                        **{block_name: block, "num_warps": case.num_warps})
    dx_buf = bufs[-1].cpu()
    inside = torch.zeros_like(dx_buf, dtype=torch.bool)
    inside[: rows * strides["dx"]].view(rows, strides["dx"])[:, :cols] = True
    stray = int((~inside & (dx_buf != SENTINEL)).sum())
    dx = dx_buf[: rows * strides["dx"]].view(rows, strides["dx"])[:, :cols].clone()
    run = DxRun(case, x, w, dy, r, dx, stray)
    if log is not None and log.usable and log.launches:
        launch = log.launches[-1]
        loads = launch.loads()
        run.audited = True
        run.undefined_lanes = any(a.undefined_lanes for a in loads)
        run.outside_reads = launch.outside_loads + _reads_past(loads, bufs, strides, rows, cols)
        run.stray_stores += launch.outside_stores
        run.races = launch.races()
    return run


def _reads_past(loads, bufs, strides, rows, cols) -> int:
    """Unmasked reads in the padding: past a row of x or dy, past w's cols or r's rows values."""
    x_buf, w_buf, dy_buf, r_buf, _ = bufs
    found = 0
    for load in loads:
        for buf, stride, limit in ((x_buf, strides["x"], None), (dy_buf, strides["dy"], None),
                                   (w_buf, None, cols), (r_buf, None, rows)):
            start, size = buf.data_ptr(), buf.element_size()
            here = (load.addresses >= start) & (load.addresses < start + buf.numel() * size)
            index = (load.addresses[here] - start) // size
            if stride is None:
                found += int((index >= limit).sum())
            else:
                found += int(((index >= rows * stride) | (index % stride >= cols)).sum())
    return found


def audited_runs(kernel, cases=CASES) -> list:
    """(In the grader's child) each case in Triton's interpreter, audited; or what it raised."""
    return _runs(kernel, cases, "cpu")


def compiled_runs(kernel, cases=CASES) -> list:
    """(In the grader's GPU child) each case compiled for the GPU."""
    return _runs(kernel, cases, "gpu")


def _runs(kernel, cases, device: str) -> list:
    return kernel_cases(kernel, cases, device, _launch)


def _models(run: DxRun) -> dict:
    """dx as each typical mistake computes it (float64)."""
    x, w, dy, r = (t.double() for t in (run.x, run.w, run.dy, run.r))
    cols, block = run.case.cols, run.case.block
    xhat, g = x * r, dy * w
    dot = (g * xhat).sum(-1, keepdim=True)
    dot_x = (g * x).sum(-1, keepdim=True)
    return {"no_mean": r * g,
            "block": r * (g - xhat * dot / block),
            "sum": r * (g - xhat * dot),
            "no_w_projection": r * (g - xhat * (dy * xhat).sum(-1, keepdim=True) / cols),
            "no_w": r * (dy - xhat * (dy * xhat).sum(-1, keepdim=True) / cols),
            "r_once": r * g - r * x * dot_x / cols,
            "r_squared": r * g - r * r * x * dot_x / cols,
            "plus": r * (g + xhat * dot / cols),
            "forward": x * r * w}


MODEL_MISTAKES = {
    "no_mean": ("r·g, as if r were a constant",
                "r depends on every x of the row: dx = r·(g − xhat·mean(g·xhat)). Compute the "
                "mean with tl.sum(g * xhat, axis=0) / cols and subtract xhat times it."),
    "block": ("the mean taken over BLOCK_SIZE instead of cols",
              "The masked lanes add 0 to the sum but are not columns: divide tl.sum(g * xhat) by "
              "cols, the row's width."),
    "sum": ("the sum of g·xhat where its mean belongs",
            "Divide the dot product by cols: mean(g·xhat) = tl.sum(g * xhat, axis=0) / cols."),
    "no_w_projection": ("the mean of dy·xhat where g·xhat belongs (w left out of the second term)",
                        "Both terms use g = dy·w: the second is xhat·mean(g·xhat)."),
    "no_w": ("the formula with g = dy (w left out)",
             "The output gradient reaches xhat through w: g = dy * w, in both terms."),
    "r_once": ("r·(g − x·mean(g·x)), with r where r³ belongs",
               "Written with x instead of xhat the second term is r³·x·mean(g·x): use xhat = x·r "
               "in both places, dx = r·(g − xhat·mean(g·xhat)), and the r² comes with it."),
    "r_squared": ("r·g − r²·x·mean(g·x), with r² where r³ belongs",
                  "With x instead of xhat the second term needs r³: write it with xhat = x·r, "
                  "dx = r·(g − xhat·mean(g·xhat))."),
    "plus": ("the second term added instead of subtracted",
             "Increasing x_j raises mean(x²) and lowers r: the term through r enters with a "
             "minus sign."),
    "forward": ("y = x·r·w, the forward's output",
                "The backward maps dy to dx: dx = r·(g − xhat·mean(g·xhat)) with g = dy·w."),
}
FP32_HINT = ("Compute in fp32: convert x, dy and w with .to(tl.float32) right after their loads "
             "and cast once, at the store (dx.to(dx_ptr.dtype.element_ty)).")
STRIDE_HINT = ("Row 0 is right and the others are not: rows of x, dy and dx lie x_row_stride, "
               "dy_row_stride and dx_row_stride elements apart (more than cols here), and r is "
               "one value per row at rstd_ptr + row; w never moves with the row.")
MASK_HINT = ("Mask every load and store with mask = offsets < cols, and give the x and dy loads "
             "other=0.0: the lanes past the row must add 0 to the sum.")


def diagnose(run: DxRun, audit: DxRun, where: str) -> Feedback | None:
    """What is wrong with ``run`` (its loads audited in ``audit``), or None when it is right."""
    cols = run.case.cols
    ref = reference.rmsnorm_backward(run.x, run.w, run.dy, EPS, accum=torch.float64,
                                     rows_scale=run.r)
    fin = torch.finfo(run.dx.dtype)

    def close(got, expected, rows=slice(None)):
        return checks.allclose(got[rows], expected[rows], n=cols, atol=2 * fin.tiny * fin.eps,
                               scale=ref["dx_scale"][rows])

    if audit.races:
        return wrong(f"{where} {audit.races[0]}. On a GPU the programs run at the same time, in "
                     f"any order, so which value stays is a race.",
                     "Each program stores only its own row (dx_ptr + row * dx_row_stride).")
    report = close(run.dx, ref["dx"])
    if run.case.rows > 1 and close(run.dx, ref["dx"], slice(0, 1)) and (
            run.stray_stores or not report):
        return wrong(f"{where} row 0 of dx is right and the rows after it are not.", STRIDE_HINT)
    if run.stray_stores:
        return wrong(f"{where} your kernel wrote {run.stray_stores} values outside dx's rows.",
                     MASK_HINT)
    unwritten = [i for i in range(run.case.rows) if bool((run.dx[i] == SENTINEL).any())]
    if unwritten:
        return wrong(f"{where} your kernel left {'row' if len(unwritten) == 1 else 'rows'} "
                     f"{listed(unwritten)} of dx (partly) unwritten.",
                     "One program per row: row = tl.program_id(0); store all cols values of "
                     "dx at dx_ptr + row * dx_row_stride + offsets.")
    if report and close(audit.dx, ref["dx"]):
        if audit.outside_reads:
            return wrong(f"{where} dx is right, but your kernel reads past its inputs "
                         f"({audit.outside_reads} unmasked reads past a row, w or r): on a GPU "
                         f"those lanes read memory the tensors do not own.", MASK_HINT)
        return None
    failed = report.message if not report else "in the interpreter's run"
    if audit.undefined_lanes and not torch.isfinite(audit.dx).all():
        return wrong(f"{where} a masked load without other= leaves the lanes it skips undefined "
                     f"(the checker fills them with NaN), and they reach the sum.", MASK_HINT)
    if audit.outside_reads and not torch.isfinite(audit.dx).all():
        return wrong(f"{where} your kernel reads past the end of a row ({audit.outside_reads} "
                     f"loads), and those values reach dx ({failed}).", MASK_HINT)
    models = _models(run)
    for key, (what, hint) in MODEL_MISTAKES.items():
        if close(run.dx, models[key]):
            return wrong(f"{where} dx matches {what} ({failed}).", hint)
    if run.case.dtype != torch.float32:
        return wrong(f"{where} dx is wrong ({failed}), and it was right on every fp32 case.",
                     FP32_HINT)
    return wrong(f"{where} dx differs from the formula: {failed}",
                 "xhat = x·r, g = dy·w, m = tl.sum(g * xhat, axis=0) / cols, "
                 "dx = r·(g − xhat·m); loads masked with other=0.0, fp32 throughout.")


def _grade_dx(answer) -> Feedback:
    check_kernel_form(answer, ARG_NAMES, like=f"the signature {SIGNATURE}")
    try:  # the interpreter's verdict, in a child process: the same on every machine
        audits = grader.run(answer, audited_runs, CASES, cache=True)
    except grader.Failed as failed:
        return grader.failure_feedback(failed, "triton")
    audits = [_own_inputs(a, case) for a, case in zip(audits, CASES)]
    for case, audit in zip(CASES, audits):
        if isinstance(audit, BaseException):
            return _raised(audit, case.where())
        verdict = diagnose(audit, audit, case.where())
        if verdict is not None:
            return verdict
    on_gpu = env.current().on_gpu
    if on_gpu:
        try:
            runs = grader.run(answer, compiled_runs, CASES, device="gpu")
        except grader.Failed as failed:
            return grader.failure_feedback(failed, "triton")
        runs = [_own_inputs(r, case) for r, case in zip(runs, CASES)]
        for case, run, audit in zip(CASES, runs, audits):
            where = f"{case.where()} on the GPU"
            if isinstance(run, BaseException):
                return _raised(run, where)
            verdict = diagnose(run, audit, where)
            if verdict is not None:
                return verdict
    shapes = ", ".join(f"{c.rows}x{c.cols} (BLOCK_SIZE {c.block})" for c in CASES)
    return correct(f"Your dx matches the float64 formula on {shapes}, the last in bf16; rows "
                   f"farther apart than their width, every load inside its tensor, no stray "
                   f"stores; run in Triton's interpreter"
                   f"{' and compiled for the GPU' if on_gpu else ''}.")


def _raised(err: BaseException, where: str) -> Feedback:
    return wrong(f"{where} your kernel raised {one_line(err)}",
                 "Run it once by hand to see the whole error: launch it as "
                 "kernel[(rows,)](x, w, dy, r, dx, cols, x.stride(0), dy.stride(0), dx.stride(0), "
                 "BLOCK_SIZE=...).")


# ---- typical mistakes, each its own hint ----

@triton.jit
def dx_without_mean_term(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, cols, x_row_stride,
                         dy_row_stride, dx_row_stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    dy = tl.load(dy_ptr + row * dy_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(rstd_ptr + row)
    dx = r * dy * w  # r treated as a constant
    tl.store(dx_ptr + row * dx_row_stride + offsets, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def dx_mean_over_block(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, cols, x_row_stride,
                       dy_row_stride, dx_row_stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * dy_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(rstd_ptr + row)
    xhat, g = x * r, dy * w
    dx = r * (g - xhat * tl.sum(g * xhat, axis=0) / BLOCK_SIZE)  # the block, not the row
    tl.store(dx_ptr + row * dx_row_stride + offsets, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def dx_projection_without_w(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, cols, x_row_stride,
                            dy_row_stride, dx_row_stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * dy_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(rstd_ptr + row)
    xhat = x * r
    dx = r * (dy * w - xhat * tl.sum(dy * xhat, axis=0) / cols)  # dy, not g, in the mean
    tl.store(dx_ptr + row * dx_row_stride + offsets, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def dx_rstd_once(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, cols, x_row_stride,
                 dy_row_stride, dx_row_stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * dy_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(rstd_ptr + row)
    g = dy * w
    dx = r * (g - x * tl.sum(g * x, axis=0) / cols)  # x where xhat belongs: r, not r cubed
    tl.store(dx_ptr + row * dx_row_stride + offsets, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def dx_without_other(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, cols, x_row_stride,
                     dy_row_stride, dx_row_stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask).to(tl.float32)  # undefined lanes
    dy = tl.load(dy_ptr + row * dy_row_stride + offsets, mask=mask).to(tl.float32)
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(rstd_ptr + row)
    xhat, g = x * r, dy * w
    dx = r * (g - xhat * tl.sum(g * xhat, axis=0) / cols)
    tl.store(dx_ptr + row * dx_row_stride + offsets, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def dx_in_input_dtype(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, cols, x_row_stride,
                      dy_row_stride, dx_row_stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0)  # no upcast
    dy = tl.load(dy_ptr + row * dy_row_stride + offsets, mask=mask, other=0.0)
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0)
    r = tl.load(rstd_ptr + row).to(x_ptr.dtype.element_ty)
    xhat, g = x * r, dy * w
    dx = r * (g - xhat * tl.sum(g * xhat, axis=0) / cols)
    tl.store(dx_ptr + row * dx_row_stride + offsets, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def dx_rows_cols_apart(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, cols, x_row_stride,
                       dy_row_stride, dx_row_stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    x = tl.load(x_ptr + row * cols + offsets, mask=mask, other=0.0).to(tl.float32)  # strides
    dy = tl.load(dy_ptr + row * cols + offsets, mask=mask, other=0.0).to(tl.float32)  # ignored
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(rstd_ptr + row)
    xhat, g = x * r, dy * w
    dx = r * (g - xhat * tl.sum(g * xhat, axis=0) / cols)
    tl.store(dx_ptr + row * cols + offsets, dx.to(dx_ptr.dtype.element_ty), mask=mask)


build_dx = Exercise(
    "build_dx",
    f"Write the dx kernel my_dx_kernel{SIGNATURE}: one program per row, r the forward's saved "
    f"row scale at rstd_ptr + row (fp32), dx = r·(g − xhat·mean(g·xhat)) with xhat = x·r and "
    f"g = dy·w, computed in fp32 and stored in dx's dtype. Answer with the kernel.",
    _grade_dx,
    solution=solution_dx_kernel,
    mistakes={"the mean term dropped": dx_without_mean_term,
              "mean over BLOCK_SIZE": dx_mean_over_block,
              "w forgotten in the projection": dx_projection_without_w,
              "r instead of r cubed": dx_rstd_once,
              "masked loads without other=": dx_without_other,
              "bf16 arithmetic": dx_in_input_dtype,
              "rows cols apart, strides ignored": dx_rows_cols_apart})


# ---------------------------------------------------------------- (b) predict the backward's time

PREDICT_ROWS, PREDICT_COLS, PREDICT_DTYPE = 1024, 4096, "bf16"
CLOSE = 0.10  # a prediction within 10% of the recorded median is a good one


def recorded_backward() -> dict | None:
    """The committed recording's two-stage backward (rmsnorm, saved r) at the prediction's shape:
    its record (``us``, ``floor_us``, ``bytes``, ``programs``) and the GPU's name, or None."""
    try:
        doc = records.load("ch09_backward", records.COMMITTED)
    except (FileNotFoundError, ValueError):
        return None
    for r in doc.get("records", []):
        if (r.get("kind"), r.get("op"), r.get("impl"), r.get("rows"), r.get("cols"),
                r.get("dtype")) == ("backward", "rmsnorm", "two_stage", PREDICT_ROWS,
                                    PREDICT_COLS, PREDICT_DTYPE) and r.get("us"):
            return {**r, "gpu": predictions.recorded_gpu(doc)}
    return None


def _grade_time(answer) -> Feedback:
    reading = answers.read(answer, "a time in microseconds", answers.TIME_US)
    value = reading.value
    if value <= 0:
        raise Malformed(f"a time is positive, got {value:g} µs.")
    found = recorded_backward()
    if found is None:
        return predictions.recording_missing()
    us, floor = found["us"], found["floor_us"]
    partials = 2 * found["programs"] * PREDICT_COLS * 4 / found["bytes"]
    said = (f"The {found['gpu']} recorded {us:.1f} µs; its floor, {found['bytes']:,} bytes at "
            f"the copy bandwidth, is {floor:.1f} µs ({100 * floor / us:.0f}% of floor).")
    if answers.close(value, us, CLOSE):
        return correct(f"You predicted {value:.1f} µs. {said}")
    if value < floor * (1 - CLOSE):
        return wrong(f"You predicted {value:.1f} µs. {said}",
                     "No kernel beats the time its bytes take at the copy bandwidth: count x and "
                     "dy read, dx written (2 bytes each in bf16), the partials written and read, "
                     "w, r and dw.")
    if value < us:
        return wrong(f"You predicted {value:.1f} µs. {said}",
                     f"The gap is the lesson: the bytes take a few microseconds, so the fixed "
                     f"cost of two launches weighs, the partials are {partials:.0%} of the "
                     f"bytes, and with only a few programs per SM each program's row loop must "
                     f"keep enough loads in flight.")
    return wrong(f"You predicted {value:.1f} µs. {said}",
                 f"It ran faster than that: its bytes take {floor / value:.0%} of your time at "
                 f"the copy bandwidth, and everything else took {us - floor:.1f} µs.")


def _time_solution() -> float | None:
    found = recorded_backward()
    return None if found is None else round(found["us"], 1)


def _time_mistakes() -> dict:
    found = recorded_backward()
    if found is None:
        return {}
    return {"the floor": round(found["floor_us"], 2),
            "half the floor": round(found["floor_us"] / 2, 2),
            "ten times the floor": round(10 * found["floor_us"], 1)}


predict_backward_time = Exercise(
    "predict_backward_time",
    f"Predict the fused backward's time (two-stage dw, saved r) at {PREDICT_ROWS}x{PREDICT_COLS} "
    f"{PREDICT_DTYPE} on the H200, in µs.",
    _grade_time,
    solution=_time_solution(),
    mistakes=_time_mistakes())

ALL = [build_dx, predict_backward_time]
