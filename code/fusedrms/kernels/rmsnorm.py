"""The Triton route (chapter 4): RMSNorm with a row expressed as a block of offsets.

Three kernels share one idea: a program loads a row (or a piece of one) as a vector of
``BLOCK_SIZE`` lanes, masks the lanes past the last column, sums the squares in fp32, divides by the
*real* column count and broadcasts the row's scale back over the lanes.

- :func:`rmsnorm_row_kernel` — one program per row, the whole row in one block
  (``BLOCK_SIZE = next_power_of_2(cols)``), so ``x`` is read from memory once.
- :func:`rmsnorm_looped_kernel` — rows wider than one block: walk the row in chunks twice, once to
  sum the squares and once to write ``y``. The price is a second read of ``x``.
- :func:`rmsnorm_multirow_kernel` — several short rows per program, so a narrow row does not leave
  most of a program idle.

The wrappers (:func:`rmsnorm_row`, :func:`rmsnorm_looped`, :func:`rmsnorm_multirow`) validate their
inputs with :mod:`fusedrms.validation` and are registered as ``triton.row``, ``triton.looped`` and
``triton.multirow``. Casting convention (as :func:`fusedrms.reference.rmsnorm`): ``x * r * w`` in
fp32, one cast to x's dtype at the store.

Command line::

    python -m fusedrms.kernels.rmsnorm --version all --rows 1024 --cols 4096
"""
from __future__ import annotations

from .. import env  # first: decides GPU or interpreter before any @triton.jit below

import argparse
import sys

import torch
import triton
import triton.language as tl

from .. import checks, cli, reference, registry, validation

# A row must fit in one block for the row kernel. Triton allows far bigger blocks, but a block lives
# in registers: at 65536 fp32 elements and 16 warps (512 threads) each thread holds 128 values of x
# alone, the register file is full and the compiler spills to local memory. Wider rows go to the
# looped kernel.
ROW_MAX_COLS = 65536
# The looped kernel walks the row in chunks of at most this many columns.
LOOP_CHUNK = 4096
# The multirow kernel is for narrow rows; wider ones fill a program on their own.
MULTIROW_MAX_COLS = 4096
# Elements one multirow program aims to cover (rows x padded width).
MULTIROW_ELEMENTS = 2048


def num_warps_for(block_size: int) -> int:
    """The book's rule: about 16 row elements per thread, never fewer than 4 warps nor more than 16.

    ``BLOCK_SIZE / (32 threads x 16 elements)``, clamped to 4..16: 2048 -> 4, 4096 -> 8,
    8192 and wider -> 16. Four warps keep enough loads in flight on short rows; past 16 warps
    (512 threads) the block-wide reduction's synchronization grows and gains stop. A rule of thumb,
    not a law: chapter 4 measures it, and the measurement does not generalize across shapes.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    return max(4, min(16, block_size // 512))


# [book:loud-scale]
@triton.jit
def loud_scale(r, denominator):
    """The row scale ``r = 1/sqrt(denominator)``, or NaN where ``denominator = mean(x^2) + eps``
    left fp32's normal range: the fp32 sum of squares overflowed (rms(x) above about
    1.8e19 / sqrt(cols)), the row holds a NaN or an Inf, or eps = 0 and mean(x^2) < 1.2e-38.
    Without it an overflowed row would come back as zeros, finite and wrong; one compare per row."""
    in_range = (denominator >= 1.1754943508222875e-38) & (denominator <= 3.4028234663852886e38)
    return tl.where(in_range, r, float("nan"))
# [/book:loud-scale]


# [book:row-kernel]
@triton.jit
def rmsnorm_row_kernel(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                       BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride may pass 2**31 elements
    offsets = tl.arange(0, BLOCK_SIZE)  # one lane per column, padded to a power of two
    mask = offsets < cols  # lanes past the last column do nothing
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    mean_square = tl.sum(x * x, axis=0) / cols  # masked lanes added 0; divide by the real width
    r = loud_scale(tl.rsqrt(mean_square + eps), mean_square + eps)  # NaN, not 0, on overflow
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)  # one weight per column
    y = x * r * w
    tl.store(y_ptr + row * y_row_stride + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)
# [/book:row-kernel]


# [book:looped-kernel]
@triton.jit
def rmsnorm_looped_kernel(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                          BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    y_row = y_ptr + row * y_row_stride
    offsets = tl.arange(0, BLOCK_SIZE)
    # pass 1: per-lane partial sums of squares, one chunk of the row at a time
    partial = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, cols, BLOCK_SIZE):
        cols_here = start + offsets
        x = tl.load(x_row + cols_here, mask=cols_here < cols, other=0.0).to(tl.float32)
        partial += x * x
    denominator = tl.sum(partial, axis=0) / cols + eps
    r = loud_scale(tl.rsqrt(denominator), denominator)
    # pass 2: read x again (it no longer fits on chip) and write y
    for start in range(0, cols, BLOCK_SIZE):
        cols_here = start + offsets
        mask = cols_here < cols
        x = tl.load(x_row + cols_here, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols_here, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols_here, (x * r * w).to(y_ptr.dtype.element_ty), mask=mask)
# [/book:looped-kernel]


# [book:multirow-kernel]
@triton.jit
def rmsnorm_multirow_kernel(x_ptr, w_ptr, y_ptr, rows, cols, x_row_stride, y_row_stride, eps,
                            BLOCK_SIZE: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr):
    first = tl.program_id(0) * ROWS_PER_PROGRAM
    row_ids = (first + tl.arange(0, ROWS_PER_PROGRAM)).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    col_mask = offsets < cols
    mask = (row_ids[:, None] < rows) & col_mask[None, :]  # the last program may run out of rows
    x = tl.load(x_ptr + row_ids[:, None] * x_row_stride + offsets[None, :],
                mask=mask, other=0.0).to(tl.float32)
    denominator = tl.sum(x * x, axis=1) / cols + eps
    r = loud_scale(tl.rsqrt(denominator), denominator)  # one scale per row
    w = tl.load(w_ptr + offsets, mask=col_mask, other=0.0).to(tl.float32)  # shared by the rows
    y = x * r[:, None] * w[None, :]
    tl.store(y_ptr + row_ids[:, None] * y_row_stride + offsets[None, :],
             y.to(y_ptr.dtype.element_ty), mask=mask)
# [/book:multirow-kernel]


# ---------------------------------------------------------------- wrappers

def _prepare(x, w, eps, kernel: str, max_cols: int | None, alternative: str | None):
    """Validate, flatten to (rows, cols) and allocate the output. Returns (x2, w, eps, y2, shape)."""
    validation.check_tensor(x, "x")
    validation.check_device(x, env.current().device, "x")
    shape = tuple(x.shape)
    x2 = validation.as_rows(x, "x")
    cols = x2.shape[1]
    if max_cols is not None:
        validation.check_width(cols, max_cols, kernel, alternative)
    w = validation.check_weight(w, cols, x2.device, "w")
    eps = validation.check_eps(eps)
    y2 = torch.empty((x2.shape[0], cols), dtype=x2.dtype, device=x2.device)
    return x2, w, eps, y2, shape


def _check_num_warps(num_warps):
    if num_warps is None:
        return None
    if isinstance(num_warps, bool) or not isinstance(num_warps, int) or num_warps not in (
            1, 2, 4, 8, 16, 32):
        raise validation.InputError(f"num_warps must be a power of two from 1 to 32 (e.g. 4, 8 or "
                                    f"16), got {num_warps!r}. Leave it None for the book's rule.")
    return num_warps


def rmsnorm_row(x, w, eps: float = 1e-5, num_warps: int | None = None) -> torch.Tensor:
    """RMSNorm of every row of ``x`` (last dimension), one Triton program per row.

    ``num_warps`` defaults to :func:`num_warps_for` of the block; pass 4, 8 or 16 to measure others.
    """
    num_warps = _check_num_warps(num_warps)
    x2, w, eps, y2, shape = _prepare(x, w, eps, "triton.row", ROW_MAX_COLS,
                                     "triton.looped (fusedrms.kernels.rmsnorm.rmsnorm_looped)")
    rows, cols = x2.shape
    if rows == 0:
        return y2.reshape(shape)
    block = triton.next_power_of_2(cols)
    rmsnorm_row_kernel[(rows,)](x2, w, y2, cols, x2.stride(0), y2.stride(0), eps,
                                BLOCK_SIZE=block, num_warps=num_warps or num_warps_for(block))
    return y2.reshape(shape)


def rmsnorm_looped(x, w, eps: float = 1e-5, num_warps: int | None = None,
                   chunk: int | None = None) -> torch.Tensor:
    """RMSNorm for rows of any width: the row is walked in chunks, twice (x is read twice)."""
    num_warps = _check_num_warps(num_warps)
    x2, w, eps, y2, shape = _prepare(x, w, eps, "triton.looped", None, None)
    rows, cols = x2.shape
    if chunk is None:
        chunk = min(triton.next_power_of_2(cols), LOOP_CHUNK)
    elif isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1 or chunk & (chunk - 1):
        raise validation.InputError(f"chunk must be a power of two >= 1, got {chunk!r}.")
    if rows == 0:
        return y2.reshape(shape)
    rmsnorm_looped_kernel[(rows,)](x2, w, y2, cols, x2.stride(0), y2.stride(0), eps,
                                   BLOCK_SIZE=chunk, num_warps=num_warps or num_warps_for(chunk))
    return y2.reshape(shape)


def rows_per_program_for(block_size: int) -> int:
    """Narrow rows share a program until it covers about ``MULTIROW_ELEMENTS`` lanes (1 to 64 rows)."""
    return max(1, min(64, MULTIROW_ELEMENTS // block_size))


def rmsnorm_multirow(x, w, eps: float = 1e-5, num_warps: int | None = None,
                     rows_per_program: int | None = None) -> torch.Tensor:
    """RMSNorm of narrow rows, several rows per program (one 2-D block of rows x columns)."""
    num_warps = _check_num_warps(num_warps)
    x2, w, eps, y2, shape = _prepare(x, w, eps, "triton.multirow", MULTIROW_MAX_COLS,
                                     "triton.row (fusedrms.kernels.rmsnorm.rmsnorm_row)")
    rows, cols = x2.shape
    block = triton.next_power_of_2(cols)
    if rows_per_program is None:
        rows_per_program = rows_per_program_for(block)
    elif (isinstance(rows_per_program, bool) or not isinstance(rows_per_program, int)
          or rows_per_program < 1 or rows_per_program & (rows_per_program - 1)):
        raise validation.InputError(f"rows_per_program must be a power of two >= 1, got "
                                    f"{rows_per_program!r}.")
    if rows == 0:
        return y2.reshape(shape)
    grid = (triton.cdiv(rows, rows_per_program),)
    rmsnorm_multirow_kernel[grid](x2, w, y2, rows, cols, x2.stride(0), y2.stride(0), eps,
                                  BLOCK_SIZE=block, ROWS_PER_PROGRAM=rows_per_program,
                                  num_warps=num_warps or num_warps_for(block * rows_per_program))
    return y2.reshape(shape)


VERSIONS = {  # CLI name -> (registry name, wrapper)
    "row": ("triton.row", rmsnorm_row),
    "looped": ("triton.looped", rmsnorm_looped),
    "multirow": ("triton.multirow", rmsnorm_multirow),
}

MAX_COLS = {"triton.row": ROW_MAX_COLS, "triton.looped": None, "triton.multirow": MULTIROW_MAX_COLS}

registry.register(registry.Impl(
    "triton.row", "rmsnorm", rmsnorm_row, "triton", max_cols=ROW_MAX_COLS,
    description="one program per row, the whole row in one masked block, x read once"))
registry.register(registry.Impl(
    "triton.looped", "rmsnorm", rmsnorm_looped, "triton",
    description=f"one program per row, walked in chunks of up to {LOOP_CHUNK} columns; x read twice"))
registry.register(registry.Impl(
    "triton.multirow", "rmsnorm", rmsnorm_multirow, "triton", max_cols=MULTIROW_MAX_COLS,
    description="several narrow rows per program (2-D block of rows x columns)"))


# ---------------------------------------------------------------- helpers for chapter 4 and scripts

def compiled_kernel(kernel, *args, **kwargs):
    """Launch ``kernel[grid](*args, **kwargs)`` on a GPU and return the compiled kernel object.

    Its ``.asm`` dict holds ``"ptx"`` (NVIDIA) or ``"amdgcn"`` (AMD); ``.n_regs`` the registers per
    thread where the driver reports them. ``grid`` is taken from ``kwargs.pop("grid")``.
    """
    env.require_gpu("reading the compiled kernel")
    grid = kwargs.pop("grid")
    return kernel[grid](*args, **kwargs)


def row_kernel_compiled(cols: int = 4096, dtype: torch.dtype = torch.float32, rows: int = 4,
                        num_warps: int | None = None):
    """Compile (by launching) the row kernel for one width and dtype; returns the compiled kernel."""
    x = torch.randn(rows, cols, device=env.current().device, dtype=dtype)
    w = torch.ones(cols, device=x.device, dtype=dtype)
    y = torch.empty_like(x)
    block = triton.next_power_of_2(cols)
    return compiled_kernel(rmsnorm_row_kernel, x, w, y, cols, x.stride(0), y.stride(0), 1e-5,
                           grid=(rows,), BLOCK_SIZE=block,
                           num_warps=num_warps or num_warps_for(block))


def assembly_summary(asm: str, kind: str = "ptx") -> dict:
    """What to look for in the compiled row kernel: vector loads/stores and the reduction.

    For PTX: ``ld.global.v4``/``v2`` (vector width of global loads), ``st.global``,
    ``shfl.sync.bfly`` (butterfly shuffles of the warp reduction), ``bar.sync`` (block barrier of
    the cross-warp step), ``ld.shared``/``st.shared`` and ``rsqrt``. For AMDGCN the analogues.
    """
    import re

    asm = re.sub(r"//.*", "", asm)  # comments name functions such as __nv_rsqrtf; skip them

    def count(pattern):
        return len(re.findall(pattern, asm))

    if kind == "ptx":
        loads = re.findall(r"ld\.global\S*", asm)
        vector = [m for m in loads if re.search(r"\.v(2|4|8)\b", m)]
        widths = sorted({int(re.search(r"\.v(\d)", m).group(1)) for m in vector}) or [1]
        return {
            "kind": "ptx",
            "global_loads": len(loads),
            "global_load_forms": sorted(set(loads)),
            "widest_global_load_vector": max(widths),
            "global_stores": count(r"st\.global"),
            "global_store_forms": sorted(set(re.findall(r"st\.global\S*", asm))),
            "butterfly_shuffles": count(r"shfl\.sync\.bfly"),
            "barriers": count(r"bar\.sync|barrier\.sync"),
            "shared_loads": count(r"ld\.shared"),
            "shared_stores": count(r"st\.shared"),
            "rsqrt": count(r"rsqrt"),
            "lines": asm.count("\n"),
        }
    loads = re.findall(r"global_load_[a-z0-9_]+|buffer_load_[a-z0-9_]+", asm)
    return {
        "kind": kind,
        "global_loads": len(loads),
        "global_load_forms": sorted(set(loads)),
        "global_stores": count(r"global_store_|buffer_store_"),
        "cross_lane_ops": count(r"ds_swizzle|dpp|ds_bpermute|permlane"),
        "barriers": count(r"s_barrier"),
        "rsqrt": count(r"rsq"),
        "lines": asm.count("\n"),
    }


LANDMARKS = {  # what chapter 4 points at in the compiled row kernel
    "ptx": (r"ld\.global", r"shfl\.sync\.bfly", r"bar\.sync", r"rsqrt", r"st\.global"),
    "amdgcn": (r"global_load|buffer_load", r"ds_swizzle|dpp|ds_bpermute", r"s_barrier", r"rsq",
               r"global_store|buffer_store"),
}


def assembly_excerpt(asm: str, kind: str = "ptx", per_landmark: int = 3) -> str:
    """The first few lines of each landmark (loads, shuffles, barrier, rsqrt, stores), numbered."""
    import re

    lines = asm.splitlines()
    picked: list[int] = []
    for pattern in LANDMARKS.get(kind, LANDMARKS["ptx"]):
        hits = [i for i, line in enumerate(lines) if re.search(pattern, re.sub(r"//.*|;.*", "", line)
                                                                if kind == "amdgcn" else
                                                                re.sub(r"//.*", "", line))]
        picked.extend(hits[:per_landmark])
    out, last = [], None
    for i in sorted(set(picked)):
        if last is not None and i > last + 1:
            out.append("    ...")
        out.append(f"{i + 1:5d}  {lines[i].strip()}")
        last = i
    return "\n".join(out)


def bf16_truncate(t: torch.Tensor) -> torch.Tensor:
    """fp32 -> bf16 by dropping the low 16 bits (what the Triton interpreter's cast does)."""
    bits = t.to(torch.float32).contiguous().view(torch.int32) & -65536  # 0xFFFF0000
    return bits.view(torch.float32).to(torch.bfloat16)  # exact: the value is already a bf16


def bf16_rounding_census(actual: torch.Tensor, exact_fp32: torch.Tensor) -> dict:
    """How a kernel's bf16 output relates to the fp32 result rounded two ways.

    ``nearest`` is torch's round-to-nearest-even cast (what a GPU does), ``truncated`` drops the low
    bits (the Triton interpreter). Counts elements equal to each, and distances in bf16 steps.
    """
    if actual.dtype != torch.bfloat16:
        raise ValueError(f"actual must be bfloat16, got {actual.dtype}")
    a = actual.detach().cpu()
    e = exact_fp32.detach().cpu().to(torch.float32)
    nearest, truncated = e.to(torch.bfloat16), bf16_truncate(e)
    steps_nearest = checks.ulp_distance(a, nearest)
    steps_trunc = checks.ulp_distance(a, truncated)
    return {
        "elements": a.numel(),
        "equal_to_nearest_even": int((steps_nearest == 0).sum()),
        "one_step_from_nearest_even": int((steps_nearest == 1).sum()),
        "more_than_one_step_from_nearest_even": int((steps_nearest > 1).sum()),
        "equal_to_truncation": int((steps_trunc == 0).sum()),
        "nearest_and_truncation_differ": int((nearest != truncated).sum()),
        "max_steps_from_nearest_even": int(steps_nearest.max()) if a.numel() else 0,
    }


def bytes_moved(rows: int, cols: int, dtype: torch.dtype, w_dtype: torch.dtype | None = None) -> int:
    """x read once, y written once, w read once: chapter 2's traffic model, step "rmsnorm".

    The model prices w in x's dtype; a weight of another dtype changes only its one read."""
    from .. import traffic

    total = traffic.price("rmsnorm", rows, cols, dtype).bytes_total
    if w_dtype is not None and w_dtype != dtype:
        total += cols * (torch.empty((), dtype=w_dtype).element_size()
                         - torch.empty((), dtype=dtype).element_size())
    return total


def rotation_copies(bytes_per_call: int, l2_bytes: int) -> int:
    """How many input copies a rotation needs so that the other calls' traffic (three L2s' worth)
    has evicted a copy's x before it is read again: at least 2, at most 64."""
    return max(2, min(64, -(-3 * l2_bytes // max(bytes_per_call, 1)) + 1))


def time_rotating_us(call, x: torch.Tensor, w: torch.Tensor, reps: int = 7) -> tuple[float, str]:
    """Microseconds per call of ``call(x_i, w)``, back to back over rotating copies of ``x``.

    A steady-state measurement, like a model running layer after layer: each call reads an input
    the previous calls have pushed out of L2 (so x comes from DRAM), its output's write-back is paid
    within the run, and there is no flush kernel whose dirty lines land in the timed call. The calls
    are captured once in a CUDA/HIP graph, so Python and Triton's launch path are not timed; the
    sample is one replay's time divided by its calls (median of ``reps`` replays).
    """
    import statistics

    env.require_gpu("timing a kernel")
    props = torch.cuda.get_device_properties(x.device)
    l2 = int(getattr(props, "L2_cache_size", 0) or 64 << 20)
    per_call = bytes_moved(x.shape[0], x.shape[-1], x.dtype, w.dtype)
    copies = rotation_copies(per_call, l2)
    xs = [x] + [x.clone() for _ in range(copies - 1)]
    calls = max(copies, 20)
    for xi in xs:  # compile, allocate, touch
        call(xi, w)
    torch.cuda.synchronize()
    how = f"{calls} calls back to back over {copies} rotating input copies"
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i in range(3):
                call(xs[i % copies], w)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(calls):
                call(xs[i % copies], w)
        run, how = graph.replay, how + ", one CUDA graph replay per sample"
    except Exception:  # noqa: BLE001 - not capturable: time plain launches (CPU cost may show)
        def run():
            for i in range(calls):
                call(xs[i % copies], w)
        how += ", plain launches (graph capture failed)"
    run()  # warm the replay
    samples = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0 / calls)
    return float(statistics.median(samples)), how + f", median of {reps}"


def measure_num_warps(rows: int, cols: int, dtype: torch.dtype = torch.float32,
                      warps=(4, 8, 16), eps: float = 1e-5) -> dict:
    """µs per call of the row kernel for each ``num_warps`` (GPU only; :func:`time_rotating_us`).
    Checks each setting's output first."""
    env.require_gpu("measuring num_warps")
    x = torch.randn(rows, cols, device="cuda", dtype=dtype)
    w = torch.randn(cols, device="cuda", dtype=dtype)
    expected = reference.rmsnorm(x, w, eps, accum=torch.float64)
    out = {}
    for nw in warps:
        report = checks.allclose(rmsnorm_row(x, w, eps, num_warps=nw), expected)
        if not report:
            raise RuntimeError(f"num_warps={nw} gave a wrong result: {report}")
        out[nw] = time_rotating_us(lambda xi, wi, nw=nw: rmsnorm_row(xi, wi, eps, num_warps=nw),
                                   x, w)[0]
    return out


def summarize_warps(recs: list, tie: float = 0.05) -> dict:
    """Chapter 4's reading of the recorded num_warps sweep (``triton_warps.json`` records).

    Returns ``{"rows": [one dict per shape], "winners": sorted fastest settings, "rule_hits": n}``;
    each row has the shape, the median per setting (``"<n> warps us"``), the fastest setting, the
    book's rule and whether the rule came within ``tie`` of the fastest. Malformed records are
    skipped.
    """
    by_shape: dict = {}
    for r in recs or []:
        try:
            key = (int(r["rows"]), int(r["cols"]), str(r["dtype"]))
            by_shape.setdefault(key, {})[int(r["num_warps"])] = (float(r["median_us"]),
                                                                 r.get("gbps"))
        except (KeyError, TypeError, ValueError):
            continue
    rows, winners, hits = [], set(), 0
    for (n_rows, cols, dtype), per in sorted(by_shape.items(), key=lambda kv: (kv[0][2], kv[0][1],
                                                                               kv[0][0])):
        best = min(per, key=lambda k: per[k][0])
        rule = num_warps_for(triton.next_power_of_2(cols))
        row = {"shape": f"{n_rows}x{cols}", "dtype": dtype}
        row.update({f"{nw} warps us": per[nw][0] for nw in sorted(per)})
        gbps = per[best][1]
        row.update({"fastest": best, "GB/s best": float(gbps) if gbps is not None else None,
                    "rule": rule})
        if rule not in per:
            row["rule within 5%"] = "not measured"
        else:
            ok = per[rule][0] <= (1 + tie) * per[best][0]
            row["rule within 5%"] = "yes" if ok else "no"
            hits += ok
        rows.append(row)
        winners.add(best)
    return {"rows": rows, "winners": sorted(winners), "rule_hits": hits}


ROUTES = ("hip", "triton", "torch", "capstone", "fp8")


def side_by_side(docs: list, fallback_shape=(1024, 4096, "float32")) -> dict:
    """Recorded medians of several routes at the shapes they share.

    ``docs`` is a list of ``(doc_or_None, route)``; ``route`` (``"hip"``, ``"triton"``) labels
    records whose name does not already start with a route. A record's name is its ``variant`` or
    ``name`` field (``hip_ladder`` uses ``name``; it also times ``triton.row``), plus its
    ``block_size`` when it has one; sweep records without a name become ``"triton.row, <n> warps"``.
    Records without ``median_us`` are skipped; GB/s comes from ``gbps`` or ``GBps``. Returns
    ``{"shared": shapes recorded by more than one route, "rows": the records at those shapes, or at
    ``fallback_shape`` (the seed chapter's) when no shape is shared}``.

    Pass records of one timing method only: medians from different timers (the ladder's cold
    flush, this chapter's rotating copies) are not comparable, and this function cannot tell them
    apart. Chapter 4 calls it once per timer.
    """
    found = []
    for doc, route in docs:
        for r in (doc or {}).get("records", []):
            try:
                variant = r.get("variant") or r.get("name")
                variant = str(variant) if variant else f"triton.row, {r['num_warps']} warps"
                if r.get("block_size"):
                    variant += f" (block {r['block_size']})"
                if not variant.startswith(ROUTES):
                    variant = f"{route}.{variant}"
                gbps = r.get("gbps", r.get("GBps"))
                found.append({"variant": variant, "route": variant.split(".")[0],
                              "rows": r.get("rows"), "cols": r.get("cols"), "dtype": r.get("dtype"),
                              "median_us": float(r["median_us"]),
                              "GB/s": float(gbps) if gbps is not None else None})
            except (AttributeError, KeyError, TypeError, ValueError):
                continue
    routes_at: dict = {}
    for r in found:
        routes_at.setdefault((r["rows"], r["cols"], r["dtype"]), set()).add(r["route"])
    shared = sorted((s for s, routes in routes_at.items() if len(routes) > 1), key=str)
    keep = set(shared) if shared else {tuple(fallback_shape)}
    rows = [r for r in found if (r["rows"], r["cols"], r["dtype"]) in keep]
    rows.sort(key=lambda r: (str(r["dtype"]), str(r["cols"]), str(r["rows"]), r["median_us"]))
    return {"shared": shared, "rows": rows}


# ---------------------------------------------------------------- command line

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m fusedrms.kernels.rmsnorm",
        description="Check the Triton RMSNorm kernels against a float64 reference and, on a GPU, "
                    "time them. Without a GPU they run in Triton's interpreter and are only checked.")
    p.add_argument("--version", default="all", help="row, looped, multirow or all (default: all)")
    p.add_argument("--rows", type=cli.whole(1), default=1024, help="number of rows (default 1024)")
    p.add_argument("--cols", type=cli.whole(1), default=4096, help="row width (default 4096)")
    p.add_argument("--dtype", type=cli.dtype, default="fp32", help="fp32, bf16 or fp16 (default fp32)")
    p.add_argument("--eps", type=cli.eps, default=1e-5)
    p.add_argument("--num-warps", type=int, choices=(1, 2, 4, 8, 16, 32), default=None,
                   help="override the book's num_warps rule (1, 2, 4, 8, 16 or 32)")
    p.add_argument("--seed", type=cli.seed, default=0)
    return p


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    name = args.version.strip().lower().removeprefix("triton.")
    if name == "all":
        names = list(VERSIONS)
    elif name in VERSIONS:
        names = [name]
    else:
        parser.error(f"--version must be one of: {', '.join(VERSIONS)}, all (got {args.version!r})")
    cli.check_elements(parser, args.rows, args.cols)
    dtype = args.dtype

    e = env.current()
    print(e.describe())
    if not e.on_gpu:
        print("no GPU: checking correctness only (the interpreter's speed says nothing about a GPU)")
        if args.rows * args.cols > 1 << 20:
            print(f"note: {args.rows}x{args.cols} takes a few seconds per version in the "
                  f"interpreter; try --rows 64 for a quick check")
    torch.manual_seed(args.seed)
    x = torch.randn(args.rows, args.cols, device=e.device, dtype=dtype)
    w = torch.randn(args.cols, device=e.device, dtype=dtype)
    expected = reference.rmsnorm(x, w, args.eps, accum=torch.float64)
    nbytes = bytes_moved(args.rows, args.cols, dtype)

    header = f"{'version':<16} {'check':<6} {'max err':>9} {'max ulp':>7}"
    if e.on_gpu:
        header += f" {'median us':>10} {'GB/s':>8}"
    print(f"\n{args.rows} x {args.cols} {str(dtype).replace('torch.', '')}, eps {args.eps:g}")
    print(header)
    print("-" * len(header))
    failed = False
    for key in names:
        reg_name, fn = VERSIONS[key]
        max_cols = MAX_COLS[reg_name]  # not registry.get: that imports every other route too
        if max_cols is not None and args.cols > max_cols:
            print(f"{reg_name:<16} skipped: rows wider than {max_cols} columns "
                  f"({'use looped' if key == 'row' else 'use row or looped'})")
            continue
        try:
            y = fn(x, w, args.eps, num_warps=args.num_warps)
        except validation.InputError as err:
            print(f"{reg_name:<16} error: {err}")
            failed = True
            continue
        report = checks.allclose(y, expected)
        failed |= not report.ok
        line = (f"{reg_name:<16} {'PASS' if report.ok else 'FAIL':<6} "
                f"{report.max_abs_err:>9.2e} {report.max_ulp:>7}")
        if e.on_gpu and args.rows > 0:
            us, _how = time_rotating_us(
                lambda xi, wi: fn(xi, wi, args.eps, num_warps=args.num_warps), x, w)
            line += f" {us:>10.2f} {nbytes / us / 1e3:>8.0f}"
        print(line)
        if not report.ok:
            print(f"    {report}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
