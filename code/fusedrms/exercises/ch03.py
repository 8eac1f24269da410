"""Chapter 3 exercises: block size, the shuffle finish, the missing barrier, and a prediction of
the ladder's first step (hip.serial to hip.block) before the page shows it measured.

The two code exercises compile HIP text into a copy of rmsnorm.hip and run it on the CPU runtime
(which reports races and divergent barriers) and, when there is one, on the GPU. A compile error
comes back as the compiler's message. Every case reads x through rows further apart than their
width (NaN between them) and writes y between sentinels, which catch stores outside it.

The reader's block_sum_shuffle runs through the grader (:mod:`.grader`), in a child process with
a time limit: a finish that crashes the process or never returns gets a verdict. On a GPU it then
runs compiled for the GPU, and under compute-sanitizer's memcheck and racecheck where this
machine has it.
"""
from __future__ import annotations

import functools
import math
import re
from typing import Mapping, Sequence

from ..viz.source import file_section
from . import answers, grader, predictions
from .core import Exercise, Malformed, as_number, correct, wrong

EPS = 1e-5
BOUNDARY_SHAPES = ((3, 13), (33, 257))


def _hip():
    from ..kernels.hip import build, kernels

    return build, kernels


def _gpu_build_available() -> bool:
    """A GPU, and the compiler that builds the HIP source for it (nvcc or hipcc)."""
    from .. import env

    if not env.current().on_gpu:
        return False
    build, kernels = _hip()
    import torch

    return build.available(kernels.toolchain_for(torch.device("cuda")))


def _replace_section(text: str, marker: str, new_body: str) -> str:
    pattern = re.compile(rf"(^[^\n]*\[book:{re.escape(marker)}\][^\n]*\n)(.*?)(^[^\n]*\[/book:{re.escape(marker)}\])",
                         flags=re.S | re.M)
    if not pattern.search(text):
        raise KeyError(f"no [book:{marker}] section in the kernel source")
    return pattern.sub(lambda m: m.group(1) + new_body.rstrip() + "\n" + m.group(3), text, count=1)


def _compiler_message(err) -> list[str]:
    """The compiler's lines, file names without their folders (the reader's machine's paths
    say nothing about the error)."""
    text = re.sub(r"(?<![\w.])/(?:[^\s:/'\"]+/)+([^\s:/'\"]+)", r"\1", err.message.strip())
    return [ln for ln in text.splitlines() if ln.strip()]


def _compiler_feedback(err, what: str):
    lines = _compiler_message(err)
    shown = "\n".join(lines[:12]) + ("\n..." if len(lines) > 12 else "")
    return wrong(f"{what} does not compile. The compiler says:\n{shown}",
                 "Fix the first error the compiler reports; the line numbers refer to the whole "
                 "kernel file with your text in place.")


X_PAD = 3  # x's rows lie cols + X_PAD elements apart
GUARD = 64  # sentinel elements on each side of y
SENTINEL = -12345.0


def guarded_run(text: str, variant: str, x, w, block: int, defines=None):
    """``variant`` of ``text`` on ``x`` (any row stride), into a y with sentinels on both
    sides: (y on the CPU, how many sentinels a store changed). KernelError when it fails."""
    import torch

    _, kernels = _hip()
    lib = kernels.library(x.device, text, defines)
    rows, cols = x.shape
    y_buf = torch.full((rows * cols + 2 * GUARD,), SENTINEL, dtype=x.dtype, device=x.device)
    y = y_buf[GUARD:GUARD + rows * cols]
    stream = None if x.device.type == "cpu" else torch.cuda.current_stream(x.device).cuda_stream
    status = getattr(lib, f"fusedrms_rmsnorm_{variant}")(
        kernels.DTYPE_CODES[x.dtype], x.data_ptr(), w.data_ptr(), y.data_ptr(), rows, cols,
        x.stride(0), EPS, block, stream)
    if status != 0:
        message = lib.fusedrms_error_message().decode(errors="replace")
        raise kernels.KernelError(f"hip.{variant} failed: {message}")
    y_buf = y_buf.cpu()
    stray = int((y_buf[:GUARD] != SENTINEL).sum() + (y_buf[GUARD + rows * cols:] != SENTINEL).sum())
    return y_buf[GUARD:GUARD + rows * cols].view(rows, cols), stray


def _run_variant(text: str, variant: str, shapes, blocks, defines=None, device="cpu"):
    """Run ``variant`` from ``text`` on every shape and block; return a failure message or None."""
    import torch

    from .. import checks, reference

    _, kernels = _hip()
    for rows, cols in shapes:
        g = torch.Generator().manual_seed(rows * 131 + cols)
        x = torch.randn(rows, cols, generator=g) * 2
        w = torch.randn(cols, generator=g)
        expected = reference.rmsnorm(x, w, EPS, accum=torch.float64)
        wide = torch.full((rows, cols + X_PAD), float("nan"))
        wide[:, :cols] = x
        x_rows, w_dev = wide.to(device)[:, :cols], w.to(device)
        for block in blocks:
            grader.progress(f"On {rows}x{cols} with {block} threads")
            try:
                y, stray = guarded_run(text, variant, x_rows, w_dev, block, defines)
            except kernels.KernelError as e:
                return f"{rows}x{cols}, block {block}: {e}"
            if stray:
                return f"{rows}x{cols}, block {block}: {stray} stores outside y"
            report = checks.allclose(y, expected)
            if not report.ok:
                return f"{rows}x{cols}, block {block}: wrong output ({report.message})"
    return None


# ---------------------------------------------------------------- (a) change only the block size

def _entries(answer) -> list[dict]:
    if hasattr(answer, "to_dict") and hasattr(answer, "columns"):  # a pandas DataFrame
        answer = answer.to_dict("records")
    if isinstance(answer, Mapping) or isinstance(answer, (str, bytes)) or not isinstance(answer, Sequence):
        raise Malformed("expected a list of records, one per block size, e.g. [{'block_size': 64, "
                        "'rows': 33, 'cols': 257, 'correct': True, 'time_us': 850.0}, ...]")
    out = []
    for i, entry in enumerate(answer):
        if not isinstance(entry, Mapping):
            kind = type(entry).__name__
            raise Malformed(f"record {i} is {'an' if kind[0] in 'aeiou' else 'a'} {kind}; each "
                            f"record is a dict with keys block_size, rows, cols, correct, time_us.")
        missing = [k for k in ("block_size", "rows", "cols", "correct", "time_us") if k not in entry]
        if missing:
            raise Malformed(f"record {i} lacks {', '.join(missing)}.")
        verdict = entry["correct"]
        if hasattr(verdict, "item") and getattr(verdict, "shape", None) in ((), (1,)):
            verdict = verdict.item()  # a numpy or 0-d torch boolean
        if not isinstance(verdict, bool):
            raise Malformed(f"record {i}: 'correct' must be True or False (what the check said).")
        try:
            time_us = float(entry["time_us"])
            block, rows, cols = (int(entry[k]) for k in ("block_size", "rows", "cols"))
        except (TypeError, ValueError, OverflowError):
            raise Malformed(f"record {i}: block_size, rows and cols must be integers and time_us "
                            f"a number.") from None
        if rows < 1 or cols < 1:
            raise Malformed(f"record {i}: rows and cols must be at least 1, got {rows} x {cols}.")
        out.append(dict(block_size=block, rows=rows, cols=cols, correct=verdict,
                        time_us=time_us))
    return out


TIME_FACTOR = 3  # a recorded time this close to the checker's own re-timing is a measurement
# Other work on the machine slows a run of the CPU runtime (one OS thread per GPU thread) several
# times over, never speeds it up: a reader's time may be this much slower than the checker's there
# (a 2-core machine under a parallel test run recorded 117 ms where the checker re-timed ~35)
CPU_SLOWER_FACTOR = 10
RETRIES_GPU, RETRIES_CPU = 2, 8  # re-timings before a time is called made up
CPU_MAX_ELEMENTS = 64 * 1024  # the CPU runtime starts one OS thread per GPU thread: keep reruns short


def _measure_block(rows: int, cols: int, block: int, on_gpu: bool):
    """hip.block at one block size, as the checker runs it: (failure or None, time in us, a function
    that times it once more)."""
    import time

    import torch

    from .. import checks, reference
    from ..measure import timer

    _, kernels = _hip()
    device = "cuda" if on_gpu else "cpu"
    g = torch.Generator().manual_seed(rows * 131 + cols)
    x, w = torch.randn(rows, cols, generator=g) * 2, torch.randn(cols, generator=g)
    expected = reference.rmsnorm(x, w, EPS, accum=torch.float64)
    x, w = x.to(device), w.to(device)

    def run():
        return kernels.rmsnorm(x, w, EPS, variant="block", block_size=block)

    try:
        start = time.perf_counter()
        y = run()
        once_us = (time.perf_counter() - start) * 1e6
    except kernels.KernelError as e:
        return f"{rows}x{cols}, block {block}: {e}", math.nan, None
    report = checks.allclose(y.cpu(), expected)
    failure = None if report.ok else f"{rows}x{cols}, block {block}: wrong output ({report.message})"
    # On a GPU: the reader's timer (timer.median_us, device events). On the CPU runtime one run is
    # the measurement (a launch there takes milliseconds to seconds); `again` times more runs, for
    # a second opinion on a machine whose other work may have slowed one of them.
    return failure, timer.median_us(run, 2, 5) if on_gpu else once_us, lambda: timer.median_us(run, 0, 1)


def _time_mismatch(recorded: float, measured: float,
                   slower_factor: float = TIME_FACTOR) -> str | None:
    """Why ``recorded`` (us) cannot be a measurement of what took ``measured`` us here, or None:
    at most TIME_FACTOR faster, at most ``slower_factor`` slower."""
    def near(t):
        return measured / TIME_FACTOR <= t <= measured * slower_factor

    if near(recorded):
        return None
    for unit, scale in (("milliseconds", 1e3), ("seconds", 1e6)):
        if near(recorded * scale):
            return f"{recorded:g} looks like {unit}: the checker measured {measured:.1f} us"
    if recorded > measured:
        return (f"the checker measured {measured:.1f} us, your {recorded:g} us is more than "
                f"{slower_factor:g}x slower")
    return f"the checker measured {measured:.1f} us, more than {TIME_FACTOR}x away from your {recorded:g} us"


def _grade_block_sizes(answer):
    entries = _entries(answer)
    sizes = sorted({e["block_size"] for e in entries})
    if len(sizes) < 3:
        recorded = ("no block size recorded" if not sizes else
                    f"only one block size recorded ({sizes[0]})" if len(sizes) == 1 else
                    f"only two block sizes recorded ({sizes[0]} and {sizes[1]})")
        return wrong(f"{recorded}: the exercise asks for at least three.",
                     "Measure at least three, e.g. 64, 256 and 1024, to see a trend.")
    if len({(e["rows"], e["cols"]) for e in entries}) != 1:
        return wrong("the records use different shapes: only the block size may change.",
                     "Keep x, w and the shape fixed; loop over block_size only.")
    for e in entries:
        b = e["block_size"]
        if not (1 <= b <= 1024 and b & (b - 1) == 0):
            return wrong(f"block size {b} cannot run: the tree halves the active threads each step, "
                         f"so the kernel needs a power of two from 1 to 1024.",
                         "hip.block raises an InputError for it; record only sizes that ran.")
        if not math.isfinite(e["time_us"]) or e["time_us"] <= 0:
            return wrong(f"block size {b}: time_us = {e['time_us']} is not a measured time.",
                         "Record the median of a few timed runs (timer.median_us does it).")
    rows, cols = entries[0]["rows"], entries[0]["cols"]
    if rows < 1 or cols < 1:
        return wrong(f"{rows}x{cols} is not a shape hip.block can run.",
                     "Record the shape of the x you timed: rows and cols are both at least 1.")
    on_gpu = _gpu_build_available()
    if not on_gpu and rows * cols > CPU_MAX_ELEMENTS:
        return wrong(f"{rows}x{cols} on the CPU runtime: the checker reruns every block size at "
                     f"your shape, and here that is more than it can time ({CPU_MAX_ELEMENTS} "
                     f"elements at most).",
                     "Without a GPU, time the chapter's CPU shape (33x257): the CPU runtime starts "
                     "one OS thread per GPU thread.")
    # Rerun each size at the reader's shape: first the same verdicts, then times of the same size.
    reruns = []
    for e in entries:
        failure, measured_us, again = _measure_block(rows, cols, e["block_size"], on_gpu)
        if (failure is None) != e["correct"]:
            actual = "passes" if failure is None else f"fails ({failure})"
            return wrong(f"block size {e['block_size']}: you recorded correct={e['correct']}, but "
                         f"the check {actual}.",
                         "Compare each output with reference.rmsnorm(x, w, eps, accum=torch.float64) "
                         "through checks.allclose, and record report.ok.")
        reruns.append((e, measured_us, again))
    slower = TIME_FACTOR if on_gpu else CPU_SLOWER_FACTOR
    for e, measured_us, again in reruns:
        mismatch = (_time_mismatch(e["time_us"], measured_us, slower)
                    if math.isfinite(measured_us) else None)
        # More runs before calling the number made up: one agreeing run is enough. On the CPU
        # runtime other work on the machine can slow a run several times over, so try longer.
        seen = [mismatch]
        for _ in range(RETRIES_GPU if on_gpu else RETRIES_CPU):
            if not mismatch:
                break
            mismatch = _time_mismatch(e["time_us"], again(), slower)
            seen.append(mismatch)
        if mismatch:  # say "looks like seconds" if any run saw it: the likeliest slip
            mismatch = next((m for m in seen if m and "looks like" in m), mismatch)
            return wrong(f"block size {e['block_size']} at {rows}x{cols}: {mismatch}.",
                         "Record timer.median_us(...) of the call itself, in microseconds, at the "
                         "shape you write in rows and cols (on this machine: "
                         f"{'the GPU' if on_gpu else 'the CPU runtime'}).")
    fastest = min(entries, key=lambda e: e["time_us"])
    return correct(f"{len(sizes)} block sizes at {rows}x{cols}, verdicts as recorded and times as "
                   f"this machine measures them; the fastest you measured: {fastest['block_size']} "
                   f"threads ({fastest['time_us']:.1f} us).")


def block_sizes_solution() -> list[dict]:
    """The exercise done on this machine (what the chapter's solution cell does): 1024x4096 and up to
    1024 threads on a GPU, 33x257 and up to 64 threads on the CPU runtime (a few seconds)."""
    import torch

    from .. import checks, reference
    from ..measure import timer

    _, kernels = _hip()
    on_gpu = _gpu_build_available()
    rows, cols = (1024, 4096) if on_gpu else (33, 257)
    g = torch.Generator().manual_seed(rows * 131 + cols)
    x, w = torch.randn(rows, cols, generator=g), torch.randn(cols, generator=g)
    expected = reference.rmsnorm(x, w, EPS, accum=torch.float64)
    device = "cuda" if on_gpu else "cpu"
    x, w = x.to(device), w.to(device)
    out = []
    for block in (32, 64, 256, 1024) if on_gpu else (8, 16, 32, 64):
        y = kernels.rmsnorm(x, w, EPS, variant="block", block_size=block)
        ok = checks.allclose(y.cpu(), expected).ok
        t = timer.median_us(lambda: kernels.rmsnorm(x, w, EPS, variant="block", block_size=block), 1, 3)
        out.append({"block_size": block, "rows": rows, "cols": cols, "correct": ok, "time_us": t})
    return out


class _Measured(Exercise):
    """An exercise whose solution is a measurement on this machine, taken afresh whenever asked for
    (times measured a while ago on a busy machine need not match the checker's rerun now)."""

    measure = None

    @property
    def solution(self):
        return self.measure() if self._solution is None and self.measure is not None else self._solution

    @solution.setter
    def solution(self, value):
        self._solution = value


class _MistakesOf(Mapping):
    """Typical mistakes made from the measured solution: labels now, values when asked for."""

    def __init__(self, exercise, makers: dict):
        self._exercise, self._makers = exercise, makers

    def __getitem__(self, label):
        return self._makers[label]([dict(e) for e in self._exercise.solution])

    def __iter__(self):
        return iter(self._makers)

    def __len__(self):
        return len(self._makers)


block_sizes = _Measured(
    name="block_sizes",
    question="Run hip.block with only the block size changed (at least three powers of two) and "
             "record block_size, rows, cols, correct and time_us for each.",
    grade=_grade_block_sizes,
    solution=None,  # measured on first use: block_sizes_solution()
)
block_sizes.measure = block_sizes_solution
block_sizes.mistakes = _MistakesOf(block_sizes, {
    "two sizes only": lambda s: s[:2],
    "shape changed too": lambda s: s[:2] + [{**s[2], "cols": s[2]["cols"] + 1}],
    "a block size that cannot run": lambda s: s[:3] + [{**s[0], "block_size": 96}],
    "correctness not checked": lambda s: s[:3] + [{**s[3], "correct": False}],
    "no time measured": lambda s: s[:3] + [{**s[3], "time_us": 0.0}],
    "times in milliseconds": lambda s: [{**e, "time_us": e["time_us"] / 1e3} for e in s],
    "made-up times": lambda s: [{**e, "time_us": 1.0} for e in s],
    "a shape it never ran": lambda s: [{**e, "rows": 16 * e["rows"]} for e in s],
})


# ---------------------------------------------------------------- (b) write the shuffle finish

def shuffle_solution() -> str:
    build, _ = _hip()
    return file_section(build.SOURCE, "shuffle_sum")


SHUFFLE_STARTER = """\
__device__ float block_sum_shuffle(float partial) {
    HIP_DYNAMIC_SHARED(float, warp_totals)
    // TODO: sum `partial` over the block with __shfl_xor (or __shfl_down) inside each warp,
    // one shared-memory slot per warp, and return the block's total to every thread.
    return partial;
}
"""


def _loop_bodies(text: str) -> list[str]:
    """The bodies of the ``for`` and ``while`` loops in C text (a braced block, or the single
    statement up to its semicolon), comments removed."""
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
    bodies = []
    for loop in re.finditer(r"\b(?:for|while)\s*\(", code):
        depth, i = 1, loop.end()
        while i < len(code) and depth:  # skip the loop's (...) header
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            i += 1
        rest = code[i:].lstrip()
        if rest.startswith("{"):
            depth, j = 0, 0
            for j, ch in enumerate(rest):
                depth += {"{": 1, "}": -1}.get(ch, 0)
                if depth == 0:
                    break
            bodies.append(rest[:j + 1])
        else:
            bodies.append(rest.split(";", 1)[0])
    return bodies


# Device code may call min and max, as HIP and CUDA provide them; the CPU runtime's C++ does not
# have them unqualified. The checker adds them for the reader's text on the CPU build only.
_CPU_MIN_MAX = ("#if !defined(__CUDACC__) && !defined(__HIP__)\n"
                "using std::max;\nusing std::min;\n#endif\n")


def _shuffle_hint(failure: str) -> str:
    """What to look at, from what the run reported."""
    if "race" in failure:
        return ("Put a __syncthreads() that every thread reaches between writing the warp totals "
                "to shared memory and reading them.")
    if "divergent" in failure:
        return ("Every thread must reach the same __syncthreads(): keep it outside "
                "if (lane == 0) and outside anything only some threads run.")
    return ("Use warpSize (32 on NVIDIA, 64 or 32 on AMD) and blockDim.x, not a fixed 32, and make "
            "sure every lane ends with the whole block's total: __shfl_xor gives a warp's sum to "
            "all its lanes, __shfl_down only to lane 0, and the warps' totals must be added too.")


def _grade_shuffle(answer):
    if not isinstance(answer, str) or not answer.strip():
        raise Malformed("expected the HIP text of block_sum_shuffle (a string), e.g. "
                        "answer = '''__device__ float block_sum_shuffle(float partial) { ... }'''")
    if "block_sum_shuffle" not in answer:
        return wrong("the text does not define block_sum_shuffle(float partial).",
                     "Keep the function's name and signature: the kernels call it.")
    if "__shfl" not in answer:
        return wrong("no shuffle in the text: this exercise is about exchanging registers with "
                     "__shfl_xor / __shfl_down.",
                     "Inside a warp, add v += __shfl_xor(v, mask, lanes) for mask = lanes/2 ... 1.")
    if any("__syncthreads" in body for body in _loop_bodies(answer)):
        return wrong("a __syncthreads() inside a loop: that is the shared-memory tree again, "
                     "round by round.",
                     "Let shuffles do the rounds inside each warp (no barrier needed there); "
                     "shared memory and one barrier only combine the warps' totals.")
    try:  # in a child process: the CPU runtime's verdict, the same on every machine
        verdict = grader.run(answer, shuffle_verdict, "cpu")
        if not verdict or not _gpu_build_available():
            return verdict
        on_gpu = grader.run(answer, shuffle_verdict, "cuda", device="gpu")
        if not on_gpu:
            return on_gpu
        findings = {tool: grader.sanitizer_findings(answer, shuffle_verdict, "sanitizer",
                                                    tool=tool)
                    for tool in ("memcheck", "racecheck")}
    except grader.Failed as failed:
        return grader.failure_feedback(failed, "hip")
    for tool, found in findings.items():
        if found is not None and found[0]:
            return wrong(f"on the GPU, compute-sanitizer's {tool} reports {found[0]} error"
                         f"{'s' if found[0] > 1 else ''}: {found[1] or 'see its log'}",
                         _SANITIZER_HINTS[tool])
    checked = ("compute-sanitizer's memcheck and racecheck found nothing"
               if all(f is not None for f in findings.values()) else
               "compute-sanitizer was not found here, so the GPU run was not checked for "
               "out-of-bounds accesses or shared-memory races")
    return correct(f"{verdict.message.rstrip('.')}; on the GPU too ({checked}).")


_SANITIZER_HINTS = {
    "memcheck": "An access outside an allocation: check every index into shared memory (one "
                "slot per warp) and every pointer.",
    "racecheck": "Two threads touch one shared-memory word, one writing, with no barrier "
                 "between: put a __syncthreads() that every thread reaches between the writes "
                 "of the warp totals and their reads.",
}
SHUFFLE_SHAPES = BOUNDARY_SHAPES + ((4, 1),)


def shuffle_verdict(answer: str, device: str):
    """(In the grader's child) the verdict on the reader's block_sum_shuffle: on the CPU runtime
    with 64- and 32-lane warps (``device`` "cpu"), compiled for the GPU ("cuda"), or a short run
    for compute-sanitizer ("sanitizer")."""
    build, kernels = _hip()
    cpu = device == "cpu"
    text = _replace_section(build.source_text(), "shuffle_sum", _CPU_MIN_MAX + answer)
    # 64-lane wavefronts first: they catch a hard-coded 32. Then 32-lane warps.
    builds = [{"FUSEDRMS_CPU_WARP": lanes} for lanes in (64, 32)] if cpu else [None]
    for defines in builds:
        try:
            with grader.clock_paused():  # compiling is not the reader's code running
                kernels.library("cpu" if cpu else "cuda", text, defines)
        except build.CompileError as e:
            return _compiler_feedback(e, "your block_sum_shuffle" + ("" if cpu else
                                                                     " (GPU build)"))
        if cpu:
            failure = _run_variant(text, "shuffle", SHUFFLE_SHAPES, (16, 64, 256), defines)
            where = f"on the CPU runtime with {defines['FUSEDRMS_CPU_WARP']}-lane warps"
        elif device == "cuda":
            failure = _run_variant(text, "shuffle", SHUFFLE_SHAPES + ((64, 4096),),
                                   (32, 256, 1024), device="cuda")
            where = "on the GPU"
        else:
            failure = _run_variant(text, "shuffle", BOUNDARY_SHAPES, (32, 256), device="cuda")
            where = "on the GPU under compute-sanitizer"
        if failure:
            return wrong(f"{where}: {failure}", _shuffle_hint(failure) if cpu else
                         "It passed on the CPU runtime: look for lanes that read a shuffle from a "
                         "lane that does not take part.")
    return correct("your shuffle finish gives the right RMSNorm on 3x13, 33x257 and 4x1 (rows "
                   "read at a stride, y between sentinels), with 16 to 256 threads, on 32- and "
                   "64-lane warps, with no race and no divergent barrier.")


def _shuffle_mistakes() -> dict:
    ok = shuffle_solution()
    return {
        "32 lanes hard-coded": ok.replace(
            "const int lanes = (int)blockDim.x < warpSize ? (int)blockDim.x : warpSize;",
            "const int lanes = 32;"),
        "no barrier between the warp totals and their readers": ok.replace(
            "    __syncthreads();  // one barrier: warp totals written before any read\n", ""),
        "barrier only for lane 0": ok.replace(
            "    if (lane == 0) warp_totals[warp] = mine;\n    __syncthreads();",
            "    if (lane == 0) { warp_totals[warp] = mine; __syncthreads(); }"),
        "shfl_down leaves the total in lane 0 only": ok.replace(
            "v += __shfl_xor(v, mask, lanes);", "v += __shfl_down(v, mask, lanes);"),
        "does not compile": ok.replace("const float mine = warp_sum(partial, lanes);",
                                       "const float mine = warp_sum(partial, lanes)"),
    }


shuffle_finish = Exercise(
    name="shuffle_finish",
    question="Write block_sum_shuffle(float partial): the block's sum with warp shuffles, correct "
             "on 32-lane warps and 64- or 32-lane wavefronts.",
    grade=_grade_shuffle,
    solution=shuffle_solution(),
    mistakes=_shuffle_mistakes(),
)


# ---------------------------------------------------------------- (c) find the missing barrier

_TREE_BARRIER = "        __syncthreads();  // all threads, also those that added nothing\n"


def missing_barrier_listing() -> str:
    """The block kernel with one barrier taken out (the one the exercise asks for)."""
    build, _ = _hip()
    section = file_section(build.SOURCE, "block_tree")
    assert _TREE_BARRIER in section, "the block kernel changed: update exercises.ch03"
    return section.replace(_TREE_BARRIER, "")


def numbered_listing() -> str:
    return "\n".join(f"{i:3d}  {line}" for i, line in enumerate(missing_barrier_listing().splitlines(), 1))


def _solution_line() -> int:
    lines = missing_barrier_listing().splitlines()
    return next(i for i, ln in enumerate(lines, 1) if "if (tid < stride)" in ln)


def _grade_missing_barrier(answer):
    if isinstance(answer, str):  # "4", "line 4", "after line 4"
        found = re.fullmatch(r"\s*(?:after\s+)?(?:line\s*)?(\S+)\s*", answer, flags=re.I)
        answer = found.group(1) if found else answer
    try:  # 18, 18.0, "18", a 0-d tensor
        value = as_number(answer, "a line number of the listing")
    except Malformed as e:
        said = str(e).split(". Write")[0].rstrip(".")
        raise Malformed(f"{said}. Write the number the listing shows at the start of the line, "
                        f"as a whole number.") from None
    if value != int(value):
        raise Malformed(f"a line number is a whole number; got {value:g}.")
    line = int(value)
    lines = missing_barrier_listing().splitlines()
    if not 1 <= line <= len(lines):
        raise Malformed(f"the listing has lines 1 to {len(lines)}; got {line}.")
    fixed = lines[:line] + ["        __syncthreads();  // inserted by the checker"] + lines[line:]
    build, kernels = _hip()
    text = _replace_section(build.source_text(), "block_tree", "\n".join(fixed))
    try:
        kernels.library("cpu", text)
    except build.CompileError:  # the reader wrote no code: say why the place is impossible
        return wrong(f"a barrier after line {line} does not even compile: there it splits a "
                     f"statement, becomes the body of a loop, or falls outside the kernel.",
                     "Choose a line that ends a complete statement inside the kernel. Then ask "
                     "which shared-memory slot one round writes and the next round reads.")
    failure = _run_variant(text, "block", ((1, 4), (33, 257)), (4, 64))
    if failure:
        return wrong(f"with __syncthreads() after line {line} the CPU runtime still finds a "
                     f"problem: {failure}",
                     "Which shared-memory slot does one round write and the next round read? The "
                     "barrier goes between them, where every thread passes it.")
    return correct(f"a barrier after line {line} separates each round's writes from the next "
                   f"round's reads (and the last round from the read of partial[0]).")


missing_barrier = Exercise(
    name="missing_barrier",
    question="One __syncthreads() is missing from this block kernel. After which line of the "
             "listing does it belong?",
    grade=_grade_missing_barrier,
    solution=None,  # set below from the listing
    mistakes={},
)
missing_barrier.solution = _solution_line()
missing_barrier.mistakes = {
    "after the first barrier (before the loop)": next(
        i for i, ln in enumerate(missing_barrier_listing().splitlines(), 1) if "__syncthreads();" in ln),
    "at the top of the loop body": _solution_line() - 1,
    "after the loop": _solution_line() + 1,
}


# ---- predict, then look: how much faster is one block per row? ----

PREDICT_SHAPE = "1024x4096 float32"
SPEEDUP_CLOSE = 1.25  # within a factor of 1.25 of the recorded speedup is a good prediction


@functools.lru_cache(maxsize=1)
def recorded_block_speedup() -> dict | None:
    """The committed recording's hip.serial and hip.block at the prediction's shape: their
    medians, the block kernel's share of the copy floor's rate, the copy floor's time, the GPU,
    and ``speedup`` (serial time / block time); None when it is missing."""
    from .. import records
    from ..book import ch03 as ladder

    try:
        doc = ladder.load(records.COMMITTED)
    except (FileNotFoundError, ValueError):
        return None
    here = {p["name"]: p for p in ladder.ladder_points(doc or {"records": []})
            if p["shape"] == PREDICT_SHAPE and p.get("correct")}
    if not {"hip.serial", "hip.block"} <= set(here) or not here["hip.block"]["fraction_of_floor"]:
        return None
    serial, block = here["hip.serial"]["median_us"], here["hip.block"]["median_us"]
    share = here["hip.block"]["fraction_of_floor"]
    return {"serial_us": serial, "block_us": block, "speedup": serial / block,
            "block_share": share, "floor_us": block * share,
            "gpu": predictions.recorded_gpu(doc)}


def _grade_block_speedup(answer):
    value = predictions.read_ratio(answer, "a ratio (serial time / block time)")
    found = recorded_block_speedup()
    if found is None:
        return predictions.recording_missing()
    speedup = found["speedup"]
    shown = f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
    said = (f"You predicted {shown}×. The {found['gpu']} recorded {found['serial_us']:,.0f} µs "
            f"for hip.serial and {found['block_us']:.1f} µs for hip.block: {speedup:.0f}×.")
    if speedup / SPEEDUP_CLOSE <= value <= speedup * SPEEDUP_CLOSE:
        return correct(f"{said} No single reason explains a factor this size: the serial kernel "
                       f"leaves most multiprocessors idle, its warps' loads are not coalesced, "
                       f"and each thread walks a chain of 4096 dependent additions. One block "
                       f"per row removes all three at once.")
    if value < 1 and answers.close(1 / value, speedup, SPEEDUP_CLOSE - 1):
        return wrong(f"{said}", "That is block time / serial time: the question asks serial / "
                                "block, above 1 when the block kernel is faster.")
    if value < speedup:
        return wrong(f"{said}",
                     "The causes multiply: the serial kernel's few blocks leave most "
                     "multiprocessors idle, each warp's load touches 32 rows instead of one "
                     "stretch, and each thread waits on a chain of 4096 dependent additions. "
                     "One block per row removes all three at once.")
    return wrong(f"{said}",
                 f"Threads do not divide the time by their number: a kernel that must move "
                 f"these bytes takes about the copy floor at best, {found['floor_us']:.1f} µs "
                 f"here. The block kernel already runs at {found['block_share']:.0%} of the "
                 f"floor's rate, so even a kernel at the floor would beat hip.serial by about "
                 f"{found['serial_us'] / found['floor_us']:.0f}×.")


def _block_speedup_solution() -> float | None:
    found = recorded_block_speedup()
    return None if found is None else round(found["speedup"])


def _block_speedup_mistakes() -> dict:
    found = recorded_block_speedup()
    if found is None:
        return {}
    return {"the same bytes, the same time": 1.0, "one cause, a few times": 4.0,
            "256 threads, 256 times faster": 256.0,
            "the ratio inverted": round(1 / found["speedup"], 4)}


predict_block_speedup = Exercise(
    "predict_block_speedup",
    "Predict how many times faster hip.block runs than hip.serial at 1024 x 4096 fp32 on the "
    "H200, L2 flushed: serial's time over block's, one number, e.g. 4.",
    _grade_block_speedup,
    solution=_block_speedup_solution(),
    mistakes=_block_speedup_mistakes())

ALL = [block_sizes, shuffle_finish, missing_barrier, predict_block_speedup]
