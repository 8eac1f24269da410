
import pytest

from fusedrms import reference
from fusedrms.exercises import ch01


def test_solutions_agree_with_the_reference():
    import torch

    y = reference.rmsnorm(torch.tensor(ch01.X, dtype=torch.float64),
                          torch.tensor(ch01.W, dtype=torch.float64), ch01.EPS, accum=torch.float64)
    assert ch01.third_output.solution == pytest.approx(y[0, 2].item() if y.dim() == 2 else y[2].item(),
                                                       abs=5e-5)
    assert ch01.sum_of_squares.solution == 25


def test_padding_answer_confirmed_numerically():
    import torch

    x = torch.randn(13, dtype=torch.float64) * 10
    r13 = reference.row_scale(x, eps=0.0, accum=torch.float64)
    r16 = torch.rsqrt((x * x).sum() / 16)
    assert (r16 / r13).item() == pytest.approx(ch01.padded_mean.solution[1], rel=1e-4)


@pytest.mark.parametrize("factor", [1.1, "1.1", 1.11, 1.109, "1.1094", 1.1094])
def test_padded_mean_accepts_the_factor_at_the_precision_written(factor):
    """The prompt's own example, ('smaller', 0.9), has one decimal: so may the answer."""
    assert ch01.padded_mean.check(("larger", factor)).ok


@pytest.mark.parametrize("answer,needle", [
    (("larger", 1.2), "not the factor"),        # wrong at one decimal
    (("larger", "1.10"), "not the factor"),     # three significant digits, and the third is wrong
    (("larger", 1), "too rough"),               # one digit cannot tell 1.11 from 1
    (("smaller", 1.1), "larger"),
    (("larger", 1.23), "change of the mean"),
])
def test_padded_mean_rejects_wrong_or_too_rough_factors(answer, needle):
    fb = ch01.padded_mean.check(answer)
    assert not fb.ok and needle in fb.message and fb.hint


@pytest.mark.parametrize("answer", ["no", "No.", " NO ", "no!", "no, r depends only on x", False])
def test_weight_and_scale_accepts_no_in_any_reasonable_form(answer):
    assert ch01.weight_and_scale.check(answer).ok


@pytest.mark.parametrize("answer", ["yes", "Yes.", "yes - it changes", True])
def test_weight_and_scale_rejects_yes_in_any_form_with_a_hint(answer):
    fb = ch01.weight_and_scale.check(answer)
    assert not fb.ok and fb.hint and "could not be read" not in fb.message


@pytest.mark.parametrize("answer", ["nope", "maybe", 0, ["no"]])
def test_weight_and_scale_malformed_gets_a_message(answer):
    fb = ch01.weight_and_scale.check(answer)
    assert not fb.ok and "could not be read" in fb.message and not fb.error


@pytest.mark.parametrize("answer", [
    {"direction": "larger", "factor": 1.1094}, {"Direction": "Larger", "Factor": "1.11"},
    (1.1094, "larger"), ("bigger", 1.1094), ("greater", 1.11), ("larger", "sqrt(16/13)"),
    ("larger", "√(16/13)")])
def test_padded_mean_accepts_other_forms_of_the_pair(answer):
    assert ch01.padded_mean.check(answer).ok


@pytest.mark.parametrize("answer,needle", [
    (("larger", "16/13"), "change of the mean"),   # a fraction is read, and is the mean's factor
    (("larger", 0.9014), "r_right / r_wrong"),      # the inverse factor with the right direction
    (("lower", 1.1094), "gets larger"),
])
def test_padded_mean_reads_fractions_and_names_the_inverse(answer, needle):
    fb = ch01.padded_mean.check(answer)
    assert not fb.ok and needle in fb.message and fb.hint


@pytest.mark.parametrize("answer", ["larger 1.1", ("larger", "1/0"), ("larger", 1.1, 3),
                                    {"larger": 1.1}, (1.1, 1.2), ("larger", None)])
def test_padded_mean_malformed_gets_a_message(answer):
    fb = ch01.padded_mean.check(answer)
    assert not fb.ok and "could not be read" in fb.message and not fb.error


@pytest.mark.parametrize("answer", [-0.4, "-0.4000", -0.39999968, "-0.40"])
def test_third_output_accepts_the_value_as_written(answer):
    fb = ch01.third_output.check(answer)
    assert fb.ok and "-0.4000" in fb.message


def test_exercise_row_is_not_the_animations():
    """The animation's frames show every intermediate value of its row: the exercises use
    another, so reading the answer off the frames is not possible."""
    from fusedrms.viz import rmsnorm_frames

    shown = " ".join(f.caption for f in rmsnorm_frames.frames())
    assert f" {ch01.sum_of_squares.solution:g}" not in shown
    assert f"{ch01.third_output.solution:.4f}" not in shown


@pytest.mark.parametrize("written", ["sqrt(16)/sqrt(13)", "(16/13)**0.5", "(16/13)^0.5", "√(16/13)"])
def test_padded_mean_reads_the_factor_written_as_arithmetic(written):
    assert ch01.padded_mean.check(("larger", written)).ok


@pytest.mark.parametrize("answer,needle", [
    (("larger", 0.1094), "how much r grows"), (("larger", 10.94), "how much r grows"),
    (("larger", "10.94%"), "percentage"), (("larger", "__import__('os')"), "could not read"),
])
def test_padded_mean_tells_growth_and_percentages_from_the_factor(answer, needle):
    fb = ch01.padded_mean.check(answer)
    assert not fb.ok and needle in fb.message


def test_sum_of_squares_names_a_negative_square():
    fb = ch01.sum_of_squares.check(17)
    assert not fb.ok and "(-2)²" in fb.hint


@pytest.mark.parametrize("answer,column", [(0.8, 1), (1.6, 3)])
def test_third_output_names_another_columns_output(answer, column):
    fb = ch01.third_output.check(answer)
    assert not fb.ok and f"y[{column}]" in fb.message and "count from 0" in fb.hint


def test_third_output_accepts_a_fraction():
    assert ch01.third_output.check("-2/5").ok
    assert not ch01.third_output.check("2/5").ok


# ---- issue 25: forms a reader copies or types (the shared reader, exercises.answers)

@pytest.mark.parametrize("answer", ["\u22120.4", "\u2212 0.4000", "\u20130.4", "-2/5", "\u22122\u00f75"])
def test_third_output_accepts_a_minus_as_copied_from_rendered_math(answer):
    assert ch01.third_output.check(answer).ok


def test_third_output_names_a_decimal_comma():
    fb = ch01.third_output.check("\u22120,4")
    assert not fb.ok and "decimal point" in fb.message and not fb.error


@pytest.mark.parametrize("answer", ["1+4+4+16", "1 + 4 + 4 + 16", "1\u00b2+2\u00b2+(\u22122)\u00b2+4\u00b2",
                                    "1**2 + 2**2 + (-2)**2 + 4**2", "25.0"])
def test_sum_of_squares_accepts_the_sum_written_out(answer):
    assert ch01.sum_of_squares.check(answer).ok


@pytest.mark.parametrize("answer,needle", [("1+4-4+16", "(-2)²"), ("1+2-2+4", "Square each"),
                                           ("(1+4+4+16)/4", "before dividing")])
def test_sum_of_squares_written_out_wrong_gets_its_hint(answer, needle):
    fb = ch01.sum_of_squares.check(answer)
    assert not fb.ok and needle in fb.hint


def test_padded_mean_reads_a_factor_with_a_unicode_root():
    assert ch01.padded_mean.check(("larger", "\u221a16/\u221a13")).ok
    fb = ch01.padded_mean.check(("larger", "1"))
    assert not fb.ok and "too rough" in fb.message
