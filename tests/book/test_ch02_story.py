"""Chapter 2's measured prose, held against the committed recording it tells."""
from fractions import Fraction

from fusedrms import records, traffic
from fusedrms.book import ch02 as companion
from fusedrms.book import ch02_story as story
from tests.book.story import assert_prose_values_exist


def _facts():
    return story.story_facts(story.load(records.COMMITTED))


def test_the_copy_is_below_the_data_sheet_and_the_best_kernel_passes_it():
    f = _facts()
    assert f["copy"].GBps < f["copy"].published_GBps
    assert f["best_pct"] > 100  # "the best kernel of chapter 6's grid passes it"


def test_the_grid_separates_the_two_designs():
    pair = _facts()["pair"]
    slow, fast = pair[companion.BASELINE], pair["capstone.fused"]
    assert fast["processes"] > 1 and fast["max_us"] < slow["min_us"]  # "do not overlap"


def test_fusion_beats_the_byte_ratios_because_the_fused_kernels_move_bytes_faster():
    f = _facts()
    t = f["totals"]
    base, fused, resid = (t[n] for n in (companion.BASELINE, *companion.FUSED))
    assert base["measured_us"] / fused["measured_us"] > Fraction(5, 3)
    assert base["measured_us"] / resid["measured_us"] > Fraction(5, 4)
    assert min(fused["pct_of_copy"], resid["pct_of_copy"]) > base["pct_of_copy"]


def test_every_roofline_design_is_memory_bound_on_every_published_gpu():
    r = _facts()["roofline"]
    assert r["memory_bound"] == r["designs"] == len(companion.ROOFLINE_STEPS)  # "all N designs"
    assert r["max_intensity"] < r["lowest_ridge"] <= r["ridge"]  # "at least ... on every GPU"


def test_what_comes_next_pytorchs_two_kernels_lost_more_than_their_bytes():
    t = _facts()["totals"]
    fused, residual = companion.FUSED
    for design, bound in ((fused, Fraction(5, 3)), (residual, Fraction(5, 4))):
        step = companion.CENSUS_DESIGNS[design]
        assert traffic.speedup_bound(companion.BASELINE_STEP, step) == bound  # "bound of 5/3"
        assert t[companion.BASELINE]["measured_us"] / t[design]["measured_us"] > bound


def test_the_chains_multiply_is_the_slow_non_vectorized_kernel():
    chain = {r["kernel"]: r for r in _facts()["census"] if r["design"] == companion.CHAIN}
    add, mul = chain["add"], chain["scale"]
    assert mul["measured_us"] > add["measured_us"] and add["row_trips"] > mul["row_trips"]
    assert "vectorized" in add["name"] and "vectorized" not in mul["name"]


def test_every_value_the_prose_shows_exists_on_the_committed_recording():
    assert_prose_values_exist("02_fusion_boundary.ipynb", story, 20)


def test_without_a_recording_there_are_no_values_and_no_panel(monkeypatch, tmp_path):
    monkeypatch.setattr(records, "DATA_DIR", tmp_path)
    empty = story.load(records.COMMITTED)
    assert story.story_values(empty) == {}
    assert story.value({}, "copy_rate") == story.MISSING
    assert story.your_gpu_rows(empty, empty) is None


def test_your_gpu_panel_sets_a_recording_beside_the_h200():
    h200 = story.load(records.COMMITTED)
    rows = story.your_gpu_rows(h200, h200)
    assert len(rows) == 5 and all(r["your GPU"] == r["H200 (the book)"] != "-" for r in rows)
