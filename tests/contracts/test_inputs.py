"""identify's inputs: every pair of contracts differs on them, and every value a contract rounds
after the scale keeps its margin from a tie, so fp32's last bits cannot decide a verdict."""
import itertools

import pytest
import torch

from fusedrms.contracts import catalog, conventions as C, inputs as I

DTYPES = [torch.bfloat16, torch.float16]


def test_distance_to_tie():
    bf16 = torch.bfloat16
    one = torch.tensor([1.0, 1.0 + 2 ** -8, 1.0 + 2 ** -9, 0.0, -3.0], dtype=torch.float64)
    d = I.distance_to_tie(one, bf16)
    assert d[0] == 0.5 * 2 ** -7  # a representable value: half a spacing from each tie
    assert d[1] == 0.0  # 1 + 2^-8 is halfway between 1 and 1 + 2^-7
    assert d[2] == pytest.approx(2 ** -9 / (1 + 2 ** -9))
    assert d[3] == float("inf") and d[4] == pytest.approx(0.5 * 2 ** -6 / 3)
    assert I.distance_to_tie(torch.tensor([1.0 + 2 ** -11], dtype=torch.float64),
                             torch.float16)[0] == 0.0


def _outputs(op, dtype, eps=1e-6):
    out = {}
    for case in I.cases(op, dtype, eps):
        for name in catalog.names(op):
            res = catalog.CONTRACTS[name].fn(*case.args("cpu"))
            res = res if isinstance(res, tuple) else (res,)
            out.setdefault(name, []).extend(res)
    return out


def _bits(t):
    return t.contiguous().view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


@pytest.mark.parametrize("op,dtype", [("rmsnorm", d) for d in DTYPES]
                         + [("add_rmsnorm_residual", d) for d in DTYPES]
                         + [("rmsnorm_fp8", torch.bfloat16)])
def test_every_pair_of_contracts_differs_somewhere(op, dtype):
    out = _outputs(op, dtype)
    for a, b in itertools.combinations(out, 2):
        differ = any(ta.dtype != tb.dtype or not torch.equal(_bits(ta), _bits(tb))
                     for ta, tb in zip(out[a], out[b]))
        assert differ, f"{a} and {b} give the same bits on every input in {dtype}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_rmsnorm_rows_keep_their_margin_and_exact_sums(dtype):
    case = I.rmsnorm_cases(dtype, 1e-6)
    assert case.x.shape == (18, I.RMS_COLS) and case.where(13) == ("small", 1)
    assert bool(I._rms_safe(dtype, case.w.double(), 1e-6)(case.x.double()).all())
    x = case.x.double()
    assert torch.equal(x * 64, (x * 64).round()) or case.families[1][0] == "small"
    sq = case.x.float().pow(2)
    assert torch.equal(sq.sum(-1), sq.flip(-1).sum(-1))  # any order, the same sum
    ties = case.w[:I.TIE_COLUMNS].double().abs()
    assert set(ties.tolist()) <= {0.75, 1.5}


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_rows_round_their_sums(dtype):
    case = I.fused_cases(dtype, 1e-6)
    s32 = case.x.float() + case.residual.float()
    rounded = s32.to(dtype).float() != s32
    start, stop = next((a, b) for n, a, b in case.families if n == "ties")
    tie = I.distance_to_tie(s32[start:stop].double(), dtype)
    assert bool((tie == 0).all())  # every sum of a ties row is exactly halfway
    start, stop = next((a, b) for n, a, b in case.families if n == "scale")
    half = I.FUSED_COLS // 2
    assert bool(rounded[start:stop, :half].all()) and not rounded[start:stop, half:].any()
    assert float(rounded[:8].float().mean()) > 0.5
    assert bool(I._fused_safe(dtype, case.w.double(), 1e-6)(case.x.double(),
                                                             case.residual.double()).all())


def test_fp8_crafted_rows_have_a_mean_square_of_exactly_one():
    crafted, random = I.fp8_cases(1e-6)
    x = crafted.x.float()
    assert torch.equal(x.pow(2).mean(-1), torch.ones(x.shape[0]))
    assert float(C.row_scale(x, crafted.eps).min()) == 1.0 == crafted.eps + 1
    assert bool((x[:, :128].abs().amax(-1)[:3] < 2).all()) and float(x[3, :128].abs().max()) == 0
    blocks = I.separating_blocks()
    assert blocks["reciprocal"][1] and blocks["transformer_engine"][1] and blocks["multiply"][1]
    assert random.eps == 1e-6 and random.x.shape == (4, I.FP8_COLS)


def test_four_squares():
    for total in (0, 1, 131071, 196607, 4 * 255 ** 2):
        parts = I._four_squares(total)
        assert len(parts) == 4 and sum(p * p for p in parts) == total and max(parts) <= 255
    with pytest.raises(ValueError):  # a multiple of 8 needs four even squares: 256^2 + 256^2
        I._four_squares(1 << 17)


def test_small_rows_follow_eps():
    big = I.rmsnorm_cases(torch.float16, 1e-2)
    small = I.rmsnorm_cases(torch.float16, 1e-6)
    rms = lambda c: float(c.x[12:].float().pow(2).mean().sqrt())  # noqa: E731
    assert rms(big) > 30 * rms(small)
