"""Chapter 7's measured answer (section 6): what its Markdown says in words, held against the
committed recording it tells (a re-recording that contradicts a sentence fails here)."""
import statistics

import pytest

from fusedrms import records
from fusedrms.book import ch07_results as R
from fusedrms.book import page
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


def test_neither_op_is_slower_than_a_peer_out_of_place():
    from fusedrms.kernels import add_rmsnorm as A

    f = _facts()
    band = f["band"]
    # "on rows held whole, up to 32,768 columns"
    assert all(A.takes_two_passes(r["cols"]) == (r["cols"] > 32768) for r in f["fused"])
    # "A single row takes ... to ... a call"
    assert f["single"] and all(r["capstone_us"] < 5 for r in f["single"]) and not f["single_lost"]
    # "faster than every peer at N of the M shapes and ties at the other K": never slower
    assert not [r for r in f["fused"] if r["ratio"] > 1 + band] and not f["whole_lost"]
    c = f["fu_counts"]
    assert c["slower"] == 0 and c["faster"] + c["tie"] == c["shapes"]
    # "Neither is ever slower" / "out of place, neither variant is slower than a peer at any
    # shape": the residual-writing op out of place too
    assert not [r for r in f["residual"] if r["ratio"] > 1 + band] and not f["rs_whole_lost"]
    assert f["rs_counts"]["slower"] == 0
    v = story.story_values(story.load(records.COMMITTED))
    assert v["rs_slower"] == "0"
    # "In place, the process medians agree within ... at every shape"
    assert v["mode_gap"].endswith("%") and float(v["mode_gap"][:-1]) < 5


def test_the_fused_ops_large_batches_launch_as_the_prose_says():
    """"From 16 rows per SM it keeps those warps on rows of 8,192 two-byte columns, and rows of
    16,384 take Inductor's launch, two passes in 8,192-column chunks of 32 warps"."""
    import torch

    from fusedrms.kernels import add_rmsnorm as A
    sms = story.H200_SMS
    for dtype in (torch.bfloat16, torch.float16):
        got = A.batch_config(A.LaunchConfig(1, 4), A.LARGE_BATCH_ROWS_PER_SM * sms, 8192, sms,
                             dtype, write_sum=False)[0]
        assert got == A.mid_batch_config(8192, dtype)
        got = A.batch_config(A.LaunchConfig(1, 4), 16384, 16384, sms, dtype, write_sum=False)[0]
        assert got == A.LaunchConfig(1, 32, 1, None, 8192)


def test_the_launch_before_is_the_one_vector_launch_timed_against_torch_compile():
    """"Against torch.compile, the launch before (one 16-byte vector a thread) took ..." """
    import torch

    from fusedrms.kernels import add_rmsnorm as A
    docs = story.load(records.COMMITTED)
    before = story.story_facts(docs)["before"]
    assert before and {(r["rows"], r["cols"]) for r in before} <= set(story.CHANGED_LAUNCH_SHAPES)
    for r in before:
        # the fused op takes another launch there now; the residual-writing op keeps this one
        one_vector, why = A.large_batch_config(r["cols"], torch.bfloat16, write_sum=True)
        assert why is None and one_vector == A.LaunchConfig(1, 32)
        assert A.large_batch_config(r["cols"], torch.bfloat16, write_sum=False)[0] != one_vector
        assert r["ratio"] > 1  # it lost
    v = story.story_values(docs)
    assert v["before_lost"] == page.listed([f"{R.ratio_text(r['ratio'])} at {r['rows']}x{r['cols']}"
                                            for r in before])
    # a made-up lever study: the ratio is the candidate's time over torch.compile's
    recs = [{"op": "add_rmsnorm", "impl": impl, "rows": 16384, "cols": 16384, "dtype": "bfloat16",
             "median_us": us, "status": "ok", "processes": 3}
            for impl, us in (("capstone[whole_r1_w32]", 404.0), ("capstone[liger_w16]", 390.0),
                             ("torch.compile_add", 400.0))]
    got = story._launch_before({"records": recs, "provenance": {}})
    assert [(g["rows"], g["cols"]) for g in got] == [(16384, 16384)]
    assert got[0]["ratio"] == pytest.approx(1.01)
    assert story._launch_before(None) == []


def test_rows_of_65536_columns_beat_every_peer_at_every_batch():
    f = _facts()
    band = f["band"]
    # "At 65,536 columns, too wide to hold": the only two-pass width timed
    assert f["two"] and {r["cols"] for r in f["two"]} == {65536}
    # "Ours now takes ... Inductor's time below 132 rows and ... from 1024 rows"
    assert f["two_few"] and f["two_many"]
    assert min(r["rows"] for r in f["two_many"]) == 1024
    assert all(r["ratio"] < 1 - band and r["peer"] == "torch.compile_add" for r in f["two"])
    # the residual op: "... below 132 rows, ... from 1024 rows", wins too
    assert f["rs_two_few"] and f["rs_two_many"]
    assert all(r["ratio"] < 1 - band for r in f["rs_two_few"] + f["rs_two_many"])
    v = story.story_values(story.load(records.COMMITTED))
    # intro: "on rows of 65,536 columns it takes at most ... of the fastest peer's time"
    both = f["two"] + f["rs_two_few"] + f["rs_two_many"]
    assert v["two_hi"] == R.ratio_text(max(r["ratio"] for r in both))
    # result: "The residual-writing variant loses at ... alone": on rows held whole
    lost = [r for r in f["fused"] + f["residual"] if r["ratio"] > 1 + band]
    assert all(r["cols"] <= 32768 for r in lost)
    # "a batch of at most ... rows splits each row over ... programs of ... columns": the rule
    import torch

    from fusedrms.kernels import add_rmsnorm as A
    bf16, sms = torch.bfloat16, story.H200_SMS
    most = int(v["split_max_rows"])
    for write_sum in (False, True):
        assert A.batch_config(A.TWO_PASS_CONFIG, most, 65536, sms, bf16,
                              write_sum=write_sum)[0] == A.SPLIT_CONFIG
        assert A.batch_config(A.TWO_PASS_CONFIG, most + 1, 65536, sms, bf16,
                              write_sum=write_sum)[0] == (A.TWO_PASS_CONFIG if write_sum
                                                          else A.EXCHANGE_CONFIG)
    assert int(v["split_pieces"]) * int(v["split_cols"].replace(",", "")) == 65536
    # "one 32-warp program per SM in 16,384-column chunks keeps ...": within L2, where the
    # launch before held more than L2
    assert (A.TWO_PASS_CONFIG.num_warps, A.TWO_PASS_CONFIG.chunk) == (32, 16384)
    assert v["two_warps"] == "32" and v["two_chunk"] == "16,384"
    # "The plain variant reads it once: 16 programs of 4,096 columns, all resident at once":
    # the plain variant's launch from half a row per SM at 65,536 columns
    ex = A.EXCHANGE_CONFIG
    assert v["ex_cols"] == f"{ex.segment:,}" == "4,096" and v["ex_pieces"] == "16"
    assert int(v["ex_pieces"]) * ex.segment == 65536 and ex.programs_per_sm
    for rows in (most + 1, 1024, 16384):
        assert A.batch_config(A.TWO_PASS_CONFIG, rows, 65536, sms, bf16,
                              write_sum=False)[0] == ex
    l2 = float(v["wncu_l2"].split()[0])
    assert float(v["two_held"].split()[0]) < l2 < float(v["two_held_before"].split()[0])
    assert int(v["two_rows_before"]) == 4 * sms
    # "FlashInfer's fused op ... stops at ... columns on the H200": unsupported, never missing
    assert f["fi_max_cols"] and 32768 < f["fi_max_cols"] < 65536
    assert all("flashinfer.fused_add_rmsnorm" in r["unsupported"] and not r["missing"]
               for r in f["residual"] if r["cols"] == 65536)
    # result: "lowest ..., at <shape>, where the fastest peer reaches ..."
    large = [r for r in f["fused"] if r["MB"] >= story.BIG_MB]
    lowest = min(large, key=lambda r: r["pct_floor"])
    assert v["large_min"] == f"{lowest['pct_floor']:.0f}%"
    assert v["large_min_at"] == f"{lowest['rows']}x{lowest['cols']} {lowest['dtype']}"
    assert v["large_min_peer_pct"] == f"{lowest['peer_pct_floor']:.0f}%"
    # "... and a copy of the same bytes ...": only where the recording timed that copy
    assert v.get("large_min_copy_pct") == (f"{lowest['copy_pct_floor']:.0f}%"
                                           if lowest["copy_pct_floor"] else None)
    assert all(r["pct_floor"] > r["peer_pct_floor"] for r in large if r["cols"] == 65536)


def test_the_widest_rows_read_each_byte_once_and_take_less_time_than_inductor():
    f = _facts()
    ours, inductor = f["wide_ncu"]["capstone.fused"], f["wide_ncu"]["torch.compile_add"]
    # "ours takes ... Inductor's time", said of the profiled shape
    at = next(r for r in f["fused"] if (r["rows"], r["cols"], r["dtype"])
              == (ours["rows"], ours["cols"], ours["dtype"]))
    assert at["capstone_us"] / at["peers"]["torch.compile_add"] < 1 - f["band"]
    v = story.story_values(story.load(records.COMMITTED))
    assert v["wncu_ratio"] == R.ratio_text(at["capstone_us"] / at["peers"]["torch.compile_add"])
    # "counts no byte read twice: ours reads ..., x and r ...": said of ours only; the page gives
    # Inductor's bytes without a claim (its kernel has re-read 6% of them in a profile)
    assert 0.999 * ours["min_read"] <= ours["read"] <= 1.002 * ours["min_read"]
    assert v["wncu_inductor"] == f"{inductor['read'] / 1e9:.3f} GB"
    for k in (ours, inductor):  # one program of 32 warps per row
        assert k["programs"] == k["rows"] and k["threads"] == 1024
    # "keeps a row of x of 64 KB whole, in the registers of one program of 32 warps"
    import torch

    from fusedrms.kernels import add_rmsnorm as A
    bf16 = torch.bfloat16
    assert ours["cols"] * 2 == 64 << 10
    cfg, _ = A.large_batch_config(ours["cols"], bf16, write_sum=False)
    assert cfg == A.LaunchConfig(1, 32) and cfg.chunk is None
    # "... every row of a large batch of up to 32,768 columns whole: one 16-byte vector per
    # thread, up to 32 warps" (wider rows take two passes)
    for cols in (4096, 8192, 16384, 32768):
        rule, _ = A.large_batch_config(cols, bf16, write_sum=True)
        assert rule.chunk is None and rule.num_warps == min(32, cols * 2 // 16 // 32)
    assert A.WHOLE_ROW_MAX_COLS == 32768
    assert A.takes_two_passes(32768 * 2) and not A.takes_two_passes(32768)
    # "the rows held between the passes came to ..., more than the ... of L2"
    assert float(v["wncu_held"].split()[0]) > float(v["wncu_l2"].split()[0])


def test_liger_is_the_residual_variants_strongest_peer_at_large_shapes():
    f = _facts()
    assert sum(p == "liger.fused_add_rms_norm" for p in f["big_rs_peers"]) > len(f["big_rs"]) / 2


def test_in_place_costs_time_at_small_batches_and_nothing_from_python():
    f = _facts()
    assert f["ip_small"][-1] > 1 + f["band"]  # "up to ... slower"
    (in_lo, in_hi), (out_lo, out_hi) = f["py_in"], f["py_out"]
    assert in_lo <= out_hi and out_lo <= in_hi  # the two process ranges overlap


def test_in_place_from_4096_rows_is_the_range_the_prose_shows_and_not_free():
    """"from 4096 rows it takes {ip_large} the out-of-place time": the range is every such shape's
    ratio, and its top lies outside the tie band (in place still costs something there)."""
    points = R.peer_points(story.load(records.COMMITTED)["peers"])
    ratios = R.in_place_ratios(points, min_rows=story.LARGE_ROWS)
    assert ratios == _facts()["ip_large"]
    assert ratios[-1] > 1 + _facts()["band"]


def test_at_one_row_the_residual_variant_beats_every_peer_outside_the_band():
    """"both variants launch fewer there": the residual variant beats Liger at one row too."""
    points = R.peer_points(story.load(records.COMMITTED)["peers"])
    one_row = [p for p in points if p.rows == 1 and p.op == "add_rmsnorm_residual"]
    ours = {(p.cols, p.dtype): p.median_us for p in one_row if p.impl == "capstone.fused_residual"}
    assert (4096, "fp16") in ours
    for p in one_row:
        if not p.impl.startswith("capstone"):
            assert ours[(p.cols, p.dtype)] < p.median_us * (1 - _facts()["band"]), p


def test_a_few_rows_per_sm_take_the_mid_batch_launch_and_beat_every_peer():
    """"The table's launch at 4,096 columns, two rows in a 16-warp program, was chosen for its
    worst case over 1, 128 and 1,024 rows; from three rows per SM the fused variant now takes one
    row per program and the one-row rule's warps, and at ... it takes ..., ... torch.compile's
    time. The residual-writing variant ... keeps the table's launch" (section 6)."""
    import torch

    from fusedrms import tuning
    from fusedrms.kernels import add_rmsnorm as A

    f = _facts()
    rows, cols, dt = story.MID_SHAPE
    sms = story.H200_SMS
    assert A.MID_BATCH_ROWS_PER_SM == 3
    assert A.MID_BATCH_ROWS_PER_SM * sms <= rows < A.LARGE_BATCH_ROWS_PER_SM * sms
    table = tuning.load("capstone", tuning.installed_path("capstone", records.COMMITTED))
    entry, source = A.choose_config(cols, torch.bfloat16, table, table["gpu"], on_gpu=True)
    assert source.startswith("tuned") and entry == A.LaunchConfig(2, 16)
    assert set(f["fused"][0]["peers"]) >= {"torch.compile_add"}
    fused, rule = A.batch_config(entry, rows, cols, sms, torch.bfloat16, write_sum=False)
    assert rule.startswith("mid-batch rule")
    assert fused == A.LaunchConfig(1, A.one_row_config(A.LaunchConfig(1, 32), cols,
                                                       torch.bfloat16).num_warps)
    assert A.batch_config(entry, rows, cols, sms, torch.bfloat16, write_sum=True) == (entry, None)
    mid = f["mid"]
    assert mid["peer"] == "torch.compile_add" and mid["ratio"] < 1 - f["band"]


def test_every_value_the_prose_shows_exists_on_the_committed_recording():
    assert_prose_values_exist("07_capstone.ipynb", story, 20)


def test_no_lever_shortened_the_time_and_the_hinted_kernel_was_slower():
    lv = _facts()["levers"]
    # "none of the N levers shortened the time; N lengthened it, by up to ..."
    assert not lv["shorter"] and lv["longer"] and lv["count"] >= len(lv["longer"])
    assert all(h["pct"] > lv["threshold"] for h in lv["longer"])
    # "more than ..., the largest change of the launch in use timed twice in the study's run":
    # the peers were timed at another commit, so no gap between the two runs adds to it (the
    # sentence must name one where a recording of both at one commit gives it)
    docs = story.load(records.COMMITTED)
    assert lv["threshold"] == story.lever_threshold(docs["levers"])
    assert not R.one_recording(docs["levers"], docs["peers"]) and lv["gap"] is None
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


def test_rule_values_come_from_the_study_as_recorded():
    us = {"before": 10.0, "after": 6.0, "inductor_launch": 24.0, "compile": 8.0}
    v = story._rule_values({"split": {"add_rmsnorm": us, "add_rmsnorm_residual": us},
                            "whole": {"add_rmsnorm": {**us, "after": 200.0, "before": 200.0,
                                                      "inductor_launch": 300.0}}})
    assert v["rule_split_at"] == "16x65536" and v["rule_split_before"] == "10.00 µs"
    assert v["rule_split_after"] == "6.00 µs" and v["rule_split_compile"] == "8.0 µs"
    assert v["rule_whole_two"] == "1.50x" and v["rule_whole_after"] == "200.0 µs"
    assert not any(k.startswith("rs_rule_split") for k in v)  # the prose tells one row only
    assert story._rule_values({}) == {}


def test_in_place_trails_only_where_the_result_says_and_by_its_own_cost():
    """"written in place, the residual-writing one trails at N of the largest shapes, by at most
    ..." and "In place, the residual-writing variant takes ... its own out-of-place time at ...,
    and so trails <peer>, which writes to memory of its own": at each such shape the in-place
    call costs more than its own out-of-place one beyond the band, while out of place it is not
    slower than the peer."""
    from fusedrms import registry
    from fusedrms.book import ch07

    f = _facts()
    band, lost = f["band"], f["in_place_lost"]
    assert lost and all(r["rows"] == max(ch07.GOAL_ROWS) for r in lost)  # the largest shapes
    out_of_place = {(r["rows"], r["cols"], r["dtype"]): r for r in f["residual"]}
    for r in lost:
        assert r["ratio"] > 1 + band and r["own"] > 1 + band
        assert not registry.get(r["peer"]).mutates
        assert out_of_place[(r["rows"], r["cols"], r["dtype"])]["ratio"] <= 1 + band
    v = story.story_values(story.load(records.COMMITTED))
    assert v["ip_lost_n"] == str(len(lost))
    assert v["ip_lost_max"] == R.ratio_text(max(r["ratio"] for r in lost))
    assert v["ip_lost_at"] == page.listed([R.shape_text(r["rows"], r["cols"], r["dtype"])
                                           for r in lost])
    assert v["ip_lost_peer"] == R.display_name(max(lost, key=lambda r: r["ratio"])["peer"])


def test_each_batch_rule_beat_the_launch_it_replaced_beyond_the_in_run_band():
    """Section 6 tells each rule as before -> after in one run: the one-row, split and exchange
    rules each took less time than the table's launch by more than the launch in use moved when
    timed twice; the whole-row rule's "before" is the same launch, so it is told beside
    Inductor's two-pass launch, which takes longer."""
    docs = story.load(records.COMMITTED)
    threshold = story.lever_threshold(docs["levers"])
    rules = story.rules_before_after(docs["levers"])
    assert set(rules) == set(story.RULE_SHAPES)
    for rule in ("one", "split", "exchange"):
        ops = ("add_rmsnorm", "add_rmsnorm_residual") if rule == "one" else ("add_rmsnorm",)
        for op in ops:
            got = rules[rule][op]
            assert 100 * (1 - got["after"] / got["before"]) > threshold, (rule, op, got)
    whole = rules["whole"]["add_rmsnorm"]
    assert abs(whole["after"] / whole["before"] - 1) * 100 <= threshold  # the same launch
    assert whole["inductor_launch"] > whole["after"] * (1 + threshold / 100)
    split = rules["split"]["add_rmsnorm"]
    assert split["after"] < split["compile"] < split["before"]  # "(torch.compile: ...)"


def test_the_in_place_profile_pair_gives_each_calls_dram_bytes_and_time():
    """``ipncu_*``: one isolated call each way under Nsight Compute, the bytes read plus written
    and the durations; a pair with a failed profile gives no value (never a zero)."""
    def profile(impl, us, read, written):
        metrics = {"x / dram__bytes_read.sum": {"unit": "byte", "value": str(read)},
                   "x / dram__bytes_write.sum": {"unit": "byte", "value": f"{written:,}"}}
        return {"status": "ok", "impl": impl, "rows": 16384, "cols": 8192, "dtype": "bf16",
                "duration_us": us, "kernels": [{"metrics": metrics}]}

    pair = {"records": [profile(story.OURS_OUT_OF_PLACE, 355.07, 536898560, 516654592),
                        profile(story.OURS_IN_PLACE, 359.84, 536979968, 515364352)]}
    docs = dict(story.load(records.COMMITTED), in_place_ncu=pair)
    v = story.story_values(docs)
    assert (v["ipncu_out_gb"], v["ipncu_in_gb"]) == ("1.054 GB", "1.052 GB")
    assert (v["ipncu_out_us"], v["ipncu_in_us"]) == ("355.1 µs", "359.8 µs")
    assert v["ipncu_ratio"] == "1.01x" and v["ipncu_at"] == "16384x8192 bf16"
    pair["records"][1] = {"status": "failed", "impl": story.OURS_IN_PLACE, "reason": "timed out"}
    assert not any(k.startswith("ipncu") for k in story.story_values(docs))
