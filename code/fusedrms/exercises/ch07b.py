"""Chapter 7b exercise: make a kernel match a named contract bit for bit.

- :data:`llama_kernel`: write ``fn(x, w, eps) -> y`` that launches a Triton kernel of your own and
  rounds where Hugging Face's ``LlamaRMSNorm`` rounds (the ``llama`` contract). The checker runs
  :func:`fusedrms.contracts.identify` on it in fp16, where Triton's interpreter rounds as a GPU
  does, so the verdict is the same on both; then on rows narrower than a power-of-two block
  (identify's rows are exactly one block wide, where a missing or wrong mask does not show).
  Like every code answer it runs in the grader's child process (:mod:`.grader`), its loads and
  stores audited in the interpreter; the child sends back its outputs, and identify compares them
  with the contracts here, in the notebook's process, where the answer's code cannot reach.
"""
from __future__ import annotations

from .. import env  # interpreter switch before the kernels below

import contextlib
import importlib
import inspect

import torch
import triton
import triton.language as tl

from .. import contracts
from ..contracts import inputs
from . import grader, interpreter_audit
from .ch07 import (_memory_verdict, _recording_launches, launched_kernels,
                   masked_loads_without_other, sent_back)
from .core import Exercise, Feedback, Malformed, correct, one_line, portable_error, wrong

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


def _ignores_eps(y) -> float | None:
    """The eps the answer's output on identify's rows (``y``) follows instead of the one passed
    in, if any."""
    if not isinstance(y, torch.Tensor):
        return None
    case = inputs.rmsnorm_cases(DTYPE, GRADE_EPS)
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
    return grader.interpreter_then_gpu(answer, collect, lambda found, on_gpu: _judge(found))


def _audited():
    return interpreter_audit.audited() if not env.current().on_gpu else contextlib.nullcontext()


def _ragged_inputs():
    g = torch.Generator().manual_seed(13)
    rows, cols = RAGGED
    x = torch.randn(rows, cols, generator=g).to(DTYPE)
    w = (0.75 + torch.rand(cols, generator=g) / 2).to(DTYPE)
    return x, w


class _Other:
    """What the answer returned instead of a tensor, as the child named it: its type's name."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def value(self):
        """An object whose type bears that name, for messages that name it."""
        return type(self.type_name, (), {})()


def _sent(out):
    return sent_back(out) if isinstance(out, torch.Tensor) else _Other(type(out).__name__)


def collect(answer) -> dict:
    """(In the grader's child) the answer on identify's fp16 rows and on :data:`RAGGED` rows: its
    outputs, what it raised, the kernels it launched and, under the interpreter, their memory
    accesses. It judges nothing: :func:`_judge` does, in the parent, against contracts and inputs
    of its own, where the answer's code cannot reach."""
    identify = importlib.import_module("fusedrms.contracts.identify")
    device = env.current().device
    name = getattr(answer, "__name__", "fn")
    found = {"outputs": [], "raised": None, "ragged": None, "ragged_raised": None,
             "ragged_audit": None, "ragged_x_read": None}
    grader.progress("On identify's 18x64 fp16 rows")
    with _audited() as audit, _recording_launches() as launched:
        try:
            for case in identify._cases("rmsnorm", DTYPE, GRADE_EPS):
                found["outputs"].append(_sent(identify._call(answer, case, device, name)))
        except contracts.KernelRaised as err:
            found["raised"] = err
    found["audit"], found["kernels"] = audit, launched_kernels(launched)
    if found["raised"] is not None:
        return found
    grader.progress(f"On {RAGGED[0]}x{RAGGED[1]} fp16 rows")
    x, w = (t.to(device) for t in _ragged_inputs())
    try:
        with _audited() as audit:
            y = answer(x, w, GRADE_EPS)
        found["ragged"] = _sent(y)
    except Exception as err:  # noqa: BLE001 - the reader's code: report, never raise
        found["ragged_raised"] = portable_error(err)
    found["ragged_audit"] = audit
    if audit is not None and audit.usable:
        # x itself or a copy (x.float() is a right first step): a kernel that only copies
        # PyTorch's y loads none of it
        found["ragged_x_read"] = audit.elements_loaded_from(x)
    return found


def _replay(found: dict):
    """A function that gives, call by call, what the answer gave identify in the child."""
    outputs = iter(found["outputs"])

    def replay(*args):
        out = next(outputs)
        return out.value() if isinstance(out, _Other) else out

    return replay


def _ragged_verdict(found: dict) -> Feedback | None:
    """The answer on :data:`RAGGED` fp16 rows, against the contract within two ulps (these rows
    are not identify's, chosen so that every summation order rounds alike): the masks, and a
    kernel that stores y itself."""
    rows, cols = RAGGED
    where = f"on {rows}x{cols} fp16 rows, narrower than a power-of-two block"
    x, w = _ragged_inputs()
    if found["ragged_raised"] is not None:
        return wrong(f"your function raised {one_line(found['ragged_raised'])} {where}.",
                     "Run it on that shape in a cell to see the traceback.")
    audit = found["ragged_audit"]
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
        read = found["ragged_x_read"]
        if read is not None and read < x.numel():
            return wrong(f"your function launched a kernel, but its kernels loaded {read} of the "
                         f"{x.numel()} values of x {where}: y comes from PyTorch, not from your "
                         f"kernel.", "Let your kernel load x itself (tl.load(x_ptr + row * cols "
                         "+ col, mask=mask, other=0.0)) and compute y from what it loaded.")
    y = found["ragged"]
    if not isinstance(y, torch.Tensor) or tuple(y.shape) != (rows, cols) or y.dtype != DTYPE:
        shown = (f"{tuple(y.shape)} {y.dtype}" if isinstance(y, torch.Tensor)
                 else y.type_name)
        return wrong(f"y is {shown} {where}; expected {(rows, cols)} {DTYPE}.",
                     "Allocate y like x (torch.empty_like(x)): the store rounds to its dtype.")
    expected = contracts.get(TARGET).fn(x, w, GRADE_EPS).float()
    got = y.float()
    off = ~(torch.isfinite(got) & ((got - expected).abs() <= 2 * 2.0 ** -10 * expected.abs()
                                   + 2.0 ** -14))
    if bool(off.any()):
        row, col = (int(i) for i in off.nonzero()[0])
        return wrong(f"your kernel matches {TARGET} on identify's rows, which are exactly one "
                     f"block wide, but not {where}: {int(off.sum())} of {got.numel()} elements "
                     f"are off, the first at row {row}, col {col} (got {got[row, col].item():.6g}"
                     f", expected {expected[row, col].item():.6g}).", MASK_HINT)
    return None


def _judge(found: dict) -> Feedback:
    """The verdict on what :func:`collect` saw, judged here: identify compares the answer's
    outputs with contracts computed in this process, on inputs made in this process."""
    if found["raised"] is not None:
        return wrong(f"{found['raised']}.", "Run it on a 18x64 fp16 input in a cell to see the "
                                            "traceback.")
    audit = found["audit"]
    if audit is not None:
        memory = _memory_verdict(audit, "on identify's 18x64 fp16 rows")
        if memory is not None:
            return memory
    matched = contracts.identify(_replay(found), op="rmsnorm", dtypes=(DTYPE,), eps=GRADE_EPS,
                                 device="cpu")
    diff = matched.difference(TARGET, DTYPE)
    kernels = found["kernels"]
    if diff is not None:
        if diff.note:
            return wrong(f"the output has another form: {diff.note}.",
                         "Allocate y like x (torch.empty_like(x)): the store rounds to its dtype.")
        also = matched.matches_in(DTYPE)
        if "fp32_once" in also:
            return wrong("your kernel matches fp32_once, the book's convention: it multiplies by "
                         "w before it rounds, so it rounds once.", ROUND_TWICE)
        if "gemma" in also:
            return wrong("your kernel multiplies by (1 + w), Gemma's weight: Llama's weight "
                         "multiplies as it is.", ROUND_TWICE)
        other_eps = _ignores_eps(found["outputs"][0] if found["outputs"] else None)
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
    book = [k for k in kernels if k.is_the_books]
    if book:
        return wrong(f"your function launches the book's own kernel "
                     f"({book[0].module}.{book[0].name}).",
                     "Write the kernel yourself, starting from chapter 4's one row per program.")
    for kernel in kernels:
        lines = masked_loads_without_other(kernel.source)
        if lines:
            return wrong(f"{kernel.name} loads with a mask but no other= (line "
                         f"{', '.join(map(str, lines))} of the kernel): the masked lanes are "
                         f"undefined and enter the sum of squares on a GPU.",
                         "tl.load(ptr, mask=mask, other=0.0).")
    ragged = _ragged_verdict(found)
    if ragged is not None:
        return ragged
    near = matched.difference("fp32_once", DTYPE)
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
