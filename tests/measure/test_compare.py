import pytest

from fusedrms.measure import compare


def rec(meds, status="ok"):
    meds = list(meds)
    return {"status": status, "process_medians_us": meds, "median_us": sorted(meds)[len(meds) // 2]}


def test_spread_is_the_p10_p90_width_of_process_medians_over_the_median():
    assert compare.relative_spread(rec([10.0, 11.0, 12.0])) == pytest.approx((11.8 - 10.2) / 11.0)
    assert compare.relative_spread(rec([10.0])) is None  # one process: no spread to read


def test_tie_band_is_derived_from_the_recording():
    recs = [rec([10.0, 10.0, 10.0])] * 9 + [rec([10.0, 11.0, 12.0])]
    band = compare.tie_band(recs)
    assert 0 < band < compare.relative_spread(recs[-1])  # the 90th percentile, not the worst
    assert compare.tie_band(recs, quantile=1.0) == pytest.approx(compare.relative_spread(recs[-1]))
    assert compare.tie_band([rec([10.0, 50.0], status="error: boom")]) is None
    with pytest.raises(ValueError, match="quantile"):
        compare.tie_band(recs, quantile=2)


def test_verdict_counts_only_differences_outside_the_band():
    assert compare.verdict(9.0, 10.0, 0.05) == "faster"
    assert compare.verdict(9.8, 10.0, 0.05) == "tie"
    assert compare.verdict(10.4, 10.0, 0.05) == "tie"
    assert compare.verdict(11.0, 10.0, 0.05) == "slower"
    with pytest.raises(ValueError, match="positive"):
        compare.verdict(0.0, 10.0, 0.05)
