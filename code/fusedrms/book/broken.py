"""Deliberately broken RMSNorm kernels: the negative tests of the verification suite (chapter 5).

Each kernel is the chapter-4 row kernel (:func:`fusedrms.kernels.rmsnorm.rmsnorm_row_kernel`) with
one realistic mistake, and nothing else changed (each keeps its ``loud_scale``). A check that cannot fail proves nothing, so the suite must catch each of
them, and the chapter shows the case that does:

- ``broken.padded_mean``   divides the sum of squares by the padded block width, not the row's.
- ``broken.unmasked_row``  loads the row without its mask: padded lanes read the next row.
- ``broken.fp16_accum``    squares and sums in fp16: the squares of large fp16 inputs overflow.
- ``broken.rows_floor``    two rows per program, grid = rows // 2: an odd last row is never written.
- ``broken.unbiased_mean`` divides the sum of squares by ``cols - 1`` (the unbiased variance's
  n - 1, a habit from LayerNorm): chapter 5's mystery kernel, never shown before its exercise.
- ``broken.unmasked_weight`` loads the weight without its mask. It reads past the end of ``w``,
  but those lanes are never stored: the outputs are right and no output check can see it (a memory
  checker such as compute-sanitizer is the tool for reads out of bounds).

They are *not* in :mod:`fusedrms.registry` (``--kernel all`` must stay green); :data:`IMPLS` holds
them, and ``python -m fusedrms.verify --kernel broken.padded_mean`` runs one.
"""
from __future__ import annotations

from .. import env  # first: decides GPU or interpreter before any @triton.jit below

import torch
import triton
import triton.language as tl

from .. import registry, validation
from ..kernels.rmsnorm import loud_scale


# [book:padded-mean]
@triton.jit
def padded_mean_kernel(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                       BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    mean_square = tl.sum(x * x, axis=0) / BLOCK_SIZE  # BUG: the padded width, not cols
    r = loud_scale(tl.rsqrt(mean_square + eps), mean_square + eps)
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + offsets, (x * r * w).to(y_ptr.dtype.element_ty),
             mask=mask)
# [/book:padded-mean]


# [book:unmasked-row]
@triton.jit
def unmasked_row_kernel(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                        BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets).to(tl.float32)  # BUG: no mask, no other=0
    mean_square = tl.sum(x * x, axis=0) / cols
    r = loud_scale(tl.rsqrt(mean_square + eps), mean_square + eps)
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + offsets, (x * r * w).to(y_ptr.dtype.element_ty),
             mask=mask)
# [/book:unmasked-row]


# [book:fp16-accum]
@triton.jit
def fp16_accum_kernel(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                      BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0).to(tl.float16)
    mean_square = tl.sum(x * x, axis=0).to(tl.float32) / cols  # BUG: squares summed in fp16
    r = loud_scale(tl.rsqrt(mean_square + eps), mean_square + eps)
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    y = x.to(tl.float32) * r * w
    tl.store(y_ptr + row * y_row_stride + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)
# [/book:fp16-accum]


# [book:rows-floor]
@triton.jit
def two_rows_kernel(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                    BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    for i in range(2):  # each program normalizes two consecutive rows
        row = tl.program_id(0).to(tl.int64) * 2 + i
        x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
        mean_square = tl.sum(x * x, axis=0) / cols
        r = loud_scale(tl.rsqrt(mean_square + eps), mean_square + eps)
        tl.store(y_ptr + row * y_row_stride + offsets, (x * r * w).to(y_ptr.dtype.element_ty),
                 mask=mask)
# [/book:rows-floor]


# [book:unbiased-mean]
@triton.jit
def unbiased_mean_kernel(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                         BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    mean_square = tl.sum(x * x, axis=0) / (cols - 1)  # BUG: n - 1, as for an unbiased variance
    r = loud_scale(tl.rsqrt(mean_square + eps), mean_square + eps)
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + offsets, (x * r * w).to(y_ptr.dtype.element_ty),
             mask=mask)
# [/book:unbiased-mean]


# [book:unmasked-weight]
@triton.jit
def unmasked_weight_kernel(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                           BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    mean_square = tl.sum(x * x, axis=0) / cols
    r = loud_scale(tl.rsqrt(mean_square + eps), mean_square + eps)
    w = tl.load(w_ptr + offsets).to(tl.float32)  # BUG: reads past the end of w
    tl.store(y_ptr + row * y_row_stride + offsets, (x * r * w).to(y_ptr.dtype.element_ty),
             mask=mask)
# [/book:unmasked-weight]


def _launcher(kernel, rows_per_program: int = 1, floor_grid: bool = False):
    """A validated wrapper like the chapter-4 ones, launching ``kernel``."""

    def rmsnorm(x, w, eps: float = 1e-5):
        validation.check_tensor(x, "x")
        validation.check_device(x, env.current().device, "x")
        shape = tuple(x.shape)
        x2 = validation.as_rows(x, "x")
        rows, cols = x2.shape
        w = validation.check_weight(w, cols, x2.device, "w")
        eps = validation.check_eps(eps)
        y2 = torch.empty((rows, cols), dtype=x2.dtype, device=x2.device)
        programs = rows // rows_per_program if floor_grid else triton.cdiv(rows, rows_per_program)
        if programs > 0:
            kernel[(programs,)](x2, w, y2, cols, x2.stride(0), y2.stride(0), eps,
                                BLOCK_SIZE=triton.next_power_of_2(cols), num_warps=4)
        return y2.reshape(shape)

    rmsnorm.__name__ = kernel.__name__.replace("_kernel", "")
    return rmsnorm


def _impl(name, kernel, description, **launch):
    return registry.Impl(f"broken.{name}", "rmsnorm", _launcher(kernel, **launch), "triton",
                         max_cols=8192, description=description)


# Not registered: --kernel all must stay green. verify looks names up here too.
IMPLS = {impl.name: impl for impl in (
    _impl("padded_mean", padded_mean_kernel,
          "divides the sum of squares by the padded block width instead of the row width"),
    _impl("unmasked_row", unmasked_row_kernel,
          "loads the row without its mask: padded lanes read the next row into the sum"),
    _impl("fp16_accum", fp16_accum_kernel,
          "squares and sums the row in fp16: large inputs overflow, long rows lose bits"),
    _impl("rows_floor", two_rows_kernel,
          "two rows per program but grid = rows // 2: an odd last row is never written",
          rows_per_program=2, floor_grid=True),
    _impl("unbiased_mean", unbiased_mean_kernel,
          "divides the sum of squares by cols - 1, as an unbiased variance would"),
    _impl("unmasked_weight", unmasked_weight_kernel,
          "loads the weight without its mask: reads past w, but those lanes are never stored"),
)}

# The ones whose outputs are wrong (unmasked_weight's outputs are right).
CAUGHT = ("broken.padded_mean", "broken.unmasked_row", "broken.fp16_accum", "broken.rows_floor",
          "broken.unbiased_mean")
# Shown on chapter 5's page before its exercise; the exercise's mystery kernel is not among them.
SHOWN = ("broken.padded_mean", "broken.unmasked_row", "broken.fp16_accum", "broken.rows_floor",
         "broken.unmasked_weight")
KERNELS = {"broken.padded_mean": padded_mean_kernel, "broken.unmasked_row": unmasked_row_kernel,
           "broken.fp16_accum": fp16_accum_kernel, "broken.rows_floor": two_rows_kernel,
           "broken.unbiased_mean": unbiased_mean_kernel,
           "broken.unmasked_weight": unmasked_weight_kernel}
