"""The lean block steps' proof (fusedrms.kernels.rmsnorm_fp8_lean): every division the quantizer
makes with LEAN equals the correctly rounded quotient; on a GPU over every mantissa."""
import pytest
import torch

from fusedrms import env
from fusedrms.kernels import rmsnorm_fp8_lean as P

ENV = env.current()


def test_the_lean_divisions_are_the_correctly_rounded_ones():
    errors = P.lean_division_errors()
    assert {k: v for k, v in errors.items() if k != "checked"} == {k: 0 for k in P.DIVISIONS}
    per_exponent = (1 << 23) if ENV.on_gpu else P.SAMPLE
    assert errors["checked"] == per_exponent * sum(len(e) for e in P.DIVISIONS.values())


@pytest.mark.gpu
def test_gpu_proof_runs_every_mantissa():
    assert P.lean_division_errors()["checked"] == (1 << 23) * sum(
        len(e) for e in P.DIVISIONS.values())


def test_a_division_by_a_rounded_reciprocal_is_caught():
    """What the proof compares against: the quotient a product by RN(1/448) gives is off for some
    mantissas, and the count says how many."""
    v = P.mantissas(0, None, "cpu")
    assert v.unique().numel() == 1 << 23 and float(v.min()) == 1.0 and float(v.max()) < 2.0
    by_reciprocal = v * torch.tensor(1 / 448, dtype=torch.float32)
    wrong = P.differing_quotients("absmax / 448", v, by_reciprocal)
    assert 0 < wrong < v.numel()
    assert P.differing_quotients("absmax / 448", v, P.exact_quotient("absmax / 448", v)) == 0


def test_the_exponents_span_what_the_wrapper_allows():
    """From the floor's 2^-60 to bf16's largest absmax (below 2^128), and the scales between."""
    for kind in ("absmax / 448", "448 / absmax"):
        assert min(P.DIVISIONS[kind]) == -60 and max(P.DIVISIONS[kind]) == 127
        assert {63, 64, 65} <= set(P.DIVISIONS[kind])  # both sides of the 2^64 rescaling
    lowest_scale, highest_scale = 2.0 ** -60 / 448, 3.3895313892515355e38 / 448
    exps = P.DIVISIONS["1 / scale"]
    assert 2.0 ** min(exps) <= lowest_scale and highest_scale < 2.0 ** (max(exps) + 1)
