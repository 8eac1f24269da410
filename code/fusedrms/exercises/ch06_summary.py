"""Chapter 6's build-from-spec: the summary the book reports, from per-process samples.

The reader writes ``summarize(ours, peer, band) -> (median, p10, p90, verdict)`` from the written
specification (:data:`SPEC`). The checker runs it in the grader's child on many cases (odd and
even counts, one process, processes of unequal sizes, ties on the band's edges, NaN samples, an
empty process) and compares it with the library's own functions: :func:`fusedrms.measure.timer.
summarize` for each process's median, :func:`fusedrms.measure.compare.quantile_of` for the
spread across processes and :func:`fusedrms.measure.compare.verdict` for the verdict. Each
typical mistake is the solution with one step wrong (:data:`MISTAKES`), and its hint says which.
"""
from __future__ import annotations

import math
import random
import statistics

from ..measure import compare, timer
from . import grader
from .core import (Exercise, Malformed, brief, correct, fields, one_line, portable_error,
                   wrong)

SPEC = """\
summarize(ours, peer, band) -> (median, p10, p90, verdict)

ours and peer: the samples of two kernels at one shape, each a list of
processes, each process a list of times in µs (one per timed call).
band: the tie band, a fraction such as 0.03.

- median: the median of the process medians of ours. First each process's
  median, then the median of those. The median of an even count is the
  mean of its two middle values.
- p10, p90: the 10th and 90th percentiles of the process medians of ours,
  linear between order statistics: in the sorted values s[0..n-1] the q-th
  quantile sits at position q*(n-1), between s[floor(pos)] and the next
  value (with one process, both are its median).
- verdict: "faster", "slower" or "tie", for ours against peer: ratio =
  median of ours / median of peer; "faster" when ratio < 1 - band,
  "slower" when ratio > 1 + band, else "tie" (a ratio exactly on an edge
  is a tie).
- A NaN sample, a process with no samples, or no processes at all: raise
  ValueError.
"""


# ---- the library's answer -----------------------------------------------------------------------

def _medians(processes) -> list[float]:
    if not processes:
        raise ValueError("no processes")
    if any(math.isnan(t) for p in processes for t in p):
        raise ValueError("a sample is NaN")
    return [timer.summarize(list(p))["median_us"] for p in processes]  # raises on an empty one


def expected(ours, peer, band):
    """The book's summary, from the library's functions (ValueError where the spec asks for it)."""
    meds, peer_med = _medians(ours), statistics.median(_medians(peer))
    median = statistics.median(meds)
    return (median, compare.quantile_of(meds, 0.1), compare.quantile_of(meds, 0.9),
            compare.verdict(median, peer_med, band))


# [book:summary-solution]
def solution_summarize(ours, peer, band):
    def medians(processes):
        if not processes or any(len(p) == 0 for p in processes):
            raise ValueError("no processes, or a process with no samples")
        if any(t != t for p in processes for t in p):  # only NaN != NaN
            raise ValueError("a NaN sample")
        return sorted(statistics.median(p) for p in processes)

    def quantile(s, q):
        pos = q * (len(s) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    meds = medians(ours)
    median = statistics.median(meds)
    ratio = median / statistics.median(medians(peer))
    if ratio < 1 - band:
        verdict = "faster"
    elif ratio > 1 + band:
        verdict = "slower"
    else:
        verdict = "tie"  # inside the band, its edges included
    return median, quantile(meds, 0.1), quantile(meds, 0.9), verdict
# [/book:summary-solution]


# ---- the cases ------------------------------------------------------------------------------------

def _process(rng, centre, n):
    return [round(centre * rng.lognormvariate(0, 0.05), 3) for _ in range(n)]


def _kernel(rng, centre, processes, samples):
    """Processes whose medians differ, of ``samples`` (a count, or one count per process)."""
    counts = samples if isinstance(samples, list) else [samples] * processes
    return [_process(rng, centre * rng.uniform(0.95, 1.08), n) for n in counts]


def _cases():
    rng = random.Random(6)
    cases = [
        # the band's edges, in numbers a binary fraction holds exactly: 3/4 and 5/4 are ties
        ([[3.0, 2.0, 4.0]], [[4.0, 4.0]], 0.25),
        ([[5.0], [5.0, 6.0, 4.0]], [[4.0], [3.0, 5.0]], 0.25),
        ([[2.5, 3.0]], [[4.0]], 0.25),  # just inside "faster" at the lower edge's other side
        ([[1.0, 1.0, 1.0]], [[1.0]], 0.0),  # equal times, no band: a tie
        # processes of unequal sizes: the pooled samples' median is not the median of medians
        ([[10.0, 10.2, 10.1, 10.3, 10.2, 10.4, 10.1], [12.0], [11.0, 11.2]], [[11.0]], 0.03),
        ([[20.0, 21.0], [30.0, 31.0, 29.0, 30.5, 33.0], [25.0, 40.0]], [[27.0, 26.0]], 0.02),
        # a long tail inside a process: mean and median part
        ([[10.0, 10.0, 10.0, 50.0], [10.5, 10.5, 60.0], [11.0, 11.0, 11.0]], [[10.4]], 0.05),
        # one process of each
        ([[7.0, 9.0, 8.0, 8.5]], [[9.0, 9.5]], 0.05),
    ]
    for processes in (1, 2, 3, 4, 5, 7, 8, 10):
        for factor in (0.85, 1.0, 1.15):
            band = rng.choice((0.02, 0.03, 0.05))
            samples = (rng.randint(1, 9) if processes % 2 else
                       [rng.randint(1, 9) for _ in range(processes)])
            cases.append((_kernel(rng, 20.0, processes, samples),
                          _kernel(rng, 20.0 * factor, rng.randint(1, 5), rng.randint(2, 6)), band))
    refused = [
        ([[10.0, math.nan, 10.2]], [[10.0]], 0.03),
        ([[10.0]], [[10.0], [math.nan]], 0.03),
        ([[10.0], []], [[10.0]], 0.03),
        ([], [[10.0]], 0.03),
    ]
    return [(c, False) for c in cases] + [(c, True) for c in refused]


CASES = _cases()


# the library's functions the checker compares with: calling them is handing in its answer
LIBRARY = (timer.summarize, compare.quantile_of, compare.verdict)


def _runs(fn, cases) -> list:
    """(In the grader's child) ``fn`` on every case: its value as four fields, or the exception
    it raised, or what was wrong with its value (a str)."""
    out, used = [], None
    for i, ((ours, peer, band), _) in enumerate(cases):
        grader.progress(f"On case {i + 1}")
        try:
            with grader.calls_to(LIBRARY) as called:
                value = fn([list(p) for p in ours], [list(p) for p in peer], band)
        except Exception as err:  # noqa: BLE001 - the reader's code
            out.append(portable_error(err))
            continue
        if called:  # the library's summary, which the checker compares with
            used = used or grader.LibraryCall(called[0])
        four = fields(value, 4)
        try:
            median, p10, p90, verdict = four
            out.append((float(median), float(p10), float(p90), str(verdict).strip().lower()))
        except Exception:  # noqa: BLE001 - not four fields, or fields that are not numbers
            out.append(f"returned {brief(value)}")
    return out + ([used] if used else [])  # a last entry when it called the library


# ---- the typical mistakes ---------------------------------------------------------------------

def _quantile(s, q):
    return compare.quantile_of(sorted(s), q)


def _verdict(ratio, band, inclusive=False):
    if (ratio <= 1 - band) if inclusive else (ratio < 1 - band):
        return "faster"
    if (ratio >= 1 + band) if inclusive else (ratio > 1 + band):
        return "slower"
    return "tie"


def _checked(processes):
    if not processes or any(len(p) == 0 for p in processes):
        raise ValueError("empty")
    if any(math.isnan(t) for p in processes for t in p):
        raise ValueError("NaN")
    return processes


def pooled_samples(ours, peer, band):
    pool = [t for p in _checked(ours) for t in p]
    median = statistics.median(pool)
    peer_median = statistics.median([t for p in _checked(peer) for t in p])
    return median, _quantile(pool, 0.1), _quantile(pool, 0.9), _verdict(median / peer_median, band)


def mean_not_median(ours, peer, band):
    meds = [statistics.fmean(p) for p in _checked(ours)]
    peer_mean = statistics.fmean([statistics.fmean(p) for p in _checked(peer)])
    mean = statistics.fmean(meds)
    return mean, _quantile(meds, 0.1), _quantile(meds, 0.9), _verdict(mean / peer_mean, band)


def lower_middle_value(ours, peer, band):
    def low(s):
        return sorted(s)[(len(s) - 1) // 2]  # what torch.median returns for an even count

    meds = [low(p) for p in _checked(ours)]
    median = low(meds)
    ratio = median / low([low(p) for p in _checked(peer)])
    return median, _quantile(meds, 0.1), _quantile(meds, 0.9), _verdict(ratio, band)


def spread_within_processes(ours, peer, band):
    median, _, _, verdict = solution_summarize(ours, peer, band)
    p10 = statistics.median(_quantile(p, 0.1) for p in ours)
    p90 = statistics.median(_quantile(p, 0.9) for p in ours)
    return median, p10, p90, verdict


def nearest_rank(ours, peer, band):
    median, _, _, verdict = solution_summarize(ours, peer, band)
    meds = sorted(statistics.median(p) for p in ours)
    return median, meds[int(0.1 * len(meds))], meds[min(int(0.9 * len(meds)), len(meds) - 1)], verdict


def edges_not_ties(ours, peer, band):
    median, p10, p90, _ = solution_summarize(ours, peer, band)
    peer_median = statistics.median(statistics.median(p) for p in peer)
    return median, p10, p90, _verdict(median / peer_median, band, inclusive=True)


def band_on_the_inverse(ours, peer, band):
    median, p10, p90, _ = solution_summarize(ours, peer, band)
    inverse = statistics.median(statistics.median(p) for p in peer) / median
    verdict = "faster" if inverse > 1 + band else "slower" if inverse < 1 - band else "tie"
    return median, p10, p90, verdict


def verdict_inverted(ours, peer, band):
    median, p10, p90, verdict = solution_summarize(ours, peer, band)
    return median, p10, p90, {"faster": "slower", "slower": "faster"}.get(verdict, verdict)


def nan_kept(ours, peer, band):
    def med(processes):
        if not processes or any(len(p) == 0 for p in processes):
            raise ValueError("empty")
        return sorted(statistics.median(p) for p in processes)

    meds = med(ours)
    median = statistics.median(meds)
    return (median, _quantile(meds, 0.1), _quantile(meds, 0.9),
            _verdict(median / statistics.median(med(peer)), band))


MEDIAN_MISTAKES = {
    "the samples pooled across processes": (
        pooled_samples,
        "Take each process's median first, then the median of those: pooling every sample lets "
        "a process with many samples outvote the others, and mixes the spread within a process "
        "into the spread across them."),
    "the mean instead of the median": (
        mean_not_median,
        "Use the median, at both levels: a few delayed calls (a long tail) pull a mean up, not a "
        "median."),
    "the lower middle value for an even count": (
        lower_middle_value,
        "For an even count the median is the mean of the two middle values (statistics.median "
        "does this; torch.median returns the lower one)."),
}
SPREAD_MISTAKES = {
    "p10 and p90 within each process": (
        spread_within_processes,
        "p10 and p90 are of the process medians, one value per process: the spread from process "
        "to process, which the tie band is made of; not each process's own spread."),
    "p10 and p90 by nearest rank": (
        nearest_rank,
        "Interpolate: the q-th quantile sits at position q*(n-1) in the sorted medians, between "
        "s[floor(pos)] and the next value, weighted by the fraction of pos."),
}
VERDICT_MISTAKES = {
    "a ratio on the band's edge called a difference": (
        edges_not_ties,
        "A ratio exactly 1 - band or 1 + band is a tie: only a ratio outside the band counts "
        "(use < and >, not <= and >=)."),
    "the band applied to the peer's time over ours": (
        band_on_the_inverse,
        "Compare ratio = ours / peer with 1 - band and 1 + band. peer / ours > 1 + band means "
        "ours / peer < 1 / (1 + band), which is not 1 - band: the band is no longer symmetric "
        "around the ratio the book reports."),
    "faster and slower swapped": (
        verdict_inverted,
        "ratio = ours / peer below 1 means ours takes less time: that is \"faster\"."),
}
MISTAKES = {**MEDIAN_MISTAKES, **SPREAD_MISTAKES, **VERDICT_MISTAKES,
            "NaN samples kept": (nan_kept, "")}


def _case_text(i: int) -> str:
    (ours, peer, band), _ = CASES[i]
    text = f"ours={ours}, peer={peer}, band={band}"
    return f"case {i + 1} ({text if len(text) <= 160 else text[:157] + '...'})"


def _agrees(got, want, fields) -> bool:
    return all((got[k] == want[k]) if k == 3 else math.isclose(got[k], want[k], rel_tol=1e-9,
                                                             abs_tol=1e-12) for k in fields)


def _first_gap(got, fields):
    """The first valid case where ``got`` disagrees with the library on ``fields``, else None."""
    for i, ((args, refused), value) in enumerate(zip(CASES, got)):
        if not refused and not _agrees(value, expected(*args), fields):
            return i
    return None


def _matches(got, fn, fields) -> bool:
    return all(_agrees(value, fn(*args), fields)
               for (args, refused), value in zip(CASES, got) if not refused)


def _grade(answer) -> object:
    import inspect

    if not callable(answer) or isinstance(answer, type):
        raise Malformed(f"expected a function summarize(ours, peer, band), got "
                        f"{type(answer).__name__}.")
    try:
        inspect.signature(answer).bind([[1.0]], [[1.0]], 0.03)
    except TypeError:
        raise Malformed(f"your function must take three arguments (ours, peer, band); its "
                        f"signature is {inspect.signature(answer)}.") from None
    except ValueError:
        pass
    try:
        got = grader.run(answer, _runs, CASES, cache=True)
    except grader.Failed as failed:
        return grader.failure_feedback(failed, "python")
    used = got.pop() if len(got) > len(CASES) else None
    for i, ((_, refused), value) in enumerate(zip(CASES, got)):
        if isinstance(value, str):
            raise Malformed(f"on {_case_text(i)} your function {value}; return a tuple "
                            f"(median, p10, p90, verdict).")
        if refused and not isinstance(value, ValueError):
            what = (f"returned {value[:3]!r}" if isinstance(value, tuple)
                    else f"raised {one_line(value)}")
            return wrong(f"On {_case_text(i)} your function {what}.",
                         "A NaN sample, an empty process or no processes must raise ValueError: "
                         "a failed timing is not a number, and a median or a max over it would "
                         "pass a NaN on (or silently drop it) without a word.")
        if not refused and isinstance(value, BaseException):
            return wrong(f"On {_case_text(i)} your function raised {one_line(value)}.",
                         "Every case with samples in every process has a summary.")
    for fields, mistakes, what in (((0,), MEDIAN_MISTAKES, "median"),
                                   ((1, 2), SPREAD_MISTAKES, "p10 and p90"),
                                   ((3,), VERDICT_MISTAKES, "verdict")):
        i = _first_gap(got, fields)
        if i is None:
            continue
        want = expected(*CASES[i][0])
        said = (f"On {_case_text(i)} your {what}: "
                f"{', '.join(_shown(got[i][k]) for k in fields)}; the book's: "
                f"{', '.join(_shown(want[k]) for k in fields)}.")
        for label, (fn, hint) in mistakes.items():
            if _matches(got, fn, fields):
                return wrong(f"{said} That is {label}.", hint)
        return wrong(said, _GENERIC[what])
    if used is not None:
        return wrong(f"Your function calls {used}, the library's own summary, which the checker "
                     f"compares with: that is the answer, not yours.",
                     "Write each step yourself from the specification: statistics.median, the "
                     "interpolated quantile at position q*(n-1), and the band's comparison.")
    return correct(f"Your summary agrees with the library's on all {len(CASES)} cases: odd and "
                   f"even counts, one process and ten, processes of unequal sizes, ratios on "
                   f"the band's edges, and NaN samples, an empty process and no processes "
                   f"refused.")


def _shown(v) -> str:
    return repr(v) if isinstance(v, str) else f"{v:.6g}"


_GENERIC = {
    "median": "Each process's median (statistics.median of its samples), then the median of "
              "those medians.",
    "p10 and p90": "Percentiles of the sorted process medians, linear between order statistics "
                   "at position q*(n-1) (numpy.percentile's default).",
    "verdict": "ratio = median of ours / median of peer; faster below 1 - band, slower above "
               "1 + band, a tie in between, edges included.",
}


build_summary = Exercise(
    "build_summary",
    "Write summarize(ours, peer, band) as the specification above says. answer = your function",
    _grade, solution=solution_summarize,
    mistakes={label: fn for label, (fn, _) in MISTAKES.items()})
