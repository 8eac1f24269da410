"""Launching a kernel Triton already compiled, for calls that repeat a first call's shapes.

A model calls an op with the same shapes every step, so the capstone and ``fp8.fused`` keep what
their first call decided (a "plan"), and the plan keeps the compiled kernel of the first launch.
Between two such calls only the tensors' addresses change; every other argument, the grid and
the binary are the first launch's.

Triton's own way back into a compiled kernel (``compiled[grid](*args)``) asks each tensor for its
``data_ptr()`` and the driver to validate the pointer, looks up the current device and stream
through its driver, and builds the launch's metadata for hooks that may not be set. On the H200
(torch 2.11, Triton 3.6) that took 10-13 us of a call to ``fp8.fused``; calling the same launcher
with the pointers as integers, the stream, and no hooks where none is set took 6-8.
The pointers need no validation here: the plan's key holds the tensors' device, dtype and
16-byte alignment, which the first launch validated.
"""
from __future__ import annotations

import inspect

import torch
import triton
from triton import knobs

# Triton's launch options, not kernel parameters
LAUNCH_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg", "grid"})


class DirectLaunch:
    """The compiled kernel of one first launch, launched again on other tensors of the same
    shapes. Built by :func:`after_first_launch`; called with the kernel's pointer arguments (the
    tensors, in the kernel's order), which every kernel here takes first."""

    __slots__ = ("compiled", "grid", "pointers", "rest")

    def __init__(self, compiled, grid: tuple[int, int, int], pointers: int, rest: tuple):
        self.compiled, self.grid, self.pointers, self.rest = compiled, grid, pointers, rest

    def __call__(self, *tensors) -> None:
        if len(tensors) != self.pointers:
            raise TypeError(f"{self.compiled.name} takes {self.pointers} tensors, got {len(tensors)}")
        c, grid = self.compiled, self.grid
        stream = _current_stream()
        args = (*[t.data_ptr() for t in tensors], *self.rest)
        # a profiler's hooks (Proton) still see the launch; no hook costs nothing
        enter, leave = _hook(knobs.runtime.launch_enter_hook), _hook(knobs.runtime.launch_exit_hook)
        meta = None if enter is None else c.launch_metadata(grid, stream, *args)
        c.run(*grid, stream, c.function, c.packed_metadata, meta, enter, leave, *args)


def _hook(hook):
    """None where no launch hook is set. Triton 3.5 and later hold the hooks in a ``HookChain``,
    which is never None: an empty one still had the launch build its metadata and call two empty
    chains, 4.8 of the 11.7 us of a direct launch on the H200 (6.9 with None)."""
    return None if hook is None or not getattr(hook, "calls", True) else hook


def after_first_launch(compiled, grid: int, kernel, pointers: int, *args,
                       **kwargs) -> DirectLaunch | None:
    """A :class:`DirectLaunch` of ``kernel`` as just launched (``compiled``, what
    ``kernel[(grid,)](*args, **kwargs)`` returned), or None where there is no compiled binary to
    launch again (the interpreter, or a device Triton does not compile for)."""
    if not (isinstance(compiled, triton.compiler.CompiledKernel) and _on_gpu(args, kwargs)):
        return None
    compiled._init_handles()  # the binary is loaded at the first launch; this only makes sure
    return DirectLaunch(compiled, (grid, 1, 1), pointers,
                        arguments_after(kernel, pointers, *args, **kwargs))


def arguments_after(kernel, pointers: int, *args, **kwargs) -> tuple:
    """The kernel's arguments after its first ``pointers`` (which must be the tensors, and the
    only ones), in its signature's order, defaults filled in: the launcher takes every
    parameter, constexprs included, by position."""
    params = {k: v for k, v in kwargs.items() if k not in LAUNCH_OPTIONS}
    bound = inspect.signature(kernel.fn).bind(*args, **params)
    bound.apply_defaults()
    values = list(bound.arguments.values())
    if not all(isinstance(v, torch.Tensor) for v in values[:pointers]) or any(
            isinstance(v, torch.Tensor) for v in values[pointers:]):
        raise TypeError(f"{kernel.fn.__name__} must take its {pointers} tensors first")
    return tuple(values[pointers:])


def _current_stream() -> int:
    """The stream Triton's own launch would use: the current device's current stream."""
    driver = triton.runtime.driver.active
    return driver.get_current_stream(driver.get_current_device())


def _on_gpu(args, kwargs) -> bool:
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    return bool(tensors) and all(t.device.type == "cuda" for t in tensors)
