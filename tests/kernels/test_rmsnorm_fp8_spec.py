"""Chapter 8's specification (fusedrms.kernels.rmsnorm_fp8_spec): the constants, the reference is
the formula, and the comparison rule."""
import math

import pytest
import torch

from fusedrms import validation
from fusedrms.kernels import rmsnorm_fp8_spec as spec

BF16 = torch.bfloat16


def bits(codes):
    return spec.code_bits(codes)


def test_constants_come_from_the_config():
    cfg = spec.DEEPSEEK_V3_CONFIG
    assert (spec.HIDDEN_SIZE, spec.BLOCK_COLS, spec.RMS_NORM_EPS) == (7168, 128, 1e-6)
    assert cfg["quantization_config"]["fmt"] == "e4m3" and spec.FP8_MAX == 448.0


def test_reference_dequantizes_to_rmsnorm():
    """codes * scale is RMSNorm(x) * gamma up to half an e4m3 step of the block's absmax."""
    x, w = spec.make_inputs(3, 1000, seed=5, device="cpu")
    codes, scales = spec.reference(x, w)
    assert codes.dtype == torch.float8_e4m3fn and codes.shape == (3, 1000)
    assert scales.dtype == torch.float32 and scales.shape == (3, 8)
    x64 = x.double()
    exact = x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + 1e-6) * w.double()
    deq = codes.double() * scales.repeat_interleave(128, dim=1)[:, :1000].double()
    block_absmax = scales.double().repeat_interleave(128, dim=1)[:, :1000] * 448
    # e4m3 keeps 3 mantissa bits: relative step 2^-3, half of it from rounding; bf16 adds 2 x 2^-8
    err = (deq - exact).abs()
    bound = exact.abs() * (2 ** -4 + 2 ** -7) + block_absmax * 2 ** -10
    assert bool((err <= bound).all()), float((err - bound).max())


def test_reference_codes_are_nearest_even_of_the_stated_quotient():
    x, w = spec.make_inputs(2, 512, seed=1, device="cpu")
    codes, scales = spec.reference(x, w, contract="exact")
    y = ((x.float() * spec.row_rscale(x, 1e-6)).to(BF16) * w).float()
    quotient = y / scales.repeat_interleave(128, dim=1)
    assert torch.equal(bits(codes), bits(quotient.clamp(-448, 448).to(torch.float8_e4m3fn)))
    assert float(quotient.abs().max()) <= 448 * (1 + 2 ** -23)


def test_served_codes_are_nearest_even_of_y_times_448_over_absmax():
    """The served contract: an fp32 sum by the stated tree, q = y * RN(448 / absmax)."""
    x, w = spec.make_inputs(2, 512, seed=1, device="cpu")
    codes, scales = spec.reference(x, w, contract="served")
    y = ((x.float() * spec.row_rscale(x, 1e-6, "pairwise")).to(BF16) * w).float()
    absmax = y.reshape(2, 4, 128).abs().amax(-1).clamp_min(spec.ABSMAX_FLOOR)
    q = y * (torch.tensor(448.0) / absmax).repeat_interleave(128, dim=1)
    assert torch.equal(bits(codes), bits(q.clamp(-448, 448).to(torch.float8_e4m3fn)))
    assert torch.equal(scales, absmax / torch.tensor(448.0))
    pairwise = spec.pairwise_sum_of_squares(x.float())
    tree = (x.float() ** 2).reshape(2, 256, 2).sum(-1)
    while tree.shape[-1] > 1:
        tree = tree[:, 0::2] + tree[:, 1::2]
    assert torch.equal(pairwise, tree)


def test_the_reordered_reference_breaks_equality():
    x, w = spec.make_inputs(2, 7168, seed=0, device="cpu")
    report = spec.compare(*spec.reference_reordered(x, w), *spec.reference(x, w, contract="exact"))
    assert not report.ok and report.mismatches > 100  # hundreds of 14336 codes move


def test_sum_of_squares_does_not_depend_on_order():
    x, w = spec.make_inputs(4, 7168, seed=2, device="cpu")
    perm = torch.randperm(7168, generator=torch.Generator().manual_seed(0))
    assert torch.equal(spec.row_rscale(x, 1e-6), spec.row_rscale(x[:, perm], 1e-6))


def test_the_fp8_reference_is_the_kernel_policy_not_torch_max():
    """torch.maximum keeps NaN, tl.max drops it: the reference now states the policy itself."""
    x, w = spec.make_inputs(2, 256, seed=1)
    x[1, 5] = float("nan")
    codes, scales = spec.reference(x, w)
    assert torch.isnan(scales[1]).all() and not torch.isnan(scales[0]).any()
    w[0] = float("inf")
    codes, scales = spec.reference(x, w)
    assert torch.isnan(scales[:, 0]).all() and not torch.isnan(scales[0, 1])


def test_compare_rejects_one_flipped_code_and_a_drifted_scale():
    x, w = spec.make_inputs(2, 256, seed=0, device="cpu")
    codes, scales = spec.reference(x, w)
    flipped = codes.clone()
    flipped.view(torch.uint8)[1, 17] ^= 1
    report = spec.compare(flipped, scales, codes, scales)
    assert not report.ok and report.mismatches == 1 and "(1, 17)" in report.message
    assert not spec.compare(codes, scales * (1 + 4e-6), codes, scales).ok
    assert spec.compare(codes, scales * (1 + 2 ** -23), codes, scales).ok
    assert not spec.compare(codes[:, :128], scales, codes, scales).ok
    assert not spec.compare(codes, scales.double(), codes, scales).ok


def test_compare_matches_nan_codes_by_position_not_sign():
    a = torch.tensor([0x7F, 0x01], dtype=torch.uint8).view(torch.float8_e4m3fn)
    b = torch.tensor([0xFF, 0x01], dtype=torch.uint8).view(torch.float8_e4m3fn)
    c = torch.tensor([0x7E, 0x01], dtype=torch.uint8).view(torch.float8_e4m3fn)
    s = torch.ones(1)
    assert spec.compare(a, s, b, s).ok
    assert not spec.compare(c, s, b, s).ok and not spec.compare(b, s, c, s).ok


@pytest.mark.parametrize("scale_rtol", [math.nan, math.inf, -1e-6, "1e-6"])
def test_compare_refuses_a_scale_tolerance_that_decides_nothing(scale_rtol):
    """Issue 26: scale_rtol=nan passed any scales (NaN compares false)."""
    x, w = spec.make_inputs(2, 256, seed=0, device="cpu")
    codes, scales = spec.reference(x, w)
    with pytest.raises(validation.InputError, match="^scale_rtol must be"):
        spec.compare(codes, scales * 2, codes, scales, scale_rtol=scale_rtol)
    with pytest.raises(validation.InputError, match="^scale_rtol must be"):  # no scales to compare
        spec.compare(codes[:0], scales[:0], codes[:0], scales[:0], scale_rtol=scale_rtol)
