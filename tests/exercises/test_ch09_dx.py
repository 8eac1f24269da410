"""Chapter 9's dx kernel, written from the formula, and the prediction of the backward's time."""
import math
import time

import pytest
import triton
import triton.language as tl

from fusedrms import env
from fusedrms.exercises import ch09_dx as D
from fusedrms.exercises import grader
from tests.exercises.kernel_contract import (assert_every_mistake_expected_with_its_own_hint,
                                          assert_named_mistake)

E = D.build_dx

EXPECTED = {  # (words its message must hold, words its hint must hold)
    "the mean term dropped": ("as if r were a constant", "r depends on every x"),
    "mean over BLOCK_SIZE": ("over BLOCK_SIZE instead of cols", "but are not columns"),
    "w forgotten in the projection": ("w left out of the second term", "Both terms use g"),
    "r instead of r cubed": ("r where r³ belongs", "r² comes with it"),
    "masked loads without other=": ("without other=", "other=0.0"),
    "bf16 arithmetic": ("bfloat16", "Compute in fp32"),
    "rows cols apart, strides ignored": ("row 0 of dx is right", "dy_row_stride"),
}


def test_the_solution_is_accepted():
    fb = E.check(E.solution)
    assert fb.ok, str(fb)


@pytest.mark.parametrize("label", list(E.mistakes))
def test_each_typical_mistake_gets_its_own_hint(label):
    assert_named_mistake(E, label, EXPECTED)


def test_every_mistake_has_an_expected_hint_and_the_hints_differ():
    assert_every_mistake_expected_with_its_own_hint(E, EXPECTED)


def test_the_models_are_the_formula_with_one_step_wrong():
    """Each typical mistake's model differs from dx on the first case (else it could not be
    named), and the formula itself is the library's reference."""
    run = D.DxRun(D.CASES[0], *(D.torch.randn(3, 13, dtype=D.torch.float64) for _ in range(1)),
                  D.torch.randn(13, dtype=D.torch.float64),
                  D.torch.randn(3, 13, dtype=D.torch.float64),
                  D.torch.rand(3, 1, dtype=D.torch.float64) + 0.5,
                  D.torch.zeros(3, 13), 0)
    ref = D.reference.rmsnorm_backward(run.x, run.w, run.dy, accum=D.torch.float64,
                                       rows_scale=run.r)["dx"]
    for key, model in D._models(run).items():
        assert not D.torch.allclose(model, ref), key


# ---- other right forms pass ----

@triton.jit
def _r_cubed_form(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, cols, x_row_stride, dy_row_stride,
                  dx_row_stride, BLOCK: tl.constexpr):
    """r·g − (r³/n)·x·Σ(g·x), the form the library's docstring gives too."""
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask)
    x = tl.where(mask, x, 0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * dy_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)  # g enters the sum
    r = tl.load(rstd_ptr + row).to(tl.float32)
    g = dy * w
    dot = tl.sum(g * x, axis=0)
    dx = r * g - (r * r * r / cols) * x * dot
    tl.store(dx_ptr + row * dx_row_stride + offsets, dx.to(dx_ptr.dtype.element_ty), mask=mask)


def test_another_right_form_passes():
    fb = E.check(_r_cubed_form)
    assert fb.ok, str(fb)


# ---- junk gets a verdict, never a traceback ----

@triton.jit
def _forward_signature(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                       BLOCK_SIZE: tl.constexpr):
    pass


@triton.jit
def _raises(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, cols, x_row_stride, dy_row_stride,
            dx_row_stride, BLOCK_SIZE: tl.constexpr):
    raise ValueError("no dx here")


@triton.jit
def _endless(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, cols, x_row_stride, dy_row_stride,
             dx_row_stride, BLOCK_SIZE: tl.constexpr):
    i = 0
    while i >= 0:
        i += 1


@pytest.mark.parametrize("bad", [None, "my_dx_kernel", 42, math.nan, lambda x, w, dy: x,
                                 _forward_signature, _raises],
                         ids=["None", "a string", "a number", "NaN", "a function",
                              "the forward's signature", "raises"])
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


def test_the_page_shows_the_solution_only_folded():
    import json
    from pathlib import Path

    from fusedrms.viz import file_section

    path = Path(__file__).resolve().parents[2] / "chapters" / "09_backward.ipynb"
    cells = json.loads(path.read_text())["cells"]
    section = file_section(D.__file__, "dx-kernel")
    holders = [c for c in cells if section in "".join(c["source"])]
    assert len(holders) == 1 and ":class: dropdown" in "".join(holders[0]["source"])
    order = [i for i, c in enumerate(cells) if "build_dx" in "".join(c["source"])]
    assert order and order[0] < cells.index(holders[0])


@pytest.mark.gpu
def test_on_the_gpu_the_right_forms_pass_compiled():
    for kernel in (E.solution, _r_cubed_form):
        fb = E.check(kernel)
        assert fb.ok and "compiled for the GPU" in fb.message, str(fb)


# ---- predict, then check ----

P = D.predict_backward_time


def test_the_prediction_is_graded_against_the_recording():
    found = D.recorded_backward()
    assert found is not None and found["floor_us"] < found["us"]
    assert P.check(P.solution).ok
    assert P.check(f"{found['us'] / 1000:.5f} ms").ok  # any time unit
    for label, value in P.mistakes.items():
        fb = P.check(value)
        assert not fb.ok and fb.hint and f"{found['us']:.1f} µs" in fb.message, label


def test_each_wrong_prediction_says_what_its_gap_teaches():
    found = D.recorded_backward()
    assert "gap is the lesson" in P.check(round(found["floor_us"], 2)).hint
    assert "No kernel beats" in P.check(found["floor_us"] / 3).hint
    assert "faster than that" in P.check(3 * found["us"]).hint


@pytest.mark.parametrize("bad", [None, "abc", math.nan, math.inf, "\u221216", 0, [1, 2], "16 GB/s"])
def test_a_malformed_prediction_gets_a_message(bad):
    fb = P.check(bad)
    assert not fb.ok and fb.message and not fb.error
