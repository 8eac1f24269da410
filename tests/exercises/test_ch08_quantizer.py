"""Chapter 8's quantizer exercise: the reader's kernel is graded bit for bit against the
specification; each typical mistake is named with its own hint; junk gets a verdict."""
import time

import pytest
import torch
import triton
import triton.language as tl

from fusedrms import env
from fusedrms.exercises import ch08, ch08_quantizer as Q, grader
from fusedrms.kernels import rmsnorm_fp8_spec as spec
from fusedrms.kernels.rmsnorm_fp8 import divide_by_block_scale, e4m3_bits

EXERCISE = Q.quantize_kernel

# mistake -> words its verdict must hold (the message or the hint)
NAMED = {
    "no floor": "0 / 0 = NaN",
    "a fixed floor of 1e-4": "absmax_floor argument",
    "y * (448 / absmax)": "y * (448 / absmax)",
    "y * (1 / scale)": "y * (1 / scale)",
    "the signed max": "tl.abs(y)",
    "one scale per row": "axis=1",
    "stores absmax as the scale": "absmax / 448",
    "scales block-major": "block-major",
    "scales one place off": "one place further along",
    "unmasked scale store": "both store",
    "y's row stride ignored": "y_row_stride",
    "masked load without other=": "other=0.0",
    "/ instead of tl.div_rn": "tl.div_rn",
    "Triton's fp8 cast": "e4m3_bits",
    "fp8 values into uint8": "uint8",
    "the library's quantize_tile": "the answer itself",
    "a Python function": "@triton.jit",
    "text": "@triton.jit",
}


def test_the_exercise_is_chapter_8s():
    assert EXERCISE in ch08.ALL


def test_the_solution_passes():
    fb = EXERCISE.check(EXERCISE.solution)
    assert fb.ok, str(fb)
    assert "bit for bit" in fb.message


def test_every_mistake_is_listed_here():
    assert set(NAMED) == set(EXERCISE.mistakes)


@pytest.mark.parametrize("label", sorted(NAMED))
def test_each_mistake_gets_its_own_hint(label):
    fb = EXERCISE.check(EXERCISE.mistakes[label])
    assert not fb.ok, label
    assert NAMED[label] in fb.message + " " + fb.hint, str(fb)
    assert "Traceback" not in fb.message and len(fb.message) < 700


def test_the_hints_differ_between_the_arithmetic_mistakes():
    verdicts = {label: str(EXERCISE.check(EXERCISE.mistakes[label]))
                for label in ("y * (448 / absmax)", "y * (1 / scale)", "no floor",
                              "a fixed floor of 1e-4", "the signed max")}
    assert len(set(verdicts.values())) == len(verdicts)


def test_the_cases_hold_the_blocks_that_expose_the_mistakes():
    tiny_case, zero_case = Q.QUANT_CASES[2], Q.QUANT_CASES[1]
    y = Q.quant_inputs(zero_case)
    row, block = Q.ZERO_AT
    assert bool((y[row, block * 128:(block + 1) * 128] == 0).all())
    y = Q.quant_inputs(tiny_case)
    row, block = Q.TINY_AT
    assert float(y[row, block * 128:(block + 1) * 128].float().abs().max()) < spec.ABSMAX_FLOOR
    assert tiny_case.floor != spec.ABSMAX_FLOOR and tiny_case.pad and tiny_case.cols % 128
    assert {(c.rows, c.cols) for c in Q.QUANT_CASES} >= {(1, 128), (3, 7168)}


@pytest.mark.parametrize("absmax", [9.5, 6.5])
def test_the_tie_values_really_change_a_shortcuts_code(absmax):
    ties = Q.tie_values(absmax)
    assert len(ties) >= 8
    a = torch.tensor(absmax)
    scale = a / 448
    right = Q._code_of(ties / scale)
    assert bool((right != Q._code_of(ties * (1 / scale))).any())
    if absmax == 6.5:
        assert bool((right != Q._code_of(ties * (448 / a))).any())


# ---- junk: a verdict, never a traceback ----

@triton.jit
def _raises_kernel(y_ptr, codes_ptr, scales_ptr, cols, y_row_stride, absmax_floor,
                   BLOCKS: tl.constexpr):
    offsets = tl.arange(0, 100)  # not a power of two: Triton refuses
    tl.store(codes_ptr + offsets, tl.zeros([100], tl.uint8))


@triton.jit
def _endless_kernel(y_ptr, codes_ptr, scales_ptr, cols, y_row_stride, absmax_floor,
                    BLOCKS: tl.constexpr):
    i = 0
    while i < cols:
        i = i * 1  # never moves


@triton.jit
def _three_args(y_ptr, codes_ptr, BLOCKS: tl.constexpr):
    pass


@triton.jit
def _blocks_not_constexpr(y_ptr, codes_ptr, scales_ptr, cols, y_row_stride, absmax_floor, BLOCKS):
    pass


@triton.jit
def _one_reciprocal_per_block(y_ptr, codes_ptr, scales_ptr, cols, y_row_stride, absmax_floor,
                              BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    blocks = tl.arange(0, BLOCKS)
    offsets = blocks[:, None] * 128 + tl.arange(0, 128)[None, :]
    mask = offsets < cols
    y = tl.load(y_ptr + row * y_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    absmax = tl.maximum(tl.max(tl.abs(y), axis=1), absmax_floor)
    scale = tl.div_rn(absmax, 448.0)
    q = tl.clamp(divide_by_block_scale(y, scale), -448.0, 448.0)  # the library's exact shortcut
    tl.store(codes_ptr + row * cols + offsets, e4m3_bits(q), mask=mask)
    n_blocks = tl.cdiv(cols, 128)
    tl.store(scales_ptr + row * n_blocks + blocks, scale, mask=blocks < n_blocks)


@pytest.mark.parametrize("junk", [None, "quantize", 3, [1, 2], lambda y: y, print],
                         ids=["None", "text", "number", "list", "function", "builtin"])
def test_junk_gets_a_message(junk):
    fb = EXERCISE.check(junk)
    assert not fb.ok and fb.message and not fb.error


def test_a_kernel_that_raises_gets_one_line():
    fb = EXERCISE.check(_raises_kernel)
    assert not fb.ok and "raised" in fb.message and "\n" not in fb.message, str(fb)


def test_an_endless_kernel_is_stopped(monkeypatch):
    monkeypatch.setattr(grader, "LIMIT_S", 3.0)
    start = time.time()
    fb = EXERCISE.check(_endless_kernel)
    assert not fb.ok and "did not finish" in fb.message, str(fb)
    assert time.time() - start < 60


def test_a_wrong_signature_is_named():
    fb = EXERCISE.check(_three_args)
    assert not fb.ok and "7" in fb.message and "absmax_floor" in fb.message
    fb = EXERCISE.check(_blocks_not_constexpr)
    assert not fb.ok and "tl.constexpr" in fb.message


def test_a_kernel_written_differently_passes():
    assert EXERCISE.check(_one_reciprocal_per_block).ok


def test_page_solution_is_the_checked_solution():
    """The dropdown on the page shows exactly the code the tests accept."""
    from pathlib import Path

    import nbformat

    from fusedrms.viz import file_section

    nb = nbformat.read(Path(__file__).resolve().parents[2] / "chapters" / "08_fp8_quant.ipynb", 4)
    section = file_section(Q.__file__, "quantize-solution")
    assert any(c.cell_type == "markdown" and section in c.source for c in nb.cells)


@pytest.mark.gpu
def test_on_the_gpu_the_solution_passes_compiled_and_the_mistakes_fail():
    if not env.current().on_gpu:
        pytest.skip("needs a GPU")
    fb = EXERCISE.check(EXERCISE.solution)
    assert fb.ok and "compiled for the GPU" in fb.message, str(fb)
    for label, mistake in EXERCISE.mistakes.items():
        assert not EXERCISE.check(mistake).ok, label
