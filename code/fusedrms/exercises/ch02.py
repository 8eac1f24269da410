"""Chapter 2 exercises: price a design before writing it, then predict what it measures.

Every priced solution is computed by :mod:`fusedrms.traffic`; every typical mistake is the same
model priced with one convention broken (the weight per row, the write forgotten, the wrong
dtype...). The prediction (:data:`predict_fused_speedup`) is checked against the committed H200
census the chapter then shows.
"""
from __future__ import annotations

import functools
from fractions import Fraction

from .. import traffic
from . import answers, grader, predictions
from .core import Exercise, Malformed, brief, correct, fields, one_line, portable_error, wrong

ROWS, COLS, DTYPE = 1024, 4096, "bf16"
ITEM = traffic.DTYPE_BYTES[DTYPE]
MATRIX = ROWS * COLS * ITEM  # one rows x cols activation in bytes
WEIGHT = COLS * ITEM


def _as_ratio(answer, what: str, units: answers.Units) -> answers.Reading:
    """A number, a Fraction, or text like '7/4' or '5 / 4', optionally with its unit."""
    if isinstance(answer, str) and answer.strip().endswith("%"):
        raise Malformed(f"{answer.strip()!r} is a percentage; write {what}.")
    return answers.read(answer, what, units)


# (1) bytes of the residual-writing variant --------------------------------------------------
RESIDUAL = traffic.price("fused_add_rmsnorm_residual", ROWS, COLS, DTYPE)
RESIDUAL_BYTES = RESIDUAL.bytes_total
_RESIDUAL_MISTAKES = {
    "residual write forgotten": (3 * MATRIX + WEIGHT,
                                 "That is the plain fused kernel: this one also writes t = x + r "
                                 "for the next layer, a fourth row-trip."),
    "weight counted per row": (5 * MATRIX,
                               "The weight has no row dimension: every row's program reads the same "
                               f"{WEIGHT:,} bytes, which the cache serves; count them once."),
    "weight left out": (4 * MATRIX,
                        f"Close: add the weight, read once ({COLS} bf16 values = {WEIGHT:,} B)."),
    "fp32 itemsize": (2 * (4 * MATRIX + WEIGHT), "bf16 is 2 bytes per element, not 4."),
    "t read back": (5 * MATRIX + WEIGHT,
                    "In the fused kernel t stays in registers after it is written: it is stored "
                    "once and never read back."),
    "reads only": (2 * MATRIX + WEIGHT, "Count the writes too: y and t both go to global memory."),
}


def _grade_residual(answer):
    # 33562624, "33,562,624", "33 562 624", "4*1024*4096*2 + 4096*2"; "33.56 MB" as rounded
    reading = answers.read(answer, "a number of bytes", answers.BYTES)
    value, half_unit = reading.value, reading.half_unit if reading.scaled else 0.0
    found = answers.match_count(reading, RESIDUAL_BYTES,
                                {label: b for label, (b, _) in _RESIDUAL_MISTAKES.items()})
    if found.rough:
        return wrong(*answers.more_digits(reading.shown(), found.also_fits,
                                          "the exact number of bytes"))
    if found.right:
        value = RESIDUAL_BYTES
    elif found.mistake and half_unit:
        value = _RESIDUAL_MISTAKES[found.mistake][0]
    if value == RESIDUAL_BYTES:
        return correct(f"{RESIDUAL_BYTES:,} B: x, r read ({2 * MATRIX:,}), t and y written "
                       f"({2 * MATRIX:,}), and the weight once ({WEIGHT:,}).")
    for label, (bytes_, hint) in _RESIDUAL_MISTAKES.items():
        if value == bytes_:
            shown = reading.shown() if half_unit else f"{value:,.0f} B"
            return wrong(f"{shown} ({label}).", hint)
    nearest = min([RESIDUAL_BYTES, *(b for b, _ in _RESIDUAL_MISTAKES.values())],
                  key=lambda b: abs(value - b))
    for unit, scale in (("megabytes", 1e6), ("mebibytes", 2 ** 20), ("kilobytes", 1e3)):
        if abs(value * scale - RESIDUAL_BYTES) < 1e-3 * RESIDUAL_BYTES:
            return wrong(f"{value:g} looks like {unit}: the question asks for the count of bytes.",
                         f"Give the exact number of bytes, e.g. {MATRIX:,} for one {ROWS} x "
                         f"{COLS} bf16 matrix.")
    if nearest == RESIDUAL_BYTES and abs(value - RESIDUAL_BYTES) < 1e-3 * RESIDUAL_BYTES:
        if half_unit:
            return wrong(f"{reading.shown()} is close to the right traffic, but the right count "
                         f"does not round to it.",
                         "Add up the bytes exactly: every tensor's elements x 2, the weight once.")
        shown = f"{value:,.0f}" if value == int(value) else f"{value:,}"
        return wrong(f"{shown} B is close to the right traffic but not exact: the question "
                     f"asks for the count of bytes.",
                     "Add up the bytes exactly: every tensor's elements x 2, the weight once.")
    shown = reading.shown() if half_unit else f"{value:,.0f} B"
    return wrong(f"{shown} is not the traffic of this kernel.",
                 "List the tensors it touches in global memory: reads x, r, w; writes t, y. "
                 "Bytes = elements x 2 for bf16; the weight has cols elements.")


residual_bytes = Exercise(
    "residual_bytes",
    f"How many bytes (read + written) does the fused add + RMSNorm that also writes the residual "
    f"sum move at {ROWS} x {COLS} {DTYPE}?",
    _grade_residual, solution=RESIDUAL_BYTES,
    mistakes={label: b for label, (b, _) in _RESIDUAL_MISTAKES.items()})


# (2) the speedup bound over the three-kernel chain ---------------------------------------------
# t = x + r; n = F.rms_norm(t, (cols,)); y = n * w: the chapter's illustration, the weight applied
# in a separate multiply. The chapter's own bounds are against PyTorch's two kernels (5/3, 5/4).
BOUND = traffic.speedup_bound("eager_add_rmsnorm", "fused_add_rmsnorm_residual")  # 7/4
_BOUND_MISTAKES = {
    "PyTorch's two kernels": (traffic.speedup_bound("torch_add_rmsnorm",
                                                    "fused_add_rmsnorm_residual"),
                              "5/4 is the bound over F.rms_norm(x + r, (cols,), w), the weight "
                              "inside the norm; the chain's separate multiply adds 2 row-trips: "
                              "n read back, y written."),
    "against the kernel without the residual": (
        Fraction(7, 3), "The fair opponent writes t = x + r for the next layer, as the chain "
                        "does: 4 row-trips, not 3."),
    "launch ratio": (Fraction(3), "Launches are not what bounds a memory-bound step at many rows: "
                                  "bytes are. Divide the row-trips."),
    "inverted": (Fraction(4, 7), "A speedup is slow time / fast time: the chain's bytes over the "
                                 "fused kernel's."),
    "weight counted as a row-trip": (Fraction(8, 5),
                                     "The weight has no row dimension: at many rows its bytes "
                                     "vanish next to the activations'."),
    "the chapter's 5/3": (Fraction(5, 3), "5/3 compares PyTorch's two kernels with a fused kernel "
                                          "that does not write the residual; neither is asked."),
}


def _grade_bound(answer):
    reading = _as_ratio(answer, "a speedup (a number such as 1.5, or a fraction '3/2')",
                        answers.RATIO)
    value = reading.value
    found = answers.match(reading, float(BOUND), {k: float(r) for k, (r, _) in
                                                  _BOUND_MISTAKES.items()}, rel=2e-3,
                          min_significant=3)
    if found.rough:
        return wrong(*answers.more_digits(reading.shown(), found.also_fits, "the fraction"))
    if found.right:
        return correct(f"{float(BOUND):.3f} = 7/4: the add moves 3 row-trips, the norm 2 and the "
                       f"multiply 2, against the fused kernel's 4 (x and r read, t and y "
                       f"written).")
    if found.mistake:
        return wrong(f"{value:.3f} ({found.mistake}).", _BOUND_MISTAKES[found.mistake][1])
    return wrong(f"{value:.3f} is not the bound.",
                 "For a memory-bound step, the bound is the ratio of bytes moved; at many rows the "
                 "weight's share vanishes and it is the ratio of row-trips. Count each kernel's "
                 "reads and writes.")


speedup_bound = Exercise(
    "speedup_bound",
    "For many rows, what is the largest speedup of the residual-writing fused add + RMSNorm over "
    "the three-kernel chain, t = x + r, n = F.rms_norm(t, (cols,)), y = n * w, if all are "
    "memory-bound?",
    _grade_bound, solution=float(BOUND),
    mistakes={label: float(r) for label, (r, _) in _BOUND_MISTAKES.items()})


# (3) the intensity of the fused kernel --------------------------------------------------------
FUSED = traffic.price("fused_add_rmsnorm", ROWS, COLS, DTYPE)
INTENSITY = FUSED.intensity
_INTENSITY_MISTAKES = {
    "write forgotten": (FUSED.flops / FUSED.bytes_read,
                        "Intensity divides by all the bytes the kernel moves, the written y too."),
    "weight counted per row": (FUSED.flops / (4 * MATRIX),
                               "The weight is read once, not once per row."),
    "fp32 bytes": (FUSED.flops / (2 * FUSED.bytes_total),
                   "The activations are bf16: 2 bytes per element."),
    "inverted (bytes per FLOP)": (FUSED.bytes_total / FUSED.flops,
                                  "Intensity is FLOPs per byte."),
    "eager chain's traffic": (FUSED.flops / traffic.price("eager_add_rmsnorm", ROWS, COLS, DTYPE).bytes_total,
                              "That is the eager chain's intensity: the fused kernel moves 3 "
                              "row-trips, not 7."),
    "FLOPs of the normalization only": (3 * ROWS * COLS / FUSED.bytes_total,
                                        "Count every operation per element: add, square, "
                                        "accumulate, * rstd, * w = 5."),
}


def _grade_intensity(answer):
    reading = _as_ratio(answer, "an intensity in FLOP per byte (a number such as 0.5, or a "
                                "fraction '1/2')", answers.INTENSITY)
    value = reading.value
    found = answers.match(reading, INTENSITY, {k: v for k, (v, _) in _INTENSITY_MISTAKES.items()},
                          rel=2e-3)
    if found.right:
        return correct(f"{INTENSITY:.4f} FLOP/B: about 5 FLOPs per element over 6 bytes per element "
                       f"(x, r, y in bf16). Far left of any GPU's ridge point: memory-bound.")
    if found.rough:
        return wrong(f"{reading.shown()} is too rough to tell the intensity from its neighbours.",
                     "Give at least two significant digits (or the fraction).")
    if found.mistake:
        return wrong(f"{value:.4f} ({found.mistake}).", _INTENSITY_MISTAKES[found.mistake][1])
    return wrong(f"{value:.4f} is not the intensity.",
                 f"FLOPs: 5 per element + 3 per row. Bytes: x and r read, y written "
                 f"({DTYPE}), the weight once. Divide.")


intensity = Exercise(
    "intensity",
    f"What is the arithmetic intensity (FLOP per byte) of the fused add + RMSNorm kernel at "
    f"{ROWS} x {COLS} {DTYPE}, with the chapter's count of 5 FLOPs per element and 3 per row?",
    _grade_intensity, solution=round(INTENSITY, 4),
    mistakes={label: round(v, 4) for label, (v, _) in _INTENSITY_MISTAKES.items()})


# (4) the model as a function -------------------------------------------------------------------
# The reader writes bytes_moved(step, rows, cols, dtype) -> (bytes_read, bytes_written) for the
# chapter's four designs; it runs in a child process (a loop that never ends is a verdict) on
# every design x dtype x shape, against traffic.price. Each typical mistake is the model with one
# convention broken, priced by _broken.
MODEL_STEPS = ("eager_add_rmsnorm", "torch_add_rmsnorm", "fused_add_rmsnorm",
               "fused_add_rmsnorm_residual")
MODEL_DTYPES = ("fp32", "bf16", "fp16")
MODEL_SHAPES = ((1, 1), (3, 13), (1024, 4096), (7, 8192))
MODEL_CASES = tuple((step, rows, cols, dtype) for step in MODEL_STEPS for rows, cols in MODEL_SHAPES
                    for dtype in MODEL_DTYPES)


# [book:bytes-moved]
def solution_bytes_moved(step, rows, cols, dtype):
    size = {"fp32": 4, "bf16": 2, "fp16": 2}[dtype]
    matrix, weight = rows * cols * size, cols * size
    # matrices read and written, per kernel; the weight once per reading kernel
    reads, writes = {
        "eager_add_rmsnorm": ([2, 1, 1], [1, 1, 1]),  # x+r; rms_norm; * w
        "torch_add_rmsnorm": ([2, 1], [1, 1]),  # x+r -> t; rms_norm(t, w)
        "fused_add_rmsnorm": ([2], [1]),  # x, r -> y
        "fused_add_rmsnorm_residual": ([2], [2]),  # x, r -> t, y
    }[step]
    return sum(reads) * matrix + weight, sum(writes) * matrix
# [/book:bytes-moved]


def model_bytes(step: str, rows: int, cols: int, dtype: str) -> tuple[int, int]:
    """The chapter's model: (bytes read, bytes written) as traffic.price counts them."""
    priced = traffic.price(step, rows, cols, dtype)
    return priced.bytes_read, priced.bytes_written


def _broken(step, rows, cols, dtype, mistake) -> tuple[int, int]:
    """(read, written) with one convention of the model broken."""
    spec = traffic.get_step(step)
    sizes = {"rows": rows, "cols": cols}
    read = written = 0
    for kernel in spec.kernels:
        for names, reading in ((kernel.reads, True), (kernel.writes, False)):
            for name in names:
                tensor = spec.tensors[name]
                item = {"two bytes": 2, "four bytes": 4}.get(
                    mistake, traffic.DTYPE_BYTES[dtype if tensor.dtype == "act" else tensor.dtype])
                count = 1
                for dim in tensor.shape:
                    count *= sizes[dim]
                if "rows" not in tensor.shape:
                    if mistake == "weight per row":
                        count *= rows
                    if mistake == "weight left out":
                        count = 0
                if mistake == "intermediates read for free" and reading \
                        and tensor.role == "intermediate":
                    count = 0
                if mistake == "residual write forgotten" and not reading and name == "t" \
                        and tensor.role == "output":
                    count = 0
                if reading:
                    read += count * item
                else:
                    written += count * item
    return (written, read) if mistake == "read and written swapped" else (read, written)


BYTES_MOVED_WORDS = {  # each mistake in words, for the verdict
    "weight per row": "the weight counted for every row",
    "weight left out": "the weight left out",
    "residual write forgotten": "the residual write t forgotten",
    "intermediates read for free": "an intermediate written but not read back",
    "two bytes": "every element counted as 2 bytes",
    "four bytes": "every element counted as 4 bytes",
    "read and written swapped": "bytes read and written swapped",
}
BYTES_MOVED_HINTS = {
    "weight per row": "The weight has no row dimension: every row's program reads the same "
                      "cols values, which the cache serves; count them once per kernel that "
                      "reads the weight.",
    "weight left out": "Each kernel that reads the weight reads cols values of it: add them to "
                       "the bytes read.",
    "residual write forgotten": "fused_add_rmsnorm_residual also writes t = x + r for the next "
                                "layer: two matrices written, t and y.",
    "intermediates read for free": "A tensor one kernel writes and the next reads crosses the "
                                   "boundary twice: count the write and the read back.",
    "two bytes": "The element size depends on dtype: fp32 is 4 bytes, bf16 and fp16 are 2.",
    "four bytes": "The element size depends on dtype: bf16 and fp16 are 2 bytes, fp32 is 4.",
    "read and written swapped": "Return (bytes_read, bytes_written), in that order.",
}


def _outputs(fn, cases) -> list:
    """(In the grader's child) fn on every case: a pair of numbers, or what went wrong in words
    (a str), or the exception it raised."""
    out, used = [], None
    for case in cases:
        grader.progress(f"On bytes_moved{case!r}")
        try:
            with grader.calls_to([traffic.price]) as called:
                value = fn(*case)
        except Exception as err:  # noqa: BLE001 - the reader's code
            out.append(portable_error(err))
            continue
        if called:  # the chapter's model itself, not the reader's
            used = used or grader.LibraryCall(called[0])
        try:
            out.append(tuple(float(v) for v in fields(value, 2)))
        except Exception:  # noqa: BLE001 - not two fields, or fields that are not numbers
            out.append(f"returned {brief(value)}")
    return out + ([used] if used else [])  # a last entry when it called the model


def _where(case) -> str:
    step, rows, cols, dtype = case
    return f"bytes_moved({step!r}, {rows}, {cols}, {dtype!r})"


def _grade_bytes_moved(answer):
    import inspect

    if not callable(answer) or isinstance(answer, type):
        raise Malformed(f"expected a function bytes_moved(step, rows, cols, dtype), got "
                        f"{type(answer).__name__}.")
    try:
        inspect.signature(answer).bind("fused_add_rmsnorm", 1, 1, "bf16")
    except TypeError:
        raise Malformed(f"your function must take four arguments (step, rows, cols, dtype); its "
                        f"signature is {inspect.signature(answer)}.") from None
    except ValueError:  # no signature to read (a builtin): let the call decide
        pass
    try:
        got = grader.run(answer, _outputs, MODEL_CASES, cache=True)
    except grader.Failed as failed:
        return grader.failure_feedback(failed, "python")
    expected = [model_bytes(*case) for case in MODEL_CASES]
    used = got.pop() if len(got) > len(MODEL_CASES) else None
    for case, value in zip(MODEL_CASES, got):
        if isinstance(value, BaseException):
            return wrong(f"{_where(case)} raised {one_line(value)}.",
                         f"It must answer for every design ({', '.join(MODEL_STEPS)}) and dtype "
                         f"({', '.join(MODEL_DTYPES)}).")
        if isinstance(value, str):
            raise Malformed(f"{_where(case)} {value}; return a pair (bytes_read, "
                            f"bytes_written).")
    if all(v == e for v, e in zip(got, expected)) and used is not None:
        return wrong(f"Your function calls {used}, the chapter's traffic model itself: that is "
                     f"the answer, not yours.",
                     "Count the bytes yourself: each kernel's reads and writes, rows * cols * "
                     "element size for a matrix, cols * element size for the weight.")
    if all(v == e for v, e in zip(got, expected)):
        return correct(f"Your function agrees with the model on all {len(MODEL_CASES)} cases: "
                       f"{len(MODEL_STEPS)} designs x {len(MODEL_DTYPES)} dtypes x "
                       f"{len(MODEL_SHAPES)} shapes, from 1 x 1 to 1024 x 4096.")
    for mistake, hint in BYTES_MOVED_HINTS.items():
        broken = [_broken(*case, mistake) for case in MODEL_CASES]
        if all(v == b for v, b in zip(got, broken)):
            case, value, right = next((c, v, e) for c, v, e in zip(MODEL_CASES, got, expected)
                                      if v != e)
            return wrong(f"{_where(case)} gave ({value[0]:,.0f}, {value[1]:,.0f}), the model "
                         f"({right[0]:,}, {right[1]:,}): {BYTES_MOVED_WORDS[mistake]}.", hint)
    case, value, right = next((c, v, e) for c, v, e in zip(MODEL_CASES, got, expected) if v != e)
    which = "bytes read" if value[0] != right[0] else "bytes written"
    return wrong(f"{_where(case)} gave ({value[0]:,.0f}, {value[1]:,.0f}); the model says "
                 f"({right[0]:,}, {right[1]:,}): the {which} differ.",
                 "List each kernel's reads and writes: a rows x cols tensor is rows * cols * "
                 "element size bytes, the weight cols * element size once per kernel that "
                 "reads it.")


def _mistaken(mistake):
    def bytes_moved(step, rows, cols, dtype):
        return _broken(step, rows, cols, dtype, mistake)
    return bytes_moved


def _loops_forever(step, rows, cols, dtype):
    while True:
        pass


bytes_moved = Exercise(
    "bytes_moved",
    f"Write bytes_moved(step, rows, cols, dtype) -> (bytes_read, bytes_written) for the designs "
    f"{', '.join(MODEL_STEPS)}, with dtype one of {', '.join(MODEL_DTYPES)}, as the chapter's "
    f"traffic model counts them. answer = your function",
    _grade_bytes_moved, solution=solution_bytes_moved,
    mistakes={**{m: _mistaken(m) for m in BYTES_MOVED_HINTS},
              "the total, not a pair": lambda step, rows, cols, dtype: sum(
                  solution_bytes_moved(step, rows, cols, dtype)),
              "only the fused designs": lambda step, rows, cols, dtype: {
                  "fused_add_rmsnorm": (2 * rows * cols * 2 + cols * 2, rows * cols * 2)}[step],
              "two arguments": lambda step, rows: (0, 0), "a number": 42})

# (5) predict, then look: the measured speedup over PyTorch's two kernels ------------------------
BYTE_RATIO = traffic.speedup_bound("torch_add_rmsnorm", "fused_add_rmsnorm")  # 5/3
SPEEDUP_CLOSE = 0.03  # within 3% of the recorded speedup; the byte ratio lies outside it


@functools.lru_cache(maxsize=1)
def recorded_speedup() -> dict | None:
    """The committed census at 4096 x 4096 bf16: PyTorch's two kernels and the fused kernel
    (time and share of the copy rate), the GPU and ``speedup``; None when it is missing."""
    from .. import records
    from ..book import ch02 as companion
    from ..book import ch02_story

    facts = ch02_story.story_facts(ch02_story.load(records.COMMITTED))
    if "totals" not in facts:
        return None
    torch_, fused = facts["totals"][companion.BASELINE], facts["totals"]["capstone.fused"]
    return {"torch": torch_, "fused": fused, "gpu": predictions.short_gpu(facts["gpu"]),
            "speedup": torch_["measured_us"] / fused["measured_us"]}


def _grade_fused_speedup(answer):
    value = predictions.read_ratio(answer, "a speedup (PyTorch's time / the fused kernel's)")
    found = recorded_speedup()
    if found is None:
        return predictions.recording_missing()
    speedup, bound = found["speedup"], float(BYTE_RATIO)
    torch_, fused = found["torch"], found["fused"]
    said = (f"You predicted {value:.3g}×. The {found['gpu']} measured "
            f"{torch_['measured_us']:.1f} µs for PyTorch's two kernels and "
            f"{fused['measured_us']:.1f} µs for the fused one: {speedup:.2f}×.")
    rates = (f"the fused kernel moves its bytes at {fused['pct_of_copy']:.0f}% of the copy rate, "
             f"PyTorch's two kernels together at {torch_['pct_of_copy']:.0f}%")
    if answers.close(value, speedup, SPEEDUP_CLOSE):
        return correct(f"{said} That is more than the byte ratio of 5/3 ({bound:.2f}): {rates}, "
                       f"and the measured speedup is the byte ratio times the ratio of the rates.")
    if value < 1 and answers.close(1 / value, speedup, SPEEDUP_CLOSE):
        return wrong(said, "That is the fused kernel's time over PyTorch's: a speedup is the slow "
                           "time over the fast one, above 1.")
    if answers.close(value, bound, 0.01):
        return wrong(said, f"5/3 is the bound if both designs moved bytes at the same rate. They "
                           f"do not: {rates}. The speedup is the byte ratio times the ratio of "
                           f"the rates.")
    if value < speedup:
        return wrong(said, f"Start from the bytes: PyTorch's two kernels move 5 row-trips, the "
                           f"fused kernel 3, so at equal rates it is 5/3 ({bound:.2f}) faster; "
                           f"then ask which design moves its bytes faster ({rates}).")
    return wrong(said, f"Two launches become one, but at this size the bytes set the time, not "
                       f"the launches: 5 row-trips against 3 bound the gain near 5/3 "
                       f"({bound:.2f}), and only a faster rate ({rates}) moves it above.")


def _fused_speedup_solution() -> float | None:
    found = recorded_speedup()
    return None if found is None else round(found["speedup"], 2)


def _fused_speedup_mistakes() -> dict:
    found = recorded_speedup()
    if found is None:
        return {}
    return {"the byte ratio, 5/3": round(float(BYTE_RATIO), 3), "two launches become one": 2.0,
            "no gain": 1.0, "the ratio inverted": round(1 / found["speedup"], 3)}


predict_fused_speedup = Exercise(
    "predict_fused_speedup",
    "Predict the fused add + RMSNorm's measured speedup over PyTorch's two kernels (the add, then "
    "F.rms_norm with its weight) at 4096 x 4096 bf16 on the H200: PyTorch's time over the fused "
    "kernel's, one number, e.g. 1.2.",
    _grade_fused_speedup,
    solution=_fused_speedup_solution(),
    mistakes=_fused_speedup_mistakes())

ALL = [residual_bytes, speedup_bound, intensity, bytes_moved, predict_fused_speedup]
