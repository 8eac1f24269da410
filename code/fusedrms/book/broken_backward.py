"""Deliberately broken backward kernels (chapter 9): the negative tests of the backward's checks.

Each is chapter 9's backward (:mod:`fusedrms.kernels.rmsnorm_backward`) with one realistic mistake,
and the boundary suite (``python -m fusedrms.verify --kernel 'broken_bwd.*'``) must catch every one:

- ``broken_bwd.no_r3_term``   dx = r * g: the term through r (``- xhat mean(g xhat)``) dropped, as
  if r did not depend on x.
- ``broken_bwd.dw_wrong_axis`` dw summed along the row instead of across rows.
- ``broken_bwd.dw_missing_r``  dw = sum of dy * x: the row scale forgotten.
- ``broken_bwd.padded_mean``   the dot product divided by the padded block width, not the row's.
- ``broken_bwd.partial_lost``  the second stage stops one partial short: the last program's rows
  never reach dw.
- ``broken_bwd.atomic_unzeroed`` the atomic design adds into a buffer that was never zeroed.

They are not registered (``--kernel all`` stays green); :data:`IMPLS` holds them.
"""
from __future__ import annotations

from .. import env  # first: decides GPU or interpreter before any @triton.jit below

import torch
import triton
import triton.language as tl

from .. import registry
from ..kernels import rmsnorm_backward as B
from ..kernels.rmsnorm import num_warps_for

NO_R3_TERM, DW_WRONG_AXIS, DW_MISSING_R, PADDED_MEAN = 1, 2, 3, 4


# [book:broken-backward]
@triton.jit
def broken_backward_kernel(x_ptr, w_ptr, dy_ptr, dx_ptr, dw_ptr, rows, cols,
                           rows_per_program, x_stride, dy_stride, dx_stride,
                           eps, BLOCK: tl.constexpr, BUG: tl.constexpr):
    pid = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < cols
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK], dtype=tl.float32)
    first = pid * rows_per_program
    start = first.to(tl.int64)
    x_row = x_ptr + start * x_stride
    dy_row = dy_ptr + start * dy_stride
    dx_row = dx_ptr + start * dx_stride
    for _ in range(first, tl.minimum(first + rows_per_program, rows)):
        x = tl.load(x_row + offsets, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_row + offsets, mask=mask, other=0.0).to(tl.float32)
        r = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / cols + eps)
        xhat = x * r
        g = dy * w
        if BUG == 1:  # NO_R3_TERM: treats r as a constant
            dx = r * g
        elif BUG == 4:  # PADDED_MEAN: the padded width
            dx = r * (g - xhat * (tl.sum(g * xhat, axis=0) / BLOCK))
        else:
            dx = r * (g - xhat * (tl.sum(g * xhat, axis=0) / cols))
        tl.store(dx_row + offsets, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        if BUG == 2:  # DW_WRONG_AXIS: summed along the row, then broadcast
            dw += tl.sum(dy * xhat, axis=0)
        elif BUG == 3:  # DW_MISSING_R
            dw += dy * x
        else:
            dw += dy * xhat
        x_row += x_stride
        dy_row += dy_stride
        dx_row += dx_stride
    tl.store(dw_ptr + pid * cols + offsets, dw, mask=mask)
# [/book:broken-backward]


def _launcher(bug: int):
    def rmsnorm_backward(x, w, dy, eps: float = 1e-5):
        x2, w, eps, _ = B._prepare(x, w, eps)
        dy2 = B._rows(dy, "dy", x)
        rows, cols = x2.shape
        dx2 = torch.empty_like(x2)
        programs = B.programs_for(rows, cols, x2.dtype, x2.device)
        rpp = triton.cdiv(rows, programs)
        programs = triton.cdiv(rows, rpp)
        partials = torch.empty((programs, cols), dtype=torch.float32, device=x2.device)
        block = triton.next_power_of_2(cols)
        broken_backward_kernel[(programs,)](x2, w, dy2, dx2, partials, rows, cols, rpp,
                                            x2.stride(0), dy2.stride(0), dx2.stride(0), eps,
                                            BLOCK=block, BUG=bug, num_warps=num_warps_for(block))
        return dx2.reshape(x.shape), partials.sum(dim=0).to(w.dtype)

    return rmsnorm_backward


def _real_stage_one(x, w, dy, eps, atomic: bool):
    """The real backward kernel on validated inputs; its dw buffer comes from ``torch.empty``
    (right for the partials, which every program writes; the bug for the atomic design)."""
    x2, w, eps, _ = B._prepare(x, w, eps)
    dy2 = B._rows(dy, "dy", x)
    rows, cols = x2.shape
    tile, rpp, programs = B.grid(rows, cols, x2.dtype, x2.device)
    dx2 = torch.empty_like(x2)
    dw_buffer = torch.empty((cols,) if atomic else (programs, cols), dtype=torch.float32,
                            device=x2.device)
    block = triton.next_power_of_2(cols)
    B.rmsnorm_backward_kernel[(programs,)](
        x2, x2, w, dy2, dx2, dx2, dx2, dw_buffer, rows, cols, rpp, x2.stride(0), x2.stride(0),
        dy2.stride(0), dx2.stride(0), dx2.stride(0), eps, BLOCK=block, TILE_ROWS=tile,
        HAS_RESIDUAL=False, HAS_DSUM=False, SAVED_R=False, ATOMIC_DW=atomic, ACC=tl.float32,
        F64=False, **B.launch_options(tile, cols, x2.dtype))
    return dx2.reshape(x.shape), dw_buffer, programs, w


def partial_lost(x, w, dy, eps: float = 1e-5):
    """The real stage 1, then a stage 2 told there is one partial fewer than there is."""
    dx, partials, programs, w = _real_stage_one(x, w, dy, eps, atomic=False)
    cols = partials.shape[1]
    dw = torch.empty((cols,), dtype=w.dtype, device=w.device)
    B.reduce_partials(partials, dw, programs - 1, cols)  # BUG: programs - 1
    return dx, dw


def atomic_unzeroed(x, w, dy, eps: float = 1e-5):
    """The atomic design adding into torch.empty instead of torch.zeros (BUG)."""
    dx, dw, _, w = _real_stage_one(x, w, dy, eps, atomic=True)
    return dx, dw.to(w.dtype)


def _impl(name, fn, description):
    return registry.Impl(f"broken_bwd.{name}", "rmsnorm_backward", fn, "triton", max_cols=8192,
                         description=description)


IMPLS = {impl.name: impl for impl in (
    _impl("no_r3_term", _launcher(NO_R3_TERM),
          "dx = r * g: the gradient through r (the r^3 term) dropped"),
    _impl("dw_wrong_axis", _launcher(DW_WRONG_AXIS),
          "dw summed along each row (over columns) instead of across rows"),
    _impl("dw_missing_r", _launcher(DW_MISSING_R), "dw = sum of dy * x: the row scale forgotten"),
    _impl("padded_mean", _launcher(PADDED_MEAN),
          "the dot product of dx divided by the padded block width instead of the row width"),
    _impl("partial_lost", partial_lost,
          "stage 2 sums one partial too few: the last program's rows never reach dw"),
    _impl("atomic_unzeroed", atomic_unzeroed,
          "atomic dw added into a buffer that was never zeroed"),
)}
CAUGHT = tuple(IMPLS)  # every one of them gives a wrong answer somewhere
