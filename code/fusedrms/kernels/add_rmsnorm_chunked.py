"""The capstone's two-pass design (chapter 7): for rows wider than registers hold, and for the
fused op's large batches of 32 KB two-byte rows (Inductor's own launch there).

One program walks its row twice in column chunks: pass 1 sums the squares (and, for the
residual-writing op, stores ``s = x + residual``), pass 2 reads the row again, mostly from L2, and
writes ``y``. Few registers per thread, so many programs share an SM and hide each other's memory
latency. The launch rules that pick it live in :mod:`.add_rmsnorm`.
"""
from __future__ import annotations

from .. import env  # noqa: F401  first: decides GPU or interpreter before any @triton.jit below

import triton
import triton.language as tl

from .rmsnorm import loud_scale  # chapter 4's overflow guard, reused
from .rounding import store_cast  # fp32 -> stored dtype, the same bits on GPU and CPU


# [book:chunked-kernel]
@triton.jit
def load_sum(x_ptr, r_ptr, row, col, x_stride, r_stride, mask,
             EVICT: tl.constexpr):
    """x + r of a tile of rows and columns, in fp32; EVICT is the loads'
    cache hint."""
    x = tl.load(x_ptr + row[:, None] * x_stride + col[None, :], mask=mask,
                other=0.0, eviction_policy=EVICT)
    r = tl.load(r_ptr + row[:, None] * r_stride + col[None, :], mask=mask,
                other=0.0, eviction_policy=EVICT)
    return x.to(tl.float32) + r.to(tl.float32)


@triton.jit
def _two_pass_tile(x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, tile, rows,
                   COLS: tl.constexpr, x_stride, r_stride, y_stride, s_stride,
                   eps, CHUNK: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr,
                   WRITE_SUM: tl.constexpr, SOFTWARE_BF16: tl.constexpr):
    row = (tile * ROWS_PER_PROGRAM
           + tl.arange(0, ROWS_PER_PROGRAM)).to(tl.int64)
    row_ok = row < rows
    # pass 1: per-lane partial sums of squares. COLS is a compile-time
    # constant, so the loop's trip count is too: the compiler unrolls it and
    # drops the masks (Inductor's kernel bakes the shape in the same way).
    partial = tl.zeros([ROWS_PER_PROGRAM, CHUNK], dtype=tl.float32)
    for start in tl.range(0, COLS, CHUNK):
        col = start + tl.arange(0, CHUNK)
        mask = row_ok[:, None] & (col < COLS)[None, :]
        if WRITE_SUM:
            # x and r are read once: pass 1 writes s, which pass 2 reads
            # back (half the bytes of reading x and r again, and from L2:
            # it was just written)
            s = load_sum(x_ptr, r_ptr, row, col, x_stride, r_stride, mask,
                         "evict_first")
            s_stored = store_cast(s, s_ptr.dtype.element_ty, SOFTWARE_BF16)
            tl.store(s_ptr + row[:, None] * s_stride + col[None, :],
                     s_stored, mask=mask)
            s = s_stored.to(tl.float32)
        else:  # ask L2 to keep x and r for pass 2
            s = load_sum(x_ptr, r_ptr, row, col, x_stride, r_stride, mask,
                         "evict_last")
        partial += s * s
    denominator = tl.sum(partial, axis=1) / COLS + eps
    rstd = loud_scale(tl.rsqrt(denominator), denominator)
    # pass 2: s again (x + r, or the stored s), mostly from L2; write y
    for start in tl.range(0, COLS, CHUNK):
        col = start + tl.arange(0, CHUNK)
        col_ok = col < COLS
        mask = row_ok[:, None] & col_ok[None, :]
        if WRITE_SUM:
            s = tl.load(s_ptr + row[:, None] * s_stride + col[None, :],
                        mask=mask, other=0.0,
                        eviction_policy="evict_first").to(tl.float32)
        else:
            s = load_sum(x_ptr, r_ptr, row, col, x_stride, r_stride, mask,
                         "evict_first")
        w = tl.load(w_ptr + col, mask=col_ok, other=0.0,
                    eviction_policy="evict_last").to(tl.float32)
        y = s * rstd[:, None] * w[None, :]
        tl.store(y_ptr + row[:, None] * y_stride + col[None, :],
                 store_cast(y, y_ptr.dtype.element_ty, SOFTWARE_BF16),
                 mask=mask)


@triton.jit
def add_rmsnorm_chunked_kernel(x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, rows,
                               COLS: tl.constexpr, x_stride, r_stride,
                               y_stride, s_stride, eps, CHUNK: tl.constexpr,
                               ROWS_PER_PROGRAM: tl.constexpr,
                               WRITE_SUM: tl.constexpr,
                               SOFTWARE_BF16: tl.constexpr,
                               PERSISTENT: tl.constexpr,
                               PDL: tl.constexpr = False):
    """The same op for wide rows, in two passes over column chunks: few
    registers per thread, so many programs share an SM and hide each other's
    memory latency."""
    if PDL:  # launched early: wait until the kernel before has written
        tl.extra.cuda.gdc_wait()
    if PERSISTENT:
        for tile in tl.range(tl.program_id(0),
                             (rows + ROWS_PER_PROGRAM - 1) // ROWS_PER_PROGRAM,
                             tl.num_programs(0)):
            _two_pass_tile(x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, tile, rows,
                           COLS, x_stride, r_stride, y_stride, s_stride, eps,
                           CHUNK, ROWS_PER_PROGRAM, WRITE_SUM, SOFTWARE_BF16)
    else:
        _two_pass_tile(x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, tl.program_id(0),
                       rows, COLS, x_stride, r_stride, y_stride, s_stride,
                       eps, CHUNK, ROWS_PER_PROGRAM, WRITE_SUM, SOFTWARE_BF16)
    if PDL:  # stores issued: the next kernel may start launching
        tl.extra.cuda.gdc_launch_dependents()
# [/book:chunked-kernel]
