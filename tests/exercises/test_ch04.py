"""Chapter 4 exercises: solutions accepted, every typical mistake rejected with a hint."""
import math

import pytest
import torch
import triton
import triton.language as tl

from fusedrms import env, records
from fusedrms.exercises import ch04, grader, reader_code
from fusedrms.exercises.core import Feedback

ENV = env.current()


@pytest.mark.parametrize("exercise", ch04.KERNEL_EXERCISES, ids=lambda e: e.name)
def test_solution_is_accepted(exercise):
    feedback = exercise.check(exercise.solution)
    assert feedback.ok, str(feedback)


@pytest.mark.parametrize("exercise,label", [(e, m) for e in ch04.ALL for m in e.mistakes],
                         ids=lambda v: v if isinstance(v, str) else v.name)
def test_typical_mistake_is_rejected_with_a_hint(exercise, label, monkeypatch, tmp_path):
    if exercise is not ch04.choose_num_warps:  # its mistakes come from the committed recording
        monkeypatch.setattr(records, "DATA_DIR", tmp_path)
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


@triton.jit
def _kernel_named_block(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    r = tl.rsqrt(tl.sum(x * x, axis=0) / cols + eps)
    w = tl.load(w_ptr + offsets, mask=mask).to(tl.float32)  # no other=: harmless for w
    tl.store(y_ptr + row * y_row_stride + offsets, (x * r * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _kernel_block_not_constexpr(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps, BLOCK_SIZE):
    pass


@pytest.mark.parametrize("exercise", ch04.KERNEL_EXERCISES, ids=lambda e: e.name)
def test_the_block_parameter_may_have_any_name_but_must_be_constexpr(exercise):
    assert exercise.check(_kernel_named_block).ok  # BLOCK instead of BLOCK_SIZE works
    fb = exercise.check(_kernel_block_not_constexpr)
    assert not fb.ok and "BLOCK_SIZE: tl.constexpr" in fb.message


@pytest.mark.parametrize("exercise", ch04.KERNEL_EXERCISES, ids=lambda e: e.name)
def test_loads_are_audited(exercise):
    fb = exercise.check(ch04.kernel_weight_without_mask)
    assert not fb.ok and "past its 13 values" in fb.message and "mask=mask" in fb.hint
    fb = exercise.check(ch04.kernel_x_without_other)
    assert not fb.ok and "other=" in fb.message and "other=0.0" in fb.hint
    fb = exercise.check(ch04.kernel_without_mask)
    assert not fb.ok and "outside its rows" in fb.message


def test_the_audit_counts_reads_outside_x_and_past_w():
    good = ch04.run_reader_kernel(ch04.rmsnorm_row_kernel, 3, 13, audit=True)
    assert good.audited and good.loads and good.outside_x == 0 and good.past_w == 0
    assert not any(load.undefined_lanes for load in good.loads)
    unmasked_w = ch04.run_reader_kernel(ch04.kernel_weight_without_mask, 3, 13, audit=True)
    assert unmasked_w.past_w == 3 * (16 - 13) and unmasked_w.outside_x == 0  # 3 lanes per row
    no_other = ch04.run_reader_kernel(ch04.kernel_x_without_other, 3, 13, audit=True)
    assert any(load.undefined_lanes for load in no_other.loads) and torch.isnan(no_other.y).all()


def test_a_compiled_kernel_is_audited_in_the_interpreter():
    """On a GPU the reader's kernel is a JITFunction: the audit re-runs its Python in the interpreter."""
    jit = triton.runtime.jit.JITFunction(ch04.kernel_weight_without_mask.fn)
    run = ch04.run_reader_kernel(jit, 3, 13, audit=True)
    assert run.audited and run.past_w == 9


def test_both_exercises_share_one_child_per_kernel(monkeypatch):
    """The interpreter's verdict comes from a child process (the same on a GPU machine); the two
    exercises run the same cases, so a kernel checked by both starts one child, not two."""
    calls = []
    monkeypatch.setattr(grader, "_CACHE", {})
    original = grader._run_request
    monkeypatch.setattr(grader, "_run_request", lambda *a, **k: calls.append(1) or original(*a, **k))
    first = ch04.fix_block_denominator.check(ch04.kernel_x_without_other)
    second = ch04.fix_weight_load.check(ch04.kernel_x_without_other)
    assert not first.ok and not second.ok and first.message == second.message
    assert len(calls) == 1


def test_a_kernel_that_cannot_be_copied_is_never_called_correct(monkeypatch):
    def refuse(answer):
        raise reader_code.NotCopied("its source cannot be read")

    monkeypatch.setattr(reader_code, "copy_answer", refuse)
    fb = ch04.fix_block_denominator.check(ch04.rmsnorm_row_kernel)
    assert not fb.ok and "its source cannot be read" in fb.message and fb.hint


def test_run_reader_kernel_layout():
    run = ch04.run_reader_kernel(ch04.rmsnorm_row_kernel, 3, 13)
    assert run.y.shape == (3, 13) and run.stray_stores == 0
    assert torch.isfinite(run.y).all()


# ---- choose num_warps ----

SPREAD = 0.02  # each setting's three repeats lie 2% either side of its median: a band of 3.2%


def _record_sweep(tmp_path, monkeypatch, times, cols=ch04.WARPS_COLS,
                  dtype=str(ch04.WARPS_DTYPE).replace("torch.", ""), spread=SPREAD):
    monkeypatch.setattr(records, "DATA_DIR", tmp_path)
    recs = [dict(group="width sweep", rows=ch04.WARPS_ROWS, cols=cols, dtype=dtype, num_warps=k,
                 median_us=v, gbps=1.0,
                 **({"repeat_medians_us": [v * (1 - spread), v, v * (1 + spread)], "repeats": 3}
                    if spread is not None else {}))
            for k, v in times.items()]
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
    assert not fb.ok and "no 32 warps" in fb.message


@pytest.mark.skipif(ENV.on_gpu, reason="on a GPU the checker measures instead of reading records")
def test_a_tie_within_noise_is_accepted(tmp_path, monkeypatch):
    _record_sweep(tmp_path, monkeypatch, {4: 31.0, 8: 27.5, 16: 28.3})
    assert ch04.choose_num_warps.check({"num_warps": 16, "timings_us": {8: 27.5, 16: 28.3}}).ok


@pytest.mark.skipif(ENV.on_gpu, reason="on a GPU the checker measures instead of reading records")
def test_the_tie_band_is_derived_from_the_recording_not_asserted(tmp_path, monkeypatch):
    """A tie is within the band of the recorded run-to-run spread: a wider spread accepts a
    setting a narrower one rejects, in the reader's medians and in the recorded ones alike."""
    times = {4: 31.0, 8: 27.5, 16: 29.0}  # 16 warps 5.5% slower than 8
    answer = {"num_warps": 16, "timings_us": times}
    _record_sweep(tmp_path, monkeypatch, times, spread=0.02)
    assert ch04.tie_band() == pytest.approx(0.032)
    fb = ch04.choose_num_warps.check(answer)
    assert not fb.ok and "5.5%" in fb.message and "3.2%" in fb.message and fb.hint
    _record_sweep(tmp_path, monkeypatch, times, spread=0.04)
    assert ch04.tie_band() == pytest.approx(0.064)
    fb = ch04.choose_num_warps.check(answer)
    assert fb.ok and "6.4%" in fb.message


def test_the_exercise_uses_the_band_the_chapter_derives():
    from fusedrms.book import ch04 as chapter
    from fusedrms.book import ch04_story

    docs = ch04_story.load(None)
    assert ch04.tie_band() == chapter.tie_band(docs["warps"], docs["versions"])["band"]
    assert 0 < ch04.tie_band() < 0.05
    assert not hasattr(ch04, "NOISE") and not hasattr(ch04, "RENOISE")


@pytest.mark.skipif(ENV.on_gpu, reason="on a GPU the checker measures instead of reading records")
def test_a_sweep_without_repeats_has_no_band_and_says_so(tmp_path, monkeypatch):
    _record_sweep(tmp_path, monkeypatch, {4: 31.0, 8: 27.5, 16: 29.9}, spread=None)
    assert ch04.tie_band() is None
    fb = ch04.choose_num_warps.check({"num_warps": 8, "timings_us": {4: 31.0, 8: 27.5}})
    assert isinstance(fb, ch04.NotCheckedHere) and not fb.ok and "tie band" in fb.message
    assert "record" in fb.hint and "Hint" in fb._repr_html_()
    (tmp_path / "h200" / "triton_warps.json").write_text("{not json")  # damaged: no traceback
    fb = ch04.choose_num_warps.check({"num_warps": 8, "timings_us": {4: 31.0, 8: 27.5}})
    assert not fb.ok and fb.message and not fb.error


def test_a_gpu_judges_a_fresh_measurement_with_the_same_band(tmp_path, monkeypatch):
    """The verdicts on a GPU (a fresh measurement) are those a machine without one gives for the
    same medians: one band, from the recording."""
    real = ch04.env.current()

    class OnGpu:  # this machine's environment, as if it had a GPU
        on_gpu = True

        def __getattr__(self, name):
            return getattr(real, name)

    recorded = {4: 31.0, 8: 27.5, 16: 29.0}
    _record_sweep(tmp_path, monkeypatch, recorded)
    answers = [{"num_warps": k, "timings_us": dict(recorded)} for k in recorded]
    answers += [{"num_warps": 16, "timings_us": {8: 27.5, 16: 28.3}},  # within 3.2%
                {"num_warps": 16, "timings_us": {16: 29.0, 4: 31.0}}]  # leaves out 8 warps
    on_cpu = [ch04.choose_num_warps.check(a).ok for a in answers]
    monkeypatch.setattr(ch04.env, "current", OnGpu)
    monkeypatch.setattr(ch04, "measure_num_warps", lambda *a, **k: dict(recorded))
    on_gpu = [ch04.choose_num_warps.check(a).ok for a in answers]
    assert on_cpu == on_gpu == [False, True, False, False, False]
    monkeypatch.setattr(ch04, "measure_num_warps",  # 16 warps within the band in a fresh run
                        lambda *a, **k: {4: 31.0, 8: 27.5, 16: 28.3})
    assert ch04.choose_num_warps.check({"num_warps": 16, "timings_us": {8: 27.5, 16: 28.3}}).ok


@pytest.mark.skipif(ENV.on_gpu, reason="on a GPU the checker measures instead of reading records")
def test_every_right_form_passes(tmp_path, monkeypatch):
    _record_sweep(tmp_path, monkeypatch, {4: 9.05, 8: 10.36, 16: 9.30})  # 16 within 3.2% of 4
    for answer in ({"num_warps": 4, "timings_us": {4: 9.05, 8: 10.36, 16: 9.30}},
                   {"num_warps": 16, "timings_us": {4: 9.05, 8: 10.36, 16: 9.30}},
                   {"num_warps": 4, "timings_us": {4: 9.05, 16: 9.30}},
                   {"num_warps": 4.0, "timings_us": {4.0: 9.05, 8.0: 10.36}},
                   {"num_warps": "16", "timings_us": {"4": "9.05", "16": "9.3"}},
                   {"num_warps": torch.tensor(4), "timings_us": {4: torch.tensor(9.05),
                                                                 8: 10.36}},
                   ch04.warps_solution()):
        fb = ch04.choose_num_warps.check(answer)
        assert fb.ok, (answer, str(fb))


@pytest.mark.skipif(ENV.on_gpu, reason="on a GPU the checker measures instead of reading records")
def test_recorded_sweep_for_another_shape_is_not_used(tmp_path, monkeypatch):
    _record_sweep(tmp_path, monkeypatch, {4: 31.0, 8: 27.5}, cols=2 * ch04.WARPS_COLS)
    assert ch04.recorded_warps() is None
    fb = ch04.choose_num_warps.check({"num_warps": 8, "timings_us": {4: 31.0, 8: 27.5}})
    assert isinstance(fb, ch04.NotCheckedHere)


@pytest.mark.gpu
def test_warps_solution_measured_on_gpu(monkeypatch):
    """On a GPU the checker re-measures the sweep. The medians come from this GPU once
    (warps_solution); the re-measurement then replays chosen medians, so the verdict does not hang
    on run-to-run noise (the GPU check times this beside a recording, and a 2% swing between 4
    and 16 warps once failed it): a choice the fresh sweep confirms passes, one it contradicts
    beyond the tie band is sent to measure again."""
    solution = ch04.warps_solution()
    times, best = solution["timings_us"], solution["num_warps"]
    assert set(ch04.SWEPT_WARPS) <= set(times) and all(t > 0 for t in times.values())
    asked = []

    def replay(*args, **kwargs):
        asked.append(kwargs.get("warps"))
        return dict(fresh)

    monkeypatch.setattr(ch04, "measure_num_warps", replay)
    fresh = times
    assert ch04.choose_num_warps.check(solution).ok and asked
    other = next(w for w in times if w != best)
    fresh = {**times, other: times[best] / 1.5}  # the fresh sweep says another setting wins
    feedback = ch04.choose_num_warps.check(solution)
    assert not feedback.ok and "Measure again on an idle GPU" in feedback.hint


def test_the_num_warps_exercise_is_posed_where_the_rule_misses():
    """At the exercise's shape the recorded medians must make the rule's choice slower than the
    fastest setting by more than the noise: otherwise the exercise teaches nothing (re-pose it)."""
    found = ch04.recorded_warps()
    assert found is not None, "the recorded sweep has no record for the exercise's shape"
    times = found[0]
    best = min(times, key=times.get)
    assert ch04.RULE_WARPS in times and best != ch04.RULE_WARPS
    assert times[ch04.RULE_WARPS] > (1 + ch04.tie_band()) * times[best]
    mistakes = ch04.choose_num_warps.mistakes
    assert mistakes["the rule's choice against the medians"]["num_warps"] == ch04.RULE_WARPS
    assert ch04.warps_solution()["num_warps"] == best


@pytest.mark.skipif(ENV.on_gpu, reason="on a GPU the checker measures instead of reading records")
def test_medians_that_are_not_the_recorded_ones_are_rejected():
    times = ch04.recorded_warps()[0]
    made_up = {k: round(t * 1.25, 3) for k, t in times.items()}  # 25% off: beyond any rounding
    fb = ch04.choose_num_warps.check({"num_warps": min(made_up, key=made_up.get),
                                      "timings_us": made_up})
    assert not fb.ok and "not the recorded" in fb.message


@pytest.mark.gpu
@pytest.mark.parametrize("exercise", ch04.KERNEL_EXERCISES, ids=lambda e: e.name)
def test_kernel_checkers_on_the_gpu(exercise):
    """Compiled on the GPU for the output, re-run in the interpreter for the load audit."""
    fb = exercise.check(exercise.solution)
    assert fb.ok and "interpreter and compiled for the GPU" in fb.message, fb.message
    assert exercise.check(_kernel_named_block).ok
    for label, kernel in exercise.mistakes.items():
        assert not exercise.check(kernel).ok, label


@pytest.mark.gpu
def test_kernel_verdicts_on_the_gpu_are_the_cpu_verdicts():
    """Every typical mistake gets, word for word, the feedback a machine without a GPU gives."""
    import json
    import os
    import subprocess
    import sys

    script = """
import json
from fusedrms.exercises import ch04
verdicts = []
for e in ch04.KERNEL_EXERCISES:
    for label, kernel in e.mistakes.items():
        fb = e.check(kernel)
        verdicts.append([e.name, label, fb.ok, fb.message, fb.hint])
print(json.dumps(verdicts))
"""
    cpu_env = {**os.environ, "FUSEDRMS_FORCE_CPU": "1", "TRITON_INTERPRET": "1",
               "PYTHONPATH": os.pathsep.join(p or os.getcwd() for p in sys.path)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600, env=cpu_env)
    assert done.returncode == 0, done.stderr[-2000:]
    on_cpu = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(on_cpu) == sum(len(e.mistakes) for e in ch04.KERNEL_EXERCISES)
    for name, label, ok, message, hint in on_cpu:
        exercise = next(e for e in ch04.KERNEL_EXERCISES if e.name == name)
        fb = exercise.check(exercise.mistakes[label])
        assert [fb.ok, fb.message, fb.hint] == [ok, message, hint], (name, label)


@pytest.mark.skipif(ENV.on_gpu, reason="on a GPU the checker measures instead of reading records")
def test_leaving_out_the_fastest_setting_is_rejected(tmp_path, monkeypatch):
    """Timing only the settings that make a choice look best is not a measurement: the checker
    compares with every setting the sweep timed."""
    _record_sweep(tmp_path, monkeypatch, {4: 9.05, 8: 10.36, 16: 9.70})
    fb = ch04.choose_num_warps.check({"num_warps": 16, "timings_us": {8: 10.36, 16: 9.70}})
    assert not fb.ok and "4 warps" in fb.message and "leave out" in fb.message
    assert "Time every setting (4, 8, 16 warps)" in fb.hint
    # the right choice passes with or without the settings that lost
    assert ch04.choose_num_warps.check({"num_warps": 4, "timings_us": {4: 9.05, 16: 9.70}}).ok
    assert ch04.choose_num_warps.check({"num_warps": "4", "timings_us": {"4": "9.05", 8: 10.36,
                                                                         16: 9.7}}).ok


# ---- arithmetic mistakes a reader makes while fixing a kernel: each is named, with its own hint ----

_ROW_KERNEL = """
import triton
import triton.language as tl


@triton.jit
def {name}(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    r = tl.rsqrt(tl.sum(x * x, axis=0) / cols + eps)
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + offsets, (x * r * w).to(y_ptr.dtype.element_ty), mask=mask)
"""
# each variant: the row kernel with these (old, new) line edits, as a reader might write it
_VARIANTS = {
    "_no_eps": [("/ cols + eps)", "/ cols)")],
    "_fixed_eps": [("/ cols + eps)", "/ cols + 1e-5)")],
    "_eps_outside": [("/ cols + eps)", "/ cols) + eps")],
    "_sqrt": [("tl.rsqrt(", "tl.sqrt(")],
    "_cols_minus_1": [("/ cols + eps)", "/ (cols - 1) + eps)")],
    "_no_weight": [("(x * r * w)", "(x * r)")],
    "_row_zero_only": [("row = tl.program_id(0).to(tl.int64)", "row = 0")],
    "_weight_one_further_per_row": [("tl.load(w_ptr + offsets", "tl.load(w_ptr + row + offsets")],
    "_sum_of_x_squared": [("tl.sum(x * x, axis=0)", "tl.sum(x, axis=0) * tl.sum(x, axis=0)")],
    "_fixed_512": [("tl.arange(0, BLOCK_SIZE)", "tl.arange(0, 512)")],  # BLOCK_SIZE ignored
    "_sums_in_input_dtype": [  # no upcast: the squares are summed in x's dtype
        ("mask=mask, other=0.0).to(tl.float32)\n    r =", "mask=mask, other=0.0)\n    r =")],
    "_right_in_other_words": [  # no int64, 1/sqrt, a multiply, w's other=1, no cast: all fine
        ("tl.program_id(0).to(tl.int64)", "tl.program_id(0)"),
        ("tl.rsqrt(tl.sum(x * x, axis=0) / cols + eps)",
         "1.0 / tl.sqrt(tl.sum(tl.where(mask, x * x, 0.0), axis=0) * (1.0 / cols) + eps)"),
        ("mask=mask, other=0.0).to(tl.float32)\n    tl.store", "mask=mask, other=1.0)\n    tl.store"),
        ("(x * r * w).to(y_ptr.dtype.element_ty)", "x * r * w")],
}


def _reader_kernels():
    """The variants as @triton.jit kernels of a real module (Triton reads a kernel's source)."""
    import importlib.util
    import tempfile
    from pathlib import Path

    source = []
    for name, edits in _VARIANTS.items():
        text = _ROW_KERNEL.format(name=name)
        for old, new in edits:
            assert text.count(old) == 1, (name, old)
            text = text.replace(old, new)
        source.append(text)
    # one file per test process (xdist's workers import this module at the same time), removed
    # when the process ends: Triton reads the kernels' source from it until then
    import atexit
    import os

    path = Path(tempfile.gettempdir()) / f"fusedrms_test_ch04_reader_kernels_{os.getpid()}.py"
    path.write_text("\n".join(source))
    atexit.register(path.unlink, missing_ok=True)
    spec = importlib.util.spec_from_file_location("reader_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


K = _reader_kernels()
_no_eps, _eps_outside, _sqrt = K._no_eps, K._eps_outside, K._sqrt
_cols_minus_1, _no_weight, _row_zero_only = K._cols_minus_1, K._no_weight, K._row_zero_only
_weight_one_further_per_row, _sum_of_x_squared = K._weight_one_further_per_row, K._sum_of_x_squared
_right_in_other_words, _fixed_eps = K._right_in_other_words, K._fixed_eps
_fixed_512, _sums_in_input_dtype = K._fixed_512, K._sums_in_input_dtype


NAMED_MISTAKES = [(_no_eps, "leaving eps out", "tl.rsqrt(mean_square + eps)"),
                  (_fixed_eps, "a fixed eps of 1e-05", "eps argument"),
                  (_eps_outside, "adding eps after the square root", "inside the square root"),
                  (_sqrt, "sqrt(mean_square + eps)", "tl.rsqrt"),
                  (_cols_minus_1, "cols - 1", "divides by cols"),
                  (_no_weight, "leaving out the weight", "y = x * r * w"),
                  (_row_zero_only, "never wrote rows 1 and 2 of 3", "tl.program_id(0)"),
                  (_sums_in_input_dtype, "2x300 fp16 the output is what summing the squares in "
                                         "x's own dtype", ".to(tl.float32)")]


@pytest.mark.parametrize("exercise", ch04.KERNEL_EXERCISES, ids=lambda e: e.name)
@pytest.mark.parametrize("kernel,named,hinted", NAMED_MISTAKES,
                         ids=[k.fn.__name__ for k, _, _ in NAMED_MISTAKES])
def test_arithmetic_mistakes_are_named(exercise, kernel, named, hinted):
    fb = exercise.check(kernel)
    assert not fb.ok and named in fb.message, fb.message
    assert hinted in fb.hint, fb.hint


@pytest.mark.parametrize("exercise", ch04.KERNEL_EXERCISES, ids=lambda e: e.name)
def test_a_correct_kernel_written_differently_passes(exercise):
    assert exercise.check(_right_in_other_words).ok


def test_unnamed_mistakes_get_a_hint_that_fits_where_they_go_wrong():
    # row 0 right, later rows wrong: the hint points at what moves with the row
    fb = ch04.fix_block_denominator.check(_weight_one_further_per_row)
    assert not fb.ok and "Row 0 is right" in fb.hint
    fb = ch04.fix_weight_load.check(_weight_one_further_per_row)
    assert not fb.ok and "weight pointer never moves" in fb.hint
    # every row wrong in the weight exercise: the weight load is not (only) the problem
    fb = ch04.fix_weight_load.check(_sum_of_x_squared)
    assert not fb.ok and "Row 0 is wrong too" in fb.hint and "weight pointer" not in fb.hint
    fb = ch04.fix_block_denominator.check(_sum_of_x_squared)
    assert not fb.ok and "denominator" in fb.hint


@pytest.mark.skipif(ENV.on_gpu, reason="on a GPU the checker measures instead of reading records")
def test_warps_answers_in_the_wrong_units_or_order_get_a_hint(tmp_path, monkeypatch):
    _record_sweep(tmp_path, monkeypatch, {4: 9.05, 8: 10.36, 16: 9.70})
    fb = ch04.choose_num_warps.check({"num_warps": 4, "timings_us": {4: 0.00905, 8: 0.01036}})
    assert not fb.ok and "milliseconds" in fb.hint
    fb = ch04.choose_num_warps.check({"num_warps": 4, "timings_us": {4: 9050, 8: 10360}})
    assert not fb.ok and "nanoseconds" in fb.hint
    fb = ch04.choose_num_warps.check({"num_warps": 8, "timings_us": {4: 10.36, 8: 9.05,
                                                                     16: 9.70}})
    assert not fb.ok and "wrong settings" in fb.hint
    fb = ch04.choose_num_warps.check({"num_warps": 128, "timings_us": {4: 9.05, 8: 10.36}})
    assert not fb.ok and "looks like threads" in fb.message and "= 4 warps" in fb.message
    fb = ch04.choose_num_warps.check({"num_warps": [4], "timings_us": {4: 9.05, 8: 10.36}})
    assert not fb.ok and "whole number of warps" in fb.message and "12.5" not in fb.message
    assert ch04.choose_num_warps.check({"num_warps": 4.0, "timings_us": {4: 9.1, 8: 10.4}}).ok


# ---- what the interpreter's in-order programs hide, and stores no buffer owns ----

@triton.jit
def _kernel_clears_the_next_row(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                                BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < cols
    below = (row + 1) * y_row_stride + offsets  # "clear the next row first": a race on a GPU
    tl.store(y_ptr + below, tl.zeros([BLOCK_SIZE], tl.float32),
             mask=mask & (below < tl.num_programs(0) * y_row_stride))
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    r = tl.rsqrt(tl.sum(x * x, axis=0) / cols + eps)
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + offsets, (x * r * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _kernel_stores_far_away(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                            BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    tl.store(y_ptr + row * 100_000_000 + offsets, tl.zeros([BLOCK_SIZE], tl.float32))


@pytest.mark.parametrize("exercise", ch04.KERNEL_EXERCISES, ids=lambda e: e.name)
def test_a_race_and_a_store_far_outside_are_refused(exercise):
    fb = exercise.check(_kernel_clears_the_next_row)
    assert not fb.ok and "programs 0 and 1" in fb.message and "race" in fb.message
    assert "own row" in fb.hint
    fb = exercise.check(_kernel_stores_far_away)  # skipped by the audit: no corrupted heap
    assert not fb.ok and "outside" in fb.message and fb.hint


@pytest.mark.skipif(ENV.on_gpu, reason="on a GPU the checker measures instead of reading records")
def test_recorded_medians_are_never_called_the_readers_own(tmp_path, monkeypatch):
    """Without a GPU the timings are the recorded GPU's: no message may call them "your own"."""
    _record_sweep(tmp_path, monkeypatch, {4: 9.05, 8: 10.36, 16: 9.70})
    fb = ch04.choose_num_warps.check({"num_warps": 8, "timings_us": {4: 9.05, 8: 10.36, 16: 9.70}})
    assert not fb.ok and "The medians you gave say 4 warps" in fb.message
    assert "own" not in fb.message + (fb.hint or "")


@pytest.mark.parametrize("exercise", ch04.KERNEL_EXERCISES, ids=lambda e: e.name)
def test_a_kernel_that_ignores_its_block_size_fails_on_a_wide_row(exercise):
    """tl.arange(0, 512) in place of tl.arange(0, BLOCK_SIZE) is right on every row up to 512
    columns: a case wider than that (and than 1024), not a power of two, shows it."""
    assert any(cols > 1024 and cols & (cols - 1) for _, cols in ch04.CASES)
    fb = exercise.check(_fixed_512)
    assert not fb.ok and "only the first 512 of each row's" in fb.message, str(fb)
    assert "tl.arange(0, BLOCK_SIZE)" in fb.hint


@pytest.mark.parametrize("exercise", ch04.KERNEL_EXERCISES, ids=lambda e: e.name)
def test_a_sum_of_squares_in_fp16_gets_the_fp32_hint(exercise):
    fb = exercise.check(ch04.kernel_sums_in_input_dtype)
    assert not fb.ok and "in x's own dtype" in fb.message and "fp16" in fb.message, str(fb)
    assert "tl.float32" in fb.hint and "65504" in fb.hint


def test_the_fp16_case_overflows_a_sum_in_fp16_and_not_one_in_fp32():
    """What makes fp32 accumulation show: every square fits fp16, their sum does not."""
    rows, cols = next(c for c in ch04.CASES if ch04.CASE_DTYPE.get(c) == torch.float16)
    x = ch04.CASE_X[(rows, cols)](rows, cols, 512, torch.Generator().manual_seed(0))
    x = x.half().double()
    fp16_max = torch.finfo(torch.float16).max
    assert float((x * x).max()) < fp16_max / 4 and float((x * x).sum(-1).min()) > 2 * fp16_max
