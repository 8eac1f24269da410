
import pytest
import torch

from fusedrms.book import broken
from fusedrms import checks, verify
from fusedrms.exercises import ch05


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
