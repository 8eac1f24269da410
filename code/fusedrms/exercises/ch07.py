"""Chapter 7 exercises: the capstone.

- :data:`residual_variant`: write the residual-writing variant ``fn(x, r, w, eps) -> (y, s)``; the
  checker runs it on boundary shapes and dtypes against :func:`fusedrms.reference.add_rmsnorm_residual`.
  The answer runs in the grader's child (:func:`collect`), which sends back what it returned and
  did; the verdict is this process's (:func:`_judge`), from inputs and references made here, so
  an answer that patches the library's functions in its own process changes nothing.
- :data:`residual_bytes`: predict the bytes it moves at 16 x 4096 bf16.
- :data:`autotune_key`: choose the autotune key (argument names, like ``@triton.autotune(key=...)``):
  the autotuner adds every tensor argument's dtype itself and drops a name that is no argument.
- :data:`predict_torch_ratio` (in :mod:`.ch07_predict`): predict PyTorch's time over the
  capstone's at a small and a large shape, before the chapter's figure shows them.
"""
from __future__ import annotations

from .. import env  # interpreter switch before the solution's @triton.jit

import contextlib
from dataclasses import dataclass, field

import torch
import triton
import triton.language as tl

from .. import checks, reference
from . import answers, grader, interpreter_audit
from .ch07_predict import predict_torch_ratio  # (d) predict, then look
from .core import (BYTE_UNITS, Exercise, Feedback, Malformed, correct,
                   in_other_unit, kernel_function, one_line, portable_error, wrong)

# ---------------------------------------------------------------- (a) write the residual variant


# [book:solution-kernel]
@triton.jit
def solution_kernel(x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, cols, eps,
                    BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    col = tl.arange(0, BLOCK)
    mask = col < cols
    offsets = row * cols + col
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    s = (x + r).to(s_ptr.dtype.element_ty)  # the next layer's residual
    tl.store(s_ptr + offsets, s, mask=mask)
    s = s.to(tl.float32)  # normalize what was stored
    rstd = tl.rsqrt(tl.sum(s * s, axis=0) / cols + eps)
    w = tl.load(w_ptr + col, mask=mask, other=0.0).to(tl.float32)
    y = (s * rstd * w).to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + offsets, y, mask=mask)


def solution_residual(x, r, w, eps=1e-5):
    x, r = x.contiguous(), r.contiguous()
    y, s = torch.empty_like(x), torch.empty_like(x)
    cols = x.shape[-1]
    solution_kernel[(x.numel() // cols,)](x, r, w, y, s, cols, eps,
                                          BLOCK=triton.next_power_of_2(cols))
    return y, s
# [/book:solution-kernel]


SHAPES = ((3, 13), (33, 257), (1, 1), (4, 1024))
STRIDED, STRIDE_PAD = (3, 13), 3  # a view whose rows are 16 elements apart
STRIDE_HINT = ("x and r may be views whose rows lie further apart than cols elements (x.stride(0) > "
               "cols): call x.contiguous() and r.contiguous() before the launch, or pass the row "
               "stride to the kernel.")
# not a usual default: a function that ignores its eps argument (a constant 1e-5 or 1e-6 in the
# kernel) computes something else, and fails
GRADE_EPS = 1e-3
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _inputs(rows, cols, dtype, seed, device=None):
    g = torch.Generator().manual_seed(seed)
    dev = env.current().device if device is None else device
    return [torch.randn(*s, generator=g).to(dtype).to(dev) for s in ((rows, cols), (rows, cols), (cols,))]


INTERPRETER_BF16_ADD = ("Under Triton's interpreter (no GPU) adding two bf16 values returns "
                        "garbage (about 1e37, or NaN) in Triton 3.9: upcast with .to(tl.float32) "
                        "right after each load, which a GPU kernel should do anyway (fp32 "
                        "accumulation).")


@contextlib.contextmanager
def _recording_launches():
    """Every Triton kernel launched as ``kernel[grid](...)`` inside the block."""
    interface = triton.runtime.jit.KernelInterface
    original = interface.__getitem__
    launched = []

    def getitem(self, grid):
        launched.append(self)
        return original(self, grid)

    interface.__getitem__ = getitem
    try:
        yield launched
    finally:
        interface.__getitem__ = original


def masked_loads_without_other(source: str) -> list[int]:
    """Line numbers (in a kernel's ``source``) of ``tl.load(..., mask=...)`` calls without
    ``other=``: the masked lanes are undefined, and here they would enter the sum of squares."""
    import ast
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return []
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "load"):
            names = {k.arg for k in node.keywords}
            masked = "mask" in names or len(node.args) >= 2
            if masked and "other" not in names and len(node.args) < 3:
                lines.append(node.lineno)
    return lines


def _launched_functions(launched) -> list:
    return [f for f in dict.fromkeys(kernel_function(k) for k in launched) if f is not None]


@dataclass(frozen=True)
class LaunchedKernel:
    """A kernel the answer launched, as the grader's child saw it: where it is defined, its name
    and its source (the parent reads the source; nothing of the child judges it)."""
    module: str
    name: str
    source: str

    @property
    def is_the_books(self) -> bool:
        return self.module.startswith("fusedrms.kernels")


def launched_kernels(launched) -> list[LaunchedKernel]:
    """(In the grader's child) the kernels launched, as :class:`LaunchedKernel`."""
    import inspect

    found = []
    for fn in _launched_functions(launched):
        try:
            source = inspect.getsource(fn)
        except (OSError, TypeError):
            source = ""
        found.append(LaunchedKernel(getattr(fn, "__module__", "") or "", fn.__name__, source))
    return found


def sent_back(t) -> torch.Tensor:
    """(In the grader's child) a tensor the answer gave, as a fresh CPU copy for the parent."""
    return t.detach().cpu().clone(memory_format=torch.contiguous_format)


def _convention_case(device=None):
    """fp16 rows whose every sum x + r is a tie: the stored s differs from the fp32 sum in every
    element, and y differs by one unit in the last place in about half of them, depending on
    which of the two is normalized."""
    g = torch.Generator().manual_seed(0)
    dev = env.current().device if device is None else device
    x = (1 + torch.rand(4, 1024, generator=g)).half().to(dev)
    r = torch.full((4, 1024), 2.0 ** -11, dtype=torch.float16, device=dev)
    return x, r, torch.ones(1024, dtype=torch.float16, device=dev)


CONVENTION_HINT = ("This variant hands s to the next layer: normalize exactly that value. Convert "
                   "the stored s back to fp32 (s.to(tl.float32)) before the sum of squares.")


def _other_convention(outputs, eps) -> Feedback | None:
    """The verdict on the answer's (y, s) for :func:`_convention_case` (None: it gave none)."""
    if outputs is None:
        return None
    y, s = outputs
    x, r, w = _convention_case("cpu")
    y = y.float()
    from_stored = reference.rmsnorm(s, w, eps, accum=torch.float64).float()
    from_sum = reference.add_rmsnorm(x, r, w, eps, accum=torch.float64).float()
    differ = from_stored != from_sum
    if int(differ.sum()) < 100:
        return None
    if float((y[differ] == from_sum[differ]).float().mean()) > 0.5:
        return wrong("y normalizes the fp32 sum x + r, not the s you stored (FlashInfer's "
                     "convention). On fp16 rows where every x + r is a tie, the two differ by "
                     "one unit in the last place in half the elements, and yours follow the "
                     "fp32 sum.", CONVENTION_HINT)
    return None


def _grade_residual(answer) -> Feedback:
    if isinstance(answer, triton.runtime.jit.KernelInterface):  # jit, interpreted or autotuned
        raise Malformed("that is the @triton.jit kernel; pass the Python function that launches "
                        "it: answer = my_add_rmsnorm_residual (called as fn(x, r, w, eps)).")
    if not callable(answer):
        raise Malformed(f"expected a function fn(x, r, w, eps) -> (y, s), got "
                        f"{type(answer).__name__}.")
    import inspect

    try:
        inspect.signature(answer).bind(0, 0, 0, 0)
    except TypeError:
        name = getattr(answer, "__name__", "fn")
        raise Malformed(f"your function must take four arguments, fn(x, r, w, eps); its "
                        f"signature is {name}{inspect.signature(answer)}.") from None
    except ValueError:  # no signature to read (a builtin): let the call decide
        pass
    return grader.interpreter_then_gpu(
        answer, collect, lambda found, on_gpu: _judge(found, interpreting=not on_gpu))


def _cases():
    """(rows, cols, dtype, seed, strided): the shapes in every dtype, then rows that are a view
    of a wider tensor (their row stride is not cols; the padding between them is NaN)."""
    for i, (rows, cols) in enumerate(SHAPES):
        for dtype in DTYPES:
            yield rows, cols, dtype, 100 + i, False
    yield STRIDED + (torch.float32, 99, True)


def _strided(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values in a view whose rows are STRIDE_PAD elements further apart, NaN between."""
    rows, cols = t.shape
    wider = torch.full((rows, cols + STRIDE_PAD), float("nan"), dtype=t.dtype, device=t.device)
    wider[:, :cols] = t
    return wider[:, :cols]


def _case_inputs(rows, cols, dtype, seed, strided, device=None):
    x, r, w = _inputs(rows, cols, dtype, seed=seed, device=device)
    if strided:
        x, r = _strided(x), _strided(r)
    return x, r, w


def _where(rows, cols, dtype, strided) -> str:
    return f"on {rows}x{cols} {str(dtype).replace('torch.', '')}" + (
        f" rows {cols + STRIDE_PAD} elements apart" if strided else "")


@dataclass
class CaseRun:
    """What the answer did on one case, as the grader's child saw it: no verdict, only data."""
    raised: BaseException | None = None
    form: str = ""  # what it returned instead of a pair of tensors, in words ("" when a pair)
    y: torch.Tensor | None = None
    s: torch.Tensor | None = None
    x_after: torch.Tensor | None = None  # the inputs after the call
    r_after: torch.Tensor | None = None
    audit: object = None  # interpreter_audit.Audit, under the interpreter
    kernels: list = field(default_factory=list)  # [LaunchedKernel]
    read: tuple | None = None  # (elements of x, of r) the kernels loaded, where it can be told


def collect(answer) -> dict:
    """(In the grader's child) the answer on every case and on the convention case: its outputs,
    its inputs afterwards, the kernels it launched and, under the interpreter, their memory
    accesses. It judges nothing: :func:`_judge` does, in the parent, from inputs and references
    of its own, where the answer's code cannot reach."""
    eps = GRADE_EPS
    interpreting = not env.current().on_gpu
    runs = []
    for rows, cols, dtype, seed, strided in _cases():
        where = _where(rows, cols, dtype, strided)
        grader.progress(where[0].upper() + where[1:])
        x, r, w = _case_inputs(rows, cols, dtype, seed, strided)
        run = CaseRun()
        with (interpreter_audit.audited() if interpreting else contextlib.nullcontext()) as audit, \
                _recording_launches() as launched:
            try:
                out = answer(x, r, w, eps)
            except Exception as e:  # noqa: BLE001  (the reader's code: report, never raise)
                run.raised = portable_error(e)
        run.audit, run.kernels = audit, launched_kernels(launched)
        if audit is not None and audit.usable:
            # a kernel that computes y and s loads every element of x and r (or of copies of
            # them: x.contiguous(), x.float()); one that copies PyTorch's outputs does not
            run.read = (audit.elements_loaded_from(x), audit.elements_loaded_from(r))
        run.x_after, run.r_after = sent_back(x), sent_back(r)
        runs.append(run)
        if run.raised is not None:
            return {"cases": runs, "convention": None}
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            run.form = (f"{type(out).__name__}" + (f" of length {len(out)}"
                                                   if isinstance(out, (tuple, list)) else ""))
            return {"cases": runs, "convention": None}
        if not all(isinstance(t, torch.Tensor) for t in out):
            run.form = "not tensors"
            return {"cases": runs, "convention": None}
        run.y, run.s = (sent_back(t) for t in out)
    grader.progress("On the convention's fp16 rows")
    try:  # no verdict from what this call raises: it ran on the other shapes
        y, s = answer(*_convention_case(), eps)
        convention = (sent_back(y), sent_back(s))
    except Exception:  # noqa: BLE001
        convention = None
    return {"cases": runs, "convention": convention}


def _judge(found: dict, interpreting: bool) -> Feedback:
    """The verdict on what :func:`collect` saw (``interpreting``: in Triton's interpreter, with
    memory accesses audited), judged here: the inputs and every reference are computed in this
    process."""
    eps = GRADE_EPS
    kernels, silent = [], []  # kernels launched; cases that launched none
    unstored = []  # cases whose kernels stored fewer values than y and s hold: (where, stored, n)
    unread = []  # cases whose kernels did not load all of x and r: (where, of x, of r, n)
    for (rows, cols, dtype, seed, strided), run in zip(_cases(), found["cases"]):
        where = _where(rows, cols, dtype, strided)
        x, r, w = _case_inputs(rows, cols, dtype, seed, strided, device="cpu")
        audit = run.audit
        memory = _memory_verdict(audit, where) if audit is not None else None
        if memory is not None:
            return memory
        if run.raised is not None:
            return wrong(f"your function raised {one_line(run.raised)} {where}.",
                         "Run it on that shape in a cell to see the full traceback.")
        kernels += run.kernels
        silent.extend([where] if not run.kernels else [])
        if run.form == "not tensors":
            raise Malformed("both y and s must be torch tensors.")
        if run.form:
            raise Malformed(f"your function returned {run.form}; it must return a pair (y, s): "
                            f"the output and x + residual.")
        y, s = run.y, run.s
        if not (torch.equal(run.x_after, x) and torch.equal(run.r_after, r)):
            return wrong(f"your function changed its inputs {where}.",
                         "This exercise is out of place: write y and s into new tensors.")
        for name, t in (("y", y), ("s", s)):
            if tuple(t.shape) != (rows, cols) or t.dtype != dtype:
                return wrong(f"{name} is {tuple(t.shape)} {t.dtype} {where}; expected "
                             f"{(rows, cols)} {dtype}.",
                             "Allocate outputs like x (torch.empty_like(x)) and cast once at "
                             "the store.")
        if run.kernels and audit is not None and audit.usable \
                and audit.stored() < y.numel() + s.numel():
            unstored.append((where, audit.stored(), y.numel() + s.numel()))
        if run.kernels and run.read is not None and min(run.read) < x.numel():
            unread.append((where, *run.read, x.numel()))
        if (dtype == torch.bfloat16 and interpreting
                and not all(bool(torch.isfinite(t).all()) and float(t.float().abs().max()) < 1e30
                            for t in (y, s))):
            return wrong(f"NaN or values near 1e37 in the output {where}.",
                         INTERPRETER_BF16_ADD)
        ref_y, ref_s = reference.add_rmsnorm_residual(x, r, w, eps, accum=torch.float64)
        s_ok = checks.allclose(s, ref_s)
        # y against the reader's own stored s: the interpreter truncates bf16 casts, and a
        # one-step difference in s must not be counted twice
        y_ok = checks.allclose(y, reference.rmsnorm(s, w, eps, accum=torch.float64))
        if s_ok and y_ok:
            continue
        undefined = audit is not None and any(a.undefined_lanes for launch in audit.launches
                                              for a in launch.loads())
        if undefined and not all(bool(torch.isfinite(t).all()) for t in (y, s)):
            verdict = _without_other(run.kernels, where)
            if verdict is not None:
                return verdict
        if checks.allclose(y, ref_s) and checks.allclose(s, ref_y):
            return wrong(f"y and s are swapped {where}.", "Return (y, s): the normalized "
                         "output first, then the residual sum.")
        if not s_ok:
            if checks.allclose(s, x):
                return wrong(f"s equals x {where}: the residual sum is not stored.",
                             "Store x + r (in x's dtype) into s.")
            return wrong(f"s is not x + residual {where}: {s_ok.message}.",
                         STRIDE_HINT if strided else
                         "s = (x + r) computed in fp32 and cast to x's dtype at the store.")
        if checks.allclose(y, reference.add_rmsnorm(x, r, w, eps, accum=torch.float64)):
            return wrong(f"y normalizes the fp32 sum x + r, not the s you stored {where} "
                         f"(FlashInfer's convention).", CONVENTION_HINT)
        ref_x_only = reference.rmsnorm(x, w, eps, accum=torch.float64)
        if checks.allclose(y, ref_x_only):
            return wrong(f"y normalizes x alone {where}.",
                         "Normalize the sum s = x + r, not x.")
        for other_eps in (1e-5, 1e-6, 1e-8, 0.0):
            if checks.allclose(y, reference.rmsnorm(s, w, other_eps, accum=torch.float64)):
                return wrong(f"y is computed with eps = {other_eps:g}, not the eps passed in "
                             f"({eps:g}) {where}.", "Use the eps argument of your function "
                             "(pass it to the kernel) instead of a constant.")
        unweighted = reference.rmsnorm(ref_s, torch.ones_like(w), eps, accum=torch.float64)
        if checks.allclose(y, unweighted):
            return wrong(f"y is missing the weight {where}.", "Multiply by w[col].")
        if strided:
            return wrong(f"y is wrong {where}: {y_ok.message}.", STRIDE_HINT)
        return wrong(f"y is wrong {where}: {y_ok.message}.",
                     "Check the mean: divide the sum of squares by cols (not BLOCK), add eps, "
                     "take rsqrt; mask the padded lanes.")
    if len(found["cases"]) < len(list(_cases())):  # the child stops only where a verdict is
        raise grader.Failed("exit", "the checker's child returned fewer cases than it runs")
    if silent:
        return wrong(f"the values are right, but your function launched no Triton kernel "
                     f"({silent[0]}): it computes with PyTorch (passing "
                     f"reference.add_rmsnorm_residual itself is the same thing).",
                     "Write a @triton.jit kernel and launch it as kernel[grid](...).")
    if unstored:
        where, stored, wanted = unstored[0]
        return wrong(f"the values are right, but the kernels your function launched stored "
                     f"{stored} values {where}, fewer than the {wanted} of y and s: the outputs "
                     f"come from PyTorch, not from your kernel.",
                     "Let your kernel compute s and y and store both: tl.store(s_ptr + offsets, "
                     "..., mask=mask) and tl.store(y_ptr + offsets, ..., mask=mask).")
    if unread:
        where, of_x, of_r, n = unread[0]
        return wrong(f"the values are right, but the kernels your function launched loaded "
                     f"{of_x} of the {n} values of x and {of_r} of r {where}: the outputs come "
                     f"from PyTorch, not from your kernel.",
                     "Let your kernel load x and r itself (tl.load(x_ptr + offsets, mask=mask)"
                     ", the same for r), add them, and compute s and y from what it loaded.")
    book = [k for k in kernels if k.is_the_books]
    if book:
        return wrong(f"your function launches the book's own kernel "
                     f"({book[0].module}.{book[0].name}).",
                     "Write the kernel yourself, starting from chapter 4's one row per program.")
    other = _other_convention(found["convention"], eps)
    if other is not None:
        return other
    verdict = _without_other(kernels)
    if verdict is not None:
        return verdict
    return correct(f"both outputs match the reference on {len(SHAPES)} shapes x {len(DTYPES)} "
                   f"dtypes (incl. 3x13 and 1x1) and on rows that are a view of a wider tensor, "
                   f"y normalizes the stored s, and the inputs are untouched"
                   + (", with every load and store inside its tensors and no program touching "
                      "another's elements." if interpreting else "."))


def _without_other(kernels, where: str = "") -> Feedback | None:
    """The verdict on masked loads without other= in the launched kernels (each a
    :class:`LaunchedKernel`), or None."""
    for kernel in dict.fromkeys(kernels):
        lines = masked_loads_without_other(kernel.source)
        if lines:
            return wrong(f"{kernel.name} loads with a mask but no other= (line "
                         f"{', '.join(map(str, lines))} of the kernel){' ' + where if where else ''}"
                         f": the masked lanes are undefined (the checker fills them with NaN; a GPU "
                         f"may give anything), and they enter the sum of squares.",
                         "Give every masked load a value for the masked lanes: "
                         "tl.load(ptr, mask=mask, other=0.0).")
    return None


def _memory_verdict(audit, where: str) -> Feedback | None:
    """What the interpreter's audit of the answer's launches found, or None."""
    outside = audit.outside()
    if outside is not None and outside.outside_stores:
        return wrong(f"{outside.kernel} stores outside the tensors it was given {where} "
                     f"({outside.outside_stores} lanes; the first lands {outside.first_outside}). "
                     f"The checker skipped them; in a process they corrupt memory, and on a GPU "
                     f"they write into memory no tensor owns.",
                     "Store with mask=mask: lanes past the last column belong to the next row, "
                     "or to no tensor at all after the last row.")
    if outside is not None:
        return wrong(f"{outside.kernel} loads outside the tensors it was given {where} "
                     f"({outside.outside_loads} lanes; the first lands {outside.first_outside}): on "
                     f"a GPU those lanes read memory no tensor owns.",
                     "Load with mask=mask, other=0.0, so lanes past the last column read nothing.")
    races = audit.races()
    if races:
        return wrong(f"{races[0]} {where}. On a GPU the programs run at the same time, in any "
                     f"order, so which value stays is a race; the interpreter runs them one by "
                     f"one, in order, which hides it.",
                     "Let program i store only row i of y and s, and load only x, r and w, never "
                     "what another program stores.")
    return None


def _mistake_returns_y_only(x, r, w, eps=1e-5):
    return reference.add_rmsnorm(x, r, w, eps)


def _mistake_forgets_residual(x, r, w, eps=1e-5):
    return reference.rmsnorm(x, w, eps), (x.float() + r.float()).to(x.dtype)


def _mistake_s_is_x(x, r, w, eps=1e-5):
    return reference.add_rmsnorm(x, r, w, eps), x.clone()


def _mistake_swapped(x, r, w, eps=1e-5):
    y, s = reference.add_rmsnorm_residual(x, r, w, eps)
    return s, y


def _mistake_divides_by_block(x, r, w, eps=1e-5):
    y, s = reference.add_rmsnorm_residual(x, r, w, eps)
    block = triton.next_power_of_2(x.shape[-1])
    sf = s.float()
    rstd = torch.rsqrt((sf * sf).sum(-1, keepdim=True) / block + eps)
    return (sf * rstd * w.float()).to(x.dtype), s


def _mistake_in_place(x, r, w, eps=1e-5):
    y, s = reference.add_rmsnorm_residual(x, r, w, eps)
    r.copy_(s)
    return y, r


def _mistake_raises(x, r, w, eps=1e-5):
    raise IndexError("offsets out of range")


def _mistake_no_weight(x, r, w, eps=1e-5):
    y, s = reference.add_rmsnorm_residual(x, r, torch.ones_like(w), eps)
    return y, s


def _mistake_reference_itself(x, r, w, eps=1e-5):
    return reference.add_rmsnorm_residual(x, r, w, eps)


def _mistake_book_kernel(x, r, w, eps=1e-5):
    from ..kernels import add_rmsnorm

    return add_rmsnorm.add_rmsnorm_residual(x, r, w, eps)


@triton.jit
def _fp32_sum_kernel(x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    col = tl.arange(0, BLOCK)
    mask = col < cols
    x = tl.load(x_ptr + row * cols + col, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row * cols + col, mask=mask, other=0.0).to(tl.float32)
    s = x + r
    tl.store(s_ptr + row * cols + col, s.to(s_ptr.dtype.element_ty), mask=mask)
    rstd = tl.rsqrt(tl.sum(s * s, axis=0) / cols + eps)  # the fp32 sum, not the stored s
    w = tl.load(w_ptr + col, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * cols + col, (s * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _no_other_kernel(x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    col = tl.arange(0, BLOCK)
    mask = col < cols
    x = tl.load(x_ptr + row * cols + col, mask=mask).to(tl.float32)  # masked lanes undefined
    r = tl.load(r_ptr + row * cols + col, mask=mask).to(tl.float32)
    s = (x + r).to(s_ptr.dtype.element_ty)
    tl.store(s_ptr + row * cols + col, s, mask=mask)
    s = s.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(s * s, axis=0) / cols + eps)
    w = tl.load(w_ptr + col, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * cols + col, (s * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _clears_next_row_kernel(x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    col = tl.arange(0, BLOCK)
    mask = col < cols
    # "clear the next row first": a race on a GPU, where program row + 1 may already be done
    zeros = tl.zeros([BLOCK], tl.float32).to(y_ptr.dtype.element_ty)
    below = (row + 1) * cols + col
    tl.store(y_ptr + below, zeros, mask=mask & (below < tl.num_programs(0) * cols))
    x = tl.load(x_ptr + row * cols + col, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row * cols + col, mask=mask, other=0.0).to(tl.float32)
    s = (x + r).to(s_ptr.dtype.element_ty)
    tl.store(s_ptr + row * cols + col, s, mask=mask)
    s = s.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(s * s, axis=0) / cols + eps)
    w = tl.load(w_ptr + col, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * cols + col, (s * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _unmasked_stores_kernel(x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    col = tl.arange(0, BLOCK)
    mask = col < cols
    x = tl.load(x_ptr + row * cols + col, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row * cols + col, mask=mask, other=0.0).to(tl.float32)
    s = (x + r).to(s_ptr.dtype.element_ty)
    tl.store(s_ptr + row * cols + col, s)  # no mask: the last row's tail lies past s
    s = s.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(s * s, axis=0) / cols + eps)
    w = tl.load(w_ptr + col, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * cols + col, (s * rstd * w).to(y_ptr.dtype.element_ty))


def _launcher(kernel):
    def launch(x, r, w, eps=1e-5):
        x, r = x.contiguous(), r.contiguous()
        y, s = torch.empty_like(x), torch.empty_like(x)
        cols = x.shape[-1]
        kernel[(x.numel() // cols,)](x, r, w, y, s, cols, eps, BLOCK=triton.next_power_of_2(cols))
        return y, s
    return launch


residual_variant = Exercise(
    "residual_variant",
    "Write fn(x, r, w, eps) -> (y, s): s = x + r stored in x's dtype, y = rmsnorm(s) * w.",
    _grade_residual, solution=solution_residual,
    mistakes={"returns y only": _mistake_returns_y_only,
              "normalizes x, not x + r": _mistake_forgets_residual,
              "s not stored (returns x)": _mistake_s_is_x,
              "(s, y) swapped": _mistake_swapped,
              "divides by BLOCK": _mistake_divides_by_block,
              "writes into the residual": _mistake_in_place,
              "raises": _mistake_raises,
              "weight forgotten": _mistake_no_weight,
              "the reference itself (no kernel)": _mistake_reference_itself,
              "the book's kernel": _mistake_book_kernel,
              "normalizes the fp32 sum (the other convention)": _launcher(_fp32_sum_kernel),
              "masked loads without other=": _launcher(_no_other_kernel),
              "program i clears row i+1 (a race)": _launcher(_clears_next_row_kernel),
              "unmasked stores": _launcher(_unmasked_stores_kernel),
              "eps ignored": lambda x, r, w, eps=1e-5: solution_residual(x, r, w, 1e-6),
              "eps ignored, the usual default": lambda x, r, w, eps: solution_residual(x, r, w),
              "three arguments": lambda x, r, w: solution_residual(x, r, w),
              "a string": "def f(x, r, w): ...",
              "the kernel instead of the wrapper": solution_kernel})


# ---------------------------------------------------------------- (b) predict its bytes

BYTES_ROWS, BYTES_COLS, BYTES_DTYPE = 16, 4096, "bf16"


def residual_bytes_expected() -> int:
    from .. import traffic

    return traffic.price("fused_add_rmsnorm_residual", BYTES_ROWS, BYTES_COLS,
                         BYTES_DTYPE).bytes_total


def _grade_bytes(answer) -> Feedback:
    # "532,480", "532480 B", arithmetic; a size in a scaled unit is read as rounded ("532.5 kB")
    reading = answers.read(answer, "a number of bytes", answers.BYTES)
    value = reading.value
    expected = residual_bytes_expected()
    unit = None if reading.scaled else in_other_unit((value,), (expected,))
    if unit:  # the right amount, in a unit the plain number does not carry
        scale = BYTE_UNITS[unit.lower()]
        return wrong(f"{value:g} is the right amount in {unit}, but the answer is read as "
                     f"bytes.", f"Write it in bytes ({value:g} x {scale:,.0f}), or as text "
                     f"with its unit: answer = \"{value:g} {unit}\".")
    if value != int(value) and not reading.scaled:
        raise Malformed(f"bytes are whole numbers, got {value} (a size in kB or MB needs its "
                        f"unit, e.g. \"532.48 kB\").")
    matrix = BYTES_ROWS * BYTES_COLS * 2
    weight = BYTES_COLS * 2
    known = {
        "three row-trips": (3 * matrix + weight,
                            "that is the fused kernel that does not write s (3 row-trips).",
                            "The residual-writing variant also stores s = x + r."),
        "no weight": (4 * matrix, "the weight is missing.",
                      f"Add the weight, read once: {weight:,} B."),
        "weight per row": (4 * matrix + BYTES_ROWS * weight, "the weight is counted once per row.",
                           "Every program reads the same weight; the model counts it once (the "
                           "cache serves the repeats)."),
        "fp32 sizes": (2 * (4 * matrix + weight), "that is fp32 sizes.",
                       "bf16 is 2 bytes per element."),
        "eager chain": (7 * matrix + weight, "that is the eager chain (7 row-trips).",
                        "Count one fused kernel: two reads, two writes."),
        "five row-trips": (5 * matrix + weight, "one row-trip too many.",
                           "s stays in registers after it is stored; y is computed from it "
                           "without reading it back."),
    }
    found = answers.match_count(reading, expected, {k: v[0] for k, v in known.items()})
    if found.rough:
        return wrong(*answers.more_digits(reading.shown(), found.also_fits,
                                          "the exact number of bytes"))
    if found.right:
        return correct(f"{expected:,} B = 4 row-trips x {matrix:,} B (read x and r, write y and s) "
                       f"+ the weight once ({weight:,} B).")
    if found.mistake:
        _, msg, hint = known[found.mistake]
        return wrong(f"{value:,.0f} B: {msg}", hint)
    return wrong(f"{value:,.0f} B is not it.",
                 f"Count the tensors with rows: x, r read; y, s written; each {BYTES_ROWS} x "
                 f"{BYTES_COLS} bf16. Then the weight once.")


residual_bytes = Exercise(
    "residual_bytes",
    f"How many bytes of global memory does the residual-writing variant move at "
    f"{BYTES_ROWS} x {BYTES_COLS} bf16?",
    _grade_bytes, solution=4 * BYTES_ROWS * BYTES_COLS * 2 + BYTES_COLS * 2,
    mistakes={"3 row-trips": 3 * 131072 + 8192, "no weight": 4 * 131072,
              "weight per row": 4 * 131072 + 16 * 8192, "fp32": 2 * (4 * 131072 + 8192),
              "eager": 7 * 131072 + 8192, "kB read as bytes": 532.48,
              "KiB read as bytes": 520, "text": "lots", "NaN": float("nan")})


# ---------------------------------------------------------------- (c) the autotune key

# The capstone kernel's arguments, as @triton.autotune sees them (Autotuner.arg_names).
def _kernel_args() -> tuple:
    import inspect

    from ..kernels import add_rmsnorm

    return tuple(inspect.signature(add_rmsnorm.add_rmsnorm_kernel.fn).parameters)


KERNEL_ARGS = _kernel_args()
WIDTH = next(a for a in KERNEL_ARGS if a.lower() == "cols")  # the row width's argument
TENSOR_ARGS = tuple(a for a in KERNEL_ARGS if a.endswith("_ptr"))
SIGNATURE = f"add_rmsnorm_kernel({', '.join(KERNEL_ARGS)})"
DROPPED = ("@triton.autotune builds its key in Autotuner.run from the key names that are "
           "arguments of the kernel; a name that is not one is dropped without a word in Triton "
           "3.6 (newer versions refuse it when the decorator runs). The tuner would then tune once "
           "and reuse that configuration for every width.")


def _read_key(answer) -> list[str]:
    if isinstance(answer, str):  # "COLS", "['COLS']", "key=['COLS']", "COLS, rows"
        import re

        text = re.sub(r"^\s*key\s*=", "", answer)
        answer = [n for n in re.split(r"[\s,]+", text.strip().strip("[](){}").replace("'", "")
                                      .replace('"', "")) if n]
    if isinstance(answer, (set, frozenset)):  # the autotuner only iterates over the names
        answer = sorted(answer, key=str)
    if not isinstance(answer, (list, tuple)) or not answer:
        raise Malformed("write the key as a list of argument names, e.g. answer = ['eps'] "
                        "(the way @triton.autotune(key=[...]) takes it).")
    out = []
    for item in answer:
        if not isinstance(item, str) or not item.strip():
            raise Malformed(f"{item!r} is not a name; write argument names as strings, "
                            f"e.g. 'eps'.")
        out.append(item.strip())
    return list(dict.fromkeys(out))


def _grade_key(answer) -> Feedback:
    key = _read_key(answer)
    lowered = {a.lower(): a for a in KERNEL_ARGS}
    for name in key:
        if name not in KERNEL_ARGS and name.lower() in lowered:
            return wrong(f"{name!r} is not spelled like the argument {lowered[name.lower()]!r}.",
                         "The key matches argument names exactly, case included.")
    unknown = [n for n in key if n not in KERNEL_ARGS]
    if "dtype" in unknown or "x.dtype" in unknown:
        return wrong("the kernel has no argument called dtype, so that name would be dropped from "
                     "the key. You do not need it: Autotuner.run appends str(arg.dtype) of every "
                     "tensor argument to the key by itself, so the dtype is already there.",
                     DROPPED.split(";")[0] + ". Keep only the argument that sets the tile.")
    if unknown:
        return wrong(f"{', '.join(map(repr, unknown))} is not an argument of {SIGNATURE}.",
                     DROPPED)
    names = set(key)
    if "rows" in names:
        return wrong("keying on rows re-tunes (and re-compiles) for every batch size: in serving "
                     "the row count changes every step, so tuning would run inside the model.",
                     "Rows only change how many programs launch; leave them out.")
    tensors = names & set(TENSOR_ARGS)
    if tensors:
        return wrong(f"{', '.join(sorted(tensors))} is a tensor: the key would hold the tensor "
                     f"itself, which compares by identity, so every new tensor re-tunes.",
                     "Tensors enter the key already, as their dtype; key on a number.")
    if names & {"BLOCK", "ROWS_PER_PROGRAM"}:
        return wrong("BLOCK and ROWS_PER_PROGRAM are what a configuration sets (BLOCK follows from "
                     "cols; the seed listing's bug was letting configs set it), not inputs to key "
                     "on.", "The key describes the input: which argument sets the tile's size?")
    if names & {"x_stride", "r_stride", "y_stride", "s_stride"}:
        return wrong("a stride is the width for contiguous rows and anything for a view: keying on it "
                     "re-tunes for every layout while adding nothing for the usual one.",
                     "Key on the argument that sets the tile's size.")
    if "eps" in names:
        return wrong("eps changes a value, not the kernel's tile or its memory traffic.",
                     "Which argument changes how many bytes a row is?")
    if WIDTH not in names:
        return wrong(f"{sorted(names)} leaves the width out: one configuration would serve 2048 "
                     f"and 16384 columns.", "Add the argument that is the width.")
    return correct(f"key=[{WIDTH!r}]: each width is tuned once, and because Autotuner.run adds every "
                   "tensor argument's dtype to the key, each (width, dtype) pair gets its own "
                   "configuration." + (f" {', '.join(sorted(names - {WIDTH}))} in the key "
                                       f"also tunes the compiled variants apart, which does no "
                                       f"harm." if names - {WIDTH} else ""))


autotune_key = Exercise(
    "autotune_key",
    f"The capstone kernel is {SIGNATURE}. Which names do you pass as "
    f"@triton.autotune(key=[...]) so that each (width, dtype) is tuned once, for every batch "
    f"size? answer = [names]",
    _grade_key, solution=[WIDTH],
    mistakes={"dtype as well": [WIDTH, "dtype"], "the seed's name": ["n_cols"],
              "rows": ["rows", WIDTH], "BLOCK": ["BLOCK"], "a tensor": [WIDTH, "x_ptr"],
              "eps": [WIDTH, "eps"], "the tuned knob": ["num_warps"], "a stride": ["x_stride"],
              "width left out": ["WRITE_SUM"], "capitalized": [WIDTH.swapcase()],
              "not a list": 42})

ALL = [residual_variant, residual_bytes, autotune_key, predict_torch_ratio]
