"""Chapter 3's story: what its Markdown says in words, held against the committed recording it
tells (a re-recording that contradicts a sentence fails here), and its values in every state."""

from fusedrms import records
from fusedrms.book import ch03 as ladder
from fusedrms.book import ch03_story as story
from tests.book.story import assert_prose_values_exist


def _facts():
    return story.story_facts(story.load(records.COMMITTED))


def test_the_shuffle_finish_never_helped():
    f = _facts()
    effects = f["shuffle"]
    assert effects and all(e["change_pct"] > 0 for e in effects)  # "took ... longer ... at all"
    assert {e["verdict"] for e in effects} <= {"tie", "slower"}  # "ties ... and is slower ..."


def test_no_correct_measurement_passes_the_floor_and_vector_loads_pay():
    f = _facts()
    assert f["floor"]["correct"] > 1 and f["floor"]["over"] == 0  # "None of the ... passes it"
    assert min(f["vector_gains"]) > 1 + f["band"]  # "then made the kernel ... faster"


def test_holding_the_row_in_registers_did_not_pay_by_itself():
    f = _facts()
    gains = dict(zip(("1024x4096 float32", "16384x8192 bfloat16", "16384x8192 float32"),
                     f["registers_gains"]))
    assert len(gains) == 3 and max(gains.values()) < min(f["vector_gains"])  # "did not pay"
    slower = [s for s, g in gains.items() if g < 1 - f["band"]]
    assert len(slower) >= 2 and all("float32" in s for s in slower)  # "slower at ... cost ... fp32"
    assert story.story_values(story.load(records.COMMITTED))["registers_slower"] == str(len(slower))


def test_fusion_beat_the_bytes_with_scalar_loads_and_reached_them_at_most_with_vector_loads():
    fusion = _facts()["fusion"]
    assert fusion["scalar"]["beat"] == len(fusion["scalar"]["speedups"])  # "in all ... pairs"
    assert fusion["vector"]["beat"] == 0 and fusion["vector"]["match"] >= 1  # "within ... short"


def test_the_serial_kernel_is_slow_for_its_grid_and_its_chain():
    f = _facts()
    gains = f["serial_gains"]
    assert gains[min(gains)] > gains[max(gains)]  # "beats it by ... but only by ..."
    blocks = f["blocks"]
    assert (blocks["smallest"], blocks["largest"]) == (32, 1024)  # "32 threads ..., 1024 ..."
    assert blocks["best"] not in (32, 1024)
    s = f["serial"]
    assert s["grid_x"] > 1.5 and s["rest_x"] > 1.5  # "slow twice over"
    assert 0.8 <= s["one_row_us"] / s["quick_us"] <= 1.25  # "about as long as"


def test_the_serial_default_grid_leaves_some_of_the_h200s_multiprocessors_idle():
    f = _facts()
    assert f["gpu"] == "NVIDIA H200"  # "of the H200's ... multiprocessors"
    grid = -(-1024 // ladder.serial_default_block())
    assert grid < f["sm_count"]  # "have work and the rest idle"


def test_every_value_the_prose_shows_exists_on_the_committed_recording():
    assert_prose_values_exist("03_hip.ipynb", story, 25)


def test_without_a_recording_there_are_no_values_and_no_panel(monkeypatch, tmp_path):
    monkeypatch.setattr(records, "DATA_DIR", tmp_path)
    empty = story.load(records.COMMITTED)
    assert story.story_values(empty) == {}
    assert story.value({}, "vector_gain") == story.MISSING
    assert story.your_gpu_rows(empty, empty) is None


def test_your_gpu_panel_sets_a_recording_beside_the_h200():
    h200 = story.load(records.COMMITTED)
    rows = story.your_gpu_rows(h200, h200)
    assert len(rows) == 6 and all(r["your GPU"] == r["H200 (the book)"] != "-" for r in rows)
