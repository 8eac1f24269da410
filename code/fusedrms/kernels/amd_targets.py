"""The book's Triton kernels compiled for AMD GPUs, on any machine, without an AMD GPU.

Triton's AMD backend compiles for a named target wherever Triton is installed: the wheel carries
the ROCm device libraries (``ocml.bc``, ``ockl.bc``) and links the code object in process, so
neither ROCm nor a GPU is needed. This module compiles every Triton kernel of the book at a
representative launch for

- ``gfx1201``: Radeon RX 9070 XT (RDNA4), 32-lane wavefronts;
- ``gfx942``: Instinct MI300X (CDNA3), 64-lane wavefronts;
- ``gfx950`` (Instinct MI355X, CDNA4) on request,

and reads what the code object's metadata says: VGPRs (one 32-bit value per lane, AMD's
counterpart of NVIDIA's registers per thread), SGPRs (per wavefront), spills, scratch, LDS, the
wavefront size and the waves per SIMD the compiler expects.

A launch mirrors what the kernel's wrapper would launch on an AMD GPU: same arguments, same
constexprs, same ``num_warps`` rule, and Triton's own specialization of the arguments (16-byte
alignment, pointers within 2 GB). ``num_warps`` counts wavefronts on AMD: 8 warps are 256 threads
on gfx1201 and 512 on gfx942.

The compile runs in a child process: :mod:`fusedrms.env` decides at import whether this package's
kernels run in Triton's interpreter, and an interpreted kernel cannot be compiled. The child takes
the no-GPU path (``FUSEDRMS_FORCE_CPU=1``), turns the interpreter off before importing the kernel
modules, compiles into a temporary Triton cache (nothing is kept) and answers in JSON.

Command line::

    python -m fusedrms.kernels.amd_targets                      # every kernel, gfx1201 and gfx942
    python -m fusedrms.kernels.amd_targets --target gfx950 --chapter 8
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

# ---------------------------------------------------------------- targets


@dataclass(frozen=True)
class Fp8Format:
    """An 8-bit float format a GPU converts to in hardware."""

    name: str
    torch_dtype: str  # the torch dtype's name
    max: float  # largest finite value


OCP_E4M3 = Fp8Format("OCP e4m3 (e4m3fn)", "float8_e4m3fn", 448.0)
E4M3_FNUZ = Fp8Format("e4m3fnuz", "float8_e4m3fnuz", 240.0)


@dataclass(frozen=True)
class Target:
    arch: str
    gpu: str
    short: str  # the GPU's name in a narrow table
    family: str
    wavefront: int  # lanes per wavefront
    max_vgprs: int  # per lane: 256 on RDNA; 512 on CDNA3/4 (256 vector + 256 accumulation)
    max_sgprs: int  # what .sgpr_count can reach: addressable SGPRs + VCC (+ XNACK, FLAT_SCRATCH)
    max_lds_bytes: int  # LDS one workgroup may allocate
    fp8: Fp8Format  # the e4m3 the hardware converts to

    def describe(self) -> str:
        return (f"{self.arch}: {self.gpu} ({self.family}), wave{self.wavefront}, "
                f"fp8 {self.fp8.name}, largest {self.fp8.max:g}")


TARGETS = {
    "gfx1201": Target("gfx1201", "Radeon RX 9070 XT", "RX 9070 XT", "RDNA4", wavefront=32,
                      max_vgprs=256, max_sgprs=108, max_lds_bytes=65536, fp8=OCP_E4M3),
    "gfx942": Target("gfx942", "Instinct MI300X", "MI300X", "CDNA3", wavefront=64,
                     max_vgprs=512, max_sgprs=108, max_lds_bytes=65536, fp8=E4M3_FNUZ),
    "gfx950": Target("gfx950", "Instinct MI355X", "MI355X", "CDNA4", wavefront=64,
                     max_vgprs=512, max_sgprs=108, max_lds_bytes=163840, fp8=OCP_E4M3),
}
DEFAULT_TARGETS = ("gfx1201", "gfx942")


def fp8_format(arch: str) -> Fp8Format:
    """The fp8 e4m3 format ``arch`` converts to: e4m3fnuz (largest 240) on gfx942, the OCP e4m3
    of NVIDIA's sm_89 and later (largest 448) on gfx950 and RDNA4."""
    return _target(arch).fp8


def _target(arch: str) -> Target:
    if arch not in TARGETS:
        raise ValueError(f"unknown AMD target {arch!r}; known: {', '.join(TARGETS)}")
    return TARGETS[arch]


# ---------------------------------------------------------------- launches

ROWS = 4096  # the batch every launch is specialized for (a multiple of 16, as Triton notes)


@dataclass(frozen=True)
class Launch:
    """One kernel at one launch. ``builder`` and ``params`` rebuild the launch in the child."""

    key: str
    chapter: int
    kernel: str
    shape: str
    builder: str
    params: tuple = ()  # (name, value) pairs

    @property
    def kwargs(self) -> dict:
        return dict(self.params)


def _launch(key, chapter, kernel, shape, builder, **params) -> Launch:
    return Launch(key, chapter, kernel, shape, builder, tuple(sorted(params.items())))


def row_launch(cols: int, dtype: str = "float32") -> Launch:
    """Chapter 4's row kernel at ``cols`` columns (its chapter compares widths in fp32)."""
    short = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(dtype, dtype)
    return _launch(f"row {cols} {short}", 4, "rmsnorm_row_kernel", f"{cols} {short}", "row",
                   cols=cols, dtype=dtype)


def _book_launches() -> tuple:
    bf16, fp8_cols = "bfloat16", 7168  # chapter 8's width (DeepSeek-V3's hidden size)
    out = [row_launch(4096, bf16), row_launch(4096, "float32"),
           _launch("looped", 4, "rmsnorm_looped_kernel", "4096 bf16", "looped",
                   cols=4096, dtype=bf16),
           _launch("multirow", 4, "rmsnorm_multirow_kernel", "1024 bf16", "multirow",
                   cols=1024, dtype=bf16)]
    # each design at a width it runs at: two passes, the split and the exchange past 32,768 columns
    for design, kernel, cols in (("whole", "add_rmsnorm_kernel", 4096),
                                 ("chunked", "add_rmsnorm_chunked_kernel", 65536),
                                 ("split partials", "split_partials_kernel", 65536),
                                 ("split normalize", "split_normalize_kernel", 65536),
                                 ("exchange", "add_rmsnorm_exchange_kernel", 65536)):
        for write_sum in (False, True):
            out.append(_launch(f"add {design}{' +sum' if write_sum else ''}", 7, kernel,
                               f"{cols} bf16", "add_rmsnorm", cols=cols, dtype=bf16,
                               design=design, write_sum=write_sum))
    fp8 = (("fp8 fused", "rmsnorm_fp8_fused_kernel", "fused", "software"),
           ("fp8 fused cast", "rmsnorm_fp8_fused_kernel", "fused", "cast"),
           ("fp8 norm", "rmsnorm_bf16_kernel", "norm", "software"),
           ("fp8 quantize", "quantize_fp8_kernel", "quantize", "software"),
           ("fp8 fused rows", "rmsnorm_fp8_fused_rows_kernel", "rows", "software"),
           ("fp8 fused split", "rmsnorm_fp8_fused_split_kernel", "split", "software"),
           ("fp8 fused lean", "rmsnorm_fp8_fused_kernel", "lean", "software"),
           ("fp8 lean proof", "lean_division_kernel", "proof", "software"),
           ("fp8 approx", "rmsnorm_fp8_approx_kernel", "approx", "cast"))
    for key, kernel, variant, rounding in fp8:
        out.append(_launch(key, 8, kernel, f"{fp8_cols} bf16", "fp8", cols=fp8_cols,
                           variant=variant, rounding=rounding))
    bwd = (("bwd forward", "rmsnorm_forward_kernel", dict(op="forward", residual=False)),
           ("bwd forward +res", "rmsnorm_forward_kernel", dict(op="forward", residual=True)),
           ("bwd two-stage", "rmsnorm_backward_kernel", dict(op="backward", atomic=False)),
           ("bwd atomic", "rmsnorm_backward_kernel", dict(op="backward", atomic=True)),
           ("bwd add", "rmsnorm_backward_kernel", dict(op="backward", atomic=False, d_sum=True)),
           ("bwd dw reduce", "dw_reduce_kernel", dict(op="dw_reduce")))
    for key, kernel, params in bwd:
        out.append(_launch(key, 9, kernel, "4096 bf16", "backward", cols=4096, dtype=bf16,
                           **params))
    return tuple(out)


# Every Triton kernel under fusedrms/kernels, at the launch its wrapper makes for that shape.
# fp8: "software" is what rounding="auto" picks on every AMD GPU; "cast" is tl.float8e4nv.
LAUNCHES = _book_launches()


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class Compiled:
    """What one compile gave (``compiled`` False: ``error`` says why, the counts are None)."""

    key: str
    target: str
    compiled: bool
    error: str | None = None
    vgprs: int | None = None  # per lane; on CDNA3/4 vector + accumulation registers
    agprs: int | None = None  # accumulation registers (CDNA only)
    sgprs: int | None = None  # per wavefront
    vgpr_spills: int | None = None
    sgpr_spills: int | None = None
    scratch_bytes: int | None = None  # per lane: where spills live
    lds_bytes: int | None = None  # static plus what Triton's launch requests
    wavefront: int | None = None
    waves_per_simd: int | None = None  # the compiler's occupancy estimate
    fp8_conversions: int | None = None  # hardware fp8 conversion instructions
    seconds: float | None = None

    @property
    def spills(self) -> int | None:
        if self.vgpr_spills is None:
            return None
        return self.vgpr_spills + (self.sgpr_spills or 0)


def _metadata_int(asm: str, name: str) -> int | None:
    m = re.search(rf"^[\s-]*\.{re.escape(name)}:\s+(\d+)", asm, flags=re.M)  # "- " opens a kernel
    return int(m.group(1)) if m else None


def resources(asm: str, shared: int = 0) -> dict:
    """The counts of an AMDGCN assembly text (one kernel): its code object metadata."""
    occupancy = re.search(r";\s*Occupancy:\s*(\d+)", asm)
    static_lds = _metadata_int(asm, "group_segment_fixed_size")
    body = re.sub(r";[^\n]*", "", asm)
    return dict(
        vgprs=_metadata_int(asm, "vgpr_count"), agprs=_metadata_int(asm, "agpr_count"),
        sgprs=_metadata_int(asm, "sgpr_count"),
        vgpr_spills=_metadata_int(asm, "vgpr_spill_count"),
        sgpr_spills=_metadata_int(asm, "sgpr_spill_count"),
        scratch_bytes=_metadata_int(asm, "private_segment_fixed_size"),
        lds_bytes=None if static_lds is None else static_lds + shared,
        wavefront=_metadata_int(asm, "wavefront_size"),
        waves_per_simd=int(occupancy.group(1)) if occupancy else None,
        fp8_conversions=len(re.findall(r"^\s*v_cvt\w*_(?:fp8|bf8)\w*", body, flags=re.M)))


# ---------------------------------------------------------------- compiling (parent side)

_CHILD = ("import os, sys\n"
          "os.environ['FUSEDRMS_FORCE_CPU'] = '1'  # the child never touches a GPU\n"
          "import fusedrms.env\n"
          "os.environ.pop('TRITON_INTERPRET', None)  # env set it; kernels below must compile\n"
          "from fusedrms.kernels import amd_targets\n"
          "sys.exit(amd_targets._child_main(sys.argv[1], sys.argv[2]))\n")


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[2])


def compile_launches(launches: Sequence[Launch] | None = None,
                     targets: Sequence[str] = DEFAULT_TARGETS,
                     timeout: float = 300.0) -> list[Compiled]:
    """Compile ``launches`` (default: :data:`LAUNCHES`) for each target; one child per target,
    run side by side. Never raises for a kernel that fails: its :class:`Compiled` says why."""
    launches = list(LAUNCHES if launches is None else launches)
    for arch in targets:
        _target(arch)
    by_target: dict[str, list[Compiled]] = {}
    with tempfile.TemporaryDirectory(prefix="fusedrms-amd-") as tmp:
        running = []
        for arch in targets:
            request, answer = Path(tmp, f"{arch}.in.json"), Path(tmp, f"{arch}.out.json")
            request.write_text(json.dumps({"arch": arch,
                                           "launches": [asdict(x) for x in launches]}))
            child_env = dict(os.environ)
            child_env.pop("TRITON_INTERPRET", None)
            child_env["TRITON_CACHE_DIR"] = str(Path(tmp, f"cache-{arch}"))
            child_env["PYTHONPATH"] = os.pathsep.join(
                p for p in (_package_root(), os.environ.get("PYTHONPATH")) if p)
            log = Path(tmp, f"{arch}.log").open("w")  # a file, not a pipe: nothing can block
            proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(request), str(answer)],
                                    env=child_env, stdout=log, stderr=subprocess.STDOUT)
            running.append((arch, proc, answer, log))
        for arch, proc, answer, log in running:
            try:
                proc.wait(timeout=timeout)
                why = None
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                why = f"the compile did not finish within {timeout:g} s"
            log.close()
            output = Path(log.name).read_text(errors="replace")
            by_target[arch] = _read_answer(answer, launches, arch, why or output)
    return [r for x in launches for arch in targets for r in by_target[arch] if r.key == x.key]


def _read_answer(answer: Path, launches, arch: str, output: str) -> list[Compiled]:
    try:
        rows = json.loads(answer.read_text())
        return [Compiled(**r) for r in rows]
    except (OSError, ValueError, TypeError):
        tail = [line for line in (output or "").strip().splitlines() if line.strip()][-3:]
        why = "the compiler process failed: " + (" | ".join(tail) or "no message")
        return [Compiled(x.key, arch, False, why) for x in launches]


def compiled_by_key(results: Sequence[Compiled]) -> dict[tuple[str, str], Compiled]:
    """``{(launch key, target): Compiled}``."""
    return {(r.key, r.target): r for r in results}


# ---------------------------------------------------------------- compiling (child side)


def _child_main(request_path: str, answer_path: str) -> int:
    from . import add_rmsnorm, rmsnorm, rmsnorm_backward, rmsnorm_fp8  # noqa: F401  (compiled here)

    request = json.loads(Path(request_path).read_text())
    target = _target(request["arch"])
    out = []
    for spec in request["launches"]:
        launch = Launch(spec["key"], spec["chapter"], spec["kernel"], spec["shape"],
                        spec["builder"], tuple(tuple(p) for p in spec["params"]))
        out.append(asdict(_compile_one(launch, target)))
    Path(answer_path).write_text(json.dumps(out))
    return 0


def _compile_one(launch: Launch, target: Target) -> Compiled:
    start = time.perf_counter()
    try:
        kernel, args, kwargs = _BUILDERS[launch.builder](**launch.kwargs)
        compiled = _compile(kernel, target, args, kwargs)
        counts = resources(compiled.asm["amdgcn"], int(getattr(compiled.metadata, "shared", 0)))
    except Exception as err:  # a kernel that does not compile is a result, not a crash
        message = " ".join(str(err).split())[:400] or "no message"
        return Compiled(launch.key, target.arch, False, f"{type(err).__name__}: {message}")
    return Compiled(launch.key, target.arch, True, None, **counts,
                    seconds=round(time.perf_counter() - start, 2))


def _compile(kernel, target: Target, args: tuple, kwargs: dict):
    """What ``kernel[grid](*args, **kwargs)`` compiles on ``target``: Triton's own binder
    specializes the arguments (as ``JITFunction.run`` does), then ``triton.compile``."""
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    from triton.runtime.jit import JITFunction, create_function_from_signature

    if not isinstance(kernel, JITFunction):
        raise TypeError(f"{getattr(kernel, '__name__', kernel)} is not a compilable JITFunction "
                        f"(the Triton interpreter was on when it was defined)")
    gpu = GPUTarget("hip", target.arch, target.wavefront)
    backend = make_backend(gpu)
    kwargs = dict(kwargs, debug=kernel.debug or knobs.runtime.debug,
                  instrumentation_mode=knobs.compilation.instrumentation_mode,
                  fpsan_homomorphic_casts=knobs.compilation.fpsan_homomorphic_casts)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound,
                                                              specialization, options)
    source = triton.compiler.ASTSource(kernel, signature, constexprs, attrs)
    return triton.compile(source, target=gpu, options=options.__dict__)


# The builders run in the child only (they import the kernel modules, compiled there). Each returns
# (kernel, args, kwargs) as the module's wrapper would launch it on a ROCm GPU.

def _dtype(name: str):
    import torch

    return getattr(torch, name)


def _rows_and_weight(cols: int, dtype: str):
    import torch

    x = torch.empty((ROWS, cols), dtype=_dtype(dtype))
    return x, torch.empty(cols, dtype=x.dtype)


def _build_row(cols: int, dtype: str):
    import torch
    import triton

    from . import rmsnorm as m

    x, w = _rows_and_weight(cols, dtype)
    y = torch.empty_like(x)
    block = triton.next_power_of_2(cols)
    return (m.rmsnorm_row_kernel, (x, w, y, cols, x.stride(0), y.stride(0), 1e-5),
            dict(BLOCK_SIZE=block, num_warps=m.num_warps_for(block)))


def _build_looped(cols: int, dtype: str):
    import torch
    import triton

    from . import rmsnorm as m

    x, w = _rows_and_weight(cols, dtype)
    y = torch.empty_like(x)
    chunk = min(triton.next_power_of_2(cols), m.LOOP_CHUNK)
    return (m.rmsnorm_looped_kernel, (x, w, y, cols, x.stride(0), y.stride(0), 1e-5),
            dict(BLOCK_SIZE=chunk, num_warps=m.num_warps_for(chunk)))


def _build_multirow(cols: int, dtype: str):
    import torch
    import triton

    from . import rmsnorm as m

    x, w = _rows_and_weight(cols, dtype)
    y = torch.empty_like(x)
    block = triton.next_power_of_2(cols)
    rpp = m.rows_per_program_for(block)
    return (m.rmsnorm_multirow_kernel, (x, w, y, ROWS, cols, x.stride(0), y.stride(0), 1e-5),
            dict(BLOCK_SIZE=block, ROWS_PER_PROGRAM=rpp, num_warps=m.num_warps_for(block * rpp)))


def _build_add_rmsnorm(cols: int, dtype: str, design: str, write_sum: bool):
    """``add_rmsnorm.launch``: the heuristic config (no tuned table applies on an AMD GPU), the
    two-pass config for the chunked design, the split config's two kernels, or the exchange
    kernel as a GPU runs it (``PHASE=0``)."""
    import torch
    import triton

    from . import add_rmsnorm as m

    x, w = _rows_and_weight(cols, dtype)
    r, y = torch.empty_like(x), torch.empty_like(x)
    s = torch.empty_like(x) if write_sum else y
    if design == "exchange":
        from . import add_rmsnorm_exchange as exchange
        from .add_rmsnorm_split import segments

        seg = m.EXCHANGE_CONFIG.segment
        sums = torch.empty(ROWS * segments(cols, seg), dtype=torch.float32)
        args, constexprs = exchange.kernel_arguments(x, r, w, y, s if write_sum else None, sums,
                                                     1e-5, seg, False)
        return (exchange.add_rmsnorm_exchange_kernel, args,
                dict(constexprs, PHASE=0, num_warps=m.EXCHANGE_CONFIG.num_warps))
    if design.startswith("split"):
        from . import add_rmsnorm_split as split

        seg = m.SPLIT_CONFIG.segment
        partial = torch.empty(ROWS * split.segments(cols, seg), dtype=torch.float32)
        first, second = split.kernel_arguments(x, r, w, y, s if write_sum else None, partial,
                                               1e-5, seg, False)
        kernel, (args, constexprs) = ((split.split_partials_kernel, first)
                                      if design == "split partials"
                                      else (split.split_normalize_kernel, second))
        return kernel, args, dict(constexprs, num_warps=m.SPLIT_CONFIG.num_warps)
    config = (m.heuristic_config(cols, x.dtype) if design == "whole"
              else m.TWO_PASS_CONFIG)
    block = triton.next_power_of_2(cols)
    if config.chunk is not None and config.chunk < block:
        kernel, width = m.add_rmsnorm_chunked_kernel, {"CHUNK": config.chunk}
    else:
        kernel, width = m.add_rmsnorm_kernel, {"BLOCK": block}
    args = (x, r, w, y, s, ROWS, cols, x.stride(0), r.stride(0), y.stride(0), s.stride(0), 1e-5)
    return kernel, args, dict(**width, ROWS_PER_PROGRAM=config.rows_per_program,
                              WRITE_SUM=write_sum, SOFTWARE_BF16=False,
                              PERSISTENT=config.programs_per_sm is not None,
                              num_warps=config.num_warps, num_stages=config.num_stages)


def _build_fp8(cols: int, variant: str, rounding: str):
    """``rmsnorm_fp8._launch_setup`` decides the launch (as the wrappers do); the arguments follow
    ``_launch_fused`` and ``rmsnorm_fp8_naive``."""
    import torch
    import triton

    from . import rmsnorm_fp8 as m
    from . import rmsnorm_fp8_spec as spec

    x, w = _rows_and_weight(cols, "bfloat16")
    if variant == "approx":  # rmsnorm_fp8_approx: its own launch, the cast only
        nb = spec.n_blocks(cols)
        codes = torch.empty(x.shape, dtype=spec.FP8_DTYPE)
        scales = torch.empty((ROWS, nb), dtype=torch.float32)
        return (m.rmsnorm_fp8_approx_kernel,
                (x, w, codes, scales, cols, x.stride(0), spec.RMS_NORM_EPS, spec.ABSMAX_FLOOR),
                dict(FP8_MAX=spec.FP8_MAX, BLOCK_COLS=spec.BLOCK_COLS,
                     BLOCKS=triton.next_power_of_2(nb), num_warps=8))
    if variant == "proof":  # rmsnorm_fp8_lean: every per-block division the lean steps make
        from . import rmsnorm_fp8_lean as proof

        v = proof.mantissas(0, 1024, "cpu")
        return (proof.lean_division_kernel, (v, torch.empty_like(v), v.numel()),
                dict(FP8_MAX=spec.FP8_MAX, KIND=1, BLOCK=1024))
    candidates = {"rows": next(c for c in m.CANDIDATES if c.rows_per_program > 1),
                  "split": next(c for c in m.CANDIDATES if c.tile == "split"),
                  "lean": next(c for c in m.CANDIDATES if c.lean)}
    config = candidates.get(variant, m.baseline_config(cols))
    contract = "exact" if variant == "rows" else spec.DEFAULT_CONTRACT  # rows: exact only
    x2, w, eps, floor, _, _, codes_out, scales, meta = m._launch_setup(
        x, w, spec.RMS_NORM_EPS, spec.ABSMAX_FLOOR, rounding, None, True, None, config, contract)
    common = (x2, w, codes_out, scales)
    if variant == "split":
        b0, b1, b2 = meta.pop("PIECES")
        meta.pop("BLOCKS")
        return (m.rmsnorm_fp8_fused_split_kernel,
                (*common, cols, float(cols), x2.stride(0), eps, floor),
                dict(FP8_MAX=spec.FP8_MAX, B0=b0, B1=b1, B2=b2, **meta))
    if variant == "rows":
        del meta["SUM_ORDER"], meta["MULTIPLY"], meta["LEAN"]
        return (m.rmsnorm_fp8_fused_rows_kernel,
                (*common, ROWS, cols, float(cols), x2.stride(0), eps, floor),
                dict(FP8_MAX=spec.FP8_MAX, **meta))
    if variant in ("fused", "lean"):
        return (m.rmsnorm_fp8_fused_kernel, (*common, cols, float(cols), x2.stride(0), eps, floor),
                dict(FP8_MAX=spec.FP8_MAX, **meta))
    y = torch.empty((ROWS, cols), dtype=torch.bfloat16)
    if variant == "norm":
        return (m.rmsnorm_bf16_kernel, (x2, w, y, cols, float(cols), x2.stride(0), eps),
                m.norm_meta(meta))
    if variant == "quantize":
        return (m.quantize_fp8_kernel, (y, codes_out, scales, cols, floor),
                dict(FP8_MAX=spec.FP8_MAX, **m.quantize_meta(meta)))
    raise ValueError(f"unknown fp8 variant {variant!r}")


def _build_backward(cols: int, dtype: str, op: str, residual: bool = False, atomic: bool = False,
                    d_sum: bool = False):
    """``rmsnorm_backward.forward`` / ``backward`` (the autograd path: r saved by the forward)."""
    import torch
    import triton

    from . import rmsnorm_backward as m

    x, w = _rows_and_weight(cols, dtype)
    block = triton.next_power_of_2(cols)
    acc, f64 = m.acc_dtype(x.dtype), x.dtype == torch.float64
    programs = 256  # a GPU's grid: a few programs per compute unit, 16 rows each
    if op == "forward":
        res = torch.empty_like(x) if residual else x
        y = torch.empty_like(x)
        s = torch.empty_like(x) if residual else y
        rstd = torch.empty(ROWS, dtype=torch.float32)
        return (m.rmsnorm_forward_kernel,
                (x, res, w, y, s, rstd, cols, x.stride(0), res.stride(0), y.stride(0),
                 s.stride(0), 1e-5),
                dict(BLOCK=block, HAS_RESIDUAL=residual, ACC=acc, F64=f64,
                     num_warps=m.num_warps_for(block)))
    if op == "dw_reduce":
        partials = torch.empty((programs, cols), dtype=torch.float32)
        return (m.dw_reduce_kernel, (partials, torch.empty_like(w), programs, cols),
                dict(BLOCK_P=m.REDUCE_BLOCK_P, BLOCK_COLS=m.REDUCE_BLOCK_COLS,
                     num_warps=m.REDUCE_WARPS))
    dy, dx = torch.empty_like(x), torch.empty_like(x)
    ds = torch.empty_like(x) if d_sum else dx
    tile = m.tile_rows_for(cols, x.dtype)
    rstd = torch.empty(ROWS, dtype=torch.float32)
    dw = (torch.empty(cols, dtype=torch.float32) if atomic
          else torch.empty((programs, cols), dtype=torch.float32))
    return (m.rmsnorm_backward_kernel,
            (x, x, w, dy, ds, rstd, dx, dw, ROWS, cols, triton.cdiv(ROWS, programs),
             x.stride(0), x.stride(0), dy.stride(0), ds.stride(0), dx.stride(0), 1e-5),
            dict(BLOCK=block, TILE_ROWS=tile, HAS_RESIDUAL=False, HAS_DSUM=d_sum, SAVED_R=True,
                 ATOMIC_DW=atomic, ACC=acc, F64=f64, **m.launch_options(tile, cols, x.dtype)))


_BUILDERS = {"row": _build_row, "looped": _build_looped, "multirow": _build_multirow,
             "add_rmsnorm": _build_add_rmsnorm, "fp8": _build_fp8, "backward": _build_backward}


# ---------------------------------------------------------------- the table


def _cell(r: Compiled | None) -> str:
    if r is None:
        return "-"
    if not r.compiled:
        return "failed"
    spilled = f"+{r.spills}sp" if r.spills else ""
    return f"{r.vgprs}/{r.sgprs}{spilled} w{r.waves_per_simd}"


def table(results: Sequence[Compiled], launches: Sequence[Launch],
          targets: Sequence[str]) -> str:
    """A text table: one line per launch, one column per target: ``VGPRs/SGPRs[+spills] wN``."""
    by_key = compiled_by_key(results)
    head = f"{'ch':>2}  {'kernel':<18} {'launch':<10}" + "".join(f" {a:>14}" for a in targets)
    lines = [head, "-" * len(head)]
    for x in launches:
        cells = "".join(f" {_cell(by_key.get((x.key, a))):>14}" for a in targets)
        lines.append(f"{x.chapter:>2}  {x.key:<18} {x.shape:<10}{cells}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m fusedrms.kernels.amd_targets",
        description="Compile the book's Triton kernels for AMD GPUs (no AMD GPU needed) and show "
                    "VGPRs/SGPRs per kernel, spills and waves per SIMD.")
    p.add_argument("--target", action="append", metavar="ARCH",
                   help=f"an AMD target, repeatable: {', '.join(TARGETS)} "
                        f"(default: {' and '.join(DEFAULT_TARGETS)})")
    p.add_argument("--chapter", type=int, action="append", metavar="N",
                   help="only this chapter's kernels, repeatable: "
                        + ", ".join(str(c) for c in sorted({x.chapter for x in LAUNCHES})))
    p.add_argument("--json", action="store_true", help="print every count as JSON")
    return p


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    targets = tuple(dict.fromkeys(args.target or DEFAULT_TARGETS))
    unknown = [a for a in targets if a not in TARGETS]
    if unknown:
        parser.error(f"--target must be one of {', '.join(TARGETS)} (got {', '.join(unknown)})")
    chapters = sorted({x.chapter for x in LAUNCHES})
    if args.chapter and not set(args.chapter) <= set(chapters):
        parser.error(f"--chapter must be one of {', '.join(map(str, chapters))} "
                     f"(got {', '.join(map(str, args.chapter))})")
    launches = [x for x in LAUNCHES if not args.chapter or x.chapter in args.chapter]
    results = compile_launches(launches, targets)
    if args.json:
        print(json.dumps([{**asdict(r), "spills": r.spills} for r in results], indent=1))
    else:
        for arch in targets:
            print(TARGETS[arch].describe())
        print("\nper kernel: VGPRs/SGPRs (+spilled values), w = waves per SIMD the compiler "
              "expects\n")
        print(table(results, launches, targets))
        for r in results:
            if not r.compiled:
                print(f"\n{r.key} on {r.target} did not compile: {r.error}")
    return 0 if all(r.compiled for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
