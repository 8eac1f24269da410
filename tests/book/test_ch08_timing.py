"""Chapter 8's timings across processes: the merge, the spread and the tie band the page reads."""
import pytest

from fusedrms.book import ch08, ch08_timing


def _process(copy, naive, fused, rows=4096, cols=7168, **extra):
    """One process's record: ``fused`` the exact contract's kernel, the served one 0.75 of it."""
    rec = {"kind": "timing", "rows": rows, "cols": cols, "copy_GBps": copy}
    for suffix in ("", "_graph"):
        rec.update({f"naive{suffix}_us": naive, f"naive{suffix}_us_min": naive * 0.98,
                    f"fused_exact{suffix}_us": fused, f"fused_exact{suffix}_us_min": fused * 0.97,
                    f"fused_baseline{suffix}_us": fused * 1.3,
                    f"fused{suffix}_us": fused * 0.75, f"fused{suffix}_us_min": fused * 0.74})
    rec.update(extra)
    return [rec]


def test_merge_takes_the_median_over_processes_and_keeps_each_process():
    runs = [_process(4200, 30.0, 10.0), _process(4260, 33.0, 10.6), _process(4230, 31.0, 10.2)]
    [rec] = ch08_timing.merge_processes(runs)
    assert rec["processes"] == 3 and rec["copy_GBps"] == 4230
    assert rec["fused_exact_graph_us"] == 10.2
    assert rec["fused_exact_graph_process_us"] == [10.0, 10.6, 10.2]
    assert rec["fused_exact_graph_us_min"] == pytest.approx(10.0 * 0.97)
    assert rec["speedup_graph"] == pytest.approx(31.0 / 10.2)  # the same contract's pair
    assert rec["fused_graph_us"] == pytest.approx(0.75 * 10.2)  # fp8.fused, served
    assert rec["fused_floor_us"] == pytest.approx(rec["fused_bytes"] / 4230 / 1e3)
    assert rec["fused_exact_graph_floor_fraction"] == pytest.approx(rec["fused_floor_us"] / 10.2)


def test_the_python_call_is_merged_and_read_beside_f_rms_norm():
    calls = [{"kind": "python_call", "rows": 1, "cols": 7168, "fused_call_us": v,
              "rms_norm_call_us": 12.0} for v in (16.0, 15.0, 17.0)]
    runs = [_process(4200, 30.0, 10.0) + [c] for c in calls]
    doc = {"records": ch08_timing.merge_processes(runs), "provenance": {}}
    call = ch08.python_call(doc)
    assert call["fused_call_us"] == 16.0 and call["fused_call_us_process"] == [16.0, 15.0, 17.0]
    assert call["ratio"] == pytest.approx(16.0 / 12.0) and call["processes"] == 3
    assert ch08.python_call({"records": []}) is None
    # interleaved pairs recorded: their ratio, the median over processes, is the one read
    for c, ratio in zip(calls, (1.2, 1.1, 1.4)):
        c["call_ratio"] = ratio
    call = ch08.python_call({"records": ch08_timing.merge_processes(runs), "provenance": {}})
    assert call["ratio"] == 1.2 and call["call_ratio_process"] == [1.2, 1.1, 1.4]


def test_the_python_call_pairs_batches_of_both_calls(monkeypatch):
    """Batches alternate between the two calls; the ratio is the median of the pairs' ratios."""
    from fusedrms.measure import worker

    order, times = [], iter([20.0, 10.0, 30.0, 10.0, 12.0, 12.0])
    monkeypatch.setattr(ch08_timing, "make_inputs", lambda rows, cols, seed: (None, None))

    def fake(fn, device, reps, calls):
        order.append(fn)
        return [next(times)]
    monkeypatch.setattr(worker, "python_call_us", fake)
    rec = ch08_timing.python_call_record(reps=3)
    assert order[0] is not order[1] and order[0] is order[2]  # fused, rms_norm, fused, ...
    assert rec["fused_call_us"] == 20.0 and rec["rms_norm_call_us"] == 10.0
    assert rec["call_ratio"] == 2.0  # the pairs' ratios 2, 3 and 1


def test_a_failed_process_is_an_error_record_and_a_missing_time_is_not_invented():
    runs = [_process(4200, 30.0, 10.0),
            [{"kind": "error", "step": "timing process 2", "error": "TimeoutExpired"}],
            [{"kind": "timing", "rows": 4096, "cols": 7168, "copy_GBps": 4200,
              "error_graph": "RuntimeError: graph capture failed"}]]
    merged = ch08_timing.merge_processes(runs)
    assert [r["kind"] for r in merged] == ["error", "timing"]
    timing = merged[1]
    assert timing["processes"] == 2 and timing["fused_exact_graph_process_us"] == [10.0]
    assert timing["error_graph"].startswith("RuntimeError")


def test_the_page_reads_spread_and_a_tie_band_from_the_process_medians():
    runs = [_process(4200, 30.0, 10.0), _process(4200, 33.0, 10.6), _process(4200, 31.0, 10.2)]
    doc = {"records": ch08_timing.merge_processes(runs), "provenance": {}}
    timing = ch08.timing_rows(doc)
    assert timing[0]["fused_spread"][0] == pytest.approx(10.04)
    assert timing[0]["served_spread"][0] == pytest.approx(0.75 * 10.04)
    band = ch08.timing_tie_band(timing)
    assert band == pytest.approx(max(0.8 * 3.0 / 31.0, 0.8 * 0.6 / 10.2), rel=0.2)


def test_one_process_says_it_cannot_tell_noise_from_a_difference():
    doc = {"records": ch08_timing.merge_processes([_process(4200, 30.0, 10.0)]), "provenance": {}}
    timing = ch08.timing_rows(doc)
    assert timing[0]["fused_spread"] is None and ch08.timing_tie_band(timing) is None


def test_a_speedup_inside_the_band_is_called_a_tie():
    runs = [_process(4200, 10.0, 10.1), _process(4200, 10.4, 9.6), _process(4200, 9.7, 10.3)]
    timing = ch08.timing_rows({"records": ch08_timing.merge_processes(runs), "provenance": {}})
    band = ch08.timing_tie_band(timing)
    assert abs(timing[0]["speedup"] - 1) <= band  # the story counts it as no speedup


def test_shapes_argument_is_read_or_refused_with_its_name():
    assert ch08_timing._shapes("2x7168,4096x7168") == ((2, 7168), (4096, 7168))
    with pytest.raises(Exception, match="--shapes"):
        ch08_timing._shapes("2 by 7168")
