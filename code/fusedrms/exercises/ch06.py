"""Chapter 6 exercises: predict a time from the traffic model and a bandwidth, grade a measurement
against that prediction, recognize which timing rule a suspicious number broke, and predict what
a flushed L2 costs inside and beyond the cache before section 4 shows it; and build the summary
the book reports from per-process samples, from its specification (:mod:`.ch06_summary`).

Every byte count comes from :func:`fusedrms.traffic.price`; each typical mistake is that count (or
that division) with one convention broken: the write forgotten, the weight counted per row,
GiB/s taken for GB/s, the data sheet's peak taken for the measured copy, the wrong element size,
the eager chain's traffic, the wrong unit. The two bandwidths are the H200's in the committed
recording: the copy chapter 2 measured (the book's one floor, rounded to whole GB/s as the pages
print it) and its data sheet's. No two mistakes give the same number at them (a test checks: at a
copy of 3,200 GB/s, three matrices at the 4,800 GB/s data sheet would equal two at the copy, the
write forgotten).
"""
from __future__ import annotations

import functools

from .. import records, traffic
from . import answers, predictions
from .ch06_summary import build_summary  # (5) the summary, built from its specification
from .core import Exercise, Malformed, correct, wrong

# The H200 of the committed recording (never a reader's own: every reader grades the same
# numbers), at a shape of the exercise's own so the arithmetic is the reader's, not a lookup.
ROWS, COLS, DTYPE = 8192, 4096, "bf16"
_H200 = records.copy_floor(records.COMMITTED)
BANDWIDTH_GBPS = float(round(_H200.GBps))  # GB/s, GB = 10^9 bytes, read + write counted
DATASHEET_GBPS = _H200.published_GBps  # the memory's peak as a data sheet states it: no kernel reaches it
ITEM = traffic.DTYPE_BYTES[DTYPE]
MATRIX = ROWS * COLS * ITEM  # one activation matrix in bytes
WEIGHT = COLS * ITEM
FUSED = traffic.price(traffic.OP_STEP["add_rmsnorm"], ROWS, COLS, DTYPE)
EAGER = traffic.price("eager_add_rmsnorm", ROWS, COLS, DTYPE)


def _us(nbytes: float, gbps: float = BANDWIDTH_GBPS) -> float:
    return nbytes / (gbps * 1e9) * 1e6


FLOOR_US = _us(FUSED.bytes_total)


def _shown(value: float) -> str:
    """A reader's number as feedback repeats it: 47.53, 0.04753, 47,529 (never 4.753e+04)."""
    return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"



# (1) predict the floor time -------------------------------------------------------------------
_PREDICT_MISTAKES = {
    "the write forgotten": (_us(2 * MATRIX + WEIGHT),
                            "The kernel also writes y: x and the residual are read, y is written, "
                            "three matrices cross the memory bus."),
    "the weight counted per row": (_us(3 * MATRIX + ROWS * WEIGHT),
                                   "w has no row dimension: every row's program reads the same "
                                   f"{COLS} values, which the cache serves. Count it once."),
    "GiB/s taken for GB/s": (FUSED.bytes_total / (BANDWIDTH_GBPS * 2**30) * 1e6,
                             "The bandwidth is in GB/s with GB = 10^9 bytes (as the harness "
                             "reports it); 2^30 is a GiB."),
    "the data sheet's peak": (_us(FUSED.bytes_total, DATASHEET_GBPS),
                              f"The bytes are right, the bandwidth is not: "
                              f"{DATASHEET_GBPS:,.0f} GB/s is the data sheet's peak, which no "
                              f"kernel reaches. The floor is priced at the measured copy "
                              f"({BANDWIDTH_GBPS:,.0f} GB/s)."),
    "the data sheet's peak, the write forgotten": (
        _us(2 * MATRIX + WEIGHT, DATASHEET_GBPS),
        f"Two slips: y is written too (three matrices cross the bus), and the floor is priced at "
        f"the measured copy ({BANDWIDTH_GBPS:,.0f} GB/s), not the data sheet's peak."),
    "twice the floor": (_us(2 * FUSED.bytes_total),
                        "That is twice the floor: bf16 is 2 bytes per element (not 4), and the "
                        "copy bandwidth already counts read + write (do not halve it)."),
    "the eager chain's traffic": (_us(EAGER.bytes_total),
                                  "That is the unfused chain (t and n written and read back). The "
                                  "floor of the fused kernel counts x, r, w in and y out."),
    "a factor of 1,000 too large": (FLOOR_US * 1e3,
                                    "That is 1,000 times the floor: nanoseconds written as µs, "
                                    "or a time in µs labelled ms (1 ms = 1000 µs)."),
    "milliseconds instead of µs": (FLOOR_US / 1e3,
                                   "The answer is asked in microseconds (1 ms = 1000 µs)."),
    "seconds instead of µs": (FLOOR_US / 1e6, "The answer is asked in microseconds."),
}


def _grade_predict(answer):
    # 47.53, "47.5 µs", "0.0475 ms", "201334784/4236e9*1e6" (arithmetic is read, never run)
    reading = answers.read(answer, "a time in microseconds", answers.TIME_US)
    value = reading.value
    if value <= 0:
        raise Malformed("a time must be positive; write it in microseconds, e.g. answer = 12.5")
    found = answers.match(reading, FLOOR_US, {k: v for k, (v, _) in _PREDICT_MISTAKES.items()},
                          rel=0.01)
    if found.rough:
        return wrong(*answers.more_digits(reading.shown(), found.also_fits,
                                          "the floor in µs to three digits"))
    if found.right:
        return correct(f"{FUSED.bytes_total:,} B / {BANDWIDTH_GBPS:,.0f} GB/s = {FLOOR_US:.2f} µs: "
                       f"three {ROWS} x {COLS} bf16 matrices ({MATRIX:,} B each) and the weight "
                       f"once ({WEIGHT:,} B). A kernel that moves these bytes comes within a "
                       f"few percent of it at best (either side: the floor is priced at a copy).")
    if found.mistake:
        return wrong(f"{_shown(value)} µs ({found.mistake}).", _PREDICT_MISTAKES[found.mistake][1])
    return wrong(f"{_shown(value)} µs is not the floor.",
                 "Bytes: x and the residual read, y written, w read once, at 2 bytes per bf16 "
                 "element. Time = bytes / (GB/s x 10^9), then x 10^6 for µs.")


predict_floor = Exercise(
    "predict_floor",
    f"The fused add + RMSNorm runs at {ROWS} rows x {COLS} columns in bf16 on the "
    f"{_H200.gpu.removeprefix('NVIDIA ')}, whose data sheet promises {DATASHEET_GBPS:,.0f} GB/s "
    f"and whose copy chapter 2 measured at {BANDWIDTH_GBPS:,.0f} GB/s (GB = 10^9 bytes, read + "
    f"write counted). Using the traffic "
    f"model and the book's floor, what is the kernel's floor time, in µs?",
    _grade_predict, solution=FLOOR_US,
    mistakes={label: v for label, (v, _) in _PREDICT_MISTAKES.items()})


# (2) grade a measurement against the prediction ------------------------------------------------
MEASURED_US = 60.5  # a hypothetical measurement (median of process medians)
PCT = 100 * FLOOR_US / MEASURED_US
_PCT_MISTAKES = {
    "the ratio inverted": (100 * MEASURED_US / FLOOR_US,
                           "% of floor = floor time / measured time: a kernel on the floor scores "
                           "100%, a slower one less."),
    "a fraction, not a percent": (FLOOR_US / MEASURED_US, "Multiply by 100 for a percentage."),
    "the gap, not the share": (100 - PCT, "That is how far from the floor the kernel is; the "
                                          "question asks what share of the floor it reaches."),
    "the achieved bandwidth": (FUSED.bytes_total / (MEASURED_US * 1e3),
                               "That is the achieved bandwidth in GB/s (bytes / measured time). "
                               "As a share: divide the floor time by the measured time, times "
                               "100 (or the achieved GB/s by the copy's)."),
    "the data sheet's floor": (100 * _us(FUSED.bytes_total, DATASHEET_GBPS) / MEASURED_US,
                               f"That floor is priced at the data sheet's {DATASHEET_GBPS:,.0f} "
                               f"GB/s; the book's floor uses the measured copy "
                               f"({BANDWIDTH_GBPS:,.0f} GB/s)."),
}


def _grade_pct(answer):
    # "78.6%", 79 (78.6 rounded as written: "78" is not), "47.53/60.5*100"; a bandwidth is read
    # to say what it is
    reading = answers.read(answer, "a percentage", answers.PERCENT,
                           also=(answers.BANDWIDTH_GBPS,))
    value = reading.value
    if reading.units is answers.BANDWIDTH_GBPS:
        reading = answers.Reading(value, reading.half_unit, reading.significant)
        achieved = FUSED.bytes_total / (MEASURED_US * 1e3)
        if answers.match(reading, achieved, rel=0.01).right:
            return wrong(f"{_shown(value)} GB/s (the achieved bandwidth).",
                         _PCT_MISTAKES["the achieved bandwidth"][1])
        return wrong(f"{_shown(value)} GB/s is a bandwidth, not a share of the floor.",
                     "Divide the floor time by the measured time, times 100.")
    found = answers.match(reading, PCT, {k: v for k, (v, _) in _PCT_MISTAKES.items()}, rel=0.005)
    if found.rough:
        return wrong(*answers.more_digits(reading.shown(), found.also_fits,
                                          "the percentage to two digits"))
    if found.right:
        return correct(f"{FLOOR_US:.2f} / {MEASURED_US:g} = {PCT:.1f}% of the floor "
                       f"(equivalently {FUSED.bytes_total / (MEASURED_US * 1e3):,.0f} GB/s "
                       f"achieved out of {BANDWIDTH_GBPS:,.0f}).")
    if found.mistake:
        return wrong(f"{_shown(value)} ({found.mistake}).", _PCT_MISTAKES[found.mistake][1])
    return wrong(f"{_shown(value)}% is not it.", "Divide the floor you predicted by the measured "
                                             "time, times 100.")


percent_of_floor = Exercise(
    "percent_of_floor",
    f"At the same shape the kernel measures {MEASURED_US:g} µs (median of process medians). "
    f"What percent of the floor does it reach?",
    _grade_pct, solution=PCT, mistakes={label: v for label, (v, _) in _PCT_MISTAKES.items()})


# (3) which rule did a suspicious number break? ------------------------------------------------
BIG_ROWS, BIG_COLS = 16384, 8192
BIG_FLOOR_US = _us(traffic.price(traffic.OP_STEP["add_rmsnorm"], BIG_ROWS, BIG_COLS,
                                 DTYPE).bytes_total)
SUSPICIOUS_US = 4.0
RULE_CHOICES = {
    "a": "The CPU clock was read right after the call without a synchronize: it timed the launch.",
    "b": "The L2 was warm: the inputs were still in the cache from the previous call.",
    "c": "Only one process was measured: another process could have been slower.",
    "d": "The median hides the slow calls; the mean would have been right.",
    "e": "The kernel is simply faster than the copy: fusion beats the floor.",
}
_RULE_HINTS = {
    "b": f"The inputs here are {3 * BIG_ROWS * BIG_COLS * ITEM / 1e6:,.0f} MB, far larger than "
         f"any L2 (tens of MB): a warm cache cannot hold them, let alone explain a factor this size.",
    "c": f"Processes usually differ by a few percent, and even an unlucky one is not "
         f"{BIG_FLOOR_US / SUSPICIOUS_US:.0f} times faster than the bytes allow.",
    "d": "Delays only add time: the mean of the same samples would be larger than the median, "
         "not smaller, so no statistic turns an honest timing into one far below the floor.",
    "e": "The floor is a reference: the time to move the op's bytes at the measured copy rate. The "
         "best kernels land within a few percent of it; a number far below it means the "
         "measurement did not cover the work.",
}




def _grade_rule(answer):
    choice = answers.read_option(answer, RULE_CHOICES)  # "a", "(A)", 1, the option's text
    if choice == "a":
        return correct(f"{SUSPICIOUS_US:.0f} µs is about {BIG_FLOOR_US / SUSPICIOUS_US:.0f}x below "
                       f"the floor ({BIG_FLOOR_US:.0f} µs): impossible for the kernel. A clock "
                       f"read without a synchronize measures how long the call took to return, "
                       f"that is, to queue the launch: a few µs for a lean launch, more through "
                       f"a Python wrapper, and growing far less than the work as the size grows "
                       f"(section 1 measures it). Device events, or a synchronize before reading "
                       f"the clock, time the work.")
    return wrong(f"({choice}) cannot explain it.", _RULE_HINTS[choice])


broken_rule = Exercise(
    "broken_rule",
    f"A colleague reports {SUSPICIOUS_US:.0f} µs for the fused add + RMSNorm at {BIG_ROWS} x "
    f"{BIG_COLS} bf16 on the GPU above ({BANDWIDTH_GBPS:,.0f} GB/s). Compute the floor first. "
    f"Which rule was most likely broken? Answer with a letter: "
    + " ".join(f"({k}) {v}" for k, v in RULE_CHOICES.items()),
    _grade_rule, solution="a", mistakes={f"choice {k}": k for k in _RULE_HINTS})


# (4) predict, then look: flushed over warm, inside and beyond the L2 -----------------------------
L2_CLOSE = 0.10  # a prediction within 10% of each recorded ratio is a good one


@functools.lru_cache(maxsize=1)
def recorded_l2() -> dict | None:
    """Section 4's L2 rule in the committed recording: its headline shape (inside the L2), its
    largest (far beyond it), the L2's size and the GPU; None when it is missing."""
    from ..book.ch06 import l2_rows

    try:
        doc = records.load("timing_rules", records.COMMITTED)
    except (FileNotFoundError, ValueError):
        return None
    found = l2_rows(doc)
    if not found or not found[1].get("l2_bytes"):
        return None
    shapes, rule = found
    return {"inside": rule["headline"], "beyond": shapes[-1], "l2_bytes": rule["l2_bytes"],
            "gpu": predictions.recorded_gpu(doc)}


def _l2_said(found: dict) -> str:
    inside, beyond = found["inside"], found["beyond"]
    return (f"The {found['gpu']} recorded {inside['cold_over_warm']:.2f} inside the L2 (flushed "
            f"{inside['cold_us']:.1f} µs, warm {inside['warm_us']:.1f} µs) and "
            f"{beyond['cold_over_warm']:.2f} beyond it ({beyond['cold_us']:.0f} µs and "
            f"{beyond['warm_us']:.0f} µs).")


def _grade_l2(answer):
    inside_guess, beyond_guess = predictions.read_ratios(
        answer, 2, "ratios (flushed time / warm time), inside the L2 and beyond it")
    found = recorded_l2()
    if found is None:
        return predictions.recording_missing()
    inside, beyond = found["inside"]["cold_over_warm"], found["beyond"]["cold_over_warm"]
    mb, l2_mib = found["beyond"]["bytes"] / 1e6, found["l2_bytes"] / 2**20
    guessed = f"You predicted {inside_guess:.2f} and {beyond_guess:.2f}. {_l2_said(found)}"
    if inside_guess < 1 and answers.close(1 / inside_guess, inside, L2_CLOSE):
        return wrong(guessed, "Those are warm over flushed: the question asks flushed / warm, "
                              "above 1 when the warm call is faster.")
    if inside_guess < inside * (1 - L2_CLOSE):
        return wrong(guessed,
                     f"Inside the L2 the warm call finds x, the residual and w where the "
                     f"previous call left them, and the flushed call reads them from DRAM: the "
                     f"flush cost {inside - 1:.0%} of the warm time.")
    if inside_guess > inside * (1 + L2_CLOSE):
        return wrong(guessed,
                     f"The L2 serves bytes several times faster than DRAM, but a call of "
                     f"{found['inside']['warm_us']:.0f} µs is not all reading: the programs' "
                     f"start and the reductions' latency cost the same from either, so the "
                     f"flush added {inside - 1:.0%}, not a bandwidth ratio.")
    if not answers.close(beyond_guess, beyond, L2_CLOSE):
        return wrong(guessed,
                     f"Beyond the L2 a warm call has nothing left to find: the previous call "
                     f"moved {mb:,.0f} MB through {l2_mib:.0f} MiB of cache, so its own inputs "
                     f"were gone before it ended. Both calls read DRAM, and the ratio is about 1.")
    return correct(f"{guessed} Inside the L2, a warm benchmark flatters the kernel by "
                   f"{inside - 1:.0%}; beyond it, warm and flushed agree within "
                   f"{abs(beyond - 1):.0%}. That is why the book states the L2 state of every "
                   f"time and reports flushed calls.")


def _l2_solution() -> list | None:
    found = recorded_l2()
    return None if found is None else [round(found["inside"]["cold_over_warm"], 2),
                                       round(found["beyond"]["cold_over_warm"], 2)]


def _l2_mistakes() -> dict:
    found = recorded_l2()
    if found is None:
        return {}
    inside, beyond = found["inside"]["cold_over_warm"], found["beyond"]["cold_over_warm"]
    return {"the cache does not help": [1.0, 1.0],
            "the L2's bandwidth over DRAM's": [3.0, 1.0],
            "the same gain at every size": [round(inside, 2), round(inside, 2)],
            "warm over flushed": [round(1 / inside, 3), round(1 / beyond, 3)]}


def _l2_question() -> str:
    found = recorded_l2()
    inside, beyond = ((found["inside"], found["beyond"]) if found else
                      ({"rows": 1024, "cols": 4096, "bytes": 25.2e6},
                       {"rows": 16384, "cols": 4096, "bytes": 402.7e6}))
    l2 = f"the {found['l2_bytes'] / 2**20:.0f} MiB L2" if found else "the L2"
    return (f"Predict the fused add + RMSNorm's flushed time over its warm time on the H200, at "
            f"{inside['rows']:,} x {inside['cols']:,} bf16 ({inside['bytes'] / 1e6:.0f} MB moved, "
            f"inside {l2}) and at {beyond['rows']:,} x {beyond['cols']:,} bf16 "
            f"({beyond['bytes'] / 1e6:.0f} MB, far beyond it): two ratios, e.g. [1.5, 1.2].")


predict_l2 = Exercise("predict_l2", _l2_question(), _grade_l2, solution=_l2_solution(),
                      mistakes=_l2_mistakes())

ALL = (predict_floor, percent_of_floor, broken_rule, predict_l2, build_summary)
