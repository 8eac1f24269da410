"""drift: two contracts through the same residual blocks; the same contract never drifts."""
import pytest

from fusedrms import contracts
from fusedrms.validation import InputError


def test_a_contract_does_not_drift_from_itself():
    d = contracts.drift("llama", "llama", layers=4, rows=8, cols=64)
    for key in ("bf16", "fp16"):
        assert d.distance[key] == [0.0] * 4 and d.differing[key] == [0.0] * 4
        assert d.error_a[key] == d.error_b[key] and min(d.error_a[key]) > 0


def test_two_contracts_drift_apart_with_depth():
    d = contracts.drift("llama", "fp32_once", layers=16, rows=16, cols=128, dtypes="bf16")
    dist = d.distance["bf16"]
    assert dist[0] == 0.0  # the first block's sum is the same in both; its outputs are not
    assert 0 < dist[1] < dist[-1] and 0 < d.differing["bf16"][-1] <= 1
    assert dist[-1] > 0.5 * min(d.error_a["bf16"][-1], d.error_b["bf16"][-1])
    rows = d.rows_at()
    assert [r["layer"] for r in rows] == [1, 2, 4, 8, 16] and "llama vs exact" in rows[0]


def test_fused_add_contracts_drift_too():
    d = contracts.drift("vllm_fused_add", "flashinfer_fused_add", layers=4, rows=8, cols=64,
                        dtypes=["fp16"])
    assert list(d.distance) == ["fp16"] and d.distance["fp16"][-1] > 0


@pytest.mark.parametrize("kwargs,match", [
    ({"a": "fp8_divide"}, "rmsnorm_fp8"), ({"a": "nope"}, "no contract named"),
    ({"layers": 0}, "layers"), ({"rows": 1.5}, "rows"), ({"dtypes": ["fp32"]}, "dtypes"),
    ({"eps": float("nan")}, "eps"), ({"seed": -1}, "seed")])
def test_bad_arguments_are_named(kwargs, match):
    args = {"a": "llama", "b": "fp32_once", "layers": 2, "rows": 2, "cols": 8, **kwargs}
    with pytest.raises(InputError, match=match):
        contracts.drift(**args)


def test_chapter_7bs_streams_are_different_not_more_or_less_accurate():
    """Chapter 7b, section 5, at its parameters: "neither stream is closer to the exact one by
    more than a fifth", and the two stay apart by more than either is from the exact stream."""
    d = contracts.drift("llama", "fp32_once", layers=32, rows=32, cols=256, dtypes="bf16")
    err_a, err_b = d.error_a["bf16"][-1], d.error_b["bf16"][-1]
    assert abs(err_a - err_b) <= 0.2 * max(err_a, err_b)
    assert d.distance["bf16"][-1] > max(err_a, err_b)  # "... times the larger of their distances"
    assert d.differing["bf16"][-1] > 0.5  # "changes most elements of the last hidden state"
