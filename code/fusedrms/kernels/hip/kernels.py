"""Python wrappers for the HIP kernels of rmsnorm.hip, loaded with ctypes.

Tensors on the GPU run the library built for it (nvcc on NVIDIA, hipcc on AMD) on torch's current
stream; tensors on the CPU run the same source on the CPU runtime (compat/cpu.h). Every wrapper
validates its inputs with :mod:`fusedrms.validation` and is registered as ``hip.<variant>``.

    from . import kernels
    y = kernels.rmsnorm(x, w, 1e-5, variant="block", block_size=256)
"""
from __future__ import annotations

import ctypes
import functools
import re

import torch

from ... import env, registry, validation
from . import build

VARIANTS = ("serial", "block", "shuffle", "vectorized", "unfused", "vectorized_unfused")
UNFUSED = ("unfused", "vectorized_unfused")  # three kernels, intermediates in a global workspace
DESCRIPTIONS = {
    "serial": "one thread per row: a sequential sum of squares, then a second pass writing y",
    "block": "one block per row: strided columns in a register, shared-memory tree with barriers",
    "shuffle": "one block per row: warp/wavefront shuffles, one shared-memory step between warps",
    "vectorized": "16-byte loads, the row kept in registers (x read once), shuffle finish",
    "unfused": "three kernels (square, row sum, scale) with intermediates in global memory",
    "vectorized_unfused": "hip.unfused's three kernels with hip.vectorized's 16-byte loads and "
                          "stores: the fused kernel's twin that differs only in fusion",
}
DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
DTYPES = tuple(DTYPE_CODES)
ROW_FLOATS_PER_THREAD = 32  # matches rmsnorm.hip: the vectorized kernel's register budget
MAX_BLOCK = 1024
VECTORIZED_MAX_COLS = ROW_FLOATS_PER_THREAD * MAX_BLOCK


class KernelError(RuntimeError):
    """The launch failed or the CPU runtime caught a bug (a race, a divergent barrier)."""


def toolchain_for(device: torch.device) -> str:
    """Which build runs tensors on ``device``: the CPU runtime, nvcc or hipcc."""
    if device.type == "cpu":
        return "cpu"
    return "hipcc" if getattr(torch.version, "hip", None) else "nvcc"


@functools.lru_cache(maxsize=None)
def _library(toolchain: str, text: str | None, defines: tuple) -> ctypes.CDLL:
    return build.load(text, toolchain, defines=dict(defines) or None)


def check_build_options(text, defines) -> dict:
    """``text`` (kernel source) a string or None; ``defines`` a dict of preprocessor macros,
    ``{"NAME": value}`` with a C identifier as NAME and a number, a string or None as value."""
    if text is not None and not isinstance(text, str):
        raise validation.InputError(f"text must be the kernel source as a string (or None for "
                                    f"rmsnorm.hip), got {type(text).__name__}.")
    if defines is None:
        return {}
    if not isinstance(defines, dict):
        raise validation.InputError(f"defines must be a dict of preprocessor macros such as "
                                    f"{{'FUSEDRMS_CPU_WARP': 64}}, got {defines!r} "
                                    f"({type(defines).__name__}).")
    for key, value in defines.items():
        if not (isinstance(key, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key)):
            raise validation.InputError(f"defines: {key!r} is not a macro name (letters, digits "
                                        f"and _, not starting with a digit).")
        if isinstance(value, bool) or not (value is None or isinstance(value, (int, float, str))):
            raise validation.InputError(f"defines[{key!r}] must be a number, a string or None "
                                        f"(a bare -D{key}), got {value!r} "
                                        f"({type(value).__name__}); write 1 or 0 for a switch.")
        if isinstance(value, str) and any(c in value for c in "\n\r\0"):
            raise validation.InputError(f"defines[{key!r}] must be one line, got {value!r}.")
    return defines


def library(device: torch.device | str = "cpu", text: str | None = None,
            defines: dict | None = None) -> ctypes.CDLL:
    """The compiled library for ``device`` (cached on disk and in this process)."""
    defines = check_build_options(text, defines)
    return _library(toolchain_for(torch.device(device)), text, tuple(sorted(defines.items())))


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def default_block_size(variant: str, cols: int, dtype: torch.dtype = torch.float32) -> int:
    """The book's choice: 256 threads (the seed's), 128 rows per block for serial, and for the
    vectorized kernel enough threads that each holds about four 16-byte packs of the row."""
    if variant == "serial":
        return 128
    if variant == "vectorized":
        per_pack = 16 // torch.tensor([], dtype=dtype).element_size()  # 4 floats or 8 halves
        want = -(-cols // (4 * per_pack))  # threads for about four packs each
        block = 64
        while block < want and block < MAX_BLOCK:
            block *= 2
        return block
    return 256


def _check_block(block_size, variant: str, cols: int) -> int:
    if isinstance(block_size, bool) or not isinstance(block_size, int) or not (
            1 <= block_size <= MAX_BLOCK and is_power_of_two(block_size)):
        raise validation.InputError(
            f"block_size must be a power of two from 1 to {MAX_BLOCK} (the tree reduction halves "
            f"the active threads each step), got {block_size!r}. Leave it None for the default.")
    if variant == "vectorized" and cols > ROW_FLOATS_PER_THREAD * block_size:
        raise validation.InputError(
            f"hip.vectorized keeps the row in registers, at most {ROW_FLOATS_PER_THREAD} values "
            f"per thread: {cols} columns need block_size >= {cols / ROW_FLOATS_PER_THREAD:.0f} "
            f"(got {block_size}). Use a larger block or leave block_size None.")
    return block_size


def _stream(device: torch.device) -> int | None:
    if device.type == "cpu":
        return None
    return torch.cuda.current_stream(device).cuda_stream


def rmsnorm(x, w, eps: float = 1e-5, variant: str = "block", block_size: int | None = None,
            text: str | None = None, defines: dict | None = None) -> torch.Tensor:
    """RMSNorm of every row of ``x`` with one of the HIP kernels.

    ``text`` runs a variant of the kernel source (an edited copy of rmsnorm.hip, e.g. an exercise
    answer) instead of the file; ``defines`` adds preprocessor definitions to its build.
    """
    if variant not in VARIANTS:
        raise validation.InputError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}.")
    check_build_options(text, defines)
    validation.check_tensor(x, "x", DTYPES)
    validation.check_forward_only({"x": x, "w": w}, f"hip.{variant}")
    if x.device.type not in ("cpu", "cuda"):
        raise validation.InputError(f"x is on {x.device}; HIP kernels run on a GPU ('cuda', which "
                                    f"also means ROCm) or on the CPU runtime ('cpu').")
    shape = tuple(x.shape)
    x2 = validation.as_rows(x, "x")
    rows, cols = x2.shape
    if variant == "vectorized":
        validation.check_width(cols, VECTORIZED_MAX_COLS, "hip.vectorized", "hip.shuffle")
    w = validation.check_weight(w, cols, x2.device, "w")
    validation.check_tensor(w, "w", DTYPES)
    if w.dtype != x2.dtype:
        raise validation.InputError(f"w is {w.dtype} but x is {x2.dtype}; the HIP kernels read both "
                                    f"in one format: convert with w.to(x.dtype).")
    eps = validation.check_eps(eps)
    block = _check_block(default_block_size(variant, cols, x2.dtype) if block_size is None else block_size,
                         variant, cols)
    y2 = torch.empty((rows, cols), dtype=x2.dtype, device=x2.device)
    if rows == 0:
        return y2.reshape(shape)
    lib = library(x2.device, text, defines)
    args = (DTYPE_CODES[x2.dtype], x2.data_ptr(), w.data_ptr(), y2.data_ptr())
    tail = (rows, cols, x2.stride(0), eps, block, _stream(x2.device))
    if variant in UNFUSED:
        workspace = torch.empty(rows * cols + rows, dtype=torch.float32, device=x2.device)
        status = getattr(lib, f"fusedrms_rmsnorm_{variant}")(*args, workspace.data_ptr(), *tail)
    else:
        status = getattr(lib, f"fusedrms_rmsnorm_{variant}")(*args, *tail)
    if status != 0:
        message = lib.fusedrms_error_message().decode(errors="replace")
        raise KernelError(f"hip.{variant} failed: {message}")
    return y2.reshape(shape)


def vector_width(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor | None = None) -> int:
    """The vector width hip.vectorized uses for these tensors (1 means the scalar fallback)."""
    x2 = validation.as_rows(x, "x")
    y = torch.empty_like(x2) if y is None else y
    lib = library(x2.device)
    return lib.fusedrms_vector_width(DTYPE_CODES[x2.dtype], x2.data_ptr(), w.data_ptr(),
                                     y.data_ptr(), x2.shape[1], x2.stride(0))


def platform(device: torch.device | str = "cpu") -> str:
    """What the library for ``device`` was built for, as it reports itself."""
    return library(device).fusedrms_platform().decode()


def warp_lanes(device: torch.device | str = "cpu", defines: dict | None = None) -> int:
    """Lanes per warp of ``device`` as its runtime reports them: 32 on NVIDIA, 64 or 32 on AMD,
    ``FUSEDRMS_CPU_WARP`` (32 unless defined otherwise) on the CPU runtime."""
    return library(device, defines=defines).fusedrms_warp_lanes()


def _wrapper(variant: str):
    def run(x, w, eps: float = 1e-5) -> torch.Tensor:
        return rmsnorm(x, w, eps, variant=variant)

    run.__name__ = f"rmsnorm_{variant}"
    run.__doc__ = f"hip.{variant}: {DESCRIPTIONS[variant]}."
    return run


rmsnorm_serial = _wrapper("serial")
rmsnorm_block = _wrapper("block")
rmsnorm_shuffle = _wrapper("shuffle")
rmsnorm_vectorized = _wrapper("vectorized")
rmsnorm_unfused = _wrapper("unfused")
rmsnorm_vectorized_unfused = _wrapper("vectorized_unfused")

# GPU tensors need the GPU's compiler (nvcc or hipcc); without it only the CPU runtime is offered.
_DEVICES = ("cpu", "cuda") if (build.available("nvcc") or build.available("hipcc")) else ("cpu",)

for _variant in VARIANTS:
    registry.register(registry.Impl(
        f"hip.{_variant}", "rmsnorm", globals()[f"rmsnorm_{_variant}"], "hip", dtypes=DTYPES,
        devices=_DEVICES,
        max_cols=VECTORIZED_MAX_COLS if _variant == "vectorized" else None,
        description=DESCRIPTIONS[_variant]))


def main(argv=None) -> int:
    """``python -m fusedrms.kernels.hip.kernels [--device cuda]``: build (or find in the cache) the
    library a device's HIP kernels load, once, before many processes would each build it."""
    import argparse
    import time

    p = argparse.ArgumentParser(prog="python -m fusedrms.kernels.hip.kernels", description=main.__doc__)
    p.add_argument("--device", default="cpu", help="cpu, or cuda for the GPU's toolchain")
    a = p.parse_args(argv)
    t0 = time.time()
    try:
        library(a.device)
    except (build.CompileError, RuntimeError, ValueError) as e:
        print(f"fusedrms.kernels.hip.kernels: {e}")
        return 1
    print(f"HIP library for {a.device}: ready in {time.time() - t0:.1f} s ({build.cache_dir()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
