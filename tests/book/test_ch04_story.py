"""Chapter 4's story: what its Markdown says in words, held against the committed recording it
tells (a re-recording that contradicts a sentence fails here), and its values in every state."""
from fusedrms import records
from fusedrms.book import ch04_story as story
from fusedrms.kernels import rmsnorm as T
from tests.book.story import assert_prose_values_exist


def _facts():
    return story.story_facts(story.load(records.COMMITTED))


def test_the_row_kernel_stops_where_it_starts_to_spill():
    r = _facts()["registers"]
    clean, spill = r["widest_clean"], r["first_spill"]
    assert clean["cols"] == T.ROW_MAX_COLS and clean["spills"] == 0  # "... and spilled none"
    assert clean["registers"] == 65536 // (32 * T.num_warps_for(T.ROW_MAX_COLS))  # "all it may have"
    assert spill["cols"] == 2 * T.ROW_MAX_COLS and spill["spills"] > 0  # "... spilled N values"


def test_the_looped_kernel_costs_less_than_its_bound_and_multirow_wins_narrow_rows():
    f = _facts()
    v, band = f["versions"], f["warps"]["band"]
    assert 1 + band < v["looped_cost"] < v["looped_bytes"]  # slower, yet under the miss bound
    assert all(gain > 1 + band for gain in v["multirow"].values())  # "N× faster" at 128 and 256
    assert v["seed_spread"] - 1 < 0.10  # "within {seed_spread} of each other": close, not equal


def test_the_warps_sweep_is_what_the_prose_says_it_timed():
    w = _facts()["warps"]
    assert w["settings"] == [4, 8, 16] and w["seed"] == [(1024, 4096, "float32")]
    assert w["dtypes"] == ["bf16", "fp32"] and len(w["rows"]) == 1


def test_the_band_ties_and_the_rules_two_misses_at_fp32_4096_columns():
    w = _facts()["warps"]
    tie = w["tie"]
    assert w["band"] == max(tie["repeats"], tie["again"]["diff"])  # "counts ... within ±band"
    assert (tie["again"]["rows"], tie["again"]["cols"], tie["again"]["dtype"]) == (
        1024, 4096, "float32")  # "the rule's setting at the running example, recorded again"
    assert 2 <= w["ties"] < w["shapes"]  # "at N of the M shapes two or more settings tie"
    # "matters most on narrow rows": the largest spread is below 4,096 columns, and from there
    # on the settings stay within a smaller one (the kernel is memory-bound)
    narrow, wide = w["narrow_spread"][0], w["wide_spread"][0]
    assert narrow > 1.5 * wide and wide < 1.15
    row = w["narrow_spread"][1]  # "16 warps ... get too little of such a row each"
    assert max((k for k in row if k.endswith(" warps us")), key=row.get) == "16 warps us"
    assert w["judged"] == w["shapes"] and w["rule_hits"] == w["shapes"] - 2
    misses = {(m["shape"], m["dtype"]) for m in w["misses"]}  # "both fp32 rows of 4,096 columns"
    assert misses == {("1024x4096", "float32"), ("4096x4096", "float32")}  # running example first
    v = story.story_values(story.load(records.COMMITTED))
    assert v["miss_shape"] == "1024×4096 fp32" and v["warps_misses"] == "2"


def test_the_h200_rounds_to_nearest_even_with_a_few_outputs_one_step_off():
    c = _facts()["rounding"]
    assert c["equal_to_nearest_even"] < c["elements"] and c["one_step_from_nearest_even"] > 0
    assert c["equal_to_nearest_even"] > c["elements"] / 2  # "on a GPU most are the rounded one"
    assert c["more_than_one_step_from_nearest_even"] == 0  # "and none further"
    assert c["equal_to_truncation"] < c["elements"]


def test_the_compiled_kernel_is_vectorized_and_shuffle_finished():
    p = _facts()["compiled"]
    assert p["load_bytes"] >= 16 and p["butterfly_shuffles"] > 0 and p["barriers"] > 0


def test_every_value_the_prose_shows_exists_on_the_committed_recording():
    assert_prose_values_exist("04_triton.ipynb", story, 45)


def test_without_a_recording_the_values_say_so_and_there_is_no_panel(monkeypatch, tmp_path):
    monkeypatch.setattr(records, "DATA_DIR", tmp_path)
    empty = story.load(records.COMMITTED)
    assert set(story.story_values(empty)) == {"gpu"}
    assert story.value({}, "looped_cost") == story.MISSING
    assert story.your_gpu_rows(empty, empty) is None


def test_your_gpu_panel_sets_a_recording_beside_the_h200():
    h200 = story.load(records.COMMITTED)
    rows = story.your_gpu_rows(h200, h200)
    assert len(rows) == 4 and all(r["your GPU"] == r["H200 (the book)"] != "-" for r in rows)
