"""Chapter 3's checkers beyond the shared contract (tests/exercises/test_every_exercise.py): code
that does not compile gets the compiler's message, and each mistake fails for its own reason."""

import math
import re

import numpy as np
import pytest
import torch

from fusedrms.exercises import ch03
from tests.exercises.prediction_contract import assert_prediction_contract


def test_compile_errors_show_the_compilers_message():
    feedback = ch03.shuffle_finish.check(ch03.shuffle_finish.mistakes["does not compile"])
    assert "does not compile" in feedback.message and "error" in feedback.message


def test_each_shuffle_mistake_fails_for_its_own_reason():
    m = ch03.shuffle_finish.mistakes
    assert "64-lane" in ch03.shuffle_finish.check(m["32 lanes hard-coded"]).message
    assert "race" in ch03.shuffle_finish.check(m["no barrier between the warp totals and their readers"]).message
    assert "divergent" in ch03.shuffle_finish.check(m["barrier only for lane 0"]).message


def test_a_shared_memory_tree_is_not_a_shuffle_finish():
    tree = ("__device__ float block_sum_shuffle(float partial) {\n"
            "    HIP_DYNAMIC_SHARED(float, s)\n    s[threadIdx.x] = partial;\n    __syncthreads();\n"
            "    return s[0];\n}\n")
    feedback = ch03.shuffle_finish.check(tree)
    assert not feedback.ok and "shuffle" in feedback.message


def test_the_starter_is_not_accepted():
    assert not ch03.shuffle_finish.check(ch03.SHUFFLE_STARTER.replace("// TODO", "// __shfl TODO")).ok


def test_listing_numbers_the_block_kernel_without_its_tree_barrier():
    listing = ch03.numbered_listing()
    assert listing.count("__syncthreads()") == 1
    assert "if (tid < stride)" in listing.splitlines()[ch03.missing_barrier.solution - 1]


# ---- 3.1: the measurements are checked, not only their form ----

def test_block_sizes_solution_is_measured_here_and_small_on_the_cpu_runtime():
    solution = ch03.block_sizes_solution()
    if not ch03._gpu_build_available():  # what keeps it a few seconds: a small shape, few threads
        assert {(e["rows"], e["cols"]) for e in solution} == {(33, 257)}
        assert max(e["block_size"] for e in solution) <= 64
    assert len({e["block_size"] for e in solution}) >= 3 and all(e["correct"] for e in solution)
    assert ch03.block_sizes.check(solution).ok


@pytest.mark.parametrize("label,needles", [
    ("times in milliseconds", ("looks like milliseconds",)),
    # 1 us for every size: on a loaded 2-core CI machine the CPU runtime once took 2,762 us, and
    # 1 us read as milliseconds is then within 3x of it; under -n 6 on 2 cores it took 110 ms,
    # and 1 us read as seconds is within the CPU runtime's 10x for a slowed run. Every rejection
    # names the measured time
    ("made-up times", ("more than 3x away", "looks like milliseconds", "looks like seconds")),
    ("a shape it never ran", ("x257",)),
    ("correctness not checked", ("correct=False",)),
])
def test_block_sizes_rejects_numbers_it_cannot_reproduce(label, needles):
    fb = ch03.block_sizes.check(ch03.block_sizes.mistakes[label])
    assert not fb.ok and any(n in fb.message for n in needles) and fb.hint, fb.message


def test_block_sizes_rejects_seconds_and_a_smaller_shape_than_claimed(monkeypatch):
    # the checker's re-timing made deterministic (time grows with the rows): how long the CPU
    # runtime takes on a loaded machine must not decide this test's verdicts
    solution = ch03.block_sizes.solution
    rows = solution[0]["rows"]
    correct = {e["block_size"]: e["correct"] for e in solution}

    def measure(r, _cols, block, _on_gpu):
        us = 100.0 * r / rows
        return (None if correct[block] else "wrong output"), us, lambda: us

    monkeypatch.setattr(ch03, "_measure_block", measure)
    honest = [{**e, "time_us": 100.0} for e in solution]
    assert ch03.block_sizes.check(honest).ok
    seconds = [{**e, "time_us": 100.0 / 1e6} for e in solution]
    assert "looks like seconds" in ch03.block_sizes.check(seconds).message
    bigger = [{**e, "rows": rows * 7, "time_us": 100.0} for e in solution]  # timed 1/7 the rows
    fb = ch03.block_sizes.check(bigger)
    assert not fb.ok and "the checker measured 700.0 us" in fb.message, fb.message


def test_block_sizes_time_tolerance():
    assert ch03._time_mismatch(100.0, 100.0) is None
    assert ch03._time_mismatch(34.0, 100.0) is None and ch03._time_mismatch(290.0, 100.0) is None
    assert "milliseconds" in ch03._time_mismatch(0.1, 100.0)
    assert "seconds" in ch03._time_mismatch(1e-4, 100.0)
    assert "3x away" in ch03._time_mismatch(30.0, 100.0)
    assert "3x slower" in ch03._time_mismatch(310.0, 100.0)
    # the CPU runtime: a run slowed by other work is still a measurement, a faster one is not
    assert ch03._time_mismatch(900.0, 100.0, ch03.CPU_SLOWER_FACTOR) is None
    assert "10x slower" in ch03._time_mismatch(1100.0, 100.0, ch03.CPU_SLOWER_FACTOR)
    assert "3x away" in ch03._time_mismatch(30.0, 100.0, ch03.CPU_SLOWER_FACTOR)


def test_block_sizes_accepts_a_time_the_machine_slowed_on_the_cpu_runtime(monkeypatch):
    """A reader's run slowed 5x by other work (the checker re-times faster) is accepted on the
    CPU runtime; the same 5x on a GPU, where timing is steady, is refused."""
    solution = ch03.block_sizes.solution
    correct = {e["block_size"]: e["correct"] for e in solution}

    def measure(_rows, _cols, block, _on_gpu):
        return (None if correct[block] else "wrong output"), 100.0, lambda: 100.0

    monkeypatch.setattr(ch03, "_measure_block", measure)
    slowed = [{**e, "time_us": 500.0} for e in solution]
    monkeypatch.setattr(ch03, "_gpu_build_available", lambda: False)
    assert ch03.block_sizes.check(slowed).ok
    monkeypatch.setattr(ch03, "_gpu_build_available", lambda: True)
    fb = ch03.block_sizes.check(slowed)
    assert not fb.ok and "3x slower" in fb.message, fb.message


# ---- 3.2: any correct finish, in HIP's own names ----

WARPSIZE_DOWN_AND_BROADCAST = """
__device__ float block_sum_shuffle(float partial) {
    HIP_DYNAMIC_SHARED(float, totals)
    const int lanes = warpSize < (int)blockDim.x ? warpSize : (int)blockDim.x;
    const int lane = threadIdx.x % lanes, warp = threadIdx.x / lanes;
    float v = partial;
    for (int offset = lanes / 2; offset > 0; offset /= 2) v += __shfl_down(v, offset, lanes);
    if (lane == 0) totals[warp] = v;
    __syncthreads();
    float t = 0.0f;
    for (int i = 0; i < (int)blockDim.x / lanes; ++i) t += totals[i];
    return t;
}
"""


def test_a_finish_written_with_warp_size_is_accepted():
    fb = ch03.shuffle_finish.check(WARPSIZE_DOWN_AND_BROADCAST)
    assert fb.ok, str(fb)
    assert "warpSize" in ch03.shuffle_finish.solution


def test_the_hint_names_warp_size():
    fb = ch03.shuffle_finish.check(ch03.shuffle_finish.mistakes["32 lanes hard-coded"])
    assert "warpSize" in fb.hint


# ---- 3.3: the line in any numeric form; races between two threads only ----

@pytest.mark.parametrize("form", [float, np.int64, np.float64, torch.tensor, str, lambda n: f" {n} "],
                         ids=["float", "np.int64", "np.float64", "tensor", "str", "padded str"])
def test_missing_barrier_accepts_the_line_in_any_numeric_form(form):
    assert ch03.missing_barrier.check(form(ch03.missing_barrier.solution)).ok


@pytest.mark.parametrize("bad", [18.5, torch.tensor([18, 19]), "eighteen", True])
def test_missing_barrier_malformed_lines_get_a_message(bad):
    fb = ch03.missing_barrier.check(bad)
    assert not fb.ok and fb.message


@pytest.mark.parametrize("label", list(ch03.missing_barrier.mistakes))
def test_a_race_names_two_different_threads(label):
    messages = {ch03.missing_barrier.check(ch03.missing_barrier.mistakes[label]).message
                for _ in range(3)}
    assert len(messages) == 1, messages  # whatever order the OS runs the threads in
    message = messages.pop()
    found = re.search(r"thread (\d+) writes it and thread (\d+) reads it|threads (\d+) and (\d+) "
                      r"both write it", message)
    assert found and len({g for g in found.groups() if g}) == 2, message


@pytest.mark.parametrize("written", ["line 4", "after line 4", "Line 4"])
def test_missing_barrier_accepts_the_line_written_in_words(written):
    line = ch03.missing_barrier.solution
    assert ch03.missing_barrier.check(written.replace("4", str(line))).ok


@pytest.mark.parametrize("answer,needle", [([], "no block size recorded"),
                                           ([{"block_size": 1}], "lacks"),
                                           ([5], "is an int")])
def test_block_sizes_messages_read_as_english(answer, needle):
    fb = ch03.block_sizes.check(answer)
    assert not fb.ok and needle in fb.message and "(s)" not in fb.message


def test_block_sizes_reads_numpy_and_torch_booleans_as_verdicts():
    rows = [{"block_size": b, "rows": 3, "cols": 13, "correct": flag, "time_us": 1.0}
            for b, flag in ((8, np.bool_(True)), (16, torch.tensor(True)), (32, True))]
    assert [e["correct"] for e in ch03._entries(rows)] == [True, True, True]
    bad = [{"block_size": 8, "rows": 3, "cols": 13, "correct": "yes", "time_us": 1.0}]
    assert "True or False" in ch03.block_sizes.check(bad * 3).message


def test_a_shared_memory_tree_with_a_token_shuffle_is_not_a_shuffle_finish():
    """It computes the right sum, but round by round with a barrier each: not the exercise."""
    tree = ("__device__ float block_sum_shuffle(float partial) {\n"
            "    HIP_DYNAMIC_SHARED(float, s)\n    s[threadIdx.x] = partial;\n    __syncthreads();\n"
            "    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {\n"
            "        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];\n"
            "        __syncthreads();\n    }\n"
            "    return __shfl_xor(s[0], 0, 32);  // a shuffle for show\n}\n")
    feedback = ch03.shuffle_finish.check(tree)
    assert not feedback.ok and "inside a loop" in feedback.message and feedback.hint
    assert ch03._loop_bodies("for (int i = 0; i < n; ++i) x += y; // __syncthreads();") == ["x += y"]


MIN_OF_BLOCK_AND_WARP = """
__device__ float block_sum_shuffle(float partial) {
    HIP_DYNAMIC_SHARED(float, warp_totals)
    const int lanes = min((int)blockDim.x, (int)warpSize);
    float v = partial;
    for (int m = lanes >> 1; m >= 1; m >>= 1) v += __shfl_xor(v, m, lanes);
    if (threadIdx.x % lanes == 0) warp_totals[threadIdx.x / lanes] = v;
    __syncthreads();
    const int lane = threadIdx.x % lanes;
    float t = lane < (int)(blockDim.x / lanes) ? warp_totals[lane] : 0.0f;
    for (int m = lanes >> 1; m >= 1; m >>= 1) t += __shfl_xor(t, m, lanes);
    return t;
}
"""


def test_a_finish_using_device_min_is_accepted_on_the_cpu_runtime():
    fb = ch03.shuffle_finish.check(MIN_OF_BLOCK_AND_WARP)
    assert fb.ok, str(fb)


def test_shuffle_hints_follow_what_went_wrong():
    race = ch03.shuffle_finish.check(
        ch03.shuffle_finish.mistakes["no barrier between the warp totals and their readers"])
    divergent = ch03.shuffle_finish.check(ch03.shuffle_finish.mistakes["barrier only for lane 0"])
    assert "between writing the warp totals" in race.hint
    assert "if (lane == 0)" in divergent.hint


def test_compiler_messages_show_file_names_without_folders():
    fb = ch03.shuffle_finish.check(ch03.shuffle_finish.mistakes["does not compile"])
    assert not fb.ok and "/" + "work/" not in fb.message and "/usr/" not in fb.message


def test_a_line_where_a_barrier_cannot_compile_is_explained_not_blamed_on_the_reader():
    lines = ch03.missing_barrier_listing().splitlines()
    last = len(lines)  # after the kernel's closing brace
    fb = ch03.missing_barrier.check(last)
    assert not fb.ok and "does not even compile" in fb.message
    assert "compiler reports" not in fb.hint


def test_block_sizes_reads_a_table_of_records():
    class Frame:  # what a pandas DataFrame offers
        columns = ["block_size", "rows", "cols", "correct", "time_us"]

        def to_dict(self, orient):
            assert orient == "records"
            return [{"block_size": b, "rows": 33, "cols": 257, "correct": True, "time_us": 9.0}
                    for b in (8, 16)]

    fb = ch03.block_sizes.check(Frame())
    assert not fb.ok and "only two block sizes" in fb.message


def test_a_malformed_line_number_is_asked_for_as_a_line_number():
    fb = ch03.missing_barrier.check("eleven")
    assert not fb.ok and "12.5" not in fb.message and "start of the line" in fb.message


# ---- predict, then look: hip.serial over hip.block ----

SPEEDUP = ch03.predict_block_speedup


def test_the_speedup_prediction_is_graded_against_the_recording_the_page_tells():
    from fusedrms.book import ch03_story

    found = ch03.recorded_block_speedup()
    told = ch03_story.story_facts(ch03_story.load())
    assert found["speedup"] == pytest.approx(told["serial_gains"][1024])
    # the folded solution: tens of times, and a kernel at the floor little more than twice as fast
    assert 10 < found["speedup"] < 100 and 0.4 < found["block_share"] < 0.5
    assert_prediction_contract(SPEEDUP, f"{found['speedup']:.0f}x", f"{found['speedup']:.0f}×.")


def test_each_wrong_speedup_prediction_says_what_its_gap_teaches():
    found = ch03.recorded_block_speedup()
    assert "multiply" in SPEEDUP.check(4).hint
    assert "copy floor" in SPEEDUP.check(256).hint
    assert "serial / block" in SPEEDUP.check(1 / found["speedup"]).hint


@pytest.mark.parametrize("bad", ["abc", 0, -3, "60 µs", [60], "\u221260", math.inf])
def test_a_malformed_speedup_prediction_gets_a_message(bad):
    fb = SPEEDUP.check(bad)
    assert not fb.ok and fb.message and not fb.error
