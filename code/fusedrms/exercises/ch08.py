"""Chapter 8 exercises: why the order of operations is part of the specification, what fusing
saves, the scale of an all-zero block, the quantization step written from the specification
(:mod:`.ch08_quantizer`), and a prediction of the fused kernel's share of its copy floor before
the chapter shows the H200's times.

The byte counts are priced by :mod:`fusedrms.traffic` (the model of chapter 2); each typical
mistake is that count with one convention broken (scales forgotten, codes counted as 2 bytes,
...).
"""
from __future__ import annotations

import functools
from collections.abc import Mapping

from .. import records, traffic
from ..kernels import rmsnorm_fp8_spec as fp8_spec
from . import answers, predictions
from .ch08_quantizer import quantize_kernel  # (5) a kernel from the specification
from .core import BYTE_UNITS, Exercise, Malformed, correct, in_other_unit, wrong

ROWS, COLS, DTYPE = 8, fp8_spec.HIDDEN_SIZE, "bf16"  # not the chapter's 2 rows: compute, don't copy
ITEM = traffic.DTYPE_BYTES[DTYPE]
BLOCKS = fp8_spec.n_blocks(COLS)
X = ROWS * COLS * ITEM  # the bf16 activations
W = COLS * ITEM  # gamma, read once
CODES = ROWS * COLS  # one byte per e4m3 code
SCALES = ROWS * BLOCKS * 4  # one fp32 per 128-column block

NAIVE = traffic.price("rmsnorm_fp8_naive", ROWS, COLS, DTYPE)
FUSED = traffic.price("rmsnorm_fp8_fused", ROWS, COLS, DTYPE)


# (1) why the reordered reference fails equality ----------------------------------------------
REORDER_CHOICES = {
    "a": "The fp8 cast is not deterministic: the very same fp32 value can round to two different "
         "codes on two runs.",
    "b": "Each cast rounds: bf16(bf16(x*r)*gamma) and bf16(x*r*gamma) can be a step apart, and "
         "a step can cross a code boundary.",
    "c": "Multiplication is not commutative in floating point, so x*r*gamma and gamma*x*r differ "
         "in the last bit.",
    "d": "The reordered version adds eps in another place, so the row scale r itself differs "
         "between the two.",
    "e": "One rounding cannot hold x*r*gamma accurately enough, so the reordered codes are wrong "
         "and the specification's right.",
}
_REORDER_HINTS = {
    "a": "Round-to-nearest-even is a function: the same fp32 value always gives the same code. "
         "Look at what reaches the cast.",
    "c": "IEEE multiplication is commutative (a*b == b*a exactly). What changes between the two "
         "versions is where the results are rounded to bf16.",
    "d": "Both versions share row_rscale: r is bit-identical. Compare the lines after it.",
    "e": "If anything, one rounding is closer to the exact value than two. Equality fails because "
         "the two definitions give different bf16 values, not because one of them is wrong.",
}


def _grade_reorder(answer):
    choice = answers.read_option(answer, REORDER_CHOICES)  # "b", "(B)", 2, the option's text
    if choice == "b":
        return correct("Rounding is part of each operation, so where the casts sit changes the "
                       "bf16 values; an fp8 code is a discrete function of them, so equality "
                       "holds only between implementations of the same order.")
    return wrong(f"({choice}) is not the reason.", _REORDER_HINTS[choice])


reorder_failure = Exercise(
    "reorder_failure",
    "The reordered reference computes x*r*gamma in fp32 and casts to bf16 once; the specification "
    "casts x*r to bf16 and multiplies by gamma in bf16. Why do hundreds of fp8 codes differ? "
    "Answer with a letter:\n" + "\n".join(f"  ({k}) {v}" for k, v in REORDER_CHOICES.items()),
    _grade_reorder, solution="b", mistakes={f"choice {k}": k for k in _REORDER_HINTS})


# (2) the fused kernel's bytes -----------------------------------------------------------------
FUSED_BYTES = [FUSED.bytes_read, FUSED.bytes_written]
_FUSED_MISTAKES = {
    "scales forgotten": ([X + W, CODES],
                         f"The kernel also writes one fp32 scale per 128-column block: {ROWS} rows "
                         f"x {BLOCKS} blocks x 4 B."),
    "codes counted as 2 bytes": ([X + W, 2 * CODES + SCALES],
                                 "An e4m3 code is one byte: that is the point of fp8."),
    "one scale per row": ([X + W, CODES + ROWS * 4],
                          f"There is a scale per 128-column block: {BLOCKS} per row."),
    "scales as bf16": ([X + W, CODES + SCALES // 2], "The scales are fp32: 4 bytes each."),
    "gamma counted per row": ([X + ROWS * W, CODES + SCALES],
                              "gamma has no row dimension: every program reads the same vector, "
                              "which the cache serves; count it once."),
    "gamma forgotten": ([X, CODES + SCALES], f"The kernel reads gamma too: {COLS} bf16 values."),
    "x counted as fp32": ([2 * X + W, CODES + SCALES], "x is bf16 in memory: 2 bytes per element."),
    "read and written swapped": ([CODES + SCALES, X + W],
                                 "The order is [bytes read, bytes written]: the kernel reads the "
                                 "bf16 rows, the larger of the two."),
}


def same_bytes(value: float, expected: float) -> bool:
    """A byte count as the reader computed it: exact up to float noise (229376.00000000003)."""
    return abs(value - expected) <= 1e-6 * max(1.0, abs(expected))



def _read_pair(answer) -> list[answers.Reading]:
    """[bytes read, bytes written] from a list or tuple (numbers, arithmetic, or text such as
    "129,024" or "126 KiB") or a dict with the keys read/written (or bytes_read/bytes_written)."""
    if isinstance(answer, Mapping):
        keys = {str(k).strip().lower().replace(" ", "_"): v for k, v in answer.items()}
        pair = [next((keys[k] for k in (f"bytes_{n}", n) if k in keys), None)
                for n in ("read", "written")]
        if None in pair:
            raise Malformed("a dict needs the keys 'read' and 'written', e.g. "
                            "{'read': 1000, 'written': 500}; or write [bytes_read, bytes_written].")
        answer = pair
    return answers.read_list(answer, 2, "numbers: [bytes read, bytes written]", answers.BYTES)


def _fits(readings, counts) -> bool:
    """Each count exact up to float noise, or rounded as written in a unit ("126 kB")."""
    return all(same_bytes(r.value, c) or (r.scaled and r.fits(c)) for r, c in zip(readings, counts))


def _grade_fused(answer):
    pair = _read_pair(answer)
    read, written = (r.value for r in pair)
    if _fits(pair, FUSED_BYTES):
        slips = [label for label, (v, _) in _FUSED_MISTAKES.items() if _fits(pair, v)]
        if slips:
            return wrong(*answers.more_digits(f"[{', '.join(r.shown() for r in pair)}]", slips,
                                              "both counts in bytes"))
        return correct(f"reads {FUSED.bytes_read:,} B (x {X:,} + gamma {W:,}), writes "
                       f"{FUSED.bytes_written:,} B (codes {CODES:,} + scales {SCALES:,}).")
    for label, (value, hint) in _FUSED_MISTAKES.items():
        if _fits(pair, value):
            return wrong(f"[{read:,.0f}, {written:,.0f}] ({label}).", hint)
    unit = in_other_unit((read, written), FUSED_BYTES)
    if unit:
        return wrong(f"[{read:g}, {written:g}] is the right traffic in {unit}, but the answer is "
                     f"read as bytes.", "Write both numbers in bytes.")
    if _fits(pair[:1], FUSED_BYTES[:1]):
        return wrong(f"The bytes read are right; {written:,.0f} B written is not.",
                     "Writes: one byte per code, and one fp32 scale per block of 128 columns.")
    if _fits(pair[1:], FUSED_BYTES[1:]):
        return wrong(f"The bytes written are right; {read:,.0f} B read is not.",
                     "Reads: x (bf16, 2 B per element) and gamma once.")
    return wrong(f"[{read:,.0f}, {written:,.0f}] is not the fused kernel's traffic.",
                 "List what it touches in global memory: reads x and gamma; writes the codes and "
                 "the scales. Count each tensor's elements times its bytes per element.")


fused_bytes = Exercise(
    "fused_bytes",
    f"How many bytes does the fused kernel read and write at {ROWS} x {COLS} bf16 (128-column "
    f"blocks)? Answer [bytes_read, bytes_written].",
    _grade_fused, solution=FUSED_BYTES,
    mistakes={**{label: v for label, (v, _) in _FUSED_MISTAKES.items()},
              "KiB read as bytes": [FUSED.bytes_read / 1024, FUSED.bytes_written / 1024],
              "a dict without its keys": {"in": 1, "out": 2}})


# (3) what fusing saves ------------------------------------------------------------------------
SAVED = NAIVE.bytes_total - FUSED.bytes_total
_SAVED_MISTAKES = {
    "one direction only": (X, "The intermediate rows are written by the first kernel and read "
                              "back by the second: they cross the boundary twice."),
    "fp32 intermediate": (2 * 2 * X, "The naive norm kernel writes bf16 rows (2 B per element), "
                                     "not fp32."),
    "the fused total": (FUSED.bytes_total, "That is what the fused kernel moves; the question is "
                                           "the difference between the two versions."),
    "scales counted as saved": (2 * X + SCALES, "Both versions write the scales: they cancel."),
    "the naive total": (NAIVE.bytes_total, "That is everything the naive version moves; subtract "
                                           "what the fused one still moves."),
}


def _grade_saved(answer):
    reading = answers.read(answer, "a number of bytes", answers.BYTES)  # "229,376", "229.4 kB"
    value = reading.value
    found = answers.match_count(reading, SAVED, {k: b for k, (b, _) in _SAVED_MISTAKES.items()})
    if found.rough:
        return wrong(*answers.more_digits(reading.shown(), found.also_fits,
                                          "the exact number of bytes"))
    if found.right:
        return correct(f"{SAVED:,} B: the {ROWS} x {COLS} bf16 rows ({X:,} B) written once and "
                       f"read back once. Everything else is the same in both versions.")
    if found.mistake:
        return wrong(f"{value:,.0f} B ({found.mistake}).", _SAVED_MISTAKES[found.mistake][1])
    unit = in_other_unit((value,), (SAVED,))
    if unit:
        return wrong(f"{value:g} is the right saving in {unit}, but the answer is read as bytes.",
                     f"Write it in bytes: {value:g} {unit} is {value:g} x "
                     f"{BYTE_UNITS[unit.lower()]:,.0f} B.")
    if 0 < value < 10:
        return wrong(f"{value} looks like a ratio.", "The question asks for bytes: naive total "
                                                     "minus fused total.")
    return wrong(f"{value:,.{0 if value == int(value) else 2}f} B is not the saving.",
                 "Compare the two lists of tensors: which one appears only in the naive version, "
                 "and how many times does it cross the kernel boundary?")


bytes_saved = Exercise(
    "bytes_saved",
    f"How many bytes of global-memory traffic does fusing save at {ROWS} x {COLS} bf16 (naive "
    f"total minus fused total)?",
    _grade_saved, solution=SAVED,
    mistakes={**{label: b for label, (b, _) in _SAVED_MISTAKES.items()},
              "MB read as bytes": SAVED / 1e6, "KiB read as bytes": SAVED / 1024})


# (4) the scale of an all-zero block ------------------------------------------------------------
FLOOR = fp8_spec.ABSMAX_FLOOR
ZERO_SCALE = float(fp8_spec.reference(*fp8_spec.make_inputs(1, 128, 0, device="cpu", zero_block=True))[1])
_ZERO_MISTAKES = {
    "no floor": (0.0, "Without a floor the scale would be 0 (and every code 0/0 = NaN); this "
                      f"chapter's default floors the absmax at {FLOOR:g}."),
    "floor not divided by 448": (FLOOR, "The scale is absmax / 448, and the floor replaces the "
                                        "absmax, not the scale."),
    "multiplied by 448": (FLOOR * 448, "The scale maps 448 (the largest code) to the absmax: "
                                       "absmax / 448."),
    "SGLang's floor": (1e-10 / 448, f"That is SGLang's floor; the chapter uses DeepSeek-V3's, "
                                    f"{FLOOR:g}."),
}


def _grade_zero(answer):
    # 2.23e-7, "2.23×10⁻⁷", "1e-4/448"; a value rounded to two digits or more ("2.2e-7")
    reading = answers.read(answer, "a scale (a small positive number)")
    value = reading.value
    found = answers.match(reading, ZERO_SCALE, {k: v for k, (v, _) in _ZERO_MISTAKES.items()},
                          rel=1e-4)
    if found.rough:
        return wrong(*answers.more_digits(reading.shown(), found.also_fits, "three digits"))
    if found.right:
        return correct(f"{ZERO_SCALE:.6g} = {FLOOR:g} / 448: the floor stands in for the absmax, "
                       f"every code is 0, and the block dequantizes to zeros as it should.")
    if found.mistake:
        return wrong(f"{value:g} ({found.mistake}).", _ZERO_MISTAKES[found.mistake][1])
    return wrong(f"{value:g} is not the stored scale.",
                 "Follow the reference: absmax of the block, floored, divided by 448.")


zero_block_scale = Exercise(
    "zero_block_scale",
    "With the chapter's default floor, what scale does the reference store for a block of 128 "
    "zeros?",
    _grade_zero, solution=ZERO_SCALE, mistakes={label: v for label, (v, _) in _ZERO_MISTAKES.items()})


# (6) predict, then look: the fused kernel's share of its copy floor ------------------------------
FLOOR_CLOSE = 0.10  # a prediction within 10% of the recorded share is a good one


@functools.lru_cache(maxsize=1)
def recorded_timing() -> dict | None:
    """The committed H200 timing at the most rows the chapter timed (a row of
    :func:`fusedrms.book.ch08.timing_rows`, with its floor) and the GPU; None when missing."""
    from ..book import ch08 as book

    try:
        doc = records.load("fp8_quant", records.COMMITTED)
    except (FileNotFoundError, ValueError):
        return None
    timing = book.timing_rows(doc)
    if not timing or timing[-1]["pct_floor"] is None:
        return None
    return {**timing[-1], "gpu": predictions.recorded_gpu(doc)}


def _floor_said(found: dict, guess: float) -> str:
    return (f"You predicted {guess:.3g}%. The {found['gpu']} ran the fused kernel at "
            f"{found['rows']:,} x {found['cols']:,} in {found['fused_us']:.1f} µs, where its bytes "
            f"take {found['floor_us']:.1f} µs at the copy rate: {found['pct_floor']:.0f}% of its "
            f"floor.")


def _grade_share(answer):
    reading = answers.read(answer, "a percentage (the floor time / the measured time x 100)",
                           answers.PERCENT)
    guess = reading.value
    if guess <= 0:
        raise Malformed(f"a share of the floor is positive, got {guess:g}.")
    found = recorded_timing()
    if found is None:
        return predictions.recording_missing()
    pct, said = found["pct_floor"], _floor_said(found, guess)
    if answers.close(guess, pct, FLOOR_CLOSE):
        return correct(f"{said} The bytes alone do not set this kernel's time, yet it beats the "
                       f"naive pair ({found['naive_us']:.0f} µs) by {found['speedup']:.2f}x, near "
                       f"the {found['bytes_ratio']:.2f}x its bytes allow. What else the time is "
                       f"spent on is the next section's question.")
    if guess <= 1 and answers.close(100 * guess, pct, FLOOR_CLOSE):
        return wrong(said, "That is a fraction: the question asks for a percentage (x 100).")
    if answers.close(guess, 100 * 100 / pct, FLOOR_CLOSE):
        return wrong(said, "That is the measured time over the floor: the share is the floor "
                           "time over the measured time, below 100 for a kernel slower than the "
                           "copy.")
    if guess > pct:
        return wrong(said, "If the bytes set its time the kernel would sit near its floor, as "
                           "chapter 7's capstone does at large shapes. The exact specification "
                           "asks per element for work a copy does not do: a square converted to "
                           "float64 and summed there, two roundings to bf16, an exact division "
                           "by the block's scale. The next section measures what that costs.")
    return wrong(said, f"The per-element work slows the kernel, but by less than that: it "
                       f"takes {found['fused_us']:.0f} µs where its bytes take "
                       f"{found['floor_us']:.0f} µs at the copy rate, under twice its floor.")


def _share_solution() -> float | None:
    found = recorded_timing()
    return None if found is None else round(found["pct_floor"], 1)


def _share_mistakes() -> dict:
    found = recorded_timing()
    if found is None:
        return {}
    pct = found["pct_floor"]
    return {"the bytes set the time": 100.0, "near the floor, like the capstone": 90.0,
            "a fraction, not a percent": round(pct / 100, 3),
            "the time over the floor": f"{100 * 100 / pct:.0f}%", "a trickle": 20.0}


def _share_question() -> str:
    found = recorded_timing()
    rows = f"{found['rows']:,} x {found['cols']:,}" if found else f"32,768 x {COLS:,}"
    return (f"Predict the exact contract's fused RMSNorm + FP8 kernel's share of its copy floor "
            f"at {rows} bf16 on the H200: its floor time (its bytes at the copy rate) over its "
            f"measured time, in percent, e.g. 75%.")


predict_floor_share = Exercise("predict_floor_share", _share_question(), _grade_share,
                               solution=_share_solution(), mistakes=_share_mistakes())

ALL = (reorder_failure, fused_bytes, bytes_saved, zero_block_scale, quantize_kernel,
       predict_floor_share)
