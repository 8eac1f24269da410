"""Chapter 2's readers: the kernel census against the traffic model, the grid's pairs."""
from fractions import Fraction

import pytest

from fusedrms import records, traffic
from fusedrms.book import ch02

ROWS, COLS = 4096, 4096
ROW_TRIP = ROWS * COLS * 2  # bf16 bytes of one activation matrix
FLOOR = records.CopyFloor(4000.0, "GPU")  # a copy at 4,000 GB/s


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
TWO = census("torch.rms_norm_add", [
    ("vectorized_layer_norm_kernel<BFloat16, float>", 21.0),
    ("vectorized_elementwise_kernel<CUDAFunctor_add<BFloat16>>", 26.0)])
DOC = {"records": [EAGER, FUSED, {"kind": "copy_bandwidth", "GBps": 4000.0}, TWO,
                   census("torch.compile_add", [("anything", 1.0)])]}


def test_kernel_times_maps_each_profiled_kernel_to_the_models_kernel():
    times = ch02.kernel_times(DOC, FLOOR)
    assert [(t["design"], t["kernel"]) for t in times] == [
        ("torch.rms_norm_add", "add"), ("torch.rms_norm_add", "rmsnorm"),
        ("capstone.fused", "fused_add_rmsnorm"),
        ("torch.eager_chain", "add"), ("torch.eager_chain", "rmsnorm"),
        ("torch.eager_chain", "scale")]
    assert times[1]["row_trips"] == pytest.approx(2.0, abs=1e-3)  # t read, y written, w once
    add = times[3]
    assert add["row_trips"] == 3.0
    assert add["floor_us"] == pytest.approx(3 * ROW_TRIP / 4000e3)
    assert add["pct_of_copy"] == pytest.approx(100 * add["floor_us"] / 24.0)


def test_design_totals_sum_the_kernels_and_their_floors():
    totals = ch02.design_totals(ch02.kernel_times(DOC, FLOOR))
    eager = totals["torch.eager_chain"]
    assert eager["measured_us"] == pytest.approx(84.0) and eager["kernels"] == 3
    expected = traffic.price("eager_add_rmsnorm", ROWS, COLS, "bf16").bytes_total / 4000e3
    assert eager["floor_us"] == pytest.approx(expected)


def test_a_census_that_splits_the_chain_differently_is_named():
    odd = census("torch.eager_chain", [("some_fused_triton_kernel", 30.0)])
    with pytest.raises(ValueError, match="some_fused_triton_kernel"):
        ch02.kernel_times({"records": [odd]}, FLOOR)


def grid_record(impl, median, lo, hi, pct_of_floor=None, **kw):
    """A grid case; ``pct_of_floor``: its bytes, as the share of :data:`FLOOR` they make."""
    nbytes = pct_of_floor and pct_of_floor / 100 * median * 4000e3
    return {"impl": impl, "status": "ok", "rows": ROWS, "cols": COLS, "dtype": "bf16",
            "mode": "cold", "median_us": median, "min_median_us": lo, "max_median_us": hi,
            "processes": 3, "bytes": nbytes, "floor_us": 0.0, "pct_of_floor": 0.0, **kw}


def test_grid_pair_returns_both_medians_with_their_ranges_or_none():
    doc = {"records": [grid_record("torch.eager_chain", 90, 89, 91, pct_of_floor=30.0),
                       grid_record("capstone.fused", 27, 26.5, 27.5, pct_of_floor=101.5)]}
    pair = ch02.grid_pair(doc, "torch.eager_chain", "capstone.fused", ROWS, COLS, "bf16")
    assert pair["capstone.fused"] == {"median_us": 27, "min_us": 26.5, "max_us": 27.5,
                                      "processes": 3}
    assert ch02.grid_pair(doc, "torch.eager_chain", "capstone.fused", 1, COLS, "bf16") is None
    assert ch02.best_pct_of_floor(doc, FLOOR) == pytest.approx(101.5)


def test_best_pct_of_floor_ignores_wrong_results():
    doc = {"records": [grid_record("a", 1, 1, 1, pct_of_floor=150.0, correct=False),
                       grid_record("b", 1, 1, 1, pct_of_floor=90.0)]}
    assert ch02.best_pct_of_floor(doc, FLOOR) == pytest.approx(90.0)
    assert ch02.best_pct_of_floor({"records": []}, FLOOR) is None


def test_best_pct_of_floor_counts_only_calls_with_the_l2_flushed():
    doc = {"records": [grid_record("a", 1, 1, 1, pct_of_floor=180.0, mode="warm"),
                       grid_record("b", 1, 1, 1, pct_of_floor=95.0)]}
    assert ch02.best_pct_of_floor(doc, FLOOR) == pytest.approx(95.0)


# ---- the bounds and the page's ceilings

BOUNDS = (traffic.speedup_bound(ch02.BASELINE_STEP, "fused_add_rmsnorm"),
          traffic.speedup_bound(ch02.BASELINE_STEP, "fused_add_rmsnorm_residual"))


def test_the_bounds_are_against_what_a_reader_writes():
    """The chapter's baseline is F.rms_norm(x + r, (cols,), w), two kernels, not the chain."""
    from fusedrms import registry

    registry.load_all()
    assert "F.rms_norm(x + r, (cols,), w" in registry.get(ch02.BASELINE).description
    assert traffic.get_step(ch02.BASELINE_STEP).kernels[1].reads == ("t", "w")
    assert BOUNDS == (Fraction(5, 3), Fraction(5, 4))


def test_the_best_share_of_the_floor_is_priced_at_the_floor_given_not_the_grids_own():
    own = {**grid_record("a", 10.0, 10, 10), "bytes": 40e6, "copy_GBps": 4444.4,
           "floor_us": 9.0, "pct_of_floor": 90.0}  # as the grid priced it, at its own copy
    doc = {"records": [own]}
    assert ch02.best_pct_of_floor(doc, FLOOR) == pytest.approx(100.0)  # 40 MB at 4,000 GB/s


def test_the_page_ceilings_are_the_measured_copy_and_the_data_sheets_peak():
    floor = records.copy_floor()
    ceilings = ch02.ceilings(floor)
    assert ceilings["bandwidth_GBps"] == floor.GBps
    assert ceilings["peak_tflops"] == traffic.PUBLISHED[ceilings["gpu"]][1]
    unlisted = records.CopyFloor(999.0, "Some GPU no table lists")
    assert ch02.ceilings(unlisted) == ch02.ceilings(records.copy_floor(records.COMMITTED))


def test_the_chapter_prices_its_bounds_and_its_grid_against_the_baseline():
    import json
    import re
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "chapters" / "02_fusion_boundary.ipynb"
    code = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"]
                     if c["cell_type"] == "code")
    slow = re.findall(r'speedup_bound\(\s*"(\w+)"', code)
    assert slow and set(slow) == {ch02.BASELINE_STEP}, slow
    assert re.search(r'designs = \["' + ch02.BASELINE_STEP, code)
    assert "grid_pair(grid, companion.BASELINE" in code
    assert "steps = list(companion.ROOFLINE_STEPS)" in code  # the roofline the story holds
