"""FlashInfer's norm kernels as peers: its own CUDA code, measured beside ours.

Two ways in, tried in order:

1. the ``flashinfer`` Python package, when it is installed (a reader's GPU machine):
   ``flashinfer.norm.fused_add_rmsnorm`` and ``flashinfer.norm.rmsnorm``;
2. its header-only CUDA tree (``flashinfer/norm.cuh``, the include folder of the
   ``flashinfer-python`` wheel) compiled by plain ``nvcc`` into a small shared library
   (:file:`flashinfer_norm.cu`, a few ``extern "C"`` wrappers) and launched through ctypes on the
   tensors' ``data_ptr()`` on torch's current stream. The folder comes from
   ``$FUSEDRMS_FLASHINFER_INCLUDE`` (default ``.gpu/flashinfer_include`` under the repository).

Neither there: :func:`status` says so and the peer is reported missing, never as a number.

Both launch as FlashInfer's Python API does by default: with programmatic dependent launch on
compute capability 9 and later (:func:`launches_with_pdl`), so the peer timed is the one a reader
calls.

FlashInfer's ``FusedAddRMSNorm`` works in place, as vLLM's does: ``residual <- x + residual``,
``x <- rmsnorm(residual) * w``. :func:`fused_add_rmsnorm` keeps that (the bytes are the same as
the out-of-place op: read x and r, write s and y).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from .. import env, validation

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "flashinfer_norm.cu"
SHIM = HERE / "flashinfer_shim"  # empty cuBLAS/cuRAND headers, searched after the real ones
REPO = HERE.parents[2]
DTYPE_CODES = {torch.float16: 0, torch.bfloat16: 1, torch.float32: 2}
_STATE: dict = {}


def include_dir() -> Path:
    return Path(os.environ.get("FUSEDRMS_FLASHINFER_INCLUDE", REPO / ".gpu" / "flashinfer_include"))


def nvcc_command(source: Path, target: Path, include: Path, arch: str = "sm_90") -> list[str]:
    return ["nvcc", f"-arch={arch}", "-O3", "-std=c++17", "--expt-relaxed-constexpr",
            "-DENABLE_BF16", "-DENABLE_FP8", f"-I{include}",
            "-Xcompiler", f"-idirafter,{SHIM}", "-x", "cu", "-shared", "-Xcompiler", "-fPIC",
            str(source), "-o", str(target)]


def _arch() -> str:
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"sm_{major}{minor}"
    return "sm_90"


def build(include: Path | None = None, arch: str | None = None, timeout: int = 300) -> Path:
    """Compile the wrappers (cached by source, include tree path and arch); the library's path."""
    include = include_dir() if include is None else Path(include)
    if not (include / "flashinfer" / "norm.cuh").exists():
        raise FileNotFoundError(f"no flashinfer/norm.cuh under {include} (set "
                                f"FUSEDRMS_FLASHINFER_INCLUDE to FlashInfer's include folder)")
    if shutil.which("nvcc") is None:
        raise FileNotFoundError("nvcc is not on PATH: FlashInfer's kernels cannot be built")
    arch = arch or _arch()
    key = hashlib.sha256(SOURCE.read_bytes() + f"{include.resolve()}|{arch}".encode()).hexdigest()
    folder = Path(os.environ.get("FUSEDRMS_CACHE", Path(tempfile.gettempdir()) / "fusedrms"))
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"flashinfer_norm-{arch}-{key[:16]}.so"
    if target.exists():
        return target
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        out = Path(tmp) / "lib.so"
        cmd = nvcc_command(SOURCE, out, include, arch)
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError("nvcc could not build FlashInfer's norm kernels:\n"
                               + (result.stderr + result.stdout)[-3000:])
        os.replace(out, target)
    return target


def _declare(lib: ctypes.CDLL) -> None:
    u, f, p, i = ctypes.c_uint, ctypes.c_float, ctypes.c_void_p, ctypes.c_int
    lib.fi_fused_add_rmsnorm.argtypes = [i, p, p, p, u, u, u, u, f, i, p]
    lib.fi_rmsnorm.argtypes = [i, p, p, p, u, u, u, u, f, i, p]
    lib.fi_fused_add_rmsnorm_fp8_block.argtypes = [p, p, p, p, p, p, u, u, u, u, u, u, u, f, i, p]
    for fn in (lib.fi_fused_add_rmsnorm, lib.fi_rmsnorm, lib.fi_fused_add_rmsnorm_fp8_block):
        fn.restype = i


def load() -> tuple[str, object]:
    """("python", module) or ("nvcc", ctypes library); raises with the reason when neither works."""
    if "route" in _STATE:
        return _STATE["route"]
    if "error" in _STATE:
        raise RuntimeError(_STATE["error"])
    reasons = []
    try:
        import flashinfer.norm as fi_norm  # noqa: F401

        _STATE["route"] = ("python", fi_norm)
        return _STATE["route"]
    except Exception as e:  # noqa: BLE001 - not installed: try the headers
        reasons.append(f"flashinfer package: {type(e).__name__}: {e}")
    try:
        lib = ctypes.CDLL(str(build()))
        _declare(lib)
        _STATE["route"] = ("nvcc", lib)
        return _STATE["route"]
    except Exception as e:  # noqa: BLE001
        reasons.append(f"headers: {e}")
    _STATE["error"] = "FlashInfer is not available here: " + "; ".join(reasons)
    raise RuntimeError(_STATE["error"])


def status() -> str:
    try:
        route, _ = load()
    except RuntimeError as e:
        return str(e)
    return ("FlashInfer's Python package" if route == "python"
            else f"FlashInfer's norm.cuh built with nvcc from {include_dir()}")


def launches_with_pdl(device: torch.device) -> bool:
    """Whether FlashInfer's Python API launches its norm kernels on ``device`` with programmatic
    dependent launch when the caller leaves ``enable_pdl`` unset: on compute capability 9 and
    later (its ``device_support_pdl``)."""
    capability = env.nvidia_capability(device)  # asked once per GPU, as FlashInfer caches it
    return capability is not None and capability[0] >= 9


def _stream() -> ctypes.c_void_p:
    return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)


# FusedAddRMSNorm keeps the summed row in shared memory as fp32 after a pad of
# ceil(warps / 4) * 4 floats, 32 for rows of over 8192 columns (norm.cuh). A wider row asks for
# more than a block may have, cudaFuncSetAttribute refuses, and nothing runs.
SMEM_PAD_FLOATS = 32
FUSED_ADD_WIDTH_REASON = "it keeps the row in shared memory as fp32"  # the registry's too


def _optin_shared_memory() -> int | None:
    """The most dynamic shared memory one block may have on the current GPU, in bytes."""
    if not torch.cuda.is_available():
        return None
    device = torch.cuda.current_device()
    if device not in _STATE.setdefault("optin", {}):
        props = torch.cuda.get_device_properties(device)
        optin = getattr(props, "shared_memory_per_block_optin", None)
        if not optin:
            try:
                from triton.runtime import driver

                optin = driver.active.utils.get_device_properties(device)["max_shared_mem"]
            except Exception:  # noqa: BLE001 - unknown: no limit is claimed
                optin = None
        _STATE["optin"][device] = optin
    return _STATE["optin"][device]


def fused_add_max_cols(device: str = "cuda") -> int | None:
    """The widest row FlashInfer's FusedAddRMSNorm runs on this GPU (58,080 on an H100 or
    H200); None off the GPU or when the GPU's limit is not known."""
    optin = _optin_shared_memory() if device == "cuda" else None
    return None if optin is None else optin // 4 - SMEM_PAD_FLOATS


def _check(x: torch.Tensor, name: str = "x") -> None:
    validation.check_tensor(x, name)
    if x.device.type != "cuda":
        raise validation.InputError(f"FlashInfer's kernels run on CUDA GPUs; {name} is on {x.device}.")
    if x.dim() != 2 or x.stride(1) != 1:
        raise validation.InputError(f"{name} must be 2-D with contiguous rows, got {tuple(x.shape)} "
                                    f"strides {x.stride()}.")


def fused_add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                      eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    """In place, as FlashInfer does it: ``residual <- x + residual``, ``x <- rmsnorm(residual) * w``.
    Returns ``(x, residual)``, i.e. ``(y, s)``."""
    validation.check_forward_only({"x": x, "residual": residual, "w": w},
                                  "flashinfer.fused_add_rmsnorm")
    _check(x), _check(residual, "residual")
    widest = fused_add_max_cols()
    if widest is not None and x.shape[1] > widest:
        raise validation.InputError(
            f"x has {x.shape[1]} columns; FlashInfer's FusedAddRMSNorm takes at most {widest} "
            f"on this GPU ({FUSED_ADD_WIDTH_REASON}, within the opt-in shared memory of a "
            f"block). Use flashinfer.rms_norm on x + residual for wider rows.")
    route, mod = load()
    if route == "python":
        mod.fused_add_rmsnorm(x, residual, w, eps)
        return x, residual
    rows, d = x.shape
    err = mod.fi_fused_add_rmsnorm(DTYPE_CODES[x.dtype], x.data_ptr(), residual.data_ptr(),
                                   w.data_ptr(), rows, d, x.stride(0), residual.stride(0),
                                   float(eps), int(launches_with_pdl(x.device)), _stream())
    if err:
        raise RuntimeError(f"FlashInfer FusedAddRMSNorm failed: CUDA error {err}")
    return x, residual


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    validation.check_forward_only({"x": x, "w": w}, "flashinfer.rms_norm")
    _check(x)
    route, mod = load()
    if route == "python":
        return mod.rmsnorm(x, w, eps)
    out = torch.empty_like(x)
    rows, d = x.shape
    err = mod.fi_rmsnorm(DTYPE_CODES[x.dtype], x.data_ptr(), w.data_ptr(), out.data_ptr(), rows, d,
                         x.stride(0), out.stride(0), float(eps),
                         int(launches_with_pdl(x.device)), _stream())
    if err:
        raise RuntimeError(f"FlashInfer RMSNorm failed: CUDA error {err}")
    return out


def fused_add_rmsnorm_fp8_block(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                                eps: float = 1e-6):
    """bf16 in: residual <- x + r, normed rows (bf16), FP8 e4m3 codes in 1x128 blocks and their
    scales (column-major, row stride round_up(rows, 4)). Returns (codes, scales, normed)."""
    validation.check_forward_only({"x": x, "residual": residual, "w": w},
                                  "flashinfer.fused_add_rmsnorm_fp8_block")
    _check(x), _check(residual, "residual")
    if x.dtype != torch.bfloat16:
        raise validation.InputError("FlashInfer's FP8 block quantizer is built for bfloat16 here.")
    route, mod = load()
    if route == "python":
        raise RuntimeError("the FP8 block quantizer is measured through the header build only")
    rows, d = x.shape
    stride_m = -(-rows // 4) * 4
    codes = torch.empty((rows, d), dtype=torch.float8_e4m3fn, device=x.device)
    scales = torch.empty((d // 128, stride_m), dtype=torch.float32, device=x.device)
    normed = torch.empty_like(x)
    err = mod.fi_fused_add_rmsnorm_fp8_block(
        x.data_ptr(), residual.data_ptr(), w.data_ptr(), codes.data_ptr(), scales.data_ptr(),
        normed.data_ptr(), rows, d, x.stride(0), residual.stride(0), codes.stride(0),
        normed.stride(0), stride_m, float(eps), int(launches_with_pdl(x.device)), _stream())
    if err:
        raise RuntimeError(f"FlashInfer FusedAddRMSNormFP8BlockQuant failed: CUDA error {err}"
                           + (" (d must be a multiple of 256 up to 8192, of 512 up to 16384)"
                              if err == 1 else ""))
    return codes, scales, normed
