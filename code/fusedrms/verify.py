"""The boundary suite: every registered kernel, every dtype it supports, every awkward input.

For each implementation in :mod:`fusedrms.registry` (``hip.*``, ``triton.*``, ``capstone.*``,
``fp8.*``; library peers ``torch.*`` with ``--peers``), each dtype it declares and each
:data:`CASES` entry its width allows, one *check*:

1. fresh random inputs (a seed derived from the kernel, the case and the dtype);
2. the output buffers poisoned before the launch (:func:`fusedrms.checks.poison`), through the
   wrapper's ``out=`` argument when it has one, else by poisoning every ``torch.empty*`` the wrapper
   calls (:func:`fusedrms.checks.poisoned_allocations`); elements left poison are *unwritten*;
3. the reference in float64 (:mod:`fusedrms.reference`, ``accum=torch.float64``), compared with
   :func:`fusedrms.checks.allclose` (tolerance from :func:`fusedrms.checks.tolerance_for`) or, for
   FP8 codes, with chapter 8's exact rule.

NaN and Inf policy (:data:`fusedrms.validation.INPUT_POLICY`): a NaN or an Inf in a row makes that
whole row NaN, and so does a row whose fp32 sum of squares overflows or (eps = 0) whose mean square
falls below fp32's smallest normal number; other rows are untouched. The reference accumulates in
float64 and applies fp32's range (``range_dtype``), so it is the exact answer wherever the kernels
compute one. For FP8 a NaN or Inf in a 128-column block makes its scale and all its codes NaN. The
checks use ``nan="match"``: NaN and Inf must sit exactly where the reference has them.

Command line::

    python -m fusedrms.verify [--kernel NAME|all] [--device cpu|gpu] [--verbose] [--json PATH]

prints a table and ends with the line ``N passed, M failed``; the exit status is 1 on any failure.
"""
from __future__ import annotations

from . import env  # first: decides GPU or interpreter before any kernel module loads

import argparse
import contextlib
import fnmatch
import inspect
import os
import sys
import time
import zlib
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch

from . import checks, cli, dtypes, reference, registry
from . import verify_jobs as jobs

F64 = torch.float64
DTYPE_NAMES = {d: dtypes.short(d) for d in (torch.float32, torch.float16, torch.bfloat16)}


@dataclass(frozen=True)
class Case:
    """One boundary input. ``kind`` selects how :func:`make_inputs` fills it."""

    name: str
    short: str  # a column label for :func:`matrix`
    kind: str
    gpu_shape: tuple[int, int]
    cpu_shape: tuple[int, int]
    catches: str
    eps: float = 1e-5
    nan: str = "never"  # "match" where the input itself holds NaN or Inf

    def shape(self, on_gpu: bool) -> tuple[int, int]:
        return self.gpu_shape if on_gpu else self.cpu_shape


# Widths are few on purpose (1, 13, 257, 4096): each new width is a new Triton compilation on a GPU.
# 13 and 257 are not powers of two (padded lanes); 1 and 4096 are.
CASES: tuple[Case, ...] = (
    Case("3x13", "3x13", "normal", (3, 13), (3, 13),
         "masking: 13 columns in a 16-lane block, 3 padded lanes that must add nothing"),
    Case("33x257", "33x257", "normal", (33, 257), (33, 257),
         "a width just past a power of two (512 lanes, half padding); rows not a multiple of 2, 4, 8"),
    Case("1024x4096", "1024x4k", "normal", (1024, 4096), (4, 4096),
         "a model's width: multi-warp reductions, no padding (smaller on CPU)"),
    Case("1x1", "1x1", "normal", (1, 1), (1, 1),
         "the smallest problem: one program, one lane; y = x / sqrt(x^2 + eps) * w"),
    Case("one column", "1col", "normal", (1000, 1), (5, 1),
         "many rows of width 1: row indexing, rows-per-program tails"),
    Case("all zeros", "zeros", "zeros", (4, 13), (4, 13),
         "0/0: r = 1/sqrt(eps) and y = 0; a missing eps gives NaN"),
    Case("w = 0", "w=0", "w0", (4, 257), (4, 257),
         "y = 0 exactly: a weight that is ignored or loaded from the wrong place"),
    Case("mixed signs", "mixed", "mixed", (64, 4096), (4, 4096),
         "alternating signs: summing x instead of x*x cancels to about 0"),
    Case("huge values", "huge", "huge", (6, 257), (6, 257),
         "fp16 inputs near 3e4: their squares overflow fp16 (max 65504); only an fp32 sum survives"),
    Case("tiny values", "tiny", "tiny", (6, 13), (6, 13),
         "mean square 4e-7 < eps 1e-5: eps dominates, so a missing or misplaced eps shows"),
    Case("NaN input", "NaN", "nan", (4, 13), (4, 13),
         "a NaN in row 1 makes row 1 NaN and leaves the others alone", nan="match"),
    Case("Inf input", "Inf", "inf", (4, 13), (4, 13),
         "+Inf in row 1, -Inf in row 2: those rows become NaN, never zeros", nan="match"),
    Case("overflow", "ovfl", "overflow", (4, 257), (4, 257),
         "row 1 near 1e19: its fp32 sum of squares overflows; the row must be NaN, not zeros",
         nan="match"),
    Case("eps = 0", "eps=0", "eps0", (4, 257), (4, 257),
         "eps = 0: ordinary rows normalize exactly; row 1 (mean square below 1.2e-38) is NaN",
         eps=0.0, nan="match"),
    Case("strided rows", "stride", "strided", (33, 257), (5, 257),
         "row stride 514, NaN between rows: assuming contiguous rows, or reading past a row's "
         "end, picks up NaN"),
    Case("transposed", "transp", "transposed", (33, 257), (5, 257),
         "column stride != 1: the wrapper must copy (or handle strides)"),
)


_CASE_NAMES = {c.name for c in CASES}
# Cases where the book's kernels are loud (NaN rows) and PyTorch's own ops return zeros or Inf.
LOUD_KINDS = ("inf", "overflow", "eps0")


def case(name: str) -> Case:
    for c in CASES:
        if c.name == name:
            return c
    raise KeyError(f"no case named {name!r}; known: {', '.join(c.name for c in CASES)}")


# ---------------------------------------------------------------- inputs

def _scale_huge(dtype: torch.dtype) -> float:
    # fp16: squares of 7.5e3..3e4 overflow fp16, yet x + residual stays below 65504.
    # fp32 / bf16 (same exponent range): 1e17, squares 1e34, a 4096-wide sum still below 3.4e38.
    return 3e4 if dtype == torch.float16 else 1e17


def _followed_by_nan(t: torch.Tensor, device) -> torch.Tensor:
    """``t`` (contiguous) on ``device``, at the start of a buffer whose elements after it are NaN,
    as many as a row's power-of-two block: a kernel that reads past the end (a missing mask) reads
    NaN on every run instead of whatever memory follows, so its verdict does not change from run
    to run."""
    cols = t.shape[-1] if t.dim() else 1
    guard = 1 << max(cols - 1, 0).bit_length()
    buffer = torch.full((t.numel() + guard,), float("nan"), dtype=t.dtype, device=device)
    placed = buffer[: t.numel()].view(t.shape)
    placed.copy_(t)
    return placed


def make_inputs(c: Case, op: str, dtype: torch.dtype, device, seed: int) -> dict:
    """Fresh inputs for ``c``: ``x``, ``w``, ``eps`` and, for the add ops, ``residual``."""
    device = torch.device(device) if device is not None else env.current().device
    rows, cols = c.shape(device.type != "cpu")
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    def signed_uniform(lo, hi, shape):
        magnitude = lo + (hi - lo) * torch.rand(*shape, generator=g)
        return torch.where(torch.rand(*shape, generator=g) < 0.5, -magnitude, magnitude)

    x, res, w = randn(rows, cols), randn(rows, cols), randn(cols)
    if c.kind == "zeros":
        x, res = torch.zeros(rows, cols), torch.zeros(rows, cols)
    elif c.kind == "w0":
        w = torch.zeros(cols)
    elif c.kind == "mixed":
        sign = (-1.0) ** torch.arange(cols)
        x = sign * (0.5 + 1.5 * torch.rand(rows, cols, generator=g))
        res = 0.5 * randn(rows, cols)
    elif c.kind == "huge":
        s = _scale_huge(dtype)
        x, res = signed_uniform(0.25 * s, s, (rows, cols)), signed_uniform(0.25 * s, s, (rows, cols))
    elif c.kind == "tiny":
        x, res = 1e-3 * randn(rows, cols), 1e-3 * randn(rows, cols)
    elif c.kind == "nan":
        x[1, cols // 2] = float("nan")
    elif c.kind == "inf":
        x[1, 0] = float("inf")
        x[2, cols - 1] = float("-inf")
    elif c.kind == "overflow":  # fp16 cannot hold 1e19: there the row is Inf, loud just the same
        x[1], res[1] = 1e19 * x[1].sign(), 0.0 * res[1]
    elif c.kind == "eps0":  # fp16 flushes 1e-21 to 0: a zero row with eps = 0, NaN as well
        x[1], res[1] = 1e-21 * x[1], 1e-21 * res[1]

    def place(t):
        return _followed_by_nan(t.to(dtype), device)

    if c.kind == "strided":  # the same values, in a buffer twice as wide whose gaps hold NaN
        def place(t):  # noqa: F811
            wide = torch.full((t.shape[0], 2 * t.shape[1]), float("nan"), dtype=dtype,
                              device=device)
            wide[:, : t.shape[1]] = t.to(dtype)
            return wide[:, : t.shape[1]]
    elif c.kind == "transposed":
        def place(t):  # noqa: F811
            return t.t().contiguous().to(dtype).to(device).t()

    inputs = {"x": place(x), "residual": place(res), "w": _followed_by_nan(w.to(dtype), device),
              "eps": c.eps}
    if op in registry.BACKWARD_OPS:  # output gradients, from their own stream of numbers
        g2 = torch.Generator().manual_seed(seed + 1)
        inputs["dy"] = place(torch.randn(rows, cols, generator=g2))
        inputs["d_sum"] = place(torch.randn(rows, cols, generator=g2))
    return inputs


# ---------------------------------------------------------------- running one check

@dataclass
class Check:
    """The outcome of one (kernel, dtype, case). ``status`` is "pass", "FAIL" or "skip"."""

    kernel: str
    op: str
    dtype: str
    case: str
    shape: tuple
    status: str
    message: str = ""
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    max_ulp: int = 0
    rel_l2: float = 0.0
    unwritten: int = 0
    rtol: float = 0.0
    seconds: float = 0.0
    details: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "pass"

    def record(self) -> dict:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d


def _accepts_out(fn: Callable) -> bool:
    try:
        return "out" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _poisoned_outputs(op: str, x: torch.Tensor):
    """Poisoned buffers in the ``out=`` layout of ``op`` (see CONTRIBUTING.md, Registry)."""
    rows_shape = tuple(x.shape)
    if op in ("rmsnorm", "add_rmsnorm"):
        return checks.poisoned(rows_shape, x.dtype, x.device)
    if op == "add_rmsnorm_residual":
        return (checks.poisoned(rows_shape, x.dtype, x.device),
                checks.poisoned(rows_shape, x.dtype, x.device))
    if op == "rmsnorm_fp8":
        from .kernels import rmsnorm_fp8_spec  # the block layout is chapter 8's

        scales_shape = rows_shape[:-1] + (rmsnorm_fp8_spec.n_blocks(rows_shape[-1]),)
        return (checks.poisoned(rows_shape, torch.float8_e4m3fn, x.device),
                checks.poisoned(scales_shape, torch.float32, x.device))
    raise ValueError(f"unknown op {op!r}")


def launch(impl: registry.Impl, inputs: dict):
    """Call ``impl`` on ``inputs`` with its outputs poisoned; returns what the wrapper returned."""
    args = (inputs["x"], inputs["w"], inputs["eps"])
    if impl.op in ("add_rmsnorm", "add_rmsnorm_residual"):
        args = (inputs["x"], inputs["residual"], inputs["w"], inputs["eps"])
        if impl.mutates:  # it writes y and s into x and residual: give it (contiguous) copies
            copy = {"memory_format": torch.contiguous_format}
            args = (inputs["x"].clone(**copy), inputs["residual"].clone(**copy), inputs["w"],
                    inputs["eps"])
    elif impl.op == "rmsnorm_backward":
        args = (inputs["x"], inputs["w"], inputs["dy"], inputs["eps"])
    elif impl.op == "add_rmsnorm_backward":
        args = (inputs["x"], inputs["residual"], inputs["w"], inputs["dy"], inputs["eps"],
                inputs["d_sum"])
    quiet = contextlib.nullcontext()
    if not inputs["x"].is_cuda:  # NumPy (the interpreter) warns on the NaN/Inf cases' arithmetic
        import numpy

        quiet = numpy.errstate(all="ignore")
    with quiet:
        result = _call(impl, args, inputs["x"])
    if inputs["x"].is_cuda:
        torch.cuda.synchronize()
    return result


def _call(impl: registry.Impl, args: tuple, x: torch.Tensor):
    if _accepts_out(impl.fn):
        out = _poisoned_outputs(impl.op, x)
        result = impl.fn(*args, out=out)
        return out if result is None else result
    if impl.kernel:
        with checks.poisoned_allocations():
            return impl.fn(*args)
    return impl.fn(*args)  # library peers allocate inside ATen; nothing to poison


def kernel_range(dtype: torch.dtype) -> torch.dtype:
    """The range the kernels accumulate in: fp32's, or float64's for float64 inputs (chapter 9)."""
    return F64 if dtype == F64 else torch.float32


def _reference_rmsnorm(x, w, eps):
    return reference.rmsnorm(x, w, eps, accum=F64, out_dtype=F64, range_dtype=kernel_range(x.dtype))


def compare(op: str, inputs: dict, result, nan: str = "never") -> tuple[checks.Report, dict]:
    """Compare a wrapper's result with the float64 reference. Returns the verdict and details."""
    x, w, eps = inputs["x"], inputs["w"], inputs["eps"]
    cols = x.shape[-1]

    def check_tensor(actual, expected, name, n=cols):
        if not isinstance(actual, torch.Tensor):
            return checks.Report(False, f"{name}: expected a tensor, got {type(actual).__name__}")
        if actual.dtype != x.dtype:
            return checks.Report(False, f"{name} is {actual.dtype}, expected {x.dtype} (x's dtype)")
        return checks.allclose(actual, expected, n=n, nan=nan)

    if op == "rmsnorm":
        return check_tensor(result, _reference_rmsnorm(x, w, eps), "y"), {}
    if op == "add_rmsnorm":
        expected = reference.add_rmsnorm(x, inputs["residual"], w, eps, accum=F64, out_dtype=F64,
                                         range_dtype=kernel_range(x.dtype))
        return check_tensor(result, expected, "y"), {}
    if op == "add_rmsnorm_residual":
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            return checks.Report(False, "expected (y, x + residual), got "
                                        f"{type(result).__name__}"), {}
        y, s = result
        s_exact = x.to(F64) + inputs["residual"].to(F64)
        s_report = check_tensor(s, s_exact, "x + residual", n=1)  # one rounding of a sum
        # y is defined from s as stored; a wrong s is reported above, y then uses s rounded here.
        s_used = s if s_report.ok else s_exact.to(x.dtype)
        y_report = check_tensor(y, _reference_rmsnorm(s_used, w, eps), "y")
        details = {"residual_out": str(s_report), "y": str(y_report)}
        if not s_report.ok:
            return checks.Report(False, f"x + residual: {s_report.message}",
                                 **_stats(s_report)), details
        if not y_report.ok:
            return checks.Report(False, f"y: {y_report.message}", **_stats(y_report)), details
        return y_report, details
    if op == "rmsnorm_fp8":
        return _compare_fp8(inputs, result, nan)
    if op in registry.BACKWARD_OPS:
        return _compare_backward(op, inputs, result, nan)
    raise ValueError(f"unknown op {op!r}")


def _compare_backward(op: str, inputs: dict, result, nan: str) -> tuple[checks.Report, dict]:
    """``(dx, dw)`` against the float64 formula (:func:`fusedrms.reference.rmsnorm_backward`).

    Each gradient is a difference (dx) or a sum over rows (dw) of terms that cancel, so the bound
    is the dtype's tolerance times the terms' magnitudes (``scale``), not times what is left.
    ``atol`` is two subnormal steps of the dtype, not its smallest normal number: fp16 gradients
    of rows near 3e4 are subnormal (about 5e-5), and a normal-number atol would accept anything."""
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        return checks.Report(False, f"expected (dx, dw), got {type(result).__name__}"), {}
    x, w = inputs["x"], inputs["w"]
    rows, cols = x.reshape(-1, x.shape[-1]).shape
    d_sum = None
    if op == "add_rmsnorm_backward":
        x = x.to(F64) + inputs["residual"].to(F64)  # the op normalizes the sum, never rounded
        d_sum = inputs["d_sum"]
    ref = reference.rmsnorm_backward(x, w, inputs["dy"], inputs["eps"], accum=F64, d_sum=d_sum,
                                     range_dtype=kernel_range(inputs["x"].dtype))
    reports = {}
    for name, got, like, n in (("dx", result[0], inputs["x"], cols),
                               ("dw", result[1], w, rows)):
        if not isinstance(got, torch.Tensor):
            reports[name] = checks.Report(False, f"{name}: expected a tensor, got "
                                                 f"{type(got).__name__}")
        elif got.dtype != like.dtype or got.shape != like.shape:
            reports[name] = checks.Report(False, f"{name} is {got.dtype} {tuple(got.shape)}, "
                                                 f"expected {like.dtype} {tuple(like.shape)}")
        else:  # gradients can be subnormal (fp16 at large |x|): one subnormal step of atol
            fin = torch.finfo(got.dtype)
            reports[name] = checks.allclose(got, ref[name], n=n, nan=nan,
                                            atol=2 * fin.tiny * fin.eps,
                                            scale=ref[f"{name}_scale"])
    details = {name: str(r) for name, r in reports.items()}
    for name, r in reports.items():
        if not r.ok:
            return checks.Report(False, f"{name}: {r.message}", **_stats(r)), details
    worst = max(reports.values(), key=lambda r: r.max_rel_err)
    return checks.Report(True, f"dx {reports['dx'].message}; dw {reports['dw'].message}",
                         **_stats(worst)), details


def _stats(r: checks.Report) -> dict:
    return dict(max_abs_err=r.max_abs_err, max_rel_err=r.max_rel_err, max_ulp=r.max_ulp,
                mismatches=r.mismatches, worst_index=r.worst_index, rel_l2=r.rel_l2,
                unwritten=r.unwritten)


def _compare_fp8(inputs: dict, result, nan: str) -> tuple[checks.Report, dict]:
    """FP8 codes compare exactly and scales with a tolerance, by chapter 8's own rule."""
    from .kernels import rmsnorm_fp8_spec

    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        return checks.Report(False, f"expected (codes, scales), got {type(result).__name__}"), {}
    codes, scales = result
    ref_codes, ref_scales = rmsnorm_fp8_spec.reference(inputs["x"], inputs["w"], inputs["eps"])
    # e4m3's poison is also a NaN code (which compare() matches with any NaN): unwritten means
    # poison where the reference is not NaN
    for name, got, ref in (("codes", codes, ref_codes), ("scales", scales, ref_scales)):
        if not isinstance(got, torch.Tensor) or got.shape != ref.shape:
            continue
        left = checks.is_poison(got).cpu() & ~torch.isnan(ref.float()).cpu()
        if left.any():
            idx = tuple(torch.nonzero(left)[0].tolist())
            count = int(left.sum())
            return checks.Report(False, f"{name}: {count} of {got.numel()} elements never written; "
                                        f"first at {idx} (still the poison value)",
                                 mismatches=count, worst_index=idx, unwritten=count), {}
    return rmsnorm_fp8_spec.compare(codes, scales, ref_codes, ref_scales), {}


def seed_for(base: int, kernel: str, case_name: str, dtype: torch.dtype) -> int:
    """A distinct, reproducible seed per check (fresh inputs for every check)."""
    return zlib.crc32(f"{base}|{kernel}|{case_name}|{dtype}".encode())


def _label(dtype: torch.dtype) -> str:
    return DTYPE_NAMES.get(dtype) or str(dtype).replace("torch.", "")


def skip_reason(impl: registry.Impl, c: Case, dtype: torch.dtype, on_gpu: bool) -> str:
    """Why ``impl`` does not run case ``c`` in ``dtype`` on this device; empty when it runs."""
    dev_key = "cuda" if on_gpu else "cpu"
    if dev_key not in impl.devices:
        return impl.gpu_only_reason or f"does not run on the {'GPU' if on_gpu else 'CPU'}"
    if dtype not in impl.dtypes:
        return f"takes {', '.join(_label(d) for d in impl.dtypes)} only, not {_label(dtype)}"
    limit = impl.col_limit(dev_key)
    if limit is not None and c.shape(on_gpu)[1] > limit:
        return f"rows wider than {limit} columns are not supported{impl.width_note()}"
    if not impl.kernel and c.kind in LOUD_KINDS:
        return ("a library peer computes what PyTorch does here (zeros for an overflowed row); "
                "the loud policy is the book's kernels'")
    return ""


def why_nothing_runs(impls: list[registry.Impl], dtypes=None, cases=None,
                     on_gpu: bool = False) -> str:
    """Empty when the selection runs at least one check; else one line per implementation saying
    why none of its checks would run (a dtype it does not take, the device, the widths)."""
    lines = []
    for impl in impls:
        reasons = {skip_reason(impl, c, d, on_gpu)
                   for d in (impl.dtypes if dtypes is None else dtypes)
                   for c in (CASES if cases is None else cases)}
        if "" in reasons:
            return ""
        lines.append(f"{impl.name}: {'; '.join(sorted(reasons))}")
    return "\n".join(lines) or "no implementation selected"


def run_check(impl: registry.Impl, c: Case, dtype: torch.dtype, device=None,
              seed: int = 0) -> Check:
    """One check of ``impl`` on case ``c`` in ``dtype`` (on the environment's device by default)."""
    device = torch.device(device) if device is not None else env.current().device
    on_gpu = device.type != "cpu"
    rows, cols = c.shape(on_gpu)
    name = DTYPE_NAMES.get(dtype, str(dtype))
    base = dict(kernel=impl.name, op=impl.op, dtype=name, case=c.name, shape=(rows, cols))
    why = skip_reason(impl, c, dtype, on_gpu)
    if why:
        return Check(**base, status="skip", message=why)
    inputs = make_inputs(c, impl.op, dtype, device, seed_for(seed, impl.name, c.name, dtype))
    rtol = checks.tolerance_for(dtype, cols)[0]
    start = time.perf_counter()
    try:
        result = launch(impl, inputs)
    except Exception as e:  # any failure to run is a failed check, reported in one line
        if os.environ.get("FUSEDRMS_TRACEBACK"):
            import traceback

            traceback.print_exc()
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return Check(**base, status="FAIL", message=f"raised {type(e).__name__}: {msg}"[:300],
                     rtol=rtol, seconds=time.perf_counter() - start)
    seconds = time.perf_counter() - start
    try:
        report, details = compare(impl.op, inputs, result, nan=c.nan)
    except Exception as e:
        return Check(**base, status="FAIL", message=f"comparison raised {type(e).__name__}: {e}",
                     rtol=rtol, seconds=seconds)
    return Check(**base, status="pass" if report.ok else "FAIL", message=report.message,
                 max_abs_err=report.max_abs_err, max_rel_err=report.max_rel_err,
                 max_ulp=report.max_ulp, rel_l2=report.rel_l2, unwritten=report.unwritten,
                 rtol=rtol, seconds=seconds, details=details)


# ---------------------------------------------------------------- selecting and running

def lookup(pattern: str = "all", peers: bool = False) -> list[registry.Impl]:
    """Implementations by name: ``all``, a name, a glob (``triton.*``) or a comma-separated list.

    ``all`` means every registered kernel (``peers=True`` adds the library peers). The broken
    kernels of :mod:`fusedrms.book.broken` are found by name (``broken.*``), never by ``all``;
    chapter 9's broken backward kernels (:mod:`fusedrms.book.broken_backward`) as ``broken_bwd.*``.
    """
    known = {i.name: i for i in registry.impls()}
    if not any(p.strip() for p in str(pattern).split(",")):
        raise KeyError(f"select at least one implementation (got {pattern!r}): 'all', a name, a "
                       f"glob or a comma-separated list")
    chosen: dict[str, registry.Impl] = {}
    for part in (p.strip() for p in pattern.split(",") if p.strip()):
        if part == "all":
            chosen.update({n: i for n, i in known.items() if i.kernel or peers})
            continue
        pool = dict(known)
        if part.startswith("broken"):
            from .book import broken, broken_backward

            pool = {**broken.IMPLS, **broken_backward.IMPLS}
        hits = {n: i for n, i in pool.items() if fnmatch.fnmatchcase(n, part)}
        if not hits:
            names = ", ".join(sorted(known) + ["broken.*", "broken_bwd.*"])
            raise KeyError(f"no implementation matches {part!r}; known: {names}")
        chosen.update(hits)
    return list(chosen.values())


def run(impls: list[registry.Impl], device=None, dtypes=None, cases=None, seed: int = 0,
        progress: Callable[[Check], None] | None = None) -> list[Check]:
    """Every check of every implementation in ``impls``; ``progress`` sees each as it finishes."""
    out = []
    for impl in impls:
        for dtype in impl.dtypes if dtypes is None else [d for d in dtypes if d in impl.dtypes]:
            for c in CASES if cases is None else cases:
                check = run_check(impl, c, dtype, device, seed)
                out.append(check)
                if progress is not None:
                    progress(check)
    return out


def summary(results: list[Check]) -> str:
    """The last line of the CLI: ``N passed, M failed``."""
    passed = sum(r.status == "pass" for r in results)
    failed = sum(r.status == "FAIL" for r in results)
    return f"{passed} passed, {failed} failed"


def table(results: list[Check], verbose: bool = False) -> str:
    """One line per (kernel, dtype), then one line per failed check (every check with ``verbose``)."""
    lines = [f"{'kernel':<24} {'dtype':<5} {'passed':>7} {'skip':>4} {'max ulp':>7} "
             f"{'max rel err':>11}  failing cases"]
    lines.append("-" * len(lines[0]))
    groups: dict[tuple, list[Check]] = {}
    for r in results:
        groups.setdefault((r.kernel, r.dtype), []).append(r)
    for (kernel, dtype), rs in groups.items():
        ran = [r for r in rs if r.status != "skip"]
        passed = [r for r in ran if r.ok]
        failing = ", ".join(r.case for r in ran if not r.ok) or "-"
        worst_ulp = max((r.max_ulp for r in passed), default=0)
        worst_rel = max((r.max_rel_err for r in passed), default=0.0)
        lines.append(f"{kernel:<24} {dtype:<5} {len(passed):>3}/{len(ran):<3} "
                     f"{len(rs) - len(ran):>4} {worst_ulp:>7} {worst_rel:>11.2e}  {failing}")
    shown = results if verbose else [r for r in results if r.status == "FAIL"]
    if shown:
        lines.append("")
    for r in shown:
        shape = "x".join(str(s) for s in r.shape)
        lines.append(f"{r.status:<4} {r.kernel} {r.dtype} {r.case} ({shape}): {r.message}")
    return "\n".join(lines)


SHORT_DTYPE = {"fp32": "32", "fp16": "16", "bf16": "b16"}


def matrix(results: list[Check]) -> str:
    """Kernels down, cases across (:attr:`Case.short` labels): ``ok``, ``-`` (skipped), the
    dtypes that failed (``32``, ``16``, ``b16``) or ``all``."""
    kernels = list(dict.fromkeys(r.kernel for r in results))
    names = list(dict.fromkeys(r.case for r in results))
    labels = [case(n).short if n in _CASE_NAMES else n for n in names]
    widths = [max(4, len(label)) for label in labels]
    kw = max([6] + [len(k) for k in kernels])
    lines = [f"{'kernel':<{kw}} " + " ".join(f"{lab:>{w}}" for lab, w in zip(labels, widths))]
    for k in kernels:
        cells = []
        for cname, w in zip(names, widths):
            ran = [r for r in results if r.kernel == k and r.case == cname and r.status != "skip"]
            bad = [SHORT_DTYPE.get(r.dtype, r.dtype) for r in ran if not r.ok]
            text = "ok" if not bad else ("all" if len(bad) == len(ran) > 1 else "/".join(bad))
            cells.append(f"{('-' if not ran else text):>{w}}")
        lines.append(f"{k:<{kw}} " + " ".join(cells))
    return "\n".join(lines)


def budget_use(results, failed: bool = False) -> str:
    """Worst ``max rel err / rtol`` per kernel and dtype: how much of the tolerance correct kernels
    use (0.5 is round-to-nearest, 1.0 the edge). Takes :class:`Check` objects or their records.
    FP8 codes are compared exactly, so those kernels read ``exact``. ``failed=True`` also counts
    checks that failed on the tolerance (so shares above 1.0 appear); NaN and unwritten never do."""
    worst: dict[tuple, float] = {}
    exact: set[tuple] = set()
    for r in results:
        r = r.record() if isinstance(r, Check) else r
        if r["status"] == "skip" or (r["status"] == "FAIL" and not (
                failed and "outside rtol" in r["message"])):
            continue
        key = (r["kernel"], r["dtype"])
        if r["op"] == "rmsnorm_fp8":
            exact.add(key)
        elif r["rtol"] > 0:
            worst[key] = max(worst.get(key, 0.0), r["max_rel_err"] / r["rtol"])
    seen = [(r.record() if isinstance(r, Check) else r)["kernel"] for r in results]
    kernels = [k for k in dict.fromkeys(seen) if any(kd[0] == k for kd in worst.keys() | exact)]
    dtypes = ("fp32", "fp16", "bf16")
    width = max([6] + [len(k) for k in kernels])
    lines = [f"{'kernel':<{width}} " + " ".join(f"{d:>6}" for d in dtypes)]
    for k in kernels:
        cells = [f"{'exact':>6}" if (k, d) in exact else
                 f"{worst[(k, d)]:>6.2f}" if (k, d) in worst else f"{'-':>6}" for d in dtypes]
        lines.append(f"{k:<{width}} " + " ".join(cells))
    return "\n".join(lines)


# ---------------------------------------------------------------- command line

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m fusedrms.verify",
        description="Run the boundary suite (shapes, zeros, huge/tiny values, NaN/Inf, strides) "
                    "against registered RMSNorm kernels; float64 reference, poisoned outputs.")
    p.add_argument("--kernel", default="all", type=cli.selection,
                   help="'all' (every registered kernel), a name (triton.row), a glob (hip.*) or a "
                        "comma-separated list; broken.* runs the deliberately broken kernels")
    p.add_argument("--device", choices=["cpu", "gpu"], default=None,
                   help="default: the GPU if there is one, else the CPU (Triton interpreter)")
    p.add_argument("--dtype", default=None, type=cli.dtype_name,
                   help="only this dtype: fp32, fp16 or bf16")
    p.add_argument("--case", default=None, help="only the cases whose name contains this text")
    p.add_argument("--peers", action="store_true", help="with 'all': also the torch peers")
    p.add_argument("--seed", type=cli.seed, default=0)
    p.add_argument("--verbose", "-v", action="store_true", help="one line per check")
    p.add_argument("--json", default=None, type=cli.output_file,
                   help="write the results here (records.write)")
    p.add_argument("--jobs", type=cli.whole(1, 64), default=1,
                   help="run the routes (hip, triton, capstone, ...) in this many processes at "
                        "once; kernel compilation is CPU-bound, so a GPU run finishes sooner")
    return p


_PARTS_RUN = []  # in a worker process: the parts it ran before (its first pays the imports)


def _run_group(names: list[str], dtype_names, case_names, seed: int):
    """Worker of ``--jobs``: a fresh process (spawn) runs one part; returns its checks, its wall
    seconds and whether it was this process's first part."""
    start = time.perf_counter()
    by_name = {jobs._dtype_name(d): d for d in (*DTYPE_NAMES, F64)}
    dtypes = None if dtype_names is None else [by_name[d] for d in dtype_names]
    cases = None if case_names is None else [case(c) for c in case_names]
    impls = lookup(",".join(names), peers=True)
    results = run(impls, dtypes=dtypes, cases=cases, seed=seed)
    _PARTS_RUN.append(names)
    return results, time.perf_counter() - start, len(_PARTS_RUN) == 1


def canonical_order(impls: list[registry.Impl]) -> Callable[[Check], tuple]:
    """A sort key putting checks in the order a single process runs them (implementation,
    dtype, case), whichever part finished first."""
    kernels = {impl.name: i for i, impl in enumerate(impls)}
    dtype_rank = {(impl.name, jobs._dtype_name(d)): i for impl in impls
                  for i, d in enumerate(impl.dtypes)}
    case_rank = {c.name: i for i, c in enumerate(CASES)}
    return lambda r: (kernels.get(r.kernel, -1), dtype_rank.get((r.kernel, r.dtype), -1),
                      case_rank.get(r.case, -1))


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args = parser.parse_args(argv)
    e = env.current()
    if args.device == "gpu" and not e.on_gpu:
        print("--device gpu: no GPU here (or FUSEDRMS_FORCE_CPU is set); run without --device "
              "to use the CPU interpreter.", file=sys.stderr)
        return 2
    if args.device == "cpu" and e.on_gpu:  # the interpreter must be chosen before kernels load
        os.environ["FUSEDRMS_FORCE_CPU"] = "1"
        os.execv(sys.executable, [sys.executable, "-m", "fusedrms.verify", *argv])
    dtypes = None
    if args.dtype:
        dtypes = [cli.dtype(args.dtype)]
    cases = None
    if args.case:
        cases = [c for c in CASES if args.case.lower() in c.name.lower()]
        if not cases:
            parser.error(f"no case name contains {args.case!r}; cases: "
                         f"{', '.join(c.name for c in CASES)}")
    try:
        impls = lookup(args.kernel, peers=args.peers)
    except KeyError as err:
        parser.error(str(err.args[0]))
    nothing = why_nothing_runs(impls, dtypes, cases, e.on_gpu)
    if nothing:
        parser.error("this selection runs no check:\n  " + nothing.replace("\n", "\n  ")
                     + "\nchoose another --kernel, --dtype or --case")
    print(e.describe())
    print(f"verifying {len(impls)} implementation(s): {', '.join(i.name for i in impls)}")
    start = time.perf_counter()

    def progress(check: Check):
        if check.status == "FAIL":
            print(f"  FAIL {check.kernel} {check.dtype} {check.case}: {check.message}", flush=True)

    unsaved = []  # why --json could not be written, once

    def save(results, complete):
        if not args.json or unsaved:
            return
        from . import records

        try:
            records.write(args.json, [r.record() for r in results],
                          extra={"table": table(results), "matrix": matrix(results),
                                 "summary": summary(results), "complete": complete,
                                 "seconds": round(time.perf_counter() - start, 2),
                                 "cases": [asdict(c) for c in CASES]})
        except OSError as err:
            unsaved.append(f"--json {args.json}: cannot write it ({err.strerror or err})")
            print(f"error: {unsaved[0]}; the results are printed only", file=sys.stderr)

    order = canonical_order(impls)
    results: list[Check] = []

    def collect(group_results: list[Check], part=None, wall: float | None = None):
        results.extend(group_results)
        results.sort(key=order)  # a single process's order, whichever part finished first
        save(results, complete=False)  # a timeout keeps what finished
        for name in dict.fromkeys(r.kernel for r in group_results):
            ran = [r for r in group_results if r.kernel == name and r.status != "skip"]
            where = f" {','.join(part.dtypes)}" if part is not None and part.dtypes else ""
            took = f"part {wall:.1f} s, " if wall is not None else ""
            print(f"  {name}{where}: {sum(r.ok for r in ran)}/{len(ran)} passed "
                  f"({took}at {time.perf_counter() - start:.1f} s)", flush=True)

    times = []
    if args.jobs > 1 and len(impls) > 1:
        case_names = None if cases is None else [c.name for c in cases]
        all_dtypes = None if dtypes is None else [jobs._dtype_name(d) for d in dtypes]

        def worker_args(part):
            return (list(part.names), list(part.dtypes) if part.dtypes else all_dtypes,
                    case_names, args.seed)

        def on_crash(part, e):
            return [Check(kernel=n, op=registry.get(n).op if not n.startswith("broken")
                          else "rmsnorm", dtype=",".join(part.dtypes or ("-",)), case="(worker)",
                          shape=(), status="FAIL",
                          message=f"worker raised {type(e).__name__}: {e}"[:300])
                    for n in part.names]
        times = jobs.run_in_processes(jobs.route_parts(impls, args.jobs, dtypes), args.jobs,
                                      _run_group, worker_args, on_crash, collect, progress, start)
    else:
        for impl in impls:
            collect(run([impl], dtypes=dtypes, cases=cases, seed=args.seed, progress=progress))
    elapsed = time.perf_counter() - start
    save(results, complete=True)
    print()
    print(table(results, verbose=args.verbose))
    print()
    print(matrix(results))
    skipped = sum(r.status == "skip" for r in results)
    print(f"\n{len(results)} checks in {elapsed:.1f} s ({skipped} skipped: unsupported dtype, "
          f"width or device)")
    if args.json and not unsaved:
        print(f"wrote {args.json}")
    if times:
        print(jobs.group_times(times))
    print(summary(results))
    if unsaved:
        print(f"error: {unsaved[0]}", file=sys.stderr)
        return 2
    return 0 if all(r.status != "FAIL" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
