"""Chapter 4's looped kernel, written from its specification, and the prediction of its cost."""
import math
import time

import pytest
import triton
import triton.language as tl

from fusedrms import env
from fusedrms.exercises import ch04_looped as L
from fusedrms.exercises import grader
# the row kernel with a fixed tl.arange(0, 512) in place of BLOCK_SIZE, as chapter 4's tests build it
from tests.exercises.test_ch04 import _fixed_512
from tests.exercises.kernel_contract import (assert_every_mistake_expected_with_its_own_hint,
                                          assert_named_mistake)

E = L.build_looped

# each typical mistake: (words its message must hold, words its hint must hold)
EXPECTED = {
    "no mask on the last chunk": ("past the end of its row", "mask = cols_here < cols"),
    "masked load without other=": ("without other=", "other=0.0"),
    "divides by BLOCK": ("BLOCK = 16", "cols = 13"),
    "accumulates in the input's dtype": ("bfloat16", "Accumulate in fp32"),
    "pass 1 reads the first chunk only": ("first chunk only", "walk the whole row"),
    "pass 2 stores the first chunk only": ("never written", "Pass 2 walks the whole row"),
    "rows cols apart, strides ignored": ("row 0 is right", "x_row_stride"),
}


def test_the_solution_is_accepted():
    fb = E.check(E.solution)
    assert fb.ok, str(fb)


@pytest.mark.parametrize("label", list(E.mistakes))
def test_each_typical_mistake_gets_its_own_hint(label):
    assert_named_mistake(E, label, EXPECTED)


def test_every_mistake_has_an_expected_hint_and_the_hints_differ():
    assert_every_mistake_expected_with_its_own_hint(E, EXPECTED)


def test_the_cases_cover_the_shapes_a_looped_kernel_breaks_on():
    kinds = {("below" if c.cols < c.block else "equal" if c.cols == c.block else
              "multiple" if c.cols % c.block == 0 else "ragged") for c in L.CASES}
    assert kinds == {"below", "equal", "multiple", "ragged"}
    assert any(c.rows > 1 and c.cols % 2 for c in L.CASES)  # odd widths, several rows
    assert len({(c.block, c.num_warps) for c in L.CASES}) >= 2
    assert {c.dtype for c in L.CASES} > {L.torch.float32}


# ---- other right forms pass ----

@triton.jit
def _scalar_accumulator(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                        BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK)
    total = 0.0
    for start in range(0, cols, BLOCK):
        mask = start + offsets < cols
        x = tl.load(x_ptr + row * x_row_stride + start + offsets, mask=mask, other=0.0)
        x = x.to(tl.float32)
        total += tl.sum(x * x, axis=0)
    r = 1.0 / tl.sqrt(total / cols + eps)
    for start in range(0, cols, BLOCK):
        mask = start + offsets < cols
        x = tl.load(x_ptr + row * x_row_stride + start + offsets, mask=mask, other=0.0)
        w = tl.load(w_ptr + start + offsets, mask=mask)  # no other=: never stored
        y = x.to(tl.float32) * r * w.to(tl.float32)
        tl.store(y_ptr + row * y_row_stride + start + offsets, y.to(y_ptr.dtype.element_ty),
                 mask=mask)


@triton.jit
def _masked_tail_only(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                      BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    offsets = tl.arange(0, BLOCK_SIZE)
    whole = cols - cols % BLOCK_SIZE
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, whole, BLOCK_SIZE):  # whole chunks: no mask needed
        x = tl.load(x_row + start + offsets).to(tl.float32)
        acc += x * x
    tail = whole + offsets
    x = tl.load(x_row + tail, mask=tail < cols, other=0.0).to(tl.float32)
    acc += x * x
    r = tl.rsqrt(tl.sum(acc, axis=0) / cols + eps)
    for start in range(0, cols, BLOCK_SIZE):
        here = start + offsets
        mask = here < cols
        x = tl.where(mask, tl.load(x_row + here, mask=mask), 0.0).to(tl.float32)
        w = tl.load(w_ptr + here, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * y_row_stride + here, (x * r * w).to(y_ptr.dtype.element_ty),
                 mask=mask)


@triton.jit
def _chunks_of_512(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                   BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, 512)  # the launch's BLOCK_SIZE ignored: chunks of 512
    acc = tl.zeros([512], dtype=tl.float32)
    for start in range(0, cols, 512):
        mask = start + offsets < cols
        x = tl.load(x_ptr + row * x_row_stride + start + offsets, mask=mask, other=0.0)
        acc += x.to(tl.float32) * x.to(tl.float32)
    r = tl.rsqrt(tl.sum(acc, axis=0) / cols + eps)
    for start in range(0, cols, 512):
        mask = start + offsets < cols
        x = tl.load(x_ptr + row * x_row_stride + start + offsets, mask=mask, other=0.0)
        w = tl.load(w_ptr + start + offsets, mask=mask, other=0.0)
        tl.store(y_ptr + row * y_row_stride + start + offsets,
                 (x.to(tl.float32) * r * w.to(tl.float32)).to(y_ptr.dtype.element_ty), mask=mask)


@pytest.mark.parametrize("kernel", [_fixed_512, _chunks_of_512],
                         ids=["a row kernel of 512 lanes", "chunks of 512"])
def test_a_kernel_that_ignores_the_block_it_is_given_fails(kernel):
    assert any(c.cols > 1024 and c.cols & (c.cols - 1) for c in L.CASES)
    fb = E.check(kernel)
    assert not fb.ok and "BLOCK_SIZE = " in fb.message, str(fb)
    assert "start + tl.arange(0, BLOCK_SIZE)" in fb.hint


def test_without_the_load_audit_a_row_kernel_of_512_lanes_fails_on_the_wide_row():
    """The wide case alone shows it, where this Triton's interpreter cannot audit the loads."""
    case = next(c for c in L.CASES if c.cols > 1024)
    run = grader.run(_fixed_512, L.audited_runs, (case,))[0]
    run.loads = []
    fb = L.diagnose(run, run, case, case.where())
    assert not fb.ok and "only the first 512 of each row's 1100" in fb.message, str(fb)


@pytest.mark.parametrize("kernel", [_scalar_accumulator, _masked_tail_only],
                         ids=["scalar accumulator", "unmasked whole chunks, masked tail"])
def test_other_right_forms_pass(kernel):
    fb = E.check(kernel)
    assert fb.ok, str(fb)


# ---- junk gets a verdict, never a traceback ----

@triton.jit
def _two_arguments(x_ptr, BLOCK_SIZE: tl.constexpr):
    pass


@triton.jit
def _raises(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets) + no_such_name)  # noqa: F821


@triton.jit
def _endless(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps, BLOCK_SIZE: tl.constexpr):
    i = 0
    while i >= 0:
        i += 1


@pytest.mark.parametrize("bad", [None, "my_looped_kernel", 42, math.nan, lambda x: x,
                                 _two_arguments, _raises],
                         ids=["None", "a string", "a number", "NaN", "a function",
                              "two arguments", "raises"])
def test_junk_gets_a_verdict(bad):
    fb = E.check(bad)
    assert not fb.ok and fb.message and not fb.error
    assert "Traceback" not in str(fb) and len(fb.message) < 600


@pytest.mark.skipif(env.current().on_gpu, reason="the interpreter's loop never ends; compiled it may")
def test_an_endless_kernel_is_stopped(monkeypatch):
    monkeypatch.setattr(grader, "LIMIT_S", 3.0)
    start = time.time()
    fb = E.check(_endless)
    assert not fb.ok and "did not finish" in fb.message and fb.hint
    assert time.time() - start < 3.0 + 60


def test_the_page_shows_the_librarys_kernel_only_in_the_folded_solution():
    """The chapter's text never lists the looped kernel (the reader writes it); the dropdown after
    the exercise holds the library's kernel, statement for statement (wrapped to the page's 80
    columns)."""
    import ast
    import json
    import re
    from pathlib import Path

    from fusedrms.kernels import rmsnorm as T
    from fusedrms.viz import file_section

    path = Path(__file__).resolve().parents[2] / "chapters" / "04_triton.ipynb"
    cells = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]]
    library = ast.dump(ast.parse(file_section(T.__file__, "looped-kernel")))
    shown = [(i, block) for i, text in enumerate(cells)
             for block in re.findall(r"```python\n(.*?)```", text, re.S)
             if "def rmsnorm_looped_kernel" in block]
    assert len(shown) == 1
    where, block = shown[0]
    assert ast.dump(ast.parse(block)) == library
    assert ":class: dropdown" in cells[where] and max(map(len, block.splitlines())) <= 80
    assert not any("rmsnorm_looped_kernel)" in text for text in cells)  # no listing of it
    asked = next(i for i, text in enumerate(cells) if "build_looped.check" in text)
    assert asked == where - 1


@pytest.mark.gpu
def test_on_the_gpu_the_solution_and_the_other_forms_pass_compiled():
    for kernel in (E.solution, _scalar_accumulator, _masked_tail_only):
        fb = E.check(kernel)
        assert fb.ok and "compiled for the GPU" in fb.message, str(fb)


# ---- predict, then check ----

P = L.predict_looped_cost


def test_the_prediction_is_graded_against_the_recording():
    found = L.recorded_ratios()
    assert found is not None and 1.0 < found["looped_cost"] < found["looped_bytes"] < 1.51
    assert P.check(P.solution).ok
    assert P.check(f"{found['looped_cost']:.2f}x").ok  # a unit, as written on the page
    for label, value in P.mistakes.items():
        fb = P.check(value)
        assert not fb.ok and fb.hint and f"{found['looped_cost']:.2f}×" in fb.message, label


def test_each_wrong_prediction_says_what_its_gap_teaches():
    assert "not free" in P.check(1.0).hint
    assert "cache" in P.check("1.5").hint
    assert "do not double" in P.check(2).hint
    assert "looped / row" in P.check(0.73).hint
    assert "faster" in P.check(0.5).message


@pytest.mark.parametrize("bad", [None, "abc", math.nan, math.inf, "\u22121.4", 0, [1, 2], "1.4 µs"])
def test_a_malformed_prediction_gets_a_message(bad):
    fb = P.check(bad)
    assert not fb.ok and fb.message and not fb.error
