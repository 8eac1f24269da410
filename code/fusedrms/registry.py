"""One list of every implementation in the book, so verification and benchmarks see them all.

A kernel module registers its wrappers when imported::

    registry.register(registry.Impl("triton.row", op="rmsnorm", fn=rmsnorm_row, route="triton"))

Signatures by op (out of place unless ``Impl.mutates``; ``eps`` is a float):

- ``rmsnorm``:               ``fn(x, w, eps) -> y``
- ``add_rmsnorm``:           ``fn(x, residual, w, eps) -> y``
- ``add_rmsnorm_residual``:  ``fn(x, residual, w, eps) -> (y, x + residual)``
- ``rmsnorm_fp8``:           ``fn(x, w, eps) -> (codes float8_e4m3fn, scales float32)``
- ``rmsnorm_backward``:      ``fn(x, w, dy, eps) -> (dx, dw)`` (chapter 9)
- ``add_rmsnorm_backward``:  ``fn(x, residual, w, dy, eps, d_sum=None) -> (d_input, dw)``: the
  gradient of ``rmsnorm(x + residual) * w``; ``d_input`` is that of x and of residual, plus
  ``d_sum``, the gradient arriving at the residual output ``x + residual`` when there is one

:func:`load_all` imports every module that registers something.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import torch

OPS = ("rmsnorm", "add_rmsnorm", "add_rmsnorm_residual", "rmsnorm_fp8", "rmsnorm_backward",
       "add_rmsnorm_backward")
BACKWARD_OPS = ("rmsnorm_backward", "add_rmsnorm_backward")

# Modules that register implementations, in the order the book introduces them.
MODULES = (
    "fusedrms.kernels.peers",
    "fusedrms.kernels.hip.kernels",
    "fusedrms.kernels.rmsnorm",
    "fusedrms.kernels.add_rmsnorm",
    "fusedrms.kernels.rmsnorm_fp8",
    "fusedrms.kernels.rmsnorm_backward",
)


@dataclass(frozen=True)
class Impl:
    name: str
    op: str
    fn: Callable
    route: str  # "triton", "hip", "torch" (peers and eager chains)
    dtypes: tuple = (torch.float32, torch.float16, torch.bfloat16)
    devices: tuple = ("cpu", "cuda")  # "cuda" also means ROCm GPUs
    max_cols: int | None = None
    description: str = ""
    kernel: bool = True  # False for library peers (torch ops), which verify may skip
    gpu_only_reason: str = ""  # why it cannot run on the CPU path, when "cpu" not in devices
    mutates: bool = False  # in place (FlashInfer's, vLLM's layout): callers pass copies to check it
    # A limit that depends on the GPU (FlashInfer keeps a row in shared memory): the widest row
    # on a device kind ("cpu", "cuda"), None when it is not known there; and why.
    width_limit: Callable[[str], int | None] | None = None
    width_reason: str = ""

    def col_limit(self, device: str) -> int | None:
        """The widest row this implementation takes on ``device`` (None: no limit)."""
        limits = [self.max_cols, self.width_limit(device) if self.width_limit else None]
        known = [n for n in limits if n is not None]
        return min(known) if known else None

    def width_note(self) -> str:
        """`` (why)`` after a width refusal, or nothing when no reason is recorded."""
        return f" ({self.width_reason})" if self.width_reason else ""

    def supports(self, device: str, dtype: torch.dtype, cols: int) -> bool:
        limit = self.col_limit(device) if device in self.devices else None
        return (device in self.devices and dtype in self.dtypes
                and (limit is None or cols <= limit))


_IMPLS: dict[str, Impl] = {}


def register(impl: Impl) -> Impl:
    if impl.op not in OPS:
        raise ValueError(f"unknown op {impl.op!r}; expected one of {OPS}")
    _IMPLS[impl.name] = impl  # re-registering (a reloaded module) replaces
    return impl


def load_all() -> None:
    for module in MODULES:
        importlib.import_module(module)


def impls(op: str | None = None) -> list[Impl]:
    load_all()
    return [i for i in _IMPLS.values() if op is None or i.op == op]


def get(name: str) -> Impl:
    load_all()
    try:
        return _IMPLS[name]
    except KeyError:
        known = ", ".join(sorted(_IMPLS))
        raise KeyError(f"no implementation named {name!r}; known: {known}") from None
