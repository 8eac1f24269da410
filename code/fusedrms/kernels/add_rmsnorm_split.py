"""The capstone's third design: a row split over several programs, for wide rows in small batches.

One program per row leaves most of the GPU idle when a batch has fewer rows than SMs: one row of
65,536 columns on a 132-SM H200 gave 131 SMs nothing to do, and its two passes took 30 us where
``torch.compile`` took 5. Here each row is cut into segments of ``SEGMENT`` columns, one program
each, in two kernels (Inductor splits such a reduction the same way, in three):

1. :func:`split_partials_kernel`: a segment of x and r, ``s = x + r`` (stored in x's dtype for
   the residual-writing op), and the segment's sum of squares into ``partial[row, segment]``;
2. :func:`split_normalize_kernel`: the row's partial sums added in a fixed order (the same bits
   on every run), the segment read again (the stored s, or x and r: from L2, just read), and
   ``y = s * rstd * w``.

Two kernels, not one: programs of one kernel that wait for each other (a grid-wide barrier) would
wait forever under Triton's interpreter, which runs programs one after another. Both kernels run
there unchanged. The launch rule that picks this design lives with the others in
:mod:`fusedrms.kernels.add_rmsnorm`.
"""
from __future__ import annotations

from .. import env  # first: decides GPU or interpreter before any @triton.jit below

import torch
import triton
import triton.language as tl

from . import direct_launch
from .rmsnorm import loud_scale
from .rounding import store_cast


# [book:split-kernels]
@triton.jit
def split_partials_kernel(x_ptr, r_ptr, s_ptr, partial_ptr, COLS: tl.constexpr,
                          x_stride, r_stride, s_stride, SEGMENT: tl.constexpr,
                          SEGMENTS: tl.constexpr, WRITE_SUM: tl.constexpr,
                          SOFTWARE_BF16: tl.constexpr,
                          PDL: tl.constexpr = False):
    """Program ``row * SEGMENTS + k``: segment k of that row, its sum of
    squares."""
    if PDL:  # launched early: wait until the kernel before has written
        tl.extra.cuda.gdc_wait()
    pid = tl.program_id(0)
    row = (pid // SEGMENTS).to(tl.int64)
    col = (pid % SEGMENTS) * SEGMENT + tl.arange(0, SEGMENT)
    mask = col < COLS
    # kernel 2 reads the segment again: ask L2 to keep it
    x = tl.load(x_ptr + row * x_stride + col, mask=mask, other=0.0,
                eviction_policy="evict_last").to(tl.float32)
    r = tl.load(r_ptr + row * r_stride + col, mask=mask, other=0.0,
                eviction_policy="evict_last").to(tl.float32)
    s = x + r
    if WRITE_SUM:  # the next layer's residual; squares of s as stored
        s_stored = store_cast(s, s_ptr.dtype.element_ty, SOFTWARE_BF16)
        tl.store(s_ptr + row * s_stride + col, s_stored, mask=mask)
        s = s_stored.to(tl.float32)
    tl.store(partial_ptr + pid, tl.sum(s * s, axis=0))
    if PDL:  # stores issued: kernel 2 may start launching
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def split_normalize_kernel(x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, partial_ptr,
                           COLS: tl.constexpr, x_stride, r_stride, y_stride,
                           s_stride, eps, SEGMENT: tl.constexpr,
                           SEGMENTS: tl.constexpr,
                           SEGMENTS_POW2: tl.constexpr,
                           WRITE_SUM: tl.constexpr,
                           SOFTWARE_BF16: tl.constexpr,
                           PDL: tl.constexpr = False):
    """Program ``row * SEGMENTS + k``: the row's scale from every segment's
    partial sum, then segment k normalized."""
    if PDL:  # launched early: wait until kernel 1 has written every sum
        tl.extra.cuda.gdc_wait()
    pid = tl.program_id(0)
    row = (pid // SEGMENTS).to(tl.int64)
    k = tl.arange(0, SEGMENTS_POW2)  # tl.arange needs a power of two
    sums = tl.load(partial_ptr + row * SEGMENTS + k, mask=k < SEGMENTS,
                   other=0.0)
    denominator = tl.sum(sums, axis=0) / COLS + eps
    rstd = loud_scale(tl.rsqrt(denominator), denominator)
    col = (pid % SEGMENTS) * SEGMENT + tl.arange(0, SEGMENT)
    mask = col < COLS
    if WRITE_SUM:
        s = tl.load(s_ptr + row * s_stride + col, mask=mask, other=0.0,
                    eviction_policy="evict_first").to(tl.float32)
    else:
        x = tl.load(x_ptr + row * x_stride + col, mask=mask, other=0.0,
                    eviction_policy="evict_first").to(tl.float32)
        r = tl.load(r_ptr + row * r_stride + col, mask=mask, other=0.0,
                    eviction_policy="evict_first").to(tl.float32)
        s = x + r
    w = tl.load(w_ptr + col, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_stride + col,
             store_cast(s * rstd * w, y_ptr.dtype.element_ty, SOFTWARE_BF16),
             mask=mask)
    if PDL:  # stores issued: the next kernel may start launching
        tl.extra.cuda.gdc_launch_dependents()
# [/book:split-kernels]


def segments(cols: int, segment: int) -> int:
    """Programs per row: segments of ``segment`` columns covering the row."""
    return -(-cols // segment)


def kernel_arguments(x2, r2, w, y2, s2, partial, eps: float, segment: int,
                     software_bf16: bool) -> tuple[tuple[tuple, dict], tuple[tuple, dict]]:
    """``(args, constexprs)`` of the partial-sums kernel and of the normalizing kernel (``s2``
    None: don't write the sum); the AMD compile check builds the same launches."""
    cols = x2.shape[1]
    write_sum = s2 is not None
    s_out = s2 if write_sum else y2
    per_row = segments(cols, segment)
    common = dict(SEGMENT=segment, SEGMENTS=per_row, WRITE_SUM=write_sum,
                  SOFTWARE_BF16=software_bf16)
    first_args = (x2, r2, s_out, partial, cols, x2.stride(0), r2.stride(0), s_out.stride(0))
    second_args = (x2, r2, w, y2, s_out, partial, cols, x2.stride(0), r2.stride(0),
                   y2.stride(0), s_out.stride(0), eps)
    pow2 = dict(common, SEGMENTS_POW2=triton.next_power_of_2(per_row))
    return (first_args, common), (second_args, pow2)


class SplitLaunch:
    """Both compiled kernels of a first launch, launched again on tensors of the same shapes:
    ``(x, r, w, y, s)`` as :class:`~.direct_launch.DirectLaunch` takes them (s is y when the sum
    is not written); each call takes a fresh buffer of partial sums."""

    __slots__ = ("partials", "normalize", "slots")

    def __init__(self, partials, normalize, slots: int):
        self.partials, self.normalize, self.slots = partials, normalize, slots

    def __call__(self, x, r, w, y, s) -> None:
        partial = torch.empty(self.slots, dtype=torch.float32, device=x.device)
        self.partials(x, r, s, partial)
        self.normalize(x, r, w, y, s, partial)


def launch_split(x2, r2, w, y2, s2, eps: float, segment: int, num_warps: int,
                 software_bf16: bool) -> SplitLaunch | None:
    """Run the two kernels on validated 2-D tensors (``s2`` None: don't write the sum). Returns
    a :class:`SplitLaunch` for calls with the same shapes (on a GPU), else None."""
    rows, cols = x2.shape
    programs = rows * segments(cols, segment)
    # every slot is written by kernel 1 before kernel 2 reads it
    partial = torch.empty(programs, dtype=torch.float32, device=x2.device)
    (first_args, common), (second_args, pow2) = kernel_arguments(
        x2, r2, w, y2, s2, partial, eps, segment, software_bf16)
    pdl = direct_launch.launches_with_pdl(x2.device)
    common, pow2 = dict(common, PDL=pdl), dict(pow2, PDL=pdl)
    first = split_partials_kernel[(programs,)](*first_args, **common, num_warps=num_warps,
                                               **direct_launch.pdl_option(pdl))
    second = split_normalize_kernel[(programs,)](*second_args, **pow2, num_warps=num_warps,
                                                 **direct_launch.pdl_option(pdl))
    partials = direct_launch.after_first_launch(first, programs, split_partials_kernel, 4,
                                                *first_args, **common)
    normalize = direct_launch.after_first_launch(second, programs, split_normalize_kernel, 6,
                                                 *second_args, **pow2)
    if partials is None or normalize is None:
        return None
    return SplitLaunch(partials, normalize, programs)
