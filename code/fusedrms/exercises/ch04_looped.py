"""Chapter 4's looped kernel as exercises: write it from its specification, predict its cost.

- :data:`build_looped`: the reader writes the looped row kernel (a row wider than one block: pass 1
  sums the squares over BLOCK-wide chunks in fp32, pass 2 reads x again and stores x * r * w) with
  the row kernel's signature. The grader launches it with BLOCK given, on rows narrower than one
  block, exactly one block, whole multiples of it and a ragged last chunk, with two num_warps, and
  on bf16 rows long enough that a bf16 sum of squares goes wrong; buffers as in :mod:`.ch04`
  (strided rows, NaN padding, sentinels around every output row), audited in the interpreter,
  then compiled on a GPU.
- :data:`predict_looped_cost`: the reader predicts the looped kernel's time over the row kernel's
  at the widest row the row kernel holds, before the page shows the recorded ratio; the checker
  says what the gap between the two teaches.
"""
from __future__ import annotations

from .. import env  # noqa: F401 - first: the kernels below must be decorated in the right mode

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .. import checks, records, reference
from ..book.ch04 import version_ratios
from ..book.page import listed
from ..kernels.rmsnorm import ROW_MAX_COLS, rmsnorm_looped_kernel
from . import answers, grader, predictions
from .ch04 import (ARG_NAMES, ARITHMETIC_MISTAKES, EPS, SENTINEL, KernelRun, _launch, _models,
                   check_kernel_form, fixed_width)
from .core import Exercise, Feedback, correct, one_line, wrong

# ---------------------------------------------------------------- (a) write the looped kernel


@dataclass(frozen=True)
class Case:
    rows: int
    cols: int
    block: int  # the BLOCK the grader passes
    num_warps: int
    dtype: torch.dtype = torch.float32
    eps: float = EPS
    spiked: bool = False  # x = ±1, and 16 in the first chunk (see :func:`spiked_rows`)

    def where(self) -> str:
        dtype = "" if self.dtype == torch.float32 else f" {str(self.dtype).removeprefix('torch.')}"
        return f"On {self.rows}x{self.cols}{dtype} with BLOCK = {self.block}"


CASES = (
    Case(3, 13, 16, 4),  # narrower than one block
    Case(2, 16, 16, 2),  # exactly one block
    Case(3, 64, 16, 4),  # four whole blocks: no ragged chunk
    Case(4, 100, 32, 2, eps=0.25),  # a ragged last chunk; the caller's own eps
    Case(2, 68, 4, 1, torch.bfloat16, spiked=True),  # a bf16 sum of squares stalls here
    Case(2, 1100, 128, 4),  # wider than a block a kernel could hard-code (512, 1024)
)
SIGNATURE = f"({', '.join(ARG_NAMES[:-1])}, BLOCK_SIZE: tl.constexpr)"

MASK_HINT = ("The last chunk runs past the row when cols is not a multiple of BLOCK: give every "
             "load and store in both loops mask = cols_here < cols (cols_here = start + "
             "tl.arange(0, BLOCK)), and the x loads other=0.0.")
STRIDE_HINT = ("Row 0 is right and the others are not: rows lie x_row_stride (x) and y_row_stride "
               "(y) elements apart, more than cols here; the weight pointer never moves with the "
               "row.")
BLOCK_HINT = ("Walk the row in chunks of the BLOCK_SIZE the launch passes, in both passes: for "
              "start in range(0, cols, BLOCK_SIZE), offsets = start + tl.arange(0, BLOCK_SIZE). "
              "The launch chooses it (narrower than the row here); a width written into the "
              "kernel ignores that choice.")
FP32_HINT = ("Accumulate in fp32: convert each x chunk with .to(tl.float32) right after its load "
             "and keep the sum of squares in an fp32 accumulator (tl.zeros([BLOCK], "
             "dtype=tl.float32), or a scalar 0.0). A bf16 sum stops growing once its steps are "
             "wider than a square.")


def spiked_rows(rows: int, cols: int, block: int, generator) -> torch.Tensor:
    """x = ±1 with 16 in the first chunk: each lane's sum of squares starts at 256, where bf16's
    steps are 2 wide, so a bf16 accumulator rounds every later + 1 away (257 is a tie: 256) and
    the row's mean square comes out several percent low; fp32 adds them exactly."""
    x = torch.randn(rows, cols, generator=generator).sign()
    x[x == 0] = 1.0
    x[:, :block] *= 16
    return x


def _run(kernel, case: Case, device, audit: bool) -> KernelRun:
    return _launch(kernel, case.rows, case.cols, 0, audit, device, case.eps, block=case.block,
                   num_warps=case.num_warps, dtype=case.dtype,
                   x_values=spiked_rows if case.spiked else None)


def _own_inputs(run, case: Case):
    """``run`` judged against the case as made here (:func:`.ch04.own_inputs`), not the child's."""
    from .ch04 import own_inputs

    return own_inputs(run, case.rows, case.cols, 0, case.eps, case.block, case.dtype,
                      spiked_rows if case.spiked else None)


def _runs(kernel, cases, device: str) -> list:
    """(In the grader's child) each case's KernelRun, or what the kernel raised (then no more)."""
    from .ch04 import kernel_cases

    return kernel_cases(kernel, cases, device, _run)


def audited_runs(kernel, cases=CASES) -> list:
    """(In the grader's child) :func:`_runs` in Triton's interpreter, loads and stores audited."""
    return _runs(kernel, cases, "cpu")


def compiled_runs(kernel, cases=CASES) -> list:
    """(In the grader's GPU child) :func:`_runs` compiled for the GPU."""
    return _runs(kernel, cases, "gpu")


def _looped_models(run: KernelRun) -> dict:
    """What the looped kernel's own typical mistakes produce on this case."""
    x64, w64 = run.x.double(), run.w.double()
    chunks = math.ceil(run.cols / run.block)

    def scaled(sum_squares, denominator):
        return x64 * torch.rsqrt(sum_squares / denominator + run.eps) * w64

    squares = x64 * x64
    return {"first_chunk": scaled(squares[:, :run.block].sum(-1, keepdim=True), run.cols),
            "last_chunk": scaled(squares[:, (chunks - 1) * run.block:].sum(-1, keepdim=True),
                                 run.cols),
            "padded": scaled(squares.sum(-1, keepdim=True), chunks * run.block)}


LOOPED_MISTAKES = {
    "first_chunk": ("summing the squares of the first chunk only",
                    "Pass 1 must walk the whole row: for start in range(0, cols, BLOCK), adding "
                    "each chunk's squares to the accumulator."),
    "last_chunk": ("keeping the last chunk's squares only",
                   "Add each chunk's squares to the accumulator (acc += x * x); assigning it "
                   "(acc = x * x) keeps only the last chunk."),
    "padded": ("dividing the sum of squares by the padded width, chunks x BLOCK",
               "The masked lanes of the last chunk add 0 but are not columns: divide by cols."),
}


def diagnose(run: KernelRun, audit: KernelRun, case: Case, where: str) -> Feedback | None:
    """What is wrong with ``run`` (its loads audited in ``audit``), or None when it is right."""
    expected = reference.rmsnorm(run.x, run.w, run.eps, accum=torch.float64)
    if audit.races:
        return wrong(f"{where} {audit.races[0]}. On a GPU the programs run at the same time, in "
                     f"any order, so which value stays is a race.",
                     "Each program stores only its own row (y_ptr + row * y_row_stride).")
    lanes = max((load.addresses.size for load in audit.loads), default=0)
    if lanes > run.block:
        return wrong(f"{where} one load of your kernel takes {lanes} lanes at once, more than "
                     f"the BLOCK_SIZE = {run.block} the launch passes: its chunks are not "
                     f"BLOCK_SIZE wide.", BLOCK_HINT)
    width = fixed_width(run)
    if width is not None:
        return wrong(f"{where} your kernel wrote only the first {width} of each row's "
                     f"{run.cols} columns, as lanes of a fixed tl.arange(0, {width}) without a "
                     f"loop would.", BLOCK_HINT)
    if run.rows > 1 and checks.allclose(run.y[:1], expected[:1]) and (
            run.stray_stores or not checks.allclose(run.y[1:], expected[1:])):
        return wrong(f"{where} row 0 is right and the rows after it are not.", STRIDE_HINT)
    if run.stray_stores:
        return wrong(f"{where} your kernel wrote {run.stray_stores} values outside the rows' "
                     f"columns.", MASK_HINT)
    unwritten = [i for i in range(run.rows) if bool((run.y[i] == SENTINEL).all())]
    if unwritten:
        return wrong(f"{where} your kernel never wrote {'row' if len(unwritten) == 1 else 'rows'} "
                     f"{listed(unwritten)} of {run.rows}.",
                     "Each program handles one row: row = tl.program_id(0), its x at "
                     "x_ptr + row * x_row_stride and its output at y_ptr + row * y_row_stride.")
    holes = (run.y == SENTINEL).any(0).nonzero().flatten().tolist()
    if holes:
        return wrong(f"{where} columns {holes[0]} to {holes[-1]} were never written.",
                     "Pass 2 walks the whole row too, chunk by chunk: load x and w, store "
                     "x * r * w at every start in range(0, cols, BLOCK).")
    report = checks.allclose(run.y, expected)
    if report and checks.allclose(audit.y, expected):
        if audit.past_w:
            return wrong(f"{where} the output is right, but your kernel loads the weight past "
                         f"its {run.cols} values ({audit.past_w} reads without a mask): on a GPU "
                         f"those lanes read memory w does not own.", MASK_HINT)
        return None
    failed = report.message if not report else "in the interpreter's run"
    if any(load.undefined_lanes for load in audit.loads) and not torch.isfinite(audit.y).all():
        return wrong(f"{where} a masked load without other= leaves the lanes it skips undefined "
                     f"(the checker fills them with NaN), and they reach the output.",
                     "Give the x loads other=0.0: the lanes past the row must add 0 to the sum "
                     "of squares.")
    if audit.outside_x:
        return wrong(f"{where} your kernel reads x past the end of its row ({audit.outside_x} "
                     f"loads), and those values reach the output ({failed}).", MASK_HINT)
    models = {**_models(run), **_looped_models(run)}
    if checks.allclose(run.y, models["block"]):
        return wrong(f"{where} the output is what dividing the sum of squares by BLOCK = "
                     f"{run.block} gives ({failed}).",
                     f"The mean square divides by the row's width, cols = {run.cols}, whatever "
                     f"the chunk size.")
    for key, (what, hint) in {**LOOPED_MISTAKES, **ARITHMETIC_MISTAKES}.items():
        if key in models and checks.allclose(run.y, models[key]):
            return wrong(f"{where} the output is what {what} gives ({failed}).", hint)
    if case.dtype != torch.float32:
        return wrong(f"{where} the output is wrong ({failed}), and it was right on every fp32 "
                     f"case.", FP32_HINT)
    return wrong(f"{where} the output differs from the reference: {failed}",
                 "Pass 1: acc += x * x over every chunk (fp32, masked, other=0.0); then "
                 "r = rsqrt(sum(acc) / cols + eps). Pass 2: y = x * r * w over every chunk, "
                 "stored with the mask.")


def _grade_looped(answer) -> Feedback:
    check_kernel_form(answer, like=f"the row kernel's signature {SIGNATURE}")
    try:  # the interpreter's verdict, in a child process: the same on every machine
        audits = grader.run(answer, audited_runs, CASES, cache=True)
    except grader.Failed as failed:
        return grader.failure_feedback(failed, "triton")
    audits = [_own_inputs(a, case) for a, case in zip(audits, CASES)]
    for case, audit in zip(CASES, audits):
        if isinstance(audit, BaseException):
            return _raised(audit, case.where())
        verdict = diagnose(audit, audit, case, case.where())
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
            verdict = diagnose(run, audit, case, where)
            if verdict is not None:
                return verdict
    shapes = ", ".join(f"{c.rows}x{c.cols} (BLOCK {c.block}"
                       f"{'' if c.dtype == torch.float32 else ', ' + str(c.dtype)[6:]})"
                       for c in CASES)
    return correct(f"Your looped kernel matches the float64 reference on {shapes}; rows farther "
                   f"apart than their width, chunks as wide as the BLOCK given, every load inside "
                   f"the rows, no "
                   f"stray stores; run in Triton's interpreter"
                   f"{' and compiled for the GPU' if on_gpu else ''}.")


def _raised(err: BaseException, where: str) -> Feedback:
    return wrong(f"{where} your kernel raised {one_line(err)}",
                 "Run it once by hand to see the whole error (a loop-carried variable must keep "
                 "its type: start an fp32 accumulator as fp32).")


# ---- typical mistakes, each its own hint ----

@triton.jit
def looped_without_mask(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                        BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, cols, BLOCK_SIZE):
        x = tl.load(x_ptr + row * x_row_stride + start + offsets).to(tl.float32)  # past the row
        acc += x * x
    r = tl.rsqrt(tl.sum(acc, axis=0) / cols + eps)
    for start in range(0, cols, BLOCK_SIZE):
        mask = start + offsets < cols
        x = tl.load(x_ptr + row * x_row_stride + start + offsets, mask=mask, other=0.0)
        w = tl.load(w_ptr + start + offsets, mask=mask, other=0.0)
        y = x.to(tl.float32) * r * w.to(tl.float32)
        tl.store(y_ptr + row * y_row_stride + start + offsets, y.to(y_ptr.dtype.element_ty),
                 mask=mask)


@triton.jit
def looped_without_other(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                         BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, cols, BLOCK_SIZE):
        mask = start + offsets < cols
        x = tl.load(x_ptr + row * x_row_stride + start + offsets, mask=mask)  # lanes undefined
        acc += x.to(tl.float32) * x.to(tl.float32)
    r = tl.rsqrt(tl.sum(acc, axis=0) / cols + eps)
    for start in range(0, cols, BLOCK_SIZE):
        mask = start + offsets < cols
        x = tl.load(x_ptr + row * x_row_stride + start + offsets, mask=mask, other=0.0)
        w = tl.load(w_ptr + start + offsets, mask=mask, other=0.0)
        y = x.to(tl.float32) * r * w.to(tl.float32)
        tl.store(y_ptr + row * y_row_stride + start + offsets, y.to(y_ptr.dtype.element_ty),
                 mask=mask)


@triton.jit
def looped_divides_by_block(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                            BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, cols, BLOCK_SIZE):
        mask = start + offsets < cols
        x = tl.load(x_ptr + row * x_row_stride + start + offsets, mask=mask, other=0.0)
        acc += x.to(tl.float32) * x.to(tl.float32)
    r = tl.rsqrt(tl.sum(acc, axis=0) / BLOCK_SIZE + eps)  # the chunk, not the row
    for start in range(0, cols, BLOCK_SIZE):
        mask = start + offsets < cols
        x = tl.load(x_ptr + row * x_row_stride + start + offsets, mask=mask, other=0.0)
        w = tl.load(w_ptr + start + offsets, mask=mask, other=0.0)
        y = x.to(tl.float32) * r * w.to(tl.float32)
        tl.store(y_ptr + row * y_row_stride + start + offsets, y.to(y_ptr.dtype.element_ty),
                 mask=mask)


@triton.jit
def looped_in_input_dtype(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                          BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros([BLOCK_SIZE], dtype=x_ptr.dtype.element_ty)  # bf16 for bf16 rows
    for start in range(0, cols, BLOCK_SIZE):
        mask = start + offsets < cols
        x = tl.load(x_ptr + row * x_row_stride + start + offsets, mask=mask, other=0.0)
        acc += x * x  # no upcast
    r = tl.rsqrt(tl.sum(acc.to(tl.float32), axis=0) / cols + eps)
    for start in range(0, cols, BLOCK_SIZE):
        mask = start + offsets < cols
        x = tl.load(x_ptr + row * x_row_stride + start + offsets, mask=mask, other=0.0)
        w = tl.load(w_ptr + start + offsets, mask=mask, other=0.0)
        y = x.to(tl.float32) * r * w.to(tl.float32)
        tl.store(y_ptr + row * y_row_stride + start + offsets, y.to(y_ptr.dtype.element_ty),
                 mask=mask)


@triton.jit
def looped_first_chunk_only(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                            BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    r = tl.rsqrt(tl.sum(x * x, axis=0) / cols + eps)  # the row kernel's sum: one chunk only
    for start in range(0, cols, BLOCK_SIZE):
        mask = start + offsets < cols
        x = tl.load(x_ptr + row * x_row_stride + start + offsets, mask=mask, other=0.0)
        w = tl.load(w_ptr + start + offsets, mask=mask, other=0.0)
        y = x.to(tl.float32) * r * w.to(tl.float32)
        tl.store(y_ptr + row * y_row_stride + start + offsets, y.to(y_ptr.dtype.element_ty),
                 mask=mask)


@triton.jit
def looped_rows_cols_apart(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                           BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, cols, BLOCK_SIZE):
        mask = start + offsets < cols
        x = tl.load(x_ptr + row * cols + start + offsets, mask=mask, other=0.0)  # stride ignored
        acc += x.to(tl.float32) * x.to(tl.float32)
    r = tl.rsqrt(tl.sum(acc, axis=0) / cols + eps)
    for start in range(0, cols, BLOCK_SIZE):
        mask = start + offsets < cols
        x = tl.load(x_ptr + row * cols + start + offsets, mask=mask, other=0.0)
        w = tl.load(w_ptr + start + offsets, mask=mask, other=0.0)
        y = x.to(tl.float32) * r * w.to(tl.float32)
        tl.store(y_ptr + row * cols + start + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def looped_stores_first_chunk(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                              BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, cols, BLOCK_SIZE):
        mask = start + offsets < cols
        x = tl.load(x_ptr + row * x_row_stride + start + offsets, mask=mask, other=0.0)
        acc += x.to(tl.float32) * x.to(tl.float32)
    r = tl.rsqrt(tl.sum(acc, axis=0) / cols + eps)
    mask = offsets < cols  # pass 2 without its loop
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0)
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0)
    y = x.to(tl.float32) * r * w.to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


build_looped = Exercise(
    "build_looped",
    f"Write the looped row kernel my_looped_kernel{SIGNATURE}: one program per row; pass 1 adds "
    f"the squares of the row's BLOCK-wide chunks in fp32, pass 2 reads each chunk of x again and "
    f"stores x * r * w. Answer with the kernel.",
    _grade_looped,
    solution=rmsnorm_looped_kernel,
    mistakes={"no mask on the last chunk": looped_without_mask,
              "masked load without other=": looped_without_other,
              "divides by BLOCK": looped_divides_by_block,
              "accumulates in the input's dtype": looped_in_input_dtype,
              "pass 1 reads the first chunk only": looped_first_chunk_only,
              "pass 2 stores the first chunk only": looped_stores_first_chunk,
              "rows cols apart, strides ignored": looped_rows_cols_apart})


# ---------------------------------------------------------------- (b) predict its cost

PREDICT_ROWS, PREDICT_COLS = 1024, ROW_MAX_COLS  # the widest row the row kernel holds, fp32
CLOSE = 0.05  # a prediction within 5% of the recorded ratio is a good one


def recorded_ratios() -> dict | None:
    """The committed recording's looped / row ratios (``looped_cost``, and ``looped_bytes`` if
    the second read always came from DRAM) at the prediction's shape, or None."""
    try:
        doc = records.load("triton_versions", records.COMMITTED)
    except (FileNotFoundError, ValueError):
        return None
    ratios = version_ratios(doc.get("records", []), PREDICT_COLS)
    return ratios if ratios["looped_cost"] is not None else None


def _gpu() -> str:
    try:
        return predictions.recorded_gpu(records.load("triton_versions", records.COMMITTED))
    except (FileNotFoundError, ValueError):
        return predictions.short_gpu(None)


def _grade_prediction(answer) -> Feedback:
    value = predictions.read_ratio(answer, "a ratio (looped time / row time)")
    found = recorded_ratios()
    if found is None:
        return predictions.recording_missing()
    cost, dram = found["looped_cost"], found["looped_bytes"]
    said = (f"The {_gpu()} recorded {cost:.2f}×; the bytes alone, if x's second read always "
            f"came from DRAM, say {dram:.2f}×.")
    if answers.close(value, cost, CLOSE):
        return correct(f"You predicted {value:.2f}×. {said} The second read of x cost "
                       f"{cost - 1:.0%} of the row kernel's time, against {dram - 1:.0%} for "
                       f"another full trip to DRAM: part of it came from the cache.")
    if value < 1 and answers.close(1 / value, cost, CLOSE):
        return wrong(f"{value:.2f} is the row kernel's time over the looped kernel's. {said}",
                     "The question asks looped / row: above 1 when the looped kernel is slower.")
    if value < 1:
        return wrong(f"You predicted the looped kernel faster. {said}",
                     "It does all of the row kernel's work and reads x a second time: its time "
                     "can only add to the row kernel's here.")
    if value < cost:
        return wrong(f"You predicted {value:.2f}×. {said}",
                     f"The second read was not free: it added {cost - 1:.0%} of the row "
                     f"kernel's time. A {PREDICT_COLS * 4 // 1024} KB row read again after its "
                     f"first pass is not all still in the cache.")
    if value <= dram * (1 + CLOSE):
        return wrong(f"You predicted {value:.2f}×. {said}",
                     f"{dram:.2f}× is the bound if every second read went to DRAM: x twice and y "
                     f"once is three trips where the row kernel makes two. The recording is "
                     f"below it: part of the second read came from the cache.")
    return wrong(f"You predicted {value:.2f}×. {said}",
                 "Two passes do not double the time: the row kernel already reads x and writes "
                 "y, and the looped kernel adds one more read of x, so the bytes allow at most "
                 f"{dram:.2f}×.")


def _prediction_solution() -> float | None:
    found = recorded_ratios()
    return None if found is None else round(found["looped_cost"], 2)


def _prediction_mistakes() -> dict:
    found = recorded_ratios()
    if found is None:
        return {}
    return {"the second read is free": 1.0, "every second read from DRAM": found["looped_bytes"],
            "two passes, twice the time": 2.0,
            "the ratio inverted": round(1 / found["looped_cost"], 3)}


predict_looped_cost = Exercise(
    "predict_looped_cost",
    f"Predict the looped kernel's time divided by the row kernel's at {PREDICT_ROWS}x"
    f"{PREDICT_COLS:,} fp32 (the widest row the row kernel holds) on the H200: one number, "
    f"e.g. 1.2.",
    _grade_prediction,
    solution=_prediction_solution(),
    mistakes=_prediction_mistakes())

ALL = [build_looped, predict_looped_cost]
