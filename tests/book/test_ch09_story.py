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


def test_the_rmsnorm_step_loses_only_in_fp32_to_torch_compile():
    o = _facts()["rmsnorm"]
    v = o["verdict"]
    assert v["faster"] > v["shapes"] / 2 and v["median_ratio"] < 1  # "faster at ..., a median"
    lost = {(r["rows"], r["cols"], r["dtype"], r["fastest_peer"]) for r in o["lost"]}
    assert len(lost) == v["slower"] == 1  # "It loses at 1: in fp32 at ..."
    assert all(d == "fp32" and p == "torch.compile" for _r, _c, d, p in lost)


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
    # the fused add: F.rms_norm(x + r) and torch.compile hold more than ours (one shared gradient)
    assert add["torch.rms_norm"] > add["triton.two_stage"] + 0.9 * tensor_mib
    assert add["torch.compile"] > add["triton.two_stage"]


def test_the_backward_alone_prefetch_recompute_atomic_and_determinism_read_as_the_prose_says():
    f = _facts()
    b, band = f["backward"], f["band"]
    assert max(b["large_pct"]) >= 90  # "at most ..." of the floor, at 64 MB or more
    low = b["large_lowest"]  # "... at least, for the fused add at ..., where the partials ..."
    assert low["op"] == "fused add + RMSNorm" and low["shape"].startswith(("4096x2048", "16384x2048"))
    assert min(b["unfetched"]) > 1 + band  # "outside the band at every shape"
    assert len(b["unfetched"]) == len(b["two_stage"])
    assert min(b["recompute"]) > 1 - band and max(b["recompute"]) < 1.05  # "nearly free"
    d = f["determinism"]
    assert d["two_stage"]["distinct"] == 1 and d["atomic"]["distinct"] > 1  # "not reproducible"


def test_the_grid_rule_picks_the_fastest_grid_at_every_swept_shape():
    grid = _facts()["grid"]
    assert [g["shape"] for g in grid] == ["1024x4096 bf16", "16384x2048 bf16", "16384x8192 bf16"]
    # "The rule picks the fastest grid at all three"
    assert all(g["rule"]["programs"] == g["best"]["programs"] for g in grid)
    assert grid[1]["best"]["design"] != grid[2]["best"]["design"]  # "depends on the shape"


def test_every_value_the_prose_shows_exists_on_the_committed_recording():
    assert_prose_values_exist("09_backward.ipynb", story, 40)


def test_the_your_gpu_panel_needs_a_recording_and_reads_both():
    book = story.load(records.COMMITTED)
    assert story.your_gpu_rows({"backward": None}, book) is None
    rows = story.your_gpu_rows(book, book)
    assert rows and all(r["your GPU"] == r["NVIDIA H200 (the book)"] != "-" for r in rows)
