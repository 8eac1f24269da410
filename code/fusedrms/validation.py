"""Input checks shared by every kernel wrapper in the book.

Each check raises :class:`InputError` (a ``ValueError``) whose message names the argument, says
what was received and what to do, so a reader never sees a traceback from deep inside a kernel.
"""
from __future__ import annotations

import math
import numbers

import torch

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
FP32_TINY = torch.finfo(torch.float32).tiny  # 1.2e-38, the smallest normal fp32 number
FP32_MAX = torch.finfo(torch.float32).max  # 3.4e38


class InputError(ValueError):
    """A caller-side mistake, explained."""


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def check_tensor(t, name: str, dtypes=SUPPORTED_DTYPES) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise InputError(f"{name} must be a torch.Tensor, got {type(t).__name__}. "
                         f"Convert it with torch.as_tensor({name}, dtype=torch.float32).")
    if t.layout != torch.strided:
        layout = str(t.layout).replace("torch.", "")
        raise InputError(f"{name} is a {layout} tensor; the kernels read dense rows. Convert it "
                         f"with {name}.to_dense().")
    if t.dtype not in dtypes:
        allowed = ", ".join(_name(d) for d in dtypes)
        rest = sorted(dtypes[1:], key=lambda d: d != torch.bfloat16)  # bfloat16 first
        others = f" (or {'/'.join(_name(d) for d in rest)})" if rest else ""
        raise InputError(f"{name} has dtype {_name(t.dtype)}; supported: {allowed}. "
                         f"Convert it with {name}.to(torch.{_name(dtypes[0])}){others}.")
    return t


def as_rows(x: torch.Tensor, name: str = "x", dtypes=SUPPORTED_DTYPES) -> torch.Tensor:
    """View ``x`` as a 2-D (rows, cols) matrix with unit column stride.

    Leading dimensions are flattened (a (batch, seq, hidden) activation becomes (batch*seq, hidden)).
    A tensor whose last dimension is strided is copied to contiguous memory: kernels address a row
    as ``base + row * row_stride + col``, so columns must be adjacent.
    """
    check_tensor(x, name, dtypes)
    if x.dim() == 0:
        raise InputError(f"{name} is a scalar; RMSNorm normalizes rows. Pass a tensor of shape "
                         f"(rows, cols) or (..., cols).")
    if x.dim() == 1:
        x = x.unsqueeze(0)
    if x.shape[-1] == 0:
        raise InputError(f"{name} has zero columns (shape {tuple(x.shape)}); the mean of an empty "
                         f"row is undefined. Pass at least one column.")
    if x.stride(-1) != 1:
        x = x.contiguous()
    x2 = x.reshape(-1, x.shape[-1])  # a view when possible, a copy otherwise
    if x2.shape[0] > 1 and x2.stride(0) < x2.shape[1]:
        x2 = x2.contiguous()
    return x2


def check_weight(w, cols: int, device: torch.device, name: str = "w",
                 dtypes=SUPPORTED_DTYPES) -> torch.Tensor:
    check_tensor(w, name, dtypes)
    if w.dim() != 1 or w.shape[0] != cols:
        raise InputError(f"{name} must be a vector with one weight per column: expected shape "
                         f"({cols},), got {tuple(w.shape)}.")
    if w.device != device:
        raise InputError(f"{name} is on {w.device} but x is on {device}; move it with "
                         f"{name}.to(x.device).")
    return w if w.stride(0) == 1 else w.contiguous()


def check_same(a: torch.Tensor, b: torch.Tensor, a_name: str, b_name: str,
               dtypes=SUPPORTED_DTYPES) -> None:
    """``b`` must match ``a`` in shape, dtype and device (e.g. the residual against x)."""
    check_tensor(b, b_name, dtypes)
    if b.shape != a.shape:
        raise InputError(f"{b_name} has shape {tuple(b.shape)} but {a_name} has "
                         f"{tuple(a.shape)}; they must match.")
    if b.dtype != a.dtype:
        raise InputError(f"{b_name} is {_name(b.dtype)} but {a_name} is {_name(a.dtype)}; "
                         f"convert one with .to({a_name}.dtype).")
    if b.device != a.device:
        raise InputError(f"{b_name} is on {b.device} but {a_name} is on {a.device}; "
                         f"move it with .to({a_name}.device).")


def check_device(x: torch.Tensor, expected: torch.device, name: str = "x") -> None:
    """Kernels run where the book's environment says: the GPU, or the CPU under the interpreter."""
    if x.device.type != expected.type:
        hint = ("call .cuda() on the inputs" if expected.type == "cuda"
                else "call .cpu() on the inputs (there is no GPU here, kernels run on the CPU)")
        raise InputError(f"{name} is on {x.device}, but kernels here run on {expected}; {hint}.")


def check_width(cols: int, max_cols: int, kernel: str, alternative: str | None = None) -> None:
    if cols > max_cols:
        more = f" Use {alternative} for wider rows." if alternative else ""
        raise InputError(f"{kernel} keeps a whole row on chip and supports at most {max_cols} "
                         f"columns; got {cols}.{more}")


def _fp32_argument(value, name: str, example: str, usual: str) -> float:
    """``value`` as a float a kernel can take as an fp32 argument: 0, or a finite number in fp32's
    normal range. Below 1.2e-38 it would be subnormal (a GPU flushes it to 0, the interpreter keeps
    it) and above 3.4e38 infinite, so those are refused here."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"{name} must be a number such as {example}, got {value!r} "
                         f"({type(value).__name__}).")
    try:
        number = float(value)
    except (OverflowError, TypeError, ValueError):
        shown = repr(value) if len(repr(value)) <= 24 else (f"{repr(value)[:12]}... "
                                                            f"({len(repr(value))} digits)")
        raise InputError(f"{name}={shown} does not fit a float; pass a finite number such as "
                         f"{example}.") from None
    if not (number >= 0.0 and math.isfinite(number)):
        raise InputError(f"{name} must be a finite number >= 0 ({usual}), got {number}.")
    if number > FP32_MAX:
        raise InputError(f"{name}={number:g} is beyond fp32's largest number ({FP32_MAX:.3g}); the "
                         f"kernels take {name} as fp32. Pass a value such as {example}.")
    if 0.0 < number < FP32_TINY:
        raise InputError(f"{name}={number:g} is below fp32's smallest normal number "
                         f"({FP32_TINY:.3g}): a GPU flushes it to 0. Pass 0.0 or at least "
                         f"{FP32_TINY:.3g}.")
    return number


def check_eps(eps, name: str = "eps") -> float:
    """eps as a float the kernels can use: 0, or a finite number in fp32's normal range."""
    return _fp32_argument(eps, name, "1e-5", "1e-5 or 1e-6 in most models")


def check_absmax_floor(absmax_floor, name: str = "absmax_floor") -> float:
    """FP8's absmax floor (chapter 8) as a float: 0 (no floor), or a finite number in fp32's normal
    range. Beyond 3.4e38 every scale would be infinite and every code 0."""
    return _fp32_argument(absmax_floor, name, "1e-4", "1e-4 as in DeepSeek-V3; 0 means no floor")


def check_tolerance(value, name: str) -> float:
    """A comparison tolerance as a float: a finite number >= 0.

    A NaN bound compares false with every error, an infinite one exceeds every error, and a negative
    one can only fail: each would turn a check into a fixed answer, so they are refused here.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"{name} must be a number such as 1e-3, got {value!r} "
                         f"({type(value).__name__}).")
    try:
        number = float(value)
    except OverflowError:  # an int beyond float's range
        number = math.inf if value > 0 else -math.inf
    if not (math.isfinite(number) and number >= 0.0):
        raise InputError(f"{name} must be a finite number >= 0, got {number}: a NaN or infinite "
                         f"tolerance would pass any output, a negative one fail every output.")
    return number


def check_flag(value, name: str) -> bool:
    """A switch must be True or False: a string such as "no" would otherwise count as True."""
    if not isinstance(value, bool):
        raise InputError(f"{name} must be True or False, got {value!r} ({type(value).__name__}).")
    return value


AUTOGRAD_ENTRY_POINTS = ("fusedrms.kernels.rmsnorm_backward.rmsnorm, add_rmsnorm or the "
                         "RMSNorm module")


def check_forward_only(tensors: dict, kernel: str, role: str = "forward only") -> None:
    """Refuse inputs that require grad while autograd records: ``kernel`` is ``role`` (forward
    only; or a backward, itself not differentiable), so its output would have no ``grad_fn`` and
    ``backward()`` would silently skip it."""
    if not torch.is_grad_enabled():
        return
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor) and t.requires_grad:
            raise InputError(
                f"{name} requires grad, but {kernel} is {role}: its output would have no "
                f"gradient. To train through RMSNorm use {AUTOGRAD_ENTRY_POINTS}; to run this "
                f"kernel alone pass {name}.detach() or call it under torch.no_grad().")


def _byte_range(t: torch.Tensor) -> tuple[int, int] | None:
    """[first byte, one past the last byte] that ``t`` can touch; None when it has no elements."""
    if t.numel() == 0:
        return None
    span = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    start = t.data_ptr()
    return start, start + (span + 1) * t.element_size()


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` may share memory: same device and intersecting byte ranges.
    (Conservative: two interleaved views of one buffer count as overlapping.)"""
    if a.device != b.device:
        return False
    ra, rb = _byte_range(a), _byte_range(b)
    return ra is not None and rb is not None and ra[0] < rb[1] and rb[0] < ra[1]


def check_no_overlap(written: dict, read: dict) -> None:
    """Refuse outputs that share memory with inputs they do not replace, or with each other.

    ``written`` and ``read`` map argument names to tensors. An output may be the very tensor of
    the same name (in-place: each element is read before it is overwritten, by the same program);
    any other overlap lets one program overwrite what another has yet to read, a silent wrong
    answer that depends on scheduling.
    """
    names = list(written)
    for i, out_name in enumerate(names):
        out = written[out_name]
        for other in names[i + 1:]:
            if overlaps(out, written[other]):
                raise InputError(f"{out_name} and {other} are both written but share memory; pass "
                                 f"separate tensors (e.g. {other}.clone()).")
        for in_name, inp in read.items():
            if in_name == out_name:
                if (inp.data_ptr(), inp.shape, inp.stride()) == (out.data_ptr(), out.shape,
                                                                 out.stride()):
                    continue
            if overlaps(out, inp):
                raise InputError(f"{out_name} is written but shares memory with {in_name}, which "
                                 f"is read: parts of {in_name} would be overwritten before they "
                                 f"are read. Pass {in_name}.clone() (or separate tensors).")


# ---------------------------------------------------------------- the input policy (chapter 5)

EPS0_MIN_RMS = math.sqrt(FP32_TINY)  # 1.1e-19: below it, with eps = 0, the mean square underflows


def overflow_rms(cols: int) -> float:
    """The row RMS at which the fp32 sum of squares overflows: ``sqrt(3.4e38 / cols)``
    (2.9e17 at 4096 columns). At or above it every kernel returns the row as NaN."""
    if isinstance(cols, bool) or not isinstance(cols, numbers.Integral) or cols < 1:
        raise InputError(f"cols must be a whole number >= 1, got {cols!r}.")
    return math.sqrt(FP32_MAX / cols)


def input_policy(cols: int = 4096) -> list[dict]:
    """What every kernel wrapper does with every kind of input, one row each: ``input``,
    ``outcome`` and ``kind`` (``rejected``: an :class:`InputError` that says what to do;
    ``computed``: within ``checks.tolerance_for`` of the float64 reference; ``loud``: NaN or Inf,
    never a finite wrong value; ``peer``: PyTorch's own behaviour, which the book does not change).
    Thresholds are computed for rows of ``cols`` columns."""
    big = overflow_rms(cols)
    rows = [
        ("x, residual or w not a tensor, a scalar x, zero columns, or a dtype other than float32, "
         "float16, bfloat16 (FP8: bfloat16 only)", "InputError naming the argument and the "
         "conversion to make", "rejected"),
        ("w not one value per column, residual not shaped like x, tensors on different devices",
         "InputError", "rejected"),
        ("eps not a number (a string, None, a bool, a tensor), negative, NaN, Inf, above "
         f"{FP32_MAX:.1e}, or between 0 and {FP32_TINY:.1e} (subnormal in fp32)", "InputError",
         "rejected"),
        ("in place: an output sharing any byte with an input it does not replace (overlapping "
         "views, w inside x)", "InputError", "rejected"),
        ("a row wider than the kernel keeps on chip; a switch that is not True/False "
         "(in_place=\"no\")", "InputError (naming the route for wider rows)", "rejected"),
        (f"finite rows with rms(x) below sqrt({FP32_MAX:.1e} / cols) ({big:.1e} at {cols} "
         f"columns), eps >= {FP32_TINY:.1e}", "computed to tolerance", "computed"),
        (f"eps = 0 and rms(x) >= {EPS0_MIN_RMS:.1e}", "computed to tolerance", "computed"),
        ("no rows; an all-zero row with eps > 0", "an empty output; zeros", "computed"),
        ("a NaN or an Inf anywhere in a row of x (or x + residual)", "the whole row NaN", "loud"),
        (f"rms(x) at or above sqrt({FP32_MAX:.1e} / cols) ({big:.1e} at {cols} columns): the "
         "fp32 sum of squares overflows", "the whole row NaN (not zeros, as torch gives)", "loud"),
        (f"eps = 0 and rms(x) below {EPS0_MIN_RMS:.1e} (an all-zero row included)",
         "the whole row NaN", "loud"),
        ("a NaN or an Inf in w; an output beyond its dtype (float16 above 65504)",
         "NaN or Inf in those columns only", "loud"),
        ("FP8: a NaN or an Inf in a 128-column block (from x, gamma or a bf16 product)",
         "that block's scale and all its codes NaN", "loud"),
        ("the torch.* peers (PyTorch's own ops, measured for comparison)", "the checks above, "
         "then PyTorch's answer: zeros for an overflowed or Inf row", "peer"),
    ]
    return [{"input": i, "outcome": o, "kind": k} for i, o, k in rows]


INPUT_POLICY = input_policy()
