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

import functools
import inspect

import torch
import triton
from triton import knobs

from .. import env

# Triton's launch options, not kernel parameters
LAUNCH_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg", "grid", "launch_pdl",
                            "launch_cooperative_grid"})

# Programmatic dependent launch: a kernel launched with it may start while the kernel before it in
# the stream drains, and waits (griddepcontrol.wait) before it touches memory, so its launch hides
# behind the other's tail. FlashInfer's, vLLM's and TensorRT-LLM's norms launch so on compute
# capability 9 and later. False turns it off for every launch after (the lever study's control).
PDL = True


@functools.lru_cache(maxsize=None)
def _triton_has_pdl() -> bool:
    from triton.backends.nvidia.compiler import CUDAOptions

    return "launch_pdl" in CUDAOptions.__dataclass_fields__


def launches_with_pdl(device: torch.device) -> bool:
    """Whether the capstone's launches use programmatic dependent launch on ``device`` (the
    whole-row, two-pass and split kernels; the exchange kernel is a cooperative launch): an
    NVIDIA GPU of compute capability 9 or later, a Triton that has the launch option, and
    :data:`PDL` on. Never under the interpreter or on an AMD GPU."""
    if not PDL:
        return False
    capability = env.nvidia_capability(device)
    return capability is not None and capability[0] >= 9 and _triton_has_pdl()


def pdl_option(pdl: bool) -> dict:
    """Triton's launch option for programmatic dependent launch, named only where it is on (a
    Triton without it, or an AMD GPU, takes no such option)."""
    return {"launch_pdl": True} if pdl else {}


class DirectLaunch:
    """The compiled kernel of one first launch, launched again on other tensors of the same
    shapes. Built by :func:`after_first_launch`; called with the kernel's pointer arguments (the
    tensors, in the kernel's order), which every kernel here takes first."""

    __slots__ = ("compiled", "grid", "pointers", "rest", "bare")

    def __init__(self, compiled, grid: tuple[int, int, int], pointers: int, rest: tuple):
        self.compiled, self.grid, self.pointers, self.rest = compiled, grid, pointers, rest
        self.bare = bare_launch(compiled.run)

    def __call__(self, *tensors) -> None:
        if len(tensors) != self.pointers:
            raise TypeError(f"{self.compiled.name} takes {self.pointers} tensors, got {len(tensors)}")
        self.at(*[t.data_ptr() for t in tensors])

    def at(self, *addresses: int) -> None:
        """The launch on tensors given by their addresses (``data_ptr()``), in the kernel's order:
        for a caller that already read them (``fp8.fused`` keys its plans on their alignment)."""
        c, grid = self.compiled, self.grid
        stream = _current_stream()
        args = (*addresses, *self.rest)
        # a profiler's hooks (Proton) still see the launch; no hook costs nothing. Triton 3.5+
        # holds the hooks in a HookChain, never None: an empty one still had every launch build
        # its metadata and call two empty chains (4.8 of 11.7 us of a launch on the H200)
        enter, leave = _hook(knobs.runtime.launch_enter_hook), _hook(knobs.runtime.launch_exit_hook)
        meta = None if enter is None else c.launch_metadata(grid, stream, *args)
        if self.bare is not None:
            launch, cooperative, pdl = self.bare
            launch(*grid, stream, c.function, cooperative, pdl, None, None, c.packed_metadata,
                   meta, enter, leave, *args)
        else:
            c.run(*grid, stream, c.function, c.packed_metadata, meta, enter, leave, *args)


def _hook(hook):
    """None where no launch hook is set (an empty HookChain included)."""
    return None if hook is None or not getattr(hook, "calls", True) else hook


def bare_launch(launcher) -> tuple | None:
    """(C launch, cooperative, PDL) of Triton 3.6's CUDA launcher where the kernel needs no
    scratch memory, else None. That launcher's ``__call__`` only allocates scratch memory and
    then calls its compiled C launch: two nested functions defined and two called per launch,
    about 2 us of Python per call under cProfile on the H200. Other Triton versions and backends
    order the C launch's arguments otherwise (and only 3.6 was run), so they keep the launcher."""
    if not (triton.__version__.startswith("3.6.") and type(launcher).__name__ == "CudaLauncher"
            and type(launcher).__module__.startswith("triton.backends.nvidia")):
        return None
    if getattr(launcher, "global_scratch_size", 1) or getattr(launcher, "profile_scratch_size", 1):
        return None
    return launcher.launch, launcher.launch_cooperative_grid, launcher.launch_pdl


# A model calls an op with a few shapes; a program that makes many (a sweep) starts the store of
# plans afresh at this bound rather than let it grow
MAX_PLANS = 256


def remember(plans: dict, key, plan) -> None:
    """Keep ``plan`` in ``plans`` under ``key``; a store of :data:`MAX_PLANS` starts afresh."""
    if len(plans) >= MAX_PLANS:
        plans.clear()
    plans[key] = plan


def after_first_launch(compiled, grid: int, kernel, pointers: int, *args,
                       **kwargs) -> DirectLaunch | None:
    """A :class:`DirectLaunch` of ``kernel`` as just launched (``compiled``, what
    ``kernel[(grid,)](*args, **kwargs)`` returned), or None where there is no compiled binary to
    launch again (the interpreter returns none)."""
    if not isinstance(compiled, triton.compiler.CompiledKernel):
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


_stream_of = _device_now = None  # bound at the first direct launch (there is a GPU then)


def _current_stream() -> int:
    """The stream Triton's own launch would use: the current device's current stream. Triton
    reads the device through ``torch.cuda.current_device()``, which first makes sure CUDA is
    initialized; a plan exists only after a launch, so the device is read directly."""
    global _stream_of, _device_now
    if _stream_of is None:
        driver = triton.runtime.driver.active
        _stream_of = driver.get_current_stream
        _device_now = getattr(torch._C, "_cuda_getDevice", None) or driver.get_current_device
    return _stream_of(_device_now())
