"""The grader: a reader's code runs in a child process; a crash, an abort or an endless loop is a
verdict with a hint, in every code exercise, and the notebook's process survives it."""
import ctypes
import os
import re
import time

import pytest
import torch
import triton
import triton.language as tl

from fusedrms import env
from fusedrms.exercises import ch03, ch04, ch04_looped, ch07, ch09_dx, grader

LIMIT_S = 4.0  # the endless answers' limit here: the verdict must come soon after it


def _call(answer, *args):
    return answer(*args)


def _pid(answer):
    return os.getpid(), answer()


def _slow_then_value(answer, seconds):
    with grader.clock_paused():  # e.g. compiling: not counted
        time.sleep(seconds)
    grader.progress("On the second case")
    return answer()


def _forty_two():
    return 42


def _raises():
    raise KeyError("row 3")


def _segfaults(*args):
    ctypes.string_at(0)


def _aborts(*args):
    os.abort()


def _loops_forever(*args):
    while True:
        pass


def _exits(*args):
    os._exit(3)


def _sys_exit(*args):
    raise SystemExit("PASS")


def _interrupts(*args):
    raise KeyboardInterrupt


def test_a_value_and_an_exception_come_back_from_another_process():
    pid, value = grader.run(_forty_two, _pid)
    assert value == 42 and pid != os.getpid()
    with pytest.raises(KeyError, match="row 3"):
        grader.run(_raises, _call)


@pytest.mark.parametrize("answer,kind,needle", [
    (_segfaults, "signal", "SIGSEGV"), (_aborts, "signal", "SIGABRT"),
    (_exits, "exit", "exit status 3"), (_loops_forever, "timeout", "4 s"),
    (_sys_exit, "exit", "SystemExit: PASS"), (_interrupts, "exit", "KeyboardInterrupt")],
    ids=["segfault", "abort", "exit", "endless", "sys.exit", "KeyboardInterrupt"])
def test_a_crash_or_a_timeout_is_a_failure_that_reads_as_a_verdict(answer, kind, needle,
                                                                    monkeypatch):
    monkeypatch.setattr(grader, "LIMIT_S", LIMIT_S)
    start = time.time()
    with pytest.raises(grader.Failed) as caught:
        grader.run(answer, _call)
    assert caught.value.kind == kind and time.time() - start < LIMIT_S + 10
    feedback = grader.failure_feedback(caught.value, "python")
    assert not feedback.ok and needle in feedback.message and feedback.hint
    assert "not affected" in feedback.message or kind == "exit"


@pytest.mark.parametrize("exercise,answer", [
    (ch07.residual_variant, _sys_exit), (ch07.residual_variant, _interrupts),
    (ch04.fix_block_denominator, "_kernel_exits")], ids=["sys.exit", "interrupt", "kernel"])
def test_an_answer_that_raises_system_exit_gets_a_verdict_not_an_escape(exercise, answer):
    answer = globals()[answer] if isinstance(answer, str) else answer
    feedback = exercise.check(answer)  # SystemExit or KeyboardInterrupt must not reach the cell
    assert not feedback.ok and "ended the process" in feedback.message, str(feedback)


def _restarts_the_clock(*args):
    while True:
        grader.clock_starts()
        time.sleep(0.05)


def test_restarting_the_clock_again_and_again_still_ends(monkeypatch):
    grader.run(_forty_two, _pid)  # the server started under the usual limits
    monkeypatch.setattr(grader, "LIMIT_S", 0.5)
    monkeypatch.setattr(grader, "START_LIMIT_S", 1.0)
    start = time.time()
    with pytest.raises(grader.Failed) as caught:
        grader.run(_restarts_the_clock, _call)
    assert caught.value.kind == "timeout" and time.time() - start < 2 * (1.0 + 0.5) + 10


def test_the_clock_pauses_while_compiling_and_a_crash_names_its_case(monkeypatch):
    monkeypatch.setattr(grader, "LIMIT_S", 0.5)
    assert grader.run(_forty_two, _slow_then_value, 1.0) == 42  # paused: no timeout
    with pytest.raises(grader.Failed) as caught:
        grader.run(_segfaults, _slow_then_value, 0.0)
    assert caught.value.where == "On the second case"
    assert grader.failure_feedback(caught.value).message.startswith("On the second case your")


def test_an_answer_that_cannot_be_copied_is_a_verdict():
    lock = __import__("threading").Lock()

    def reads_a_lock():
        return lock.locked()

    with pytest.raises(grader.Failed) as caught:
        grader.run(reads_a_lock, _call)
    feedback = grader.failure_feedback(caught.value)
    assert caught.value.kind == "copy" and "lock" in feedback.message and "def" in feedback.hint


def test_the_sanitizer_log_is_read_for_its_count_and_first_error():
    memcheck = ("========= COMPUTE-SANITIZER\n"
                "========= Invalid __global__ write of size 4 bytes\n"
                "=========     at rmsnorm_shuffle<float>+0x1b0\n"
                "========= ERROR SUMMARY: 2 errors\n")
    assert grader.parse_sanitizer_log(memcheck) == (2, "Invalid __global__ write of size 4 bytes")
    racecheck = ("========= Error: Race reported between Write access at 0x120 in "
                 "block_sum_shuffle\n========= RACECHECK SUMMARY: 1 hazard displayed (1 error, "
                 "0 warnings)\n")
    errors, first = grader.parse_sanitizer_log(racecheck)
    assert errors == 1 and first.startswith("Error: Race reported")
    assert grader.parse_sanitizer_log("========= ERROR SUMMARY: 0 errors\n") == (0, "")


# ---- every code exercise survives a segfaulting, an aborting and an endless answer ----

SHUFFLE = ch03.shuffle_finish.solution
END = "return warp_sum(total, lanes);"
HIP_ANSWERS = {
    "segfault": SHUFFLE.replace(END, "if (threadIdx.x == 1) *(volatile int*)0 = 1;\n    " + END),
    "abort": SHUFFLE.replace(END, "if (threadIdx.x == 1) abort();\n    " + END),
    "endless": SHUFFLE.replace(END, "volatile int spin = 1;\n    while (spin) {}\n    " + END),
}


@triton.jit
def _kernel_segfaults(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                      BLOCK_SIZE: tl.constexpr):
    ctypes.string_at(0)  # in the interpreter a kernel's body is Python: a stand-in for a crash


@triton.jit
def _kernel_exits(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                  BLOCK_SIZE: tl.constexpr):
    raise SystemExit(0)


@triton.jit
def _kernel_aborts(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                   BLOCK_SIZE: tl.constexpr):
    os.abort()


@triton.jit
def _kernel_loops_forever(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                          BLOCK_SIZE: tl.constexpr):
    i = 0
    while i >= 0:
        i += 1


TRITON_ANSWERS = {"segfault": _kernel_segfaults, "abort": _kernel_aborts,
                  "endless": _kernel_loops_forever}


def _function_segfaults(x, r, w, eps):
    ctypes.string_at(0)


def _function_aborts(x, r, w, eps):
    os.abort()


def _function_loops_forever(x, r, w, eps):
    while True:
        pass


FUNCTION_ANSWERS = {"segfault": _function_segfaults, "abort": _function_aborts,
                    "endless": _function_loops_forever}
NEEDLES = {"segfault": "SIGSEGV", "abort": "SIGABRT", "endless": "did not finish"}
CASES = ([(ch03.shuffle_finish, HIP_ANSWERS, k) for k in NEEDLES]
         + [(e, TRITON_ANSWERS, k) for e in ch04.KERNEL_EXERCISES for k in NEEDLES]
         + [(ch07.residual_variant, FUNCTION_ANSWERS, k) for k in NEEDLES])


@pytest.mark.skipif(env.current().on_gpu, reason="the stand-ins crash only in the interpreter")
@pytest.mark.parametrize("exercise,answers,kind", CASES,
                         ids=[f"{e.name}-{k}" for e, _, k in CASES])
def test_every_code_exercise_gives_a_verdict_for_a_crash_and_an_endless_loop(exercise, answers,
                                                                              kind, monkeypatch):
    monkeypatch.setattr(grader, "LIMIT_S", LIMIT_S)
    start = time.time()
    feedback = exercise.check(answers[kind])
    assert not feedback.ok and NEEDLES[kind] in feedback.message, str(feedback)
    assert "not affected" in feedback.message and feedback.hint and not feedback.error
    if kind == "endless":  # compiling does not count; the loop is stopped at the limit
        assert time.time() - start < LIMIT_S + 60


# ---- the GPU: its verdicts are the CPU's ----

@pytest.mark.gpu
@pytest.mark.parametrize("chapter,exercise", [(ch03, ch03.shuffle_finish),
                                              (ch07, ch07.residual_variant),
                                              (ch04_looped, ch04_looped.build_looped),
                                              (ch09_dx, ch09_dx.build_dx)],
                         ids=lambda v: getattr(v, "name", ""))
def test_gpu_verdicts_are_the_cpu_verdicts(chapter, exercise):
    """Every typical mistake gets, word for word, the feedback of a machine without a GPU (whose
    verdict the GPU machine asks a CPU child for first); the solution passes on both. A race's
    word and threads are the first pair the CPU runtime's OS threads meet, which differs from run
    to run (H200, 0cf9ec4: word 3, threads 3 and 192, then word 2, threads 130 and 128). (Chapter
    4's kernels: tests/exercises/test_ch04.py.)"""
    import json
    import subprocess
    import sys

    name = chapter.__name__
    script = (f"import json\nimport {name} as chapter\n"
              f"e = next(x for x in chapter.ALL if x.name == {exercise.name!r})\n"
              "out = {}\n"
              "for label, m in e.mistakes.items():\n"
              "    fb = e.check(m)\n"
              "    out[label] = [fb.ok, fb.message, fb.hint]\n"
              "out['the solution'] = [e.check(e.solution).ok, '', '']\n"
              "print(json.dumps(out))\n")
    cpu_env = {**os.environ, "FUSEDRMS_FORCE_CPU": "1", "TRITON_INTERPRET": "1",
               "PYTHONPATH": os.pathsep.join(p or os.getcwd() for p in sys.path)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=900, env=cpu_env)
    assert done.returncode == 0, done.stderr[-2000:]
    on_cpu = json.loads(done.stdout.strip().splitlines()[-1])
    assert on_cpu.pop("the solution")[0]
    solution = exercise.check(exercise.solution)
    assert solution.ok and "GPU" in solution.message, solution.message
    for label, (ok, message, hint) in on_cpu.items():
        feedback = exercise.check(exercise.mistakes[label])
        got = [feedback.ok, _one_race(feedback.message), feedback.hint]
        assert got == [ok, _one_race(message), hint], label


def _one_race(message: str) -> str:
    """A race by its kind, not its threads (the same answer on another runtime, or another lane
    count, may meet another pair of threads)."""
    def kind(m):
        return "on word W: " + ("a write and a write" if m.group(1) else "a read and a write")
    return re.sub(r"on word \d+: (?:(threads \d+ and \d+ both write it)|thread \d+ writes it and "
                  r"thread \d+ reads it)", kind, message)


def test_one_race_names_the_kind_of_race_not_its_threads():
    first = ("race in block 0 on word 3: thread 192 writes it and thread 3 reads it with no "
             "__syncthreads() between them")
    second = ("race in block 0 on word 2: thread 128 writes it and thread 130 reads it with no "
              "__syncthreads() between them")
    assert _one_race(first) == _one_race(second)
    both = first.replace("thread 192 writes it and thread 3 reads it", "threads 3 and 192 both write it")
    assert _one_race(first) != _one_race(both)


@pytest.mark.gpu
def test_compute_sanitizer_finds_a_shared_memory_race_in_hip_text():
    """Where compute-sanitizer exists its racecheck sees the missing barrier the CPU runtime
    reports; where it does not, the verdict says it was not available."""
    racy = ch03.shuffle_finish.mistakes["no barrier between the warp totals and their readers"]
    found = grader.sanitizer_findings(racy, ch03.shuffle_verdict, "sanitizer", tool="racecheck")
    solution = ch03.shuffle_finish.check(SHUFFLE)
    if grader.sanitizer_path() is None:
        assert found is None and "compute-sanitizer was not found" in solution.message
        return
    assert found[0] > 0, found
    assert grader.sanitizer_findings(SHUFFLE, ch03.shuffle_verdict, "sanitizer",
                                     tool="memcheck")[0] == 0
    assert "memcheck and racecheck found nothing" in solution.message


@pytest.mark.gpu
def test_a_crash_on_the_gpu_stays_in_its_child_and_cuda_still_works_here():
    """A kernel that stores far out of bounds: the CPU child refuses it (stores outside every
    buffer), and run compiled on the GPU its fault stays in the GPU child: this process's CUDA
    context still works."""
    feedback = ch04.fix_block_denominator.check(_kernel_far_store)
    assert not feedback.ok and "outside" in feedback.message and feedback.hint
    try:
        runs = grader.run(_kernel_far_store, ch04._compiled_runs, ch04.CASES, device="gpu")
        assert any(isinstance(r, BaseException) or r.stray_stores for r in runs)
    except grader.Failed as failed:
        assert not grader.failure_feedback(failed, "triton").ok
    assert float(torch.ones(4, device="cuda").sum()) == 4.0


@triton.jit
def _kernel_far_store(x_ptr, w_ptr, y_ptr, cols, x_row_stride, y_row_stride, eps,
                      BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    tl.store(y_ptr + row * 100_000_000 + offsets, tl.zeros([BLOCK_SIZE], tl.float32))


def test_calls_to_refuses_an_answer_that_removes_its_watch_with_a_setter_it_kept():
    import sys

    from fusedrms import checks

    kept = sys.setprofile  # what an answer's default argument could hold from before the block
    with pytest.raises(grader.WatchSwitchedOff):
        with grader.calls_to([checks.allclose]):
            kept(None)
    assert sys.setprofile is kept and sys.getprofile() is None
