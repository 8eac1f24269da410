"""fusedrms.checks: tolerances from the formats, NaN never passes, poison finds unwritten outputs."""
import math

import pytest
import torch

from fusedrms import checks, reference, validation
from fusedrms.book.ch04 import bf16_truncate

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def next_up(t: torch.Tensor, steps: int = 1) -> torch.Tensor:
    """``t`` moved ``steps`` units in the last place away from zero (positive values)."""
    out = t.clone()
    for _ in range(steps):
        out = torch.nextafter(out, torch.full_like(out, math.inf))
    return out


# ---------------------------------------------------------------- tolerance_for

@pytest.mark.parametrize("dtype, u", [(torch.float32, 2**-24), (torch.float16, 2**-11),
                                      (torch.bfloat16, 2**-8)])
def test_tolerance_follows_the_formula(dtype, u):
    for n in (1, 13, 4096):
        rtol, atol = checks.tolerance_for(dtype, n)
        assert rtol == pytest.approx(2 * u + (math.sqrt(n) + 8) * 2**-24, rel=1e-12)
        assert atol == torch.finfo(dtype).tiny
        terms = checks.tolerance_terms(dtype, n)
        assert terms["rtol"] == pytest.approx(terms["cast"] + terms["reduction"])


def test_tolerance_grows_with_width_and_coarser_formats():
    assert checks.tolerance_for(torch.float32, 4096)[0] > checks.tolerance_for(torch.float32, 16)[0]
    fp32, fp16, bf16 = (checks.tolerance_for(d, 4096)[0] for d in DTYPES)
    assert fp32 < fp16 < bf16


def test_unit_roundoff_unknown_dtype_is_a_clear_error():
    with pytest.raises(ValueError, match="no unit roundoff"):
        checks.unit_roundoff(torch.int32)


# ---------------------------------------------------------------- allclose: accept and reject

@pytest.mark.parametrize("dtype", DTYPES)
def test_correctly_rounded_output_passes(dtype):
    e = torch.randn(64, 257, dtype=torch.float64)
    assert checks.allclose(e.to(dtype), e)


@pytest.mark.parametrize("dtype", DTYPES)
def test_one_ulp_passes_three_ulps_fail(dtype):
    """One ulp off the exact value (the most bf16 truncation costs) passes; three do not."""
    rounded = (torch.rand(1000, dtype=torch.float64) + 0.5).to(dtype)
    e = rounded.double()  # exactly representable: any error is whole ulps
    if dtype == torch.float32:
        # fp32's rtol is dominated by the reduction term: push past it
        far = rounded * (1 + 4 * checks.tolerance_for(dtype, 1000)[0])
        assert not checks.allclose(far, e, n=1000)
        return
    assert checks.allclose(next_up(rounded, 1), e, n=1)
    report = checks.allclose(next_up(rounded, 3), e, n=1)
    assert not report and report.mismatches > 0 and "outside" in report.message


def test_interpreter_truncation_of_bf16_is_inside_the_tolerance():
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(8, 257, generator=g).to(torch.bfloat16)
        w = torch.randn(257, generator=g).to(torch.bfloat16)
        fp32 = reference.rmsnorm(x, w, 1e-5, out_dtype=torch.float32)  # a kernel's fp32 math
        expected = reference.rmsnorm(x, w, 1e-5, accum=torch.float64, out_dtype=torch.float64)
        assert checks.allclose(bf16_truncate(fp32), expected), seed


@pytest.mark.parametrize("dtype", DTYPES)
def test_fp32_accumulation_passes_across_seeds_and_widths(dtype):
    """The tolerance is loose enough: a correct fp32-accumulating computation always passes."""
    for seed, cols in enumerate((1, 13, 257, 1000, 4096)):
        g = torch.Generator().manual_seed(100 + seed)
        x = torch.randn(4, cols, generator=g).to(dtype)
        w = torch.randn(cols, generator=g).to(dtype)
        got = reference.rmsnorm(x, w, 1e-5)
        expected = reference.rmsnorm(x, w, 1e-5, accum=torch.float64, out_dtype=torch.float64)
        report = checks.allclose(got, expected)
        assert report, (seed, cols, str(report))


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16))
def test_fp16_accumulation_fails(dtype):
    """The tolerance is tight enough: summing squares in fp16 is caught (overflow of large values)."""
    g = torch.Generator().manual_seed(7)
    x = (3e4 * torch.rand(4, 257, generator=g) + 1e4).to(dtype)
    w = torch.ones(257, dtype=dtype)
    bad = reference.rmsnorm(x, w, 1e-5, accum=torch.float16)
    expected = reference.rmsnorm(x, w, 1e-5, accum=torch.float64, out_dtype=torch.float64)
    assert not checks.allclose(bad, expected)


def test_padded_width_mean_fails():
    x = torch.randn(3, 13, dtype=torch.float64)
    w = torch.ones(13, dtype=torch.float64)
    r_padded = torch.rsqrt((x * x).sum(-1, keepdim=True) / 16 + 1e-5)
    bad = (x * r_padded * w).float()
    assert not checks.allclose(bad, reference.rmsnorm(x, w, accum=torch.float64))


# ---------------------------------------------------------------- NaN and Inf

def test_naive_checks_let_nan_through_allclose_does_not():
    expected = torch.tensor([1.0, 1.0, 2.0], dtype=torch.float64)
    actual = torch.tensor([1.0, math.nan, 2.0])
    err = (actual.double() - expected).abs()
    assert not (err > 1e-3).any()  # "no element exceeds the tolerance": NaN compares false
    assert max([0.0, float("nan")]) == 0.0  # Python's max keeps the first unless a later is larger
    report = checks.allclose(actual, expected)
    assert not report and "NaN" in report.message


def test_nan_match_policy():
    e = torch.tensor([[1.0, 2.0], [math.nan, math.nan]], dtype=torch.float64)
    a = torch.tensor([[1.0, 2.0], [math.nan, math.nan]])
    assert not checks.allclose(a, e)  # never: any NaN fails
    assert checks.allclose(a, e, nan="match")
    a2 = torch.tensor([[1.0, math.nan], [math.nan, 5.0]])
    assert not checks.allclose(a2, e, nan="match")
    with pytest.raises(ValueError):
        checks.allclose(a, e, nan="sometimes")


def test_inf_must_match_sign_and_place():
    e = torch.tensor([math.inf, 1.0], dtype=torch.float64)
    assert checks.allclose(torch.tensor([math.inf, 1.0]), e, nan="match")
    assert not checks.allclose(torch.tensor([-math.inf, 1.0]), e, nan="match")
    assert not checks.allclose(torch.tensor([1.0, math.inf]), e, nan="match")


def test_scalars_and_unsupported_dtypes():
    assert checks.allclose(torch.tensor(1.0), torch.tensor(1.0, dtype=torch.float64))
    with pytest.raises(validation.InputError, match="actual has dtype int32.*checks.equal"):
        checks.allclose(torch.ones(2, dtype=torch.int32), torch.ones(2, dtype=torch.float64))
    codes = torch.ones(2).to(torch.float8_e4m3fn)
    with pytest.raises(validation.InputError, match="float8_e4m3fn.*checks.equal"):
        checks.allclose(codes, codes.double(), rtol=0.1, atol=0.0)
    with pytest.raises(validation.InputError, match="expected must hold real numbers"):
        checks.allclose(torch.ones(2), torch.ones(2, dtype=torch.complex64))
    with pytest.raises(validation.InputError, match="actual must be a torch.Tensor"):
        checks.allclose([1.0, 2.0], torch.ones(2))


def test_integer_tensors_get_a_message_even_with_explicit_tolerances():
    """Issue 26: integers ended in a KeyError inside the ulp count."""
    ints = torch.arange(4, dtype=torch.int32)
    with pytest.raises(validation.InputError, match="actual has dtype int32"):
        checks.allclose(ints, ints.clone(), rtol=0.0, atol=0.0)
    assert checks.equal(ints, ints.clone())  # the route the message names
    assert checks.allclose(ints.double(), ints)  # and the conversion; an integer reference is fine


# ---------------------------------------------------------------- allclose: tolerances refused

@pytest.mark.parametrize("name, value", [("rtol", math.nan), ("rtol", math.inf), ("rtol", -1e-3),
                                         ("atol", math.nan), ("atol", math.inf), ("atol", -1.0),
                                         ("rtol", "1e-3"), ("atol", True),
                                         pytest.param("rtol", 10**400, id="rtol-10**400")])
def test_a_tolerance_that_decides_nothing_is_refused(name, value):
    """Issue 26: rtol=nan or atol=inf passed any output (NaN compares false, Inf exceeds all)."""
    with pytest.raises(validation.InputError, match=f"^{name} must be"):
        checks.allclose(torch.ones(4), torch.full((4,), 2.0, dtype=torch.float64),
                        **{name: value})


@pytest.mark.parametrize("n", [math.nan, -3, 2.5, True, "13"])
def test_a_reduction_length_that_is_not_a_count_is_refused(n):
    with pytest.raises(validation.InputError, match="^n \\(the reduction length\\)"):
        checks.allclose(torch.ones(4), torch.ones(4, dtype=torch.float64), n=n)
    assert checks.allclose(torch.zeros(4), torch.zeros(4, dtype=torch.float64), n=0)  # no rows


def test_scale_must_be_finite_and_non_negative_where_the_reference_is_finite():
    a, e = torch.ones(4), torch.full((4,), 2.0, dtype=torch.float64)
    for bad in (math.inf, math.nan, -1.0):
        scale = torch.ones(4, dtype=torch.float64)
        scale[2] = bad
        with pytest.raises(validation.InputError, match="scale must be .* first at \\(2,\\)"):
            checks.allclose(a, e, scale=scale)
    with pytest.raises(validation.InputError, match="scale has shape"):
        checks.allclose(a, e, scale=torch.ones(2, 2, dtype=torch.float64))
    with pytest.raises(validation.InputError, match="scale must be a torch.Tensor"):
        checks.allclose(a, e, scale=1.0)
    # a gradient's reference is NaN where its input was: its scale may be NaN there too
    e_nan = torch.tensor([1.0, math.nan], dtype=torch.float64)
    scale = torch.tensor([1.0, math.nan], dtype=torch.float64)
    assert checks.allclose(torch.tensor([1.0, math.nan]), e_nan, nan="match", scale=scale)


# ---------------------------------------------------------------- allclose: the pass message

def test_pass_names_the_worst_elements_share_of_its_bound():
    e = torch.tensor([[1.0, 2.0, 4.0], [8.0, 16.0, 32.0]], dtype=torch.float64)
    a = e.clone()
    a[1, 2] += 32.0 * 0.37e-3  # 37% of rtol = 1e-3 relative, atol 0
    a[0, 1] += 2.0 * 0.2e-3
    report = checks.allclose(a, e, rtol=1e-3, atol=0.0)
    assert str(report).startswith("PASS")
    assert "worst element at 37% of its bound (row 1, col 2)" in report.message
    assert report.worst_index == (1, 2) and report.worst_share == pytest.approx(0.37)


def test_pass_share_counts_atol_and_scale_not_just_rtol():
    """The old wording "max rel err <= rtol" was false near atol: here the relative error is 100x
    rtol, yet the element is at 50% of its bound (atol decides)."""
    e = torch.tensor([1e-6, 1.0], dtype=torch.float64)
    a = torch.tensor([1e-6 + 1e-7, 1.0], dtype=torch.float64)
    report = checks.allclose(a, e, rtol=1e-3, atol=2e-7)
    assert report and report.max_rel_err > 1e-3 and "<= rtol" not in report.message
    assert "worst element at 50% of its bound (element 0)" in report.message
    # with a scale the bound is rtol * scale: an error of 1 on 0 passes at 25% of rtol * 4000
    zero = torch.zeros(1, dtype=torch.float64)
    scaled = checks.allclose(zero + 1.0, zero, rtol=1e-3, atol=0.0,
                             scale=torch.full((1,), 4000.0, dtype=torch.float64))
    assert scaled and "at 25% of its bound" in scaled.message and scaled.max_rel_err == 0.0


def test_pass_message_for_exact_and_for_all_nan_outputs():
    e = torch.tensor([1.0, 2.0], dtype=torch.float64)
    assert checks.allclose(e.float(), e).message == "no element differs from the reference"
    nan = torch.tensor([math.nan])
    assert "NaN or Inf where the reference has them" in checks.allclose(
        nan, nan.double(), nan="match").message
    tiny = checks.allclose(torch.tensor(1.0 + 2**-23), torch.tensor(1.0, dtype=torch.float64),
                           rtol=1.0, atol=0.0)
    assert tiny.message.startswith("worst element at under 0.1% of its bound,")  # a scalar: no index


def test_shape_mismatch_and_empty():
    assert not checks.allclose(torch.zeros(2, 3), torch.zeros(3, 2, dtype=torch.float64))
    assert checks.allclose(torch.zeros(0, 3), torch.zeros(0, 3, dtype=torch.float64))


# ---------------------------------------------------------------- metrics

def test_ulp_distance_counts_representable_steps():
    a = torch.tensor([1.0, -1.0, 0.0], dtype=torch.float16)
    b = next_up(a.abs(), 2) * a.sign()
    b[2] = torch.tensor(0.0, dtype=torch.float16)
    assert checks.ulp_distance(b, a).tolist() == [2, 2, 0]
    neg_zero = torch.tensor([-0.0])
    assert checks.ulp_distance(neg_zero, torch.tensor([0.0])).item() == 0
    smallest = torch.tensor([torch.finfo(torch.float32).tiny * 2**-23])  # smallest subnormal
    assert checks.ulp_distance(smallest, -smallest).item() == 2  # across zero


def test_ulp_distance_fp8():
    codes = torch.tensor([1.0, 2.0, 448.0]).to(torch.float8_e4m3fn)
    up = torch.tensor([1.125, 2.25, 416.0]).to(torch.float8_e4m3fn)
    assert checks.ulp_distance(up, codes).tolist() == [1, 1, 1]


def test_relative_l2():
    e = torch.tensor([3.0, 4.0], dtype=torch.float64)
    assert checks.relative_l2(e, e) == 0.0
    assert checks.relative_l2(torch.tensor([3.0, 4.5]), e) == pytest.approx(0.1)
    assert checks.relative_l2(torch.zeros(2), torch.zeros(2)) == 0.0
    assert checks.relative_l2(torch.ones(2), torch.zeros(2)) == math.inf


def test_report_carries_metrics():
    e = torch.rand(100, dtype=torch.float64) + 1
    report = checks.allclose(e.to(torch.float16), e)
    assert report.max_ulp <= 1 and 0 < report.max_rel_err <= 2**-11 and report.rel_l2 > 0
    assert str(report).startswith("PASS")


# ---------------------------------------------------------------- equal

def test_equal_is_bitwise():
    a = torch.tensor([1.0, -0.0, math.nan])
    assert checks.equal(a, a.clone())
    assert not checks.equal(a, torch.tensor([1.0, 0.0, math.nan]))  # -0 and +0 differ in bits
    assert not checks.equal(a, a.double())
    codes = torch.tensor([1.0, 2.0]).to(torch.float8_e4m3fn)
    assert checks.equal(codes, codes.clone())


# ---------------------------------------------------------------- poison

@pytest.mark.parametrize("dtype", DTYPES + (torch.float64,))
def test_poison_is_a_nan_no_arithmetic_makes(dtype):
    t = checks.poisoned((4,), dtype)
    assert torch.isnan(t.float()).all() and checks.is_poison(t).all()
    computed = torch.tensor([math.nan, 0.0 * math.inf, math.inf - math.inf]).to(dtype)
    assert not checks.is_poison(computed).any()


def test_fp8_poison_is_a_nan_code():
    t = checks.poisoned((4,), torch.float8_e4m3fn)
    assert torch.isnan(t.float()).all() and checks.is_poison(t).all()
    assert t.view(torch.uint8).tolist() == [0xFF] * 4


def test_unwritten_elements_are_reported_by_row():
    y = checks.poisoned((5, 3), torch.bfloat16)
    y[:4] = 1.0
    report = checks.allclose(y, torch.ones(5, 3, dtype=torch.float64))
    assert not report and report.unwritten == 3 and "never written" in report.message
    assert "1 of 5 rows (4)" in report.message
    # even where the reference is NaN, poison is not a legitimate NaN
    e = torch.full((2,), math.nan, dtype=torch.float64)
    assert not checks.allclose(checks.poisoned((2,), torch.float32), e, nan="match")


def test_poisoned_allocations_patch_and_restore():
    originals = (torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty)
    with checks.poisoned_allocations():
        made = [torch.empty(3), torch.empty_like(torch.zeros(2), dtype=torch.float16),
                torch.empty_strided((2, 2), (2, 1)), torch.zeros(1).new_empty(4),
                torch.empty(2, dtype=torch.int32)]
    assert all(checks.is_poison(t).all() for t in made[:4])
    assert made[4].dtype == torch.int32  # non-float allocations are left alone
    assert (torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty) == originals


def test_poisoned_allocations_restore_after_an_exception():
    original = torch.empty
    with pytest.raises(RuntimeError):
        with checks.poisoned_allocations():
            raise RuntimeError("kernel failed")
    assert torch.empty is original


@pytest.mark.gpu
def test_poison_on_gpu():
    t = checks.poisoned((1024,), torch.bfloat16, "cuda")
    assert checks.is_poison(t).all()
    t[:10] = 0
    report = checks.allclose(t, torch.zeros(1024, dtype=torch.float64, device="cuda"))
    assert report.unwritten == 1014


def _report_fields(r):
    return (r.ok, r.message, r.mismatches, r.worst_index, r.max_ulp, r.max_abs_err, r.unwritten)


def _hard_cases(device):
    """(actual, expected, scale, nan policy): passing, failing, NaN/Inf, poison, scaled."""
    g = torch.Generator().manual_seed(3)
    e = torch.randn(64, 96, generator=g, dtype=torch.float64)
    scale = e.abs() * 4 + 0.1
    near = (e * (1 + 2**-9)).to(torch.bfloat16)
    far = near.clone()
    far[5, 7] += 1.0
    special = e.clone()
    special[1, 2], special[3, 4] = math.nan, math.inf
    poisoned = checks.poisoned((64, 96), torch.float32, "cpu")
    poisoned[:60] = e[:60].float()
    cases = [(near, e, None, "never"), (far, e, None, "never"), (near, e, scale, "never"),
             (special.float(), special, None, "match"), (special.float(), special, None, "never"),
             (special.float(), e, None, "match"), (poisoned, e, None, "never")]
    return [(a.to(device), x.to(device), None if s is None else s.to(device), nan)
            for a, x, s, nan in cases]


def test_on_device_gives_the_host_report_where_the_tensors_are_on_the_host():
    for a, e, s, nan in _hard_cases("cpu"):
        assert _report_fields(checks.allclose(a, e, scale=s, nan=nan, on_device=True)) == \
            _report_fields(checks.allclose(a, e, scale=s, nan=nan))


@pytest.mark.gpu
def test_on_device_gives_the_same_report_on_the_gpu_as_on_the_host():
    for (a, e, s, nan), (ga, ge, gs, _) in zip(_hard_cases("cpu"), _hard_cases("cuda")):
        host = checks.allclose(a, e, scale=s, nan=nan)
        assert _report_fields(checks.allclose(ga, ge, scale=gs, nan=nan, on_device=True)) == \
            _report_fields(host)
        assert _report_fields(checks.allclose(ga, ge, scale=gs, nan=nan)) == _report_fields(host)
