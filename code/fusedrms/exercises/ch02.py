"""Chapter 2 exercises: price a design before writing it.

Every solution is computed by :mod:`fusedrms.traffic`; every typical mistake is the same model
priced with one convention broken (the weight per row, the write forgotten, the wrong dtype...).
"""
from __future__ import annotations

from fractions import Fraction

from .. import traffic
from . import answers
from .core import Exercise, Malformed, correct, wrong

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

ALL = [residual_bytes, speedup_bound, intensity]
