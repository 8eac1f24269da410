"""Compile rmsnorm.hip (or a variant of its text) once, cache the library, load it with ctypes.

Three toolchains build the same text:

- ``"cpu"``:   the CPU runtime (``g++``, ``compat/cpu.h``): runs anywhere, no GPU;
- ``"nvcc"``:  an NVIDIA GPU (``compat/nvidia.h`` maps the HIP names onto CUDA);
- ``"hipcc"``: an AMD GPU (``HIP_PLATFORM=amd``).

A build is cached by the hash of the source text, the headers, the compiler and its flags under
``code/fusedrms/kernels/hip/_cache`` (or ``$FUSEDRMS_CACHE``, or ``~/.cache/fusedrms/hip`` when the package
folder is read-only). A failed build raises :class:`CompileError` carrying the compiler's message.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

HIP_DIR = Path(__file__).resolve().parent
SOURCE = HIP_DIR / "rmsnorm.hip"
COMPAT = HIP_DIR / "compat"
TOOLCHAINS = ("cpu", "nvcc", "hipcc")


class CompileError(RuntimeError):
    """The compiler rejected the source; ``message`` is what it printed."""

    def __init__(self, toolchain: str, command: list[str], message: str):
        self.toolchain, self.command, self.message = toolchain, command, message
        super().__init__(f"{toolchain} could not compile the kernel source:\n{message.strip()}")


def source_text() -> str:
    return SOURCE.read_text()


def compiler_for(toolchain: str) -> str | None:
    name = {"cpu": os.environ.get("CXX", "g++"), "nvcc": "nvcc", "hipcc": "hipcc"}[toolchain]
    return shutil.which(name)


def available(toolchain: str) -> bool:
    return compiler_for(toolchain) is not None


def default_arch(toolchain: str) -> str | None:
    """The architecture of the GPU torch sees (sm_90, gfx90a, ...), or None."""
    if toolchain == "cpu":
        return None
    try:
        import torch

        if torch.cuda.is_available():
            if toolchain == "nvcc":
                major, minor = torch.cuda.get_device_capability(0)
                return f"sm_{major}{minor}"
            return torch.cuda.get_device_properties(0).gcnArchName.split(":")[0]
    except Exception:  # noqa: BLE001 - no usable GPU: fall back to the book's targets
        pass
    return {"nvcc": "sm_90", "hipcc": "gfx90a"}[toolchain]


def flags(toolchain: str, arch: str | None = None, defines: dict | None = None,
          shared: bool = True) -> list[str]:
    """Compiler flags (after the compiler itself, before the source file)."""
    out = {
        "cpu": ["-x", "c++", "-std=c++17", "-O2", "-fPIC", "-pthread"],
        "nvcc": ["-x", "cu", f"-arch={arch or default_arch('nvcc')}", "-O3", "-std=c++17",
                 "-Xcompiler", "-fPIC"],
        "hipcc": ["-x", "hip", f"--offload-arch={arch or default_arch('hipcc')}", "-O3", "-fPIC"],
    }[toolchain]
    out += ["-shared"] if shared else ["-c"]
    out += [f"-I{HIP_DIR}"]
    for key, value in sorted((defines or {}).items()):
        out.append(f"-D{key}" if value is None else f"-D{key}={value}")
    return out


def cache_dir() -> Path:
    if os.environ.get("FUSEDRMS_CACHE"):
        path = Path(os.environ["FUSEDRMS_CACHE"])
    else:
        path = HIP_DIR / "_cache"
        try:
            path.mkdir(exist_ok=True)
            probe = path / ".write-test"
            probe.touch()
            probe.unlink()
        except OSError:
            path = Path.home() / ".cache" / "fusedrms" / "hip"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _compiler_identity(compiler: str) -> str:
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60)
        return compiler + "\n" + out.stdout
    except (OSError, subprocess.SubprocessError):
        return compiler


def _key(text: str, compiler: str, args: list[str]) -> str:
    h = hashlib.sha256()
    h.update(text.encode())
    for header in sorted(COMPAT.glob("*.h")):
        h.update(header.read_bytes())
    h.update(_compiler_identity(compiler).encode())
    h.update("\0".join(args).encode())
    return h.hexdigest()[:20]


def compile(text: str | None = None, toolchain: str = "cpu", arch: str | None = None,
            defines: dict | None = None, shared: bool = True, timeout: int = 300) -> Path:
    """Build ``text`` (default: rmsnorm.hip) and return the path of the library or object."""
    if toolchain not in TOOLCHAINS:
        raise ValueError(f"toolchain must be one of {TOOLCHAINS}, got {toolchain!r}")
    compiler = compiler_for(toolchain)
    if compiler is None:
        hint = ("install g++ (apt install g++)" if toolchain == "cpu" else
                f"install {'the CUDA toolkit' if toolchain == 'nvcc' else 'ROCm (hipcc)'}, or run the "
                f"kernels on the CPU runtime by passing CPU tensors (x.cpu(), w.cpu())")
        raise CompileError(toolchain, [], f"no {'g++' if toolchain == 'cpu' else toolchain} on "
                           f"PATH: {hint}")
    text = source_text() if text is None else text
    args = flags(toolchain, arch, defines, shared)
    key = _key(text, compiler, args)
    folder = cache_dir()
    suffix = ".so" if shared else ".o"
    target = folder / f"rmsnorm-{toolchain}-{key}{suffix}"
    if target.exists():
        return target
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        src = Path(tmp) / "kernel.hip"
        src.write_text(text)
        out = Path(tmp) / f"out{suffix}"
        command = [compiler, *args, str(src), "-o", str(out)]
        environ = dict(os.environ)
        if toolchain == "hipcc":
            environ["HIP_PLATFORM"] = "amd"  # otherwise hipcc picks NVIDIA when CUDA is installed
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                                    env=environ)
        except subprocess.TimeoutExpired:
            raise CompileError(toolchain, command, f"the compiler ran longer than {timeout} s") from None
        if result.returncode != 0:
            message = (result.stderr + result.stdout).replace(str(src), "kernel.hip")
            raise CompileError(toolchain, command, message)
        _publish(out, target)
    return target


def _publish(built: Path, target: Path) -> None:
    """Move a finished build into the cache atomically (parallel builders never see half a file),
    unless a parallel builder has already put one there: that one is kept, untouched, so a path
    one process already loaded or stamped never changes under it."""
    try:
        os.link(built, target)
    except FileExistsError:
        pass
    except OSError:  # a file system without hard links
        os.replace(built, target)


_LOADED: dict[Path, ctypes.CDLL] = {}


def load(text: str | None = None, toolchain: str = "cpu", arch: str | None = None,
         defines: dict | None = None) -> ctypes.CDLL:
    """Compile (or reuse) and load the library, with argument types declared."""
    path = compile(text, toolchain, arch, defines)
    if path not in _LOADED:
        lib = ctypes.CDLL(str(path))
        _declare(lib)
        _LOADED[path] = lib
    return _LOADED[path]


def _declare(lib: ctypes.CDLL) -> None:
    c = ctypes
    launch = [c.c_int, c.c_void_p, c.c_void_p, c.c_void_p, c.c_int, c.c_int, c.c_long, c.c_float,
              c.c_int, c.c_void_p]
    for name in ("serial", "block", "shuffle", "vectorized"):
        fn = getattr(lib, f"fusedrms_rmsnorm_{name}")
        fn.argtypes, fn.restype = launch, c.c_int
    for name in ("unfused", "vectorized_unfused"):  # these also take a workspace pointer
        fn = getattr(lib, f"fusedrms_rmsnorm_{name}")
        fn.argtypes, fn.restype = launch[:4] + [c.c_void_p] + launch[4:], c.c_int
    lib.fusedrms_error_message.restype = c.c_char_p
    lib.fusedrms_platform.restype = c.c_char_p
    lib.fusedrms_warp_lanes.restype = c.c_int
    lib.fusedrms_vector_width.argtypes = [c.c_int, c.c_void_p, c.c_void_p, c.c_void_p, c.c_int, c.c_long]
    lib.fusedrms_vector_width.restype = c.c_int
    lib.fusedrms_vectorized_max_cols.argtypes = [c.c_int]
    lib.fusedrms_vectorized_max_cols.restype = c.c_int


def ptx(text: str | None = None, arch: str = "sm_90", timeout: int = 300) -> str:
    """The PTX nvcc generates for ``text`` (default rmsnorm.hip): what the GPU will be asked to do.

    Needs only nvcc, not a GPU. Cached like a library build.
    """
    args = [a for a in flags("nvcc", arch) if a != "-shared"] + ["--ptx"]
    return _assembly("nvcc", args, text, "ptx", timeout)


def amdgcn(text: str | None = None, arch: str = "gfx90a", timeout: int = 300) -> str:
    """The AMDGCN assembly of the device code hipcc generates for ``arch`` (gfx90a: 64-lane
    wavefronts; gfx1030: 32). Needs only hipcc and the ROCm device libraries, not a GPU."""
    args = [a for a in flags("hipcc", arch) if a != "-shared"] + ["--cuda-device-only", "-S"]
    return _assembly("hipcc", args, text, "s", timeout)


def _assembly(toolchain: str, args: list[str], text: str | None, suffix: str, timeout: int) -> str:
    compiler = compiler_for(toolchain)
    if compiler is None:
        raise CompileError(toolchain, [], f"no {toolchain} on PATH: its assembly needs "
                           f"{'the CUDA toolkit' if toolchain == 'nvcc' else 'hipcc and rocm-device-libs'}")
    text = source_text() if text is None else text
    target = cache_dir() / f"rmsnorm-{toolchain}-asm-{_key(text, compiler, args)}.{suffix}"
    if not target.exists():
        with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
            src = Path(tmp) / "kernel.hip"
            src.write_text(text)
            out = Path(tmp) / f"out.{suffix}"
            command = [compiler, *args, str(src), "-o", str(out)]
            environ = {**os.environ, "HIP_PLATFORM": "amd"} if toolchain == "hipcc" else None
            result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environ)
            if result.returncode != 0:
                raise CompileError(toolchain, command, (result.stderr + result.stdout).replace(str(src), "kernel.hip"))
            os.replace(out, target)
    return target.read_text()


def memory_instructions(ptx_text: str) -> dict[str, list[str]]:
    """For every kernel (entry) in the PTX: its distinct global load and store instructions."""
    import re

    out = {}
    entries = list(re.finditer(r"\.entry (\S+)\(", ptx_text))
    for i, m in enumerate(entries):
        end = entries[i + 1].start() if i + 1 < len(entries) else len(ptx_text)
        body = ptx_text[m.start():end]
        out[_readable(m.group(1))] = sorted(set(re.findall(r"(?:ld|st)\.global[.\w]*", body)))
    return out


def amdgcn_kernels(asm: str) -> dict[str, dict]:
    """For every kernel in AMDGCN assembly: its wavefront width (lanes) and its instructions."""
    import re

    out = {}
    for m in re.finditer(r"^(_Z\w+):[^\n]*\n(.*?)^\s*s_endpgm", asm, flags=re.S | re.M):
        meta = re.search(rf"\.amdhsa_kernel {re.escape(m.group(1))}\n(.*?)\.end_amdhsa_kernel", asm, flags=re.S)
        wave32 = bool(meta and re.search(r"\.amdhsa_wavefront_size32 1", meta.group(1)))
        out[_readable(m.group(1))] = {"lanes": 32 if wave32 else 64, "body": m.group(2)}
    return out


def _readable(mangled: str) -> str:
    """``_Z18rmsnorm_vectorizedIfLi4EE...`` -> ``rmsnorm_vectorized<float, 4>`` (our kernels only)."""
    import re

    m = re.match(r"_Z\d+(\w+?)I(f|9half_bits|9bf16_bits)(?:Li(\d+)E)?E", mangled)
    if not m:
        m1 = re.match(r"_Z\d+(\w+?)ILi(\d+)EE", mangled)  # an int parameter only: row_sum_kernel<4>
        if m1:
            return f"{m1.group(1)}<{m1.group(2)}>"
        m2 = re.match(r"_Z\d+([a-z_]+)", mangled)
        return m2.group(1) if m2 else mangled
    dtype = {"f": "float", "9half_bits": "half_bits", "9bf16_bits": "bf16_bits"}[m.group(2)]
    return f"{m.group(1)}<{dtype}{', ' + m.group(3) if m.group(3) else ''}>"

