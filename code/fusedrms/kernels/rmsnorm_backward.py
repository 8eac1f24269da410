"""The backward pass (chapter 9): gradients of RMSNorm and of fused add + RMSNorm, in Triton.

With ``r = (mean(x^2) + eps)^(-1/2)``, ``xhat = x r`` and ``y = xhat w``, a row's gradients are

    g  = dy * w
    dx = r * (g - xhat * mean(g * xhat))        (= r g - (r^3 / n) x sum(g x))
    dw = sum over rows of dy * xhat

``dx`` needs one reduction *along the row* (the dot product ``sum(g xhat)``), which a program does
in registers exactly like the forward's sum of squares. ``dw`` needs a reduction *across rows*:
every program contributes to every column of ``dw``. Two designs for it:

- **two-stage** (deterministic): each program walks a fixed range of rows, accumulates its share of
  ``dw`` in fp32 registers and stores it as one row of a ``(programs, cols)`` partials buffer; a
  second small kernel sums the partials column by column in a fixed order. Same inputs, same
  programs: the same bits, every run.
- **atomic**: each program adds its share into one fp32 ``dw`` buffer with ``tl.atomic_add``. No
  partials round trip, but the order of the additions is whatever order the programs finish in:
  the result can differ in its last bits from run to run.

The forward used for training (:func:`forward`) also writes the row scale ``r`` (4 bytes per row)
so that the backward need not recompute it; the backward can recompute it too (``rstd=None``),
which costs a sum of squares and no bytes: the row is read anyway.

Inputs in float64 run in float64 throughout (``torch.autograd.gradcheck`` needs it); every other
dtype accumulates in fp32 and casts once at the store. A row outside fp32's range (its sum of
squares overflows, it holds an Inf, or eps = 0 and it is all but zero; float64's range for
float64 inputs) gets r = NaN, as in the forward kernels (:func:`fusedrms.kernels.rmsnorm.loud_scale`): its dx and every column of dw are
NaN, never finite and wrong.

:class:`RMSNormFunction` and :class:`FusedAddRMSNormFunction` are ``torch.autograd.Function`` s, so
``loss.backward()`` works through them; :func:`rmsnorm` and :func:`add_rmsnorm` are their entry
points and :class:`RMSNorm` a module with a weight parameter.
"""
from __future__ import annotations

from .. import env  # first: decides GPU or interpreter before any @triton.jit below

import numbers

import torch
import triton
import triton.language as tl

from .. import registry, validation
from .add_rmsnorm import sm_count
from .rmsnorm import loud_scale, num_warps_for

# A row of x, dy and the dw accumulator live in registers together: the widest row the kernel
# takes. Past TILE_BYTES a row is "wide" (wide_row): it is not prefetched, w is reloaded for each
# row (from L1) rather than held, and its warps grow with it. H100 (one run, 16384 columns, r saved):
# held and prefetched, every such row spilled (ptxas: 284-388 bytes a thread) and ran at 7-13% of
# the copy floor (4096 x 16384 bf16: 1876 us, Liger 213); unprefetched, w reloaded, at 69-92%
# (159 us, Liger 207), and with DW_FIRST too at 90-99% (155 us).
MAX_COLS = 16384
# Rows this wide (64 KiB in fp32 registers) accumulate dw before the dot product, so dy's registers
# can hold g, and load d_sum only where it is added (DW_FIRST; the same bits): ptxas for sm_90 then
# spills 0-2 stores at 16384 columns, against 16-51 with dw last. H100, one run: 8192 x 16384 fp32
# fused add 731 us against 1061 (Liger 773); at 8192 fp32 columns and for narrow tiles the same
# order was 4-18% slower (nothing spilled there to save), so they keep dw last.
DW_FIRST_COLS = 16384
# A step of a program handles a tile of TILE_ROWS rows: narrow rows are stacked until a tile of one
# tensor holds about TILE_BYTES (bf16 rows of 2048 columns: 4 rows, of 4096: 2), so each step keeps
# as many bytes in flight as a wide row does. H200 (one run, 16384 x 2048 bf16, fused add): 111 us
# one row per step and one program per SM, 70 us four rows per step.
TILE_BYTES = 16384
MAX_TILE_ROWS = 4
# The grid: a program keeps its next tile of x and dy in flight while it computes one; to keep
# enough bytes in flight per SM, small tiles get more programs per SM (BYTES_IN_FLIGHT_PER_SM / the
# bytes of a tile of x and dy, 1 to MAX_PROGRAMS_PER_SM). More programs mean more dw partials
# (programs x cols x 4 bytes, written and read once), so the grid also stays below one program per
# MIN_ROWS_PER_PROGRAM rows (but never below one program per SM). traffic.py prices the partials.
BYTES_IN_FLIGHT_PER_SM = 32768
MAX_PROGRAMS_PER_SM = 4
MIN_ROWS_PER_PROGRAM = 16
# Under the interpreter: a few programs, so the partials and their reduction are exercised.
INTERPRETER_PROGRAMS = 4
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
DW_MODES = ("two_stage", "atomic")
# The second stage: a tile of partial rows x columns per step, one running sum per lane; narrow
# column slices give every SM a slice (2048 columns: 128 programs) instead of a few long loops
# (H200, 528 x 2048 partials: 16.5 us with 32 x 64 tiles on 4 warps, 4.2 us as here).
REDUCE_BLOCK_P = 128
REDUCE_BLOCK_COLS = 16
REDUCE_WARPS = 8


@triton.jit
def _loud(r, denominator, F64: tl.constexpr):
    """r, or NaN where mean(x^2) + eps left the accumulator's normal range (fp32's, or float64's
    for float64 inputs): the forward kernels' policy, :func:`fusedrms.kernels.rmsnorm.loud_scale`."""
    if F64:
        ok = (denominator >= 2.2250738585072014e-308) & (denominator <= 1.7976931348623157e308)
        return tl.where(ok, r, float("nan"))
    return loud_scale(r, denominator)


# [book:forward-kernel]
@triton.jit
def rmsnorm_forward_kernel(x_ptr, res_ptr, w_ptr, y_ptr, s_ptr, rstd_ptr, cols,
                           x_stride, res_stride, y_stride, s_stride, eps,
                           BLOCK: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
                           ACC: tl.constexpr, F64: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_stride + offsets, mask=mask, other=0.0)
    x = x.to(ACC)
    if HAS_RESIDUAL:  # s = x + residual, stored in x's dtype; y normalizes s
        res_row = res_ptr + row * res_stride
        res = tl.load(res_row + offsets, mask=mask, other=0.0).to(ACC)
        s = (x + res).to(s_ptr.dtype.element_ty)
        tl.store(s_ptr + row * s_stride + offsets, s, mask=mask)
        x = s.to(ACC)
    denominator = tl.sum(x * x, axis=0) / cols + eps
    r = _loud(1.0 / tl.sqrt(denominator), denominator, F64)  # out of range: NaN
    tl.store(rstd_ptr + row, r)  # saved for the backward: 4 bytes per row
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(ACC)
    y = (x * r * w).to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + row * y_stride + offsets, y, mask=mask)
# [/book:forward-kernel]


# [book:backward-kernel]
@triton.jit
def _tile_loads(x_ptr, res_ptr, dy_ptr, dsum_ptr, rstd_ptr, row, last,
                x_stride, res_stride, dy_stride, dsum_stride, offsets, cols,
                HAS_RESIDUAL: tl.constexpr, HAS_DSUM: tl.constexpr,
                SAVED_R: tl.constexpr):
    """A tile's loads (rows ``row``, those from ``last`` on masked off) in
    their stored dtype; an input the op does not have is x again, unused."""
    row_mask = row < last
    mask = row_mask[:, None] & (offsets < cols)[None, :]
    at = row.to(tl.int64)[:, None]  # 64-bit: rows x stride may pass 2^31
    x = tl.load(x_ptr + at * x_stride + offsets[None, :], mask=mask,
                other=0.0)
    dy = tl.load(dy_ptr + at * dy_stride + offsets[None, :], mask=mask,
                 other=0.0)
    res = x
    dsum = x
    r = tl.load(rstd_ptr + row, mask=row_mask, other=0.0) if SAVED_R else 0.0
    if HAS_RESIDUAL:
        res = tl.load(res_ptr + at * res_stride + offsets[None, :], mask=mask,
                      other=0.0)
    if HAS_DSUM:
        dsum = tl.load(dsum_ptr + at * dsum_stride + offsets[None, :],
                       mask=mask, other=0.0)
    return x, res, dy, dsum, r


@triton.jit
def rmsnorm_backward_kernel(x_ptr, res_ptr, w_ptr, dy_ptr, dsum_ptr, rstd_ptr,
                            dx_ptr, dw_ptr, rows, cols, rows_per_program,
                            x_stride, res_stride, dy_stride, dsum_stride,
                            dx_stride, eps,
                            BLOCK: tl.constexpr, TILE_ROWS: tl.constexpr,
                            HAS_RESIDUAL: tl.constexpr,
                            HAS_DSUM: tl.constexpr, SAVED_R: tl.constexpr,
                            ATOMIC_DW: tl.constexpr, ACC: tl.constexpr,
                            F64: tl.constexpr, PREFETCH: tl.constexpr,
                            W_RELOAD: tl.constexpr, DW_FIRST: tl.constexpr):
    pid = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    col_mask = offsets < cols
    tile = tl.arange(0, TILE_ROWS)  # a step handles TILE_ROWS rows at once
    if not W_RELOAD:  # held in registers for the program's life
        w = tl.load(w_ptr + offsets, mask=col_mask, other=0.0).to(ACC)
    dw = tl.zeros([TILE_ROWS, BLOCK], dtype=ACC)  # this program's share
    first = pid * rows_per_program
    last = tl.minimum(first + rows_per_program, rows)
    if PREFETCH:  # the first tile's loads
        nxt = _tile_loads(x_ptr, res_ptr, dy_ptr, dsum_ptr, rstd_ptr,
                          first + tile, last, x_stride, res_stride, dy_stride,
                          dsum_stride, offsets, cols, HAS_RESIDUAL, HAS_DSUM,
                          SAVED_R)
    for start in range(first, last, TILE_ROWS):  # a fixed order
        row = start + tile
        if PREFETCH:
            x_in, res_in, dy_in, dsum_in, r_in = nxt
            # the next tile's loads go out before this tile's arithmetic,
            # so they are in flight while it computes (past the last row
            # they are masked off)
            nxt = _tile_loads(x_ptr, res_ptr, dy_ptr, dsum_ptr, rstd_ptr,
                              row + TILE_ROWS, last, x_stride, res_stride,
                              dy_stride, dsum_stride, offsets, cols,
                              HAS_RESIDUAL, HAS_DSUM, SAVED_R)
        else:  # load, wait, compute, store: one tile in flight per program
            x_in, res_in, dy_in, dsum_in, r_in = _tile_loads(
                x_ptr, res_ptr, dy_ptr, dsum_ptr, rstd_ptr, row, last,
                x_stride, res_stride, dy_stride, dsum_stride, offsets, cols,
                HAS_RESIDUAL, HAS_DSUM and not DW_FIRST, SAVED_R)
        x = x_in.to(ACC)
        if HAS_RESIDUAL:  # the add op: the normalized input is x + residual
            x += res_in.to(ACC)
        dy = dy_in.to(ACC)
        if SAVED_R:
            r = r_in.to(ACC)
        else:  # recompute: one more reduction, no more bytes (x is here)
            denominator = tl.sum(x * x, axis=1) / cols + eps
            r = _loud(1.0 / tl.sqrt(denominator), denominator, F64)
        r = tl.where(row < last, r, 0.0)  # a masked-off row adds nothing
        xhat = x * r[:, None]
        if DW_FIRST:  # the widest rows: dy's registers then hold g (fewer
            dw += dy * xhat  # rows live at once), d_sum is loaded late
        if W_RELOAD:  # a wide row: w from L1 each step, its registers freed
            w_now = tl.load(w_ptr + offsets, mask=col_mask, other=0.0).to(ACC)
        else:
            w_now = w
        g = dy * w_now[None, :]
        # reduction 1, along each row: the dot product of g and xhat
        dot = tl.sum(g * xhat, axis=1) / cols
        dx = r[:, None] * (g - xhat * dot[:, None])
        mask = (row < last)[:, None] & col_mask[None, :]
        at = row.to(tl.int64)[:, None]
        if HAS_DSUM:  # gradient arriving through the residual output
            if DW_FIRST:  # not held through the reduction
                dsum_in = tl.load(dsum_ptr + at * dsum_stride
                                  + offsets[None, :], mask=mask, other=0.0)
            dx += dsum_in.to(ACC)
        tl.store(dx_ptr + at * dx_stride + offsets[None, :],
                 dx.to(dx_ptr.dtype.element_ty), mask=mask)
        if not DW_FIRST:  # reduction 2 (across rows): this program's part
            dw += dy * xhat
    share = tl.sum(dw, axis=0)  # the tile's rows, in a fixed order
    if ATOMIC_DW:  # the order of arrival decides the last bits
        tl.atomic_add(dw_ptr + offsets, share, mask=col_mask)
    else:  # one row of partials per program
        tl.store(dw_ptr + pid * cols + offsets, share, mask=col_mask)
# [/book:backward-kernel]


# [book:dw-reduce-kernel]
@triton.jit
def dw_reduce_kernel(partials_ptr, dw_ptr, programs, cols,
                     BLOCK_P: tl.constexpr, BLOCK_COLS: tl.constexpr):
    """Stage 2: dw[c] = the sum over p of partials[p, c], in a fixed order.
    Each lane keeps its own running sum, so a tile's loads wait on no add;
    the lanes are summed once, at the end."""
    col = tl.program_id(0) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    col_mask = col < cols
    acc = tl.zeros([BLOCK_P, BLOCK_COLS], dtype=partials_ptr.dtype.element_ty)
    for start in range(0, programs, BLOCK_P):
        p = start + tl.arange(0, BLOCK_P)
        offsets = p[:, None].to(tl.int64) * cols + col[None, :]
        mask = (p[:, None] < programs) & col_mask[None, :]
        acc += tl.load(partials_ptr + offsets, mask=mask, other=0.0)
    dw = tl.sum(acc, axis=0)
    tl.store(dw_ptr + col, dw.to(dw_ptr.dtype.element_ty), mask=col_mask)
# [/book:dw-reduce-kernel]


# ---------------------------------------------------------------- launch helpers

def acc_dtype(dtype: torch.dtype):
    """The kernels' accumulation type: float64 for float64 inputs, fp32 for everything else."""
    return tl.float64 if dtype == torch.float64 else tl.float32


def _torch_acc(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _row_bytes(cols: int, dtype: torch.dtype) -> int:
    """Bytes of one row of one tensor as a program holds it (padded to the block)."""
    return triton.next_power_of_2(max(1, cols)) * _element_size(dtype)


def tile_rows_for(cols: int, dtype: torch.dtype) -> int:
    """Rows per step: as many as fit :data:`TILE_BYTES` (1 to :data:`MAX_TILE_ROWS`)."""
    row_bytes = _row_bytes(cols, dtype)
    return max(1, min(MAX_TILE_ROWS, TILE_BYTES // row_bytes))


def wide_row(tile_rows: int, cols: int, dtype: torch.dtype) -> bool:
    """Whether a step is one row of more than :data:`TILE_BYTES` (16384 bf16 columns, 8192 fp32):
    such a row is not prefetched and w is reloaded each step (:data:`MAX_COLS` says why)."""
    return tile_rows == 1 and _row_bytes(cols, dtype) > TILE_BYTES


def warps_for(tile_rows: int, cols: int, dtype: torch.dtype) -> int:
    """Warps for a tile: one per KiB of one tensor's tile, 4 to 16, and at most 8 for a tile of
    several rows (H200: a 4-row tile of 2048 bf16 columns on 4 warps spills and runs 10-30x slower;
    on 16 warps it is no faster than on 8); a wide row one per 2 KiB, up to 32 (H100, 8192 x 16384
    fp32: 16 warps spilled 236 bytes a thread and ran at 18% of the floor, 32 at 84%)."""
    tile_bytes = tile_rows * _row_bytes(cols, dtype)
    if wide_row(tile_rows, cols, dtype):
        return min(32, tile_bytes // 2048)
    return max(4, min(16 if tile_rows == 1 else 8, tile_bytes // 1024))


def launch_options(tile_rows: int, cols: int, dtype: torch.dtype,
                   prefetch: bool | None = None, dw_first: bool | None = None) -> dict:
    """The launch's ``PREFETCH``, ``W_RELOAD``, ``DW_FIRST`` and ``num_warps`` for tiles of
    ``tile_rows`` rows: a :func:`wide_row` is not prefetched (unless ``prefetch`` says so) and
    reloads w each step; a row of :data:`DW_FIRST_COLS` not prefetched accumulates dw first and
    loads d_sum late (unless ``dw_first`` says otherwise); warps from :func:`warps_for`."""
    wide = wide_row(tile_rows, cols, dtype)
    prefetched = not wide if prefetch is None else prefetch
    if dw_first is None:
        dw_first = not prefetched and triton.next_power_of_2(cols) >= DW_FIRST_COLS
    return dict(PREFETCH=prefetched, W_RELOAD=wide, DW_FIRST=dw_first,
                num_warps=warps_for(tile_rows, cols, dtype))


def programs_per_sm(cols: int, dtype: torch.dtype, tile_rows: int | None = None) -> int:
    """Programs per SM for tiles of ``tile_rows`` rows (default :func:`tile_rows_for`) of ``cols``
    elements of ``dtype``: x and dy in flight per tile."""
    tile = tile_rows or tile_rows_for(cols, dtype)
    tile_bytes = 2 * tile * cols * _element_size(dtype)
    return max(1, min(MAX_PROGRAMS_PER_SM, BYTES_IN_FLIGHT_PER_SM // tile_bytes))


def programs_for(rows: int, cols: int, dtype: torch.dtype, device: torch.device,
                 per_sm: int | None = None, tile_rows: int | None = None) -> int:
    """Programs of the backward grid (each takes a contiguous range of rows).

    On a GPU: :func:`programs_per_sm` per SM (or ``per_sm``), at most one program per
    ``MIN_ROWS_PER_PROGRAM`` rows but at least one per SM; under the interpreter a few, so the
    partials and their reduction are exercised. Never more programs than rows."""
    if rows < 1:
        return 0
    if device.type == "cpu":
        return max(1, min(rows, INTERPRETER_PROGRAMS))
    return programs_on_gpu(rows, cols, dtype, sm_count(device), per_sm, tile_rows)


def programs_on_gpu(rows: int, cols: int, dtype: torch.dtype, sms: int,
                    per_sm: int | None = None, tile_rows: int | None = None) -> int:
    """:func:`programs_for` on a GPU of ``sms`` SMs (a page prices the H200's grid anywhere)."""
    if rows < 1:
        return 0
    wanted = sms * (per_sm or programs_per_sm(cols, dtype, tile_rows))
    if per_sm is None:
        wanted = min(wanted, max(sms, rows // MIN_ROWS_PER_PROGRAM))
    return max(1, min(rows, wanted))


def grid(rows: int, cols: int, dtype: torch.dtype, device: torch.device,
         programs: int | None = None, tile_rows: int | None = None) -> tuple[int, int, int]:
    """``(tile_rows, rows_per_program, programs)`` of stage one for ``rows`` >= 1: the tile
    (default :func:`tile_rows_for`), whole tiles per program (only the last program's last tile
    is partly masked off) and no program without rows. ``programs`` overrides the rule's count
    (:func:`programs_for`) before that rounding."""
    tile_rows = tile_rows or tile_rows_for(cols, dtype)
    wanted = min(rows, programs or programs_for(rows, cols, dtype, device, tile_rows=tile_rows))
    rows_per_program = triton.cdiv(triton.cdiv(rows, wanted), tile_rows) * tile_rows
    return tile_rows, rows_per_program, triton.cdiv(rows, rows_per_program)


def reduce_partials(partials: torch.Tensor, dw: torch.Tensor, programs: int, cols: int,
                    block_p: int = REDUCE_BLOCK_P, block_cols: int = REDUCE_BLOCK_COLS,
                    num_warps: int = REDUCE_WARPS) -> torch.Tensor:
    """Stage two: ``dw[c] = sum over the first programs rows of partials[:, c]``, in a fixed order
    (:func:`dw_reduce_kernel`, one program per slice of ``block_cols`` columns); returns dw."""
    dw_reduce_kernel[(triton.cdiv(cols, block_cols),)](
        partials, dw, programs, cols, BLOCK_P=block_p, BLOCK_COLS=block_cols, num_warps=num_warps)
    return dw


def _check_programs(programs) -> int | None:
    if programs is None:
        return None
    if isinstance(programs, bool) or not isinstance(programs, int) or programs < 1:
        raise validation.InputError(f"programs must be a positive whole number (or None for the "
                                    f"book's rule), got {programs!r}.")
    return programs


def _check_tile_rows(tile_rows) -> int | None:
    if tile_rows is None:
        return None
    if (isinstance(tile_rows, bool) or not isinstance(tile_rows, int) or tile_rows < 1
            or tile_rows & (tile_rows - 1) or tile_rows > 2 * MAX_TILE_ROWS):
        raise validation.InputError(f"tile_rows must be a power of two from 1 to "
                                    f"{2 * MAX_TILE_ROWS} (or None for the book's rule), got "
                                    f"{tile_rows!r}.")
    return tile_rows


def _check_tile_fits(tile_rows: int | None, cols: int, dtype: torch.dtype) -> None:
    """An override of several rows must keep its tile within :data:`TILE_BYTES` of one tensor, as
    the rule's tiles do. H100 (Triton 3.6, r saved): 10 of the 12 larger tiles tried spilled (28 to
    726 bytes a thread); the other two, fp32 without d_sum, took 231 and 239 registers a thread,
    so one program of 8 warps filled an SM's register file."""
    if tile_rows is None or tile_rows == 1:
        return
    row_bytes = _row_bytes(cols, dtype)
    if tile_rows * row_bytes > TILE_BYTES:
        most = max(1, TILE_BYTES // row_bytes)
        raise validation.InputError(
            f"tile_rows={tile_rows} makes a tile of {tile_rows * row_bytes // 1024} KiB per tensor "
            f"at {cols} columns of {str(dtype).removeprefix('torch.')}: past "
            f"{TILE_BYTES // 1024} KiB a tile of several rows overflows the registers (it spills, "
            f"or one program fills an SM). Use tile_rows <= {most} here, or None for the book's "
            f"rule.")


def _check_mode(dw_mode) -> str:
    if dw_mode not in DW_MODES:
        raise validation.InputError(f"dw_mode must be one of {', '.join(map(repr, DW_MODES))}, "
                                    f"got {dw_mode!r}.")
    return dw_mode


def _rows(t, name: str, like: torch.Tensor | None = None) -> torch.Tensor:
    if like is not None:
        validation.check_same(like, t, "x", name, DTYPES)
    return validation.as_rows(t, name, DTYPES)


def _check_residual(residual) -> None:
    """The fused add's residual is a tensor: None would quietly drop the add."""
    if residual is None:
        raise validation.InputError("residual is None, but the fused add normalizes x + "
                                    "residual: pass a tensor shaped like x, or call rmsnorm(x, w) "
                                    "when there is no residual.")


def _prepare(x, w, eps, residual=None):
    validation.check_tensor(x, "x", DTYPES)
    validation.check_device(x, env.current().device, "x")
    x2 = _rows(x, "x")
    cols = x2.shape[1]
    validation.check_width(cols, MAX_COLS, "the Triton backward")
    w = validation.check_weight(w, cols, x2.device, "w", DTYPES)
    r2 = None if residual is None else _rows(residual, "residual", x)
    return x2, w, validation.check_eps(eps), r2


# ---------------------------------------------------------------- forward that saves r

def forward(x, w, eps: float = 1e-5, residual=None):
    """``(y, s, rstd)``: RMSNorm of ``x`` (or of ``s = x + residual``, then also returned; else
    ``s`` is None) and the fp32 row scale ``rstd`` (float64 for float64 inputs), one per row.
    Outside autograd (``rmsnorm`` and ``add_rmsnorm`` call it from theirs)."""
    validation.check_forward_only({"x": x, "residual": residual, "w": w},
                                  "rmsnorm_backward.forward")
    x2, w, eps, r2 = _prepare(x, w, eps, residual)
    rows, cols = x2.shape
    y2 = torch.empty((rows, cols), dtype=x2.dtype, device=x2.device)
    s2 = None if r2 is None else torch.empty((rows, cols), dtype=x2.dtype, device=x2.device)
    rstd = torch.empty((rows,), dtype=_torch_acc(x2.dtype), device=x2.device)
    if rows > 0:
        block = triton.next_power_of_2(cols)
        s_out = y2 if s2 is None else s2
        rmsnorm_forward_kernel[(rows,)](
            x2, x2 if r2 is None else r2, w, y2, s_out, rstd, cols, x2.stride(0),
            x2.stride(0) if r2 is None else r2.stride(0), y2.stride(0), s_out.stride(0), eps,
            BLOCK=block, HAS_RESIDUAL=r2 is not None, ACC=acc_dtype(x2.dtype),
            F64=x2.dtype == torch.float64, num_warps=num_warps_for(block))
    shape = tuple(x.shape)
    return y2.reshape(shape), (None if s2 is None else s2.reshape(shape)), rstd.reshape(shape[:-1])


# ---------------------------------------------------------------- backward

def backward(x, w, dy, eps: float = 1e-5, *, residual=None, d_sum=None, rstd=None,
             dw_mode: str = "two_stage", programs: int | None = None,
             prefetch: bool | None = None, tile_rows: int | None = None,
             dw_first: bool | None = None):
    """``(dx, dw)`` for ``y = rmsnorm(x [+ residual]) * w`` given the output gradient ``dy``.

    ``residual``: the op normalized ``x + residual`` (formed in fp32 here); ``dx`` is then the
    gradient of both ``x`` and ``residual``. ``d_sum``: a gradient arriving at the normalized input
    from elsewhere (the residual output of the fused add), added to ``dx``. ``rstd``: the saved row
    scale (else recomputed). ``dw_mode``: ``"two_stage"`` (bitwise reproducible) or ``"atomic"``.
    ``programs`` overrides the number of programs (each takes a contiguous range of rows).
    ``prefetch``: whether the next tile's loads go out before this tile's arithmetic (default: yes,
    except for a :func:`wide_row`); ``prefetch=False`` is the kernel's first design, kept so the
    recording can time what prefetching gains. The results are the same bits either way.
    ``tile_rows`` overrides the rows per step (a power of two; default :func:`tile_rows_for`).
    ``dw_first``: whether each step accumulates dw before the row's dot product (default: only a
    row of :data:`DW_FIRST_COLS` not prefetched); ``dw_first=False`` there is the loop before that
    rule, kept so the recording can time what the order gains. The same bits either way.
    """
    validation.check_forward_only({"x": x, "residual": residual, "w": w, "dy": dy,
                                   "d_sum": d_sum, "rstd": rstd}, "rmsnorm_backward.backward",
                                  role="a backward that is not itself differentiable")
    dw_mode = _check_mode(dw_mode)
    programs = _check_programs(programs)
    for name, flag in (("prefetch", prefetch), ("dw_first", dw_first)):
        if flag is not None:
            validation.check_flag(flag, name)
    tile_rows = _check_tile_rows(tile_rows)
    x2, w, eps, r2 = _prepare(x, w, eps, residual)
    rows, cols = x2.shape
    _check_tile_fits(tile_rows, cols, x2.dtype)
    dy2 = _rows(dy, "dy", x)
    ds2 = None if d_sum is None else _rows(d_sum, "d_sum", x)
    acc = _torch_acc(x2.dtype)
    if rstd is not None:
        validation.check_tensor(rstd, "rstd", (acc,))
        if rstd.numel() != rows or rstd.device != x2.device:
            raise validation.InputError(f"rstd must hold one {acc} row scale per row ({rows}) on "
                                        f"{x2.device}, got {rstd.numel()} on {rstd.device}.")
        rstd = rstd.reshape(rows).contiguous()
    dx2 = torch.empty((rows, cols), dtype=x2.dtype, device=x2.device)
    if rows == 0:
        return dx2.reshape(x.shape), torch.zeros_like(w)
    tile_rows, rows_per_program, programs = grid(rows, cols, x2.dtype, x2.device, programs,
                                                 tile_rows)
    atomic = dw_mode == "atomic"
    if atomic:
        dw_buffer = torch.zeros((cols,), dtype=acc, device=x2.device)
    else:
        dw_buffer = torch.empty((programs, cols), dtype=acc, device=x2.device)
    block = triton.next_power_of_2(cols)
    rmsnorm_backward_kernel[(programs,)](
        x2, x2 if r2 is None else r2, w, dy2, dx2 if ds2 is None else ds2,
        dx2 if rstd is None else rstd, dx2, dw_buffer, rows, cols, rows_per_program,
        x2.stride(0), x2.stride(0) if r2 is None else r2.stride(0), dy2.stride(0),
        dx2.stride(0) if ds2 is None else ds2.stride(0), dx2.stride(0), eps,
        BLOCK=block, TILE_ROWS=tile_rows, HAS_RESIDUAL=r2 is not None, HAS_DSUM=ds2 is not None,
        SAVED_R=rstd is not None, ATOMIC_DW=atomic, ACC=acc_dtype(x2.dtype),
        F64=x2.dtype == torch.float64, **launch_options(tile_rows, cols, x2.dtype, prefetch,
                                                           dw_first))
    if atomic:
        dw = dw_buffer if w.dtype == acc else dw_buffer.to(w.dtype)
    else:
        # float64 sums are stored into a float64 vector and cast by torch: a float64 -> 16-bit
        # store inside the kernel is not a conversion everywhere (the interpreter stores the bits)
        direct = not (acc == torch.float64 and w.dtype != acc)
        dw = torch.empty((cols,), dtype=w.dtype if direct else acc, device=x2.device)
        reduce_partials(dw_buffer, dw, programs, cols)
        dw = dw if direct else dw.to(w.dtype)
    return dx2.reshape(x.shape), dw


# ---------------------------------------------------------------- autograd

def _refuse_double_backward() -> None:
    """Under ``create_graph=True`` autograd records the backward to differentiate it again; these
    kernels have no backward of their own, so a gradient of the gradient would silently be zero."""
    if torch.is_grad_enabled():
        raise RuntimeError(
            "fusedrms's RMSNorm backward cannot be differentiated again (create_graph=True, as in "
            "a gradient penalty): use the reference (fusedrms.reference.rmsnorm) or "
            "torch.nn.functional.rms_norm where a gradient of the gradient is needed.")


class RMSNormFunction(torch.autograd.Function):
    """``y = rmsnorm(x) * w``; saves x, w and r; backward by the fused kernel."""

    @staticmethod
    def forward(ctx, x, w, eps=1e-5, dw_mode="two_stage"):
        _check_mode(dw_mode)
        y, _, rstd = forward(x, w, eps)
        ctx.save_for_backward(x, w, rstd)
        ctx.eps, ctx.dw_mode = eps, dw_mode
        return y

    @staticmethod
    def backward(ctx, dy):
        _refuse_double_backward()
        x, w, rstd = ctx.saved_tensors
        dx, dw = backward(x, w, dy, ctx.eps, rstd=rstd, dw_mode=ctx.dw_mode)
        return dx, dw, None, None


class FusedAddRMSNormFunction(torch.autograd.Function):
    """``(y, s)`` with ``s = x + residual`` (the next layer's residual) and ``y = rmsnorm(s) * w``.

    Saves s, w and r. The gradient of x and of residual is the same tensor: the backward through
    the norm plus whatever gradient arrives at ``s`` from the layers that used it.
    """

    @staticmethod
    def forward(ctx, x, residual, w, eps=1e-5, dw_mode="two_stage"):
        _check_mode(dw_mode)
        _check_residual(residual)
        y, s, rstd = forward(x, w, eps, residual=residual)
        ctx.save_for_backward(s, w, rstd)
        ctx.eps, ctx.dw_mode = eps, dw_mode
        return y, s

    @staticmethod
    def backward(ctx, dy, d_s):
        _refuse_double_backward()
        s, w, rstd = ctx.saved_tensors
        if dy is None:
            dy = torch.zeros_like(s)
        ds, dw = backward(s, w, dy, ctx.eps, d_sum=d_s, rstd=rstd, dw_mode=ctx.dw_mode)
        return ds, ds, dw, None, None


def rmsnorm(x, w, eps: float = 1e-5, dw_mode: str = "two_stage") -> torch.Tensor:
    """RMSNorm that autograd can differentiate: forward and backward are this module's kernels."""
    return RMSNormFunction.apply(x, w, eps, dw_mode)


def add_rmsnorm(x, residual, w, eps: float = 1e-5, dw_mode: str = "two_stage"):
    """``(y, x + residual)``, differentiable in x, residual and w."""
    return FusedAddRMSNormFunction.apply(x, residual, w, eps, dw_mode)


class RMSNorm(torch.nn.Module):
    """A drop-in RMSNorm layer (weight initialized to ones) running this chapter's kernels."""

    def __init__(self, cols: int, eps: float = 1e-5, dw_mode: str = "two_stage",
                 dtype: torch.dtype | None = None, device=None):
        super().__init__()
        if isinstance(cols, bool) or not isinstance(cols, numbers.Integral) or cols < 1:
            raise validation.InputError(f"cols (the width of the rows, one weight each) must be a "
                                        f"whole number >= 1, got {cols!r}.")
        if dtype is not None and dtype not in DTYPES:
            raise validation.InputError(f"dtype must be one of "
                                        f"{', '.join(str(d) for d in DTYPES)} (or None for the "
                                        f"default), got {dtype!r}.")
        self.eps, self.dw_mode = validation.check_eps(eps), _check_mode(dw_mode)
        self.weight = torch.nn.Parameter(torch.ones(int(cols), dtype=dtype, device=device))

    def forward(self, x, residual=None):
        if residual is None:
            return rmsnorm(x, self.weight, self.eps, self.dw_mode)
        return add_rmsnorm(x, residual, self.weight, self.eps, self.dw_mode)


# ---------------------------------------------------------------- registered wrappers

def rmsnorm_backward(x, w, dy, eps: float = 1e-5):
    """``(dx, dw)`` of RMSNorm, r recomputed, dw by the two-stage reduction."""
    return backward(x, w, dy, eps)


def rmsnorm_backward_atomic(x, w, dy, eps: float = 1e-5):
    """``(dx, dw)`` of RMSNorm, dw accumulated with atomics (not bitwise reproducible)."""
    return backward(x, w, dy, eps, dw_mode="atomic")


def add_rmsnorm_backward(x, residual, w, dy, eps: float = 1e-5, d_sum=None):
    """``(d_input, dw)`` of ``rmsnorm(x + residual) * w``: d_input is the gradient of x and of
    residual (plus ``d_sum``, the gradient of the residual output, when given)."""
    _check_residual(residual)
    return backward(x, w, dy, eps, residual=residual, d_sum=d_sum)


def add_rmsnorm_backward_atomic(x, residual, w, dy, eps: float = 1e-5, d_sum=None):
    _check_residual(residual)
    return backward(x, w, dy, eps, residual=residual, d_sum=d_sum, dw_mode="atomic")


def rmsnorm_forward(x, w, eps: float = 1e-5):
    """The training forward as a plain ``rmsnorm`` op (y only), so the suite checks it."""
    return forward(x, w, eps)[0]


def add_rmsnorm_residual_forward(x, residual, w, eps: float = 1e-5):
    _check_residual(residual)
    y, s, _ = forward(x, w, eps, residual=residual)
    return y, s


def _register():
    def impl(name, op, fn, description):  # float64 too: gradcheck runs these kernels
        registry.register(registry.Impl(name, op, fn, "triton", dtypes=DTYPES, max_cols=MAX_COLS,
                                        description=description))

    impl("bwd.forward", "rmsnorm", rmsnorm_forward,
         "training forward: one row per program, also saves r (4 B/row)")
    impl("bwd.add_forward", "add_rmsnorm_residual", add_rmsnorm_residual_forward,
         "training forward of the fused add: writes y, s = x + r and r")
    impl("bwd.two_stage", "rmsnorm_backward", rmsnorm_backward,
         "dx by a row reduction; dw by per-program partials, then a fixed-order sum "
         "(bitwise reproducible)")
    impl("bwd.atomic", "rmsnorm_backward", rmsnorm_backward_atomic,
         "dx by a row reduction; dw by fp32 atomic adds of each program's share (order of "
         "arrival decides the last bits)")
    impl("bwd.add_two_stage", "add_rmsnorm_backward", add_rmsnorm_backward,
         "fused add + RMSNorm backward (residual gradient), two-stage dw")
    impl("bwd.add_atomic", "add_rmsnorm_backward", add_rmsnorm_backward_atomic,
         "fused add + RMSNorm backward (residual gradient), atomic dw")


_register()
