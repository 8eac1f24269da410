"""Chapter 4 exercises: solutions accepted, every typical mistake rejected with a hint."""
import math

import pytest
import torch
import triton
import triton.language as tl

from fusedrms import env, records
from fusedrms.exercises import ch04
from fusedrms.exercises.core import Feedback

ENV = env.current()


@pytest.mark.parametrize("exercise", ch04.KERNEL_EXERCISES, ids=lambda e: e.name)
def test_solution_is_accepted(exercise):
    feedback = exercise.check(exercise.solution)
    assert feedback.ok, str(feedback)


@pytest.mark.parametrize("exercise,label", [(e, m) for e in ch04.ALL for m in e.mistakes],
                         ids=lambda v: v if isinstance(v, str) else v.name)
def test_typical_mistake_is_rejected_with_a_hint(exercise, label, monkeypatch, tmp_path):
    monkeypatch.setattr(records, "DATA_DIR", tmp_path)  # no recorded sweep, whatever is committed
    feedback = exercise.check(exercise.mistakes[label])
    assert not feedback.ok, f"{exercise.name} accepted the mistake {label!r}"
    assert feedback.hint, f"{exercise.name}: no hint for {label!r}: {feedback}"


def test_divide_by_block_is_named():
    fb = ch04.fix_block_denominator.check(ch04.kernel_divides_by_block)
    assert "BLOCK_SIZE" in fb.message and "cols = 13" in fb.hint


def test_weight_as_matrix_is_named():
    fb = ch04.fix_weight_load.check(ch04.kernel_weight_as_matrix)
    assert "matrix" in fb.message and "w_ptr + offsets" in fb.hint


@pytest.mark.parametrize("exercise", ch04.ALL, ids=lambda e: e.name)
@pytest.mark.parametrize("bad", [None, "abc", float("nan"), [1, 2, 3], 42, math.inf,
                                 lambda x: x, {"num_warps": "many"}, {"num_warps": 3},
                                 {"num_warps": 8, "timings_us": {8: float("nan"), 4: 1.0}},
                                 {"num_warps": 8, "timings_us": [1, 2]}])
def test_malformed_answers_get_a_message_not_a_traceback(exercise, bad):
    feedback = exercise.check(bad)
    assert not feedback.ok
    assert feedback.message


@triton.jit
def _kernel_that_raises(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                        BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < cols) + no_such_name)  # noqa: F821


@triton.jit
def _kernel_with_two_args(x_ptr, BLOCK_SIZE: tl.constexpr):
    pass


@triton.jit
def _kernel_that_stores_everywhere(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                                   BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK_SIZE)
    tl.store(y_ptr + row * y_row_stride + offsets, tl.zeros([BLOCK_SIZE], tl.float32))


@pytest.mark.parametrize("exercise", ch04.KERNEL_EXERCISES, ids=lambda e: e.name)
def test_kernel_that_raises_gets_one_readable_line(exercise):
    fb = exercise.check(_kernel_that_raises)
    assert not fb.ok and "raised" in fb.message and "\n" not in fb.message
    assert len(fb.message) < 500


@pytest.mark.parametrize("exercise", ch04.KERNEL_EXERCISES, ids=lambda e: e.name)
def test_wrong_signature_and_stray_stores(exercise):
    fb = exercise.check(_kernel_with_two_args)
    assert not fb.ok and "BLOCK_SIZE" in fb.message
    fb = exercise.check(_kernel_that_stores_everywhere)
    assert not fb.ok and "outside" in fb.message


def test_run_reader_kernel_layout():
    run = ch04.run_reader_kernel(ch04.rmsnorm_row_kernel, 3, 13)
    assert run.y.shape == (3, 13) and run.stray_stores == 0
    assert torch.isfinite(run.y).all()


# ---- choose num_warps ----

def _record_sweep(tmp_path, monkeypatch, times, cols=ch04.WARPS_COLS, dtype="bfloat16"):
    monkeypatch.setattr(records, "DATA_DIR", tmp_path)
    recs = [dict(group="width sweep", rows=ch04.WARPS_ROWS, cols=cols, dtype=dtype, num_warps=k,
                 median_us=v, gbps=1.0) for k, v in times.items()]
    recs.append({"rows": "garbage"})  # a malformed record is skipped, not fatal
    records.write(tmp_path / "h200" / "triton_warps.json", recs)


@pytest.mark.skipif(ENV.on_gpu, reason="on a GPU the checker measures instead of reading records")
def test_warps_without_gpu_or_records_explains_and_does_not_fail(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "DATA_DIR", tmp_path)
    fb = ch04.choose_num_warps.check({"num_warps": 8, "timings_us": {4: 30.0, 8: 28.0}})
    assert isinstance(fb, ch04.NotCheckedHere) and isinstance(fb, Feedback)
    assert "needs a GPU" in fb.message and str(fb).startswith("Not checked here")
    assert "Not checked here" in fb._repr_html_()
    assert ch04.warps_solution() is None


@pytest.mark.skipif(ENV.on_gpu, reason="on a GPU the checker measures instead of reading records")
def test_warps_against_a_recorded_sweep(tmp_path, monkeypatch):
    _record_sweep(tmp_path, monkeypatch, {4: 31.0, 8: 27.5, 16: 29.9})
    assert ch04.recorded_warps() is not None
    solution = ch04.warps_solution()
    assert solution == {"num_warps": 8, "timings_us": {4: 31.0, 8: 27.5, 16: 29.9}}
    assert ch04.choose_num_warps.check(solution).ok
    # timings that are not the recorded ones are rejected (16 warps took 29.9 in the record)
    fb = ch04.choose_num_warps.check({"num_warps": 8, "timings_us": {8: 27.5, 16: 28.0}})
    assert not fb.ok and "29.9" in fb.message
    fb = ch04.choose_num_warps.check({"num_warps": 16, "timings_us": {8: 27.5, 16: 29.9}})
    assert not fb.ok and fb.hint  # 29.9 is 8.7% slower than 27.5
    fb = ch04.choose_num_warps.check({"num_warps": 32, "timings_us": {32: 20.0, 8: 27.5}})
    assert not fb.ok and "no [32]" in fb.message


@pytest.mark.skipif(ENV.on_gpu, reason="on a GPU the checker measures instead of reading records")
def test_a_tie_within_noise_is_accepted(tmp_path, monkeypatch):
    _record_sweep(tmp_path, monkeypatch, {4: 31.0, 8: 27.5, 16: 28.3})
    assert ch04.choose_num_warps.check({"num_warps": 16, "timings_us": {8: 27.5, 16: 28.3}}).ok


@pytest.mark.skipif(ENV.on_gpu, reason="on a GPU the checker measures instead of reading records")
def test_recorded_sweep_for_another_shape_is_not_used(tmp_path, monkeypatch):
    _record_sweep(tmp_path, monkeypatch, {4: 31.0, 8: 27.5}, cols=4096)
    assert ch04.recorded_warps() is None
    fb = ch04.choose_num_warps.check({"num_warps": 8, "timings_us": {4: 31.0, 8: 27.5}})
    assert isinstance(fb, ch04.NotCheckedHere)


@pytest.mark.gpu
def test_warps_solution_measured_on_gpu():
    solution = ch04.warps_solution()
    assert ch04.choose_num_warps.check(solution).ok
