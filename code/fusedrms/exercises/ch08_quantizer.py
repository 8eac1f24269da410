"""Chapter 8's build-from-specification exercise: the quantization step (steps 4-5 of
:mod:`fusedrms.kernels.rmsnorm_fp8_spec`) as a Triton kernel the reader writes.

The reader's kernel takes bf16 rows ``y`` and stores, per 128-column block, one fp32 scale and the
e4m3 codes (as uint8 bit patterns, rounded by the library's :func:`~fusedrms.kernels.rmsnorm_fp8.e4m3_bits`,
bit-exact in Triton's interpreter and on every GPU). The grader (:mod:`.grader`) runs it in a child
process on three cases whose buffers are laid out adversarially: rows of y further apart than
their width with NaN between, codes and scales prefilled with NaN and surrounded by sentinels.
The inputs hold an all-zero block (the floor), a block below the default floor with another floor
passed, a partial block, and values for which ``y * (448 / absmax)`` or ``y * (1 / scale)`` picks
another code than ``y / scale``. Each typical mistake is named from what it stores.
"""
from __future__ import annotations

from .. import env  # first: the kernels below must be decorated in the right mode

import contextlib
import inspect
import re
from dataclasses import dataclass, field

import numpy as np
import torch
import triton
import triton.language as tl

from .. import checks
from ..kernels import rmsnorm_fp8 as F, rmsnorm_fp8_spec as fp8_spec
from ..kernels.rmsnorm_fp8 import e4m3_bits, quantize_tile
from . import grader, interpreter_audit
from .core import (Exercise, Feedback, Malformed, _global_names, correct, kernel_function,
                   one_line, portable_error, wrong)

FLOOR = fp8_spec.ABSMAX_FLOOR


# (5) write the quantizer ----------------------------------------------------------------------
# The reader writes steps 4-5 of the specification as a Triton kernel, one program per row; the
# grader runs it in a child process (Triton's interpreter everywhere, and compiled on a GPU) on
# boundary cases whose buffers are laid out adversarially, and names the typical mistake.
QUANT_ARGS = ("y_ptr", "codes_ptr", "scales_ptr", "cols", "y_row_stride", "absmax_floor", "BLOCKS")


# [book:quantize-solution]
@triton.jit
def solution_quantize_kernel(y_ptr, codes_ptr, scales_ptr, cols, y_row_stride,
                             absmax_floor, BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    blocks = tl.arange(0, BLOCKS)  # the row as a (BLOCKS, 128) tile
    offsets = blocks[:, None] * 128 + tl.arange(0, 128)[None, :]
    mask = offsets < cols  # a partial last block reads zeros
    y = tl.load(y_ptr + row * y_row_stride + offsets, mask=mask,
                other=0.0).to(tl.float32)
    absmax = tl.maximum(tl.max(tl.abs(y), axis=1), absmax_floor)
    scale = tl.div_rn(absmax, 448.0)  # correctly rounded, as torch divides
    q = tl.div_rn(y, scale[:, None])
    q = tl.clamp(q, -448.0, 448.0)
    tl.store(codes_ptr + row * cols + offsets, F.e4m3_bits(q), mask=mask)
    n_blocks = tl.cdiv(cols, 128)
    tl.store(scales_ptr + row * n_blocks + blocks, scale,
             mask=blocks < n_blocks)
# [/book:quantize-solution]


@dataclass(frozen=True)
class QuantCase:
    rows: int
    cols: int
    floor: float
    pad: int  # y's rows lie cols + pad elements apart, NaN between
    seed: int

    @property
    def where(self) -> str:
        return f"On {self.rows}x{self.cols}" + (f" (rows {self.cols + self.pad} apart)"
                                                 if self.pad else "")


QUANT_CASES = (QuantCase(1, 128, FLOOR, 0, 1),  # one block: the tie values
               QuantCase(3, 7168, FLOOR, 0, 2),  # the model's width, an all-zero block
               QuantCase(2, 200, 1e-10, 8, 3))  # a partial block, strided rows, a tiny block
# case -> (row, block, absmax) of a block holding values whose code a shortcut misses: with a
# maximum of 9.5 only y * (1 / scale) misses some, with 6.5 y * (448 / absmax) misses too
TIE_AT = {0: (0, 0, 9.5), 1: (2, 5, 6.5)}
ZERO_AT = (1, 2)  # (row, block) of the 3x7168 case that is all zeros
TINY_AT = (1, 0)  # (row, block) of the 2x200 case whose values lie below the default floor
CODE_FILL = 0x7F  # an e4m3 NaN: a code the kernel never writes stays NaN
PAD = 256  # sentinel elements before and after codes and scales


def _code_of(q: torch.Tensor) -> torch.Tensor:
    return q.clamp(-fp8_spec.FP8_MAX, fp8_spec.FP8_MAX).to(fp8_spec.FP8_DTYPE).view(torch.uint8)


def tie_values(absmax: float) -> torch.Tensor:
    """The positive bf16 values up to ``absmax`` whose code, in a block of maximum ``absmax``,
    changes when y / scale is computed as y * (448 / absmax) or as y * (1 / scale)."""
    every = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    y = every[torch.isfinite(every) & (every > 0) & (every <= absmax)]
    a = torch.tensor(absmax)
    scale = a / torch.tensor(fp8_spec.FP8_MAX)
    right = _code_of(y / scale)
    missed = (right != _code_of(y * (torch.tensor(fp8_spec.FP8_MAX) / a))) | \
             (right != _code_of(y * (1 / scale)))
    return y[missed]


def quant_inputs(case: QuantCase) -> torch.Tensor:
    """The case's y (rows x cols, bf16, on the CPU): random rows with outliers, and the
    case's special block (tie values, all zeros, or values below the default floor)."""
    y = fp8_spec.make_inputs(case.rows, case.cols, case.seed, device="cpu")[0].float()
    g = torch.Generator().manual_seed(case.seed)
    index = QUANT_CASES.index(case)
    if index in TIE_AT:
        row, block, absmax = TIE_AT[index]
        ties = tie_values(absmax)
        block_values = (torch.rand(128, generator=g) * 2 - 1) * (absmax - 0.5)
        block_values[:2 * len(ties)] = torch.cat([ties, -ties])
        block_values[2 * len(ties)] = absmax
        y[row, block * 128:(block + 1) * 128] = block_values[torch.randperm(128, generator=g)]
    if index == 1:
        row, block = ZERO_AT
        y[row, block * 128:(block + 1) * 128] = 0.0
    if index == 2:
        row, block = TINY_AT
        y[row, block * 128:(block + 1) * 128] = 1e-6 * torch.randn(128, generator=g)
    return y.to(torch.bfloat16)


@dataclass
class QuantRun:
    """What the reader's kernel left in its buffers on one case, and what the audit saw."""
    codes: torch.Tensor  # uint8, PAD + rows * cols + PAD
    scales: torch.Tensor  # fp32, PAD + rows * BLOCKS + PAD (room for a wrong layout)
    outside_stores: int = 0
    outside_loads: int = 0  # loads outside every tensor, and of y outside its rows' columns
    first_outside: str = ""
    races: list = field(default_factory=list)
    undefined: bool = False  # a masked load without other= skipped lanes
    rows_cols_apart: bool = False  # y's loads are exactly its elements had rows been cols apart


def _blocks_param(kernel) -> str:
    fn = kernel_function(kernel)
    last = list(inspect.signature(fn).parameters.values())[-1]
    if "constexpr" not in str(last.annotation):
        raise Malformed(f"the last parameter, {last.name}, is the tile's block count and must be "
                        f"declared {last.name}: tl.constexpr (tl.arange needs a compile-time "
                        f"size).")
    return last.name


def _quant_launch(kernel, case: QuantCase, device, audit: bool) -> QuantRun:
    rows, cols = case.rows, case.cols
    nb = fp8_spec.n_blocks(cols)
    blocks = triton.next_power_of_2(nb)
    stride = cols + case.pad
    y = quant_inputs(case)
    y_buf = torch.full((rows * stride + 128,), float("nan"), dtype=torch.bfloat16)
    y_buf[:rows * stride].view(rows, stride)[:, :cols] = y
    codes_buf = torch.full((2 * PAD + rows * cols,), CODE_FILL, dtype=torch.uint8)
    scales_buf = torch.full((2 * PAD + rows * blocks,), float("nan"))
    y_buf, codes_buf, scales_buf = (t.to(device) for t in (y_buf, codes_buf, scales_buf))
    with interpreter_audit.audited() if audit else contextlib.nullcontext() as log:
        kernel[(rows,)](y_buf, codes_buf[PAD:], scales_buf[PAD:], cols, stride, case.floor,
                        **{_blocks_param(kernel): blocks})
    run = QuantRun(codes_buf.cpu(), scales_buf.cpu())
    if log is not None and log.usable and log.launches:
        launch = log.launches[-1]
        run.outside_stores, run.outside_loads = launch.outside_stores, launch.outside_loads
        run.first_outside, run.races = launch.first_outside, launch.races()[:1]
        start, size = y_buf.data_ptr(), y_buf.element_size()
        read = []
        for load in launch.loads():
            run.undefined |= load.undefined_lanes
            index = (load.addresses.astype("int64") - start) // size
            index = index[(index >= 0) & (index < y_buf.numel())]
            run.outside_loads += int(((index >= rows * stride) | (index % stride >= cols)).sum())
            read.append(index)
        if case.pad and read:
            every = sorted(set(np.concatenate(read).tolist()))
            run.rows_cols_apart = every == list(range(rows * cols))
    return run


def _quant_runs(kernel, device: str) -> list:
    """(In the grader's child) each case run, in the interpreter and audited (device "cpu") or
    compiled for the GPU: its QuantRun, or what the kernel raised (and then no further case)."""
    runs = []
    for case in QUANT_CASES:
        grader.progress(case.where + (" on the GPU" if device == "cuda" else ""))
        try:
            runs.append(_quant_launch(kernel, case, torch.device(device), device == "cpu"))
            if device == "cuda":
                torch.cuda.synchronize()
        except Exception as err:  # noqa: BLE001 - the reader's kernel: anything can happen
            runs.append(portable_error(err))
            break
    return runs


def _expected(case: QuantCase, floor: float | None = None):
    y = quant_inputs(case)
    codes, scales = fp8_spec.quantize_blocks(y, case.floor if floor is None else floor)
    return y, fp8_spec.code_bits(codes).reshape(-1), scales.float()


def _same_scales(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(checks.allclose(a, b, rtol=1e-6, atol=0.0, nan="match"))


def _scale_models(case: QuantCase, y: torch.Tensor, scales: torch.Tensor) -> dict:
    """The scales (rows x blocks) the typical mistakes store, to name the reader's one."""
    rows, cols = y.shape
    nb = scales.shape[1]
    held = torch.nn.functional.pad(y.float(), (0, nb * 128 - cols)).reshape(rows, nb, 128)
    top = torch.tensor(fp8_spec.FP8_MAX)
    floor = torch.tensor(case.floor)
    absmax = torch.maximum(held.abs().amax(-1), floor)
    signed = torch.maximum(held.amax(-1), floor)
    row_max = torch.maximum(held.abs().amax((-2, -1)), floor)[:, None].expand(rows, nb)
    return {
        "no floor": held.abs().amax(-1) / top,
        "a fixed floor": torch.maximum(held.abs().amax(-1), torch.tensor(FLOOR)) / top,
        "floor on the scale": torch.maximum(held.abs().amax(-1) / top, floor),
        "absmax not divided": absmax,
        "448 / absmax": top / absmax,
        "signed max": signed / top,
        "one scale per row": row_max / top,
    }


QUANT_SCALE_HINTS = {
    "no floor": ("the all-zero block's scale is 0, so its codes are 0 / 0 = NaN",
                 "Floor the absmax before dividing: absmax = tl.maximum(absmax, absmax_floor)."),
    "a fixed floor": (f"the scales follow a floor of {FLOOR:g}, not the absmax_floor argument",
                      "Use the absmax_floor argument: the caller chooses the floor (this case "
                      "passes 1e-10)."),
    "floor on the scale": ("the floor is applied to the scale, not to the absmax",
                           "Floor the absmax, then divide: scale = tl.div_rn(tl.maximum(absmax, "
                           "absmax_floor), 448.0)."),
    "absmax not divided": ("each scale is the block's absmax, not absmax / 448",
                           "The scale maps the largest code, 448, to the absmax: scale = "
                           "absmax / 448, so that value ~= code * scale."),
    "448 / absmax": ("each scale is 448 / absmax, the reciprocal of the stored scale",
                     "Store scale = absmax / 448 (value ~= code * scale); the codes are "
                     "y / scale."),
    "signed max": ("the scales follow the largest signed value of each block, not the largest "
                   "magnitude", "Take the maximum of tl.abs(y): a block whose largest magnitude "
                                "is negative needs it too."),
    "one scale per row": ("every block of a row got the same scale, the row's absmax / 448",
                          "Reduce over each block only: tl.max(tl.abs(y), axis=1) on the "
                          "(BLOCKS, 128) tile gives one maximum per block."),
}
QUANT_LAYOUT_HINT = ("Row i's scales lie at scales_ptr + i * n_blocks + b, with n_blocks = "
                     "tl.cdiv(cols, 128) (not BLOCKS), and only b < n_blocks is stored.")
QUANT_CODE_HINT = ("q = tl.div_rn(y, scale[:, None]), clamped to [-448, 448], then "
                   "e4m3_bits(q): the correctly rounded quotient, rounded to nearest even.")


def _scales_layouts(run: QuantRun, case: QuantCase, ref: torch.Tensor) -> str | None:
    """The wrong layout the kernel stored the right scales in, in words, or None."""
    rows, nb = ref.shape
    blocks = triton.next_power_of_2(nb)
    flat = ref.reshape(-1)
    layouts = {  # (where the scales start in the buffer, how they lie there)
        "block-major (block b of row i at b * rows + i)": (PAD, ref.t().reshape(-1)),
        "rows BLOCKS apart (row * BLOCKS + b)": (PAD, torch.nn.functional.pad(
            ref, (0, blocks - nb), value=float("nan")).reshape(-1)[:rows * blocks]),
        "one place further along: block b's scale where block b + 1's belongs": (PAD + 1, flat),
        "one place back: block b's scale where block b - 1's belongs": (PAD - 1, flat)}
    for words, (start, laid) in layouts.items():
        got = run.scales[start:start + laid.numel()]
        known = torch.isfinite(laid)
        if _same_scales(got[known], laid[known]) and not _same_scales(run.scales[PAD:PAD + rows * nb], flat):
            return words
    return None


def _quant_diagnose(run: QuantRun, case: QuantCase, kernel_names: set) -> Feedback | None:
    where = case.where
    rows, cols = case.rows, case.cols
    y, ref_codes, ref_scales = _expected(case)
    nb = ref_scales.shape[1]
    if run.outside_stores:
        return wrong(f"{where} your kernel stores outside the tensors it was given "
                     f"({run.outside_stores} lanes; the first lands {run.first_outside}).",
                     "Store codes with mask=offsets < cols and scales with mask=blocks < "
                     "n_blocks.")
    if run.rows_cols_apart:
        return wrong(f"{where} your kernel reads row i of y at y_ptr + i * cols, but the rows lie "
                     f"y_row_stride = {cols + case.pad} elements apart here (y is a view of a "
                     f"wider tensor), so it reads the padding between them.",
                     "Load row i at y_ptr + i * y_row_stride + offsets; only the codes are "
                     "contiguous (codes_ptr + i * cols).")
    if run.outside_loads:
        return wrong(f"{where} your kernel reads y outside its rows' {cols} columns "
                     f"({run.outside_loads} lanes): the padding between rows is NaN here, and "
                     f"on a GPU memory past the tensor.",
                     "Load with mask=offsets < cols, other=0.0, at y_ptr + row * y_row_stride + "
                     "offsets.")
    if run.undefined:
        return wrong(f"{where} your kernel loads y with a mask but no other=: the lanes the mask "
                     f"skips (a partial block's missing columns, the tile's padding blocks) are "
                     f"undefined, and they enter the block's absmax. The interpreter dropped them "
                     f"here; a GPU may give any value.",
                     "Load y with other=0.0: a partial block's missing columns count as zeros.")
    if run.races:
        return wrong(f"{where} {run.races[0]}. On a GPU the programs run at the same time, so "
                     f"which value stays is a race.",
                     "Program i stores only row i's codes and scales. " + QUANT_LAYOUT_HINT)
    codes_body = run.codes[PAD:PAD + rows * cols]
    scales_body = run.scales[PAD:PAD + rows * nb].reshape(rows, nb)
    stray_scales = int((~torch.isnan(torch.cat([run.scales[:PAD],
                                                run.scales[PAD + rows * nb:]]))).sum())
    layout = _scales_layouts(run, case, ref_scales)
    if layout:
        return wrong(f"{where} the scales are right but stored {layout}.", QUANT_LAYOUT_HINT)
    stray_codes = int((torch.cat([run.codes[:PAD], run.codes[PAD + rows * cols:]])
                       != CODE_FILL).sum())
    if stray_codes or stray_scales:
        what = " and ".join(f"{n} {name}" for n, name in ((stray_codes, "codes"),
                                                          (stray_scales, "scales")) if n)
        return wrong(f"{where} your kernel wrote {what} outside the rows' places.",
                     "Codes of row i start at codes_ptr + i * cols (they are contiguous, unlike "
                     "y). " + QUANT_LAYOUT_HINT)
    unset_scales = torch.isnan(scales_body) & ~torch.isnan(ref_scales)
    if bool(unset_scales.any()):
        row, block = (int(v) for v in torch.nonzero(unset_scales)[0])
        return wrong(f"{where} your kernel never wrote {int(unset_scales.sum())} of the "
                     f"{rows * nb} scales (the first: row {row}, block {block}).",
                     QUANT_LAYOUT_HINT)
    if bool((codes_body == CODE_FILL).any()) and not bool((ref_codes == CODE_FILL).any()):
        first = int(torch.nonzero(codes_body == CODE_FILL)[0])
        return wrong(f"{where} your kernel never wrote {int((codes_body == CODE_FILL).sum())} "
                     f"of the {rows * cols} codes (the first: row {first // cols}, column "
                     f"{first % cols}).",
                     "Store every column: offsets = blocks[:, None] * 128 + tl.arange(0, 128)"
                     "[None, :] with mask=offsets < cols, at codes_ptr + row * cols + offsets.")
    report = fp8_spec.compare(codes_body.view(fp8_spec.FP8_DTYPE).reshape(rows, cols),
                              scales_body, ref_codes.view(fp8_spec.FP8_DTYPE).reshape(rows, cols),
                              ref_scales)
    if report:
        return None
    if not _same_scales(scales_body, ref_scales):
        for label, model in _scale_models(case, y, ref_scales).items():
            if model is not None and _same_scales(scales_body, model):
                what, hint = QUANT_SCALE_HINTS[label]
                return wrong(f"{where} {what} ({report.message}).", hint)
        if case.pad and _same_scales(scales_body[:1], ref_scales[:1]):
            return wrong(f"{where} row 0 is right and row 1 is not ({report.message}).",
                         "y's rows lie y_row_stride elements apart (here more than cols): "
                         "load row i at y_ptr + i * y_row_stride + offsets.")
        return wrong(f"{where} the scales differ from the specification's ({report.message}).",
                     "Per block: absmax = max |y| over its 128 columns (a partial block's missing "
                     "columns count as 0), floored at absmax_floor; scale = tl.div_rn(absmax, "
                     "448.0).")
    # the scales are right: the codes are not
    held = torch.nn.functional.pad(y.float(), (0, nb * 128 - cols)).reshape(rows, nb, 128)
    top = torch.tensor(fp8_spec.FP8_MAX)
    absmax = torch.maximum(held.abs().amax(-1), torch.tensor(case.floor))
    shortcuts = {
        "y * (448 / absmax)": held * (top / absmax)[..., None],
        "y * (1 / scale)": held * (1 / ref_scales)[..., None],
    }
    for words, q in shortcuts.items():
        model = _code_of(q).reshape(rows, nb * 128)[:, :cols].reshape(-1)
        if torch.equal(codes_body, model):
            return wrong(f"{where} your codes are {words}, not y / scale correctly rounded: "
                         f"{report.message}. The two differ in the last bit of the quotient "
                         f"now and then, and at a value halfway between two codes that bit "
                         f"decides the code.",
                         "Divide: q = tl.div_rn(y, scale[:, None]). One reciprocal per block "
                         "needs two fma corrections to give the same quotient "
                         "(divide_by_block_scale).")
    if "float8e4nv" in kernel_names:
        return wrong(f"{where} the codes differ ({report.message}): they come from Triton's "
                     f"cast to float8e4nv, which the interpreter emulates wrongly for 1-2% of "
                     f"values (ties, carries, subnormals).", "Round with e4m3_bits(q), the chapter's integer rounding: "
                                      "bit-exact in the interpreter and on every GPU.")
    return wrong(f"{where} the scales are right and the codes are not ({report.message}).",
                 QUANT_CODE_HINT)


FORBIDDEN = ("quantize_tile", "_quantize_piece", "quantize_fp8_kernel")  # the answer itself


def _names_in(fn) -> set:
    """Every name and attribute the kernel's source mentions (``F.e4m3_bits`` gives F and
    e4m3_bits)."""
    import ast
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
    return names


def _divides(fn) -> list[int]:
    """Line numbers (of the kernel's source) with a ``/`` division."""
    import ast
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return []
    return sorted({n.lineno for n in ast.walk(tree)
                   if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div)})


def _library_parts_used(fn) -> list[str]:
    """The library's quantizing functions the kernel calls (it must do steps 4-5 itself)."""
    from ..kernels import rmsnorm_fp8

    forbidden = [(getattr(rmsnorm_fp8, name), name) for name in FORBIDDEN]
    mentioned = _names_in(fn)
    found = set()
    for name in _global_names(fn.__code__):
        value = fn.__globals__.get(name)
        candidates = ([getattr(value, a, None) for a in mentioned] if inspect.ismodule(value)
                      else [value])
        found |= {label for obj, label in forbidden for c in candidates if c is obj}
    return sorted(found)


def _grade_quantizer(answer) -> Feedback:
    fn = kernel_function(answer) if isinstance(answer, triton.runtime.jit.KernelInterface) else None
    if fn is None:
        raise Malformed(f"expected a kernel defined with @triton.jit, got "
                        f"{type(answer).__name__}. Define it in a cell (def my_quantizer(...) "
                        f"under @triton.jit) and set answer = my_quantizer.")
    names = tuple(inspect.signature(fn).parameters)
    if len(names) != len(QUANT_ARGS):
        raise Malformed(f"the kernel takes {len(names)} arguments ({', '.join(names)}); it must "
                        f"take {len(QUANT_ARGS)}: ({', '.join(QUANT_ARGS)}).")
    _blocks_param(answer)
    used = _library_parts_used(fn)
    if used:
        return wrong(f"your kernel calls the library's {', '.join(used)}, which is the answer "
                     f"itself.", "Write the absmax, the scale and the division yourself; of the "
                                 "library's helpers, call only e4m3_bits (and, if you like, "
                                 "max_keeping_nan or divide_by_block_scale).")
    kernel_names = _names_in(fn)
    try:  # the interpreter's verdict, in a child process: the same on every machine
        runs = grader.run(answer, _quant_runs, "cpu", cache=True)
    except grader.Failed as failed:
        return grader.failure_feedback(failed, "triton")
    verdict = _quant_verdict(runs, kernel_names, "")
    if verdict is not None:
        return verdict
    lines = _divides(fn)
    if lines:
        return wrong(f"your codes and scales are right here, but the kernel divides with / (line "
                     f"{', '.join(map(str, lines))} of the kernel): on an NVIDIA GPU Triton "
                     f"compiles / between fp32 values to an approximate division, which moves a "
                     f"quotient by an ulp now and then, and with it a code.",
                     "Use tl.div_rn(a, b), the correctly rounded division, for the scale and "
                     "for the codes (tl.cdiv for whole numbers).")
    on_gpu = env.current().on_gpu
    if on_gpu:
        try:
            gpu_runs = grader.run(answer, _quant_runs, "cuda", device="gpu")
        except grader.Failed as failed:
            return grader.failure_feedback(failed, "triton")
        verdict = _quant_verdict(gpu_runs, kernel_names, " on the GPU")
        if verdict is not None:
            return verdict
    shapes = ", ".join(f"{c.rows}x{c.cols}" for c in QUANT_CASES)
    return correct(f"Every code equals the specification's bit for bit and every scale matches, "
                   f"on {shapes} (rows further apart than their width, a partial block, an "
                   f"all-zero block, values where a multiplied reciprocal picks another code), "
                   f"with no store outside the rows' places; run in Triton's interpreter"
                   f"{' and compiled for the GPU' if on_gpu else ''}.")


def _quant_verdict(runs, kernel_names, suffix: str) -> Feedback | None:
    for case, run in zip(QUANT_CASES, runs):
        if isinstance(run, BaseException):
            text = one_line(run)
            cast = re.search(r"cannot cast .*to <\[[^\]]*\], (\w+)>", str(run), re.DOTALL)
            if cast:  # the interpreter's message holds the whole array: name the type only
                return wrong(f"{case.where}{suffix} a tl.store in your kernel could not convert "
                             f"its values to {cast.group(1)}, the pointer's element type.",
                             "codes_ptr holds the e4m3 bit patterns as uint8: store "
                             "e4m3_bits(q)." if "float8e4nv" in kernel_names else
                             "Convert the values to the pointer's type before the store.")
            return wrong(f"{case.where}{suffix} your kernel raised {text}",
                         "Run it once by hand to see the whole error; compare each line with the "
                         "specification's steps.")
        verdict = _quant_diagnose(run, case, kernel_names)
        if verdict is not None:
            if suffix:
                return wrong(verdict.message.replace(case.where, case.where + suffix, 1),
                             verdict.hint)
            return verdict
    if len(runs) < len(QUANT_CASES):
        return wrong("the checker's run stopped early.", "Run the cell again.")
    return None


# ---- typical mistakes, each a kernel a reader might write ----

@triton.jit
def _tile(y_ptr, row, cols, y_row_stride, BLOCKS: tl.constexpr):
    """(y as fp32, offsets, mask, blocks) of one row held as a (BLOCKS, 128) tile."""
    blocks = tl.arange(0, BLOCKS)
    offsets = blocks[:, None] * 128 + tl.arange(0, 128)[None, :]
    mask = offsets < cols
    y = tl.load(y_ptr + row * y_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    return y, offsets, mask, blocks


@triton.jit
def _store(codes_ptr, scales_ptr, row, cols, offsets, mask, blocks, codes, scale):
    tl.store(codes_ptr + row * cols + offsets, codes, mask=mask)
    n_blocks = tl.cdiv(cols, 128)
    tl.store(scales_ptr + row * n_blocks + blocks, scale, mask=blocks < n_blocks)


@triton.jit
def kernel_no_floor(y_ptr, codes_ptr, scales_ptr, cols, y_row_stride, absmax_floor,
                    BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    y, offsets, mask, blocks = _tile(y_ptr, row, cols, y_row_stride, BLOCKS)
    scale = tl.div_rn(tl.max(tl.abs(y), axis=1), 448.0)  # no floor: an all-zero block gets 0
    q = tl.clamp(tl.div_rn(y, scale[:, None]), -448.0, 448.0)
    _store(codes_ptr, scales_ptr, row, cols, offsets, mask, blocks, e4m3_bits(q), scale)


@triton.jit
def kernel_fixed_floor(y_ptr, codes_ptr, scales_ptr, cols, y_row_stride, absmax_floor,
                       BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    y, offsets, mask, blocks = _tile(y_ptr, row, cols, y_row_stride, BLOCKS)
    scale = tl.div_rn(tl.maximum(tl.max(tl.abs(y), axis=1), 1e-4), 448.0)
    q = tl.clamp(tl.div_rn(y, scale[:, None]), -448.0, 448.0)
    _store(codes_ptr, scales_ptr, row, cols, offsets, mask, blocks, e4m3_bits(q), scale)


@triton.jit
def kernel_times_reciprocal(y_ptr, codes_ptr, scales_ptr, cols, y_row_stride, absmax_floor,
                            BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    y, offsets, mask, blocks = _tile(y_ptr, row, cols, y_row_stride, BLOCKS)
    absmax = tl.maximum(tl.max(tl.abs(y), axis=1), absmax_floor)
    scale = tl.div_rn(absmax, 448.0)
    q = tl.clamp(y * tl.div_rn(448.0, absmax)[:, None], -448.0, 448.0)  # not y / scale
    _store(codes_ptr, scales_ptr, row, cols, offsets, mask, blocks, e4m3_bits(q), scale)


@triton.jit
def kernel_times_inverse_scale(y_ptr, codes_ptr, scales_ptr, cols, y_row_stride, absmax_floor,
                               BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    y, offsets, mask, blocks = _tile(y_ptr, row, cols, y_row_stride, BLOCKS)
    scale = tl.div_rn(tl.maximum(tl.max(tl.abs(y), axis=1), absmax_floor), 448.0)
    q = tl.clamp(y * tl.div_rn(1.0, scale)[:, None], -448.0, 448.0)  # one reciprocal, no fma
    _store(codes_ptr, scales_ptr, row, cols, offsets, mask, blocks, e4m3_bits(q), scale)


@triton.jit
def kernel_signed_max(y_ptr, codes_ptr, scales_ptr, cols, y_row_stride, absmax_floor,
                      BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    y, offsets, mask, blocks = _tile(y_ptr, row, cols, y_row_stride, BLOCKS)
    scale = tl.div_rn(tl.maximum(tl.max(y, axis=1), absmax_floor), 448.0)  # max, not max |y|
    q = tl.clamp(tl.div_rn(y, scale[:, None]), -448.0, 448.0)
    _store(codes_ptr, scales_ptr, row, cols, offsets, mask, blocks, e4m3_bits(q), scale)


@triton.jit
def kernel_one_scale_per_row(y_ptr, codes_ptr, scales_ptr, cols, y_row_stride, absmax_floor,
                             BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    y, offsets, mask, blocks = _tile(y_ptr, row, cols, y_row_stride, BLOCKS)
    absmax = tl.maximum(tl.max(tl.max(tl.abs(y), axis=1), axis=0), absmax_floor)  # the row's
    scale = tl.div_rn(absmax, 448.0) + tl.zeros([BLOCKS], tl.float32)
    q = tl.clamp(tl.div_rn(y, scale[:, None]), -448.0, 448.0)
    _store(codes_ptr, scales_ptr, row, cols, offsets, mask, blocks, e4m3_bits(q), scale)


@triton.jit
def kernel_absmax_as_scale(y_ptr, codes_ptr, scales_ptr, cols, y_row_stride, absmax_floor,
                           BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    y, offsets, mask, blocks = _tile(y_ptr, row, cols, y_row_stride, BLOCKS)
    absmax = tl.maximum(tl.max(tl.abs(y), axis=1), absmax_floor)
    q = tl.clamp(tl.div_rn(y, tl.div_rn(absmax, 448.0)[:, None]), -448.0, 448.0)
    _store(codes_ptr, scales_ptr, row, cols, offsets, mask, blocks, e4m3_bits(q), absmax)


@triton.jit
def kernel_scales_block_major(y_ptr, codes_ptr, scales_ptr, cols, y_row_stride, absmax_floor,
                              BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    y, offsets, mask, blocks = _tile(y_ptr, row, cols, y_row_stride, BLOCKS)
    scale = tl.div_rn(tl.maximum(tl.max(tl.abs(y), axis=1), absmax_floor), 448.0)
    q = tl.clamp(tl.div_rn(y, scale[:, None]), -448.0, 448.0)
    tl.store(codes_ptr + row * cols + offsets, e4m3_bits(q), mask=mask)
    tl.store(scales_ptr + blocks * tl.num_programs(0) + row, scale,
             mask=blocks < tl.cdiv(cols, 128))


@triton.jit
def kernel_scales_shifted(y_ptr, codes_ptr, scales_ptr, cols, y_row_stride, absmax_floor,
                          BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    y, offsets, mask, blocks = _tile(y_ptr, row, cols, y_row_stride, BLOCKS)
    scale = tl.div_rn(tl.maximum(tl.max(tl.abs(y), axis=1), absmax_floor), 448.0)
    q = tl.clamp(tl.div_rn(y, scale[:, None]), -448.0, 448.0)
    tl.store(codes_ptr + row * cols + offsets, e4m3_bits(q), mask=mask)
    n_blocks = tl.cdiv(cols, 128)
    tl.store(scales_ptr + row * n_blocks + blocks + 1, scale, mask=blocks < n_blocks)


@triton.jit
def kernel_scales_unmasked(y_ptr, codes_ptr, scales_ptr, cols, y_row_stride, absmax_floor,
                           BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    y, offsets, mask, blocks = _tile(y_ptr, row, cols, y_row_stride, BLOCKS)
    scale = tl.div_rn(tl.maximum(tl.max(tl.abs(y), axis=1), absmax_floor), 448.0)
    q = tl.clamp(tl.div_rn(y, scale[:, None]), -448.0, 448.0)
    tl.store(codes_ptr + row * cols + offsets, e4m3_bits(q), mask=mask)
    tl.store(scales_ptr + row * tl.cdiv(cols, 128) + blocks, scale)  # all BLOCKS of them


@triton.jit
def kernel_row_stride_ignored(y_ptr, codes_ptr, scales_ptr, cols, y_row_stride, absmax_floor,
                              BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    y, offsets, mask, blocks = _tile(y_ptr, row, cols, cols, BLOCKS)  # rows cols apart
    scale = tl.div_rn(tl.maximum(tl.max(tl.abs(y), axis=1), absmax_floor), 448.0)
    q = tl.clamp(tl.div_rn(y, scale[:, None]), -448.0, 448.0)
    _store(codes_ptr, scales_ptr, row, cols, offsets, mask, blocks, e4m3_bits(q), scale)


@triton.jit
def kernel_without_other(y_ptr, codes_ptr, scales_ptr, cols, y_row_stride, absmax_floor,
                         BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    blocks = tl.arange(0, BLOCKS)
    offsets = blocks[:, None] * 128 + tl.arange(0, 128)[None, :]
    mask = offsets < cols
    y = tl.load(y_ptr + row * y_row_stride + offsets, mask=mask).to(tl.float32)  # no other=
    scale = tl.div_rn(tl.maximum(tl.max(tl.abs(y), axis=1), absmax_floor), 448.0)
    q = tl.clamp(tl.div_rn(y, scale[:, None]), -448.0, 448.0)
    _store(codes_ptr, scales_ptr, row, cols, offsets, mask, blocks, e4m3_bits(q), scale)


@triton.jit
def kernel_slash_division(y_ptr, codes_ptr, scales_ptr, cols, y_row_stride, absmax_floor,
                          BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    y, offsets, mask, blocks = _tile(y_ptr, row, cols, y_row_stride, BLOCKS)
    scale = tl.maximum(tl.max(tl.abs(y), axis=1), absmax_floor) / 448.0
    q = tl.clamp(y / scale[:, None], -448.0, 448.0)  # right in the interpreter only
    _store(codes_ptr, scales_ptr, row, cols, offsets, mask, blocks, e4m3_bits(q), scale)


@triton.jit
def kernel_triton_cast(y_ptr, codes_ptr, scales_ptr, cols, y_row_stride, absmax_floor,
                       BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    y, offsets, mask, blocks = _tile(y_ptr, row, cols, y_row_stride, BLOCKS)
    scale = tl.div_rn(tl.maximum(tl.max(tl.abs(y), axis=1), absmax_floor), 448.0)
    q = tl.clamp(tl.div_rn(y, scale[:, None]), -448.0, 448.0)
    codes = q.to(tl.float8e4nv).to(tl.uint8, bitcast=True)  # the interpreter's cast
    _store(codes_ptr, scales_ptr, row, cols, offsets, mask, blocks, codes, scale)


@triton.jit
def kernel_fp8_values(y_ptr, codes_ptr, scales_ptr, cols, y_row_stride, absmax_floor,
                      BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    y, offsets, mask, blocks = _tile(y_ptr, row, cols, y_row_stride, BLOCKS)
    scale = tl.div_rn(tl.maximum(tl.max(tl.abs(y), axis=1), absmax_floor), 448.0)
    q = tl.clamp(tl.div_rn(y, scale[:, None]), -448.0, 448.0)
    _store(codes_ptr, scales_ptr, row, cols, offsets, mask, blocks, q.to(tl.float8e4nv), scale)


@triton.jit
def kernel_library_quantize_tile(y_ptr, codes_ptr, scales_ptr, cols, y_row_stride, absmax_floor,
                                 BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    y, offsets, mask, blocks = _tile(y_ptr, row, cols, y_row_stride, BLOCKS)
    codes, scale = quantize_tile(y, absmax_floor, 448.0, True, False)  # the library's steps 4-5
    _store(codes_ptr, scales_ptr, row, cols, offsets, mask, blocks, codes, scale)


quantize_kernel = Exercise(
    "quantize_kernel",
    "Write the quantization step as a @triton.jit kernel quantize(y_ptr, codes_ptr, scales_ptr, "
    "cols, y_row_stride, absmax_floor, BLOCKS: tl.constexpr), one program per row: for each "
    "128-column block, scale = max(max |y|, absmax_floor) / 448 and codes = e4m3(clamp(y / "
    "scale, -448, 448)), bit for bit as the specification's quantize_blocks. answer = your kernel",
    _grade_quantizer, solution=solution_quantize_kernel,
    mistakes={"no floor": kernel_no_floor, "a fixed floor of 1e-4": kernel_fixed_floor,
              "y * (448 / absmax)": kernel_times_reciprocal,
              "y * (1 / scale)": kernel_times_inverse_scale,
              "the signed max": kernel_signed_max, "one scale per row": kernel_one_scale_per_row,
              "stores absmax as the scale": kernel_absmax_as_scale,
              "scales block-major": kernel_scales_block_major,
              "scales one place off": kernel_scales_shifted,
              "unmasked scale store": kernel_scales_unmasked,
              "y's row stride ignored": kernel_row_stride_ignored,
              "masked load without other=": kernel_without_other,
              "/ instead of tl.div_rn": kernel_slash_division,
              "Triton's fp8 cast": kernel_triton_cast,
              "fp8 values into uint8": kernel_fp8_values,
              "the library's quantize_tile": kernel_library_quantize_tile,
              "a Python function": lambda y: y, "text": "def quantize(y_ptr): ..."})
