
import pytest

from fusedrms import reference
from fusedrms.exercises import ch01


def test_solutions_agree_with_the_reference():
    import torch

    y = reference.rmsnorm(torch.tensor(ch01.X, dtype=torch.float64),
                          torch.tensor(ch01.W, dtype=torch.float64), ch01.EPS, accum=torch.float64)
    assert ch01.third_output.solution == pytest.approx(y[0, 2].item() if y.dim() == 2 else y[2].item(),
                                                       abs=5e-5)
    assert ch01.sum_of_squares.solution == 50


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
