"""Chapter 7's measured answer (section 6): what its Markdown says in words, held against the
committed recording it tells (a re-recording that contradicts a sentence fails here)."""
import statistics

from fusedrms import records
from fusedrms.book import ch07_results as R
from fusedrms.book import ch07_story as story
from tests.book.story import assert_prose_values_exist


def _facts():
    return story.story_facts(story.load(records.COMMITTED))


def test_every_peer_was_timed_at_every_shape_and_the_fastest_is_torch_compile():
    f = _facts()
    assert all(not r["missing"] for r in f["fused"] + f["residual"])
    assert f["fastest_peers"] == {"torch.compile_add"}  # "at every shape its fastest peer"
    c = f["fu_counts"]
    assert c["faster"] + c["tie"] + c["slower"] == c["shapes"] == len(f["fused"])


def test_the_costly_losses_sit_in_the_wide_corner():
    f = _facts()
    band = f["band"]
    assert f["wide"] and all(r["ratio"] > 1 + band for r in f["wide"])
    # every other loss costs fewer microseconds a call than the cheapest loss in the corner
    corner_gap = min(r["capstone_us"] - r["peer_us"] for r in f["wide"])
    others = [r for r in f["fused"] if not R.is_wide(r) and r["ratio"] > 1 + band]
    assert all(r["capstone_us"] - r["peer_us"] < corner_gap for r in others)
    # "at a single row, where a call lasts ... to ..." (a few microseconds)
    assert f["single"] and all(r["capstone_us"] < 5 for r in f["single"])
    # "between the two it loses at N more shapes": the losses neither wide nor at one row
    assert {(r["rows"], r["cols"]) for r in f["middle"]} == {
        (r["rows"], r["cols"]) for r in others if r["rows"] > 1}


def test_liger_is_the_residual_variants_strongest_peer_at_large_shapes():
    f = _facts()
    assert sum(p == "liger.fused_add_rms_norm" for p in f["big_rs_peers"]) > len(f["big_rs"]) / 2


def test_in_place_costs_time_at_small_batches_and_nothing_from_python():
    f = _facts()
    assert f["ip_small"][-1] > 1 + f["band"]  # "up to ... slower"
    (in_lo, in_hi), (out_lo, out_hi) = f["py_in"], f["py_out"]
    assert in_lo <= out_hi and out_lo <= in_hi  # "from Python ... cannot be told apart"


def test_every_value_the_prose_shows_exists_on_the_committed_recording():
    assert_prose_values_exist("07_capstone.ipynb", story, 20)


def test_the_levers_counted_both_ways_beyond_the_launchs_own_gap():
    lv = _facts()["levers"]
    # "N of the M levers shortened the time; the most ...", "N lengthened it; the most ..."
    assert lv["shorter"] and lv["longer"] and lv["count"] >= len(lv["shorter"])
    assert all(h["pct"] > story.LEVER_THRESHOLD_PCT for h in lv["shorter"] + lv["longer"])
    assert lv["gap"] is not None  # "at most ... (at ...)"


def test_the_result_paragraph_holds():
    f = _facts()
    assert statistics.median(f["eager"]) > 7 / 3  # "faster than the chain by more than that ratio"
    assert f["large"]["large_peers"] == ["torch.compile_add"]  # "torch.compile, the fastest peer there"
    assert f["above"]  # "or beat it, as the capstone does at ..."
    assert f["py_fused"] < f["py_torch"]
