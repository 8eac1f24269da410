import math as _math
import os
import signal
import time

import pytest
import torch

from fusedrms.book import broken
from fusedrms import checks, verify
from fusedrms.exercises import ch05
from fusedrms.exercises import ch05_compare as C
from fusedrms.exercises import grader
from tests.exercises.prediction_contract import assert_prediction_contract


def test_tolerance_range():
    t = ch05.fp16_tolerance
    assert t.check((1e-3, "cast")).ok  # torch.testing's fp16 default is inside the range
    assert t.check((1.5e-3, "Cast ")).ok
    assert t.check([9.81e-4, "cast"]).ok
    assert not t.check((4.9e-4, "cast")).ok  # below u + the reduction term
    assert not t.check((2.5e-3, "cast")).ok  # above two ulps
    assert not t.check((3.9e-3, "cast")).ok  # bf16 precision
    assert not t.check((0.0, "cast")).ok and not t.check((-1e-3, "cast")).ok
    assert not t.check((1e-3, "reduction")).ok
    assert ch05.fp16_tolerance.solution[0] == checks.tolerance_for(torch.float16, 4096)[0]


def test_the_bounds_mean_what_they_say():
    """Correct fp16 results (round to nearest, fp32 math) pass the lower bound; bf16 ones fail the
    upper."""
    g = torch.Generator().manual_seed(5)
    exact = torch.rand(100_000, generator=g, dtype=torch.float64) + 0.5
    rounded_err = ((exact.to(torch.float16).double() - exact).abs() / exact).max().item()
    assert rounded_err <= ch05.TOO_TIGHT_BELOW
    bf16_err = ((exact.to(torch.bfloat16).double() - exact).abs() / exact).max().item()
    assert bf16_err > ch05.TOO_LOOSE_ABOVE


@pytest.mark.parametrize("answer", ["b", " B ", "(b)", "b)", "(B) it divides by cols - 1",
                                    "unbiased_mean", "broken.unbiased_mean"])
def test_find_the_bug_accepts_the_answer_in_any_form(answer):
    assert ch05.find_the_bug.check(answer).ok


@pytest.mark.parametrize("answer", ["a", "(c)", "d", "e)"])
def test_find_the_bug_rejects_every_other_mistake_with_a_hint(answer):
    fb = ch05.find_the_bug.check(answer)
    assert not fb.ok and "Hint" in str(fb)


@pytest.mark.parametrize("answer", ["z", 7, "ab", "b, c", "b or d", "something else entirely"])
def test_find_the_bug_malformed_answers_get_a_message(answer):
    fb = ch05.find_the_bug.check(answer)
    assert not fb.ok and "could not be read" in str(fb)


def test_the_mystery_kernel_is_not_one_the_chapter_shows():
    assert ch05.MYSTERY in broken.IMPLS and ch05.MYSTERY not in broken.SHOWN
    assert ch05.MYSTERY in broken.CAUGHT


def test_mystery_report_hides_the_name_and_shows_the_evidence():
    text = ch05.mystery_report()
    assert "unbiased" not in text and "mystery" in text
    assert len(text.splitlines()) <= 12
    assert text.splitlines()[-1].endswith("failed") and "FAIL" in text
    # the evidence the solution cites
    results = ch05.mystery_results()
    status = {(r.case, r.dtype): r for r in results}
    assert status[("1x1", "fp32")].status == "FAIL" and status[("1x1", "fp32")].message.startswith("1 NaN")
    assert status[("all zeros", "fp32")].status == status[("w = 0", "fp32")].status == "pass"
    assert status[("1024x4096", "fp16")].status == "pass"
    assert status[("1024x4096", "fp32")].status == "FAIL"
    assert all(r.unwritten == 0 for r in results)


def test_every_shown_broken_kernel_has_exactly_its_one_mistake():
    """Each keeps the row kernel's loud scale: NaN, Inf, overflow and eps = 0 rows are loud, so
    only its own mistake makes it fail; unmasked_weight passes everything."""
    results = verify.run([broken.IMPLS["broken.unmasked_weight"], broken.IMPLS["broken.rows_floor"]],
                         dtypes=[torch.float32])
    by = {(r.kernel, r.case): r.status for r in results}
    assert all(by[("broken.unmasked_weight", c.name)] == "pass" for c in verify.CASES)
    for case in ("NaN input", "Inf input", "overflow", "eps = 0"):  # 4 rows: even, all written
        assert by[("broken.rows_floor", case)] == "pass", case


@pytest.mark.parametrize("answer", [(1e-3, "the final cast"), (1e-3, "Rounding"), "1e-3, cast",
                                    {"rtol": 9.81e-4, "dominant": "cast"}, ("0.001", "CAST")])
def test_tolerance_accepts_the_reason_in_a_reader_s_words(answer):
    assert ch05.fp16_tolerance.check(answer).ok


@pytest.mark.parametrize("answer", [(1e-3, "the fp32 sum"), (1e-3, "accumulation")])
def test_tolerance_in_the_range_with_the_wrong_reason_fails_with_a_hint(answer):
    fb = ch05.fp16_tolerance.check(answer)
    assert not fb.ok and "reason" in fb.message and fb.hint


@pytest.mark.parametrize("answer", [(1e-3, "rounding of the sum"), ("cast", "sum"), "1e-3 cast"])
def test_tolerance_malformed_answers_get_a_message(answer):
    fb = ch05.fp16_tolerance.check(answer)
    assert not fb.ok and "could not be read" in fb.message and not fb.error


@pytest.mark.parametrize("answer", ["b.", "B:", "it divides the sum of squares by cols - 1",
                                    "Divides the sum of squares by cols - 1."])
def test_find_the_bug_accepts_the_option_s_own_words(answer):
    assert ch05.find_the_bug.check(answer).ok


def test_find_the_bug_wrong_option_text_fails_with_a_hint():
    fb = ch05.find_the_bug.check(ch05.BUGS["a"])
    assert not fb.ok and fb.message.startswith("(a)") and fb.hint


@pytest.mark.parametrize("answer", ["cols - 1", "cols-1", "n - 1", "the unbiased variance",
                                    "it divides by n-1 like LayerNorm's unbiased variance"])
def test_find_the_bug_accepts_a_description_of_the_mistake(answer):
    assert ch05.find_the_bug.check(answer).ok


@pytest.mark.parametrize("answer,letter", [("padded", "a"), ("the padded block width", "a"),
                                           ("missing eps", "c"), ("ignores the weight", "d"),
                                           ("sums in fp16", "e")])
def test_find_the_bug_a_description_of_another_mistake_fails_with_its_hint(answer, letter):
    fb = ch05.find_the_bug.check(answer)
    assert not fb.ok and f"({letter})" in fb.message and fb.hint


def test_find_the_bug_a_description_naming_two_mistakes_is_malformed():
    fb = ch05.find_the_bug.check("the padded width or the weight")
    assert not fb.ok and "more than one option (a, d)" in fb.message


@pytest.mark.parametrize("answer", [("cast", 1e-3), ["cast", "1e-3"], ("rounding", 9.81e-4)])
def test_tolerance_in_either_order(answer):
    assert ch05.fp16_tolerance.check(answer).ok


@pytest.mark.parametrize("answer,why", [(("reduction", 1e-3), "reason"), (("cast", 1e-5), "fp32"),
                                        (("cast", 2.5e-3), "too loose")])
def test_tolerance_swapped_wrong_answers_still_fail(answer, why):
    fb = ch05.fp16_tolerance.check(answer)
    assert not fb.ok and why in fb.message + fb.hint


# ---- issue 25: forms a reader copies or types (the shared reader, exercises.answers)

@pytest.mark.parametrize("answer", [2, "2", "option b", "Answer: (B)", ch05.BUGS["b"].upper()])
def test_find_the_bug_accepts_the_option_number_and_text(answer):
    assert ch05.find_the_bug.check(answer).ok


def test_find_the_bug_letter_and_text_that_disagree_are_asked_which():
    fb = ch05.find_the_bug.check("(b) " + ch05.BUGS["a"])
    assert not fb.ok and "words of (a)" in fb.message and not fb.error


@pytest.mark.parametrize("answer", [("9.8\u00d710\u207b\u2074", "cast"), ("1e\u22123", "cast"), "1e\u22123, cast",
                                    ("2^-10", "the final cast")])
def test_tolerance_reads_the_number_as_copied_or_computed(answer):
    assert ch05.fp16_tolerance.check(answer).ok


# ---- the comparison rule, written from its specification ----

B = C.build_close

CLOSE_EXPECTED = {  # label -> (the case its verdict names, words its hint must hold)
    "NaN passes 'none over the bound'": ("NaN where the reference is 2.0", "never passes"),
    "NaN never equal to NaN": ("NaN exactly where", "NaN == NaN"),
    "NaN matched one way only": ("2.0 where the reference is NaN", "both ways"),
    "infinities subtracted": ("+inf and -inf where", "inf - inf is NaN"),
    "the infinities' signs ignored": ("+inf where the reference is -inf", "sign included"),
    "infinities checked only where got has them": ("65504", "accepts any finite value"),
    "|got| - |want|": ("sign flipped", "magnitude of the difference"),
    "rtol * want without abs": ("negative values", "negative bound"),
    "rtol * |got|": ("rtol * |got| but not", "scales with the reference"),
    "the reference rounded to got's dtype": ("1 ulp from its rounding", "hides up to half"),
    "compared in fp32": ("fp32 output just outside", "want.float()"),
    "fp32's tolerance for every dtype": ("within one ulp (a truncating cast)", "tolerance_for"),
    "bf16's tolerance for every dtype": ("three ulps off", "too loose"),
    "the reference's dtype's tolerance": ("within one ulp (a truncating cast)", "tolerance_for"),
    "n = the number of rows": ("(512, 4)", "row's length"),
    "atol forgotten": ("subnormal", "without atol"),
    "< instead of <=": ("exactly atol", "inclusive"),
    "no shape check": ("(4,) output against a (1, 4)", "got.shape"),
    ".max() of the excess": ("empty", ".max() of nothing raises"),
}


def test_the_solution_of_the_comparison_rule_passes():
    fb = B.check(B.solution)
    assert fb.ok, str(fb)


@pytest.mark.parametrize("label", list(B.mistakes))
def test_each_comparison_mistake_gets_its_own_hint(label):
    fb = B.check(B.mistakes[label])
    where, hint = CLOSE_EXPECTED[label]
    assert not fb.ok and where in fb.message and hint in fb.hint, str(fb)


def test_every_comparison_mistake_is_expected_and_named_by_a_case_of_its_own():
    assert set(CLOSE_EXPECTED) == set(B.mistakes)
    first = {}
    verdicts = C.library_verdicts()
    for label, fn in B.mistakes.items():
        for i in range(len(C.CASES)):
            try:
                mine = fn(*C._build(i))
            except Exception:  # noqa: BLE001
                mine = None
            if mine != verdicts[i]:
                first[label] = i
                break
    assert set(first) == set(B.mistakes)  # each disagrees with the library somewhere
    # the two tolerance mistakes that make correct fp16 outputs fail share their lesson
    shared = {first["fp32's tolerance for every dtype"]}
    assert first["the reference's dtype's tolerance"] in shared
    assert len(set(first.values())) == len(first) - 1


def test_the_cases_hold_what_their_labels_say():
    """The knife-edge cases sit where their labels put them, by the library's own rule."""
    verdicts = dict(zip((c.label for c in C.CASES), C.library_verdicts()))
    assert verdicts["an fp16 output whose error is exactly atol"] is True
    got, want = C._build(18)
    assert (got.double() - want).abs()[0, 1].item() == torch.finfo(torch.float16).tiny
    assert verdicts["an fp16 output 1.5 ulps from the exact value, 1 ulp from its rounding"] \
        is False
    for i in (22, 23):  # outside against want, inside against want rounded
        got, want = C._build(i)
        assert not checks.allclose(got, want) and checks.allclose(got, want.to(got.dtype))
    got, want = C._build(24)
    rtol, atol = checks.tolerance_for(torch.float16, 2)
    err = (got.double() - want).abs()[0, 1].item()
    assert atol + rtol * want[0, 1].item() < err <= atol + rtol * got[0, 1].item()


# other right forms: the math module element by element, torch.isclose, another order


def _close_with_math(got, want):
    if tuple(got.shape) != tuple(want.shape):
        return False
    rtol, atol = checks.tolerance_for(got.dtype, got.shape[-1])
    for a, e in zip(got.double().flatten().tolist(), want.flatten().tolist()):
        if _math.isnan(a) or _math.isnan(e):
            if not (_math.isnan(a) and _math.isnan(e)):
                return False
        elif _math.isinf(a) or _math.isinf(e):
            if a != e:
                return False
        elif not abs(a - e) <= atol + rtol * abs(e):
            return False
    return True


def _close_with_isclose(got, want):
    if got.shape != want.shape:
        return False
    rtol, atol = checks.tolerance_for(got.dtype, got.shape[-1])
    return bool(torch.isclose(got.double(), want, rtol=rtol, atol=atol, equal_nan=True).all())


def _close_in_another_order(got, want):
    if got.dim() != want.dim() or any(a != b for a, b in zip(got.shape, want.shape)):
        return False
    n = got.shape[-1]
    rtol, atol = checks.tolerance_for(got.dtype, n)
    a = got.to(torch.float64)
    both_finite = torch.isfinite(a) & torch.isfinite(want)
    bound = rtol * want.abs() + atol
    within = torch.where(both_finite, (want - a).abs() <= bound, a == want)
    same_nan = torch.isnan(a) == torch.isnan(want)
    return bool((within | (torch.isnan(a) & torch.isnan(want))).all() and same_nan.all())


def _close_returning_a_tensor(got, want):
    return torch.tensor(C.solution_close(got, want))


@pytest.mark.parametrize("fn", [_close_with_math, _close_with_isclose, _close_in_another_order,
                                _close_returning_a_tensor],
                         ids=["math", "isclose", "another order", "a bool tensor"])
def test_other_right_forms_of_the_rule_pass(fn):
    fb = B.check(fn)
    assert fb.ok, str(fb)


def _returns_a_mask(got, want):
    return (got.double() - want).abs() <= 1e-3


def _raises(got, want):
    raise ValueError("not written yet")


def _crashes(got, want):
    os.kill(os.getpid(), signal.SIGSEGV)


def _endless(got, want):
    while True:
        pass


@pytest.mark.parametrize("bad", [None, "my_close", 42, _math.nan, checks.allclose, torch.isclose,
                                 _returns_a_mask, _raises, lambda got: True],
                         ids=["None", "text", "a number", "NaN", "the library's", "isclose",
                              "a mask", "raises", "one argument"])
def test_comparison_junk_gets_a_verdict(bad):
    fb = B.check(bad)
    assert not fb.ok and fb.message and not fb.error
    assert "Traceback" not in str(fb) and len(fb.message) < 600


def test_a_crashing_comparison_gets_a_verdict_and_the_notebook_survives():
    fb = B.check(_crashes)
    assert not fb.ok and "crashed" in fb.message and "SIGSEGV" in fb.message and fb.hint


def test_an_endless_comparison_is_stopped(monkeypatch):
    monkeypatch.setattr(grader, "LIMIT_S", 2.0)
    start = time.time()
    fb = B.check(_endless)
    assert not fb.ok and "did not finish" in fb.message and fb.hint
    assert time.time() - start < 30


# ---- predict, then look: the cases the padded mean fails ----

P = ch05.predict_padded


def test_the_padded_prediction_keeps_the_contract():
    assert_prediction_contract(P, "3x13, 33x257, huge, tiny, NaN, Inf, ovfl, eps=0, stride, "
                                  "transp", "Here the suite failed it on 10 of 16 cases")


def test_the_reasoned_failures_are_the_measured_ones():
    assert ch05.padded_failures() == ch05.PADDED_REASONED


@pytest.mark.parametrize("answer", [["3x13", "NaN inptu"], 7, [3, 13], {"a": 1}])
def test_padded_prediction_malformed_answers_name_the_cases(answer):
    fb = P.check(answer)
    assert not fb.ok and "could not be read" in fb.message


@pytest.mark.gpu
def test_on_the_gpu_the_padded_mean_fails_the_reasoned_cases():
    from fusedrms import env

    assert env.current().on_gpu
    assert ch05.padded_failures() == ch05.PADDED_REASONED
    assert P.check(P.solution).ok


def test_the_page_asks_before_it_shows_and_folds_the_solutions():
    import json
    from pathlib import Path

    from fusedrms.viz import file_section

    path = Path(__file__).resolve().parents[2] / "chapters" / "05_verification.ipynb"
    cells = json.loads(path.read_text())["cells"]
    text = ["".join(c["source"]) for c in cells]
    section = file_section(C.__file__, "close-solution")
    holders = [i for i, t in enumerate(text) if section in t]
    assert len(holders) == 1 and ":class: dropdown" in text[holders[0]]
    asked = [i for i, t in enumerate(text) if "ch05.build_close.check(answer)" in t]
    assert asked and asked[0] < holders[0]
    # the prediction is written before the drawer's matrix runs, and checked after it
    written = [i for i, t in enumerate(text) if t.startswith("prediction = None")]
    matrix = [i for i, t in enumerate(text) if "bad_results = verify.run(drawer" in t]
    checked = [i for i, t in enumerate(text) if "ch05.predict_padded.check(prediction)" in t]
    assert written and matrix and checked and written[0] < matrix[0] < checked[0]
    assert ":class: dropdown" in text[checked[0] + 1]


def _wraps_the_library(got, want):
    return bool(checks.allclose(got, want, nan="match"))


def _wraps_the_library_imported_inside(got, want):
    from fusedrms import checks as library

    return bool(library.allclose(got, want, nan="match"))


@pytest.mark.parametrize("answer", [_wraps_the_library, _wraps_the_library_imported_inside],
                         ids=["wrapper", "imported inside"])
def test_build_close_refuses_a_wrapper_around_the_librarys_comparison(answer):
    fb = C.build_close.check(answer)
    assert not fb.ok and "checks.allclose" in fb.message and fb.hint, str(fb)


def _allclose_with_the_watch_off(got, want):
    import sys

    sys.setprofile(None)  # the profile the checker watches the library's functions with
    return bool(checks.allclose(got, want, nan="match"))


def _allclose_in_a_thread(got, want):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return bool(pool.submit(checks.allclose, got, want, nan="match").result())


@pytest.mark.parametrize("answer", [_allclose_with_the_watch_off, _allclose_in_a_thread],
                         ids=["sys.setprofile(None)", "a thread"])
def test_the_librarys_comparison_is_seen_with_the_watch_switched_off_or_in_a_thread(answer):
    fb = C.build_close.check(answer)
    assert not fb.ok and "the library's comparison" in fb.message, str(fb)


def test_compare_names_what_was_returned_instead_of_a_verdict_once():
    assert C._verdict_of([1, 2, 3]) == "list [1, 2, 3]"  # not "list str: [1, 2, 3]"
    assert C._verdict_of("yes") == "str 'yes'"
