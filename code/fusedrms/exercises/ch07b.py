"""Chapter 7b exercise: make a kernel match a named contract bit for bit.

- :data:`llama_kernel`: write ``fn(x, w, eps) -> y`` that launches a Triton kernel of your own and
  rounds where Hugging Face's ``LlamaRMSNorm`` rounds (the ``llama`` contract). The checker runs
  :func:`fusedrms.contracts.identify` on it in fp16, where Triton's interpreter rounds as a GPU
  does, so the verdict is the same on both; then on rows narrower than a power-of-two block
  (identify's rows are exactly one block wide, where a missing or wrong mask does not show).
  Like every code answer it runs in the grader's child process (:mod:`.grader`), its loads and
  stores audited in the interpreter.
"""
from __future__ import annotations

from .. import env  # interpreter switch before the kernels below

import contextlib
import inspect

import torch
import triton
import triton.language as tl

from .. import contracts
from ..contracts import inputs
from . import grader, interpreter_audit
from .ch07 import (_launched_functions, _memory_verdict, _recording_launches,
                   masked_loads_without_other)
from .core import Exercise, Feedback, Malformed, correct, one_line, wrong

TARGET = "llama"
DTYPE = torch.float16
# not a usual default: a kernel that ignores its eps argument computes something else here
GRADE_EPS = 1e-3

QUESTION = ("Write fn(x, w, eps) -> y that launches a Triton kernel of your own and matches the "
            "'llama' contract bit for bit: x * r rounded to x's dtype, then multiplied by w in "
            "that dtype. answer = your launcher function.")


# [book:solution]
@triton.jit
def solution_kernel(x_ptr, w_ptr, y_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    col = tl.arange(0, BLOCK)
    mask = col < cols
    x = tl.load(x_ptr + row * cols + col, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / cols + eps)
    # first rounding: the normalized row, in x's dtype
    normed = (x * rstd).to(y_ptr.dtype.element_ty)
    # second: the product with w in that dtype (w is not upcast)
    w = tl.load(w_ptr + col, mask=mask, other=0.0)
    tl.store(y_ptr + row * cols + col, normed * w, mask=mask)


def solution_llama(x, w, eps=1e-6):
    x = x.contiguous()
    y = torch.empty_like(x)
    cols = x.shape[-1]
    solution_kernel[(x.numel() // cols,)](x, w, y, cols, eps,
                                          BLOCK=triton.next_power_of_2(cols))
    return y
# [/book:solution]


# ---------------------------------------------------------------- grading

def _check_form(answer) -> None:
    if isinstance(answer, triton.runtime.jit.KernelInterface):
        raise Malformed("that is the @triton.jit kernel; pass the Python function that launches "
                        "it: answer = my_llama_rmsnorm (called as fn(x, w, eps)).")
    if not callable(answer):
        raise Malformed(f"expected a function fn(x, w, eps) -> y, got {type(answer).__name__}.")
    try:
        inspect.signature(answer).bind(0, 0, 0)
    except TypeError:
        name = getattr(answer, "__name__", "fn")
        raise Malformed(f"your function must take three arguments, fn(x, w, eps); its "
                        f"signature is {name}{inspect.signature(answer)}.") from None
    except ValueError:  # no signature to read (a builtin): let the call decide
        pass


def _ignores_eps(answer) -> float | None:
    """The eps the answer's output follows instead of the one passed in, if any."""
    case = inputs.rmsnorm_cases(DTYPE, GRADE_EPS)
    device = env.current().device
    try:
        y = answer(*case.args(device)).detach().cpu()
    except Exception:  # noqa: BLE001 - it ran inside identify; no verdict from a second call
        return None
    for other in (1e-5, 1e-6, 1e-8, 0.0):
        expected = contracts.get(TARGET).fn(case.x, case.w, other)
        if y.shape == expected.shape and float((y == expected).float().mean()) > 0.99:
            return other
    return None


ROUND_TWICE = ("Round exactly twice: x * r (computed in fp32) to x's dtype with "
               ".to(y_ptr.dtype.element_ty), then the product with w, which the store rounds.")


RAGGED = (3, 13)  # rows narrower than their block: a missing or off-by-one mask shows here
MASK_HINT = ("Mask every load and store with col < cols (other=0.0 on the loads) and launch "
             "BLOCK = triton.next_power_of_2(cols): a row need not fill its block.")


def _grade_llama(answer) -> Feedback:
    _check_form(answer)
    try:  # in a child process, Triton's interpreter: the verdict of a machine without a GPU
        verdict = grader.run(answer, _grade_here, cache=True)
        if not verdict or not env.current().on_gpu:
            return verdict
        on_gpu = grader.run(answer, _grade_here, device="gpu")
    except grader.Failed as failed:
        return grader.failure_feedback(failed, "python")
    if not on_gpu:
        return wrong(f"On the GPU: {on_gpu.message}", on_gpu.hint)
    return correct(verdict.message.rstrip(".") + ", in Triton's interpreter and compiled for the "
                                                  "GPU.")


def _audited():
    return interpreter_audit.audited() if not env.current().on_gpu else contextlib.nullcontext()


def _ragged_verdict(answer) -> Feedback | None:
    """(In the grader's child) the answer on :data:`RAGGED` fp16 rows, against the contract
    within two ulps (these rows are not identify's, chosen so that every summation order rounds
    alike): the masks, and a kernel that stores y itself."""
    rows, cols = RAGGED
    where = f"on {rows}x{cols} fp16 rows, narrower than a power-of-two block"
    g = torch.Generator().manual_seed(13)
    x = torch.randn(rows, cols, generator=g).to(DTYPE)
    w = (0.75 + torch.rand(cols, generator=g) / 2).to(DTYPE)
    device = env.current().device
    try:
        with _audited() as audit:
            y = answer(x.to(device), w.to(device), GRADE_EPS)
    except Exception as err:  # noqa: BLE001 - the reader's code: report, never raise
        return wrong(f"your function raised {one_line(err)} {where}.",
                     "Run it on that shape in a cell to see the traceback.")
    if audit is not None:
        memory = _memory_verdict(audit, where)
        if memory is not None:
            return memory
        if audit.usable and audit.stored() < x.numel():
            return wrong(f"your function launched a kernel, but its kernels stored "
                         f"{audit.stored()} values {where}, fewer than the {x.numel()} of y: "
                         f"y comes from PyTorch, not from your kernel.",
                         "Let your kernel compute y and store it: tl.store(y_ptr + row * cols "
                         "+ col, ..., mask=mask).")
    if not isinstance(y, torch.Tensor) or tuple(y.shape) != (rows, cols) or y.dtype != DTYPE:
        shown = (f"{tuple(y.shape)} {y.dtype}" if isinstance(y, torch.Tensor)
                 else type(y).__name__)
        return wrong(f"y is {shown} {where}; expected {(rows, cols)} {DTYPE}.",
                     "Allocate y like x (torch.empty_like(x)): the store rounds to its dtype.")
    expected = contracts.get(TARGET).fn(x, w, GRADE_EPS).float()
    got = y.detach().cpu().float()
    off = ~(torch.isfinite(got) & ((got - expected).abs() <= 2 * 2.0 ** -10 * expected.abs()
                                   + 2.0 ** -14))
    if bool(off.any()):
        row, col = (int(i) for i in off.nonzero()[0])
        return wrong(f"your kernel matches {TARGET} on identify's rows, which are exactly one "
                     f"block wide, but not {where}: {int(off.sum())} of {got.numel()} elements "
                     f"are off, the first at row {row}, col {col} (got {got[row, col].item():.6g}"
                     f", expected {expected[row, col].item():.6g}).", MASK_HINT)
    return None


def _grade_here(answer) -> Feedback:
    """(In the grader's child) the verdict on ``answer``."""
    try:
        with _audited() as audit, _recording_launches() as launched:
            found = contracts.identify(answer, op="rmsnorm", dtypes=(DTYPE,), eps=GRADE_EPS,
                                       device=env.current().device)
    except contracts.KernelRaised as err:
        return wrong(f"{err}.", "Run it on a 18x64 fp16 input in a cell to see the traceback.")
    if audit is not None:
        memory = _memory_verdict(audit, "on identify's 18x64 fp16 rows")
        if memory is not None:
            return memory
    diff = found.difference(TARGET, DTYPE)
    kernels = _launched_functions(launched)
    if diff is not None:
        if diff.note:
            return wrong(f"the output has another form: {diff.note}.",
                         "Allocate y like x (torch.empty_like(x)): the store rounds to its dtype.")
        matched = found.matches_in(DTYPE)
        if "fp32_once" in matched:
            return wrong("your kernel matches fp32_once, the book's convention: it multiplies by "
                         "w before it rounds, so it rounds once.", ROUND_TWICE)
        if "gemma" in matched:
            return wrong("your kernel multiplies by (1 + w), Gemma's weight: Llama's weight "
                         "multiplies as it is.", ROUND_TWICE)
        other_eps = _ignores_eps(answer)
        if other_eps is not None:
            return wrong(f"your kernel computes with eps = {other_eps:g}, not the eps passed in "
                         f"({GRADE_EPS:g}).", "Pass the eps argument to the kernel instead of a "
                                              "constant.")
        return wrong(f"it differs from {TARGET} at {diff.place()}: got {diff.got:.6g}, expected "
                     f"{diff.expected:.6g} ({diff.ulps} ulp); {diff.count} of {diff.total} "
                     f"elements differ.", ROUND_TWICE)
    if not kernels:
        return wrong("the values match, but your function launched no Triton kernel: it "
                     "computes with PyTorch (passing the contract's own function is the same "
                     "thing).", "Write a @triton.jit kernel and launch it as kernel[grid](...).")
    book = [f for f in kernels if getattr(f, "__module__", "").startswith("fusedrms.kernels")]
    if book:
        return wrong(f"your function launches the book's own kernel "
                     f"({book[0].__module__}.{book[0].__name__}).",
                     "Write the kernel yourself, starting from chapter 4's one row per program.")
    for fn in kernels:
        lines = masked_loads_without_other(fn)
        if lines:
            return wrong(f"{fn.__name__} loads with a mask but no other= (line "
                         f"{', '.join(map(str, lines))} of the kernel): the masked lanes are "
                         f"undefined and enter the sum of squares on a GPU.",
                         "tl.load(ptr, mask=mask, other=0.0).")
    ragged = _ragged_verdict(answer)
    if ragged is not None:
        return ragged
    near = found.difference("fp32_once", DTYPE)
    return correct(f"your kernel matches {TARGET} bit for bit in fp16"
                   + (f", and differs from fp32_once at {near.place()} by {near.ulps} ulp"
                      if near is not None and near.ulps is not None else "")
                   + ": it rounds where Hugging Face's LlamaRMSNorm rounds.")


# ---------------------------------------------------------------- typical mistakes

@triton.jit
def _once_kernel(x_ptr, w_ptr, y_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    col = tl.arange(0, BLOCK)
    mask = col < cols
    x = tl.load(x_ptr + row * cols + col, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / cols + eps)
    w = tl.load(w_ptr + col, mask=mask, other=0.0).to(tl.float32)
    y = (x * rstd * w).to(y_ptr.dtype.element_ty)  # one rounding
    tl.store(y_ptr + row * cols + col, y, mask=mask)


@triton.jit
def _gemma_kernel(x_ptr, w_ptr, y_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    col = tl.arange(0, BLOCK)
    mask = col < cols
    x = tl.load(x_ptr + row * cols + col, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / cols + eps)
    w = tl.load(w_ptr + col, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * cols + col,
             (x * rstd * (1.0 + w)).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _constant_eps_kernel(x_ptr, w_ptr, y_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    col = tl.arange(0, BLOCK)
    mask = col < cols
    x = tl.load(x_ptr + row * cols + col, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / cols + 1e-6)  # not the eps passed in
    normed = (x * rstd).to(y_ptr.dtype.element_ty)
    w = tl.load(w_ptr + col, mask=mask, other=0.0)
    tl.store(y_ptr + row * cols + col, normed * w, mask=mask)


@triton.jit
def _rounded_scale_kernel(x_ptr, w_ptr, y_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    col = tl.arange(0, BLOCK)
    mask = col < cols
    x = tl.load(x_ptr + row * cols + col, mask=mask, other=0.0)
    xf = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(xf * xf, axis=0) / cols + eps)
    normed = x * rstd.to(y_ptr.dtype.element_ty)  # rounds r, then x * r in fp16
    w = tl.load(w_ptr + col, mask=mask, other=0.0)
    tl.store(y_ptr + row * cols + col, normed * w, mask=mask)


def _launcher(kernel, out_dtype=None):
    def fn(x, w, eps=1e-6):
        x = x.contiguous()
        y = torch.empty_like(x, dtype=out_dtype or x.dtype)
        cols = x.shape[-1]
        kernel[(x.numel() // cols,)](x, w, y, cols, eps, BLOCK=triton.next_power_of_2(cols))
        return y

    fn.__name__ = f"launch_{kernel.fn.__name__.strip('_')}"
    return fn


def _book_kernel(x, w, eps=1e-6):
    from ..kernels import rmsnorm

    return rmsnorm.rmsnorm_row(x, w, eps)


llama_kernel = Exercise(
    name="llama_kernel",
    question=QUESTION,
    grade=_grade_llama,
    solution=solution_llama,
    mistakes={
        "one rounding (the book's convention)": _launcher(_once_kernel),
        "(1 + w), Gemma's weight": _launcher(_gemma_kernel),
        "a constant eps": _launcher(_constant_eps_kernel),
        "rounds r, then x * r in fp16": _launcher(_rounded_scale_kernel),
        "y in fp32": _launcher(solution_kernel, out_dtype=torch.float32),
        "the contract's own function": lambda x, w, eps: contracts.get(TARGET).fn(x, w, eps),
        "the book's kernel": _book_kernel,
        "the kernel instead of the launcher": solution_kernel,
    },
)
ALL = [llama_kernel]
