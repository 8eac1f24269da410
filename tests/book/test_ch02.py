"""Chapter 2's readers: the kernel census against the traffic model, the grid's pairs."""
import pytest

from fusedrms import traffic
from fusedrms.book import ch02

ROWS, COLS = 4096, 4096
ROW_TRIP = ROWS * COLS * 2  # bf16 bytes of one activation matrix


def census(impl, kernels):
    return {"kind": "kernel_census", "impl": impl, "rows": ROWS, "cols": COLS,
            "dtype": "bfloat16",
            "kernels": [{"name": n, "count_per_call": 1.0, "device_us_per_call": us}
                        for n, us in kernels]}


EAGER = census("torch.eager_chain", [
    ("elementwise_kernel<MulFunctor<float>>", 40.0),
    ("vectorized_elementwise_kernel<CUDAFunctor_add<BFloat16>>", 24.0),
    ("vectorized_layer_norm_kernel<BFloat16, float>", 20.0)])
FUSED = census("capstone.fused", [("add_rmsnorm_kernel", 25.0)])
DOC = {"records": [EAGER, FUSED, {"kind": "copy_bandwidth", "GBps": 4000.0},
                   census("torch.rms_norm_add", [("anything", 1.0)])]}


def test_kernel_times_maps_each_profiled_kernel_to_the_models_kernel():
    times = ch02.kernel_times(DOC, 4000.0)
    assert [(t["design"], t["kernel"]) for t in times] == [
        ("torch.eager_chain", "add"), ("torch.eager_chain", "rmsnorm"),
        ("torch.eager_chain", "scale"), ("capstone.fused", "fused_add_rmsnorm")]
    add = times[0]
    assert add["row_trips"] == 3.0
    assert add["floor_us"] == pytest.approx(3 * ROW_TRIP / 4000e3)
    assert add["pct_of_copy"] == pytest.approx(100 * add["floor_us"] / 24.0)


def test_design_totals_sum_the_kernels_and_their_floors():
    totals = ch02.design_totals(ch02.kernel_times(DOC, 4000.0))
    eager = totals["torch.eager_chain"]
    assert eager["measured_us"] == pytest.approx(84.0) and eager["kernels"] == 3
    expected = traffic.price("eager_add_rmsnorm", ROWS, COLS, "bf16").bytes_total / 4000e3
    assert eager["floor_us"] == pytest.approx(expected)


def test_a_census_that_splits_the_chain_differently_is_named():
    odd = census("torch.eager_chain", [("some_fused_triton_kernel", 30.0)])
    with pytest.raises(ValueError, match="some_fused_triton_kernel"):
        ch02.kernel_times({"records": [odd]}, 4000.0)


def grid_record(impl, median, lo, hi, **kw):
    return {"impl": impl, "status": "ok", "rows": ROWS, "cols": COLS, "dtype": "bf16",
            "mode": "cold", "median_us": median, "min_median_us": lo, "max_median_us": hi,
            "processes": 3, **kw}


def test_grid_pair_returns_both_medians_with_their_ranges_or_none():
    doc = {"records": [grid_record("torch.eager_chain", 90, 89, 91, pct_of_floor=30.0),
                       grid_record("capstone.fused", 27, 26.5, 27.5, pct_of_floor=101.5)]}
    pair = ch02.grid_pair(doc, "torch.eager_chain", "capstone.fused", ROWS, COLS, "bf16")
    assert pair["capstone.fused"] == {"median_us": 27, "min_us": 26.5, "max_us": 27.5,
                                      "processes": 3}
    assert ch02.grid_pair(doc, "torch.eager_chain", "capstone.fused", 1, COLS, "bf16") is None
    assert ch02.best_pct_of_floor(doc) == 101.5


def test_best_pct_of_floor_ignores_wrong_results():
    doc = {"records": [grid_record("a", 1, 1, 1, pct_of_floor=150.0, correct=False),
                       grid_record("b", 1, 1, 1, pct_of_floor=90.0)]}
    assert ch02.best_pct_of_floor(doc) == 90.0
    assert ch02.best_pct_of_floor({"records": []}) is None
