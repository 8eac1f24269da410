"""The page readers of chapters 7 and 8 (book/ch07_results.py, the page-reader section of
book/ch08.py), on documents shaped like the recorded files."""
import pytest

from fusedrms import records
from fusedrms.book import ch07_results as R
from fusedrms.book import ch08


def hrec(impl, rows, cols, us, pct, op="add_rmsnorm", sweep="peers", mode="rotating",
         dtype="bf16", status="ok"):
    return {"sweep": sweep, "op": op, "impl": impl, "rows": rows, "cols": cols, "dtype": dtype,
            "mode": mode, "status": status, "median_us": us, "pct_of_floor": pct}


PEERS = {"records": [
    hrec("capstone.fused", 16384, 8192, 200.0, 95.0),
    hrec("torch.compile", 16384, 8192, 190.0, 100.0),
    hrec("liger.rms_norm", 16384, 8192, 250.0, 76.0),
    hrec("torch.eager_chain", 16384, 8192, 560.0, 34.0),
    hrec("capstone.fused", 1, 4096, 2.0, 1.0),
    hrec("torch.compile", 1, 4096, 2.5, 0.8),
    hrec("flashinfer.rms_norm", 1, 4096, 9.0, 0.2, status="missing: not installed"),
    hrec("capstone.fused_residual", 1, 4096, 2.2, 1.0, op="add_rmsnorm_residual"),
    hrec("liger.fused_add_rms_norm", 1, 4096, 2.0, 1.1, op="add_rmsnorm_residual"),
    hrec("capstone.fused", 1, 4096, 60.0, None, sweep="python", mode="python"),
    hrec("torch.rms_norm_add", 1, 4096, 25.0, None, sweep="python", mode="python"),
]}


def test_peer_rows_compare_with_the_fastest_peer_and_skip_missing_ones():
    rows = R.peer_rows(R.peer_points(PEERS))
    assert [(r["rows"], r["peer"]) for r in rows] == [(1, "torch.compile"),
                                                      (16384, "torch.compile")]
    big = rows[-1]
    assert big["ratio"] == pytest.approx(200 / 190) and big["pct_floor"] == 95.0
    assert "flashinfer.rms_norm" not in rows[0]["peers"]  # missing is missing, not a time


def test_peer_summary_counts_and_extremes():
    s = R.peer_summary(R.peer_rows(R.peer_points(PEERS)))
    # liger and the eager chain were timed at 16384 rows only: the 1-row shape is not complete
    assert s["compared"] == 2 and s["complete"] == 1 and s["not_slower"] == 0
    assert s["missing"] == {"liger.rms_norm": 1, "torch.eager_chain": 1}
    assert s["worst"]["rows"] == 16384 and s["best"]["rows"] == 1
    assert s["large"] == 1 and s["large_pct_median"] == 95.0 and s["large_peer_pct_median"] == 100
    assert R.peer_summary([]) == {"compared": 0}


def test_residual_rows_use_the_residual_capstone():
    rows = R.peer_rows(R.peer_points(PEERS), "add_rmsnorm_residual")
    assert len(rows) == 1 and rows[0]["ratio"] == pytest.approx(1.1)


def test_python_calls_and_eager_ratio():
    assert R.python_calls(PEERS) == {"capstone.fused": 60.0, "torch.rms_norm_add": 25.0}
    assert R.python_calls(None) == {}
    ranged = {"records": [dict(r, min_median_us=r["median_us"] - 1, max_median_us=r["median_us"] + 2)
                          if r.get("sweep") == "python" and r["impl"] == "capstone.fused" else r
                          for r in PEERS["records"]]}
    assert R.python_calls(ranged, spread=True) == {"capstone.fused": (59.0, 62.0)}  # where recorded
    assert R.python_calls(ranged) == R.python_calls(PEERS)
    assert R.eager_ratios(R.peer_points(PEERS)) == [pytest.approx(2.8)]


def fp8_doc():
    timing = {"kind": "timing", "rows": 16384, "cols": 7168, "naive_graph_us": 300.0,
              "fused_exact_graph_us": 150.0, "fused_graph_us": 105.0, "fused_floor_us": 84.0,
              "naive_floor_us": 194.0, "naive_bytes": 825767936, "fused_bytes": 356005888}
    failed = {"kind": "timing", "rows": 2, "cols": 7168, "error_graph": "boom"}
    return {"provenance": {}, "records": [failed, timing]}


def test_fp8_timing_rows_skip_failed_shapes():
    floor = records.CopyFloor(356005888 / 84.0 / 1e3, "GPU")  # the fused bytes in 84 µs
    rows = ch08.timing_rows(fp8_doc(), floor)
    assert len(rows) == 1
    r = rows[0]
    assert r["speedup"] == 2.0 and r["pct_floor"] == pytest.approx(56.0)  # the exact contract
    assert r["served_us"] == 105.0 and r["served_pct_floor"] == pytest.approx(80.0)
    assert r["bytes_ratio"] == pytest.approx(2.3196, rel=1e-3)
    assert ch08.timing_rows(None) == []


def test_fp8_timing_rows_price_the_floor_at_the_books_copy_not_the_files():
    r = ch08.timing_rows(fp8_doc())[0]  # the file's own floors (84 and 194 µs) are ignored
    floor = records.copy_floor()
    assert r["floor_us"] == pytest.approx(floor.us(356005888))
    assert r["naive_floor_us"] == pytest.approx(floor.us(825767936))
    assert r["pct_floor"] == pytest.approx(floor.pct(356005888, 150.0))


def cand(warps, maxnreg, division, rows=1, tile="padded", us=100.0, exact=True):
    return {"kind": "candidate", "num_warps": warps, "maxnreg": maxnreg, "division": division,
            "rows_per_program": rows, "tile": tile, "bit_exact": exact,
            "fused_graph_us_16384": us / 2, "fused_graph_us_32768": us}


def test_fp8_levers_follow_the_chain_and_need_exact_candidates():
    doc = {"records": [cand(16, 64, "per_element", us=450), cand(16, 64, "block_reciprocal", us=350),
                       cand(8, None, "block_reciprocal", us=340),
                       cand(4, None, "block_reciprocal", us=330),
                       cand(4, None, "block_reciprocal", tile="split", us=300),
                       cand(8, None, "block_reciprocal", rows=2, us=600, exact=False)]}
    levers = ch08.fp8_levers(doc)
    assert [l["lever"] for l in levers] == [l[0] for l in ch08.LEVER_CHAIN[:4]]
    assert levers[0]["rows"] == 32768 and levers[0]["change_pct"] == pytest.approx(-100 / 4.5)
    assert all(l["kept"] for l in levers)
    assert ch08.fp8_levers(doc, rows=16384)[0]["before_us"] == 225
    assert ch08.fp8_levers(None) == []


def test_seed_twin_fails_the_specification_and_each_exact_step_passes():
    rows = {r["shortcut"]: r for r in ch08.twin_differences(rows=8)}
    assert not rows["all four (the twin)"]["passes"]
    assert rows["all four (the twin)"]["differing codes"] > 0
    x, w = ch08.make_inputs(4, 512, 0, device="cpu")
    codes, scales = ch08.seed_twin(x, w, departures=())
    assert ch08.compare(codes, scales, *ch08.reference(x, w)).ok  # no shortcut: the spec
    with pytest.raises(ch08.validation.InputError):
        ch08.seed_twin(x, w, departures=("fast",))


def test_lever_summary_takes_the_best_variant_per_shape():
    effects = [
        {"lever": "A", "tests": "t", "op": "add_rmsnorm", "rows": 1, "cols": 2,
         "before_us": 100.0, "after_us": 90.0},
        {"lever": "A", "tests": "t", "op": "add_rmsnorm", "rows": 1, "cols": 2,
         "before_us": 100.0, "after_us": 80.0},  # a second variant at the same shape
        {"lever": "A", "tests": "t", "op": "add_rmsnorm", "rows": 3, "cols": 2,
         "before_us": 100.0, "after_us": 110.0},
        {"lever": "B", "tests": "u", "op": "add_rmsnorm_residual", "rows": 1, "cols": 2,
         "before_us": 100.0, "after_us": 50.0},
        {"lever": "C", "op": "add_rmsnorm", "rows": 1, "cols": 2, "before_us": None,
         "after_us": 5.0},
    ]
    rows = R.lever_summary(effects)
    # the median of two changes is their mean, not the larger one
    assert rows == [{"lever": "A", "tests": "t", "shapes": 2,
                     "changes": {(1, 2): -20.0, (3, 2): 10.0}, "median_pct": -5.0,
                     "best_pct": -20.0, "worst_pct": 10.0}]
    assert R.lever_summary(None) == []


def test_only_levers_beyond_the_band_and_the_launchs_own_gap_are_shown():
    levers = [{"lever": "inside", "changes": {(1, 2): 2.9, (3, 2): -2.0}},
              {"lever": "past the threshold", "changes": {(1, 2): 3.1}},
              {"lever": "within the gap there", "changes": {(3, 2): -4.0}},
              {"lever": "past the gap", "changes": {(3, 2): -4.6}}]
    gaps = {(3, 2): -1.5}  # the launch in use ran 1.5% faster the second time at 3x2
    shown = R.levers_outside_band(levers, gaps, 3.0)
    assert [lv["lever"] for lv in shown] == ["past the threshold", "past the gap"]
    assert R.levers_outside_band([], gaps, 3.0) == []


def test_a_peer_missing_at_a_shape_is_never_counted_as_a_win():
    # the capstone wins at 16384 rows only because torch.compile was not timed there
    recs = [r for r in PEERS["records"] if not (r["impl"] == "torch.compile" and r["rows"] == 16384)]
    recs.append(hrec("torch.compile", 16384, 8192, 9.0, 0.0, status="skipped: time budget"))
    s = R.peer_summary(R.peer_rows(R.peer_points({"records": recs})))
    big = [r for r in R.peer_rows(R.peer_points({"records": recs})) if r["rows"] == 16384][0]
    assert big["ratio"] < 1 and "torch.compile" in big["missing"]
    assert s["not_slower"] == 0 and s["missing"]["torch.compile"] == 1


def test_fp8_levers_inside_the_tie_band_are_left_out():
    doc = {"records": [
        {"kind": "candidate", "cols": 7168, "num_warps": w, "maxnreg": m, "division": d,
         "rows_per_program": 1, "tile": "padded", "bit_exact": True, "registers": 40,
         "fused_graph_us_32768": us}
        for w, m, d, us in ((16, 64, "per_element", 100.0), (16, 64, "block_reciprocal", 80.0),
                            (8, None, "block_reciprocal", 79.0))]}
    names = [l["lever"] for l in ch08.fp8_levers(doc)]
    assert names == ["one reciprocal per block", "16 -> 8 warps"]
    # -1.25% inside a 2% band: a tie, not a lever the table keeps
    assert [l["lever"] for l in ch08.fp8_levers(doc, band=0.02)] == ["one reciprocal per block"]


def test_a_row_gives_the_floors_copy_at_its_size_as_a_share_of_the_floor_where_it_was_timed():
    """copy_pct_floor: the floor (the 1 GiB copy's rate) over the copy of the call's own bytes
    timed at its size; None where the recording has no such copy or a malformed one."""
    doc = {"records": [
        dict(hrec("capstone.fused", 128, 65536, 20.0, 80.0), copy_at_size_us=17.5),
        hrec("torch.compile", 128, 65536, 25.0, 64.0),
        dict(hrec("capstone.fused", 1024, 8192, 19.0, 84.0), copy_at_size_us="n/a"),
        hrec("torch.compile", 1024, 8192, 21.0, 76.0),
        hrec("capstone.fused", 16384, 8192, 200.0, 95.0),
        hrec("torch.compile", 16384, 8192, 190.0, 100.0)]}
    rows = {r["rows"]: r for r in R.peer_rows(R.peer_points(doc))}
    # floor 16 us (80% of 20): a copy of the same bytes in 17.5 us runs at 16 / 17.5 of its rate
    assert rows[128]["copy_pct_floor"] == pytest.approx(100 * 16.0 / 17.5)
    assert rows[1024]["copy_pct_floor"] is None and rows[16384]["copy_pct_floor"] is None
