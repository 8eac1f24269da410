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


def test_the_losses_are_few_and_none_at_one_row_or_on_wide_rows():
    f = _facts()
    band = f["band"]
    # "at a single row, where a call lasts ... to ..., it is never slower"
    assert f["single"] and all(r["capstone_us"] < 5 for r in f["single"]) and not f["single_lost"]
    # "on wide rows at large batches ... slower at none of the N shapes"
    assert f["wide"] and not f["wide_lost"]
    # "it loses at N shapes": every loss, all of them to Inductor ("Inductor's kernel still wins")
    lost = [r for r in f["fused"] if r["ratio"] > 1 + band]
    assert {(r["rows"], r["cols"]) for r in f["middle"]} == {(r["rows"], r["cols"]) for r in lost}
    assert {r["peer"] for r in lost} <= {"torch.compile_add"}
    # intro: "where a peer wins, it wins by a few percent at a handful of shapes"
    rs_lost = [r for r in f["residual"] if not r["missing"] and r["ratio"] > 1 + band]
    assert len(lost) + len(rs_lost) <= 8 and max(r["ratio"] for r in lost + rs_lost) < 1.15
    # "the same in-place kernel at ... took ... in one process and ... in another"
    v = story.story_values(story.load(records.COMMITTED))
    assert float(v["mode_hi"].split()[0]) > float(v["mode_lo"]) * (1 + band)


def test_the_widest_rows_read_what_inductor_reads_and_take_less_time():
    f = _facts()
    ours, inductor = f["wide_ncu"]["capstone.fused"], f["wide_ncu"]["torch.compile_add"]
    # "ours takes ... Inductor's time", said of the profiled shape
    at = next(r for r in f["fused"] if (r["rows"], r["cols"], r["dtype"])
              == (ours["rows"], ours["cols"], ours["dtype"]))
    assert at["capstone_us"] / at["peers"]["torch.compile_add"] < 1 - f["band"]
    v = story.story_values(story.load(records.COMMITTED))
    assert v["wncu_ratio"] == R.ratio_text(at["capstone_us"] / at["peers"]["torch.compile_add"])
    for k in (ours, inductor):  # "no byte read twice", "... programs of ... threads"
        assert 0.999 * k["min_read"] <= k["read"] <= 1.002 * k["min_read"]
        assert k["programs"] == k["rows"] and k["threads"] == 1024
    # "keeps a row of x of 64 KB whole, in the registers of one program of 32 warps"
    import torch

    from fusedrms.kernels import add_rmsnorm as A
    bf16 = torch.bfloat16
    assert ours["cols"] * 2 == 64 << 10
    cfg = A.large_batch_config(ours["cols"], bf16)
    assert cfg == A.LaunchConfig(1, 32) and cfg.chunk is None
    # "... every row of a large batch of up to 32,768 columns whole: one 16-byte vector per
    # thread, up to 32 warps" (wider rows take two passes)
    for cols in (4096, 8192, 16384, 32768):
        rule = A.large_batch_config(cols, bf16)
        assert rule.chunk is None and rule.num_warps == min(32, cols * 2 // 16 // 32)
    assert A.WHOLE_ROW_MAX_COLS == 32768 and A.large_batch_config(32768 * 2, bf16).chunk
    # "the rows held between the passes came to ..., more than the ... of L2"
    assert float(v["wncu_held"].split()[0]) > float(v["wncu_l2"].split()[0])


def test_liger_is_the_residual_variants_strongest_peer_at_large_shapes():
    f = _facts()
    assert sum(p == "liger.fused_add_rms_norm" for p in f["big_rs_peers"]) > len(f["big_rs"]) / 2


def test_in_place_costs_time_at_small_batches_and_nothing_from_python():
    f = _facts()
    assert f["ip_small"][-1] > 1 + f["band"]  # "up to ... slower"
    (in_lo, in_hi), (out_lo, out_hi) = f["py_in"], f["py_out"]
    assert in_lo <= out_lo and in_hi <= out_hi  # "from Python in place is no slower"


def test_in_place_costs_the_most_at_the_largest_shapes():
    points = R.peer_points(story.load(records.COMMITTED)["peers"])
    largest = R.in_place_ratios(points, min_rows=16384)
    assert largest[-1] == _facts()["ip_large"][-1]  # "the most at the largest shapes"
    assert largest[-1] > 1 + _facts()["band"]


def test_every_value_the_prose_shows_exists_on_the_committed_recording():
    assert_prose_values_exist("07_capstone.ipynb", story, 20)


def test_no_lever_shortened_the_time_and_the_hinted_kernel_was_slower():
    lv = _facts()["levers"]
    # "none of the N levers shortened the time; N lengthened it, by up to ..."
    assert not lv["shorter"] and lv["longer"] and lv["count"] >= len(lv["longer"])
    assert all(h["pct"] > story.LEVER_THRESHOLD_PCT for h in lv["longer"])
    assert lv["gap"] is not None  # "at most ... (at ...)"
    # "the kernel as it was before ... took ... longer at ..."
    from fusedrms.book import ch07

    assert any(h["lever"] == ch07.HINT_LEVER for h in lv["longer"])


def test_the_result_paragraph_holds():
    f = _facts()
    assert statistics.median(f["eager"]) > 7 / 3  # "faster than the chain by more than that ratio"
    assert f["large"]["large_peers"] == ["torch.compile_add"]  # "torch.compile, the fastest peer there"
    assert f["above"]  # "or beat it, as the capstone does at ..."
    assert f["py_fused"] < f["py_torch"]


def test_the_intro_says_most_shapes_and_names_the_peers_timed():
    f = _facts()
    assert 2 * f["fu_counts"]["faster"] > f["fu_counts"]["shapes"]  # "faster ... at most shapes"
    assert f["processes"] == [3]  # "medians over 3 processes": every timing, the same count
    assert {"torch.compile_add", "torch.rms_norm_add"} <= f["fu_peers"]
    assert {"torch.compile_residual", "liger.fused_add_rms_norm"} <= f["rs_peers"]


def test_the_your_gpu_panel_needs_a_recording_and_reads_both():
    book = story.load(records.COMMITTED)
    assert story.your_gpu_rows({"peers": None}, book) is None
    rows = story.your_gpu_rows(book, book)
    assert len(rows) == 6 and all(r["your GPU"] == r["H200 (the book)"] != "-" for r in rows)
