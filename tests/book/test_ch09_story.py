"""Chapter 9's story on a GPU: what its Markdown says in words, held against the committed
recording it tells (a re-recording that contradicts a sentence fails here)."""
from fusedrms import records
from fusedrms.book import ch09_story as story
from tests.book.story import assert_prose_values_exist


def _facts():
    return story.story_facts(story.load(records.COMMITTED))


def test_every_case_was_timed_in_three_processes_with_every_peer():
    f = _facts()
    assert f["processes"] >= 3 and 0 < f["band"] < 0.02
    for op in ("rmsnorm", "add_rmsnorm"):
        v = f[op]["verdict"]
        assert v["shapes"] == 11 and not v["missing"] and not v["no_peer_shapes"]


def test_the_rmsnorm_step_loses_only_at_the_smallest_shape_and_in_fp32():
    o = _facts()["rmsnorm"]
    v = o["verdict"]
    assert v["faster"] > v["shapes"] / 2 and v["median_ratio"] < 1  # "faster at ..., a median"
    smallest = min((r["rows"], r["cols"]) for r in v["rows"])
    lost = {(r["rows"], r["cols"], r["dtype"], r["fastest_peer"]) for r in o["lost"]}
    assert len(lost) == v["slower"] == 2  # "It loses at 2" and names both
    assert (*smallest, "bf16", "torch.rms_norm") in lost  # "At the smallest shape ... F.rms_norm"
    assert any(d == "fp32" and p == "torch.compile" for _r, _c, d, p in lost)


def test_the_fused_add_step_is_level_and_its_large_losses_are_where_the_prose_says():
    o = _facts()["add_rmsnorm"]
    v = o["verdict"]
    assert abs(v["median_ratio"] - 1) <= 0.02 and v["tie"] > 0  # "level with its peers"
    smallest = min((r["rows"], r["cols"]) for r in v["rows"])
    assert (o["worst"]["rows"], o["worst"]["cols"]) == smallest  # "worst loss ... smallest shape"
    assert o["large_lost"]
    for r in o["large_lost"]:  # "to Liger at 8,192 columns, torch.compile at 2,048 and in fp32"
        if r["fastest_peer"] == "liger":
            assert r["cols"] == 8192 and r["dtype"] == "bf16"
        else:
            assert r["fastest_peer"] == "torch.compile"
            assert r["cols"] == 2048 or r["dtype"] == "fp32"


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
    # the fused add: F.rms_norm(x + r) and torch.compile hold more than ours (one shared gradient)
    assert add["torch.rms_norm"] > add["triton.two_stage"] + 0.9 * tensor_mib
    assert add["torch.compile"] > add["triton.two_stage"]


def test_the_backward_alone_recompute_atomic_and_determinism_read_as_the_prose_says():
    f = _facts()
    b = f["backward"]
    assert max(b["large_pct"]) < 80  # "at most ..." (short of the 80%)
    assert min(b["recompute"]) > 1  # "saving r is the faster choice too"
    d = f["determinism"]
    assert d["two_stage"]["distinct"] == 1 and d["atomic"]["distinct"] > 1  # "not reproducible"


def test_the_grid_rule_picks_the_fastest_grid_at_the_two_large_shapes_only():
    grid = _facts()["grid"]
    assert [g["shape"] for g in grid] == ["1024x4096 bf16", "16384x2048 bf16", "16384x8192 bf16"]
    assert all(g["rule"]["programs"] == g["best"]["programs"] for g in grid[1:])
    # "at 1,024 x 4,096 it picks ... per SM, which takes ...": not the fastest, outside the band
    assert grid[0]["rule"]["programs"] != grid[0]["best"]["programs"]
    assert not grid[0]["rule_within_band"]
    assert grid[1]["best"]["design"] != grid[2]["best"]["design"]  # "depends on the shape"


def test_every_value_the_prose_shows_exists_on_the_committed_recording():
    assert_prose_values_exist("09_backward.ipynb", story, 40)


def test_the_your_gpu_panel_needs_a_recording_and_reads_both():
    book = story.load(records.COMMITTED)
    assert story.your_gpu_rows({"backward": None}, book) is None
    rows = story.your_gpu_rows(book, book)
    assert rows and all(r["your GPU"] == r["NVIDIA H200 (the book)"] != "-" for r in rows)
