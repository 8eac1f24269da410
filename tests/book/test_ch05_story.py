"""Chapter 5's story on a GPU: what its Markdown says in words, held against the committed
recording it tells (a re-recording that contradicts a sentence fails here)."""
from fusedrms import records
from fusedrms.book import broken
from fusedrms.book import ch05_story as story
from tests.book.story import assert_prose_values_exist


def _facts():
    return story.story_facts(story.load(records.COMMITTED))


def test_every_registered_kernel_passed_every_check_of_a_complete_run():
    s = _facts()["suite"]
    assert s["passed"] == s["checks"] and s["failed"] == s["skipped"] == 0 and s["complete"]
    assert s["gpu"] == "NVIDIA H200"  # "On the H200"


def test_the_drawer_failed_every_kernel_with_wrong_outputs_and_passed_the_silent_one():
    d = _facts()["drawer"]
    assert d["caught"] == d["wrong"] and len(d["wrong"]) > 1
    assert d["silent"] == {"broken.unmasked_weight": True}  # "passed, as it must"
    assert set(d["kernels"]) == set(broken.SHOWN)


def test_every_tuned_configuration_passed_and_the_kinds_add_up():
    c = _facts()["configs"]
    assert c["passed"] == c["checks"] == c["capstone_config"] + c["fp8_config"]


def test_the_bf16_cast_used_under_its_tolerance_and_fp8_matched_code_for_code():
    s = _facts()["suite"]
    assert 0.4 < s["bf16_share"] < 0.55  # "On a GPU bf16 sits there too": near one half
    assert s["fp8_checks"] > 0 and s["fp8_passed"] == s["fp8_checks"]  # "in all N of their checks"


def test_every_value_the_prose_shows_exists_on_the_committed_recording():
    assert_prose_values_exist("05_verification.ipynb", story, 8)


def test_without_a_recording_there_are_no_values(monkeypatch, tmp_path):
    monkeypatch.setattr(records, "DATA_DIR", tmp_path)
    assert story.story_values(story.load(records.COMMITTED)) == {}
    assert story.value({}, "gpu_checks") == story.MISSING


def test_the_your_gpu_panel_sets_a_recording_beside_the_h200():
    book = story.load(records.COMMITTED)
    assert story.your_gpu_rows({"suite": None, "drawer": None, "configs": None}, book) is None
    rows = story.your_gpu_rows(book, book)
    assert len(rows) == 6 and all(r["your GPU"] == r["H200 (the book)"] != "-" for r in rows)
    partial = story.your_gpu_rows({**book, "configs": None}, book)
    assert [r["your GPU"] for r in partial if r[""].startswith("tuned")] == ["-"]
    assert all(r["your GPU"] != "-" for r in partial if not r[""].startswith("tuned"))
