"""Input checks shared by every kernel wrapper in the book.

Each check raises :class:`InputError` (a ``ValueError``) whose message names the argument, says
what was received and what to do, so a reader never sees a traceback from deep inside a kernel.
"""
from __future__ import annotations

import torch

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class InputError(ValueError):
    """A caller-side mistake, explained."""


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def check_tensor(t, name: str, dtypes=SUPPORTED_DTYPES) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise InputError(f"{name} must be a torch.Tensor, got {type(t).__name__}. "
                         f"Convert it with torch.as_tensor({name}, dtype=torch.float32).")
    if t.dtype not in dtypes:
        allowed = ", ".join(_name(d) for d in dtypes)
        raise InputError(f"{name} has dtype {_name(t.dtype)}; supported: {allowed}. "
                         f"Convert it with {name}.to(torch.float32) (or bfloat16/float16).")
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


def check_eps(eps) -> float:
    try:
        eps = float(eps)
    except (TypeError, ValueError):
        raise InputError(f"eps must be a number, got {eps!r}.") from None
    if not eps >= 0.0 or eps == float("inf"):
        raise InputError(f"eps must be a finite number >= 0, got {eps}.")
    return eps
