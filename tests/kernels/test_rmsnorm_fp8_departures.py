"""Chapter 8's price list (fusedrms.kernels.rmsnorm_fp8_departures): each departure from the
specification that has a stated form (the pairwise fp32 sum, the reciprocal division) equals its
stated reference bit for bit; the defaults are fp8.fused itself."""
import pytest
import torch

from fusedrms import env, validation
from fusedrms.kernels import rmsnorm_fp8 as q
from fusedrms.kernels import rmsnorm_fp8_departures as D
from fusedrms.kernels import rmsnorm_fp8_spec as spec

DEV = env.current().device
STATED = [("float64", "exact"), ("pairwise", "exact"), ("float64", "reciprocal"),
          ("pairwise", "reciprocal")]


def _poisoned(rows, seed, floor_zero=False):
    x, w = spec.make_inputs(rows, 7168, seed=seed, zero_block=floor_zero)
    x[1, 5] = float("nan")
    x[2, 300] = float("inf")
    x[3] = 1e19  # the fp32 sum of squares overflows, in either order
    x[4] *= 2.0 ** -70  # squares below fp32's normal range: where a sum's order could show
    w[260] = float("-inf")
    return x, w


@pytest.mark.parametrize("sum_order,division", STATED)
@pytest.mark.parametrize("floor", [spec.ABSMAX_FLOOR, 0.0])
def test_each_stated_departure_equals_its_reference_bit_for_bit(sum_order, division, floor):
    x, w = _poisoned(6, seed=4, floor_zero=floor == 0.0)
    got = D.rmsnorm_fp8_departing(x, w, sum_order=sum_order, division=division,
                                  absmax_floor=floor)
    want = spec.reference(x, w, absmax_floor=floor, sum_order=sum_order, division=division)
    report = spec.compare(*got, *want)
    assert report.ok, report


def test_the_defaults_are_fp8_fused_on_its_unpadded_tile():
    x, w = spec.make_inputs(5, 7168, seed=2)
    split = q.FusedConfig(4, None, "block_reciprocal", 1, "split")
    codes, scales = D.rmsnorm_fp8_departing(x, w)
    ref_codes, ref_scales = q.rmsnorm_fp8_fused(x, w, config=split, contract="exact")
    assert torch.equal(spec.code_bits(codes), spec.code_bits(ref_codes))
    assert torch.equal(scales, ref_scales)


def test_the_pairwise_sum_adds_neighbours_level_by_level():
    # squares 2^24, 1, 1, 1: the tree adds (2^24 + 1) + (1 + 1) = 2^24 + 2; left to right,
    # each + 1 would round back to 2^24
    xf = torch.tensor([[4096.0, 1.0, 1.0, 1.0]])
    assert spec.pairwise_sum_of_squares(xf).item() == 2.0 ** 24 + 2
    assert ((xf[0, 0] ** 2 + 1) + 1) + 1 == 2.0 ** 24
    # zeros appended up to a power of two add nothing: three values, padded to four
    assert spec.pairwise_sum_of_squares(torch.tensor([[1.0, 2.0, 3.0]])).item() == 14.0


def test_the_reciprocal_division_is_a_different_specification():
    x, w = spec.make_inputs(64, 7168, seed=0)
    exact = spec.reference(x, w, contract="exact")
    recip = spec.reference(x, w, contract="exact", division="reciprocal")
    moved = spec.differing_codes(recip[0], exact[0])
    assert 0 < moved < x.numel() // 1000  # about 1 code in 5,000, each where a tie is decided
    assert torch.equal(recip[1], exact[1])  # the scales are the same


@pytest.mark.parametrize("kwargs,match", [
    ({"sum_order": "fp16"}, "sum_order must be one of"),
    ({"division": "approximate"}, "division must be one of"),
    ({"exact_r": 1}, "exact_r"),
])
def test_bad_options_get_a_clear_message(kwargs, match):
    x, w = spec.make_inputs(1, 7168)
    with pytest.raises(validation.InputError, match=match):
        D.rmsnorm_fp8_departing(x, w, **kwargs)


def test_widths_without_an_unpadded_tile_are_refused_with_the_reason():
    x, w = spec.make_inputs(1, 4096)  # 32 blocks: one power of two, no split
    with pytest.raises(validation.InputError, match="three powers of two"):
        D.rmsnorm_fp8_departing(x, w)


def test_the_reference_refuses_unstated_departures():
    x, w = spec.make_inputs(1, 256)
    with pytest.raises(validation.InputError, match="sum_order must be one of"):
        spec.reference(x, w, sum_order="compiler")  # no reference can state the compiler's order


@pytest.mark.gpu
@pytest.mark.parametrize("sum_order,division", STATED)
def test_gpu_each_stated_departure_equals_its_reference_at_scale(sum_order, division):
    for x, w in (spec.make_inputs(4096, 7168, seed=7), _poisoned(6, seed=8)):
        got = D.rmsnorm_fp8_departing(x, w, sum_order=sum_order, division=division)
        want = spec.reference(x, w, sum_order=sum_order, division=division)
        report = spec.compare(*got, *want)
        assert report.ok, report
