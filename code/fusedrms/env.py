"""Which device runs what.

Importing this module decides, once per process, whether Triton kernels compile for a GPU or run
in Triton's CPU interpreter. That decision must be made *before* any ``@triton.jit`` decorates a
kernel, so every kernel module in this package imports ``fusedrms.env`` first.

Set ``FUSEDRMS_FORCE_CPU=1`` to take the no-GPU path on a machine that has a GPU (the book's tests
do this to check the CPU path on the GPU machine too).

A notebook calls :func:`setup` in its first code cell; it prints one line that says what runs where.
"""
from __future__ import annotations

import os
import platform
import shutil
import sys
from dataclasses import dataclass, field
from typing import Any


def _gpu_visible() -> bool:
    if os.environ.get("FUSEDRMS_FORCE_CPU", "") not in ("", "0"):
        return False
    import torch

    return torch.cuda.is_available()  # true for both CUDA and ROCm builds of torch


# Decided at import, before any kernel module decorates a kernel.
HAS_GPU: bool = _gpu_visible()
if not HAS_GPU:
    os.environ["TRITON_INTERPRET"] = "1"


@dataclass(frozen=True)
class Env:
    """What this process runs on. ``backend`` is ``"cuda"``, ``"rocm"`` or ``"cpu"``."""

    backend: str
    device: Any  # torch.device
    gpu_name: str | None
    triton_mode: str  # "compiled for the GPU" | "interpreter (CPU)"
    hip_mode: str  # "nvcc" | "hipcc" | "CPU runtime"
    versions: dict = field(default_factory=dict)

    @property
    def on_gpu(self) -> bool:
        return self.backend != "cpu"

    def pick(self, gpu: Any, cpu: Any) -> Any:
        """Problem sizes: ``gpu`` on a GPU, the smaller ``cpu`` value under the interpreter."""
        return gpu if self.on_gpu else cpu

    def describe(self) -> str:
        v = self.versions
        libs = f"torch {v['torch']}, triton {v.get('triton', 'not installed')}, Python {v['python']}"
        if self.on_gpu:
            runtime = f"CUDA {v['cuda']}" if self.backend == "cuda" else f"ROCm/HIP {v['hip']}"
            return (f"GPU: {self.gpu_name} ({runtime}, driver {v.get('driver', 'unknown')}); "
                    f"Triton compiled for the GPU; HIP kernels built with {self.hip_mode}; {libs}")
        return (f"no GPU: Triton interpreter, HIP on the CPU runtime "
                f"(timings here are not GPU timings); {libs}")


def _driver_version() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    import subprocess

    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


_CURRENT: Env | None = None


def current() -> Env:
    """The process's :class:`Env`, computed once."""
    global _CURRENT
    if _CURRENT is None:
        import torch

        try:
            import triton

            triton_version = triton.__version__
        except ImportError:
            triton_version = None
        versions = {"torch": torch.__version__, "triton": triton_version,
                    "python": platform.python_version()}
        if HAS_GPU:
            is_rocm = getattr(torch.version, "hip", None) is not None
            backend = "rocm" if is_rocm else "cuda"
            versions["cuda"] = torch.version.cuda
            versions["hip"] = getattr(torch.version, "hip", None)
            driver = _driver_version()
            if driver:
                versions["driver"] = driver
            hip_mode = "hipcc" if is_rocm else ("nvcc" if shutil.which("nvcc") else "CPU runtime")
            _CURRENT = Env(backend, torch.device("cuda"), torch.cuda.get_device_name(0),
                           "compiled for the GPU", hip_mode, versions)
        else:
            _CURRENT = Env("cpu", torch.device("cpu"), None, "interpreter (CPU)", "CPU runtime",
                           versions)
    return _CURRENT


def setup(seed: int | None = 0, verbose: bool = True) -> Env:
    """Call at the top of every notebook: seeds the RNG and prints what runs where."""
    env = current()
    if seed is not None:
        import torch

        torch.manual_seed(seed)
    if verbose:
        print(env.describe())
    return env


_CAPABILITY: dict = {}


def nvidia_capability(device) -> tuple[int, int] | None:
    """The compute capability of an NVIDIA GPU ``device`` (asked once per GPU: a launch asks on
    every call); None on the CPU or an AMD GPU."""
    import torch

    if device.type != "cuda" or torch.version.hip is not None:
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _CAPABILITY:
        _CAPABILITY[index] = tuple(torch.cuda.get_device_capability(index))
    return _CAPABILITY[index]


def require_gpu(what: str) -> None:
    """Raise a readable error for GPU-only work (timing, fp8 on hardware, profiling)."""
    if not current().on_gpu:
        raise RuntimeError(f"{what} needs a CUDA or ROCm GPU; this machine has none "
                           f"(or FUSEDRMS_FORCE_CPU is set). The book shows recorded results instead.")


if __name__ == "__main__":  # python -m fusedrms.env
    print(setup(verbose=False).describe())
    sys.exit(0)
