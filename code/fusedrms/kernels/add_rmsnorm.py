"""The capstone (chapter 7): fused residual-add + RMSNorm, one kernel, three (or four) row-trips.

Two ops, one kernel source per design: :func:`add_rmsnorm_kernel` keeps the whole row in registers;
:func:`~.add_rmsnorm_chunked.add_rmsnorm_chunked_kernel` walks it twice in column chunks, the second
pass re-reading x and r mostly from L2; :mod:`.add_rmsnorm_split` splits a wide row over several
programs, for batches with fewer rows than SMs; :mod:`.add_rmsnorm_exchange` holds a row of 128 KB
or more in the registers of several resident programs that exchange their partial sums. The tuner
tries the first two and keeps the faster per (cols, dtype); rules on the batch pick the others
(:func:`batch_config`).

- ``add_rmsnorm``: ``y = rmsnorm(x + residual) * w``. Reads x and the residual, writes y: three
  row-trips. The sum ``s = x + residual`` lives in fp32 registers and is never rounded
  (:func:`fusedrms.reference.add_rmsnorm`).
- ``add_rmsnorm_residual``: also writes ``s`` in x's dtype for the next layer's residual (the vLLM /
  FlashInfer layout): four row-trips. ``y`` is computed from ``s`` *as stored*, so the next layer
  and this one see the same residual (:func:`fusedrms.reference.add_rmsnorm_residual`).

Casting convention (the book's, as :func:`fusedrms.reference.rmsnorm`): upcast to fp32, compute
``s * r * w`` in fp32, cast once at the store.

Out of place by default (the registry's convention ``fn(x, r, w, eps) -> (y, s)``): the caller's
tensors stay untouched. ``add_rmsnorm_residual(..., in_place=True)`` writes ``s`` into ``residual``
and ``y`` into ``x``, as vLLM's ``fused_add_rms_norm`` does: the same bytes move (four row-trips
either way), and two allocations are saved, which matters inside a model.

Launch configuration ("autotuning done right"):

- ``BLOCK = next_power_of_2(cols)`` follows from the width and is never tuned: a block narrower
  than the row would normalize part of it (the seed listing's bug, :mod:`fusedrms.book.seed_capstone`).
- What *is* tuned: ``num_warps``, rows per program and ``num_stages``, the design (whole row in
  registers, or two passes in chunks of ``chunk`` columns), and how many programs the
  grid launches (one per tile of rows, or a persistent grid of a few programs per SM that loop over
  tiles). The table is keyed on ``(cols, dtype)``: the two things that change the compiled kernel's
  register tile. Not on rows: a serving batch changes its row count every step, and a key on rows
  would re-tune (and re-compile) at run time.
- The table comes from the H200 run (``tuning/h200/capstone.json``, from ``python -m
  fusedrms.record --chapters 7 --tune``) and is used on that GPU; elsewhere, or for a width the
  table lacks, :func:`heuristic_config` decides; under the interpreter :data:`INTERPRETER_CONFIG`.
- Rules on the batch need no tuning (:func:`batch_config`): one row, a few rows per SM (the fused
  op), many rows per SM, fewer rows than SMs on wide rows, each take a launch of their own; and
  when a grid of ``rows / rows_per_program`` programs would leave SMs idle, rows per program
  halves until every SM has a program (:func:`effective_rows_per_program`).
"""
from __future__ import annotations

from .. import env  # first: decides GPU or interpreter before any @triton.jit below

import functools
import os
from dataclasses import asdict, dataclass, replace

import torch
import triton
import triton.language as tl

from .. import dtypes, registry, tuning, validation
from . import add_rmsnorm_exchange, add_rmsnorm_split, direct_launch
from .add_rmsnorm_chunked import add_rmsnorm_chunked_kernel, load_sum  # the two-pass design
from .rmsnorm import loud_scale  # chapter 4's overflow guard, reused
from .rounding import store_cast  # fp32 -> stored dtype, the same bits on GPU and CPU

# The whole row lives in registers: 32768 fp32 sums over 1024 threads is 32 values per thread for
# s and 32 for w, the most that stays out of local memory. Wider rows take two passes over column
# chunks (TWO_PASS_CONFIG): at 4096 x 65536 bf16 on the H200 the whole-row kernel at 32 warps
# (64 values of s a thread) took 1361 us, the two passes 651.
WHOLE_ROW_MAX_COLS = 32768
MAX_COLS = 65536


def takes_two_passes(cols: int) -> bool:
    """Whether a row of ``cols`` is wider than one program's registers hold whole."""
    return triton.next_power_of_2(cols) > WHOLE_ROW_MAX_COLS


# ---------------------------------------------------------------- the kernel

# [book:kernel]
@triton.jit
def _add_rmsnorm_tile(x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, tile, rows,
                      COLS: tl.constexpr, x_stride, r_stride, y_stride,
                      s_stride, eps, BLOCK: tl.constexpr,
                      ROWS_PER_PROGRAM: tl.constexpr, WRITE_SUM: tl.constexpr,
                      SOFTWARE_BF16: tl.constexpr, HINTED: tl.constexpr,
                      EVICTION: tl.constexpr):
    """One tile of ROWS_PER_PROGRAM whole rows: load, add, reduce, scale,
    store."""
    col = tl.arange(0, BLOCK)
    # COLS is a compile-time constant: all true, and gone, when COLS == BLOCK
    col_ok = col < COLS
    row = (tile * ROWS_PER_PROGRAM
           + tl.arange(0, ROWS_PER_PROGRAM)).to(tl.int64)
    mask = (row < rows)[:, None] & col_ok[None, :]
    if HINTED:  # the design before (HINTED_LOADS): x, r evict_first, w late
        s = load_sum(x_ptr, r_ptr, row, col, x_stride, r_stride, mask,
                     "evict_first")  # the two-pass kernel's x + r
    else:
        # no cache hints (EVICTION "": chapter 7 times evict_last as a
        # lever), and the weight goes out with x and r so that its latency
        # hides behind theirs, not after the reduction
        x = tl.load(x_ptr + row[:, None] * x_stride + col[None, :],
                    mask=mask, other=0.0,
                    eviction_policy=EVICTION).to(tl.float32)
        r = tl.load(r_ptr + row[:, None] * r_stride + col[None, :],
                    mask=mask, other=0.0,
                    eviction_policy=EVICTION).to(tl.float32)
        w = tl.load(w_ptr + col, mask=col_ok, other=0.0).to(tl.float32)
        s = x + r  # the residual add: registers only
    if WRITE_SUM:
        # the next layer's residual, in x's dtype;
        # y is computed from s as stored
        s_stored = store_cast(s, s_ptr.dtype.element_ty, SOFTWARE_BF16)
        tl.store(s_ptr + row[:, None] * s_stride + col[None, :], s_stored,
                 mask=mask)
        s = s_stored.to(tl.float32)
    # masked lanes added 0; real width
    denominator = tl.sum(s * s, axis=1) / COLS + eps
    # NaN, not 0, on overflow
    rstd = loud_scale(tl.rsqrt(denominator), denominator)
    if HINTED:
        w = tl.load(w_ptr + col, mask=col_ok, other=0.0,
                    eviction_policy="evict_last").to(tl.float32)
    y = s * rstd[:, None] * w[None, :]
    tl.store(y_ptr + row[:, None] * y_stride + col[None, :],
             store_cast(y, y_ptr.dtype.element_ty, SOFTWARE_BF16), mask=mask)


@triton.jit
def add_rmsnorm_kernel(x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, rows,
                       COLS: tl.constexpr, x_stride, r_stride, y_stride,
                       s_stride, eps, BLOCK: tl.constexpr,
                       ROWS_PER_PROGRAM: tl.constexpr,
                       WRITE_SUM: tl.constexpr, SOFTWARE_BF16: tl.constexpr,
                       PERSISTENT: tl.constexpr, HINTED: tl.constexpr = False,
                       PDL: tl.constexpr = False, EVICTION: tl.constexpr = ""):
    if PDL:  # launched early: wait until the kernel before has written
        tl.extra.cuda.gdc_wait()
    if PERSISTENT:
        # a few programs per SM walk the tiles (the loads pipelined
        # num_stages deep)
        for tile in tl.range(tl.program_id(0),
                             (rows + ROWS_PER_PROGRAM - 1) // ROWS_PER_PROGRAM,
                             tl.num_programs(0)):
            _add_rmsnorm_tile(x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, tile, rows,
                              COLS, x_stride, r_stride, y_stride, s_stride,
                              eps, BLOCK, ROWS_PER_PROGRAM, WRITE_SUM,
                              SOFTWARE_BF16, HINTED, EVICTION)
    else:
        # one tile per program, no loop: nothing for the compiler to keep
        # live across iterations
        _add_rmsnorm_tile(x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, tl.program_id(0),
                          rows, COLS, x_stride, r_stride, y_stride, s_stride,
                          eps, BLOCK, ROWS_PER_PROGRAM, WRITE_SUM,
                          SOFTWARE_BF16, HINTED, EVICTION)
    if PDL:  # stores issued: the next kernel may start launching
        tl.extra.cuda.gdc_launch_dependents()
# [/book:kernel]


# ---------------------------------------------------------------- launch configurations

def _check_columns_or_none(value, name: str, meaning: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1
                              or value & (value - 1)):
        raise validation.InputError(f"{name} must be None or a power of two ({meaning}), "
                                    f"got {value!r}.")


@dataclass(frozen=True)
class LaunchConfig:
    """What the tuner chooses. BLOCK is not here: it follows from the width."""

    rows_per_program: int = 1
    num_warps: int = 4
    num_stages: int = 1
    programs_per_sm: int | None = None  # None: one program per tile; else a persistent grid
    chunk: int | None = None  # None: the whole row in registers; else two passes over chunks
    segment: int | None = None  # else a row split over programs of this many columns each

    def __post_init__(self):
        for name in ("rows_per_program", "num_warps", "num_stages"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise validation.InputError(f"{name} must be a positive whole number, got {value!r}.")
        if self.rows_per_program & (self.rows_per_program - 1):
            raise validation.InputError(f"rows_per_program must be a power of two (a block "
                                        f"dimension), got {self.rows_per_program}.")
        if self.num_warps not in (1, 2, 4, 8, 16, 32):
            raise validation.InputError(f"num_warps must be a power of two from 1 to 32, "
                                        f"got {self.num_warps}.")
        if self.programs_per_sm is not None and (
                isinstance(self.programs_per_sm, bool) or not isinstance(self.programs_per_sm, int)
                or self.programs_per_sm < 1):
            raise validation.InputError(f"programs_per_sm must be None or a positive whole number, "
                                        f"got {self.programs_per_sm!r}.")
        _check_columns_or_none(self.chunk, "chunk", "columns per pass step")
        _check_columns_or_none(self.segment, "segment", "columns per program of a split row")
        if self.segment is not None and (self.chunk is not None or self.rows_per_program != 1):
            raise validation.InputError("segment splits one row over programs: it takes "
                                        "rows_per_program=1 and chunk=None.")

    def label(self) -> str:
        grid = "tile grid" if self.programs_per_sm is None else f"{self.programs_per_sm}/SM"
        chunked = "" if self.chunk is None else f", two passes in chunks of {self.chunk}"
        if self.segment is not None and self.programs_per_sm is None:
            chunked = f", rows split into programs of {self.segment} columns (two kernels)"
        elif self.segment is not None:
            chunked = (f", rows split into programs of {self.segment} columns that exchange "
                       f"their sums")
        return (f"rows/prog {self.rows_per_program}, warps {self.num_warps}, "
                f"stages {self.num_stages}, {grid}{chunked}")

    def as_dict(self) -> dict:
        return asdict(self)


# Under the interpreter: one configuration. Four rows per program exercises the row mask
# (3 rows, 33 rows...) and costs fewer interpreted programs than one row each.
INTERPRETER_CONFIG = LaunchConfig(rows_per_program=4, num_warps=4, num_stages=1)


def _check_cols(cols) -> None:
    if isinstance(cols, bool) or not isinstance(cols, int) or cols < 1:
        raise validation.InputError(f"cols must be a positive whole number (the row width), got {cols!r}.")


def block_bytes(cols: int, dtype: torch.dtype) -> int:
    """Bytes of one tensor's row as a program holds it: BLOCK (the width's next power of two)
    elements of ``dtype``. Every launch rule sizes its warps from this."""
    return triton.next_power_of_2(cols) * dtypes.nbytes(dtype)


# [book:heuristic]
def heuristic_config(cols: int, dtype: torch.dtype) -> LaunchConfig:
    """The fallback when no measured table applies (documented rule, not a measurement).

    - rows per program: enough rows for a tile of about 16 KB per input tensor (a narrow row alone
      gives a program too little to load), at most 8;
    - warps: about 32 bytes (two 16-byte vector loads) per thread per tensor, 4 to 16 warps,
      and enough warps that no thread holds more than 32 values of a row (32 warps at 32768
      columns, as Liger's rule has it): more would spill registers;
    - one program per tile, no pipelining;
    - rows wider than ``WHOLE_ROW_MAX_COLS``: two passes over column chunks (``TWO_PASS_CONFIG``).
    """
    _check_cols(cols)
    if takes_two_passes(cols):
        return TWO_PASS_CONFIG
    block = triton.next_power_of_2(cols)
    rows_per_program = max(1, min(8, 16384 // block_bytes(cols, dtype)))
    tile_bytes = rows_per_program * block_bytes(cols, dtype)
    num_warps = max(4, min(16, tile_bytes // (32 * 32)), rows_per_program * block // (32 * 32))
    return LaunchConfig(rows_per_program, triton.next_power_of_2(num_warps), 1, None)
# [/book:heuristic]


# [book:candidates]
def candidate_configs(cols: int, dtype: torch.dtype, max_elements_per_thread: int = 32,
                      max_tile_elements: int = 16384) -> list[LaunchConfig]:
    """The compiled variants the H200 tuner tries for one (cols, dtype) key.

    Rows per program 1..8 and warps chosen so each thread moves 16, 32, 64 or 128 bytes of each
    input tensor (whole 16-byte vectors), with at most ``max_elements_per_thread`` fp32 values per
    thread per tensor (registers) and a tile of at most ``max_tile_elements``.
    """
    block = triton.next_power_of_2(cols)
    out = []
    for rows_per_program in (1, 2, 4, 8):
        tile = rows_per_program * block
        if tile > max_tile_elements and rows_per_program > 1:
            break
        for bytes_per_thread in (16, 32, 64, 128):
            threads = rows_per_program * block_bytes(cols, dtype) // bytes_per_thread
            warps = threads // 32
            if warps < 1 or warps > 32 or tile // threads > max_elements_per_thread:
                continue
            out.append(LaunchConfig(rows_per_program, warps, 1, None))
    return out
# [/book:candidates]


# [book:chunked-candidates]
def chunked_candidates(cols: int, dtype: torch.dtype) -> list[LaunchConfig]:
    """The two-pass design's variants for wide rows (BLOCK of 4096 or more): chunks of 1024 to 4096
    columns, narrower than the row, one row per program, 16 or 32 bytes of each input per thread.
    Small register tiles let up to 64 warps' worth of programs share an SM."""
    block = triton.next_power_of_2(cols)
    out = []
    if block < 4096:
        return out
    for chunk in (1024, 2048, 4096):
        if chunk >= block:
            continue
        for bytes_per_thread in (16, 32):
            warps = chunk * dtypes.nbytes(dtype) // bytes_per_thread // 32
            if 1 <= warps <= 32:
                out.append(LaunchConfig(1, warps, 1, None, chunk))
    return out
# [/book:chunked-candidates]


def persistent_variants(config: LaunchConfig, stages=(1, 2),
                        programs_per_sm=(1, 2, 4, 8)) -> list[LaunchConfig]:
    """The same compiled tile, launched as a persistent grid, with loads pipelined ``stages`` deep.
    Programs per SM stay within the 64 resident warps an SM holds. The two-pass design is not
    pipelined (its occupancy hides latency), so it gets one stage."""
    stages = (1,) if config.chunk is not None else stages
    out = []
    for pps in programs_per_sm:
        if pps * config.num_warps > 64:
            continue
        for st in stages:
            out.append(LaunchConfig(config.rows_per_program, config.num_warps, st, pps,
                                    config.chunk))
    return out


@functools.lru_cache(maxsize=None)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors (compute units) of the device; 1 under the interpreter."""
    if device.type != "cuda":
        return 1
    return _sm_count(device.index if device.index is not None else torch.cuda.current_device())


def effective_rows_per_program(rows_per_program: int, rows: int, sms: int) -> int:
    """Halve rows per program while the grid would leave SMs without a program."""
    rpp = rows_per_program
    while rpp > 1 and -(-rows // rpp) < sms:
        rpp //= 2
    return rpp


def grid_size(config: LaunchConfig, rows: int, sms: int) -> tuple[int, int]:
    """(rows per program actually used, number of programs)."""
    rpp = effective_rows_per_program(config.rows_per_program, rows, sms)
    tiles = -(-rows // rpp)
    if config.programs_per_sm is None:
        return rpp, tiles
    return rpp, max(1, min(tiles, sms * config.programs_per_sm))


# ---------------------------------------------------------------- the tuning table

def config_from_record(rec: dict) -> tuple:
    """One tuning-table entry -> ``((cols, dtype name), LaunchConfig)`` (raises if malformed)."""
    cfg = LaunchConfig(int(rec["rows_per_program"]), int(rec["num_warps"]), int(rec["num_stages"]),
                       None if rec.get("programs_per_sm") is None else int(rec["programs_per_sm"]),
                       None if rec.get("chunk") is None else int(rec["chunk"]),
                       None if rec.get("segment") is None else int(rec["segment"]))
    return (int(rec["cols"]), dtypes.long_name(rec["dtype"])), cfg


tuning.register("capstone", config_from_record)


def choose_config(cols: int, dtype: torch.dtype, table: dict | None = None,
                  gpu_name: str | None = None, on_gpu: bool | None = None
                  ) -> tuple[LaunchConfig, str]:
    """(configuration, where it came from) for a width and dtype on this machine."""
    e = env.current()
    on_gpu = e.on_gpu if on_gpu is None else on_gpu
    if not on_gpu:
        return INTERPRETER_CONFIG, "interpreter: one fixed configuration"
    table = tuning.active("capstone") if table is None else table
    gpu_name = e.gpu_name if gpu_name is None else gpu_name
    configs = table.get("configs", {})
    if configs and table.get("gpu") == gpu_name:
        name = dtypes.long_name(dtype)
        if (cols, name) in configs:
            return configs[(cols, name)], f"tuned on {table['gpu']} for ({cols}, {name})"
        block = triton.next_power_of_2(cols)
        same_block = [c for (c, d) in configs if d == name and triton.next_power_of_2(c) == block]
        if same_block:
            nearest = min(same_block, key=lambda c: abs(c - cols))
            return configs[(nearest, name)], (f"tuned on {table['gpu']} for ({nearest}, {name}), "
                                              f"same BLOCK {block}")
    return heuristic_config(cols, dtype), "heuristic (no tuned entry for this GPU and width)"


@functools.lru_cache(maxsize=512)
def _remembered_config(cols: int, dtype: torch.dtype, generation: int
                       ) -> tuple[LaunchConfig, str]:
    """choose_config, remembered: the wrappers ask on every call (``generation``: the tables')."""
    return choose_config(cols, dtype)


# [book:large-batch]
# Large batches are bound by DRAM bandwidth, not by latency. There, one row per program with the
# whole row in registers and one 16-byte vector of each tensor per thread (8 bf16 or 4 fp32
# values; 32 warps at most, so wider rows give a thread more vectors) reads every byte once, where
# two passes over column chunks (Inductor's shape) read the row again, from L2. H200, medians of
# three rounds, time against two passes in 2048-column chunks at 4096 and 16384 rows of 4096 to
# 16384 bf16 columns: the residual-writing op 0.96 to 0.98, add + RMSNorm 0.98 to 1.00 (the fused
# op's two exceptions are below). Small batches, bound by latency, keep the table's winners.
LARGE_BATCH_ROWS_PER_SM = 16
VECTOR_BYTES = 16
# Rows wider than registers hold, where the exchange rule below does not apply (the residual-
# writing op in two-byte types), take two passes. One 32-warp program per SM, 16384-column chunks:
# 132 rows of x and r in flight (35 MB at 65,536 bf16 columns) stay in the 63 MB L2 between the
# passes. Four 16-warp programs per SM in 2048-column chunks (the launch before) kept 528 rows,
# 138 MB, and pass 2 went back to DRAM. H200, 1024 x 65536 bf16: the residual-writing op 141 us
# against 176 (Inductor's kernel 167); 128 to 16384 rows and fp16, fp32 alike. At 128 rows (one
# program on 128 of 132 SMs) no other launch won by more than the spread: H100, 128 x 65536 bf16,
# 26.3 us; 8192- or 32768-column chunks, 16 warps, two stages 25.9 to 28.0; the split and the
# exchange designs 27.4 to 28.6; a copy of the call's 67 MB 24.6.
TWO_PASS_CONFIG = LaunchConfig(rows_per_program=1, num_warps=32, num_stages=1, chunk=16384)
# With at most half as many rows as SMs, one program per row leaves most SMs idle: a row is split
# into 2048-column programs instead (add_rmsnorm_split). H200, 65,536 bf16 columns: 1, 16, 32
# rows 4.0, 5.8, 7.8 us against 9.7, 10.0, 10.5 in two passes (Inductor 5.4, 7.2, 9.9); from 80
# rows the two passes are faster, at 64 the two tie.
SPLIT_CONFIG = LaunchConfig(rows_per_program=1, num_warps=8, num_stages=1, segment=2048)
# Rows of 128 KB or more (65,536 bf16 columns, 32,768 fp32): the fused op splits each row over
# resident programs of 4096 columns that exchange their partial sums (add_rmsnorm_exchange) and
# reads every byte once. H200, us, against two passes (the whole row at 32,768 fp32): 65,536 bf16
# at 1024, 4096, 16384 rows 114.6, 426, 1652 against 118.6, 446, 1741; 65,536 fp32 at 128, 1024,
# 4096 rows 30.9, 201, 782 against 39.5, 301, 1134; 32,768 fp32 at 8 and 4096 rows 5.4, 385 against
# 7.7, 440; from 67 to 512 rows of 65,536 bf16 it ties or wins by up to 5%. The residual-writing op
# gains with fp32 only: at 65,536 columns not between half a row and two rows per SM (128 x 65536:
# 41.3 against 39.1; 1024 x 65536: 283 against 295), at 32,768 only below half a row per SM (16 x
# 32768: 6.4 against 9.8; above, WIDE_SUM_CONFIG's two passes win): with two-byte types its second
# pass reads back s, half the bytes of x and r, from L2 and stays faster (1024 x 65536 bf16: 141
# against 155).
EXCHANGE_MIN_ROW_BYTES = 128 * 1024
EXCHANGE_CONFIG = LaunchConfig(rows_per_program=1, num_warps=4, num_stages=1, programs_per_sm=8,
                               segment=4096)
# The residual-writing op at fp32 rows of 128 KB (32,768 columns, held whole by no launch that
# wins) from half a row per SM: two passes in 8,192-column chunks of 16 warps, pass 2 reading
# back s from L2, as Inductor's kernel does. H100, one process, us (each the mean of two rounds),
# against the exchange (at 128 rows the 16,384-column two passes) and the fastest peer: 128 rows
# 25.6 against 26.5 (FlashInfer 26.0), 1024 rows 187.6 against 191.5 (torch.compile 186.9), 4096
# rows 728.4 against 734.5 (torch.compile 730.5); 32 warps 26.1, 186.6, 726.4.
WIDE_SUM_CONFIG = LaunchConfig(rows_per_program=1, num_warps=16, num_stages=1, chunk=8192)


def takes_wide_sum(rows: int, cols: int, sms: int, dtype: torch.dtype, *, write_sum: bool) -> bool:
    """Whether a batch of the residual-writing op (``write_sum``) runs :data:`WIDE_SUM_CONFIG`:
    rows of 128 KB or more that one program could hold whole, more than half a row per SM."""
    return (write_sum and 2 * rows > sms and not takes_two_passes(cols)
            and block_bytes(cols, dtype) >= EXCHANGE_MIN_ROW_BYTES)


def takes_exchange(rows: int, cols: int, sms: int, dtype: torch.dtype, *, write_sum: bool) -> bool:
    """Whether a batch runs the exchange design (``write_sum``: the residual-writing op)."""
    if block_bytes(cols, dtype) < EXCHANGE_MIN_ROW_BYTES:
        return False
    # the residual-writing op: fp32 only, and past half a row per SM only rows wider than one
    # program holds (WIDE_SUM_CONFIG takes the others), from two rows per SM
    return not write_sum or (dtypes.nbytes(dtype) == 4 and (
        2 * rows <= sms or (rows >= 2 * sms and takes_two_passes(cols))))


# The fused op launches otherwise at two widths of two-byte types, where torch.compile was faster.
# H200, us, against the one-vector launch (torch.compile in brackets). Rows of 16 KB (8,192
# columns): two 16-byte vectors a thread, 16 warps (the mid-batch launch).
#   16384 x 8192 bf16 187.8 against 189.5 (188.0), 4096 x 8192 49.4 against 50.9 (50.3); fp16
#   0.987x to 1.000x. Two vectors were the same or slower elsewhere: the residual-writing op 0.999x
#   to 1.019x, 4,096 two-byte columns 1.001x to 1.011x, 4,096 fp32 0.991x to 1.010x. Rows of 32 KB
#   (16,384 columns): Inductor's launch, two passes in 8,192-column chunks of 32 warps. 16384 x
#   16384 bf16 368.7 against 371.9 (368.7), fp16 369.2 against 371.4 (368.9); 4096 rows 96.4
#   against 96.7 (96.1). 4,096-column chunks lost at 4096 rows (97.0); fewer warps, and
#   persistent grids, were 2% to 60% slower.
FUSED_32KB_ROW_CONFIG = LaunchConfig(rows_per_program=1, num_warps=32, num_stages=1, chunk=8192)


def large_batch_config(cols: int, dtype: torch.dtype, *, write_sum: bool
                       ) -> tuple[LaunchConfig, str | None]:
    """(the large-batch launch for a row held whole, what sets it apart or None): one row per
    program, one 16-byte vector per thread per tensor, 4 to 32 warps (32 warps hold up to
    WHOLE_ROW_MAX_COLS columns in registers; wider rows take the split, exchange or two-pass
    launch), except the fused op at two-byte rows of 16 and 32 KB (``write_sum``: the
    residual-writing op)."""
    if takes_two_passes(cols):
        raise ValueError(f"a row of {cols} columns is wider than one program holds; "
                         f"batch_config picks its launch")
    if not write_sum and dtypes.nbytes(dtype) == 2:
        if block_bytes(cols, dtype) == 16 * 1024:
            return mid_batch_config(cols, dtype), ("the fused op at 16 KB two-byte rows: two "
                                                   "16-byte vectors a thread")
        if block_bytes(cols, dtype) == 32 * 1024:
            return FUSED_32KB_ROW_CONFIG, ("the fused op at 32 KB two-byte rows: two passes, "
                                          "Inductor's launch")
    warps = _warps_for(cols, dtype, VECTOR_BYTES * 32, fewest=4, most=32)
    return LaunchConfig(rows_per_program=1, num_warps=warps, num_stages=1), None


def _warps_for(cols: int, dtype: torch.dtype, bytes_per_warp: int, *, fewest: int,
               most: int) -> int:
    """Warps for one row held whole: one per ``bytes_per_warp`` of the row, within the bounds."""
    return max(fewest, min(most, block_bytes(cols, dtype) // bytes_per_warp))


# One row (one token decoding) is one program on one SM: a chain of loads, a reduction across
# the warps and stores, and warps beyond what the loads need only lengthen the reduction. H200,
# both ops at 1 row, us: 4096 bf16 1.56, 1.63 against 1.63, 1.67 with the table's 16 warps; fp16
# 1.54, 1.59 against 1.59, 1.67 (Liger 1.63); 2048 fp32 1.47, 1.57 against 1.57, 1.61. From 16 rows
# the table's warps win back (16 x 4096 fp16: 2.37 against 2.44 with 8 warps).
ONE_ROW_BYTES_PER_WARP = 32 * 2 * VECTOR_BYTES


def one_row_config(config: LaunchConfig, cols: int, dtype: torch.dtype) -> LaunchConfig:
    """The launch of a one-row batch: the table's, with one row per program and at most one
    warp per ``ONE_ROW_BYTES_PER_WARP`` of the row."""
    warps = _warps_for(cols, dtype, ONE_ROW_BYTES_PER_WARP, fewest=1, most=config.num_warps)
    return replace(config, rows_per_program=1, num_warps=warps)


# Between a few rows per SM and the large-batch rule, the fused op (no sum written) runs faster
# with one row per program and the one-row rule's warps (two 16-byte vectors a thread per tensor)
# than with the table's launch, tuned for its worst case over 1, 128 and 1024 rows. H200, fused
# op, us, against the table's launch: 1024 x 4096 bf16 8.21 against 9.14, 512 x 4096 5.26 against
# 5.49, 2048 x 2048 8.35 against 8.67, 512 x 4096 fp32 8.25 against 8.81; no width slower by
# more than 0.6% from 512 to 2048 rows. At 256 rows 16,384 columns ran 2.4% slower, so the rule
# starts above. The residual-writing op gained nowhere: at 1024 x 4096 it ran 5% slower.
MID_BATCH_ROWS_PER_SM = 3


def mid_batch_config(cols: int, dtype: torch.dtype) -> LaunchConfig:
    """The fused op's launch between :data:`MID_BATCH_ROWS_PER_SM` and
    :data:`LARGE_BATCH_ROWS_PER_SM` rows per SM: one row per program, one warp per
    ``ONE_ROW_BYTES_PER_WARP`` of the row (at most 32)."""
    warps = _warps_for(cols, dtype, ONE_ROW_BYTES_PER_WARP, fewest=1, most=32)
    return LaunchConfig(rows_per_program=1, num_warps=warps, num_stages=1)


def batch_config(config: LaunchConfig, rows: int, cols: int, sms: int, dtype: torch.dtype,
                 *, write_sum: bool) -> tuple[LaunchConfig, str | None]:
    """(configuration for this batch and op, the rule that replaced the table's, or None);
    ``write_sum``: the residual-writing op."""
    few = 2 * rows <= sms
    if few and takes_two_passes(cols):
        return SPLIT_CONFIG, "split rule (rows at most half the SMs, wider than registers hold)"
    if takes_exchange(rows, cols, sms, dtype, write_sum=write_sum):
        return EXCHANGE_CONFIG, ("exchange rule (rows of 128 KB or more: programs of 4096 columns "
                                 "exchange their partial sums)")
    if takes_wide_sum(rows, cols, sms, dtype, write_sum=write_sum):
        return WIDE_SUM_CONFIG, ("wide-sum rule (the residual-writing op at fp32 rows of 128 KB, "
                                 "from half a row per SM: two passes in 8,192-column chunks)")
    if takes_two_passes(cols):  # the residual-writing op in two-byte types, or fp32 near 1/SM
        return TWO_PASS_CONFIG, (None if TWO_PASS_CONFIG == config else
                                 "two-pass rule (rows wider than registers hold)")
    large = rows >= LARGE_BATCH_ROWS_PER_SM * sms
    if large and triton.next_power_of_2(cols) > 2048:
        chosen, why = large_batch_config(cols, dtype, write_sum=write_sum)
        return chosen, (f"large-batch rule ({LARGE_BATCH_ROWS_PER_SM} rows per SM or more"
                        + (f"; {why})" if why else ")"))
    if (not large and not write_sum and rows >= MID_BATCH_ROWS_PER_SM * sms
            and triton.next_power_of_2(cols) >= 2048):
        chosen = mid_batch_config(cols, dtype)
        if chosen != config:
            return chosen, (f"mid-batch rule (the fused op from {MID_BATCH_ROWS_PER_SM} rows per "
                            f"SM: one row per program, two 16-byte vectors a thread)")
    if rows == 1 and config.segment is None and config.chunk is None:
        chosen = one_row_config(config, cols, dtype)
        if chosen != config:
            return chosen, "one-row rule (no more warps than two 16-byte vectors a thread)"
    return config, None
# [/book:large-batch]


def config_and_source(rows: int, cols: int, dtype: torch.dtype, device, *,
                      write_sum: bool) -> tuple[LaunchConfig, str]:
    """(what a call without ``config=`` runs, where it came from): the table's entry, or on a GPU
    a rule on the batch (``write_sum``: the residual-writing op)."""
    config, source = _remembered_config(cols, dtype, tuning.generation())
    if device.type != "cuda":
        return config, source  # the interpreter: one fixed configuration
    config, rule = batch_config(config, rows, cols, sm_count(device), dtype, write_sum=write_sum)
    return config, rule or source


def launch_config(rows: int, cols: int, dtype: torch.dtype, device, *,
                  write_sum: bool) -> LaunchConfig:
    """What a call without ``config=`` runs (config_and_source without the source)."""
    return config_and_source(rows, cols, dtype, device, write_sum=write_sum)[0]


# ---------------------------------------------------------------- wrappers

def _prepare(x, residual, w, eps, name: str):
    validation.check_forward_only({"x": x, "residual": residual, "w": w}, name)
    validation.check_tensor(x, "x")
    validation.check_device(x, env.current().device, "x")
    validation.check_same(x, residual, "x", "residual")
    shape = tuple(x.shape)
    x2 = validation.as_rows(x, "x")
    r2 = validation.as_rows(residual, "residual")
    cols = x2.shape[1]
    validation.check_width(cols, MAX_COLS, name)
    w = validation.check_weight(w, cols, x2.device, "w")
    eps = validation.check_eps(eps)
    return x2, r2, w, eps, shape


def _check_config(config) -> LaunchConfig | None:
    if config is None or isinstance(config, LaunchConfig):
        return config
    if isinstance(config, dict):
        try:
            return LaunchConfig(**config)
        except TypeError as e:
            raise validation.InputError(f"config: {e}. Keys: rows_per_program, num_warps, "
                                        f"num_stages, programs_per_sm, chunk, segment.") from None
    raise validation.InputError(f"config must be a LaunchConfig, a dict or None, "
                                f"got {type(config).__name__}.")


# The study's control for the loop hypothesis: True runs one-tile programs through the loop too.
TILE_LOOP_ALWAYS = False
# The study's control for the cache-hint hypothesis: True runs the whole-row kernel as it was
# before, x and r loaded evict_first and w after the reduction, evict_last.
HINTED_LOADS = False
# The study's lever for the eviction hypothesis: "evict_last" loads x and r of the whole-row
# kernel with that policy. Off (""): on an H100 it moved chapter 7's lever shapes by -1.2% to
# +0.1%, inside the study's band, and the lines it keeps in L2 slowed the next kernel's reads.
LOAD_EVICTION = ""


def launch(x2, r2, w, y2, s2, eps: float, config: LaunchConfig):
    """Launch the kernel on validated 2-D tensors (``s2`` None: don't write
    the sum).

    A config with a ``segment`` narrower than the row's BLOCK splits each row
    over programs: with ``programs_per_sm``, resident programs that exchange
    their partial sums (:mod:`.add_rmsnorm_exchange`), without it two kernels
    (:mod:`.add_rmsnorm_split`). One with a ``chunk`` narrower than BLOCK
    runs the two-pass kernel; otherwise the row lives in registers. Returns
    a :class:`~.direct_launch.DirectLaunch` (the split's pair of them, the
    exchange's :class:`~.add_rmsnorm_exchange.ExchangeLaunch`) for calls
    with the same shapes (on a GPU), else None."""
    rows, cols = x2.shape
    if rows == 0:
        return None
    software_bf16 = (not env.current().on_gpu) and x2.dtype == torch.bfloat16
    block = triton.next_power_of_2(cols)
    split = config.segment is not None and config.segment < block
    if split and config.programs_per_sm:
        return add_rmsnorm_exchange.launch_exchange(
            x2, r2, w, y2, s2, eps, config.segment, config.num_warps,
            config.programs_per_sm, sm_count(x2.device), software_bf16)
    if split:
        return add_rmsnorm_split.launch_split(
            x2, r2, w, y2, s2, eps, config.segment, config.num_warps,
            software_bf16)
    write_sum = s2 is not None
    s_out = s2 if write_sum else y2
    rpp, programs = grid_size(config, rows, sm_count(x2.device))
    args = (x2, r2, w, y2, s_out, rows, cols,
            x2.stride(0), r2.stride(0), y2.stride(0), s_out.stride(0), eps)
    persistent = config.programs_per_sm is not None or TILE_LOOP_ALWAYS
    if config.chunk is not None and config.chunk < block:
        kernel, width = add_rmsnorm_chunked_kernel, {"CHUNK": config.chunk}
        hinted = {}
    else:
        kernel, width = add_rmsnorm_kernel, {"BLOCK": block}
        hinted = {"HINTED": HINTED_LOADS, "EVICTION": LOAD_EVICTION}
    pdl = direct_launch.launches_with_pdl(x2.device)
    params = dict(width, ROWS_PER_PROGRAM=rpp, WRITE_SUM=write_sum,
                  SOFTWARE_BF16=software_bf16, PERSISTENT=persistent,
                  PDL=pdl, **hinted)
    compiled = kernel[(programs,)](*args, **params, num_warps=config.num_warps,
                                   num_stages=config.num_stages,
                                   **direct_launch.pdl_option(pdl))
    return direct_launch.after_first_launch(compiled, programs, kernel, 5,
                                            *args, **params)


# ---------------------------------------------------------------- repeated calls

# A model calls the op with the same shapes every step. Every check the wrappers make depends only
# on the inputs' type, shape, strides, dtype and device and on eps; so does the launch (grid,
# config, the compiled kernel, which Triton also specializes on 16-byte pointer alignment). A
# call whose key matches one that passed every check skips straight to the launch; anything
# else (another shape, dtype, device, stride, eps, a non-tensor) takes the full path and its checks.
FAST_PATH = os.environ.get("FUSEDRMS_FAST_PATH", "1") not in ("0", "off")
_PLANS: dict = {}


def _call_key(op: str, x, residual, w, eps) -> tuple | None:
    if not (type(x) is torch.Tensor and type(residual) is torch.Tensor  # noqa: E721
            and type(w) is torch.Tensor and type(eps) is float):  # noqa: E721
        return None  # subclasses and other eps types: always the full path
    # a call autograd would record takes the full path, which refuses it (forward only)
    try:
        aligned = (x.data_ptr() % 16 == 0, residual.data_ptr() % 16 == 0, w.data_ptr() % 16 == 0)
    except RuntimeError:  # no storage (a sparse tensor): the full path says what to do
        return None
    recorded = torch.is_grad_enabled() and (x.requires_grad or residual.requires_grad
                                            or w.requires_grad)
    return (op, x.shape, x.stride(), x.dtype, x.device, residual.shape, residual.stride(),
            residual.dtype, residual.device, w.shape, w.stride(), w.dtype, w.device, eps,
            aligned, tuning.generation(), TILE_LOOP_ALWAYS, HINTED_LOADS, LOAD_EVICTION,
            direct_launch.PDL, recorded)


class _Plan:
    """What a validated call decided: the config, and (on a GPU) the compiled kernel."""

    __slots__ = ("cols", "config", "direct")

    def __init__(self, cols, config, direct):
        self.cols, self.config, self.direct = cols, config, direct

    def run(self, x, r, w, y, s, eps: float) -> None:
        if self.direct is not None:  # rows, strides and eps are the first launch's (the key's)
            self.direct(x, r, w, y, s if s is not None else y)
        else:  # the interpreter: the same launch, without the checks already made
            c = self.cols
            launch(x.view(-1, c), r.view(-1, c), w, y.view(-1, c),
                   None if s is None else s.view(-1, c), eps, self.config)


def _remember(key, x, residual, w, x2, config, direct) -> None:
    """Keep a plan only for the layout the direct launch assumes: contiguous x, residual, w."""
    if key is None or not (x.is_contiguous() and residual.is_contiguous()
                           and w.is_contiguous() and x2.shape[0] > 0):
        return
    direct_launch.remember(_PLANS, key, _Plan(x2.shape[1], config, direct))


def clear_plans() -> None:
    """Forget every remembered call (tests; after replacing a tuning table it happens anyway)."""
    _PLANS.clear()


def add_rmsnorm(x, residual, w, eps: float = 1e-5, *, config=None) -> torch.Tensor:
    """``y = rmsnorm(x + residual) * w`` in one kernel; x and residual of shape (..., cols).

    ``config`` (a :class:`LaunchConfig` or dict) overrides :func:`choose_config`.
    """
    key = _call_key("fused", x, residual, w, eps) if FAST_PATH and config is None else None
    plan = _PLANS.get(key) if key is not None else None
    if plan is not None:
        y = torch.empty_like(x)
        plan.run(x, residual, w, y, None, eps)
        return y
    config = _check_config(config)
    x2, r2, w2, eps, shape = _prepare(x, residual, w, eps, "capstone.fused")
    config = config or launch_config(x2.shape[0], x2.shape[1], x2.dtype, x2.device,
                                     write_sum=False)
    y2 = torch.empty(x2.shape, dtype=x2.dtype, device=x2.device)
    direct = launch(x2, r2, w2, y2, None, eps, config)
    _remember(key, x, residual, w, x2, config, direct)
    return y2.reshape(shape)


def _disjoint(*tensors) -> bool:
    """Whether contiguous tensors (a plan is kept only for those) occupy disjoint byte ranges: a
    few integer comparisons where :func:`validation.check_no_overlap` takes ~15 us per call."""
    spans = sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in tensors)
    return all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))


def _refuse_autograd_in_place(x, residual) -> None:
    """``in_place=True`` overwrites x and residual, which autograd may need for a gradient."""
    if not torch.is_grad_enabled():
        return
    for t, name in ((x, "x"), (residual, "residual")):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            raise validation.InputError(
                f"in_place=True overwrites {name}, which requires grad: autograd would compute "
                f"its gradients from values that are no longer there. Use in_place=False, or "
                f"rmsnorm_backward.add_rmsnorm for a differentiable fused add.")


def _bump_versions(*tensors) -> None:
    """Written through pointers: tell autograd, so that a saved copy is refused, not reused
    (inference tensors keep no version)."""
    for t in tensors:
        if not t.is_inference():
            torch.autograd.graph.increment_version(t)


def add_rmsnorm_residual(x, residual, w, eps: float = 1e-5, *, in_place: bool = False,
                         config=None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, s)`` with ``s = x + residual`` stored in x's dtype and ``y = rmsnorm(s) * w``.

    ``in_place=True`` writes ``s`` into ``residual`` and ``y`` into ``x`` and returns them (vLLM's
    layout); both must then be contiguous, or the writes would land in a temporary copy.
    """
    if in_place is True:
        _refuse_autograd_in_place(x, residual)
    op = "residual_in_place" if in_place is True else "residual"
    key = (_call_key(op, x, residual, w, eps)
           if FAST_PATH and config is None and type(in_place) is bool else None)  # noqa: E721
    plan = _PLANS.get(key) if key is not None else None
    if plan is not None:
        if in_place:
            # depends on addresses, not on the key: checked on every call (the full check, with
            # its message, only when the byte ranges meet)
            if not _disjoint(x, residual, w):
                validation.check_no_overlap({"x": x, "residual": residual},
                                            {"x": x, "residual": residual, "w": w})
            plan.run(x, residual, w, x, residual, eps)
            _bump_versions(x, residual)
            return x, residual
        y, s = torch.empty_like(x), torch.empty_like(x)
        plan.run(x, residual, w, y, s, eps)
        return y, s
    config = _check_config(config)
    in_place = validation.check_flag(in_place, "in_place")
    x2, r2, w2, eps, shape = _prepare(x, residual, w, eps, "capstone.fused_residual")
    config = config or launch_config(x2.shape[0], x2.shape[1], x2.dtype, x2.device,
                                     write_sum=True)
    if in_place:
        for t, name in ((x, "x"), (residual, "residual")):
            if not t.is_contiguous():
                raise validation.InputError(
                    f"in_place=True writes into {name}, which is not contiguous; the kernel would "
                    f"write into a temporary copy. Pass {name}.contiguous() or use in_place=False.")
        # y goes into x and s into residual: neither may overlap the other tensors it reads
        validation.check_no_overlap({"x": x2, "residual": r2},
                                    {"x": x2, "residual": r2, "w": w2})
        direct = launch(x2, r2, w2, x2, r2, eps, config)
        _remember(key, x, residual, w, x2, config, direct)
        _bump_versions(x, residual)
        return x, residual
    y2 = torch.empty(x2.shape, dtype=x2.dtype, device=x2.device)
    s2 = torch.empty(x2.shape, dtype=x2.dtype, device=x2.device)
    direct = launch(x2, r2, w2, y2, s2, eps, config)
    _remember(key, x, residual, w, x2, config, direct)
    return y2.reshape(shape), s2.reshape(shape)


registry.register(registry.Impl(
    "capstone.fused", "add_rmsnorm", add_rmsnorm, "triton", max_cols=MAX_COLS,
    description="fused residual-add + RMSNorm, tuned per (cols, dtype): 3 row-trips"))
registry.register(registry.Impl(
    "capstone.fused_residual", "add_rmsnorm_residual", add_rmsnorm_residual, "triton",
    max_cols=MAX_COLS,
    description="fused residual-add + RMSNorm that also writes x + residual (vLLM layout): "
                "4 row-trips"))
registry.register(registry.Impl(
    "capstone.fused_residual_in_place", "add_rmsnorm_residual",
    lambda x, residual, w, eps=1e-5: add_rmsnorm_residual(x, residual, w, eps, in_place=True),
    "triton", max_cols=MAX_COLS, mutates=True,
    description="the same, in place as vLLM and FlashInfer do it: s into residual, y into x"))
