"""Chapter 3 exercises: block size, the shuffle finish, the missing barrier.

The two code exercises compile the reader's HIP text into a copy of rmsnorm.hip and run it on the
CPU runtime (which reports races and divergent barriers) and, when there is one, on the GPU. A
compile error comes back as the compiler's message.
"""
from __future__ import annotations

import math
import re
from typing import Mapping, Sequence

from ..viz.source import file_section
from .core import Exercise, Malformed, correct, wrong

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


def _compiler_feedback(err, what: str):
    lines = [ln for ln in err.message.strip().splitlines() if ln.strip()]
    shown = "\n".join(lines[:12]) + ("\n..." if len(lines) > 12 else "")
    return wrong(f"{what} does not compile. The compiler says:\n{shown}",
                 "Fix the first error the compiler reports; the line numbers refer to the whole "
                 "kernel file with your text in place.")


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
        for block in blocks:
            try:
                y = kernels.rmsnorm(x.to(device), w.to(device), EPS, variant=variant,
                                    block_size=block, text=text, defines=defines).cpu()
            except kernels.KernelError as e:
                return f"{rows}x{cols}, block {block}: {e}"
            report = checks.allclose(y, expected)
            if not report.ok:
                return f"{rows}x{cols}, block {block}: wrong output ({report.message})"
    return None


# ---------------------------------------------------------------- (a) change only the block size

def _entries(answer) -> list[dict]:
    if isinstance(answer, Mapping) or isinstance(answer, (str, bytes)) or not isinstance(answer, Sequence):
        raise Malformed("expected a list of records, one per block size, e.g. [{'block_size': 64, "
                        "'rows': 33, 'cols': 257, 'correct': True, 'time_us': 850.0}, ...]")
    out = []
    for i, entry in enumerate(answer):
        if not isinstance(entry, Mapping):
            raise Malformed(f"record {i} is a {type(entry).__name__}; each record is a dict with "
                            f"keys block_size, rows, cols, correct, time_us.")
        missing = [k for k in ("block_size", "rows", "cols", "correct", "time_us") if k not in entry]
        if missing:
            raise Malformed(f"record {i} lacks {', '.join(missing)}.")
        if not isinstance(entry["correct"], bool):
            raise Malformed(f"record {i}: 'correct' must be True or False (what the check said).")
        try:
            time_us = float(entry["time_us"])
            block, rows, cols = (int(entry[k]) for k in ("block_size", "rows", "cols"))
        except (TypeError, ValueError):
            raise Malformed(f"record {i}: block_size, rows and cols must be integers and time_us "
                            f"a number.") from None
        out.append(dict(block_size=block, rows=rows, cols=cols, correct=entry["correct"],
                        time_us=time_us))
    return out


def _grade_block_sizes(answer):
    entries = _entries(answer)
    sizes = sorted({e["block_size"] for e in entries})
    if len(sizes) < 3:
        return wrong(f"only {len(sizes)} block size(s) recorded: {sizes}.",
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
    # Rerun each size on the reader's shape (capped on the CPU runtime) and compare the verdicts.
    rows, cols = entries[0]["rows"], entries[0]["cols"]
    on_gpu = _gpu_build_available()
    if not on_gpu:
        rows, cols = min(rows, 5), min(cols, 257)  # the CPU runtime: one OS thread per GPU thread
    device = "cuda" if on_gpu else "cpu"
    _, kernels = _hip()
    for e in entries:
        failure = _run_variant(None, "block", [(rows, cols)], [e["block_size"]], device=device)
        if (failure is None) != e["correct"]:
            actual = "passes" if failure is None else f"fails ({failure})"
            return wrong(f"block size {e['block_size']}: you recorded correct={e['correct']}, but "
                         f"the check {actual}.",
                         "Compare each output with reference.rmsnorm(x, w, eps, accum=torch.float64) "
                         "through checks.allclose, and record report.ok.")
    fastest = min(entries, key=lambda e: e["time_us"])
    return correct(f"{len(sizes)} block sizes, all correct as recorded; the fastest you measured: "
                   f"{fastest['block_size']} threads ({fastest['time_us']:.1f} us).")


_SWEEP = [{"block_size": b, "rows": 33, "cols": 257, "correct": True, "time_us": t}
          for b, t in ((32, 410.0), (64, 520.0), (256, 900.0), (1024, 2600.0))]

block_sizes = Exercise(
    name="block_sizes",
    question="Run hip.block with only the block size changed (at least three powers of two) and "
             "record block_size, rows, cols, correct and time_us for each.",
    grade=_grade_block_sizes,
    solution=_SWEEP,
    mistakes={
        "two sizes only": _SWEEP[:2],
        "shape changed too": _SWEEP[:2] + [{**_SWEEP[2], "cols": 4096}],
        "a block size that cannot run": _SWEEP[:3] + [{**_SWEEP[0], "block_size": 96}],
        "correctness not checked": _SWEEP[:3] + [{**_SWEEP[3], "correct": False}],
        "no time measured": _SWEEP[:3] + [{**_SWEEP[3], "time_us": 0.0}],
    },
)


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
    build, kernels = _hip()
    text = _replace_section(build.source_text(), "shuffle_sum", answer)
    # 64-lane wavefronts first: they catch a hard-coded 32. Then 32-lane warps.
    for lanes in (64, 32):
        defines = {"FUSEDRMS_CPU_WARP": lanes}
        try:
            kernels.library("cpu", text, defines)
        except build.CompileError as e:
            return _compiler_feedback(e, "your block_sum_shuffle")
        failure = _run_variant(text, "shuffle", BOUNDARY_SHAPES, (16, 64, 256), defines)
        if failure:
            return wrong(f"on the CPU runtime with {lanes}-lane warps: {failure}",
                         "Use FUSEDRMS_WARP_LANES (32 on NVIDIA, 64 or 32 on AMD) and blockDim.x, "
                         "not a fixed 32; put a __syncthreads() that every thread reaches between "
                         "writing the warp totals and reading them; make sure every lane ends with "
                         "the total (__shfl_xor gives it to all lanes, __shfl_down only to lane 0).")
    if _gpu_build_available():
        try:
            failure = _run_variant(text, "shuffle", BOUNDARY_SHAPES + ((64, 4096),), (32, 256, 1024),
                                   device="cuda")
        except build.CompileError as e:
            return _compiler_feedback(e, "your block_sum_shuffle (GPU build)")
        if failure:
            return wrong(f"on the GPU: {failure}", "It passed on the CPU runtime: look for lanes "
                         "that read a shuffle from a lane that does not take part.")
    return correct("your shuffle finish gives the right RMSNorm on 3x13 and 33x257, with 16 to 256 "
                   "threads, on 32- and 64-lane warps, with no race and no divergent barrier.")


def _shuffle_mistakes() -> dict:
    ok = shuffle_solution()
    return {
        "32 lanes hard-coded": ok.replace(
            "const int lanes = (int)blockDim.x < FUSEDRMS_WARP_LANES ? (int)blockDim.x : FUSEDRMS_WARP_LANES;",
            "const int lanes = 32;"),
        "no barrier between the warp totals and their readers": ok.replace(
            "    __syncthreads();  // one barrier: warp totals written before any warp reads them\n", ""),
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

_TREE_BARRIER = "        __syncthreads();  // all threads, also those that added nothing this round\n"


def missing_barrier_listing() -> str:
    """The block kernel with one barrier taken out (the one the exercise asks for)."""
    build, _ = _hip()
    section = file_section(build.SOURCE, "block")
    assert _TREE_BARRIER in section, "the block kernel changed: update exercises.ch03"
    return section.replace(_TREE_BARRIER, "")


def numbered_listing() -> str:
    return "\n".join(f"{i:3d}  {line}" for i, line in enumerate(missing_barrier_listing().splitlines(), 1))


def _solution_line() -> int:
    lines = missing_barrier_listing().splitlines()
    return next(i for i, ln in enumerate(lines, 1) if "if (tid < stride)" in ln)


def _grade_missing_barrier(answer):
    if isinstance(answer, bool) or not isinstance(answer, (int, float, str)):
        raise Malformed("expected a line number (an integer) of the listing.")
    try:
        line = int(str(answer).strip())
    except ValueError:
        raise Malformed(f"expected a line number, got {answer!r}.") from None
    lines = missing_barrier_listing().splitlines()
    if not 1 <= line <= len(lines):
        raise Malformed(f"the listing has lines 1 to {len(lines)}; got {line}.")
    fixed = lines[:line] + ["        __syncthreads();  // inserted by the checker"] + lines[line:]
    build, kernels = _hip()
    text = _replace_section(build.source_text(), "block", "\n".join(fixed))
    try:
        kernels.library("cpu", text)
    except build.CompileError as e:
        return _compiler_feedback(e, f"the kernel with a barrier after line {line}")
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

ALL = [block_sizes, shuffle_finish, missing_barrier]
