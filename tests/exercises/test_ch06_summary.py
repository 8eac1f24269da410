"""Chapter 6's build-from-spec: the summary the book reports, from per-process samples."""
import ctypes
import math
import os
import statistics

import pytest

from fusedrms.exercises import ch06, ch06_summary as S, grader

E = S.build_summary


def test_it_is_one_of_the_chapters_exercises():
    assert E in ch06.ALL


def test_the_solution_is_the_library_on_every_case_and_the_cases_cover_the_spec():
    valid = [args for args, refused in S.CASES if not refused]
    for args in valid:
        mine, book = S.solution_summarize(*args), S.expected(*args)
        assert mine[:3] == pytest.approx(book[:3], rel=1e-12) and mine[3] == book[3]
    verdicts = {S.expected(*a)[3] for a in valid}
    assert verdicts == {"faster", "slower", "tie"}
    counts = {len(ours) for ours, _, _ in valid}
    assert 1 in counts and counts & {2, 4, 8, 10} and counts & {3, 5, 7}
    edges = [a for a in valid if S.expected(*a)[0] / statistics.median(
        statistics.median(p) for p in a[1]) in (1 - a[2], 1 + a[2]) and a[2] > 0]
    assert len(edges) >= 2  # both edges, in numbers held exactly
    for args, refused in S.CASES:
        if refused:
            with pytest.raises(ValueError):
                S.expected(*args)


def test_every_mistake_differs_from_the_library_and_from_each_other():
    valid = [args for args, refused in S.CASES if not refused]
    right = [S.expected(*a) for a in valid]
    seen = {repr(right)}
    for label, (fn, _) in S.MISTAKES.items():
        if label == "NaN samples kept":
            continue
        got = repr([fn(*a) for a in valid])
        assert got not in seen, label
        seen.add(got)


def _numpy_form(ours, peer, band):
    import numpy as np

    for kernel in (ours, peer):
        if not kernel or any(len(p) == 0 or np.isnan(p).any() for p in kernel):
            raise ValueError("bad samples")
    meds = [float(np.median(p)) for p in ours]
    median = float(np.median(meds))
    p10, p90 = np.percentile(meds, [10, 90])
    ratio = median / float(np.median([np.median(p) for p in peer]))
    if abs(ratio - 1) <= band:
        return median, p10, p90, "tie"
    return median, p10, p90, "faster" if ratio < 1 else "slower"


def _statistics_form(ours, peer, band):
    def medians(kernel):
        if not kernel:
            raise ValueError("no processes")
        out = []
        for p in kernel:
            if any(math.isnan(t) for t in p):
                raise ValueError("NaN")
            out.append(statistics.median(p))  # an empty one raises StatisticsError
        return out

    meds = medians(ours)
    median = statistics.median(meds)
    if len(meds) == 1:
        p10 = p90 = meds[0]
    else:
        cuts = statistics.quantiles(meds, n=10, method="inclusive")
        p10, p90 = cuts[0], cuts[-1]
    peer_median = statistics.median(medians(peer))
    if median < peer_median * (1 - band):
        verdict = "Faster"
    elif median > peer_median * (1 + band):
        verdict = "SLOWER"
    else:
        verdict = " tie "
    return [median, p10, p90, verdict]


@pytest.mark.parametrize("form", [S.solution_summarize, _numpy_form, _statistics_form],
                         ids=["solution", "numpy", "statistics"])
def test_every_right_form_passes(form):
    fb = E.check(form)
    assert fb.ok, str(fb)


@pytest.mark.parametrize("label", [k for k in S.MISTAKES if k != "NaN samples kept"])
def test_each_typical_mistake_fails_with_its_own_hint(label):
    fn, hint = S.MISTAKES[label]
    fb = E.check(fn)
    assert not fb.ok and label in fb.message and fb.hint == hint


def _nan_raises_the_wrong_error(ours, peer, band):
    for p in ours + peer:
        assert not any(t != t for t in p), "NaN"
    return S.solution_summarize(ours, peer, band)


def test_a_nan_kept_or_refused_with_the_wrong_error_is_told_to_raise_value_error():
    for fn in (S.nan_kept, _nan_raises_the_wrong_error):
        fb = E.check(fn)
        assert not fb.ok and "ValueError" in fb.hint and "NaN" in fb.hint.replace("nan", "NaN")


def _returns_a_dict(ours, peer, band):
    return {"median": 1.0}


def _raises(ours, peer, band):
    raise RuntimeError("not written yet")


def _two_arguments(ours, peer):
    return 1.0, 1.0, 1.0, "tie"


def test_wrong_shapes_of_answer_get_a_message_not_a_traceback():
    for answer, needle in ((_returns_a_dict, "return a tuple"), (_raises, "raised RuntimeError"),
                           (_two_arguments, "three arguments"), (42, "expected a function"),
                           ("def summarize(): ...", "expected a function")):
        fb = E.check(answer)
        assert not fb.ok and needle in fb.message and not fb.error, (answer, str(fb))


def _segfaults(ours, peer, band):
    ctypes.string_at(0)


def _aborts(ours, peer, band):
    os.abort()


def _endless(ours, peer, band):
    while True:
        pass


# a Python function, so these stand-ins crash on a GPU machine alike (its checker asks a CPU child)
@pytest.mark.parametrize("answer,needle", [(_segfaults, "SIGSEGV"), (_aborts, "SIGABRT"),
                                           (_endless, "did not finish")],
                         ids=["segfault", "abort", "endless"])
def test_a_crashing_or_endless_answer_gets_a_verdict(answer, needle, monkeypatch):
    monkeypatch.setattr(grader, "LIMIT_S", 5.0)
    fb = E.check(answer)
    assert not fb.ok and needle in fb.message and "not affected" in fb.message and fb.hint


def test_the_specification_names_every_rule_the_checker_grades():
    for rule in ("median of the process medians", "two middle values", "q*(n-1)",
                 "1 - band", "1 + band", "exactly on an edge is a tie", "NaN", "ValueError"):
        assert rule in " ".join(S.SPEC.split()), rule


def test_the_page_shows_the_specification_and_the_checked_solution():
    """The exercise cell states SPEC as the checker grades it; the dropdown shows exactly the code
    the tests accept (no drifting copies)."""
    from pathlib import Path

    import nbformat

    from fusedrms.viz import file_section

    nb = nbformat.read(Path(__file__).resolve().parents[2] / "chapters" / "06_measurement.ipynb", 4)
    text = [c.source for c in nb.cells if c.cell_type == "markdown"]
    assert any(S.SPEC in t for t in text)
    solution = file_section(S.__file__, "summary-solution")
    shown = next(t for t in text if solution in t)
    assert shown.startswith("````{admonition} Solution\n:class: dropdown")


def _the_librarys_summary(ours, peer, band):
    from fusedrms.exercises.ch06_summary import expected

    return expected(ours, peer, band)


def test_build_summary_refuses_the_librarys_own_summary():
    fb = S.build_summary.check(_the_librarys_summary)
    assert not fb.ok and "the library's own summary" in fb.message and fb.hint, str(fb)


class BadSamples(ValueError):
    """What a reader's notebook cell defines: its own exception, raised where the spec asks for
    ValueError."""


BadSamples.__module__ = "__main__"  # as a notebook defines it: no file another process imports


def _raises_its_own_exception_class(ours, peer, band):
    def medians(processes):
        if not processes or any(len(p) == 0 for p in processes):
            raise BadSamples("no processes, or an empty one")
        if any(t != t for p in processes for t in p):
            raise BadSamples("a NaN sample")
        return sorted(statistics.median(p) for p in processes)

    def quantile(s, q):
        pos = q * (len(s) - 1)
        lo = int(pos)
        return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (pos - lo)

    meds = medians(ours)
    median = statistics.median(meds)
    p10, p90 = quantile(meds, 0.1), quantile(meds, 0.9)
    ratio = median / statistics.median(medians(peer))
    verdict = "faster" if ratio < 1 - band else "slower" if ratio > 1 + band else "tie"
    return median, p10, p90, verdict


def test_a_right_answer_raising_its_own_exception_class_passes(monkeypatch):
    import sys

    monkeypatch.setattr(sys.modules["__main__"], "BadSamples", BadSamples, raising=False)
    fb = E.check(_raises_its_own_exception_class)
    assert fb.ok, str(fb)


def _returns_a_long_tensor(ours, peer, band):
    import torch

    return torch.zeros(2 ** 26)


def test_a_long_return_value_is_named_at_once_not_taken_for_a_hang():
    import time

    t0 = time.perf_counter()
    fb = E.check(_returns_a_long_tensor)
    assert not fb.ok and "Tensor" in fb.message and "did not finish" not in fb.message, str(fb)
    assert time.perf_counter() - t0 < 50  # the grader's limit is 60 s
