"""Chapter 9's story on a GPU: what its Markdown says in words, held against the committed
recording it tells (a re-recording that contradicts a sentence fails here)."""
from fusedrms import records
from fusedrms.book import ch09
from fusedrms.book import ch09_story as story
from tests.book.story import assert_prose_values_exist


def _facts():
    return story.story_facts(story.load(records.COMMITTED))


def test_every_case_was_timed_in_three_processes_with_every_peer():
    from fusedrms.book import ch09_page as R

    f = _facts()
    assert f["processes"] >= 3 and 0 < f["band"] < 0.02
    doc = story.load(records.COMMITTED)["backward"]
    unrecorded = R.unrecorded_peers(doc)
    for op in ("rmsnorm", "add_rmsnorm"):
        v = f[op]["verdict"]
        # every peer the recording timed, at every shape; one it predates is missing everywhere
        assert v["shapes"] == 11 and not v["no_peer_shapes"]
        assert v["missing"] == {i: 11 for i in unrecorded}
    if unrecorded:  # the page names it, and the badge says the recording steps changed since
        assert records.staleness("ch09").state == "acknowledged"
        assert all(R.plain_name(i) in R.missing_sentence(doc) for i in unrecorded)


def test_the_rmsnorm_step_loses_nowhere_and_ties_once_in_fp32():
    o = _facts()["rmsnorm"]
    v = o["verdict"]
    assert v["faster"] > v["shapes"] / 2 and v["median_ratio"] < 1  # "faster at ..., a median"
    # "It loses at 0 and ties at 1: in fp32 at <the worst shape>, <its ratio> the time of ..."
    assert v["slower"] == 0 and not o["lost"] and v["tie"] == 1
    assert o["worst"]["dtype"] == "fp32" and v["faster"] + v["tie"] == v["shapes"]


def test_the_fused_add_step_is_faster_than_every_peer_at_every_shape():
    o = _facts()["add_rmsnorm"]
    v = o["verdict"]
    assert v["faster"] == v["shapes"] and v["median_ratio"] < 1  # "faster ... at 11 of the 11"
    assert o["worst"]["vs_fastest"] < 1  # "the closest is ..."


def test_eager_is_far_slower_and_no_step_reaches_its_floor():
    f = _facts()
    assert min(f["rmsnorm"]["eager"] + f["add_rmsnorm"]["eager"]) > 3
    assert max(f["rmsnorm"]["pct_floor"] + f["add_rmsnorm"]["pct_floor"]) < 100


def test_memory_ours_and_liger_hold_outputs_and_gradients_eager_many_times_more():
    peaks = _facts()["peaks"]
    rows, cols, _dt = story.MEMORY_SHAPE
    tensor_mib = rows * cols * 2 / 2**20
    plain, add = peaks["rmsnorm"], peaks["add_rmsnorm"]
    # "the output and dx, 256 MiB each, and the partials"
    assert tensor_mib == 256 and 2 * tensor_mib <= plain["triton.two_stage"] < 2.1 * tensor_mib
    assert plain["torch.eager"] > 5 * plain["triton.two_stage"]
    assert abs(plain["liger"] - plain["triton.two_stage"]) < 0.05 * tensor_mib
    # "Liger's default needs ... and ...: it writes dx over dy": one tensor less than ours
    for op in (plain, add):
        saved = op["triton.two_stage"] - op["liger.in_place"]
        assert 0.95 * tensor_mib < saved < 1.05 * tensor_mib
    # the fused add: F.rms_norm(x + r) and torch.compile hold more than ours (one shared gradient)
    assert add["torch.rms_norm"] > add["triton.two_stage"] + 0.9 * tensor_mib
    assert add["torch.compile"] > add["triton.two_stage"]


def test_the_backward_alone_prefetch_recompute_atomic_and_determinism_read_as_the_prose_says():
    f = _facts()
    b, band = f["backward"], f["band"]
    assert max(b["large_pct"]) >= 90  # "at most ..." of the floor, at 64 MB or more
    # "it misses at ..., short steps": each miss is shorter than most of the large steps
    times = sorted(r["us"] for r in b["large"])
    assert b["large_below_80"] and all(r["us"] < times[len(times) // 4]
                                       for r in b["large_below_80"])
    assert len(b["large_below_80"]) < len(b["large"]) / 4
    assert min(b["unfetched"]) > 1 + band  # "outside the band everywhere" (the grid's shapes)
    assert len(b["unfetched"]) == len([r for r in b["two_stage"]
                                       if (r["rows"], r["cols"], r["dtype"]) in ch09.SHAPES])
    # "Recomputing r takes ... the time of reading it, so the kernels read the saved r"
    assert min(b["recompute"]) > 1 - band and max(b["recompute"]) > 1.1
    d = f["determinism"]
    assert d["two_stage"]["distinct"] == 1 and d["atomic"]["distinct"] > 1  # "not reproducible"


def test_stage_two_and_the_tiles_read_as_the_prose_says():
    b, band = _facts()["backward"], _facts()["band"]
    # "{old} ... with that tile, {new} with the listing's", at every width recorded
    by = {}
    for r in b["reduce"]:
        by.setdefault(r["cols"], {})[r["tile"]] = r["us"]
    assert len(by) == 3 and all(t["128x16"] < t["32x64"] / 1.5 for t in by.values())
    # "2048 columns 32 programs, each adding 528 partial rows"
    assert any(r["programs"] == 528 and r["cols"] == 2048 for r in b["reduce"])
    add, plain = (b["one_row"][name] for name in ("fused add + RMSNorm", "RMSNorm"))
    # "up to ... the time for the fused add ... and ... for plain RMSNorm": tiles win by more
    # than 15% somewhere for each op
    assert max(t for t, _ in add) > 1.15 and max(t for t, _ in plain) > 1.15
    # "at best ... and ...": within a few percent of tiles (wide rows)
    assert all(0.95 < min(t for t, _ in ratios) < 1 + band for ratios in (add, plain))


def test_the_backward_alone_is_timed_against_every_peer_at_every_shape():
    from fusedrms.book import ch09_page as R

    doc = story.load(records.COMMITTED)["backward"]
    f = _facts()
    alone = f["peers_alone"]
    # "faster at N of M shapes, at lo to hi of the fastest one's time": every peer at every shape
    # of the grid (and at the rows of 16384 columns, where recorded), both ops
    shapes = {r["shape"] for r in alone["rows"]}
    assert len(alone["rows"]) == 2 * len(shapes)
    assert {R.shape_text(*s) for s in ch09.SHAPES} <= shapes
    assert all(r[i] is not None for r in alone["rows"] for i in R.BACKWARD_PEERS)
    assert shapes == {r["shape"] for r in R.backward_table(doc) if r["design"] == "two-stage dw"}
    faster = [r for r in alone["rows"] if r["vs_fastest"] < 1 - f["band"]]
    assert faster == alone["faster"]


def test_the_grid_rule_picks_the_fastest_grid_at_every_swept_shape():
    grid = _facts()["grid"]
    assert [g["shape"] for g in grid] == ["1024x4096 bf16", "16384x2048 bf16", "16384x8192 bf16"]
    # "the fastest grid is 1 program per SM at all three swept shapes, and the rule picks it"
    assert all(g["rule"]["programs"] == g["best"]["programs"] for g in grid)
    assert {g["best"]["design"] for g in grid} == {"1"}


def test_every_value_the_prose_shows_exists_on_the_committed_recording():
    assert_prose_values_exist("09_backward.ipynb", story, 40)


def test_the_your_gpu_panel_needs_a_recording_and_reads_both():
    book = story.load(records.COMMITTED)
    assert story.your_gpu_rows({"backward": None}, book) is None
    rows = story.your_gpu_rows(book, book)
    assert rows and all(r["your GPU"] == r["NVIDIA H200 (the book)"] != "-" for r in rows)


def test_a_miss_of_the_80_percent_mark_never_reads_as_80():
    import re

    assert story._below(79.97) == "79.9%" and story._below(76.24) == "76.2%"
    assert story._below(80.0) == "80.0%"
    # "it misses at ... (N%)": every share the sentence prints is under 80
    shown = story.story_values(story.load(records.COMMITTED))["bw_below_80"]
    assert shown and all(float(p) < 80 for p in re.findall(r"\(([\d.]+)%\)", shown))


def test_the_rows_of_16384_columns_give_both_loop_orders_and_the_fastest_peer():
    """``wide_*``: at each row of ch09.WIDE_SHAPES, ours as the rule launches it (dw first), the
    same launch with dw last, and the fastest peer's backward alone that passed its check."""
    from tests.book.test_ch09_page import _doc

    def rec(op, impl, rows, cols, dt, us, check_ok=None):
        r = {"kind": "backward", "op": op, "impl": impl, "rows": rows, "cols": cols,
             "dtype": dt, "bytes": 10**9, "floor_us": 500.0, "us": us, "programs": 132}
        return r if check_ok is None else {**r, "check_ok": check_ok}
    (r1, c1, d1), (r2, c2, d2) = ch09.WIDE_SHAPES
    recs = [rec("add_rmsnorm", "two_stage", r2, c2, d2, 731.0),
            rec("add_rmsnorm", "dw_last", r2, c2, d2, 1061.0),
            rec("add_rmsnorm", "liger", r2, c2, d2, 773.0, True),
            rec("add_rmsnorm", "torch.compile", r2, c2, d2, 700.0, False),  # failed its check
            rec("rmsnorm", "two_stage", r1, c1, d1, 155.0),  # no dw-last record: left out
            rec("rmsnorm", "liger", r1, c1, d1, 210.0, True)]
    doc = _doc([{"copy_GBps": 4000.0, "records": recs, "skipped": 0}])
    wide = story._wide(doc)
    assert [(w["op"], w["dtype"]) for w in wide] == [("add_rmsnorm", d2)]
    w = wide[0]
    assert (w["first"], w["last"], w["peer"], w["peer_us"]) == (731.0, 1061.0, "liger", 773.0)
    assert abs(w["vs_peer"] - 731 / 773) < 1e-9 and abs(w["pct_floor"] - 100 * 500 / 731) < 1e-9
    assert story._wide({"records": []}) == []
    # the values the prose will show, beside the committed recording's
    book = story.load(records.COMMITTED)
    book = {"backward": {**book["backward"], "records": book["backward"]["records"] + doc["records"]}}
    v = story.story_values(book)
    key = f"wide_add_{d2}"
    assert (v[f"{key}_first"], v[f"{key}_last"], v[f"{key}_gain"]) == ("731.0 µs", "1061.0 µs", "1.45x")
    assert (v[f"{key}_peer"], v[f"{key}_peer_us"], v[f"{key}_vs_peer"]) == ("Liger", "773.0 µs", "0.95x")
    assert v[f"wide_{d2}_at"] == f"{r2:,} × {c2:,} {d2}" and not any(k.startswith("wide_rms") for k in v)
