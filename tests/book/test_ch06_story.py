"""Chapter 6's story: what its Markdown says in words, held against the committed recording it
tells (a re-recording that contradicts a sentence fails here), and its values in every state."""
from fusedrms import records
from fusedrms.book import ch06_story as story
from tests.book.story import assert_prose_values_exist


def _facts():
    return story.story_facts(story.load(records.COMMITTED))


def test_the_recorded_sizes_are_the_ones_the_prose_describes():
    f = _facts()
    assert all(r["dtype"] == "bf16" and r["cols"] == f["sync"]["lo"]["cols"]
               for r in f["sync"]["rows"])  # "... rows of ... bf16 values"
    plan = f["plan"]
    assert plan["modes"] == ["cold"]  # "The recorded grid ... cold L2"
    assert plan["flush_bytes"] >= 2 * plan["l2_bytes"]  # "a buffer at least twice the L2's size"


def test_section_1_the_unsynchronized_clock_times_the_launch():
    s = _facts()["sync"]
    assert s["growth"] > 10  # "device events saw the kernel's time grow ..."
    # "moved only from ... to ... while the work grew ...": far less than the work
    assert s["no_sync_max"] / s["no_sync_min"] < s["growth"] / 5
    assert s["below_rows"] and s["below_is_the_large_end"]  # "from ... rows on, below the floor"
    assert s["hi"]["sync_us"] > s["hi"]["events_us"]  # "the kernel, plus its launch"


def test_section_2_the_first_call_is_a_different_program_and_the_median_ignores_it():
    w = _facts()["warm"]
    assert w["ratio"] > 100 and w["compile_ratio"] > w["ratio"]
    assert w["mean_with_first_us"] > 10 * w["warm_us"]  # "moves their mean to ..."
    assert abs(w["median_with_first_us"] / w["warm_us"] - 1) < 0.05  # "... and their median only"


def test_section_3_processes_agree_more_than_samples_yet_one_can_be_far_off():
    p = _facts()["proc"]
    assert p["process_counts"] == [3]  # "each of the ... cold cases ran in 3 processes"
    assert p["median_across_process_spread_pct"] < p["median_within_process_p10_p90_pct"]
    assert p["cases_over_5pct"] >= 1 and abs(p["worst"]["outlier_ratio"] - 1) > 0.05  # "5% off"


def test_section_4_the_cache_flatters_inside_l2_only_and_leaves_writes_dirty():
    f = _facts()
    l2 = f["l2"]
    assert l2["head"]["bytes"] < l2["l2_bytes"] < l2["big"]["bytes"]
    assert l2["head"]["cold_over_warm"] >= 1.05 and abs(l2["big"]["cold_over_warm"] - 1) < 0.05
    assert f["ncu"]["bytes_write"] < f["ncu"]["model_written"]  # "the other ... were in L2"


def test_section_5_a_graph_removes_the_cpu_between_calls_not_a_lone_call():
    g = _facts()["graph"]
    # "the fused kernel and the eager chain"
    assert g["impls"] == ["capstone.fused", "torch.eager_chain"]
    assert g["impl"] == "capstone.fused"  # "one flushed call of the fused kernel"
    for alone, replayed in (("cold_us", "cold_graph_us"), ("held_us", "held_graph_us")):
        # "does not make one kernel's lone call much faster" (the chain's three kernels do gain)
        assert g[replayed] / g[alone] > 0.9
    assert g["back_to_back_us"] / g["graph_back_to_back_us"] > 2


def test_section_7_the_only_outliers_are_a_peer_with_another_definition():
    h = _facts()["health"]
    assert h["measured"] == h["cases"] and h["wrong_impls"] == ["torch.eager_chain"]


def test_appendix_the_h200_repeats_the_historical_lesson_more_strongly():
    co = _facts()["coop"]
    assert co["ratio"] > 1 and co["hist_ratio"] > 1  # "the same lesson"
    assert co["ratio"] > 1.05 * co["hist_ratio"]  # "stronger than on the RX 9070 XT"
    assert co["untimed"] == []  # the table beside it lists every implementation the sweep ran


def test_every_value_the_prose_shows_exists_on_the_committed_recording():
    assert_prose_values_exist("06_measurement.ipynb", story, 50)
    assert_prose_values_exist("06a_appendix_measurement.ipynb", story, 3)


def test_without_a_recording_the_values_say_so_and_there_is_no_panel(monkeypatch, tmp_path):
    monkeypatch.setattr(records, "DATA_DIR", tmp_path)
    empty = story.load(records.COMMITTED)
    assert story.story_values(empty) == {} and story.value({}, "sync_growth") == story.MISSING
    assert story.your_gpu_rows(empty, empty) is None


def test_your_gpu_panel_sets_a_recording_beside_the_h200():
    h200 = story.load(records.COMMITTED)
    rows = story.your_gpu_rows(h200, h200)
    assert len(rows) == 6 and all(r["your GPU"] == r["H200 (the book)"] != "-" for r in rows)
