"""Properties of the PyTorch references (hypothesis, derandomized and bounded for CI).

What RMSNorm must satisfy whatever the shape and dtype: scaling a row does not change its output
(while the mean square dominates eps), the sign goes straight through, zeros stay zeros, the output
is linear in the weight, rows are independent, an all-ones weight gives rows of RMS 1, and the fp32
reference stays within checks.tolerance_for of the float64 one.
"""
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusedrms import checks, reference

F64 = torch.float64
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
CI = settings(derandomize=True, max_examples=40, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])


@st.composite
def problems(draw, max_cols=300):
    """(x, w) with random shape, dtype and values from a seeded generator (values stay finite)."""
    rows = draw(st.integers(1, 6))
    cols = draw(st.integers(1, max_cols))
    dtype = draw(st.sampled_from(DTYPES))
    seed = draw(st.integers(0, 2**31 - 1))
    scale = draw(st.sampled_from([1e-2, 1.0, 30.0]))
    g = torch.Generator().manual_seed(seed)
    x = (scale * torch.randn(rows, cols, generator=g)).to(dtype)
    w = torch.randn(cols, generator=g).to(dtype)
    return x, w


def ref64(x, w, eps=1e-5):
    return reference.rmsnorm(x, w, eps, accum=F64, out_dtype=F64)


@CI
@given(problems(), st.sampled_from([2.0, 0.5, 1024.0]))
def test_scaling_a_row_does_not_change_it(problem, c):
    """eps = 0: RMSNorm is scale invariant; powers of two keep x exact in every dtype."""
    x, w = problem
    x = x.double()
    if not (x.abs().amax(dim=-1) > 0).all():
        return
    torch.testing.assert_close(ref64(x * c, w, 0.0), ref64(x, w, 0.0), rtol=1e-12, atol=1e-300)


@CI
@given(problems())
def test_sign_goes_through(problem):
    x, w = problem
    torch.testing.assert_close(ref64(-x, w), -ref64(x, w), rtol=0, atol=0)


@CI
@given(problems())
def test_linear_in_the_weight(problem):
    x, w = problem
    torch.testing.assert_close(ref64(x, 2 * w.double()), 2 * ref64(x, w), rtol=1e-14, atol=0)


@CI
@given(problems())
def test_zeros_stay_zero(problem):
    x, w = problem
    assert not ref64(torch.zeros_like(x), w).any()
    assert not ref64(x, torch.zeros_like(w)).any()
    assert not reference.rmsnorm(torch.zeros_like(x), w).any()  # fp32: no 0/0 either


@CI
@given(problems())
def test_unit_weight_gives_rows_of_rms_one(problem):
    x, _ = problem
    x = x.double()
    if not ((x * x).mean(dim=-1) > 0).all():
        return
    y = ref64(x, torch.ones(x.shape[-1], dtype=F64), eps=0.0)
    rms = (y * y).mean(dim=-1).sqrt()
    torch.testing.assert_close(rms, torch.ones_like(rms), rtol=1e-12, atol=0)


@CI
@given(problems(), st.randoms(use_true_random=False))
def test_rows_are_independent(problem, rnd):
    x, w = problem
    perm = list(range(x.shape[0]))
    rnd.shuffle(perm)
    torch.testing.assert_close(ref64(x[perm], w), ref64(x, w)[perm], rtol=0, atol=0)


@CI
@given(problems(max_cols=4096))
def test_fp32_accumulation_is_within_the_tolerance(problem):
    """What every kernel does (fp32 math, one cast) passes the suite's own check."""
    x, w = problem
    report = checks.allclose(reference.rmsnorm(x, w), ref64(x, w))
    assert report, str(report)


@CI
@given(problems())
def test_add_with_zero_residual_is_plain_rmsnorm(problem):
    x, w = problem
    zero = torch.zeros_like(x)
    torch.testing.assert_close(reference.add_rmsnorm(x, zero, w), reference.rmsnorm(x, w),
                               rtol=0, atol=0)
    y, s = reference.add_rmsnorm_residual(x, zero, w)
    assert torch.equal(s, x) and torch.equal(y, reference.rmsnorm(x, w))


@CI
@given(problems())
def test_residual_output_is_the_rounded_sum(problem):
    x, w = problem
    r = torch.flip(x, dims=[-1])
    y, s = reference.add_rmsnorm_residual(x, r, w)
    assert s.dtype == x.dtype
    torch.testing.assert_close(s, (x.double() + r.double()).to(x.dtype), rtol=0, atol=0)
    torch.testing.assert_close(y, reference.rmsnorm(s, w), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_huge_inputs_need_the_upcast(dtype):
    """fp16 inputs near 3e4: fp32 accumulation is exact enough, fp16 accumulation overflows."""
    x = torch.full((1, 64), 3e4 if dtype == torch.float16 else 1e17).to(dtype)
    w = torch.ones(64, dtype=dtype)
    good = reference.rmsnorm(x, w)
    assert torch.allclose(good.double(), torch.ones(1, 64, dtype=F64), rtol=1e-2)
    if dtype == torch.float16:
        assert math.isinf((x * x).max().item())
        bad = reference.rmsnorm(x, w, accum=torch.float16)
        assert not checks.allclose(bad, ref64(x, w))


def test_eps_dominates_tiny_rows():
    x = torch.full((1, 8), 1e-4, dtype=F64)
    y = ref64(x, torch.ones(8, dtype=F64), eps=1e-5)
    assert y.max().item() == pytest.approx(1e-4 / math.sqrt(1e-8 + 1e-5))
    assert y.max().item() < 0.04  # far from the 1.0 a row of RMS 1 would give
