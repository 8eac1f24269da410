"""The capstone's fourth design: a wide row held in the registers of several programs at once.

A row of 65,536 bf16 columns is 128 KB per input tensor, more than one program's registers hold,
so the two-pass design reads it twice (the second time mostly from L2). QuACK keeps such a row on
chip by splitting it over a cluster of CTAs that add their partial sums through distributed
shared memory. Triton has no distributed shared memory, so here the programs of one row exchange
their partial sums through global memory:

1. program ``k`` of a row loads segment ``k`` of x and r into registers, sums the squares of
   ``s = x + r`` and publishes the sum in the row's slot ``k`` (slots start at -1: a sum of
   squares is never negative, NaN included as "arrived");
2. it waits until every slot of the row is published, adds them in a fixed order (the same bits
   on every run, whichever program arrives last) and writes its segment of ``y`` from the
   registers: x and r are read once.

Each program polls all its row's slots, one atomic read per slot. One arrival counter per row,
polled with one atomic, was slower (H100, 1024 x 65536 bf16: 185 us against 144; a copy of the
call's bytes 136): the row's 16 programs then all wait on one address. Loading two rows ahead
instead of one was slower at every launch tried (H100, same shape: 158 to 195 us against 143):
159 registers a thread fit 3 programs of 4 warps on an SM instead of 4.

Waiting on another program is safe only when every program is resident at once, so the grid is
persistent and never larger than the GPU holds (:func:`resident_per_sm`). It is launched as a
cooperative grid, which the driver refuses to start rather than start in part (a GPU shared
under MPS holds fewer programs). The programs of a row are consecutive and move through rows
together. Triton's interpreter runs one program at a time, and one that waits for another would
wait forever: there the same kernel runs twice, ``PHASE=1`` (publish) then ``PHASE=2``
(normalize), as the two-kernel split does.
"""
from __future__ import annotations

from .. import env  # noqa: F401  first: decides GPU or interpreter before any @triton.jit below

import torch
import triton
import triton.language as tl

from . import direct_launch
from .add_rmsnorm_split import segments  # the split's cut of a row into programs
from .rmsnorm import loud_scale  # chapter 4's overflow guard, reused
from .rounding import store_cast  # fp32 -> stored dtype, the same bits on GPU and CPU

# a slot's value until its program publishes a sum of squares (a constexpr: the kernel reads it)
NOT_PUBLISHED = tl.constexpr(-1.0)


# [book:exchange-kernel]
@triton.jit
def add_rmsnorm_exchange_kernel(x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, sums_ptr,
                                rows, COLS: tl.constexpr, x_stride, r_stride,
                                y_stride, s_stride, eps,
                                SEGMENT: tl.constexpr, SEGMENTS: tl.constexpr,
                                SEGMENTS_POW2: tl.constexpr,
                                WRITE_SUM: tl.constexpr,
                                SOFTWARE_BF16: tl.constexpr,
                                PHASE: tl.constexpr):
    """Program ``g * SEGMENTS + k`` holds segment k of rows g, g + groups,
    ...; PHASE 0 publishes and waits in one launch (GPU), 1 only publishes
    and 2 only normalizes (the interpreter, one launch each)."""
    k = tl.program_id(0) % SEGMENTS
    group = tl.program_id(0) // SEGMENTS
    groups = tl.num_programs(0) // SEGMENTS
    col = k * SEGMENT + tl.arange(0, SEGMENT)
    col_ok = col < COLS
    slot = tl.arange(0, SEGMENTS_POW2)
    slot_ok = slot < SEGMENTS
    if PHASE != 1:  # the program's segment of w, for every row it holds
        w = tl.load(w_ptr + col, mask=col_ok, other=0.0).to(tl.float32)
    # the first row's x and r; each later row's are loaded before the wait
    # for the row before it, so that the wait hides behind the loads
    row = group.to(tl.int64)
    x_next = tl.load(x_ptr + row * x_stride + col, mask=col_ok, other=0.0)
    r_next = tl.load(r_ptr + row * r_stride + col, mask=col_ok, other=0.0)
    for i in tl.range(0, tl.cdiv(rows - group, groups)):
        row = (group + i * groups).to(tl.int64)  # a tensor, interpreted too
        s = x_next.to(tl.float32) + r_next.to(tl.float32)
        if PHASE == 2 and WRITE_SUM:  # phase 1 stored s (maybe over r)
            s = tl.load(s_ptr + row * s_stride + col, mask=col_ok,
                        other=0.0).to(tl.float32)
        elif WRITE_SUM:  # the next layer's residual; squares of s as stored
            s_stored = store_cast(s, s_ptr.dtype.element_ty, SOFTWARE_BF16)
            tl.store(s_ptr + row * s_stride + col, s_stored, mask=col_ok)
            s = s_stored.to(tl.float32)
        next_ok = col_ok & (row + groups + 0 * col < rows)  # full-width mask
        x_next = tl.load(x_ptr + (row + groups) * x_stride + col, mask=next_ok,
                         other=0.0)
        r_next = tl.load(r_ptr + (row + groups) * r_stride + col, mask=next_ok,
                         other=0.0)
        row_sums = sums_ptr + row * SEGMENTS
        if PHASE == 0:
            # an atomic write goes to L2, where the others' atomic reads look
            tl.atomic_xchg(row_sums + k, tl.sum(s * s, axis=0), sem="release")
            sums = tl.full([SEGMENTS_POW2], NOT_PUBLISHED, tl.float32)
            while tl.sum((sums < 0).to(tl.int32), axis=0) > 0:
                sums = tl.atomic_add(row_sums + slot, 0.0, mask=slot_ok,
                                     sem="acquire")
                sums = tl.where(slot_ok, sums, 0.0)
        elif PHASE == 1:
            tl.store(row_sums + k, tl.sum(s * s, axis=0))
        else:
            sums = tl.load(row_sums + slot, mask=slot_ok, other=0.0)
        if PHASE != 1:
            denominator = tl.sum(sums, axis=0) / COLS + eps
            rstd = loud_scale(tl.rsqrt(denominator), denominator)
            tl.store(y_ptr + row * y_stride + col,
                     store_cast(s * rstd * w, y_ptr.dtype.element_ty,
                                SOFTWARE_BF16),
                     mask=col_ok)
# [/book:exchange-kernel]


def resident_per_sm(compiled, num_warps: int, device: torch.device) -> int:
    """How many programs of ``compiled`` one SM holds at once: its registers, threads and shared
    memory (the CUDA occupancy rule, with registers allocated in 256-per-warp units). On an AMD
    GPU one: the rule differs there and was not measured, and one program always fits."""
    if torch.version.hip is not None:
        return 1
    props = torch.cuda.get_device_properties(device)
    regs = getattr(props, "regs_per_multiprocessor", 65536)
    threads = getattr(props, "max_threads_per_multi_processor", 2048)
    shared = getattr(props, "shared_memory_per_multiprocessor", 228 * 1024)
    warp_regs = -(-max(1, compiled.n_regs) * 32 // 256) * 256
    by_regs = (regs // warp_regs) // num_warps
    by_threads = threads // (32 * num_warps)
    used = compiled.metadata.shared
    by_shared = shared // (used + 1024) if used else by_threads  # 1 KB reserved per block
    return max(0, min(by_regs, by_threads, by_shared, 32))


class ExchangeLaunch:
    """The compiled kernel of a first launch, launched again on tensors of the same shapes:
    ``(x, r, w, y, s)`` as :class:`~.direct_launch.DirectLaunch` takes them (s is y when the sum
    is not written); each call takes fresh slots, set to :data:`NOT_PUBLISHED`."""

    __slots__ = ("direct", "slots")

    def __init__(self, direct, slots: int):
        self.direct, self.slots = direct, slots

    def __call__(self, x, r, w, y, s) -> None:
        sums = torch.full((self.slots,), NOT_PUBLISHED.value, dtype=torch.float32, device=x.device)
        self.direct(x, r, w, y, s, sums)


def kernel_arguments(x2, r2, w, y2, s2, sums, eps: float, segment: int,
                     software_bf16: bool) -> tuple[tuple, dict]:
    """``(args, constexprs but PHASE)`` of the kernel (``s2`` None: don't write the sum); the AMD
    compile check builds the same launch."""
    rows, cols = x2.shape
    s_out = s2 if s2 is not None else y2
    per_row = segments(cols, segment)
    args = (x2, r2, w, y2, s_out, sums, rows, cols, x2.stride(0), r2.stride(0), y2.stride(0),
            s_out.stride(0), eps)
    return args, dict(SEGMENT=segment, SEGMENTS=per_row,
                      SEGMENTS_POW2=triton.next_power_of_2(per_row), WRITE_SUM=s2 is not None,
                      SOFTWARE_BF16=software_bf16)


def launch_exchange(x2, r2, w, y2, s2, eps: float, segment: int, num_warps: int,
                    programs_per_sm: int, sms: int, software_bf16: bool) -> ExchangeLaunch | None:
    """Run the kernel on validated 2-D tensors (``s2`` None: don't write the sum). On a GPU one
    persistent launch of at most ``programs_per_sm`` programs per SM, never more than are
    resident at once; returns an :class:`ExchangeLaunch` for calls with the same shapes. Under
    the interpreter two launches, one program per segment of each row; returns None."""
    rows, cols = x2.shape
    per_row = segments(cols, segment)
    sums = torch.full((rows * per_row,), NOT_PUBLISHED.value, dtype=torch.float32,
                      device=x2.device)
    args, constexprs = kernel_arguments(x2, r2, w, y2, s2, sums, eps, segment, software_bf16)
    kernel = add_rmsnorm_exchange_kernel
    if not env.current().on_gpu:
        for phase in (1, 2):
            kernel[(rows * per_row,)](*args, **constexprs, PHASE=phase, num_warps=num_warps)
        return None
    params = dict(constexprs, PHASE=0)
    # all resident or none started; on an AMD GPU not run, so left to the default launch there
    cooperative = torch.version.hip is None
    compiled = kernel.warmup(*args, **params, num_warps=num_warps, num_stages=1, grid=(1,),
                             launch_cooperative_grid=cooperative)
    compiled._init_handles()
    held = resident_per_sm(compiled, num_warps, x2.device)
    groups = min(rows, sms * min(programs_per_sm, held) // per_row)
    if groups < 1:
        raise RuntimeError(f"add_rmsnorm_exchange_kernel: {per_row} programs of {num_warps} "
                           f"warps ({compiled.n_regs} registers a thread) do not fit on the GPU "
                           f"at once; choose a wider segment or fewer warps.")
    programs = groups * per_row
    kernel[(programs,)](*args, **params, num_warps=num_warps, num_stages=1,
                        launch_cooperative_grid=cooperative)
    direct = direct_launch.after_first_launch(compiled, programs, kernel, 6, *args, **params)
    return None if direct is None else ExchangeLaunch(direct, rows * per_row)
