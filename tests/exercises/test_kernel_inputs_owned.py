"""A reader's kernel runs as Python under Triton's interpreter, in the grader's child: it can reach
the child's own copies of the inputs (through the stack) and rewrite them. The verdict must come
from inputs the parent made, so that zeroing the grader's x and storing zeros does not pass."""
import sys

import pytest
import triton
import triton.language as tl

from fusedrms.exercises import ch04, ch04_looped, ch09_dx


@triton.jit
def _zeroes_the_graders_x(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                          BLOCK_SIZE: tl.constexpr):
    f = sys._getframe(1)
    while f is not None and "x_buf" not in f.f_locals:
        f = f.f_back
    f.f_locals["x"].zero_()  # the tensor the child sends back as "the input"
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK_SIZE)
    tl.store(y_ptr + row * y_row_stride + offsets, tl.zeros([BLOCK_SIZE], tl.float32)
             .to(y_ptr.dtype.element_ty), mask=offsets < cols)


@triton.jit
def _zeroes_the_graders_dy(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, cols, x_row_stride,
                           dy_row_stride, dx_row_stride, BLOCK_SIZE: tl.constexpr):
    f = sys._getframe(1)
    while f is not None and "x_buf" not in f.f_locals:
        f = f.f_back
    f.f_locals["dy"].zero_()
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK_SIZE)
    tl.store(dx_ptr + row * dx_row_stride + offsets, tl.zeros([BLOCK_SIZE], tl.float32)
             .to(dx_ptr.dtype.element_ty), mask=offsets < cols)


@pytest.mark.parametrize("exercise, kernel", [
    (ch04.fix_block_denominator, _zeroes_the_graders_x),
    (ch04.fix_weight_load, _zeroes_the_graders_x),
    (ch04_looped.build_looped, _zeroes_the_graders_x),
    (ch09_dx.build_dx, _zeroes_the_graders_dy)])
def test_a_kernel_that_rewrites_the_graders_inputs_does_not_pass(exercise, kernel):
    feedback = exercise.check(kernel)
    assert not feedback.ok and not feedback.error, str(feedback)
    assert "differs from the reference" in feedback.message or "dx" in feedback.message
